#!/usr/bin/env bash
# make profile: instruction counts per job, from valgrind --tool=callgrind on valkey-server,
# for EMQ.ENQUEUE, EMQ.MENQUEUE (100 per call), native HSET+ZADD and the Lua @enqueue, each
# driven by the same pipelined jobs (monotonic ids, 48-byte payload); and what loading the
# module costs commands on other keys (ZADD, SET ... EX, DEL, with and without it). Unlike
# timings, the counts hardly move between runs (about 1%: the server's cron and hash seeds vary).
# Then the rest of a job's life: the same jobs enqueued as EMQ.MENQUEUE x100, claimed with
# EMQ.CLAIM COUNT 100 LEASE 60000 and acked one EMQ.ACK each, once more acked as EMQ.MACK of
# 100, and once more a batch at a time (a worker with 100 jobs in flight: its `active` set stays
# small), by claim-next (each batch's EMQ.MACK ... CLAIM 100 replies the next batch) and by an
# EMQ.MACK and an EMQ.CLAIM COUNT 100 a batch (the phase after the first claim counts both);
# callgrind_control dumps and zeroes the counters after each phase, so the claim and ack
# rows count only their own phase.
# PROFILE_MODULE: another build's libechomq.so; PROFILE_SERVER_ARGS: more valkey-server options
# for the profiled servers (such as --zset-max-listpack-entries 0); PROFILE_ONLY=life: only the claim and ack rows;
# PROFILE_ONLY=foreign: only the rows of other keys (without EchoMQ, with it, and with it set not
# to learn foreign writes);
# PROFILE_ONLY=policy: what claim limits cost a claim and an ack (the life phases on a queue with
# limits that never bind) and what a unique key costs an enqueue, beside the plain rows.
# PROFILE_ONLY=groups: what a claim of 100 costs a job taken one from each of 100 groups (of
# 10,000) against the same from one group (bench table: BENCH_ONLY=groups make bench).
# PROFILE_ONLY=flows: what a flow's child costs its enqueue, claim and ack against a plain job's
# (one command a job; bench table: BENCH_ONLY=flows make bench), and where the difference goes.
# PROFILE_ONLY=idle: the instructions a second of an idle server, without the module and with
# it (PROFILE_IDLE_SECS, default 20, counted after a second's settling); PROFILE_IDLE_QUEUES=N
# fills both first with N queues of one job due in an hour (EMQ.ENQUEUE ... DELAY with the
# module, once its timer has visited each; the same rows and schedule sets as HSET and ZADD
# without it).
set -euo pipefail
cd "$(dirname "$0")/.."
jobs="${PROFILE_JOBS:-20000}"
dir="$(mktemp -d)"
trap 'rm -rf "$dir"' EXIT
[ -n "${PROFILE_KEEP:-}" ] && trap - EXIT && echo "profile: outputs in $dir" >&2
module="${PROFILE_MODULE:-$PWD/target/release/libechomq.so}"

free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# Inclusive instructions of one function in a callgrind output, or 0.
# (A line reads: "446,135,401 (75.51%)  ???:ValkeyModuleCommandDispatcher [/usr/bin/...]";
# a small percentage has a space inside its parentheses, so the name's field number varies.)
cost() {
  callgrind_annotate --inclusive=yes --threshold=100 "$1" 2>/dev/null |
    awk -v f="???:$2" '!found { for (i = 2; i <= NF; i++) if ($i == f) { gsub(",", "", $1); print $1; found = 1 } } END { if (!found) print 0 }'
}

run() { # <mode> [replica|bare|learning] -> $dir/<mode>[-replica|-bare|-learning].out (bare:
  # without the module; learning: with emq.learn-foreign-writes yes)
  local mode="$1" out="$1${2:+-$2}" port rport rpid="" load=(--loadmodule "$module")
  [ "${2:-}" = bare ] && load=()
  [ "${2:-}" = learning ] && load+=(--emq.learn-foreign-writes yes)
  port="$(free_port)"
  # No slow log: under callgrind every EMQ.MENQUEUE of 100 jobs (under a millisecond natively)
  # passes the 10 ms threshold and would pay for a slow-log entry a real run never writes.
  valgrind --tool=callgrind --callgrind-out-file="$dir/$out.out" \
    valkey-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no \
    --slowlog-log-slower-than -1 "${load[@]}" ${PROFILE_SERVER_ARGS:-} >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do valkey-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
  if [ "${2:-}" = replica ]; then
    # A plain replica (no module, not profiled): the module's effects now go to RM_Replicate.
    rport="$(free_port)"
    valkey-server --port "$rport" --bind 127.0.0.1 --save '' --appendonly no \
      --replicaof 127.0.0.1 "$port" --dir "$dir" --dbfilename replica.rdb >/dev/null 2>&1 &
    rpid=$!
    for _ in $(seq 1 600); do
      valkey-cli -p "$rport" INFO replication 2>/dev/null | grep -q 'master_link_status:up' && break
      sleep 0.1
    done
  fi
  # life: the driver has callgrind dump after each phase ($out.out.1 enqueue, .2 claim, .3 ack).
  PROFILE_CALLGRIND_PID="$(case "$mode" in life* | flows | groups-*) echo "$pid";; esac)" \
    python3 scripts/profile-driver.py "$mode" "$port" "$jobs" lua/enqueue.lua
  wait "$pid" || true
  [ -n "$rpid" ] && kill "$rpid" 2>/dev/null && wait "$rpid" 2>/dev/null
  true
}

per_job() { echo $(( $1 / jobs )); }

# An idle server under callgrind (holding $idle_queues queues): counters zeroed a second after
# it answers (and is filled), dumped
# $idle_secs later -> $dir/idle-<bare|module>.out.1; prints nothing.
idle_secs="${PROFILE_IDLE_SECS:-20}"
idle_queues="${PROFILE_IDLE_QUEUES:-0}"
run_idle() { # <bare|module>
  local port load=(--loadmodule "$module")
  [ "$1" = bare ] && load=()
  port="$(free_port)"
  valgrind --tool=callgrind --callgrind-out-file="$dir/idle-$1.out" \
    valkey-server --port "$port" --bind 127.0.0.1 --save '' --appendonly no "${load[@]}" >/dev/null 2>&1 &
  local pid=$!
  for _ in $(seq 1 300); do valkey-cli -p "$port" PING >/dev/null 2>&1 && break; sleep 0.1; done
  if [ "$idle_queues" -gt 0 ]; then
    python3 scripts/profile-driver.py "idle-$1" "$port" "$idle_queues" lua/enqueue.lua
    # With the module, the timer's first visit to each queue, after which it sleeps.
    # (Under callgrind a tick's 2.5 ms budget holds few visits: 10,000 queues take minutes.)
    for _ in $(seq 1 9000); do
      [ "$1" = bare ] && break
      [ "$(valkey-cli -p "$port" INFO emq | tr -d '\r' | sed -n 's/^emq_timer_due_queues://p')" = 0 ] && break
      sleep 0.1
    done
  fi
  sleep 1
  callgrind_control --zero "$pid" >/dev/null 2>&1
  sleep "$idle_secs"
  callgrind_control --dump=idle "$pid" >/dev/null 2>&1
  valkey-cli -p "$port" SHUTDOWN NOSAVE >/dev/null 2>&1 || true
  wait "$pid" || true
}
total() { callgrind_annotate "$1" 2>/dev/null | awk '/PROGRAM TOTALS/ { gsub(",", "", $1); print $1; exit }'; }
idle_rows() {
  echo "| an idle server, instructions a second: without the module | $(( $(total "$dir/idle-bare.out.1") / idle_secs )) |"
  echo "| the same, EchoMQ loaded | $(( $(total "$dir/idle-module.out.1") / idle_secs )) |"
}
life_rows() {
  echo "| \`EMQ.CLAIM COUNT 100\` handler, per job (\`ValkeyModuleCommandDispatcher\`) | $(per_job "$(cost "$dir/life.out.2" ValkeyModuleCommandDispatcher)") |"
  echo "| \`EMQ.ACK\` handler, per job (\`ValkeyModuleCommandDispatcher\`) | $(per_job "$(cost "$dir/life.out.3" ValkeyModuleCommandDispatcher)") |"
  echo "| whole requests (\`processInputBuffer\`): \`EMQ.CLAIM COUNT 100\`, per job | $(per_job "$(cost "$dir/life.out.2" processInputBuffer)") |"
  echo "| whole requests (\`processInputBuffer\`): \`EMQ.ACK\` | $(per_job "$(cost "$dir/life.out.3" processInputBuffer)") |"
  echo "| \`EMQ.MACK\` ×100 handler, per job (\`ValkeyModuleCommandDispatcher\`) | $(per_job "$(cost "$dir/life-mack.out.3" ValkeyModuleCommandDispatcher)") |"
  echo "| whole requests (\`processInputBuffer\`): \`EMQ.MACK\` ×100, per job | $(per_job "$(cost "$dir/life-mack.out.3" processInputBuffer)") |"
  echo "| whole requests: a batch at a time, \`EMQ.MACK\` ×100 then \`EMQ.CLAIM COUNT 100\`, claim and settle per job | $(per_job "$(cost "$dir/life-batches.out.3" processInputBuffer)") |"
  echo "| whole requests: a batch at a time, \`EMQ.MACK\` ×100 \`CLAIM 100\` (claim-next), claim and settle per job | $(per_job "$(cost "$dir/life-next.out.3" processInputBuffer)") |"
}
if [ "${PROFILE_ONLY:-}" = policy ]; then
  for mode in module unique life life-concurrency life-limits; do run "$mode"; done
  w() { per_job "$(cost "$dir/$1" processInputBuffer)"; }
  echo "| whole requests (\`processInputBuffer\`) | instructions/job, none | with a concurrency limit | with a concurrency and a rate limit | with a unique key |"
  echo "|---|---|---|---|---|"
  echo "| \`EMQ.ENQUEUE\` | $(w module.out) | | | $(w unique.out) |"
  echo "| \`EMQ.CLAIM COUNT 100\`, per job | $(w life.out.2) | $(w life-concurrency.out.2) | $(w life-limits.out.2) | |"
  echo "| \`EMQ.ACK\` | $(w life.out.3) | $(w life-concurrency.out.3) | $(w life-limits.out.3) | |"
  exit 0
fi
foreign_rows() {
  echo "| other keys, whole requests per round of \`ZADD\` + \`SET ... EX\` + \`DEL\`: without EchoMQ | $(per_job "$(cost "$dir/foreign-bare.out" processInputBuffer)") |"
  echo "| the same, EchoMQ loaded (default settings) | $(per_job "$(cost "$dir/foreign.out" processInputBuffer)") |"
  echo "| the same, EchoMQ loaded with \`emq.learn-foreign-writes yes\` | $(per_job "$(cost "$dir/foreign-learning.out" processInputBuffer)") |"
}
if [ "${PROFILE_ONLY:-}" = foreign ]; then
  run foreign bare
  run foreign
  run foreign learning
  echo "| where | instructions/round |"
  echo "|---|---|"
  foreign_rows
  exit 0
fi
if [ "${PROFILE_ONLY:-}" = idle ]; then
  run_idle bare
  run_idle module
  echo "| where | instructions/s |"
  echo "|---|---|"
  idle_rows
  exit 0
fi
if [ "${PROFILE_ONLY:-}" = groups ]; then
  # groups-<G>.out.N: 1 the enqueue, 2 the claims of 100; one group against 10,000 (a claim of
  # 100 takes one job from each of 100 groups), with the functions the difference is in.
  run groups-1
  run groups-10000
  w() { per_job "$(cost "$dir/groups-$1.out.2" "${2:-processInputBuffer}")"; }
  echo "| where (instructions a job claimed, \`EMQ.CLAIM COUNT 100\`) | 1 group | 10,000 groups |"
  echo "|---|---|---|"
  echo "| whole request (\`processInputBuffer\`) | $(w 1) | $(w 10000) |"
  for fn in echomq::queue::rounds::claim echomq::queue::take::lease_all VM_OpenKey VM_ZsetRem \
    VM_ZsetAdd VM_Replicate VM_NotifyKeyspaceEvent VM_ACLCheckKeyPermissions VM_Alloc VM_Free \
    VM_HashSet VM_HashGet dictFind; do
    echo "| of which \`${fn##*::}\` | $(w 1 "$fn") | $(w 10000 "$fn") |"
  done
  exit 0
fi
if [ "${PROFILE_ONLY:-}" = flows ]; then
  # flows.out.N: 1-3 a plain job's enqueue, claim, ack; 4 the parents' enqueue; 5-7 the
  # children's enqueue, claim, ack; 8-9 the parents' claim, ack.
  run flows
  f="$dir/flows.out"
  parents=$(( jobs / 10 ))
  w() { per_job "$(cost "$f.$1" "${2:-processInputBuffer}")"; }
  p() { echo $(( $(cost "$f.$1" "${2:-processInputBuffer}") / parents )); }
  echo "| where (instructions per command) | a plain job | a flow's child (or parent) |"
  echo "|---|---|---|"
  echo "| \`EMQ.ENQUEUE\`, whole request (\`processInputBuffer\`) | $(w 1) | $(w 5) |"
  # The parent's side wraps the child's own enqueue (\`adopt_around\` runs it): the difference.
  parent_side() { echo $(( $(w "$1" echomq::queue::flow::adopt_around) - $(w "$1" echomq::runtime::flows::adopting\'2) )); }
  echo "| of which the parent's side (\`adopt_around\`: one check of its row, then the write) | $(parent_side 1) | $(parent_side 5) |"
  echo "| \`EMQ.CLAIM COUNT 1\`, whole request | $(w 2) | $(w 6) |"
  echo "| \`EMQ.ACK\`, whole request | $(w 3) | $(w 7) |"
  kept() { echo $(( $(w "$1" echomq::queue::finished::parents) + $(w "$1" echomq::queue::finished::keep_hand_overs) )); }
  echo "| of which the child's hand-overs kept (\`finished::parents\`: its \`parents\` field read and checked; \`keep_hand_overs\`) | $(kept 3) | $(kept 7) |"
  echo "| of which the hand-over to the parent in the call (\`hand_over\`) | $(w 3 echomq::runtime::flows::hand_over) | $(w 7 echomq::runtime::flows::hand_over) |"
  for fn in VM_HashGet lpFind VM_HashSet VM_OpenKey echomq::host::acl::with_acl_user; do
    echo "| in \`EMQ.ENQUEUE\` and \`EMQ.ACK\` together: \`${fn##*::}\` | $(( $(w 1 "$fn") + $(w 3 "$fn") )) | $(( $(w 5 "$fn") + $(w 7 "$fn") )) |"
  done
  echo "| a parent: \`EMQ.ENQUEUE ... CHILDREN 10\`, whole request (against a plain job's) | $(w 1) | $(p 4) |"
  echo "| a parent: \`EMQ.CLAIM COUNT 1\` once released | $(w 2) | $(p 8) |"
  echo "| a parent: \`EMQ.ACK\`, its row holding its children's outcomes | $(w 3) | $(p 9) |"
  plain=$(( $(cost "$f.1" processInputBuffer) + $(cost "$f.2" processInputBuffer) + $(cost "$f.3" processInputBuffer) ))
  flow=0
  for i in 4 5 6 7 8 9; do flow=$(( flow + $(cost "$f.$i" processInputBuffer) )); done
  echo "| the whole life of 11 jobs: 11 plain, a flow of 1 + 10 | $(( plain * 11 / jobs )) | $(( flow / parents )) |"
  exit 0
fi
if [ "${PROFILE_ONLY:-}" = life ]; then
  run life
  run life-mack
  run life-next
  run life-batches
  echo "| where | instructions/job |"
  echo "|---|---|"
  life_rows
  exit 0
fi
for mode in module batch native lua; do run "$mode"; done
run module replica
run foreign
run foreign bare
run foreign learning
run life
run life-mack
run life-next
run life-batches
run_idle bare
run_idle module
echo "| where | instructions/job |"
echo "|---|---|"
echo "| \`EMQ.ENQUEUE\` handler (\`ValkeyModuleCommandDispatcher\`) | $(per_job "$(cost "$dir/module.out" ValkeyModuleCommandDispatcher)") |"
for f in VM_HashSet VM_Replicate VM_ZsetAdd VM_OpenKey VM_NotifyKeyspaceEvent; do
  echo "| of which \`$f\` | $(per_job "$(cost "$dir/module.out" "$f")") |"
done
echo "| \`EMQ.ENQUEUE\` handler, a replica attached | $(per_job "$(cost "$dir/module-replica.out" ValkeyModuleCommandDispatcher)") |"
echo "| of which \`VM_Replicate\` | $(per_job "$(cost "$dir/module-replica.out" VM_Replicate)") |"
echo "| native \`HSET\` + \`ZADD\` bodies (\`hsetCommand\` + \`zaddCommand\`) | $(per_job $(( $(cost "$dir/native.out" hsetCommand) + $(cost "$dir/native.out" zaddCommand) ))) |"
echo "| the Lua script (\`evalShaCommand\`) | $(per_job "$(cost "$dir/lua.out" evalShaCommand)") |"
for mode in lua native module batch; do
  label="$(case $mode in lua) echo '`EVALSHA`';; native) echo 'native `HSET` + `ZADD`';; module) echo '`EMQ.ENQUEUE`';; batch) echo '`EMQ.MENQUEUE` ×100';; esac)"
  echo "| whole requests (\`processInputBuffer\`): $label | $(per_job "$(cost "$dir/$mode.out" processInputBuffer)") |"
done
foreign_rows
life_rows
idle_rows
