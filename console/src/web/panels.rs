//! A queue page's charts of the last minute, each on a time axis with its current value: the
//! backlog, the rates of its jobs' transitions, and their latency (the wait of the jobs
//! claimed and the run of the attempts acked, median and 99th percentile, from the server's
//! histograms: docs/observability.md).

use maud::{html, Markup, PreEscaped};
use plotters::style::RGBColor;

use super::chart::{timeline, TICK_S};
use crate::history::{History, RATES, WINDOW_MS};
use crate::waits::{show, Latency, PAST_LAST};

const WINDOW_S: u32 = (WINDOW_MS / 1000) as u32;
const BLUE: RGBColor = RGBColor(37, 99, 235);
const LIGHT_BLUE: RGBColor = RGBColor(147, 197, 253);
const ORANGE: RGBColor = RGBColor(234, 88, 12);
const LIGHT_ORANGE: RGBColor = RGBColor(253, 186, 116);

/// A chart with its time axis's labels under it and its current value beside its title.
fn figure(id: &str, title: &str, now: Markup, svg: String, width: u32) -> Markup {
    let ticks: Vec<u32> = (0..=WINDOW_S).step_by(TICK_S as usize).collect();
    html! {
        figure.chart id=(id) {
            figcaption { (title) " " strong.now { (now) } }
            (PreEscaped(svg))
            div.axis style={ "width:" (width) "px" } {
                @for t in ticks.iter().rev() {
                    span { @if *t == 0 { "now" } @else { "−" (t) " s" } }
                }
            }
        }
    }
}

/// `(age, value)` points of a series taken at each sample (`ages`), where it has one.
fn points(ages: &[f64], values: impl Iterator<Item = Option<f64>>) -> Vec<(f64, f64)> {
    ages.iter()
        .zip(values)
        .filter_map(|(&age, v)| Some((age, v?)))
        .collect()
}

pub fn backlog(history: &History, queue: &str) -> Markup {
    let series = history.backlog_series(queue, "pending");
    let now = series.last().map_or("-".to_string(), |n| format!("{n}"));
    let line = points(&history.ages(), series.into_iter().map(Some));
    let svg = timeline(&[(line, BLUE)], WINDOW_S, 240, 40);
    figure("backlog", "pending", html! { (now) }, svg, 240)
}

/// The deployment's enqueue, claim and acknowledge rates, from the primaries' `INFO emq`
/// counters.
pub fn server_rates(history: &History) -> Markup {
    let ages = history.ages();
    html! {
        @for (counter, label) in RATES {
            @let now = html! {
                span.rate data-counter=(counter) {
                    (history.rate(counter).map_or("-".to_string(), |r| format!("{r:.1}/s")))
                }
            };
            @let line = points(&ages[ages.len().min(1)..], history.rate_series(counter).into_iter().map(Some));
            (figure(&format!("server-{label}"), label, now, timeline(&[(line, BLUE)], WINDOW_S, 160, 32), 160))
        }
    }
}

pub fn rates(history: &History, queue: &str) -> Markup {
    let ages = history.ages();
    html! {
        @for event in ["enqueued", "claimed", "acked"] {
            @let rate = history.queue_rate(queue, event);
            @let now = html! { (rate.map_or("-".to_string(), |r| format!("{r:.1}/s"))) };
            // The first sample has no rate before it: each rate is between a sample and the one
            // before.
            @let line = points(&ages[ages.len().min(1)..], history.queue_rate_series(queue, event).into_iter().map(Some));
            (figure(&format!("rate-{event}"), event, now, timeline(&[(line, BLUE)], WINDOW_S, 160, 32), 160))
        }
    }
}

/// Milliseconds as a chart plots them: a bound past the last bucket at an hour.
fn plotted(ms: Option<u64>) -> Option<f64> {
    ms.map(|ms| ms.min(3_600_000) as f64)
}

pub fn latency(history: &History, queue: &str) -> Markup {
    let series = history.latency_series(queue);
    let ages = history.ages();
    let pick = |f: fn(&Latency) -> Option<u64>| {
        points(
            &ages,
            series.iter().map(|l| plotted(l.as_ref().and_then(f))),
        )
    };
    let lines = [
        (pick(|l| l.wait.p50_ms), BLUE),
        (pick(|l| l.wait.p99_ms), LIGHT_BLUE),
        (pick(|l| l.run.p50_ms), ORANGE),
        (pick(|l| l.run.p99_ms), LIGHT_ORANGE),
    ];
    let latest = history.latest_latency(queue).unwrap_or_default();
    let now = html! {
        span #wait { "wait p50 " (show(latest.wait.p50_ms)) ", p99 " (show(latest.wait.p99_ms)) }
        " · "
        span #run { "run p50 " (show(latest.run.p50_ms)) ", p99 " (show(latest.run.p99_ms)) }
    };
    let svg = timeline(&lines, WINDOW_S, 480, 80);
    html! {
        (figure("latency", "latency (ms, bucket bounds)", now, svg, 480))
        p.legend {
            span style="color:#2563eb" { "■ wait p50" } " " span style="color:#93c5fd" { "■ wait p99" } " "
            span style="color:#ea580c" { "■ run p50" } " " span style="color:#fdba74" { "■ run p99" }
            @if latest.wait.p99_ms == Some(PAST_LAST) || latest.run.p99_ms == Some(PAST_LAST) { " (a bound past an hour is drawn at an hour)" }
        }
    }
}
