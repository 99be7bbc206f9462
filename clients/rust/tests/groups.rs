//! Groups through the Rust client against a real server: `Enqueue::group` puts a job in that
//! group of its queue, which its row names (a job without one has none); claims take the
//! groups with ready jobs in turn, so a group enqueued behind a long one is not starved while
//! each group's jobs keep their order; `EMQ.STATS` counts the groups with ready jobs (`groups`)
//! and every ready job (`pending`). Order and counts only: nothing here is timed.

mod common;

use std::collections::HashMap;

use common::*;
use echomq_client::{Enqueue, Queue};
use emq_harness::Options;
use redis::aio::MultiplexedConnection;

/// The fairness test's queue: a long group, then a short one enqueued behind it.
const LONG: usize = 30;
const SHORT: usize = 3;

fn in_group(group: &str) -> Enqueue {
    Enqueue {
        group: Some(group.into()),
        ..Enqueue::default()
    }
}

/// A job's row field, through the client.
async fn field(q: &Queue<MultiplexedConnection>, id: &str, name: &str) -> Option<String> {
    q.job(id).await.expect("EMQ.JOB")?.get(name).cloned()
}

async fn stats(q: &Queue<MultiplexedConnection>) -> HashMap<String, Option<i64>> {
    q.stats().await.expect("EMQ.STATS")
}

/// Enqueues `count` jobs to `group`; their ids, in order.
async fn enqueue_to(q: &Queue<MultiplexedConnection>, group: &str, count: usize) -> Vec<String> {
    let mut ids = Vec::new();
    for n in 0..count {
        let payload = format!("{group}{n}");
        ids.push(
            q.enqueue_with(payload, in_group(group))
                .await
                .expect("enqueue"),
        );
    }
    ids
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_jobs_group_is_in_its_row_and_a_job_without_one_has_none() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "grouped");
    let id = q
        .enqueue_with(b"x", in_group("tenant-1"))
        .await
        .expect("enqueue");
    assert_eq!(field(&q, &id, "group").await.as_deref(), Some("tenant-1"));
    let plain = q.enqueue(b"y").await.expect("enqueue");
    assert_eq!(field(&q, &plain, "group").await, None);
    // The group stays the job's through its claim.
    let mut claimed = [claim_one(&q).await.0, claim_one(&q).await.0];
    claimed.sort();
    let mut both = [id.clone(), plain];
    both.sort();
    assert_eq!(claimed, both);
    assert_eq!(field(&q, &id, "state").await.as_deref(), Some("active"));
    assert_eq!(field(&q, &id, "group").await.as_deref(), Some("tenant-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_enqueued_behind_a_long_one_is_claimed_in_turn() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "fair");
    let a = enqueue_to(&q, "a", LONG).await;
    let b = enqueue_to(&q, "b", SHORT).await;
    let counts = stats(&q).await;
    assert_eq!(
        (counts["groups"], counts["pending"]),
        (Some(2), Some((LONG + SHORT) as i64)),
        "{counts:?}"
    );
    let mut order = Vec::new();
    for _ in 0..LONG + SHORT {
        order.push(claim_one(&q).await.0);
    }
    let position = |id: &String| order.iter().position(|o| o == id);
    for id in &b {
        assert!(
            position(id).is_some_and(|p| p < 2 * SHORT),
            "{id} of b claimed at {:?}: {order:?}",
            position(id)
        );
    }
    let a_claimed: Vec<&String> = order.iter().filter(|id| a.contains(id)).collect();
    assert_eq!(
        a_claimed,
        a.iter().collect::<Vec<_>>(),
        "a's order: {order:?}"
    );
    let counts = stats(&q).await;
    assert_eq!(
        (counts["groups"], counts["pending"], counts["active"]),
        (Some(0), Some(0), Some((LONG + SHORT) as i64)),
        "{counts:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_that_never_used_groups_counts_none() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "ungrouped");
    q.enqueue(b"x").await.expect("enqueue");
    let counts = stats(&q).await;
    assert_eq!(
        (counts["groups"], counts["pending"]),
        (Some(0), Some(1)),
        "{counts:?}"
    );
}
