//! The inspection commands on real servers: `EMQ.JOB` shows one job in every state (RESP2 and
//! RESP3), `EMQ.JOBS` pages through a set in its order without skipping or repeating a job
//! that stays while others come and go, every refusal is typed and counted, ACL applies to
//! the derived keys, and a page deep in a large set stays fast.

use emq_harness as support;

use std::collections::{BTreeMap, BTreeSet};

use redis::{cmd, Value};
use support::*;

fn bulk(s: &str) -> Value {
    Value::BulkString(s.as_bytes().to_vec())
}

fn job_cmd(q: &str, id: &str) -> redis::Cmd {
    cmd("EMQ.JOB").arg(q).arg(id).clone()
}

fn zscore(con: &mut Connection, q: &str, ty: &str, id: &str) -> i64 {
    let score: f64 = cmd("ZSCORE")
        .arg(set_key(q, ty))
        .arg(id)
        .query(con)
        .expect("ZSCORE");
    score as i64
}

/// `EMQ.JOB` as (field, value) pairs, from a RESP3 map or a RESP2 flat array; `None` for null.
fn job_view(con: &mut Connection, q: &str, id: &str) -> Option<Vec<(String, Value)>> {
    let reply: Value = job_cmd(q, id).query(con).expect("EMQ.JOB");
    match reply {
        Value::Nil => None,
        Value::Map(_) => Some(map_pairs(&reply)),
        Value::Array(flat) => Some(
            flat.chunks(2)
                .map(|kv| (text(&kv[0]), kv[1].clone()))
                .collect(),
        ),
        other => panic!("EMQ.JOB {q} {id}: {other:?}"),
    }
}

fn pairs(expected: &[(&str, Value)]) -> Vec<(String, Value)> {
    expected
        .iter()
        .map(|(k, v)| (k.to_string(), v.clone()))
        .collect()
}

/// One `EMQ.JOBS` page: the next cursor and the jobs, each as its elements.
fn page(
    con: &mut Connection,
    q: &str,
    set: &str,
    cursor: &[u8],
    count: Option<usize>,
    with_payloads: bool,
) -> (Vec<u8>, Vec<Vec<Value>>) {
    let mut c = cmd("EMQ.JOBS");
    c.arg(q).arg(set).arg("CURSOR").arg(cursor);
    if let Some(n) = count {
        c.arg("COUNT").arg(n);
    }
    if with_payloads {
        c.arg("WITHPAYLOADS");
    }
    let reply: Value = c.query(con).expect("EMQ.JOBS");
    let Value::Array(parts) = reply else {
        panic!("EMQ.JOBS: {reply:?}")
    };
    let [Value::BulkString(next), Value::Array(jobs)] = &parts[..] else {
        panic!("[cursor, jobs]: {parts:?}")
    };
    let jobs = jobs
        .iter()
        .map(|j| match j {
            Value::Array(fields) => fields.clone(),
            other => panic!("a job: {other:?}"),
        })
        .collect();
    (next.clone(), jobs)
}

/// The ids of every page from cursor `0` back to `0`, with `between` run after each page.
fn walk(
    con: &mut Connection,
    q: &str,
    set: &str,
    count: usize,
    mut between: impl FnMut(usize),
) -> (Vec<String>, usize) {
    let (mut seen, mut cursor, mut pages) = (Vec::new(), b"0".to_vec(), 0);
    loop {
        let (next, jobs) = page(con, q, set, &cursor, Some(count), false);
        pages += 1;
        // A cursor that stopped moving would page forever.
        assert!(pages < 10_000, "the walk ends");
        assert_ne!(next, cursor, "page {pages}: the cursor moves on");
        assert!(jobs.len() <= count, "page {pages}: {} jobs", jobs.len());
        seen.extend(jobs.iter().map(|j| text(&j[0])));
        if next == b"0" {
            return (seen, pages);
        }
        assert!(!jobs.is_empty(), "a page before the end has jobs");
        cursor = next;
        between(pages);
    }
}

fn menqueue(con: &mut Connection, q: &str, ids: impl IntoIterator<Item = String>) {
    let mut c = cmd("EMQ.MENQUEUE");
    c.arg(q);
    for id in ids {
        c.arg(id).arg("p");
    }
    let _: Value = c.query(con).expect("EMQ.MENQUEUE");
}

fn claim(con: &mut Connection, q: &str, count: usize) -> Vec<String> {
    let claimed: Vec<(String, Vec<u8>, i64)> = cmd("EMQ.CLAIM")
        .arg(q)
        .arg("COUNT")
        .arg(count)
        .arg("LEASE")
        .arg(600_000)
        .query(con)
        .expect("EMQ.CLAIM");
    claimed.into_iter().map(|(id, _, _)| id).collect()
}

#[test]
fn job_shows_each_state_as_a_map_and_a_missing_job_as_null() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let q = "views";
    let (pending, scheduled, active, dead, done) =
        (job_id(1), job_id(2), job_id(3), job_id(4), job_id(5));
    enqueue(&mut con, q, &active, "pa");
    assert_eq!(claim(&mut con, q, 1), [active.as_str()]);
    let _: () = cmd("HSET")
        .arg(row_key(q, &active))
        .arg("progress")
        .arg("half")
        .query(&mut con)
        .expect("HSET progress");
    enqueue(&mut con, q, &dead, "pd");
    assert_eq!(claim(&mut con, q, 1), [dead.as_str()]);
    let buried: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(&dead)
        .arg(1)
        .arg("ERROR")
        .arg("boom")
        .query(&mut con)
        .expect("EMQ.FAIL");
    assert_eq!(buried, "dead");
    enqueue(&mut con, q, &done, "pdone");
    assert_eq!(claim(&mut con, q, 1), [done.as_str()]);
    let _: i64 = cmd("EMQ.ACK")
        .arg(q)
        .arg(&done)
        .arg(1)
        .query(&mut con)
        .expect("EMQ.ACK");
    let _: () = cmd("HSET")
        .arg(row_key(q, &done))
        .arg("result")
        .arg("42")
        .query(&mut con)
        .expect("HSET result");
    enqueue(&mut con, q, &pending, "pp\r\n\0");
    enqueue_delayed(&mut con, q, &scheduled, "ps", 60_000);
    // A member whose row was deleted by hand (due later, so the timer leaves it be).
    let orphan = job_id(7);
    let orphan_due = now_ms() + 600_000;
    let _: () = cmd("ZADD")
        .arg(set_key(q, "schedule"))
        .arg(orphan_due)
        .arg(&orphan)
        .query(&mut con)
        .expect("ZADD");

    let lease = zscore(&mut con, q, "active", &active);
    let due = zscore(&mut con, q, "schedule", &scheduled);
    let died = zscore(&mut con, q, "dead", &dead);
    let expected: Vec<(&String, Vec<(String, Value)>)> = vec![
        (
            &pending,
            pairs(&[
                ("id", bulk(&pending)),
                ("state", bulk("pending")),
                ("attempts", Value::Int(0)),
                ("payload", bulk("pp\r\n\0")),
                ("set", bulk("pending")),
            ]),
        ),
        (
            &scheduled,
            pairs(&[
                ("id", bulk(&scheduled)),
                ("state", bulk("scheduled")),
                ("attempts", Value::Int(0)),
                ("payload", bulk("ps")),
                ("set", bulk("scheduled")),
                ("due", Value::Int(due)),
            ]),
        ),
        (
            &active,
            pairs(&[
                ("id", bulk(&active)),
                ("state", bulk("active")),
                ("attempts", Value::Int(1)),
                ("payload", bulk("pa")),
                ("progress", bulk("half")),
                ("set", bulk("active")),
                ("lease-deadline", Value::Int(lease)),
            ]),
        ),
        (
            &dead,
            pairs(&[
                ("id", bulk(&dead)),
                ("state", bulk("dead")),
                ("attempts", Value::Int(1)),
                ("payload", bulk("pd")),
                ("error", bulk("boom")),
                ("set", bulk("dead")),
                ("died-at", Value::Int(died)),
            ]),
        ),
        (
            &done,
            pairs(&[
                ("id", bulk(&done)),
                ("state", bulk("done")),
                ("attempts", Value::Int(1)),
                ("payload", bulk("pdone")),
                ("result", bulk("42")),
                ("set", Value::Nil),
            ]),
        ),
        (
            &orphan,
            pairs(&[
                ("id", bulk(&orphan)),
                ("set", bulk("scheduled")),
                ("due", Value::Int(orphan_due)),
            ]),
        ),
    ];
    assert!(
        lease > now_ms() && due > now_ms() && died <= now_ms(),
        "{lease} {due} {died}"
    );
    for mut c in [server.conn(), server.conn3()] {
        for (id, view) in &expected {
            assert_eq!(job_view(&mut c, q, id).as_ref(), Some(view), "{id}");
        }
        assert_eq!(job_view(&mut c, q, &job_id(6)), None, "no row, no set");
        assert_eq!(job_view(&mut c, "nothing-here", &pending), None);
    }
    // Under RESP3 the reply is a map, under RESP2 a flat array.
    let v3: Value = job_cmd(q, &pending)
        .query(&mut server.conn3())
        .expect("job");
    assert!(matches!(v3, Value::Map(ref m) if m.len() == 5), "{v3:?}");
    let v2: Value = job_cmd(q, &pending).query(&mut con).expect("job");
    assert!(matches!(v2, Value::Array(ref a) if a.len() == 10), "{v2:?}");
}

#[test]
fn jobs_pages_through_2500_jobs_in_pages_of_1000_and_of_7() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("paging");
    // Enqueued in an order of their own: the pages follow the set's (byte) order.
    let mut ids: Vec<String> = (1..=2500u64).map(|n| job_id(n * 7919 % 100_003)).collect();
    menqueue(&mut con, &q, ids.clone());
    ids.sort();
    assert_eq!(set_members(&mut con, &q, "pending"), ids);
    for (count, pages) in [(1000, 3), (7, 358)] {
        let (seen, n) = walk(&mut con, &q, "pending", count, |_| {});
        assert_eq!(n, pages, "pages of {count}");
        assert_eq!(seen, ids, "pages of {count}: every job once, in order");
    }
    // COUNT defaults to 100; each job is [id, score, attempts].
    let (next, jobs) = page(&mut con, &q, "pending", b"0", None, false);
    assert_eq!(jobs.len(), 100);
    assert_eq!(next, format!("0:{}", ids[99]).into_bytes());
    assert_eq!(jobs[0], [bulk(&ids[0]), Value::Int(0), Value::Int(0)]);
    // A page that ends exactly at the last job says so.
    let last = format!("0:{}", ids[2499 - 7]);
    let (next, jobs) = page(&mut con, &q, "pending", last.as_bytes(), Some(7), false);
    assert_eq!((next, jobs.len()), (b"0".to_vec(), 7));
    // Every set can be paged; an empty or missing one is one empty last page.
    for set in ["active", "scheduled", "dead"] {
        let (next, jobs) = page(&mut con, &q, set, b"0", Some(10), false);
        assert_eq!((next, jobs.len()), (b"0".to_vec(), 0), "{set}");
    }
}

#[test]
fn paging_while_another_connection_enqueues_and_claims_sees_each_job_that_stayed_once() {
    let server = Server::start_or_external();
    let (mut reader, mut other) = (server.conn(), server.conn());
    let q = unique_queue("moving");
    let first: Vec<String> = (1..=1000u64).map(|n| job_id(n * 10)).collect();
    menqueue(&mut reader, &q, first.clone());
    let (mut claimed, mut cancelled, mut minted) =
        (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut rng = Rng::seeded(0x1A5EC7);
    let (seen, pages) = walk(&mut reader, &q, "pending", 20, |page| {
        // Claims take the oldest jobs, and for a while overtake the reader: some jobs leave
        // before it reaches them, and the member its cursor names is often gone. Then the
        // workers slow down and the reader reaches the end before them.
        claimed.extend(claim(&mut other, &q, if page <= 10 { 30 } else { 5 }));
        // New jobs: minted (after every id) and between the first ones, ahead of the
        // reader or behind it.
        for _ in 0..10 {
            let id: String = cmd("EMQ.ENQUEUE")
                .arg(&q)
                .arg("*")
                .arg("new")
                .query(&mut other)
                .expect("minted");
            minted.insert(id);
        }
        for _ in 0..5 {
            enqueue(
                &mut other,
                &q,
                &job_id(rng.below(10_000) * 10 + 5),
                "between",
            );
        }
        // Cancelled at random.
        let id = first[rng.below(1000) as usize].clone();
        let gone: i64 = cmd("EMQ.CANCEL")
            .arg(&q)
            .arg(&id)
            .query(&mut other)
            .expect("cancel");
        if gone == 1 {
            cancelled.insert(id);
        }
    });
    let mut times: BTreeMap<&String, usize> = BTreeMap::new();
    for id in &seen {
        *times.entry(id).or_default() += 1;
    }
    assert!(times.values().all(|&n| n == 1), "no job seen twice");
    let stayed: Vec<&String> = first
        .iter()
        .filter(|id| !claimed.contains(*id) && !cancelled.contains(*id))
        .collect();
    for id in &stayed {
        assert_eq!(times.get(id), Some(&1), "{id} stayed in pending: seen once");
    }
    // Minted jobs come after every id, so after the reader's cursor: each one not claimed
    // was seen.
    for id in minted.iter().filter(|id| !claimed.contains(*id)) {
        assert_eq!(
            times.get(id),
            Some(&1),
            "{id} was minted ahead of the reader"
        );
    }
    assert!(
        pages > 30 && claimed.len() > 400,
        "{pages} pages, {} claimed",
        claimed.len()
    );
    assert!(
        claimed.iter().filter(|id| !times.contains_key(id)).count() > 50,
        "claims overtook the reader"
    );
    eprintln!(
        "{pages} pages; {} stayed, {} claimed ({} before the reader saw them), {} cancelled, {} minted",
        stayed.len(),
        claimed.len(),
        claimed.iter().filter(|id| !times.contains_key(id)).count(),
        cancelled.len(),
        minted.len()
    );
    assert!(
        stayed.len() > 100 && !cancelled.is_empty(),
        "{} stayed, {} cancelled",
        stayed.len(),
        cancelled.len()
    );
}

#[test]
fn withpayloads_adds_each_jobs_payload_and_error() {
    // Dead jobs kept however old (scores written by hand below are from 1970).
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "1")
            .arg("emq.dead-ttl-ms", "0"),
    );
    let mut con = server.conn();
    let q = "payloads";
    for n in 1..=3 {
        enqueue(&mut con, q, &job_id(n), &format!("payload {n}\r\n\0"));
    }
    assert_eq!(claim(&mut con, q, 2), [job_id(1), job_id(2)]);
    let _: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(job_id(1))
        .arg(1)
        .arg("ERROR")
        .arg("bad \0 input")
        .query(&mut con)
        .expect("fail");
    let _: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(job_id(2))
        .arg(1)
        .query(&mut con)
        .expect("fail");
    // Scores written by hand that are not whole ms, and a member with no row.
    for (score, id) in [("1.5", job_id(8)), ("+inf", job_id(9))] {
        let _: () = cmd("ZADD")
            .arg(set_key(q, "dead"))
            .arg(score)
            .arg(&id)
            .query(&mut con)
            .expect("ZADD");
    }
    let died = zscore(&mut con, q, "dead", &job_id(1));
    for mut c in [server.conn(), server.conn3()] {
        let (next, jobs) = page(&mut c, q, "dead", b"0", None, true);
        assert_eq!(next, b"0");
        assert_eq!(
            jobs,
            [
                vec![
                    bulk(&job_id(8)),
                    bulk("1.5"),
                    Value::Nil,
                    Value::Nil,
                    Value::Nil
                ],
                vec![
                    bulk(&job_id(1)),
                    Value::Int(died),
                    Value::Int(1),
                    bulk("payload 1\r\n\0"),
                    bulk("bad \0 input"),
                ],
                vec![
                    bulk(&job_id(2)),
                    Value::Int(zscore(&mut con, q, "dead", &job_id(2))),
                    Value::Int(1),
                    bulk("payload 2\r\n\0"),
                    Value::Nil,
                ],
                vec![
                    bulk(&job_id(9)),
                    bulk("inf"),
                    Value::Nil,
                    Value::Nil,
                    Value::Nil
                ],
            ]
        );
        let (_, plain) = page(&mut c, q, "dead", b"0", None, false);
        assert!(plain.iter().all(|j| j.len() == 3), "{plain:?}");
        let (_, pending) = page(&mut c, q, "pending", b"0", None, true);
        assert_eq!(
            pending,
            [vec![
                bulk(&job_id(3)),
                Value::Int(0),
                Value::Int(0),
                bulk("payload 3\r\n\0"),
                Value::Nil
            ]]
        );
    }
    // A cursor at a score written by hand resumes after it.
    let (next, jobs) = page(&mut con, q, "dead", b"0", Some(1), false);
    assert_eq!(
        (next.clone(), jobs.len()),
        (format!("1.5:{}", job_id(8)).into_bytes(), 1)
    );
    let (_, rest) = page(&mut con, q, "dead", &next, None, false);
    let ids: Vec<String> = rest.iter().map(|j| text(&j[0])).collect();
    assert_eq!(ids, [job_id(1), job_id(2), job_id(9)]);
    // Options in any order and case, the last COUNT winning.
    let (_, jobs) = page(&mut con, q, "dead", b"0", Some(1000), true);
    assert_eq!(jobs.len(), 4);
    let reply: Value = cmd("EMQ.JOBS")
        .arg(q)
        .arg("dead")
        .arg("withpayloads")
        .arg("count")
        .arg(5)
        .arg("Count")
        .arg(2)
        .arg("cursor")
        .arg("0")
        .query(&mut con)
        .expect("jobs");
    let Value::Array(parts) = reply else {
        panic!("{reply:?}")
    };
    assert!(
        matches!(&parts[1], Value::Array(j) if j.len() == 2),
        "{parts:?}"
    );
}

#[test]
fn every_refusal_is_typed_and_counted() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "orders", &job_id(1), "x");
    let reasons = ["set", "cursor", "syntax", "queue", "id", "wrongtype"];
    let counted = |con: &mut Connection| -> Vec<i64> {
        reasons
            .iter()
            .map(|r| info_int(con, "emq", &format!("emq_refused_{r}")))
            .collect()
    };
    let before = counted(&mut con);
    let jobs = |args: &[&str]| {
        let mut c = cmd("EMQ.JOBS");
        for a in args {
            c.arg(*a);
        }
        c
    };
    let cases: Vec<(redis::Cmd, &str)> = vec![
        (jobs(&["orders", "schedule"]), "EMQSET "),
        (jobs(&["orders", "PENDING"]), "EMQSET "),
        (jobs(&["orders", "done"]), "EMQSET "),
        (jobs(&["orders", "pending", "CURSOR", "x"]), "EMQCURSOR "),
        (
            jobs(&["orders", "pending", "CURSOR", "01:JOB0KHTOWnGLuC"]),
            "EMQCURSOR ",
        ),
        (
            jobs(&["orders", "pending", "CURSOR", "nan:JOB0KHTOWnGLuC"]),
            "EMQCURSOR ",
        ),
        (
            jobs(&["orders", "pending", "COUNT", "0"]),
            "ERR COUNT must be an integer from 1 to 1000",
        ),
        (
            jobs(&["orders", "pending", "COUNT", "1001"]),
            "ERR COUNT must be an integer from 1 to 1000",
        ),
        (jobs(&["orders", "pending", "COUNT", "x"]), "ERR COUNT"),
        (
            jobs(&["orders", "pending", "LIMIT", "5"]),
            "ERR syntax error",
        ),
        (jobs(&["orders", "pending", "CURSOR"]), "ERR syntax error"),
        (jobs(&["a{b", "pending"]), "EMQQUEUE "),
        (job_cmd("a{b", &job_id(1)), "EMQQUEUE "),
        (job_cmd("orders", "JOB-not-an-id!"), "EMQID "),
        (job_cmd("orders", "job0KHTOWnGLuC"), "EMQID "),
    ];
    for (c, prefix) in &cases {
        let err = expect_err(&mut con, c);
        assert!(err.starts_with(prefix), "{prefix}: {err}");
    }
    // The queue is checked first, then the set, then the options.
    let err = expect_err(&mut con, &jobs(&["a{b", "nope", "COUNT", "0"]));
    assert!(err.starts_with("EMQQUEUE "), "{err}");
    let err = expect_err(&mut con, &jobs(&["orders", "nope", "COUNT", "0"]));
    assert!(err.starts_with("EMQSET "), "{err}");
    // Keys of another type: WRONGTYPE, as for every command that reaches them.
    let _: () = cmd("SET")
        .arg(row_key("orders", &job_id(1)))
        .arg("garbage")
        .query(&mut con)
        .expect("SET");
    let err = expect_err(&mut con, &job_cmd("orders", &job_id(1)));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let err = expect_err(&mut con, &jobs(&["orders", "pending"]));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let _: () = cmd("SET")
        .arg(set_key("orders", "dead"))
        .arg("garbage")
        .query(&mut con)
        .expect("SET");
    let err = expect_err(&mut con, &jobs(&["orders", "dead"]));
    assert!(err.starts_with("WRONGTYPE"), "{err}");

    let after = counted(&mut con);
    let grown: BTreeMap<&str, i64> = reasons
        .iter()
        .zip(before.iter().zip(&after))
        .map(|(r, (b, a))| (*r, a - b))
        .collect();
    let expected: BTreeMap<&str, i64> = [
        ("set", 4),
        ("cursor", 3),
        ("syntax", 5),
        ("queue", 3),
        ("id", 2),
        ("wrongtype", 3),
    ]
    .into();
    assert_eq!(grown, expected);
    assert_eq!(info_int(&mut con, "emq", "emq_refused_internal"), 0);
}

#[test]
fn a_user_limited_to_one_queue_inspects_it_and_gets_noperm_for_another() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    enqueue(&mut admin, "orders", &job_id(1), "o");
    enqueue(&mut admin, "payments", &job_id(1), "p");
    for (user, rules) in [
        (
            "worker",
            vec!["resetkeys", "~emq:{orders}:*", "-@all", "+@emq"],
        ),
        // Read access is all inspection needs.
        (
            "reader",
            vec!["resetkeys", "%R~emq:{orders}:*", "-@all", "+@emq"],
        ),
    ] {
        let mut con = user_with(&server, user, &rules);
        let view = job_view(&mut con, "orders", &job_id(1)).expect("a job");
        assert_eq!(view[0], ("id".to_string(), bulk(&job_id(1))));
        let (_, jobs) = page(&mut con, "orders", "pending", b"0", None, true);
        assert_eq!(jobs.len(), 1, "{user}");
        for c in [
            job_cmd("payments", &job_id(1)),
            cmd("EMQ.JOBS").arg("payments").arg("pending").clone(),
        ] {
            let err = expect_err(&mut con, &c);
            assert_eq!(err, "NOPERM No permissions to access a key", "{user}");
        }
        let log: Vec<Value> = cmd("ACL")
            .arg("LOG")
            .arg(1)
            .query(&mut admin)
            .expect("ACL LOG");
        let entry = format!("{log:?}");
        assert!(
            entry.contains(user) && entry.contains("emq:{payments}:"),
            "{entry}"
        );
    }
    // The reader may look, not write.
    let mut reader = user_with(&server, "reader", &[]);
    let err = expect_err(&mut reader, cmd("EMQ.CANCEL").arg("orders").arg(job_id(1)));
    assert!(err.starts_with("NOPERM"), "{err}");
    // A user who may read the pending set but no row cannot list its jobs.
    let mut set_only = user_with(
        &server,
        "set-only",
        &["resetkeys", "%R~emq:{orders}:pending", "-@all", "+@emq"],
    );
    let err = expect_err(&mut set_only, cmd("EMQ.JOBS").arg("orders").arg("pending"));
    assert!(err.starts_with("NOPERM"), "{err}");
    let err = expect_err(&mut set_only, &job_cmd("orders", &job_id(1)));
    assert!(err.starts_with("NOPERM"), "{err}");
}

#[test]
fn a_page_deep_in_100000_pending_jobs_does_bounded_work() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "large";
    let n_jobs = 100_000usize;
    let ids: Vec<String> = (1..=n_jobs as u64).map(job_id).collect();
    for chunk in ids.chunks(10_000) {
        menqueue(&mut con, q, chunk.to_vec());
    }
    assert_eq!(set_len(&mut con, q, "pending"), n_jobs as i64);
    // Pages at the very end, deep inside, and near the start; all 100,000 members share
    // score 0, so each position is found among them by rank. (What a page of 1,000 costs
    // to read does not depend on where it starts: the paging test has those.)
    let mut rng = Rng::seeded(0x5107);
    let mut at = vec![99_999, 99_990, 99_000, 50_000, 1];
    at.extend((0..40).map(|_| 1 + rng.below(99_999) as usize));
    let counts: Vec<usize> = (0..at.len()).map(|i| [1, 10, 100][i % 3]).collect();
    // The module reads a set by rank through the server's own ZCOUNT and ZRANGE, and the
    // slow log, logging every call, lists those calls with their arguments after the page
    // that made them: the work of each page, counted rather than timed.
    config_set(&mut con, "slowlog-max-len", "4096");
    config_set(&mut con, "slowlog-log-slower-than", "0");
    let _: () = cmd("SLOWLOG")
        .arg("RESET")
        .query(&mut con)
        .expect("SLOWLOG RESET");
    for (i, &n) in at.iter().enumerate() {
        let cursor = format!("0:{}", ids[n - 1]);
        let count = counts[i];
        let (next, jobs) = page(
            &mut con,
            q,
            "pending",
            cursor.as_bytes(),
            Some(count),
            i % 2 == 0,
        );
        let want = count.min(n_jobs - n);
        assert_eq!(jobs.len(), want, "after job {n}");
        if want > 0 {
            assert_eq!(text(&jobs[0][0]), ids[n], "resumes right after job {n}");
        }
        assert_eq!(next == b"0", n + count >= n_jobs, "after job {n}: {next:?}");
    }
    config_set(&mut con, "slowlog-log-slower-than", "10000");
    let mut entries: Vec<Value> = cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(&mut con)
        .expect("SLOWLOG GET");
    entries.reverse(); // oldest first
    let argv_of = |e: &Value| -> Vec<String> {
        match e {
            Value::Array(f) => match &f[3] {
                Value::Array(argv) => argv.iter().map(text).collect(),
                other => panic!("a slowlog entry: {other:?}"),
            },
            other => panic!("a slowlog entry: {other:?}"),
        }
    };
    // Per page: (ZCOUNT calls, single-rank probes, members read by rank).
    let mut work = Vec::new();
    let mut this = (0, 0, 0);
    for argv in entries.iter().map(argv_of) {
        let name = argv[0].to_ascii_uppercase();
        match name.as_str() {
            "ZCOUNT" => this.0 += 1,
            "ZRANGE" => {
                let rank = |i: usize| argv[i].parse::<u64>().expect("a rank");
                let (start, stop) = (rank(2), rank(3));
                if start == stop {
                    this.1 += 1;
                }
                this.2 += stop - start + 1;
            }
            "EMQ.JOBS" => work.push(std::mem::take(&mut this)),
            _ => {}
        }
    }
    assert_eq!(work.len(), at.len(), "every page is logged");
    // A binary search through a run of 100,000 equal scores: 17 halvings at most, wherever
    // the page starts, then one read of the page (a walk to the position would read up to
    // 100,000 members).
    let halvings = (n_jobs as f64).log2().ceil() as u64;
    for ((&(zcounts, probes, read), &n), &count) in work.iter().zip(&at).zip(&counts) {
        assert_eq!(zcounts, 2, "after job {n}: {work:?}");
        assert!(probes <= halvings + 1, "after job {n}: {probes} probes");
        assert!(
            read <= probes + count as u64,
            "after job {n}: {read} members read for a page of {count}"
        );
    }
    eprintln!("per page (zcounts, probes, members read): {work:?}");
}

#[test]
fn the_commands_are_read_only_route_by_queue_and_document_their_arguments() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let info: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("emq.job")
        .arg("emq.jobs")
        .query(&mut con)
        .expect("COMMAND INFO");
    for (entry, arity) in info.iter().zip([3, -3]) {
        let Value::Array(fields) = entry else {
            panic!("{entry:?}")
        };
        assert_eq!(fields[1], Value::Int(arity), "{entry:?}");
        let text = format!("{entry:?}");
        assert!(
            text.contains("readonly") && !text.contains("write"),
            "{text}"
        );
        // One key spec, on the queue argument: read-only access.
        for flag in ["\"RO\"", "\"access\"", "\"not_key\""] {
            assert!(text.contains(flag), "{flag}: {text}");
        }
    }
    let docs: Value = cmd("COMMAND")
        .arg("DOCS")
        .arg("emq.jobs")
        .query(&mut con)
        .expect("COMMAND DOCS");
    let text = format!("{docs:?}");
    for word in [
        "queue",
        "set",
        "pending",
        "active",
        "scheduled",
        "dead",
        "pure-token",
        "oneof",
        "CURSOR",
        "COUNT",
        "WITHPAYLOADS",
        "PREVIEW",
    ] {
        assert!(text.contains(&format!("\"{word}\"")), "{word}: {text}");
    }
}

#[test]
fn replicas_scripts_and_transactions_answer_them() {
    let (primary, replica) = primary_and_replica(Options::default());
    let mut p = primary.conn();
    let q = "everywhere";
    menqueue(&mut p, q, (1..=30u64).map(job_id));
    let mut r = replica.conn();
    wait_caught_up(&mut p, &mut r);
    let (on_replica, _) = walk(&mut r, q, "pending", 7, |_| {});
    assert_eq!(on_replica, (1..=30u64).map(job_id).collect::<Vec<_>>());
    let view = job_view(&mut r, q, &job_id(3)).expect("a job on the replica");
    assert_eq!(view[1], ("state".to_string(), bulk("pending")));

    // From a script and inside MULTI, the same pages.
    let from_script: Value = cmd("EVAL")
        .arg("return redis.call('EMQ.JOBS', ARGV[1], 'pending', 'CURSOR', ARGV[2], 'COUNT', 2)")
        .arg(0)
        .arg(q)
        .arg(format!("0:{}", job_id(28)))
        .query(&mut p)
        .expect("EVAL");
    let direct: Value = cmd("EMQ.JOBS")
        .arg(q)
        .arg("pending")
        .arg("CURSOR")
        .arg(format!("0:{}", job_id(28)))
        .arg("COUNT")
        .arg(2)
        .query(&mut p)
        .expect("EMQ.JOBS");
    assert_eq!(from_script, direct);
    let (in_multi,): (Value,) = redis::pipe()
        .atomic()
        .cmd("EMQ.JOBS")
        .arg(q)
        .arg("pending")
        .arg("CURSOR")
        .arg(format!("0:{}", job_id(28)))
        .arg("COUNT")
        .arg(2)
        .query(&mut p)
        .expect("MULTI");
    assert_eq!(in_multi, direct);
    let Value::Array(parts) = &direct else {
        panic!("{direct:?}")
    };
    assert_eq!(parts[0], bulk("0"));
}
