//! Writes `docs/reliability.md`'s table of faults from a run (`--report`), keeping the rest of
//! the page: the table sits between two markers.

use crate::check::Report;

const BEGIN: &str = "<!-- chaos: begin -->";
const END: &str = "<!-- chaos: end -->";

const INTRO: &str = "A 3-primary, 3-replica EchoMQ cluster runs as six containers of `echomq:dev` on a docker network the harness creates (`cluster-node-timeout` 2000 ms), each node with its own address; the harness reaches them from the network's gateway, and cuts links inside a node's network namespace with `iptables`. The nodes' ACL has the default user off (with its permissions kept, as docs/configuration.md says, so a restarted node replays its AOF whole): each queue of the run has a producer user that may only `EMQ.ENQUEUE` and `WAIT` and a worker user that may only claim, renew, settle and `WAIT`, both only on that queue's keys (`~emq:{<queue>}:*`; the queues are drawn from the seed before the nodes start, and every producer and worker connects to a queue as its user), replicas authenticate as the harness's user, and before the first fault the harness checks on every node that a client without a user, a producer's claim and a worker's enqueue are refused, and on its owner that one queue's producer and worker can neither enqueue on nor claim from another queue of the run. Each fault runs under load on four queues of its own: two producers (`EMQ.ENQUEUE <queue> * <payload>`, then `WAIT 1 300`; an enqueue counts as acknowledged when `WAIT` answers 1), three workers (`EMQ.CLAIM COUNT 5 LEASE 2000`, a hold of up to 60 ms, then `EMQ.ACK`, or `EMQ.FAIL ... RETRY-IN 100` one time in ten, each followed by `WAIT 1 300`, or nothing one time in twenty: the worker dies and the lease runs out). Faults last three node timeouts, then heal (the reshard fault cuts a third primary off, waits one node timeout, moves the busy queue's slot between the other two with `CLUSTER SETSLOT` and `MIGRATE` batches of 100, retried while the cluster is down, holds three node timeouts, then heals); the workers drain the queues, and once every node is back and the cluster stable the checker reads the history and each queue's sets and rows on its primary. A violation fails the run: an acknowledged enqueue lost or found twice, a member of a set without its row or in two sets, a row in the wrong set, a job claimed again after an `ACK` a replica confirmed, an acknowledged `ACK` whose job is not done, two settles of one attempt (one token) that a replica both confirmed, a refused enqueue written, or a replica whose `DEBUG DIGEST` differs from its primary's.\n";

const OUTCOMES: &str = "\nTwo outcomes are Valkey's asynchronous replication, not EchoMQ's, and are counted apart, never passed silently. *Written without a replica's `WAIT`, then lost*: an enqueue a primary took while cut off from its replica (or while about to lose its role) and answered with `WAIT` 0; its failover drops it, and the producer was never told it was safe. *An attempt settled twice, once without `WAIT`*: the cut-off primary took a claim and its `ACK` without a replica; after the failover the job is pending on the new primary, whose next claim hands out the same token, and that attempt is settled again, this time confirmed. Only acknowledged settles are fenced: a worker must count its `ACK` done when `WAIT` confirms it. This machine's kernel has no `sch_netem` for `tc netem`, so the slowed primary's packets are dropped by an `iptables` rule (a share of them) and the rest go through an NFQUEUE to the harness's own loop (`chaos/src/delay.rs`), which holds each for its delay and lets them go in the order they came; the harness's own `PING` round trips during the fault are in the table.\n";

pub fn write(
    path: &str,
    seed: u64,
    jobs: usize,
    rows: &[(String, String, Report)],
) -> Result<(), String> {
    let when = crate::docker::run("date", &["-u", "+%Y-%m-%d"]).unwrap_or_default();
    let page = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let (Some(a), Some(b)) = (page.find(BEGIN), page.find(END)) else {
        return Err(format!("{path} has no {BEGIN} ... {END} markers"));
    };
    let mut table = format!(
        "{BEGIN}\n{INTRO}\nThis run: `emq-chaos --seed {seed} --jobs {jobs} --report docs/reliability.md` ({when}), seed {seed}, {jobs} enqueues tried per fault; the same seed gives the same choices of queues, payloads, workers' holds and outcomes (the cluster's own timing is not seeded).\n\n| fault | what was done | tried | acknowledged | found | lost | duplicated | re-run after ack | written without a replica's `WAIT`, then lost | answer never came (found) | an attempt settled twice, once without `WAIT` |\n|---|---|---|---|---|---|---|---|---|---|---|\n"
    );
    for (fault, what, r) in rows {
        table.push_str(&format!(
            "| {fault} | {what} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {} |\n",
            r.tried,
            r.acknowledged,
            r.found,
            r.lost,
            r.duplicated,
            r.rerun_after_ack,
            r.unconfirmed_lost,
            r.unknown,
            r.unknown_found,
            r.settles_superseded
        ));
    }
    table.push_str(OUTCOMES);
    let out = format!("{}{table}{}", &page[..a], &page[b..]);
    std::fs::write(path, out).map_err(|e| format!("{path}: {e}"))
}
