//! Partitioned queues through the client (docs/cluster.md, "A queue bigger than one primary"):
//! a Queue that was not told the width learns it from the server's refusal and routes each job
//! to its partition (by its group, else its id), a stale width is learned again, the refusals
//! are typed errors, limits split over the partitions, and a Worker drains every partition
//! exactly once holding at most one blocked claim per primary, on one server and on a cluster,
//! also when the queue was spanned after the worker started; a flow's grouped parent goes to
//! its group's partition, where its children find it.

mod common;

use emq_harness as support;

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use echomq_client::partition::{name, route};
use echomq_client::slot::slot;
use echomq_client::{
    ChildOutcome, ChildStatus, Children, Enqueue, Error, FlowJob, Flows, Job, Limit, Queue,
    Setting, Worker,
};
use redis::aio::ConnectionLike;
use support::{blocked_clients, cluster::Cluster, info_field, Options};

/// Where a job with this group, else this id, lives in `queue` over `width`.
fn home(queue: &str, width: u16, key: &str) -> String {
    name(queue, route(width, key), width).expect("a partition")
}

/// How many times `command` ran on `con`'s server since the last `CONFIG RESETSTAT`.
fn calls(con: &mut redis::Connection, command: &str) -> u64 {
    let field = format!("cmdstat_{}", command.to_lowercase());
    info_field(con, "commandstats", &field)
        .and_then(|stats| {
            let calls = stats.split(',').find_map(|kv| kv.strip_prefix("calls="))?;
            calls.parse().ok()
        })
        .unwrap_or(0)
}

fn reset_stats(con: &mut redis::Connection) {
    redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .exec(con)
        .expect("CONFIG RESETSTAT");
}

/// The `EMQ.CLAIM`s the node's slow log holds (`slowlog-log-slower-than 0` logs each command
/// with its arguments): each one's `COUNT`, and whether it blocked.
fn claims_logged(con: &mut redis::Connection) -> Vec<(u64, bool)> {
    let entries: Vec<Vec<redis::Value>> = redis::cmd("SLOWLOG")
        .arg("GET")
        .arg(-1)
        .query(con)
        .expect("slowlog");
    entries
        .into_iter()
        .filter_map(|e| {
            let args: Vec<String> =
                redis::FromRedisValue::from_redis_value(e.get(3)?.clone()).ok()?;
            (args.first()?.eq_ignore_ascii_case("EMQ.CLAIM")).then_some(())?;
            let count = args.iter().position(|a| a == "COUNT")?;
            Some((
                args.get(count + 1)?.parse().ok()?,
                args.iter().any(|a| a == "BLOCK"),
            ))
        })
        .collect()
}

/// Polls `done` every 20 ms, up to 30 s; whether it came true.
async fn until(mut done: impl FnMut() -> bool) -> bool {
    for _ in 0..1500 {
        if done() {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    done()
}

/// Enqueues 2·`half` jobs through `q`: `half` one by one (every third in one of 7 groups),
/// `half` in one batch; each job's id and the key it routes by.
async fn produce<C>(q: &Queue<C>, half: usize) -> Vec<(String, String)>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut jobs = Vec::new();
    for n in 0..half {
        let group = (n % 3 == 0).then(|| format!("tenant-{}", n % 7));
        let how = Enqueue {
            group: group.clone(),
            ..Enqueue::default()
        };
        let id = q.enqueue_with(format!("job {n}"), how).await.expect("job");
        jobs.push((id.clone(), group.unwrap_or(id)));
    }
    let ids = q
        .enqueue_many((0..half).map(|n| format!("batch {n}")))
        .await
        .expect("batch");
    jobs.extend(ids.into_iter().map(|id| (id.clone(), id)));
    jobs
}

/// The jobs a worker's handler saw: each id with the queue its handle carried, and the most
/// handlers that ran at once.
#[derive(Clone, Default)]
struct Seen {
    jobs: Arc<Mutex<Vec<(String, String)>>>,
    running: Arc<AtomicUsize>,
    most: Arc<AtomicUsize>,
}

impl Seen {
    fn handler(
        &self,
    ) -> impl Fn(Job) -> std::pin::Pin<Box<dyn Future<Output = echomq_client::Outcome> + Send>>
           + Send
           + Sync
           + 'static {
        let seen = self.clone();
        move |job: Job| {
            let seen = seen.clone();
            Box::pin(async move {
                let now = seen.running.fetch_add(1, Ordering::SeqCst) + 1;
                seen.most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(2)).await;
                seen.running.fetch_sub(1, Ordering::SeqCst);
                seen.jobs.lock().expect("lock").push((job.id, job.queue));
                Ok(None)
            })
        }
    }

    fn count(&self) -> usize {
        self.jobs.lock().expect("lock").len()
    }

    /// Each job handled exactly once, from the partition it routes to.
    fn assert_once_each_from_its_partition(
        &self,
        queue: &str,
        width: u16,
        jobs: &[(String, String)],
    ) {
        let seen = self.jobs.lock().expect("lock").clone();
        assert_eq!(seen.len(), jobs.len(), "no job ran twice, none was left");
        let by_id: HashMap<String, String> = seen.into_iter().collect();
        assert_eq!(by_id.len(), jobs.len(), "each job once");
        for (id, key) in jobs {
            assert_eq!(
                by_id[id],
                home(queue, width, key),
                "{id}'s handle carries its partition"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_one_server_a_queue_learns_the_width_routes_every_job_and_a_worker_drains_each_once() {
    let server = start(Options::default());
    let admin = Queue::new(conn(&server).await, "orders");
    assert!(admin.span(4).await.expect("span"));
    assert!(
        !admin.span(4).await.expect("again"),
        "the same width again changes nothing"
    );
    let q = Queue::new(conn(&server).await, "orders");
    assert_eq!(q.known_width(), None);
    let jobs = produce(&q, 100).await;
    assert_eq!(q.known_width(), Some(4), "learned from the refusal");
    assert_eq!(q.clone().known_width(), Some(4), "shared by its clones");
    let mut con = server.conn();
    for (id, key) in &jobs {
        let row = Queue::new(conn(&server).await, home("orders", 4, key))
            .job(id)
            .await
            .expect("EMQ.JOB")
            .unwrap_or_else(|| panic!("{id} in its partition"));
        assert_eq!(row["state"], "pending");
        if key == id {
            let by_id = q.job(id).await.expect("EMQ.JOB by id");
            assert!(by_id.is_some(), "{id} reached through the queue by its id");
        }
    }
    let own = Queue::new(conn(&server).await, "orders")
        .knowing_width(0)
        .stats()
        .await;
    assert_eq!(
        own.expect("its own stats")["pending"],
        Some(0),
        "the queue's own name holds none"
    );
    // A fresh handle reads the width first: its stats add the partitions up, and a job is
    // found by its id.
    let fresh = Queue::new(conn(&server).await, "orders");
    let (id, _) = jobs
        .iter()
        .find(|(id, key)| id == key)
        .expect("a job by id");
    assert!(fresh.job(id).await.expect("EMQ.JOB").is_some());
    let fresh = Queue::new(conn(&server).await, "orders").stats().await;
    assert_eq!(fresh.expect("stats")["pending"], Some(200));
    let each = q.partition_stats().await.expect("each");
    assert_eq!(each.len(), 4);
    assert!(each.iter().all(|(_, s)| s["pending"] > Some(0)), "{each:?}");
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(200));

    let seen = Seen::default();
    let worker = worker_of(&server, "orders", seen.handler())
        .await
        .concurrency(8);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(
        until(|| seen.count() >= 200).await,
        "{} of 200 handled",
        seen.count()
    );
    // Idle, the worker waits in one claim for the four partitions.
    assert!(until(|| blocked_clients(&mut con) == 1).await);
    for _ in 0..20 {
        assert!(blocked_clients(&mut con) <= 1);
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 200);
    seen.assert_once_each_from_its_partition("orders", 4, &jobs);
    assert!(seen.most.load(Ordering::SeqCst) <= 8);
    for (part, stats) in q.partition_stats().await.expect("each") {
        assert_eq!(
            (stats["pending"], stats["active"]),
            (Some(0), Some(0)),
            "{part}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_partitions_spread_over_every_primary_and_a_worker_blocks_once_on_each() {
    let cluster = Cluster::start(3, 0);
    let admin = Queue::new(cluster_conn(&cluster).await, "spread");
    assert!(admin.span(12).await.expect("span"));
    let owners: HashSet<u16> = (0..12)
        .map(|i| {
            cluster
                .owner(slot(&name("spread", i, 12).expect("name")))
                .port
        })
        .collect();
    assert_eq!(owners.len(), 3, "partitions on every primary");
    let mut primaries: Vec<_> = owners.iter().map(|p| cluster.node(*p).conn()).collect();
    for c in primaries.iter_mut() {
        let _: () = redis::cmd("CONFIG")
            .arg("SET")
            .arg("slowlog-log-slower-than")
            .arg(0)
            .arg("slowlog-max-len")
            .arg(100_000)
            .query(c)
            .expect("config");
    }
    let q = Queue::new(cluster_conn(&cluster).await, "spread");
    let jobs = produce(&q, 150).await;
    assert_eq!(q.known_width(), Some(12));
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(300));

    let seen = Seen::default();
    let worker = Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        "spread",
        seen.handler(),
    )
    .concurrency(6);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(
        until(|| seen.count() >= 300).await,
        "{} of 300 handled",
        seen.count()
    );
    // Each claim held at most its loop's share of the 6 slots (a third: one loop a primary),
    // blocking or not: a primary that stops answering under a claim leaves the others room.
    let claims: Vec<(u64, bool)> = primaries.iter_mut().flat_map(claims_logged).collect();
    assert!(
        claims.iter().any(|(_, blocking)| !blocking),
        "claims that did not block"
    );
    assert!(claims.iter().all(|(count, _)| *count <= 2), "{claims:?}");
    assert!(
        until(|| primaries.iter_mut().all(|c| blocked_clients(c) == 1)).await,
        "idle, one blocked claim on each primary"
    );
    for _ in 0..20 {
        for c in primaries.iter_mut() {
            assert!(
                blocked_clients(c) <= 1,
                "at most one blocked claim a primary"
            );
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 300);
    seen.assert_once_each_from_its_partition("spread", 12, &jobs);
    assert!(
        seen.most.load(Ordering::SeqCst) <= 6,
        "the concurrency holds across the loops"
    );
    assert_eq!(q.stats().await.expect("stats")["pending"], Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_refusals_of_a_partitioned_queue_are_typed_errors_and_a_limit_is_split() {
    let server = start(Options::default());
    let admin = Queue::new(conn(&server).await, "typed");
    admin.span(4).await.expect("span");
    let raw = Queue::new(conn(&server).await, "typed");
    match raw
        .call("EMQ.ENQUEUE", &[b"*".to_vec(), b"x".to_vec()])
        .await
    {
        Err(Error::Spanned { width, message }) => {
            assert_eq!(width, 4);
            assert!(message.starts_with("EMQSPANNED 4 "), "{message}");
        }
        other => panic!("{other:?}"),
    }
    // A handle on a partition is refused a job that routes to another, and does not route it.
    let second = Queue::new(conn(&server).await, name("typed", 1, 4).expect("name"));
    let elsewhere = (0..1000)
        .map(|_| echomq_client::ids::mint())
        .find(|id| route(4, id) != 1)
        .expect("an id");
    let how = Enqueue {
        id: Some(elsewhere),
        ..Enqueue::default()
    };
    match second.enqueue_with(b"x", how).await {
        Err(Error::Spanned { width, .. }) => assert_eq!(width, 4),
        other => panic!("{other:?}"),
    }
    assert_eq!(second.known_width(), None);
    match admin.span(3).await {
        Err(Error::Span(why)) => assert!(why.starts_with("EMQSPAN "), "{why}"),
        other => panic!("{other:?}"),
    }
    let concurrency = |n| Limit {
        concurrency: Setting::Set(n),
        ..Limit::default()
    };
    assert!(matches!(
        admin.limit(concurrency(3)).await,
        Err(Error::Argument(_))
    ));
    assert_eq!(
        admin
            .limit(concurrency(10))
            .await
            .expect("limit")
            .concurrency,
        Some(10)
    );
    let shares: Vec<Option<u32>> = {
        let mut shares = Vec::new();
        for i in 0..4 {
            let part = Queue::new(conn(&server).await, name("typed", i, 4).expect("name"));
            shares.push(part.limits().await.expect("limits").concurrency);
        }
        shares
    };
    assert_eq!(shares, [Some(3), Some(3), Some(2), Some(2)]);
    assert!(admin.pause().await.expect("pause"));
    assert_eq!(admin.stats().await.expect("stats")["paused"], Some(1));
    assert!(admin.resume().await.expect("resume"));
    // A partition that holds a job refuses its unspan.
    raw.enqueue(b"x").await.expect("job");
    match admin.unspan().await {
        Err(Error::Span(why)) => assert!(why.starts_with("EMQSPAN "), "{why}"),
        other => panic!("{other:?}"),
    }
}

/// A Queue that learned width 4 learns 3 once the drained queue is spanned again over 3, from
/// a partition whose name the two widths share: it refuses a job that routes elsewhere over 3
/// with the new width (`EMQSPANNED 3`). A partition of 4 that is none of 3 is retired, and
/// refuses with width 0 (the next test).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_width_is_learned_again_from_the_partition_that_refuses_the_job() {
    let server = start(Options::default());
    // A queue whose first partition has one name over 4 and over 3: it stays a partition,
    // and refuses a job that routes elsewhere over 3.
    let queue = (0..10_000)
        .map(|n| format!("stale-{n}"))
        .find(|q| name(q, 0, 4) == name(q, 0, 3))
        .expect("a queue");
    let group = (0..10_000)
        .map(|g| format!("tenant-{g}"))
        .find(|g| route(4, g) == 0 && route(3, g) != 0)
        .expect("a group");
    let admin = Queue::new(conn(&server).await, queue.as_str());
    admin.span(4).await.expect("span over 4");
    let q = Queue::new(conn(&server).await, queue.as_str());
    assert_eq!(q.width().await.expect("width"), 4);
    // Empty, unspanned and spanned again over 3.
    assert!(admin.unspan().await.expect("unspan"));
    assert!(admin.span(3).await.expect("span over 3"));
    let how = Enqueue {
        group: Some(group.clone()),
        ..Enqueue::default()
    };
    let id = q.enqueue_with(b"x", how).await.expect("routed again");
    assert_eq!(
        q.known_width(),
        Some(3),
        "learned from the partition's refusal"
    );
    // Every ready job, grouped or not, counts in `pending`.
    let pending = |part: String| {
        let c = conn(&server);
        async move {
            let stats = Queue::new(c.await, part).stats().await.expect("stats");
            stats["pending"]
        }
    };
    assert_eq!(pending(home(&queue, 3, &group)).await, Some(1));
    assert_eq!(pending(home(&queue, 4, &group)).await, Some(0));
    let row = Queue::new(conn(&server).await, home(&queue, 3, &group))
        .job(&id)
        .await
        .expect("EMQ.JOB");
    assert_eq!(row.expect("its row")["group"], group);
}

/// After an unspan and a span over 2, a Queue that still holds width 4 sends a job to its
/// partition of 4, retired (no partition of 2 has its name), which refuses it with width 0; the
/// queue's own name answers with width 2, and the job lands in its partition of 2: three sends,
/// two re-routes. A handle on the retired partition's own name is refused at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retired_partition_sends_a_stale_producer_to_the_queue_and_refuses_its_own_handle() {
    let server = start(Options::default());
    let mut con = server.conn();
    let queue = "retiring";
    let of_two: Vec<String> = (0..2).map(|i| name(queue, i, 2).expect("name")).collect();
    let id = (0..10_000)
        .map(|_| echomq_client::ids::mint())
        .find(|id| !of_two.contains(&home(queue, 4, id)))
        .expect("an id whose partition of 4 is none of 2");
    let admin = Queue::new(conn(&server).await, queue);
    admin.span(4).await.expect("span over 4");
    let q = Queue::new(conn(&server).await, queue);
    assert_eq!(q.width().await.expect("width"), 4);
    assert!(admin.unspan().await.expect("unspan"));
    assert!(admin.span(2).await.expect("span over 2"));
    let retired = home(queue, 4, &id);
    assert_eq!(
        Queue::new(conn(&server).await, retired.as_str())
            .width()
            .await
            .expect("width"),
        0
    );

    reset_stats(&mut con);
    let how = Enqueue {
        id: Some(id.clone()),
        ..Enqueue::default()
    };
    assert_eq!(q.enqueue_with(b"x", how).await.expect("routed"), id);
    assert_eq!(calls(&mut con, "EMQ.ENQUEUE"), 3, "two re-routes");
    assert_eq!(q.known_width(), Some(2));
    let row = Queue::new(conn(&server).await, home(queue, 2, &id))
        .job(&id)
        .await
        .expect("EMQ.JOB");
    assert_eq!(row.expect("in its partition of 2")["state"], "pending");

    reset_stats(&mut con);
    let own = Queue::new(conn(&server).await, retired.as_str());
    match own.enqueue(b"y").await {
        Err(Error::Spanned { width, .. }) => assert_eq!(width, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(calls(&mut con, "EMQ.ENQUEUE"), 1, "refused at once");
    match own.enqueue_many([b"y", b"z"]).await {
        Err(Error::Spanned { width, .. }) => assert_eq!(width, 0),
        other => panic!("{other:?}"),
    }
    assert_eq!(calls(&mut con, "EMQ.MENQUEUE"), 1, "refused at once");
    assert_eq!(own.stats().await.expect("stats")["pending"], Some(0));
}

/// `EMQ.WIDTH` of `queue` as (width, of, index).
async fn place_of(server: &support::Server, queue: &str) -> (i64, Option<String>, Option<i64>) {
    let reply: redis::Value = redis::cmd("EMQ.WIDTH")
        .arg(queue)
        .query_async(&mut conn(server).await)
        .await
        .expect("EMQ.WIDTH");
    let fields: Vec<(redis::Value, redis::Value)> = match reply {
        redis::Value::Map(m) => m,
        redis::Value::Array(items) => items
            .chunks(2)
            .map(|kv| (kv[0].clone(), kv[1].clone()))
            .collect(),
        other => panic!("{other:?}"),
    };
    let field = |k: &str| {
        fields
            .iter()
            .find(|(f, _)| redis::from_redis_value_ref::<String>(f).ok().as_deref() == Some(k))
            .map(|(_, v)| v.clone())
            .filter(|v| *v != redis::Value::Nil)
    };
    let int = |k: &str| field(k).and_then(|v| redis::from_redis_value::<i64>(v).ok());
    let of = field("of").and_then(|v| redis::from_redis_value::<String>(v).ok());
    (int("width").expect("width"), of, int("index"))
}

/// An unspan retires the partitions first and the queue last: one that holds a job is refused,
/// and the queue stays partitioned. Once it is drained, the unspan
/// again retires the rest and leaves the partitions it retired before retired (not ordinary
/// queues, which would take a stale producer's jobs), and the queue is ordinary.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unspan_retires_the_partitions_before_the_queue_and_a_retry_after_a_refusal_works() {
    let server = start(Options::default());
    let queue = "unspanning";
    let admin = Queue::new(conn(&server).await, queue);
    admin.span(4).await.expect("span");
    let q = Queue::new(conn(&server).await, queue);
    // A job in the last partition: the three before it are retired before the refusal.
    let id = (0..10_000)
        .map(|_| echomq_client::ids::mint())
        .find(|id| route(4, id) == 3)
        .expect("an id");
    let how = Enqueue {
        id: Some(id.clone()),
        ..Enqueue::default()
    };
    q.enqueue_with(b"x", how).await.expect("job");
    match admin.unspan().await {
        Err(Error::Span(why)) => assert!(why.starts_with("EMQSPAN "), "{why}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        place_of(&server, queue).await,
        (4, None, None),
        "the queue is still partitioned"
    );
    let last = name(queue, 3, 4).expect("name");
    assert_eq!(
        place_of(&server, &last).await,
        (4, Some(queue.to_string()), Some(3))
    );
    assert!(q.cancel(&id).await.expect("cancel"), "drained");
    assert!(admin.unspan().await.expect("unspan again"));
    assert_eq!(place_of(&server, queue).await, (0, None, None));
    for i in 0..4 {
        let part = name(queue, i, 4).expect("name");
        assert_eq!(
            place_of(&server, &part).await,
            (0, Some(queue.to_string()), None),
            "{part} retired, not ordinary"
        );
    }
    assert!(!admin.unspan().await.expect("nothing left to change"));
}

/// A span the queue would refuse (it holds a job, or is spanned over another width) is refused
/// before any partition is marked: no partition is left naming a queue that is not theirs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_span_the_queue_refuses_marks_no_partition() {
    let server = start(Options::default());
    let full = Queue::new(conn(&server).await, "holding");
    full.enqueue(b"x").await.expect("job");
    match full.span(4).await {
        Err(Error::Span(why)) => assert!(why.starts_with("EMQSPAN "), "{why}"),
        other => panic!("{other:?}"),
    }
    for i in 0..4 {
        let part = name("holding", i, 4).expect("name");
        assert_eq!(place_of(&server, &part).await, (0, None, None), "{part}");
    }
    assert_eq!(place_of(&server, "holding").await, (0, None, None));

    let spanned = Queue::new(conn(&server).await, "wide");
    spanned.span(4).await.expect("span over 4");
    let of_four: Vec<String> = (0..4).map(|i| name("wide", i, 4).expect("name")).collect();
    match spanned.span(3).await {
        Err(Error::Span(why)) => assert!(why.starts_with("EMQSPAN "), "{why}"),
        other => panic!("{other:?}"),
    }
    for i in 0..3 {
        let part = name("wide", i, 3).expect("name");
        if !of_four.contains(&part) {
            assert_eq!(place_of(&server, &part).await, (0, None, None), "{part}");
        }
    }
    assert_eq!(place_of(&server, "wide").await, (4, None, None));
    // A partition is no queue to span either.
    match Queue::new(conn(&server).await, of_four[1].as_str())
        .span(2)
        .await
    {
        Err(Error::Span(why)) => assert!(why.starts_with("EMQSPAN "), "{why}"),
        other => panic!("{other:?}"),
    }
    for i in 0..2 {
        let part = name(&of_four[1], i, 2).expect("name");
        assert_eq!(place_of(&server, &part).await, (0, None, None), "{part}");
    }
    // A retired one is, as the server has it.
    assert!(spanned.unspan().await.expect("unspan"));
    let retired = Queue::new(conn(&server).await, of_four[1].as_str());
    assert!(retired.span(2).await.expect("a retired partition spanned"));
    assert!(retired.unspan().await.expect("and unspanned"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_started_before_the_span_claims_from_the_partitions_after_it() {
    let server = start(Options::default());
    let seen = Seen::default();
    let worker = worker_of(&server, "late", seen.handler()).await;
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut con = server.conn();
    assert!(
        until(|| blocked_clients(&mut con) == 1).await,
        "claiming the ordinary queue"
    );
    let q = Queue::new(conn(&server).await, "late");
    q.span(3).await.expect("span");
    let jobs = produce(&q, 15).await;
    assert!(
        until(|| seen.count() >= 30).await,
        "{} of 30 handled",
        seen.count()
    );
    token.cancel();
    assert_eq!(run.await.expect("task").expect("run").acked, 30);
    seen.assert_once_each_from_its_partition("late", 3, &jobs);
}

/// A queue unspanned and spanned again over another width while its worker runs: the worker's
/// claims of its old partitions, retired, are still answered (nothing refuses them), so it is
/// its reading of the width (`WATCH_EVERY`) that has it claim the new partitions, each job once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_claims_the_new_partitions_of_its_queue_spanned_again_over_another_width() {
    let server = start(Options::default());
    let admin = Queue::new(conn(&server).await, "respanned");
    admin.span(4).await.expect("span over 4");
    let seen = Seen::default();
    let worker = worker_of(&server, "respanned", seen.handler()).await;
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut con = server.conn();
    assert!(
        until(|| blocked_clients(&mut con) == 1).await,
        "claiming the four partitions"
    );
    assert!(admin.unspan().await.expect("unspan"));
    assert!(admin.span(3).await.expect("span over 3"));
    let q = Queue::new(conn(&server).await, "respanned");
    let jobs = produce(&q, 15).await;
    assert_eq!(q.known_width(), Some(3));
    assert!(
        until(|| seen.count() >= 30).await,
        "{} of 30 handled",
        seen.count()
    );
    token.cancel();
    assert_eq!(run.await.expect("task").expect("run").acked, 30);
    seen.assert_once_each_from_its_partition("respanned", 3, &jobs);
}

/// The worker follows the move (the cluster client's redirects, then a regroup, on a blocking
/// claim's `MOVED` for a `WAKE` queue now elsewhere or once the worker reads the slots again,
/// `WATCH_EVERY`): every job is still handled once. (Until the
/// regroup, a loop's blocked claim may sit on the primary the slot moved to beside that
/// primary's own, so the blocked claims are not counted here.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_drains_every_partition_once_after_one_s_slot_moved_under_its_blocked_claims() {
    let cluster = Cluster::start(3, 0);
    let admin = Queue::new(cluster_conn(&cluster).await, "moving");
    admin.span(6).await.expect("span");
    let seen = Seen::default();
    let worker = Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        "moving",
        seen.handler(),
    );
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let ports: Vec<u16> = cluster
        .topology()
        .iter()
        .filter(|n| n.primary)
        .map(|n| n.port)
        .collect();
    let mut primaries: Vec<_> = ports.iter().map(|p| cluster.node(*p).conn()).collect();
    assert!(until(|| primaries.iter_mut().all(|c| blocked_clients(c) == 1)).await);
    // The first partition's slot moves to another primary, under the blocked claims.
    let moved = slot(&name("moving", 0, 6).expect("name"));
    let from = cluster.owner(moved);
    let to = cluster.another_primary(&from);
    cluster.move_slot(moved, &from, &to, || {});
    let q = Queue::new(cluster_conn(&cluster).await, "moving");
    let jobs = produce(&q, 30).await;
    assert!(
        until(|| seen.count() >= 60).await,
        "{} of 60 handled",
        seen.count()
    );
    token.cancel();
    assert_eq!(run.await.expect("task").expect("run").acked, 60);
    seen.assert_once_each_from_its_partition("moving", 6, &jobs);
}

/// On a cluster, a flow whose parent is grouped, in a partitioned queue: the parent goes to the
/// partition its group routes to (not its id's), its four children (in another partitioned
/// queue, half of them grouped, in a partition on another primary) are adopted there, naming
/// that partition, and the parent runs once, from there, after all of them. A node with a
/// group the server would refuse is refused before anything is sent.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_flow_s_grouped_parent_is_in_its_group_s_partition_and_runs_after_its_children(
) {
    let cluster = Cluster::start(3, 0);
    for (queue, width) in [("invoices", 6), ("lines", 4)] {
        let admin = Queue::new(cluster_conn(&cluster).await, queue);
        assert!(admin.span(width).await.expect("span"));
    }
    let flows = Flows::new(cluster_conn(&cluster).await);
    let invoices = Queue::new(cluster_conn(&cluster).await, "invoices");
    let lines = Queue::new(cluster_conn(&cluster).await, "lines");

    // The bad group on the last node: the root and the first child would go first.
    let mut bad = FlowJob::new("invoices", b"bad")
        .child(FlowJob::new("lines", b"a"))
        .child(FlowJob::new("lines", b"b").group("a{b}"));
    let refused = flows.flow(&mut bad).await;
    assert!(matches!(refused, Err(Error::Argument(_))), "{refused:?}");
    assert_eq!(bad.id, None, "refused before its ids were minted");
    for q in [&invoices, &lines] {
        let stats = q.stats().await.expect("stats");
        assert_eq!((stats["pending"], stats["waiting"]), (Some(0), Some(0)));
    }

    let group = "acme";
    let parent_home = home("invoices", 6, group);
    // Found by its group only: its id routes elsewhere.
    let id = (0..1000)
        .map(|_| echomq_client::ids::mint())
        .find(|id| route(6, id) != route(6, group))
        .expect("an id that routes elsewhere than the group");
    let owner = |queue: &str| cluster.owner(slot(queue)).port;
    let line_group = (0..100)
        .map(|n| format!("lines-{n}"))
        .find(|g| owner(&home("lines", 4, g)) != owner(&parent_home))
        .expect("a group of lines on another primary than the parent");
    let mut tree = FlowJob::new("invoices", b"invoice")
        .id(id.clone())
        .group(group);
    for n in 0..4 {
        let line = FlowJob::new("lines", format!("line {n}"));
        tree = tree.child(match n % 2 {
            0 => line.group(line_group.clone()),
            _ => line,
        });
    }
    assert_eq!(flows.flow(&mut tree).await.expect("flow"), id);

    let at = |queue: String| async { Queue::new(cluster_conn(&cluster).await, queue) };
    let row = at(parent_home.clone())
        .await
        .job(&id)
        .await
        .expect("job")
        .expect("the parent in its group's partition");
    let fields: Vec<_> = ["state", "group", "children", "adopted"]
        .iter()
        .map(|f| row.get(*f).map(String::as_str))
        .collect();
    assert_eq!(
        fields,
        [Some("waiting"), Some(group), Some("4"), Some("4")],
        "{row:?}"
    );
    let id_home = at(home("invoices", 6, &id)).await;
    assert_eq!(
        id_home.job(&id).await.expect("job"),
        None,
        "not at its id's"
    );
    let mut expected: Children = Children::new();
    for child in &tree.children {
        let child_id = child.id.clone().expect("minted");
        let child_home = home("lines", 4, child.group.as_deref().unwrap_or(&child_id));
        let row = at(child_home.clone())
            .await
            .job(&child_id)
            .await
            .expect("job")
            .expect("the child in its partition");
        assert_eq!(row.get("state").map(String::as_str), Some("pending"));
        let parents = row.get("parents").cloned().unwrap_or_default();
        assert!(
            parents.starts_with(&format!("{parent_home} {id}")),
            "naming its parent's partition: {parents}"
        );
        let result = [&b"done "[..], &child.payload].concat();
        expected.insert(
            (child_home, child_id),
            ChildOutcome {
                status: ChildStatus::Acked,
                data: result,
            },
        );
    }

    let ran: Arc<Mutex<Vec<(String, String, Children)>>> = Arc::default();
    let seen = ran.clone();
    let parents = Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        "invoices",
        move |job: Job| {
            let seen = seen.clone();
            async move {
                let children = job.children().await?;
                seen.lock()
                    .expect("lock")
                    .push((job.queue.clone(), job.id.clone(), children));
                Ok(None)
            }
        },
    );
    let children = Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        "lines",
        |job: Job| async move { Ok(Some([&b"done "[..], &job.payload].concat())) },
    );
    let (parents_stop, children_stop) = (parents.shutdown_token(), children.shutdown_token());
    let (parents_run, children_run) = (tokio::spawn(parents.run()), tokio::spawn(children.run()));
    assert!(
        until(|| !ran.lock().expect("lock").is_empty()).await,
        "the parent ran"
    );
    children_stop.cancel();
    parents_stop.cancel();
    assert_eq!(children_run.await.expect("task").expect("run").acked, 4);
    assert_eq!(parents_run.await.expect("task").expect("run").acked, 1);
    let ran = ran.lock().expect("lock").clone();
    assert_eq!(ran.len(), 1, "the parent ran once");
    let (queue, ran_id, children) = &ran[0];
    assert_eq!(
        (queue, ran_id),
        (&parent_home, &id),
        "from its group's partition"
    );
    assert_eq!(children, &expected, "after its four children were acked");
    for q in [&invoices, &lines] {
        let stats = q.stats().await.expect("stats");
        let counts: Vec<_> = ["pending", "active", "waiting", "dead"]
            .iter()
            .map(|s| stats[*s])
            .collect();
        assert_eq!(counts, [Some(0); 4], "the flow completed");
    }
}
