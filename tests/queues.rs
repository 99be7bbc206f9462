//! `EMQ.QUEUES` and the registry behind it: every queue a node holds, whoever wrote it, paged
//! with a stable cursor, per database, per primary on a cluster, and only those the caller may
//! read.

use emq_harness as support;

use std::collections::{BTreeMap, BTreeSet};
use std::process::Command;
use std::time::Duration;

use redis::{cmd, Value};
use support::cluster::Cluster;
use support::*;

/// One page: the next cursor and the names.
fn page(con: &mut Connection, cursor: &str, count: usize) -> (String, Vec<String>) {
    cmd("EMQ.QUEUES")
        .arg("CURSOR")
        .arg(cursor)
        .arg("COUNT")
        .arg(count)
        .query(con)
        .expect("EMQ.QUEUES")
}

/// Every name of the connection's database, through pages of `count`.
fn all_queues(con: &mut Connection, count: usize) -> Vec<String> {
    let (mut cursor, mut all) = ("0".to_string(), Vec::new());
    loop {
        let (next, names) = page(con, &cursor, count);
        assert!(names.len() <= count, "at most COUNT names");
        all.extend(names);
        if next == "0" {
            return all;
        }
        cursor = next;
    }
}

/// The names starting with `prefix`, in the order listed (tests sharing a server list only
/// their own).
fn listed(con: &mut Connection, prefix: &str) -> Vec<String> {
    all_queues(con, 1000)
        .into_iter()
        .filter(|q| q.starts_with(prefix))
        .collect()
}

fn is_listed(con: &mut Connection, queue: &str) -> bool {
    listed(con, queue).iter().any(|q| q == queue)
}

fn cursor_is_kept_or_last_shown(next: &str, names: &[String]) {
    let kept = next.starts_with('{') && next.ends_with('}');
    assert!(kept || names.last().is_some_and(|n| n == next));
}

fn known(con: &mut Connection) -> i64 {
    info_int(con, "emq", "emq_known_queues")
}

fn run(con: &mut Connection, words: &[&str]) -> Value {
    let mut c = cmd(words[0]);
    for w in &words[1..] {
        c.arg(*w);
    }
    c.query(con)
        .unwrap_or_else(|e| panic!("{}: {e}", words.join(" ")))
}

/// Waits (bounded) until `queue` is listed, or is not.
fn wait_listed(con: &mut Connection, queue: &str, wanted: bool) -> bool {
    wait_until(Duration::from_secs(10), || is_listed(con, queue) == wanted)
}

#[test]
fn queues_enqueued_by_echomq_are_listed_once_in_name_order() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    assert_eq!(page(&mut con, "0", 10), ("0".to_string(), vec![]));
    for (i, q) in ["orders", "fills", "quotes", "orders"].iter().enumerate() {
        enqueue(&mut con, q, &job_id(i as u64 + 1), "p");
    }
    enqueue_delayed(&mut con, "later", &job_id(9), "p", 60_000);
    assert_eq!(
        all_queues(&mut con, 100),
        ["fills", "later", "orders", "quotes"]
    );
    assert_eq!(known(&mut con), 4);
    // Without options: from the start, up to 100 names.
    let whole: (String, Vec<String>) = cmd("EMQ.QUEUES").query(&mut con).expect("bare");
    assert_eq!(whole.0, "0");
    assert_eq!(whole.1.len(), 4);
    // A claim empties `pending`: the queue still has `active`.
    let _: Value = cmd("EMQ.CLAIM")
        .arg("fills")
        .query(&mut con)
        .expect("claim");
    assert!(is_listed(&mut con, "fills"));
}

#[test]
fn queues_written_as_plain_commands_by_a_client_or_a_script_are_listed() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let lua = unique_queue("qlua");
    let script = redis::Script::new(include_str!("../lua/enqueue.lua"));
    let _: i64 = script
        .key(row_key(&lua, &job_id(1)))
        .key(set_key(&lua, "pending"))
        .arg(job_id(1))
        .arg("p")
        .invoke(&mut con)
        .expect("the reference script");
    let plain = unique_queue("qplain");
    run(
        &mut con,
        &["HSET", &row_key(&plain, &job_id(1)), "state", "pending"],
    );
    run(
        &mut con,
        &["ZADD", &set_key(&plain, "pending"), "0", &job_id(1)],
    );
    // Keys that fire no event EchoMQ takes: a meta hash, an events stream, from a client and
    // from inside a script.
    let meta = unique_queue("qmeta");
    run(&mut con, &["HSET", &set_key(&meta, "meta"), "paused", "1"]);
    let stream = unique_queue("qstream");
    run(
        &mut con,
        &["XADD", &set_key(&stream, "events"), "*", "a", "1"],
    );
    let scripted = unique_queue("qscripted");
    let _: i64 = redis::Script::new("return redis.call('HSET', KEYS[1], 'paused', '1')")
        .key(set_key(&scripted, "meta"))
        .invoke(&mut con)
        .expect("a script's HSET");
    for q in [&lua, &plain, &meta, &stream, &scripted] {
        assert!(is_listed(&mut con, q), "{q}");
    }
    // A transaction: learned once it ran, never if it was discarded.
    let queued = unique_queue("qmulti");
    let discarded = unique_queue("qdiscarded");
    redis::pipe()
        .atomic()
        .cmd("HINCRBY")
        .arg(set_key(&queued, "meta"))
        .arg("n")
        .arg(1)
        .query::<Value>(&mut con)
        .expect("MULTI/EXEC");
    run(&mut con, &["MULTI"]);
    run(&mut con, &["HSET", &set_key(&discarded, "meta"), "a", "1"]);
    run(&mut con, &["DISCARD"]);
    assert!(is_listed(&mut con, &queued));
    assert!(!is_listed(&mut con, &discarded));
    // A write refused (the key holds another type) teaches nothing new either way.
    let refused = unique_queue("qrefused");
    let hset: redis::RedisResult<Value> =
        cmd("HSET").arg(set_key(&refused, "meta")).query(&mut con);
    assert!(hset.is_err(), "arity");
    assert!(!is_listed(&mut con, &refused));
}

#[test]
fn a_queue_in_another_database_is_listed_there_only() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    in_db(&mut con, 3);
    enqueue(&mut con, "three", &job_id(1), "p");
    let _: i64 = redis::Script::new("return redis.call('HSET', KEYS[1], 'a', '1')")
        .key(set_key("scripted3", "meta"))
        .invoke(&mut con)
        .expect("script");
    assert_eq!(all_queues(&mut con, 10), ["scripted3", "three"]);
    in_db(&mut con, 0);
    assert_eq!(all_queues(&mut con, 10), Vec::<String>::new());
    // The cron, which looks in every database for a script's key, finds nothing in 0 either.
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(all_queues(&mut con, 10), Vec::<String>::new());
    assert_eq!(known(&mut con), 2);
}

#[test]
fn a_replica_lists_the_queues_of_its_replication_stream() {
    let (primary, replica) = primary_and_replica(Options::default());
    let (mut p, mut r) = (primary.conn(), replica.conn());
    enqueue(&mut p, "enqueued", &job_id(1), "p");
    enqueue_delayed(&mut p, "delayed", &job_id(2), "p", 60_000);
    run(
        &mut p,
        &["HSET", &set_key("metaonly", "meta"), "paused", "1"],
    );
    run(
        &mut p,
        &["XADD", &set_key("streamonly", "events"), "*", "a", "1"],
    );
    run(
        &mut p,
        &["HSET", &row_key("rowonly", &job_id(3)), "state", "done"],
    );
    run(
        &mut p,
        &["PEXPIRE", &row_key("rowonly", &job_id(3)), "600000"],
    );
    wait_caught_up(&mut p, &mut r);
    let want = ["delayed", "enqueued", "metaonly", "rowonly", "streamonly"];
    assert!(
        wait_until(Duration::from_secs(5), || all_queues(&mut r, 10) == want),
        "the replica lists {:?}",
        all_queues(&mut r, 10)
    );
    assert_eq!(all_queues(&mut p, 10), want, "as its primary does");
    // A replica that joins later loads the data in a full sync, then rebuilds from it.
    let late = Server::replica_of(&primary, Options::default());
    let mut l = late.conn();
    wait_link_up(&mut l);
    assert_eq!(all_queues(&mut l, 10), want, "after its full sync");
    run(&mut p, &["DEL", &set_key("metaonly", "meta")]);
    run(&mut p, &["DEL", &set_key("enqueued", "pending")]);
    run(&mut p, &["DEL", &row_key("enqueued", &job_id(1))]);
    wait_caught_up(&mut p, &mut r);
    assert_eq!(all_queues(&mut r, 10), ["delayed", "rowonly", "streamonly"]);
}

#[test]
fn the_queues_come_back_after_a_restart() {
    let mut server = Server::start(Options::default());
    let mut con = server.conn();
    config_set(&mut con, "emq.done-ttl-ms", "600000");
    enqueue(&mut con, "ready", &job_id(1), "p");
    enqueue_delayed(&mut con, "delayed", &job_id(2), "p", 600_000);
    enqueue(&mut con, "acked", &job_id(3), "p");
    let claimed: Vec<(String, Vec<u8>, i64)> = cmd("EMQ.CLAIM")
        .arg("acked")
        .query(&mut con)
        .expect("claim");
    let _: i64 = cmd("EMQ.ACK")
        .arg("acked")
        .arg(&claimed[0].0)
        .arg(claimed[0].2)
        .query(&mut con)
        .expect("ack");
    run(&mut con, &["HSET", &set_key("metaonly", "meta"), "a", "1"]);
    // A row without a time to live outside every set holds no queue, before or after.
    run(
        &mut con,
        &["HSET", &row_key("orphan", &job_id(4)), "state", "done"],
    );
    in_db(&mut con, 5);
    enqueue(&mut con, "five", &job_id(5), "p");
    in_db(&mut con, 0);
    let want = ["acked", "delayed", "metaonly", "ready"];
    assert_eq!(all_queues(&mut con, 10), want);
    run(&mut con, &["SAVE"]);
    server.restart(true);
    let mut con = server.conn();
    assert_eq!(all_queues(&mut con, 10), want, "rebuilt from the RDB");
    in_db(&mut con, 5);
    assert_eq!(all_queues(&mut con, 10), ["five"]);
    assert_eq!(known(&mut con), 5);
}

#[test]
fn rename_move_and_copy_carry_the_queue() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "a", &job_id(1), "p");
    run(&mut con, &["HSET", &set_key("a", "meta"), "x", "1"]);
    // RENAME of one key: `a` keeps its meta hash, `b` has a set.
    run(
        &mut con,
        &["RENAME", &set_key("a", "pending"), &set_key("b", "pending")],
    );
    assert_eq!(all_queues(&mut con, 10), ["a", "b"]);
    run(
        &mut con,
        &["RENAME", &set_key("a", "meta"), &set_key("b", "meta")],
    );
    run(
        &mut con,
        &[
            "RENAME",
            &row_key("a", &job_id(1)),
            &row_key("b", &job_id(1)),
        ],
    );
    assert_eq!(all_queues(&mut con, 10), ["b"], "nothing of a is left");
    // MOVE to another database, key by key.
    for key in keys_of(&mut con, "b") {
        run(&mut con, &["MOVE", &key, "1"]);
    }
    assert_eq!(all_queues(&mut con, 10), Vec::<String>::new());
    in_db(&mut con, 1);
    assert_eq!(all_queues(&mut con, 10), ["b"]);
    // COPY within the database and into another.
    run(
        &mut con,
        &["COPY", &set_key("b", "pending"), &set_key("c", "pending")],
    );
    run(
        &mut con,
        &[
            "COPY",
            &set_key("b", "meta"),
            &set_key("d", "meta"),
            "DB",
            "2",
        ],
    );
    assert_eq!(all_queues(&mut con, 10), ["b", "c"]);
    in_db(&mut con, 2);
    assert_eq!(all_queues(&mut con, 10), ["d"]);
    assert_eq!(known(&mut con), 3);
}

#[test]
fn swapdb_and_flushes_follow_the_databases() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "zero", &job_id(1), "p");
    in_db(&mut con, 1);
    enqueue(&mut con, "one", &job_id(1), "p");
    run(&mut con, &["SWAPDB", "0", "1"]);
    assert_eq!(all_queues(&mut con, 10), ["zero"]);
    in_db(&mut con, 0);
    assert_eq!(all_queues(&mut con, 10), ["one"]);
    run(&mut con, &["FLUSHDB"]);
    assert_eq!(all_queues(&mut con, 10), Vec::<String>::new());
    in_db(&mut con, 1);
    assert_eq!(
        all_queues(&mut con, 10),
        ["zero"],
        "another database keeps its own"
    );
    enqueue(&mut con, "again", &job_id(2), "p");
    run(&mut con, &["FLUSHALL"]);
    assert_eq!(all_queues(&mut con, 10), Vec::<String>::new());
    assert_eq!(known(&mut con), 0);
}

#[test]
fn a_queue_is_dropped_with_its_last_key() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    config_set(&mut con, "emq.done-ttl-ms", "0");
    enqueue(&mut con, "q", &job_id(1), "p");
    run(&mut con, &["HSET", &set_key("q", "meta"), "a", "1"]);
    run(&mut con, &["DEL", &set_key("q", "pending")]);
    assert!(is_listed(&mut con, "q"), "its meta hash and its row remain");
    run(&mut con, &["HDEL", &set_key("q", "meta"), "a"]); // the last field: the hash goes
    assert!(
        !is_listed(&mut con, "q"),
        "a row without a time to live holds nothing"
    );
    // Through EchoMQ's own lifecycle: claimed, then acknowledged with no done row kept.
    enqueue(&mut con, "life", &job_id(1), "p");
    let claimed: Vec<(String, Vec<u8>, i64)> =
        cmd("EMQ.CLAIM").arg("life").query(&mut con).expect("claim");
    assert!(is_listed(&mut con, "life"));
    let _: i64 = cmd("EMQ.ACK")
        .arg("life")
        .arg(&claimed[0].0)
        .arg(claimed[0].2)
        .query(&mut con)
        .expect("ack");
    assert!(!is_listed(&mut con, "life"));
    assert_eq!(keys_of(&mut con, "life"), Vec::<String>::new());
    // Cancelled: the pending set and the row go.
    enqueue(&mut con, "cancelled", &job_id(1), "p");
    let _: i64 = cmd("EMQ.CANCEL")
        .arg("cancelled")
        .arg(job_id(1))
        .query(&mut con)
        .expect("cancel");
    assert!(!is_listed(&mut con, "cancelled"));
    // Expired by the server.
    enqueue(&mut con, "expiring", &job_id(1), "p");
    run(&mut con, &["DEL", &row_key("expiring", &job_id(1))]);
    run(
        &mut con,
        &["PEXPIRE", &set_key("expiring", "pending"), "50"],
    );
    assert!(
        wait_listed(&mut con, "expiring", false),
        "dropped once expired"
    );
    assert_eq!(known(&mut con), 0);
}

/// `jobs` jobs of `queue` claimed, then settled one `EMQ.ACK` each or in one `EMQ.MACK`
/// (which notes its rows' expiries and has the registry learn the latest once, at its end):
/// the done rows keep the queue listed until they expire.
fn done_rows_hold_their_queue(queue: &str, jobs: u64, batched: bool) {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    config_set(&mut con, "emq.done-ttl-ms", "1500");
    for n in 1..=jobs {
        enqueue(&mut con, queue, &job_id(n), "p");
    }
    let claimed = claim(&mut con, queue, &["COUNT", &jobs.to_string()]).expect("claimed");
    assert_eq!(claimed.len() as u64, jobs);
    if batched {
        let mut mack = cmd("EMQ.MACK");
        mack.arg(queue);
        for (id, _, token) in &claimed {
            mack.arg(id).arg(token);
        }
        let settled: Vec<i64> = mack.query(&mut con).expect("mack");
        assert_eq!(settled, vec![1; claimed.len()]);
    } else {
        for (id, _, token) in &claimed {
            let _: i64 = cmd("EMQ.ACK")
                .arg(queue)
                .arg(id)
                .arg(token)
                .query(&mut con)
                .expect("ack");
        }
    }
    let mut rows = keys_of(&mut con, queue);
    rows.sort();
    let expected: Vec<String> = (1..=jobs).map(|n| row_key(queue, &job_id(n))).collect();
    assert_eq!(rows, expected);
    assert!(is_listed(&mut con, queue), "its done rows remain");
    assert_eq!(known(&mut con), 1);
    assert!(wait_listed(&mut con, queue, false), "gone with its rows");
    assert_eq!(known(&mut con), 0);
}

#[test]
fn done_rows_hold_their_queue_until_they_expire() {
    done_rows_hold_their_queue("done", 1, false);
}

#[test]
fn done_rows_of_a_batched_settle_hold_their_queue_until_they_expire() {
    done_rows_hold_their_queue("batch", 2, true);
}

#[test]
fn a_restored_queue_is_listed() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    enqueue(&mut con, "moved", &job_id(1), "p");
    let keys = keys_of(&mut con, "moved");
    let dumps: Vec<Vec<u8>> = keys
        .iter()
        .map(|k| cmd("DUMP").arg(k).query(&mut con).expect("DUMP"))
        .collect();
    for k in &keys {
        run(&mut con, &["DEL", k]);
    }
    assert!(!is_listed(&mut con, "moved"));
    for (k, dump) in keys.iter().zip(&dumps) {
        let _: () = cmd("RESTORE")
            .arg(k)
            .arg(0)
            .arg(dump.as_slice())
            .query(&mut con)
            .expect("RESTORE");
    }
    assert!(is_listed(&mut con, "moved"));
}

#[test]
fn a_migrated_queue_leaves_one_server_for_the_other() {
    let (from, to) = (
        Server::start(Options::default()),
        Server::start(Options::default()),
    );
    let (mut src, mut dst) = (from.conn(), to.conn());
    enqueue(&mut src, "travels", &job_id(1), "p");
    enqueue_delayed(&mut src, "travels", &job_id(2), "p", 600_000);
    run(&mut src, &["HSET", &set_key("travels", "meta"), "a", "1"]);
    enqueue(&mut src, "stays", &job_id(1), "p");
    let mut migrate = cmd("MIGRATE");
    migrate
        .arg("127.0.0.1")
        .arg(to.port)
        .arg("")
        .arg(0)
        .arg(5000)
        .arg("KEYS")
        .arg(keys_of(&mut src, "travels"));
    let _: Value = migrate.query(&mut src).expect("MIGRATE");
    assert_eq!(all_queues(&mut src, 10), ["stays"]);
    assert_eq!(all_queues(&mut dst, 10), ["travels"]);
    assert_eq!(stats(&mut dst, "travels")["scheduled"], 1);
}

/// Pages through 2,500 queues with `count` while queues are added and removed between pages:
/// every queue there from start to end is returned exactly once, none twice, and the pages come
/// in name order.
fn page_while_changing(count: usize) {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let name = |i: usize| format!("p{i:05}");
    let mut pipe = redis::pipe();
    for i in 0..2500 {
        pipe.cmd("ZADD")
            .arg(set_key(&name(i * 2), "pending"))
            .arg(0)
            .arg(job_id(1))
            .ignore();
    }
    pipe.query::<()>(&mut con).expect("2,500 queues");
    assert_eq!(all_queues(&mut con, 1000).len(), 2500);
    let mut rng = Rng::seeded(0x51ab_1e00 + count as u64);
    let mut removed = BTreeSet::new();
    let mut seen: BTreeMap<String, usize> = BTreeMap::new();
    let (mut cursor, mut last) = ("0".to_string(), String::new());
    let mut pages = 0;
    loop {
        let (next, names) = page(&mut con, &cursor, count);
        assert!(names.len() <= count);
        for n in &names {
            assert!(*n > last, "{n} after {last}: name order, nothing repeated");
            last = n.clone();
            *seen.entry(n.clone()).or_default() += 1;
        }
        pages += 1;
        if next == "0" {
            break;
        }
        cursor_is_kept_or_last_shown(&next, &names);
        cursor = next;
        // Between pages: one queue removed and one added, anywhere (behind or ahead).
        let gone = name(rng.below(2500) as usize * 2);
        run(&mut con, &["DEL", &set_key(&gone, "pending")]);
        removed.insert(gone);
        let added = name(rng.below(2500) as usize * 2 + 1);
        run(
            &mut con,
            &["ZADD", &set_key(&added, "pending"), "0", &job_id(1)],
        );
    }
    assert!(pages >= 2500 / count, "paged through: {pages} pages");
    for i in 0..2500 {
        let q = name(i * 2);
        if removed.contains(&q) {
            continue;
        }
        assert_eq!(seen.get(&q), Some(&1), "{q} stayed: returned once");
    }
    assert!(seen.values().all(|&n| n == 1), "nothing returned twice");
}

#[test]
fn paging_by_1000_while_queues_come_and_go_skips_and_repeats_nothing() {
    page_while_changing(1000);
}

#[test]
fn paging_by_7_while_queues_come_and_go_skips_and_repeats_nothing() {
    page_while_changing(7);
}

#[test]
fn the_queue_named_0_has_a_cursor_of_its_own() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    for q in ["0", "00", "-", "1"] {
        enqueue(&mut con, q, &job_id(1), "p");
    }
    assert_eq!(
        page(&mut con, "0", 2),
        ("{0}".to_string(), vec!["-".into(), "0".into()])
    );
    assert_eq!(
        page(&mut con, "{0}", 1),
        ("00".to_string(), vec!["00".into()])
    );
    assert_eq!(page(&mut con, "00", 5), ("0".to_string(), vec!["1".into()]));
    // Any queue name serves as a cursor: the page starts after it.
    assert_eq!(page(&mut con, "01", 5).1, ["1"]);
}

#[test]
fn refusals_are_typed_and_counted() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let count =
        |con: &mut Connection, reason: &str| info_int(con, "emq", &format!("emq_refused_{reason}"));
    let (cursors, syntax) = (count(&mut con, "cursor"), count(&mut con, "syntax"));
    for bad in [
        "",
        "a b",
        "a}b",
        "{}",
        "{x}",
        "{1}",
        "{99999999999999999999}",
    ] {
        let e = expect_err(&mut con, cmd("EMQ.QUEUES").arg("CURSOR").arg(bad));
        assert!(e.starts_with("EMQCURSOR "), "{bad:?}: {e}");
    }
    let claim_count = expect_err(
        &mut con,
        cmd("EMQ.CLAIM").arg(unique_queue("q")).arg("COUNT").arg(0),
    );
    for bad in ["0", "1001", "x", "-1"] {
        let e = expect_err(&mut con, cmd("EMQ.QUEUES").arg("COUNT").arg(bad));
        assert_eq!(e, claim_count, "COUNT {bad}: the error EMQ.CLAIM gives");
    }
    assert_eq!(claim_count, "ERR COUNT must be an integer from 1 to 1000");
    let e = expect_err(&mut con, cmd("EMQ.QUEUES").arg("MATCH").arg("x*"));
    assert!(e.starts_with("ERR syntax error"), "{e}");
    let e = expect_err(&mut con, cmd("EMQ.QUEUES").arg("COUNT"));
    assert!(e.starts_with("ERR syntax error"), "{e}");
    assert_eq!(count(&mut con, "cursor"), cursors + 7);
    assert_eq!(count(&mut con, "syntax"), syntax + 4 + 1 + 2);
    // Case-insensitive options, the last of a repeated one wins.
    let (c, names): (String, Vec<String>) = cmd("EMQ.QUEUES")
        .arg("count")
        .arg(5)
        .arg("Count")
        .arg(1)
        .query(&mut con)
        .expect("options");
    assert!(names.len() <= 1 && (c == "0" || names.len() == 1));
}

#[test]
fn the_command_is_a_keyless_read() {
    let server = Server::start_or_external();
    let mut con = server.conn();
    let info: Vec<Value> = cmd("COMMAND")
        .arg("INFO")
        .arg("emq.queues")
        .query(&mut con)
        .expect("COMMAND INFO");
    let text = format!("{info:?}");
    assert!(text.contains("readonly") && text.contains("@emq"), "{text}");
    let e = expect_err(&mut con, cmd("COMMAND").arg("GETKEYS").arg("EMQ.QUEUES"));
    assert!(e.contains("no key arguments"), "{e}");
    // From a script, as any read.
    let reply: Value = redis::Script::new("return redis.call('EMQ.QUEUES', 'COUNT', 1)")
        .invoke(&mut con)
        .expect("from a script");
    assert!(
        matches!(reply, Value::Array(ref a) if a.len() == 2),
        "{reply:?}"
    );
}

#[test]
fn a_user_sees_only_the_queues_it_may_read() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    for q in ["t1-a", "t1-b", "t2-a", "t2-b", "t3"] {
        enqueue(&mut admin, q, &job_id(1), "p");
    }
    let mut t1 = user_with(&server, "t1", &["+@emq", "~emq:{t1-*}:*"]);
    let mut reader = user_with(&server, "reader", &["+@emq", "%R~emq:{t2-*}:pending"]);
    let mut writer = user_with(&server, "writer", &["+@emq", "%W~emq:*"]);
    let mut keyless = user_with(&server, "keyless", &["+@emq"]);
    let mut outsider = user_with(&server, "outsider", &["+@all", "-@emq", "~*"]);
    let log_before: Vec<Value> = cmd("ACL").arg("LOG").query(&mut admin).expect("ACL LOG");
    assert_eq!(all_queues(&mut t1, 1), ["t1-a", "t1-b"]);
    assert_eq!(all_queues(&mut reader, 10), ["t2-a", "t2-b"]);
    assert_eq!(all_queues(&mut writer, 10), Vec::<String>::new());
    assert_eq!(all_queues(&mut keyless, 10), Vec::<String>::new());
    assert_eq!(all_queues(&mut admin, 10).len(), 5);
    let e = expect_err(&mut outsider, &cmd("EMQ.QUEUES"));
    assert!(e.starts_with("NOPERM"), "{e}");
    let log_after: Vec<Value> = cmd("ACL").arg("LOG").query(&mut admin).expect("ACL LOG");
    assert_eq!(
        log_after.len(),
        log_before.len() + 1,
        "hidden queues log nothing; the outsider's command does"
    );
    // A cursor never names a queue the user may not read: `t1-b` is followed by `t2-*`.
    let (cursor, names) = page(&mut t1, "t1-a", 1);
    assert_eq!((cursor.as_str(), names), ("t1-b", vec!["t1-b".to_string()]));
    let (cursor, names) = page(&mut t1, "t1-b", 1);
    assert_eq!((cursor.as_str(), names.len()), ("0", 0));
}

#[test]
fn a_user_who_may_read_few_of_many_queues_pages_past_the_rest() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    // More hidden queues than one call reads (10,000), around two the user may read; all known
    // once a listing's walk (10,000 keys a call) passed every key: the second lists all.
    let mut pipe = redis::pipe();
    for i in 0..12_000 {
        pipe.cmd("ZADD")
            .arg(set_key(&format!("h{i:05}"), "pending"))
            .arg(0)
            .arg(job_id(1))
            .ignore();
    }
    pipe.query::<()>(&mut admin).expect("hidden queues");
    for q in ["h00000-mine", "h11999-mine"] {
        enqueue(&mut admin, q, &job_id(1), "p");
    }
    all_queues(&mut admin, 1000);
    assert_eq!(all_queues(&mut admin, 1000).len(), 12_002);
    let mut mine = user_with(&server, "mine", &["+@emq", "~emq:{*-mine}:*"]);
    let (mut cursor, mut got, mut calls) = ("0".to_string(), Vec::new(), 0);
    loop {
        let (next, names) = page(&mut mine, &cursor, 10);
        calls += 1;
        got.extend(names.clone());
        if next == "0" {
            break;
        }
        cursor_is_kept_or_last_shown(&next, &names);
        assert!(!next.starts_with("h") || next.ends_with("-mine"), "{next}");
        cursor = next;
    }
    assert_eq!(got, ["h00000-mine", "h11999-mine"]);
    assert!(calls >= 2, "12,002 names take more than one call: {calls}");
    // A kept place serves anyone (it names nothing), and the full list is unchanged.
    let (first, _) = page(&mut mine, "h00000-mine", 10);
    assert!(first.starts_with('{'), "{first}");
    let (_, names) = page(&mut admin, &first, 1000);
    assert!(!names.is_empty());
    assert_eq!(all_queues(&mut admin, 1000).len(), 12_002);
}

// ---- the loop docs/commands.md shows -----------------------------------------------------

/// Every queue one node holds in the connection's database, in name order.
fn queues(con: &mut redis::Connection) -> redis::RedisResult<Vec<String>> {
    let (mut cursor, mut all) = (String::from("0"), Vec::new());
    loop {
        let (next, names): (String, Vec<String>) = redis::cmd("EMQ.QUEUES")
            .arg("CURSOR")
            .arg(&cursor)
            .arg("COUNT")
            .arg(1000)
            .query(con)?;
        all.extend(names);
        if next == "0" {
            return Ok(all);
        }
        cursor = next;
    }
}

/// Every queue of a cluster, through any node's address (`redis://127.0.0.1:7001/`).
fn cluster_queues(any_node: &str) -> redis::RedisResult<Vec<String>> {
    let mut con = redis::Client::open(any_node)?.get_connection()?;
    let nodes: String = redis::cmd("CLUSTER").arg("NODES").query(&mut con)?;
    let mut all = Vec::new();
    for line in nodes.lines() {
        let fields: Vec<&str> = line.split(' ').collect();
        if fields.len() < 3 || !fields[2].contains("master") || fields[2].contains("fail") {
            continue;
        }
        // <id> <ip:port@cport[,hostname]> <flags> ...
        let addr = fields[1].split('@').next().unwrap_or_default();
        let mut node = redis::Client::open(format!("redis://{addr}/"))?.get_connection()?;
        all.extend(queues(&mut node)?);
    }
    Ok(all)
}

// ---- end of the loop ---------------------------------------------------------------------

/// The fenced block of `lang` in docs/commands.md's EMQ.QUEUES section.
fn documented(lang: &str) -> String {
    let text = std::fs::read_to_string(repo_root().join("docs/commands.md")).expect("docs");
    let section = text
        .split("\n## EMQ.QUEUES\n")
        .nth(1)
        .and_then(|s| s.split("\n## ").next())
        .expect("an EMQ.QUEUES section");
    section
        .split(&format!("```{lang}\n"))
        .nth(1)
        .and_then(|s| s.split("```").next())
        .unwrap_or_else(|| panic!("a {lang} block"))
        .to_string()
}

#[test]
fn the_documented_rust_loop_is_the_one_tested_here() {
    let source = include_str!("queues.rs");
    let ours = source
        .split("// ---- the loop docs/commands.md shows")
        .nth(1)
        .and_then(|s| s.split("// ---- end of the loop").next())
        .and_then(|s| s.split_once('\n'))
        .map(|(_, body)| body.trim().to_string())
        .expect("the loop in this file");
    assert_eq!(documented("rust").trim(), ours);
}

/// Runs `driver` after the Python block of docs/commands.md, with `args`; its lines.
fn run_documented_python(driver: &str, args: &[String]) -> Vec<String> {
    let program = format!("{}\n{driver}", documented("python"));
    let python = std::env::var("ECHOMQ_PYTHON").unwrap_or_else(|_| "/usr/bin/python3".into());
    let out = Command::new(python)
        .arg("-c")
        .arg(&program)
        .args(args)
        .output()
        .expect("python3 with redis-py (make test installs python3-redis)");
    assert!(
        out.status.success(),
        "the python loop: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn the_documented_python_loop_lists_a_single_node() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let mut pipe = redis::pipe();
    for i in 0..2100 {
        pipe.cmd("EMQ.ENQUEUE")
            .arg(format!("py{i:04}"))
            .arg(job_id(1))
            .arg("p")
            .ignore();
    }
    pipe.query::<()>(&mut con).expect("2,100 queues");
    let printed = run_documented_python(
        "import sys\nr = redis.Redis(port=int(sys.argv[1]), decode_responses=True)\n\
         for name in queues(r):\n    print(name)\n",
        &[server.port.to_string()],
    );
    assert_eq!(
        printed,
        all_queues(&mut con, 1000),
        "every queue, in order, once"
    );
    assert_eq!(printed.len(), 2100);
}

#[test]
fn on_a_cluster_every_primary_lists_its_own_queues_and_together_all_of_them() {
    let cluster = Cluster::start(3, 1);
    let mut client = cluster.client();
    let names: BTreeSet<String> = (0..300).map(|i| format!("c{i:03}")).collect();
    for q in &names {
        let _: i64 = cmd("EMQ.ENQUEUE")
            .arg(q)
            .arg(job_id(1))
            .arg("p")
            .query(&mut client)
            .expect("enqueue");
    }
    let primaries: Vec<_> = cluster
        .topology()
        .into_iter()
        .filter(|n| n.primary)
        .collect();
    assert_eq!(primaries.len(), 3);
    let mut per_node = Vec::new();
    for node in &primaries {
        let mut con = cluster.node(node.port).conn();
        let own = queues(&mut con).expect("a primary's queues");
        assert!(!own.is_empty());
        for q in &own {
            let slot: i64 = cmd("CLUSTER")
                .arg("KEYSLOT")
                .arg(q)
                .query(&mut con)
                .expect("slot");
            assert!(
                node.slots
                    .iter()
                    .any(|(a, b)| (*a as i64..=*b as i64).contains(&slot)),
                "{q} is in a slot of {}",
                node.port
            );
        }
        per_node.push(own);
    }
    let together: Vec<String> = per_node.concat();
    assert_eq!(together.len(), names.len(), "each queue once");
    assert_eq!(together.into_iter().collect::<BTreeSet<_>>(), names);
    // The documented Rust loop over every primary.
    let mut rust = cluster_queues(&cluster.urls()[0]).expect("cluster_queues");
    rust.sort();
    assert_eq!(rust, names.iter().cloned().collect::<Vec<_>>());
    // The documented Python loop, run with redis-py against the cluster.
    let printed = run_documented_python(
        "import sys\nrc = RedisCluster(host='127.0.0.1', port=int(sys.argv[1]), \
         decode_responses=True)\nfor name in cluster_queues(rc):\n    print(name)\n",
        &[cluster.nodes[0].port.to_string()],
    );
    assert_eq!(printed.len(), names.len(), "each queue once: {printed:?}");
    assert_eq!(printed.into_iter().collect::<BTreeSet<_>>(), names);
    // A replica answers for its primary's queues.
    let replica = cluster.replica_of(primaries[0].port);
    let mut con = cluster.node(replica).conn();
    assert!(wait_until(Duration::from_secs(10), || {
        queues(&mut con).expect("a replica's queues") == per_node[0]
    }));
}
