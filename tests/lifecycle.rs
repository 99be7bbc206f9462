//! The job lifecycle in the server (SPEC §6): delayed jobs, claims with leases, blocking
//! claims, token fencing, ack, retry with backoff, dead jobs, cancel, requeue and stats.

mod support;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::{Duration, Instant};

use redis::{cmd, Value};
use support::*;

/// One claimed job: (id, payload, attempts).
type Job = (String, Vec<u8>, i64);

fn claim(con: &mut Connection, q: &str, opts: &[&str]) -> Option<Vec<Job>> {
    let mut c = cmd("EMQ.CLAIM");
    c.arg(q);
    for o in opts {
        c.arg(*o);
    }
    c.query(con).expect("claim")
}

fn state(con: &mut Connection, q: &str, id: &str) -> Option<String> {
    row_field(con, q, id, "state")
}

fn attempts(con: &mut Connection, q: &str, id: &str) -> Option<String> {
    row_field(con, q, id, "attempts")
}

/// How many clients wait in a blocking command, on the whole server.
fn blocked_clients(con: &mut Connection) -> i64 {
    info_int(con, "clients", "blocked_clients")
}

/// Waits (up to 5 s) until `n` clients wait in a blocking command.
fn until_blocked(con: &mut Connection, n: i64) -> bool {
    wait_until(Duration::from_secs(5), || blocked_clients(con) == n)
}

fn score(con: &mut Connection, q: &str, set: &str, id: &str) -> Option<f64> {
    cmd("ZSCORE")
        .arg(set_key(q, set))
        .arg(id)
        .query(con)
        .expect("zscore")
}

/// `emq_watched_queues` of `INFO emq`: the queues the timer watches.
fn watched(con: &mut Connection) -> i64 {
    info_int(con, "emq", "emq_watched_queues")
}

#[test]
fn delayed_jobs_wait_in_schedule_until_due() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("delay");
    let id = job_id(1);
    let promoted_before = info_int(&mut con, "emq", "emq_promoted");
    let before = now_ms();
    let n: i64 = enqueue_delayed(&mut con, &q, &id, "later", 400);
    assert_eq!(n, 1);
    assert_eq!(state(&mut con, &q, &id).as_deref(), Some("scheduled"));
    let due = score(&mut con, &q, "schedule", &id).expect("in schedule");
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
    assert_eq!(watched(&mut con), 4);
    let _: () = cmd("FLUSHDB").query(&mut con).expect("flushdb");
    assert_eq!(
        watched(&mut con),
        2,
        "database 0's queues are still watched"
    );
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    assert_eq!(watched(&mut con), 0);
    // Queues written after the flush are watched and promoted as ever.
    enqueue_delayed(&mut con, "a", &job_id(2), "soon", 100);
    assert_eq!(watched(&mut con), 1);
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
    let server = Server::start(Options::default());
    let mut con = server.conn();
    for q in ["deleted", "expiring", "renamed", "kept"] {
        enqueue_delayed(&mut con, q, &job_id(1), "in an hour", 3_600_000);
    }
    enqueue(&mut con, "kept", &job_id(2), "now");
    let jobs = claim(&mut con, "kept", &["LEASE", "3600000"]).expect("claim");
    assert_eq!(jobs.len(), 1);
    assert_eq!(watched(&mut con), 4);
    let _: i64 = cmd("DEL")
        .arg(set_key("deleted", "schedule"))
        .query(&mut con)
        .expect("del");
    assert_eq!(watched(&mut con), 3);
    let _: () = cmd("RENAME")
        .arg(set_key("renamed", "schedule"))
        .arg("not-a-queue-key")
        .query(&mut con)
        .expect("rename");
    assert_eq!(watched(&mut con), 2);
    let _: i64 = cmd("PEXPIRE")
        .arg(set_key("expiring", "schedule"))
        .arg(1)
        .query(&mut con)
        .expect("pexpire");
    assert!(
        wait_until(Duration::from_secs(5), || watched(&mut con) == 1),
        "the expired set's queue is forgotten"
    );
    // `kept` loses its schedule set but still has an active one.
    let _: i64 = cmd("DEL")
        .arg(set_key("kept", "schedule"))
        .query(&mut con)
        .expect("del");
    assert_eq!(watched(&mut con), 1);
}

#[test]
fn delayed_jobs_come_due_wherever_a_command_puts_their_keys() {
    // The timer learns a queue from any write to its `schedule` set, whoever makes it: a copy,
    // a move to another database, a restore from a dump, a rename, and `DEBUG RELOAD`, which
    // empties the data and loads it again. Each job comes due where its keys now are, with no
    // client command, and a queue its keys left is forgotten.
    let server = Server::start(Options::default().arg("enable-debug-command", "local"));
    let mut con = server.conn();
    let mut db1 = server.conn();
    in_db(&mut db1, 1);
    let id = job_id(1);
    for q in ["copied", "moved", "restored", "renamed"] {
        enqueue_delayed(&mut con, q, &id, q, 500);
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
    assert_eq!(watched(&mut con), 5);

    let pending = |con: &mut Connection, q: &str| score(con, q, "pending", &id).is_some();
    let in_db0 = ["copied", "copy", "restored", "renamed-to"];
    assert!(
        wait_until(Duration::from_secs(5), || in_db0
            .iter()
            .all(|q| pending(&mut con, q))
            && pending(&mut db1, "moved")),
        "every job came due where its keys are"
    );
    for q in in_db0 {
        assert_eq!(state(&mut con, q, &id).as_deref(), Some("pending"), "{q}");
    }
    assert_eq!(state(&mut db1, "moved", &id).as_deref(), Some("pending"));
    assert_eq!(info_int(&mut con, "emq", "emq_promoted"), 5);
    assert_eq!(watched(&mut con), 0, "every schedule set is gone");

    enqueue_delayed(&mut con, "reloaded", &id, "across a reload", 500);
    let _: () = cmd("DEBUG").arg("RELOAD").query(&mut con).expect("reload");
    assert_eq!(watched(&mut con), 1, "the reloaded data is watched again");
    assert!(
        wait_until(Duration::from_secs(5), || pending(&mut con, "reloaded")),
        "the reloaded job came due"
    );
    assert_eq!(state(&mut con, "reloaded", &id).as_deref(), Some("pending"));
}

#[test]
fn keyspace_hits_and_misses_count_only_what_clients_read() {
    // The server's keyspace statistics (what a cache's hit ratio is read from) and `keymiss`
    // events come from read commands' lookups. EchoMQ's writes look at keys as native writes
    // do, uncounted and silent, and so do its timer and its keyspace events; `EMQ.STATS`, a
    // read, counts as `ZCARD` would.
    let server = Server::start(Options::default().arg("notify-keyspace-events", "Em"));
    let mut con = server.conn();
    let valkey = info_field(&mut con, "server", "valkey_version").is_some();
    let ks = |con: &mut Connection| {
        (
            info_int(con, "stats", "keyspace_hits"),
            info_int(con, "stats", "keyspace_misses"),
        )
    };
    let mut sub_con = server.conn();
    let mut misses = sub_con.as_pubsub();
    misses
        .psubscribe("__keyevent@*__:keymiss")
        .expect("psubscribe");
    misses
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");

    // The timer's visit (and its looks at the emptied schedule set), a claim's looks at the
    // rows, a batch's at the rows of its minted ids, and a retry the timer promotes.
    enqueue_delayed(&mut con, "later", &job_id(1), "x", 100);
    enqueue(&mut con, "now", &job_id(1), "x");
    thread::sleep(Duration::from_millis(300));
    assert!(score(&mut con, "later", "pending", &job_id(1)).is_some());
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .expect("resetstat");
    enqueue_delayed(&mut con, "later", &job_id(2), "x", 100);
    let jobs = claim(&mut con, "now", &[]).expect("claim");
    assert_eq!(jobs.len(), 1);
    let _: Vec<Value> = cmd("EMQ.MENQUEUE")
        .arg("batch")
        .arg("*")
        .arg("a")
        .arg("*")
        .arg("b")
        .query(&mut con)
        .expect("menqueue");
    let jobs = claim(&mut con, "batch", &["COUNT", "5"]).expect("claim");
    assert_eq!(jobs.len(), 2);
    let r: String = cmd("EMQ.FAIL")
        .arg("batch")
        .arg(&jobs[0].0)
        .arg(1)
        .arg("RETRY-IN")
        .arg(0)
        .query(&mut con)
        .expect("fail");
    assert_eq!(r, "scheduled");
    thread::sleep(Duration::from_millis(300));
    // Redis 7.0 has no way to open a key uncounted and silent.
    if valkey {
        assert_eq!(ks(&mut con), (0, 0), "no lookup of EchoMQ's counted");
    }
    // A client's read of a missing key: the first `keymiss` there is, where EchoMQ is silent.
    let _: Option<String> = cmd("GET")
        .arg("read-by-a-client")
        .query(&mut con)
        .expect("get");
    if valkey {
        let first: String = misses
            .get_message()
            .expect("a keymiss event")
            .get_payload()
            .expect("payload");
        assert_eq!(first, "read-by-a-client");
    }
    let before = ks(&mut con);
    stats(&mut con, "batch");
    let after = ks(&mut con);
    assert_eq!(
        (after.0 - before.0) + (after.1 - before.1),
        4,
        "EMQ.STATS reads four sets"
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
    assert_eq!(state(&mut con, q, &id).as_deref(), Some("scheduled"));
    assert!(
        score(&mut con, q, "schedule", &id).is_some(),
        "still in schedule"
    );
    assert_eq!(watched(&mut con), 1);
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
        wait_until(Duration::from_secs(5), || state(&mut con, q, &id)
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
    let server = Server::start(Options::default());
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
    assert_eq!(watched(&mut con), 0);
}

#[test]
fn a_due_time_in_the_past_is_a_plain_enqueue() {
    let server = Server::shared();
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
    assert_eq!(state(&mut con, &q, &id).as_deref(), Some("pending"));
    assert_eq!(score(&mut con, &q, "pending", &id), Some(0.0));
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["scheduled"]), (1, 0));
}

#[test]
fn a_due_time_is_kept_exactly_and_one_a_score_cannot_hold_is_refused() {
    let server = Server::shared();
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
        score(&mut con, &q, "schedule", &job_id(1)),
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
fn claim_takes_the_lowest_ids_and_counts_attempts() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("claim");
    for i in [5u64, 3, 9, 1] {
        enqueue(&mut con, &q, &job_id(i), &format!("p{i}"));
    }
    let before = now_ms();
    let jobs = claim(&mut con, &q, &["COUNT", "3", "LEASE", "60000"]).expect("claim");
    let ids: Vec<_> = jobs.iter().map(|j| j.0.clone()).collect();
    assert_eq!(ids, vec![job_id(1), job_id(3), job_id(5)]);
    assert!(jobs.iter().all(|j| j.2 == 1));
    assert_eq!(jobs[0].1, b"p1");
    for id in &ids {
        assert_eq!(state(&mut con, &q, id).as_deref(), Some("active"));
        let deadline = score(&mut con, &q, "active", id).expect("active");
        assert!(deadline >= (before + 60_000) as f64 && deadline <= (now_ms() + 60_000) as f64);
    }
    assert_eq!(attempts(&mut con, &q, &job_id(1)).as_deref(), Some("1"));
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["active"]), (1, 3));
}

#[test]
fn attempts_written_by_hand_give_a_token_the_lease_commands_take() {
    // A row whose `attempts` someone overwrote: a claim still counts from something sane and
    // hands out a token that RENEW, ACK and FAIL accept (they take 1 up to 2^63-1).
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("handmade");
    let cases = [
        (
            "9223372036854775807",
            9223372036854775807,
            "the largest stays the largest",
        ),
        ("-5", 1, "a negative count is none"),
        ("many", 1, "not a number is none"),
    ];
    for (i, (written, token, why)) in cases.iter().enumerate() {
        let id = job_id(i as u64 + 1);
        enqueue(&mut con, &q, &id, "p");
        cmd("HSET")
            .arg(row_key(&q, &id))
            .arg("attempts")
            .arg(*written)
            .query::<i64>(&mut con)
            .expect("hset");
        let jobs = claim(&mut con, &q, &[]).expect("claim");
        assert_eq!(
            (jobs[0].0.as_str(), jobs[0].2),
            (id.as_str(), *token),
            "{why}"
        );
        assert_eq!(
            attempts(&mut con, &q, &id),
            Some(token.to_string()),
            "{why}"
        );
        let acked: i64 = cmd("EMQ.ACK")
            .arg(&q)
            .arg(&id)
            .arg(*token)
            .query(&mut con)
            .expect("the token is accepted");
        assert_eq!(acked, 1, "{why}");
    }
}

#[test]
fn a_row_overwritten_with_another_type_stops_claims_until_it_is_removed() {
    // README: a queue key of another type is refused by every command that reaches it, a
    // claim included once that job is first in `pending`; deleting the key lets the queue go on.
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("badrow");
    for i in 1..=2 {
        enqueue(&mut con, &q, &job_id(i), &format!("p{i}"));
    }
    let _: () = cmd("SET")
        .arg(row_key(&q, &job_id(1)))
        .arg("not a row")
        .query(&mut con)
        .expect("set");
    let err = expect_err(&mut con, cmd("EMQ.CLAIM").arg(&q));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(
        set_members(&mut con, &q, "pending"),
        vec![job_id(1), job_id(2)],
        "nothing moved"
    );
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("del");
    let jobs = claim(&mut con, &q, &["COUNT", "2"]).expect("claim");
    let ids: Vec<_> = jobs.iter().map(|j| j.0.clone()).collect();
    assert_eq!(ids, vec![job_id(2)], "the id without a row is dropped");
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
}

#[test]
fn claim_refusals_write_nothing() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("refuse");
    enqueue(&mut con, &q, &job_id(1), "x");
    for (opts, code) in [
        (vec!["COUNT", "0"], "ERR"),
        (vec!["COUNT", "1001"], "ERR"),
        (vec!["LEASE", "-5"], "ERR"),
        (vec!["BLOCK", "soon"], "ERR"),
        (vec!["COUNT"], "ERR"),
        (vec!["WAIT", "1"], "ERR"),
    ] {
        let mut c = cmd("EMQ.CLAIM");
        c.arg(&q);
        for o in &opts {
            c.arg(*o);
        }
        let err = expect_err(&mut con, &c);
        assert!(err.starts_with(code), "{opts:?}: {err}");
    }
    assert!(expect_err(&mut con, cmd("EMQ.CLAIM").arg("a b")).starts_with("EMQQUEUE"));
    cmd("SET")
        .arg(set_key(&q, "active"))
        .arg("oops")
        .query::<()>(&mut con)
        .expect("set");
    assert!(expect_err(&mut con, cmd("EMQ.CLAIM").arg(&q)).starts_with("WRONGTYPE"));
    assert_eq!(
        state(&mut con, &q, &job_id(1)).as_deref(),
        Some("pending"),
        "nothing moved"
    );
}

#[test]
fn a_blocked_claim_wakes_on_enqueue() {
    let server = Server::shared();
    let q = unique_queue("wake");
    let mut waiter = server.conn();
    let url = server.url();
    let q2 = q.clone();
    let producer = thread::spawn(move || {
        thread::sleep(Duration::from_millis(300));
        let mut con = redis::Client::open(url)
            .expect("client")
            .get_connection()
            .expect("conn");
        enqueue(&mut con, &q2, &job_id(77), "wake up");
    });
    let start = Instant::now();
    let jobs = claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("woken, not timed out");
    assert_eq!(jobs, vec![(job_id(77), b"wake up".to_vec(), 1)]);
    assert!(start.elapsed() < Duration::from_secs(9));
    producer.join().expect("producer");
}

#[test]
fn a_blocked_claim_times_out_with_null_and_never_blocks_in_multi_or_a_script() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("timeout");
    assert_eq!(claim(&mut con, &q, &["BLOCK", "100"]), None);
    let (r,): (Value,) = redis::pipe()
        .atomic()
        .cmd("EMQ.CLAIM")
        .arg(&q)
        .arg("BLOCK")
        .arg(0)
        .query(&mut con)
        .expect("multi");
    assert_eq!(r, Value::Nil, "inside MULTI the claim answers at once");
    let start = Instant::now();
    let r: Value = cmd("EVAL")
        .arg("return redis.call('EMQ.CLAIM', ARGV[1], 'BLOCK', 0)")
        .arg(0)
        .arg(&q)
        .query(&mut con)
        .expect("eval");
    assert_eq!(r, Value::Nil, "inside a script the claim answers at once");
    assert!(start.elapsed() < Duration::from_secs(5));
}

#[test]
fn client_unblock_answers_a_blocked_claim() {
    let server = Server::shared();
    let q = unique_queue("unblock");
    let mut admin = server.conn();
    for (how, expected) in [(None, Ok(Value::Nil)), (Some("ERROR"), Err("UNBLOCKED"))] {
        let mut waiter = server.conn();
        let id: i64 = cmd("CLIENT").arg("ID").query(&mut waiter).expect("id");
        let queue = q.clone();
        let blocked = thread::spawn(move || {
            cmd("EMQ.CLAIM")
                .arg(&queue)
                .arg("BLOCK")
                .arg(0)
                .query::<Value>(&mut waiter)
                .map_err(|e| error_text(&e))
        });
        let mut unblock = cmd("CLIENT");
        unblock.arg("UNBLOCK").arg(id);
        if let Some(how) = how {
            unblock.arg(how);
        }
        // The claim may not have reached the server yet: retry until it is blocked.
        assert!(wait_until(Duration::from_secs(5), || unblock
            .query::<i64>(&mut admin)
            .expect("unblock")
            == 1));
        let reply = blocked.join().expect("waiter");
        match expected {
            Ok(v) => assert_eq!(reply, Ok(v)),
            Err(prefix) => assert!(
                reply.as_ref().is_err_and(|e| e.starts_with(prefix)),
                "{reply:?}"
            ),
        }
    }
}

#[test]
fn another_modules_blocking_call_of_claim_is_served_when_a_job_arrives() {
    // A module may let an RM_Call block (its K flag): the claim then waits on a client of the
    // server's own, with no ACL user, and is served like any other waiter.
    let server = Server::start(Options::default().arg("loadmodule", &caller_module()));
    let mut con = server.conn();
    let q = unique_queue("module-wait");
    if info_field(&mut con, "server", "valkey_version").is_none() {
        // Redis 7.0 has no K flag: the call is refused before EchoMQ runs.
        let err = expect_err(
            &mut con,
            cmd("EMQCALLER.CALL")
                .arg("AS-ROOT-BLOCKING")
                .arg("EMQ.CLAIM")
                .arg(&q),
        );
        assert!(err.contains("the call failed"), "{err}");
        assert!(server.is_alive());
        return;
    }
    for block in ["0", "100"] {
        let reply: String = cmd("EMQCALLER.CALL")
            .arg("AS-ROOT-BLOCKING")
            .arg("EMQ.CLAIM")
            .arg(&q)
            .arg("BLOCK")
            .arg(block)
            .query(&mut con)
            .expect("a blocking call");
        assert_eq!(reply, "PROMISE", "nothing ready: the call waits");
    }
    std::thread::sleep(Duration::from_millis(300)); // the second one times out
    enqueue(&mut con, &q, &job_id(1), "for the module");
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q)["active"]
            == 1),
        "the waiting call claimed the job: {:?}",
        stats(&mut con, &q)
    );
    assert_eq!(state(&mut con, &q, &job_id(1)).as_deref(), Some("active"));
    assert!(server.is_alive());
}

#[test]
fn blocked_claimers_are_served_in_arrival_order() {
    let server = Server::shared();
    let q = unique_queue("fifo");
    let mut handles = Vec::new();
    for n in 0..3u64 {
        let url = server.url();
        let q = q.clone();
        handles.push(thread::spawn(move || {
            let mut con = redis::Client::open(url)
                .expect("client")
                .get_connection()
                .expect("conn");
            thread::sleep(Duration::from_millis(100 * n));
            let jobs = claim(&mut con, &q, &["BLOCK", "10000"]).expect("served");
            (n, jobs[0].0.clone())
        }));
    }
    let mut con = server.conn();
    // Wait until all three are blocked, then feed them one job at a time.
    assert!(wait_until(Duration::from_secs(5), || blocked_clients(
        &mut con
    ) >= 3));
    for i in 1..=3 {
        enqueue(&mut con, &q, &job_id(i), "x");
        thread::sleep(Duration::from_millis(50));
    }
    let mut got: Vec<(u64, String)> = handles
        .into_iter()
        .map(|h| h.join().expect("waiter"))
        .collect();
    got.sort();
    assert_eq!(got, vec![(0, job_id(1)), (1, job_id(2)), (2, job_id(3))]);
}

#[test]
fn a_blocked_claim_is_served_from_its_database_through_swapdb_and_flushall() {
    // A waiter waits on its queue in its own database, as `BLPOP` does: `SWAPDB` bringing a
    // job there serves it, and `FLUSHALL` under it leaves it waiting for the next enqueue.
    // SWAPDB and FLUSHALL touch the whole server: a server of its own.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let waiter = |q: &'static str| {
        let mut waiter = server.conn();
        thread::spawn(move || claim(&mut waiter, q, &["BLOCK", "10000"]))
    };

    let swapped = waiter("swapped");
    assert!(until_blocked(&mut con, 1));
    in_db(&mut con, 1);
    enqueue(&mut con, "swapped", &job_id(1), "from database 1");
    let _: () = cmd("SWAPDB").arg(0).arg(1).query(&mut con).expect("swapdb");
    let jobs = swapped.join().expect("waiter").expect("served");
    assert_eq!(jobs, vec![(job_id(1), b"from database 1".to_vec(), 1)]);
    in_db(&mut con, 0);
    assert_eq!(
        state(&mut con, "swapped", &job_id(1)).as_deref(),
        Some("active")
    );

    let flushed = waiter("flushed");
    assert!(until_blocked(&mut con, 1));
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    thread::sleep(Duration::from_millis(100));
    assert_eq!(blocked_clients(&mut con), 1, "still waiting after FLUSHALL");
    enqueue(&mut con, "flushed", &job_id(3), "after the flush");
    let jobs = flushed.join().expect("waiter").expect("served");
    assert_eq!(jobs, vec![(job_id(3), b"after the flush".to_vec(), 1)]);
}

#[test]
fn a_claimer_that_goes_away_while_blocked_takes_no_job() {
    // Two waiters ahead of a live one go away: one closes its socket, one is killed by
    // `CLIENT KILL`. The job goes to the live waiter, with attempts 1; the next one, with no
    // waiter left, stays pending. No lease is held for a worker that is gone.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("gone");

    let mut closing = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let request = format!(
        "*4\r\n$9\r\nEMQ.CLAIM\r\n${}\r\n{q}\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n",
        q.len()
    );
    std::io::Write::write_all(&mut closing, request.as_bytes()).expect("send the claim");
    assert!(until_blocked(&mut con, 1));

    let mut killed = server.conn();
    let killed_id: i64 = cmd("CLIENT").arg("ID").query(&mut killed).expect("id");
    let queue = q.clone();
    let killed = thread::spawn(move || {
        cmd("EMQ.CLAIM")
            .arg(&queue)
            .arg("BLOCK")
            .arg(0)
            .query::<Value>(&mut killed)
    });
    assert!(until_blocked(&mut con, 2));

    let mut live = server.conn();
    let queue = q.clone();
    let live = thread::spawn(move || claim(&mut live, &queue, &["BLOCK", "10000"]));
    assert!(until_blocked(&mut con, 3));

    drop(closing);
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(killed_id)
        .query(&mut con)
        .expect("client kill");
    assert_eq!(n, 1);
    assert!(killed.join().expect("killed waiter").is_err());
    assert!(until_blocked(&mut con, 1), "the server let both waiters go");

    enqueue(&mut con, &q, &job_id(1), "for the live one");
    let jobs = live.join().expect("live waiter").expect("served");
    assert_eq!(jobs, vec![(job_id(1), b"for the live one".to_vec(), 1)]);
    enqueue(&mut con, &q, &job_id(2), "for nobody yet");
    thread::sleep(Duration::from_millis(50));
    let counts = stats(&mut con, &q);
    assert_eq!((counts["pending"], counts["active"]), (1, 1), "{counts:?}");
    assert_eq!(state(&mut con, &q, &job_id(2)).as_deref(), Some("pending"));
    assert_eq!(
        attempts(&mut con, &q, &job_id(1)).as_deref(),
        Some("1"),
        "claimed once, by the live waiter"
    );
}

#[test]
fn a_blocked_claim_wakes_when_a_scheduled_job_becomes_due() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("duewake");
    enqueue_delayed(&mut con, &q, &job_id(8), "d", 300);
    let mut waiter = server.conn();
    let jobs = claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("woken by the timer");
    assert_eq!(jobs[0].0, job_id(8));
}

#[test]
fn a_lease_past_its_deadline_holds_until_the_job_is_taken_back() {
    // Inside one transaction the timer cannot take the job back: an ACK, RENEW or FAIL just
    // after the deadline is still the worker's. Once the timer has run, it is stale.
    let server = Server::start(Options::default().arg("enable-debug-command", "local"));
    let mut con = server.conn();
    let late = |con: &mut Connection, q: &str, then: &mut redis::Cmd| -> Vec<Value> {
        enqueue(con, q, &job_id(1), "work");
        redis::pipe()
            .atomic()
            .cmd("EMQ.CLAIM")
            .arg(q)
            .arg("LEASE")
            .arg(1)
            .cmd("DEBUG")
            .arg("SLEEP")
            .arg("0.01")
            .add_command(then.clone())
            .query(con)
            .expect("transaction")
    };
    let replies = late(
        &mut con,
        "late-ack",
        cmd("EMQ.ACK").arg("late-ack").arg(job_id(1)).arg(1),
    );
    assert_eq!(replies[2], Value::Int(1));
    assert_eq!(
        state(&mut con, "late-ack", &job_id(1)).as_deref(),
        Some("done")
    );
    let replies = late(
        &mut con,
        "late-renew",
        cmd("EMQ.RENEW")
            .arg("late-renew")
            .arg(job_id(1))
            .arg(1)
            .arg(60_000),
    );
    assert!(matches!(replies[2], Value::Int(deadline) if deadline > now_ms() + 50_000));
    let replies = late(
        &mut con,
        "late-fail",
        cmd("EMQ.FAIL")
            .arg("late-fail")
            .arg(job_id(1))
            .arg(1)
            .arg("RETRY-IN")
            .arg(60_000),
    );
    assert_eq!(text(&replies[2]), "scheduled");

    enqueue(&mut con, "taken-back", &job_id(1), "work");
    let jobs = claim(&mut con, "taken-back", &["LEASE", "1"]).expect("claim");
    assert_eq!(jobs[0].2, 1);
    assert!(
        wait_until(Duration::from_secs(5), || score(
            &mut con,
            "taken-back",
            "pending",
            &job_id(1)
        )
        .is_some()),
        "the timer takes the job back"
    );
    let err = expect_err(
        &mut con,
        cmd("EMQ.ACK").arg("taken-back").arg(job_id(1)).arg(1),
    );
    assert!(err.starts_with("EMQLEASE"), "{err}");
}

#[test]
fn an_expired_lease_returns_the_job_and_fences_the_old_worker() {
    let server = Server::shared();
    let q = unique_queue("fence");
    let mut a = server.conn();
    enqueue(&mut a, &q, &job_id(1), "work");
    let first = claim(&mut a, &q, &["LEASE", "200"]).expect("a claims");
    assert_eq!(first[0].2, 1, "token 1");
    drop(a); // worker A crashes: its connection closes without an ack

    let mut b = server.conn();
    let second = claim(&mut b, &q, &["BLOCK", "10000"]).expect("reclaimed after the lease");
    assert_eq!(second, vec![(job_id(1), b"work".to_vec(), 2)]);

    let mut a_again = server.conn();
    let err = expect_err(&mut a_again, cmd("EMQ.ACK").arg(&q).arg(job_id(1)).arg(1));
    assert!(err.starts_with("EMQLEASE"), "{err}");
    let err = expect_err(
        &mut a_again,
        cmd("EMQ.RENEW").arg(&q).arg(job_id(1)).arg(1).arg(1000),
    );
    assert!(err.starts_with("EMQLEASE"), "{err}");
    let err = expect_err(&mut a_again, cmd("EMQ.FAIL").arg(&q).arg(job_id(1)).arg(1));
    assert!(err.starts_with("EMQLEASE"), "{err}");
    assert_eq!(
        state(&mut b, &q, &job_id(1)).as_deref(),
        Some("active"),
        "the stale worker changed nothing"
    );
    let ok: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(2)
        .query(&mut b)
        .expect("b acks");
    assert_eq!(ok, 1);
}

#[test]
fn renew_extends_a_live_lease() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("renew");
    enqueue(&mut con, &q, &job_id(1), "x");
    claim(&mut con, &q, &["LEASE", "300"]).expect("claim");
    let deadline: i64 = cmd("EMQ.RENEW")
        .arg(&q)
        .arg(job_id(1))
        .arg(1)
        .arg(60_000)
        .query(&mut con)
        .expect("renew");
    assert!(deadline > now_ms() + 50_000);
    assert_eq!(
        score(&mut con, &q, "active", &job_id(1)),
        Some(deadline as f64)
    );
    thread::sleep(Duration::from_millis(500));
    assert_eq!(
        stats(&mut con, &q)["active"],
        1,
        "not reclaimed after the old lease"
    );
    let err = expect_err(
        &mut con,
        cmd("EMQ.RENEW").arg(&q).arg(job_id(1)).arg("x").arg(1000),
    );
    assert!(err.starts_with("EMQLEASE"), "{err}");
    let err = expect_err(
        &mut con,
        cmd("EMQ.RENEW").arg(&q).arg(job_id(2)).arg(1).arg(1000),
    );
    assert!(
        err.starts_with("EMQLEASE"),
        "a job never claimed has no lease: {err}"
    );
}

#[test]
fn ack_keeps_the_row_as_done_so_a_re_enqueue_is_a_duplicate() {
    let server = Server::start(Options::default().arg("emq.done-ttl-ms", "60000"));
    let mut con = server.conn();
    let q = unique_queue("ack");
    enqueue(&mut con, &q, &job_id(1), "x");
    claim(&mut con, &q, &[]).expect("claim");
    let ok: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(1)
        .query(&mut con)
        .expect("ack");
    assert_eq!(ok, 1);
    assert_eq!(state(&mut con, &q, &job_id(1)).as_deref(), Some("done"));
    let ttl: i64 = cmd("PTTL")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("pttl");
    assert!(ttl > 50_000 && ttl <= 60_000, "{ttl}");
    assert_eq!(
        enqueue(&mut con, &q, &job_id(1), "again"),
        0,
        "still a duplicate"
    );
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["active"]), (0, 0));
    let err = expect_err(&mut con, cmd("EMQ.ACK").arg(&q).arg(job_id(1)).arg(1));
    assert!(err.starts_with("EMQLEASE"), "a second ack: {err}");
}

#[test]
fn fail_retries_with_backoff_then_buries_the_job() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "100")
            .arg("emq.backoff-max-ms", "150"),
    );
    let mut con = server.conn();
    let q = unique_queue("fail");
    let id = job_id(1);
    enqueue(&mut con, &q, &id, "x");

    // Attempt 1 fails with an explicit retry time.
    claim(&mut con, &q, &[]).expect("claim 1");
    let before = now_ms();
    let r: String = cmd("EMQ.FAIL")
        .arg(&q)
        .arg(&id)
        .arg(1)
        .arg("ERROR")
        .arg("boom 1")
        .arg("RETRY-IN")
        .arg(5000)
        .query(&mut con)
        .expect("fail 1");
    assert_eq!(r, "scheduled");
    assert_eq!(state(&mut con, &q, &id).as_deref(), Some("scheduled"));
    let due = score(&mut con, &q, "schedule", &id).expect("scheduled");
    assert!(due >= (before + 5000) as f64 && due <= (now_ms() + 5000) as f64);
    let error: String = cmd("HGET")
        .arg(row_key(&q, &id))
        .arg("error")
        .query(&mut con)
        .expect("error");
    assert_eq!(error, "boom 1");

    // Pull it forward, then attempt 2 fails with the default backoff: base * 2 capped at 150.
    cmd("ZADD")
        .arg(set_key(&q, "schedule"))
        .arg(0)
        .arg(&id)
        .query::<i64>(&mut con)
        .expect("due now");
    let jobs = claim(&mut con, &q, &[]).expect("claim 2");
    assert_eq!(jobs[0].2, 2);
    let before = now_ms();
    let r: String = cmd("EMQ.FAIL")
        .arg(&q)
        .arg(&id)
        .arg(2)
        .query(&mut con)
        .expect("fail 2");
    assert_eq!(r, "scheduled");
    let due = score(&mut con, &q, "schedule", &id).expect("scheduled");
    assert!(
        due >= (before + 150) as f64 && due <= (now_ms() + 150) as f64,
        "backoff capped at 150: {due}"
    );

    // Attempt 3 is the last: dead.
    let mut waiter = server.conn();
    let jobs = claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("claim 3");
    assert_eq!(jobs[0].2, 3);
    let r: String = cmd("EMQ.FAIL")
        .arg(&q)
        .arg(&id)
        .arg(3)
        .arg("ERROR")
        .arg("final")
        .query(&mut con)
        .expect("fail 3");
    assert_eq!(r, "dead");
    assert_eq!(state(&mut con, &q, &id).as_deref(), Some("dead"));
    assert!(score(&mut con, &q, "dead", &id).is_some());
    let s = stats(&mut con, &q);
    assert_eq!(
        (s["pending"], s["active"], s["scheduled"], s["dead"]),
        (0, 0, 0, 1)
    );

    // Requeue brings it back with its attempts reset.
    let n: i64 = cmd("EMQ.REQUEUE")
        .arg(&q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue");
    assert_eq!(n, 1);
    let jobs = claim(&mut con, &q, &[]).expect("claim again");
    assert_eq!(jobs[0].2, 1);
    let n: i64 = cmd("EMQ.REQUEUE")
        .arg(&q)
        .arg(&id)
        .query(&mut con)
        .expect("requeue of a live job");
    assert_eq!(n, 0);
}

#[test]
fn a_job_whose_worker_keeps_crashing_dies_after_max_attempts() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "2"));
    let mut con = server.conn();
    let q = unique_queue("crashy");
    enqueue(&mut con, &q, &job_id(1), "x");
    claim(&mut con, &q, &["LEASE", "50"]).expect("1");
    let jobs = claim(&mut con, &q, &["LEASE", "50", "BLOCK", "5000"]).expect("2");
    assert_eq!(jobs[0].2, 2);
    assert!(wait_until(Duration::from_secs(5), || stats(&mut con, &q)
        ["dead"]
        == 1));
    let error: String = cmd("HGET")
        .arg(row_key(&q, &job_id(1)))
        .arg("error")
        .query(&mut con)
        .expect("error");
    assert_eq!(error, "lease expired");
    // A death by lease counts in INFO like one by FAIL.
    assert_eq!(info_int(&mut con, "emq", "emq_dead"), 1);
}

#[test]
fn cancel_removes_pending_and_scheduled_jobs_only() {
    let server = Server::shared();
    let mut con = server.conn();
    let q = unique_queue("cancel");
    enqueue(&mut con, &q, &job_id(1), "pending");
    enqueue_delayed(&mut con, &q, &job_id(2), "later", 60_000);
    enqueue(&mut con, &q, &job_id(3), "active");
    let cancel = |con: &mut Connection, id: &str| -> i64 {
        cmd("EMQ.CANCEL")
            .arg(&q)
            .arg(id)
            .query(con)
            .expect("cancel")
    };
    assert_eq!(cancel(&mut con, &job_id(1)), 1);
    assert_eq!(cancel(&mut con, &job_id(2)), 1);
    claim(&mut con, &q, &[]).expect("claim 3");
    assert_eq!(
        cancel(&mut con, &job_id(3)),
        0,
        "an active job is not cancelled"
    );
    assert_eq!(cancel(&mut con, &job_id(4)), 0, "no such job");
    assert_eq!(state(&mut con, &q, &job_id(1)), None, "the row is gone");
    assert_eq!(state(&mut con, &q, &job_id(2)), None);
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["scheduled"], s["active"]), (0, 0, 1));
    assert!(expect_err(&mut con, cmd("EMQ.CANCEL").arg(&q).arg("bad")).starts_with("EMQID"));
}

#[test]
fn lifecycle_commands_check_acl_on_derived_keys() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let mut w = user_with(&server, "w", &["~emq:{orders}:*", "+@all"]);
    enqueue(&mut w, "orders", &job_id(1), "x");
    assert_eq!(claim(&mut w, "orders", &[]).map(|j| j.len()), Some(1));
    enqueue(&mut admin, "payments", &job_id(1), "x");
    for c in [
        cmd("EMQ.CLAIM").arg("payments").clone(),
        cmd("EMQ.STATS").arg("payments").clone(),
        cmd("EMQ.CANCEL").arg("payments").arg(job_id(1)).clone(),
        cmd("EMQ.ACK").arg("payments").arg(job_id(1)).arg(1).clone(),
    ] {
        let err = expect_err(&mut w, &c);
        assert!(err.starts_with("NOPERM"), "{err}");
    }
    assert_eq!(
        state(&mut admin, "payments", &job_id(1)).as_deref(),
        Some("pending")
    );
}

#[test]
fn every_job_ends_done_or_dead_exactly_once_under_concurrency() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "1")
            .arg("emq.backoff-max-ms", "5"),
    );
    every_job_ends_once(&server);
}

#[test]
fn every_job_ends_exactly_once_with_io_threads_serving_the_clients() {
    // Valkey's I/O threads read requests and write replies (a woken claimer's included) while
    // the main thread runs the commands. They start only under load: other clients supply it.
    let server = Server::start(
        Options::default()
            .arg("io-threads", "2")
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "1")
            .arg("emq.backoff-max-ms", "5"),
    );
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let load: Vec<_> = (0..6)
        .map(|_| {
            let (mut con, stop) = (server.conn(), stop.clone());
            thread::spawn(move || {
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    let mut p = redis::pipe();
                    for _ in 0..100 {
                        p.cmd("GET").arg("not-a-queue-key");
                    }
                    let _: Vec<Option<String>> = p.query(&mut con).expect("load");
                }
            })
        })
        .collect();
    every_job_ends_once(&server);
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for l in load {
        l.join().expect("load");
    }
    let mut con = server.conn();
    if info_field(&mut con, "server", "valkey_version").is_some() {
        assert!(
            info_int(&mut con, "stats", "io_threaded_reads_processed") > 0,
            "the I/O threads took part"
        );
    }
}

/// 20,000 jobs, 8 workers claiming 10 at a time, one in five attempts failed: every job ends
/// `done` or `dead` exactly once, no job is held by two workers at once, and the rows agree.
fn every_job_ends_once(server: &Server) {
    const JOBS: u64 = 20_000;
    const WORKERS: usize = 8;
    let q = unique_queue("exactly-once");
    let mut con = server.conn();
    for chunk in (1..=JOBS).collect::<Vec<_>>().chunks(1000) {
        let mut p = redis::pipe();
        for i in chunk {
            p.cmd("EMQ.ENQUEUE")
                .arg(&q)
                .arg(job_id(*i))
                .arg(format!("job {i}"));
        }
        let _: Vec<i64> = p.query(&mut con).expect("enqueue batch");
    }

    let held: Arc<Mutex<HashSet<String>>> = Arc::default();
    let outcomes: Arc<Mutex<Vec<(String, &'static str)>>> = Arc::default();
    let violations: Arc<Mutex<Vec<String>>> = Arc::default();
    let workers: Vec<_> = (0..WORKERS)
        .map(|w| {
            let (url, q) = (server.url(), q.clone());
            let (held, outcomes, violations) = (held.clone(), outcomes.clone(), violations.clone());
            thread::spawn(move || {
                let mut con = redis::Client::open(url)
                    .expect("client")
                    .get_connection()
                    .expect("conn");
                let mut rng = Rng::new(w as u64 + 1);
                // Until nothing arrives for 1.5 s: the queue is drained.
                while let Some(jobs) = claim(&mut con, &q, &["COUNT", "10", "BLOCK", "1500"]) {
                    // Hold the whole batch while working through it, as a real worker would.
                    for (id, payload, _) in &jobs {
                        if !held.lock().expect("lock").insert(id.clone()) {
                            violations
                                .lock()
                                .expect("lock")
                                .push(format!("{id} held twice"));
                        }
                        if !payload.starts_with(b"job ") {
                            violations
                                .lock()
                                .expect("lock")
                                .push(format!("{id} payload"));
                        }
                    }
                    for (id, _, token) in jobs {
                        held.lock().expect("lock").remove(&id);
                        if rng.below(10) < 2 {
                            let r: String = cmd("EMQ.FAIL")
                                .arg(&q)
                                .arg(&id)
                                .arg(token)
                                .arg("ERROR")
                                .arg("random")
                                .query(&mut con)
                                .expect("fail");
                            if r == "dead" {
                                outcomes.lock().expect("lock").push((id, "dead"));
                            }
                        } else {
                            let n: i64 = cmd("EMQ.ACK")
                                .arg(&q)
                                .arg(&id)
                                .arg(token)
                                .query(&mut con)
                                .expect("ack");
                            assert_eq!(n, 1);
                            outcomes.lock().expect("lock").push((id, "done"));
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    assert!(
        violations.lock().expect("lock").is_empty(),
        "{:?}",
        violations.lock().expect("lock")
    );
    let outcomes = outcomes.lock().expect("lock").clone();
    let mut by_id: HashMap<String, Vec<&str>> = HashMap::new();
    for (id, o) in &outcomes {
        by_id.entry(id.clone()).or_default().push(o);
    }
    assert_eq!(by_id.len() as u64, JOBS, "no job lost");
    assert!(
        by_id.values().all(|v| v.len() == 1),
        "every job ended exactly once"
    );
    let dead = outcomes.iter().filter(|(_, o)| *o == "dead").count();
    assert!(dead > 0, "some jobs exhausted their attempts");
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["active"], s["scheduled"]), (0, 0, 0));
    assert_eq!(s["dead"] as usize, dead);
    let mut p = redis::pipe();
    for i in 1..=JOBS {
        p.cmd("HGET").arg(row_key(&q, &job_id(i))).arg("state");
    }
    let states: Vec<String> = p.query(&mut con).expect("states");
    for (i, st) in states.iter().enumerate() {
        let expected = by_id[&job_id(i as u64 + 1)][0];
        assert_eq!(st, expected, "row state of job {}", i + 1);
    }
}

#[test]
fn an_earlier_due_time_written_later_is_not_missed() {
    // The timer looks at a queue again at its earliest due time; a later write of an earlier
    // one (by this module or by any other writer) must bring that visit forward.
    let server = Server::shared();
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

#[test]
fn lifecycle_writes_fire_the_keyspace_events_native_commands_would() {
    let server = Server::start(Options::default().arg("notify-keyspace-events", "KEA"));
    let mut con = server.conn();
    let mut sub_con = server.conn();
    let mut events = sub_con.as_pubsub();
    events.psubscribe("__keyspace@0__:*").expect("psubscribe");
    events
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    let q = unique_queue("events");
    let id = job_id(1);
    enqueue(&mut con, &q, &id, "x");
    claim(&mut con, &q, &[]).expect("claim");
    let _: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(&id)
        .arg(1)
        .query(&mut con)
        .expect("ack");
    enqueue_delayed(&mut con, &q, &job_id(2), "later", 60_000);
    let _: i64 = cmd("EMQ.CANCEL")
        .arg(&q)
        .arg(job_id(2))
        .query(&mut con)
        .expect("cancel");
    let expected = [
        // ENQUEUE: HSET row, ZADD pending.
        ("job:1", "hset"),
        ("pending", "zadd"),
        // CLAIM: ZREM pending (now empty, so deleted), HSET row, ZADD active.
        ("pending", "zrem"),
        ("pending", "del"),
        ("job:1", "hset"),
        ("active", "zadd"),
        // ACK: ZREM active, HSET row, PEXPIREAT row.
        ("active", "zrem"),
        ("active", "del"),
        ("job:1", "hset"),
        ("job:1", "expire"),
        // ENQUEUE ... DELAY: HSET row, ZADD schedule.
        ("job:2", "hset"),
        ("schedule", "zadd"),
        // CANCEL: ZREM schedule, DEL row.
        ("schedule", "zrem"),
        ("schedule", "del"),
        ("job:2", "del"),
    ];
    let mut seen = Vec::new();
    while seen.len() < expected.len() {
        let msg = events.get_message().expect("an event");
        let key = msg
            .get_channel_name()
            .trim_start_matches("__keyspace@0__:")
            .replace(&format!("emq:{{{q}}}:"), "")
            .replace(&job_id(1), "1")
            .replace(&job_id(2), "2");
        let event: String = msg.get_payload().expect("event");
        seen.push((key, event));
    }
    let expected: Vec<(String, String)> = expected
        .iter()
        .map(|(k, e)| (k.to_string(), e.to_string()))
        .collect();
    assert_eq!(seen, expected);
}

/// Pending members whose rows are gone (deleted by hand, evicted under an `allkeys-*` policy)
/// are dropped by the claim that meets them, which still hands out the jobs behind them, and
/// a blocking claim does not go to sleep while such jobs wait.
#[test]
fn a_claim_passes_over_pending_members_whose_row_is_gone() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let dropped = |con: &mut Connection| info_int(con, "emq", "emq_dropped");
    let q = unique_queue("orphans");
    for n in 1..=3 {
        enqueue(&mut con, &q, &job_id(n), &format!("job {n}"));
    }
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .arg(row_key(&q, &job_id(2)))
        .query(&mut con)
        .expect("del");
    let jobs = claim(&mut con, &q, &[]).expect("a reply");
    assert_eq!(jobs, vec![(job_id(3), b"job 3".to_vec(), 1)]);
    assert_eq!(set_len(&mut con, &q, "pending"), 0, "both orphans dropped");
    assert_eq!(dropped(&mut con), 2);

    // More orphans than one claim passes over: a blocking claim still gets the job behind
    // them, at once.
    let q = unique_queue("orphans");
    let total = 2_500u64;
    let mut batch = cmd("EMQ.MENQUEUE");
    batch.arg(&q);
    for n in 1..=total {
        batch.arg(job_id(n)).arg("x");
    }
    let _: Vec<i64> = batch.query(&mut con).expect("menqueue");
    let mut del = cmd("DEL");
    for n in 1..total {
        del.arg(row_key(&q, &job_id(n)));
    }
    let _: i64 = del.query(&mut con).expect("del");
    let start = Instant::now();
    let jobs = claim(&mut con, &q, &["BLOCK", "5000"]).expect("not timed out");
    assert_eq!(jobs, vec![(job_id(total), b"x".to_vec(), 1)]);
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    assert_eq!(dropped(&mut con), 2 + (total as i64 - 1));

    // A scheduled job whose row is gone is dropped when it comes due, not moved to pending.
    let q = unique_queue("orphans");
    enqueue_delayed(&mut con, &q, &job_id(1), "x", 50);
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("del");
    assert!(wait_until(Duration::from_secs(5), || {
        set_len(&mut con, &q, "schedule") == 0
    }));
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    assert_eq!(dropped(&mut con), 2 + total as i64);
}
