//! Effects skipped while nothing can receive them (`src/host/propagate.rs`, `src/runtime/effects.rs`): a primary alone does
//! not pay for replication, and every way something can start receiving — a replica
//! attaching, a replica resuming from the backlog, AOF turned on at runtime, a restart with
//! replication history — still gets every write. Each test first checks that the scenario
//! it needs really happened (gate closed, partial resync, ...), so a pass means something.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

fn effects_replicated(con: &mut Connection) -> i64 {
    info_int(con, "emq", "emq_effects_replicated")
}

/// Waits until the once-a-second probe has closed the gate (a primary alone).
fn wait_gate_closed(con: &mut Connection) {
    assert!(
        wait_until(Duration::from_secs(10), || effects_replicated(con) == 0),
        "a primary with no replica, no backlog and no AOF stops replicating effects"
    );
}

/// With `replica` paused (SIGSTOP) and gone from the primary: waits for the probe, checks that
/// the backlog alone keeps the gate open, writes jobs the replica has never seen, resumes
/// it, and checks that it resynchronized from the backlog (a partial resync).
fn resume_from_the_backlog(primary: &Server, replica: &Server, q: &str) {
    let mut p = primary.conn();
    // Long enough for the probe to run with no replica connected.
    std::thread::sleep(Duration::from_millis(2500));
    assert_eq!(info_int(&mut p, "replication", "connected_slaves"), 0);
    assert_eq!(info_int(&mut p, "replication", "repl_backlog_active"), 1);
    assert_eq!(
        effects_replicated(&mut p),
        1,
        "a backlog keeps effects replicated"
    );
    let partial_before = info_int(&mut p, "stats", "sync_partial_ok");
    write_jobs(&mut p, q, 1_000, 100);
    replica.signal("-CONT");
    assert!(
        wait_until(Duration::from_secs(30), || info_int(
            &mut p,
            "stats",
            "sync_partial_ok"
        ) > partial_before),
        "the replica resumed from the backlog\nprimary: {}\nreplica: {}",
        primary.log_tail(),
        replica.log_tail()
    );
}

/// The probe's fallback never fired: every path to a listener opened the gate before it ran.
fn assert_gate_opened_in_time(primary: &Server) {
    let log = std::fs::read_to_string(&primary.log).expect("the primary's log");
    assert!(
        !log.contains("effects unreplicated"),
        "the probe found a listener the hooks missed:\n{log}"
    );
}

/// `n` jobs with ids from `first`, one `EMQ.ENQUEUE` each, and one `EMQ.MENQUEUE` of five.
fn write_jobs(con: &mut Connection, q: &str, first: u64, n: u64) {
    for i in first..first + n {
        assert_eq!(enqueue(con, q, &job_id(i), &format!("p{i}")), 1);
    }
    let mut batch = cmd("EMQ.MENQUEUE");
    batch.arg(q);
    for i in 0..5 {
        batch.arg(job_id(1_000_000 + first + i)).arg("batch");
    }
    let _: Vec<i64> = batch.query(con).expect("menqueue");
}

#[test]
fn a_primary_alone_still_counts_every_change_for_its_save_points() {
    let primary = Server::start(Options::primary());
    let mut p = primary.conn();
    wait_gate_closed(&mut p);
    let q = unique_queue("dirty");
    let before = info_int(&mut p, "persistence", "rdb_changes_since_last_save");
    write_jobs(&mut p, &q, 1, 10);
    let closed = info_int(&mut p, "persistence", "rdb_changes_since_last_save") - before;

    // The same writes with a replica attached, when every effect goes to RM_Replicate.
    let replica = Server::replica_of(&primary, Options::without_module());
    let mut r = replica.conn();
    wait_link_up(&mut r);
    assert_eq!(effects_replicated(&mut p), 1);
    let q2 = unique_queue("dirty");
    let before = info_int(&mut p, "persistence", "rdb_changes_since_last_save");
    write_jobs(&mut p, &q2, 1, 10);
    let open = info_int(&mut p, "persistence", "rdb_changes_since_last_save") - before;

    // One change per effect: HSET + ZADD per job, five HSETs and one ZADD for the batch.
    assert_eq!(closed, 10 * 2 + 5 + 1);
    assert_eq!(open, closed);
}

#[test]
fn a_replica_attaching_after_a_quiet_spell_gets_every_write() {
    late_replica(false, true);
}

/// With `emq.learn-foreign-writes no` outside a cluster there is no command filter to see the
/// `SYNC`: the fork of the replica's snapshot opens the gate. A second's diskless delay has
/// the replica wait for that fork while the writer writes, and the probe may see it waiting.
#[test]
fn without_the_command_filter_the_snapshot_s_fork_opens_the_gate() {
    late_replica(false, false);
}

/// Valkey 8's dual-channel replication: the snapshot comes over a second connection, which
/// starts with its own `SYNC`, while the primary keeps the stream for the main one. Every
/// Valkey `make test` runs has it; Redis 7.0 has not, and `make test-redis7` skips this test.
#[test]
fn a_dual_channel_replica_attaching_late_gets_every_write() {
    let probe = Server::start(Options::without_module());
    let known: redis::RedisResult<Vec<String>> = cmd("CONFIG")
        .arg("GET")
        .arg("dual-channel-replication-enabled")
        .query(&mut probe.conn());
    assert!(
        known.is_ok_and(|v| !v.is_empty()),
        "{} has no dual-channel replication (Valkey 8.0 and later): this test cannot run on it",
        server_binary()
    );
    late_replica(true, true);
    late_replica(true, false);
}

/// A replica attaches to a primary whose gate closed, while a writer writes, and ends with
/// every job; `filtered`: the primary has its command filter (the default).
fn late_replica(dual_channel: bool, filtered: bool) {
    let (mut primary_options, mut replica_options) =
        (Options::primary(), Options::without_module());
    if !filtered {
        primary_options = primary_options
            .arg("emq.learn-foreign-writes", "no")
            .arg("repl-diskless-sync", "yes")
            .arg("repl-diskless-sync-delay", "1");
    }
    if dual_channel {
        primary_options = primary_options
            .arg("repl-diskless-sync", "yes")
            .arg("dual-channel-replication-enabled", "yes");
        replica_options = replica_options.arg("dual-channel-replication-enabled", "yes");
    }
    let primary = Server::start(primary_options);
    let mut p = primary.conn();
    wait_gate_closed(&mut p);
    let q = unique_queue("late");
    write_jobs(&mut p, &q, 1, 200);

    if !filtered {
        // Nothing written since the probe's last look: it leaves the gate closed until the
        // fork opens it, and the writes just after the link is up show that it did.
        std::thread::sleep(Duration::from_millis(1500));
    }

    let replica = Server::replica_of(&primary, replica_options);
    // Writes while the replica attaches and loads its snapshot.
    let writer = filtered.then(|| {
        let url = primary.url();
        let q = q.clone();
        std::thread::spawn(move || {
            let mut con = redis::Client::open(url)
                .and_then(|c| c.get_connection())
                .expect("connect");
            write_jobs(&mut con, &q, 10_000, 300);
        })
    });
    let mut r = replica.conn();
    wait_link_up(&mut r);
    let written_while_attaching = match writer {
        Some(writer) => {
            writer.join().expect("writer");
            300 + 5
        }
        None => 0,
    };
    write_jobs(&mut p, &q, 20_000, 50);
    assert_eq!(effects_replicated(&mut p), 1);
    wait_caught_up(&mut p, &mut r);
    let pending = set_len(&mut r, &q, "pending");
    assert_eq!(pending, 200 + 50 + 2 * 5 + written_while_attaching);
    assert_eq!(digest(&mut p), digest(&mut r));
    if filtered {
        assert_gate_opened_in_time(&primary);
    }
}

#[test]
fn a_replica_resuming_from_the_backlog_misses_nothing() {
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("resume");
    write_jobs(&mut p, &q, 1, 50);
    wait_caught_up(&mut p, &mut r);

    // The replica goes away for a while (stopped, its link cut); the primary keeps its
    // backlog for it.
    replica.signal("-STOP");
    let _: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("replica")
        .query(&mut p)
        .expect("client kill");
    resume_from_the_backlog(&primary, &replica, &q);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
    assert_gate_opened_in_time(&primary);
}

#[test]
fn aof_turned_on_at_runtime_receives_every_write() {
    let mut server = Server::start(Options::primary());
    let mut con = server.conn();
    wait_gate_closed(&mut con);
    let q = unique_queue("aof");
    write_jobs(&mut con, &q, 1, 20);
    config_set(&mut con, "appendfsync", "always");
    config_set(&mut con, "appendonly", "yes");
    write_jobs(&mut con, &q, 100, 20);
    assert!(
        wait_until(Duration::from_secs(30), || {
            info_field(&mut con, "persistence", "aof_rewrite_in_progress").as_deref() == Some("0")
                && info_field(&mut con, "persistence", "aof_rewrite_scheduled").as_deref()
                    == Some("0")
        }),
        "the first AOF rewrite finished"
    );
    // AOF alone does not open the gate: each write reads the AOF state itself.
    wait_gate_closed(&mut con);
    write_jobs(&mut con, &q, 200, 20);
    let before = digest(&mut con);

    server.set_option("appendonly", "yes");
    server.restart(false);
    let mut con = server.conn();
    assert_eq!(digest(&mut con), before);
    let pending = set_len(&mut con, &q, "pending");
    assert_eq!(pending, 3 * 20 + 3 * 5);
}

#[test]
fn a_primary_restarted_with_replication_history_keeps_replicating() {
    let (mut primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("restart");
    write_jobs(&mut p, &q, 1, 50);
    wait_caught_up(&mut p, &mut r);
    // The replica waits, stopped, while the primary saves and restarts. The snapshot carries
    // the replication id and offset, so the restarted primary has a backlog from its first
    // moment, and the replica can resume from it.
    replica.signal("-STOP");
    let _: String = cmd("SAVE").query(&mut p).expect("save");
    primary.restart(true);
    resume_from_the_backlog(&primary, &replica, &q);
    let mut p = primary.conn();
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
    assert_gate_opened_in_time(&primary);
}

#[test]
fn commands_clients_poll_leave_the_gate_closed() {
    let server = Server::start(Options::primary().arg("emq.learn-foreign-writes", "yes"));
    let mut con = server.conn();
    wait_gate_closed(&mut con);
    let _: Vec<String> = cmd("CONFIG")
        .arg("GET")
        .arg("maxmemory")
        .query(&mut con)
        .expect("config get");
    config_set(&mut con, "maxmemory-samples", "5");
    let _: redis::RedisResult<redis::Value> = cmd("CLUSTER").arg("INFO").query(&mut con);
    let _: redis::Value = cmd("ROLE").query(&mut con).expect("role");
    assert_eq!(effects_replicated(&mut con), 0);
    // While a command that can start replication opens it at once.
    let _: String = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut con)
        .expect("replicaof no one");
    assert_eq!(effects_replicated(&mut con), 1);
}

/// `valkey-cli --replica` attaches with a plain `SYNC` and prints the stream it receives.
#[test]
fn a_sync_client_receives_the_effects_at_once() {
    use std::io::BufRead;
    let primary = Server::start(Options::primary());
    let mut p = primary.conn();
    wait_gate_closed(&mut p);
    let cli = std::env::var("VALKEY_CLI").unwrap_or_else(|_| "valkey-cli".to_string());
    let mut child = std::process::Command::new(&cli)
        .args(["-p", &primary.port.to_string(), "--replica"])
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn the cli");
    // Progress goes to stderr, the received commands to stdout: one channel for both.
    let (tx, rx) = std::sync::mpsc::channel::<String>();
    let out = child.stdout.take().expect("stdout");
    let err = child.stderr.take().expect("stderr");
    for stream in [
        Box::new(out) as Box<dyn std::io::Read + Send>,
        Box::new(err) as Box<dyn std::io::Read + Send>,
    ] {
        let tx = tx.clone();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stream)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
    }
    let wait_for = |what: &str| {
        let deadline = std::time::Instant::now() + Duration::from_secs(20);
        while let Some(left) = deadline.checked_duration_since(std::time::Instant::now()) {
            match rx.recv_timeout(left) {
                Ok(line) if line.contains(what) => return true,
                Ok(_) => {}
                Err(_) => return false,
            }
        }
        false
    };
    assert!(wait_for("Logging commands"), "the cli finished its sync");
    let q = unique_queue("sync");
    let id = job_id(42);
    enqueue(&mut p, &q, &id, "p");
    let found = wait_for(&format!("\"ZADD\",\"emq:{{{q}}}:pending\",\"0\",\"{id}\""));
    let _ = child.kill();
    let _ = child.wait();
    assert!(found, "the ZADD effect reached the SYNC client");
    assert_gate_opened_in_time(&primary);
}
