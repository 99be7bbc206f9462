//! What the server's observers see of EchoMQ: its writes fire the keyspace events native
//! commands would, and only what clients read counts in the keyspace hits and misses.

use emq_harness as support;

use std::thread;
use std::time::Duration;

use redis::{cmd, Value};
use support::*;

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
    one_life(&mut con, &q, &id);
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

#[test]
fn keyspace_hits_and_misses_count_only_what_clients_read() {
    // The server's keyspace statistics (what a cache's hit ratio is read from) and `keymiss`
    // events come from read commands' lookups. EchoMQ's writes look at keys as native writes
    // do, uncounted and silent, and so do its timer and its keyspace events; `EMQ.STATS`, a
    // read, counts as `ZCARD` would.
    let server = Server::start(Options::default().arg("notify-keyspace-events", "Em"));
    let mut con = server.conn();
    // Redis 7.0 has no way to open a key uncounted and silent (make test-redis7 skips this).
    assert!(
        info_field(&mut con, "server", "valkey_version").is_some(),
        "{} counts a module's own lookups: this test cannot run on it",
        server_binary()
    );
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
    assert!(set_score(&mut con, "later", "pending", &job_id(1)).is_some());
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
    assert_eq!(ks(&mut con), (0, 0), "no lookup of EchoMQ's counted");
    // A client's read of a missing key: the first `keymiss` there is, where EchoMQ is silent.
    let _: Option<String> = cmd("GET")
        .arg("read-by-a-client")
        .query(&mut con)
        .expect("get");
    let first: String = misses
        .get_message()
        .expect("a keymiss event")
        .get_payload()
        .expect("payload");
    assert_eq!(first, "read-by-a-client");
    let before = ks(&mut con);
    stats(&mut con, "batch");
    let after = ks(&mut con);
    assert_eq!(
        (after.0 - before.0) + (after.1 - before.1),
        5,
        "EMQ.STATS reads four sets and the waiting parents"
    );
}

/// While nothing but EchoMQ takes keyspace events, its writes' events reach it without the
/// server (`emq_own_events_direct`), and still wake a blocked claim and the timer. Channels
/// turned on by `notify-keyspace-events` take the events through the server again, and
/// clients hear them; turned off, EchoMQ hears its own directly again.
#[test]
fn echomq_hears_its_own_writes_directly_only_while_no_channel_listens() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let direct = |con: &mut Connection| info_int(con, "emq", "emq_own_events_direct");
    assert_eq!(direct(&mut con), 1, "nothing else listens");
    let q = unique_queue("direct");
    an_enqueue_wakes_a_blocked_claim(&server, &mut con, &q, &job_id(1));
    enqueue_delayed(&mut con, &q, &job_id(2), "later", 100);
    assert!(
        wait_until(Duration::from_secs(5), || set_score(
            &mut con,
            &q,
            "pending",
            &job_id(2)
        )
        .is_some()),
        "the timer promoted the delayed job"
    );

    for (flags, direct_after) in [("KEA", 0), ("Egz", 0), ("Kg", 0), ("gzx", 1), ("", 1)] {
        let _: () = cmd("CONFIG")
            .arg("SET")
            .arg("notify-keyspace-events")
            .arg(flags)
            .query(&mut con)
            .expect("CONFIG SET");
        assert_eq!(
            direct(&mut con),
            direct_after,
            "notify-keyspace-events {flags:?}"
        );
    }

    let _: () = cmd("CONFIG")
        .arg("SET")
        .arg("notify-keyspace-events")
        .arg("Ez")
        .query(&mut con)
        .expect("CONFIG SET");
    let mut sub_con = server.conn();
    let mut events = sub_con.as_pubsub();
    events.subscribe("__keyevent@0__:zadd").expect("subscribe");
    events
        .set_read_timeout(Some(Duration::from_secs(5)))
        .expect("timeout");
    enqueue(&mut con, &q, &job_id(3), "x");
    let msg = events.get_message().expect("the enqueue's zadd");
    let key: String = msg.get_payload().expect("a key");
    assert_eq!(key, set_key(&q, "pending"));
}

/// Another module subscribed to keyspace events hears EchoMQ's writes as it hears native
/// ones: with it loaded, EchoMQ's events go through the server; once it is unloaded, EchoMQ
/// hears its own directly again.
#[test]
fn another_module_subscribed_to_keyspace_events_hears_echomq_s_writes() {
    let server = Server::start(
        Options::default()
            .arg("loadmodule", &caller_module())
            .arg("enable-module-command", "local"),
    );
    let mut con = server.conn();
    let direct = |con: &mut Connection| info_int(con, "emq", "emq_own_events_direct");
    assert_eq!(direct(&mut con), 0, "another module may listen");
    let heard = |con: &mut Connection| -> Vec<String> {
        cmd("EMQCALLER.HEARD").query(con).expect("EMQCALLER.HEARD")
    };
    heard(&mut con);
    let q = unique_queue("heard");
    let id = job_id(1);
    one_life(&mut con, &q, &id);
    let (pending, active, row) = (
        set_key(&q, "pending"),
        set_key(&q, "active"),
        row_key(&q, &id),
    );
    let expected: Vec<String> = [
        ("zadd", &pending),
        ("zrem", &pending),
        ("del", &pending),
        ("zadd", &active),
        ("zrem", &active),
        ("del", &active),
        ("expire", &row),
    ]
    .iter()
    .map(|(event, key)| format!("{event} {key}"))
    .collect();
    assert_eq!(heard(&mut con), expected);

    let _: () = cmd("MODULE")
        .arg("UNLOAD")
        .arg("emqcaller")
        .query(&mut con)
        .expect("MODULE UNLOAD");
    assert_eq!(direct(&mut con), 1, "EchoMQ alone");
    an_enqueue_wakes_a_blocked_claim(&server, &mut con, &q, &job_id(2));

    // Loaded again, after EchoMQ: it hears EchoMQ's writes from its first.
    let _: () = cmd("MODULE")
        .arg("LOAD")
        .arg(caller_module())
        .query(&mut con)
        .expect("MODULE LOAD");
    assert_eq!(direct(&mut con), 0, "another module may listen again");
    enqueue(&mut con, &q, &job_id(3), "x");
    assert_eq!(heard(&mut con), vec![format!("zadd {pending}")]);
}

/// Enqueues, claims and acknowledges the job `id` of `q` (its first lease's token is 1).
fn one_life(con: &mut Connection, q: &str, id: &str) {
    enqueue(con, q, id, "x");
    claim(con, q, &[]).expect("claim");
    let _: i64 = cmd("EMQ.ACK")
        .arg(q)
        .arg(id)
        .arg(1)
        .query(con)
        .expect("ack");
}

/// A claim blocked on `q` is woken by the enqueue of `id`.
fn an_enqueue_wakes_a_blocked_claim(server: &Server, con: &mut Connection, q: &str, id: &str) {
    let claim = blocked_claim(con, server.conn(), q, 5_000);
    enqueue(con, q, id, "x");
    let woken = claim.join().expect("the claim's thread").expect("a claim");
    assert!(
        matches!(&woken, Value::Array(jobs) if !jobs.is_empty()),
        "the enqueue woke the claim: {woken:?}"
    );
}
