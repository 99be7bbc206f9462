//! A queue's event stream read from the Rust client: turned on and off, read from its start or
//! from its newest entry, each read on from the last entry returned.

mod common;

use std::time::Duration;

use common::*;
use echomq_client::partition::name;
use echomq_client::{Error, Queue};
use emq_harness::{flow, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_event_stream_is_read_on_from_the_last_entry() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "ev");
    assert!(q.enable_events(Some(1000)).await.expect("on"));
    assert!(!q.enable_events(Some(1000)).await.expect("on again"));
    let id = q.enqueue(b"x").await.expect("enqueue");
    let mut c = server.conn();
    let token = flow::claim_one(&mut c, "ev", &id);
    flow::ack(&mut c, "ev", &id, token, "done");
    let mut all = q.events("0").await.expect("reader");
    let seen = all.next(Duration::from_millis(50)).await.expect("read");
    let got: Vec<(&str, Option<&str>, Option<i64>)> = seen
        .iter()
        .map(|e| (e.event.as_str(), e.id.as_deref(), e.attempt))
        .collect();
    assert_eq!(
        got,
        [
            ("enqueued", Some(id.as_str()), Some(0)),
            ("claimed", Some(id.as_str()), Some(1)),
            ("acked", Some(id.as_str()), Some(1)),
        ]
    );
    assert!(
        all.next(Duration::from_millis(20))
            .await
            .expect("read")
            .is_empty(),
        "read on"
    );
    // From "$": the newest entry now; a read that waited for nothing, then what came after.
    let mut from_now = q.events("$").await.expect("reader");
    assert!(from_now
        .next(Duration::from_millis(20))
        .await
        .expect("read")
        .is_empty());
    let second = q.enqueue(b"y").await.expect("enqueue");
    let next = from_now.next(Duration::from_secs(5)).await.expect("read");
    let got: Vec<(&str, Option<&str>)> = next
        .iter()
        .map(|e| (e.event.as_str(), e.id.as_deref()))
        .collect();
    assert_eq!(got, [("enqueued", Some(second.as_str()))]);
    assert!(q.disable_events().await.expect("off"));
    assert!(!q.disable_events().await.expect("off again"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_partitioned_queues_events_are_its_partitions() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "wide-ev");
    assert!(q.span(3).await.expect("span"));
    assert!(q.enable_events(None).await.expect("on"));
    for n in 0..3 {
        let part = name("wide-ev", n, 3).expect("a partition");
        let again: i64 = redis::cmd("EMQ.EVENTS")
            .arg(&part)
            .arg("ON")
            .query(&mut server.conn())
            .expect("on");
        assert_eq!(again, 0, "{part}'s stream is on");
    }
    assert!(matches!(q.events("$").await, Err(Error::Argument(_))));
    assert!(q.disable_events().await.expect("off"));
}
