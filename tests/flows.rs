//! Flows on one server (docs/flows.md): a parent waits in `waiting` until its children finish,
//! whatever queues they are in, and runs once; its children's outcomes and results are kept in
//! its row; a dead or cancelled child fails it or counts, as its policy says; cancelling it
//! cancels its children that have not started. (On a cluster: tests/cluster_flows.rs.)

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Value};
use support::flow::*;
use support::*;

fn waiting(con: &mut Connection, q: &str) -> i64 {
    stats(con, q)["waiting"]
}

#[test]
fn a_parent_waits_for_every_child_then_runs_once_with_their_results() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let (albums, thumbs, meta) = ("albums", "thumbs", "meta");
    parent(&mut con, albums, &job_id(1), 3);
    assert_eq!(
        job_state(&mut con, albums, &job_id(1)).as_deref(),
        Some("waiting")
    );
    assert_eq!(waiting(&mut con, albums), 1);
    assert_eq!(
        claim(&mut con, albums, &[]),
        Some(vec![]),
        "a waiting parent is not claimable"
    );
    assert_eq!(
        child(&mut con, thumbs, &job_id(2), albums, &job_id(1), "FAIL"),
        1
    );
    assert_eq!(
        child(&mut con, thumbs, &job_id(3), albums, &job_id(1), "FAIL"),
        1
    );
    assert_eq!(
        child(&mut con, meta, &job_id(4), albums, &job_id(1), "FAIL"),
        1
    );
    // The same child again is a duplicate and counts once; a fourth is refused, writing nothing.
    assert_eq!(
        child(&mut con, thumbs, &job_id(2), albums, &job_id(1), "FAIL"),
        0
    );
    let err = expect_err(
        &mut con,
        cmd("EMQ.ENQUEUE")
            .arg(thumbs)
            .arg(job_id(5))
            .arg("x")
            .arg("PARENT")
            .arg(albums)
            .arg(job_id(1)),
    );
    assert!(err.starts_with("EMQPARENT parent albums"), "{err}");
    assert!(err.contains("has all its 3 children"), "{err}");
    assert_eq!(
        job_state(&mut con, thumbs, &job_id(5)),
        None,
        "nothing written"
    );
    assert_eq!(
        row_field(&mut con, albums, &job_id(1), "adopted").as_deref(),
        Some("3")
    );

    for (q, id) in [(thumbs, job_id(2)), (thumbs, job_id(3))] {
        let token = claim_one(&mut con, q, &id);
        ack(&mut con, q, &id, token, &format!("done {id}"));
        assert_eq!(
            job_state(&mut con, albums, &job_id(1)).as_deref(),
            Some("waiting")
        );
    }
    let token = claim_one(&mut con, meta, &job_id(4));
    ack(&mut con, meta, &job_id(4), token, "m");
    assert_eq!(
        job_state(&mut con, albums, &job_id(1)).as_deref(),
        Some("pending")
    );
    assert_eq!(waiting(&mut con, albums), 0);
    assert_eq!(
        row_field(&mut con, albums, &job_id(1), "finished").as_deref(),
        Some("3")
    );
    assert_eq!(
        children(&mut con, albums, &job_id(1)),
        vec![
            (meta.into(), job_id(4), "acked".into(), "m".into()),
            (
                thumbs.into(),
                job_id(2),
                "acked".into(),
                format!("done {}", job_id(2))
            ),
            (
                thumbs.into(),
                job_id(3),
                "acked".into(),
                format!("done {}", job_id(3))
            ),
        ]
    );
    // It runs once: one claim, and no second release.
    let token = claim_one(&mut con, albums, &job_id(1));
    ack(&mut con, albums, &job_id(1), token, "published");
    assert_eq!(claim(&mut con, albums, &[]), Some(vec![]));
    // A retried flow after its parent ran: each child is a duplicate, and nothing is refused.
    assert_eq!(
        child(&mut con, thumbs, &job_id(2), albums, &job_id(1), "FAIL"),
        0
    );
    assert_eq!(info_int(&mut con, "emq", "emq_released"), 1);
    assert_eq!(info_int(&mut con, "emq", "emq_handed_over"), 3);
    assert_eq!(
        info_int(&mut con, "emq", "emq_parked"),
        0,
        "one server reaches every parent"
    );
}

#[test]
fn parents_are_refused_by_name_and_a_refusal_writes_nothing() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "p", &job_id(1), "not a parent");
    let keys_before: i64 = cmd("DBSIZE").query(&mut con).expect("dbsize");
    for (parent, why) in [(job_id(9), "does not exist"), (job_id(1), "is not waiting")] {
        let err = expect_err(
            &mut con,
            cmd("EMQ.ENQUEUE")
                .arg("c")
                .arg(job_id(2))
                .arg("x")
                .arg("PARENT")
                .arg("p")
                .arg(&parent),
        );
        assert!(err.starts_with("EMQPARENT") && err.contains(why), "{err}");
    }
    let keys_after: i64 = cmd("DBSIZE").query(&mut con).expect("dbsize");
    assert_eq!(keys_before, keys_after);
    for (options, what) in [
        (vec!["CHILDREN", "0"], "CHILDREN"),
        (vec!["CHILDREN", "100001"], "CHILDREN"),
        (vec!["PARENT", "p"], "lacks"),
        (
            vec!["PARENT", "p", "JOB0KHTOWnGLuC", "ON-FAIL", "MAYBE"],
            "ON-FAIL",
        ),
        (
            vec![
                "PARENT",
                "p",
                "JOB0KHTOWnGLuC",
                "PARENT",
                "p",
                "JOB0KHTOWnGLuC",
            ],
            "twice",
        ),
        (vec!["PARENT", "p{x", "JOB0KHTOWnGLuC"], "EMQQUEUE"),
        (vec!["PARENT", "p", "bad"], "EMQID"),
    ] {
        let mut c = cmd("EMQ.ENQUEUE");
        c.arg("c").arg(job_id(3)).arg("x");
        for o in &options {
            c.arg(*o);
        }
        let err = expect_err(&mut con, &c);
        assert!(err.contains(what), "{options:?}: {err}");
    }
    let mut c = cmd("EMQ.ENQUEUE");
    c.arg("c").arg(job_id(3)).arg("x");
    for i in 0..17 {
        c.arg("PARENT").arg("p").arg(job_id(100 + i));
    }
    assert!(expect_err(&mut con, &c).contains("at most 16 parents"));
}

#[test]
fn a_dead_child_fails_its_parent_unless_ignored_and_names_itself() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    // FAIL: the parent dies at once, naming the child, and never runs.
    let jobs = failed_by_its_first_child(&mut con);
    assert_eq!(
        row_field(&mut con, "p", &job_id(1), "error"),
        Some(format!("child c {} dead: no disk", job_id(2)))
    );
    // The other child's end is still recorded, and changes nothing.
    ack(&mut con, "c", &job_id(3), jobs[1].2, "late");
    assert_eq!(
        job_state(&mut con, "p", &job_id(1)).as_deref(),
        Some("dead")
    );
    assert_eq!(
        row_field(&mut con, "p", &job_id(1), "finished").as_deref(),
        Some("2")
    );

    // IGNORE: it counts, marked as failed, and the parent runs.
    parent(&mut con, "p", &job_id(11), 2);
    child(&mut con, "c", &job_id(12), "p", &job_id(11), "IGNORE");
    child(&mut con, "c", &job_id(13), "p", &job_id(11), "IGNORE");
    let jobs = claim(&mut con, "c", &["COUNT", "2"]).expect("jobs");
    let _: Value = cmd("EMQ.FAIL")
        .arg("c")
        .arg(job_id(12))
        .arg(jobs[0].2)
        .arg("ERROR")
        .arg("bad row")
        .query(&mut con)
        .expect("fail");
    ack(&mut con, "c", &job_id(13), jobs[1].2, "ok");
    assert_eq!(
        job_state(&mut con, "p", &job_id(11)).as_deref(),
        Some("pending")
    );
    let kids = children(&mut con, "p", &job_id(11));
    assert_eq!(kids[0].2, "dead");
    assert_eq!(kids[0].3, "bad row");
    assert_eq!(kids[1].2, "acked");
}

#[test]
fn a_lease_run_out_on_the_last_attempt_fails_the_parent_from_the_timer() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    parent(&mut con, "p", &job_id(1), 1);
    child(&mut con, "c", &job_id(2), "p", &job_id(1), "FAIL");
    claim(&mut con, "c", &["LEASE", "1"]).expect("claimed");
    assert!(
        wait_until(Duration::from_secs(10), || {
            job_state(&mut con, "p", &job_id(1)).as_deref() == Some("dead")
        }),
        "the timer buried the child, and the child its parent"
    );
    assert_eq!(
        row_field(&mut con, "p", &job_id(1), "error"),
        Some(format!("child c {} dead: lease expired", job_id(2)))
    );
}

#[test]
fn a_chain_runs_in_order_and_a_job_may_have_two_parents() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    // c <- b <- a: a runs, then b, then c.
    parent(&mut con, "c", &job_id(3), 1);
    assert_eq!(
        enqueue_with(
            &mut con,
            "b",
            &job_id(2),
            "b",
            &["CHILDREN", "1", "PARENT", "c", &job_id(3)]
        ),
        1
    );
    child(&mut con, "a", &job_id(1), "b", &job_id(2), "FAIL");
    let mut order = Vec::new();
    for _ in 0..3 {
        let ready: Vec<&str> = ["a", "b", "c"]
            .into_iter()
            .filter(|q| stats(&mut con, q)["pending"] > 0)
            .collect();
        assert_eq!(ready.len(), 1, "one link is ready at a time: {ready:?}");
        let job = claim(&mut con, ready[0], &[])
            .expect("claim")
            .pop()
            .expect("a job");
        ack(&mut con, ready[0], &job.0, job.2, ready[0]);
        order.push(ready[0]);
    }
    assert_eq!(order, ["a", "b", "c"]);

    // A graph: one job that two parents wait on.
    parent(&mut con, "x", &job_id(10), 1);
    parent(&mut con, "y", &job_id(20), 1);
    let shared = job_id(30);
    assert_eq!(
        enqueue_with(
            &mut con,
            "s",
            &shared,
            "s",
            &["PARENT", "x", &job_id(10), "PARENT", "y", &job_id(20)]
        ),
        1
    );
    assert_eq!(
        row_field(&mut con, "s", &shared, "parents"),
        Some(format!("x {} fail\ny {} fail", job_id(10), job_id(20)))
    );
    let token = claim_one(&mut con, "s", &shared);
    ack(&mut con, "s", &shared, token, "both");
    assert_eq!(
        job_state(&mut con, "x", &job_id(10)).as_deref(),
        Some("pending")
    );
    assert_eq!(
        job_state(&mut con, "y", &job_id(20)).as_deref(),
        Some("pending")
    );
}

#[test]
fn cancelling_a_waiting_parent_cancels_its_children_that_have_not_started() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    parent(&mut con, "p", &job_id(1), 3);
    // Job 2 is running: it is not cancelled, and its end later finds no parent.
    child(&mut con, "c", &job_id(2), "p", &job_id(1), "FAIL");
    let token = claim_one(&mut con, "c", &job_id(2));
    // Job 3 waits for a child of its own, job 4; job 5 is pending.
    assert_eq!(
        enqueue_with(
            &mut con,
            "c",
            &job_id(3),
            "sub",
            &["CHILDREN", "1", "PARENT", "p", &job_id(1)]
        ),
        1
    );
    child(&mut con, "d", &job_id(4), "c", &job_id(3), "FAIL");
    child(&mut con, "c", &job_id(5), "p", &job_id(1), "FAIL");
    assert_eq!(cancel(&mut con, "p", &job_id(1)), 1);
    assert_eq!(job_state(&mut con, "p", &job_id(1)), None);
    assert_eq!(
        job_state(&mut con, "c", &job_id(3)),
        None,
        "a waiting child"
    );
    assert_eq!(
        job_state(&mut con, "d", &job_id(4)),
        None,
        "its own child, in turn"
    );
    assert_eq!(
        job_state(&mut con, "c", &job_id(5)),
        None,
        "a pending child"
    );
    assert_eq!(
        job_state(&mut con, "c", &job_id(2)).as_deref(),
        Some("active")
    );
    assert_eq!(waiting(&mut con, "p") + waiting(&mut con, "c"), 0);
    ack(&mut con, "c", &job_id(2), token, "late");
    assert_eq!(
        row_field(&mut con, "c", &job_id(2), "orphan"),
        Some(format!("p {}", job_id(1))),
        "the parent it finished for was gone"
    );
}

#[test]
fn a_cancelled_child_fails_its_parent() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    parent(&mut con, "p", &job_id(1), 2);
    child(&mut con, "c", &job_id(2), "p", &job_id(1), "FAIL");
    let cancelled: i64 = cmd("EMQ.CANCEL")
        .arg("c")
        .arg(job_id(2))
        .query(&mut con)
        .expect("cancel");
    assert_eq!(cancelled, 1);
    assert_eq!(
        job_state(&mut con, "p", &job_id(1)).as_deref(),
        Some("dead")
    );
    assert_eq!(
        row_field(&mut con, "p", &job_id(1), "error"),
        Some(format!("child c {} cancelled", job_id(2)))
    );
}

#[test]
fn a_delayed_parent_is_released_to_its_due_time_and_pages_as_waiting() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    assert_eq!(
        enqueue_with(
            &mut con,
            "p",
            &job_id(1),
            "later",
            &["CHILDREN", "1", "DELAY", "600000"]
        ),
        1
    );
    let (cursor, page): (String, Vec<Value>) = cmd("EMQ.JOBS")
        .arg("p")
        .arg("waiting")
        .query(&mut con)
        .expect("jobs");
    assert_eq!((cursor.as_str(), page.len()), ("0", 1));
    child(&mut con, "c", &job_id(2), "p", &job_id(1), "FAIL");
    let token = claim_one(&mut con, "c", &job_id(2));
    ack(&mut con, "c", &job_id(2), token, "");
    assert_eq!(
        job_state(&mut con, "p", &job_id(1)).as_deref(),
        Some("scheduled")
    );
    assert!(set_score(&mut con, "p", "schedule", &job_id(1)).expect("scheduled") > now_ms() as f64);
}

#[test]
fn a_replica_and_the_aof_take_the_hand_over_as_plain_commands() {
    let (primary, replica) = primary_and_replica(Options::default());
    let mut con = primary.conn();
    let mut rcon = replica.conn();
    parent(&mut con, "p", &job_id(1), 1);
    child(&mut con, "c", &job_id(2), "p", &job_id(1), "FAIL");
    let token = claim_one(&mut con, "c", &job_id(2));
    ack(&mut con, "c", &job_id(2), token, "r");
    wait_caught_up(&mut con, &mut rcon);
    assert_eq!(
        job_state(&mut rcon, "p", &job_id(1)).as_deref(),
        Some("pending")
    );
    assert_eq!(digest(&mut con), digest(&mut rcon));
}

/// `EMQ.HANDOVER` of a child in queue `cq` to its parent in `pq`, then `WAIT 1 <ms>` on the
/// same connection: its answer and the replicas `WAIT` reported.
fn hand_over_and_wait(
    con: &mut Connection,
    pq: &str,
    parent: &str,
    cq: &str,
    child: &str,
    ms: u64,
) -> (String, i64) {
    let (answer, replicas): (String, i64) = redis::pipe()
        .cmd("EMQ.HANDOVER")
        .arg(pq)
        .arg(parent)
        .arg(cq)
        .arg(child)
        .arg("acked")
        .arg("fail")
        .arg("r")
        .cmd("WAIT")
        .arg(1)
        .arg(ms)
        .query(con)
        .expect("handover and wait");
    (answer, replicas)
}

#[test]
fn a_duplicate_hand_over_is_confirmed_by_wait_only_once_the_replicas_have_the_count() {
    let (primary, replica) = primary_and_replica(Options::default());
    let mut con = primary.conn();
    parent(&mut con, "p", &job_id(1), 1);
    let adopted: i64 = redis::cmd("EMQ.ADOPT")
        .arg("p")
        .arg(job_id(1))
        .arg("c")
        .arg(job_id(2))
        .query(&mut con)
        .expect("adopt");
    assert_eq!(adopted, 1);
    wait_caught_up(&mut con, &mut replica.conn());
    // The replica stops taking the stream: a count made now is on the primary alone.
    let pid = replica.pid().expect("the replica's pid").to_string();
    let stop = |sig: &str| {
        let done = std::process::Command::new("kill")
            .args([sig, &pid])
            .status()
            .expect("kill");
        assert!(done.success());
    };
    stop("-STOP");
    let (answer, replicas) = hand_over_and_wait(&mut con, "p", &job_id(1), "c", &job_id(2), 100);
    assert_eq!((answer.as_str(), replicas), ("counted", 0));
    // Another worker's connection, which wrote nothing before: its `WAIT` after the duplicate
    // must not confirm a count the replica does not have.
    let mut other = primary.conn();
    let (answer, replicas) = hand_over_and_wait(&mut other, "p", &job_id(1), "c", &job_id(2), 100);
    stop("-CONT");
    assert_eq!((answer.as_str(), replicas), ("duplicate", 0));
    // Once the replica caught up, the duplicate's `WAIT` confirms the count, which it holds.
    let (answer, replicas) =
        hand_over_and_wait(&mut other, "p", &job_id(1), "c", &job_id(2), 10_000);
    assert_eq!((answer.as_str(), replicas), ("duplicate", 1));
    assert_eq!(
        job_state(&mut replica.conn(), "p", &job_id(1)).as_deref(),
        Some("pending")
    );
}

#[test]
fn a_user_who_may_not_touch_the_parent_leaves_the_hand_over_in_the_outbox() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    parent(&mut admin, "p", &job_id(1), 1);
    child(&mut admin, "c", &job_id(2), "p", &job_id(1), "FAIL");
    let mut worker = user_with(&server, "cworker", &["~emq:{c}:*", "+@all"]);
    let token = claim_one(&mut worker, "c", &job_id(2));
    ack(&mut worker, "c", &job_id(2), token, "r");
    assert_eq!(
        job_state(&mut admin, "p", &job_id(1)).as_deref(),
        Some("waiting")
    );
    let (next, entries): (String, Vec<Vec<String>>) = cmd("EMQ.OUTBOX")
        .arg("c")
        .query(&mut admin)
        .expect("outbox");
    assert_eq!(next, "0");
    assert_eq!(
        entries,
        vec![vec![
            job_id(2),
            "p".into(),
            job_id(1),
            "acked".into(),
            "fail".into(),
            "r".into()
        ]]
    );
    // A worker that may reach both delivers it, once.
    let e = &entries[0];
    for want in ["counted", "duplicate"] {
        assert_eq!(hand_over_entry(&mut admin, "c", e), want);
    }
    let removed: i64 = cmd("EMQ.DELIVERED")
        .arg("c")
        .arg(&e[0])
        .arg("p")
        .arg(&e[2])
        .query(&mut admin)
        .expect("delivered");
    assert_eq!(removed, 1);
    assert_eq!(
        job_state(&mut admin, "p", &job_id(1)).as_deref(),
        Some("pending")
    );
    let (_, entries): (String, Vec<Value>) = cmd("EMQ.OUTBOX")
        .arg("c")
        .query(&mut admin)
        .expect("outbox");
    assert!(entries.is_empty());
}

#[test]
fn a_failure_deeper_than_one_call_carries_waits_in_the_outbox_and_is_never_lost() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    // A chain of 12 links, each in its own queue: the leaf's death fails every link above it.
    let links: Vec<(String, String)> = (0..12)
        .map(|i| (format!("l{i}"), job_id(100 + i)))
        .collect();
    parent(&mut con, &links[11].0, &links[11].1, 1);
    for i in (1..11).rev() {
        let (q, id) = &links[i];
        let (pq, pid) = &links[i + 1];
        assert_eq!(
            enqueue_with(
                &mut con,
                q,
                id,
                "link",
                &["CHILDREN", "1", "PARENT", pq, pid]
            ),
            1
        );
    }
    child(
        &mut con,
        &links[0].0,
        &links[0].1,
        &links[1].0,
        &links[1].1,
        "FAIL",
    );
    let token = claim_one(&mut con, &links[0].0, &links[0].1);
    let _: Value = cmd("EMQ.FAIL")
        .arg(&links[0].0)
        .arg(&links[0].1)
        .arg(token)
        .query(&mut con)
        .expect("fail");
    // Deliver what waits in outboxes, as workers would, until none is left.
    for _round in 0..20 {
        let mut found = 0;
        for (q, _) in &links {
            let (_, entries): (String, Vec<Vec<Vec<u8>>>) =
                cmd("EMQ.OUTBOX").arg(q).query(&mut con).expect("outbox");
            for e in entries {
                found += 1;
                assert_ne!(hand_over_entry(&mut con, q, &e), "orphan");
                support::flow::delivered(&mut con, q, &e, false);
            }
        }
        if found == 0 {
            break;
        }
    }
    for (q, id) in &links {
        assert_eq!(job_state(&mut con, q, id).as_deref(), Some("dead"), "{q}");
    }
    assert!(
        info_int(&mut con, "emq", "emq_parked") >= 1,
        "the deepest links went by the outbox"
    );
}

#[test]
fn a_parent_failed_in_its_own_queue_hands_over_to_a_grandparent_in_it_too() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    // Grandparent, parent and child all in one queue: the child's death fails the parent, whose
    // own death, kept on the same store in the same call, fails the grandparent.
    parent(&mut con, "q", &job_id(1), 1);
    assert_eq!(
        enqueue_with(
            &mut con,
            "q",
            &job_id(2),
            "p",
            &["CHILDREN", "1", "PARENT", "q", &job_id(1)]
        ),
        1
    );
    child(&mut con, "q", &job_id(3), "q", &job_id(2), "FAIL");
    let token = claim_one(&mut con, "q", &job_id(3));
    let _: Value = cmd("EMQ.FAIL")
        .arg("q")
        .arg(job_id(3))
        .arg(token)
        .query(&mut con)
        .expect("fail");
    assert_eq!(
        job_state(&mut con, "q", &job_id(2)).as_deref(),
        Some("dead")
    );
    assert_eq!(
        job_state(&mut con, "q", &job_id(1)).as_deref(),
        Some("dead")
    );
    assert_eq!(
        row_field(&mut con, "q", &job_id(1), "error"),
        Some(format!(
            "child q {} dead: child q {} dead",
            job_id(2),
            job_id(3)
        ))
    );
}

/// `EMQ.HANDOVER` of child `child` of `cq` to `parent` of `pq`, acked: the parent's answer.
fn hand_over(con: &mut Connection, pq: &str, parent: &str, cq: &str, child: &str) -> String {
    cmd("EMQ.HANDOVER")
        .arg(pq)
        .arg(parent)
        .arg(cq)
        .arg(child)
        .arg("acked")
        .arg("fail")
        .arg("result")
        .query(con)
        .expect("handover")
}

#[test]
fn a_hand_over_of_a_child_the_parent_never_registered_is_an_orphan() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    parent(&mut con, "albums", &job_id(1), 2);
    assert_eq!(
        child(&mut con, "thumbs", &job_id(2), "albums", &job_id(1), "FAIL"),
        1
    );
    // The parent has room for a second child, but never registered this one: it does not
    // count, however often it is delivered.
    for _ in 0..2 {
        assert_eq!(
            hand_over(&mut con, "albums", &job_id(1), "thumbs", &job_id(9)),
            "orphan"
        );
    }
    let listed: Vec<String> = children(&mut con, "albums", &job_id(1))
        .into_iter()
        .map(|(_, id, status, _)| format!("{id} {status}"))
        .collect();
    assert_eq!(listed, vec![format!("{} waiting", job_id(2))]);
    // The registered child counts; had the forged one counted, this would release the parent.
    assert_eq!(
        hand_over(&mut con, "albums", &job_id(1), "thumbs", &job_id(2)),
        "counted"
    );
    assert_eq!(
        job_state(&mut con, "albums", &job_id(1)).as_deref(),
        Some("waiting")
    );
    assert_eq!(waiting(&mut con, "albums"), 1);
}

/// Parent 1 of `p`, with children 2 and 3 of `c` (`FAIL`), both claimed: child 2's last
/// attempt fails (`no disk`), which fails the parent. The children's claims.
fn failed_by_its_first_child(con: &mut Connection) -> Vec<Job> {
    parent(con, "p", &job_id(1), 2);
    child(con, "c", &job_id(2), "p", &job_id(1), "FAIL");
    child(con, "c", &job_id(3), "p", &job_id(1), "FAIL");
    let jobs = claim(con, "c", &["COUNT", "2"]).expect("jobs");
    fail(con, "c", &job_id(2), jobs[0].2, "no disk");
    assert_eq!(job_state(con, "p", &job_id(1)).as_deref(), Some("dead"));
    jobs
}

#[test]
fn a_requeued_parent_that_a_child_failed_waits_for_the_rest_of_its_children() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let jobs = failed_by_its_first_child(&mut con);
    // One child is still running: the parent goes back to waiting, not to pending.
    assert_eq!(requeue(&mut con, "p", &job_id(1)), 1);
    assert_eq!(
        job_state(&mut con, "p", &job_id(1)).as_deref(),
        Some("waiting")
    );
    assert_eq!(waiting(&mut con, "p"), 1);
    assert_eq!(claim(&mut con, "p", &[]), Some(vec![]));
    // The last child releases it, and its handler sees both outcomes, the failed one too.
    ack(&mut con, "c", &job_id(3), jobs[1].2, "done");
    claim_one(&mut con, "p", &job_id(1));
    let outcomes: Vec<String> = children(&mut con, "p", &job_id(1))
        .into_iter()
        .map(|(_, id, status, data)| format!("{id} {status} {data}"))
        .collect();
    assert_eq!(
        outcomes,
        vec![
            format!("{} dead no disk", job_id(2)),
            format!("{} acked done", job_id(3))
        ]
    );

    // A parent whose children all finished goes straight to pending, in bulk as one by one.
    parent(&mut con, "p", &job_id(11), 1);
    child(&mut con, "c", &job_id(12), "p", &job_id(11), "FAIL");
    let token = claim_one(&mut con, "c", &job_id(12));
    fail(&mut con, "c", &job_id(12), token, "bad row");
    let moved: i64 = cmd("EMQ.REQUEUE")
        .arg("p")
        .arg("DEAD")
        .query(&mut con)
        .expect("requeue");
    assert_eq!(moved, 1);
    assert_eq!(
        job_state(&mut con, "p", &job_id(11)).as_deref(),
        Some("pending")
    );
}

#[test]
fn a_dead_child_requeued_before_its_hand_over_was_delivered_keeps_its_first_outcome() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut admin = server.conn();
    parent(&mut admin, "p", &job_id(1), 1);
    child(&mut admin, "c", &job_id(2), "p", &job_id(1), "FAIL");
    // A worker that may not touch the parent's keys: the hand-overs wait in the outbox.
    let mut worker = user_with(&server, "cworker", &["~emq:{c}:*", "+@all"]);
    let token = claim_one(&mut worker, "c", &job_id(2));
    fail(&mut worker, "c", &job_id(2), token, "no disk");
    assert_eq!(requeue(&mut worker, "c", &job_id(2)), 1);
    let token = claim_one(&mut worker, "c", &job_id(2));
    ack(&mut worker, "c", &job_id(2), token, "r");
    let entries = outbox(&mut admin, "c");
    let outcomes: Vec<(&str, &str)> = entries
        .iter()
        .map(|e| (e[3].as_str(), e[5].as_str()))
        .collect();
    assert_eq!(
        outcomes,
        vec![("dead", "no disk")],
        "the first outcome stays"
    );
}

#[test]
fn cancelling_a_parent_reads_a_bounded_part_of_its_row() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    // 50 children waiting among 15,000 finished ones (written by hand: their jobs are gone).
    parent(&mut con, "p", &job_id(1), 50);
    for n in 0..50 {
        child(&mut con, "c", &job_id(100 + n), "p", &job_id(1), "FAIL");
    }
    for batch in 0..15 {
        let mut hset = cmd("HSET");
        hset.arg(row_key("p", &job_id(1)));
        for n in 0..1_000 {
            hset.arg(format!("child:c:{}", job_id(10_000 + batch * 1_000 + n)))
                .arg("acked:r");
        }
        let _: i64 = hset.query(&mut con).expect("hset");
    }
    assert_eq!(cancel(&mut con, "p", &job_id(1)), 1);
    // The scan stops after about 10,000 fields: the children beyond are left to finish (the
    // chance that all 50 lie in the first two thirds of the row is about 1 in 10^9).
    let left = (0..50)
        .filter(|n| job_state(&mut con, "c", &job_id(100 + n)).is_some())
        .count();
    assert!(left > 0 && left < 50, "{left} of 50 children left");
}
