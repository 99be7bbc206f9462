//! EMQ.ENQUEUE on a real server: the reference `@enqueue` behaviour, every refusal in SPEC
//! order, and nothing half-written.

use emq_harness as support;

use redis::cmd;
use support::*;

/// `EMQ.ENQUEUE <queue> <id> <payload>` as a command, to run for its exact reply, to pipeline
/// or to see refused (`support::enqueue` runs one where a test only needs a job).
fn enqueue_cmd(queue: &str, id: &str, payload: &[u8]) -> redis::Cmd {
    let mut c = cmd("EMQ.ENQUEUE");
    c.arg(queue).arg(id).arg(payload);
    c
}

#[test]
fn enqueue_writes_the_row_and_the_pending_member() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("orders");
    let id = "JOB0KHTOWnGLuC";
    let n: i64 = enqueue_cmd(&q, id, b"hello")
        .query(&mut con)
        .expect("enqueue");
    assert_eq!(n, 1);

    let row: Vec<(String, String)> = cmd("HGETALL")
        .arg(row_key(&q, id))
        .query(&mut con)
        .expect("row");
    assert_eq!(
        row,
        vec![
            ("state".into(), "pending".into()),
            ("attempts".into(), "0".into()),
            ("payload".into(), "hello".into()),
        ],
        "exactly three fields, in the reference order"
    );
    let pending: Vec<(String, f64)> = cmd("ZRANGE")
        .arg(set_key(&q, "pending"))
        .arg(0)
        .arg(-1)
        .arg("WITHSCORES")
        .query(&mut con)
        .expect("pending");
    assert_eq!(pending, vec![(id.to_string(), 0.0)]);
}

/// Many queues in turn, more than the module keeps hot key names for, each getting exactly
/// its own jobs: a set name is never confused with another queue's, whether it was cached,
/// replaced or made anew.
#[test]
fn many_queues_in_turn_each_get_their_own_jobs() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let queues: Vec<String> = (0..40).map(|i| unique_queue(&format!("turn{i}"))).collect();
    for round in 0..3u64 {
        for (i, q) in queues.iter().enumerate() {
            let id = job_id(round * 1000 + i as u64 + 1);
            let n: i64 = enqueue_cmd(q, &id, b"p").query(&mut con).expect("enqueue");
            assert_eq!(n, 1);
            // Reads every set name of the queue, as a claim would.
            let stats = stats(&mut con, q);
            assert_eq!(stats.get("pending"), Some(&(round as i64 + 1)), "{stats:?}");
        }
    }
    for (i, q) in queues.iter().enumerate() {
        let pending = set_members(&mut con, q, "pending");
        let want: Vec<String> = (0..3u64).map(|r| job_id(r * 1000 + i as u64 + 1)).collect();
        let (mut got, mut want) = (pending, want);
        got.sort();
        want.sort();
        assert_eq!(got, want, "queue {q}");
    }
}

#[test]
fn duplicate_enqueue_replies_zero_and_leaves_the_row_untouched() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("dup");
    let id = job_id(42);
    assert_eq!(
        enqueue_cmd(&q, &id, b"first")
            .query::<i64>(&mut con)
            .expect("first"),
        1
    );
    cmd("HSET")
        .arg(row_key(&q, &id))
        .arg("attempts")
        .arg("3")
        .query::<i64>(&mut con)
        .expect("hset");
    assert_eq!(
        enqueue_cmd(&q, &id, b"second")
            .query::<i64>(&mut con)
            .expect("dup"),
        0
    );
    assert_eq!(
        row_field(&mut con, &q, &id, "payload").as_deref(),
        Some("first")
    );
    assert_eq!(
        job_attempts(&mut con, &q, &id).as_deref(),
        Some("3"),
        "a duplicate does not reset the row"
    );
    let card = set_len(&mut con, &q, "pending");
    assert_eq!(card, 1);
}

#[test]
fn a_row_of_another_type_counts_as_existing() {
    // The reference script asks EXISTS, whatever the type.
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("exists");
    let id = job_id(7);
    cmd("SET")
        .arg(row_key(&q, &id))
        .arg("x")
        .query::<()>(&mut con)
        .expect("set");
    assert_eq!(
        enqueue_cmd(&q, &id, b"p")
            .query::<i64>(&mut con)
            .expect("enqueue"),
        0
    );
    assert_eq!(keys_of(&mut con, &q), vec![row_key(&q, &id)]);
}

#[test]
fn other_kinds_are_refused_with_the_exact_reference_text() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("kind");
    let err = expect_err(&mut con, &enqueue_cmd(&q, "ORD0NgWEfAEJfs", b"x"));
    assert_eq!(err, "EMQKIND job id must be JOB-namespaced");
    assert!(keys_of(&mut con, &q).is_empty());
}

#[test]
fn malformed_ids_are_refused_before_any_key_exists() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("gate");
    // F2: a fourteen-byte decimal and a fourteen-byte slug both refuse.
    for bad in [
        "12345678901234",
        "order-12345678",
        "JOB0KHTOWnGLu",
        "job0KHTOWnGLuC",
        "JOBAzL8n0Y58m8",
        "",
    ] {
        let err = expect_err(&mut con, &enqueue_cmd(&q, bad, b"x"));
        assert!(err.starts_with("EMQID "), "{bad}: {err}");
    }
    assert!(keys_of(&mut con, &q).is_empty());
}

#[test]
fn bad_queue_names_are_refused() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let long = "q".repeat(129);
    for bad in ["", "a b", "a{b", "a}b", long.as_str(), "caf\u{e9}"] {
        let err = expect_err(&mut con, &enqueue_cmd(bad, "JOB0KHTOWnGLuC", b"x"));
        assert!(err.starts_with("EMQQUEUE "), "{bad:?}: {err}");
    }
    let ok = "q".repeat(128);
    let _: redis::Value = cmd("DEL")
        .arg(row_key(&ok, "JOB0KHTOWnGLuC"))
        .arg(set_key(&ok, "pending"))
        .query(&mut con)
        .expect("del");
    assert_eq!(
        enqueue_cmd(&ok, "JOB0KHTOWnGLuC", b"x")
            .query::<i64>(&mut con)
            .expect("128 bytes"),
        1
    );
}

#[test]
fn checks_run_in_spec_order() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    // queue before id, id before kind, kind before payload.
    let big = vec![b'x'; 2 << 20];
    assert!(expect_err(&mut con, &enqueue_cmd("a{b", "bad", &big)).starts_with("EMQQUEUE"));
    assert!(expect_err(&mut con, &enqueue_cmd("ok", "bad", &big)).starts_with("EMQID"));
    assert!(
        expect_err(&mut con, &enqueue_cmd("ok", "ORD0NgWEfAEJfs", &big)).starts_with("EMQKIND")
    );
    assert!(
        expect_err(&mut con, &enqueue_cmd("ok", "JOB0KHTOWnGLuC", &big)).starts_with("EMQPAYLOAD")
    );
}

#[test]
fn payload_limit_follows_the_config() {
    let server = Server::start(Options::default().arg("emq.max-payload-bytes", "16"));
    let mut con = server.conn();
    let q = unique_queue("size");
    let err = expect_err(&mut con, &enqueue_cmd(&q, &job_id(1), &[b'x'; 17]));
    assert_eq!(err, "EMQPAYLOAD payload exceeds emq.max-payload-bytes (16)");
    assert!(keys_of(&mut con, &q).is_empty());
    assert_eq!(
        enqueue_cmd(&q, &job_id(1), &[b'x'; 16])
            .query::<i64>(&mut con)
            .expect("at the limit"),
        1
    );

    config_set(&mut con, "emq.max-payload-bytes", "32");
    assert_eq!(
        enqueue_cmd(&q, &job_id(2), &[b'x'; 32])
            .query::<i64>(&mut con)
            .expect("raised"),
        1
    );
    let bad = expect_err(
        &mut con,
        cmd("CONFIG")
            .arg("SET")
            .arg("emq.max-payload-bytes")
            .arg("0"),
    );
    assert!(bad.contains("between"), "{bad}");
    let bad = expect_err(
        &mut con,
        cmd("CONFIG").arg("SET").arg("emq.node-id").arg("1024"),
    );
    assert!(bad.contains("between"), "{bad}");
}

#[test]
fn wrongtype_leaves_nothing_behind() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("wrong");
    cmd("SET")
        .arg(set_key(&q, "pending"))
        .arg("not a zset")
        .query::<()>(&mut con)
        .expect("set");
    let err = expect_err(&mut con, &enqueue_cmd(&q, &job_id(9), b"x"));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(
        keys_of(&mut con, &q),
        vec![set_key(&q, "pending")],
        "no row was written"
    );
}

#[test]
fn minted_ids_are_jobs_and_strictly_increasing() {
    let server = Server::start(Options::default().arg("emq.node-id", "5"));
    let mut con = server.conn();
    let q = unique_queue("mint");
    let mut prev = String::new();
    for _ in 0..2000 {
        let id: String = enqueue_cmd(&q, "*", b"m").query(&mut con).expect("mint");
        assert_eq!(id.len(), 14);
        assert!(id.starts_with("JOB"));
        assert!(id > prev, "{id} after {prev}");
        prev = id;
    }
    let card = set_len(&mut con, &q, "pending");
    assert_eq!(card, 2000);
    assert_eq!(node_of(&prev), 5, "node id from emq.node-id");
}

#[test]
fn minted_ids_keep_increasing_when_the_node_id_is_lowered() {
    let server = Server::start(Options::default().arg("emq.node-id", "900"));
    let mut con = server.conn();
    let q = unique_queue("renode");
    // One pipeline: the mints around each change fall in the same millisecond.
    let mut p = redis::pipe();
    for node in ["900", "3", "900", "0"] {
        p.cmd("CONFIG")
            .arg("SET")
            .arg("emq.node-id")
            .arg(node)
            .ignore();
        for _ in 0..3 {
            p.add_command(enqueue_cmd(&q, "*", b"m"));
        }
    }
    let ids: Vec<String> = p.query(&mut con).expect("mints");
    for pair in ids.windows(2) {
        assert!(pair[1] > pair[0], "{} after {}", pair[1], pair[0]);
    }
    let nodes: Vec<u16> = ids.iter().map(|id| node_of(id)).collect();
    assert_eq!(nodes, [900, 900, 900, 3, 3, 3, 900, 900, 900, 0, 0, 0]);
    assert_eq!(
        set_members(&mut con, &q, "pending"),
        ids,
        "the pending set's order is the mint order"
    );
}

#[test]
fn binary_payloads_survive_round_trips() {
    // F4: CRLF and NUL survive 500/500 round trips, through two pipelines.
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("binary");
    let mut rng = Rng::new(0xF4);
    let payloads: Vec<Vec<u8>> = (0..500)
        .map(|i| {
            let mut p = rng.bytes(200, &[0, b'\r', b'\n', b'a', 0xff, b'"', b'\\']);
            p.extend_from_slice(format!("\r\n\0{i}").as_bytes());
            p
        })
        .collect();
    let mut write = redis::pipe();
    for (i, p) in payloads.iter().enumerate() {
        write.add_command(enqueue_cmd(&q, &job_id(i as u64 + 1), p));
    }
    let added: Vec<i64> = write.query(&mut con).expect("pipeline of enqueues");
    assert_eq!(added, vec![1; 500]);
    let mut read = redis::pipe();
    for i in 0..500 {
        read.cmd("HGET")
            .arg(row_key(&q, &job_id(i + 1)))
            .arg("payload");
    }
    let back: Vec<Vec<u8>> = read.query(&mut con).expect("pipeline of reads");
    let same = back.iter().zip(&payloads).filter(|(a, b)| a == b).count();
    assert_eq!(same, 500, "500/500 round trips");
}

/// Collects keyspace events (key with the queue name replaced by `Q`, event) until `n` arrive.
fn collect_events(pubsub: &mut redis::PubSub<'_>, queue: &str, n: usize) -> Vec<(String, String)> {
    let mut events = Vec::new();
    while events.len() < n {
        let Ok(msg) = pubsub.get_message() else { break };
        let channel = msg
            .get_channel_name()
            .trim_start_matches("__keyspace@0__:")
            .replace(queue, "Q");
        let event: String = msg.get_payload().expect("payload");
        events.push((channel, event));
    }
    events
}

#[test]
fn keyspace_notifications_match_native_hset_and_zadd() {
    // "n" adds the key-creation events to all the others.
    let server = Server::start(Options::default().arg("notify-keyspace-events", "KEAn"));
    let mut con = server.conn();
    let client = redis::Client::open(server.url()).expect("client");
    let mut sub_con = client.get_connection().expect("sub conn");
    let mut pubsub = sub_con.as_pubsub();
    pubsub.psubscribe("__keyspace@0__:*").expect("psubscribe");
    pubsub
        .set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .expect("timeout");
    let id = job_id(11);

    let native = unique_queue("native");
    cmd("HSET")
        .arg(row_key(&native, &id))
        .arg("state")
        .arg("pending")
        .arg("attempts")
        .arg("0")
        .arg("payload")
        .arg("x")
        .query::<i64>(&mut con)
        .expect("hset");
    cmd("ZADD")
        .arg(set_key(&native, "pending"))
        .arg(0)
        .arg(&id)
        .query::<i64>(&mut con)
        .expect("zadd");
    let expected = collect_events(&mut pubsub, &native, 4);
    assert_eq!(
        expected.len(),
        4,
        "native commands fire new+hset, new+zadd: {expected:?}"
    );

    let q = unique_queue("module");
    assert_eq!(
        enqueue_cmd(&q, &id, b"x")
            .query::<i64>(&mut con)
            .expect("enqueue"),
        1
    );
    let got = collect_events(&mut pubsub, &q, 5);
    assert_eq!(got, expected);
}

#[test]
fn info_reports_version_and_counters() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("info");
    enqueue_cmd(&q, &job_id(1), b"x")
        .query::<i64>(&mut con)
        .expect("1");
    enqueue_cmd(&q, &job_id(1), b"x")
        .query::<i64>(&mut con)
        .expect("dup");
    let _ = expect_err(&mut con, &enqueue_cmd(&q, "ORD0NgWEfAEJfs", b"x"));
    let _ = expect_err(&mut con, &enqueue_cmd("a b", &job_id(2), b"x"));
    assert_eq!(
        info_field(&mut con, "emq", "emq_version").as_deref(),
        Some("echomq:2.0.0")
    );
    assert_eq!(
        info_field(&mut con, "emq", "emq_enqueued").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut con, "emq", "emq_duplicates").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut con, "emq", "emq_refused_kind").as_deref(),
        Some("1")
    );
    assert_eq!(
        info_field(&mut con, "emq", "emq_refused_queue").as_deref(),
        Some("1")
    );
    // The server tells modules nothing of `CONFIG RESETSTAT`: it resets its own figures only.
    let _: () = cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut con)
        .expect("resetstat");
    assert_eq!(
        info_field(&mut con, "emq", "emq_enqueued").as_deref(),
        Some("1")
    );
}

#[test]
fn enqueue_works_inside_multi_exec() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("multi");
    let (a, b): (i64, i64) = redis::pipe()
        .atomic()
        .add_command(enqueue_cmd(&q, &job_id(1), b"a"))
        .add_command(enqueue_cmd(&q, &job_id(1), b"b"))
        .query(&mut con)
        .expect("multi");
    assert_eq!((a, b), (1, 0));
}

#[test]
fn an_enqueue_touches_watched_keys_and_tracked_ones() {
    let server = Server::start_or_external();
    let q = unique_queue("watch");
    let pending = set_key(&q, "pending");
    let mut watcher = server.conn();
    let mut other = server.conn();
    // WATCH: a transaction over the pending set fails once another client enqueues.
    let _: () = cmd("WATCH")
        .arg(&pending)
        .query(&mut watcher)
        .expect("watch");
    enqueue(&mut other, &q, &job_id(1), "x");
    let r: Value = redis::pipe()
        .atomic()
        .cmd("ZCARD")
        .arg(&pending)
        .query(&mut watcher)
        .expect("exec");
    assert_eq!(r, Value::Nil, "EXEC aborted: {r:?}");
    // Client-side caching: a client tracking the row hears it is invalidated (redirected to a
    // RESP2 subscriber of __redis__:invalidate).
    let mut sub_con = server.conn();
    let sub_id: i64 = cmd("CLIENT").arg("ID").query(&mut sub_con).expect("id");
    let mut invalidations = sub_con.as_pubsub();
    invalidations
        .subscribe("__redis__:invalidate")
        .expect("subscribe");
    invalidations
        .set_read_timeout(Some(std::time::Duration::from_secs(5)))
        .expect("timeout");
    let mut tracker = server.conn();
    let _: () = cmd("CLIENT")
        .arg("TRACKING")
        .arg("ON")
        .arg("REDIRECT")
        .arg(sub_id)
        .query(&mut tracker)
        .expect("tracking");
    let row = row_key(&q, &job_id(2));
    let _: Value = cmd("HGETALL").arg(&row).query(&mut tracker).expect("read");
    enqueue(&mut other, &q, &job_id(2), "y");
    let msg = invalidations.get_message().expect("an invalidation");
    let keys: Vec<String> = msg.get_payload().expect("invalidated keys");
    assert_eq!(keys, vec![row]);
}

#[test]
fn wrong_arity_is_a_plain_error() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let err = expect_err(&mut con, cmd("EMQ.ENQUEUE").arg("q").arg(job_id(1)));
    assert!(err.starts_with("ERR wrong number of arguments"), "{err}");
}

/// Something a second client does.
type Act<'a> = Box<dyn FnOnce(&mut redis::Connection) + 'a>;

/// WATCHes every key of `q` (and the row of `id`) on `watcher`, runs `act` on another
/// client, and says whether the watcher's transaction still commits.
fn watched_keys_survive(
    server: &Server,
    q: &str,
    id: &str,
    act: impl FnOnce(&mut redis::Connection),
) -> bool {
    let mut watcher = server.conn();
    let mut other = server.conn();
    let mut watch = cmd("WATCH");
    watch.arg(row_key(q, id));
    for ty in ["pending", "active", "schedule", "dead"] {
        watch.arg(set_key(q, ty));
    }
    let _: () = watch.query(&mut watcher).expect("watch");
    act(&mut other);
    let r: Value = redis::pipe()
        .atomic()
        .cmd("PING")
        .query(&mut watcher)
        .expect("exec");
    r != Value::Nil
}

/// As native commands do (`HSETNX` on an existing field, `ZPOPMIN` on an empty set), a
/// command that changes nothing signals nothing: it aborts no `WATCH` and invalidates no
/// tracked key. One that changes something does.
#[test]
fn a_command_that_changes_nothing_touches_no_watched_key() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("nochange");
    let id = job_id(1);
    enqueue(&mut con, &q, &id, "x");
    let unchanged: [(&str, Act<'_>); 6] = [
        (
            "a duplicate EMQ.ENQUEUE",
            Box::new(|c| {
                let n: i64 = enqueue_cmd(&q, &id, b"y").query(c).expect("enqueue");
                assert_eq!(n, 0);
            }),
        ),
        (
            "a duplicate EMQ.MENQUEUE",
            Box::new(|c| {
                let n: Vec<i64> = cmd("EMQ.MENQUEUE")
                    .arg(&q)
                    .arg(&id)
                    .arg("y")
                    .query(c)
                    .expect("menqueue");
                assert_eq!(n, vec![0]);
            }),
        ),
        (
            "EMQ.CANCEL of a missing job",
            Box::new(|c| {
                let n: i64 = cmd("EMQ.CANCEL")
                    .arg(&q)
                    .arg(job_id(2))
                    .query(c)
                    .expect("cancel");
                assert_eq!(n, 0);
            }),
        ),
        (
            "EMQ.REQUEUE of a job that is not dead",
            Box::new(|c| {
                let n: i64 = cmd("EMQ.REQUEUE")
                    .arg(&q)
                    .arg(&id)
                    .query(c)
                    .expect("requeue");
                assert_eq!(n, 0);
            }),
        ),
        (
            "a refused EMQ.ACK",
            Box::new(|c| {
                let _ = expect_err(c, cmd("EMQ.ACK").arg(&q).arg(&id).arg(7));
            }),
        ),
        (
            "EMQ.STATS",
            Box::new(|c| {
                let _: Value = cmd("EMQ.STATS").arg(&q).query(c).expect("stats");
            }),
        ),
    ];
    for (what, act) in unchanged {
        assert!(
            watched_keys_survive(&server, &q, &id, act),
            "{what} aborted a WATCH"
        );
    }
    // A claim on a queue with nothing ready, after the only job was claimed.
    let other = unique_queue("nochange");
    enqueue(&mut con, &other, &id, "x");
    claim(&mut con, &other, &[]);
    let empty_claim = |c: &mut redis::Connection| {
        let jobs: Vec<Value> = cmd("EMQ.CLAIM").arg(&other).query(c).expect("claim");
        assert!(jobs.is_empty());
    };
    assert!(
        watched_keys_survive(&server, &other, &id, empty_claim),
        "an empty EMQ.CLAIM aborted a WATCH"
    );
    // The control: a change aborts the transaction.
    let changed = |c: &mut redis::Connection| {
        let n: i64 = cmd("EMQ.CANCEL").arg(&q).arg(&id).query(c).expect("cancel");
        assert_eq!(n, 1);
    };
    assert!(
        !watched_keys_survive(&server, &q, &id, changed),
        "EMQ.CANCEL left the WATCH intact"
    );
}

/// A member already in a set with the same score is no change, as for a native `ZADD`: an
/// enqueue that writes again the row of a job still pending (its row deleted by hand) fires
/// `hset` but no `zadd`, and leaves watchers of the pending set alone.
#[test]
fn a_member_added_again_with_its_score_is_no_change() {
    let server = Server::start(Options::default().arg("notify-keyspace-events", "KEA"));
    let mut con = server.conn();
    let q = unique_queue("readd");
    let id = job_id(1);
    let pending = set_key(&q, "pending");
    enqueue(&mut con, &q, &id, "x");
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &id))
        .query(&mut con)
        .expect("del");
    let mut watcher = server.conn();
    let _: () = cmd("WATCH")
        .arg(&pending)
        .query(&mut watcher)
        .expect("watch");
    let mut subscriber = server.conn();
    let mut events = subscriber.as_pubsub();
    events.psubscribe("__keyspace@0__:*").expect("psubscribe");
    events
        .set_read_timeout(Some(std::time::Duration::from_millis(500)))
        .expect("timeout");
    let n: i64 = enqueue_cmd(&q, &id, b"y").query(&mut con).expect("enqueue");
    assert_eq!(n, 1, "the row was missing, so this is a new job");
    // Every event that arrives before the read times out: the row's `hset`, and no `zadd`.
    let seen = collect_events(&mut events, &q, usize::MAX);
    assert_eq!(
        seen,
        vec![(format!("emq:{{Q}}:job:{id}"), "hset".to_string())]
    );
    let r: Value = redis::pipe()
        .atomic()
        .cmd("PING")
        .query(&mut watcher)
        .expect("exec");
    assert_ne!(r, Value::Nil, "the pending set did not change");
}
