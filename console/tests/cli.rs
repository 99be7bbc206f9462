//! `emq`'s subcommands against real servers: the queues of every primary with their counts,
//! text and JSON, exit codes, the server's errors as they are, the bounded loops of purge
//! and requeue run to the end (and refused without --yes off a terminal), a queue's groups
//! listed by backlog and one paused and resumed, and control characters of what they print
//! escaped.

mod common;

use common::{
    claim_payloads, count, emq, enqueue, enqueue_with, kill_next, server, servers_load_the_module,
    Cluster,
};
use serde_json::Value as Json;

#[test]
fn queues_lists_every_queue_with_its_counts_as_text_and_json() {
    let s = server();
    let mut con = s.conn();
    for n in 0..3 {
        enqueue(&mut con, "orders", &format!("order {n}"));
    }
    enqueue(&mut con, "emails", "hello");
    kill_next(&mut con, "emails", "smtp down");

    let (code, text, _) = emq(&s.url(), &["queues"]);
    assert_eq!(code, 0);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("queue"), "{text}");
    let orders: Vec<&str> = lines[2].split_whitespace().collect();
    assert_eq!(orders[..5], ["orders", "3", "0", "0", "0"], "{text}");
    let emails: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(emails[..5], ["emails", "0", "0", "0", "1"], "{text}");

    let (code, json, _) = emq(&s.url(), &["--json", "queues"]);
    assert_eq!(code, 0);
    let rows: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(rows[1]["name"], "orders");
    assert_eq!(rows[1]["pending"], 3);
    assert!(rows[1]["oldest_pending_ms"].as_u64().is_some(), "{json}");
    assert_eq!(rows[0]["dead"], 1);
}

#[test]
fn job_and_jobs_show_the_row_payload_and_error_and_a_missing_job_exits_3() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "mail", "to ann");
    let id = kill_next(&mut con, "mail", "mailbox full\nTraceback ...");

    let (code, text, _) = emq(&s.url(), &["job", "mail", &id]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("dead") && text.contains("mailbox full"),
        "{text}"
    );
    let (_, json, _) = emq(&s.url(), &["--json", "job", "mail", &id]);
    let row: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(row["set"], "dead");
    assert_eq!(row["payload"], "to ann");

    let (code, text, _) = emq(&s.url(), &["jobs", "mail", "dead"]);
    assert_eq!(code, 0);
    assert!(
        text.contains(&id) && text.contains("error: mailbox full"),
        "{text}"
    );
    let (_, json, _) = emq(&s.url(), &["--json", "jobs", "mail", "dead"]);
    let page: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(page["cursor"], "0");
    assert_eq!(page["jobs"][0]["id"], id.as_str());
    assert_eq!(page["jobs"][0]["error"], "mailbox full\nTraceback ...");

    let (code, text, _) = emq(&s.url(), &["job", "mail", "JOB00000000000"]);
    assert_eq!(code, 3, "{text}");
    let (code, _, json) = emq(&s.url(), &["--json", "job", "mail", "JOB00000000000"]);
    assert_eq!((code, json.as_str()), (3, ""));
}

#[test]
fn the_server_s_errors_are_shown_as_they_are_and_exit_1_and_usage_errors_exit_2() {
    let s = server();
    let (code, _, err) = emq(&s.url(), &["jobs", "mail", "finished"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("EMQSET unknown set"), "{err}");
    let (code, _, err) = emq(&s.url(), &["enqueue", "bad{name}", "x"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("EMQQUEUE"), "{err}");
    let (code, _, err) = emq(&s.url(), &["purge", "mail", "active", "--yes"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("EMQSET"), "{err}");
    let (code, _, err) = emq(&s.url(), &["requeue", "mail"]);
    assert_eq!(code, 2, "{err}");
    let (code, _, _) = emq(&s.url(), &["jobs", "mail", "dead", "--count", "0"]);
    assert_eq!(code, 2);
    let (code, _, err) = emq("redis://127.0.0.1:1", &["queues"]);
    assert_eq!(code, 1);
    assert!(err.to_lowercase().contains("refused"), "{err}");
}

/// `emq enqueue QUEUE PAYLOAD OPTIONS...` (`args`), which succeeds: the job's id and its row
/// (`emq --json job`).
fn enqueued(url: &str, args: &[&str]) -> (String, Json) {
    let (code, id, _) = emq(url, &[&["enqueue"], args].concat());
    assert_eq!(code, 0);
    let id = id.trim().to_string();
    let (_, json, _) = emq(url, &["--json", "job", args[0], &id]);
    (id, serde_json::from_str(&json).expect("json"))
}

#[test]
fn pause_resume_enqueue_cancel_and_requeue_change_the_queue_on_the_server() {
    let s = server();
    let mut con = s.conn();
    assert_eq!(emq(&s.url(), &["pause", "work"]).1.trim(), "paused");
    assert_eq!(count(&mut con, "work", "paused"), 1);
    assert_eq!(emq(&s.url(), &["pause", "work"]).1.trim(), "paused already");
    assert_eq!(emq(&s.url(), &["resume", "work"]).1.trim(), "resumed");
    assert_eq!(count(&mut con, "work", "paused"), 0);

    let (code, id, _) = emq(&s.url(), &["enqueue", "work", "one", "--priority", "-5"]);
    assert_eq!(code, 0);
    let id = id.trim().to_string();
    assert_eq!(count(&mut con, "work", "pending"), 1);
    let (_, json, _) = emq(&s.url(), &["--json", "job", "work", &id]);
    assert_eq!(
        serde_json::from_str::<Json>(&json).expect("json")["priority"],
        "-5"
    );
    let (code, _, _) = emq(
        &s.url(),
        &["enqueue", "work", "later", "--delay-ms", "60000"],
    );
    assert_eq!(code, 0);
    assert_eq!(count(&mut con, "work", "scheduled"), 1);
    let (timed, row) = enqueued(&s.url(), &["work", "timed", "--timeout-ms", "90000"]);
    assert_eq!(row["timeout"], "90000");
    assert_eq!(emq(&s.url(), &["cancel", "work", &timed]).0, 0);
    let (_, row) = enqueued(&s.url(), &["grouped", "mine", "--group", "tenant-1"]);
    assert_eq!(row["group"], "tenant-1");
    let (_, row) = enqueued(
        &s.url(),
        &["headed", "job", "--header", "tenant=a=b", "--header", "k=v"],
    );
    assert_eq!(row["headers"], "tenant:a=b\nk:v");
    let (_, json, _) = emq(&s.url(), &["--json", "stats", "grouped"]);
    let stats = serde_json::from_str::<Json>(&json).expect("json");
    assert_eq!(
        (
            stats["grouped"]["groups"].as_i64(),
            stats["grouped"]["pending"].as_i64()
        ),
        (Some(1), Some(1)),
        "{stats}"
    );
    assert_eq!(emq(&s.url(), &["cancel", "work", &id]).0, 0);
    assert_eq!(emq(&s.url(), &["cancel", "work", &id]).0, 3);
    assert_eq!(count(&mut con, "work", "pending"), 0);

    enqueue(&mut con, "work", "two");
    let dead = kill_next(&mut con, "work", "boom");
    assert_eq!(emq(&s.url(), &["requeue", "work", &dead]).0, 0);
    assert_eq!(count(&mut con, "work", "pending"), 1);
    assert_eq!(emq(&s.url(), &["requeue", "work", &dead]).0, 3);

    // A running job: its attempt ends, and it is dead with the error `cancelled`.
    let _: redis::Value = redis::cmd("EMQ.CLAIM")
        .arg("work")
        .query(&mut con)
        .expect("claim");
    assert_eq!(count(&mut con, "work", "active"), 1);
    assert_eq!(emq(&s.url(), &["cancel", "work", &dead]).0, 0);
    assert_eq!(count(&mut con, "work", "active"), 0);
    assert_eq!(count(&mut con, "work", "dead"), 1);
    let (_, json, _) = emq(&s.url(), &["--json", "job", "work", &dead]);
    assert_eq!(
        serde_json::from_str::<Json>(&json).expect("json")["error"],
        "cancelled"
    );
}

/// `emq --json args...` read as JSON; it must exit 0.
fn emq_json(url: &str, args: &[&str]) -> Json {
    let (code, out, err) = emq(url, &[&["--json"], args].concat());
    assert_eq!(code, 0, "{err}");
    serde_json::from_str(&out).expect("json")
}

/// The `field` of each group of a `--json groups` page.
fn each(page: &Json, field: &str) -> Vec<Json> {
    let groups = page["groups"].as_array().expect("groups");
    groups.iter().map(|g| g[field].clone()).collect()
}

#[test]
fn groups_are_listed_by_backlog_and_a_paused_group_s_jobs_are_not_claimed_until_resumed() {
    let s = server();
    let mut con = s.conn();
    for (group, n) in [("small", 1), ("big", 3), ("mid", 2)] {
        for i in 0..n {
            enqueue_with(
                &mut con,
                "tenants",
                &format!("{group} {i}"),
                &["GROUP", group],
            );
        }
    }
    enqueue(&mut con, "tenants", "ungrouped");

    let (code, text, _) = emq(&s.url(), &["groups", "tenants"]);
    assert_eq!(code, 0);
    let rows: Vec<Vec<&str>> = text
        .lines()
        .skip(1)
        .map(|l| l.split_whitespace().collect())
        .collect();
    assert_eq!(
        rows,
        [
            ["big", "3", "0", "-", "no", "no"],
            ["mid", "2", "0", "-", "no", "no"],
            ["small", "1", "0", "-", "no", "no"],
        ],
        "{text}"
    );
    // Paged by the server's cursor.
    let first = emq_json(&s.url(), &["groups", "tenants", "--count", "2"]);
    assert_eq!(each(&first, "group"), ["big", "mid"]);
    let cursor = first["cursor"].as_str().expect("cursor");
    assert_ne!(cursor, "0");
    let rest = emq_json(&s.url(), &["groups", "tenants", "--cursor", cursor]);
    assert_eq!(
        (each(&rest, "group"), &rest["cursor"]),
        (vec![Json::from("small")], &Json::from("0"))
    );
    assert_eq!(emq(&s.url(), &["groups", "nothing"]).1.trim(), "no groups");

    // Paused, big's jobs stay while every other job is claimed.
    let said = |args: &[&str]| emq(&s.url(), args).1.trim().to_string();
    let (pause, resume) = (
        ["pause", "tenants", "--group", "big"],
        ["resume", "tenants", "--group", "big"],
    );
    assert_eq!(said(&pause), "paused");
    assert_eq!(said(&pause), "paused already");
    let page = emq_json(&s.url(), &["groups", "tenants"]);
    assert_eq!(each(&page, "paused"), [true, false, false]);
    assert_eq!(page["groups"][0]["paused_until"], Json::Null);
    assert_eq!(count(&mut con, "tenants", "paused"), 0, "the queue runs on");
    let mut claimed = claim_payloads(&mut con, "tenants", 10);
    claimed.sort();
    assert_eq!(claimed, ["mid 0", "mid 1", "small 0", "ungrouped"]);
    assert_eq!(
        emq_json(&s.url(), &["groups", "tenants"])["groups"][0]["ready"],
        3
    );

    // Resumed, they are claimed.
    assert_eq!(said(&resume), "resumed");
    assert_eq!(said(&resume), "not paused");
    let mut claimed = claim_payloads(&mut con, "tenants", 10);
    claimed.sort();
    assert_eq!(claimed, ["big 0", "big 1", "big 2"]);

    // A pause with an end, of a group with no jobs yet; --for-ms needs a group.
    let later = ["pause", "tenants", "--group", "later", "--for-ms", "600000"];
    assert_eq!(said(&later), "paused (resumes in 10m)");
    let changed = emq_json(&s.url(), &["resume", "tenants", "--group", "later"]);
    assert_eq!(
        changed,
        serde_json::json!({"paused": false, "changed": true, "group": "later"})
    );
    let changed = emq_json(&s.url(), &later);
    assert_eq!(
        changed,
        serde_json::json!({"paused": true, "changed": true, "group": "later"})
    );
    let page = emq_json(&s.url(), &["groups", "tenants"]);
    let listed = page["groups"]
        .as_array()
        .expect("groups")
        .iter()
        .find(|g| g["group"] == "later")
        .expect("the paused group is listed");
    assert!(listed["paused_until"].as_i64().is_some(), "{listed}");
    assert_eq!(emq(&s.url(), &["pause", "tenants", "--for-ms", "5"]).0, 2);
    assert_eq!(count(&mut con, "tenants", "paused"), 0);
    let (code, _, err) = emq(&s.url(), &["pause", "tenants", "--group", "a{b}"]);
    assert_eq!(code, 1);
    assert!(err.contains("group's name"), "{err}");
}

#[test]
fn purge_and_requeue_dead_run_their_bounded_steps_to_the_end() {
    let s = server();
    let mut con = s.conn();
    // More than two of the server's default steps (1,000 jobs a call).
    let n = 2_500;
    let mut cmd = redis::cmd("EMQ.MENQUEUE");
    cmd.arg("big");
    for i in 0..n {
        cmd.arg("*").arg(format!("job {i}"));
    }
    let _: redis::Value = cmd.query(&mut con).expect("menqueue");
    let (code, text, _) = emq(&s.url(), &["--json", "purge", "big", "pending", "--yes"]);
    assert_eq!(code, 0);
    assert_eq!(
        serde_json::from_str::<Json>(&text).expect("json")["purged"],
        n
    );
    assert_eq!(count(&mut con, "big", "pending"), 0);

    for i in 0..1_200 {
        enqueue(&mut con, "big", &format!("doomed {i}"));
        kill_next(&mut con, "big", "no");
    }
    let (code, text, _) = emq(&s.url(), &["requeue", "big", "--dead", "--yes"]);
    assert_eq!((code, text.trim()), (0, "1200 requeued"));
    assert_eq!(count(&mut con, "big", "dead"), 0);
    assert_eq!(count(&mut con, "big", "pending"), 1_200);
}

#[test]
fn purge_and_requeue_dead_without_yes_refuse_off_a_terminal_and_change_nothing() {
    let s = server();
    let mut con = s.conn();
    for n in 0..3 {
        enqueue(&mut con, "keep", &format!("job {n}"));
    }
    kill_next(&mut con, "keep", "boom");

    // The suite's emq has no terminal: it says what it would do and does nothing.
    let (code, out, err) = emq(&s.url(), &["purge", "keep", "pending"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("purge the 2 pending jobs of keep") && err.contains("--yes"),
        "{err}"
    );
    assert_eq!(count(&mut con, "keep", "pending"), 2);
    let (code, out, err) = emq(&s.url(), &["requeue", "keep", "--dead"]);
    assert_eq!(code, 2, "{out}{err}");
    assert!(
        err.contains("requeue the 1 dead jobs of keep") && err.contains("--yes"),
        "{err}"
    );
    assert_eq!(count(&mut con, "keep", "dead"), 1);

    let (code, text, _) = emq(&s.url(), &["requeue", "keep", "--dead", "--yes"]);
    assert_eq!((code, text.trim()), (0, "1 requeued"));
    let (code, text, _) = emq(&s.url(), &["purge", "keep", "pending", "--yes"]);
    assert_eq!((code, text.trim()), (0, "3 purged"));
    assert_eq!(count(&mut con, "keep", "pending"), 0);
}

/// `emq --url <url> args...` on a terminal (util-linux's `script` gives it one), `answer`
/// typed: its exit code and what the terminal showed.
fn emq_on_a_terminal(url: &str, args: &[&str], answer: &str) -> (i32, String) {
    use std::io::Write;
    let line = std::iter::once(env!("CARGO_BIN_EXE_emq"))
        .chain(["--url", url])
        .chain(args.iter().copied())
        .collect::<Vec<_>>()
        .join(" ");
    let mut child = std::process::Command::new("script")
        .args(["-qec", &line, "/dev/null"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("script (util-linux)");
    child
        .stdin
        .take()
        .expect("stdin")
        .write_all(answer.as_bytes())
        .expect("type");
    let out = child.wait_with_output().expect("wait");
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned(),
    )
}

#[test]
fn on_a_terminal_purge_asks_and_goes_on_only_on_yes() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "asked", "a");
    enqueue(&mut con, "asked", "b");
    let (code, shown) = emq_on_a_terminal(&s.url(), &["purge", "asked", "pending"], "n\n");
    assert_eq!(code, 2, "{shown}");
    assert!(
        shown.contains("purge the 2 pending jobs of asked? [y/N]"),
        "{shown}"
    );
    assert_eq!(count(&mut con, "asked", "pending"), 2);
    let (code, shown) = emq_on_a_terminal(&s.url(), &["purge", "asked", "pending"], "y\n");
    assert_eq!(code, 0, "{shown}");
    assert!(shown.contains("2 purged"), "{shown}");
    assert_eq!(count(&mut con, "asked", "pending"), 0);
}

#[test]
fn control_characters_of_a_payload_error_or_name_print_escaped() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "tty", "\x1b[2Jcleared\x1b]0;title\x07\u{9b}31m");
    let dead = kill_next(&mut con, "tty", "bad \x1b[31mred\x7f");
    enqueue(&mut con, "tty", "\x1b[2Jcleared");

    let (code, text, _) = emq(&s.url(), &["job", "tty", &dead]);
    assert_eq!(code, 0, "{text}");
    assert!(
        text.contains("\\e[2Jcleared\\e]0;title\\x07\\u{9b}31m"),
        "{text}"
    );
    assert!(text.contains("bad \\e[31mred\\x7f"), "{text}");
    let (code, text, _) = emq(&s.url(), &["jobs", "tty", "dead"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("error: bad \\e[31mred"), "{text}");
    let (code, text, _) = emq(&s.url(), &["jobs", "tty", "pending"]);
    assert_eq!(code, 0, "{text}");
    assert!(text.contains("\\e[2Jcleared"), "{text}");
    for (_, text, err) in [
        emq(&s.url(), &["job", "tty", &dead]),
        emq(&s.url(), &["jobs", "tty", "dead"]),
        emq(&s.url(), &["--json", "job", "tty", &dead]),
        emq(&s.url(), &["--json", "jobs", "tty", "dead"]),
        emq(&s.url(), &["job", "tty\x1b[2J", "JOB00000000000"]),
    ] {
        let raw = |t: &str| {
            t.chars()
                .any(|c| c == '\x1b' || c == '\x7f' || c == '\u{9b}')
        };
        assert!(!raw(&text) && !raw(&err), "{text:?} {err:?}");
    }
    // JSON keeps the bytes: escaped the JSON way, read back the same.
    let (_, json, _) = emq(&s.url(), &["--json", "job", "tty", &dead]);
    let row: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(row["payload"], "\x1b[2Jcleared\x1b]0;title\x07\u{9b}31m");
}

#[test]
fn on_a_cluster_queues_are_gathered_from_every_primary_and_commands_reach_their_queue() {
    servers_load_the_module();
    let cluster = Cluster::start(3, 0);
    let mut con = cluster.client();
    let names: Vec<String> = (0..12).map(|i| format!("q{i}")).collect();
    for (i, q) in names.iter().enumerate() {
        for _ in 0..=i {
            enqueue(&mut con, q, "x");
        }
    }
    // The queues really are spread over the primaries.
    let owners: std::collections::HashSet<u16> = names
        .iter()
        .map(|q| {
            cluster
                .owner(echomq::protocol::slot::slot(q.as_bytes()))
                .port
        })
        .collect();
    assert!(owners.len() >= 2, "{owners:?}");

    let url = cluster.urls()[0].clone();
    let (code, json, err) = emq(&url, &["--json", "queues"]);
    assert_eq!(code, 0, "{err}");
    let rows: Json = serde_json::from_str(&json).expect("json");
    let got: Vec<(String, i64)> = rows
        .as_array()
        .expect("rows")
        .iter()
        .map(|r| {
            (
                r["name"].as_str().unwrap_or_default().to_string(),
                r["pending"].as_i64().unwrap_or(-1),
            )
        })
        .collect();
    let mut want: Vec<(String, i64)> = names
        .iter()
        .enumerate()
        .map(|(i, q)| (q.clone(), i as i64 + 1))
        .collect();
    want.sort();
    assert_eq!(got, want);

    for q in &names {
        assert_eq!(emq(&url, &["pause", q]).0, 0);
        let (code, _, _) = emq(&url, &["purge", q, "pending", "--yes"]);
        assert_eq!(code, 0);
    }
    let (_, json, _) = emq(&url, &["--json", "queues"]);
    let rows: Json = serde_json::from_str(&json).expect("json");
    for r in rows.as_array().expect("rows") {
        assert_eq!(
            (r["pending"].as_i64(), r["paused"].as_bool()),
            (Some(0), Some(true)),
            "{r}"
        );
    }
}

#[test]
fn docs_console_md_lists_every_subcommand() {
    use clap::CommandFactory;
    let page = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/../docs/console.md"))
        .expect("docs/console.md");
    let mut documented: Vec<String> = page
        .lines()
        .filter(|l| l.starts_with("| `emq "))
        .flat_map(|l| {
            l.split("`emq ")
                .skip(1)
                .filter_map(|s| s.split([' ', '`']).next().map(str::to_string))
                .collect::<Vec<_>>()
        })
        .collect();
    documented.sort();
    documented.dedup();
    let mut live: Vec<String> = emq::cli::Cli::command()
        .get_subcommands()
        .map(|c| c.get_name().to_string())
        .filter(|n| n != "help")
        .collect();
    live.sort();
    assert_eq!(documented, live);
}

#[test]
fn an_acl_user_sees_and_does_only_what_the_server_lets_it() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "orders", "x");
    enqueue(&mut con, "payroll", "secret");
    let mut setuser = redis::cmd("ACL");
    for a in [
        "SETUSER",
        "viewer",
        "on",
        ">pw",
        "resetkeys",
        "%R~emq:{orders}:*",
        "-@all",
        "+@emq",
    ] {
        setuser.arg(a);
    }
    let _: () = setuser.query(&mut con).expect("acl setuser");
    let url = format!("redis://viewer:pw@127.0.0.1:{}", s.port);

    let (code, json, err) = emq(&url, &["--json", "queues"]);
    assert_eq!(code, 0, "{err}");
    let rows: Json = serde_json::from_str(&json).expect("json");
    let names: Vec<&str> = rows
        .as_array()
        .expect("rows")
        .iter()
        .filter_map(|r| r["name"].as_str())
        .collect();
    assert_eq!(names, ["orders"]);
    let (code, _, err) = emq(&url, &["pause", "orders"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("NOPERM"), "{err}");
    assert_eq!(count(&mut con, "orders", "paused"), 0);
    let (code, _, err) = emq(&url, &["jobs", "payroll", "pending"]);
    assert_eq!(code, 1);
    assert!(err.starts_with("NOPERM"), "{err}");
    let (code, _, err) = emq("redis://viewer:wrong@127.0.0.1:1", &["queues"]);
    assert_eq!(code, 1, "{err}");
}

#[test]
fn help_shows_no_password_from_echomq_url() {
    for args in [&["--help"][..], &["purge", "--help"]] {
        let out = std::process::Command::new(env!("CARGO_BIN_EXE_emq"))
            .args(args)
            .env("ECHOMQ_URL", "redis://ann:s3cret@db:6379")
            .output()
            .expect("run emq");
        let text = String::from_utf8_lossy(&out.stdout);
        assert!(text.contains("ECHOMQ_URL"), "{text}");
        assert!(!text.contains("s3cret"), "{args:?}: {text}");
    }
}
