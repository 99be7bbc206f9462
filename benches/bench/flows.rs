//! A flow's whole life (docs/flows.md) against independent jobs': a parent of 10 children
//! enqueued, each child claimed and acked, then the released parent claimed and acked, by
//! main-thread CPU per job, beside the same 11 jobs' lives with no flow; on one server (each
//! child's ack hands over in its own call) and across two primaries of a cluster (each child
//! adopted first, each hand-over delivered from the outbox as a worker would).

use std::fmt::Write as _;
use std::io::Write;
use std::net::TcpStream;

use redis::cmd;

use crate::commands::{claimed, encode_ack, encode_claim};
use crate::measure::{command_stat, median, ratio_spread, sample, spread, timed_across, Sample};
use crate::resp::{bulk, encode, exchange, header, read_replies, Window};
use crate::support::cluster::Cluster;
use crate::support::cluster_load::slot_of;
use crate::support::{job_id, set_key, Connection, Server};
use crate::workload::{fresh, CONNECTIONS, PAYLOAD};

/// A flow's children, and its jobs with the parent.
const CHILDREN: usize = 10;
const FLOW: usize = CHILDREN + 1;
/// Commands in flight per client, as in the one-at-a-time life.
const DEPTH: usize = 16;
/// Entries a worker's sweep asks `EMQ.OUTBOX` for (its default).
const SWEEP: &[u8] = b"100";
/// The commands whose `commandstats` a run sums.
const EMQ_COMMANDS: [&str; 7] = [
    "emq.enqueue",
    "emq.adopt",
    "emq.claim",
    "emq.ack",
    "emq.outbox",
    "emq.handover",
    "emq.delivered",
];
/// The parents' queue; the children's is found per deployment.
const PARENTS: &str = "flows";

/// Where a run's queues live: the parents' queue and its node, the children's and theirs.
struct Site<'a> {
    parents: &'a Server,
    children: &'a Server,
    child_queue: String,
}

impl Site<'_> {
    /// The parents and the children on different primaries.
    fn cross(&self) -> bool {
        self.parents.port != self.children.port
    }

    /// Admin connections to the nodes the run involves, one each.
    fn admins(&self) -> Vec<Connection> {
        let mut admins = vec![self.parents.conn()];
        if self.cross() {
            admins.push(self.children.conn());
        }
        admins
    }
}

/// The phases a life is reported by: the parents enqueued (with the adoptions across
/// primaries), the children enqueued, claimed and acked, the hand-overs delivered (a cluster's
/// flow only), the parents claimed and acked.
const PHASES: usize = 6;

/// One phase's server figures, summed over the nodes: wall time (s), main-thread CPU (s),
/// `commandstats` time (µs) and calls of [`EMQ_COMMANDS`].
#[derive(Clone, Copy, Default)]
struct Step {
    elapsed: f64,
    cpu: f64,
    usec: f64,
    calls: f64,
}

impl std::ops::AddAssign for Step {
    fn add_assign(&mut self, o: Step) {
        self.elapsed += o.elapsed;
        self.cpu += o.cpu;
        self.usec += o.usec;
        self.calls += o.calls;
    }
}

/// The `commandstats` time and calls of [`EMQ_COMMANDS`], summed over `admins`.
fn stats(admins: &mut [Connection]) -> (f64, f64) {
    admins.iter_mut().fold((0.0, 0.0), |(usec, calls), con| {
        (
            usec + command_stat(con, &EMQ_COMMANDS, "usec"),
            calls + command_stat(con, &EMQ_COMMANDS, "calls"),
        )
    })
}

/// Each client's commands, dealt out in turn from `commands`.
fn deal(commands: Vec<Vec<u8>>, clients: usize) -> Vec<Vec<Vec<u8>>> {
    let mut shares = vec![Vec::new(); clients];
    for (i, c) in commands.into_iter().enumerate() {
        shares[i % clients].push(c);
    }
    shares
}

/// Runs `work` on `node`, timed by the CPU of every node of `admins`: the phase's figures and
/// what each client returned.
fn measured<R, F>(node: &Server, admins: &mut [Connection], work: Vec<F>) -> (Step, Vec<R>)
where
    F: FnOnce(&mut TcpStream, &mut Vec<u8>) -> R + Send + 'static,
    R: Send + 'static,
{
    let (usec, calls) = stats(admins);
    let (elapsed, cpu, out) = timed_across(node, admins, work);
    let (usec_after, calls_after) = stats(admins);
    let step = Step {
        elapsed,
        cpu,
        usec: usec_after - usec,
        calls: calls_after - calls,
    };
    (step, out)
}

/// Sends each client's share of commands to `node`, [`DEPTH`] in flight: the phase's figures
/// and the replies.
fn phase(
    node: &Server,
    admins: &mut [Connection],
    shares: Vec<Vec<Vec<u8>>>,
) -> (Step, Vec<Vec<u8>>) {
    let work: Vec<_> = shares
        .into_iter()
        .map(|share| {
            let windows: Vec<Window> = share.chunks(DEPTH).map(|w| (w.concat(), w.len())).collect();
            move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
                exchange(stream, inbox, &windows, true)
            }
        })
        .collect();
    let (step, replies) = measured(node, admins, work);
    (step, replies.into_iter().flatten().collect())
}

/// `EMQ.CLAIM <queue> COUNT 1` `n` times on `node`, then an `EMQ.ACK` of each job it took: the
/// two phases' figures.
fn claim_and_ack(node: &Server, admins: &mut [Connection], queue: &str, n: usize) -> [Step; 2] {
    let mut claim = Vec::new();
    encode_claim(&mut claim, queue, 1);
    let (claims, replies) = phase(node, admins, deal(vec![claim; n], CONNECTIONS));
    let acks = replies
        .iter()
        .map(|reply| {
            let jobs = claimed(reply);
            assert_eq!(jobs.len(), 1, "each claim took a job");
            let mut buf = Vec::new();
            encode_ack(&mut buf, queue, &jobs[0].0, &jobs[0].1);
            buf
        })
        .collect();
    [claims, phase(node, admins, deal(acks, CONNECTIONS)).0]
}

/// How many members the queue's `ty` set holds on `node`.
fn card(node: &Server, queue: &str, ty: &str) -> usize {
    cmd("ZCARD")
        .arg(set_key(queue, ty))
        .query(&mut node.conn())
        .expect("zcard")
}

/// One entry of an `EMQ.OUTBOX` page: child id, parent queue, parent id, outcome, policy, data.
type Entry = [Vec<u8>; 6];

/// An `EMQ.OUTBOX` reply: the next cursor and the page's entries.
fn outbox_page(reply: &[u8]) -> (Vec<u8>, Vec<Entry>) {
    let mut pos = 0;
    assert_eq!(header(reply, &mut pos), (b'*', 2), "[cursor, entries]");
    let cursor = bulk(reply, &mut pos).to_vec();
    let (kind, n) = header(reply, &mut pos);
    assert_eq!(kind, b'*', "the entries");
    let entries = (0..n)
        .map(|_| {
            assert_eq!(header(reply, &mut pos), (b'*', 6), "an entry of six");
            std::array::from_fn(|_| bulk(reply, &mut pos).to_vec())
        })
        .collect();
    (cursor, entries)
}

/// A worker's delivery of the child queue's outbox: its pages read with `EMQ.OUTBOX` on the
/// children's node (one client, cursor by cursor), each entry's `EMQ.HANDOVER` on the parents'
/// node, then its `EMQ.DELIVERED` on the children's; every hand-over counted and removed.
fn deliver(site: &Site, admins: &mut [Connection], parked: usize) -> Step {
    let queue = site.child_queue.as_bytes();
    let sweep_queue = site.child_queue.clone();
    let sweep = move |stream: &mut TcpStream, inbox: &mut Vec<u8>| {
        let mut entries = Vec::new();
        let mut cursor = b"0".to_vec();
        let mut reply = Vec::new();
        loop {
            let mut page = Vec::new();
            encode(
                &mut page,
                &[
                    b"EMQ.OUTBOX",
                    sweep_queue.as_bytes(),
                    b"CURSOR",
                    &cursor,
                    b"COUNT",
                    SWEEP,
                ],
            );
            stream.write_all(&page).expect("write");
            reply.clear();
            read_replies(stream, inbox, 1, Some(&mut reply));
            let (next, found) = outbox_page(&reply[0]);
            entries.extend(found);
            if next == b"0" {
                return entries;
            }
            cursor = next;
        }
    };
    let (mut step, mut swept) = measured(site.children, admins, vec![sweep]);
    let entries = swept.pop().unwrap_or_default();
    assert_eq!(entries.len(), parked, "every hand-over parked");
    let handovers = entries
        .iter()
        .map(|[child, pq, pid, outcome, policy, data]| {
            let mut buf = Vec::new();
            encode(
                &mut buf,
                &[
                    b"EMQ.HANDOVER",
                    pq,
                    pid,
                    queue,
                    child,
                    outcome,
                    policy,
                    data,
                ],
            );
            buf
        })
        .collect();
    let (s, replies) = phase(site.parents, admins, deal(handovers, CONNECTIONS));
    step += s;
    for reply in &replies {
        assert_eq!(reply, b"$7\r\ncounted\r\n", "each hand-over counted once");
    }
    let delivered = entries
        .iter()
        .map(|[child, pq, pid, ..]| {
            let mut buf = Vec::new();
            encode(&mut buf, &[b"EMQ.DELIVERED", queue, child, pq, pid]);
            buf
        })
        .collect();
    let (s, replies) = phase(site.children, admins, deal(delivered, CONNECTIONS));
    step += s;
    for reply in &replies {
        assert_eq!(reply, b":1\r\n", "each entry removed");
    }
    step
}

/// The whole life of `flows` flows' jobs on `site`, as a flow when `flow` or as independent
/// jobs in the same queues otherwise, ids from `base`: each phase's figures (no delivery for
/// independent jobs or on one server).
fn life(site: &Site, flows: usize, base: u64, flow: bool) -> [Step; PHASES] {
    let mut admins = site.admins();
    for con in admins.iter_mut() {
        fresh(con);
    }
    let child_queue = site.child_queue.as_str();
    let id = |f: usize, k: usize| job_id(base + (f * FLOW + k) as u64 + 1);
    let mut steps = [Step::default(); PHASES];

    // Enqueue: the parents (with their adoptions across primaries) on theirs, then the
    // children on theirs.
    let children_of = CHILDREN.to_string();
    // A parent's adoptions follow it on the same client: whole flows are dealt out.
    let mut on_parents = vec![Vec::new(); CONNECTIONS];
    let mut on_children = Vec::new();
    for f in 0..flows {
        let share = &mut on_parents[f % CONNECTIONS];
        let pid = id(f, 0);
        let mut buf = Vec::new();
        let mut args: Vec<&[u8]> =
            vec![b"EMQ.ENQUEUE", PARENTS.as_bytes(), pid.as_bytes(), PAYLOAD];
        if flow {
            args.extend([b"CHILDREN".as_slice(), children_of.as_bytes()]);
        }
        encode(&mut buf, &args);
        share.push(buf);
        for k in 1..=CHILDREN {
            let cid = id(f, k);
            if flow && site.cross() {
                let mut buf = Vec::new();
                encode(
                    &mut buf,
                    &[
                        b"EMQ.ADOPT",
                        PARENTS.as_bytes(),
                        pid.as_bytes(),
                        child_queue.as_bytes(),
                        cid.as_bytes(),
                    ],
                );
                share.push(buf);
            }
            let mut buf = Vec::new();
            let mut args: Vec<&[u8]> = vec![
                b"EMQ.ENQUEUE",
                child_queue.as_bytes(),
                cid.as_bytes(),
                PAYLOAD,
            ];
            if flow {
                args.extend([b"PARENT".as_slice(), PARENTS.as_bytes(), pid.as_bytes()]);
            }
            encode(&mut buf, &args);
            on_children.push(buf);
        }
    }
    steps[0] = phase(site.parents, &mut admins, on_parents).0;
    steps[1] = phase(site.children, &mut admins, deal(on_children, CONNECTIONS)).0;
    let parents_wait = if flow { "waiting" } else { "pending" };
    assert_eq!(card(site.parents, PARENTS, parents_wait), flows);
    assert_eq!(
        card(site.children, child_queue, "pending"),
        flows * CHILDREN
    );

    [steps[2], steps[3]] = claim_and_ack(site.children, &mut admins, child_queue, flows * CHILDREN);
    if flow && site.cross() {
        steps[4] = deliver(site, &mut admins, flows * CHILDREN);
    }
    assert_eq!(
        card(site.parents, PARENTS, "waiting"),
        0,
        "every parent released"
    );
    assert_eq!(card(site.parents, PARENTS, "pending"), flows);
    let [claims, acks] = claim_and_ack(site.parents, &mut admins, PARENTS, flows);
    steps[5] = claims;
    steps[5] += acks;

    for (node, queue) in [(site.parents, PARENTS), (site.children, child_queue)] {
        for set in ["pending", "active", "waiting", "outbox"] {
            let left: usize = cmd("EXISTS")
                .arg(set_key(queue, set))
                .query(&mut node.conn())
                .expect("exists");
            assert_eq!(left, 0, "nothing left in {queue}'s {set}");
        }
    }
    // Every command of the life reached the server (the outbox's pages besides).
    let calls: f64 = steps.iter().map(|s| s.calls).sum();
    let adopts = if flow && site.cross() { CHILDREN } else { 0 };
    let delivery = if flow && site.cross() {
        2 * CHILDREN
    } else {
        0
    };
    assert!(calls >= (flows * (3 * FLOW + adopts + delivery)) as f64);
    steps
}

/// A round's figures: independent jobs, then the flow, each phase a [`Sample`] per job of the
/// flow's 11 (the whole life last), with its commands a job.
type Run = [(Sample, f64); PHASES + 1];

/// A run's samples: each phase's and the whole life's, per job.
fn per_job(steps: [Step; PHASES], jobs: usize) -> Run {
    let mut whole = Step::default();
    for s in steps {
        whole += s;
    }
    let each = |s: &Step| {
        (
            sample(jobs, s.usec, s.cpu, s.elapsed.max(f64::MIN_POSITIVE)),
            s.calls / jobs as f64,
        )
    };
    std::array::from_fn(|i| each(steps.get(i).unwrap_or(&whole)))
}

/// A queue owned by another primary than the parents' queue: the children's on the cluster.
fn queue_elsewhere(cluster: &Cluster) -> String {
    let parents = cluster.owner(slot_of(PARENTS)).port;
    (0..10_000)
        .map(|i| format!("kids{i}"))
        .find(|q| cluster.owner(slot_of(q)).port != parents)
        .expect("a queue on another primary")
}

/// The figures of `rounds` rounds: `[one server, cluster]` × `[independent, flow]`, each a run
/// per round.
type Rounds = [[Vec<Run>; 2]; 2];

/// The flows table: `rounds` rounds of `jobs` jobs (as whole flows of 11), each on one server
/// (`server`) and on a cluster of 3 primaries, the independent jobs and the flow back to back.
pub fn table(md: &mut String, server: &Server, rounds: usize, jobs: usize) {
    let flows = (jobs / FLOW).max(1);
    let jobs = flows * FLOW;
    let cluster = Cluster::start(3, 0);
    let child_queue = queue_elsewhere(&cluster);
    let sites = [
        Site {
            parents: server,
            children: server,
            child_queue: "kids".to_string(),
        },
        Site {
            parents: cluster.node(cluster.owner(slot_of(PARENTS)).port),
            children: cluster.node(cluster.owner(slot_of(&child_queue)).port),
            child_queue: child_queue.clone(),
        },
    ];
    let mut figures: Rounds = Default::default();
    for round in 0..rounds {
        let base = (round as u64 + 1) << 40;
        for (s, site) in sites.iter().enumerate() {
            for (v, flow) in [false, true].into_iter().enumerate() {
                let run = per_job(life(site, flows, base, flow), jobs);
                eprintln!(
                    "         flows, {:<8} {:<11} {}",
                    ["one node", "cluster"][s],
                    ["independent", "flow"][v],
                    run[PHASES].0
                );
                figures[s][v].push(run);
            }
        }
        eprintln!("done: flows round {}", round + 1);
    }
    write(md, &figures, rounds, flows, &child_queue);
}

/// The rows of the table: its deployment, the phase, and the phase's name.
const ROWS: [(usize, usize, &str); 13] = [
    (0, PHASES, "one server: the whole life"),
    (0, 0, "one server: the parent enqueued (`CHILDREN 10`)"),
    (0, 1, "one server: the children enqueued (`PARENT`)"),
    (0, 2, "one server: the children claimed"),
    (0, 3, "one server: the children acked (each hands over in its call)"),
    (0, 5, "one server: the released parent claimed and acked"),
    (1, PHASES, "3 primaries, children on another: the whole life"),
    (1, 0, "3 primaries: the parent enqueued, then 10 `EMQ.ADOPT` on its primary"),
    (1, 1, "3 primaries: the children enqueued (`PARENT`) on theirs"),
    (1, 2, "3 primaries: the children claimed"),
    (1, 3, "3 primaries: the children acked (each parks its hand-over)"),
    (1, 4, "3 primaries: the hand-overs delivered (`EMQ.OUTBOX` `COUNT 100`, `EMQ.HANDOVER`, `EMQ.DELIVERED`)"),
    (1, 5, "3 primaries: the released parent claimed and acked"),
];

/// The flows section: its heading, what it measures, its table and the flow across primaries
/// against the flow on one server.
fn write(md: &mut String, figures: &Rounds, rounds: usize, flows: usize, child_queue: &str) {
    let jobs = flows * FLOW;
    let _ = writeln!(
        md,
        "## A flow's whole life: 1 parent and 10 children against 11 independent jobs\n\n{flows} flows ({jobs} jobs) go through their whole life by {CONNECTIONS} clients at pipeline depth {DEPTH}, on an empty server each run, each phase timed apart: every parent enqueued with `CHILDREN 10` in queue `{PARENTS}`, then its 10 children with `PARENT {PARENTS} <id>` in another queue; each child claimed with `EMQ.CLAIM COUNT 1`, then acked (the last ack of a flow moves its parent to `pending`); each parent claimed and acked. Beside each flow run, the same {jobs} jobs in the same queues with neither option, their whole life the same way. On one server every child's ack hands over to its parent in the same call. On a cluster of 3 primaries (no replicas) the children's queue (`{child_queue}`) is in a slot another primary owns: each child is registered with `EMQ.ADOPT` on the parent's primary (on the same client, right after its parent) before it is enqueued, each ack parks its hand-over in the children queue's outbox, and a worker's delivery follows: the outbox read with `EMQ.OUTBOX CURSOR <c> COUNT 100` on one client, then `EMQ.HANDOVER` of each entry on the parent's primary and `EMQ.DELIVERED` on the child's, pipelined like the rest. Main-thread CPU (`INFO cpu`) and `commandstats` time are summed over the primaries a run involves (on the cluster, the parents' and the children's, over every phase), and commands a job are the `EMQ.*` calls of `commandstats`; every figure is per job of the run (a phase's too, so the phases add up to the whole life). Medians (min–max) over {rounds} rounds; flow / independent is the median of the per-round ratios. Each run checks that every job went through once, every hand-over was counted and removed, and nothing is left pending, active, waiting or in an outbox.\n"
    );
    let _ = writeln!(md, "| workload | main-thread CPU µs/job, 11 independent jobs | a flow of 1 + 10 | flow / independent | commandstats µs/job, independent | flow | flow / independent | commands a job, independent | flow |");
    let _ = writeln!(md, "|---|---|---|---|---|---|---|---|---|");
    type Figure = fn(&(Sample, f64)) -> f64;
    let figures_of: [Figure; 2] = [|x| x.0.cpu_us_per_job, |x| x.0.server_us_per_job];
    for (site, at, name) in ROWS {
        let [independent, flow] = &figures[site];
        let mut row = format!("| {name} |");
        for f in figures_of {
            let of = |runs: &[Run]| runs.iter().map(|r| f(&r[at])).collect::<Vec<f64>>();
            let (a, b) = (of(independent), of(flow));
            if a.iter().all(|v| *v == 0.0) {
                let _ = write!(row, " — | {} | — |", spread(b, 2));
                continue;
            }
            let ratios = b.iter().zip(&a).map(|(b, a)| b / a).collect();
            let _ = write!(
                row,
                " {} | {} | {} |",
                spread(a, 2),
                spread(b, 2),
                ratio_spread(ratios, 2)
            );
        }
        for runs in [independent, flow] {
            match median(runs.iter().map(|r| r[at].1).collect()).0 {
                0.0 => row.push_str(" — |"),
                calls => {
                    let _ = write!(row, " {calls:.2} |");
                }
            }
        }
        let _ = writeln!(md, "{row}");
    }
    let whole = |s: usize| -> Vec<f64> {
        figures[s][1]
            .iter()
            .map(|r| r[PHASES].0.cpu_us_per_job)
            .collect()
    };
    let across = ratio_spread(
        whole(1).iter().zip(whole(0)).map(|(c, o)| c / o).collect(),
        2,
    );
    let _ = writeln!(
        md,
        "\nThe flow across primaries, by main-thread CPU per job summed over both, against the flow on one server: {across} (the median of the per-round ratios).\n"
    );
}
