//! `/metrics` in Prometheus's text format against a real server: `emq metrics --listen` serves a
//! queue's jobs by state, its groups' and the server's counters, in a text `promtool check
//! metrics` accepts; and a real Prometheus (Debian's, as scripts/install-deps.sh
//! --with-prometheus installs it) scrapes `emq web`'s `/metrics` and answers queries of it.

mod common;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{enqueue, enqueue_with, free_port, get, metrics, server, wait_port, web, Running};

/// The body of a response.
fn body(response: &str) -> &str {
    response.split_once("\r\n\r\n").map_or("", |(_, b)| b)
}

/// A tool of Debian's `prometheus` package; the test fails, never skips, without it.
fn tool(name: &str) -> Command {
    let found = Command::new("sh")
        .args(["-c", &format!("command -v {name}")])
        .output()
        .is_ok_and(|o| o.status.success());
    assert!(
        found,
        "{name} is not installed: bash scripts/install-deps.sh --with-prometheus"
    );
    Command::new(name)
}

fn claim(con: &mut redis::Connection, queue: &str) {
    let _: redis::Value = redis::cmd("EMQ.CLAIM")
        .arg(queue)
        .query(con)
        .expect("claim");
}

#[test]
fn emq_metrics_serves_each_queue_and_group_in_a_text_promtool_accepts() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "mail", "a");
    enqueue_with(&mut con, "mail", "b", &["GROUP", "acme"]);
    enqueue_with(&mut con, "mail", "c", &["GROUP", "acme"]);
    enqueue_with(&mut con, "mail", "d", &["DELAY", "3600000"]);
    claim(&mut con, "mail");
    let port = free_port();
    let _metrics = metrics(&s.url(), port);

    let (code, response) = get(port, "/metrics", "");
    assert_eq!(code, 200, "{response}");
    assert!(response.contains("text/plain; version=0.0.4"), "{response}");
    let text = body(&response);
    let node = format!("127.0.0.1:{}", s.port);
    for line in [
        "echomq_jobs{queue=\"mail\",state=\"pending\"} 2",
        "echomq_jobs{queue=\"mail\",state=\"active\"} 1",
        "echomq_jobs{queue=\"mail\",state=\"scheduled\"} 1",
        "echomq_jobs{queue=\"mail\",state=\"dead\"} 0",
        "echomq_queue_up{queue=\"mail\"} 1",
        "echomq_queue_paused{queue=\"mail\"} 0",
        "echomq_queue_groups{queue=\"mail\"} 1",
        &format!("echomq_server_jobs_total{{node=\"{node}\",event=\"enqueued\"}} 3"),
        &format!("echomq_server_jobs_total{{node=\"{node}\",event=\"scheduled\"}} 1"),
        &format!("echomq_server_jobs_total{{node=\"{node}\",event=\"claimed\"}} 1"),
        "echomq_queue_events_total{queue=\"mail\",event=\"enqueued\"} 3",
        "echomq_queue_events_total{queue=\"mail\",event=\"scheduled\"} 1",
        "echomq_jobs_completed_total{queue=\"mail\"} 0",
        "echomq_job_wait_seconds_count{queue=\"mail\"} 1",
        "echomq_job_wait_seconds_bucket{queue=\"mail\",le=\"+Inf\"} 1",
        "echomq_job_run_seconds_count{queue=\"mail\",outcome=\"acked\"} 0",
        "echomq_job_end_to_end_seconds_count{queue=\"mail\"} 0",
    ] {
        assert!(text.lines().any(|l| l == line), "no {line} in:\n{text}");
    }
    // The group's two jobs: one ready and one running, or both ready if the default group's
    // turn came first, as the claim's round robin chose.
    let group: Vec<&str> = text
        .lines()
        .filter(|l| l.starts_with("echomq_group_jobs{queue=\"mail\",group=\"acme\""))
        .collect();
    assert_eq!(group.len(), 2, "{text}");
    let sum: i64 = group
        .iter()
        .map(|l| {
            l.rsplit(' ')
                .next()
                .and_then(|n| n.parse::<i64>().ok())
                .expect("a count")
        })
        .sum();
    assert_eq!(sum, 2, "{text}");

    let mut check = tool("promtool")
        .args(["check", "metrics"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("promtool");
    check
        .stdin
        .take()
        .expect("stdin")
        .write_all(text.as_bytes())
        .expect("feed promtool");
    let out = check.wait_with_output().expect("promtool's verdict");
    assert!(
        out.status.success(),
        "promtool check metrics: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn a_queue_that_cannot_be_read_is_down_with_no_counts_and_the_others_are_served() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "mail", "a");
    enqueue(&mut con, "broken", "b");
    // The broken queue's `dead` set holds a string: its STATS is refused WRONGTYPE.
    let _: () = redis::cmd("SET")
        .arg("emq:{broken}:dead")
        .arg("x")
        .query(&mut con)
        .expect("set");
    let port = free_port();
    let _metrics = metrics(&s.url(), port);
    let (code, response) = get(port, "/metrics", "");
    assert_eq!(code, 200, "{response}");
    let text = body(&response);
    assert!(
        text.lines()
            .any(|l| l == "echomq_queue_up{queue=\"broken\"} 0"),
        "{text}"
    );
    assert!(!text.contains("echomq_jobs{queue=\"broken\""), "{text}");
    assert!(
        !text.contains("echomq_queue_paused{queue=\"broken\""),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "echomq_queue_up{queue=\"mail\"} 1"),
        "{text}"
    );
    assert!(
        text.lines()
            .any(|l| l == "echomq_jobs{queue=\"mail\",state=\"pending\"} 1"),
        "{text}"
    );
}

/// The one value of an instant query's vector, once Prometheus has one (bounded wait).
fn query(port: u16, promql: &str, want: &str) -> Option<String> {
    let path = format!(
        "/api/v1/query?query={}",
        percent_encoding::utf8_percent_encode(promql, percent_encoding::NON_ALPHANUMERIC)
    );
    let mut last = None;
    let found = emq_harness::wait_until(Duration::from_secs(90), || {
        let (code, response) = get(port, &path, "");
        if code != 200 {
            return false;
        }
        let Ok(json) = serde_json::from_str::<serde_json::Value>(body(&response)) else {
            return false;
        };
        last = json["data"]["result"][0]["value"][1]
            .as_str()
            .map(str::to_string);
        last.as_deref() == Some(want)
    });
    found.then_some(want.to_string()).or(last)
}

#[test]
fn a_real_prometheus_scrapes_emq_web_and_answers_queries_of_its_series() {
    let s = server();
    let mut con = s.conn();
    for payload in ["a", "b", "c"] {
        enqueue(&mut con, "mail", payload);
    }
    let web_port = free_port();
    let _web = web(&s.url(), web_port, &[]);
    let dir = tempfile::tempdir().expect("a directory for prometheus");
    let config = dir.path().join("prometheus.yml");
    std::fs::write(
        &config,
        format!(
            "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: emq\n    static_configs:\n      - targets: ['127.0.0.1:{web_port}']\n"
        ),
    )
    .expect("write the config");
    let prom_port = free_port();
    let prometheus = tool("prometheus")
        .arg(format!("--config.file={}", config.display()))
        .arg(format!(
            "--storage.tsdb.path={}",
            dir.path().join("data").display()
        ))
        .arg(format!("--web.listen-address=127.0.0.1:{prom_port}"))
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start prometheus");
    let _prometheus = Running(prometheus);
    wait_port(prom_port);

    let pending = r#"echomq_jobs{queue="mail",state="pending"}"#;
    assert_eq!(query(prom_port, pending, "3").as_deref(), Some("3"));
    // A change in the server reaches Prometheus at a later scrape.
    claim(&mut con, "mail");
    assert_eq!(query(prom_port, pending, "2").as_deref(), Some("2"));
    let active = r#"echomq_jobs{queue="mail",state="active"}"#;
    assert_eq!(query(prom_port, active, "1").as_deref(), Some("1"));
    let enqueued = r#"sum(echomq_server_jobs_total{event="enqueued"})"#;
    assert_eq!(query(prom_port, enqueued, "3").as_deref(), Some("3"));
    // The two jobs left run for at least 1.1 s each, claimed and acked by hand: the server
    // times them, and Prometheus sees them completed and their run times' median in the
    // (1 s, 2.5 s] bucket of that sleep.
    for _ in 0..2 {
        let jobs: Vec<(String, Vec<u8>, i64)> = redis::cmd("EMQ.CLAIM")
            .arg("mail")
            .query(&mut con)
            .expect("claim");
        let [(id, _, token)]: [_; 1] = jobs.try_into().expect("one job");
        std::thread::sleep(Duration::from_millis(1100));
        let _: i64 = redis::cmd("EMQ.ACK")
            .arg("mail")
            .arg(&id)
            .arg(token)
            .query(&mut con)
            .expect("ack");
    }
    let completed = r#"echomq_jobs_completed_total{queue="mail"}"#;
    assert_eq!(query(prom_port, completed, "2").as_deref(), Some("2"));
    let rate = format!("rate({completed}[1m]) > bool 0");
    assert_eq!(query(prom_port, &rate, "1").as_deref(), Some("1"));
    let median = r#"histogram_quantile(0.5, echomq_job_run_seconds_bucket{queue="mail",outcome="acked"}) > bool 1"#;
    assert_eq!(query(prom_port, median, "1").as_deref(), Some("1"));
    let within = r#"histogram_quantile(0.5, echomq_job_run_seconds_bucket{queue="mail",outcome="acked"}) <= bool 2.5"#;
    assert_eq!(query(prom_port, within, "1").as_deref(), Some("1"));
    // Prometheus saw the target up, as its own `up` series says.
    assert_eq!(
        query(prom_port, r#"up{job="emq"}"#, "1").as_deref(),
        Some("1")
    );
}
