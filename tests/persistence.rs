//! Persistence: RDB snapshots, the AOF under kill -9 and under a simulated power loss (a shim,
//! scripts/aof-power-loss-shim.c, keeps the AOF's bytes from the file until the server fsyncs
//! them), AOF rewrites, and an AOF written with the module replayed by a server without it.

use emq_harness as support;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread;
use std::time::Duration;

use redis::cmd;
use support::*;

/// Jobs in every state, none of which the timer will touch for a minute.
fn populate(con: &mut Connection, q: &str) {
    for i in 1..=50u64 {
        enqueue(con, q, &job_id(i), &format!("p{i}\r\n\0"));
    }
    for i in 51..=60u64 {
        enqueue_delayed(con, q, &job_id(i), "later", 60_000);
    }
    let claimed = claim(con, q, &["COUNT", "20", "LEASE", "60000"]).expect("jobs");
    for (id, _, token) in claimed.iter().take(5) {
        let _: i64 = cmd("EMQ.ACK")
            .arg(q)
            .arg(id)
            .arg(token)
            .query(con)
            .expect("ack");
    }
    let _: Vec<String> = cmd("EMQ.MENQUEUE")
        .arg(q)
        .arg("*")
        .arg("a")
        .arg("*")
        .arg("b")
        .query(con)
        .expect("menqueue");
}

fn wait_for(con: &mut Connection, section: &str, field: &str, value: &str) {
    assert!(
        wait_until(Duration::from_secs(30), || info_field(con, section, field)
            .as_deref()
            == Some(value)),
        "{field} never became {value}"
    );
}

fn persistent(appendonly: bool) -> Options {
    let o = Options::default().arg("enable-debug-command", "local");
    if appendonly {
        o.arg("appendonly", "yes").arg("appendfsync", "always")
    } else {
        o
    }
}

#[test]
fn an_rdb_snapshot_restores_the_same_data() {
    let mut server = Server::start(persistent(false));
    let mut con = server.conn();
    populate(&mut con, "rdb");
    let before = digest(&mut con);
    let _: String = cmd("BGSAVE").query(&mut con).expect("bgsave");
    wait_for(&mut con, "persistence", "rdb_bgsave_in_progress", "0");
    wait_for(&mut con, "persistence", "rdb_last_bgsave_status", "ok");
    server.restart(true);
    let mut con = server.conn();
    assert_eq!(digest(&mut con), before);
    let stats = stats(&mut con, "rdb");
    assert_eq!(stats.get("active"), Some(&15), "{stats:?}");
}

/// An AOF server with `appendfsync <policy>`.
fn aof(policy: &str) -> Options {
    Options::default()
        .arg("enable-debug-command", "local")
        .arg("appendonly", "yes")
        .arg("appendfsync", policy)
}

/// A server with `appendfsync <policy>` under the shim: the bytes of its AOF directory reach
/// the file only when the server fsyncs them, so `kill -9` is a power loss for the AOF.
fn under_power_loss(policy: &str) -> Server {
    let shim = preload_shim("aof-power-loss-shim").display().to_string();
    let server = Server::start_with_env(
        aof(policy),
        &[
            ("LD_PRELOAD", shim.as_str()),
            ("ECHOMQ_POWER_LOSS_DIR", "appendonlydir"),
        ],
    );
    let pid = server.pid().expect("a server of our own");
    let maps = std::fs::read_to_string(format!("/proc/{pid}/maps")).expect("the server's maps");
    assert!(
        maps.contains("aof-power-loss-shim.so"),
        "the shim is loaded in the server"
    );
    server
}

/// Enqueues job_id(first), job_id(first + 1), ... on one connection until the server dies,
/// and kills it (SIGKILL) once `at_least` are acknowledged. The enqueues tried, and the
/// acknowledged ids in the order of their replies.
fn enqueue_until_killed(
    server: &mut Server,
    q: &str,
    first: u64,
    at_least: usize,
) -> (u64, Vec<String>) {
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (url, acked, stop, q) = (server.url(), acked.clone(), stop.clone(), q.to_string());
        thread::spawn(move || {
            let mut con = redis::Client::open(url)
                .expect("client")
                .get_connection()
                .expect("conn");
            let mut tried = 0u64;
            for i in first.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                tried += 1;
                let r: redis::RedisResult<i64> = cmd("EMQ.ENQUEUE")
                    .arg(&q)
                    .arg(job_id(i))
                    .arg("x")
                    .query(&mut con);
                match r {
                    Ok(1) => acked.lock().expect("lock").push(job_id(i)),
                    _ => break, // the server died mid-load
                }
            }
            tried
        })
    };
    assert!(wait_until(Duration::from_secs(60), || acked
        .lock()
        .expect("lock")
        .len()
        >= at_least));
    server.kill();
    stop.store(true, Ordering::Relaxed);
    let tried = producer.join().expect("producer");
    let acked = acked.lock().expect("lock").clone();
    (tried, acked)
}

/// Whether each id is pending in `q`.
fn pending(con: &mut Connection, q: &str, ids: &[String]) -> Vec<bool> {
    let mut p = redis::pipe();
    for id in ids {
        p.cmd("ZSCORE").arg(set_key(q, "pending")).arg(id);
    }
    let scores: Vec<Option<f64>> = p.query(con).expect("scores");
    scores.iter().map(Option::is_some).collect()
}

/// The AOF is appended in the order the server acknowledged: what survives is a prefix.
fn assert_a_prefix(found: &[bool]) {
    let kept = found.iter().take_while(|f| **f).count();
    assert!(
        found[kept..].iter().all(|f| !f),
        "the jobs found are the first {kept} acknowledged and no later one"
    );
}

#[test]
fn a_process_killed_with_kill_9_loses_no_acknowledged_job_even_with_appendfsync_no() {
    // kill -9 ends the process, not the kernel: what it wrote stays in the page cache and
    // reaches the file whether or not the server fsyncs (a power loss is the tests below).
    let mut server = Server::start(aof("no"));
    let (tried, acked) = enqueue_until_killed(&mut server, "aof", 1, 2000);
    server.restart(true);
    let found = pending(&mut server.conn(), "aof", &acked);
    let found = found.iter().filter(|f| **f).count();
    println!(
        "RELIABILITY aof-kill-9 tried={tried} acknowledged={} found={found}",
        acked.len()
    );
    assert_eq!(
        found,
        acked.len(),
        "every acknowledged job survived kill -9"
    );
}

/// Enqueues on a server with `appendfsync <policy>` under the power-loss shim until it is
/// killed, restarts it, and prints its figures: the acknowledged jobs, and how many were found
/// (always the first ones acknowledged).
fn power_loss(policy: &str) -> (Vec<String>, usize) {
    let mut server = under_power_loss(policy);
    let (tried, acked) = enqueue_until_killed(&mut server, "aof", 1, 2000);
    server.restart(true);
    let found = pending(&mut server.conn(), "aof", &acked);
    assert_a_prefix(&found);
    let found = found.iter().filter(|f| **f).count();
    println!(
        "RELIABILITY aof-power-loss-{policy} tried={tried} acknowledged={} found={found}",
        acked.len()
    );
    (acked, found)
}

#[test]
fn with_appendfsync_always_every_acknowledged_job_survives_a_power_loss() {
    let (acked, found) = power_loss("always");
    assert_eq!(
        found,
        acked.len(),
        "every acknowledged job survived the power loss"
    );
}

#[test]
fn with_appendfsync_no_a_power_loss_loses_acknowledged_jobs() {
    // The proof that the simulation bites: the same load and kill as with `always` above.
    let (acked, found) = power_loss("no");
    assert!(
        found < acked.len(),
        "a power loss took acknowledged jobs the server never fsynced: {found} of {} found",
        acked.len()
    );
}

#[test]
fn with_appendfsync_everysec_a_power_loss_keeps_what_was_fsynced() {
    let mut server = under_power_loss("everysec");
    let mut con = server.conn();
    enqueue_numbered(&mut con, "aof", 500, "x");
    // The server's background fsync puts the first 500 in the file; then more load, and the cut.
    assert!(
        wait_until(Duration::from_secs(60), || aof_words(&server)
            .contains(&job_id(500))),
        "the first 500 jobs reached the AOF file by an fsync"
    );
    let (tried, acked) = enqueue_until_killed(&mut server, "aof", 501, 2000);
    server.restart(true);
    let mut con = server.conn();
    let first: Vec<String> = (1..=500).map(job_id).collect();
    let found_first = pending(&mut con, "aof", &first);
    assert!(
        found_first.iter().all(|f| *f),
        "every job fsynced before the cut survived"
    );
    let found = pending(&mut con, "aof", &acked);
    assert_a_prefix(&found);
    let found = found.iter().filter(|f| **f).count();
    println!(
        "RELIABILITY aof-power-loss-everysec fsynced_first=500 tried={tried} acknowledged={} found={found}",
        acked.len()
    );
}

#[test]
fn an_aof_rewrite_reloads_identically() {
    let mut server = Server::start(persistent(true));
    let mut con = server.conn();
    populate(&mut con, "rewrite");
    let before = digest(&mut con);
    let _: String = cmd("BGREWRITEAOF").query(&mut con).expect("bgrewriteaof");
    wait_for(&mut con, "persistence", "aof_rewrite_in_progress", "0");
    wait_for(&mut con, "persistence", "aof_last_bgrewrite_status", "ok");
    populate(&mut con, "after-rewrite");
    let before_more = digest(&mut con);
    assert_ne!(before, before_more);
    server.restart(true);
    assert_eq!(digest(&mut server.conn()), before_more);
}

#[test]
fn an_aof_written_with_the_module_loads_without_it() {
    let mut server = Server::start(persistent(true));
    let mut con = server.conn();
    populate(&mut con, "portable");
    for i in 1..=3u64 {
        let _: String = cmd("EMQ.FAIL")
            .arg("portable")
            .arg(job_id(i + 5))
            .arg(1)
            .arg("ERROR")
            .arg("e")
            .query(&mut con)
            .expect("fail");
    }
    let before = digest(&mut con);
    server.restart(false);
    let mut con = server.conn();
    assert!(module_names(&mut con).is_empty(), "no module this time");
    assert_eq!(digest(&mut con), before);
}

#[test]
fn delayed_jobs_and_leases_saved_in_a_snapshot_come_due_after_a_restart() {
    // An RDB load fires no keyspace event, so the timer learns the queues with delayed jobs
    // and leases from the scan after loading; no client command is needed to promote them.
    let mut server = Server::start(persistent(false));
    let mut con = server.conn();
    for i in 1..=3u64 {
        enqueue_delayed(&mut con, "restarted", &job_id(i), "later", 1500);
    }
    for i in 4..=5u64 {
        enqueue(&mut con, "restarted", &job_id(i), "now");
    }
    let claimed = claim(&mut con, "restarted", &["COUNT", "2", "LEASE", "1500"]);
    assert_eq!(claimed.map(|j| j.len()), Some(2));
    let _: String = cmd("SAVE").query(&mut con).expect("save");
    server.restart(true);
    let mut con = server.conn();
    let promoted = wait_until(Duration::from_secs(20), || {
        set_len(&mut con, "restarted", "pending") == 5
    });
    assert!(
        promoted,
        "the timer promoted the saved jobs: pending {}, schedule {}, active {}",
        set_len(&mut con, "restarted", "pending"),
        set_len(&mut con, "restarted", "schedule"),
        set_len(&mut con, "restarted", "active")
    );
    assert_eq!(set_len(&mut con, "restarted", "schedule"), 0);
    assert_eq!(set_len(&mut con, "restarted", "active"), 0);
    assert_eq!(info_int(&mut con, "emq", "emq_promoted"), 5);
}
