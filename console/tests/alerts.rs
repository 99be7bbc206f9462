//! What ships beside `/metrics` (docs/observability.md): the Prometheus alert rules pass
//! `promtool check rules` and `promtool test rules` (a case for each alert, firing where it
//! should and nowhere else); every query of the Grafana dashboard parses as PromQL (checked by
//! promtool as a recording rule, Grafana's variables given values); and every series the rules
//! and the dashboard name is one `emq metrics` serves from a real server.

mod common;

use std::collections::BTreeSet;
use std::path::PathBuf;
use std::process::{Command, Output};

use common::{enqueue, enqueue_with, free_port, get, metrics, server};

fn observability() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../observability")
}

/// `promtool <args>` in `dir`; the test fails, never skips, without it.
fn promtool(dir: &std::path::Path, args: &[&str]) -> Output {
    Command::new("promtool")
        .args(args)
        .current_dir(dir)
        .output()
        .unwrap_or_else(|e| {
            panic!("promtool: {e}: install it with bash scripts/install-deps.sh --with-prometheus")
        })
}

fn assert_ok(out: &Output, what: &str) {
    assert!(
        out.status.success(),
        "{what}: {}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The dashboard's queries, each as written.
fn dashboard_queries() -> Vec<String> {
    let text = std::fs::read_to_string(observability().join("grafana-dashboard.json"))
        .expect("the dashboard");
    let json: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let mut out = Vec::new();
    for panel in json["panels"].as_array().expect("panels") {
        for target in panel["targets"].as_array().expect("targets") {
            out.push(target["expr"].as_str().expect("an expr").to_string());
        }
    }
    out
}

/// Every `echomq_*` series a text names, a histogram's `_bucket`, `_sum` and `_count` as its
/// family.
fn series_named(text: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let mut rest = text;
    while let Some(at) = rest.find("echomq_") {
        let name: String = rest[at..]
            .chars()
            .take_while(|c| c.is_ascii_alphanumeric() || *c == '_')
            .collect();
        rest = &rest[at + name.len()..];
        let family = ["_bucket", "_sum", "_count"]
            .iter()
            .find_map(|s| name.strip_suffix(s))
            .unwrap_or(&name);
        out.insert(family.to_string());
    }
    out
}

#[test]
fn the_alert_rules_pass_promtool_s_checks_and_each_alert_s_test() {
    let dir = observability();
    assert_ok(
        &promtool(&dir, &["check", "rules", "alerts.yml"]),
        "check rules",
    );
    assert_ok(
        &promtool(&dir, &["test", "rules", "alerts.test.yml"]),
        "test rules",
    );
    let tests = std::fs::read_to_string(dir.join("alerts.test.yml")).expect("the tests");
    let rules = std::fs::read_to_string(dir.join("alerts.yml")).expect("the rules");
    for line in rules
        .lines()
        .filter_map(|l| l.trim().strip_prefix("- alert: "))
    {
        assert!(
            tests.contains(&format!("alertname: {line}")),
            "no promtool test for {line}"
        );
    }
}

#[test]
fn every_dashboard_query_parses_as_promql() {
    let queries = dashboard_queries();
    assert!(queries.len() >= 8, "{queries:?}");
    let dir = tempfile::tempdir().expect("a directory");
    let mut rules = String::from("groups:\n  - name: dashboard\n    rules:\n");
    for (i, q) in queries.iter().enumerate() {
        // Grafana's variables, as it would fill them in.
        let q = q.replace("$__rate_interval", "5m").replace("$queue", ".*");
        rules.push_str(&format!(
            "      - record: dashboard:q{i}\n        expr: '{q}'\n"
        ));
    }
    std::fs::write(dir.path().join("dashboard.yml"), rules).expect("write");
    assert_ok(
        &promtool(dir.path(), &["check", "rules", "dashboard.yml"]),
        "the dashboard's queries",
    );
}

#[test]
fn every_series_the_rules_and_the_dashboard_name_is_served() {
    let s = server();
    let mut con = s.conn();
    enqueue(&mut con, "mail", "a");
    enqueue_with(&mut con, "mail", "b", &["GROUP", "acme"]);
    let port = free_port();
    let _metrics = metrics(&s.url(), port);
    let (code, served) = get(port, "/metrics", "");
    assert_eq!(code, 200, "{served}");
    let served: BTreeSet<String> = served
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE "))
        .filter_map(|l| l.split_whitespace().next())
        .map(str::to_string)
        .collect();
    let rules = std::fs::read_to_string(observability().join("alerts.yml")).expect("rules");
    let mut named = series_named(&rules);
    named.extend(series_named(&dashboard_queries().join("\n")));
    let missing: Vec<&String> = named.difference(&served).collect();
    assert!(missing.is_empty(), "named but not served: {missing:?}");
}
