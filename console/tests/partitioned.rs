//! A partitioned queue in the console, on a 3-primary cluster (docs/cluster.md): `emq span`
//! spreads it, `emq enqueue` routes by the job's id, `emq queues` lists it once with its
//! partitions' totals and each partition's primary, its web page lists the partitions, and
//! `emq jobs` walks them, and `/metrics` adds up their latencies; `emq purge` and
//! `emq requeue --dead` clear every partition.

mod common;

use std::collections::HashSet;

use common::{emq, get, kill_next, server, servers_load_the_module, web, Cluster};
use serde_json::Value as Json;

#[test]
fn a_partitioned_queue_is_one_row_of_totals_with_a_row_a_partition_and_its_primary() {
    servers_load_the_module();
    let cluster = Cluster::start(3, 0);
    let url = cluster.urls()[0].clone();
    let (code, out, err) = emq(&url, &["span", "orders", "12"]);
    assert_eq!(
        (code, out.trim()),
        (0, "orders over 12 partitions"),
        "{err}"
    );
    let (code, out, _) = emq(&url, &["span", "orders", "12"]);
    assert_eq!((code, out.trim()), (0, "orders over 12 partitions already"));
    let (code, _, err) = emq(&url, &["span", "orders", "4"]);
    assert_eq!(code, 1, "another width is refused");
    assert!(err.contains("EMQSPAN"), "{err}");
    for i in 0..60 {
        let (code, _, err) = emq(&url, &["enqueue", "orders", &format!("job {i}")]);
        assert_eq!(code, 0, "{err}");
    }
    let (code, json, err) = emq(&url, &["--json", "queues"]);
    assert_eq!(code, 0, "{err}");
    let rows: Json = serde_json::from_str(&json).expect("json");
    let rows = rows.as_array().expect("rows");
    assert_eq!(rows.len(), 1, "the queue, none of its partitions: {rows:?}");
    assert_eq!(rows[0]["name"], "orders");
    assert_eq!(rows[0]["pending"], 60);
    let parts = rows[0]["partitions"].as_array().expect("partitions");
    assert_eq!(parts.len(), 12);
    let sum: i64 = parts
        .iter()
        .map(|p| p["pending"].as_i64().unwrap_or(0))
        .sum();
    assert_eq!(sum, 60);
    let primaries: HashSet<&str> = parts.iter().filter_map(|p| p["primary"].as_str()).collect();
    assert_eq!(primaries.len(), 3, "{primaries:?}");
    // `emq jobs` walks the partitions in turn: every job once, a page at a time.
    let (mut cursor, mut seen) = ("0".to_string(), Vec::new());
    loop {
        let args = [
            "--json", "jobs", "orders", "pending", "--count", "7", "--cursor",
        ];
        let (code, json, err) = emq(&url, &[&args[..], &[cursor.as_str()]].concat());
        assert_eq!(code, 0, "{err}");
        let page: Json = serde_json::from_str(&json).expect("json");
        let jobs = page["jobs"].as_array().expect("jobs");
        seen.extend(
            jobs.iter()
                .filter_map(|j| j["id"].as_str().map(String::from)),
        );
        cursor = page["cursor"].as_str().expect("cursor").to_string();
        if cursor == "0" {
            break;
        }
        assert!(!jobs.is_empty(), "a page is empty only at the end");
    }
    let distinct: HashSet<&String> = seen.iter().collect();
    assert_eq!((seen.len(), distinct.len()), (60, 60));
    let port = common::free_port();
    let _web = web(&url, port, &["--read-only"]);
    let (status, page) = get(port, "/queues/orders", "");
    assert_eq!(status, 200);
    assert_eq!(page.matches("data-partition=").count(), 12, "{page}");
    // Its latencies in `/metrics` are its partitions' added up: a claim's wait counted once
    // a job, whichever partition held it.
    let mut con = cluster.client();
    let mut claimed = 0;
    for p in parts.iter().filter_map(|p| p["name"].as_str()) {
        let jobs: Vec<redis::Value> = redis::cmd("EMQ.CLAIM")
            .arg(p)
            .arg("COUNT")
            .arg(100)
            .query(&mut con)
            .expect("claim a partition");
        claimed += jobs.len();
    }
    assert_eq!(claimed, 60);
    let (status, scrape) = get(port, "/metrics", "");
    assert_eq!(status, 200);
    assert!(
        scrape.contains("echomq_job_wait_seconds_count{queue=\"orders\"} 60\n"),
        "{scrape}"
    );
    let (code, out, _) = emq(&url, &["unspan", "orders"]);
    assert_eq!(code, 1, "its partitions hold jobs: {out}");
}

#[test]
fn purge_and_requeue_dead_reach_every_partition() {
    servers_load_the_module();
    let server = server();
    let url = server.url();
    let (code, _, err) = emq(&url, &["span", "big", "3"]);
    assert_eq!(code, 0, "{err}");
    for i in 0..30 {
        let (code, _, err) = emq(&url, &["enqueue", "big", &format!("job {i}")]);
        assert_eq!(code, 0, "{err}");
    }
    let mut con = server.conn();
    // A dead job in each partition that holds any (the ids route the jobs).
    let (_, json, _) = emq(&url, &["--json", "queues"]);
    let rows: Json = serde_json::from_str(&json).expect("json");
    let parts: Vec<String> = rows[0]["partitions"]
        .as_array()
        .expect("partitions")
        .iter()
        .filter_map(|p| p["name"].as_str().map(String::from))
        .collect();
    assert_eq!(parts.len(), 3);
    let mut dead = 0;
    for p in &parts {
        if common::count(&mut con, p, "pending") > 0 {
            kill_next(&mut con, p, "boom");
            dead += 1;
        }
    }
    assert!(dead >= 2, "30 jobs over 3 partitions: {dead} held any");
    let pending = |url: &str| -> (i64, i64) {
        let (_, json, _) = emq(url, &["--json", "queues"]);
        let rows: Json = serde_json::from_str(&json).expect("json");
        let row = &rows.as_array().expect("rows")[0];
        (
            row["pending"].as_i64().unwrap_or(-1),
            row["dead"].as_i64().unwrap_or(-1),
        )
    };
    assert_eq!(pending(&url), (30 - dead, dead));
    let (code, out, err) = emq(&url, &["requeue", "big", "--dead", "--yes"]);
    assert_eq!(
        (code, out.trim()),
        (0, format!("{dead} requeued").as_str()),
        "{err}"
    );
    assert_eq!(pending(&url), (30, 0));
    let (code, out, err) = emq(&url, &["purge", "big", "pending", "--yes"]);
    assert_eq!((code, out.trim()), (0, "30 purged"), "{err}");
    assert_eq!(pending(&url), (0, 0));
}
