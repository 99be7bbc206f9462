//! Groups (docs/groups.md): `EMQ.ENQUEUE ... GROUP <g>` puts a job in a named group, and claims
//! take turns between the groups with ready jobs, the default group among them. Fairness is
//! measured by claim order, never by time.

use emq_harness as support;

use std::collections::HashMap;
use std::time::Duration;

use redis::{cmd, Value};
use support::flow::{self, cancel, fail, requeue};
use support::*;

fn enqueue_in(con: &mut Connection, q: &str, id: &str, group: &str) -> i64 {
    enqueue_with(con, q, id, &["GROUP", group])
}

/// `EMQ.ENQUEUE <q> <id> "job <id>" <options...>`: its reply, which must be 1.
fn enqueue_with(con: &mut Connection, q: &str, id: &str, options: &[&str]) -> i64 {
    let added: i64 = cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg(format!("job {id}"))
        .arg(options)
        .query(con)
        .expect("enqueue");
    assert_eq!(added, 1, "{id} {options:?}");
    added
}

/// The ids claimed one claim of `count` at a time, until the queue has nothing ready.
fn claim_all(con: &mut Connection, q: &str, count: usize) -> Vec<String> {
    let mut order = Vec::new();
    loop {
        let jobs = claim(con, q, &["COUNT", &count.to_string(), "LEASE", "60000"]).expect("claim");
        if jobs.is_empty() {
            return order;
        }
        order.extend(jobs.into_iter().map(|(id, _, _)| id));
    }
}

/// Each id's group, from `ids` per group.
fn group_of(groups: &[(&str, &[String])]) -> HashMap<String, String> {
    groups
        .iter()
        .flat_map(|(g, ids)| ids.iter().map(move |id| (id.clone(), g.to_string())))
        .collect()
}

fn ids(from: u64, n: u64) -> Vec<String> {
    (from..from + n).map(job_id).collect()
}

/// The queue's keys other than job rows.
fn queue_keys(con: &mut Connection, q: &str) -> Vec<String> {
    keys_of(con, q)
        .into_iter()
        .filter(|k| !k.contains("}:job:"))
        .collect()
}

#[test]
fn a_group_enqueued_after_a_flood_is_claimed_within_the_next_200_claims() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("fair");
    let a = ids(1, 100_000);
    for chunk in a.chunks(5_000) {
        let mut pipe = redis::pipe();
        for id in chunk {
            pipe.cmd("EMQ.ENQUEUE")
                .arg(&q)
                .arg(id)
                .arg("a")
                .arg("GROUP")
                .arg("A")
                .ignore();
        }
        pipe.query::<()>(&mut con).expect("A's jobs");
    }
    // A worker is already through some of A's backlog when B arrives.
    let first: Vec<String> = (0..10)
        .flat_map(|_| claim(&mut con, &q, &["COUNT", "1"]).expect("claim"))
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(first, a[..10]);
    let b = ids(200_001, 100);
    for id in &b {
        assert_eq!(enqueue_in(&mut con, &q, id, "B"), 1);
    }
    let mut claimed = Vec::new();
    while claimed.len() < 200 {
        let jobs = claim(&mut con, &q, &["COUNT", "1"]).expect("claim");
        claimed.extend(jobs.into_iter().map(|(id, _, _)| id));
    }
    let of_b: Vec<&String> = claimed.iter().filter(|id| b.contains(id)).collect();
    assert_eq!(
        of_b.len(),
        100,
        "every B job within 200 claims of B's enqueue (the issue allows 250)"
    );
    assert_eq!(
        of_b,
        b.iter().collect::<Vec<_>>(),
        "B's jobs in their order"
    );
    // A's jobs kept their relative order throughout.
    let of_a: Vec<&String> = first
        .iter()
        .chain(&claimed)
        .filter(|id| !b.contains(id))
        .collect();
    assert_eq!(of_a, a[..of_a.len()].iter().collect::<Vec<_>>());
}

#[test]
fn claims_take_turns_between_the_named_groups_and_the_default_group() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("turns");
    let (a, b, plain) = (ids(1, 6), ids(101, 2), ids(201, 3));
    for id in &a {
        enqueue_in(&mut con, &q, id, "a");
    }
    for id in &b {
        enqueue_in(&mut con, &q, id, "b");
    }
    for id in &plain {
        enqueue(&mut con, &q, id, "plain");
    }
    let s = stats(&mut con, &q);
    assert_eq!((s["pending"], s["groups"]), (11, 2), "the named groups");
    let of = group_of(&[("a", &a), ("b", &b), ("-", &plain)]);
    // One claim of many takes its jobs by the same turns as many claims of one.
    for count in [1, 4] {
        let q = format!("{q}-{count}");
        for id in &a {
            enqueue_in(&mut con, &q, id, "a");
        }
        for id in &b {
            enqueue_in(&mut con, &q, id, "b");
        }
        for id in &plain {
            enqueue(&mut con, &q, id, "plain");
        }
        let order: Vec<&str> = claim_all(&mut con, &q, count)
            .iter()
            .map(|id| of[id].as_str())
            .collect();
        assert_eq!(
            order,
            ["a", "b", "-", "a", "b", "-", "a", "-", "a", "a", "a"],
            "COUNT {count}"
        );
        // Every group spent: only their active jobs' counts are left.
        assert_eq!(
            queue_keys(&mut con, &q),
            [
                set_key(&q, "active"),
                set_key(&q, "groups"),
                set_key(&q, "meta"),
                set_key(&q, "tally")
            ]
        );
        let s = stats(&mut con, &q);
        assert_eq!((s["pending"], s["groups"], s["active"]), (0, 2, 11));
    }
}

#[test]
fn priorities_are_exact_within_a_group() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("prio");
    for (n, priority) in [(1, 0), (2, -5), (3, 7), (4, -5)] {
        let priority = priority.to_string();
        enqueue_with(
            &mut con,
            &q,
            &job_id(n),
            &["PRIORITY", &priority, "GROUP", "g"],
        );
    }
    assert_eq!(
        claim_all(&mut con, &q, 1),
        [job_id(2), job_id(4), job_id(1), job_id(3)]
    );
}

#[test]
fn a_grouped_job_goes_back_to_its_group_when_due_expired_or_requeued() {
    let server = Server::start(
        Options::default()
            .arg("emq.max-attempts", "2")
            .arg("emq.backoff-base-ms", "1"),
    );
    let mut con = server.conn();
    let q = unique_queue("back");
    // Delayed: promoted into its group, not into `pending`.
    enqueue_with(&mut con, &q, &job_id(1), &["DELAY", "50", "GROUP", "g"]);
    let jobs = claim(&mut con, &q, &["BLOCK", "5000", "LEASE", "100"]).expect("claimed");
    assert_eq!(jobs[0].0, job_id(1));
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    // Its lease runs out: back into its group.
    let back = wait_until(Duration::from_secs(10), || {
        job_state(&mut con, &q, &job_id(1)).as_deref() == Some("pending")
    });
    assert!(back, "the expired lease was promoted");
    let group: Vec<String> = cmd("ZRANGE")
        .arg(format!("emq:{{{q}}}:group:g"))
        .arg(0)
        .arg(-1)
        .query(&mut con)
        .expect("ZRANGE");
    assert_eq!(group, [job_id(1)]);
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    // EMQ.JOB finds it pending.
    let view: Vec<(String, Value)> = map_pairs(
        &cmd("EMQ.JOB")
            .arg(&q)
            .arg(job_id(1))
            .query::<Value>(&mut server.conn3())
            .expect("EMQ.JOB"),
    );
    let set = view.iter().find(|(k, _)| k == "set").map(|(_, v)| text(v));
    assert_eq!(set.as_deref(), Some("pending"));
    // Failed on its last attempt, then requeued: back into its group.
    let (id, _, token) = claim(&mut con, &q, &["LEASE", "60000"]).expect("claim")[0].clone();
    fail(&mut con, &q, &id, token, "boom");
    assert_eq!(job_state(&mut con, &q, &id).as_deref(), Some("dead"));
    assert_eq!(requeue(&mut con, &q, &id), 1);
    assert_eq!(stats(&mut con, &q)["pending"], 1);
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    assert_eq!(claim_all(&mut con, &q, 10), [job_id(1)]);
}

#[test]
fn cancelling_a_ready_grouped_job_takes_it_out_of_its_group() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("cancel");
    enqueue_in(&mut con, &q, &job_id(1), "g");
    enqueue_in(&mut con, &q, &job_id(2), "g");
    for n in [1, 2] {
        assert_eq!(cancel(&mut con, &q, &job_id(n)), 1);
        assert_eq!(stats(&mut con, &q)["pending"], 2 - n as i64);
    }
    // The group, its turn, its count and its place in the index are gone with its last job.
    assert_eq!(queue_keys(&mut con, &q), [set_key(&q, "meta")]);
    assert_eq!(stats(&mut con, &q)["groups"], 0);
}

#[test]
fn a_parent_in_a_group_is_released_into_its_group() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("flow");
    enqueue_with(
        &mut con,
        &q,
        &job_id(1),
        &["CHILDREN", "1", "GROUP", "tenant"],
    );
    enqueue_with(&mut con, &q, &job_id(2), &["PARENT", &q, &job_id(1)]);
    let (id, _, token) = claim(&mut con, &q, &[]).expect("claim")[0].clone();
    assert_eq!(id, job_id(2));
    ack(&mut con, &q, &(id, Vec::new(), token));
    assert_eq!(
        job_state(&mut con, &q, &job_id(1)).as_deref(),
        Some("pending")
    );
    assert_eq!(set_len(&mut con, &q, "pending"), 0);
    assert_eq!(
        row_field(&mut con, &q, &job_id(1), "group").as_deref(),
        Some("tenant")
    );
    assert_eq!(claim_all(&mut con, &q, 5), [job_id(1)]);
}

#[test]
fn a_claimer_blocked_on_the_queue_is_woken_by_a_grouped_enqueue() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let q = unique_queue("wake");
    let waiting = blocked_claim(&mut admin, server.conn(), &q, 10_000);
    enqueue_in(&mut admin, &q, &job_id(1), "g");
    let reply = waiting.join().expect("thread").expect("claim");
    let Value::Array(jobs) = reply else {
        panic!("{reply:?}")
    };
    assert_eq!(jobs.len(), 1, "the blocked claim took the grouped job");
}

#[test]
fn group_names_follow_the_queue_names_rules() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let base = cmd("EMQ.ENQUEUE").arg("q").arg("*").arg("p").clone();
    assert_refused(
        &mut con,
        &base,
        &[
            (&["GROUP", ""], "ERR a group's name"),
            (&["GROUP", "a b"], "ERR a group's name"),
            (&["GROUP", "a{b"], "ERR a group's name"),
            (&["GROUP", &"g".repeat(129)], "ERR a group's name"),
            (&["GROUP", "a", "GROUP", "b"], "ERR syntax error"),
            (&["GROUP"], "ERR syntax error"),
        ],
    );
    assert!(keys_of(&mut con, "q").is_empty(), "nothing written");
    let decoded: Vec<(String, Value)> = map_pairs(
        &cmd("EMQ.DECODE")
            .arg("emq:{q}:group:acme")
            .query::<Value>(&mut server.conn3())
            .expect("decode"),
    );
    let get = |k: &str| decoded.iter().find(|(f, _)| f == k).map(|(_, v)| text(v));
    assert_eq!(get("type").as_deref(), Some("group"));
    assert_eq!(get("group").as_deref(), Some("acme"));
    let key: String = cmd("EMQ.KEY")
        .arg("q")
        .arg("group")
        .arg("acme")
        .query(&mut con)
        .expect("EMQ.KEY");
    assert_eq!(key, "emq:{q}:group:acme");
}

#[test]
fn a_grouped_enqueue_needs_the_groups_keys_and_writes_nothing_without_them() {
    let server = Server::start(Options::default());
    let mut admin = server.conn();
    let q = unique_queue("acl");
    let mut user = user_with(
        &server,
        "nogroups",
        &[
            "+@all",
            &format!("~emq:{{{q}}}:job:*"),
            &format!("~emq:{{{q}}}:pending"),
            &format!("~emq:{{{q}}}:meta"),
        ],
    );
    let refused = expect_err(
        &mut user,
        cmd("EMQ.ENQUEUE")
            .arg(&q)
            .arg(job_id(1))
            .arg("p")
            .arg("GROUP")
            .arg("g"),
    );
    assert!(refused.starts_with("NOPERM"), "{refused}");
    assert!(keys_of(&mut admin, &q).is_empty(), "nothing written");
    // The same user enqueues to the default group.
    assert_eq!(enqueue(&mut user, &q, &job_id(1), "p"), 1);
}

#[test]
fn a_replica_holds_the_same_groups() {
    let (primary, replica) = primary_and_replica(Options::default());
    let mut p = primary.conn();
    let mut r = replica.conn();
    wait_link_up(&mut r);
    let q = unique_queue("repl");
    for n in 1..=6 {
        enqueue_in(
            &mut p,
            &q,
            &job_id(n),
            if n % 2 == 0 { "even" } else { "odd" },
        );
    }
    enqueue(&mut p, &q, &job_id(7), "plain");
    claim(&mut p, &q, &["COUNT", "4"]).expect("claim");
    wait_caught_up(&mut p, &mut r);
    assert_eq!(digest(&mut p), digest(&mut r));
    assert_eq!(stats(&mut r, &q)["pending"], 3);
}

/// The harness's `EMQ.ACK` of a claimed job, which must leave it done.
fn ack(con: &mut Connection, q: &str, job: &Job) {
    flow::ack(con, q, &job.0, job.2, "");
    assert_eq!(job_state(con, q, &job.0).as_deref(), Some("done"));
}

/// `EMQ.LIMIT <queue> GROUP <g> ...` as (field, value) pairs.
fn group_limit(
    con: &mut Connection,
    q: &str,
    group: &str,
    opts: &[&str],
) -> HashMap<String, Value> {
    let pairs: Vec<(String, Value)> = cmd("EMQ.LIMIT")
        .arg(q)
        .arg("GROUP")
        .arg(group)
        .arg(opts)
        .query(con)
        .expect("EMQ.LIMIT GROUP");
    pairs.into_iter().collect()
}

#[test]
fn a_group_at_its_concurrency_limit_is_skipped_and_never_blocks_the_others() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("quota");
    let (a, b, c) = (ids(1, 20), ids(101, 20), ids(201, 20));
    for (group, ids) in [("a", &a), ("b", &b), ("c", &c)] {
        for id in ids {
            enqueue_in(&mut con, &q, id, group);
        }
    }
    limit(&mut con, &q, &["GROUP-CONCURRENCY", "2"]);
    let b_limit = group_limit(&mut con, &q, "b", &["CONCURRENCY", "5"]);
    assert_eq!(b_limit["concurrency"], Value::Int(5));
    assert_eq!(b_limit["group-concurrency"], Value::Int(2));
    let of = group_of(&[("a", &a), ("b", &b), ("c", &c)]);
    let group_counts = |jobs: &[Job]| {
        let mut n: HashMap<&str, usize> = HashMap::new();
        for job in jobs {
            *n.entry(of[&job.0].as_str()).or_default() += 1;
        }
        n
    };
    // One claim of many takes each group up to its limit, and no further.
    let held = claim(&mut con, &q, &["COUNT", "100"]).expect("claim");
    let n = group_counts(&held);
    assert_eq!((n["a"], n["b"], n["c"]), (2, 5, 2));
    assert!(claim(&mut con, &q, &["COUNT", "100"])
        .expect("claim")
        .is_empty());
    assert_eq!(group_limit(&mut con, &q, "a", &[])["held"], Value::Int(1));
    // A's job done frees one place, for A alone.
    let first_a = held.iter().find(|j| of[&j.0] == "a").expect("an A job");
    ack(&mut con, &q, first_a);
    let next = claim(&mut con, &q, &["COUNT", "100"]).expect("claim");
    assert_eq!(group_counts(&next), HashMap::from([("a", 1)]));
    // A raised limit lets the held groups go on at once.
    limit(&mut con, &q, &["GROUP-CONCURRENCY", "3"]);
    let more = claim(&mut con, &q, &["COUNT", "100"]).expect("claim");
    assert_eq!(
        group_counts(&more),
        HashMap::from([("a", 1), ("c", 1)]),
        "B is at its own 5"
    );
    // Through every claim the server's counts never passed a limit.
    for (group, most) in [("a", 3), ("b", 5), ("c", 3)] {
        let usage = group_limit(&mut con, &q, group, &[]);
        assert_eq!(usage["active"], Value::Int(most), "{group}");
    }
}

#[test]
fn the_queue_wide_limit_and_the_groups_limits_combine() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("both");
    for n in 1..=10 {
        enqueue_in(&mut con, &q, &job_id(n), if n <= 5 { "a" } else { "b" });
    }
    limit(
        &mut con,
        &q,
        &["CONCURRENCY", "3", "GROUP-CONCURRENCY", "1"],
    );
    assert_eq!(
        claim(&mut con, &q, &["COUNT", "10"]).expect("claim").len(),
        2
    );
    limit(&mut con, &q, &["GROUP-CONCURRENCY", "OFF"]);
    assert_eq!(
        claim(&mut con, &q, &["COUNT", "10"]).expect("claim").len(),
        1
    );
    assert_eq!(stats(&mut con, &q)["active"], 3);
}

#[test]
fn jobs_active_before_the_first_group_count_against_the_default_group() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("before");
    for n in 1..=4 {
        enqueue(&mut con, &q, &job_id(n), "plain");
    }
    let early = claim(&mut con, &q, &["COUNT", "2"]).expect("claim");
    assert_eq!(early.len(), 2);
    // The limit marks the queue grouped: the two running jobs are the default group's.
    limit(&mut con, &q, &["GROUP-CONCURRENCY", "2"]);
    assert!(claim(&mut con, &q, &["COUNT", "10"])
        .expect("claim")
        .is_empty());
    enqueue_in(&mut con, &q, &job_id(10), "g");
    let grouped = claim(&mut con, &q, &["COUNT", "10"]).expect("claim");
    assert_eq!(grouped.len(), 1);
    assert_eq!(grouped[0].0, job_id(10));
    ack(&mut con, &q, &early[0]);
    let plain = claim(&mut con, &q, &["COUNT", "10"]).expect("claim");
    assert_eq!(
        plain.iter().map(|j| j.0.clone()).collect::<Vec<_>>(),
        [job_id(3)]
    );
}

#[test]
fn a_paused_group_is_skipped_until_resumed_or_its_time_is_up() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("pause");
    for n in 1..=3 {
        enqueue_in(&mut con, &q, &job_id(n), "a");
        enqueue_in(&mut con, &q, &job_id(10 + n), "b");
    }
    let paused: i64 = cmd("EMQ.PAUSE")
        .arg(&q)
        .arg("GROUP")
        .arg("a")
        .query(&mut con)
        .expect("pause");
    assert_eq!(paused, 1);
    // Enqueues go on; claims take only B's.
    enqueue_in(&mut con, &q, &job_id(4), "a");
    assert_eq!(claim_all(&mut con, &q, 10), ids(11, 3));
    let resumed: i64 = cmd("EMQ.RESUME")
        .arg(&q)
        .arg("GROUP")
        .arg("a")
        .query(&mut con)
        .expect("resume");
    assert_eq!(resumed, 1);
    assert_eq!(claim_all(&mut con, &q, 10), ids(1, 4));
    // Paused for a while: the timer resumes it, and wakes a claimer waiting on the queue.
    enqueue_in(&mut con, &q, &job_id(5), "a");
    let _: i64 = cmd("EMQ.PAUSE")
        .arg(&q)
        .arg("GROUP")
        .arg("a")
        .arg("FOR")
        .arg(200)
        .query(&mut con)
        .expect("pause for");
    assert!(claim(&mut con, &q, &[]).expect("claim").is_empty());
    let woken = claim(&mut con, &q, &["BLOCK", "10000"]).expect("the group resumed");
    assert_eq!(woken[0].0, job_id(5));
    let refused = expect_err(
        &mut con,
        cmd("EMQ.PAUSE")
            .arg(&q)
            .arg("GROUP")
            .arg("a")
            .arg("FOR")
            .arg(0),
    );
    assert!(refused.starts_with("ERR"), "{refused}");
}

#[test]
fn groups_page_by_backlog_and_leave_no_keys_when_idle() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("page");
    let mut n = 0;
    for (group, jobs) in [("small", 1), ("big", 5), ("mid", 3)] {
        for _ in 0..jobs {
            n += 1;
            enqueue_in(&mut con, &q, &job_id(n), group);
        }
    }
    let mut seen = Vec::new();
    let mut cursor = "0".to_string();
    loop {
        let (next, page): (String, Vec<HashMap<String, Value>>) = cmd("EMQ.GROUPS")
            .arg(&q)
            .arg("CURSOR")
            .arg(&cursor)
            .arg("COUNT")
            .arg(2)
            .query(&mut con)
            .expect("EMQ.GROUPS");
        seen.extend(page.iter().map(|g| (text(&g["group"]), g["ready"].clone())));
        if next == "0" {
            break;
        }
        cursor = next;
    }
    assert_eq!(
        seen,
        [
            ("big".to_string(), Value::Int(5)),
            ("mid".to_string(), Value::Int(3)),
            ("small".to_string(), Value::Int(1))
        ]
    );
    // Every job claimed and done: nothing of the groups is left.
    for job in claim(&mut con, &q, &["COUNT", "100"]).expect("claim") {
        ack(&mut con, &q, &job);
    }
    assert_eq!(queue_keys(&mut con, &q), [set_key(&q, "meta")]);
    assert_eq!(stats(&mut con, &q)["groups"], 0);
}

#[test]
fn a_settle_refused_for_a_damaged_group_key_writes_nothing_and_goes_through_once_repaired() {
    let server = Server::start(Options::default().arg("enable-debug-command", "local"));
    let mut con = server.conn();
    let q = unique_queue("damagedgroup");
    enqueue_in(&mut con, &q, &job_id(1), "ga");
    let jobs = claim(&mut con, &q, &["LEASE", "600000"]).expect("claim");
    let token = jobs[0].2;
    // The group's own key, then its count of active jobs, of another type: each refuses the
    // ack before the job leaves `active`, and deleting the key lets it through.
    for key in [set_key(&q, "group:ga"), set_key(&q, "tally")] {
        let _: () = cmd("SET").arg(&key).arg("x").query(&mut con).expect("set");
        let before = digest(&mut con);
        let refused = cmd("EMQ.ACK")
            .arg(&q)
            .arg(job_id(1))
            .arg(token)
            .query::<Value>(&mut con)
            .expect_err("refused");
        assert_eq!(refused.code(), Some("WRONGTYPE"), "{key}");
        assert_eq!(digest(&mut con), before, "{key}: nothing written");
        let _: () = cmd("DEL").arg(&key).query(&mut con).expect("del");
    }
    let acked: i64 = cmd("EMQ.ACK")
        .arg(&q)
        .arg(job_id(1))
        .arg(token)
        .query(&mut con)
        .expect("ack");
    assert_eq!(acked, 1);
}

#[test]
fn a_group_whose_only_limit_of_its_own_is_a_rate_is_listed() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("ratelisted");
    group_limit(&mut con, &q, "gx", &["RATE", "5", "PER", "100000"]);
    let (_, page): (String, Vec<HashMap<String, Value>>) = cmd("EMQ.GROUPS")
        .arg(&q)
        .query(&mut con)
        .expect("EMQ.GROUPS");
    let listed: Vec<String> = page.iter().map(|g| text(&g["group"])).collect();
    assert_eq!(listed, ["gx"]);
    assert_eq!(stats(&mut con, &q)["groups"], 1);
    // Its rate removed, it has nothing left and is forgotten.
    group_limit(&mut con, &q, "gx", &["RATE", "OFF"]);
    assert_eq!(stats(&mut con, &q)["groups"], 0);
}

#[test]
fn a_group_at_its_rate_limit_waits_for_its_window_while_the_others_go_on() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("rate");
    let (a, b, c) = (ids(1, 5), ids(101, 5), ids(201, 5));
    for (group, ids) in [("a", &a), ("b", &b), ("c", &c)] {
        for id in ids {
            enqueue_in(&mut con, &q, id, group);
        }
    }
    // Every group 3 a minute, and A its own 2 a minute.
    limit(&mut con, &q, &["GROUP-RATE", "3", "PER", "60000"]);
    let own = group_limit(&mut con, &q, "a", &["RATE", "2", "PER", "60000"]);
    assert_eq!(
        (own["rate"].clone(), own["group-rate"].clone()),
        (Value::Int(2), Value::Int(3))
    );
    let of = group_of(&[("a", &a), ("b", &b), ("c", &c)]);
    let taken: Vec<&str> = claim_all(&mut con, &q, 1)
        .iter()
        .map(|id| of[id].as_str())
        .collect();
    assert_eq!(taken, ["a", "b", "c", "a", "b", "c", "b", "c"]);
    let a_use = group_limit(&mut con, &q, "a", &[]);
    assert_eq!(
        (a_use["rate-used"].clone(), a_use["held"].clone()),
        (Value::Int(2), Value::Int(1))
    );
    // An ack frees no place in a window: A stays held.
    let done = claim(&mut con, &q, &["COUNT", "10"]).expect("claim");
    assert!(done.is_empty());
    // Its own rate removed, A goes on under the default until that window is full too.
    group_limit(&mut con, &q, "a", &["RATE", "OFF"]);
    assert_eq!(
        claim_all(&mut con, &q, 10).len(),
        1,
        "one more under the default 3"
    );
}

#[test]
fn a_claimer_waiting_on_a_group_held_by_its_rate_is_served_when_the_window_frees() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("window");
    for n in 1..=3 {
        enqueue_in(&mut con, &q, &job_id(n), "g");
    }
    group_limit(&mut con, &q, "g", &["RATE", "2", "PER", "300"]);
    assert_eq!(claim_all(&mut con, &q, 10), ids(1, 2));
    // The timer trims the window and gives the group its turn back; the claim waiting gets it.
    let last = claim(&mut con, &q, &["BLOCK", "10000"]).expect("served before the block ran out");
    assert_eq!(last[0].0, job_id(3));
    let usage = group_limit(&mut con, &q, "g", &[]);
    assert_eq!(usage["held"], Value::Int(0));
}

#[test]
fn a_group_at_its_limit_when_its_next_job_arrives_waits_held_not_in_the_turns() {
    let server = Server::start(Options::default());
    let mut con = server.conn();
    let q = unique_queue("atlimit");
    limit(&mut con, &q, &["GROUP-CONCURRENCY", "1"]);
    for t in 0..3 {
        enqueue_in(&mut con, &q, &job_id(10 * t + 1), &format!("t{t}"));
        assert_eq!(claim(&mut con, &q, &[]).expect("claim").len(), 1);
        enqueue_in(&mut con, &q, &job_id(10 * t + 2), &format!("t{t}"));
    }
    // No claim passes over them: each waits for a place, held.
    assert!(set_members(&mut con, &q, "turns").is_empty());
    assert_eq!(set_members(&mut con, &q, "held"), ["t0", "t1", "t2"]);
    assert!(claim(&mut con, &q, &["COUNT", "10"])
        .expect("claim")
        .is_empty());
    // A name outside the grammar, written into the turns by hand, is dropped by the next claim.
    let _: i64 = cmd("ZADD")
        .arg(set_key(&q, "turns"))
        .arg(1)
        .arg("a b")
        .query(&mut con)
        .expect("ZADD");
    assert!(claim(&mut con, &q, &[]).expect("claim").is_empty());
    assert!(set_members(&mut con, &q, "turns").is_empty());
}

#[test]
fn a_requeue_refused_the_groups_keys_leaves_the_dead_job_where_it_was() {
    let server = Server::start(Options::default().arg("emq.max-attempts", "1"));
    let mut admin = server.conn();
    let q = unique_queue("refused");
    let keys =
        ["pending", "active", "schedule", "dead", "meta"].map(|t| format!("~{}", set_key(&q, t)));
    let rows = format!("~emq:{{{q}}}:job:*");
    let mut rules: Vec<&str> = vec!["+@all", &rows];
    rules.extend(keys.iter().map(String::as_str));
    let mut operator = user_with(&server, "classic", &rules);
    enqueue_in(&mut admin, &q, &job_id(1), "a");
    let (id, _, token) = claim(&mut admin, &q, &[]).expect("claim")[0].clone();
    fail(&mut admin, &q, &id, token, "boom");
    assert_eq!(job_state(&mut admin, &q, &id).as_deref(), Some("dead"));
    let refused = expect_err(&mut operator, cmd("EMQ.REQUEUE").arg(&q).arg(&id));
    assert!(refused.starts_with("NOPERM"), "{refused}");
    let refused = expect_err(&mut operator, cmd("EMQ.REQUEUE").arg(&q).arg("DEAD"));
    assert!(refused.starts_with("NOPERM"), "{refused}");
    // Nothing written: the job is dead, in `dead`, and a requeue with the keys brings it back.
    assert_eq!(job_state(&mut admin, &q, &id).as_deref(), Some("dead"));
    assert_eq!(
        set_members(&mut admin, &q, "dead"),
        std::slice::from_ref(&id)
    );
    assert_eq!(requeue(&mut admin, &q, &id), 1);
    assert_eq!(claim_all(&mut admin, &q, 10), [id]);
}
