//! Repeating jobs on real servers: a schedule fires its payload as a job at each firing, with
//! its priority and its name in the row; `EMQ.CRONS` lists the schedules and `EMQ.UNCRON` stops
//! one; a schedule that missed firings fires once; an AOF restart and a failover neither skip
//! a firing nor repeat one; refusals are typed (a malformed spec quotes the parser) and write
//! nothing; a replica without the module ends identical.

use emq_harness as support;

use std::collections::BTreeMap;
use std::time::Duration;

use redis::{cmd, Connection, Value};
use support::*;

fn cron(con: &mut Connection, q: &str, name: &str, when: &[&str], payload: &str) -> i64 {
    cmd("EMQ.CRON")
        .arg(q)
        .arg(name)
        .arg(when)
        .arg(payload)
        .query(con)
        .expect("EMQ.CRON")
}

/// `EMQ.UNCRON`: 1 removed, 0 no such schedule.
fn uncron(con: &mut Connection, q: &str, name: &str) -> i64 {
    cmd("EMQ.UNCRON")
        .arg(q)
        .arg(name)
        .query(con)
        .expect("EMQ.UNCRON")
}

/// `EMQ.CRONS` (over RESP3, where each schedule is a map): each schedule's fields, by name.
fn crons(server: &Server, q: &str) -> BTreeMap<String, BTreeMap<String, Value>> {
    let all: Vec<Value> = cmd("EMQ.CRONS")
        .arg(q)
        .query(&mut server.conn3())
        .expect("EMQ.CRONS");
    all.iter()
        .map(|s| {
            let fields: BTreeMap<String, Value> = map_pairs(s).into_iter().collect();
            (text(&fields["name"]), fields)
        })
        .collect()
}

fn int(v: &Value) -> Option<i64> {
    match v {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

#[test]
fn a_schedule_fires_its_payload_at_each_firing_until_it_is_removed() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("cron");
    let start = now_ms();
    let first = cron(&mut con, &q, "tick", &["EVERY", "200"], "hello");
    assert!((start + 200..=now_ms() + 200).contains(&first), "{first}");
    let _: i64 = cmd("EMQ.CRON")
        .arg(&q)
        .arg("urgent")
        .arg("*/1 * * * * *")
        .arg("each second")
        .arg("PRIORITY")
        .arg(-5)
        .query(&mut con)
        .expect("EMQ.CRON");
    assert!(until_more_than(&mut con, &q, "pending", 5));
    let jobs = claim(&mut con, &q, &["COUNT", "100"]).expect("jobs");
    assert_eq!(
        String::from_utf8_lossy(&jobs[0].1),
        "each second",
        "the lower priority first"
    );
    let tick = jobs.iter().find(|j| j.1 == b"hello").expect("a tick");
    assert_eq!(
        row_field(&mut con, &q, &tick.0, "cron").as_deref(),
        Some("tick")
    );
    let all = crons(&server, &q);
    assert_eq!(all.keys().collect::<Vec<_>>(), ["tick", "urgent"]);
    assert_eq!(int(&all["tick"]["every"]), Some(200));
    assert_eq!(text(&all["urgent"]["spec"]), "*/1 * * * * *");
    assert_eq!(int(&all["urgent"]["priority"]), Some(-5));
    let (last, next) = (
        int(&all["tick"]["last"]).expect("last"),
        int(&all["tick"]["next"]).expect("next"),
    );
    assert_eq!((next - first) % 200, 0, "the grid of the first firing");
    assert_eq!(next - last, 200);
    assert_eq!(uncron(&mut con, &q, "tick"), 1);
    assert_eq!(uncron(&mut con, &q, "urgent"), 1);
    let settled = set_len(&mut con, &q, "pending");
    std::thread::sleep(Duration::from_millis(1_200));
    assert_eq!(
        set_len(&mut con, &q, "pending"),
        settled,
        "removed schedules fire no more"
    );
    assert!(info_int(&mut con, "emq", "emq_cron_fired") >= 6);
}

#[test]
fn a_schedule_that_missed_firings_fires_once_and_keeps_its_grid() {
    let server = Server::start(Options::learning());
    let mut con = server.conn();
    let q = unique_queue("missed");
    cron(&mut con, &q, "hourly", &["EVERY", "3600000"], "p");
    // As a server down for ten periods finds it: the next firing ten hours ago.
    let due = now_ms() - 10 * 3_600_000 - 5;
    let record = format!("{due}|0|0|3600000|\np");
    let _: i64 = cmd("HSET")
        .arg(set_key(&q, "cron"))
        .arg("hourly")
        .arg(&record)
        .query(&mut con)
        .expect("HSET");
    assert!(wait_until(Duration::from_secs(5), || set_len(
        &mut con, &q, "pending"
    ) == 1));
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(set_len(&mut con, &q, "pending"), 1, "once, not ten times");
    let all = crons(&server, &q);
    assert_eq!(int(&all["hourly"]["last"]), Some(due));
    assert_eq!(int(&all["hourly"]["next"]), Some(due + 11 * 3_600_000));
}

#[test]
fn an_aof_restart_neither_skips_nor_repeats_a_firing() {
    let mut server = Server::start(
        Options::default()
            .arg("appendonly", "yes")
            .arg("appendfsync", "always"),
    );
    let mut con = server.conn();
    let q = "aof-cron";
    cron(&mut con, q, "tick", &["EVERY", "300"], "p");
    assert!(until_more_than(&mut con, q, "pending", 1));
    server.restart(true);
    let mut con = server.conn();
    let before = crons(&server, q);
    let (last, next) = (
        int(&before["tick"]["last"]).expect("last"),
        int(&before["tick"]["next"]).expect("next"),
    );
    assert_eq!(next - last, 300);
    let fired = set_len(&mut con, q, "pending");
    assert!(until_more_than(&mut con, q, "pending", fired));
    let after = crons(&server, q);
    let fired_last = int(&after["tick"]["last"]).expect("last");
    assert!(
        fired_last >= next,
        "the first firing after the restart is the next one, not the last again"
    );
    assert_eq!((fired_last - last) % 300, 0, "on the grid");
}

#[test]
fn a_promoted_replica_fires_from_where_its_primary_left() {
    let (mut primary, replica) = primary_and_replica(Options::primary());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "failover-cron";
    cron(&mut p, q, "tick", &["EVERY", "250"], "p");
    assert!(until_more_than(&mut p, q, "pending", 0));
    wait_caught_up(&mut p, &mut r);
    primary.kill();
    let before = crons(&replica, q);
    let last = int(&before["tick"]["last"]).expect("last");
    let _: () = cmd("REPLICAOF")
        .arg("NO")
        .arg("ONE")
        .query(&mut r)
        .expect("promote");
    let held = set_len(&mut r, q, "pending");
    assert!(until_more_than(&mut r, q, "pending", held));
    let after = crons(&replica, q);
    let fired = int(&after["tick"]["last"]).expect("last");
    assert!(
        fired > last,
        "the promoted replica fires the next firing, not the last again"
    );
}

#[test]
fn bad_schedules_are_refused_with_typed_errors_and_write_nothing() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("badcron");
    let long = "n".repeat(257);
    assert_refused(
        &mut con,
        cmd("EMQ.CRON").arg(&q),
        &[
            (
                &["s", "61 * * * *", "p"][..],
                "EMQCRON Component error: Number out of bounds",
            ),
            (
                &["s", "* * *", "p"],
                "EMQCRON Invalid pattern: Pattern must have 5 or 6 fields",
            ),
            (&["s", "0 0 30 2 *", "p"], "EMQCRON the spec never fires"),
            (
                &["s", ", * * * *", "p"],
                "EMQCRON the spec never fires: one of its fields allows no value",
            ),
            (
                &["s", "EVERY", "5", "p"],
                "ERR EVERY must be an integer from 10 to 31536000000",
            ),
            (&["s", "EVERY", "-1", "p"], "ERR EVERY must be"),
            (
                &["s", "EVERY", "1000"],
                "ERR wrong number of arguments for 'emq.cron'",
            ),
            (
                &["s", "* * * * *", "p", "PRIORITY", "9999999"],
                "ERR PRIORITY must be",
            ),
            (
                &["s", "* * * * *", "p", "DELAY", "5"],
                "ERR syntax error: expected PRIORITY",
            ),
            (
                &[long.as_str(), "* * * * *", "p"],
                "ERR a schedule's name must be 1 to 256 bytes",
            ),
            (&["", "* * * * *", "p"], "ERR a schedule's name must be"),
        ],
    );
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
    assert!(info_int(&mut con, "emq", "emq_refused_cron") >= 3);
    make_string(&mut con, &set_key(&q, "cron"));
    let every = cmd("EMQ.CRON")
        .arg(&q)
        .arg("s")
        .arg("EVERY")
        .arg(1000)
        .arg("p")
        .clone();
    let err = expect_err(&mut con, &every);
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let err = expect_err(&mut con, cmd("EMQ.CRONS").arg(&q));
    assert!(err.starts_with("WRONGTYPE"), "{err}");
    let _: () = cmd("DEL")
        .arg(set_key(&q, "cron"))
        .query(&mut con)
        .expect("DEL");
    let mut user = user_with(&server, "nocron", &["+@all", &format!("~emq:{{{q}}}:p*")]);
    let err = expect_err(&mut user, &every);
    assert!(err.starts_with("NOPERM"), "{err}");
    assert!(keys_of(&mut con, &q).is_empty(), "nothing written");
}

#[test]
fn a_queue_holds_at_most_a_thousand_schedules() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let q = unique_queue("many");
    let mut pipe = redis::pipe();
    for n in 0..1000 {
        pipe.cmd("EMQ.CRON")
            .arg(&q)
            .arg(format!("s{n}"))
            .arg("EVERY")
            .arg(3_600_000)
            .arg("p");
    }
    let _: Vec<i64> = pipe.query(&mut con).expect("1000 schedules");
    let err = expect_err(
        &mut con,
        cmd("EMQ.CRON")
            .arg(&q)
            .arg("one-more")
            .arg("EVERY")
            .arg(1000)
            .arg("p"),
    );
    assert!(
        err.starts_with("EMQCRON the queue holds 1000 schedules"),
        "{err}"
    );
    assert_eq!(crons(&server, &q).len(), 1000);
}

#[test]
fn a_replica_without_the_module_ends_identical() {
    let (primary, replica) = primary_and_replica(Options::without_module());
    let mut p = primary.conn();
    let mut r = replica.conn();
    let q = "mirrored-cron";
    cron(&mut p, q, "tick", &["EVERY", "100"], "p");
    assert!(until_more_than(&mut p, q, "pending", 2));
    uncron(&mut p, q, "tick");
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
}
