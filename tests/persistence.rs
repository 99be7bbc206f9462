//! Persistence: RDB snapshots, the AOF under kill -9, AOF rewrites, and an AOF written with the
//! module replayed by a server without it (replication by effect).

mod support;

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

#[test]
fn the_aof_keeps_every_acknowledged_job_through_kill_9() {
    let mut server = Server::start(persistent(true));
    let acked = Arc::new(Mutex::new(Vec::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (url, acked, stop) = (server.url(), acked.clone(), stop.clone());
        thread::spawn(move || {
            let mut con = redis::Client::open(url)
                .expect("client")
                .get_connection()
                .expect("conn");
            let mut tried = 0u64;
            for i in 1.. {
                if stop.load(Ordering::Relaxed) {
                    break;
                }
                tried += 1;
                let r: redis::RedisResult<i64> = cmd("EMQ.ENQUEUE")
                    .arg("aof")
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
    assert!(wait_until(Duration::from_secs(20), || acked
        .lock()
        .expect("lock")
        .len()
        >= 2000));
    server.kill();
    stop.store(true, Ordering::Relaxed);
    let tried = producer.join().expect("producer");
    server.restart(true);
    let mut con = server.conn();
    let acked = acked.lock().expect("lock").clone();
    let mut p = redis::pipe();
    for id in &acked {
        p.cmd("ZSCORE").arg(set_key("aof", "pending")).arg(id);
    }
    let scores: Vec<Option<f64>> = p.query(&mut con).expect("scores");
    let found = scores.iter().filter(|s| s.is_some()).count();
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
