"""Traces that follow a job (``echomq.tracing``, docs/observability.md), with OpenTelemetry's
SDK and its in-memory exporter: an enqueue made inside a request's span carries that trace in
the job's headers, and each attempt of the job runs in a consumer span of the same trace,
linked to the producer's, with the messaging attributes and its outcome, across a retry."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, List, Tuple

import echomq
from echomq.aio import AsyncQueue, AsyncWorker
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, StatusCode

from conftest import Server, joined, until
from test_cancel import start, until_async


def traced() -> Tuple[TracerProvider, InMemorySpanExporter]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider, exporter


def acked_once(worker: echomq.Worker) -> None:
    """Runs `worker` until it acked a job, then stops it."""
    t = start(worker)
    try:
        assert until(lambda: worker.counts["acked"] == 1, 30)
    finally:
        worker.stop()
        assert joined(t)


def named(exporter: InMemorySpanExporter, name: str) -> List[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def test_each_attempt_runs_in_the_request_s_trace_through_a_retry(server: Server) -> None:
    provider, exporter = traced()
    q = echomq.Queue(server.client(), "traced", tracer_provider=provider)
    with provider.get_tracer("web").start_as_current_span("GET /album") as request:
        job_id = q.enqueue(b"resize", headers={"tenant": "acme"})
    trace_id = request.get_span_context().trace_id
    [send] = named(exporter, "send traced")
    assert send.kind == SpanKind.PRODUCER
    assert send.context is not None and send.context.trace_id == trace_id
    assert send.attributes is not None and send.attributes["messaging.message.id"] == job_id
    row = q.job(job_id)
    assert row is not None and row["headers"]["tenant"] == "acme"
    assert row["headers"]["traceparent"].split("-")[1] == f"{trace_id:032x}"

    seen: List[Any] = []

    def handle(job: echomq.Job) -> None:
        seen.append(dict(job.headers))
        if job.attempt == 1:
            raise echomq.Retry(0.05, "once more")

    worker = echomq.Worker(server.client(), "traced", handle, tracer_provider=provider)
    acked_once(worker)
    assert [h["tenant"] for h in seen] == ["acme", "acme"]
    spans = sorted(named(exporter, "process traced"), key=lambda s: s.start_time or 0)
    assert len(spans) == 2
    for attempt, span in enumerate(spans, 1):
        assert span.kind == SpanKind.CONSUMER
        assert span.context is not None and span.context.trace_id == trace_id
        assert span.parent is not None and send.context is not None
        assert span.parent.span_id == send.context.span_id
        assert [link.context.span_id for link in span.links] == [send.context.span_id]
        attributes = dict(span.attributes or {})
        assert attributes["messaging.system"] == "echomq"
        assert attributes["messaging.destination.name"] == "traced"
        assert attributes["messaging.operation.type"] == "process"
        assert attributes["messaging.message.id"] == job_id
        assert attributes["echomq.job.attempt"] == attempt
    first, second = (dict(s.attributes or {}) for s in spans)
    assert (first["echomq.job.outcome"], second["echomq.job.outcome"]) == ("retried", "acked")
    assert spans[0].status.status_code == StatusCode.ERROR
    assert spans[1].status.status_code != StatusCode.ERROR


def test_with_no_tracer_provider_a_job_keeps_the_reference_row(server: Server) -> None:
    # No provider given and none set globally: the API's spans record nothing, so nothing is
    # injected.
    q = echomq.Queue(server.client(), "untraced")
    job_id = q.enqueue(b"plain")
    fields = server.cmd("HKEYS", f"emq:{{untraced}}:job:{job_id}")
    assert [f.decode() for f in fields] == ["state", "attempts", "payload"]


def test_the_producer_s_baggage_is_current_in_the_handler(server: Server) -> None:
    from opentelemetry import baggage, context

    provider, _ = traced()
    q = echomq.Queue(server.client(), "baggage", tracer_provider=provider)
    token = context.attach(baggage.set_baggage("tenant", "acme"))
    try:
        q.enqueue(b"x")
    finally:
        context.detach(token)
    seen: List[Any] = []
    worker = echomq.Worker(
        server.client(), "baggage", lambda job: seen.append(baggage.get_baggage("tenant")),
        tracer_provider=provider,
    )
    acked_once(worker)
    assert seen == ["acme"]


def test_the_async_worker_traces_its_attempts_too(server: Server) -> None:
    provider, exporter = traced()
    done = threading.Event()

    async def body() -> None:
        import redis.asyncio

        client: Any = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "traced-async", tracer_provider=provider)
        with provider.get_tracer("web").start_as_current_span("POST /import"):
            job_id = await q.enqueue(b"rows")

        async def handle(job: echomq.Job) -> None:
            assert job.id == job_id
            done.set()

        worker = AsyncWorker(client, "traced-async", handle, tracer_provider=provider)
        task = asyncio.create_task(worker.run())
        assert await until_async(lambda: worker.counts["acked"] == 1)
        worker.stop()
        await task
        await client.aclose()

    asyncio.run(body())
    assert done.is_set()
    [request] = named(exporter, "POST /import")
    [span] = named(exporter, "process traced-async")
    assert span.context is not None and request.context is not None
    assert span.context.trace_id == request.context.trace_id
    assert dict(span.attributes or {})["echomq.job.outcome"] == "acked"


def test_headers_that_are_not_text_reach_the_handler_replaced(server: Server) -> None:
    server.cmd("EMQ.ENQUEUE", "raw-headers", "JOB00000000001", b"x", "HEADERS", 1, "k", b"a\xffb")
    q = echomq.Queue(server.client(), "raw-headers")
    row = q.job("JOB00000000001")
    assert row is not None and row["headers"] == {"k": "a\ufffdb"}
    seen: List[Any] = []
    worker = echomq.Worker(server.client(), "raw-headers", lambda job: seen.append(job.headers))
    acked_once(worker)
    assert seen == [{"k": "a\ufffdb"}]
