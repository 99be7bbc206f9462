//! Each queue's metrics as the server keeps them (`EMQ.METRICS`, docs/observability.md), in
//! Prometheus's text format: the events counted, and the wait, run and end-to-end histograms,
//! their bounds in seconds.

use std::fmt::Write;

use echomq_client::{Histogram, Metrics};

use crate::deployment::Deployment;
use crate::exposition::{family, label};

/// Each readable queue's metrics, by name, each queue given with its width (a partitioned
/// queue's are its partitions' added up); a queue whose metrics cannot be read, or whose
/// server keeps none now (`emq.metrics no`), is left out.
pub async fn read(dep: &Deployment, queues: &[(String, u16)]) -> Vec<(String, Metrics)> {
    let mut out = Vec::with_capacity(queues.len());
    for (name, width) in queues {
        if let Ok(m) = dep.queue(name).knowing_width(*width).metrics().await {
            if m.enabled {
                out.push((name.clone(), m));
            }
        }
    }
    out
}

/// The families of `metrics`, each with its `# HELP` and `# TYPE` lines.
pub fn render(out: &mut String, metrics: &[(String, Metrics)]) {
    family(
        out,
        "echomq_jobs_completed_total",
        "counter",
        "Jobs acked, counted by the server that holds the queue since it started.",
    );
    for (queue, m) in metrics {
        let n = m.events.get("acked").copied().unwrap_or(0);
        let _ = writeln!(
            out,
            "echomq_jobs_completed_total{{queue=\"{}\"}} {n}",
            label(queue)
        );
    }
    family(
        out,
        "echomq_queue_events_total",
        "counter",
        "Each event of a queue's jobs (the event stream's names), counted by the server that holds it since it started.",
    );
    for (queue, m) in metrics {
        for (event, n) in &m.events {
            let _ = writeln!(
                out,
                "echomq_queue_events_total{{queue=\"{}\",event=\"{}\"}} {n}",
                label(queue),
                label(event)
            );
        }
    }
    family(
        out,
        "echomq_job_wait_seconds",
        "histogram",
        "How long jobs waited ready before their claim.",
    );
    for (queue, m) in metrics {
        histogram(
            out,
            "echomq_job_wait_seconds",
            &format!("queue=\"{}\"", label(queue)),
            &m.wait,
        );
    }
    family(
        out,
        "echomq_job_run_seconds",
        "histogram",
        "How long attempts ran, from their claim to their end, by how they ended.",
    );
    for (queue, m) in metrics {
        for (ended, h) in &m.run {
            let labels = format!("queue=\"{}\",outcome=\"{}\"", label(queue), label(ended));
            histogram(out, "echomq_job_run_seconds", &labels, h);
        }
    }
    family(
        out,
        "echomq_job_end_to_end_seconds",
        "histogram",
        "How long jobs took from their id's minting to their ack.",
    );
    for (queue, m) in metrics {
        let labels = format!("queue=\"{}\"", label(queue));
        histogram(out, "echomq_job_end_to_end_seconds", &labels, &m.end_to_end);
    }
}

/// One histogram's `_bucket` lines (`le` in seconds, `+Inf` last), `_sum` and `_count`.
fn histogram(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    for (le, n) in &h.buckets {
        let le = le.map_or("+Inf".to_string(), |ms| seconds(ms as f64));
        let _ = writeln!(out, "{name}_bucket{{{labels},le=\"{le}\"}} {n}");
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", seconds(h.sum_ms as f64));
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

/// Milliseconds as seconds, as short as they print exactly (`0.001`, `2.5`, `3600`).
fn seconds(ms: f64) -> String {
    format!("{}", ms / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_histogram_prints_its_buckets_in_seconds_then_its_sum_and_count() {
        let h = Histogram {
            count: 3,
            sum_ms: 2_500,
            buckets: vec![(Some(1), 0), (Some(2_500), 2), (None, 3)],
        };
        let mut out = String::new();
        histogram(&mut out, "x", "queue=\"q\"", &h);
        assert_eq!(
            out,
            "x_bucket{queue=\"q\",le=\"0.001\"} 0\nx_bucket{queue=\"q\",le=\"2.5\"} 2\nx_bucket{queue=\"q\",le=\"+Inf\"} 3\nx_sum{queue=\"q\"} 2.5\nx_count{queue=\"q\"} 3\n"
        );
    }
}
