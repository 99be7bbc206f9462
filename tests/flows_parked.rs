//! Hand-overs that wait on one server (docs/flows.md, "The hand-over"): a chain that comes
//! back to a queue its call has open parks in the outbox, a parent in reach takes the first
//! outcome parked for a child, and an outbox of another type refuses a child or keeps its
//! hand-over waiting, never losing one. (The rest of flows on one server: tests/flows.rs.)

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
