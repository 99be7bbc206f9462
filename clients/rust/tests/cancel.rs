//! Cancelling a flow's parent through the Rust client against real servers: on one server the
//! module takes the whole unstarted tree and the client counts it; on a cluster the client
//! cancels the unstarted children in other slots (and theirs) that the module cannot reach,
//! and leaves a started one to run.

mod common;

use emq_harness as support;

use common::*;
use echomq_client::{Enqueue, Error, FlowJob, Flows, OnFail, Parent, Queue};
use redis::aio::ConnectionLike;
use redis::Value;
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

/// A parent on `top` with two children on `kids`, the second the parent of one on `crops`,
/// enqueued: the tree with its ids, and the parent's id.
async fn three_below<C>(c: &C, top: &str, kids: &str, crops: &str) -> (FlowJob, String)
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut tree = FlowJob::new(top, b"publish")
        .child(FlowJob::new(kids, b"t1"))
        .child(FlowJob::new(kids, b"t2").child(FlowJob::new(crops, b"c1")));
    let root = Flows::new(c.clone()).flow(&mut tree).await.expect("flow");
    (tree, root)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_parent_takes_its_unstarted_tree_and_counts_it() {
    let server = start(Options::default());
    let c = conn(&server).await;
    let (tree, root) = three_below(&c, "albums", "thumbs", "crops").await;
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
async fn cancel_unstarted_leaves_a_running_job_and_removes_a_waiting_one() {
    let server = start(Options::default());
    let c = conn(&server).await;
    let q = Queue::new(c.clone(), "unstarted");
    let running = q.enqueue(b"r").await.expect("enqueue");
    let waiting = q.enqueue(b"w").await.expect("enqueue");
    assert_eq!(claim_one(&q).await.0, running);
    assert_eq!(q.cancel_unstarted(&running).await.expect("cancel"), 0);
    let row = q.job(&running).await.expect("job").expect("a row");
    assert_eq!(row.get("state").map(String::as_str), Some("active"));
    assert_eq!(q.cancel_unstarted(&waiting).await.expect("cancel"), 1);
    assert!(q.job(&waiting).await.expect("job").is_none());
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
    let (claimed, _) = claim_one(&Queue::new(c.clone(), started.clone())).await;
    assert_eq!(Some(claimed), d.id.clone(), "the started child claimed");
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

/// How many times `command` ran on `server` since the last `CONFIG RESETSTAT`.
fn calls(server: &support::Server, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query(&mut server.conn())
        .expect("INFO");
    let line = format!("cmdstat_{command}:calls=");
    info.lines()
        .find_map(|l| l.strip_prefix(&line))
        .and_then(|rest| rest.split(',').next())
        .map_or(0, |n| n.parse().expect("a count"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_layered_graph_is_read_once_a_job() {
    let server = start(Options::default());
    let c = conn(&server).await;
    // Three layers of 3 below the top, each job the child of all 3 above it (ON-FAIL IGNORE: a
    // cancelled child fails no other parent): read once a path, the middle layer's children
    // would be paged 9 times, not 3.
    let top = Queue::new(c.clone(), "layer-top");
    let how = |children: Option<u32>, parents: &[Parent]| Enqueue {
        children,
        parents: parents.to_vec(),
        ..Enqueue::default()
    };
    let tid = top
        .enqueue_with(b"top", how(Some(3), &[]))
        .await
        .expect("top");
    let mut above = vec![Parent::new("layer-top", &tid).on_fail(OnFail::Ignore)];
    for (n, name) in ["layer-a", "layer-b", "layer-c"].into_iter().enumerate() {
        let q = Queue::new(c.clone(), name);
        let mut layer = Vec::new();
        for _ in 0..3 {
            let children = (n < 2).then_some(3);
            let id = q
                .enqueue_with(b"x", how(children, &above))
                .await
                .expect("enqueue");
            layer.push(Parent::new(name, id).on_fail(OnFail::Ignore));
        }
        above = layer;
    }
    let _: () = redis::cmd("CONFIG")
        .arg("RESETSTAT")
        .query(&mut server.conn())
        .expect("RESETSTAT");
    assert_eq!(top.cancel_flow(&tid).await.expect("cancel"), 10);
    assert_eq!(
        calls(&server, "emq.children"),
        7,
        "the top and its 6 waiting parents, once"
    );
    assert_eq!(
        calls(&server, "emq.job"),
        18,
        "each child read once, looked up once"
    );
    assert_eq!(calls(&server, "emq.cancel"), 10);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_child_the_user_may_not_read_is_left_and_its_parent_cancelled() {
    let server = start(Options::default());
    let c = conn(&server).await;
    support::user_with(&server, "scoped", &["+@all", "~emq:{scoped-top}:*"]);
    let url = server.url().replacen("redis://", "redis://scoped:pw@", 1);
    let scoped = redis::Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection()
        .await
        .expect("the scoped user's connection");
    let mut tree = FlowJob::new("scoped-top", b"top")
        .child(FlowJob::new("scoped-top", b"mine"))
        .child(FlowJob::new("scoped-other", b"not mine"));
    let root = Flows::new(c.clone()).flow(&mut tree).await.expect("flow");
    let n = Queue::new(scoped, "scoped-top").cancel_flow(&root).await;
    assert_eq!(
        n.expect("cancel"),
        2,
        "the top and its child in its own queue"
    );
    assert!(gone(&c, "scoped-top", &tree.children[0].id).await);
    let other = tree.children[1].id.as_deref().expect("an id");
    let row = Queue::new(c.clone(), "scoped-other").job(other).await;
    let row = row
        .expect("EMQ.JOB")
        .expect("the child out of the user's keys is there");
    assert_eq!(row["state"], "pending");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_parent_of_more_than_1000_takes_the_first_1000_in_scan_order() {
    let server = start(Options::default());
    let c = conn(&server).await;
    let parents = Queue::new(c.clone(), "many-top");
    let how = Enqueue {
        children: Some(1002),
        ..Enqueue::default()
    };
    let pid = parents.enqueue_with(b"top", how).await.expect("parent");
    let kids = Queue::new(c.clone(), "many-kids");
    for _ in 0..1002 {
        let how = Enqueue {
            parents: vec![Parent::new("many-top", &pid)],
            ..Enqueue::default()
        };
        kids.enqueue_with(b"k", how).await.expect("kid");
    }
    // The children in EMQ.CHILDREN's order: the first 1,000 go, the last 2 run on.
    let mut order = Vec::new();
    let mut cursor = b"0".to_vec();
    loop {
        let args = [pid.as_bytes().to_vec(), b"CURSOR".to_vec(), cursor];
        let page = parents.call("EMQ.CHILDREN", &args).await.expect("page");
        type Row = (String, String, String, Option<Vec<u8>>);
        let (next, rows): (Vec<u8>, Vec<Row>) = redis::from_redis_value(page).expect("rows");
        order.extend(rows.into_iter().map(|r| r.1));
        if next == b"0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(parents.cancel_flow(&pid).await.expect("cancel"), 1001);
    for (i, kid) in order.iter().enumerate() {
        let there = kids.job(kid).await.expect("EMQ.JOB").is_some();
        assert_eq!(there, i >= 1000, "child {i} of the scan");
    }
}

/// A connection that breaks after the first `EMQ.CANCEL`: every later one fails.
#[derive(Clone)]
struct Breaking {
    inner: redis::aio::MultiplexedConnection,
    cancels: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}

impl ConnectionLike for Breaking {
    fn req_packed_command<'a>(&'a mut self, cmd: &'a redis::Cmd) -> redis::RedisFuture<'a, Value> {
        let cancel = matches!(
            cmd.args_iter().next(),
            Some(redis::Arg::Simple(b"EMQ.CANCEL"))
        );
        let order = std::sync::atomic::Ordering::SeqCst;
        if cancel && self.cancels.fetch_add(1, order) >= 1 {
            let broke = (redis::ErrorKind::Client, "the connection broke");
            return Box::pin(async move { Err(redis::RedisError::from(broke)) });
        }
        self.inner.req_packed_command(cmd)
    }

    fn req_packed_commands<'a>(
        &'a mut self,
        cmd: &'a redis::Pipeline,
        offset: usize,
        count: usize,
    ) -> redis::RedisFuture<'a, Vec<Value>> {
        self.inner.req_packed_commands(cmd, offset, count)
    }

    fn get_db(&self) -> i64 {
        self.inner.get_db()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_failing_after_its_parent_went_names_the_children_left() {
    let server = start(Options::default());
    let c = conn(&server).await;
    let (tree, root) = three_below(&c, "broken-top", "broken-kids", "broken-crops").await;
    let breaking = Breaking {
        inner: c.clone(),
        cancels: Default::default(),
    };
    let failed = Queue::new(breaking, "broken-top").cancel_flow(&root).await;
    let Err(Error::CancelIncomplete {
        cancelled,
        remaining,
        source,
    }) = failed
    else {
        panic!("not CancelIncomplete: {failed:?}");
    };
    assert_eq!(cancelled, 1, "the parent went");
    let id = |job: &FlowJob| job.id.clone().expect("an id");
    let (k1, k2) = (&tree.children[0], &tree.children[1]);
    let left = [
        ("broken-kids", id(k1)),
        ("broken-kids", id(k2)),
        ("broken-crops", id(&k2.children[0])),
    ];
    let left: Vec<(String, String)> = left.map(|(q, i)| (q.to_string(), i)).into();
    assert_eq!(remaining, left);
    assert!(
        source.to_string().contains("the connection broke"),
        "{source}"
    );
    assert!(gone(&c, "broken-top", &tree.id).await);
}
