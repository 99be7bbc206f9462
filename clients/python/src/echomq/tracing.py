"""Traces that follow a job (docs/observability.md). With ``opentelemetry-api`` installed (the
``otel`` extra), an enqueue runs in a producer span whose context goes into the job's headers
(W3C ``traceparent``, ``tracestate``, ``baggage``), and a worker runs each attempt in a
consumer span of that trace, linked to the producer's, with OpenTelemetry's messaging
attributes and the attempt's outcome. Without it, or with no tracer provider set, no header is
added (but for ``baggage``
the caller's context holds)."""

from __future__ import annotations

from contextlib import contextmanager
from typing import Any, Dict, Iterator, Mapping, Optional

try:
    from opentelemetry import context as otel_context
    from opentelemetry import propagate, trace
    from opentelemetry.trace import Link, Span, SpanKind, Status, StatusCode

    ENABLED = True
except Exception:  # the extra is not installed, or its propagators are misconfigured
    ENABLED = False

#: ``messaging.system``.
SYSTEM = "echomq"


def headers_of(given: Optional[Mapping[str, str]]) -> Dict[str, str]:
    """A job's headers as ``enqueue`` takes them, each key and value a ``str``."""
    out = dict(given or {})
    for key, value in out.items():
        if not isinstance(key, str) or not isinstance(value, str):
            raise TypeError(f"a header is a str key and a str value, not {key!r}: {value!r}")
    return out


def _attributes(queue: str, operation: str, job_id: Optional[str]) -> Dict[str, Any]:
    attributes: Dict[str, Any] = {
        "messaging.system": SYSTEM,
        "messaging.destination.name": queue,
        "messaging.operation.type": operation,
        "messaging.operation.name": operation,
    }
    if job_id is not None:
        attributes["messaging.message.id"] = job_id
    return attributes


class Sending:
    """An enqueue's trace: the headers its jobs carry (the caller's, and the producer span's
    context where one is recorded) and the span, to name the job once its id is known."""

    def __init__(self, headers: Dict[str, str], span: Any = None) -> None:
        self.headers = headers
        self._span = span

    def sent(self, job_id: str) -> None:
        """Names the job the span sent (``messaging.message.id``)."""
        if self._span is not None:
            self._span.set_attribute("messaging.message.id", job_id)


def _tracer(provider: Any) -> Any:
    """The client's tracer, from `provider` (``None``: the global tracer provider)."""
    return trace.get_tracer("echomq", tracer_provider=provider)


@contextmanager
def sending(queue: str, given: Optional[Mapping[str, str]], provider: Any) -> Iterator[Sending]:
    """An enqueue to `queue`: a producer span (``send <queue>``, from `provider`'s tracer)
    around it, whose context the jobs' headers carry beside the caller's `given` ones (a
    ``traceparent`` given wins)."""
    headers = headers_of(given)
    if not ENABLED:
        yield Sending(headers)
        return
    tracer = _tracer(provider)
    with tracer.start_as_current_span(
        f"send {queue}", kind=SpanKind.PRODUCER, attributes=_attributes(queue, "send", None)
    ) as span:
        carried: Dict[str, str] = {}
        propagate.inject(carried)
        yield Sending({**carried, **headers}, span)


@contextmanager
def processing(
    queue: str, job_id: str, attempt: int, headers: Mapping[str, str], provider: Any
) -> Iterator[Any]:
    """One attempt of a job: a consumer span (``process <queue>``, from `provider`'s tracer)
    in the trace its headers carry, linked to the producer's span; ``outcome`` records how the
    attempt ended."""
    if not ENABLED:
        yield None
        return
    parent = propagate.extract(dict(headers))
    producer = trace.get_current_span(parent).get_span_context()
    links = [Link(producer)] if producer.is_valid else []
    attributes = _attributes(queue, "process", job_id)
    attributes["echomq.job.attempt"] = attempt
    tracer = _tracer(provider)
    # The producer's context made current (its baggage too), then the span in it.
    token = otel_context.attach(parent)
    try:
        with tracer.start_as_current_span(
            f"process {queue}", kind=SpanKind.CONSUMER, links=links, attributes=attributes,
            record_exception=False, set_status_on_exception=False,
        ) as span:
            yield span
    finally:
        otel_context.detach(token)


def outcome(span: Any, counted: str, error: Optional[BaseException]) -> None:
    """Records the attempt's end on its span (``processing``): ``echomq.job.outcome`` (acked,
    failed, retried), and for a failure the exception and an error status."""
    if span is None or not ENABLED:
        return
    recorded: Span = span
    recorded.set_attribute("echomq.job.outcome", counted)
    if error is not None:
        recorded.record_exception(error)
        recorded.set_status(Status(StatusCode.ERROR, type(error).__name__))
