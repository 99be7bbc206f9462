//! The dashboard in a real browser: headless Chromium, driven through chromedriver (WebDriver)
//! with fantoccini, against `emq web` and a real server. It sees the real counts, opens a dead
//! job and its error, requeues it, cancels a running job, pauses a queue and sees claims stop,
//! purges a queue through its confirmation (the browser's own Origin let through), sees a
//! `<script>` payload as text, pauses one group and sees claims skip its jobs, reads a queue's
//! wait and run times on its latency panel, and keeps
//! screenshots under target/console/.
//!
//! Chromium and chromedriver come from Debian's packages: `scripts/install-deps.sh
//! --with-browser` (which `make test` runs).

mod common;

use std::path::PathBuf;
use std::process::Command;

use common::{
    claim_payloads, count, enqueue, enqueue_with, free_port, kill_next, server, wait_port, web,
    Running,
};
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

fn chromium() -> String {
    std::env::var("CHROMIUM").unwrap_or_else(|_| "/usr/bin/chromium".to_string())
}

/// A chromedriver of the test's own, and its address: each test talks to its own (the tests
/// run at once, so nothing about it is process-wide).
fn chromedriver() -> (Running, String) {
    let port = free_port();
    let child =
        Command::new(std::env::var("CHROMEDRIVER").unwrap_or_else(|_| "chromedriver".into()))
            .arg(format!("--port={port}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("chromedriver (scripts/install-deps.sh --with-browser installs it)");
    let running = Running(child);
    wait_port(port);
    (running, format!("http://127.0.0.1:{port}"))
}

async fn browser(webdriver: &str) -> Client {
    let mut caps = serde_json::Map::new();
    caps.insert(
        "goog:chromeOptions".into(),
        serde_json::json!({
            "binary": chromium(),
            "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                     "--window-size=1280,800"],
        }),
    );
    ClientBuilder::new(HttpConnector::new())
        .capabilities(caps)
        .connect(webdriver)
        .await
        .expect("a headless Chromium session")
}

/// Where the run keeps its screenshots: target/console/.
fn artifacts() -> PathBuf {
    let dir = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target/console");
    std::fs::create_dir_all(&dir).expect("target/console");
    dir
}

/// The text of the element `css` finds. The list and queue pages reload themselves every 5 s,
/// so an element found just before a reload is found again.
async fn text(b: &Client, css: &str) -> String {
    let mut last = String::new();
    for _ in 0..5 {
        match b.find(Locator::Css(css)).await {
            Ok(e) => match e.text().await {
                Ok(t) => return t,
                Err(err) => last = err.to_string(),
            },
            Err(err) => last = err.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("{css}: {last}")
}

/// The text of the element `css` finds once it reads `want`, or the last text read after five
/// seconds: a click on a form's button returns before the page it loads is there.
async fn text_after_click(b: &Client, css: &str, want: &str) -> String {
    let mut shown = String::new();
    for _ in 0..25 {
        shown = text(b, css).await;
        if shown == want {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    shown
}

/// Clicks what `locator` finds, found again if the page reloaded under it.
async fn click(b: &Client, locator: Locator<'_>) {
    let mut last = String::new();
    for _ in 0..5 {
        match b.find(locator).await {
            Ok(e) => match e.click().await {
                Ok(()) => return,
                Err(err) => last = err.to_string(),
            },
            Err(err) => last = err.to_string(),
        }
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
    panic!("{locator:?}: {last}")
}

/// Up to `n` jobs of `reports`, claimed.
fn claim_reports(con: &mut redis::Connection, n: usize) -> Vec<(String, Vec<u8>, i64)> {
    redis::cmd("EMQ.CLAIM")
        .arg("reports")
        .arg("COUNT")
        .arg(n)
        .query(con)
        .expect("claim")
}

/// Acks each of `claimed`, jobs of `reports`.
fn ack_reports(con: &mut redis::Connection, claimed: Vec<(String, Vec<u8>, i64)>) {
    for (id, _, token) in claimed {
        let _: i64 = redis::cmd("EMQ.ACK")
            .arg("reports")
            .arg(id)
            .arg(token)
            .query(con)
            .expect("ack");
    }
}

/// Three seconds of enqueues, claims and acks on `reports`, the backlog rising then falling;
/// its event stream is off: its rates come from the server's counts.
fn busy(mut con: redis::Connection) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for round in 0..30 {
            let (add, take) = if round < 15 { (30, 10) } else { (5, 25) };
            for _ in 0..add {
                enqueue(&mut con, "reports", "report");
            }
            let claimed = claim_reports(&mut con, take);
            ack_reports(&mut con, claimed);
            std::thread::sleep(std::time::Duration::from_millis(100));
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_sees_the_counts_reads_a_dead_job_requeues_it_and_pauses_a_queue() {
    let s = server();
    let mut con = s.conn();
    let _: i64 = redis::cmd("EMQ.EVENTS")
        .arg("emails")
        .arg("ON")
        .query(&mut con)
        .expect("events");
    for n in 0..3 {
        enqueue(&mut con, "orders", &format!("{{\"order\": {n}}}"));
    }
    enqueue(&mut con, "emails", "to ann");
    let dead = kill_next(&mut con, "emails", "SMTP 550: mailbox unavailable");
    let crafted = "<script>window.pwned = 1</script><b>bold</b>";
    enqueue(&mut con, "emails", crafted);

    let port = free_port();
    let _web = web(&s.url(), port, &[]);
    let (_driver, webdriver) = chromedriver();
    let b = browser(&webdriver).await;
    let base = format!("http://127.0.0.1:{port}");

    // A few seconds of work on another queue, so the charts have something to draw.
    let busy = busy(s.conn());
    b.goto(&format!("{base}/"))
        .await
        .expect("open the queue list");
    busy.join().expect("the busy queue's thread");
    b.refresh().await.expect("reload");
    let rate = text(&b, "span.rate[data-counter=emq_acked]").await;
    assert!(rate.ends_with("/s") && rate != "0.0/s", "{rate}");
    // Each queue's own rate, from the server's counts with no event stream: reports' work,
    // and none acked of orders.
    let acked = text(&b, "tr[data-queue=reports] td.acked").await;
    assert!(acked.parse::<f64>().is_ok_and(|r| r > 0.0), "{acked}");
    assert_eq!(text(&b, "tr[data-queue=orders] td.acked").await, "0.0");

    // The queue list holds the server's counts.
    assert_eq!(text(&b, "tr[data-queue=orders] td.pending").await, "3");
    assert_eq!(text(&b, "tr[data-queue=emails] td.dead").await, "1");
    assert_eq!(text(&b, "tr[data-queue=emails] td.pending").await, "1");
    let shot = b.screenshot().await.expect("screenshot");
    std::fs::write(artifacts().join("dashboard.png"), shot).expect("keep the screenshot");

    // A dead job and its error, one click away.
    click(&b, Locator::Css("tr[data-queue=emails] a")).await;
    click(&b, Locator::LinkText("dead (1)")).await;
    click(&b, Locator::Css(&format!("tr[data-id={dead}] a"))).await;
    assert_eq!(
        text(&b, "pre[data-field=error]").await,
        "SMTP 550: mailbox unavailable"
    );
    assert_eq!(text(&b, "pre[data-field=set]").await, "dead");
    let history = text(&b, "#history").await;
    assert!(
        ["enqueued", "claimed", "dead"]
            .iter()
            .all(|e| history.contains(e)),
        "{history}"
    );
    let shot = b.screenshot().await.expect("screenshot");
    std::fs::write(artifacts().join("dead-job.png"), shot).expect("keep the screenshot");

    // Requeue: the job is pending on the server.
    click(&b, Locator::Css("form[action$='/requeue'] button")).await;
    assert_eq!(text_after_click(&b, "#flash", "requeued").await, "requeued");
    let set: std::collections::HashMap<String, String> = redis::cmd("EMQ.JOB")
        .arg("emails")
        .arg(&dead)
        .query(&mut con)
        .expect("job");
    assert_eq!(set.get("set").map(String::as_str), Some("pending"));

    // A running job: one click ends its attempt, and the server has it dead, `cancelled`.
    let running = enqueue(&mut con, "imports", "rows 1-50000");
    let _: redis::Value = redis::cmd("EMQ.CLAIM")
        .arg("imports")
        .query(&mut con)
        .expect("claim");
    b.goto(&format!("{base}/queues/imports/jobs/{running}"))
        .await
        .expect("open the running job");
    assert_eq!(text(&b, "pre[data-field=set]").await, "active");
    click(&b, Locator::Css("form[action$='/cancel'] button")).await;
    assert_eq!(
        text_after_click(&b, "#flash", &format!("{running} cancelled")).await,
        format!("{running} cancelled")
    );
    let job: std::collections::HashMap<String, String> = redis::cmd("EMQ.JOB")
        .arg("imports")
        .arg(&running)
        .query(&mut con)
        .expect("job");
    assert_eq!(job.get("set").map(String::as_str), Some("dead"));
    assert_eq!(job.get("error").map(String::as_str), Some("cancelled"));

    // The crafted payload is text on the page, and nothing in it ran.
    b.goto(&format!("{base}/queues/emails?set=pending"))
        .await
        .expect("open");
    let payloads = b
        .find_all(Locator::Css("pre.payload"))
        .await
        .expect("payloads");
    let mut shown = Vec::new();
    for p in payloads {
        shown.push(p.text().await.expect("text"));
    }
    assert!(shown.iter().any(|t| t == crafted), "{shown:?}");
    assert!(b
        .find_all(Locator::Css("#jobs b"))
        .await
        .expect("query")
        .is_empty());
    let ran = b
        .execute("return typeof window.pwned;", vec![])
        .await
        .expect("script");
    assert_eq!(ran, serde_json::json!("undefined"));

    // Pause: the server says paused, and a claim takes nothing while three jobs wait.
    b.goto(&format!("{base}/queues/orders"))
        .await
        .expect("open");
    click(&b, Locator::Css("form[action$='/pause'] button")).await;
    assert_eq!(text_after_click(&b, "#state", "paused").await, "paused");
    assert_eq!(count(&mut con, "orders", "paused"), 1);
    let claimed: Vec<redis::Value> = redis::cmd("EMQ.CLAIM")
        .arg("orders")
        .query(&mut con)
        .expect("claim");
    assert!(claimed.is_empty());
    assert_eq!(count(&mut con, "orders", "pending"), 3);
    click(&b, Locator::Css("form[action$='/resume'] button")).await;
    assert_eq!(text_after_click(&b, "#state", "running").await, "running");
    let claimed: Vec<redis::Value> = redis::cmd("EMQ.CLAIM")
        .arg("orders")
        .query(&mut con)
        .expect("claim");
    assert_eq!(claimed.len(), 1);

    // Purge: the confirmation says what goes, the queue's name typed makes it go.
    b.goto(&format!("{base}/queues/orders?set=pending"))
        .await
        .expect("open");
    click(&b, Locator::Css("a#purge")).await;
    let what = text(&b, "#what").await;
    assert!(what.contains("2 pending jobs"), "{what}");
    b.find(Locator::Css("input[name=confirm]"))
        .await
        .expect("the name's field")
        .send_keys("orders")
        .await
        .expect("type the name");
    click(&b, Locator::Css("form[action$='/purge'] button")).await;
    assert_eq!(text_after_click(&b, "#flash", "2 purged").await, "2 purged");
    assert_eq!(count(&mut con, "orders", "pending"), 0);
    b.close().await.expect("close the browser");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_pauses_one_group_sees_its_jobs_wait_and_resumes_it() {
    let s = server();
    let mut con = s.conn();
    for i in 0..2 {
        enqueue_with(
            &mut con,
            "tenants",
            &format!("acme {i}"),
            &["GROUP", "acme"],
        );
    }
    enqueue_with(&mut con, "tenants", "x 0", &["GROUP", "<b>x</b>"]);

    let port = free_port();
    let _web = web(&s.url(), port, &[]);
    let (_driver, webdriver) = chromedriver();
    let b = browser(&webdriver).await;
    b.goto(&format!("http://127.0.0.1:{port}/queues/tenants"))
        .await
        .expect("open the queue");

    // The groups, the largest backlog first, a hostile name shown as text.
    let acme = "tr[data-group=acme]";
    assert_eq!(text(&b, "#groups tbody tr td").await, "acme");
    assert_eq!(text(&b, &format!("{acme} td.ready")).await, "2");
    assert_eq!(text(&b, &format!("{acme} td.pause")).await, "no");
    assert_eq!(text(&b, "tr[data-group='<b>x</b>'] td").await, "<b>x</b>");
    assert!(b
        .find_all(Locator::Css("#groups b"))
        .await
        .expect("query")
        .is_empty());

    // Pause: the page and the server say paused, and a claim takes only the other group's job.
    click(
        &b,
        Locator::Css(&format!("{acme} form[action$='/groups/pause'] button")),
    )
    .await;
    assert_eq!(
        text_after_click(&b, "#flash", "acme paused").await,
        "acme paused"
    );
    assert_eq!(text(&b, &format!("{acme} td.pause")).await, "paused");
    let shot = b.screenshot().await.expect("screenshot");
    std::fs::write(artifacts().join("groups.png"), shot).expect("keep the screenshot");
    assert_eq!(claim_payloads(&mut con, "tenants", 10), ["x 0"]);
    assert_eq!(text(&b, &format!("{acme} td.ready")).await, "2");

    // Resume: its jobs are claimed.
    click(
        &b,
        Locator::Css(&format!("{acme} form[action$='/groups/resume'] button")),
    )
    .await;
    assert_eq!(
        text_after_click(&b, "#flash", "acme resumed").await,
        "acme resumed"
    );
    assert_eq!(text(&b, &format!("{acme} td.pause")).await, "no");
    let mut claimed = claim_payloads(&mut con, "tenants", 10);
    claimed.sort();
    assert_eq!(claimed, ["acme 0", "acme 1"]);
    b.close().await.expect("close the browser");
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_follows_a_flow_from_a_waiting_parent_to_its_children_and_back() {
    let s = server();
    let mut con = s.conn();
    let (p, c1, c2) = ("JOB0SXemXfm5F1", "JOB0SXemXfm5F2", "JOB0SXemXfm5F3");
    let _: i64 = redis::cmd("EMQ.ENQUEUE")
        .arg("albums")
        .arg(p)
        .arg("publish")
        .arg("CHILDREN")
        .arg(2)
        .query(&mut con)
        .expect("the parent");
    for (q, id) in [("thumbs", c1), ("meta", c2)] {
        let _: i64 = redis::cmd("EMQ.ENQUEUE")
            .arg(q)
            .arg(id)
            .arg("child")
            .arg("PARENT")
            .arg("albums")
            .arg(p)
            .query(&mut con)
            .expect("a child");
    }
    let claimed: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
        .arg("thumbs")
        .query(&mut con)
        .expect("claim");
    let _: redis::Value = redis::cmd("EMQ.ACK")
        .arg("thumbs")
        .arg(c1)
        .arg(claimed[0].2)
        .arg("RESULT")
        .arg("<b>thumb</b>")
        .query(&mut con)
        .expect("ack");

    let port = free_port();
    let _web = web(&s.url(), port, &[]);
    let (_driver, webdriver) = chromedriver();
    let b = browser(&webdriver).await;
    let base = format!("http://127.0.0.1:{port}");

    // The parent waits in its queue's waiting set, one click from the queue list.
    b.goto(&format!("{base}/"))
        .await
        .expect("open the queue list");
    assert_eq!(text(&b, "tr[data-queue=albums] td.waiting").await, "1");
    click(&b, Locator::Css("tr[data-queue=albums] a")).await;
    click(&b, Locator::LinkText("waiting (1)")).await;
    click(&b, Locator::Css(&format!("tr[data-id={p}] a"))).await;
    assert_eq!(text(&b, "pre[data-field=state]").await, "waiting");
    let counts = text(&b, "#children p.counts").await;
    assert_eq!(counts, "2 children expected, 2 registered, 1 finished");
    let acked = format!("li.child[data-id={c1}]");
    assert_eq!(text(&b, &format!("{acked} strong.status")).await, "acked");
    assert_eq!(text(&b, &format!("{acked} pre.data")).await, "<b>thumb</b>");
    assert!(b
        .find_all(Locator::Css("#children b"))
        .await
        .expect("query")
        .is_empty());
    let shot = b.screenshot().await.expect("screenshot");
    std::fs::write(artifacts().join("flow.png"), shot).expect("keep the screenshot");

    // To the child in the other queue, and back up to its parent.
    click(&b, Locator::Css(&format!("li.child[data-id={c2}] > a"))).await;
    assert_eq!(text_after_click(&b, "pre[data-field=id]", c2).await, c2);
    assert_eq!(text(&b, "#parents td.state").await, "waiting");
    click(&b, Locator::Css("#parents a")).await;
    assert_eq!(text_after_click(&b, "pre[data-field=id]", p).await, p);
    b.close().await.expect("close the browser");
}

/// Four seconds of jobs of `reports`, in rounds of two enqueued, claimed, held and acked: held
/// 100 ms in the first ten rounds, then at least 300 ms.
fn slow_runs(mut con: redis::Connection) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        for round in 0..20 {
            enqueue(&mut con, "reports", "report");
            enqueue(&mut con, "reports", "report");
            let claimed = claim_reports(&mut con, 2);
            let hold = if round < 10 { 100 } else { 300 };
            std::thread::sleep(std::time::Duration::from_millis(hold));
            ack_reports(&mut con, claimed);
        }
    })
}

#[tokio::test(flavor = "multi_thread")]
async fn an_operator_reads_a_queue_s_wait_and_run_times_on_its_latency_panel() {
    let s = server();
    let port = free_port();
    let _web = web(&s.url(), port, &[]);
    let (_driver, webdriver) = chromedriver();
    let b = browser(&webdriver).await;
    slow_runs(s.conn()).join().expect("the runs' thread");
    b.goto(&format!("http://127.0.0.1:{port}/queues/reports"))
        .await
        .expect("open the queue");
    // The last runs held their jobs at least 300 ms: the bound of their median is the 500 ms
    // bucket's.
    let mut run = String::new();
    for _ in 0..25 {
        run = text(&b, "#latency #run").await;
        if run.starts_with("run p50 500 ms") {
            break;
        }
        b.refresh().await.expect("reload");
    }
    assert!(run.starts_with("run p50 500 ms, p99 500 ms"), "{run}");
    let wait = text(&b, "#latency #wait").await;
    assert!(
        wait.starts_with("wait p50 ") && !wait.contains("p50 -"),
        "{wait}"
    );
    // The chart on its time axis, and the other charts with theirs and their current values.
    assert_eq!(
        text(&b, "#latency .axis").await,
        "−60 s\n−45 s\n−30 s\n−15 s\nnow"
    );
    assert_eq!(text(&b, "#backlog .now").await, "0");
    assert!(text(&b, "#rate-acked .now").await.ends_with("/s"));
    let panel = b
        .find(Locator::Css("#latency"))
        .await
        .expect("the latency panel")
        .screenshot()
        .await
        .expect("screenshot");
    std::fs::write(artifacts().join("latency.png"), panel).expect("keep the screenshot");
}
