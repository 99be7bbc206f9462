//! EMQ.MENQUEUE: many jobs in one atomic step, all or nothing.

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

fn menqueue(q: &str, jobs: &[(&str, &[u8])]) -> redis::Cmd {
    let mut c = cmd("EMQ.MENQUEUE");
    c.arg(q);
    for (id, payload) in jobs {
        c.arg(*id).arg(*payload);
    }
    c
}

#[test]
fn replies_one_flag_per_job_with_duplicates_as_zero() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("batch");
    let (a, b, c) = (job_id(1), job_id(2), job_id(3));
    enqueue(&mut con, &q, &b, "old");
    let r: Vec<Value> = menqueue(
        &q,
        &[
            (&a, b"a"),
            (&b, b"b"),
            (&c, b"c"),
            (&a, b"again"),
            ("*", b"minted"),
        ],
    )
    .query(&mut con)
    .expect("menqueue");
    assert_eq!(
        &r[..4],
        &[Value::Int(1), Value::Int(0), Value::Int(1), Value::Int(0)]
    );
    let Value::BulkString(minted) = &r[4] else {
        panic!("a minted id: {r:?}")
    };
    assert!(minted.starts_with(b"JOB") && minted.len() == 14);
    assert_eq!(
        row_field(&mut con, &q, &a, "payload").as_deref(),
        Some("a"),
        "the first of two in-batch duplicates wins"
    );
    assert_eq!(
        row_field(&mut con, &q, &b, "payload").as_deref(),
        Some("old"),
        "an existing row is untouched"
    );
    let card = set_len(&mut con, &q, "pending");
    assert_eq!(card, 4);
}

#[test]
fn one_refusal_refuses_the_whole_batch() {
    let server = Server::start(Options::default().arg("emq.max-payload-bytes", "8"));
    let mut con = server.conn();
    let q = unique_queue("refuse");
    let good = job_id(1);
    for (jobs, code) in [
        (
            vec![(good.as_str(), &b"ok"[..]), ("ORD0NgWEfAEJfs", b"x")],
            "EMQKIND",
        ),
        (vec![(good.as_str(), &b"ok"[..]), ("bad", b"x")], "EMQID"),
        (
            vec![(good.as_str(), &b"ok"[..]), ("*", b"far too long")],
            "EMQPAYLOAD",
        ),
    ] {
        let err = expect_err(&mut con, &menqueue(&q, &jobs));
        assert!(err.starts_with(code), "{err}");
    }
    assert!(expect_err(&mut con, &menqueue("a b", &[(&good, b"x")])).starts_with("EMQQUEUE"));
    assert!(expect_err(&mut con, cmd("EMQ.MENQUEUE").arg(&q).arg(&good))
        .starts_with("ERR wrong number"));
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
    cmd("SET")
        .arg(set_key(&q, "pending"))
        .arg("x")
        .query::<()>(&mut con)
        .expect("set");
    let err = expect_err(
        &mut con,
        &menqueue(&q, &[(&good, b"x"), (&job_id(2), b"y")]),
    );
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(
        keys_of(&mut con, &q),
        vec![set_key(&q, "pending")],
        "no row written"
    );
}

#[test]
fn acl_refusal_of_any_row_refuses_the_batch() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let row_1 = format!("~emq:{{orders}}:job:{}", job_id(1));
    let mut w = user_with(&server, "w", &["~emq:{orders}:pending", &row_1, "+@all"]);
    let err = expect_err(
        &mut w,
        &menqueue(
            "orders",
            &[(&job_id(1), b"ok"), (&job_id(2), b"not allowed")],
        ),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    let n: i64 = cmd("DBSIZE").query(&mut admin).expect("dbsize");
    assert_eq!(n, 0);
    let r: Vec<i64> = menqueue("orders", &[(&job_id(1), b"ok")])
        .query(&mut w)
        .expect("allowed row");
    assert_eq!(r, vec![1]);
}

#[test]
fn rows_are_dump_identical_to_single_enqueues() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let (single, batch) = (unique_queue("single"), unique_queue("batch"));
    let ids: Vec<String> = (1..=150).map(|i| job_id(i * 7)).collect();
    let payloads: Vec<Vec<u8>> = (0..150).map(|i| vec![b'p'; 1 + i * 3]).collect();
    for (id, p) in ids.iter().zip(&payloads) {
        let _: i64 = cmd("EMQ.ENQUEUE")
            .arg(&single)
            .arg(id)
            .arg(p.as_slice())
            .query(&mut con)
            .expect("single");
    }
    let jobs: Vec<(&str, &[u8])> = ids
        .iter()
        .map(String::as_str)
        .zip(payloads.iter().map(Vec::as_slice))
        .collect();
    let _: Vec<i64> = menqueue(&batch, &jobs).query(&mut con).expect("batch");
    for id in &ids {
        let a: Vec<u8> = cmd("DUMP")
            .arg(row_key(&single, id))
            .query(&mut con)
            .expect("dump");
        let b: Vec<u8> = cmd("DUMP")
            .arg(row_key(&batch, id))
            .query(&mut con)
            .expect("dump");
        assert_eq!(a, b, "row {id}");
    }
    let a: Vec<u8> = cmd("DUMP")
        .arg(set_key(&single, "pending"))
        .query(&mut con)
        .expect("dump");
    let b: Vec<u8> = cmd("DUMP")
        .arg(set_key(&batch, "pending"))
        .query(&mut con)
        .expect("dump");
    assert_eq!(a, b, "pending set");
}

#[test]
fn a_batch_replicates_in_one_transaction_with_one_zadd_of_its_members_greatest_first() {
    let server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut con = server.conn();
    let q = unique_queue("aof");
    let ids: Vec<String> = (1..=3).map(job_id).collect();
    let jobs: Vec<(&str, &[u8])> = ids.iter().map(|i| (i.as_str(), &b"x"[..])).collect();
    let _: Vec<i64> = menqueue(&q, &jobs).query(&mut con).expect("menqueue");
    let words = aof_words(&server);
    let words: Vec<&str> = words.iter().map(String::as_str).collect();
    let commands: Vec<&str> = words
        .iter()
        .copied()
        .filter(|w| ["MULTI", "EXEC", "HSET", "ZADD"].contains(w))
        .collect();
    assert_eq!(
        commands,
        vec!["MULTI", "HSET", "HSET", "HSET", "ZADD", "EXEC"]
    );
    let zadd = words.iter().position(|w| *w == "ZADD").expect("zadd");
    assert_eq!(
        &words[zadd + 1..zadd + 8],
        &[
            set_key(&q, "pending").as_str(),
            "0",
            &ids[2],
            "0",
            &ids[1],
            "0",
            &ids[0]
        ],
        "greatest first, as the batch went into the set"
    );
}

#[test]
fn a_batch_takes_at_most_ten_thousand_jobs() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cap");
    let ids: Vec<String> = (1..=10_001).map(job_id).collect();
    let jobs: Vec<(&str, &[u8])> = ids.iter().map(|i| (i.as_str(), &b"x"[..])).collect();
    let err = expect_err(&mut con, &menqueue(&q, &jobs));
    assert_eq!(err, "ERR at most 10000 jobs per call");
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
    let flags: Vec<i64> = menqueue(&q, &jobs[..10_000])
        .query(&mut con)
        .expect("a full batch");
    assert_eq!(flags, vec![1; 10_000]);
    let card = set_len(&mut con, &q, "pending");
    assert_eq!(card, 10_000);
}

#[test]
fn a_batch_wakes_a_blocked_claimer_with_every_job() {
    let server = Server::start_or_external();
    let q = unique_queue("mwake");
    let url = server.url();
    let q2 = q.clone();
    let producer = std::thread::spawn(move || {
        let mut con = redis::Client::open(url)
            .expect("client")
            .get_connection()
            .expect("conn");
        // The batch goes in once the claimer waits in the server.
        assert!(until_blocked(&mut con, 1), "the claimer blocked");
        let flags: Vec<i64> = menqueue(&q2, &[(&job_id(1), b"a"), (&job_id(2), b"b")])
            .query(&mut con)
            .expect("menqueue");
        assert_eq!(flags, vec![1, 1]);
    });
    let mut waiter = server.conn();
    let jobs = claim(&mut waiter, &q, &["COUNT", "5", "BLOCK", "30000"]);
    assert_eq!(
        jobs.expect("woken by the batch"),
        vec![(job_id(1), b"a".to_vec(), 1), (job_id(2), b"b".to_vec(), 1)]
    );
    producer.join().expect("producer");
}
