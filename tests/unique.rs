//! Unique keys on real servers: a held key answers the holder's id and writes nothing, from
//! any number of concurrent producers; a key is held until its job is done or dead, or for its
//! window; `EMQ.JOB` shows it; the timer sweeps what holds nothing, on a promoted replica too;
//! refusals are typed and write nothing; a replica without the module ends identical.

use emq_harness as support;

use std::time::Duration;

use redis::{cmd, Connection, Value};
use support::*;

fn enqueue_unique(
    con: &mut Connection,
    q: &str,
    id: &str,
    key: &str,
    for_ms: Option<u64>,
) -> Value {
    let mut c = cmd("EMQ.ENQUEUE");
    c.arg(q).arg(id).arg("p").arg("UNIQUE").arg(key);
    if let Some(ms) = for_ms {
        c.arg("FOR").arg(ms);
    }
    c.query(con).expect("EMQ.ENQUEUE UNIQUE")
}

fn id_of(v: &Value) -> String {
    match v {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        other => panic!("expected an id, got {other:?}"),
    }
}

fn unique_len(con: &mut Connection, q: &str) -> i64 {
    cmd("HLEN")
        .arg(set_key(q, "unique"))
        .query(con)
        .expect("HLEN")
}

#[test]
fn a_held_key_answers_the_holders_id_until_the_job_is_done() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("uniq");
    let first = id_of(&enqueue_unique(&mut con, &q, "*", "order-7", None));
    let before = keys_of(&mut con, &q);
    let digest_before: Vec<Vec<u8>> = before
        .iter()
        .map(|k| cmd("DUMP").arg(k).query(&mut con).expect("DUMP"))
        .collect();
    assert_eq!(
        id_of(&enqueue_unique(&mut con, &q, "*", "order-7", None)),
        first
    );
    assert_eq!(
        id_of(&enqueue_unique(&mut con, &q, &job_id(9), "order-7", None)),
        first,
        "a client's id gets the holder's too"
    );
    let after: Vec<Vec<u8>> = before
        .iter()
        .map(|k| cmd("DUMP").arg(k).query(&mut con).expect("DUMP"))
        .collect();
    assert_eq!(keys_of(&mut con, &q), before, "nothing written");
    assert_eq!(after, digest_before, "nothing changed");
    let view: Vec<(String, Value)> = cmd("EMQ.JOB")
        .arg(&q)
        .arg(&first)
        .query(&mut con)
        .expect("EMQ.JOB");
    assert!(
        view.iter()
            .any(|(k, v)| k == "unique" && text(v) == "order-7"),
        "EMQ.JOB shows the key: {view:?}"
    );
    let jobs = claim(&mut con, &q, &[]).expect("jobs");
    let acked: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(&first)
        .arg(jobs[0].2)
        .query(&mut con)
        .expect("ack");
    assert_eq!(acked, 1);
    let second = id_of(&enqueue_unique(&mut con, &q, "*", "order-7", None));
    assert_ne!(second, first, "done frees the key");
    assert!(info_int(&mut con, "emq", "emq_unique_held") >= 2);
    // Without the option, the row is the reference row.
    enqueue(&mut con, &q, &job_id(1), "plain");
    let fields: Vec<String> = cmd("HKEYS")
        .arg(row_key(&q, &job_id(1)))
        .query(&mut con)
        .expect("HKEYS");
    assert_eq!(fields, ["state", "attempts", "payload"]);
}

#[test]
fn a_window_holds_its_key_after_the_job_and_the_sweep_deletes_what_holds_nothing() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("window");
    let first = id_of(&enqueue_unique(&mut con, &q, "*", "w", Some(400)));
    enqueue_unique(&mut con, &q, "*", "done-soon", None);
    let jobs = claim(&mut con, &q, &["COUNT", "2"]).expect("jobs");
    for (id, _, token) in &jobs {
        let _: i64 = cmd("EMQ.ACK")
            .arg(&q)
            .arg(id)
            .arg(*token)
            .query(&mut con)
            .expect("ack");
    }
    assert_eq!(
        id_of(&enqueue_unique(&mut con, &q, "*", "w", Some(400))),
        first,
        "the window outlives its job"
    );
    // The done job's key holds nothing from its ack on, and any sweep since may have taken
    // it; the window's entry is there until its end, whenever the sweeps run.
    let window: bool = cmd("HEXISTS")
        .arg(set_key(&q, "unique"))
        .arg("w")
        .query(&mut con)
        .expect("HEXISTS");
    assert!(window, "the window's entry outlives its job");
    assert!(
        wait_until(Duration::from_secs(5), || unique_len(&mut con, &q) == 0),
        "the timer deleted the ended window and the done job's key"
    );
    assert_ne!(
        id_of(&enqueue_unique(&mut con, &q, "*", "w", Some(400))),
        first
    );
}

#[test]
fn a_dead_job_frees_its_key() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut con = server.conn();
    let q = "dies";
    let first = id_of(&enqueue_unique(&mut con, q, "*", "k", None));
    let jobs = claim(&mut con, q, &[]).expect("jobs");
    let state: String = cmd("EMQ.FAIL")
        .arg(q)
        .arg(&first)
        .arg(jobs[0].2)
        .query(&mut con)
        .expect("fail");
    assert_eq!(state, "dead");
    assert_ne!(id_of(&enqueue_unique(&mut con, q, "*", "k", None)), first);
}

#[test]
fn concurrent_producers_of_one_key_make_exactly_one_job() {
    let server = Server::start_or_external();
    let q = unique_queue("race");
    let producers: Vec<_> = (0..8)
        .map(|_| {
            let (mut c, q) = (server.conn(), q.clone());
            std::thread::spawn(move || {
                (0..50)
                    .map(|_| id_of(&enqueue_unique(&mut c, &q, "*", "one", None)))
                    .collect::<Vec<_>>()
            })
        })
        .collect();
    let mut ids: Vec<String> = producers
        .into_iter()
        .flat_map(|p| p.join().expect("producer"))
        .collect();
    ids.dedup();
    assert_eq!(ids.len(), 1, "every producer got the one job's id");
    let mut con = server.conn();
    assert_eq!(set_len(&mut con, &q, "pending"), 1);
}

#[test]
fn a_promoted_replica_holds_the_keys_and_sweeps_them() {
    let (primary, replica) = primary_and_replica(Options::primary());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "failover-unique";
    let held = id_of(&enqueue_unique(&mut p, q, "*", "long", None));
    enqueue_unique(&mut p, q, "*", "short", Some(300));
    wait_caught_up(&mut p, &mut r);
    let _: () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .expect("promote");
    assert_eq!(id_of(&enqueue_unique(&mut r, q, "*", "long", None)), held);
    assert!(
        wait_until(Duration::from_secs(5), || unique_len(&mut r, q) == 1),
        "the new primary swept the ended window"
    );
}

#[test]
fn bad_unique_options_are_refused_with_typed_errors_and_write_nothing() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("baduniq");
    let long = "k".repeat(1025);
    assert_refused(
        &mut con,
        cmd("EMQ.ENQUEUE").arg(&q).arg("*").arg("p"),
        &[
            (
                &["FOR", "10"][..],
                "ERR syntax error: FOR <ms> is the window of a UNIQUE key",
            ),
            (
                &["UNIQUE", "k", "FOR", "0"],
                "ERR FOR must be an integer from 1 to 31536000000",
            ),
            (&["UNIQUE", "k", "FOR", "-5"], "ERR FOR must be"),
            (&["UNIQUE", ""], "ERR UNIQUE key must be 1 to 1024 bytes"),
            (&["UNIQUE", &long], "ERR UNIQUE key must be 1 to 1024 bytes"),
            (
                &["UNIQUE", "a", "UNIQUE", "b"],
                "ERR syntax error: expected DELAY",
            ),
            (&["UNIQUE"], "ERR syntax error: an option lacks its value"),
        ],
    );
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
    make_string(&mut con, &set_key(&q, "unique"));
    let err = expect_err(
        &mut con,
        cmd("EMQ.ENQUEUE")
            .arg(&q)
            .arg("*")
            .arg("p")
            .arg("UNIQUE")
            .arg("k"),
    );
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    assert_eq!(
        keys_of(&mut con, &q),
        [set_key(&q, "unique")],
        "nothing written"
    );
    let _: () = cmd("DEL")
        .arg(set_key(&q, "unique"))
        .query(&mut con)
        .expect("DEL");
    let mut user = user_with(
        &server,
        "nounique",
        &[
            "+@all",
            &format!("~emq:{{{q}}}:p*"),
            &format!("~emq:{{{q}}}:j*"),
            &format!("~emq:{{{q}}}:e*"),
            &format!("~emq:{{{q}}}:m*"),
        ],
    );
    let err = expect_err(
        &mut user,
        cmd("EMQ.ENQUEUE")
            .arg(&q)
            .arg("*")
            .arg("p")
            .arg("UNIQUE")
            .arg("k"),
    );
    assert!(err.starts_with("NOPERM"), "{err}");
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "mirrored-unique";
    for n in 0..20 {
        enqueue_unique(&mut p, q, "*", &format!("k{}", n % 7), Some(150));
    }
    enqueue_unique(&mut p, q, &job_id(1), "until-done", None);
    assert!(wait_until(Duration::from_secs(5), || unique_len(&mut p, q) == 1));
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}
