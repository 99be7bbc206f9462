//! Where and when a job lands, from the Rust client: a due time (`at`), a flow's jobs with a
//! priority, a delay or a due time of their own, a queue's own count of retries, and the typed
//! refusals the catalogue names.

mod common;

use emq_harness as support;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use common::*;
use echomq_client::{BulkJob, Enqueue, Error, FlowJob, Flows, Queue};
use support::Options;

fn unix_ms(at: SystemTime) -> i64 {
    at.duration_since(UNIX_EPOCH)
        .expect("after 1970")
        .as_millis() as i64
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_due_at_a_time_is_scheduled_for_that_time_or_ready_when_past() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "timed");
    let at = SystemTime::now() + Duration::from_secs(3600);
    let later = Enqueue {
        at: Some(at),
        ..Enqueue::default()
    };
    let id = q.enqueue_with(b"later", later).await.expect("enqueue");
    let row = q.job(&id).await.expect("job").expect("a row");
    assert_eq!(row["set"], "scheduled");
    assert_eq!(row["due"], unix_ms(at).to_string());
    let past = Enqueue {
        at: Some(UNIX_EPOCH + Duration::from_secs(1_000_000_000)),
        ..Enqueue::default()
    };
    let now = q.enqueue_with(b"now", past).await.expect("enqueue");
    assert_eq!(
        q.job(&now).await.expect("job").expect("a row")["set"],
        "pending"
    );
    let both = Enqueue {
        at: Some(at),
        delay: Some(Duration::from_secs(5)),
        ..Enqueue::default()
    };
    assert!(matches!(
        q.enqueue_with(b"both", both).await,
        Err(Error::Argument(_))
    ));
    let stats = q.stats().await.expect("stats");
    assert_eq!((stats["scheduled"], stats["pending"]), (Some(1), Some(1)));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flows_jobs_carry_their_priority_delay_and_due_time() {
    let server = start(Options::default());
    let flows = Flows::new(conn(&server).await);
    let at = SystemTime::now() + Duration::from_secs(7200);
    let mut tree = FlowJob::new("reports", "album")
        .priority(-3)
        .child(FlowJob::new("images", "now").priority(7))
        .child(FlowJob::new("images", "soon").delay(Duration::from_secs(600)))
        .child(FlowJob::new("images", "later").at(at));
    let root = flows.flow(&mut tree).await.expect("flow");
    let images = Queue::new(conn(&server).await, "images");
    let row = |id: &Option<String>| {
        let images = images.clone();
        let id = id.clone().expect("minted");
        async move { images.job(&id).await.expect("job").expect("a row") }
    };
    let now = row(&tree.children[0].id).await;
    assert_eq!(
        (now["set"].as_str(), now["priority"].as_str()),
        ("pending", "7")
    );
    assert_eq!(row(&tree.children[1].id).await["set"], "scheduled");
    let later = row(&tree.children[2].id).await;
    assert_eq!(later["set"], "scheduled");
    assert_eq!(later["due"], unix_ms(at).to_string());
    let reports = Queue::new(conn(&server).await, "reports");
    let parent = reports.job(&root).await.expect("job").expect("a row");
    assert_eq!(
        (parent["set"].as_str(), parent["priority"].as_str()),
        ("waiting", "-3")
    );
    // Refused before anything is sent: a job with both a delay and a time.
    let mut bad = FlowJob::new("reports", "bad").child(
        FlowJob::new("images", "both")
            .delay(Duration::from_secs(1))
            .at(at),
    );
    assert!(matches!(
        flows.flow(&mut bad).await,
        Err(Error::Argument(_))
    ));
    assert!(bad.id.is_none(), "nothing minted, nothing sent");
    // And a priority, a delay or a time the server would refuse.
    for child in [
        FlowJob::new("images", "p").priority(2_000_000),
        FlowJob::new("images", "d").delay(Duration::from_secs(366 * 86_400)),
        FlowJob::new("images", "a").at(UNIX_EPOCH + Duration::from_millis(1 << 53)),
    ] {
        let mut bad = FlowJob::new("reports", "bad").child(child);
        assert!(matches!(
            flows.flow(&mut bad).await,
            Err(Error::Argument(_))
        ));
    }
    assert_eq!(reports.stats().await.expect("stats")["waiting"], Some(1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batchs_jobs_carry_their_own_ids_priorities_and_headers() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "bulk");
    let given = echomq_client::ids::mint();
    let jobs = vec![
        BulkJob {
            id: Some(given.clone()),
            priority: Some(-5),
            ..BulkJob::new("urgent")
        },
        BulkJob::new("plain"),
        BulkJob {
            headers: vec![("k".into(), "v".into())],
            ..BulkJob::new("tagged")
        },
    ];
    let ids = q.enqueue_bulk(jobs).await.expect("bulk");
    assert_eq!(ids.len(), 3);
    assert_eq!(ids[0], given);
    let urgent = q.job(&ids[0]).await.expect("job").expect("a row");
    assert_eq!(urgent["priority"], "-5");
    let tagged = q.job(&ids[2]).await.expect("job").expect("a row");
    assert_eq!(tagged["headers"], "k:v");
    let claimed: redis::Value = redis::cmd("EMQ.CLAIM")
        .arg("bulk")
        .query_async(&mut conn(&server).await)
        .await
        .expect("claim");
    assert!(
        format!("{claimed:?}").contains(&given),
        "its priority first: {claimed:?}"
    );
    // Sent again with its id: written once.
    let again = BulkJob {
        id: Some(given.clone()),
        ..BulkJob::new("urgent")
    };
    assert_eq!(q.enqueue_bulk([again]).await.expect("bulk"), vec![given]);
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(2));
}

/// The times the replica refused `EMQ.ENQUEUE` (`READONLY`), from its `commandstats`.
fn rejected(server: &support::Server) -> i64 {
    support::info_field(&mut server.conn(), "commandstats", "cmdstat_emq.enqueue")
        .and_then(|l| {
            l.split(',')
                .find_map(|f| f.strip_prefix("rejected_calls=")?.parse().ok())
        })
        .unwrap_or(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_queue_tries_a_call_again_as_often_as_it_is_told() {
    let (_primary, replica) = support::primary_and_replica(Options::default());
    // A replica refuses a write with READONLY, a failure a failover makes: tried again.
    let once = Queue::new(conn(&replica).await, "ro").retries(0);
    assert!(once.enqueue(b"x").await.is_err());
    assert_eq!(rejected(&replica), 1, "sent once");
    let thrice = Queue::new(conn(&replica).await, "ro").retries(2);
    assert!(thrice.enqueue(b"x").await.is_err());
    assert_eq!(rejected(&replica), 4, "sent three times more");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_walk_from_a_cursor_no_reply_gave_is_a_typed_refusal() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "walked");
    q.enqueue(b"one").await.expect("enqueue");
    match q.jobs("pending", "not-a-cursor", None, false).await {
        Err(Error::Cursor(why)) => assert!(why.starts_with("EMQCURSOR"), "{why}"),
        other => panic!("{other:?}"),
    }
}
