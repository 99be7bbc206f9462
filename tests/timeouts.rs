//! Timeouts (docs/lifecycle.md): `TIMEOUT <ms>` at enqueue or `EMQ.LIMIT <queue> TIMEOUT <ms>`
//! bounds one attempt from its claim. Renewals never pass the deadline; past it a renewal is
//! `EMQTIMEOUT`, and the server fails the attempt itself with the error `timeout`.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Value};
use support::*;

fn renew(con: &mut Connection, q: &str, id: &str, token: i64, ms: i64) -> redis::RedisResult<i64> {
    cmd("EMQ.RENEW")
        .arg(q)
        .arg(id)
        .arg(token)
        .arg(ms)
        .query(con)
}

fn enqueue_timed(con: &mut Connection, q: &str, id: &str, timeout_ms: i64) {
    let added: i64 = cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg("work")
        .arg("TIMEOUT")
        .arg(timeout_ms)
        .query(con)
        .expect("enqueue");
    assert_eq!(added, 1);
}

/// The row's `deadline` (`<unix-ms>:<token>`) for the attempt with `token` 1, its ms.
fn deadline_of(con: &mut Connection, q: &str, id: &str) -> Option<i64> {
    let field = row_field(con, q, id, "deadline")?;
    let (ms, token) = field.split_once(':').expect("<ms>:<token>");
    assert_eq!(token, "1", "the first attempt's");
    Some(ms.parse().expect("a number"))
}

/// The job's state once it is no longer active (the server ended its attempt).
fn state_once_ended(con: &mut Connection, q: &str, id: &str) -> Option<String> {
    let ended = wait_until(Duration::from_secs(10), || {
        job_state(con, q, id).as_deref() != Some("active")
    });
    assert!(ended, "the attempt was not ended");
    job_state(con, q, id)
}

#[test]
fn the_server_ends_an_attempt_at_its_deadline_even_while_it_is_renewed() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "2")
            .arg("emq.backoff-base-ms", "100"),
    );
    let mut con = server.conn();
    let q = unique_queue("timeout");
    let id = job_id(1);
    enqueue_timed(&mut con, &q, &id, 300);
    assert_eq!(
        row_field(&mut con, &q, &id, "timeout").as_deref(),
        Some("300")
    );
    let token = claim(&mut con, &q, &[]).expect("claimed")[0].2;
    let deadline = deadline_of(&mut con, &q, &id).expect("a deadline");
    // The worker keeps renewing for a minute at a time: each renewal ends at the deadline,
    // until one is refused.
    let refused = loop {
        match renew(&mut con, &q, &id, token, 60_000) {
            Ok(ends) => assert_eq!(ends.min(deadline), ends, "never past the deadline"),
            Err(e) => break error_text(&e),
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    assert!(refused.starts_with("EMQTIMEOUT"), "{refused}");
    let ended = state_once_ended(&mut con, &q, &id);
    assert!(
        matches!(ended.as_deref(), Some("scheduled" | "pending")),
        "a retry follows: {ended:?}"
    );
    assert_eq!(
        row_field(&mut con, &q, &id, "error").as_deref(),
        Some("timeout")
    );
    assert_eq!(
        row_field(&mut con, &q, &id, "timedout"),
        Some(token.to_string())
    );
    let after = renew(&mut con, &q, &id, token, 1_000).map_err(|e| error_text(&e));
    assert!(
        after.as_ref().is_err_and(|e| e.starts_with("EMQTIMEOUT")),
        "{after:?}"
    );
    let late_ack = cmd("EMQ.ACK").arg(&q).arg(&id).arg(token).clone();
    assert!(expect_err(&mut con, &late_ack).starts_with("EMQLEASE"));
    let late_mack = mack(&mut con, &q, &[id.clone(), token.to_string()]).expect("mack");
    assert!(
        matches!(&late_mack, Value::Array(r) if refused_with(&r[0], "EMQLEASE")),
        "{late_mack:?}"
    );
    // This server's only timed job: its counts are exact.
    assert_eq!(info_int(&mut con, "emq", "emq_timed_out"), 1);
    assert_eq!(info_int(&mut con, "emq", "emq_refused_timeout"), 2);

    // The second and last attempt: past its deadline the job is dead.
    assert!(wait_until(Duration::from_secs(10), || job_state(
        &mut con, &q, &id
    )
    .as_deref()
        == Some("pending")));
    let second = claim(&mut con, &q, &[]).expect("claimed again")[0].2;
    assert_eq!(second, token + 1);
    assert_eq!(state_once_ended(&mut con, &q, &id).as_deref(), Some("dead"));
    assert_eq!(
        row_field(&mut con, &q, &id, "error").as_deref(),
        Some("timeout")
    );
    let s = stats(&mut con, &q);
    assert_eq!((s["active"], s["dead"]), (0, 1));
}

#[test]
fn an_ack_before_the_deadline_settles_and_the_queue_timeout_times_the_rest() {
    let server = Server::start_or_external();
    let mut con = server.conn3();
    let q = unique_queue("timeout-limit");
    let reply = limit(&mut con, &q, &["TIMEOUT", "60000"]);
    assert!(
        reply.contains(&("timeout".to_string(), Some(60_000))),
        "{reply:?}"
    );
    enqueue(&mut con, &q, &job_id(1), "plain");
    let token = claim(&mut con, &q, &[]).expect("claimed")[0].2;
    let deadline = deadline_of(&mut con, &q, &job_id(1)).expect("the queue's");
    let ends = set_score(&mut con, &q, "active", &job_id(1)).expect("active");
    assert!(ends <= deadline as f64);
    let acked: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(token)
        .query(&mut con)
        .expect("acked in time");
    assert_eq!(acked, 1);
    // Removed, it times nothing claimed after.
    let off = limit(&mut con, &q, &["TIMEOUT", "OFF"]);
    assert!(off.contains(&("timeout".to_string(), None)), "{off:?}");
    enqueue(&mut con, &q, &job_id(2), "plain");
    claim(&mut con, &q, &[]).expect("claimed");
    assert_eq!(row_field(&mut con, &q, &job_id(2), "deadline"), None);
}

#[test]
fn timeouts_are_refused_out_of_bounds() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("timeout-syntax");
    let enqueue = cmd("EMQ.ENQUEUE").arg(&q).arg(job_id(1)).arg("p").clone();
    assert_refused(
        &mut con,
        &enqueue,
        &[
            (&["TIMEOUT", "0"], "ERR"),
            (&["TIMEOUT", "x"], "ERR"),
            (&["TIMEOUT", "31536000001"], "ERR"),
            (&["TIMEOUT", "5", "TIMEOUT", "6"], "ERR"),
        ],
    );
    let limit = cmd("EMQ.LIMIT").arg(&q).clone();
    assert_refused(
        &mut con,
        &limit,
        &[(&["TIMEOUT", "0"], "ERR"), (&["TIMEOUT"], "ERR")],
    );
    assert_eq!(
        keys_of(&mut con, &q),
        Vec::<String>::new(),
        "nothing written"
    );
}

#[test]
fn a_job_without_a_timeout_in_a_timed_queue_is_the_reference_row() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let by_module = unique_queue("timed-mod");
    let by_lua = unique_queue("timed-lua");
    limit(&mut con, &by_module, &["TIMEOUT", "1000"]);
    enqueue_timed(&mut con, &by_module, &job_id(9), 500);
    let script = redis::Script::new(include_str!("../lua/enqueue.lua"));
    for n in 1..=3 {
        enqueue(&mut con, &by_module, &job_id(n), "same");
        let _: i64 = script
            .key(row_key(&by_lua, &job_id(n)))
            .key(set_key(&by_lua, "pending"))
            .arg(job_id(n))
            .arg("same")
            .invoke(&mut con)
            .expect("lua");
        let dump = |con: &mut Connection, q: &str| -> Vec<u8> {
            cmd("DUMP")
                .arg(row_key(q, &job_id(n)))
                .query(con)
                .expect("dump")
        };
        assert_eq!(dump(&mut con, &by_module), dump(&mut con, &by_lua));
    }
}

#[test]
fn a_replica_holds_the_same_timed_rows() {
    // The retry's backoff, a minute, keeps the job in `schedule` while the two are compared.
    let (primary, replica) =
        primary_and_replica(Options::default().arg("emq.backoff-base-ms", "60000"));
    let mut con = primary.conn();
    let mut rcon = replica.conn();
    wait_link_up(&mut rcon);
    let q = unique_queue("timeout-repl");
    enqueue_timed(&mut con, &q, &job_id(1), 100);
    enqueue_timed(&mut con, &q, &job_id(2), 60_000);
    claim(&mut con, &q, &["COUNT", "2"]).expect("claimed");
    assert_eq!(
        state_once_ended(&mut con, &q, &job_id(1)).as_deref(),
        Some("scheduled")
    );
    wait_caught_up(&mut con, &mut rcon);
    assert_eq!(digest(&mut con), digest(&mut rcon));
    assert_eq!(
        row_field(&mut rcon, &q, &job_id(1), "error").as_deref(),
        Some("timeout")
    );
}

#[test]
fn a_promoted_replica_ends_the_attempt_at_the_deadline_it_was_given() {
    // The retry's backoff, a minute, keeps the ended attempt's job in `schedule` to be seen.
    let (mut primary, replica) =
        primary_and_replica(Options::default().arg("emq.backoff-base-ms", "60000"));
    let mut con = primary.conn();
    let mut rcon = replica.conn();
    let q = unique_queue("timeout-failover");
    let id = job_id(1);
    // Whether the deadline passes before the promotion or after, the new primary ends it.
    enqueue_timed(&mut con, &q, &id, 500);
    let token = claim(&mut con, &q, &[]).expect("claimed")[0].2;
    let deadline = row_field(&mut con, &q, &id, "deadline");
    wait_caught_up(&mut con, &mut rcon);
    primary.kill();
    let _: () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut rcon)
        .expect("promoted");
    assert_eq!(row_field(&mut rcon, &q, &id, "deadline"), deadline);
    assert_eq!(
        state_once_ended(&mut rcon, &q, &id).as_deref(),
        Some("scheduled"),
        "the new primary's timer ended it"
    );
    assert_eq!(
        row_field(&mut rcon, &q, &id, "error").as_deref(),
        Some("timeout")
    );
    assert!(renew(&mut rcon, &q, &id, token, 1_000)
        .is_err_and(|e| error_text(&e).starts_with("EMQTIMEOUT")));
}

#[test]
fn a_timed_out_attempt_frees_its_room_for_a_waiting_claim() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("timeout-room");
    limit(&mut con, &q, &["CONCURRENCY", "1"]);
    enqueue_timed(&mut con, &q, &job_id(1), 300);
    enqueue(&mut con, &q, &job_id(2), "next");
    let first = claim(&mut con, &q, &[]).expect("claimed");
    assert_eq!(first[0].0, job_id(1));
    // The queue is full: a claim waits, and takes job 2 once job 1's deadline frees the room.
    let waiting = blocked_claim(&mut con, server.conn(), &q, 20_000);
    let got = waiting
        .join()
        .expect("the claim's thread")
        .expect("claimed");
    let next = matches!(&got, Value::Array(jobs)
        if matches!(&jobs[..], [Value::Array(job)] if text(&job[0]) == job_id(2)));
    assert!(next, "{got:?}");
    assert_eq!(
        row_field(&mut con, &q, &job_id(1), "error").as_deref(),
        Some("timeout")
    );
}

#[test]
fn a_timed_enqueue_needs_the_queues_meta_and_off_removes_the_queue_timeout() {
    let server = Server::start_or_external();
    let mut con = server.conn3();
    let q = unique_queue("timeout-acl");
    let rules = [
        "+emq.enqueue".to_string(),
        format!("~emq:{{{q}}}:job:*"),
        format!("~emq:{{{q}}}:pending"),
        format!("~emq:{{{q}}}:events"),
    ];
    let rules: Vec<&str> = rules.iter().map(String::as_str).collect();
    let mut user = user_with(&server, "timeout-acl", &rules);
    let timed = cmd("EMQ.ENQUEUE")
        .arg(&q)
        .arg(job_id(1))
        .arg("p")
        .arg("TIMEOUT")
        .arg(1_000)
        .clone();
    assert!(expect_err(&mut user, &timed).starts_with("NOPERM"));
    assert_eq!(
        keys_of(&mut con, &q),
        Vec::<String>::new(),
        "nothing written"
    );
    enqueue(&mut user, &q, &job_id(2), "plain");

    limit(&mut con, &q, &["TIMEOUT", "5000"]);
    let off = limit(&mut con, &q, &["OFF"]);
    assert!(off.contains(&("timeout".to_string(), None)), "{off:?}");
    claim(&mut con, &q, &[]).expect("claimed");
    assert_eq!(row_field(&mut con, &q, &job_id(2), "deadline"), None);
}
