//! Flows through the Rust client against real servers: a parent waits for its children and
//! reads their outcomes; a child's death kills its parent (`ON-FAIL FAIL`) or just counts
//! (`IGNORE`); a batch's callback runs once; a chain runs in order; a retried flow counts each
//! child once; refusals are typed; on a cluster, a parent on another primary than its
//! children hears of them through the worker's outbox sweep, which reports each hand-over and
//! removal, and with `wait_replicas` removes an entry only once the parent's replicas have it.

mod common;

use emq_harness as support;

use std::future::Future;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::*;
use echomq_client::partition::{name, route};
use echomq_client::slot::slot;
use echomq_client::{
    ChildOutcome, ChildStatus, Children, Counts, Enqueue, Error, EventKind, EventOutcome, FlowJob,
    Flows, Job, OnFail, Outcome, Parent, Queue, Worker, WorkerEvent,
};
use redis::aio::ConnectionLike;
use support::{cluster::Cluster, Options};
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;

/// Generous: a condition waited on, never a duration asserted.
const PATIENCE: Duration = Duration::from_secs(30);

/// Polls `f` until it holds or `PATIENCE` runs out; whether it held.
async fn until<F, Fut>(mut f: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while tokio::time::Instant::now() < deadline {
        if f().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    false
}

/// A field of a job's row, through `EMQ.JOB`.
async fn field<C>(q: &Queue<C>, id: &str, name: &str) -> Option<String>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    q.job(id).await.expect("EMQ.JOB")?.get(name).cloned()
}

async fn state<C>(q: &Queue<C>, id: &str) -> Option<String>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    field(q, id, "state").await
}

/// A running worker: its stop token and its task.
struct Running(CancellationToken, JoinHandle<echomq_client::Result<Counts>>);

fn run<C, H, F>(worker: Worker<C, H>) -> Running
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
    H: Fn(Job) -> F + Send + Sync + 'static,
    F: Future<Output = Outcome> + Send + 'static,
{
    Running(worker.shutdown_token(), tokio::spawn(worker.run()))
}

impl Running {
    async fn stop(self) -> Counts {
        self.0.cancel();
        self.1.await.expect("task").expect("run")
    }
}

/// A child's handler: `fail` fails it (its error `no rows for <payload>`), any other payload
/// is acked with the result `rows of <payload>`.
async fn fetch(job: Job) -> Outcome {
    let payload = String::from_utf8_lossy(&job.payload).into_owned();
    if payload.starts_with("fail") {
        return Err(echomq_client::Failure::Error(format!(
            "no rows for {payload}"
        )));
    }
    Ok(Some(format!("rows of {payload}").into_bytes()))
}

/// A parent's handler that records the children it read, each run.
fn reader(
    seen: &Arc<Mutex<Vec<Children>>>,
) -> impl Fn(Job) -> std::pin::Pin<Box<dyn Future<Output = Outcome> + Send>> + Send + Sync + 'static
{
    let seen = seen.clone();
    move |job: Job| {
        let seen = seen.clone();
        Box::pin(async move {
            let children = job.children().await?;
            seen.lock().expect("lock").push(children);
            Ok(None)
        })
    }
}

fn key(queue: &str, id: &Option<String>) -> (String, String) {
    (queue.to_string(), id.clone().expect("a minted id"))
}

fn acked(result: &str) -> ChildOutcome {
    ChildOutcome {
        status: ChildStatus::Acked,
        data: result.as_bytes().to_vec(),
    }
}

/// Jobs die at their first failure: a child's death is seen at once.
fn one_attempt() -> Options {
    Options::default().arg("emq.max-attempts", "1")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_waits_for_its_children_then_runs_and_sees_their_results() {
    let server = start(Options::default());
    let flows = Flows::new(conn(&server).await);
    let mut tree = FlowJob::new("reports", b"monthly")
        .child(FlowJob::new("fetch", b"eu"))
        .child(FlowJob::new("fetch", b"us"));
    let root = flows.flow(&mut tree).await.expect("flow");
    let reports = Queue::new(conn(&server).await, "reports");
    assert_eq!(state(&reports, &root).await.as_deref(), Some("waiting"));
    let stats = reports.stats().await.expect("stats");
    assert_eq!((stats["waiting"], stats["pending"]), (Some(1), Some(0)));
    // The parent's worker runs first: it finds nothing to claim while its children wait.
    let seen = Arc::new(Mutex::new(Vec::new()));
    let parents = run(worker_of(&server, "reports", reader(&seen)).await);
    let children = run(worker_of(&server, "fetch", fetch).await);
    assert!(until(|| async { state(&reports, &root).await.as_deref() == Some("done") }).await);
    let (p, c) = (parents.stop().await, children.stop().await);
    assert_eq!((p.acked, c.acked), (1, 2));
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "the parent ran once");
    let expected: Children = [
        (key("fetch", &tree.children[0].id), acked("rows of eu")),
        (key("fetch", &tree.children[1].id), acked("rows of us")),
    ]
    .into_iter()
    .collect();
    assert_eq!(seen[0], expected, "the parent ran after both were acked");
    assert_eq!(reports.children(&root).await.expect("children"), expected);
    assert_eq!(reports.stats().await.expect("stats")["waiting"], Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_child_kills_its_parent_with_its_name_in_the_error() {
    let server = start(one_attempt());
    let flows = Flows::new(conn(&server).await);
    let mut tree = FlowJob::new("invoices", b"march")
        .child(FlowJob::new("charge", b"fail card 4242"))
        .child(FlowJob::new("charge", b"card 1881"));
    let root = flows.flow(&mut tree).await.expect("flow");
    let failed = tree.children[0].id.clone().expect("minted");
    let invoices = Queue::new(conn(&server).await, "invoices");
    let runs = Arc::new(AtomicUsize::new(0));
    let r = runs.clone();
    let parents = run(worker_of(&server, "invoices", move |_job: Job| {
        r.fetch_add(1, Ordering::SeqCst);
        async { Ok(None) }
    })
    .await);
    let children = run(worker_of(&server, "charge", fetch).await);
    assert!(until(|| async { state(&invoices, &root).await.as_deref() == Some("dead") }).await);
    children.stop().await;
    parents.stop().await;
    let error = field(&invoices, &root, "error").await.expect("an error");
    assert!(
        error.contains(&format!("child charge {failed} dead"))
            && error.contains("no rows for fail card 4242"),
        "{error}"
    );
    assert_eq!(runs.load(Ordering::SeqCst), 0, "a dead parent never runs");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_child_with_on_fail_ignore_just_counts() {
    let server = start(one_attempt());
    let reports = Queue::new(conn(&server).await, "reports");
    let fetches = Queue::new(conn(&server).await, "fetch");
    let parent = reports
        .enqueue_with(
            b"summary",
            Enqueue {
                children: Some(2),
                ..Enqueue::default()
            },
        )
        .await
        .expect("parent");
    let child = |payload: &'static str| {
        let how = Enqueue {
            parents: vec![Parent::new("reports", parent.clone()).on_fail(OnFail::Ignore)],
            ..Enqueue::default()
        };
        let fetches = fetches.clone();
        async move { fetches.enqueue_with(payload, how).await.expect("child") }
    };
    let (good, bad) = (child("eu").await, child("fail us").await);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let parents = run(worker_of(&server, "reports", reader(&seen)).await);
    let children = run(worker_of(&server, "fetch", fetch).await);
    assert!(until(|| async { state(&reports, &parent).await.as_deref() == Some("done") }).await);
    children.stop().await;
    assert_eq!(parents.stop().await.acked, 1);
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0][&key("fetch", &Some(good))], acked("rows of eu"));
    let dead = &seen[0][&key("fetch", &Some(bad))];
    assert_eq!(dead.status, ChildStatus::Dead);
    assert!(String::from_utf8_lossy(&dead.data).contains("no rows for fail us"));
    assert_eq!(
        field(&reports, &parent, "finished").await.as_deref(),
        Some("2")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_callback_runs_once_with_the_counts_of_its_jobs() {
    let server = start(one_attempt());
    let flows = Flows::new(conn(&server).await);
    let mut jobs: Vec<FlowJob> = ["a", "fail b", "c", "fail d", "e"]
        .iter()
        .map(|p| FlowJob::new("fetch", p))
        .collect();
    let mut done = FlowJob::new("batches", b"nightly");
    let callback = flows.batch(&mut jobs, &mut done).await.expect("batch");
    assert_eq!(done.id.as_deref(), Some(callback.as_str()));
    let counts = Arc::new(Mutex::new(Vec::new()));
    let c = counts.clone();
    let callbacks = run(worker_of(&server, "batches", move |job: Job| {
        let c = c.clone();
        async move {
            let children = job.children().await?;
            let of = |s| children.values().filter(|o| o.status == s).count();
            c.lock()
                .expect("lock")
                .push((of(ChildStatus::Acked), of(ChildStatus::Dead)));
            Ok(None)
        }
    })
    .await);
    let batch = run(worker_of(&server, "fetch", fetch).await);
    let q = Queue::new(conn(&server).await, "batches");
    assert!(until(|| async { state(&q, &callback).await.as_deref() == Some("done") }).await);
    assert_eq!(batch.stop().await.failed, 2);
    assert_eq!(callbacks.stop().await.acked, 1);
    assert_eq!(
        *counts.lock().expect("lock"),
        [(3, 2)],
        "one run, 3 acked, 2 dead"
    );
    let read = q.children(&callback).await.expect("children");
    for job in &jobs {
        assert!(read.contains_key(&key("fetch", &job.id)), "{job:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chain_runs_its_jobs_in_order() {
    let server = start(Options::default());
    let flows = Flows::new(conn(&server).await);
    let mut steps: Vec<FlowJob> = ["extract", "transform", "load"]
        .iter()
        .map(|p| FlowJob::new("etl", p))
        .collect();
    let ids = flows.chain(&mut steps).await.expect("chain");
    let minted: Vec<String> = steps.iter().filter_map(|s| s.id.clone()).collect();
    assert_eq!(ids, minted);
    let q = Queue::new(conn(&server).await, "etl");
    let stats = q.stats().await.expect("stats");
    assert_eq!((stats["pending"], stats["waiting"]), (Some(1), Some(2)));
    let order = Arc::new(Mutex::new(Vec::new()));
    let o = order.clone();
    let worker = run(worker_of(&server, "etl", move |job: Job| {
        o.lock()
            .expect("lock")
            .push(String::from_utf8_lossy(&job.payload).into_owned());
        async { Ok(None) }
    })
    .await
    .concurrency(4));
    assert!(until(|| async { state(&q, &ids[2]).await.as_deref() == Some("done") }).await);
    assert_eq!(worker.stop().await.acked, 3);
    assert_eq!(
        *order.lock().expect("lock"),
        ["extract", "transform", "load"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_flow_with_the_same_ids_counts_each_child_once() {
    let server = start(Options::default());
    let flows = Flows::new(conn(&server).await);
    // `reports` and `fetch` have different slots: each child is adopted first, on every try.
    assert_ne!(slot("reports"), slot("fetch"));
    let mut tree = FlowJob::new("reports", b"weekly")
        .child(FlowJob::new("fetch", b"eu"))
        .child(FlowJob::new("fetch", b"us"));
    let root = tree.mint_ids();
    // A first try that got as far as the root and its first child.
    let reports = Queue::new(conn(&server).await, "reports");
    let fetches = Queue::new(conn(&server).await, "fetch");
    let as_parent = Enqueue {
        id: Some(root.clone()),
        children: Some(2),
        ..Enqueue::default()
    };
    reports
        .enqueue_with(b"weekly", as_parent)
        .await
        .expect("root");
    let first = tree.children[0].id.clone();
    let as_child = Enqueue {
        id: first.clone(),
        parents: vec![Parent::new("reports", root.clone())],
        ..Enqueue::default()
    };
    fetches
        .enqueue_with(b"eu", as_child.clone())
        .await
        .expect("child");
    // The retries: the whole flow twice, then the first leaf alone.
    assert_eq!(flows.flow(&mut tree).await.expect("retry"), root);
    assert_eq!(flows.flow(&mut tree).await.expect("again"), root);
    let leaf = fetches.enqueue_with(b"eu", as_child).await.expect("leaf");
    assert_eq!(Some(leaf), first);
    assert_eq!(
        field(&reports, &root, "adopted").await.as_deref(),
        Some("2")
    );
    assert_eq!(fetches.stats().await.expect("stats")["pending"], Some(2));
    let seen = Arc::new(Mutex::new(Vec::new()));
    let parents = run(worker_of(&server, "reports", reader(&seen)).await);
    let children = run(worker_of(&server, "fetch", fetch).await);
    assert!(until(|| async { state(&reports, &root).await.as_deref() == Some("done") }).await);
    assert_eq!(children.stop().await.acked, 2);
    assert_eq!(parents.stop().await.acked, 1);
    assert_eq!(
        field(&reports, &root, "finished").await.as_deref(),
        Some("2")
    );
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1);
    assert_eq!(seen[0].len(), 2);
    // A retry after the parent ran (it waits for no one now): the same flow, nothing new.
    assert_eq!(flows.flow(&mut tree).await.expect("late retry"), root);
    assert_eq!(
        field(&reports, &root, "adopted").await.as_deref(),
        Some("2")
    );
    assert_eq!(fetches.stats().await.expect("stats")["pending"], Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_that_refuses_a_child_is_a_typed_error() {
    let server = start(Options::default());
    let reports = Queue::new(conn(&server).await, "reports");
    let fetches = Queue::new(conn(&server).await, "fetch");
    let child_of = |queue: &str, id: &str| Enqueue {
        parents: vec![Parent::new(queue, id)],
        ..Enqueue::default()
    };
    let nobody = echomq_client::ids::mint();
    // No such parent: in reach (the same queue: the enqueue checks), and on another slot (the
    // adoption checks).
    let same = fetches.enqueue_with(b"x", child_of("fetch", &nobody)).await;
    assert!(matches!(same, Err(Error::Parent(_))), "{same:?}");
    let other = fetches
        .enqueue_with(b"x", child_of("reports", &nobody))
        .await;
    assert!(matches!(other, Err(Error::Parent(_))), "{other:?}");
    // A parent not waiting (a plain job), and one with all its children.
    let plain = reports.enqueue(b"plain").await.expect("plain");
    let not_waiting = fetches
        .enqueue_with(b"x", child_of("reports", &plain))
        .await;
    assert!(
        matches!(not_waiting, Err(Error::Parent(_))),
        "{not_waiting:?}"
    );
    let one = Enqueue {
        children: Some(1),
        ..Enqueue::default()
    };
    let parent = reports.enqueue_with(b"p", one).await.expect("parent");
    fetches
        .enqueue_with(b"first", child_of("reports", &parent))
        .await
        .expect("the one child");
    let full = fetches
        .enqueue_with(b"second", child_of("reports", &parent))
        .await;
    assert!(matches!(full, Err(Error::Parent(_))), "{full:?}");
    // Refused by the client before anything is sent.
    let id = echomq_client::ids::mint();
    let many = Enqueue {
        id: Some(id.clone()),
        parents: (0..17)
            .map(|_| Parent::new("reports", echomq_client::ids::mint()))
            .collect(),
        ..Enqueue::default()
    };
    assert!(matches!(
        fetches.enqueue_with(b"x", many).await,
        Err(Error::Flow(_))
    ));
    assert_eq!(fetches.job(&id).await.expect("job"), None);
    let flows = Flows::new(conn(&server).await);
    let mut done = FlowJob::new("batches", b"none");
    let empty = flows.batch(&mut [], &mut done).await;
    assert!(matches!(empty, Err(Error::Flow(_))), "{empty:?}");
    assert_eq!(fetches.stats().await.expect("stats")["pending"], Some(1));
}

#[tokio::test]
async fn a_tree_with_a_job_the_server_would_refuse_writes_no_job() {
    let server = start(Options::default());
    let flows = Flows::new(conn(&server).await);
    let year = Duration::from_secs(365 * 86_400);
    let kid = || FlowJob::new("refused-kids", b"kid");
    let twice = echomq_client::ids::mint();
    // A timeout of 0 or past a year, and one job named twice (the parent would wait for two
    // children where the second is the first's duplicate).
    let bad = [
        vec![kid().timeout(Duration::ZERO)],
        vec![kid().timeout(year + Duration::from_millis(1))],
        vec![kid().id(twice.clone()), kid().id(twice.clone())],
    ];
    for children in bad {
        let mut tree = FlowJob::new("refused", b"root");
        for child in children {
            tree = tree.child(child);
        }
        let refused = flows.flow(&mut tree).await;
        assert!(matches!(refused, Err(Error::Argument(_))), "{refused:?}");
    }
    for queue in ["refused", "refused-kids"] {
        let stats = Queue::new(conn(&server).await, queue).stats().await;
        let stats = stats.expect("stats");
        assert_eq!((stats["pending"], stats["waiting"]), (Some(0), Some(0)));
    }
}

/// Where a job with this group, else this id, lives in `queue` over `width`.
fn home(queue: &str, width: u16, key: &str) -> String {
    name(queue, route(width, key), width).expect("a partition")
}

/// The (queue, id) of each child a parent registered, in order.
async fn registered<C>(parents: &Queue<C>, id: &str) -> Vec<(String, String)>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut keys: Vec<_> = parents
        .children(id)
        .await
        .expect("children")
        .into_keys()
        .collect();
    keys.sort();
    keys
}

/// A child enqueued into a partitioned queue by a handle that has not learned its width, and
/// one by a handle whose width is stale (the queue was unspanned and spanned again over
/// another), are each adopted by their parent where they are written, their partition: the
/// parent registers two children, not a third where none is, and runs once both are done.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_in_a_partitioned_queue_is_adopted_where_it_goes_whatever_width_its_handle_held() {
    let server = start(Options::default());
    let reports = Queue::new(conn(&server).await, "reports");
    let how = Enqueue {
        children: Some(2),
        ..Enqueue::default()
    };
    let parent = reports.enqueue_with(b"p", how).await.expect("parent");
    let child_of = |id: Option<String>| Enqueue {
        id,
        parents: vec![Parent::new("reports", parent.clone())],
        ..Enqueue::default()
    };
    Queue::new(conn(&server).await, "fetch")
        .span(4)
        .await
        .expect("span");
    let untold = Queue::new(conn(&server).await, "fetch");
    let first = untold
        .enqueue_with(b"eu", child_of(None))
        .await
        .expect("first child");
    assert_eq!(untold.known_width(), Some(4));

    let admin = Queue::new(conn(&server).await, "sync");
    admin.span(4).await.expect("span over 4");
    let stale = Queue::new(conn(&server).await, "sync");
    assert_eq!(stale.width().await.expect("width"), 4);
    assert!(admin.unspan().await.expect("unspan"));
    assert!(admin.span(2).await.expect("span over 2"));
    let of_two: Vec<String> = (0..2).map(|i| name("sync", i, 2).expect("name")).collect();
    let id = (0..10_000)
        .map(|_| echomq_client::ids::mint())
        .find(|id| !of_two.contains(&home("sync", 4, id)))
        .expect("an id whose partition of 4 was retired");
    let second = stale
        .enqueue_with(b"us", child_of(Some(id.clone())))
        .await
        .expect("second child");
    assert_eq!(stale.known_width(), Some(2));

    assert_eq!(
        field(&reports, &parent, "adopted").await.as_deref(),
        Some("2")
    );
    let mut expected = vec![
        (home("fetch", 4, &first), first),
        (home("sync", 2, &second), second),
    ];
    expected.sort();
    assert_eq!(registered(&reports, &parent).await, expected);
    let seen = Arc::new(Mutex::new(Vec::new()));
    let parents = run(worker_of(&server, "reports", reader(&seen)).await);
    let fetches = run(worker_of(&server, "fetch", fetch).await);
    let syncs = run(worker_of(&server, "sync", fetch).await);
    assert!(until(|| async { state(&reports, &parent).await.as_deref() == Some("done") }).await);
    assert_eq!(fetches.stop().await.acked, 1);
    assert_eq!(syncs.stop().await.acked, 1);
    assert_eq!(parents.stop().await.acked, 1);
    let seen = seen.lock().expect("lock").clone();
    assert_eq!(seen.len(), 1, "the parent ran once");
    assert!(seen[0].values().all(|c| c.status == ChildStatus::Acked));
}

/// A flow whose parent is in a partitioned queue: the parent goes to its partition, and its
/// children (one in another partitioned queue, one in the parent's) name that partition, so the
/// parent registers both and runs once they are done. A child enqueued by hand names the
/// parent's queue and is sent to the parent's partition (by its id, or by its group when the
/// parent has one), also by a handle that kept the parent queue's width from before its span.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_in_a_partitioned_queue_is_found_in_its_partition_by_its_children() {
    let server = start(Options::default());
    for (queue, width) in [("reports", 4), ("fetch", 3)] {
        Queue::new(conn(&server).await, queue)
            .span(width)
            .await
            .expect("span");
    }
    let flows = Flows::new(conn(&server).await);
    let mut tree = FlowJob::new("reports", b"monthly")
        .child(FlowJob::new("fetch", b"eu"))
        .child(FlowJob::new("reports", b"us"));
    let root = flows.flow(&mut tree).await.expect("flow");
    let home_of_root = Queue::new(conn(&server).await, home("reports", 4, &root));
    assert_eq!(
        state(&home_of_root, &root).await.as_deref(),
        Some("waiting")
    );
    let (eu, us) = (tree.children[0].id.clone(), tree.children[1].id.clone());
    let (eu, us) = (eu.expect("minted"), us.expect("minted"));
    let mut expected = vec![
        (home("fetch", 3, &eu), eu.clone()),
        (home("reports", 4, &us), us.clone()),
    ];
    expected.sort();
    assert_eq!(registered(&home_of_root, &root).await, expected);

    // By hand: a parent by its id, and a grouped one by its group.
    let reports = Queue::new(conn(&server).await, "reports");
    let fetches = Queue::new(conn(&server).await, "fetch");
    let one = Enqueue {
        children: Some(1),
        ..Enqueue::default()
    };
    let by_id = reports
        .enqueue_with(b"p", one.clone())
        .await
        .expect("parent");
    let grouped_id = echomq_client::ids::mint();
    let group = (0..1000)
        .map(|g| format!("tenant-{g}"))
        .find(|g| route(4, g) != route(4, &grouped_id))
        .expect("a group that routes elsewhere than the id");
    let grouped = Enqueue {
        id: Some(grouped_id.clone()),
        group: Some(group.clone()),
        ..one.clone()
    };
    reports
        .enqueue_with(b"g", grouped)
        .await
        .expect("grouped parent");
    let child_of = |parent: Parent| Enqueue {
        parents: vec![parent],
        ..Enqueue::default()
    };
    let first = fetches
        .enqueue_with(b"a", child_of(Parent::new("reports", by_id.clone())))
        .await
        .expect("child of a parent by its id");
    let second = fetches
        .enqueue_with(
            b"b",
            child_of(Parent::new("reports", grouped_id.clone()).group(group.clone())),
        )
        .await
        .expect("child of a grouped parent");
    let home_of_id = Queue::new(conn(&server).await, home("reports", 4, &by_id));
    assert_eq!(
        registered(&home_of_id, &by_id).await,
        vec![(home("fetch", 3, &first), first)]
    );
    let home_of_group = Queue::new(conn(&server).await, home("reports", 4, &group));
    assert_eq!(
        registered(&home_of_group, &grouped_id).await,
        vec![(home("fetch", 3, &second), second)]
    );

    // A handle that kept "audit" as an ordinary queue finds a parent written after its span.
    let audit = Queue::new(conn(&server).await, "audit");
    let early = audit.enqueue_with(b"p", one.clone()).await.expect("parent");
    fetches
        .enqueue_with(b"c", child_of(Parent::new("audit", early.clone())))
        .await
        .expect("child while audit is ordinary");
    assert_eq!(audit.cancel_flow(&early).await.expect("cancel"), 2);
    audit.span(2).await.expect("span audit");
    let late = audit.enqueue_with(b"p", one).await.expect("parent");
    let third = fetches
        .enqueue_with(b"d", child_of(Parent::new("audit", late.clone())))
        .await
        .expect("child after the span: the parent looked for again");
    let audit_home = Queue::new(conn(&server).await, home("audit", 2, &late));
    assert_eq!(
        registered(&audit_home, &late).await,
        vec![(home("fetch", 3, &third), third)]
    );

    let seen = Arc::new(Mutex::new(Vec::new()));
    let parents = run(worker_of(&server, "reports", reader(&seen)).await);
    let audits = run(worker_of(&server, "audit", fetch).await);
    let children = run(worker_of(&server, "fetch", fetch).await);
    let parents_done = [
        (&home_of_root, &root),
        (&home_of_id, &by_id),
        (&home_of_group, &grouped_id),
        (&audit_home, &late),
    ];
    for (queue, id) in parents_done {
        assert!(
            until(|| async { state(queue, id).await.as_deref() == Some("done") }).await,
            "{id} ran"
        );
    }
    children.stop().await;
    audits.stop().await;
    parents.stop().await;
    let seen = seen.lock().expect("lock").clone();
    let roots: Vec<_> = seen.iter().filter(|c| c.len() == 2).collect();
    assert_eq!(
        roots.len(),
        1,
        "the flow's parent ran once, with its two children"
    );
    assert!(roots[0].values().all(|c| c.status == ChildStatus::Acked));
}

/// On `cluster`, a flow whose parent (payload `parent`) is in `parent_queue` and whose two
/// children (`children`) are in the first queue `<prefix>-<n>` of another primary: that queue,
/// the tree with its minted ids, and the parent's id.
async fn across_primaries(
    cluster: &Cluster,
    parent_queue: &str,
    parent: &[u8],
    prefix: &str,
    children: [&[u8]; 2],
) -> (String, FlowJob, String) {
    let parent_node = cluster.owner(slot(parent_queue)).port;
    let child_queue = (0..)
        .map(|n| format!("{prefix}-{n}"))
        .find(|q| cluster.owner(slot(q)).port != parent_node)
        .expect("a queue on another primary");
    let flows = Flows::new(cluster_conn(cluster).await);
    let mut tree = FlowJob::new(parent_queue, parent)
        .child(FlowJob::new(child_queue.clone(), children[0]))
        .child(FlowJob::new(child_queue.clone(), children[1]));
    let root = flows.flow(&mut tree).await.expect("flow");
    (child_queue, tree, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_children_on_another_primary_reach_their_parent_through_the_sweep() {
    let cluster = Cluster::start(3, 0);
    let parent_queue = "reports";
    let (child_queue, tree, root) =
        across_primaries(&cluster, parent_queue, b"monthly", "fetch", [b"eu", b"us"]).await;
    let reports = Queue::new(cluster_conn(&cluster).await, parent_queue);
    // Adopted on the parent's node before either child existed.
    assert_eq!(
        field(&reports, &root, "adopted").await.as_deref(),
        Some("2")
    );
    let seen = Arc::new(Mutex::new(Vec::new()));
    let parents = run(Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        parent_queue,
        reader(&seen),
    ));
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let r = recorded.clone();
    let children = run(Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        child_queue.clone(),
        fetch,
    )
    .on_event(move |e: &WorkerEvent| r.lock().expect("lock").push(e.clone())));
    let done = until(|| async { state(&reports, &root).await.as_deref() == Some("done") }).await;
    let outbox = Queue::new(cluster_conn(&cluster).await, child_queue.clone())
        .call("EMQ.OUTBOX", &[])
        .await;
    assert!(
        done,
        "the parent: {:?}\nthe outbox: {outbox:?}\nthe sweep: {:?}\nthe logs: {:?}",
        reports.job(&root).await,
        recorded
            .lock()
            .expect("lock")
            .iter()
            .filter(|e| matches!(e.kind, EventKind::Handover | EventKind::Delivered))
            .collect::<Vec<_>>(),
        cluster
            .nodes
            .iter()
            .map(|n| n.log_tail())
            .collect::<Vec<_>>()
    );
    assert_eq!(children.stop().await.acked, 2);
    assert_eq!(parents.stop().await.acked, 1);
    let seen = seen.lock().expect("lock").clone();
    let expected: Children = [
        (key(&child_queue, &tree.children[0].id), acked("rows of eu")),
        (key(&child_queue, &tree.children[1].id), acked("rows of us")),
    ]
    .into_iter()
    .collect();
    assert_eq!(seen, [expected]);
    // Each child's hand-over was sent and removed by the sweep, once, with no wait for replicas
    // (the worker has none), and no page read failed.
    let sweep = |kind: EventKind| -> Vec<String> {
        let events = recorded.lock().expect("lock");
        let mut ids: Vec<String> = events
            .iter()
            .filter(|e| e.kind == kind && e.outcome == EventOutcome::Ok)
            .inspect(|e| assert_eq!((e.token, e.replicated), (0, None), "{e:?}"))
            .map(|e| e.id.clone())
            .collect();
        ids.sort();
        ids
    };
    let mut ids: Vec<String> = tree.children.iter().filter_map(|c| c.id.clone()).collect();
    ids.sort();
    assert_eq!(sweep(EventKind::Handover), ids);
    assert_eq!(sweep(EventKind::Delivered), ids);
    assert!(sweep(EventKind::Outbox).is_empty());
    let outbox = Queue::new(cluster_conn(&cluster).await, child_queue)
        .call("EMQ.OUTBOX", &[])
        .await
        .expect("outbox");
    let (cursor, entries) =
        redis::from_redis_value::<(String, Vec<redis::Value>)>(outbox).expect("a page");
    assert_eq!((cursor.as_str(), entries.len()), ("0", 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_waiting_for_replicas_removes_a_hand_over_only_once_the_parents_replicas_have_it()
{
    let cluster = Cluster::start(3, 1);
    let parent_queue = "albums";
    let (child_queue, tree, root) = across_primaries(
        &cluster,
        parent_queue,
        b"publish",
        "thumbs",
        [b"img-1", b"img-2"],
    )
    .await;
    let albums = Queue::new(cluster_conn(&cluster).await, parent_queue);
    let thumbs = Queue::new(cluster_conn(&cluster).await, child_queue.clone());
    let outbox = || async {
        let page = thumbs.call("EMQ.OUTBOX", &[]).await.expect("outbox");
        let (_, entries) =
            redis::from_redis_value::<(String, Vec<redis::Value>)>(page).expect("a page");
        entries.len()
    };
    let worker = |replicas: usize, recorded: &Recorded| {
        let r = recorded.clone();
        let cluster = &cluster;
        let child_queue = child_queue.clone();
        async move {
            Worker::new(
                cluster_conn(cluster).await,
                cluster_conn(cluster).await,
                child_queue,
                fetch,
            )
            .wait_replicas(replicas, Duration::from_millis(200))
            .on_event(move |e: &WorkerEvent| r.lock().expect("lock").push(e.clone()))
        }
    };
    let of = |recorded: &Recorded, kind: EventKind| -> Vec<WorkerEvent> {
        let events = recorded.lock().expect("lock");
        events.iter().filter(|e| e.kind == kind).cloned().collect()
    };
    // Each primary has one replica: a worker that waits for two never sees a hand-over
    // confirmed, so it keeps both entries, and sends them again at the next sweep.
    let short: Recorded = Arc::new(Mutex::new(Vec::new()));
    let children = run(worker(2, &short).await);
    let handed = until(|| async { of(&short, EventKind::Handover).len() >= 4 }).await;
    assert_eq!(children.stop().await.acked, 2);
    assert!(handed, "{:?}", short.lock().expect("lock"));
    for e in of(&short, EventKind::Handover) {
        assert_eq!(
            (e.outcome, e.replicated),
            (EventOutcome::Ok, Some(false)),
            "{e:?}"
        );
    }
    assert!(of(&short, EventKind::Delivered).is_empty());
    assert_eq!(outbox().await, 2, "left for the next sweep");
    // The parent's side counted them the first time: the parent is pending.
    assert_eq!(state(&albums, &root).await.as_deref(), Some("pending"));
    // A worker that waits for the one replica there is: confirmed, then removed, once each.
    let enough: Recorded = Arc::new(Mutex::new(Vec::new()));
    let children = run(worker(1, &enough).await);
    let emptied = until(|| async { outbox().await == 0 }).await;
    children.stop().await;
    assert!(emptied, "{:?}", enough.lock().expect("lock"));
    let mut ids: Vec<String> = tree.children.iter().filter_map(|c| c.id.clone()).collect();
    ids.sort();
    for kind in [EventKind::Handover, EventKind::Delivered] {
        let events = of(&enough, kind);
        let mut seen: Vec<String> = events.iter().map(|e| e.id.clone()).collect();
        seen.sort();
        assert_eq!(seen, ids, "{kind:?}: {events:?}");
        let want = (kind == EventKind::Handover).then_some(true);
        assert!(events.iter().all(|e| e.replicated == want), "{events:?}");
    }
    assert_eq!(state(&albums, &root).await.as_deref(), Some("pending"));
}
