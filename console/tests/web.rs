//! `emq web` over HTTP against a real server: its pages hold the server's counts, a crafted
//! payload or error is escaped, actions need a POST with the dashboard's CSRF token,
//! `--read-only` serves and shows no action, `--auth` guards every page, a bind off loopback
//! without auth is refused, a foreign `Host` or `Origin` (DNS rebinding, a cross-site form)
//! gets nothing, and a queue's groups are listed by backlog, escaped, and paused and resumed.

mod common;

use common::{
    count, emq, enqueue, enqueue_with, free_port, get, http, kill_next, post, post_with, server,
    web,
};

/// The value of the form field `name` on `page`.
fn field(page: &str, name: &str) -> String {
    let marker = format!("name=\"{name}\" value=\"");
    let at = page.find(&marker).expect("the field") + marker.len();
    page[at..].split('"').next().unwrap_or_default().to_string()
}

/// The ids of a set's jobs, in the set's order.
fn ids(con: &mut redis::Connection, queue: &str, set: &str) -> Vec<String> {
    let (_, jobs): (String, Vec<Vec<redis::Value>>) = redis::cmd("EMQ.JOBS")
        .arg(queue)
        .arg(set)
        .query(con)
        .expect("jobs");
    jobs.iter()
        .map(|j| redis::from_redis_value_ref::<String>(&j[0]).expect("id"))
        .collect()
}

/// The CSRF token the dashboard's forms carry.
fn token(page: &str) -> String {
    let at = page
        .find("name=\"csrf\" value=\"")
        .expect("a form with the token")
        + 19;
    page[at..at + 32].to_string()
}

#[test]
fn a_crafted_payload_and_error_render_as_text_never_as_markup() {
    let s = server();
    let mut con = s.conn();
    let crafted = "<script>alert('x')</script><img src=x onerror=alert(1)>\"'&";
    enqueue(&mut con, "evil", "plain");
    let dead = kill_next(&mut con, "evil", "</pre><script>alert(2)</script>");
    enqueue(&mut con, "evil", crafted);
    let port = free_port();
    let _web = web(&s.url(), port, &[]);

    let (code, page) = get(port, "/queues/evil?set=pending", "");
    assert_eq!(code, 200);
    assert!(!page.contains("<script>alert"), "{page}");
    assert!(!page.contains("<img src=x"), "{page}");
    assert!(
        page.contains(
            "&lt;script&gt;alert('x')&lt;/script&gt;&lt;img src=x onerror=alert(1)&gt;&quot;'&amp;"
        ),
        "{page}"
    );
    let (code, page) = get(port, &format!("/queues/evil/jobs/{dead}"), "");
    assert_eq!(code, 200);
    assert!(
        page.contains("&lt;/pre&gt;&lt;script&gt;alert(2)&lt;/script&gt;"),
        "{page}"
    );
    assert!(!page.contains("<script>alert(2)"), "{page}");
    // Nothing from elsewhere, no scripts at all, and no framing.
    assert!(
        page.contains("content-security-policy: default-src 'none'"),
        "{page}"
    );
    assert!(page.contains("x-frame-options: DENY"), "{page}");
}

#[test]
fn an_action_needs_a_post_with_the_dashboard_s_csrf_token() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "work", "x");
    let port = free_port();
    let _web = web(&s.url(), port, &[]);
    let (_, page) = get(port, "/queues/work", "");
    let csrf = token(&page);

    assert_eq!(get(port, "/queues/work/pause", "").0, 405);
    assert_eq!(
        post(
            port,
            "/queues/work/pause",
            "csrf=0123456789abcdef0123456789abcdef"
        )
        .0,
        403
    );
    assert_eq!(post(port, "/queues/work/pause", "").0, 422);
    assert_eq!(count(&mut con, "work", "paused"), 0);
    let (code, response) = post(port, "/queues/work/pause", &format!("csrf={csrf}"));
    assert_eq!(code, 303, "{response}");
    assert!(
        response.contains("location: /queues/work?set=pending&done=paused"),
        "{response}"
    );
    assert_eq!(count(&mut con, "work", "paused"), 1);
    // Another dashboard has another token.
    let other = free_port();
    let _second = web(&s.url(), other, &[]);
    assert_eq!(
        post(other, "/queues/work/resume", &format!("csrf={csrf}")).0,
        403
    );
    assert_eq!(count(&mut con, "work", "paused"), 1);
}

#[test]
fn read_only_shows_and_serves_no_action() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "work", "x");
    kill_next(&mut con, "work", "boom");
    let port = free_port();
    let _web = web(&s.url(), port, &["--read-only"]);
    let (code, page) = get(port, "/queues/work?set=dead", "");
    assert_eq!(code, 200);
    assert!(page.contains("dead (1)"), "{page}");
    assert!(!page.contains("<form"), "{page}");
    assert_eq!(post(port, "/queues/work/requeue-dead", "csrf=x").0, 404);
    assert_eq!(count(&mut con, "work", "dead"), 1);
}

#[test]
fn auth_guards_every_page_and_a_bind_off_loopback_needs_it() {
    let s = server();
    let port = free_port();
    let _web = web(&s.url(), port, &["--auth", "ann:s3cret"]);
    let (code, response) = get(port, "/", "");
    assert_eq!(code, 401);
    assert!(
        response.contains("www-authenticate: Basic realm=\"emq\""),
        "{response}"
    );
    // base64("ann:wrong") and base64("ann:s3cret")
    assert_eq!(
        get(port, "/", "Authorization: Basic YW5uOndyb25n\r\n").0,
        401
    );
    assert_eq!(
        get(port, "/", "Authorization: Basic YW5uOnMzY3JldA==\r\n").0,
        200
    );

    let (code, _, err) = emq(&s.url(), &["web", "--bind", "0.0.0.0:0"]);
    assert_eq!(code, 2);
    assert!(err.contains("--auth"), "{err}");
}

#[test]
fn on_a_cluster_the_dashboard_lists_every_primary_s_queues_and_acts_on_each() {
    common::servers_load_the_module();
    let cluster = common::Cluster::start(3, 0);
    let mut con = cluster.client();
    let names: Vec<String> = (0..9).map(|i| format!("c{i}")).collect();
    for q in &names {
        enqueue(&mut con, q, "x");
    }
    let port = free_port();
    let _web = web(&cluster.urls()[0], port, &[]);
    let (code, page) = get(port, "/", "");
    assert_eq!(code, 200);
    assert!(page.contains("9 queues, on 3 primaries"), "{page}");
    for q in &names {
        assert!(page.contains(&format!("data-queue=\"{q}\"")), "{q}: {page}");
    }
    // Each queue's page and actions reach the primary that holds it.
    for q in &names {
        let (code, page) = get(port, &format!("/queues/{q}"), "");
        assert_eq!(code, 200, "{page}");
        let (code, _) = post(
            port,
            &format!("/queues/{q}/pause"),
            &format!("csrf={}", token(&page)),
        );
        assert_eq!(code, 303);
        let paused: std::collections::HashMap<String, redis::Value> = redis::cmd("EMQ.STATS")
            .arg(q)
            .query(&mut con)
            .expect("stats");
        assert_eq!(paused.get("paused"), Some(&redis::Value::Int(1)), "{q}");
    }
}

#[test]
fn a_foreign_host_gets_nothing_and_a_change_needs_the_dashboard_s_own_origin() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "work", "secret payload");
    let port = free_port();
    let _web = web(&s.url(), port, &["--allow-host", "emq.example.com"]);
    let (code, page) = get(port, "/queues/work", "");
    assert_eq!(code, 200, "{page}");
    let csrf = token(&page);

    // A DNS-rebinding page's requests carry its own name: no page, no token.
    let foreign = |host: &str| {
        http(
            port,
            &format!("GET /queues/work HTTP/1.1\r\nHost: {host}\r\nConnection: close\r\n\r\n"),
        )
    };
    for host in [
        format!("evil.example:{port}"),
        format!("127.0.0.1.evil.example:{port}"),
        format!("localhost:{}", port.wrapping_add(1)),
        "127.0.0.1".to_string(),
    ] {
        let (code, response) = foreign(&host);
        assert_eq!(code, 421, "{host}: {response}");
        assert!(!response.contains(&csrf), "{host}: {response}");
        assert!(!response.contains("secret payload"), "{host}: {response}");
    }
    let (code, _) = http(port, "GET / HTTP/1.0\r\nConnection: close\r\n\r\n");
    assert_eq!(code, 421, "no Host at all");
    // The names it is served as: loopback's, with the port, and --allow-host's on any port.
    for host in [
        format!("localhost:{port}"),
        format!("[::1]:{port}"),
        "emq.example.com".to_string(),
        "EMQ.example.com:8443".to_string(),
    ] {
        assert_eq!(foreign(&host).0, 200, "{host}");
    }

    // A change with the right token but from another site's page, or from nowhere said.
    let pause = |headers: &str| {
        post_with(
            port,
            "/queues/work/pause",
            &format!("Host: 127.0.0.1:{port}\r\n{headers}"),
            &format!("csrf={csrf}"),
        )
    };
    for headers in [
        "Origin: http://evil.example\r\n".to_string(),
        format!("Origin: http://evil.example:{port}\r\n"),
        "Origin: null\r\n".to_string(),
        format!("Origin: http://localhost:{}\r\n", port.wrapping_add(1)),
        "Referer: http://evil.example/attack.html\r\n".to_string(),
        format!("Origin: http://evil.example\r\nReferer: http://127.0.0.1:{port}/queues/work\r\n"),
        String::new(),
    ] {
        let (code, response) = pause(&headers);
        assert_eq!(code, 403, "{headers:?}: {response}");
        assert!(response.contains("nothing was changed"), "{response}");
    }
    assert_eq!(count(&mut con, "work", "paused"), 0);

    // From its own pages: by Origin, by Referer when a browser sends no Origin, by another name.
    let (code, _) = pause(&format!("Origin: http://localhost:{port}\r\n"));
    assert_eq!(code, 303);
    assert_eq!(count(&mut con, "work", "paused"), 1);
    let (code, _) = post_with(
        port,
        "/queues/work/resume",
        &format!("Host: 127.0.0.1:{port}\r\nReferer: http://127.0.0.1:{port}/queues/work\r\n"),
        &format!("csrf={csrf}"),
    );
    assert_eq!(code, 303);
    assert_eq!(count(&mut con, "work", "paused"), 0);
    let (code, _) = post_with(
        port,
        "/queues/work/pause",
        "Host: emq.example.com\r\nOrigin: https://emq.example.com\r\n",
        &format!("csrf={csrf}"),
    );
    assert_eq!(code, 303);
    assert_eq!(count(&mut con, "work", "paused"), 1);
}

#[test]
fn purge_asks_for_the_queue_s_name_and_deletes_only_the_jobs_there_when_it_asked() {
    let s = server();
    let mut con = s.conn();
    for n in 0..3 {
        enqueue(&mut con, "p", &format!("early {n}"));
    }
    let port = free_port();
    let _web = web(&s.url(), port, &[]);
    // The queue page offers purge as a way to its confirmation, not as a one-click form.
    let (_, page) = get(port, "/queues/p?set=pending", "");
    assert!(
        page.contains("href=\"/queues/p/purge?set=pending\""),
        "{page}"
    );
    assert!(!page.contains("action=\"/queues/p/purge\""), "{page}");
    let (code, confirm) = get(port, "/queues/p/purge?set=pending", "");
    assert_eq!(code, 200, "{confirm}");
    assert!(
        confirm.contains("<strong>3 pending jobs</strong>"),
        "{confirm}"
    );
    let (csrf, ticket) = (token(&confirm), field(&confirm, "ticket"));

    // Jobs that come after the page: one behind the others, one ahead of them by priority.
    let later = enqueue(&mut con, "p", "later");
    let urgent: String = redis::cmd("EMQ.ENQUEUE")
        .arg("p")
        .arg("*")
        .arg("urgent")
        .arg("PRIORITY")
        .arg(-10)
        .query(&mut con)
        .expect("enqueue");
    let form = |confirm: &str| format!("csrf={csrf}&set=pending&ticket={ticket}{confirm}");

    // Without the queue's name typed, or with another, nothing is purged.
    for typed in ["", "&confirm=", "&confirm=q", "&confirm=P"] {
        let (code, response) = post(port, "/queues/p/purge", &form(typed));
        assert_eq!(code, 422, "{typed}: {response}");
        assert!(response.contains("nothing was purged"), "{response}");
    }
    assert_eq!(count(&mut con, "p", "pending"), 5);
    let (code, _) = post(
        port,
        "/queues/p/purge",
        &format!("csrf=0123456789abcdef0123456789abcdef&set=pending&ticket={ticket}&confirm=p"),
    );
    assert_eq!(code, 403);
    assert_eq!(count(&mut con, "p", "pending"), 5);

    // A worker takes the urgent job and the oldest noted one before the purge: the noted job
    // that started runs on.
    let started: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg("p")
        .arg("COUNT")
        .arg(2)
        .query(&mut con)
        .expect("claim");
    assert_eq!(started[0].0, urgent);
    let (code, response) = post(port, "/queues/p/purge", &form("&confirm=p"));
    assert_eq!(code, 303, "{response}");
    assert!(
        response.contains("location: /queues/p?set=pending&done=2%20purged"),
        "{response}"
    );
    assert_eq!(ids(&mut con, "p", "pending"), vec![later]);
    assert_eq!(count(&mut con, "p", "active"), 2, "the started jobs run on");
    assert_eq!(count(&mut con, "p", "dead"), 0);
    // A confirmation is used once.
    let (code, response) = post(port, "/queues/p/purge", &form("&confirm=p"));
    assert_eq!(code, 409, "{response}");
    assert_eq!(count(&mut con, "p", "pending"), 1);

    // The dead set: a job that dies after the page stays.
    for n in 0..2 {
        enqueue(&mut con, "d", &format!("doomed {n}"));
        kill_next(&mut con, "d", "no");
    }
    let (_, confirm) = get(port, "/queues/d/purge?set=dead", "");
    assert!(
        confirm.contains("<strong>2 dead jobs</strong>"),
        "{confirm}"
    );
    enqueue(&mut con, "d", "doomed later");
    let late = kill_next(&mut con, "d", "no");
    let (code, response) = post(
        port,
        "/queues/d/purge",
        &format!(
            "csrf={}&set=dead&ticket={}&confirm=d",
            token(&confirm),
            field(&confirm, "ticket")
        ),
    );
    assert_eq!(code, 303, "{response}");
    assert!(response.contains("done=2%20purged"), "{response}");
    assert_eq!(ids(&mut con, "d", "dead"), [late]);

    // Active jobs cannot be purged, and a read-only dashboard has no purge at all.
    assert_eq!(get(port, "/queues/p/purge?set=active", "").0, 400);
    let ro = free_port();
    let _read_only = web(&s.url(), ro, &["--read-only"]);
    assert_eq!(get(ro, "/queues/p/purge?set=pending", "").0, 404);
    assert!(!get(ro, "/queues/p?set=pending", "").1.contains("purge"));
}

/// Each group of the queue's first page, in the server's order, and whether it is paused.
fn groups(con: &mut redis::Connection, queue: &str) -> Vec<(String, bool)> {
    type Group = std::collections::HashMap<String, redis::Value>;
    let (_, page): (String, Vec<Group>) = redis::cmd("EMQ.GROUPS")
        .arg(queue)
        .query(con)
        .expect("groups");
    page.iter()
        .map(|g| {
            let name = redis::from_redis_value_ref::<String>(&g["group"]).expect("a name");
            (name, g["paused"] == redis::Value::Int(1))
        })
        .collect()
}

#[test]
fn a_queue_s_groups_show_by_backlog_escaped_and_each_pauses_and_resumes_from_its_form() {
    let s = server();
    let mut con = s.conn();
    let hostile = "<b>x</b>";
    for i in 0..3 {
        enqueue_with(&mut con, "tenants", &format!("x {i}"), &["GROUP", hostile]);
    }
    enqueue_with(&mut con, "tenants", "tail", &["GROUP", "tail"]);
    enqueue(&mut con, "flat", "no group");
    let port = free_port();
    let _web = web(&s.url(), port, &[]);

    // A queue whose jobs are all in the default group shows no groups.
    let (code, page) = get(port, "/queues/flat", "");
    assert_eq!(code, 200);
    assert!(!page.contains("id=\"groups\""), "{page}");

    // The largest backlog first, the name as text.
    let (code, page) = get(port, "/queues/tenants", "");
    assert_eq!(code, 200);
    let escaped = "&lt;b&gt;x&lt;/b&gt;";
    let row = |page: &str, group: &str| {
        let at = page
            .find(&format!("<tr data-group=\"{group}\">"))
            .unwrap_or_else(|| panic!("{group}'s row: {page}"));
        let end = at + page[at..].find("</tr>").expect("the row's end");
        (at, page[at..end].to_string())
    };
    let (first, hostile_row) = row(&page, escaped);
    let (second, _) = row(&page, "tail");
    assert!(first < second, "{page}");
    assert!(!page.contains(hostile), "{page}");
    assert!(
        hostile_row.contains(&format!("<td>{escaped}</td>")),
        "{hostile_row}"
    );
    assert!(
        hostile_row.contains("<td class=\"n ready\">3</td>"),
        "{hostile_row}"
    );
    assert!(
        hostile_row.contains("<td class=\"pause\">no</td>"),
        "{hostile_row}"
    );
    let csrf = token(&page);

    // The pause form: refused without the dashboard's token, its group, or its Origin.
    let form = |csrf: &str| format!("csrf={csrf}&group=%3Cb%3Ex%3C%2Fb%3E");
    let pause = "/queues/tenants/groups/pause";
    assert_eq!(
        post(port, pause, &form("0123456789abcdef0123456789abcdef")).0,
        403
    );
    assert_eq!(post(port, pause, &format!("csrf={csrf}")).0, 422);
    let foreign = format!("Host: 127.0.0.1:{port}\r\nOrigin: http://evil.example\r\n");
    assert_eq!(post_with(port, pause, &foreign, &form(&csrf)).0, 403);
    assert_eq!(
        groups(&mut con, "tenants"),
        [(hostile.into(), false), ("tail".into(), false)]
    );

    // Paused on the server, and the page says so and offers resume.
    let (code, response) = post(port, pause, &form(&csrf));
    assert_eq!(code, 303, "{response}");
    assert!(
        response.contains("location: /queues/tenants?set=pending&done=%3Cb%3Ex%3C%2Fb%3E%20paused"),
        "{response}"
    );
    assert_eq!(
        groups(&mut con, "tenants"),
        [(hostile.into(), true), ("tail".into(), false)]
    );
    assert_eq!(count(&mut con, "tenants", "paused"), 0, "only the group");
    let (_, page) = get(port, "/queues/tenants", "");
    let (_, hostile_row) = row(&page, escaped);
    assert!(
        hostile_row.contains("<span class=\"paused\">paused</span>"),
        "{hostile_row}"
    );
    assert!(
        hostile_row.contains("action=\"/queues/tenants/groups/resume\""),
        "{hostile_row}"
    );
    let (code, _) = post(port, "/queues/tenants/groups/resume", &form(&csrf));
    assert_eq!(code, 303);
    assert_eq!(
        groups(&mut con, "tenants"),
        [(hostile.into(), false), ("tail".into(), false)]
    );

    // Past a page of 20 groups, the next page is the cursor's.
    for i in 0..20 {
        enqueue_with(&mut con, "tenants", "one", &["GROUP", &format!("g{i:02}")]);
    }
    let (_, page) = get(port, "/queues/tenants", "");
    assert_eq!(page.matches("<tr data-group=").count(), 20, "{page}");
    assert_eq!(
        row(&page, escaped).0,
        page.find("<tr data-group=").expect("a row")
    );
    let link = "id=\"next-groups\" href=\"";
    let at = page.find(link).expect("a next page") + link.len();
    let next = page[at..]
        .split('"')
        .next()
        .expect("its link")
        .replace("&amp;", "&");
    let (code, rest) = get(port, &next, "");
    assert_eq!(code, 200, "{next}");
    assert_eq!(rest.matches("<tr data-group=").count(), 2, "{rest}");
    assert!(!rest.contains("next-groups"), "{rest}");

    // Read-only: the groups, and no form.
    let ro = free_port();
    let _read_only = web(&s.url(), ro, &["--read-only"]);
    let (_, page) = get(ro, "/queues/tenants", "");
    assert!(
        page.contains(&format!("data-group=\"{escaped}\"")),
        "{page}"
    );
    assert!(!page.contains("<form"), "{page}");
    assert_eq!(post(ro, pause, &form(&csrf)).0, 404);
}

#[test]
fn a_large_payload_shows_cut_with_its_size_and_downloads_whole() {
    let s = server();
    let mut con = s.conn();
    let big = format!("{}TAIL", "x".repeat(300_000));
    let id = enqueue(&mut con, "big", &big);
    let short = enqueue(&mut con, "big", "short one");
    let port = free_port();
    let _web = web(&s.url(), port, &[]);

    // The list: the first 200 bytes and the size.
    let (code, page) = get(port, "/queues/big?set=pending", "");
    assert_eq!(code, 200);
    assert!(
        page.contains(&format!("{}… (300004 bytes)", "x".repeat(200))),
        "{page}"
    );
    assert!(
        !page.contains(&"x".repeat(201)),
        "more than 200 bytes listed"
    );
    assert!(page.contains(">short one</pre>"), "{page}");
    assert!(page.len() < 20_000, "{} bytes", page.len());

    // The job: the first 64 KiB, the size, and the whole payload to download.
    let (code, page) = get(port, &format!("/queues/big/jobs/{id}"), "");
    assert_eq!(code, 200);
    assert!(
        page.contains("300004 bytes, first 64 KiB shown"),
        "{}",
        &page[page.len().saturating_sub(2_000)..]
    );
    assert!(page.contains(&"x".repeat(64 * 1024)));
    assert!(!page.contains(&"x".repeat(64 * 1024 + 1)));
    assert!(!page.contains("TAIL"));
    assert!(page.len() < 64 * 1024 + 10_000, "{} bytes", page.len());
    assert!(page.contains(&format!("href=\"/queues/big/jobs/{id}/payload\"")));
    let (code, whole) = get(port, &format!("/queues/big/jobs/{id}/payload"), "");
    assert_eq!(code, 200);
    assert!(
        whole.contains(&format!(
            "content-disposition: attachment; filename=\"{id}.payload\""
        )),
        "{}",
        &whole[..500]
    );
    assert!(whole.contains("content-type: application/octet-stream"));
    assert!(whole.ends_with(&format!("\r\n\r\n{big}")));

    let (_, page) = get(port, &format!("/queues/big/jobs/{short}"), "");
    assert!(page.contains(">short one</pre>"), "{page}");
    assert!(!page.contains("KiB shown"), "{page}");
}
