//! Writes `docs/reliability.md`'s chaos section from a run (`--report`), keeping the rest of
//! the page: the section sits between two markers, and says what the harness did, what each
//! column means, what the checker checks and what it cannot see.

use crate::check::Report;

const BEGIN: &str = "<!-- chaos: begin -->";
const END: &str = "<!-- chaos: end -->";

/// One fault of one seed's run.
pub struct Row {
    pub seed: u64,
    pub fault: String,
    pub what: String,
    pub report: Report,
}

const SETUP: &str = "A 3-primary, 3-replica EchoMQ cluster runs as six containers of `echomq:dev` on a docker network the harness creates (`cluster-node-timeout` 2000 ms), each node with its own address and its `/data` (where its AOF is) on a 256 MB ext4 filesystem of its own, a loop-mounted file on the host. The harness reaches the nodes from the network's gateway and cuts links inside a node's network namespace with `iptables`. The nodes' ACL has the default user off (with its permissions kept, so a restarted node replays its AOF whole): each queue of the run has a producer user that may only `EMQ.ENQUEUE` and `WAIT` and a worker user that may only claim, renew, settle, sweep its outbox (`EMQ.OUTBOX`, `EMQ.HANDOVER`, `EMQ.DELIVERED`) and `WAIT` (and send what the clients' cluster connections send besides: `EMQ.VERSION`, `EMQ.WIDTH`, `CLUSTER SLOTS` or `CLUSTER NODES`, `ASKING`, `COMMAND`, `CLIENT SETINFO`, `PING`), both only on that queue's keys (and, for the partitioned queue, its partitions' keys), save that a worker of a flow queue may also send `EMQ.HANDOVER` (and nothing else) on the keys of its phase's other flow queues, where its children's parents are (an ACL selector); each phase has a flows user that may only `EMQ.ENQUEUE`, `EMQ.ADOPT` and `WAIT` on its three flow queues' keys. Before the first fault the harness checks on every node that a client without a user, a producer's or a flows user's claim and a worker's enqueue are refused, and that one queue's users can touch no other queue. Each seed's run forms a cluster of its own; each fault runs under load on four queues of its own, the second with `EMQ.LIMIT <queue> CONCURRENCY 3 GROUP-CONCURRENCY 2` and `EMQ.LIMIT <queue> GROUP g0 CONCURRENCY 1`, its jobs enqueued in four groups (`GROUP g0` to `g3`, drawn for each enqueue), the first (the busy queue, whose primary the fault hits), third and fourth each on another of the three primaries (the third and fourth drawn until their slots are), and on a fifth, partitioned over 12 partitions (docs/cluster.md, \"A queue bigger than one primary\"), spanned by the harness before the load (`EMQ.SPAN` on each partition, then on the queue), its partitions spread over the three primaries. Two producers send `EMQ.ENQUEUE <queue> * <payload>`, then `WAIT 1 300` (acknowledged when `WAIT` answers 1), to one of the five queues drawn for each job; a job of the partitioned queue gets an id the producer mints, and goes to the partition that id routes to, as a client does (`EMQ.ENQUEUE <partition> <id> <payload>`). Beside them a flows producer builds one flow for every 15 enqueues tried, as a client on a cluster does (docs/flows.md): a parent in one of the three flow queues, drawn, with `CHILDREN n` (n drawn from 1 to 10), then for each child `EMQ.ADOPT` on the parent's primary and the child's `EMQ.ENQUEUE ... PARENT <queue> <id>` in one of the two other flow queues (so the fault's primary holds the parents of some flows and the children of others); a third of the flows are batches, every child `ON-FAIL IGNORE`, the others `ON-FAIL FAIL`. Each write is followed by `WAIT 1 300` and tried again, with the ids the producer minted, until `WAIT` answers 1, for up to 30 s (a flow not confirmed by then, or whose parent refused a child, is given up, and its parent may wait for ever); a flow is acknowledged when every one of its writes was. The workers are the shipped clients, run as child processes of the harness, with their defaults (blocking claims of up to their free concurrency, 4; the lease renewed every third of it; acknowledgements sent together as one `EMQ.MACK`) and `wait_replicas=1` on their settles (`WAIT 1 1000` after each settle pipeline, its answer in each settle event's `replicated`): on each queue (the partitioned one by its name: each claims its partitions, one claim loop per primary) a Python `echomq.Worker` on a `RedisCluster` (`chaos/workers/python_worker.py`), a Rust `echomq_client::Worker` on a cluster connection (`emq-chaos worker`) and a Node `Worker` on node-redis's cluster client (`chaos/workers/node_worker.js`), each as the queue's worker user, each with a lease of 2000 ms and a handler that holds a job up to 60 ms and fails one in ten (`Retry` in 100 ms), drawn from the seed. All three sweep their queue's outbox, handing each finished child over to its parent's primary (`EMQ.HANDOVER`, then `WAIT 1 1000` there) and removing the entry (`EMQ.DELIVERED`) only once a replica of the parent's confirmed it. Each writes every call of its `on_event` hook (claim, renew, settle, handler start and end, and the sweep's `handover`, `delivered` and `outbox`, the same record for the three clients) to its stdout as a JSON line, which the harness reads into the history (passing over the sweep's). The zombies: at most once in 3 s, the harness freezes a whole worker process with a handler running (`SIGSTOP`) for the lease and 2 s more, then resumes it (`SIGCONT`): its jobs' leases ran out meanwhile and other workers claimed them, so whatever it then settles must be refused (it may also learn of the loss from a renewal first and send nothing). A phase in which no worker was frozen fails, as does one in which a worker process ended before the harness stopped it. Every step, and every try of every flow's write, goes into the history with the worker, the job, the token, and the times it was sent and answered on the wall clock of the host (Unix ns), which the harness and its workers share. Faults last three node timeouts, then heal; the workers drain the queues (nothing pending, active or scheduled and every outbox empty, three readings in a row), and once every node is back and the cluster stable, the checker reads the history and each queue's rows, sets and outbox on its primary (the partitioned queue's, its partitions' on theirs, checked as one queue).\n\nThe faults: *partition-primary* cuts the busy queue's primary off from the other five; *pause-primary* stops it (SIGSTOP) and resumes it; *kill-primary* kills it (SIGKILL) and starts it again; *partition-replica* cuts its replica off; *rolling-restart* restarts all six nodes one at a time; *reshard-under-partition* cuts a third primary off, then moves the busy slot between the other two with `CLUSTER SETSLOT` and `MIGRATE` batches of 100; *slow-primary* delays all the primary's packets 100–500 ms each way and drops 10% (this kernel has no `sch_netem`: an `iptables` rule drops the share, and an NFQUEUE hands the rest to the harness's own loop, `chaos/src/delay.rs`, which holds each for its delay and lets them go in order), and fails unless that loop was alive throughout and the median of the harness's `PING`s during the fault took at least 200 ms; *memory-pressure* sets the primary's `maxmemory` 64 KB under what it holds (the `noeviction` policy), then lifts it, and fails unless some enqueue was refused with `OOM`; *disk-full* fills the primary's data filesystem to the last block under its AOF, empties it, waits until `aof_last_write_status` is `ok` again, then restarts the node from its AOF, and fails unless some enqueue was refused with `MISCONF`.\n";

const CLOCK: &str = "\n*clock-jump* steps the primary's wall clock 30 s ahead, holds three node timeouts, then steps it back, through a preload shim of the project's ([scripts/clock-shift-shim.c](../scripts/clock-shift-shim.c), bind-mounted into every node with the file that holds its offset; it moves `clock_gettime`'s wall clocks, `gettimeofday` and `time`, and leaves the monotonic clocks alone, as a stepped clock does), and fails unless the node's `TIME` showed each step. The server counts a lease on its own clock: a step ahead ends the leases early (their holders are fenced by their tokens), and a lease running across the step back lasts 30 s longer, so a settle sent in that time is no zombie's, and the checker's other rules on tokens hold throughout.\n";

const COLUMNS: &str = "\nThe columns: **tried**, enqueues sent; **ack'd**, those a replica confirmed; **found**, of those, found once in the final state, done or dead; **lost** and **dup**, acknowledged enqueues not found, and payloads found in more than one job; **unfinished**, rows still pending, active or scheduled at the end; **re-run after ack**, jobs claimed again after an `ACK` a replica confirmed; **handler re-runs**, handler runs beyond a job's first (a lease that ran out, a failure retried: allowed, counted); **zombies (refused)**, settles sent past their lease's end and a second's grace (the claim's answer, or the last renewal's, plus 2000 ms), and how many the server refused; **limit**, the most active jobs the server ever counted against a limit during the phase, with that limit: the limited queue's (`EMQ.STATS`, of 3) or one of its groups' (`EMQ.GROUPS`, of 2, or 1 for `g0`), read about every 50 ms; **refused**, for the faults that must refuse writes, the enqueues refused with `OOM` or `MISCONF`; **unconfirmed, lost**, enqueues a primary took with `WAIT` 0 and lost in its failover; **unanswered (found)**, enqueues whose answer never came, and how many of them were written; **after a failover**, settles of one attempt taken twice, and stale tokens taken or handed out again, where a write no replica confirmed was undone by a failover; **flows**, flows whose build began, those acknowledged (every write confirmed by a replica) and their children, the acknowledged flows whose parent was done once (no second `ACK` that stands, no run after it), and the acknowledged batches and those whose callback ran to one `ACK`; a parent an `ON-FAIL FAIL` child's death failed is counted in neither (the run's log line counts it; a child dies only once its 25 attempts are used, which the handlers' one-in-ten failures hardly ever do). The flows' jobs are in the other columns' rows and sets too (tried, ack'd, found count the producers' plain enqueues only).\n";

const CHECKS: &str = "\nA violation fails the run. The checker (`chaos/src/check.rs`, pure: the history and the final rows and sets in, the report out; its tests feed it a history holding each violation below and a clean one) fails a phase on: an acknowledged enqueue lost or found twice; a refused enqueue written; any row not done or dead at the end (the queues must drain), or queues still holding jobs 120 s after the last enqueue; a done row whose `attempts` is not the token of an `ACK` some worker sent; a dead row with attempts left; a row with fewer attempts than a token a claim of it returned, or more than the claims (including those whose answer never came) could have taken; a claim whose token is not greater than every token of that job returned before the claim was sent; a settle accepted with a token older than one a claim of that job had returned before the settle was sent; one token settled twice; a claim, or a handler's start, after an accepted `ACK` of that job (one no replica confirmed is excused only in a phase with a failover, which may have undone it), and such a job not done at the end; a zombie's settle accepted (unless a failover may have undone the zombie's claim, which no replica confirmed, and another claim (another worker's, or the zombie's own), answered after the zombie's claim was sent and sent before the settle was answered, got the same token, its lease holding when the settle could reach the new primary: the settle then held that lease, and is counted with the stale tokens; a violation names the job's claims, renewals and settles); a reading of the limited queue, or of one of its groups, above its limit; a member of a set without its row, in two sets, or in another set than its row's state; a replica whose `DEBUG DIGEST` differs from its primary's; a record of the history answered before it was sent; a phase with no acknowledged enqueue, no acknowledged flow, no worker frozen or no reading of the limit (it proved nothing); a hand-over left in an outbox at the end; a row of the partitioned queue in a partition its id does not route to, or in two partitions, a member of one of its sets without its row in the same partition, and anything under its own name (`chaos/src/spanned.rs`, with tests of each). The flows' rules (`chaos/src/check/flows.rs`, with tests of each): a parent run (a claim of it answered, or its handler started) before one of its children can have finished, that is before the first send of a settle that finished it (an `ACK`, or the `FAIL` of its last attempt, not refused), or when no settle finished it; a parent run again (claimed, or its handler started) after an `ACK` of it that stands (accepted and confirmed by a replica, or accepted in a phase without a failover); an acknowledged flow with a child missing at the end, or whose parent is not done at the end (dead instead, with no run, for an `ON-FAIL FAIL` flow a child of which is dead at the end); a batch with two `ACK`s that stand (its callback ran twice), or, acknowledged, none accepted (it never ran). A parent waiting at the end is a violation only for an acknowledged flow; a dead parent is excused its unused attempts only when a child of its `ON-FAIL FAIL` flow died.\n\nValkey replicates asynchronously, so a write a primary took with no replica's `WAIT` can be undone by its failover: an enqueue gone, a claim's token handed out again, a settle forgotten. Those outcomes are excused, and counted in their columns, only in a phase where a primary lost its role (the harness reads the slot map's primaries every 50 ms), and only for a write no replica confirmed (its `WAIT` answered 0, or it had none: the workers wait on their settles, not on their claims); anywhere else each is a violation. A settle counts as confirmed for fencing unless its `WAIT` answered 0.\n\nWhat the checker cannot see: writes whose answer never came are counted, not judged (one that took effect may explain a done row, an attempt or a token); a worker's claim whose answer never came may have taken jobs that nobody heard of, so the upper bound on attempts is loose by those; the limit is read about every 50 ms, so an excess shorter than that can pass unseen, and only the concurrency limits of one queue and its groups are read; the times are the harness's clock: a node's own clock, which *clock-jump* steps, is seen only through its `TIME` and the leases it ends; the final state is read from each queue's primary once the cluster is stable, so a state that held only in between is judged by the history alone; a zombie's settle is judged only when the server answered it; a parent's count is judged by its runs and its row, not read (the workers' hand-over events are passed over), and a parent run before its children is seen only as the history's send and answer times allow (a claim answered after a child's finishing settle was sent passes).\n";

/// The short commit the run was built from.
fn commit() -> String {
    crate::docker::run("git", &["rev-parse", "--short", "HEAD"]).unwrap_or_else(|_| "?".into())
}

/// The loss window of a client that takes a primary's answer for done (no `WAIT`), measured:
/// the enqueues a primary answered and its failover lost, against those a replica confirmed.
fn window(rows: &[Row]) -> String {
    let lost: usize = rows.iter().map(|r| r.report.unconfirmed_lost).sum();
    let confirmed: usize = rows.iter().map(|r| r.report.acknowledged).sum();
    let lost_confirmed: usize = rows.iter().map(|r| r.report.lost).sum();
    format!(
        "\nWithout a replica's `WAIT` (the clients' `wait_replicas`), a client takes a primary's answer for done: in this run, {lost} enqueues a primary answered were lost in its failover (*unconfirmed, lost*), against {lost_confirmed} of the {confirmed} a replica confirmed.\n"
    )
}

/// The most of a violation's text the page keeps, and the most violations it lists a phase.
const VIOLATION_CHARS: usize = 400;
const VIOLATIONS_LISTED: usize = 5;

/// Whether every one of the run's `phases` ran and passed, and else what did not: a failed
/// run's table must not read as a clean one (a seed whose cluster never formed has no rows).
fn verdict(rows: &[Row], phases: usize) -> String {
    let failed: Vec<&Row> = rows
        .iter()
        .filter(|r| !r.report.violations.is_empty())
        .collect();
    if failed.is_empty() && rows.len() == phases {
        return format!("\nEvery one of the {phases} phases passed.\n");
    }
    let mut out = format!(
        "\n**This run failed**: {} of its {phases} phases found violations",
        failed.len()
    );
    if rows.len() < phases {
        out.push_str(&format!(", and {} never ran", phases - rows.len()));
    }
    out.push_str(".\n\n");
    for row in failed {
        let all = &row.report.violations;
        for v in all.iter().take(VIOLATIONS_LISTED) {
            let text: String = v.chars().take(VIOLATION_CHARS).collect();
            let cut = if text.len() < v.len() { " …" } else { "" };
            out.push_str(&format!(
                "- seed {}, {}: {}{cut}\n",
                row.seed,
                row.fault,
                text.replace(['\n', '|'], " ")
            ));
        }
        if all.len() > VIOLATIONS_LISTED {
            out.push_str(&format!(
                "- seed {}, {}: and {} more\n",
                row.seed,
                row.fault,
                all.len() - VIOLATIONS_LISTED
            ));
        }
    }
    out
}

/// Writes the run's section of `path`: `phases` is how many the run meant to run (seeds ×
/// faults), of which `rows` holds those that ran.
pub fn write(
    path: &str,
    seeds: &[u64],
    jobs: usize,
    phases: usize,
    rows: &[Row],
) -> Result<(), String> {
    let when = crate::docker::run("date", &["-u", "+%Y-%m-%d"]).unwrap_or_default();
    let page = std::fs::read_to_string(path).map_err(|e| format!("{path}: {e}"))?;
    let (Some(a), Some(b)) = (page.find(BEGIN), page.find(END)) else {
        return Err(format!("{path} has no {BEGIN} ... {END} markers"));
    };
    let seeds_text: Vec<String> = seeds.iter().map(u64::to_string).collect();
    let tried: usize = rows.iter().map(|r| r.report.tried).sum();
    let flows: usize = rows.iter().map(|r| r.report.flows.tried).sum();
    let flows_acked: usize = rows.iter().map(|r| r.report.flows.acknowledged).sum();
    let mut out = format!(
        "{BEGIN}\n{SETUP}{CLOCK}{COLUMNS}\nThis run: `emq-chaos --seeds {} --jobs {jobs} --report docs/reliability.md` on commit `{}` ({when}): seeds {}, {jobs} enqueues tried per fault, {tried} in all, and {flows} flows ({flows_acked} acknowledged). A seed fixes the choices of queues, payloads, flows' shapes, workers' holds, zombies and outcomes; the cluster's own timing is not seeded.\n\n| seed | fault | what was done | tried | ack'd | found | lost | dup | unfinished | re-run after ack | handler re-runs | zombies (refused) | limit | refused | unconfirmed, lost | unanswered (found) | after a failover: settled twice, stale tokens | flows: tried, ack'd (children), parents done once, batches (callback once) |\n|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n",
        seeds_text.join(","),
        commit(),
        seeds_text.join(", ")
    );
    for row in rows {
        let r = &row.report;
        let limit = r
            .limit_peak
            .map_or("none read".into(), |(seen, n)| format!("{seen} of {n}"));
        let refused = r
            .refusals
            .map_or("".into(), |(code, n)| format!("{n} `{code}`"));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} ({}) | {limit} | {refused} | {} | {} ({}) | {}, {} | {}, {} ({}), {}, {} ({}) |\n",
            row.seed,
            row.fault,
            row.what,
            r.tried,
            r.acknowledged,
            r.found,
            r.lost,
            r.duplicated,
            r.unfinished,
            r.rerun_after_ack,
            r.handler_reruns,
            r.zombies_tried,
            r.zombies_refused,
            r.unconfirmed_lost,
            r.unknown,
            r.unknown_found,
            r.settles_superseded,
            r.fencing_unconfirmed,
            r.flows.tried,
            r.flows.acknowledged,
            r.flows.children,
            r.flows.parents_once,
            r.flows.batches,
            r.flows.batches_once
        ));
    }
    out.push_str(&verdict(rows, phases));
    out.push_str(&window(rows));
    out.push_str(CHECKS);
    let page = format!("{}{out}{}", &page[..a], &page[b..]);
    std::fs::write(path, page).map_err(|e| format!("{path}: {e}"))
}

#[cfg(test)]
mod tests {
    use super::{write, Row, BEGIN, END};
    use crate::check::Report;

    #[test]
    fn the_section_holds_a_row_per_seed_and_fault_and_keeps_the_page_around_it() {
        let path = std::env::temp_dir().join(format!("emq-chaos-report-{}.md", std::process::id()));
        std::fs::write(&path, format!("above\n{BEGIN}\nold\n{END}\nbelow\n")).unwrap();
        let rows: Vec<Row> = [1u64, 2, 3]
            .iter()
            .flat_map(|seed| {
                ["kill-primary", "disk-full"].map(|fault| Row {
                    seed: *seed,
                    fault: fault.into(),
                    what: "done".into(),
                    report: Report {
                        tried: 10,
                        acknowledged: 9,
                        unconfirmed_lost: 1,
                        flows: crate::check::flows::Figures {
                            tried: 3,
                            acknowledged: 2,
                            children: 9,
                            parents_once: 2,
                            batches: 1,
                            batches_once: 1,
                            failed: 0,
                        },
                        refusals: (fault == "disk-full").then_some(("MISCONF", 4)),
                        ..Report::default()
                    },
                })
            })
            .collect();
        write(path.to_str().unwrap(), &[1, 2, 3], 10, 6, &rows).unwrap();
        let page = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(page.starts_with("above\n") && page.ends_with(&format!("{END}\nbelow\n")));
        assert!(!page.contains("\nold\n"));
        assert!(
            page.contains("--seeds 1,2,3 --jobs 10") && page.contains(", 60 in all, and 18 flows")
        );
        let table: Vec<&str> = page.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(table.len(), 1 + 6, "{table:?}");
        assert!(table[6].starts_with("| 3 | disk-full | done | 10 |"));
        assert!(table[6].contains("| 4 `MISCONF` |"));
        assert!(table[6].ends_with("| 3, 2 (9), 2, 1 (1) |"), "{}", table[6]);
        assert!(page.contains("and 18 flows (12 acknowledged)"));
        assert!(page.contains("Every one of the 6 phases passed."));
        assert!(!page.contains("This run failed"));
        assert!(page.contains("on commit `"));
        assert!(
            page.contains("6 enqueues a primary answered were lost in its failover")
                && page.contains("against 0 of the 54 a replica confirmed"),
            "the loss window without WAIT, summed over the rows"
        );
    }

    #[test]
    fn a_failed_run_says_so_and_lists_each_failed_phase_s_violations() {
        let path = std::env::temp_dir().join(format!("emq-chaos-failed-{}.md", std::process::id()));
        std::fs::write(&path, format!("{BEGIN}\n{END}\n")).unwrap();
        let row = |fault: &str, violations: Vec<String>| Row {
            seed: 2,
            fault: fault.into(),
            what: "done".into(),
            report: Report {
                violations,
                ..Report::default()
            },
        };
        let long = format!("worker python-1 ended | {}", "x".repeat(1000));
        let many: Vec<String> = (0..7).map(|i| format!("zombie {i}")).collect();
        let rows = [
            row("kill-primary", vec![]),
            row("rolling-restart", vec![long]),
            row("slow-primary", many),
        ];
        write(path.to_str().unwrap(), &[2], 10, 3, &rows).unwrap();
        let page = std::fs::read_to_string(&path).unwrap();
        assert!(page.contains("**This run failed**: 2 of its 3 phases found violations."));
        // A seed whose cluster never formed left no rows: the run did not pass.
        write(path.to_str().unwrap(), &[2, 3], 10, 6, &rows[..1]).unwrap();
        let short = std::fs::read_to_string(&path).unwrap();
        let _ = std::fs::remove_file(&path);
        assert!(short
            .contains("**This run failed**: 0 of its 6 phases found violations, and 5 never ran."));
        assert!(!page.contains("passed."));
        let listed: Vec<&str> = page
            .lines()
            .filter(|l| l.starts_with("- seed 2, "))
            .collect();
        assert_eq!(listed.len(), 1 + 5 + 1, "{listed:?}");
        assert!(listed[0].starts_with("- seed 2, rolling-restart: worker python-1 ended   xxx"));
        assert!(
            listed[0].ends_with(" …") && listed[0].len() < 500,
            "cut short, no table bar"
        );
        assert_eq!(listed[1], "- seed 2, slow-primary: zombie 0");
        assert_eq!(listed[6], "- seed 2, slow-primary: and 2 more");
    }
}
