//! Clearing a set from the Rust client: `purge` calls `EMQ.PURGE` until the set is empty (a
//! partitioned queue's partitions each), `requeue_dead` moves the oldest dead jobs back.

mod common;

use common::*;
use echomq_client::partition::{name, route};
use echomq_client::{Error, Queue};
use emq_harness::{config_set, flow, Options, Server};

/// `id` claimed and failed by hand (the only job ready in `queue`): its one attempt spent,
/// it is dead.
fn kill(server: &Server, queue: &str, id: &str) {
    let mut c = server.conn();
    let token = flow::claim_one(&mut c, queue, id);
    flow::fail(&mut c, queue, id, token, "broken");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_purge_empties_the_set_a_bounded_call_at_a_time() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "clear");
    q.enqueue_many((0..2500).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    // Three calls of 1,000: the last deletes fewer, and the loop ends.
    assert_eq!(q.purge("pending", None).await.expect("purge"), 2500);
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(0));
    q.enqueue_many((0..7).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    assert_eq!(q.purge("pending", Some(3)).await.expect("purge"), 7);
    assert_eq!(q.purge("pending", Some(3)).await.expect("purge"), 0);
    assert!(matches!(q.purge("active", None).await, Err(Error::Set(_))));
    assert!(matches!(
        q.purge("pending", Some(0)).await,
        Err(Error::Argument(_))
    ));
    assert!(matches!(q.purge("nowhere", None).await, Err(Error::Set(_))));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn requeue_dead_moves_the_oldest_dead_back_and_purge_clears_the_rest() {
    let server = start(Options::default());
    config_set(&mut server.conn(), "emq.max-attempts", "1");
    let q = Queue::new(conn(&server).await, "graveyard");
    let ids = q.enqueue_many(["a", "b", "c"]).await.expect("batch");
    for id in &ids {
        kill(&server, "graveyard", id);
    }
    assert_eq!(q.stats().await.expect("stats")["dead"], Some(3));
    assert_eq!(q.requeue_dead(Some(1)).await.expect("requeue"), 1);
    let first = q.job(&ids[0]).await.expect("job").expect("a row");
    assert_eq!(first["state"], "pending", "the oldest dead first");
    assert_eq!(q.purge("dead", None).await.expect("purge"), 2);
    let stats = q.stats().await.expect("stats");
    assert_eq!((stats["pending"], stats["dead"]), (Some(1), Some(0)));
    assert_eq!(q.requeue_dead(None).await.expect("requeue"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queue_is_purged_and_requeued_in_every_partition() {
    let server = start(Options::default());
    config_set(&mut server.conn(), "emq.max-attempts", "1");
    let q = Queue::new(conn(&server).await, "wide");
    assert!(q.span(3).await.expect("span"));
    q.enqueue_many((0..30).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    let stats = q.partition_stats().await.expect("stats");
    assert!(
        stats.iter().all(|(_, s)| s["pending"].unwrap_or(0) > 0),
        "each partition holds jobs: {stats:?}"
    );
    assert_eq!(q.purge("pending", Some(4)).await.expect("purge"), 30);
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(0));
    // Two dead jobs, wherever their ids routed them.
    let dead = q.enqueue_many(["x", "y"]).await.expect("batch");
    for id in &dead {
        let home = name("wide", route(3, id), 3).expect("a partition");
        kill(&server, &home, id);
    }
    assert_eq!(q.stats().await.expect("stats")["dead"], Some(2));
    assert_eq!(q.requeue_dead(None).await.expect("requeue"), 2);
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(2));
}
