//! Cancelling a flow's parent through the Rust client against real servers: on one server the
//! module takes the whole unstarted tree and the client counts it; on a cluster the client
//! cancels the unstarted children in other slots (and theirs) that the module cannot reach,
//! and leaves a started one to run.

mod common;

use emq_harness as support;

use common::*;
use echomq_client::{FlowJob, Flows, Queue};
use redis::aio::ConnectionLike;
use support::cluster::Cluster;
use support::cluster_load::queue_elsewhere;
use support::Options;

/// Whether `id` of `queue` is gone (its row with it).
async fn gone<C>(conn: &C, queue: &str, id: &Option<String>) -> bool
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let id = id.as_deref().expect("a minted id");
    let q = Queue::new(conn.clone(), queue);
    q.job(id).await.expect("EMQ.JOB").is_none()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_parent_takes_its_unstarted_tree_and_counts_it() {
    let server = start(Options::default());
    let c = conn(&server).await;
    let mut tree = FlowJob::new("albums", b"publish")
        .child(FlowJob::new("thumbs", b"t1"))
        .child(FlowJob::new("thumbs", b"t2").child(FlowJob::new("crops", b"c1")));
    let root = Flows::new(c.clone()).flow(&mut tree).await.expect("flow");
    let albums = Queue::new(c.clone(), "albums");
    assert_eq!(albums.cancel_flow(&root).await.expect("cancel"), 4);
    let (t1, t2) = (&tree.children[0], &tree.children[1]);
    assert!(gone(&c, "albums", &tree.id).await);
    assert!(gone(&c, "thumbs", &t1.id).await);
    assert!(gone(&c, "thumbs", &t2.id).await);
    assert!(gone(&c, "crops", &t2.children[0].id).await);
    assert_eq!(albums.cancel_flow(&root).await.expect("cancel"), 0);
    let lone = albums.enqueue(b"lone").await.expect("enqueue");
    assert!(albums.cancel(&lone).await.expect("cancel"));
    assert!(!albums.cancel(&lone).await.expect("cancel"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_cancelled_parent_takes_its_unstarted_children_in_other_slots() {
    let cluster = Cluster::start(3, 0);
    let c = cluster_conn(&cluster).await;
    let reports = "reports";
    let left = queue_elsewhere(&cluster, "cut-left", &[reports]);
    let right = queue_elsewhere(&cluster, "cut-right", &[reports, &left]);
    let started = queue_elsewhere(&cluster, "cut-started", &[reports]);
    // A child in another slot; a child in the parent's own queue (in reach) that is the parent
    // of one in a third slot; and a child in another slot that has started.
    let mut tree = FlowJob::new(reports, b"sum")
        .child(FlowJob::new(left.clone(), b"a"))
        .child(FlowJob::new(reports, b"b").child(FlowJob::new(right.clone(), b"c")))
        .child(FlowJob::new(started.clone(), b"d"));
    let root = Flows::new(c.clone()).flow(&mut tree).await.expect("flow");
    let (a, b, d) = (&tree.children[0], &tree.children[1], &tree.children[2]);
    let claimed = Queue::new(c.clone(), started.clone())
        .call(
            "EMQ.CLAIM",
            &[
                b"COUNT".to_vec(),
                b"1".to_vec(),
                b"LEASE".to_vec(),
                b"60000".to_vec(),
            ],
        )
        .await
        .expect("claim");
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::from_redis_value(claimed).expect("jobs");
    let ids: Vec<Option<String>> = claimed.into_iter().map(|j| Some(j.0)).collect();
    assert_eq!(ids, vec![d.id.clone()], "the started child claimed");
    let n = Queue::new(c.clone(), reports)
        .cancel_flow(&root)
        .await
        .expect("cancel");
    assert_eq!(n, 4, "the parent, a, b (by the module) and c");
    assert!(gone(&c, &left, &a.id).await, "a child in another slot");
    assert!(gone(&c, reports, &b.id).await, "a child in reach");
    assert!(
        gone(&c, &right, &b.children[0].id).await,
        "its child in a third slot"
    );
    let row = Queue::new(c.clone(), started.clone())
        .job(d.id.as_deref().expect("an id"))
        .await
        .expect("EMQ.JOB")
        .expect("a row");
    assert_eq!(row["state"], "active", "a started child runs on");
}
