"""Cancelling a running job against a real server: ``EMQ.CANCEL`` of an active job ends its
attempt (dead, error ``cancelled``); the worker's next renewal or settle is refused with
``EMQCANCELLED`` (``EmqCancelled``). The threaded worker sets ``job.cancelled`` and stops
waiting for the handler; the asyncio worker cancels the handler's task. Either way nothing is
sent for the job, its slot runs the next job, and the job is dead once. No timed assertions:
each wait is for a condition, with a generous bound."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, List, Optional

import pytest
import redis
import redis.asyncio

import echomq
from echomq.aio import AsyncQueue, AsyncWorker
from echomq.errors import translate
from conftest import Server, joined, until

#: A long lease (a job is not run a lease after its claim was sent: ``Claiming.stale``), so a
#: loaded machine's stall does not lose a job, renewed in rounds of 0.3 s (``RENEW_EVERY``):
#: a cancel is heard of soon.
LEASE = 10.0
RENEW_EVERY = 0.03


def recorder() -> Any:
    events: List[echomq.WorkerEvent] = []
    lock = threading.Lock()

    def on_event(event: echomq.WorkerEvent) -> None:
        with lock:
            events.append(event)

    def of(job_id: str) -> List[echomq.WorkerEvent]:
        with lock:
            return [e for e in events if e.id == job_id]

    return of, on_event


def start(worker: echomq.Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


def row(server: Server, queue: str, job_id: str) -> Dict[str, Any]:
    found = echomq.Queue(server.client(), queue).job(job_id)
    assert found is not None, job_id
    return found


def dead_once(server: Server, queue: str, job_id: str, token: int = 1) -> None:
    """The job is dead, once, with the error ``cancelled`` and the ended attempt's token."""
    q = echomq.Queue(server.client(), queue)
    stats = q.stats()
    assert (stats["dead"], stats["active"], stats["pending"]) == (1, 0, 0), stats
    job = row(server, queue, job_id)
    assert (job["state"], job["error"], job["cancelled"]) == ("dead", "cancelled", str(token)), job


def kinds(events: List[echomq.WorkerEvent]) -> List[str]:
    return [e.kind for e in events if e.kind != "renew"]


def test_a_running_jobs_cancel_is_typed_and_the_job_can_be_requeued(server: Server) -> None:
    q = echomq.Queue(server.client(), "typed-cancel")
    job_id = q.enqueue(b"x")
    [[claimed, _, token]] = q.call("EMQ.CLAIM", "LEASE", 30_000)
    assert (claimed.decode(), token) == (job_id, 1)
    assert q.cancel(job_id) is True
    for command, *args in (("EMQ.RENEW", 30_000), ("EMQ.ACK",), ("EMQ.FAIL", "ERROR", "late")):
        with pytest.raises(echomq.EmqCancelled) as refused:
            q.call(command, job_id, token, *args)
        assert isinstance(refused.value, echomq.EmqError)
        assert isinstance(refused.value, redis.ResponseError)
        assert refused.value.code == "EMQCANCELLED"
        assert str(refused.value).startswith("EMQCANCELLED"), refused.value
    # In a batched ack, the job's place holds the refusal; the typed error is its translation.
    [place] = q.call("EMQ.MACK", job_id, token)
    assert type(translate(place)) is echomq.EmqCancelled, place
    # Another stale token is still EMQLEASE.
    with pytest.raises(echomq.EmqLeaseLost):
        q.call("EMQ.ACK", job_id, 7)
    dead_once(server, "typed-cancel", job_id)
    assert q.requeue(job_id)
    [[_, _, again]] = q.call("EMQ.CLAIM", "LEASE", 30_000)
    assert again == 2
    assert q.call("EMQ.ACK", job_id, again) == 1
    assert row(server, "typed-cancel", job_id)["state"] == "done"


def test_a_sync_handler_sees_job_cancelled_and_nothing_is_sent(server: Server) -> None:
    q = echomq.Queue(server.client(), "cancel-sync")
    job_id = q.enqueue(b"x")
    of, on_event = recorder()
    started = threading.Event()
    saw: List[bool] = []

    def handle(job: echomq.Job) -> bytes:
        if job.payload == b"next":
            return b"done"
        assert not job.cancelled
        started.set()
        # A cooperative handler: it checks the flag and stops early.
        saw.append(until(lambda: job.cancelled, timeout=30))
        return b"stopped early"

    worker = echomq.Worker(
        server.client(), "cancel-sync", handle, concurrency=1, lease=LEASE,
        renew_every=RENEW_EVERY, on_event=on_event,
    )
    t = start(worker)
    assert started.wait(30)
    assert q.cancel(job_id) is True
    assert until(lambda: "handler_end" in kinds(of(job_id)), timeout=30), of(job_id)
    assert saw == [True]
    # A next job runs, and is acked: the worker went on.
    other = q.enqueue(b"next")
    assert until(lambda: worker.counts["acked"] == 1, timeout=30), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert kinds(of(job_id)) == ["claim", "handler_start", "cancelled", "handler_end"], of(job_id)
    refused = [e for e in of(job_id) if e.kind == "renew" and e.outcome == "refused"]
    assert len(refused) == 1 and (refused[0].error or "").startswith("EMQCANCELLED"), refused
    assert (worker.counts["cancelled"], worker.counts["lost"], worker.counts["failed"]) == (1, 0, 0)
    assert "failed-to-settle" not in worker.counts
    assert row(server, "cancel-sync", other)["state"] == "done"
    stats = q.stats()
    assert stats["dead"] == 1, stats
    job = row(server, "cancel-sync", job_id)
    assert (job["state"], job["error"], job["cancelled"]) == ("dead", "cancelled", "1"), job


def test_a_sync_handler_that_ignores_the_cancel_does_not_hold_its_slot(server: Server) -> None:
    q = echomq.Queue(server.client(), "cancel-ignored")
    stuck = q.enqueue(b"stuck")
    of, on_event = recorder()
    started = threading.Event()
    release = threading.Event()
    order: List[str] = []

    def handle(job: echomq.Job) -> bytes:
        if job.payload == b"stuck":
            started.set()
            # Ignores job.cancelled: runs on until the test lets it go, then returns a result
            # that must never be sent.
            assert release.wait(60)
            order.append("stuck returned")
            return b"too late"
        order.append(job.payload.decode())
        return b"ok"

    # One slot: the next jobs run only once the worker stopped waiting for the stuck handler.
    worker = echomq.Worker(
        server.client(), "cancel-ignored", handle, concurrency=1, lease=LEASE,
        renew_every=RENEW_EVERY, on_event=on_event,
    )
    t = start(worker)
    assert started.wait(30)
    later = q.enqueue_many([b"next 1", b"next 2"])
    assert q.cancel(stuck) is True
    assert until(lambda: worker.counts["acked"] == 2, timeout=30), worker.counts
    assert order == ["next 1", "next 2"], order
    # Now the ignoring handler returns: nothing is sent for it.
    release.set()
    assert until(lambda: "handler_end" in kinds(of(stuck)), timeout=30), of(stuck)
    assert q.enqueue(b"last") and until(lambda: worker.counts["acked"] == 3, timeout=30)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert order == ["next 1", "next 2", "stuck returned", "last"], order
    assert kinds(of(stuck)) == ["claim", "handler_start", "cancelled", "handler_end"], of(stuck)
    assert not [e for e in of(stuck) if e.kind == "settle"]
    assert [e for e in of(stuck) if e.kind == "cancelled"][0].token == 1
    assert worker.counts == {
        "acked": 3, "failed": 0, "retried": 0, "lost": 0, "cancelled": 1, "timed_out": 0,
    }, worker.counts
    for job_id in later:
        assert row(server, "cancel-ignored", job_id)["state"] == "done"
    dead_once(server, "cancel-ignored", stuck)


@pytest.mark.parametrize("ending", ["return", "raise"])
def test_a_settle_refused_as_cancelled_is_not_retried_nor_lost(server: Server, ending: str) -> None:
    queue = f"cancel-settle-{ending}"
    q = echomq.Queue(server.client(), queue)
    job_id = q.enqueue(b"x")
    of, on_event = recorder()
    started = threading.Event()
    cancelled = threading.Event()

    def handle(job: echomq.Job) -> None:
        started.set()
        assert cancelled.wait(60)
        if ending == "raise":
            raise ValueError("failed after the cancel")

    # A renewal every 30 s: none comes before the settle, which is what hears of the cancel.
    worker = echomq.Worker(
        server.client(), queue, handle, concurrency=1, lease=30, renew_every=1, on_event=on_event
    )
    t = start(worker)
    assert started.wait(30)
    assert q.cancel(job_id) is True
    cancelled.set()
    assert until(lambda: worker.counts["cancelled"] == 1, timeout=30), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert kinds(of(job_id)) == [
        "claim", "handler_start", "handler_end", "settle", "cancelled"
    ], of(job_id)
    settle = [e for e in of(job_id) if e.kind == "settle"][0]
    assert settle.outcome == "refused" and (settle.error or "").startswith("EMQCANCELLED"), settle
    assert settle.action == ("ack" if ending == "return" else "fail")
    assert (worker.counts["lost"], worker.counts["acked"], worker.counts["failed"]) == (0, 0, 0)
    assert "failed-to-settle" not in worker.counts
    dead_once(server, queue, job_id)


def run_async(server: Server, queue: str, body: Callable[[AsyncQueue, Any], Any]) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            await body(AsyncQueue(client, queue), client)
        finally:
            await client.aclose()

    asyncio.run(main())


async def until_async(f: Callable[[], bool], timeout: float = 30.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f():
            return True
        await asyncio.sleep(0.02)
    return False


def test_an_async_handler_s_task_is_cancelled(server: Server) -> None:
    of, on_event = recorder()

    async def body(q: AsyncQueue, client: Any) -> None:
        job_id = await q.enqueue(b"x")
        started = asyncio.Event()
        stopped: List[str] = []
        flags: List[bool] = []

        async def handle(job: echomq.Job) -> None:
            if job.payload == b"next":
                return
            started.set()
            try:
                await asyncio.sleep(600)
            except asyncio.CancelledError:
                stopped.append(job.id)
                flags.append(job.cancelled)
                raise

        worker = AsyncWorker(client, "cancel-async", handle, concurrency=1, lease=LEASE,
                             renew_every=RENEW_EVERY, on_event=on_event)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 30)
        assert await q.cancel(job_id) is True
        assert await until_async(lambda: stopped == [job_id]), of(job_id)
        other = await q.enqueue(b"next")
        assert await until_async(lambda: worker.counts["acked"] == 1), worker.counts
        worker.stop()
        await asyncio.wait_for(task, 30)
        assert flags == [True]
        assert kinds(of(job_id)) == ["claim", "handler_start", "cancelled", "handler_end"]
        end = [e for e in of(job_id) if e.kind == "handler_end"][0]
        assert (end.error or "").startswith("CancelledError"), end
        assert (worker.counts["cancelled"], worker.counts["lost"]) == (1, 0), worker.counts
        assert (await q.job(other) or {})["state"] == "done"
        stats = await q.stats()
        assert stats["dead"] == 1, stats
        job = await q.job(job_id)
        assert job is not None and (job["error"], job["cancelled"]) == ("cancelled", "1"), job

    run_async(server, "cancel-async", body)


def test_an_async_handler_that_swallows_the_cancel_does_not_hold_its_slot(
    server: Server,
) -> None:
    of, on_event = recorder()

    async def body(q: AsyncQueue, client: Any) -> None:
        stuck = await q.enqueue(b"stuck")
        started = asyncio.Event()
        release = asyncio.Event()
        order: List[str] = []

        async def handle(job: echomq.Job) -> Optional[bytes]:
            if job.payload != b"stuck":
                order.append(job.payload.decode())
                return None
            started.set()
            while not release.is_set():
                try:
                    await release.wait()
                except asyncio.CancelledError:
                    order.append("swallowed")  # and runs on
            order.append("stuck returned")
            return b"too late"

        worker = AsyncWorker(client, "cancel-async-ignored", handle, concurrency=1, lease=LEASE,
                             renew_every=RENEW_EVERY, on_event=on_event)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 30)
        later = await q.enqueue_many([b"next 1", b"next 2"])
        assert await q.cancel(stuck) is True
        assert await until_async(lambda: worker.counts["acked"] == 2), worker.counts
        assert order == ["swallowed", "next 1", "next 2"], order
        release.set()
        assert await until_async(lambda: "handler_end" in kinds(of(stuck))), of(stuck)
        worker.stop()
        await asyncio.wait_for(task, 30)
        assert order == ["swallowed", "next 1", "next 2", "stuck returned"], order
        assert kinds(of(stuck)) == ["claim", "handler_start", "cancelled", "handler_end"]
        assert not [e for e in of(stuck) if e.kind == "settle"]
        assert worker.counts == {
            "acked": 2, "failed": 0, "retried": 0, "lost": 0, "cancelled": 1, "timed_out": 0,
        }, worker.counts
        for job_id in later:
            assert (await q.job(job_id) or {})["state"] == "done"
        stats = await q.stats()
        assert (stats["dead"], stats["active"], stats["pending"]) == (1, 0, 0), stats
        job = await q.job(stuck)
        assert job is not None and (job["error"], job["cancelled"]) == ("cancelled", "1"), job

    run_async(server, "cancel-async-ignored", body)


def test_an_async_settle_refused_as_cancelled_is_not_retried_nor_lost(server: Server) -> None:
    of, on_event = recorder()

    async def body(q: AsyncQueue, client: Any) -> None:
        job_id = await q.enqueue(b"x")
        started = asyncio.Event()
        cancelled = asyncio.Event()

        async def handle(job: echomq.Job) -> None:
            started.set()
            await cancelled.wait()

        worker = AsyncWorker(client, "cancel-async-settle", handle, concurrency=1, lease=30,
                             renew_every=1, on_event=on_event)
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 30)
        assert await q.cancel(job_id) is True
        cancelled.set()
        assert await until_async(lambda: worker.counts["cancelled"] == 1), worker.counts
        worker.stop()
        await asyncio.wait_for(task, 30)
        assert kinds(of(job_id)) == ["claim", "handler_start", "handler_end", "settle", "cancelled"]
        settle = [e for e in of(job_id) if e.kind == "settle"]
        assert len(settle) == 1 and (settle[0].error or "").startswith("EMQCANCELLED"), settle
        assert (worker.counts["lost"], worker.counts["acked"]) == (0, 0), worker.counts
        assert "failed-to-settle" not in worker.counts
        stats = await q.stats()
        assert stats["dead"] == 1, stats

    run_async(server, "cancel-async-settle", body)


def test_cancel_unstarted_leaves_a_running_job_and_removes_a_waiting_one(server: Server) -> None:
    q = echomq.Queue(server.client(), "unstarted-cancel")
    running, waiting = q.enqueue(b"r"), q.enqueue(b"w")
    [[claimed, _, token]] = q.call("EMQ.CLAIM", "LEASE", 30_000)
    assert claimed.decode() == running
    assert q.cancel_unstarted(running) == 0
    assert row(server, "unstarted-cancel", running)["state"] == "active"
    assert q.cancel_unstarted(waiting) == 1
    assert q.job(waiting) is None
    assert q.call("EMQ.ACK", running, token) == 1

    async def awaited(aq: AsyncQueue, client: Any) -> None:
        later = await aq.enqueue(b"l")
        assert await aq.cancel_unstarted(later) == 1
        assert await aq.job(later) is None

    run_async(server, "unstarted-cancel", awaited)
