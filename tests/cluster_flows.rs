//! Flows on a Valkey Cluster (docs/flows.md): a parent and its children owned by different
//! primaries. A finished child's hand-over waits in its queue's outbox until a worker
//! delivers it (`EMQ.OUTBOX`, `EMQ.HANDOVER`, `EMQ.DELIVERED`); the parent counts each child
//! exactly once whatever step a worker dies at, and through slot migrations of either side.
//! Queues that share a slot hand over in the child's own call.

use emq_harness as support;

use redis::cluster::ClusterConnection;
use redis::{cmd, Value};
use support::cluster::Cluster;
use support::cluster_load::*;
use support::flow::hand_over_entry;
use support::*;

/// A queue name of the same slot as `queue`.
fn queue_in_slot_of(queue: &str) -> String {
    (0..1_000_000)
        .map(|i| format!("s{i}"))
        .find(|q| slot_of(q) == slot_of(queue))
        .expect("a queue of that slot")
}

fn parent(con: &mut ClusterConnection, q: &str, id: &str, n: usize) {
    let r: i64 = cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg("parent")
        .arg("CHILDREN")
        .arg(n)
        .query(con)
        .expect("parent");
    assert_eq!(r, 1);
}

/// Registers the child with its parent's node, then enqueues it on its own: what a client does
/// for a parent out of reach.
fn child(con: &mut ClusterConnection, q: &str, id: &str, pq: &str, pid: &str) {
    let adopted: i64 = cmd("EMQ.ADOPT")
        .arg(pq)
        .arg(pid)
        .arg(q)
        .arg(id)
        .query(con)
        .expect("adopt");
    assert_eq!(adopted, 1);
    let r: i64 = cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg("child")
        .arg("PARENT")
        .arg(pq)
        .arg(pid)
        .query(con)
        .expect("child");
    assert_eq!(r, 1);
}

/// Claims and acks every job of `q`, with its id as its result.
fn work(con: &mut ClusterConnection, q: &str) -> usize {
    let jobs = claim(con, q, &["COUNT", "100"]).expect("claim");
    for (id, _, token) in &jobs {
        let _: Value = cmd("EMQ.ACK")
            .arg(q)
            .arg(id)
            .arg(token)
            .arg("RESULT")
            .arg(id)
            .query(con)
            .expect("ack");
    }
    jobs.len()
}

/// One outbox entry: child id, parent queue, parent id, outcome, policy, data.
type Entry = Vec<Vec<u8>>;

fn outbox(con: &mut ClusterConnection, q: &str) -> Vec<Entry> {
    let (_, entries): (String, Vec<Entry>) = cmd("EMQ.OUTBOX").arg(q).query(con).expect("outbox");
    entries
}

/// A worker's sweep of `q`'s outbox: each entry handed over, then removed.
fn sweep(con: &mut ClusterConnection, q: &str) -> Vec<String> {
    outbox(con, q)
        .iter()
        .map(|e| {
            let answer = hand_over_entry(con, q, e);
            assert_eq!(support::flow::delivered(con, q, e, false), 1);
            answer
        })
        .collect()
}

fn state(cluster: &Cluster, q: &str, id: &str) -> Option<String> {
    let owner = cluster.owner(slot_of(q));
    job_state(&mut cluster.node(owner.port).conn(), q, id)
}

fn field(cluster: &Cluster, q: &str, id: &str, f: &str) -> Option<String> {
    let owner = cluster.owner(slot_of(q));
    row_field(&mut cluster.node(owner.port).conn(), q, id, f)
}

#[test]
fn a_flow_across_primaries_runs_its_parent_once_after_every_child() {
    let cluster = Cluster::start(3, 0);
    let mut con = cluster.client();
    let albums = "albums";
    let thumbs = queue_elsewhere(&cluster, "thumbs", &[albums]);
    let meta = queue_elsewhere(&cluster, "meta", &[albums, &thumbs]);
    parent(&mut con, albums, &job_id(1), 3);
    child(&mut con, &thumbs, &job_id(2), albums, &job_id(1));
    child(&mut con, &thumbs, &job_id(3), albums, &job_id(1));
    child(&mut con, &meta, &job_id(4), albums, &job_id(1));
    // Registered before, so the enqueue's own registration finds it: adopting again is 0.
    let again: i64 = cmd("EMQ.ADOPT")
        .arg(albums)
        .arg(job_id(1))
        .arg(&thumbs)
        .arg(job_id(2))
        .query(&mut con)
        .expect("adopt");
    assert_eq!(again, 0);
    assert_eq!(work(&mut con, &thumbs) + work(&mut con, &meta), 3);
    assert_eq!(
        state(&cluster, albums, &job_id(1)).as_deref(),
        Some("waiting"),
        "the hand-overs wait in the children's outboxes"
    );
    assert_eq!(outbox(&mut con, &thumbs).len(), 2);
    assert_eq!(sweep(&mut con, &thumbs), ["counted", "counted"]);
    assert_eq!(
        state(&cluster, albums, &job_id(1)).as_deref(),
        Some("waiting")
    );
    assert_eq!(sweep(&mut con, &meta), ["counted"]);
    assert_eq!(
        state(&cluster, albums, &job_id(1)).as_deref(),
        Some("pending")
    );
    assert_eq!(
        field(&cluster, albums, &job_id(1), "finished").as_deref(),
        Some("3")
    );
    let (_, kids): (String, Vec<Vec<String>>) = cmd("EMQ.CHILDREN")
        .arg(albums)
        .arg(job_id(1))
        .query(&mut con)
        .expect("children");
    assert_eq!(kids.len(), 3);
    assert!(
        kids.iter().all(|k| k[2] == "acked" && k[3] == k[1]),
        "{kids:?}"
    );
    assert_eq!(work(&mut con, albums), 1, "the parent runs once");
    assert_eq!(work(&mut con, albums), 0);
}

#[test]
fn a_worker_killed_at_either_step_of_a_hand_over_delays_the_parent_and_never_double_counts() {
    let cluster = Cluster::start(3, 0);
    let mut con = cluster.client();
    let p = "parents";
    let c = queue_elsewhere(&cluster, "kids", &[p]);
    parent(&mut con, p, &job_id(1), 2);
    child(&mut con, &c, &job_id(2), p, &job_id(1));
    child(&mut con, &c, &job_id(3), p, &job_id(1));
    work(&mut con, &c);
    let entries = outbox(&mut con, &c);
    assert_eq!(entries.len(), 2);
    // Killed after the ack, before its hand-over: the entry stays for the next sweep. Killed
    // after the hand-over, before the outbox heard of it: the next sweep delivers it again,
    // and the parent answers that it counted it before.
    assert_eq!(hand_over_entry(&mut con, &c, &entries[0]), "counted");
    assert_eq!(
        field(&cluster, p, &job_id(1), "finished").as_deref(),
        Some("1")
    );
    assert_eq!(outbox(&mut con, &c).len(), 2, "nothing delivered yet");
    let mut answers = sweep(&mut con, &c);
    answers.sort();
    assert_eq!(answers, ["counted", "duplicate"]);
    assert_eq!(
        field(&cluster, p, &job_id(1), "finished").as_deref(),
        Some("2")
    );
    assert_eq!(state(&cluster, p, &job_id(1)).as_deref(), Some("pending"));
    assert!(outbox(&mut con, &c).is_empty());
    // Delivering an entry again once it is gone changes nothing.
    assert_eq!(hand_over_entry(&mut con, &c, &entries[1]), "duplicate");
    assert_eq!(
        support::flow::delivered(&mut con, &c, &entries[1], false),
        0
    );
}

#[test]
fn a_slot_migration_between_a_childs_ack_and_its_hand_over_loses_nothing() {
    let cluster = Cluster::start(3, 0);
    let mut con = cluster.client();
    let p = "migrating-parents";
    let c = queue_elsewhere(&cluster, "migrating-kids", &[p]);
    parent(&mut con, p, &job_id(1), 2);
    child(&mut con, &c, &job_id(2), p, &job_id(1));
    child(&mut con, &c, &job_id(3), p, &job_id(1));
    work(&mut con, &c);
    assert_eq!(outbox(&mut con, &c).len(), 2);
    // The child's slot moves, outbox and all, to the third primary.
    let from = cluster.owner(slot_of(&c));
    let third = cluster
        .topology()
        .into_iter()
        .find(|n| n.primary && n.port != from.port && n.port != cluster.owner(slot_of(p)).port)
        .expect("a third primary");
    assert!(cluster.move_slot(slot_of(&c), &from, &third, || {}) > 0);
    let mut con = cluster.client();
    let entries = outbox(&mut con, &c);
    assert_eq!(entries.len(), 2, "the outbox moved with its slot");
    assert_eq!(hand_over_entry(&mut con, &c, &entries[0]), "counted");
    // Then the parent's slot moves, between one child's hand-over and the other's.
    let from = cluster.owner(slot_of(p));
    let to = cluster.another_primary(&from);
    assert!(cluster.move_slot(slot_of(p), &from, &to, || {}) > 0);
    let mut con = cluster.client();
    let mut answers = sweep(&mut con, &c);
    answers.sort();
    assert_eq!(answers, ["counted", "duplicate"]);
    assert_eq!(state(&cluster, p, &job_id(1)).as_deref(), Some("pending"));
    assert_eq!(
        field(&cluster, p, &job_id(1), "finished").as_deref(),
        Some("2")
    );
}

#[test]
fn queues_that_share_a_slot_hand_over_in_the_childs_own_call() {
    let cluster = Cluster::start(3, 0);
    let mut con = cluster.client();
    let p = "shared-slot";
    let c = queue_in_slot_of(p);
    parent(&mut con, p, &job_id(1), 1);
    // In reach: the enqueue registers the child with its parent itself, no EMQ.ADOPT first.
    let r: i64 = cmd("EMQ.ENQUEUE")
        .arg(&c)
        .arg(job_id(2))
        .arg("x")
        .arg("PARENT")
        .arg(p)
        .arg(job_id(1))
        .query(&mut con)
        .expect("child");
    assert_eq!(r, 1);
    work(&mut con, &c);
    assert!(outbox(&mut con, &c).is_empty());
    assert_eq!(state(&cluster, p, &job_id(1)).as_deref(), Some("pending"));
    // Out of reach, the enqueue cannot check the parent: an unknown parent is only found at
    // hand-over, where it makes the child an orphan.
    let far = queue_elsewhere(&cluster, "far", &[&c]);
    let r: i64 = cmd("EMQ.ENQUEUE")
        .arg(&c)
        .arg(job_id(3))
        .arg("x")
        .arg("PARENT")
        .arg(&far)
        .arg(job_id(9))
        .query(&mut con)
        .expect("child of an unknown parent");
    assert_eq!(r, 1);
    work(&mut con, &c);
    let entries = outbox(&mut con, &c);
    assert_eq!(hand_over_entry(&mut con, &c, &entries[0]), "orphan");
    let removed: i64 = cmd("EMQ.DELIVERED")
        .arg(&c)
        .arg(&entries[0][0])
        .arg(&entries[0][1])
        .arg(&entries[0][2])
        .arg("ORPHAN")
        .query(&mut con)
        .expect("delivered");
    assert_eq!(removed, 1);
    assert_eq!(
        field(&cluster, &c, &job_id(3), "orphan"),
        Some(format!("{far} {}", job_id(9)))
    );
}

#[test]
fn a_child_whose_outbox_is_another_type_is_refused_and_the_timer_counts_what_it_loses() {
    let cluster = Cluster::start_with(3, 0, &[("emq.max-attempts", "1")]);
    let mut con = cluster.client();
    let p = "parents";
    let c = queue_elsewhere(&cluster, "kids", &[p]);
    parent(&mut con, p, &job_id(1), 2);
    child(&mut con, &c, &job_id(2), p, &job_id(1));
    child(&mut con, &c, &job_id(3), p, &job_id(1));
    let slow = claim(&mut con, &c, &["COUNT", "1", "LEASE", "60000"]).expect("claim");
    let fast = claim(&mut con, &c, &["COUNT", "1", "LEASE", "1"]).expect("claim");
    assert_eq!((slow.len(), fast.len()), (1, 1));
    // The children's outbox holds another type: a hand-over to the parent's primary has
    // nowhere to wait.
    let _: () = cmd("SET")
        .arg(format!("emq:{{{c}}}:outbox"))
        .arg("x")
        .query(&mut con)
        .expect("set");
    let (id, _, token) = &slow[0];
    let refused = cmd("EMQ.ACK")
        .arg(&c)
        .arg(id)
        .arg(token)
        .query::<Value>(&mut con)
        .expect_err("refused");
    assert!(refused.to_string().contains("WRONGTYPE"), "{refused}");
    assert_eq!(
        state(&cluster, &c, id).as_deref(),
        Some("active"),
        "nothing written"
    );
    // The timer buries the other child when its lease runs out: it is never refused, and
    // counts the hand-over it could not keep.
    let owner = cluster.owner(slot_of(&c));
    let mut node = cluster.node(owner.port).conn();
    let (buried, _, _) = &fast[0];
    while state(&cluster, &c, buried).as_deref() != Some("dead") {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert_eq!(info_int(&mut node, "emq", "emq_handovers_lost"), 1);
    assert_eq!(state(&cluster, p, &job_id(1)).as_deref(), Some("waiting"));
}
