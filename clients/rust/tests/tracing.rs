//! Traces that follow a job (the `otel` feature, docs/observability.md), with OpenTelemetry's
//! SDK and its in-memory exporter against a real server: an enqueue made inside a request's
//! span carries that trace in the job's headers, and each attempt runs in a consumer span of
//! the same trace, a child of the producer's span and linked to it, with the messaging
//! attributes and its outcome, across a retry.

mod common;

use std::time::Duration;

use common::*;
use echomq_client::{Enqueue, Failure, Job, Queue};
use emq_harness::Options;
use opentelemetry::context::FutureExt;
use opentelemetry::trace::{
    Span as _, SpanKind, Status, TraceContextExt, Tracer, TracerProvider as _,
};
use opentelemetry::{global, Context, Value};
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider, SpanData};

fn attribute(span: &SpanData, key: &str) -> Option<Value> {
    span.attributes
        .iter()
        .find(|kv| kv.key.as_str() == key)
        .map(|kv| kv.value.clone())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_attempt_runs_in_the_request_s_trace_through_a_retry() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    global::set_tracer_provider(provider.clone());
    let server = start(Options::default());
    let q = Queue::new(conn(&server).await, "traced");
    let request = provider.tracer("web").start("GET /album");
    let trace_id = request.span_context().trace_id();
    let cx = Context::current_with_span(request);
    let how = Enqueue {
        headers: vec![("tenant".into(), "acme".into())],
        ..Enqueue::default()
    };
    let id = q
        .enqueue_with(b"resize", how)
        .with_context(cx.clone())
        .await
        .expect("enqueue");
    let spans = exporter.get_finished_spans().expect("spans");
    let send = spans
        .iter()
        .find(|s| s.name == "send traced")
        .expect("a send span");
    assert_eq!(send.span_kind, SpanKind::Producer);
    assert_eq!(send.span_context.trace_id(), trace_id);
    assert_eq!(
        attribute(send, "messaging.message.id"),
        Some(id.clone().into())
    );

    let (seen, mut heard) = tokio::sync::mpsc::unbounded_channel();
    let worker = worker_of(&server, "traced", move |job: Job| {
        let seen = seen.clone();
        async move {
            let _ = seen.send((job.attempt, job.header("tenant").map(str::to_string)));
            match job.attempt {
                1 => Err(Failure::Retry(
                    Duration::from_millis(10),
                    "once more".into(),
                )),
                _ => Ok(None),
            }
        }
    })
    .await;
    let stop = worker.shutdown_token();
    let running = tokio::spawn(worker.run());
    for attempt in 1..=2 {
        let got = tokio::time::timeout(Duration::from_secs(30), heard.recv()).await;
        assert_eq!(
            got.ok().flatten(),
            Some((attempt, Some("acme".to_string())))
        );
    }
    // Both attempts' spans are ended once the second is settled: wait for them, by count.
    let mut process = Vec::new();
    for _ in 0..1500 {
        process = exporter.get_finished_spans().expect("spans");
        process.retain(|s| s.name == "process traced");
        if process.len() == 2 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    stop.cancel();
    running.await.expect("worker task").expect("worker");
    process.sort_by_key(|s| s.start_time);
    assert_eq!(process.len(), 2);
    for (n, span) in process.iter().enumerate() {
        assert_eq!(span.span_kind, SpanKind::Consumer);
        assert_eq!(span.span_context.trace_id(), trace_id);
        assert_eq!(span.parent_span_id, send.span_context.span_id());
        let links: Vec<_> = span
            .links
            .links
            .iter()
            .map(|l| l.span_context.span_id())
            .collect();
        assert_eq!(links, [send.span_context.span_id()]);
        assert_eq!(attribute(span, "messaging.system"), Some("echomq".into()));
        assert_eq!(
            attribute(span, "messaging.destination.name"),
            Some("traced".into())
        );
        assert_eq!(
            attribute(span, "messaging.operation.type"),
            Some("process".into())
        );
        assert_eq!(
            attribute(span, "messaging.message.id"),
            Some(id.clone().into())
        );
        assert_eq!(
            attribute(span, "echomq.job.attempt"),
            Some((n as i64 + 1).into())
        );
    }
    assert_eq!(
        attribute(&process[0], "echomq.job.outcome"),
        Some("retried".into())
    );
    assert!(matches!(process[0].status, Status::Error { .. }));
    assert_eq!(
        attribute(&process[1], "echomq.job.outcome"),
        Some("acked".into())
    );
    assert!(!matches!(process[1].status, Status::Error { .. }));
}
