//! Hand-overs that wait on one server (docs/flows.md, "The hand-over"): a chain that comes
//! back to a queue its call has open parks in the outbox, a parent in reach takes the first
//! outcome parked for a child, and an outbox of another type refuses a child or keeps its
//! hand-over waiting, never losing one. One call gives the parents in reach at most 1,000
//! hand-overs, and one cancel takes at most 1,000 children: a wider flow is finished by the
//! outbox's delivery, or by the clients' cancel. (The rest of flows on one server:
//! tests/flows.rs.)

use emq_harness as support;

use redis::{cmd, Value};
use support::flow::*;
use support::*;

/// `EMQ.OUTBOX` of `q`, one page: each entry's child and outcome.
fn parked(con: &mut Connection, q: &str) -> Vec<(String, String)> {
    outbox(con, q)
        .into_iter()
        .map(|e| (e[0].clone(), e[3].clone()))
        .collect()
}

/// Grandparent 1 of `gq`, its child parent 2 of `pq` (`FAIL`), and its child 3 of `gq`
/// (`FAIL`), claimed: the child's token.
fn chain_back_to_its_queue(con: &mut Connection, gq: &str, pq: &str) -> i64 {
    parent(con, gq, &job_id(1), 1);
    assert_eq!(
        enqueue_with(
            con,
            pq,
            &job_id(2),
            "p",
            &["CHILDREN", "1", "PARENT", gq, &job_id(1)]
        ),
        1
    );
    child(con, gq, &job_id(3), pq, &job_id(2), "FAIL");
    claim_one(con, gq, &job_id(3))
}

#[test]
fn a_parent_in_reach_takes_the_first_outcome_its_child_parked_before() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let token = chain_back_to_its_queue(&mut con, "q1", "q2");
    // The child's death fails the parent, whose own hand-over comes back to q1, open already
    // in this call: it waits in q2's outbox, even on one server.
    fail(&mut con, "q1", &job_id(3), token, "boom");
    assert_eq!(
        job_state(&mut con, "q2", &job_id(2)).as_deref(),
        Some("dead")
    );
    assert_eq!(parked(&mut con, "q2"), vec![(job_id(2), "dead".into())]);
    // The parent requeued and acked before a worker delivered it: the grandparent in reach
    // takes the first outcome, the parked one, and its entry goes.
    assert_eq!(requeue(&mut con, "q2", &job_id(2)), 1);
    let token = claim_one(&mut con, "q2", &job_id(2));
    ack(&mut con, "q2", &job_id(2), token, "ok");
    assert_eq!(
        job_state(&mut con, "q1", &job_id(1)).as_deref(),
        Some("dead")
    );
    let outcomes: Vec<String> = children(&mut con, "q1", &job_id(1))
        .into_iter()
        .map(|(_, id, status, _)| format!("{id} {status}"))
        .collect();
    assert_eq!(outcomes, vec![format!("{} dead", job_id(2))]);
    assert!(parked(&mut con, "q2").is_empty());
}

#[test]
fn an_outbox_of_another_type_refuses_a_child_or_keeps_its_hand_over_waiting() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let token = chain_back_to_its_queue(&mut con, "r1", "r2");
    // The child's own outbox of another type: its death is refused, nothing written, though
    // its parent is in reach.
    let _: () = cmd("SET")
        .arg("emq:{r1}:outbox")
        .arg("x")
        .query(&mut con)
        .expect("set");
    let refused = cmd("EMQ.FAIL")
        .arg("r1")
        .arg(job_id(3))
        .arg(token)
        .arg("ERROR")
        .arg("boom")
        .query::<Value>(&mut con)
        .expect_err("refused");
    assert_eq!(refused.code(), Some("WRONGTYPE"));
    assert_eq!(
        job_state(&mut con, "r1", &job_id(3)).as_deref(),
        Some("active")
    );
    let _: () = cmd("DEL")
        .arg("emq:{r1}:outbox")
        .query(&mut con)
        .expect("del");
    // The parent's outbox of another type: the parent it would fail cannot keep its own
    // hand-over, so it refuses the child's, which waits in the child's outbox; none is lost.
    let _: () = cmd("SET")
        .arg("emq:{r2}:outbox")
        .arg("x")
        .query(&mut con)
        .expect("set");
    fail(&mut con, "r1", &job_id(3), token, "boom");
    assert_eq!(
        job_state(&mut con, "r1", &job_id(3)).as_deref(),
        Some("dead")
    );
    assert_eq!(
        job_state(&mut con, "r2", &job_id(2)).as_deref(),
        Some("waiting")
    );
    assert_eq!(parked(&mut con, "r1"), vec![(job_id(3), "dead".into())]);
    assert_eq!(info_int(&mut con, "emq", "emq_handovers_lost"), 0);
    // Once the key is put right, a worker's delivery fails the parent and the grandparent.
    let _: () = cmd("DEL")
        .arg("emq:{r2}:outbox")
        .query(&mut con)
        .expect("del");
    let got: String = cmd("EMQ.HANDOVER")
        .arg("r2")
        .arg(job_id(2))
        .arg("r1")
        .arg(job_id(3))
        .arg("dead")
        .arg("fail")
        .arg("boom")
        .query(&mut con)
        .expect("handover");
    assert_eq!(got, "counted");
    assert_eq!(
        job_state(&mut con, "r2", &job_id(2)).as_deref(),
        Some("dead")
    );
    assert_eq!(
        job_state(&mut con, "r1", &job_id(1)).as_deref(),
        Some("dead")
    );
}

/// Enqueues each of `jobs` (id, options) in `q` in one pipeline.
fn enqueue_all(con: &mut Connection, q: &str, jobs: &[(String, Vec<String>)]) {
    let mut pipe = redis::pipe();
    for (id, options) in jobs {
        pipe.cmd("EMQ.ENQUEUE").arg(q).arg(id).arg("j").arg(options);
    }
    let added: Vec<i64> = pipe.query(con).expect("enqueue");
    assert!(added.iter().all(|&a| a == 1));
}

/// Each entry of `q`'s outbox handed over to its parent and removed, as a worker's sweep
/// does, walking its pages, until a whole walk finds none: how many.
fn deliver_all(con: &mut Connection, q: &str) -> usize {
    let mut done = 0;
    loop {
        let before = done;
        let mut cursor = "0".to_string();
        loop {
            let (next, entries): (String, Vec<Vec<String>>) = cmd("EMQ.OUTBOX")
                .arg(q)
                .arg("CURSOR")
                .arg(&cursor)
                .query(con)
                .expect("outbox");
            for e in &entries {
                hand_over_entry(con, q, e);
                assert_eq!(support::flow::delivered(con, q, e, false), 1);
                done += 1;
            }
            if next == "0" {
                break;
            }
            cursor = next;
        }
        if done == before {
            return done;
        }
    }
}

#[test]
fn a_failure_that_fails_more_parents_than_one_call_gives_parks_the_rest_for_delivery() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let q = "wide";
    // Three levels of parents above one child, 16 above each job: 4,368 parents that wait
    // for one child each, all failed by the child's death (`ON-FAIL FAIL`).
    let mut n = 0;
    let mut level: Vec<String> = (0..4096)
        .map(|_| {
            n += 1;
            job_id(n)
        })
        .collect();
    let waits = |parents: &[String]| {
        let mut o = vec!["CHILDREN".to_string(), "1".to_string()];
        for p in parents {
            o.extend(["PARENT".to_string(), q.to_string(), p.clone()]);
        }
        o
    };
    enqueue_all(
        &mut con,
        q,
        &level
            .iter()
            .map(|id| (id.clone(), waits(&[])))
            .collect::<Vec<_>>(),
    );
    for _ in 0..2 {
        let below: Vec<(String, Vec<String>)> = level
            .chunks(16)
            .map(|parents| {
                n += 1;
                (job_id(n), waits(parents))
            })
            .collect();
        enqueue_all(&mut con, q, &below);
        level = below.into_iter().map(|(id, _)| id).collect();
    }
    n += 1;
    let leaf = job_id(n);
    let mut options = waits(&level);
    options.drain(..2);
    enqueue_all(&mut con, q, &[(leaf.clone(), options)]);
    assert_eq!(stats(&mut con, q)["waiting"], 4368);
    let token = claim_one(&mut con, q, &leaf);
    fail(&mut con, q, &leaf, token, "boom");
    // The call failed as many parents as its budget gives; the rest wait in the outbox.
    let dead = stats(&mut con, q)["dead"];
    assert!(dead > 1 && dead <= 1001, "{dead} dead after the call");
    assert!(!outbox(&mut con, q).is_empty());
    // A worker's delivery finishes the flow: every parent failed, once.
    assert!(deliver_all(&mut con, q) > 0);
    let counts = stats(&mut con, q);
    assert_eq!((counts["dead"], counts["waiting"]), (4369, 0));
    assert_eq!(info_int(&mut con, "emq", "emq_handovers_lost"), 0);
}

#[test]
fn one_cancel_takes_at_most_its_budget_of_children() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "tree";
    // A root waiting for two parents, each waiting for 600 children: 1,202 jobs below it.
    parent(&mut con, q, &job_id(1), 2);
    let mut n = 1;
    for _ in 0..2 {
        n += 1;
        let mid = job_id(n);
        let options = ["CHILDREN", "600", "PARENT", q, &job_id(1)];
        assert_eq!(enqueue_with(&mut con, q, &mid, "mid", &options), 1);
        let leaves: Vec<(String, Vec<String>)> = (0..600)
            .map(|_| {
                n += 1;
                let o = ["PARENT", q, &mid].map(String::from).to_vec();
                (job_id(n), o)
            })
            .collect();
        enqueue_all(&mut con, q, &leaves);
    }
    assert_eq!(cancel(&mut con, q, &job_id(1)), 1);
    let counts = stats(&mut con, q);
    // 1,000 children went with the root; the clients' cancel sends the rest their own.
    assert_eq!(counts["pending"] + counts["waiting"], 1202 - 1000);
}

#[test]
fn a_parked_hand_over_its_parent_refuses_is_counted_once_as_an_orphan() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let token = chain_back_to_its_queue(&mut con, "o1", "o2");
    fail(&mut con, "o1", &job_id(3), token, "boom");
    assert_eq!(parked(&mut con, "o2"), vec![(job_id(2), "dead".into())]);
    // The grandparent goes before a worker delivers the parked hand-over: it refuses it.
    assert_eq!(cancel(&mut con, "o1", &job_id(1)), 1);
    let before = info_int(&mut con, "emq", "emq_orphaned");
    let e = &outbox(&mut con, "o2")[0];
    assert_eq!(hand_over_entry(&mut con, "o2", e), "orphan");
    assert_eq!(support::flow::delivered(&mut con, "o2", e, true), 1);
    assert_eq!(info_int(&mut con, "emq", "emq_orphaned") - before, 1);
    assert!(row_field(&mut con, "o2", &job_id(2), "orphan").is_some());
}
