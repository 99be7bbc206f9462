//! A partitioned queue read and scheduled as one queue through the client (docs/cluster.md, "A
//! queue bigger than one primary"), on a three-primary cluster: a schedule goes to the
//! partition its name routes to and `crons` lists every partition's, `jobs` and `groups` walk
//! the partitions with a cursor of their own (each job and group once, a page from one
//! partition, a malformed cursor refused), and `metrics` adds the partitions' up. A schedule set
//! by a handle that learned the queue was ordinary before it was spanned is routed once
//! refused, and so is one set by a handle that holds a width from before the queue was spanned
//! again over another; `crons`, `uncron` and a walk from `"0"` of such a handle read the width
//! afresh, and a handle given a width (`knowing_width`) keeps it. An ordinary queue's listings
//! keep the server's cursors, and a user not allowed `EMQ.WIDTH` reads an ordinary queue; its
//! worker claims a partitioned queue's partitions, the width learned from its claim's refusal.

mod common;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::*;
use echomq_client::partition::{name, route};
use echomq_client::slot::slot;
use echomq_client::{Enqueue, Error, Metrics, Queue, When};
use emq_harness::{cluster::Cluster, Options};
use redis::aio::ConnectionLike;

/// Where a job with this group, else this id (or a schedule of this name), lives in `queue`
/// over `width`.
fn home(queue: &str, width: u16, key: &str) -> String {
    name(queue, route(width, key), width).expect("a partition")
}

/// A spec that fires once a year (03:00 on the 1st of January): no schedule fires in a test.
const YEARLY: &str = "0 3 1 1 *";

/// Every page of a walk with `read` from `"0"` to `"0"`, each page's items and the cursor it
/// returned; at most 1,000 pages.
async fn walk<T, F, Fut>(mut read: F) -> Vec<(String, Vec<T>)>
where
    F: FnMut(String) -> Fut,
    Fut: std::future::Future<Output = echomq_client::Result<(String, Vec<T>)>>,
{
    let mut pages = Vec::new();
    let mut cursor = "0".to_string();
    for _ in 0..1000 {
        let (next, items) = read(cursor).await.expect("a page");
        pages.push((next.clone(), items));
        if next == "0" {
            return pages;
        }
        cursor = next;
    }
    panic!("a walk that does not end: {} pages", pages.len());
}

/// Enqueues 100 jobs to `q`: the first 60 in no group (`EMQ.JOBS` lists the default group's),
/// the rest two in each of 20 groups (`g0`..`g19`); each job's id and the key it routes by.
async fn produce<C>(q: &Queue<C>) -> Vec<(String, String)>
where
    C: ConnectionLike + Clone + Send + Sync + 'static,
{
    let mut jobs = Vec::new();
    for n in 0..100 {
        let group = (n >= 60).then(|| format!("g{}", n % 20));
        let how = Enqueue {
            group: group.clone(),
            ..Enqueue::default()
        };
        let id = q.enqueue_with(format!("job {n}"), how).await.expect("job");
        jobs.push((id.clone(), group.unwrap_or(id)));
    }
    jobs
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_a_partitioned_queue_s_schedules_listings_and_metrics_span_its_partitions() {
    let cluster = Cluster::start(3, 0);
    let admin = Queue::new(cluster_conn(&cluster).await, "listed");
    assert!(admin.span(12).await.expect("span"));
    let owners: HashSet<u16> = (0..12)
        .map(|i| {
            cluster
                .owner(slot(&name("listed", i, 12).expect("name")))
                .port
        })
        .collect();
    assert_eq!(owners.len(), 3, "partitions on every primary");
    let on = &cluster;
    let part = |p: String| async move { Queue::new(cluster_conn(on).await, p) };

    // Schedules: each in the partition its name routes to, by a handle not told the width.
    let q = Queue::new(cluster_conn(&cluster).await, "listed");
    let names: Vec<String> = (0..10).map(|n| format!("report-{n}")).collect();
    for n in &names {
        let next = q
            .cron(n, When::Spec(YEARLY.into()), format!("run {n}"), Some(-1))
            .await
            .expect("cron");
        assert!(next > 1_700_000_000_000, "the next firing, unix ms: {next}");
    }
    assert_eq!(q.known_width(), Some(12), "the width asked");
    let homes: HashSet<String> = names.iter().map(|n| home("listed", 12, n)).collect();
    assert!(homes.len() > 1, "the schedules spread: {homes:?}");
    for n in &names {
        let there = part(home("listed", 12, n))
            .await
            .crons()
            .await
            .expect("crons");
        let found = there.iter().find(|s| &s.name == n);
        let found = found.unwrap_or_else(|| panic!("{n} in its partition: {there:?}"));
        assert_eq!(found.payload, format!("run {n}").into_bytes());
        assert_eq!((found.priority, found.last_ms), (-1, None));
        assert_eq!(found.when, When::Spec(YEARLY.into()));
    }
    let fresh = Queue::new(cluster_conn(&cluster).await, "listed");
    let listed: Vec<String> = fresh
        .crons()
        .await
        .expect("crons")
        .into_iter()
        .map(|s| s.name)
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(listed, sorted, "every partition's, by name");
    assert!(fresh.uncron("report-3").await.expect("uncron"));
    assert!(!q.uncron("report-3").await.expect("uncron again"));
    let gone = part(home("listed", 12, "report-3")).await.crons().await;
    assert!(gone.expect("crons").iter().all(|s| s.name != "report-3"));
    assert_eq!(q.crons().await.expect("crons").len(), 9);

    // Listings: the 60 jobs of no group, walked 4 at a time, each once, a page from one
    // partition.
    let jobs = produce(&q).await;
    let key_of: HashMap<&str, &str> = jobs.iter().map(|(i, k)| (i.as_str(), k.as_str())).collect();
    let fresh = Queue::new(cluster_conn(&cluster).await, "listed");
    let pages = walk(|c| {
        let fresh = fresh.clone();
        async move { fresh.jobs("pending", &c, Some(4), false).await }
    })
    .await;
    let (last, before) = pages.split_last().expect("pages");
    assert_eq!(last.0, "0");
    let mut seen = HashSet::new();
    for (cursor, page) in &pages {
        assert!(page.len() <= 4, "{cursor}: {page:?}");
        let partitions: HashSet<String> = page
            .iter()
            .map(|j| home("listed", 12, key_of[j.id.as_str()]))
            .collect();
        assert!(partitions.len() <= 1, "a page from one partition: {cursor}");
        for j in page {
            assert!(seen.insert(j.id.clone()), "{} listed twice", j.id);
            assert_eq!((j.score, j.attempts), (Some(0), Some(0)), "{j:?}");
            assert_eq!(j.payload, None, "no payloads asked");
        }
    }
    assert!(
        before.iter().all(|(_, page)| !page.is_empty()),
        "empty only at the end"
    );
    assert!(before.iter().all(|(c, _)| c.contains(':')), "{pages:?}");
    assert_eq!(seen.len(), 60, "every job");
    let (_, first) = q.jobs("pending", "0", Some(1), true).await.expect("a page");
    let row = &first[0];
    let n = jobs
        .iter()
        .position(|(id, _)| id == &row.id)
        .expect("one of them");
    assert_eq!(row.payload, Some(format!("job {n}").into_bytes()));

    let pages = walk(|c| {
        let q = q.clone();
        async move { q.groups(&c, Some(3)).await }
    })
    .await;
    let mut groups = Vec::new();
    for (cursor, page) in &pages {
        assert!(page.len() <= 3, "{cursor}");
        let partitions: HashSet<String> =
            page.iter().map(|g| home("listed", 12, &g.group)).collect();
        assert!(partitions.len() <= 1, "a page from one partition: {cursor}");
        groups.extend(page.iter().map(|g| (g.group.clone(), g.ready)));
    }
    groups.sort();
    let mut want: Vec<(String, u64)> = (0..20).map(|n| (format!("g{n}"), 2)).collect();
    want.sort();
    assert_eq!(groups, want, "each group once, with its two jobs");

    // A malformed cursor is refused by the client.
    for bad in ["12:0", "x", "3", "-1:0", "03:0", "1:"] {
        assert!(
            matches!(
                q.jobs("pending", bad, None, false).await,
                Err(Error::Argument(_))
            ),
            "{bad:?}"
        );
        assert!(
            matches!(q.groups(bad, None).await, Err(Error::Argument(_))),
            "{bad:?}"
        );
    }
    assert!(q.jobs("pending", "11:0", None, false).await.is_ok());

    // Metrics: a job claimed and acked from each of four partitions, one more left active.
    let mut claimed = 0;
    for i in [0u16, 3, 7, 11] {
        let p = part(name("listed", i, 12).expect("name")).await;
        if p.stats().await.expect("stats")["pending"] == Some(0) {
            continue;
        }
        let (id, token) = claim_one(&p).await;
        claimed += 1;
        if i != 11 {
            let acked = p.ack_many(&[(&id, token, None)]).await.expect("ack");
            assert!(acked.iter().all(|r| r.is_ok()), "{acked:?}");
        }
    }
    assert!(claimed >= 2, "{claimed} claims");
    let mut each = Vec::new();
    for i in 0..12 {
        let p = part(name("listed", i, 12).expect("name")).await;
        each.push(p.metrics().await.expect("a partition's metrics"));
    }
    let all = Queue::new(cluster_conn(&cluster).await, "listed")
        .metrics()
        .await
        .expect("metrics");
    let sum = Metrics::added(&each);
    // The ages grow between the readings; the rest stands still.
    assert!(all.oldest_pending_ms >= sum.oldest_pending_ms);
    assert!(all.oldest_pending_ms.is_some());
    assert_eq!(
        Metrics {
            oldest_pending_ms: None,
            ..all.clone()
        },
        Metrics {
            oldest_pending_ms: None,
            ..sum
        }
    );
    let count = |e: &str| all.events.get(e).copied().unwrap_or(0);
    assert_eq!(count("enqueued"), 100);
    assert_eq!(count("claimed"), claimed);
    assert_eq!(count("acked"), claimed - 1);
    assert_eq!(all.wait.count, claimed);
    assert_eq!(all.run.get("acked").map(|h| h.count), Some(claimed - 1));
    let buckets: BTreeMap<_, _> = all.wait.buckets.iter().copied().collect();
    assert_eq!(
        buckets.get(&None),
        Some(&claimed),
        "the last bucket holds them all"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ordinary_queue_s_listings_keep_the_server_s_cursors() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "plain");
    for n in 0..10 {
        let how = Enqueue {
            group: (n >= 5).then(|| format!("g{n}")),
            ..Enqueue::default()
        };
        q.enqueue_with(format!("job {n}"), how).await.expect("job");
    }
    let page = |cursor: &str| {
        vec![
            b"pending".to_vec(),
            b"CURSOR".to_vec(),
            cursor.as_bytes().to_vec(),
            b"COUNT".to_vec(),
            b"2".to_vec(),
        ]
    };
    let raw = q.call("EMQ.JOBS", &page("0")).await.expect("EMQ.JOBS");
    let (server_cursor, _): (String, redis::Value) = redis::from_redis_value(raw).expect("page");
    let (cursor, jobs) = q.jobs("pending", "0", Some(2), false).await.expect("jobs");
    assert_eq!(cursor, server_cursor, "the server's own");
    assert_eq!(jobs.len(), 2);
    let (next, rest) = q.jobs("pending", &cursor, None, false).await.expect("jobs");
    assert_eq!((next.as_str(), rest.len()), ("0", 3));
    match q.jobs("pending", "x", None, false).await {
        Err(Error::Cursor(why)) => assert!(why.starts_with("EMQCURSOR"), "{why}"),
        other => panic!("the server's refusal: {other:?}"),
    }
    let args = [
        b"CURSOR".to_vec(),
        b"0".to_vec(),
        b"COUNT".to_vec(),
        b"3".to_vec(),
    ];
    let raw = q.call("EMQ.GROUPS", &args).await.expect("EMQ.GROUPS");
    let (server_cursor, _): (String, redis::Value) = redis::from_redis_value(raw).expect("page");
    let (cursor, groups) = q.groups("0", Some(3)).await.expect("groups");
    assert_eq!(cursor, server_cursor, "the server's own");
    assert_eq!(groups.len(), 3);
    let (cursor, groups) = q.groups(&cursor, Some(3)).await.expect("groups");
    assert_eq!((cursor.as_str(), groups.len()), ("0", 2));
    q.cron("nightly", When::Spec(YEARLY.into()), b"x", None)
        .await
        .expect("cron");
    let crons = q.crons().await.expect("crons");
    assert_eq!(crons.len(), 1);
    assert!(q.uncron("nightly").await.expect("uncron"));
    assert_eq!(q.metrics().await.expect("metrics").events["enqueued"], 10);
    assert_eq!(q.known_width(), Some(0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_schedule_set_by_a_handle_that_learned_no_width_is_routed_once_the_queue_refuses_it() {
    let server = start(Options::default());
    let early = Queue::new(conn(&server).await, "late");
    assert_eq!(early.width().await.expect("width"), 0, "ordinary then");
    Queue::new(conn(&server).await, "late")
        .span(4)
        .await
        .expect("span");
    early
        .cron(
            "hourly",
            When::Every(std::time::Duration::from_secs(3600)),
            b"x",
            None,
        )
        .await
        .expect("cron, routed again");
    assert_eq!(early.known_width(), Some(4), "learned from EMQSPANNED");
    let there = Queue::new(conn(&server).await, home("late", 4, "hourly"));
    let listed = there.crons().await.expect("crons");
    assert_eq!(listed.len(), 1);
    assert_eq!(
        listed[0].when,
        When::Every(std::time::Duration::from_secs(3600))
    );
    assert!(early.uncron("hourly").await.expect("uncron"));
}

/// Handles on `queue` that each learned its width (`EMQ.WIDTH`) as it is now.
async fn learned(
    server: &emq_harness::Server,
    queue: &str,
    n: usize,
    width: u16,
) -> Vec<Queue<redis::aio::MultiplexedConnection>> {
    let mut handles = Vec::new();
    for _ in 0..n {
        let h = Queue::new(conn(server).await, queue);
        assert_eq!(h.width().await.expect("width"), width);
        handles.push(h);
    }
    handles
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handle_holding_a_width_from_before_the_queue_was_spanned_again_finds_its_schedules() {
    let server = start(Options::default());
    let admin = Queue::new(conn(&server).await, "respan");
    admin.span(4).await.expect("span over 4");
    let stale = learned(&server, "respan", 4, 4).await;
    let given = Queue::new(conn(&server).await, "respan").knowing_width(4);
    assert!(admin.unspan().await.expect("unspan"));
    assert!(admin.span(6).await.expect("span again over 6"));

    // A name whose partition over 4 is no partition over 6: a retired one (EMQSPANNED 0).
    let over_6: HashSet<String> = (0..6)
        .map(|i| name("respan", i, 6).expect("name"))
        .collect();
    let set = (0..100)
        .map(|n| format!("sweep-{n}"))
        .find(|n| !over_6.contains(&home("respan", 4, n)))
        .expect("a name routed to a retired partition");
    stale[0]
        .cron(&set, When::Spec(YEARLY.into()), b"x", None)
        .await
        .expect("cron, routed through the queue's own name");
    assert_eq!(
        stale[0].known_width(),
        Some(6),
        "learned from the queue's name"
    );
    let there = Queue::new(conn(&server).await, home("respan", 6, &set));
    let listed = there.crons().await.expect("crons");
    assert_eq!(listed.iter().map(|s| &s.name).collect::<Vec<_>>(), [&set]);
    admin
        .cron("audit", When::Spec(YEARLY.into()), b"y", None)
        .await
        .expect("cron");

    // crons() and uncron() of a handle still holding 4 read the width afresh.
    let names: Vec<String> = stale[1]
        .crons()
        .await
        .expect("crons")
        .into_iter()
        .map(|s| s.name)
        .collect();
    let mut want = vec!["audit".to_string(), set.clone()];
    want.sort();
    assert_eq!(names, want, "every partition's of the width now");
    assert_eq!(stale[1].known_width(), Some(6));
    assert!(
        stale[2].uncron(&set).await.expect("uncron"),
        "found where it is"
    );
    assert_eq!(stale[2].known_width(), Some(6));

    // A walk from "0" of a handle still holding 4 reads the width afresh too.
    let mut ids = HashSet::new();
    for n in 0..12 {
        ids.insert(admin.enqueue(format!("job {n}")).await.expect("job"));
    }
    let pages = walk(|c| {
        let q = stale[3].clone();
        async move { q.jobs("pending", &c, Some(5), false).await }
    })
    .await;
    let walked: HashSet<String> = pages
        .into_iter()
        .flat_map(|(_, page)| page.into_iter().map(|j| j.id))
        .collect();
    assert_eq!(walked, ids, "every job of the partitions over 6");

    // A handle given 4 keeps it: it reads the retired partitions, and sends no EMQ.WIDTH.
    assert_eq!(given.crons().await.expect("crons"), []);
    assert!(!given.uncron("audit").await.expect("uncron"));
    assert_eq!(given.known_width(), Some(4));
    let (end, page) = given.jobs("pending", "0", None, false).await.expect("jobs");
    assert_eq!(
        (end.as_str(), page.len()),
        ("0", 0),
        "the retired partitions hold none"
    );
    assert_eq!(given.known_width(), Some(4));
    assert_eq!(admin.crons().await.expect("crons").len(), 1, "audit stays");
}

/// A connection as `nowidth`, a user of every command but `EMQ.WIDTH`, made on `server` (not
/// `+@emq`: Redis 7 has no module categories).
async fn nowidth(server: &emq_harness::Server) -> redis::aio::MultiplexedConnection {
    let mut setuser = redis::cmd("ACL");
    setuser.arg(&[
        "SETUSER",
        "nowidth",
        "on",
        ">pw",
        "~*",
        "+@all",
        "-emq.width",
    ]);
    let _: () = setuser.query(&mut server.conn()).expect("acl setuser");
    let url = format!("redis://nowidth:pw@127.0.0.1:{}", server.port);
    let config = redis::AsyncConnectionConfig::new().set_response_timeout(None);
    redis::Client::open(url)
        .expect("client")
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .expect("connection as nowidth")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_not_allowed_emq_width_uses_an_ordinary_queue() {
    let server = start(Options::default());
    let conn = nowidth(&server).await;
    // Each call by a handle of its own, which has not read the width.
    let fresh = || Queue::new(conn.clone(), "plain-acl");
    let q = fresh();
    match q.width().await {
        Err(Error::Redis(e)) => assert_eq!(e.code(), Some("NOPERM"), "{e}"),
        other => panic!("EMQ.WIDTH refused: {other:?}"),
    }
    assert_eq!(
        q.known_width(),
        None,
        "width() itself learns nothing from a refusal"
    );
    for n in 0..3 {
        let how = Enqueue {
            group: (n > 0).then(|| format!("g{n}")),
            ..Enqueue::default()
        };
        q.enqueue_with(format!("job {n}"), how).await.expect("job");
    }
    let q = fresh();
    let (end, jobs) = q.jobs("pending", "0", None, false).await.expect("jobs");
    assert_eq!((end.as_str(), jobs.len()), ("0", 1), "the default group's");
    assert_eq!(q.known_width(), Some(0), "read as an ordinary queue");
    let (end, groups) = fresh().groups("0", None).await.expect("groups");
    assert_eq!((end.as_str(), groups.len()), ("0", 2));
    fresh()
        .cron("nightly", When::Spec(YEARLY.into()), b"x", None)
        .await
        .expect("cron");
    let crons = fresh().crons().await.expect("crons");
    let names: Vec<&str> = crons.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["nightly"]);
    assert!(fresh().uncron("nightly").await.expect("uncron"));
    let metrics = fresh().metrics().await.expect("metrics");
    assert_eq!(metrics.events["enqueued"], 3);
    // Its worker claims the ordinary queue as ever: the three jobs, each once.
    let acked = Arc::new(AtomicUsize::new(0));
    let counted = acked.clone();
    let worker = echomq_client::Worker::new(conn.clone(), conn.clone(), "plain-acl", move |_| {
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok(None) }
    });
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    acked_reach(&acked, 3).await;
    token.cancel();
    let counts = run
        .await
        .expect("task")
        .expect("the worker runs as nowidth");
    assert_eq!((counts.acked, acked.load(Ordering::SeqCst)), (3, 3));
}

/// Waits (30 s at most) until `acked` reaches `n`.
async fn acked_reach(acked: &AtomicUsize, n: usize) {
    for _ in 0..600 {
        if acked.load(Ordering::SeqCst) >= n {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    }
    panic!("{} of {n} jobs handled", acked.load(Ordering::SeqCst));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_of_a_user_not_allowed_emq_width_claims_a_partitioned_queue_s_partitions() {
    let server = start(Options::default());
    let admin = Queue::new(conn(&server).await, "wide-acl");
    let conn = nowidth(&server).await;
    assert!(admin.span(3).await.expect("span"));
    let mut ids = admin.enqueue_many(["a"; 10]).await.expect("jobs");
    // Its width read refused, the worker claims the queue's own name, whose EMQSPANNED 3 it
    // learns; the width reads refused after it (the watch's, every WATCH_EVERY) keep 3.
    let handled = Arc::new(std::sync::Mutex::new(HashMap::<String, Vec<String>>::new()));
    let acked = Arc::new(AtomicUsize::new(0));
    let (seen, counted) = (handled.clone(), acked.clone());
    let worker = echomq_client::Worker::new(conn.clone(), conn.clone(), "wide-acl", move |job| {
        let mut seen = seen.lock().expect("lock");
        seen.entry(job.id).or_default().push(job.queue);
        counted.fetch_add(1, Ordering::SeqCst);
        async { Ok(None) }
    });
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    acked_reach(&acked, 10).await;
    tokio::time::sleep(echomq_client::worker::WATCH_EVERY + std::time::Duration::from_secs(1))
        .await;
    let limited = Queue::new(conn.clone(), "wide-acl");
    ids.extend(limited.enqueue_many(["b"; 10]).await.expect("jobs"));
    assert_eq!(limited.known_width(), Some(3), "from the refusal");
    acked_reach(&acked, 20).await;
    token.cancel();
    let counts = run
        .await
        .expect("task")
        .expect("the worker runs as nowidth");
    assert_eq!((counts.acked, counts.lost), (20, 0));
    let handled = handled.lock().expect("lock");
    assert_eq!(handled.len(), 20, "each job once");
    for id in &ids {
        assert_eq!(handled[id], [home("wide-acl", 3, id)], "{id}");
    }
}
