"""The workers' observability hook against a real server: each job's claim, handler start and
end and settle, in that order, with its token; a renewal while a handler runs; a lost lease's
refused settle; a hook that raises, which the worker outlives."""

from __future__ import annotations

import asyncio
import dataclasses
import re
import threading
from typing import Any, Callable, List, Tuple

import pytest
import redis.asyncio

import echomq
from echomq.aio import AsyncWorker
from conftest import Server, joined, until


def recorder() -> Tuple[List[echomq.WorkerEvent], Callable[[echomq.WorkerEvent], None]]:
    events: List[echomq.WorkerEvent] = []
    lock = threading.Lock()

    def on_event(event: echomq.WorkerEvent) -> None:
        with lock:
            events.append(event)

    return events, on_event


def start(worker: echomq.Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


def lifecycle(events: List[echomq.WorkerEvent], job_id: str) -> List[echomq.WorkerEvent]:
    return [e for e in events if e.id == job_id and e.kind != "renew"]


def assert_lifecycle(job: List[echomq.WorkerEvent]) -> None:
    """claim, handler_start, handler_end, settle; one token; times that never go back."""
    assert [e.kind for e in job] == ["claim", "handler_start", "handler_end", "settle"], job
    assert len({e.token for e in job}) == 1, job
    for e in job:
        assert e.sent_ns <= e.answered_ns, e
    for before, after in zip(job, job[1:]):
        assert before.answered_ns <= after.sent_ns, (before, after)
    assert all((e.outcome, e.error) == ("ok", None) for e in job), job


def test_each_job_is_claimed_run_and_settled_in_order_and_renewed_while_it_runs(
    server: Server,
) -> None:
    q = echomq.Queue(server.client(), "observed")
    fast, other, slow = q.enqueue_many([b"fast", b"other", b"slow"])
    events, record = recorder()
    renewed = threading.Event()

    def on_event(event: echomq.WorkerEvent) -> None:
        record(event)
        if event.kind == "renew" and event.id == slow:
            renewed.set()

    def handle(job: echomq.Job) -> None:
        if job.payload == b"slow":
            # Runs past a renewal: returns once the worker renewed its lease.
            assert renewed.wait(20), "no renewal while the handler ran"

    worker = echomq.Worker(
        server.client(), "observed", handle, concurrency=3, lease=0.6, name="observer-1",
        on_event=on_event,
    )
    t = start(worker)
    assert until(lambda: worker.counts["acked"] == 3, timeout=30), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    for job_id in (fast, other, slow):
        job = lifecycle(events, job_id)
        assert_lifecycle(job)
        assert job[0].token == 1
        assert (job[-1].action, job[-1].replicated) == ("ack", None)
    assert {(e.worker, e.queue) for e in events} == {("observer-1", "observed")}
    assert all(e.action is None for e in events if e.kind != "settle")
    # The slow job's renewal came between its claim and its handler's end, with its token.
    kinds = [(e.kind, e.id) for e in events]
    renewal = kinds.index(("renew", slow))
    assert kinds.index(("claim", slow)) < renewal < kinds.index(("handler_end", slow))
    first = events[renewal]
    assert (first.outcome, first.token, first.error) == ("ok", 1, None)
    assert first.sent_ns <= first.answered_ns
    assert events[kinds.index(("claim", slow))].answered_ns <= first.sent_ns


def test_a_lost_lease_shows_a_refused_settle(server: Server) -> None:
    q = echomq.Queue(server.client(), "lost-observed")
    job_id = q.enqueue(b"x")
    admin: Any = server.client()
    events, on_event = recorder()

    def take_over(job_id: str) -> bool:
        # The lease ends now, and a claim by someone else takes the job (token 2).
        admin.zadd("emq:{lost-observed}:active", {job_id: 0}, xx=True)
        return bool(admin.execute_command("EMQ.CLAIM", "lost-observed") != [])

    def handle(job: echomq.Job) -> None:
        assert until(lambda: take_over(job.id))

    # A renewal every 30 s: none comes before the settle, which is what hears of the loss.
    worker = echomq.Worker(
        server.client(), "lost-observed", handle, concurrency=1, lease=30, renew_every=1,
        on_event=on_event,
    )
    t = start(worker)
    assert until(lambda: worker.counts["lost"] == 1), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    job = lifecycle(events, job_id)
    assert [e.kind for e in job] == ["claim", "handler_start", "handler_end", "settle"], job
    settle = job[-1]
    assert (settle.outcome, settle.action, settle.token) == ("refused", "ack", 1), settle
    assert settle.error is not None and settle.error.startswith("EMQLEASE"), settle
    assert worker.counts["acked"] == 0


def test_a_failed_job_s_events_carry_the_error_and_a_hook_that_raises_is_outlived(
    server: Server, caplog: pytest.LogCaptureFixture
) -> None:
    server.client().config_set("emq.backoff-base-ms", 60_000)
    q = echomq.Queue(server.client(), "hooked")
    ok, broken = q.enqueue_many([b"ok", b"broken"])
    events, record = recorder()

    def on_event(event: echomq.WorkerEvent) -> None:
        record(event)
        raise RuntimeError("the hook broke")

    def handle(job: echomq.Job) -> None:
        if job.payload == b"broken":
            raise ValueError("no stock")

    worker = echomq.Worker(server.client(), "hooked", handle, concurrency=2, on_event=on_event)
    t = start(worker)
    assert until(lambda: worker.counts["acked"] + worker.counts["failed"] == 2), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert (worker.counts["acked"], worker.counts["failed"]) == (1, 1)
    assert_lifecycle(lifecycle(events, ok))
    failed = lifecycle(events, broken)
    assert [e.kind for e in failed] == ["claim", "handler_start", "handler_end", "settle"]
    assert failed[2].error == "ValueError: no stock"
    assert (failed[3].action, failed[3].outcome) == ("fail", "ok")
    assert "the hook broke" in caplog.text


def test_an_event_is_immutable_and_worker_names_are_unique(server: Server) -> None:
    event = echomq.WorkerEvent("claim", "w", "q", "JOB", 1, 2, 3)
    with pytest.raises(dataclasses.FrozenInstanceError):
        setattr(event, "token", 2)
    names = {echomq.Worker(server.client(), "q", lambda job: None).name for _ in range(20)}
    assert len(names) == 20
    assert all(re.fullmatch(r".+:\d+:[0-9a-f]{6}", n) for n in names), names


def test_an_async_worker_s_events(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = echomq.Queue(server.client(), "async-observed")
        ids = q.enqueue_many([b"a", b"b", b"c"])
        events, on_event = recorder()

        async def handle(job: echomq.Job) -> None:
            await asyncio.sleep(0)

        worker = AsyncWorker(client, "async-observed", handle, name="aio-1", on_event=on_event)
        task = asyncio.create_task(worker.run())
        for _ in range(1000):
            if worker.counts["acked"] == 3:
                break
            await asyncio.sleep(0.02)
        assert worker.counts["acked"] == 3, worker.counts
        worker.stop()
        await asyncio.wait_for(task, 10)
        for job_id in ids:
            assert_lifecycle(lifecycle(events, job_id))
        assert {e.worker for e in events} == {"aio-1"}
        await client.aclose()

    asyncio.run(main())
