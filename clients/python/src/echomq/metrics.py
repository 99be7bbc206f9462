"""A queue's metrics as the server keeps them (``EMQ.METRICS``, docs/observability.md): a count
of each event, the wait, run and end-to-end latency histograms, and the age of the first pending
job. No I/O: ``Queue.metrics`` and ``AsyncQueue.metrics`` send what ``read`` asks, each
partition's for a partitioned queue, added up here (``total``)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from functools import reduce
from typing import Any, Dict, List, Optional, Sequence, Tuple

from .commands import pairs, text
from .routing import Course, Router, each


@dataclass(frozen=True)
class Histogram:
    """Durations counted in fixed buckets: ``buckets`` holds ``(le, count)``, how many took at
    most ``le`` ms (``None``: any time), cumulative, ascending."""

    count: int = 0
    sum_ms: int = 0
    buckets: List[Tuple[Optional[int], int]] = field(default_factory=list)

    def quantile_bound(self, q: float) -> Optional[int]:
        """The least bucket bound (ms) holding at least the fraction ``q`` of the durations: an
        upper bound of the ``q`` quantile; ``None`` past the last bound or with none counted."""
        if self.count == 0:
            return None
        want = math.ceil(q * self.count)
        return next((le for le, n in self.buckets if n >= want), None)


@dataclass(frozen=True)
class Metrics:
    """``EMQ.METRICS``' reply: ``events`` by the event stream's names (``enqueued``,
    ``claimed``, ``acked``, ...), ``wait`` (ready to claimed), ``run`` by how the attempt ended
    (``acked``, ``failed``, ``dead``, ``timed-out``), ``end_to_end`` (id minted to acked) and
    ``oldest_pending_ms`` (``None``: nothing pending); ``enabled``: whether the server keeps
    metrics now (``emq.metrics``; while it does not, the counts stand still)."""

    events: Dict[str, int] = field(default_factory=dict)
    wait: Histogram = field(default_factory=Histogram)
    run: Dict[str, Histogram] = field(default_factory=dict)
    end_to_end: Histogram = field(default_factory=Histogram)
    oldest_pending_ms: Optional[int] = None
    enabled: bool = True


def command(queue: str) -> List[Any]:
    return ["EMQ.METRICS", queue]


def histogram(reply: Any) -> Histogram:
    fields = pairs(reply)
    buckets = [
        (le if isinstance(le, int) else None, int(n))
        for le, n in (tuple(b) for b in fields.get("buckets") or [])
    ]
    return Histogram(int(fields.get("count") or 0), int(fields.get("sum-ms") or 0), buckets)


def parse(reply: Any) -> Metrics:
    fields = pairs(reply)
    oldest = fields.get("oldest-pending-ms")
    return Metrics(
        events={str(text(k)): int(v) for k, v in pairs(fields.get("events") or []).items()},
        wait=histogram(fields.get("wait") or []),
        run={str(text(k)): histogram(v) for k, v in pairs(fields.get("run") or []).items()},
        end_to_end=histogram(fields.get("end-to-end") or []),
        oldest_pending_ms=None if oldest is None else int(oldest),
        enabled=int(fields.get("enabled", 1)) == 1,
    )


def plus(a: Histogram, b: Histogram) -> Histogram:
    """Two histograms added up bucket by bucket (a partitioned queue's, over its partitions);
    where their bucket bounds differ, the one with more counted is kept (the console's
    ``waits::plus``)."""
    if [le for le, _ in a.buckets] != [le for le, _ in b.buckets]:
        return a if a.count >= b.count else b
    return Histogram(
        a.count + b.count, a.sum_ms + b.sum_ms,
        [(le, n + m) for (le, n), (_, m) in zip(a.buckets, b.buckets)],
    )


def total(each: Sequence[Metrics]) -> Metrics:
    """A partitioned queue's metrics from its partitions' (`each`, in order; one queue's as
    they are): the events counted summed; the histograms summed bucket by bucket, where a
    partition's bucket bounds differ the one with more counted kept (``plus``); the oldest
    pending age the greatest of any partition's (``None``: nothing pending in any); and
    ``enabled`` only when every partition's is."""
    if len(each) <= 1:
        return each[0] if each else Metrics()
    events: Dict[str, int] = {}
    run: Dict[str, Histogram] = {}
    for one in each:
        for key, n in one.events.items():
            events[key] = events.get(key, 0) + n
        for key, h in one.run.items():
            run[key] = plus(run[key], h) if key in run else h
    oldest = [one.oldest_pending_ms for one in each if one.oldest_pending_ms is not None]
    return Metrics(
        events=events,
        wait=reduce(plus, (one.wait for one in each)),
        run=run,
        end_to_end=reduce(plus, (one.end_to_end for one in each)),
        oldest_pending_ms=max(oldest) if oldest else None,
        enabled=all(one.enabled for one in each),
    )


def read(router: Router) -> Course[Metrics]:
    """The queue's metrics: each partition's of a partitioned queue, added up (``total``), over
    the width known (read once, when not known yet: ``routing.each``)."""
    return total([parse(reply) for reply in (yield from each(router, command))])
