"""A queue's metrics as the server keeps them (``EMQ.METRICS``, docs/observability.md): a count
of each event, the wait, run and end-to-end latency histograms, and the age of the first pending
job. No I/O: ``Queue.metrics`` and ``AsyncQueue.metrics`` send the command and parse here."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

from .commands import pairs, text


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
