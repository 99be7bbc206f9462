//! Delayed jobs and the timer (protocol.md §6): a job waits in `schedule` until its due time, which is
//! kept exactly, and the timer promotes it wherever a command puts its keys, in full, with no
//! claim or write to its queue; the timer watches exactly the queues that have timed sets.

use emq_harness as support;

use std::thread;
use std::time::Duration;

use redis::cmd;
use support::*;

#[test]
fn delayed_jobs_wait_in_schedule_until_due() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("delay");
    let id = job_id(1);
    let promoted_before = info_int(&mut con, "emq", "emq_promoted");
    let before = now_ms();
    let n: i64 = enqueue_delayed(&mut con, &q, &id, "later", 400);
    assert_eq!(n, 1);
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("scheduled"));
    let due = set_score(&mut con, &q, "schedule", &id).expect("in schedule");
    assert!(
        due >= (before + 400) as f64 && due <= (now_ms() + 400) as f64,
        "absolute due time {due}"
    );
    assert_eq!(
        claim(&mut con, &q, &[]),
        Some(vec![]),
        "not claimable before it is due"
    );
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q)["pending"]
            == 1),
        "promoted by the timer"
    );
    // Counted in INFO (at least this job: an external server may promote others meanwhile).
    assert!(info_int(&mut con, "emq", "emq_promoted") > promoted_before);
    let jobs = claim(&mut con, &q, &[]).expect("claim");
    assert_eq!(jobs, vec![(id.clone(), b"later".to_vec(), 1)]);
}

#[test]
fn delayed_jobs_and_leases_follow_their_database_through_swapdb() {
    // SWAPDB touches the whole server: a server of its own.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let (q0, q1) = (unique_queue("swap-zero"), unique_queue("swap-one"));
    // Database 0: a delayed job and a job under a short lease. Database 1: a delayed job.
    in_db(&mut con, 0);
    enqueue_delayed(&mut con, &q0, &job_id(1), "later", 300);
    enqueue(&mut con, &q0, &job_id(2), "leased");
    let jobs = claim(&mut con, &q0, &["LEASE", "300"]).expect("claim");
    assert_eq!(jobs.len(), 1);
    in_db(&mut con, 1);
    enqueue_delayed(&mut con, &q1, &job_id(3), "later", 300);
    let _: () = cmd("SWAPDB").arg(0).arg(1).query(&mut con).expect("swapdb");

    // The timer promotes each queue where it now lives, without any claim or write to it.
    in_db(&mut con, 1);
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q0)["pending"]
            == 2),
        "database 0's due job and expired lease, now in database 1: {:?}",
        stats(&mut con, &q0)
    );
    in_db(&mut con, 0);
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q1)["pending"]
            == 1),
        "database 1's due job, now in database 0: {:?}",
        stats(&mut con, &q1)
    );
}

#[test]
fn the_timer_forgets_the_queues_of_a_flushed_database() {
    // FLUSHDB and FLUSHALL name no key in a keyspace event: the timer would go on watching
    // the queues of an emptied database, each visit costing a tick's time for nothing.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    for db in [0, 1] {
        in_db(&mut con, db);
        for q in ["a", "b"] {
            enqueue_delayed(&mut con, q, &job_id(1), "in an hour", 3_600_000);
        }
    }
    assert_eq!(watched_queues(&mut con), 4);
    let _: () = cmd("FLUSHDB").query(&mut con).expect("flushdb");
    assert_eq!(
        watched_queues(&mut con),
        2,
        "database 0's queues are still watched"
    );
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    assert_eq!(watched_queues(&mut con), 0);
    // Queues written after the flush are watched and promoted as ever.
    enqueue_delayed(&mut con, "a", &job_id(2), "soon", 100);
    assert_eq!(watched_queues(&mut con), 1);
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, "a")["pending"]
            == 1),
        "{:?}",
        stats(&mut con, "a")
    );
}

#[test]
fn a_queue_whose_timed_sets_are_gone_is_unwatched_at_once() {
    // Deleted, expired or renamed away: a queue left with neither a `schedule` nor an `active`
    // set is forgotten when that happens, not at its next visit (a replica never visits).
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    for q in ["deleted", "expiring", "renamed", "kept"] {
        enqueue_delayed(&mut con, q, &job_id(1), "in an hour", 3_600_000);
    }
    enqueue(&mut con, "kept", &job_id(2), "now");
    let jobs = claim(&mut con, "kept", &["LEASE", "3600000"]).expect("claim");
    assert_eq!(jobs.len(), 1);
    assert_eq!(watched_queues(&mut con), 4);
    let _: i64 = cmd("DEL")
        .arg(set_key("deleted", "schedule"))
        .query(&mut con)
        .expect("del");
    assert_eq!(watched_queues(&mut con), 3);
    let _: () = cmd("RENAME")
        .arg(set_key("renamed", "schedule"))
        .arg("not-a-queue-key")
        .query(&mut con)
        .expect("rename");
    assert_eq!(watched_queues(&mut con), 2);
    let _: i64 = cmd("PEXPIRE")
        .arg(set_key("expiring", "schedule"))
        .arg(1)
        .query(&mut con)
        .expect("pexpire");
    assert!(
        wait_until(Duration::from_secs(5), || watched_queues(&mut con) == 1),
        "the expired set's queue is forgotten"
    );
    // `kept` loses its schedule set but still has an active one.
    let _: i64 = cmd("DEL")
        .arg(set_key("kept", "schedule"))
        .query(&mut con)
        .expect("del");
    assert_eq!(watched_queues(&mut con), 1);
}

#[test]
fn delayed_jobs_come_due_wherever_a_command_puts_their_keys() {
    // The timer learns a queue from any write to its `schedule` set, whoever makes it: a copy,
    // a move to another database, a restore from a dump, a rename, and `DEBUG RELOAD`, which
    // empties the data and loads it again. Each job comes due where its keys now are, with no
    // client command, and a queue its keys left is forgotten.
    // Far enough ahead that no job comes due before the commands that move its keys are done,
    // even on a loaded machine where `DEBUG RELOAD` waits for its dump to reach the disk.
    const DUE_IN_MS: u64 = 2_000;
    let server = Server::start(Options::learning().arg("enable-debug-command", "local"));
    let mut con = server.conn();
    let mut db1 = server.conn();
    in_db(&mut db1, 1);
    let id = job_id(1);
    for q in ["copied", "moved", "restored", "renamed"] {
        enqueue_delayed(&mut con, q, &id, q, DUE_IN_MS);
    }
    // Rows first, so that no set ever names a job whose row is not beside it yet.
    for (from, to) in [
        (row_key("copied", &id), row_key("copy", &id)),
        (set_key("copied", "schedule"), set_key("copy", "schedule")),
    ] {
        let copied: i64 = cmd("COPY").arg(from).arg(to).query(&mut con).expect("copy");
        assert_eq!(copied, 1);
    }
    for key in [row_key("moved", &id), set_key("moved", "schedule")] {
        let moved: i64 = cmd("MOVE").arg(key).arg(1).query(&mut con).expect("move");
        assert_eq!(moved, 1);
    }
    let restored: String = cmd("EVAL")
        .arg(
            "local d = redis.call('DUMP', KEYS[1]); redis.call('DEL', KEYS[1]); \
             return redis.call('RESTORE', KEYS[1], 0, d)",
        )
        .arg(1)
        .arg(set_key("restored", "schedule"))
        .query(&mut con)
        .expect("restore");
    assert_eq!(restored, "OK");
    for (from, to) in [
        (row_key("renamed", &id), row_key("renamed-to", &id)),
        (
            set_key("renamed", "schedule"),
            set_key("renamed-to", "schedule"),
        ),
    ] {
        let _: () = cmd("RENAME")
            .arg(from)
            .arg(to)
            .query(&mut con)
            .expect("rename");
    }
    // copied, copy, restored and renamed-to here, moved in database 1.
    assert_eq!(watched_queues(&mut con), 5);

    let pending = |con: &mut Connection, q: &str| set_score(con, q, "pending", &id).is_some();
    let in_db0 = ["copied", "copy", "restored", "renamed-to"];
    assert!(
        wait_until(Duration::from_secs(10), || in_db0
            .iter()
            .all(|q| pending(&mut con, q))
            && pending(&mut db1, "moved")),
        "every job came due where its keys are"
    );
    for q in in_db0 {
        assert_eq!(
            job_state(&mut con, q, &id).as_deref(),
            Some("pending"),
            "{q}"
        );
    }
    assert_eq!(
        job_state(&mut db1, "moved", &id).as_deref(),
        Some("pending")
    );
    assert_eq!(info_int(&mut con, "emq", "emq_promoted"), 5);
    assert_eq!(watched_queues(&mut con), 0, "every schedule set is gone");

    enqueue_delayed(&mut con, "reloaded", &id, "across a reload", DUE_IN_MS);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).expect("reload");
    assert_eq!(
        watched_queues(&mut con),
        1,
        "the reloaded data is watched again"
    );
    assert!(
        wait_until(Duration::from_secs(10), || pending(&mut con, "reloaded")),
        "the reloaded job came due"
    );
    assert_eq!(
        job_state(&mut con, "reloaded", &id).as_deref(),
        Some("pending")
    );
}

#[test]
fn a_queue_the_timer_cannot_visit_is_tried_again_once_its_key_is_put_right() {
    // A pending set overwritten by hand with a string: the timer's visit is refused before it
    // moves anything, and the job waits in `schedule`. Once the key is deleted, the job comes
    // due without any claim or write to the queue.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let (q, id) = ("broken", job_id(1));
    enqueue_delayed(&mut con, q, &id, "due soon", 200);
    let _: () = cmd("SET")
        .arg(set_key(q, "pending"))
        .arg("oops")
        .query(&mut con)
        .expect("set");
    let refused = |con: &mut Connection| info_int(con, "emq", "emq_timer_visits_refused");
    assert!(
        wait_until(Duration::from_secs(5), || refused(&mut con) >= 2),
        "visits refused and tried again: {}",
        refused(&mut con)
    );
    assert_eq!(job_state(&mut con, q, &id).as_deref(), Some("scheduled"));
    assert!(
        set_score(&mut con, q, "schedule", &id).is_some(),
        "still in schedule"
    );
    assert_eq!(watched_queues(&mut con), 1);
    let warnings = server
        .log()
        .matches("the timer cannot move the due jobs of queue 'broken' (db 0): WRONGTYPE")
        .count();
    assert_eq!(
        warnings,
        1,
        "one warning a minute at most:\n{}",
        server.log()
    );
    let _: i64 = cmd("DEL")
        .arg(set_key(q, "pending"))
        .query(&mut con)
        .expect("del");
    assert!(
        wait_until(Duration::from_secs(5), || job_state(&mut con, q, &id)
            .as_deref()
            == Some("pending")),
        "the job comes due once the key is put right"
    );
    assert_eq!(set_members(&mut con, q, "pending"), vec![id.clone()]);
    assert_eq!(set_len(&mut con, q, "schedule"), 0);
    assert!(server.is_alive());
}

#[test]
fn a_backlog_larger_than_a_visit_or_a_batch_is_promoted_in_full() {
    // The timer moves a bounded number of jobs per visit and spends a bounded time per tick:
    // a queue with over a thousand jobs coming due and over a thousand leases running out at
    // the same moment, and more queues than one batch reads, all end up pending, with no claim.
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    let in_an_hour = 3_600_000u64;
    let mut p = redis::pipe();
    for i in 1..=1_050u64 {
        p.cmd("EMQ.ENQUEUE")
            .arg("big")
            .arg(job_id(10_000 + i))
            .arg("leased")
            .ignore();
    }
    let _: () = p.query(&mut con).expect("enqueue");
    for count in [1_000, 50] {
        let lease = in_an_hour.to_string();
        let jobs = claim(
            &mut con,
            "big",
            &["COUNT", &count.to_string(), "LEASE", &lease],
        );
        assert_eq!(jobs.map(|j| j.len()), Some(count));
    }
    let others: Vec<String> = (0..300).map(|i| format!("small{i}")).collect();
    let mut p = redis::pipe();
    for i in 1..=1_050u64 {
        p.cmd("EMQ.ENQUEUE")
            .arg("big")
            .arg(job_id(i))
            .arg("due")
            .arg("DELAY")
            .arg(in_an_hour)
            .ignore();
    }
    for q in &others {
        p.cmd("EMQ.ENQUEUE")
            .arg(q)
            .arg(job_id(1))
            .arg("due")
            .arg("DELAY")
            .arg(in_an_hour)
            .ignore();
    }
    let _: () = p.query(&mut con).expect("enqueue delayed");
    // Now everything comes due at once: the sets rescored in one transaction, as a script
    // sharing the keys might do.
    let mut p = redis::pipe();
    p.atomic();
    let big_schedule: Vec<String> = set_members(&mut con, "big", "schedule");
    let big_active: Vec<String> = set_members(&mut con, "big", "active");
    assert_eq!((big_schedule.len(), big_active.len()), (1_050, 1_050));
    for (ty, members) in [("schedule", &big_schedule), ("active", &big_active)] {
        let mut zadd = cmd("ZADD");
        zadd.arg(set_key("big", ty)).arg("XX");
        for m in members {
            zadd.arg(0).arg(m);
        }
        p.add_command(zadd).ignore();
    }
    for q in &others {
        p.cmd("ZADD")
            .arg(set_key(q, "schedule"))
            .arg("XX")
            .arg(0)
            .arg(job_id(1))
            .ignore();
    }
    let _: () = p.query(&mut con).expect("all due");
    let promoted = wait_until(Duration::from_secs(60), || {
        info_int(&mut con, "emq", "emq_promoted") == 2_100 + 300
    });
    assert!(
        promoted,
        "promoted {} of 2400",
        info_int(&mut con, "emq", "emq_promoted")
    );
    assert!(
        info_int(&mut con, "emq", "emq_timer_ticks_at_budget") > 0,
        "the backlog took more than one tick"
    );
    assert_eq!(set_len(&mut con, "big", "pending"), 2_100);
    assert_eq!(set_len(&mut con, "big", "schedule"), 0);
    assert_eq!(set_len(&mut con, "big", "active"), 0);
    for q in &others {
        assert_eq!(set_len(&mut con, q, "pending"), 1, "{q}");
    }
    assert_eq!(watched_queues(&mut con), 0);
}

#[test]
fn a_due_time_in_the_past_is_a_plain_enqueue() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("past");
    let id = job_id(2);
    let n: i64 = cmd("EMQ.ENQUEUE")
        .arg(&q)
        .arg(&id)
        .arg("now")
        .arg("AT")
        .arg(1000)
        .query(&mut con)
        .expect("at");
    assert_eq!(n, 1);
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("pending"));
    assert_eq!(set_score(&mut con, &q, "pending", &id), Some(0.0));
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["scheduled"]), (1, 0));
}

#[test]
fn a_due_time_is_kept_exactly_and_one_a_score_cannot_hold_is_refused() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("far");
    let latest = (1i64 << 53) - 1;
    let n: i64 = cmd("EMQ.ENQUEUE")
        .arg(&q)
        .arg(job_id(1))
        .arg("far")
        .arg("AT")
        .arg(latest)
        .query(&mut con)
        .expect("at");
    assert_eq!(n, 1);
    assert_eq!(
        set_score(&mut con, &q, "schedule", &job_id(1)),
        Some(latest as f64),
        "the very time given (an f64 holds it exactly)"
    );
    // One more would be stored as another time (2^53 + 1 is no double).
    for at in [latest + 1, latest + 2, i64::MAX / 2] {
        let err = expect_err(
            &mut con,
            cmd("EMQ.ENQUEUE")
                .arg(&q)
                .arg(job_id(2))
                .arg("x")
                .arg("AT")
                .arg(at),
        );
        assert_eq!(
            err, "ERR AT must be an integer from 0 to 9007199254740991",
            "AT {at}"
        );
    }
    assert_eq!(
        keys_of(&mut con, &q).len(),
        2,
        "one row and the schedule set"
    );
}

#[test]
fn an_earlier_due_time_written_later_is_not_missed() {
    // The timer looks at a queue again at its earliest due time; a later write of an earlier
    // one (by this module or by any other writer) must bring that visit forward.
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    let q = unique_queue("earlier");
    enqueue_delayed(&mut con, &q, &job_id(1), "far", 600_000);
    thread::sleep(Duration::from_millis(50)); // the timer has seen the queue and its far due time
    enqueue_delayed(&mut con, &q, &job_id(2), "soon", 100);
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q)["pending"]
            == 1),
        "the module's own write"
    );

    // A plain writer (a Lua speaker, say) schedules a job for right now.
    let id = job_id(3);
    cmd("HSET")
        .arg(row_key(&q, &id))
        .arg("state")
        .arg("scheduled")
        .arg("attempts")
        .arg("0")
        .arg("payload")
        .arg("foreign")
        .query::<i64>(&mut con)
        .expect("row");
    cmd("ZADD")
        .arg(set_key(&q, "schedule"))
        .arg(now_ms())
        .arg(&id)
        .query::<i64>(&mut con)
        .expect("zadd");
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q)["pending"]
            == 2),
        "a foreign write"
    );
    assert_eq!(
        stats(&mut con, &q)["scheduled"],
        1,
        "the far job still waits"
    );
}

/// The timer's ticks (`emq_timer_ticks`) over the next `ms`.
fn ticks_over(con: &mut Connection, ms: u64) -> i64 {
    let before = info_int(con, "emq", "emq_timer_ticks");
    thread::sleep(Duration::from_millis(ms));
    info_int(con, "emq", "emq_timer_ticks") - before
}

#[test]
fn an_idle_timer_sleeps_until_the_next_due_time_and_an_earlier_one_wakes_it() {
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    // Nothing watched: past the tick at load, no tick at all (a busy timer ticks every 10 ms,
    // 100 in a second).
    thread::sleep(Duration::from_millis(100));
    assert_eq!(ticks_over(&mut con, 1000), 0, "nothing to wait for");
    // A job due in an hour: the timer visits the queue once, then sleeps (at most a minute).
    let q = unique_queue("idle");
    enqueue_delayed(&mut con, &q, &job_id(1), "later", 3_600_000);
    thread::sleep(Duration::from_millis(100));
    assert_eq!(ticks_over(&mut con, 1000), 0, "an hour away");
    // A job due sooner, written by hand as a Lua speaker would: the write wakes the timer, which
    // then sleeps until it is due and promotes it then.
    let id = job_id(2);
    let due = now_ms() + 500;
    let _: () = redis::pipe()
        .atomic()
        .cmd("HSET")
        .arg(row_key(&q, &id))
        .arg(&["state", "scheduled", "attempts", "0", "payload", "soon"])
        .ignore()
        .cmd("ZADD")
        .arg(set_key(&q, "schedule"))
        .arg(due)
        .arg(&id)
        .ignore()
        .query(&mut con)
        .expect("a scheduled job by hand");
    assert!(
        wait_until(Duration::from_secs(5), || job_state(&mut con, &q, &id)
            .as_deref()
            == Some("pending")),
        "promoted"
    );
    let late = now_ms() - due;
    assert!(late >= 0, "not before its time");
    // A claimed job's lease: the timer sleeps until its deadline, then takes the job back.
    let _ = claim(&mut con, &q, &["LEASE", "400"]);
    let before = info_int(&mut con, "emq", "emq_timer_ticks");
    assert!(
        wait_until(Duration::from_secs(5), || job_state(&mut con, &q, &id)
            .as_deref()
            == Some("pending")),
        "the expired lease is taken back"
    );
    let ticks = info_int(&mut con, "emq", "emq_timer_ticks") - before;
    assert!(ticks <= 5, "slept until the deadline: {ticks} ticks");
}
