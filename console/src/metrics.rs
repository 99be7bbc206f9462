//! The deployment in Prometheus's text format (docs/observability.md): each queue's jobs by
//! state, its pause, its groups and the age of its oldest pending job, the groups with the
//! largest backlogs, and the server's job counters, summed over the primaries. Served at
//! `/metrics` by `emq web` and by `emq metrics --listen`.

use std::fmt::Write;
use std::net::SocketAddr;

use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::Router;

use crate::deployment::Deployment;
use crate::error::Result;
use crate::exposition::{family, label};
use crate::groups;
use crate::latency;
use crate::overview::{self, QueueRow};

/// Most groups of one queue a scrape reports (its first page: the largest backlogs), so the
/// series stay bounded however many tenants a queue has.
pub const GROUPS_PER_QUEUE: usize = 20;

/// The job counters of `INFO emq` a scrape reports, as `echomq_server_jobs_total{event}`.
pub const EVENTS: [&str; 13] = [
    "enqueued",
    "scheduled",
    "claimed",
    "acked",
    "retried",
    "dead",
    "cancelled",
    "timed_out",
    "requeued",
    "promoted",
    "purged",
    "limited",
    "cron_fired",
];

/// The text format's content type.
pub const CONTENT_TYPE: &str = "text/plain; version=0.0.4; charset=utf-8";

/// A scrape's text as a response.
pub fn response(text: String) -> Response {
    ([(header::CONTENT_TYPE, CONTENT_TYPE)], text).into_response()
}

/// `emq metrics --listen <addr>`: serves `/metrics` alone (no dashboard, no actions) until
/// interrupted. A scrape that cannot read the deployment answers 502 with the error.
pub async fn serve(dep: Deployment, listen: SocketAddr) -> Result<()> {
    let listener = tokio::net::TcpListener::bind(listen).await?;
    eprintln!("emq metrics: http://{}/metrics", listener.local_addr()?);
    let router = Router::new().route(
        "/metrics",
        get(move || {
            let dep = dep.clone();
            async move {
                match render(&dep).await {
                    Ok(text) => response(text),
                    Err(e) => (StatusCode::BAD_GATEWAY, e.to_string()).into_response(),
                }
            }
        }),
    );
    axum::serve(listener, router)
        .with_graceful_shutdown(async {
            let _ = tokio::signal::ctrl_c().await;
        })
        .await?;
    Ok(())
}

/// One scrape's text. A queue that cannot be read is reported down, with no counts, and its
/// groups left out; counters the caller may not read (`INFO`) are left out: the rest is served.
pub async fn render(dep: &Deployment) -> Result<String> {
    let queues = overview::overview(dep).await?;
    let mut groups = Vec::new();
    for q in queues.iter().filter(|q| q.groups > 0 && q.error.is_none()) {
        if let Ok((_, rows)) = groups::groups(dep, &q.name, "0", GROUPS_PER_QUEUE).await {
            groups.push((q.name.clone(), rows));
        }
    }
    let readable: Vec<(String, u16)> = queues
        .iter()
        .filter(|q| q.error.is_none())
        .map(|q| (q.name.clone(), q.width()))
        .collect();
    let timed = latency::read(dep, &readable).await;
    let mut out = String::new();
    // The server's oldest wait, counted from a job's `ready` where it has one, where it has
    // metrics; the first pending id's age otherwise.
    let mut queues = queues;
    for q in queues.iter_mut() {
        if let Some((_, m)) = timed.iter().find(|(name, _)| *name == q.name) {
            q.oldest_pending_ms = m.oldest_pending_ms;
        }
    }
    queue_series(&mut out, &queues);
    group_series(&mut out, &groups);
    latency::render(&mut out, &timed);
    family(
        &mut out,
        "echomq_server_jobs_total",
        "counter",
        "Job transitions on one primary since it started, all its queues together (INFO emq).",
    );
    for (node, counters) in dep.counters_by_node().await.unwrap_or_default() {
        for event in EVENTS {
            if let Some(n) = counters.get(&format!("emq_{event}")) {
                let _ = writeln!(
                    out,
                    "echomq_server_jobs_total{{node=\"{}\",event=\"{event}\"}} {n}",
                    label(&node)
                );
            }
        }
    }
    Ok(out)
}

fn queue_series(out: &mut String, queues: &[QueueRow]) {
    family(
        out,
        "echomq_jobs",
        "gauge",
        "Jobs of a queue by state (pending counts every ready job, grouped or not).",
    );
    for q in queues.iter().filter(|q| q.error.is_none()) {
        let states = [
            ("pending", q.pending),
            ("active", q.active),
            ("scheduled", q.scheduled),
            ("dead", q.dead),
            ("waiting", q.waiting),
        ];
        for (state, n) in states {
            let _ = writeln!(
                out,
                "echomq_jobs{{queue=\"{}\",state=\"{state}\"}} {n}",
                label(&q.name)
            );
        }
    }
    per_queue(
        out,
        "echomq_queue_up",
        "1 when the queue could be read; 0 when it could not (a key of another type, a refused permission, a timeout), its other series then left out.",
        queues,
        |q| Some(u8::from(q.error.is_none()).to_string()),
    );
    per_queue(
        out,
        "echomq_queue_paused",
        "1 while the queue is paused.",
        queues,
        |q| q.error.is_none().then(|| u8::from(q.paused).to_string()),
    );
    per_queue(
        out,
        "echomq_queue_groups",
        "The queue's named groups.",
        queues,
        |q| q.error.is_none().then(|| q.groups.to_string()),
    );
    per_queue(
        out,
        "echomq_oldest_pending_age_seconds",
        "How long the default group's first pending job has waited since it became ready (or since its id was minted).",
        queues,
        |q| {
            q.oldest_pending_ms
                .map(|ms| (ms as f64 / 1000.0).to_string())
        },
    );
}

/// A gauge family of one series a queue, `value` each (none where it gives `None`).
fn per_queue(
    out: &mut String,
    name: &str,
    help: &str,
    queues: &[QueueRow],
    value: impl Fn(&QueueRow) -> Option<String>,
) {
    family(out, name, "gauge", help);
    for q in queues {
        if let Some(v) = value(q) {
            let _ = writeln!(out, "{name}{{queue=\"{}\"}} {v}", label(&q.name));
        }
    }
}

fn group_series(out: &mut String, groups: &[(String, Vec<groups::GroupRow>)]) {
    family(
        out,
        "echomq_group_jobs",
        "gauge",
        "Jobs of a group by state, for each queue's groups with the largest backlogs.",
    );
    for (queue, rows) in groups {
        for g in rows {
            for (state, n) in [("ready", g.ready), ("active", g.active)] {
                let _ = writeln!(
                    out,
                    "echomq_group_jobs{{queue=\"{}\",group=\"{}\",state=\"{state}\"}} {n}",
                    label(queue),
                    label(&g.group)
                );
            }
        }
    }
    family(
        out,
        "echomq_group_paused",
        "gauge",
        "1 while the group is paused, for the groups echomq_group_jobs reports.",
    );
    for (queue, rows) in groups {
        for g in rows {
            let _ = writeln!(
                out,
                "echomq_group_paused{{queue=\"{}\",group=\"{}\"}} {}",
                label(queue),
                label(&g.group),
                u8::from(g.paused)
            );
        }
    }
}
