//! Partitioned queues on one node (docs/cluster.md): `EMQ.SPAN` marks the partitions and the
//! queue's own name, which then refuses jobs and claims with its width; a partition takes
//! only the jobs that route to it, mints ids that do, and `EMQ.QUEUES` lists the queue once.
//! A claim's `WAKE` wakes it, with no job, for a job in another of its queues.

use emq_harness as support;

use echomq::protocol::partition::{name, route};
use redis::{cmd, Connection, Value};
use support::*;

/// `EMQ.SPAN` every partition of `queue`'s `width`, then the queue; the partitions' names.
fn span(con: &mut Connection, queue: &str, width: u16) -> Vec<String> {
    let names: Vec<String> = (0..width)
        .map(|i| String::from_utf8(name(queue.as_bytes(), i, width).expect("name")).expect("utf8"))
        .collect();
    for (i, partition) in names.iter().enumerate() {
        let changed: i64 = cmd("EMQ.SPAN")
            .arg(partition)
            .arg(width)
            .arg("OF")
            .arg(queue)
            .arg("INDEX")
            .arg(i)
            .query(con)
            .expect("span a partition");
        assert_eq!(changed, 1);
    }
    let changed: i64 = cmd("EMQ.SPAN")
        .arg(queue)
        .arg(width)
        .query(con)
        .expect("span");
    assert_eq!(changed, 1);
    names
}

fn error(r: redis::RedisResult<Value>) -> String {
    error_text(&r.expect_err("refused"))
}

fn width(con: &mut Connection, queue: &str) -> Vec<Value> {
    let v: Value = cmd("EMQ.WIDTH").arg(queue).query(con).expect("width");
    match v {
        Value::Array(items) => items,
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_span_marks_the_partitions_and_the_queue_once_and_refuses_another_width() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("span");
    let names = span(&mut con, &q, 3);
    let again: i64 = cmd("EMQ.SPAN")
        .arg(&q)
        .arg(3)
        .query(&mut con)
        .expect("again");
    assert_eq!(again, 0, "the same width again is a no-op");
    let err = error(cmd("EMQ.SPAN").arg(&q).arg(4).query(&mut con));
    assert!(
        err.starts_with("EMQSPAN the queue is spanned over 3"),
        "{err}"
    );
    let err = error(
        cmd("EMQ.SPAN")
            .arg(&names[1])
            .arg(3)
            .arg("OF")
            .arg(&q)
            .arg("INDEX")
            .arg(0)
            .query(&mut con),
    );
    assert!(
        err.starts_with("ERR the queue is not that partition's name"),
        "{err}"
    );
    let err = error(cmd("EMQ.SPAN").arg(&names[1]).arg(3).query(&mut con));
    assert!(
        err.starts_with("EMQSPAN the queue is partition 1 of 3 of"),
        "{err}"
    );
    assert_eq!(
        width(&mut con, &q),
        vec![
            Value::BulkString(b"width".to_vec()),
            Value::Int(3),
            Value::BulkString(b"of".to_vec()),
            Value::Nil,
            Value::BulkString(b"index".to_vec()),
            Value::Nil,
        ]
    );
    assert_eq!(width(&mut con, &names[2])[1], Value::Int(3));
    assert_eq!(
        width(&mut con, &names[2])[3],
        Value::BulkString(q.clone().into_bytes())
    );
    assert_eq!(width(&mut con, &names[2])[5], Value::Int(2));
    assert_eq!(width(&mut con, &unique_queue("plain"))[1], Value::Int(0));
    for bad in ["0", "1025", "x"] {
        let err = error(cmd("EMQ.SPAN").arg(&q).arg(bad).query(&mut con));
        assert!(
            err.starts_with("ERR partitions must be an integer"),
            "{err}"
        );
    }
}

#[test]
fn the_queue_s_own_name_refuses_jobs_and_claims_with_its_width() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("own");
    span(&mut con, &q, 12);
    for r in [
        cmd("EMQ.ENQUEUE").arg(&q).arg("*").arg("x").query(&mut con),
        cmd("EMQ.MENQUEUE")
            .arg(&q)
            .arg("*")
            .arg("x")
            .query(&mut con),
        cmd("EMQ.CLAIM").arg(&q).query(&mut con),
        cmd("EMQ.CLAIM").arg(&q).arg("BLOCK").arg(0).query(&mut con),
    ] {
        let err = error(r);
        assert!(err.starts_with("EMQSPANNED 12 "), "{err}");
    }
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
}

#[test]
fn a_partition_takes_only_the_jobs_that_route_to_it_and_mints_ids_that_do() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("route");
    let names = span(&mut con, &q, 3);
    let p = &names[1];
    let (mut taken, mut refused) = (0, 0);
    for n in 1..=30 {
        let id = job_id(n);
        let r: redis::RedisResult<Value> =
            cmd("EMQ.ENQUEUE").arg(p).arg(&id).arg("x").query(&mut con);
        if route(3, id.as_bytes()) == 1 {
            r.expect("routes here");
            taken += 1;
        } else {
            assert!(error(r).starts_with("EMQSPANNED 3 "));
            refused += 1;
        }
    }
    assert!(taken > 0 && refused > 0, "{taken} {refused}");
    assert_eq!(set_len(&mut con, p, "pending"), taken);
    // A grouped job routes by its group, whatever its id.
    let group = (0..)
        .map(|g| format!("tenant-{g}"))
        .find(|g| route(3, g.as_bytes()) == 1);
    let group = group.expect("a group routing to 1");
    let other = (0..)
        .map(|g| format!("tenant-{g}"))
        .find(|g| route(3, g.as_bytes()) != 1);
    let other = other.expect("a group routing elsewhere");
    let id = (1..)
        .map(job_id)
        .find(|id| route(3, id.as_bytes()) != 1)
        .expect("id");
    let r: Value = cmd("EMQ.ENQUEUE")
        .arg(p)
        .arg(&id)
        .arg("x")
        .arg("GROUP")
        .arg(&group)
        .query(&mut con)
        .expect("its group routes here");
    assert_eq!(r, Value::Int(1));
    let err = error(
        cmd("EMQ.ENQUEUE")
            .arg(p)
            .arg("*")
            .arg("x")
            .arg("GROUP")
            .arg(&other)
            .query(&mut con),
    );
    assert!(err.starts_with("EMQSPANNED 3 "), "{err}");
    // A minted id routes here, one by one and in a batch.
    for _ in 0..20 {
        let id: String = cmd("EMQ.ENQUEUE")
            .arg(p)
            .arg("*")
            .arg("x")
            .query(&mut con)
            .expect("minted");
        assert_eq!(route(3, id.as_bytes()), 1, "{id}");
    }
    let ids: Vec<String> = cmd("EMQ.MENQUEUE")
        .arg(p)
        .arg("*")
        .arg("a")
        .arg("*")
        .arg("b")
        .query(&mut con)
        .expect("minted batch");
    assert!(ids.iter().all(|id| route(3, id.as_bytes()) == 1), "{ids:?}");
    // One job of a batch that routes elsewhere refuses the batch: nothing is written.
    let before = set_len(&mut con, p, "pending");
    let wrong = (1000..)
        .map(job_id)
        .find(|id| route(3, id.as_bytes()) != 1)
        .expect("id");
    let err = error(
        cmd("EMQ.MENQUEUE")
            .arg(p)
            .arg("*")
            .arg("a")
            .arg(&wrong)
            .arg("b")
            .query(&mut con),
    );
    assert!(err.starts_with("EMQSPANNED 3 "), "{err}");
    assert_eq!(set_len(&mut con, p, "pending"), before);
}

#[test]
fn only_an_empty_queue_is_spanned_and_only_an_empty_partition_unspanned() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("busy");
    enqueue(&mut con, &q, &job_id(1), "x");
    let err = error(cmd("EMQ.SPAN").arg(&q).arg(2).query(&mut con));
    assert!(err.starts_with("EMQSPAN the queue holds jobs"), "{err}");
    let q = unique_queue("drain");
    let names = span(&mut con, &q, 2);
    let id: String = cmd("EMQ.ENQUEUE")
        .arg(&names[0])
        .arg("*")
        .arg("x")
        .query(&mut con)
        .expect("job");
    let err = error(cmd("EMQ.UNSPAN").arg(&names[0]).query(&mut con));
    assert!(err.starts_with("EMQSPAN the partition holds jobs"), "{err}");
    let one: i64 = cmd("EMQ.UNSPAN")
        .arg(&names[1])
        .query(&mut con)
        .expect("empty one");
    assert_eq!(one, 1);
    // A retired partition refuses a job with width 0: the producer goes to the queue itself.
    let err = error(
        cmd("EMQ.ENQUEUE")
            .arg(&names[1])
            .arg("*")
            .arg("x")
            .query(&mut con),
    );
    assert!(err.starts_with("EMQSPANNED 0 "), "{err}");
    assert_eq!(
        width(&mut con, &names[1])[3],
        Value::BulkString(q.clone().into_bytes())
    );
    let (one, zero): (i64, i64) = (
        cmd("EMQ.UNSPAN")
            .arg(&names[1])
            .query(&mut con)
            .expect("ordinary"),
        cmd("EMQ.UNSPAN")
            .arg(&names[1])
            .query(&mut con)
            .expect("again"),
    );
    assert_eq!((one, zero), (1, 0));
    enqueue(&mut con, &names[1], &job_id(3), "an ordinary queue now");
    let jobs = claim(&mut con, &names[0], &[]).expect("claimed");
    let token = jobs[0].2.to_string();
    let _: Value = cmd("EMQ.ACK")
        .arg(&names[0])
        .arg(&id)
        .arg(&token)
        .query(&mut con)
        .expect("ack");
    let one: i64 = cmd("EMQ.UNSPAN")
        .arg(&names[0])
        .query(&mut con)
        .expect("drained");
    assert_eq!(one, 1);
    let one: i64 = cmd("EMQ.UNSPAN").arg(&q).query(&mut con).expect("own name");
    let zero: i64 = cmd("EMQ.UNSPAN").arg(&q).query(&mut con).expect("again");
    assert_eq!((one, zero), (1, 0));
    enqueue(&mut con, &q, &job_id(2), "an ordinary queue again");
}

#[test]
fn the_queue_list_shows_a_partitioned_queue_once_and_none_of_its_partitions() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let names = span(&mut con, "orders", 4);
    for p in &names {
        let _: String = cmd("EMQ.ENQUEUE")
            .arg(p)
            .arg("*")
            .arg("x")
            .query(&mut con)
            .expect("job");
    }
    enqueue(&mut con, "plain", &job_id(1), "x");
    let (_, listed): (String, Vec<String>) = cmd("EMQ.QUEUES").query(&mut con).expect("queues");
    assert_eq!(listed, vec!["orders".to_string(), "plain".to_string()]);
}

#[test]
fn a_blocked_claim_wakes_with_no_job_for_a_job_in_another_of_its_queues() {
    let server = Server::start_or_external();
    let mut admin = server.conn();
    let (a, b, c) = (unique_queue("a"), unique_queue("b"), unique_queue("c"));
    let before = blocked_clients(&mut admin);
    let mut worker = server.conn();
    let (a2, b2, c2) = (a.clone(), b.clone(), c.clone());
    let waiter = std::thread::spawn(move || {
        cmd("EMQ.CLAIM")
            .arg(&a2)
            .arg("BLOCK")
            .arg(0)
            .arg("WAKE")
            .arg(2)
            .arg(&b2)
            .arg(&c2)
            .query::<Value>(&mut worker)
            .expect("claim")
    });
    assert!(wait_until(std::time::Duration::from_secs(5), || {
        blocked_clients(&mut admin) == before + 1
    }));
    enqueue(&mut admin, &c, &job_id(5), "elsewhere");
    assert_eq!(waiter.join().expect("waiter"), Value::Array(vec![]));
    assert_eq!(
        set_len(&mut admin, &c, "pending"),
        1,
        "the job waits for its own claim"
    );
    // Its own queue's job is claimed as ever.
    let blocked = std::thread::spawn({
        let mut worker = server.conn();
        let (a, b) = (a.clone(), b.clone());
        move || claim(&mut worker, &a, &["BLOCK", "0", "WAKE", "1", &b])
    });
    assert!(wait_until(std::time::Duration::from_secs(5), || {
        blocked_clients(&mut admin) == before + 1
    }));
    enqueue(&mut admin, &a, &job_id(6), "here");
    let jobs = blocked.join().expect("waiter").expect("jobs");
    assert_eq!(jobs[0].0, job_id(6));
}

#[test]
fn a_claim_with_wake_answers_at_once_for_a_ready_job_elsewhere_but_not_for_a_paused_queue() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let (a, b) = (unique_queue("a"), unique_queue("b"));
    enqueue(&mut con, &b, &job_id(1), "ready");
    let r: Value = cmd("EMQ.CLAIM")
        .arg(&a)
        .arg("BLOCK")
        .arg(0)
        .arg("WAKE")
        .arg(1)
        .arg(&b)
        .query(&mut con)
        .expect("at once");
    assert_eq!(r, Value::Array(vec![]));
    let _: i64 = cmd("EMQ.PAUSE").arg(&b).query(&mut con).expect("pause");
    let r: Value = cmd("EMQ.CLAIM")
        .arg(&a)
        .arg("BLOCK")
        .arg(50)
        .arg("WAKE")
        .arg(1)
        .arg(&b)
        .query(&mut con)
        .expect("timed out");
    assert_eq!(r, Value::Nil, "a paused queue's job wakes no one");
    let err = error(
        cmd("EMQ.CLAIM")
            .arg(&a)
            .arg("WAKE")
            .arg(1)
            .arg(&b)
            .query(&mut con),
    );
    assert!(
        err.starts_with("ERR syntax error: WAKE needs BLOCK"),
        "{err}"
    );
    let err = error(
        cmd("EMQ.CLAIM")
            .arg(&a)
            .arg("BLOCK")
            .arg(1)
            .arg("WAKE")
            .arg(2)
            .arg(&b)
            .query(&mut con),
    );
    assert!(
        err.starts_with("ERR syntax error: an option lacks its value"),
        "{err}"
    );
}

#[test]
fn a_producer_holding_a_stale_width_is_led_to_the_new_one() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("resized");
    let old = span(&mut con, &q, 4);
    for p in &old {
        let _: i64 = cmd("EMQ.UNSPAN").arg(p).query(&mut con).expect("retired");
    }
    let _: i64 = cmd("EMQ.UNSPAN").arg(&q).query(&mut con).expect("own name");
    // Re-spanned over 2: a name that is a partition of both widths becomes one again.
    let new: Vec<String> = (0..2)
        .map(|i| String::from_utf8(name(q.as_bytes(), i, 2).expect("name")).expect("utf8"))
        .collect();
    for (i, p) in new.iter().enumerate() {
        let _: i64 = cmd("EMQ.SPAN")
            .arg(p)
            .arg(2)
            .arg("OF")
            .arg(&q)
            .arg("INDEX")
            .arg(i)
            .query(&mut con)
            .expect("span");
    }
    let _: i64 = cmd("EMQ.SPAN")
        .arg(&q)
        .arg(2)
        .query(&mut con)
        .expect("span");
    // A job routed by width 4 to an old partition that is none of 2 is refused with 0, then
    // by the queue with 2; routed by 2 it is taken.
    let id = (1..)
        .map(job_id)
        .find(|id| !new.contains(&old[usize::from(route(4, id.as_bytes()))]))
        .expect("an id routed to a retired partition");
    let stale = &old[usize::from(route(4, id.as_bytes()))];
    let err = error(
        cmd("EMQ.ENQUEUE")
            .arg(stale)
            .arg(&id)
            .arg("x")
            .query(&mut con),
    );
    assert!(err.starts_with("EMQSPANNED 0 "), "{err}");
    let err = error(cmd("EMQ.ENQUEUE").arg(&q).arg(&id).arg("x").query(&mut con));
    assert!(err.starts_with("EMQSPANNED 2 "), "{err}");
    let target = &new[usize::from(route(2, id.as_bytes()))];
    enqueue(&mut con, target, &id, "x");
    let (_, listed): (String, Vec<String>) = cmd("EMQ.QUEUES")
        .arg("COUNT")
        .arg(1000)
        .query(&mut con)
        .expect("queues");
    assert!(
        !listed.iter().any(|n| old.contains(n) || new.contains(n)),
        "{listed:?}"
    );
}

#[test]
fn a_queue_that_takes_no_job_keeps_no_schedule_and_a_batch_mints_within_its_budget() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("crons");
    let cron = |con: &mut Connection, queue: &str| -> redis::RedisResult<Value> {
        cmd("EMQ.CRON")
            .arg(queue)
            .arg("tick")
            .arg("EVERY")
            .arg(60_000)
            .arg("x")
            .query(con)
    };
    cron(&mut con, &q).expect("a schedule on an ordinary queue");
    let err = error(cmd("EMQ.SPAN").arg(&q).arg(2).query(&mut con));
    assert!(
        err.starts_with("EMQSPAN the queue holds repeating schedules"),
        "{err}"
    );
    let _: i64 = cmd("EMQ.UNCRON")
        .arg(&q)
        .arg("tick")
        .query(&mut con)
        .expect("uncron");
    let names = span(&mut con, &q, 2);
    assert!(error(cron(&mut con, &q)).starts_with("EMQSPANNED 2 "));
    // A partition keeps the schedules whose name routes to it, and refuses another with the
    // width, as it refuses a job.
    let (home, other) = match route(2, b"tick") {
        0 => (&names[0], &names[1]),
        _ => (&names[1], &names[0]),
    };
    assert!(error(cron(&mut con, other)).starts_with("EMQSPANNED 2 "));
    cron(&mut con, home).expect("a schedule on its partition");
    let err = error(cmd("EMQ.UNSPAN").arg(home).query(&mut con));
    assert!(
        err.starts_with("EMQSPAN the partition holds repeating schedules"),
        "{err}"
    );
    let _: i64 = cmd("EMQ.UNSPAN")
        .arg(other)
        .query(&mut con)
        .expect("retired");
    assert!(error(cron(&mut con, other)).starts_with("EMQSPANNED 0 "));
    // A schedule a partition holds from before the rule (here put there by RESTORE) may still
    // be replaced; a new one that routes elsewhere is refused.
    let (src, q2) = (unique_queue("crons-src"), unique_queue("crons-old"));
    cron(&mut con, &src).expect("a schedule on an ordinary queue");
    let dump: Vec<u8> = cmd("DUMP")
        .arg(format!("emq:{{{src}}}:cron"))
        .query(&mut con)
        .expect("dump");
    let names = span(&mut con, &q2, 2);
    let elsewhere = &names[usize::from(1 - route(2, b"tick"))];
    let _: () = cmd("RESTORE")
        .arg(format!("emq:{{{elsewhere}}}:cron"))
        .arg(0)
        .arg(dump)
        .query(&mut con)
        .expect("restore");
    cron(&mut con, elsewhere).expect("the schedule it holds, replaced");
    let fresh = (0..)
        .map(|n| format!("beat-{n}"))
        .find(|n| route(2, n.as_bytes()) == route(2, b"tick"))
        .unwrap_or_default();
    let refused = cmd("EMQ.CRON")
        .arg(elsewhere)
        .arg(&fresh)
        .arg("EVERY")
        .arg(60_000)
        .arg("x")
        .query::<Value>(&mut con);
    assert!(error(refused).starts_with("EMQSPANNED 2 "));
    // A batch of minted ids costs about the width each: bounded by the call's budget.
    let wide = unique_queue("wide");
    let p = String::from_utf8(name(wide.as_bytes(), 0, 1024).expect("name")).expect("utf8");
    let _: i64 = cmd("EMQ.SPAN")
        .arg(&p)
        .arg(1024)
        .arg("OF")
        .arg(&wide)
        .arg("INDEX")
        .arg(0)
        .query(&mut con)
        .expect("span");
    let mut batch = cmd("EMQ.MENQUEUE");
    batch.arg(&p);
    for _ in 0..98 {
        batch.arg("*").arg("x");
    }
    let err = error(batch.query(&mut con));
    assert!(err.starts_with("ERR too many ids to mint"), "{err}");
    assert_eq!(set_len(&mut con, &p, "pending"), 0);
    let ids: Vec<String> = cmd("EMQ.MENQUEUE")
        .arg(&p)
        .arg("*")
        .arg("x")
        .arg("*")
        .arg("y")
        .query(&mut con)
        .expect("within");
    assert!(ids.iter().all(|id| route(1024, id.as_bytes()) == 0));
}

#[test]
fn a_user_who_may_not_read_the_queue_learns_no_width() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    span(&mut con, "secret", 3);
    let mut other = user_with(&server, "stranger", &["+@all", "~emq:{open}:*"]);
    let err = error(
        cmd("EMQ.ENQUEUE")
            .arg("secret")
            .arg("*")
            .arg("x")
            .query(&mut other),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    let err = error(cmd("EMQ.CLAIM").arg("secret").query(&mut other));
    assert!(err.starts_with("NOPERM"), "{err}");
}
