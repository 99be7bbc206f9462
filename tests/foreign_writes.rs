//! `emq.learn-foreign-writes no`, the default: EchoMQ subscribes to no zset or generic keyspace
//! event on every key, and outside a cluster registers no command filter, so writes to other
//! keys cost the server nothing more (what Lua speakers keep: `lua_speakers`). EchoMQ's own writes still drive the timer, the registry and blocked
//! claims; a queue written only by others (a Lua speaker, `COPY`, `RESTORE`, `ZADD` by hand) is
//! learned at the next EchoMQ write to it, a load, a promotion or a slot import; on a cluster
//! node a `RESTORE` (a legacy slot migration's import) is learned as it comes.

use emq_harness as support;

use std::time::Duration;

use redis::cmd;
use support::*;

fn not_learning() -> Options {
    Options::default().arg("emq.learn-foreign-writes", "no")
}

fn setting(con: &mut Connection) -> Vec<String> {
    cmd("CONFIG")
        .arg("GET")
        .arg("emq.learn-foreign-writes")
        .query(con)
        .expect("CONFIG GET")
}

fn queues(con: &mut Connection) -> Vec<String> {
    let (_, names): (String, Vec<String>) = cmd("EMQ.QUEUES")
        .arg("COUNT")
        .arg(100)
        .query(con)
        .expect("EMQ.QUEUES");
    names
}

/// Whether job `id` of `queue` is in its `pending` set within ten seconds.
fn comes_pending(con: &mut Connection, queue: &str, id: &str) -> bool {
    wait_until(Duration::from_secs(10), || {
        set_score(con, queue, "pending", id).is_some()
    })
}

#[test]
fn the_setting_is_no_by_default_and_is_read_only_at_load() {
    let default = Server::start(Options::default());
    assert_eq!(
        setting(&mut default.conn()),
        ["emq.learn-foreign-writes", "no"]
    );
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    assert_eq!(setting(&mut con), ["emq.learn-foreign-writes", "yes"]);
    let err = expect_err(
        &mut con,
        cmd("CONFIG")
            .arg("SET")
            .arg("emq.learn-foreign-writes")
            .arg("no"),
    );
    assert!(err.contains("immutable"), "{err}");
    assert_eq!(setting(&mut con), ["emq.learn-foreign-writes", "yes"]);
    // Outside a cluster, nothing is left for a command filter to do unless every foreign
    // write is learned.
    assert_eq!(
        info_int(&mut default.conn(), "emq", "emq_command_filter"),
        0
    );
    assert_eq!(info_int(&mut con, "emq", "emq_command_filter"), 1);
}

#[test]
fn echomq_s_own_writes_still_drive_waiters_the_timer_and_the_registry() {
    let server = Server::start(not_learning());
    let mut con = server.conn();
    let q = "orders";

    // A claim waiting on an empty queue wakes at an enqueue.
    let waiter = blocked_claim(&mut con, server.conn(), q, 5_000);
    enqueue(&mut con, q, &job_id(1), "now");
    let reply = waiter.join().expect("waiter thread").expect("claim");
    let jobs: Vec<Job> = redis::from_redis_value(reply).expect("jobs");
    assert_eq!(jobs.len(), 1);
    assert_eq!(jobs[0].0, job_id(1));

    // A lease that runs out is taken back by the timer.
    enqueue(&mut con, q, &job_id(2), "left to its lease");
    let claimed = claim(&mut con, q, &["LEASE", "200"]).expect("claimed");
    assert_eq!(claimed.len(), 1);
    assert!(
        wait_until(Duration::from_secs(10), || set_score(
            &mut con,
            q,
            "active",
            &job_id(2)
        )
        .is_none()),
        "the expired lease was taken back"
    );

    // A delayed job comes due with no claim or write to its queue.
    enqueue_delayed(&mut con, q, &job_id(3), "later", 200);
    assert!(
        comes_pending(&mut con, q, &job_id(3)),
        "the delayed job came due"
    );
    assert!(queues(&mut con).contains(&q.to_string()));
    assert!(info_int(&mut con, "emq", "emq_promoted") >= 1);
}

#[test]
fn a_queue_only_others_wrote_is_learned_at_echomq_s_next_write_to_it() {
    let server = Server::start(not_learning());
    let mut con = server.conn();
    let (id, later) = (job_id(1), job_id(2));
    // A job due in a minute, its row and schedule set copied to another queue by hand, and the
    // copy made due now: no event tells EchoMQ of that queue.
    enqueue_delayed(&mut con, "source", &id, "copied", 60_000);
    for ty in ["job", "schedule"] {
        let (from, to) = if ty == "job" {
            (row_key("source", &id), row_key("copy", &id))
        } else {
            (set_key("source", ty), set_key("copy", ty))
        };
        let copied: i64 = cmd("COPY").arg(from).arg(to).query(&mut con).expect("COPY");
        assert_eq!(copied, 1);
    }
    let _: i64 = cmd("ZADD")
        .arg(set_key("copy", "schedule"))
        .arg("XX")
        .arg(now_ms() - 1_000)
        .arg(&id)
        .query(&mut con)
        .expect("ZADD");
    assert_eq!(watched_queues(&mut con), 1, "only the source is watched");
    std::thread::sleep(Duration::from_millis(500));
    assert!(
        set_score(&mut con, "copy", "schedule", &id).is_some(),
        "the copy, unknown to EchoMQ, is still scheduled"
    );

    // EchoMQ's own delayed enqueue to that queue makes it watched: both jobs come due.
    enqueue_delayed(&mut con, "copy", &later, "own", 100);
    assert!(
        comes_pending(&mut con, "copy", &id) && comes_pending(&mut con, "copy", &later),
        "the queue was learned at EchoMQ's write"
    );
    assert_eq!(job_state(&mut con, "copy", &id).as_deref(), Some("pending"));
}

/// A cluster node keeps the command filter for legacy slot migrations: a schedule set restored
/// from a dump (the import's `RESTORE`) is learned as the filter sees it. A node of a cluster
/// of its own, holding every slot; the set is made on a key outside the grammar, dumped, and
/// restored under the queue's name, beside a job's row restored the same way.
#[test]
fn on_a_cluster_node_a_restore_is_learned_as_it_comes() {
    let server = Server::start(
        not_learning()
            .arg("cluster-enabled", "yes")
            .arg("cluster-config-file", "nodes.conf")
            .arg("cluster-port", &free_port().to_string()),
    );
    let mut con = server.conn();
    let _: String = cmd("CLUSTER")
        .arg("ADDSLOTSRANGE")
        .arg(0)
        .arg(16383)
        .query(&mut con)
        .expect("CLUSTER ADDSLOTSRANGE");
    assert!(
        wait_until(Duration::from_secs(10), || cmd("CLUSTER")
            .arg("INFO")
            .query::<String>(&mut con)
            .is_ok_and(|i| i.contains("cluster_state:ok"))),
        "the node serves every slot"
    );
    assert_eq!(info_int(&mut con, "emq", "emq_command_filter"), 1);
    let id = job_id(1);
    enqueue_delayed(&mut con, "source", &id, "restored", 60_000);
    let row: Vec<u8> = cmd("DUMP")
        .arg(row_key("source", &id))
        .query(&mut con)
        .expect("DUMP");
    let scratch = "scratch:schedule";
    let _: i64 = cmd("ZADD")
        .arg(scratch)
        .arg(now_ms() + 300)
        .arg(&id)
        .query(&mut con)
        .expect("ZADD");
    let set: Vec<u8> = cmd("DUMP").arg(scratch).query(&mut con).expect("DUMP");
    for (key, dump) in [
        (row_key("restored", &id), row),
        (set_key("restored", "schedule"), set),
    ] {
        let ok: String = cmd("RESTORE")
            .arg(key)
            .arg(0)
            .arg(dump)
            .query(&mut con)
            .expect("RESTORE");
        assert_eq!(ok, "OK");
    }
    assert!(
        comes_pending(&mut con, "restored", &id),
        "the restored queue was learned"
    );
    assert!(queues(&mut con).contains(&"restored".to_string()));
}

/// Outside a cluster there is no command filter to stop the timer before `MODULE UNLOAD`: the
/// server refuses to unload a module whose timer waits, and says why. Everything still runs,
/// and a node that watches no queue (its timer never armed) unloads.
#[test]
fn without_the_command_filter_the_server_refuses_to_unload_while_the_timer_waits() {
    let unloadable = || not_learning().arg("enable-module-command", "local");
    let server = Server::start(unloadable());
    let mut con = server.conn();
    let q = "kept";
    enqueue_delayed(&mut con, q, &job_id(1), "due soon", 300);
    let err = expect_err(&mut con, cmd("MODULE").arg("UNLOAD").arg("emq"));
    assert!(err.contains("holds timer"), "{err}");
    assert_eq!(module_names(&mut con), vec!["emq".to_string()]);
    assert!(
        comes_pending(&mut con, q, &job_id(1)),
        "the timer still runs"
    );

    let idle = Server::start(unloadable());
    let mut con = idle.conn();
    enqueue(&mut con, q, &job_id(1), "ready at once");
    assert_eq!(info_int(&mut con, "emq", "emq_timer_ticks"), 0);
    let _: () = cmd("MODULE")
        .arg("UNLOAD")
        .arg("emq")
        .query(&mut con)
        .expect("MODULE UNLOAD");
    assert!(module_names(&mut con).is_empty());
}

#[test]
fn a_promoted_replica_learns_the_queues_the_replication_stream_wrote() {
    let (primary, replica) = primary_and_replica(not_learning());
    let (mut p, mut r) = (primary.conn(), replica.conn());
    let id = job_id(1);
    enqueue_delayed(&mut p, "failover", &id, "due after the promotion", 1_500);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(watched_queues(&mut r), 0, "the replica learned nothing");
    // The old primary stops, so that only the promoted one can promote the job.
    drop(primary);
    let _: () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .expect("REPLICAOF NO ONE");
    assert!(
        wait_until(Duration::from_secs(10), || watched_queues(&mut r) == 1),
        "the promoted primary rebuilt what it watches"
    );
    assert!(
        comes_pending(&mut r, "failover", &id),
        "the job came due on the promoted primary"
    );
}
