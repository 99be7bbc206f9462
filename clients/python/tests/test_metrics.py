"""A queue's metrics against a real server (``Queue.metrics``, ``AsyncQueue.metrics``,
docs/observability.md): a worker's jobs, each handled for at least 0.3 s, are counted as
enqueued, claimed and acked, and their run times all lie past the 250 ms bucket; a pending job
shows its age, and nothing pending none. No timed assertions: each wait is for a condition."""

from __future__ import annotations

import threading
import time
from typing import Any

import echomq
from echomq.aio import AsyncQueue
from conftest import Server, joined, until
from test_cancel import run_async, start


def test_a_worker_s_jobs_are_counted_and_their_run_times_lie_past_their_sleep(
    server: Server,
) -> None:
    q = echomq.Queue(server.client(), "metered")
    for n in range(3):
        q.enqueue(f"job {n}".encode())
    assert q.metrics().oldest_pending_ms is not None
    done = threading.Semaphore(0)

    def handle(job: echomq.Job) -> None:
        time.sleep(0.3)
        done.release()

    worker = echomq.Worker(server.client(), "metered", handle, concurrency=3)
    t = start(worker)
    try:
        assert all(done.acquire(timeout=30) for _ in range(3))
        assert until(lambda: q.metrics().events.get("acked") == 3, 30)
    finally:
        worker.stop()
        assert joined(t)
    m = q.metrics()
    assert (m.events["enqueued"], m.events["claimed"], m.events["acked"]) == (3, 3, 3)
    acked = m.run["acked"]
    assert acked.count == 3
    # None ran under its 0.3 s of sleep: every one is past the 250 ms bucket.
    assert dict(acked.buckets)[250] == 0, acked
    assert acked.sum_ms >= 900
    bound = acked.quantile_bound(0.5)
    assert bound is not None and bound > 250, acked
    assert m.wait.count == 3 and m.end_to_end.count == 3
    assert m.oldest_pending_ms is None


def test_the_async_queue_reads_the_same_metrics(server: Server) -> None:
    echomq.Queue(server.client(), "metered-async").enqueue(b"x")

    async def body(q: AsyncQueue, client: Any) -> None:
        m = await q.metrics()
        assert m.events["enqueued"] == 1
        assert m.run["acked"].count == 0
        assert m.oldest_pending_ms is not None and m.oldest_pending_ms >= 0

    run_async(server, "metered-async", body)
