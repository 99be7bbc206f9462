//! A job's flow in the console (docs/flows.md), against real servers: `emq job` draws a
//! parent's children across queues as a tree with how each finished and its own state, a
//! child's parents with theirs and the parent that refused it, within its bounds (children a
//! parent, levels); the web job page draws the same tree, every parent and child a working link
//! and their text escaped; on a cluster each job is read from the primary that holds it; and
//! waiting parents are counted and listed beside the other sets.

mod common;

use common::support::cluster_load::queue_elsewhere;
use common::support::job_id;
use common::{emq, free_port, get, server, servers_load_the_module, web, Cluster};
use redis::ConnectionLike;
use serde_json::Value as Json;

/// A parent in `q` waiting for `n` children.
fn parent(con: &mut impl ConnectionLike, q: &str, id: &str, n: usize) {
    let r: i64 = redis::cmd("EMQ.ENQUEUE")
        .arg(q)
        .arg(id)
        .arg("parent")
        .arg("CHILDREN")
        .arg(n)
        .query(con)
        .expect("a parent");
    assert_eq!(r, 1);
}

/// A job of `q` (with `children` it waits for, when not 0) that is a child of each of
/// `parents` (queue, id, policy); `adopt` registers it with each parent first, as a client
/// does on a cluster for a parent out of reach.
fn child(
    con: &mut impl ConnectionLike,
    q: &str,
    id: &str,
    children: usize,
    parents: &[(&str, &str, &str)],
    adopt: bool,
) {
    let mut c = redis::cmd("EMQ.ENQUEUE");
    c.arg(q).arg(id).arg("child");
    if children > 0 {
        c.arg("CHILDREN").arg(children);
    }
    for (pq, pid, policy) in parents {
        if adopt {
            let _: i64 = redis::cmd("EMQ.ADOPT")
                .arg(pq)
                .arg(pid)
                .arg(q)
                .arg(id)
                .query(con)
                .expect("adopt");
        }
        c.arg("PARENT").arg(pq).arg(pid).arg("ON-FAIL").arg(policy);
    }
    let r: i64 = c.query(con).expect("a child");
    assert_eq!(r, 1);
}

/// Claims the next job of `q` and acks it with `result`; its id.
fn ack_next(con: &mut impl ConnectionLike, q: &str, result: &str) -> String {
    let claimed: Vec<(String, Vec<u8>, i64)> =
        redis::cmd("EMQ.CLAIM").arg(q).query(con).expect("claim");
    let (id, _, token) = claimed.into_iter().next().expect("a job to claim");
    let _: redis::Value = redis::cmd("EMQ.ACK")
        .arg(q)
        .arg(&id)
        .arg(token)
        .arg("RESULT")
        .arg(result)
        .query(con)
        .expect("ack");
    id
}

/// The line of `text` that holds every one of `words`.
fn line_with<'t>(text: &'t str, words: &[&str]) -> &'t str {
    text.lines()
        .find(|l| words.iter().all(|w| l.contains(w)))
        .unwrap_or_else(|| panic!("no line with {words:?} in\n{text}"))
}

/// Every `href` of `html` that leads to a job page.
fn job_links(html: &str) -> Vec<String> {
    html.split("href=\"")
        .skip(1)
        .filter_map(|s| s.split('"').next())
        .filter(|h| h.contains("/jobs/") && !h.ends_with("/payload"))
        .map(str::to_string)
        .collect()
}

#[test]
fn emq_job_draws_a_parent_s_children_in_two_queues_as_a_tree() {
    let s = server();
    let mut con = s.conn();
    let (p, c3, c4, g) = (job_id(1), job_id(3), job_id(4), job_id(5));
    parent(&mut con, "albums", &p, 4);
    for id in [job_id(10), job_id(11)] {
        child(
            &mut con,
            "thumbs",
            &id,
            0,
            &[("albums", &p, "ignore")],
            false,
        );
    }
    child(&mut con, "meta", &c3, 1, &[("albums", &p, "fail")], false);
    child(&mut con, "deep", &g, 0, &[("meta", &c3, "fail")], false);
    child(&mut con, "meta", &c4, 0, &[("albums", &p, "fail")], false);
    // One thumbnail acked, the other dead (its policy lets the parent go on waiting).
    let acked = ack_next(&mut con, "thumbs", "thumb ok");
    let dead = common::kill_next(&mut con, "thumbs", "disk \x1b[2Jfull");

    let (code, text, err) = emq(&s.url(), &["job", "albums", &p]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("\nchildren  4 expected, 4 registered, 2 finished\n"),
        "{text}"
    );
    let l = line_with(&text, &[&acked]);
    assert_eq!(l, format!("  thumbs {acked}  acked  state done  thumb ok"));
    let l = line_with(&text, &[&dead]);
    assert_eq!(
        l,
        format!("  thumbs {dead}  dead  state dead  disk \\e[2Jfull")
    );
    let l = line_with(&text, &[&c3]);
    assert_eq!(l, format!("  meta {c3}  waiting  state waiting"));
    assert!(
        text.contains("\n    children  1 expected, 1 registered, 0 finished\n      "),
        "{text}"
    );
    let l = line_with(&text, &[&g]);
    assert_eq!(l, format!("      deep {g}  waiting  state pending"));
    let l = line_with(&text, &[&c4]);
    assert_eq!(l, format!("  meta {c4}  waiting  state pending"));
    assert!(!text.contains("more"), "{text}");

    let (_, json, _) = emq(&s.url(), &["--json", "job", "albums", &p]);
    let row: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(row["state"], "waiting");
    let shown = row["flow"]["children"]["shown"]
        .as_array()
        .expect("children");
    assert_eq!(shown.len(), 4, "{json}");
    let meta = shown.iter().find(|c| c["id"] == c3.as_str()).expect("c3");
    assert_eq!(meta["children"]["shown"][0]["id"], g.as_str());
    assert_eq!(meta["children"]["shown"][0]["queue"], "deep");
    let dead_child = shown
        .iter()
        .find(|c| c["id"] == dead.as_str())
        .expect("dead");
    assert_eq!(
        dead_child["data"], "disk \x1b[2Jfull",
        "the same bytes back"
    );

    // Waiting parents are counted beside the other sets, and listed as a set of their own.
    let (_, json, _) = emq(&s.url(), &["--json", "queues"]);
    let rows: Json = serde_json::from_str(&json).expect("json");
    let waiting = |q: &str| {
        rows.as_array()
            .expect("rows")
            .iter()
            .find(|r| r["name"] == q)
            .map(|r| r["waiting"].clone())
    };
    assert_eq!(waiting("albums"), Some(1.into()));
    assert_eq!(waiting("meta"), Some(1.into()));
    assert_eq!(waiting("deep"), Some(0.into()));
    let (code, text, _) = emq(&s.url(), &["queues"]);
    assert_eq!(code, 0);
    assert!(
        text.lines()
            .next()
            .unwrap_or_default()
            .contains("dead   waiting"),
        "{text}"
    );
    let (code, text, _) = emq(&s.url(), &["jobs", "albums", "waiting"]);
    assert_eq!(code, 0);
    assert!(
        text.starts_with(&format!("{p}  score 0  attempts 0  parent")),
        "{text}"
    );
}

#[test]
fn emq_job_shows_a_child_s_two_parents_and_the_one_that_refused_it() {
    let s = server();
    let mut con = s.conn();
    let (p1, p2, c) = (job_id(1), job_id(2), job_id(3));
    parent(&mut con, "albums", &p1, 1);
    parent(&mut con, "books", &p2, 1);
    let parents = [
        ("albums", p1.as_str(), "fail"),
        ("books", p2.as_str(), "ignore"),
    ];
    child(&mut con, "thumbs", &c, 0, &parents, false);

    let (code, text, err) = emq(&s.url(), &["job", "thumbs", &c]);
    assert_eq!(code, 0, "{err}");
    assert!(text.contains("\nparents\n"), "{text}");
    let l = line_with(&text, &[&p1, "on-fail"]);
    assert_eq!(l, format!("  albums {p1}  state waiting  on-fail fail"));
    let l = line_with(&text, &[&p2, "on-fail"]);
    assert_eq!(l, format!("  books {p2}  state waiting  on-fail ignore"));
    assert!(!text.contains("orphan"), "{text}");

    // books' parent is cancelled while the child runs: the child's hand-over finds no parent,
    // and its row notes the refusal; albums' parent takes it and is released.
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg("thumbs")
        .query(&mut con)
        .expect("claim");
    let cancelled: i64 = redis::cmd("EMQ.CANCEL")
        .arg("books")
        .arg(&p2)
        .query(&mut con)
        .expect("cancel");
    assert_eq!(cancelled, 1);
    let _: redis::Value = redis::cmd("EMQ.ACK")
        .arg("thumbs")
        .arg(&c)
        .arg(claimed[0].2)
        .arg("RESULT")
        .arg("r")
        .query(&mut con)
        .expect("ack");

    let (code, text, err) = emq(&s.url(), &["job", "thumbs", &c]);
    assert_eq!(code, 0, "{err}");
    let l = line_with(&text, &[&p1, "on-fail"]);
    assert_eq!(l, format!("  albums {p1}  state pending  on-fail fail"));
    let l = line_with(&text, &[&p2, "on-fail"]);
    assert_eq!(l, format!("  books {p2}  state gone  on-fail ignore"));
    assert!(
        text.contains(&format!("\norphan of\n  books {p2}\n")),
        "{text}"
    );
    let (_, json, _) = emq(&s.url(), &["--json", "job", "thumbs", &c]);
    let row: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(row["flow"]["orphan"][0]["id"], p2.as_str());
    assert_eq!(row["flow"]["parents"][1]["state"], Json::Null);
    // From the parent's side the child carries its marker.
    let (_, text, _) = emq(&s.url(), &["job", "albums", &p1]);
    let l = line_with(&text, &[&c]);
    assert_eq!(
        l,
        format!("  thumbs {c}  acked  state done  orphan of books {p2}  r")
    );
}

#[test]
fn emq_job_shows_so_many_children_and_levels_and_counts_the_rest() {
    let s = server();
    let mut con = s.conn();
    let p = job_id(1);
    parent(&mut con, "wide", &p, 130);
    for n in 0..130 {
        child(
            &mut con,
            "leaves",
            &job_id(100 + n),
            0,
            &[("wide", &p, "fail")],
            false,
        );
    }
    let (code, text, err) = emq(&s.url(), &["job", "wide", &p]);
    assert_eq!(code, 0, "{err}");
    let shown = text.lines().filter(|l| l.starts_with("  leaves ")).count();
    assert_eq!(shown, 100, "{text}");
    assert!(text.ends_with("  and 30 more\n"), "{text}");
    let (_, json, _) = emq(&s.url(), &["--json", "job", "wide", &p]);
    let row: Json = serde_json::from_str(&json).expect("json");
    assert_eq!(row["flow"]["children"]["more"], 30);

    // A chain five levels deep: three levels are read, the fourth counted.
    let chain: Vec<String> = (0..5).map(|n| job_id(1_000 + n)).collect();
    parent(&mut con, "chain", &chain[0], 1);
    for n in 1..5 {
        let children = if n < 4 { 1 } else { 0 };
        let up = [("chain", chain[n - 1].as_str(), "fail")];
        child(&mut con, "chain", &chain[n], children, &up, false);
    }
    let (code, text, err) = emq(&s.url(), &["job", "chain", &chain[0]]);
    assert_eq!(code, 0, "{err}");
    for (level, id) in chain.iter().enumerate().skip(1).take(3) {
        let indent = "  ".repeat(2 * level - 1);
        let l = line_with(&text, &[id]);
        assert!(
            l.starts_with(&format!("{indent}chain {id}")),
            "{level}: {text}"
        );
    }
    assert!(!text.contains(&chain[4]), "{text}");
    assert!(text.ends_with("        and 1 more\n"), "{text}");
}

#[test]
fn a_child_the_user_may_not_read_shows_its_refusal_and_the_rest_of_the_tree_stays() {
    let s = server();
    let mut con = s.conn();
    let (p, c1, c2) = (job_id(1), job_id(2), job_id(3));
    parent(&mut con, "albums", &p, 2);
    child(&mut con, "thumbs", &c1, 0, &[("albums", &p, "fail")], false);
    child(
        &mut con,
        "payroll",
        &c2,
        0,
        &[("albums", &p, "fail")],
        false,
    );
    let mut setuser = redis::cmd("ACL");
    for a in [
        "SETUSER",
        "viewer",
        "on",
        ">pw",
        "resetkeys",
        "%R~emq:{albums}:*",
        "%R~emq:{thumbs}:*",
        "-@all",
        "+@emq",
    ] {
        setuser.arg(a);
    }
    let _: () = setuser.query(&mut con).expect("acl setuser");
    let url = format!("redis://viewer:pw@127.0.0.1:{}", s.port);

    let (code, text, err) = emq(&url, &["job", "albums", &p]);
    assert_eq!(code, 0, "{err}");
    let l = line_with(&text, &[&c1]);
    assert_eq!(l, format!("  thumbs {c1}  waiting  state pending"));
    let l = line_with(&text, &[&c2]);
    assert!(
        l.starts_with(&format!("  payroll {c2}  waiting  (NOPERM")),
        "{text}"
    );
    // And from the child's side, a parent it may not read.
    let (code, text, err) = emq(&url, &["job", "thumbs", &c1]);
    assert_eq!(code, 0, "{err}");
    let l = line_with(&text, &[&p, "on-fail"]);
    assert_eq!(l, format!("  albums {p}  state waiting  on-fail fail"));
    let books = job_id(4);
    parent(&mut con, "books", &books, 1);
    let mine = job_id(5);
    child(
        &mut con,
        "thumbs",
        &mine,
        0,
        &[("books", &books, "fail")],
        false,
    );
    let (code, text, err) = emq(&url, &["job", "thumbs", &mine]);
    assert_eq!(code, 0, "{err}");
    let l = line_with(&text, &[&books, "on-fail"]);
    assert!(
        l.starts_with(&format!("  books {books}  (NOPERM")),
        "{text}"
    );
    assert!(l.ends_with("  on-fail fail"), "{text}");
}

#[test]
fn the_job_page_draws_the_flow_and_every_parent_and_child_is_a_working_link() {
    let s = server();
    let mut con = s.conn();
    let (p, q, c1, c2) = (job_id(1), job_id(2), job_id(3), job_id(4));
    parent(&mut con, "albums", &p, 2);
    parent(&mut con, "books", &q, 1);
    let both = [
        ("albums", p.as_str(), "fail"),
        ("books", q.as_str(), "fail"),
    ];
    child(&mut con, "thumbs", &c1, 0, &both, false);
    child(&mut con, "meta", &c2, 0, &[("albums", &p, "fail")], false);
    assert_eq!(ack_next(&mut con, "meta", "<script>alert(1)</script>"), c2);
    let port = free_port();
    let _web = web(&s.url(), port, &["--read-only"]);

    let (code, page) = get(port, &format!("/queues/albums/jobs/{p}"), "");
    assert_eq!(code, 200, "{page}");
    assert!(page.contains("<h3>flow</h3>"), "{page}");
    assert!(
        page.contains("2 children expected, 2 registered, 1 finished"),
        "{page}"
    );
    assert!(
        page.contains(&format!(
            "<li class=\"child\" data-queue=\"meta\" data-id=\"{c2}\" data-status=\"acked\">"
        )),
        "{page}"
    );
    assert!(
        page.contains("&lt;script&gt;alert(1)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>"), "{page}");
    let links = job_links(&page);
    for want in [
        format!("/queues/thumbs/jobs/{c1}"),
        format!("/queues/meta/jobs/{c2}"),
    ] {
        assert!(links.contains(&want), "{want} in {links:?}");
    }
    for link in &links {
        let (code, child_page) = get(port, link, "");
        assert_eq!(code, 200, "{link}: {child_page}");
        let id = link.rsplit('/').next().unwrap_or_default();
        assert!(
            child_page.contains(&format!("data-field=\"id\">{id}<")),
            "{link}"
        );
    }

    // The child with two parents links back to each, with its state.
    let (code, page) = get(port, &format!("/queues/thumbs/jobs/{c1}"), "");
    assert_eq!(code, 200);
    assert!(page.contains("<table id=\"parents\">"), "{page}");
    let links = job_links(&page);
    for want in [
        format!("/queues/albums/jobs/{p}"),
        format!("/queues/books/jobs/{q}"),
    ] {
        assert!(links.contains(&want), "{want} in {links:?}");
        let (code, parent_page) = get(port, &want, "");
        assert_eq!(code, 200);
        assert!(parent_page.contains(&format!("data-id=\"{c1}\"")), "{want}");
    }
    assert_eq!(
        page.matches("<td class=\"state\">waiting</td>").count(),
        2,
        "{page}"
    );

    // The queue list counts waiting parents, and the queue page lists them.
    let (_, page) = get(port, "/", "");
    assert!(page.contains("<td class=\"n waiting\">1</td>"), "{page}");
    let (_, page) = get(port, "/queues/albums?set=waiting", "");
    assert!(page.contains("waiting (1)"), "{page}");
    assert!(page.contains(&format!("data-id=\"{p}\"")), "{page}");
}

#[test]
fn on_a_cluster_the_flow_is_read_from_each_job_s_own_primary() {
    servers_load_the_module();
    let cluster = Cluster::start(3, 0);
    let mut con = cluster.client();
    // The parent's queue and its children's on three different primaries.
    let top = "albums".to_string();
    let thumbs = queue_elsewhere(&cluster, "thumbs", &[&top]);
    let meta = queue_elsewhere(&cluster, "meta", &[&top, &thumbs]);
    let (p, c1, c2, g) = (job_id(1), job_id(2), job_id(3), job_id(4));
    parent(&mut con, &top, &p, 2);
    child(&mut con, &thumbs, &c1, 0, &[(&top, &p, "fail")], true);
    child(&mut con, &meta, &c2, 1, &[(&top, &p, "fail")], true);
    child(&mut con, &top, &g, 0, &[(&meta, &c2, "fail")], true);

    let url = cluster.urls()[0].clone();
    let (code, text, err) = emq(&url, &["job", &top, &p]);
    assert_eq!(code, 0, "{err}");
    assert!(
        text.contains("children  2 expected, 2 registered, 0 finished"),
        "{text}"
    );
    let l = line_with(&text, &[&c1]);
    assert_eq!(l, format!("  {thumbs} {c1}  waiting  state pending"));
    let l = line_with(&text, &[&c2]);
    assert_eq!(l, format!("  {meta} {c2}  waiting  state waiting"));
    let l = line_with(&text, &[&g]);
    assert_eq!(l, format!("      {top} {g}  waiting  state pending"));
    let (code, text, err) = emq(&url, &["job", &top, &g]);
    assert_eq!(code, 0, "{err}");
    let l = line_with(&text, &[&c2, "on-fail"]);
    assert_eq!(l, format!("  {meta} {c2}  state waiting  on-fail fail"));

    let port = free_port();
    let _web = web(&url, port, &["--read-only"]);
    let (code, page) = get(port, &format!("/queues/{top}/jobs/{p}"), "");
    assert_eq!(code, 200, "{page}");
    let links = job_links(&page);
    assert!(
        links.contains(&format!("/queues/{thumbs}/jobs/{c1}")),
        "{links:?}"
    );
    assert!(
        links.contains(&format!("/queues/{meta}/jobs/{c2}")),
        "{links:?}"
    );
    assert!(
        links.contains(&format!("/queues/{top}/jobs/{g}")),
        "{links:?}"
    );
    for link in &links {
        assert_eq!(get(port, link, "").0, 200, "{link}");
    }
}
