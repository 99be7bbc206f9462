-- EchoMQ's claim as a Lua speaker of the protocol would run it, for `make bench` only: up to
-- ARGV[1] of the oldest pending jobs to active under a lease of ARGV[2] ms, attempts + 1 each.
-- KEYS[1] = the pending set    KEYS[2] = the active set
-- ARGV[3] = the queue's row prefix (`emq:{<queue>}:job:`): the rows are known only once the
-- ids are read, so they are derived here, as every claim script must.
local ids = redis.call('ZRANGE', KEYS[1], 0, tonumber(ARGV[1]) - 1)
if #ids == 0 then
  return {}
end
redis.call('ZREM', KEYS[1], unpack(ids))
local now = redis.call('TIME')
local deadline = tonumber(now[1]) * 1000 + math.floor(tonumber(now[2]) / 1000) + tonumber(ARGV[2])
local leased = {}
local jobs = {}
for i, id in ipairs(ids) do
  local row = ARGV[3] .. id
  local attempts = redis.call('HINCRBY', row, 'attempts', 1)
  redis.call('HSET', row, 'state', 'active')
  leased[#leased + 1] = deadline
  leased[#leased + 1] = id
  jobs[i] = {id, redis.call('HGET', row, 'payload'), attempts}
end
redis.call('ZADD', KEYS[2], unpack(leased))
return jobs
