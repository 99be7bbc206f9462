//! The Rust client against real servers: producing (minted ids, idempotent retries, batches,
//! typed errors), and the worker (concurrency bounded by the server's own count, a handler
//! outliving its lease kept alive, failures retried then dead, a lost lease never acked, a
//! graceful stop mid-batch losing and repeating nothing), on one server and on a cluster.

mod common;

use emq_harness as support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use common::*;
use std::time::Duration;

use echomq_client::{
    Enqueue, Error, EventKind, EventOutcome, Failure, Job, Queue, SettleAction, Worker, WorkerEvent,
};
use redis::aio::MultiplexedConnection;
use support::{cluster::Cluster, set_len, wait_until, Options};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn producing_with_minted_ids_batches_and_typed_errors() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "orders");
    let id = q.enqueue(b"order 7").await.expect("enqueue");
    let again = Enqueue {
        id: Some(id.clone()),
        ..Enqueue::default()
    };
    assert_eq!(q.enqueue_with(b"order 7", again).await.expect("retry"), id);
    let ids = q
        .enqueue_many((0..2500).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    assert_eq!(ids.len(), 2500);
    let stats = q.stats().await.expect("stats");
    assert_eq!(stats["pending"], Some(2501));
    assert_eq!(stats["concurrency"], None);
    let held = Enqueue {
        unique: Some("welcome:ann".into()),
        unique_for: Some(Duration::from_secs(60)),
        ..Enqueue::default()
    };
    let first = q.enqueue_with(b"hi", held.clone()).await.expect("unique");
    assert_eq!(q.enqueue_with(b"hi", held).await.expect("held"), first);
    assert!(q.cancel(&first).await.expect("cancel"));
    assert_eq!(
        q.job(&id).await.expect("job").expect("a row")["payload"],
        "order 7"
    );
    let kind = Enqueue {
        id: Some("ORD0NgWEfAEJfs".into()),
        ..Enqueue::default()
    };
    assert!(matches!(
        q.enqueue_with(b"x", kind).await,
        Err(Error::Kind(_))
    ));
    let bad = Queue::new(conn(&server).await, "bad{name}");
    assert!(matches!(bad.stats().await, Err(Error::QueueName(_))));
    assert!(matches!(
        q.call("EMQ.STATS", &[b"extra".to_vec()]).await,
        Err(Error::Redis(_))
    ));
    assert!(echomq_client::check_version("echomq:3.0.0").is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_keeps_the_servers_active_count_within_its_concurrency() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "bounded");
    q.enqueue_many((0..200).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    let seen = Arc::new(Mutex::new(Vec::new()));
    let s = seen.clone();
    let worker = worker_of(&server, "bounded", move |job: Job| {
        let s = s.clone();
        async move {
            tokio::time::sleep(Duration::from_millis(5)).await;
            s.lock().expect("lock").push(job.payload);
            Ok(Some(b"done".to_vec()))
        }
    })
    .await
    .concurrency(4);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    let mut most = 0;
    let mut samples = 0;
    while seen.lock().expect("lock").len() < 200 {
        most = most.max(set_len(&mut admin, "bounded", "active"));
        samples += 1;
        tokio::task::yield_now().await;
    }
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(counts.acked, 200);
    assert!(
        samples > 10 && most <= 4,
        "{most} active under a concurrency of 4"
    );
    assert_eq!(set_len(&mut admin, "bounded", "active"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_outliving_its_lease_keeps_it_and_is_acked_once() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "long");
    let id = q.enqueue(b"slow").await.expect("enqueue");
    let worker = worker_of(&server, "long", |_job: Job| async {
        tokio::time::sleep(Duration::from_millis(1500)).await;
        Ok(None)
    })
    .await
    .lease(Duration::from_millis(400));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    assert!(becomes_done(&server, "long", &id));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!((counts.acked, counts.lost), (1, 0));
    assert_eq!(
        support::job_attempts(&mut server.conn(), "long", &id).as_deref(),
        Some("1")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_handler_is_retried_then_dead() {
    let server = start(
        Options::default()
            .arg("emq.max-attempts", "3")
            .arg("emq.backoff-base-ms", "10"),
    );
    let q = Queue::new(conn(&server).await, "dies");
    let id = q.enqueue(b"x").await.expect("enqueue");
    let calls = Arc::new(AtomicUsize::new(0));
    let c = calls.clone();
    let worker = worker_of(&server, "dies", move |_job: Job| {
        c.fetch_add(1, Ordering::SeqCst);
        async { Err(Failure::Error("no stock for sku 42".into())) }
    })
    .await;
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(10), || support::job_state(
        &mut admin, "dies", &id
    )
    .as_deref()
        == Some("dead")));
    token.cancel();
    run.await.expect("task").expect("run");
    assert_eq!(calls.load(Ordering::SeqCst), 3);
    assert_eq!(
        support::row_field(&mut admin, "dies", &id, "error").as_deref(),
        Some("no stock for sku 42")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_lease_is_seen_by_the_handler_and_never_acked() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "stolen");
    let id = q.enqueue(b"x").await.expect("enqueue");
    let url = server.url();
    let worker = worker_of(&server, "stolen", move |job: Job| {
        let url = url.clone();
        async move {
            // The lease runs out under the handler and another attempt takes the job. The
            // lease ends at each try, should a renewal have come between.
            take_over(&url, "stolen", &job.id);
            for _ in 0..100 {
                if job.lease_lost() {
                    break;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            Ok(None)
        }
    })
    .await
    // One slot: while the handler runs, the worker claims nothing, so the only other attempt
    // is the one the handler's claim takes.
    .concurrency(1)
    .lease(Duration::from_millis(300));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    assert!(wait_until(
        Duration::from_secs(10),
        || support::job_attempts(&mut admin, "stolen", &id).as_deref() == Some("2")
    ));
    tokio::time::sleep(Duration::from_millis(800)).await;
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!((counts.acked, counts.lost), (0, 1));
    assert_eq!(
        support::job_state(&mut admin, "stolen", &id).as_deref(),
        Some("active")
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_mid_batch_loses_and_repeats_nothing() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "stop");
    let ids = q
        .enqueue_many((0..300).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    let worker = worker_of(&server, "stop", |_job: Job| async {
        tokio::time::sleep(Duration::from_millis(20)).await;
        Ok(None)
    })
    .await
    .concurrency(8);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(10), || set_len(
        &mut admin, "stop", "pending"
    ) < 250));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!(
        set_len(&mut admin, "stop", "active"),
        0,
        "the running jobs were acked"
    );
    let done = ids
        .iter()
        .filter(|id| support::job_state(&mut admin, "stop", id).as_deref() == Some("done"))
        .count() as u64;
    assert_eq!(done, counts.acked);
    assert_eq!(done as i64 + set_len(&mut admin, "stop", "pending"), 300);
    assert!(
        ids.iter().all(|id| {
            let a = support::job_attempts(&mut admin, "stop", id);
            a.as_deref() == Some("1") || a.as_deref() == Some("0")
        }),
        "no job ran twice"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn queues_on_every_primary_of_a_cluster() {
    let cluster = Cluster::start(3, 0);
    let client = redis::cluster::ClusterClient::new(cluster.urls()).expect("cluster client");
    let conn = || async {
        client
            .get_async_connection()
            .await
            .expect("cluster connection")
    };
    let names: Vec<String> = (0..6).map(|n| format!("orders-{n}")).collect();
    let done = Arc::new(AtomicUsize::new(0));
    let mut runs = Vec::new();
    let mut tokens = Vec::new();
    for name in &names {
        Queue::new(conn().await, name.clone())
            .enqueue_many((0..20).map(|n| format!("{name} {n}")))
            .await
            .expect("batch");
        let d = done.clone();
        let worker = Worker::new(
            conn().await,
            conn().await,
            name.clone(),
            move |_job: Job| {
                let d = d.clone();
                async move {
                    d.fetch_add(1, Ordering::SeqCst);
                    Ok(None)
                }
            },
        );
        tokens.push(worker.shutdown_token());
        runs.push(tokio::spawn(worker.run()));
    }
    for _ in 0..400 {
        if done.load(Ordering::SeqCst) == 120 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    for t in &tokens {
        t.cancel();
    }
    let mut acked = 0;
    for r in runs {
        acked += r.await.expect("task").expect("run").acked;
    }
    assert_eq!(acked, 120);
}

/// Drains `queue` with a worker until every one of `ids` is done (or the time runs out),
/// calling `meanwhile` once a few jobs are done; the jobs' final states.
async fn drain_through(
    cluster: &Cluster,
    queue: &str,
    ids: &[String],
    meanwhile: impl FnOnce(),
) -> Vec<Option<String>> {
    let done = Arc::new(AtomicUsize::new(0));
    let d = done.clone();
    let worker = Worker::new(
        cluster_conn(cluster).await,
        cluster_conn(cluster).await,
        queue,
        move |_job: Job| {
            let d = d.clone();
            async move {
                tokio::time::sleep(Duration::from_millis(5)).await;
                d.fetch_add(1, Ordering::SeqCst);
                Ok(None)
            }
        },
    )
    .concurrency(8)
    .lease(Duration::from_secs(2));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    while done.load(Ordering::SeqCst) < 50 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    meanwhile();
    let q = Queue::new(cluster_conn(cluster).await, queue);
    let mut states = Vec::new();
    for _ in 0..600 {
        states.clear();
        for id in ids {
            states.push(
                q.job(id)
                    .await
                    .ok()
                    .flatten()
                    .and_then(|j| j.get("state").cloned()),
            );
        }
        if states.iter().all(|s| s.as_deref() == Some("done")) {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    token.cancel();
    let _ = run.await;
    states
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_primary_killed_under_load_leaves_every_job_done_once() {
    let cluster = Cluster::start(3, 1);
    let queue = "failover";
    let ids = Queue::new(cluster_conn(&cluster).await, queue)
        .enqueue_many((0..300).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    let slot = echomq::protocol::slot(queue.as_bytes());
    let owner = cluster.owner(slot);
    let replica = cluster.replica_of(owner.port);
    let mut r = cluster.node(replica).conn();
    assert!(
        wait_until(Duration::from_secs(10), || {
            let n: i64 = redis::cmd("DBSIZE").query(&mut r).unwrap_or(0);
            n == 301
        }),
        "replicated before the kill"
    );
    let pid = cluster.node(owner.port).pid().expect("the owner's pid");
    let states = drain_through(&cluster, queue, &ids, || {
        let killed = std::process::Command::new("kill")
            .args(["-9", &pid.to_string()])
            .status()
            .expect("kill");
        assert!(killed.success());
    })
    .await;
    assert!(
        states.iter().all(|s| s.as_deref() == Some("done")),
        "{states:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_goes_on_through_a_slot_migration_of_its_queue() {
    let cluster = Cluster::start(3, 0);
    let queue = "moving";
    let ids = Queue::new(cluster_conn(&cluster).await, queue)
        .enqueue_many((0..300).map(|n| format!("job {n}")))
        .await
        .expect("batch");
    let slot = echomq::protocol::slot(queue.as_bytes());
    let from = cluster.owner(slot);
    let to = cluster.another_primary(&from);
    let states = drain_through(&cluster, queue, &ids, || {
        cluster.move_slot(slot, &from, &to, || {});
    })
    .await;
    assert!(
        states.iter().all(|s| s.as_deref() == Some("done")),
        "{states:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_handler_fails_its_job_and_frees_its_slot() {
    let server = start(
        Options::default()
            .arg("emq.max-attempts", "2")
            .arg("emq.backoff-base-ms", "10"),
    );
    let q = Queue::new(conn(&server).await, "panics");
    let booms = q
        .enqueue_many((0..3).map(|n| format!("boom {n}")))
        .await
        .expect("batch");
    let fine = q.enqueue(b"fine").await.expect("enqueue");
    let worker = worker_of(&server, "panics", |job: Job| async move {
        if job.payload.starts_with(b"boom") {
            panic!(
                "handler blew up on {}",
                String::from_utf8_lossy(&job.payload)
            );
        }
        Ok(None)
    })
    .await
    .concurrency(2);
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    // Six panics (three jobs, two attempts each) against two slots: the worker only gets to
    // the last job if each panic frees its slot.
    let settled = wait_until(Duration::from_secs(20), || {
        support::job_state(&mut admin, "panics", &fine).as_deref() == Some("done")
            && booms
                .iter()
                .all(|id| support::job_state(&mut admin, "panics", id).as_deref() == Some("dead"))
    });
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert!(settled, "{counts:?}");
    assert_eq!((counts.acked, counts.failed, counts.lost), (1, 6, 0));
    for (n, id) in booms.iter().enumerate() {
        assert_eq!(
            support::job_attempts(&mut admin, "panics", id).as_deref(),
            Some("2")
        );
        let error = support::row_field(&mut admin, "panics", id, "error").unwrap_or_default();
        assert!(
            error.contains(&format!("handler blew up on boom {n}")),
            "{error}"
        );
    }
    assert_eq!(set_len(&mut admin, "panics", "active"), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_hook_sees_each_jobs_claim_handler_renewals_and_settle_in_order() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "seen");
    let ids = q.enqueue_many(["slow", "a", "b"]).await.expect("batch");
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let (r, h) = (recorded.clone(), recorded.clone());
    let worker = worker_of(&server, "seen", move |job: Job| {
        let r = r.clone();
        async move {
            // The slow job runs until its lease has been renewed (seen by the hook).
            if job.payload == b"slow" {
                for _ in 0..500 {
                    if events_of(&r, &job.id)
                        .iter()
                        .any(|e| e.kind == EventKind::Renew)
                    {
                        break;
                    }
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
            Ok(None)
        }
    })
    .await
    .name("worker-7")
    .lease(Duration::from_millis(600))
    .on_event(move |e: &WorkerEvent| {
        h.lock().expect("lock").push(e.clone());
        // A hook that panics breaks nothing: counted, and the worker goes on.
        if e.kind == EventKind::HandlerEnd {
            panic!("the hook fails on purpose");
        }
    });
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let mut admin = server.conn();
    assert!(wait_until(Duration::from_secs(20), || ids.iter().all(
        |id| support::job_state(&mut admin, "seen", id).as_deref() == Some("done")
    )));
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    assert_eq!((counts.acked, counts.hook_panics), (3, 3), "{counts:?}");
    for id in &ids {
        let events = events_of(&recorded, id);
        let kinds: Vec<EventKind> = events
            .iter()
            .map(|e| e.kind)
            .filter(|k| *k != EventKind::Renew)
            .collect();
        use EventKind::*;
        assert_eq!(
            kinds,
            [Claim, HandlerStart, HandlerEnd, Settle],
            "{events:#?}"
        );
        // Renewals only while the handler runs.
        let start = events.iter().position(|e| e.kind == HandlerStart);
        let end = events.iter().position(|e| e.kind == HandlerEnd);
        assert!(events
            .iter()
            .enumerate()
            .filter(|(_, e)| e.kind == Renew)
            .all(|(i, _)| Some(i) > start && Some(i) < end));
        let mut last = 0;
        for e in &events {
            assert_eq!((e.worker.as_str(), e.queue.as_str()), ("worker-7", "seen"));
            assert_eq!(e.token, 1);
            assert_eq!(e.outcome, EventOutcome::Ok, "{e:?}");
            assert!(
                e.sent_ns >= last && e.answered_ns >= e.sent_ns,
                "{events:#?}"
            );
            last = e.answered_ns;
        }
        let settle = events.last().expect("a settle");
        assert_eq!(
            (settle.action, settle.replicated, settle.error.as_deref()),
            (Some(SettleAction::Ack), None, None)
        );
    }
    let renewals = |id: &str| {
        events_of(&recorded, id)
            .iter()
            .filter(|e| e.kind == EventKind::Renew)
            .count()
    };
    assert!(renewals(&ids[0]) >= 1, "the slow job's lease was renewed");
    // Two workers named by default are told apart.
    let named = |w: Worker<MultiplexedConnection, _>| w.name;
    let handler = |_job: Job| async { Ok(None) };
    let (a, b) = (
        named(worker_of(&server, "seen", handler).await),
        named(worker_of(&server, "seen", handler).await),
    );
    assert_ne!(a, b);
    assert!(a.contains(&format!(":{}:", std::process::id())), "{a}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settle_after_the_lease_was_lost_is_a_refused_event() {
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "refused");
    let id = q.enqueue(b"x").await.expect("enqueue");
    let url = server.url();
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let h = recorded.clone();
    let worker = worker_of(&server, "refused", move |job: Job| {
        let url = url.clone();
        async move {
            // The lease runs out under the handler and a claim of the test takes the job;
            // the handler then returns before any renewal (a minute's lease renews every 20
            // seconds), so its acknowledgement is what learns the lease was lost.
            take_over(&url, "refused", &job.id);
            Ok(None)
        }
    })
    .await
    .concurrency(1)
    .lease(Duration::from_secs(60))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    let settled = || {
        events_of(&recorded, &id)
            .into_iter()
            .find(|e| e.kind == EventKind::Settle)
    };
    for _ in 0..500 {
        if settled().is_some() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    token.cancel();
    let counts = run.await.expect("task").expect("run");
    let settle = settled().expect("a settle event");
    assert_eq!(
        (settle.token, settle.action, settle.outcome),
        (1, Some(SettleAction::Ack), EventOutcome::Refused)
    );
    let error = settle.error.unwrap_or_default();
    assert!(error.contains("EMQLEASE"), "{error}");
    assert_eq!((counts.acked, counts.lost), (0, 1));
    let mut admin = server.conn();
    assert_eq!(
        support::job_attempts(&mut admin, "refused", &id).as_deref(),
        Some("2"),
        "the test's claim holds it"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_enqueue_waiting_for_a_replica_is_confirmed_by_one_and_not_without() {
    let (primary, replica) = support::primary_and_replica(Options::default());
    let q = Queue::new(conn(&primary).await, "held").wait_replicas(1, Duration::from_secs(10));
    let id = q.enqueue(b"kept").await.expect("confirmed by the replica");
    // Confirmed: the replica holds the job already, with no wait on our side.
    let mut r = replica.conn();
    assert_eq!(
        support::job_state(&mut r, "held", &id).as_deref(),
        Some("pending")
    );
    let ids = q
        .enqueue_many((0..1500).map(|n| format!("job {n}")))
        .await
        .expect("confirmed");
    assert_eq!(
        support::job_state(&mut r, "held", &ids[1499]).as_deref(),
        Some("pending")
    );
    // A server with no replica: WAIT answers 0, and the write stands on the primary alone.
    let alone = start(Options::default());
    let q = Queue::new(conn(&alone).await, "alone").wait_replicas(1, Duration::from_millis(50));
    let err = q.enqueue(b"at risk").await.expect_err("not replicated");
    let Error::NotReplicated {
        ids,
        replicas,
        wanted,
        enqueued,
    } = err
    else {
        panic!("{err:?}");
    };
    assert_eq!((ids.len(), replicas, wanted), (1, 0, 1));
    assert_eq!(ids, enqueued);
    let mut a = alone.conn();
    assert_eq!(
        support::job_state(&mut a, "alone", &ids[0]).as_deref(),
        Some("pending"),
        "taken by the primary"
    );
    let err = q
        .enqueue_many((0..1500).map(|n| format!("job {n}")))
        .await
        .expect_err("not replicated");
    let Error::NotReplicated { ids, enqueued, .. } = err else {
        panic!("{err:?}");
    };
    assert_eq!((ids.len(), enqueued.len()), (1500, 1500));
    assert_eq!(set_len(&mut a, "alone", "pending"), 1501);
    // Without wait_replicas no WAIT is sent.
    let plain = Queue::new(conn(&alone).await, "alone");
    plain.enqueue(b"plain").await.expect("no wait");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_workers_settles_report_whether_replicas_confirmed_them() {
    let (primary, _replica) = support::primary_and_replica(Options::default());
    let alone = start(Options::default());
    for (server, want) in [(&primary, true), (&alone, false)] {
        let q = Queue::new(conn(server).await, "waits");
        let ok = q.enqueue(b"ok").await.expect("enqueue");
        let bad = q.enqueue(b"bad").await.expect("enqueue");
        let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
        let h = recorded.clone();
        let worker = worker_of(server, "waits", |job: Job| async move {
            match job.payload.as_slice() {
                // Retried in an hour: settled once within the test.
                b"bad" => Err(Failure::Retry(
                    Duration::from_secs(3600),
                    "failed on purpose".into(),
                )),
                _ => Ok(None),
            }
        })
        .await
        .wait_replicas(1, Duration::from_millis(if want { 10_000 } else { 50 }))
        .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
        let token = worker.shutdown_token();
        let run = tokio::spawn(worker.run());
        let mut admin = server.conn();
        assert!(wait_until(Duration::from_secs(20), || {
            let settles = recorded
                .lock()
                .expect("lock")
                .iter()
                .filter(|e| e.kind == EventKind::Settle)
                .count();
            settles == 2
        }));
        token.cancel();
        let counts = run.await.expect("task").expect("run");
        assert_eq!((counts.acked, counts.retried), (1, 1), "{counts:?}");
        for (id, action) in [(&ok, SettleAction::Ack), (&bad, SettleAction::Fail)] {
            let settle = events_of(&recorded, id)
                .into_iter()
                .find(|e| e.kind == EventKind::Settle)
                .expect("a settle");
            assert_eq!(
                (settle.action, settle.outcome, settle.replicated),
                (Some(action), EventOutcome::Ok, Some(want)),
                "{settle:?}"
            );
        }
        // Reported, not retried: the jobs were settled once either way.
        assert_eq!(
            support::job_state(&mut admin, "waits", &ok).as_deref(),
            Some("done")
        );
        assert_eq!(
            support::job_attempts(&mut admin, "waits", &bad).as_deref(),
            Some("1")
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_cluster_the_wait_reaches_the_primary_that_took_the_write() {
    let cluster = Cluster::start(3, 1);
    let queue = "routed";
    let owner = cluster.owner(echomq::protocol::slot(queue.as_bytes()));
    // `WAIT` alone would go to every primary (the cluster client's rule for it); pipelined
    // behind the write, it goes where the write goes.
    let q =
        Queue::new(cluster_conn(&cluster).await, queue).wait_replicas(1, Duration::from_secs(10));
    let id = q
        .enqueue(b"x")
        .await
        .expect("confirmed by the owner's replica");
    let recorded: Recorded = Arc::new(Mutex::new(Vec::new()));
    let h = recorded.clone();
    let worker = Worker::new(
        cluster_conn(&cluster).await,
        cluster_conn(&cluster).await,
        queue,
        |_job: Job| async { Ok(None) },
    )
    .wait_replicas(1, Duration::from_secs(10))
    .on_event(move |e: &WorkerEvent| h.lock().expect("lock").push(e.clone()));
    let token = worker.shutdown_token();
    let run = tokio::spawn(worker.run());
    for _ in 0..500 {
        if events_of(&recorded, &id)
            .iter()
            .any(|e| e.kind == EventKind::Settle)
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    token.cancel();
    assert_eq!(run.await.expect("task").expect("run").acked, 1);
    let settle = events_of(&recorded, &id)
        .into_iter()
        .find(|e| e.kind == EventKind::Settle)
        .expect("a settle");
    assert_eq!(settle.replicated, Some(true), "{settle:?}");
    // Two WAITs (the enqueue's and the settle's), both on the owner.
    let waits = |port: u16| {
        let stats: String = redis::cmd("INFO")
            .arg("commandstats")
            .query(&mut cluster.node(port).conn())
            .expect("INFO");
        stats
            .lines()
            .find_map(|l| l.strip_prefix("cmdstat_wait:calls="))
            .and_then(|v| v.split(',').next()?.parse::<u64>().ok())
            .unwrap_or(0)
    };
    for node in cluster.topology().iter().filter(|n| n.primary) {
        let want = if node.port == owner.port { 2 } else { 0 };
        assert_eq!(waits(node.port), want, "primary {}", node.port);
    }
}

/// Ends the lease of job `id` of `queue` (its deadline moved to 0) and claims it, as another
/// worker would once it ran out; the lease is ended again at each try, should a renewal come
/// between.
fn take_over(url: &str, queue: &str, id: &str) {
    let mut admin = redis::Client::open(url)
        .expect("client")
        .get_connection()
        .expect("conn");
    let taken = wait_until(Duration::from_secs(5), || {
        let _: i64 = redis::cmd("ZADD")
            .arg(format!("emq:{{{queue}}}:active"))
            .arg("XX")
            .arg(0)
            .arg(id)
            .query(&mut admin)
            .expect("zadd");
        support::claim(&mut admin, queue, &[]).is_some_and(|j| !j.is_empty())
    });
    assert!(taken, "{queue}/{id} taken over");
}
