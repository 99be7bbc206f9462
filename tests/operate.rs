//! Operating a queue on real servers: pause and resume (blocked claimers served in order, the
//! flag surviving a failover and an AOF restart), purge and bulk requeue bounded per call,
//! the dead set's retention, results and progress, the event stream, and all of it under ACL,
//! `maxmemory` and a replica without the module.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Connection, Value};
use support::*;

fn emq(con: &mut Connection, name: &str, args: &[&str]) -> redis::RedisResult<Value> {
    let mut c = cmd(name);
    for a in args {
        c.arg(*a);
    }
    c.query(con)
}

fn int(con: &mut Connection, name: &str, args: &[&str]) -> i64 {
    match emq(con, name, args) {
        Ok(Value::Int(n)) => n,
        other => panic!("{name} {args:?}: {other:?}"),
    }
}

fn err(con: &mut Connection, name: &str, args: &[&str]) -> String {
    match emq(con, name, args) {
        Err(e) => error_text(&e),
        Ok(v) => panic!("{name} {args:?} answered {v:?}"),
    }
}

#[test]
fn a_paused_queue_holds_its_claimers_and_resume_serves_them_in_arrival_order() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("paused");
    assert_eq!(int(&mut con, "EMQ.PAUSE", &[&q]), 1);
    assert_eq!(int(&mut con, "EMQ.PAUSE", &[&q]), 0, "paused already");
    assert_eq!(stats(&mut con, &q)["paused"], 1);
    let base = blocked_clients(&mut con);
    let waiters: Vec<_> = (0..3)
        .map(|_| blocked_claim(&mut con, server.conn(), &q, 10_000))
        .collect();
    for n in 1..=3 {
        assert_eq!(enqueue(&mut con, &q, &job_id(n), "p"), 1, "enqueues go on");
    }
    assert_eq!(
        claim(&mut con, &q, &[]),
        Some(vec![]),
        "a claim takes nothing"
    );
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(
        blocked_clients(&mut con),
        base + 3,
        "the claimers still wait"
    );
    assert_eq!(set_len(&mut con, &q, "pending"), 3);
    assert_eq!(int(&mut con, "EMQ.RESUME", &[&q]), 1);
    assert_eq!(int(&mut con, "EMQ.RESUME", &[&q]), 0, "not paused any more");
    let got: Vec<String> = waiters
        .into_iter()
        .map(|w| match w.join().expect("claimer").expect("a reply") {
            Value::Array(jobs) => text(&match &jobs[0] {
                Value::Array(job) => job[0].clone(),
                other => panic!("a job: {other:?}"),
            }),
            other => panic!("claimed: {other:?}"),
        })
        .collect();
    assert_eq!(got, [job_id(1), job_id(2), job_id(3)], "in arrival order");
    assert_eq!(stats(&mut con, &q)["paused"], 0);
}

#[test]
fn the_timer_still_moves_a_paused_queues_due_jobs() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("paused-due");
    enqueue_delayed(&mut con, &q, &job_id(1), "later", 50);
    assert_eq!(int(&mut con, "EMQ.PAUSE", &[&q]), 1);
    assert!(
        wait_until(Duration::from_secs(5), || set_len(&mut con, &q, "pending")
            == 1),
        "promoted while paused"
    );
    assert_eq!(claim(&mut con, &q, &[]), Some(vec![]));
}

#[test]
fn the_pause_survives_a_failover_and_an_aof_restart() {
    let (primary, replica) = primary_and_replica(Options::default());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "held";
    enqueue(&mut p, q, &job_id(1), "p");
    assert_eq!(int(&mut p, "EMQ.PAUSE", &[q]), 1);
    wait_caught_up(&mut p, &mut r);
    let () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .expect("promote the replica");
    assert_eq!(
        claim(&mut r, q, &[]),
        Some(vec![]),
        "still paused on the new primary"
    );
    assert_eq!(int(&mut r, "EMQ.RESUME", &[q]), 1);
    assert_eq!(claim(&mut r, q, &[]).expect("jobs").len(), 1);

    // Every write synced, as the persistence suite's servers do: with the default `everysec`
    // a busy server may postpone a write past the SIGKILL of the restart.
    let mut server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut con = server.conn();
    enqueue(&mut con, q, &job_id(1), "p");
    assert_eq!(int(&mut con, "EMQ.PAUSE", &[q]), 1);
    server.restart(true);
    let mut con = server.conn();
    assert_eq!(stats(&mut con, q)["paused"], 1, "the AOF kept the flag");
    assert_eq!(claim(&mut con, q, &[]), Some(vec![]));
}

#[test]
fn purge_takes_the_oldest_of_a_set_and_refuses_the_active_one() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("purge");
    for n in 1..=5 {
        enqueue(&mut con, &q, &job_id(n), "p");
    }
    assert_eq!(
        int(&mut con, "EMQ.PURGE", &[&q, "pending", "COUNT", "2"]),
        2
    );
    assert_eq!(
        set_members(&mut con, &q, "pending"),
        [job_id(3), job_id(4), job_id(5)]
    );
    assert_eq!(
        job_state(&mut con, &q, &job_id(1)),
        None,
        "its row went with it"
    );
    assert!(err(&mut con, "EMQ.PURGE", &[&q, "active"]).starts_with("EMQSET "));
    assert!(err(&mut con, "EMQ.PURGE", &[&q, "ready"]).starts_with("EMQSET "));
    assert!(err(&mut con, "EMQ.PURGE", &[&q, "pending", "COUNT", "0"]).starts_with("ERR "));
    assert!(err(&mut con, "EMQ.PURGE", &[&q, "pending", "COUNT", "10001"]).starts_with("ERR "));
    assert!(err(&mut con, "EMQ.PURGE", &[&q, "pending", "LIMIT", "5"]).starts_with("ERR "));
    assert!(err(&mut con, "EMQ.REQUEUE", &[&q, "DEAD", "COUNT", "-1"]).starts_with("ERR "));
    assert!(err(&mut con, "EMQ.EVENTS", &[&q, "MAYBE"]).starts_with("ERR "));
    assert!(err(&mut con, "EMQ.EVENTS", &[&q, "ON", "MAXLEN", "0"]).starts_with("ERR "));
    assert_eq!(
        set_len(&mut con, &q, "pending"),
        3,
        "refusals write nothing"
    );
}

#[test]
fn the_dead_set_is_trimmed_by_count_and_by_age() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "1")
            .arg("emq.dead-max-jobs", "5"),
    );
    let mut con = server.conn();
    let q = "dying";
    for n in 1..=8 {
        enqueue(&mut con, q, &job_id(n), "p");
        let job = claim(&mut con, q, &[]).expect("jobs").remove(0);
        let reply = emq(&mut con, "EMQ.FAIL", &[q, &job.0, &job.2.to_string()]).expect("fail");
        assert_eq!(text(&reply), "dead");
    }
    assert!(
        wait_until(Duration::from_secs(5), || set_len(&mut con, q, "dead") == 5),
        "trimmed to emq.dead-max-jobs"
    );
    assert_eq!(
        set_members(&mut con, q, "dead"),
        (4..=8).map(job_id).collect::<Vec<_>>(),
        "the oldest went"
    );
    assert_eq!(job_state(&mut con, q, &job_id(1)), None, "rows and all");
    assert_eq!(info_int(&mut con, "emq", "emq_trimmed"), 3);
    config_set(&mut con, "emq.dead-max-jobs", "0");
    config_set(&mut con, "emq.dead-ttl-ms", "300");
    assert!(
        wait_until(Duration::from_secs(5), || set_len(&mut con, q, "dead") == 0),
        "past emq.dead-ttl-ms"
    );
    assert!(keys_of(&mut con, q).is_empty());
}

#[test]
fn results_and_progress_round_trip_through_the_row() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("results");
    enqueue(&mut con, &q, &job_id(1), "p");
    let job = claim(&mut con, &q, &[]).expect("jobs").remove(0);
    let token = job.2.to_string();
    let _ = emq(
        &mut con,
        "EMQ.RENEW",
        &[&q, &job.0, &token, "5000", "PROGRESS", "half"],
    )
    .expect("renew");
    assert_eq!(
        row_field(&mut con, &q, &job.0, "progress").as_deref(),
        Some("half")
    );
    config_set(&mut con, "emq.max-payload-bytes", "4");
    assert!(err(
        &mut con,
        "EMQ.ACK",
        &[&q, &job.0, &token, "RESULT", "too long"]
    )
    .starts_with("EMQPAYLOAD "));
    assert_eq!(job_state(&mut con, &q, &job.0).as_deref(), Some("active"));
    config_set(&mut con, "emq.max-payload-bytes", "1048576");
    assert!(err(&mut con, "EMQ.ACK", &[&q, &job.0, &token, "RESULTS", "x"]).starts_with("ERR "));
    assert_eq!(
        int(&mut con, "EMQ.ACK", &[&q, &job.0, &token, "RESULT", "42"]),
        1
    );
    let fields: Vec<String> = cmd("HKEYS")
        .arg(row_key(&q, &job.0))
        .query(&mut con)
        .expect("fields");
    assert_eq!(
        fields,
        ["state", "attempts", "payload", "progress", "result"]
    );
    assert_eq!(
        row_field(&mut con, &q, &job.0, "result").as_deref(),
        Some("42")
    );
    assert_eq!(job_state(&mut con, &q, &job.0).as_deref(), Some("done"));
}

/// The `event` field of every entry of the queue's stream, in order.
fn events_of(con: &mut Connection, queue: &str) -> Vec<(String, String)> {
    let entries: Vec<(String, Vec<(String, String)>)> = cmd("XRANGE")
        .arg(set_key(queue, "events"))
        .arg("-")
        .arg("+")
        .query(con)
        .expect("XRANGE");
    entries
        .into_iter()
        .map(|(_, fields)| {
            let get = |k: &str| {
                fields
                    .iter()
                    .find(|(f, _)| f == k)
                    .map(|(_, v)| v.clone())
                    .unwrap_or_default()
            };
            (get("event"), get("attempt"))
        })
        .collect()
}

#[test]
fn the_event_stream_tells_a_jobs_whole_life_and_listeners_read_it_as_it_comes() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("events");
    assert_eq!(
        int(&mut con, "EMQ.EVENTS", &[&q, "ON", "MAXLEN", "1000"]),
        1
    );
    assert_eq!(
        int(&mut con, "EMQ.EVENTS", &[&q, "ON", "MAXLEN", "1000"]),
        0
    );
    let mut listener = server.conn();
    let stream = set_key(&q, "events");
    let heard = std::thread::spawn(move || {
        let reply: Value = cmd("XREAD")
            .arg("BLOCK")
            .arg(5000)
            .arg("STREAMS")
            .arg(&stream)
            .arg("$")
            .query(&mut listener)
            .expect("XREAD");
        format!("{reply:?}")
    });
    std::thread::sleep(Duration::from_millis(200));
    let id = job_id(1);
    enqueue(&mut con, &q, &id, "p");
    assert!(heard.join().expect("listener").contains("enqueued"));
    let job = claim(&mut con, &q, &[]).expect("jobs").remove(0);
    let _ = emq(
        &mut con,
        "EMQ.FAIL",
        &[&q, &id, &job.2.to_string(), "RETRY-IN", "0"],
    )
    .expect("fail");
    assert!(wait_until(Duration::from_secs(5), || set_len(
        &mut con, &q, "pending"
    ) == 1));
    let job = claim(&mut con, &q, &[]).expect("jobs").remove(0);
    assert_eq!(int(&mut con, "EMQ.ACK", &[&q, &id, &job.2.to_string()]), 1);
    int(&mut con, "EMQ.PAUSE", &[&q]);
    int(&mut con, "EMQ.RESUME", &[&q]);
    let want: Vec<(String, String)> = [
        ("enqueued", "0"),
        ("claimed", "1"),
        ("retrying", "1"),
        ("promoted", "1"),
        ("claimed", "2"),
        ("acked", "2"),
        ("paused", ""),
        ("resumed", ""),
    ]
    .map(|(e, a)| (e.to_string(), a.to_string()))
    .into();
    assert_eq!(events_of(&mut con, &q), want);
    assert_eq!(int(&mut con, "EMQ.EVENTS", &[&q, "OFF"]), 1);
    enqueue(&mut con, &q, &job_id(2), "p");
    assert_eq!(
        events_of(&mut con, &q).len(),
        want.len(),
        "off: nothing appended"
    );
}

#[test]
fn the_event_stream_stays_near_its_cap() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("capped");
    int(&mut con, "EMQ.EVENTS", &[&q, "ON", "MAXLEN", "10"]);
    for n in 1..=1_000 {
        enqueue(&mut con, &q, &job_id(n), "p");
    }
    let len: i64 = cmd("XLEN")
        .arg(set_key(&q, "events"))
        .query(&mut con)
        .expect("XLEN");
    // `MAXLEN ~` trims whole stream nodes (100 entries each by default).
    assert!((10..=110).contains(&len), "{len} entries");
}

#[test]
fn a_queue_scoped_user_operates_its_queue_and_no_other() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    enqueue(&mut admin, "orders", &job_id(1), "p");
    enqueue(&mut admin, "other", &job_id(1), "p");
    let mut user = user_with(&server, "ops", &["~emq:{orders}:*", "+@emq"]);
    for (name, args) in [
        ("EMQ.PAUSE", vec!["orders"]),
        ("EMQ.RESUME", vec!["orders"]),
        ("EMQ.EVENTS", vec!["orders", "ON"]),
        ("EMQ.PURGE", vec!["orders", "pending"]),
        ("EMQ.REQUEUE", vec!["orders", "DEAD"]),
    ] {
        assert!(emq(&mut user, name, &args).is_ok(), "{name} on orders");
        let mut other = args.clone();
        other[0] = "other";
        assert!(
            err(&mut user, name, &other).starts_with("NOPERM"),
            "{name} on other"
        );
    }
    assert_eq!(set_len(&mut admin, "other", "pending"), 1);
    assert_eq!(stats(&mut admin, "other")["paused"], 0);
}

#[test]
fn past_maxmemory_the_operators_writes_are_refused_and_write_nothing() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "full", &job_id(1), "p");
    config_set(&mut con, "maxmemory", "1");
    for (name, args) in [
        ("EMQ.PAUSE", vec!["full"]),
        ("EMQ.EVENTS", vec!["full", "ON"]),
        ("EMQ.PURGE", vec!["full", "pending"]),
        ("EMQ.REQUEUE", vec!["full", "DEAD"]),
    ] {
        assert!(err(&mut con, name, &args).starts_with("OOM"), "{name}");
    }
    assert_eq!(stats(&mut con, "full")["pending"], 1, "reads go on");
    config_set(&mut con, "maxmemory", "0");
    assert_eq!(stats(&mut con, "full")["paused"], 0);
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "mirrored";
    int(&mut p, "EMQ.EVENTS", &[q, "ON", "MAXLEN", "50"]);
    for n in 1..=20 {
        enqueue(&mut p, q, &job_id(n), "p");
    }
    int(&mut p, "EMQ.PAUSE", &[q]);
    int(&mut p, "EMQ.RESUME", &[q]);
    let job = claim(&mut p, q, &[]).expect("jobs").remove(0);
    let _ = emq(
        &mut p,
        "EMQ.RENEW",
        &[q, &job.0, "1", "9000", "PROGRESS", "x"],
    )
    .expect("renew");
    assert_eq!(int(&mut p, "EMQ.ACK", &[q, &job.0, "1", "RESULT", "y"]), 1);
    assert_eq!(int(&mut p, "EMQ.PURGE", &[q, "pending", "COUNT", "5"]), 5);
    dead_jobs(&mut p, "graveyard", 30);
    assert_eq!(
        int(&mut p, "EMQ.REQUEUE", &["graveyard", "DEAD", "COUNT", "10"]),
        10
    );
    int(&mut p, "EMQ.PAUSE", &[q]);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn refusals_are_typed_and_counted() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let before = info_int(&mut con, "emq", "emq_refused_set");
    assert!(err(&mut con, "EMQ.PURGE", &["q", "done"]).starts_with("EMQSET "));
    assert!(err(&mut con, "EMQ.PURGE", &["q", "active"]).starts_with("EMQSET "));
    assert_eq!(info_int(&mut con, "emq", "emq_refused_set"), before + 2);
    let () = cmd("SET")
        .arg(set_key("q", "meta"))
        .arg("not a hash")
        .query(&mut con)
        .expect("SET");
    assert!(err(&mut con, "EMQ.PAUSE", &["q"]).starts_with("WRONGTYPE"));
    assert!(err(&mut con, "EMQ.STATS", &["q"]).starts_with("WRONGTYPE"));
    assert!(err(&mut con, "EMQ.PAUSE", &["{bad"]).starts_with("EMQQUEUE"));
    assert!(err(&mut con, "EMQ.PAUSE", &[]).starts_with("ERR wrong number"));
    assert!(err(&mut con, "EMQ.PAUSE", &["a", "b"]).starts_with("ERR syntax error"));
}

#[test]
fn a_meta_hash_written_by_hand_is_honoured_however_it_is_written() {
    // A fresh server's load scan finds no meta hash, so its transitions read none
    // (`emq_meta_read` 0) until something may have written one: a hash command, a transaction,
    // a script declaring the key, or a key restored from elsewhere.
    let writes: [(&str, Vec<redis::Cmd>); 4] = [
        (
            "hset",
            vec![cmd("HSET")
                .arg(set_key("hset", "meta"))
                .arg("paused")
                .arg(1)
                .clone()],
        ),
        (
            "multi",
            vec![
                cmd("MULTI"),
                cmd("HSET")
                    .arg(set_key("multi", "meta"))
                    .arg("paused")
                    .arg(1)
                    .clone(),
                cmd("EXEC"),
            ],
        ),
        (
            "script",
            vec![cmd("EVAL")
                .arg("return redis.call('HSET', KEYS[1], 'paused', '1')")
                .arg(1)
                .arg(set_key("script", "meta"))
                .clone()],
        ),
        (
            "restored",
            vec![cmd("EVAL")
                .arg(
                    "redis.call('HSET', KEYS[2], 'paused', '1'); \
                     local d = redis.call('DUMP', KEYS[2]); redis.call('DEL', KEYS[2]); \
                     return redis.call('RESTORE', KEYS[1], 0, d)",
                )
                .arg(2)
                .arg(set_key("restored", "meta"))
                .arg("scratch")
                .clone()],
        ),
    ];
    for (q, commands) in writes {
        let server = Server::start(Options::learning());
        let mut con = server.conn();
        enqueue(&mut con, q, &job_id(1), "p");
        assert_eq!(info_int(&mut con, "emq", "emq_meta_read"), 0, "{q}");
        for c in commands {
            let _: Value = c.query(&mut con).expect("written by hand");
        }
        assert_eq!(info_int(&mut con, "emq", "emq_meta_read"), 1, "{q}");
        assert_eq!(claim(&mut con, q, &[]), Some(vec![]), "{q}: paused");
        assert_eq!(stats(&mut con, q)["paused"], 1, "{q}");
    }
    // A restart whose load finds a meta hash reads them from the start.
    let mut server = Server::start(Options::default().arg("appendonly", "yes"));
    let mut con = server.conn();
    assert_eq!(info_int(&mut con, "emq", "emq_meta_read"), 0);
    int(&mut con, "EMQ.PAUSE", &["kept"]);
    server.restart(true);
    let mut con = server.conn();
    assert_eq!(info_int(&mut con, "emq", "emq_meta_read"), 1);
}
