//! Groups through the Rust client against a real server: `Enqueue::group` puts a job in that
//! group of its queue, which its row names (a job without one has none); claims take the
//! groups with ready jobs in turn, so a group enqueued behind a long one is not starved while
//! each group's jobs keep their order; `EMQ.STATS` counts the named groups the queue knows
//! (`groups`: with ready or active jobs) and every ready job (`pending`). A group's limits (the
//! queue's `Limit::group_concurrency` and `group_rate`, its own `Queue::group_limit`) hold it
//! back at its limit while the others go on; a paused group (`Queue::pause_group`) is skipped
//! until resumed, by `Queue::resume_group` or its time's end; `Queue::groups` pages them, the
//! largest backlog first. Order and counts only: nothing here is timed.

mod common;

use std::collections::HashMap;
use std::time::Duration;

use common::*;
use echomq_client::{Enqueue, Group, GroupLimit, Limit, Queue, Rate, Setting};
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

/// One claim of up to `count` jobs (a lease of a minute), as a worker elsewhere would: each
/// job's id and token, in claim order.
async fn claim(q: &Queue<MultiplexedConnection>, count: usize) -> Vec<(String, i64)> {
    let args = ["COUNT", &count.to_string(), "LEASE", "60000"].map(|a| a.as_bytes().to_vec());
    let reply = q.call("EMQ.CLAIM", &args).await.expect("claim");
    let jobs: Vec<(String, Vec<u8>, i64)> = redis::from_redis_value(reply).expect("jobs");
    jobs.into_iter().map(|(id, _, token)| (id, token)).collect()
}

fn ids(claimed: &[(String, i64)]) -> Vec<String> {
    claimed.iter().map(|(id, _)| id.clone()).collect()
}

fn sorted(mut ids: Vec<String>) -> Vec<String> {
    ids.sort();
    ids
}

async fn ack(q: &Queue<MultiplexedConnection>, claimed: &[(String, i64)]) {
    for (id, token) in claimed {
        let args = [id.as_bytes().to_vec(), token.to_string().into_bytes()];
        let reply = q.call("EMQ.ACK", &args).await.expect("ack");
        assert_eq!(reply, redis::Value::Int(1), "{id}");
    }
}

/// Every group of the first page of the listing.
async fn listed(q: &Queue<MultiplexedConnection>) -> Vec<Group> {
    let (cursor, groups) = q.groups("0", None).await.expect("EMQ.GROUPS");
    assert_eq!(cursor, "0");
    groups
}

fn own(concurrency: Setting<u32>) -> GroupLimit {
    GroupLimit {
        concurrency,
        ..GroupLimit::default()
    }
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
    // Groups with active jobs are still known; once every job is acked, none is.
    let counts = stats(&q).await;
    assert_eq!(
        (counts["groups"], counts["pending"], counts["active"]),
        (Some(2), Some(0), Some((LONG + SHORT) as i64)),
        "{counts:?}"
    );
    let claimed: Vec<(String, i64)> = order.into_iter().map(|id| (id, 1)).collect();
    ack(&q, &claimed).await;
    let counts = stats(&q).await;
    assert_eq!(
        (counts["groups"], counts["pending"], counts["active"]),
        (Some(0), Some(0), Some(0)),
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_at_its_concurrency_limit_is_held_back_until_a_job_of_it_leaves() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "group-limits");
    let default = Limit {
        group_concurrency: Setting::Set(2),
        ..Limit::default()
    };
    assert_eq!(
        q.limit(default).await.expect("limit").group_concurrency,
        Some(2)
    );
    let a_own = q.group_limit("a", own(Setting::Set(1))).await.expect("a");
    assert_eq!(
        (
            a_own.group.as_str(),
            a_own.concurrency,
            a_own.group_concurrency,
            a_own.held
        ),
        ("a", Some(1), Some(2), false)
    );
    let a = enqueue_to(&q, "a", 3).await;
    let b = enqueue_to(&q, "b", 3).await;
    let first = claim(&q, 100).await;
    // At most each group's limit, each group's jobs in their order.
    let expected = [&a[..1], &b[..2]].concat();
    assert_eq!(sorted(ids(&first)), sorted(expected), "{first:?}");
    assert_eq!(claim(&q, 100).await, vec![]);
    let report = q.group_limits("a").await.expect("report");
    assert_eq!((report.active, report.ready, report.held), (1, 2, true));
    let seen: Vec<_> = listed(&q)
        .await
        .into_iter()
        .map(|g| (g.group, g.ready, g.active, g.concurrency, g.held))
        .collect();
    assert_eq!(
        seen,
        vec![
            ("a".to_string(), 2, 1, Some(1), true),
            ("b".to_string(), 1, 2, Some(2), true),
        ]
    );
    // An ack frees one place of that group: one more of a's, none of b's.
    let a_first: Vec<_> = first
        .iter()
        .filter(|(id, _)| *id == a[0])
        .cloned()
        .collect();
    ack(&q, &a_first).await;
    assert_eq!(ids(&claim(&q, 100).await), vec![a[1].clone()]);
    assert_eq!(claim(&q, 100).await, vec![]);
    // Without its own limit, a has the default's two places.
    let removed = q.group_limit("a", own(Setting::Off)).await.expect("off");
    assert_eq!(removed.concurrency, None);
    assert_eq!(ids(&claim(&q, 100).await), vec![a[2].clone()]);
    let none = Limit {
        group_concurrency: Setting::Off,
        ..Limit::default()
    };
    assert_eq!(q.limit(none).await.expect("off").group_concurrency, None);
    assert_eq!(ids(&claim(&q, 100).await), vec![b[2].clone()]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_group_is_skipped_until_it_is_resumed() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "group-pauses");
    let a = enqueue_to(&q, "a", 2).await;
    let b = enqueue_to(&q, "b", 1).await;
    assert!(q.pause_group("a", None).await.expect("pause"));
    assert!(!q.pause_group("a", None).await.expect("pause again"));
    let paused: Vec<_> = listed(&q)
        .await
        .into_iter()
        .map(|g| (g.group, g.paused, g.paused_until))
        .collect();
    assert_eq!(
        paused,
        vec![
            ("a".to_string(), true, None),
            ("b".to_string(), false, None)
        ]
    );
    assert_eq!(ids(&claim(&q, 100).await), b);
    assert_eq!(claim(&q, 100).await, vec![]);
    assert_eq!(stats(&q).await["pending"], Some(2));
    assert!(q.resume_group("a").await.expect("resume"));
    assert!(!q.resume_group("a").await.expect("resume again"));
    assert_eq!(ids(&claim(&q, 100).await), a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_paused_for_a_while_is_claimed_by_a_worker_after() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "group-paused-for");
    let refused = q.pause_group("a", Some(Duration::from_micros(400))).await;
    assert!(
        matches!(refused, Err(echomq_client::Error::Argument(_))),
        "{refused:?}"
    );
    let id = q.enqueue_with(b"x", in_group("a")).await.expect("enqueue");
    assert!(q
        .pause_group("a", Some(Duration::from_millis(300)))
        .await
        .expect("pause"));
    // However long it waited, the worker gets the job: the pause ended by itself.
    let (ran, mut got) = tokio::sync::mpsc::unbounded_channel();
    let worker = worker_of(
        &server,
        "group-paused-for",
        move |job: echomq_client::Job| {
            let ran = ran.clone();
            async move {
                let _ = ran.send(job.id.clone());
                Ok(None)
            }
        },
    )
    .await;
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    let first = tokio::time::timeout(Duration::from_secs(30), got.recv()).await;
    stop.cancel();
    running.await.expect("join").expect("run");
    assert_eq!(first.ok().flatten(), Some(id));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_groups_are_listed_largest_backlog_first_over_pages() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "group-listing");
    for (group, count) in [("one", 1), ("five", 5), ("three", 3)] {
        enqueue_to(&q, group, count).await;
    }
    let mut pages = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, page) = q.groups(&cursor, Some(2)).await.expect("page");
        pages.push(
            page.into_iter()
                .map(|g| (g.group, g.ready))
                .collect::<Vec<_>>(),
        );
        cursor = next;
        if cursor == "0" {
            break;
        }
    }
    let named = |pairs: &[(&str, u64)]| -> Vec<(String, u64)> {
        pairs.iter().map(|(g, n)| (g.to_string(), *n)).collect()
    };
    assert_eq!(
        pages,
        vec![named(&[("five", 5), ("three", 3)]), named(&[("one", 1)])]
    );
    assert_eq!(
        listed(&q).await[0],
        Group {
            group: "five".into(),
            ready: 5,
            ..Group::default()
        }
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_group_at_its_rate_gets_no_more_claims_while_another_goes_on() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "group-rates");
    let minute = |n| Rate {
        n,
        per: Duration::from_secs(60),
    };
    let default = Limit {
        group_rate: Setting::Set(minute(5)),
        ..Limit::default()
    };
    assert_eq!(
        q.limit(default).await.expect("limit").group_rate,
        Some(minute(5))
    );
    let a_own = GroupLimit {
        rate: Setting::Set(minute(2)),
        ..GroupLimit::default()
    };
    let report = q.group_limit("a", a_own).await.expect("a");
    assert_eq!(
        (report.rate, report.group_rate, report.rate_used),
        (Some(minute(2)), Some(minute(5)), 0)
    );
    let a = enqueue_to(&q, "a", 4).await;
    let b = enqueue_to(&q, "b", 3).await;
    let taken = ids(&claim(&q, 100).await);
    let expected = [&a[..2], &b[..]].concat();
    assert_eq!(sorted(taken.clone()), sorted(expected), "{taken:?}");
    assert_eq!(claim(&q, 100).await, vec![]);
    assert_eq!(q.group_limits("a").await.expect("report").rate_used, 2);
    let seen = listed(&q).await;
    let listed_a = seen.iter().find(|g| g.group == "a").expect("a listed");
    assert_eq!((listed_a.rate, listed_a.rate_used), (Some(minute(2)), 2));
    // Without its own rate, a has the default's five claims a window: its last two come.
    let off = GroupLimit {
        rate: Setting::Off,
        ..GroupLimit::default()
    };
    assert_eq!(q.group_limit("a", off).await.expect("off").rate, None);
    assert_eq!(ids(&claim(&q, 100).await), a[2..].to_vec());
    let none = Limit {
        group_rate: Setting::Off,
        ..Limit::default()
    };
    assert_eq!(q.limit(none).await.expect("off").group_rate, None);
}
