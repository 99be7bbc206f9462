//! Replication by effect (protocol.md §5): a replica *without* the module follows the primary to the
//! same data, and refusals and duplicates propagate nothing.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Value};
use support::*;

fn start_pair() -> (Server, Server) {
    primary_and_replica(Options::without_module())
}

/// A module-less primary whose `native` command is renamed `emq`, so that it sends an EchoMQ
/// command down its replication link, and a replica with the module, its link up.
fn primary_sending(native: &str, emq: &str) -> (Server, Server) {
    let mut opts = Options::without_module().arg("repl-diskless-sync-delay", "0");
    opts.args
        .extend(["--rename-command", native, emq].map(String::from));
    let primary = Server::start(opts);
    let replica = Server::replica_of(&primary, Options::default());
    wait_link_up(&mut replica.conn());
    (primary, replica)
}

#[test]
fn a_replica_without_the_module_reaches_the_same_digest() {
    let (primary, replica) = start_pair();
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("repl");
    let mut minted = Vec::new();
    for i in 0..200u64 {
        enqueue(&mut p, &q, &job_id(i * 31 + 1), &format!("p{i}\r\n\0"));
        let id: String = cmd("EMQ.ENQUEUE")
            .arg(&q)
            .arg("*")
            .arg(vec![b'x'; (i as usize * 3) % 200])
            .query(&mut p)
            .expect("mint");
        minted.push(id);
    }
    wait_caught_up(&mut p, &mut r);
    let d = digest(&mut p);
    assert_ne!(d, "0".repeat(40), "the primary holds data");
    assert_eq!(d, digest(&mut r));
    // Minted ids reach the replica as resolved values.
    for id in minted.iter().take(5) {
        assert_eq!(job_state(&mut r, &q, id).as_deref(), Some("pending"));
    }
    assert!(
        module_names(&mut r).is_empty(),
        "the replica really runs without the module"
    );
}

#[test]
fn refusals_and_duplicates_propagate_nothing() {
    let (primary, replica) = start_pair();
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("quiet");
    enqueue(&mut p, &q, &job_id(1), "x");
    wait_caught_up(&mut p, &mut r);
    let before = info_int(&mut p, "replication", "master_repl_offset");
    enqueue(&mut p, &q, &job_id(1), "again");
    let _ = expect_err(
        &mut p,
        cmd("EMQ.ENQUEUE").arg(&q).arg("ORD0NgWEfAEJfs").arg("x"),
    );
    let _ = expect_err(
        &mut p,
        cmd("EMQ.ENQUEUE").arg("a b").arg(job_id(2)).arg("x"),
    );
    let _: String = cmd("EMQ.KEY")
        .arg(&q)
        .arg("pending")
        .query(&mut p)
        .expect("key");
    assert_eq!(
        info_int(&mut p, "replication", "master_repl_offset"),
        before,
        "nothing was written to the replication stream"
    );
}

#[test]
fn the_stream_carries_hset_and_zadd_in_one_transaction() {
    // The AOF receives the same stream as replicas; read it back from a server with AOF on.
    let q = unique_queue("stream");
    let id = job_id(5);
    let aof_server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut a = aof_server.conn();
    enqueue(&mut a, &q, &id, "body");
    let words = aof_words(&aof_server);
    let mut words: Vec<&str> = words.iter().map(String::as_str).collect();
    let start = words
        .iter()
        .position(|w| *w == "MULTI")
        .expect("MULTI in the AOF");
    if words[start + 1..].starts_with(&["SELECT", "0"]) {
        words.drain(start + 1..start + 3);
    }
    assert_eq!(
        &words[start..start + 14],
        &[
            "MULTI",
            "HSET",
            &row_key(&q, &id),
            "state",
            "pending",
            "attempts",
            "0",
            "payload",
            "body",
            "ZADD",
            &set_key(&q, "pending"),
            "0",
            &id,
            "EXEC",
        ],
    );
    assert!(
        !words.iter().any(|w| w.eq_ignore_ascii_case("EMQ.ENQUEUE")),
        "effects, not the command, are persisted"
    );
}

#[test]
fn the_whole_lifecycle_replicates_to_a_replica_with_the_module() {
    // The replica loads the module too: its timer must stay idle and its data follow the
    // primary's effects exactly, including timer promotions and expired leases.
    let (primary, replica) = primary_and_replica(Options::learning());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("life");
    enqueue_numbered(&mut p, &q, 40, "x");
    for i in 41..=50u64 {
        enqueue_delayed(&mut p, &q, &job_id(i), "later", 150);
    }
    let claimed = claim(&mut p, &q, &["COUNT", "30", "LEASE", "200"]).expect("jobs");
    for (n, (id, _, token)) in claimed.iter().enumerate() {
        match n % 3 {
            0 => {
                let _: i64 = cmd("EMQ.ACK")
                    .arg(&q)
                    .arg(id)
                    .arg(token)
                    .query(&mut p)
                    .expect("ack");
            }
            1 => {
                let _: String = cmd("EMQ.FAIL")
                    .arg(&q)
                    .arg(id)
                    .arg(token)
                    .arg("ERROR")
                    .arg("e")
                    .arg("RETRY-IN")
                    .arg(100)
                    .query(&mut p)
                    .expect("fail");
            }
            _ => {} // left to expire
        }
    }
    let _: i64 = cmd("EMQ.CANCEL")
        .arg(&q)
        .arg(job_id(35))
        .query(&mut p)
        .expect("cancel");
    // A queue whose job stays scheduled through the test.
    let later = unique_queue("life-later");
    enqueue_delayed(&mut p, &later, &job_id(1), "in an hour", 3_600_000);
    // Let the delayed jobs come due and the leases expire, promoted by the primary's timer.
    std::thread::sleep(Duration::from_millis(600));
    let stats = stats(&mut p, &q);
    assert_eq!(
        stats["active"], 0,
        "expired leases were reclaimed: {stats:?}"
    );
    assert!(stats["pending"] >= 20, "{stats:?}");
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
    let promoted = info_int(&mut r, "emq", "emq_promoted");
    assert_eq!(promoted, 0, "the replica's timer never writes");
    // ... but it already knows the queues that have scheduled or active jobs, from the effects
    // it replayed, should it be promoted; and has forgotten those that no longer have any.
    let timed = |con: &mut Connection, q: &str| {
        let n: i64 = cmd("EXISTS")
            .arg(set_key(q, "schedule"))
            .arg(set_key(q, "active"))
            .query(con)
            .expect("exists");
        n > 0
    };
    assert!(timed(&mut p, &later));
    let expected = [&q, &later].iter().filter(|q| timed(&mut p, q)).count() as i64;
    assert_eq!(
        info_int(&mut r, "emq", "emq_watched_queues"),
        expected,
        "the replica watches the queues with timed jobs, learned from the stream"
    );
}

#[test]
fn a_read_only_replica_refuses_every_echomq_write_and_answers_its_reads() {
    // A replica with the module, read-only as replicas are by default: every EchoMQ command
    // that writes is refused with the server's READONLY, a blocking claim included, and the
    // replica's data stays the primary's; the reads and the pure commands answer.
    let (primary, replica) = primary_and_replica(Options::default());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "orders";
    enqueue(&mut p, q, &job_id(1), "x");
    let claimed = claim(&mut p, q, &[]).expect("jobs");
    let (id, token) = (claimed[0].0.clone(), claimed[0].2.to_string());
    wait_caught_up(&mut p, &mut r);
    let before = digest(&mut r);
    let (parent, child) = (job_id(900), job_id(901));
    let writes: [(&str, Vec<&str>); 22] = [
        ("emq.enqueue", vec![q, "*", "y"]),
        ("emq.menqueue", vec![q, "*", "y", "*", "z"]),
        ("emq.claim", vec![q, "BLOCK", "0"]),
        ("emq.renew", vec![q, &id, &token, "1000"]),
        ("emq.ack", vec![q, &id, &token]),
        ("emq.mack", vec![q, &id, &token, "CLAIM", "1"]),
        ("emq.fail", vec![q, &id, &token]),
        ("emq.cancel", vec![q, &id]),
        ("emq.requeue", vec![q, &id]),
        ("emq.requeue", vec![q, "DEAD"]),
        ("emq.purge", vec![q, "pending"]),
        ("emq.pause", vec![q]),
        ("emq.resume", vec![q]),
        ("emq.events", vec![q, "ON"]),
        ("emq.limit", vec![q, "CONCURRENCY", "2"]),
        ("emq.cron", vec![q, "c", "EVERY", "1000", "p"]),
        ("emq.uncron", vec![q, "c"]),
        ("emq.adopt", vec![q, &parent, q, &child]),
        (
            "emq.handover",
            vec![q, &parent, q, &child, "acked", "fail", "r"],
        ),
        ("emq.delivered", vec![q, &child, q, &parent]),
        ("emq.span", vec![q, "2"]),
        ("emq.unspan", vec![q]),
    ];
    // Every command the module flags `write` is among them.
    let mut flagged: Vec<String> = emq_commands(&mut r)
        .into_iter()
        .filter(|name| {
            let info: Vec<Value> = cmd("COMMAND")
                .arg("INFO")
                .arg(name)
                .query(&mut r)
                .expect("command info");
            format!("{:?}", info[0]).contains("\"write\"")
        })
        .collect();
    let mut listed: Vec<String> = writes.iter().map(|(n, _)| n.to_string()).collect();
    flagged.sort();
    listed.sort();
    listed.dedup();
    assert_eq!(flagged, listed, "the write commands");
    for (name, args) in &writes {
        let mut c = cmd(name);
        for a in args {
            c.arg(*a);
        }
        let err = expect_err(&mut r, &c);
        assert!(err.starts_with("READONLY"), "{name}: {err}");
    }
    let stats = stats(&mut r, q);
    assert_eq!(stats.get("active"), Some(&1), "{stats:?}");
    let key: String = cmd("EMQ.KEY")
        .arg(q)
        .arg("pending")
        .query(&mut r)
        .expect("key");
    assert_eq!(key, set_key(q, "pending"));
    assert_eq!(digest(&mut r), before, "the replica wrote nothing");
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut r), digest(&mut p));
}

#[test]
fn delayed_jobs_and_leases_replicate_as_absolute_times() {
    let server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut con = server.conn();
    let q = unique_queue("abs");
    enqueue_delayed(&mut con, &q, &job_id(1), "later", 60_000);
    enqueue(&mut con, &q, &job_id(2), "now");
    claim(&mut con, &q, &["LEASE", "60000"]);
    let due = set_score(&mut con, &q, "schedule", &job_id(1)).expect("due");
    let deadline = set_score(&mut con, &q, "active", &job_id(2)).expect("deadline");
    let words = aof_words(&server);
    let zadd_score = |set: &str| {
        let key = set_key(&q, set);
        words
            .windows(3)
            .find(|w| w[0] == "ZADD" && w[1] == key)
            .map(|w| w[2].parse::<f64>().expect("a number"))
    };
    assert_eq!(
        zadd_score("schedule"),
        Some(due),
        "the due time, not the delay"
    );
    assert_eq!(
        zadd_score("active"),
        Some(deadline),
        "the deadline, not the lease"
    );
    assert!(due > 1.7e12 && deadline > 1.7e12, "unix milliseconds");
}

#[test]
fn echomq_called_from_scripts_and_functions_replicates_its_effects() {
    let (primary, replica) = start_pair();
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("scripted");
    let _: String = cmd("FUNCTION")
        .arg("LOAD")
        .arg(
            "#!lua name=emqrepl\n\
             redis.register_function('enqueue', function(keys, args) \
             return redis.call('EMQ.ENQUEUE', args[1], '*', 'from a function') end)",
        )
        .query(&mut p)
        .expect("FUNCTION LOAD");
    // Minted ids, a batch, a claim (leases are absolute times) and a refusal caught by pcall:
    // the replica, which has no module, must end up with the same data.
    let script = "redis.call('EMQ.ENQUEUE', ARGV[1], '*', 'a'); \
                  redis.call('EMQ.MENQUEUE', ARGV[1], '*', 'b', '*', 'c'); \
                  redis.pcall('EMQ.ENQUEUE', ARGV[1], 'ORD0NgWEfAEJfs', 'refused'); \
                  return redis.call('EMQ.CLAIM', ARGV[1], 'COUNT', 2)";
    for _ in 0..20 {
        let _: Value = cmd("EVAL")
            .arg(script)
            .arg(0)
            .arg(&q)
            .query(&mut p)
            .expect("eval");
        let _: String = cmd("FCALL")
            .arg("enqueue")
            .arg(0)
            .arg(&q)
            .query(&mut p)
            .expect("fcall");
    }
    wait_caught_up(&mut p, &mut r);
    let pending = set_len(&mut r, &q, "pending");
    let active = set_len(&mut r, &q, "active");
    assert_eq!((pending, active), (40, 40), "on the replica");
    assert_eq!(digest(&mut p), digest(&mut r));
}

#[test]
fn a_replica_runs_echomq_commands_from_its_primarys_link_with_every_right() {
    // EchoMQ replicates effects, so its commands never arrive over a replication link; a
    // primary can still send one (here, a module-less primary whose HSET is renamed). That
    // link has no ACL user: the replica runs the command with every right and stays up.
    let (primary, replica) = primary_sending("HSET", "EMQ.ENQUEUE");
    let mut p = primary.conn();
    let mut r = replica.conn();
    let id = job_id(1);
    // (HSET tells itself from HMSET by its name's second letter, so it answers OK.)
    let _: () = cmd("EMQ.ENQUEUE")
        .arg("q")
        .arg(&id)
        .arg("x")
        .query(&mut p)
        .expect("the primary's renamed HSET");
    assert!(
        wait_until(Duration::from_secs(10), || {
            let n: i64 = cmd("EXISTS")
                .arg(row_key("q", &id))
                .query(&mut r)
                .expect("exists");
            n == 1
        }),
        "the replica ran EMQ.ENQUEUE: {}",
        replica.log_tail()
    );
    assert!(replica.is_alive());
}

#[test]
fn ids_dropped_for_a_missing_row_are_dropped_on_the_replica_too() {
    let (primary, replica) = start_pair();
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("dropped");
    enqueue_numbered(&mut p, &q, 5, "x");
    let _: i64 = cmd("DEL")
        .arg(row_key(&q, &job_id(1)))
        .arg(row_key(&q, &job_id(2)))
        .query(&mut p)
        .expect("del");
    let claimed = claim(&mut p, &q, &["COUNT", "2"]).expect("jobs");
    let ids: Vec<&str> = claimed.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, vec![job_id(3), job_id(4)]);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(set_len(&mut r, &q, "pending"), 1, "only job 5 is left");
    assert_eq!(digest(&mut p), digest(&mut r));
}

/// The replication role a server reports (`master` or `slave`).
fn role(con: &mut Connection) -> String {
    info_field(con, "replication", "role").unwrap_or_default()
}

#[test]
fn the_timer_writes_nothing_while_client_writes_are_paused() {
    // `CLIENT PAUSE ... WRITE`, and the pause a failover takes while its replica catches up to
    // a fixed offset, hold back the server's own expiry and eviction. EchoMQ's timer holds
    // back its promotions and reclaimed leases the same way.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("paused");
    enqueue(&mut con, &q, &job_id(1), "leased");
    let claimed = claim(&mut con, &q, &["LEASE", "100"]);
    assert_eq!(claimed.map(|j| j.len()), Some(1));
    enqueue_delayed(&mut con, &q, &job_id(2), "later", 100);
    let _: () = cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut con)
        .expect("CLIENT PAUSE");
    std::thread::sleep(Duration::from_millis(600));
    let mut reader = server.conn();
    assert_eq!(
        set_len(&mut reader, &q, "active"),
        1,
        "an expired lease stays while writes are paused"
    );
    assert_eq!(
        set_len(&mut reader, &q, "schedule"),
        1,
        "a due job stays while writes are paused"
    );
    assert_eq!(info_int(&mut reader, "emq", "emq_promoted"), 0);
    assert_eq!(
        info_int(&mut reader, "emq", "emq_timer_due_queues"),
        1,
        "INFO shows the queue waiting for the timer"
    );
    let _: () = cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut con)
        .expect("CLIENT UNPAUSE");
    let resumed = wait_until(Duration::from_secs(5), || {
        set_len(&mut reader, &q, "pending") == 2
    });
    assert!(resumed, "both jobs back in pending once writes resume");
    assert_eq!(info_int(&mut reader, "emq", "emq_promoted"), 2);
    assert_eq!(info_int(&mut reader, "emq", "emq_timer_due_queues"), 0);
}

#[test]
fn a_coordinated_failover_hands_the_timer_over_and_loses_no_job() {
    // Both nodes load the module. `FAILOVER` pauses the primary's writes, lets the replica
    // catch up, and swaps the roles while delayed jobs come due and leases run out: the new
    // primary's timer finishes the work, every job ends up pending exactly once, and the old
    // primary follows the new one to the same data.
    let (primary, replica) = primary_and_replica(Options::default());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = unique_queue("failover");
    // Jobs coming due through the whole failover, so the timer has work on every tick.
    let expected = jobs_coming_due(&mut p, &q);
    let online = wait_until(Duration::from_secs(20), || {
        info_field(&mut p, "replication", "slave0").is_some_and(|r| r.contains("state=online"))
    });
    assert!(online, "the primary sees its replica online");
    // A worker blocked on an empty queue of the primary that steps down.
    let blocked = blocked_claim(&mut p, primary.conn(), &unique_queue("idle"), 0);
    let _: () = cmd("FAILOVER")
        .arg("TO")
        .arg("127.0.0.1")
        .arg(replica.port)
        .arg("TIMEOUT")
        .arg(10_000)
        .query(&mut p)
        .expect("FAILOVER");
    let swapped = wait_until(Duration::from_secs(20), || {
        !primary.is_alive() || role(&mut r) == "master" && role(&mut p) == "slave"
    });
    // Anything propagated during the failover's pause stops the server.
    assert!(primary.is_alive(), "{}", primary.log_tail());
    assert!(swapped, "roles swapped: {}", primary.log_tail());
    wait_link_up(&mut p);
    // The server ends the wait with an error, so the worker claims again on the new primary
    // and its claim never runs on a replica.
    let reply = blocked.join().expect("waiter");
    assert!(
        reply.as_ref().is_err_and(|e| e.starts_with("UNBLOCKED")),
        "{reply:?}"
    );
    let settled = wait_until(Duration::from_secs(10), || {
        set_len(&mut r, &q, "pending") == expected.len() as i64
    });
    assert!(
        settled,
        "the new primary promoted what came due and reclaimed the leases"
    );
    assert_eq!(set_len(&mut r, &q, "schedule"), 0);
    assert_eq!(set_len(&mut r, &q, "active"), 0);
    assert_eq!(
        set_members(&mut r, &q, "pending"),
        expected,
        "every job once, in id order"
    );
    for id in &expected {
        assert_eq!(
            job_state(&mut r, &q, id).as_deref(),
            Some("pending"),
            "{id}"
        );
    }
    wait_caught_up(&mut r, &mut p);
    assert_eq!(digest(&mut r), digest(&mut p), "the old primary follows");
}

#[test]
fn a_claimer_woken_inside_a_write_pause_waits_for_the_pause_to_end() {
    // A transaction that enqueues and then pauses client writes wakes a blocked claimer once
    // the pause has begun. A claim then would be propagated inside the pause (the server stops
    // on its own assertion, where it would postpone a native blocked command), so the claimer
    // waits until writes resume, then gets the job.
    let (primary, replica) = start_pair();
    let mut p = primary.conn();
    let q = unique_queue("woken-paused");
    let blocked = blocked_claim(&mut p, primary.conn(), &q, 10_000);
    let _: redis::Value = redis::pipe()
        .atomic()
        .cmd("EMQ.ENQUEUE")
        .arg(&q)
        .arg(job_id(1))
        .arg("x")
        .cmd("CLIENT")
        .arg("PAUSE")
        .arg(10_000)
        .arg("WRITE")
        .query(&mut p)
        .expect("MULTI EMQ.ENQUEUE CLIENT PAUSE EXEC");
    std::thread::sleep(Duration::from_millis(200));
    assert!(primary.is_alive(), "{}", primary.log_tail());
    let mut reader = primary.conn();
    assert_eq!(
        set_len(&mut reader, &q, "pending"),
        1,
        "not claimed in the pause"
    );
    assert_eq!(set_len(&mut reader, &q, "active"), 0);
    let _: () = cmd("CLIENT")
        .arg("UNPAUSE")
        .query(&mut reader)
        .expect("CLIENT UNPAUSE");
    let reply = blocked.join().expect("waiter").expect("claim");
    let jobs: Vec<(String, Vec<u8>, i64)> = redis::from_redis_value(reply).expect("jobs");
    let ids: Vec<&str> = jobs.iter().map(|(id, _, _)| id.as_str()).collect();
    assert_eq!(ids, vec![job_id(1)], "served once writes resumed");
    let mut r = replica.conn();
    wait_caught_up(&mut reader, &mut r);
    assert_eq!(digest(&mut reader), digest(&mut r));
}

#[test]
fn a_blocking_claim_from_the_primarys_link_never_stalls_the_replica() {
    // EchoMQ never sends its commands down a replication link, but a primary can (here a
    // module-less one whose SADD is renamed). A claim arriving there must not block: the
    // link would stop applying the stream behind it. It answers as a timeout at once, as it
    // does inside MULTI.
    let (primary, replica) = primary_sending("SADD", "EMQ.CLAIM");
    let mut p = primary.conn();
    let mut r = replica.conn();
    let _: i64 = cmd("EMQ.CLAIM")
        .arg("idle")
        .arg("BLOCK")
        .arg(0)
        .query(&mut p)
        .expect("the primary's renamed SADD");
    let _: () = cmd("SET").arg("after").arg("1").query(&mut p).expect("set");
    let applied = wait_until(Duration::from_secs(10), || {
        cmd("EXISTS")
            .arg("after")
            .query::<i64>(&mut r)
            .is_ok_and(|n| n == 1)
    });
    assert!(applied, "the replica applies what follows the claim");
    assert_eq!(info_int(&mut r, "clients", "blocked_clients"), 0);
}

#[test]
fn a_replica_with_the_module_attaching_late_learns_the_queues_from_the_snapshot() {
    // A full sync empties the replica's data (which unwatches its queues) and loads the
    // primary's snapshot, which fires no keyspace event: the scan after loading finds the
    // queues again, from a file or straight from the socket into a spare database, and a
    // sync from a primary without them leaves none watched.
    let primary = Server::start(Options::primary());
    let mut p = primary.conn();
    for q in ["late-one", "late-two"] {
        enqueue_delayed(&mut p, q, &job_id(1), "in an hour", 3_600_000);
    }
    let empty = Server::start(Options::primary());
    for load in ["disabled", "swapdb"] {
        let replica =
            Server::replica_of(&primary, Options::default().arg("repl-diskless-load", load));
        let mut r = replica.conn();
        wait_link_up(&mut r);
        wait_caught_up(&mut p, &mut r);
        assert_eq!(
            info_int(&mut r, "emq", "emq_watched_queues"),
            2,
            "repl-diskless-load {load}"
        );
        // Synced again, from a primary without queues: the emptied data's queues are gone.
        let _: () = cmd("REPLICAOF")
            .arg("127.0.0.1")
            .arg(empty.port)
            .query(&mut r)
            .expect("REPLICAOF");
        let resynced = wait_until(Duration::from_secs(20), || {
            info_field(&mut r, "replication", "master_port") == Some(empty.port.to_string())
                && info_field(&mut r, "replication", "master_link_status").as_deref() == Some("up")
                && info_int(&mut r, "emq", "emq_watched_queues") == 0
        });
        assert!(
            resynced,
            "after a full sync from a primary without queues, repl-diskless-load {load}: {} watched",
            info_int(&mut r, "emq", "emq_watched_queues")
        );
        assert_eq!(keys_of(&mut r, "late-one"), Vec::<String>::new());
    }
}
