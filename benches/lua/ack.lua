-- EchoMQ's ack as a Lua speaker of the protocol would run it, for `make bench` only: the job
-- active under the token ARGV[2], then done, its row kept ARGV[3] ms.
-- KEYS[1] = the job's row    KEYS[2] = the active set    ARGV[1] = the id
local row = redis.call('HMGET', KEYS[1], 'state', 'attempts')
if row[1] ~= 'active' or row[2] ~= ARGV[2] or not redis.call('ZSCORE', KEYS[2], ARGV[1]) then
  return redis.error_reply('EMQLEASE stale or missing lease token')
end
redis.call('ZREM', KEYS[2], ARGV[1])
redis.call('HSET', KEYS[1], 'state', 'done')
redis.call('PEXPIRE', KEYS[1], ARGV[3])
return 1
