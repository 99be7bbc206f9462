#!/usr/bin/env bash
# make reliability: runs the fault tests (failover, resharding, kill -9 and a simulated power
# loss with the AOF) and writes their figures to docs/reliability.md.
set -euo pipefail
cd "$(dirname "$0")/.."
log="$(mktemp)"
chaos="$(mktemp)"
trap 'rm -f "$log" "$chaos"' EXIT
# The table `make chaos` writes stays as it is.
sed -n '/<!-- chaos: begin -->/,/<!-- chaos: end -->/p' docs/reliability.md > "$chaos"
# So does the memory line of the last `make test-valgrind`, when this machine has no newer one.
memory="$(grep -m1 '^Memory: ' docs/reliability.md || true)"
cargo test --test cluster_failover --test cluster_resharding --test persistence -- --nocapture --test-threads=1 2>&1 | tee "$log" | grep -E "^test |test result" || true
grep -q "test result: ok" "$log" || { echo "reliability: the fault tests failed" >&2; exit 1; }
field() { grep -o "RELIABILITY $1 .*" "$log" | tail -1 | tr ' ' '\n' | sed -n "s/^$2=//p"; }
{
  echo "# EchoMQ reliability figures"
  echo
  echo "From the last run of \`make reliability\` ($(date -u +%Y-%m-%d), valkey-server $(valkey-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p'), $(nproc) cores): the fault tests in \`tests/cluster_failover.rs\`, \`tests/cluster_resharding.rs\` and \`tests/persistence.rs\`, which assert what each row shows: no acknowledged job lost, but for a power loss with \`appendfsync everysec\` or \`no\`, where they assert that every job fsynced before the cut was found and, with \`no\`, that acknowledged jobs were lost."
  echo
  echo "| fault | what the client did | tried | acknowledged | found afterwards | lost |"
  echo "|---|---|---|---|---|---|"
  a=$(field failover acknowledged); f=$(field failover found)
  echo "| \`kill -9\` of the primary owning the queue, replica promoted (3+3 cluster) | \`EMQ.ENQUEUE\` then \`WAIT 1 1000\`; acknowledged when a replica has it | $(field failover tried) | $a | $f | $((a - f)) |"
  a=$(field resharding acknowledged); f=$(field resharding found)
  echo "| the busy queue's slot moved to another primary (\`SETSLOT\` + \`MIGRATE\` of $(field resharding migrated_keys) keys) under load | \`EMQ.ENQUEUE\`, following $(field resharding ask) ASK and $(field resharding moved) MOVED redirections, retrying $(field resharding tryagain) TRYAGAIN | $(field resharding tried) | $a | $f (exactly once) | $((a - f)) |"
  a=$(field aof-kill-9 acknowledged); f=$(field aof-kill-9 found)
  echo "| \`kill -9\` of a single node with \`appendfsync no\`, restarted: a process crash, whose writes the kernel keeps | \`EMQ.ENQUEUE\` in a loop | $(field aof-kill-9 tried) | $a | $f | $((a - f)) |"
  a=$(field aof-power-loss-always acknowledged); f=$(field aof-power-loss-always found)
  echo "| a power loss of a single node with \`appendfsync always\`: \`kill -9\` under a shim that keeps every AOF byte not yet fsynced out of the file ([scripts/aof-power-loss-shim.c](../scripts/aof-power-loss-shim.c)), restarted | \`EMQ.ENQUEUE\` in a loop | $(field aof-power-loss-always tried) | $a | $f | $((a - f)) |"
  a=$(field aof-power-loss-everysec acknowledged); f=$(field aof-power-loss-everysec found)
  echo "| the same power loss with \`appendfsync everysec\`, once the server's fsync had put the first $(field aof-power-loss-everysec fsynced_first) jobs in the file (all found) | \`EMQ.ENQUEUE\` in a loop after those | $(field aof-power-loss-everysec tried) | $a | $f | $((a - f)) |"
  a=$(field aof-power-loss-no acknowledged); f=$(field aof-power-loss-no found)
  echo "| the same power loss with \`appendfsync no\` (the test asserts some are lost: the simulation tells the policies apart) | \`EMQ.ENQUEUE\` in a loop | $(field aof-power-loss-no tried) | $a | $f | $((a - f)) |"
  echo
  if [ -f target/valgrind/summary.txt ]; then
    echo "Memory: $(cat target/valgrind/summary.txt)"
    echo
  elif [ -n "$memory" ]; then
    echo "$memory"
    echo
  fi
  echo "Also asserted by the same suites: an RDB snapshot and an AOF rewrite reload to the same \`DEBUG DIGEST\`; an AOF written with the module replays on a server without it; replicas with and without the module reach the primary's digest (\`tests/replication.rs\`)."
  if [ -s "$chaos" ]; then
    echo
    echo "## Faults in containers: \`make chaos\`"
    echo
    cat "$chaos"
  fi
} > docs/reliability.md
cat docs/reliability.md
