//! Lua speakers under the default settings (`emq.learn-foreign-writes no`): EchoMQ hears of no
//! write to any other key, yet a claim waiting in the module takes a script's job at once, a
//! job a script schedules comes due for it, a claim promotes what a script scheduled, and
//! `EMQ.STATS` and `EMQ.QUEUES` see a queue only a script wrote.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

const ENQUEUE_LUA: &str = include_str!("../lua/enqueue.lua");

/// A scheduled job as a Lua speaker writes one: its row and its `schedule` member, in one
/// script.
const SCHEDULE_LUA: &str = "redis.call('HSET', KEYS[1], 'state', 'scheduled', 'attempts', '0', \
     'payload', ARGV[2]); return redis.call('ZADD', KEYS[2], ARGV[3], ARGV[1])";

fn lua_enqueue(con: &mut Connection, queue: &str, id: &str, payload: &str) -> i64 {
    redis::Script::new(ENQUEUE_LUA)
        .key(row_key(queue, id))
        .key(set_key(queue, "pending"))
        .arg(id)
        .arg(payload)
        .invoke(con)
        .expect("the reference @enqueue")
}

fn lua_schedule(con: &mut Connection, queue: &str, id: &str, due: i64) {
    let added: i64 = redis::Script::new(SCHEDULE_LUA)
        .key(row_key(queue, id))
        .key(set_key(queue, "schedule"))
        .arg(id)
        .arg("scheduled by a script")
        .arg(due)
        .invoke(con)
        .expect("a scheduled job by script");
    assert_eq!(added, 1);
}

/// Every queue `EMQ.QUEUES` lists in the connection's database, page by page.
fn listed(con: &mut Connection) -> Vec<String> {
    let (mut cursor, mut all) = ("0".to_string(), Vec::new());
    loop {
        let (next, names): (String, Vec<String>) = cmd("EMQ.QUEUES")
            .arg("CURSOR")
            .arg(&cursor)
            .arg("COUNT")
            .arg(1000)
            .query(con)
            .expect("EMQ.QUEUES");
        all.extend(names);
        if next == "0" {
            return all;
        }
        cursor = next;
    }
}

#[test]
fn a_waiting_claim_takes_a_scripts_job_before_the_script_s_caller_sends_again() {
    // The server signals a key a write creates, and serves the claims waiting on it before it
    // reads the next command of any client: each job is active by the time the script's
    // caller asks, every time.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "lua-wake";
    let rounds = 20;
    let mut at_once = 0;
    for n in 1..=rounds {
        let claim = blocked_claim(&mut con, server.conn(), q, 10_000);
        let id = job_id(n);
        assert_eq!(lua_enqueue(&mut con, q, &id, "from lua"), 1);
        if set_score(&mut con, q, "active", &id).is_some() {
            at_once += 1;
        }
        let reply = claim.join().expect("claim thread").expect("claim");
        let jobs: Vec<Job> = redis::from_redis_value(reply).expect("jobs");
        assert_eq!(jobs, vec![(id.clone(), b"from lua".to_vec(), 1)]);
        let acked: i64 = cmd("EMQ.ACK")
            .arg(q)
            .arg(&id)
            .arg(1)
            .query(&mut con)
            .expect("ack");
        assert_eq!(acked, 1);
    }
    assert_eq!(at_once, rounds, "claimed before the caller's next command");
}

#[test]
fn a_job_a_script_schedules_comes_due_for_a_waiting_claim_and_not_before() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "lua-later";
    let polled = info_int(&mut con, "emq", "emq_timer_polled");
    let promoted = info_int(&mut con, "emq", "emq_promoted");
    let claim = blocked_claim(&mut con, server.conn(), q, 20_000);
    assert_eq!(info_int(&mut con, "emq", "emq_waited_queues"), 1);
    let id = job_id(1);
    let due = now_ms() + 400;
    lua_schedule(&mut con, q, &id, due);
    // Not before its time: while it is not due, it stays scheduled.
    if now_ms() < due - 100 {
        assert_eq!(job_state(&mut con, q, &id).as_deref(), Some("scheduled"));
    }
    let reply = claim.join().expect("claim thread").expect("claim");
    assert!(now_ms() >= due, "claimed at its due time or later");
    let jobs: Vec<Job> = redis::from_redis_value(reply).expect("jobs");
    assert_eq!(jobs, vec![(id, b"scheduled by a script".to_vec(), 1)]);
    assert_eq!(info_int(&mut con, "emq", "emq_promoted") - promoted, 1);
    assert!(
        info_int(&mut con, "emq", "emq_timer_polled") > polled,
        "found by the poll"
    );
    // No claim waits: the poll stops, and with nothing due the timer sleeps.
    assert!(wait_until(Duration::from_secs(5), || info_int(
        &mut con,
        "emq",
        "emq_waited_queues"
    ) == 0));
    std::thread::sleep(Duration::from_millis(200));
    let after = info_int(&mut con, "emq", "emq_timer_polled");
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(info_int(&mut con, "emq", "emq_timer_polled"), after);
}

#[test]
fn a_claim_takes_what_a_script_scheduled_once_it_is_due() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "lua-due";
    lua_schedule(&mut con, q, &job_id(1), now_ms() - 1_000);
    lua_schedule(&mut con, q, &job_id(2), now_ms() + 3_600_000);
    let jobs = claim(&mut con, q, &["COUNT", "10"]).expect("a job");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].0, job_id(1));
    assert_eq!(
        job_state(&mut con, q, &job_id(2)).as_deref(),
        Some("scheduled")
    );
}

#[test]
fn stats_and_queues_see_a_queue_only_a_script_wrote_until_its_keys_go() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "lua-only";
    for n in 1..=3 {
        assert_eq!(lua_enqueue(&mut con, q, &job_id(n), "p"), 1);
    }
    assert_eq!(stats(&mut con, q)["pending"], 3);
    assert_eq!(listed(&mut con), [q]);
    assert_eq!(info_int(&mut con, "emq", "emq_known_queues"), 1);
    let mut del = cmd("DEL");
    del.arg(set_key(q, "pending"));
    for n in 1..=3 {
        del.arg(row_key(q, &job_id(n)));
    }
    let _: i64 = del.query(&mut con).expect("DEL");
    assert!(listed(&mut con).is_empty(), "a queue whose keys went");
    assert_eq!(info_int(&mut con, "emq", "emq_known_queues"), 0);
}

#[test]
fn the_walk_finds_a_scripts_queue_among_many_other_keys_within_its_bound() {
    // Each `EMQ.QUEUES` call walks on past about 10,000 keys of its database: a key written
    // behind the walk is found in its next round, so within two rounds of calls.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let others: usize = 40_000;
    for chunk in (0..others).collect::<Vec<_>>().chunks(1000) {
        let mut pipe = redis::pipe();
        for i in chunk {
            pipe.cmd("SET").arg(format!("cache:{i}")).arg("v").ignore();
        }
        pipe.query::<()>(&mut con).expect("other keys");
    }
    assert!(listed(&mut con).is_empty());
    lua_enqueue(&mut con, "among-many", &job_id(1), "p");
    let round = (others + 2).div_ceil(10_000);
    let mut calls = 0;
    while !listed(&mut con).contains(&"among-many".to_string()) {
        calls += 1;
        assert!(calls <= 2 * round + 1, "not found within {calls} calls");
    }
}

#[test]
fn a_claim_waiting_on_more_queues_than_a_poll_reads_sees_a_script_s_job_come_due_in_the_last() {
    // One claim waits on 300 queues (its own and 299 by `WAKE`), more than a poll's 256: the
    // polls go round them all, so a job a script schedules in the last comes due there.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let name = |i: usize| format!("w{i:03}");
    let mut worker = server.conn();
    let mut claim = cmd("EMQ.CLAIM");
    claim
        .arg(name(0))
        .arg("BLOCK")
        .arg(20_000)
        .arg("WAKE")
        .arg(299);
    for i in 1..300 {
        claim.arg(name(i));
    }
    let waiting = std::thread::spawn(move || claim.query::<redis::Value>(&mut worker));
    assert!(wait_until(Duration::from_secs(5), || info_int(
        &mut con,
        "emq",
        "emq_waited_queues"
    ) == 300));
    let id = job_id(1);
    lua_schedule(&mut con, &name(299), &id, now_ms() + 200);
    let reply = waiting.join().expect("claim thread").expect("claim");
    let jobs: Vec<Job> = redis::from_redis_value(reply).expect("jobs");
    assert!(jobs.is_empty(), "woken by another queue's job: {jobs:?}");
    assert_eq!(
        job_state(&mut con, &name(299), &id).as_deref(),
        Some("pending")
    );
}

#[test]
fn a_job_a_script_schedules_again_at_the_same_time_as_a_cancelled_one_comes_due() {
    // The poll asks the timer for each waited-on queue's head every time it reads it, so a
    // job put back at the very due time of one EchoMQ cancelled (its visit then dropped) is not
    // taken for one already booked.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "lua-again";
    let claim = blocked_claim(&mut con, server.conn(), q, 20_000);
    let due = now_ms() + 600;
    lua_schedule(&mut con, q, &job_id(1), due);
    let polled = info_int(&mut con, "emq", "emq_timer_polled");
    assert!(wait_until(Duration::from_secs(5), || info_int(
        &mut con,
        "emq",
        "emq_timer_polled"
    ) > polled));
    let cancelled: i64 = cmd("EMQ.CANCEL")
        .arg(q)
        .arg(job_id(1))
        .query(&mut con)
        .expect("EMQ.CANCEL");
    assert_eq!(cancelled, 1);
    lua_schedule(&mut con, q, &job_id(2), due);
    let reply = claim.join().expect("claim thread").expect("claim");
    let jobs: Vec<Job> = redis::from_redis_value(reply).expect("jobs");
    assert_eq!(jobs.len(), 1, "the job put back came due");
    assert_eq!(jobs[0].0, job_id(2));
}
