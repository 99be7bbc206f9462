//! Flows on one server, as tests drive them (docs/flows.md): a parent and its children
//! enqueued, claimed and finished one command each, and a parent's children read back.

use redis::{cmd, Connection, Value};

use crate::*;

/// `EMQ.ENQUEUE <q> <id> <payload> <options...>`.
pub fn enqueue_with(
    con: &mut Connection,
    q: &str,
    id: &str,
    payload: &str,
    options: &[&str],
) -> i64 {
    let mut c = cmd("EMQ.ENQUEUE");
    c.arg(q).arg(id).arg(payload);
    for o in options {
        c.arg(*o);
    }
    c.query(con).expect("enqueue")
}

/// A parent of `n` children.
pub fn parent(con: &mut Connection, q: &str, id: &str, n: usize) {
    let n = n.to_string();
    assert_eq!(enqueue_with(con, q, id, "parent", &["CHILDREN", &n]), 1);
}

/// A child of `parent` in `pq`, with `policy` (`FAIL` or `IGNORE`).
pub fn child(con: &mut Connection, q: &str, id: &str, pq: &str, parent: &str, policy: &str) -> i64 {
    enqueue_with(
        con,
        q,
        id,
        "child",
        &["PARENT", pq, parent, "ON-FAIL", policy],
    )
}

/// Claims `id` from `q` (the only job there) and returns its token.
pub fn claim_one(con: &mut Connection, q: &str, id: &str) -> i64 {
    let jobs = claim(con, q, &[]).expect("a job");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].0, id);
    jobs[0].2
}

pub fn ack(con: &mut Connection, q: &str, id: &str, token: i64, result: &str) {
    let _: Value = cmd("EMQ.ACK")
        .arg(q)
        .arg(id)
        .arg(token)
        .arg("RESULT")
        .arg(result)
        .query(con)
        .expect("ack");
}

/// `EMQ.CHILDREN`, whole: (queue, id, status, data) per child, sorted.
pub fn children(con: &mut Connection, q: &str, id: &str) -> Vec<(String, String, String, String)> {
    let mut all = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, page): (String, Vec<(String, String, String, String)>) = cmd("EMQ.CHILDREN")
            .arg(q)
            .arg(id)
            .arg("CURSOR")
            .arg(&cursor)
            .query(con)
            .expect("children");
        all.extend(page);
        if next == "0" {
            break;
        }
        cursor = next;
    }
    all.sort();
    all
}

/// `EMQ.FAIL` of `id`'s attempt `token` in `q`, with `error`.
pub fn fail(con: &mut Connection, q: &str, id: &str, token: i64, error: &str) {
    let _: Value = cmd("EMQ.FAIL")
        .arg(q)
        .arg(id)
        .arg(token)
        .arg("ERROR")
        .arg(error)
        .query(con)
        .expect("fail");
}

pub fn requeue(con: &mut Connection, q: &str, id: &str) -> i64 {
    cmd("EMQ.REQUEUE")
        .arg(q)
        .arg(id)
        .query(con)
        .expect("requeue")
}

/// `EMQ.CANCEL` of `id` in `q`: `1` removed, `0` not.
pub fn cancel(con: &mut Connection, q: &str, id: &str) -> i64 {
    cmd("EMQ.CANCEL").arg(q).arg(id).query(con).expect("cancel")
}

/// `EMQ.OUTBOX <q>`, its first page: each entry as `[child, parent, parent-queue, outcome,
/// policy, data]`.
pub fn outbox(con: &mut Connection, q: &str) -> Vec<Vec<String>> {
    let (_, entries): (String, Vec<Vec<String>>) =
        cmd("EMQ.OUTBOX").arg(q).query(con).expect("outbox");
    entries
}

/// `EMQ.HANDOVER` of one entry of child queue `q`'s outbox (as `outbox` gives it), as a
/// worker's delivery sends it: the parent's answer.
pub fn hand_over_entry<E: redis::ToRedisArgs>(
    con: &mut impl redis::ConnectionLike,
    q: &str,
    e: &[E],
) -> String {
    cmd("EMQ.HANDOVER")
        .arg(&e[1])
        .arg(&e[2])
        .arg(q)
        .arg(&e[0])
        .arg(&e[3])
        .arg(&e[4])
        .arg(&e[5])
        .query(con)
        .expect("handover")
}

/// `EMQ.DELIVERED` of that entry (with `ORPHAN` when its parent refused it): `1` removed.
pub fn delivered<E: redis::ToRedisArgs>(
    con: &mut impl redis::ConnectionLike,
    q: &str,
    e: &[E],
    orphan: bool,
) -> i64 {
    let mut c = cmd("EMQ.DELIVERED");
    c.arg(q).arg(&e[0]).arg(&e[1]).arg(&e[2]);
    if orphan {
        c.arg("ORPHAN");
    }
    c.query(con).expect("delivered")
}
