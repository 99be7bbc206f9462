//! Claim limits on real servers: a concurrency limit holds under 16 concurrent claimers, a
//! rate limit holds in every window (read back from the event stream's claim times), blocked
//! claimers are woken when room returns (a settle, a raised limit, the window freeing), the
//! limits and their window survive a failover, refusals are typed and write nothing, and a
//! replica without the module ends identical.

use emq_harness as support;

use std::sync::atomic::{AtomicBool, AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::{cmd, Connection, Value};
use support::*;

fn used(con: &mut Connection, q: &str, field: &str) -> Option<i64> {
    limit(con, q, &[])
        .into_iter()
        .find(|(k, _)| k == field)
        .and_then(|(_, v)| v)
}

fn ack(con: &mut Connection, q: &str, id: &str, token: i64) {
    let acked: i64 = cmd("EMQ.ACK")
        .arg(q)
        .arg(id)
        .arg(token)
        .query(con)
        .expect("ack");
    assert_eq!(acked, 1);
}

#[test]
fn sixteen_claimers_never_hold_more_jobs_than_the_concurrency_limit() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("conc");
    const JOBS: i64 = 300;
    enqueue_numbered(&mut con, &q, JOBS as u64, "p");
    limit(&mut con, &q, &["CONCURRENCY", "3"]);
    let acked = Arc::new(AtomicI64::new(0));
    let done = Arc::new(AtomicBool::new(false));
    let workers: Vec<_> = (0..16)
        .map(|w| {
            let (mut c, q, acked) = (server.conn(), q.clone(), acked.clone());
            std::thread::spawn(move || {
                let mut rng = Rng::new(w);
                while acked.load(Ordering::SeqCst) < JOBS {
                    let Some(jobs) = claim(&mut c, &q, &["COUNT", "2", "BLOCK", "200"]) else {
                        continue;
                    };
                    std::thread::sleep(Duration::from_micros(rng.below(2_000)));
                    for (id, _, token) in jobs {
                        ack(&mut c, &q, &id, token);
                        acked.fetch_add(1, Ordering::SeqCst);
                    }
                }
            })
        })
        .collect();
    let sampler = {
        let (mut c, q, done) = (server.conn(), q.clone(), done.clone());
        std::thread::spawn(move || {
            let (mut samples, mut most) = (0, 0);
            while !done.load(Ordering::SeqCst) {
                most = most.max(set_len(&mut c, &q, "active"));
                samples += 1;
            }
            (samples, most)
        })
    };
    for w in workers {
        w.join().expect("worker");
    }
    done.store(true, Ordering::SeqCst);
    let (samples, most) = sampler.join().expect("sampler");
    assert_eq!(
        acked.load(Ordering::SeqCst),
        JOBS,
        "every job was done once"
    );
    assert!(samples > 100, "the sampler looked {samples} times");
    assert!(
        most <= 3,
        "{most} jobs were active at once under a limit of 3"
    );
    assert_eq!(most, 3, "16 claimers kept the limit full");
    assert!(info_int(&mut con, "emq", "emq_limited") > 0);
}

#[test]
fn a_rate_limit_holds_in_every_window_and_the_timer_wakes_the_claimers() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("rate");
    const JOBS: u64 = 40;
    const N: usize = 5;
    const PER: u64 = 300;
    enqueue_numbered(&mut con, &q, JOBS, "p");
    let _: i64 = cmd("EMQ.EVENTS")
        .arg(&q)
        .arg("ON")
        .query(&mut con)
        .expect("events");
    limit(
        &mut con,
        &q,
        &["RATE", &N.to_string(), "PER", &PER.to_string()],
    );
    // The limiter's own log, read as it goes: every claim stays in the window for PER ms, so a
    // look every few ms sees each one, with the time the claim was counted at.
    let done = Arc::new(AtomicBool::new(false));
    let log = {
        let (mut c, key, done) = (server.conn(), set_key(&q, "rate"), done.clone());
        std::thread::spawn(move || {
            let mut seen = std::collections::BTreeMap::new();
            while !done.load(Ordering::SeqCst) {
                let window: Vec<(String, u64)> = cmd("ZRANGE")
                    .arg(&key)
                    .arg(0)
                    .arg(-1)
                    .arg("WITHSCORES")
                    .query(&mut c)
                    .expect("ZRANGE");
                seen.extend(window);
                std::thread::sleep(Duration::from_millis(10));
            }
            seen
        })
    };
    let claimed = Arc::new(AtomicI64::new(0));
    let workers: Vec<_> = (0..8)
        .map(|_| {
            let (mut c, q, claimed) = (server.conn(), q.clone(), claimed.clone());
            std::thread::spawn(move || {
                while claimed.load(Ordering::SeqCst) < JOBS as i64 {
                    // Blocked claims wait for the timer to free the window.
                    if let Some(jobs) = claim(&mut c, &q, &["COUNT", "3", "BLOCK", "200"]) {
                        claimed.fetch_add(jobs.len() as i64, Ordering::SeqCst);
                        for (id, _, token) in jobs {
                            ack(&mut c, &q, &id, token);
                        }
                    }
                }
            })
        })
        .collect();
    for w in workers {
        w.join().expect("worker");
    }
    std::thread::sleep(Duration::from_millis(50));
    done.store(true, Ordering::SeqCst);
    let mut times: Vec<u64> = log.join().expect("log").into_values().collect();
    times.sort_unstable();
    assert_eq!(times.len(), JOBS as usize, "every claim was in the window");
    for (i, t) in times.iter().enumerate() {
        let in_window = times[..=i].iter().filter(|s| **s + PER > *t).count();
        assert!(
            in_window <= N,
            "{in_window} claims in the {PER} ms up to {t}"
        );
    }
    // Each claim has its event in the stream too.
    let entries: Value = cmd("XRANGE")
        .arg(set_key(&q, "events"))
        .arg("-")
        .arg("+")
        .query(&mut con)
        .expect("XRANGE");
    let claims = redis::from_redis_value::<Vec<(String, Vec<String>)>>(entries)
        .expect("entries")
        .into_iter()
        .filter(|e| e.1.get(1).map(String::as_str) == Some("claimed"))
        .count();
    assert_eq!(claims, JOBS as usize, "every claim has its event");
    let span = times[times.len() - 1] - times[0];
    assert!(
        span >= (JOBS / N as u64 - 1) * PER,
        "{JOBS} claims at {N} per {PER} ms took only {span} ms"
    );
}

#[test]
fn room_made_by_a_settle_or_a_raised_limit_wakes_a_blocked_claimer() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("wake");
    enqueue_numbered(&mut con, &q, 3, "p");
    limit(&mut con, &q, &["CONCURRENCY", "1"]);
    let held = claim(&mut con, &q, &["COUNT", "3"]).expect("jobs");
    assert_eq!(held.len(), 1);
    let waiter = blocked_claim(&mut con, server.conn(), &q, 10_000);
    ack(&mut con, &q, &held[0].0, held[0].2);
    let got = waiter.join().expect("waiter").expect("claimed");
    assert_eq!(
        redis::from_redis_value::<Vec<Job>>(got).expect("jobs")[0].0,
        job_id(2)
    );
    let waiter = blocked_claim(&mut con, server.conn(), &q, 10_000);
    assert_eq!(used(&mut con, &q, "active"), Some(1));
    limit(&mut con, &q, &["CONCURRENCY", "2"]);
    let got = waiter.join().expect("waiter").expect("claimed");
    assert_eq!(
        redis::from_redis_value::<Vec<Job>>(got).expect("jobs")[0].0,
        job_id(3)
    );
    let s = stats(&mut con, &q);
    assert_eq!((s["active"], s["concurrency"]), (2, 2));
    assert!(!s.contains_key("rate"), "no rate limit is null");
}

#[test]
fn the_limits_and_the_rate_window_survive_a_failover() {
    let (primary, replica) = primary_and_replica(Options::primary());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "failover-limits";
    enqueue_numbered(&mut p, q, 10, "p");
    limit(
        &mut p,
        q,
        &["RATE", "3", "PER", "600000", "CONCURRENCY", "5"],
    );
    assert_eq!(claim(&mut p, q, &["COUNT", "10"]).expect("jobs").len(), 3);
    wait_caught_up(&mut p, &mut r);
    let _: () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .expect("promote");
    assert_eq!(
        claim(&mut r, q, &["COUNT", "10"]).expect("jobs").len(),
        0,
        "the promoted replica neither resets the budget nor spends it twice"
    );
    assert_eq!(used(&mut r, q, "rate-used"), Some(3));
    assert_eq!(used(&mut r, q, "concurrency"), Some(5));
    limit(&mut r, q, &["RATE", "OFF"]);
    assert_eq!(
        claim(&mut r, q, &["COUNT", "10"]).expect("jobs").len(),
        2,
        "the concurrency limit still holds, with 3 active"
    );
}

#[test]
fn bad_limits_are_refused_with_typed_errors_and_write_nothing() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("badlimit");
    assert_refused(
        &mut con,
        cmd("EMQ.LIMIT").arg(&q),
        &[
            (
                &["CONCURRENCY", "0"][..],
                "ERR CONCURRENCY must be an integer from 1 to 1000000",
            ),
            (&["CONCURRENCY", "-1"], "ERR CONCURRENCY must be"),
            (
                &["RATE", "0", "PER", "1000"],
                "ERR RATE must be an integer from 1 to 10000",
            ),
            (
                &["RATE", "5", "PER", "0"],
                "ERR PER must be an integer from 1 to 86400000",
            ),
            (&["RATE", "5", "PER", "-5"], "ERR PER must be"),
            (
                &["RATE", "5", "EVERY", "10"],
                "ERR syntax error: expected RATE <n> PER <ms>",
            ),
            (
                &["RATE", "5"],
                "ERR syntax error: an option lacks its value",
            ),
            (&["BURST", "5"], "ERR syntax error: expected CONCURRENCY"),
            (
                &["CONCURRENCY", "2", "CONCURRENCY", "3"],
                "ERR syntax error: expected CONCURRENCY",
            ),
            (
                &["OFF", "CONCURRENCY", "2"],
                "ERR syntax error: expected CONCURRENCY",
            ),
        ],
    );
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
    make_string(&mut con, &set_key(&q, "meta"));
    let err = expect_err(&mut con, cmd("EMQ.LIMIT").arg(&q).arg("CONCURRENCY").arg(2));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let _: () = cmd("DEL")
        .arg(set_key(&q, "meta"))
        .query(&mut con)
        .expect("DEL");
    make_string(&mut con, &set_key(&q, "rate"));
    let err = expect_err(
        &mut con,
        cmd("EMQ.LIMIT")
            .arg(&q)
            .arg("RATE")
            .arg(2)
            .arg("PER")
            .arg(10),
    );
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(
        keys_of(&mut con, &q),
        [set_key(&q, "rate")],
        "nothing written"
    );
}

#[test]
fn a_claim_under_a_rate_limit_needs_permission_on_the_window() {
    let server = Server::start_or_external();
    let mut admin = server.conn();
    let q = unique_queue("rateacl");
    enqueue_numbered(&mut admin, &q, 2, "p");
    let pattern = format!("~emq:{{{q}}}:*");
    let not_rate = format!("%R~emq:{{{q}}}:rate");
    let mut worker = user_with(&server, "ratelimited", &["+@all", &pattern]);
    assert_eq!(claim(&mut worker, &q, &[]).expect("jobs").len(), 1);
    limit(&mut admin, &q, &["RATE", "10", "PER", "1000"]);
    let _: () = cmd("ACL")
        .arg("SETUSER")
        .arg("ratelimited")
        .arg("resetkeys")
        .arg(format!("~emq:{{{q}}}:p*"))
        .arg(format!("~emq:{{{q}}}:a*"))
        .arg(format!("~emq:{{{q}}}:s*"))
        .arg(format!("~emq:{{{q}}}:d*"))
        .arg(format!("~emq:{{{q}}}:j*"))
        .arg(format!("~emq:{{{q}}}:m*"))
        .arg(format!("~emq:{{{q}}}:e*"))
        .arg(&not_rate)
        .query(&mut admin)
        .expect("ACL SETUSER");
    let err = expect_err(&mut worker, cmd("EMQ.CLAIM").arg(&q));
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(set_len(&mut admin, &q, "pending"), 1, "nothing claimed");
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "mirrored-limits";
    enqueue_numbered(&mut p, q, 12, "p");
    limit(&mut p, q, &["CONCURRENCY", "4", "RATE", "3", "PER", "200"]);
    let first = claim(&mut p, q, &["COUNT", "10"]).expect("jobs");
    ack(&mut p, q, &first[0].0, first[0].2);
    std::thread::sleep(Duration::from_millis(250));
    assert_eq!(claim(&mut p, q, &["COUNT", "10"]).expect("jobs").len(), 2);
    limit(&mut p, q, &["RATE", "OFF"]);
    assert!(wait_until(Duration::from_secs(5), || set_len(
        &mut p, q, "rate"
    ) == 0));
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn limits_written_by_hand_are_honoured_at_once_in_a_transaction_too() {
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    let q = unique_queue("handlimit");
    enqueue_numbered(&mut con, &q, 10, "p");
    let meta = set_key(&q, "meta");
    let hset = |con: &mut Connection, n: i64| {
        let _: i64 = cmd("HSET")
            .arg(&meta)
            .arg("concurrency")
            .arg(n)
            .query(con)
            .expect("HSET");
    };
    hset(&mut con, 3);
    assert_eq!(
        claim(&mut con, &q, &["COUNT", "10"]).expect("jobs").len(),
        3
    );
    // The same number of fields, another value: read again, not remembered.
    hset(&mut con, 4);
    assert_eq!(
        claim(&mut con, &q, &["COUNT", "10"]).expect("jobs").len(),
        1
    );
    let (first, _, second): (Value, i64, Value) = redis::pipe()
        .atomic()
        .cmd("EMQ.CLAIM")
        .arg(&q)
        .cmd("HSET")
        .arg(&meta)
        .arg("concurrency")
        .arg(6)
        .cmd("EMQ.CLAIM")
        .arg(&q)
        .arg("COUNT")
        .arg(10)
        .query(&mut con)
        .expect("MULTI");
    assert_eq!(first, Value::Array(vec![]), "full at 4");
    let Value::Array(second) = second else {
        panic!("{second:?}")
    };
    assert_eq!(second.len(), 2, "the limit raised inside the transaction");
    let _: i64 = cmd("DEL").arg(&meta).query(&mut con).expect("DEL");
    assert_eq!(
        claim(&mut con, &q, &["COUNT", "10"]).expect("jobs").len(),
        4,
        "the hash deleted by hand: no limit"
    );
}
