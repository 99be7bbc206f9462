//! `EMQ.CLAIM ... BLOCK` (protocol.md §6): a waiter is woken by an enqueue or a job coming due, served
//! in arrival order from its own database (another module's blocking call as well), answers at
//! once where it cannot block, and takes no job once it has gone away or been unblocked.

use emq_harness as support;

use std::thread;
use std::time::Duration;

use redis::{cmd, Value};
use support::*;

#[test]
fn a_blocked_claim_wakes_on_enqueue() {
    let server = Server::start_or_external();
    let q = unique_queue("wake");
    let mut waiter = server.conn();
    let waiter_id: i64 = cmd("CLIENT").arg("ID").query(&mut waiter).expect("id");
    let url = server.url();
    let q2 = q.clone();
    let producer = thread::spawn(move || {
        let mut con = redis::Client::open(url)
            .expect("client")
            .get_connection()
            .expect("conn");
        // The job comes only once the server reports the claim blocked, so the claim is
        // answered by the enqueue, not by a job already there.
        assert!(wait_until(Duration::from_secs(5), || is_blocked(
            &mut con, waiter_id
        )));
        enqueue(&mut con, &q2, &job_id(77), "wake up");
    });
    // A claim that timed out would answer null.
    let jobs = claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("woken, not timed out");
    assert_eq!(jobs, vec![(job_id(77), b"wake up".to_vec(), 1)]);
    producer.join().expect("producer");
}

#[test]
fn a_blocked_claim_times_out_with_null_and_never_blocks_in_multi_or_a_script() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("timeout");
    assert_eq!(claim(&mut con, &q, &["BLOCK", "100"]), None);
    let (r,): (Value,) = redis::pipe()
        .atomic()
        .cmd("EMQ.CLAIM")
        .arg(&q)
        .arg("BLOCK")
        .arg(0)
        .query(&mut con)
        .expect("multi");
    // BLOCK 0 waits forever where it may block: an answer at all is the claim not blocking.
    assert_eq!(r, Value::Nil, "inside MULTI the claim answers at once");
    let r: Value = cmd("EVAL")
        .arg("return redis.call('EMQ.CLAIM', ARGV[1], 'BLOCK', 0)")
        .arg(0)
        .arg(&q)
        .query(&mut con)
        .expect("eval");
    assert_eq!(r, Value::Nil, "inside a script the claim answers at once");
}

#[test]
fn client_unblock_answers_a_blocked_claim() {
    let server = Server::start_or_external();
    let q = unique_queue("unblock");
    let mut admin = server.conn();
    for (how, expected) in [(None, Ok(Value::Nil)), (Some("ERROR"), Err("UNBLOCKED"))] {
        let mut waiter = server.conn();
        let id: i64 = cmd("CLIENT").arg("ID").query(&mut waiter).expect("id");
        let queue = q.clone();
        let blocked = thread::spawn(move || {
            cmd("EMQ.CLAIM")
                .arg(&queue)
                .arg("BLOCK")
                .arg(0)
                .query::<Value>(&mut waiter)
                .map_err(|e| error_text(&e))
        });
        let mut unblock = cmd("CLIENT");
        unblock.arg("UNBLOCK").arg(id);
        if let Some(how) = how {
            unblock.arg(how);
        }
        // The claim may not have reached the server yet: retry until it is blocked.
        assert!(wait_until(Duration::from_secs(5), || unblock
            .query::<i64>(&mut admin)
            .expect("unblock")
            == 1));
        let reply = blocked.join().expect("waiter");
        match expected {
            Ok(v) => assert_eq!(reply, Ok(v)),
            Err(prefix) => assert!(
                reply.as_ref().is_err_and(|e| e.starts_with(prefix)),
                "{reply:?}"
            ),
        }
    }
}

/// Whether the server lets a module's `RM_Call` block (its K flag): Valkey does, Redis 7.0
/// does not.
fn has_blocking_module_calls(con: &mut Connection) -> bool {
    info_field(con, "server", "valkey_version").is_some()
}

#[test]
fn another_modules_blocking_call_of_claim_is_served_when_a_job_arrives() {
    // A module may let an RM_Call block (its K flag): the claim then waits on a client of the
    // server's own, with no ACL user, and is served like any other waiter.
    let server = Server::start(Options::default().arg("loadmodule", &caller_module()));
    let mut con = server.conn();
    let q = unique_queue("module-wait");
    assert!(
        has_blocking_module_calls(&mut con),
        "{} has no K flag for RM_Call: this test cannot run on it (make test-redis7 skips it)",
        server_binary()
    );
    for block in ["0", "100"] {
        let reply: String = cmd("EMQCALLER.CALL")
            .arg("AS-ROOT-BLOCKING")
            .arg("EMQ.CLAIM")
            .arg(&q)
            .arg("BLOCK")
            .arg(block)
            .query(&mut con)
            .expect("a blocking call");
        assert_eq!(reply, "PROMISE", "nothing ready: the call waits");
    }
    std::thread::sleep(Duration::from_millis(300)); // the second one times out
    enqueue(&mut con, &q, &job_id(1), "for the module");
    assert!(
        wait_until(Duration::from_secs(5), || stats(&mut con, &q)["active"]
            == 1),
        "the waiting call claimed the job: {:?}",
        stats(&mut con, &q)
    );
    assert_eq!(
        job_state(&mut con, &q, &job_id(1)).as_deref(),
        Some("active")
    );
    assert!(server.is_alive());
}

#[test]
#[ignore = "needs a server whose RM_Call cannot block (Redis 7.0); make test-redis7 runs it"]
fn another_modules_blocking_call_of_claim_is_refused_where_a_call_cannot_block() {
    // Redis 7.0 has no K flag: the call is refused before EchoMQ runs, and the server stays up.
    let server = Server::start(Options::default().arg("loadmodule", &caller_module()));
    let mut con = server.conn();
    let q = unique_queue("module-wait");
    assert!(
        !has_blocking_module_calls(&mut con),
        "{} lets RM_Call block: the test of a call served when a job arrives covers it",
        server_binary()
    );
    let err = expect_err(
        &mut con,
        cmd("EMQCALLER.CALL")
            .arg("AS-ROOT-BLOCKING")
            .arg("EMQ.CLAIM")
            .arg(&q),
    );
    assert!(err.contains("the call failed"), "{err}");
    assert!(server.is_alive());
}

#[test]
fn blocked_claimers_are_served_in_arrival_order() {
    let server = Server::start_or_external();
    let q = unique_queue("fifo");
    let mut con = server.conn();
    // Each claimer is sent only once the server reports the one before it blocked, so the
    // arrival order is 0, 1, 2 for certain.
    let mut handles = Vec::new();
    for _ in 0..3 {
        let mut waiter = server.conn();
        let id: i64 = cmd("CLIENT").arg("ID").query(&mut waiter).expect("id");
        let q = q.clone();
        handles.push(thread::spawn(move || {
            claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("served")[0]
                .0
                .clone()
        }));
        assert!(wait_until(Duration::from_secs(5), || is_blocked(
            &mut con, id
        )));
    }
    // One job at a time, each next one sent once the claimer served has answered: the first
    // to arrive gets the first job (a job served to another would leave it waiting until its
    // timeout, and null).
    for (n, handle) in handles.into_iter().enumerate() {
        enqueue(&mut con, &q, &job_id(n as u64 + 1), "x");
        assert_eq!(handle.join().expect("waiter"), job_id(n as u64 + 1));
    }
}

#[test]
fn a_blocked_claim_is_served_from_its_database_through_swapdb_and_flushall() {
    // A waiter waits on its queue in its own database, as `BLPOP` does: `SWAPDB` bringing a
    // job there serves it, and `FLUSHALL` under it leaves it waiting for the next enqueue.
    // SWAPDB and FLUSHALL touch the whole server: a server of its own.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let waiter = |q: &'static str| {
        let mut waiter = server.conn();
        thread::spawn(move || claim(&mut waiter, q, &["BLOCK", "10000"]))
    };

    let swapped = waiter("swapped");
    assert!(until_blocked(&mut con, 1));
    in_db(&mut con, 1);
    enqueue(&mut con, "swapped", &job_id(1), "from database 1");
    let _: () = cmd("SWAPDB").arg(0).arg(1).query(&mut con).expect("swapdb");
    let jobs = swapped.join().expect("waiter").expect("served");
    assert_eq!(jobs, vec![(job_id(1), b"from database 1".to_vec(), 1)]);
    in_db(&mut con, 0);
    assert_eq!(
        job_state(&mut con, "swapped", &job_id(1)).as_deref(),
        Some("active")
    );

    let flushed = waiter("flushed");
    assert!(until_blocked(&mut con, 1));
    let _: () = cmd("FLUSHALL").query(&mut con).expect("flushall");
    thread::sleep(Duration::from_millis(100));
    assert_eq!(blocked_clients(&mut con), 1, "still waiting after FLUSHALL");
    enqueue(&mut con, "flushed", &job_id(3), "after the flush");
    let jobs = flushed.join().expect("waiter").expect("served");
    assert_eq!(jobs, vec![(job_id(3), b"after the flush".to_vec(), 1)]);
}

#[test]
fn a_claimer_that_goes_away_while_blocked_takes_no_job() {
    // Two waiters ahead of a live one go away: one closes its socket, one is killed by
    // `CLIENT KILL`. The job goes to the live waiter, with attempts 1; the next one, with no
    // waiter left, stays pending. No lease is held for a worker that is gone.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("gone");

    let mut closing = std::net::TcpStream::connect(("127.0.0.1", server.port)).expect("connect");
    let request = format!(
        "*4\r\n$9\r\nEMQ.CLAIM\r\n${}\r\n{q}\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n",
        q.len()
    );
    std::io::Write::write_all(&mut closing, request.as_bytes()).expect("send the claim");
    assert!(until_blocked(&mut con, 1));

    let mut killed = server.conn();
    let killed_id: i64 = cmd("CLIENT").arg("ID").query(&mut killed).expect("id");
    let killed = blocked_claim(&mut con, killed, &q, 0);
    assert_eq!(blocked_clients(&mut con), 2);

    let mut live = server.conn();
    let queue = q.clone();
    let live = thread::spawn(move || claim(&mut live, &queue, &["BLOCK", "10000"]));
    assert!(until_blocked(&mut con, 3));

    drop(closing);
    let n: i64 = cmd("CLIENT")
        .arg("KILL")
        .arg("ID")
        .arg(killed_id)
        .query(&mut con)
        .expect("client kill");
    assert_eq!(n, 1);
    assert!(killed.join().expect("killed waiter").is_err());
    assert!(until_blocked(&mut con, 1), "the server let both waiters go");

    enqueue(&mut con, &q, &job_id(1), "for the live one");
    let jobs = live.join().expect("live waiter").expect("served");
    assert_eq!(jobs, vec![(job_id(1), b"for the live one".to_vec(), 1)]);
    enqueue(&mut con, &q, &job_id(2), "for nobody yet");
    thread::sleep(Duration::from_millis(50));
    let counts = stats(&mut con, &q);
    assert_eq!((counts["pending"], counts["active"]), (1, 1), "{counts:?}");
    assert_eq!(
        job_state(&mut con, &q, &job_id(2)).as_deref(),
        Some("pending")
    );
    assert_eq!(
        job_attempts(&mut con, &q, &job_id(1)).as_deref(),
        Some("1"),
        "claimed once, by the live waiter"
    );
}

#[test]
fn a_blocked_claim_wakes_when_a_scheduled_job_becomes_due() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("duewake");
    enqueue_delayed(&mut con, &q, &job_id(8), "d", 300);
    let mut waiter = server.conn();
    let jobs = claim(&mut waiter, &q, &["BLOCK", "10000"]).expect("woken by the timer");
    assert_eq!(jobs[0].0, job_id(8));
}
