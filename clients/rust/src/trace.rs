//! Traces that follow a job (docs/observability.md). With the `otel` feature, an enqueue runs in
//! a producer span of OpenTelemetry's global tracer provider, whose W3C context (`traceparent`,
//! `tracestate`) goes into the job's headers, and a worker runs each attempt in a consumer span
//! of that trace, linked to the producer's, with the messaging attributes and its outcome.
//! Without the feature, the headers pass through and nothing else is done.

use std::future::Future;

use crate::job::{Failure, Job, Outcome};

#[cfg(feature = "otel")]
use opentelemetry::{
    context::FutureExt,
    global,
    trace::{
        Link, Span, SpanContext, SpanId, SpanKind, Status, TraceContextExt, TraceFlags, TraceId,
        TraceState, Tracer,
    },
    Context, KeyValue,
};

/// `messaging.system`.
#[cfg(feature = "otel")]
const SYSTEM: &str = "echomq";

/// An enqueue's trace: the headers its job carries (the caller's, and the producer span's
/// context where one is recorded), and the span, which ends when this is dropped.
pub(crate) struct Sending {
    pub headers: Vec<(String, String)>,
    #[cfg(feature = "otel")]
    span: global::BoxedSpan,
}

/// One attempt's consumer span, current while its handler runs.
pub(crate) struct Processing {
    #[cfg(feature = "otel")]
    cx: Context,
}

/// How an attempt ended, as its span's `echomq.job.outcome` says.
fn outcome_name(outcome: &Outcome) -> &'static str {
    match outcome {
        Ok(_) => "acked",
        Err(Failure::Retry(..)) => "retried",
        Err(Failure::Error(_)) => "failed",
    }
}

#[cfg(feature = "otel")]
fn attributes(queue: &str, operation: &'static str) -> Vec<KeyValue> {
    vec![
        KeyValue::new("messaging.system", SYSTEM),
        KeyValue::new("messaging.destination.name", queue.to_string()),
        KeyValue::new("messaging.operation.type", operation),
        KeyValue::new("messaging.operation.name", operation),
    ]
}

/// A span context as W3C headers: `traceparent`, and `tracestate` when it has one.
#[cfg(feature = "otel")]
fn w3c(context: &SpanContext) -> Vec<(String, String)> {
    let mut out = vec![(
        "traceparent".to_string(),
        format!(
            "00-{}-{}-{:02x}",
            context.trace_id(),
            context.span_id(),
            context.trace_flags().to_u8()
        ),
    )];
    let state = context.trace_state().header();
    if !state.is_empty() {
        out.push(("tracestate".to_string(), state));
    }
    out
}

/// The remote span context a job's `traceparent` (and `tracestate`) carry; `None` for none or
/// one not well formed.
#[cfg(feature = "otel")]
fn extracted(headers: &[(String, String)]) -> Option<SpanContext> {
    let get = |key: &str| {
        headers
            .iter()
            .find(|(k, _)| k == key)
            .map(|(_, v)| v.trim())
    };
    let parts: Vec<&str> = get("traceparent")?.split('-').collect();
    // Version 00 has exactly four parts; a later version may add more after them.
    let [version, trace, span, flags, ref rest @ ..] = parts[..] else {
        return None;
    };
    if version == "00" && !rest.is_empty() {
        return None;
    }
    // W3C Trace Context: lower-case hex only.
    let hex = |s: &str, n: usize| {
        s.len() == n && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    if !(hex(version, 2) && hex(trace, 32) && hex(span, 16) && hex(flags, 2)) || version == "ff" {
        return None;
    }
    let context = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(u8::from_str_radix(flags, 16).ok()?),
        true,
        get("tracestate")
            .and_then(|s| s.parse::<TraceState>().ok())
            .unwrap_or_default(),
    );
    context.is_valid().then_some(context)
}

impl Sending {
    /// A producer span (`send <queue>`) in the current context, its W3C context added to
    /// `given` (a `traceparent` given wins).
    #[cfg(feature = "otel")]
    pub fn start(queue: &str, given: Vec<(String, String)>) -> Sending {
        let tracer = global::tracer("echomq");
        let span = tracer
            .span_builder(format!("send {queue}"))
            .with_kind(SpanKind::Producer)
            .with_attributes(attributes(queue, "send"))
            .start(&tracer);
        let context = span.span_context();
        let base = match context.is_valid() {
            true => w3c(context),
            false => Vec::new(),
        };
        Sending {
            headers: crate::headers::merged(base, given),
            span,
        }
    }

    #[cfg(not(feature = "otel"))]
    pub fn start(_queue: &str, given: Vec<(String, String)>) -> Sending {
        Sending { headers: given }
    }

    /// Names the job the span sent (`messaging.message.id`).
    #[cfg(feature = "otel")]
    pub fn sent(&mut self, id: &str) {
        self.span
            .set_attribute(KeyValue::new("messaging.message.id", id.to_string()));
    }

    #[cfg(not(feature = "otel"))]
    pub fn sent(&mut self, _id: &str) {}
}

impl Processing {
    /// A consumer span (`process <queue>`) for `job`'s attempt, in the trace its headers carry
    /// and linked to the producer's span.
    #[cfg(feature = "otel")]
    pub fn start(queue: &str, job: &Job) -> Processing {
        let tracer = global::tracer("echomq");
        let remote = extracted(&job.headers);
        let parent = match &remote {
            Some(context) => Context::current().with_remote_span_context(context.clone()),
            None => Context::current(),
        };
        let mut attributes = attributes(queue, "process");
        attributes.push(KeyValue::new("messaging.message.id", job.id.clone()));
        attributes.push(KeyValue::new("echomq.job.attempt", job.attempt));
        let span = tracer
            .span_builder(format!("process {queue}"))
            .with_kind(SpanKind::Consumer)
            .with_attributes(attributes)
            .with_links(remote.into_iter().map(Link::with_context).collect())
            .start_with_context(&tracer, &parent);
        Processing {
            cx: parent.with_span(span),
        }
    }

    #[cfg(not(feature = "otel"))]
    pub fn start(_queue: &str, _job: &Job) -> Processing {
        Processing {}
    }

    /// The handler's future `start` makes, with the span current while it is made and each
    /// time it is polled.
    #[cfg(feature = "otel")]
    pub fn run<F: Future>(&self, start: impl FnOnce() -> F) -> impl Future<Output = F::Output> {
        let handler = {
            let _current = self.cx.clone().attach();
            start()
        };
        handler.with_context(self.cx.clone())
    }

    #[cfg(not(feature = "otel"))]
    pub fn run<F: Future>(&self, start: impl FnOnce() -> F) -> F {
        start()
    }

    /// Ends the span with the attempt's outcome: `echomq.job.outcome` (acked, retried, failed),
    /// and an error status for a failure.
    pub fn finish(self, outcome: &Outcome) {
        self.end(
            outcome_name(outcome),
            match outcome {
                Ok(_) => None,
                Err(Failure::Retry(_, why) | Failure::Error(why)) => Some(why.clone()),
            },
        );
    }

    /// Ends the span of an attempt the server ended while it ran (`cancelled`, `timed_out`).
    pub fn ended(self, why: &'static str) {
        self.end(why, Some(why.to_string()));
    }

    #[cfg(feature = "otel")]
    fn end(self, outcome: &'static str, error: Option<String>) {
        let span = self.cx.span();
        span.set_attribute(KeyValue::new("echomq.job.outcome", outcome));
        if let Some(why) = error {
            span.set_status(Status::error(why));
        }
        span.end();
    }

    #[cfg(not(feature = "otel"))]
    fn end(self, _outcome: &'static str, _error: Option<String>) {}
}

#[cfg(all(test, feature = "otel"))]
mod tests {
    use super::*;

    #[test]
    fn a_trace_context_reads_back_from_its_headers() {
        let context = SpanContext::new(
            TraceId::from_hex("4bf92f3577b34da6a3ce929d0e0e4736").unwrap(),
            SpanId::from_hex("00f067aa0ba902b7").unwrap(),
            TraceFlags::SAMPLED,
            true,
            "vendor=x".parse().unwrap(),
        );
        let headers = w3c(&context);
        assert_eq!(
            headers[0].1,
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
        );
        assert_eq!(extracted(&headers), Some(context));
        let bad = |v: &str| extracted(&[("traceparent".to_string(), v.to_string())]);
        assert_eq!(bad("00-xyz"), None);
        assert_eq!(
            bad(&format!("00-{}-00f067aa0ba902b7-01", "0".repeat(32))),
            None
        );
        assert_eq!(
            bad("ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"),
            None
        );
        // Upper-case hex is not W3C's.
        assert_eq!(
            bad("00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01"),
            None
        );
    }
}
