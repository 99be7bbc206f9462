//! The batched settle, `EMQ.MACK`: many claimed jobs of one queue acknowledged in one call, each
//! on its own (a stale token refuses its job alone), the batch refused as a whole only for what
//! refuses every job alike and before any write, and `CLAIM` taking the next jobs in the same
//! call; replicated by effect like the single `EMQ.ACK`.

use emq_harness as support;

use redis::{cmd, Value};
use support::*;

/// The args naming each job with its token.
fn pairs(jobs: &[(String, i64)]) -> Vec<String> {
    jobs.iter()
        .flat_map(|(id, token)| [id.clone(), token.to_string()])
        .collect()
}

fn claimed(con: &mut Connection, q: &str, n: usize) -> Vec<(String, i64)> {
    claim(con, q, &["COUNT", &n.to_string()])
        .unwrap_or_default()
        .into_iter()
        .map(|(id, _, token)| (id, token))
        .collect()
}

/// Enqueues jobs 1 to `n` on `q` and claims them all: each job's id and token.
fn enqueued_and_claimed(con: &mut Connection, q: &str, n: u64) -> Vec<(String, i64)> {
    enqueue_numbered(con, q, n, "work");
    claimed(con, q, n as usize)
}

/// `EMQ.MACK ... CLAIM`'s reply: the places, then the jobs claimed.
type Next = (Vec<i64>, Vec<Job>);

fn is_lease_refusal(v: &Value) -> bool {
    refused_with(v, "EMQLEASE")
}

#[test]
fn each_job_is_settled_on_its_own_and_a_stale_token_refuses_only_its_job() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "orders";
    let jobs = enqueued_and_claimed(&mut con, q, 5);
    assert_eq!(jobs.len(), 5);
    let refused_before = info_int(&mut con, "emq", "emq_refused_lease");
    let mut args = pairs(&jobs);
    args[5] = "7".into(); // the third job's token is stale
    args[9] = "not-a-token".into(); // the fifth job's is no token at all
    args.extend([jobs[0].0.clone(), "1".into()]); // the first job named again
    let Value::Array(slots) = mack(&mut con, q, &args).expect("EMQ.MACK") else {
        panic!("an array of outcomes");
    };
    assert_eq!(slots.len(), 6);
    for (i, slot) in slots.iter().enumerate() {
        match i {
            0 | 1 | 3 => assert_eq!(slot, &Value::Int(1), "job {i} acknowledged"),
            _ => assert!(is_lease_refusal(slot), "slot {i} is EMQLEASE: {slot:?}"),
        }
    }
    for (i, (id, _)) in jobs.iter().enumerate() {
        let want = if i == 2 || i == 4 { "active" } else { "done" };
        assert_eq!(job_state(&mut con, q, id).as_deref(), Some(want), "job {i}");
    }
    let counts = stats(&mut con, q);
    assert_eq!((counts["pending"], counts["active"]), (0, 2));
    assert_eq!(info_int(&mut con, "emq", "emq_acked"), 3);
    assert_eq!(
        info_int(&mut con, "emq", "emq_refused_lease") - refused_before,
        3,
        "each refused place counts as a refusal"
    );
    // The refused jobs are still their worker's, with the right tokens.
    let rest = vec![jobs[2].clone(), jobs[4].clone()];
    assert_eq!(
        mack(&mut con, q, &pairs(&rest)).expect("EMQ.MACK"),
        Value::Array(vec![Value::Int(1), Value::Int(1)])
    );
}

#[test]
fn a_job_out_of_active_is_refused_in_its_place_and_its_row_left_as_it_was() {
    // Its row still says active with the worker's token, but the job is no longer in `active`
    // (taken out by hand): its place is EMQLEASE, the row unchanged, and the others settle.
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "orders";
    let jobs = enqueued_and_claimed(&mut con, q, 3);
    let row = row_key(q, &jobs[1].0);
    let _: i64 = cmd("ZREM")
        .arg(set_key(q, "active"))
        .arg(&jobs[1].0)
        .query(&mut con)
        .expect("ZREM");
    let before: Vec<(String, String)> = cmd("HGETALL").arg(&row).query(&mut con).expect("row");
    let Value::Array(slots) = mack(&mut con, q, &pairs(&jobs)).expect("EMQ.MACK") else {
        panic!("an array of outcomes");
    };
    assert_eq!(slots[0], Value::Int(1));
    assert!(is_lease_refusal(&slots[1]), "{:?}", slots[1]);
    assert_eq!(slots[2], Value::Int(1));
    let after: Vec<(String, String)> = cmd("HGETALL").arg(&row).query(&mut con).expect("row");
    assert_eq!(after, before, "the refused job's row");
    let ttl: i64 = cmd("PTTL").arg(&row).query(&mut con).expect("PTTL");
    assert_eq!(ttl, -1, "no expiry on the refused job's row");
    assert_eq!(job_state(&mut con, q, &jobs[2].0).as_deref(), Some("done"));
    assert_eq!(stats(&mut con, q)["active"], 0);
}

#[test]
fn a_result_is_kept_per_job() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "results";
    enqueue(&mut con, q, &job_id(1), "a");
    enqueue(&mut con, q, &job_id(2), "b");
    let jobs = claimed(&mut con, q, 2);
    let args = vec![
        jobs[0].0.clone(),
        jobs[0].1.to_string(),
        "RESULT".into(),
        "answer-1".into(),
        jobs[1].0.clone(),
        jobs[1].1.to_string(),
    ];
    assert_eq!(
        mack(&mut con, q, &args).expect("EMQ.MACK"),
        Value::Array(vec![Value::Int(1), Value::Int(1)])
    );
    assert_eq!(
        row_field(&mut con, q, &job_id(1), "result").as_deref(),
        Some("answer-1")
    );
    assert_eq!(row_field(&mut con, q, &job_id(2), "result"), None);
    assert_eq!(job_state(&mut con, q, &job_id(2)).as_deref(), Some("done"));
}

#[test]
fn claim_takes_the_next_jobs_in_the_same_call() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "next";
    for i in 1..=5 {
        enqueue(&mut con, q, &job_id(i), &format!("job {i}"));
    }
    let first = claimed(&mut con, q, 2);
    let mut args = pairs(&first);
    args.extend(["CLAIM".into(), "2".into(), "LEASE".into(), "60000".into()]);
    let reply = mack(&mut con, q, &args).expect("EMQ.MACK ... CLAIM");
    let (outcomes, next): Next = redis::from_redis_value(reply).expect("[outcomes, jobs]");
    assert_eq!(outcomes, vec![1, 1]);
    assert_eq!(
        next,
        vec![
            (job_id(3), b"job 3".to_vec(), 1),
            (job_id(4), b"job 4".to_vec(), 1)
        ]
    );
    let deadline = set_score(&mut con, q, "active", &job_id(3)).expect("leased");
    assert!(deadline > (now_ms() + 50_000) as f64, "LEASE applies");
    // One job left: CLAIM takes what there is; then nothing, as an empty array.
    let now: Vec<(String, i64)> = next.iter().map(|(id, _, t)| (id.clone(), *t)).collect();
    let mut args = pairs(&now);
    args.extend(["CLAIM".into(), "10".into()]);
    let (_, next): Next =
        redis::from_redis_value(mack(&mut con, q, &args).expect("claim the last")).expect("reply");
    assert_eq!(next.len(), 1);
    let mut args = pairs(&[(job_id(5), 1)]);
    args.extend(["CLAIM".into(), "10".into()]);
    let (outcomes, next): Next =
        redis::from_redis_value(mack(&mut con, q, &args).expect("an empty queue")).expect("reply");
    assert_eq!((outcomes, next.len()), (vec![1], 0));
    assert_eq!(stats(&mut con, q)["active"], 0);
}

#[test]
fn claim_honours_pause_and_the_concurrency_limit() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "limited";
    enqueue_numbered(&mut con, q, 6, "work");
    let _: Value = cmd("EMQ.LIMIT")
        .arg(q)
        .arg("CONCURRENCY")
        .arg(2)
        .query(&mut con)
        .expect("EMQ.LIMIT");
    let first = claimed(&mut con, q, 5);
    assert_eq!(first.len(), 2, "the limit holds the claim to 2");
    // Acking one frees one place: CLAIM 5 takes one.
    let mut args = pairs(&first[..1]);
    args.extend(["CLAIM".into(), "5".into()]);
    let (_, next): Next =
        redis::from_redis_value(mack(&mut con, q, &args).expect("EMQ.MACK")).expect("reply");
    assert_eq!(next.len(), 1);
    assert_eq!(stats(&mut con, q)["active"], 2);
    let _: i64 = cmd("EMQ.PAUSE").arg(q).query(&mut con).expect("pause");
    let mut args = pairs(&first[1..]);
    args.extend(["CLAIM".into(), "5".into()]);
    let (outcomes, next): Next =
        redis::from_redis_value(mack(&mut con, q, &args).expect("EMQ.MACK")).expect("reply");
    assert_eq!(
        (outcomes, next.len()),
        (vec![1], 0),
        "a paused queue: acks, no claim"
    );
}

#[test]
fn what_refuses_every_job_refuses_the_batch_before_any_write() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = "whole";
    let jobs = enqueued_and_claimed(&mut con, q, 3);
    let all = pairs(&jobs);
    let refusal = |con: &mut Connection, q: &str, args: &[String]| -> String {
        error_text(&mack(con, q, args).expect_err("refused"))
    };
    assert!(refusal(&mut con, "bad name!", &all).starts_with("EMQQUEUE"));
    let mut bad_id = all.clone();
    bad_id[2] = "nope".into();
    assert!(refusal(&mut con, q, &bad_id).starts_with("EMQID"));
    let mut claim_first = vec!["CLAIM".to_string(), "1".into()];
    claim_first.extend(all.clone());
    assert!(refusal(&mut con, q, &claim_first).contains("CLAIM <count> [LEASE <ms>] ends"));
    let mut odd = all.clone();
    odd.pop();
    assert!(refusal(&mut con, q, &odd).contains("<id> <token>"));
    let too_many: Vec<(String, i64)> = (0..1001).map(|i| (job_id(100 + i), 1)).collect();
    assert!(refusal(&mut con, q, &pairs(&too_many)).contains("at most 1000 jobs"));
    // A job's row of another type refuses the batch before the first job is settled.
    let _: () = cmd("DEL")
        .arg(row_key(q, &jobs[2].0))
        .query(&mut con)
        .expect("DEL");
    make_string(&mut con, &row_key(q, &jobs[2].0));
    assert!(refusal(&mut con, q, &all).starts_with("WRONGTYPE"));
    // A user who may not write one of the rows: NOPERM, nothing settled.
    let mut limited = user_with(
        &server,
        "worker",
        &[
            "+@all",
            &format!("~emq:{{{q}}}:pending"),
            &format!("~emq:{{{q}}}:active"),
            &format!("~emq:{{{q}}}:schedule"),
            &format!("~emq:{{{q}}}:dead"),
            &format!("~emq:{{{q}}}:meta"),
            &format!("~{}", row_key(q, &jobs[0].0)),
        ],
    );
    assert!(refusal(&mut limited, q, &all[..4]).starts_with("NOPERM"));
    assert_eq!(stats(&mut con, q)["active"], 3, "nothing was settled");
    assert_eq!(
        mack(&mut limited, q, &all[..2]).expect("its own row"),
        Value::Array(vec![Value::Int(1)])
    );
}

#[test]
fn a_batch_reaches_a_replica_as_its_effects() {
    let (primary, replica) = primary_and_replica(Options::default());
    let mut con = primary.conn();
    let q = "replicated";
    enqueue_numbered(&mut con, q, 4, "work");
    let jobs = claimed(&mut con, q, 2);
    let mut args = pairs(&jobs);
    args[3] = "9".into();
    args.extend(["CLAIM".into(), "2".into()]);
    mack(&mut con, q, &args).expect("EMQ.MACK");
    let mut rcon = replica.conn();
    wait_caught_up(&mut con, &mut rcon);
    assert_eq!(digest(&mut con), digest(&mut rcon));
    assert_eq!(job_state(&mut rcon, q, &job_id(1)).as_deref(), Some("done"));
    assert_eq!(
        job_state(&mut rcon, q, &job_id(2)).as_deref(),
        Some("active")
    );
    assert_eq!(stats(&mut rcon, q)["active"], 3);
}

#[test]
fn a_batch_is_persisted_as_one_transaction_of_effects() {
    let server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut con = server.conn();
    let q = "persisted";
    let jobs = enqueued_and_claimed(&mut con, q, 3);
    let before = aof_words(&server).len();
    let mut args = pairs(&jobs);
    args.extend(["CLAIM".into(), "1".into()]);
    mack(&mut con, q, &args).expect("EMQ.MACK");
    let words = aof_words(&server);
    let batch = &words[before..];
    assert_eq!(
        batch.first().map(String::as_str),
        Some("MULTI"),
        "{batch:?}"
    );
    assert_eq!(batch.last().map(String::as_str), Some("EXEC"), "{batch:?}");
    let count = |w: &str| batch.iter().filter(|b| b.as_str() == w).count();
    assert_eq!((count("MULTI"), count("EXEC")), (1, 1), "{batch:?}");
    for id in jobs.iter().map(|(id, _)| id) {
        assert!(
            batch.contains(&row_key(q, id)),
            "{id}'s row is written: {batch:?}"
        );
    }
    assert!(
        !batch.iter().any(|w| w.eq_ignore_ascii_case("EMQ.MACK")),
        "effects, not the command, are persisted"
    );
    // The batch leaves `active` in one variadic `ZREM`, as one native command would.
    let mut out_of_active = vec!["ZREM".to_string(), format!("emq:{{{q}}}:active")];
    out_of_active.extend(jobs.iter().map(|(id, _)| id.clone()));
    assert!(
        batch
            .windows(out_of_active.len())
            .any(|w| w == out_of_active),
        "one ZREM of the batch's jobs: {batch:?}"
    );
    let zrems = batch
        .windows(2)
        .filter(|w| w[0] == "ZREM" && w[1] == format!("emq:{{{q}}}:active"))
        .count();
    assert_eq!(zrems, 1, "{batch:?}");
}

#[test]
fn a_batched_claim_moves_its_jobs_in_one_zrem_and_one_zadd() {
    let server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut con = server.conn();
    let q = "claimed-together";
    enqueue_numbered(&mut con, q, 3, "work");
    let before = aof_words(&server).len();
    let jobs = claimed(&mut con, q, 3);
    assert_eq!(jobs.len(), 3);
    let words = aof_words(&server);
    let batch = &words[before..];
    let ids: Vec<String> = (1..=3).map(job_id).collect();
    let mut out_of_pending = vec!["ZREM".to_string(), format!("emq:{{{q}}}:pending")];
    out_of_pending.extend(ids.iter().cloned());
    assert!(
        batch
            .windows(out_of_pending.len())
            .any(|w| w == out_of_pending),
        "one ZREM out of pending: {batch:?}"
    );
    let into_active: Vec<usize> = batch
        .windows(2)
        .enumerate()
        .filter(|(_, w)| w[0] == "ZADD" && w[1] == format!("emq:{{{q}}}:active"))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(into_active.len(), 1, "one ZADD into active: {batch:?}");
    // ZADD key score member score member score member: each id once, greatest first (the
    // claim's jobs share their score), as they went into the set.
    let zadd = &batch[into_active[0] + 2..into_active[0] + 8];
    let members: Vec<&String> = zadd.iter().skip(1).step_by(2).collect();
    assert_eq!(members, ids.iter().rev().collect::<Vec<_>>(), "{batch:?}");
}
