"""Workers against the mistakes of the code around them: a result or progress larger than the
server takes, a ``Retry`` out of bounds, a batch with a bad job at its end, a cancellation from
within an async handler, a handler abandoned while the worker drains, and the process's own
signal handlers. Each costs no other job its run, and leaves the process as it found it."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
import threading
from typing import Any, Dict, List

import pytest
import redis.asyncio

import echomq
from conftest import Server, joined, run_until_acked, until
from test_worker import start_catching
from echomq.aio import AsyncQueue, AsyncWorker

BIG = b"x" * 2000


@pytest.fixture
def small() -> Any:
    """A server that takes payloads, results, progress and error texts of 1,000 bytes at most."""
    s = Server(["--emq.max-payload-bytes", "1000"])
    try:
        yield s
    finally:
        s.stop()


def test_a_result_larger_than_the_server_takes_fails_its_own_job_and_its_batch_is_acked(
    small: Server,
) -> None:
    q = echomq.Queue(small.client(), "bigresult")
    ids = q.enqueue_many(b"%d" % n for n in range(5))
    runs: Dict[str, int] = {}
    lock = threading.Lock()
    started = threading.Barrier(5)

    def handle(job: echomq.Job) -> bytes:
        with lock:
            runs[job.id] = runs.get(job.id, 0) + 1
        if job.attempt == 1:
            started.wait(10)  # the five end together: their acks in one EMQ.MACK
        return BIG if job.payload == b"2" and job.attempt == 1 else b"ok"

    worker = echomq.Worker(small.client(), "bigresult", handle, concurrency=5)
    thread, raised = start_catching(worker)
    assert until(lambda: worker.counts["acked"] == 5, 30), worker.counts
    worker.stop()
    assert joined(thread) and not raised
    assert worker.counts["failed"] == 1
    assert [runs[i] for i in ids] == [1, 1, 2, 1, 1], "the others ran once"
    job = q.job(ids[2])
    assert job is not None and job["attempts"] == 2


def test_an_async_result_larger_than_the_server_takes_fails_its_job(small: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=small.port)
        q = AsyncQueue(client, "abigresult")
        job_id = await q.enqueue(b"r")

        async def handle(job: echomq.Job) -> bytes:
            return BIG if job.attempt == 1 else b"ok"

        worker = AsyncWorker(client, "abigresult", handle)
        await run_until_acked(worker, 1)
        assert worker.counts["acked"] == 1 and worker.counts["failed"] == 1, worker.counts
        job = await q.job(job_id)
        assert job is not None and job["attempts"] == 2
        await client.aclose()

    asyncio.run(main())


def test_progress_larger_than_the_server_takes_is_dropped_and_the_lease_kept(
    small: Server,
) -> None:
    q = echomq.Queue(small.client(), "bigprogress")
    q.enqueue(b"p")
    runs: List[str] = []

    def handle(job: echomq.Job) -> None:
        runs.append(job.id)
        # Past the lease, only renewals keep it; the progress, too large each time, keeps
        # changing meanwhile.
        for n in range(30):
            job.progress = BIG + b"%d" % n
            threading.Event().wait(0.05)

    worker = echomq.Worker(small.client(), "bigprogress", handle, concurrency=2, lease=0.6)
    thread, raised = start_catching(worker)
    assert until(lambda: worker.counts["acked"] == 1, 30), worker.counts
    worker.stop()
    assert joined(thread) and not raised
    assert len(runs) == 1, "run once: its lease never lapsed"
    assert worker.counts["lost"] == 0


def test_a_retry_out_of_bounds_is_refused_where_it_is_made() -> None:
    for after in (float("nan"), -1, 4e7, float("inf")):
        with pytest.raises(ValueError):
            echomq.Retry(after)
    assert echomq.Retry(0).after == 0
    assert echomq.Retry(365 * 86_400).after == 365 * 86_400


def test_enqueue_many_checks_every_job_before_it_sends_any(server: Server) -> None:
    q = echomq.Queue(server.client(), "manychecked")
    good = [b"%d" % n for n in range(2400)]
    with pytest.raises(ValueError):
        q.enqueue_many([*good, echomq.BulkJob(b"p", priority=2_000_000)])
    wide = {f"k{n}": "x" * 600 for n in range(30)}
    refused: List[Dict[str, str]] = [
        {f"h{n}": "v" for n in range(33)}, {"a key": "v"}, {"k": "a\nb"}, {"k": "x" * 8193}, wide,
    ]
    for headers in refused:
        with pytest.raises(ValueError):
            q.enqueue_many([*good, echomq.BulkJob(b"h", headers=headers)])
    assert q.stats()["pending"] == 0, "nothing written"


def test_a_cancellation_from_within_an_async_handler_fails_its_job(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "selfcancel")
        job_id = await q.enqueue(b"c")

        async def handle(job: echomq.Job) -> None:
            if job.attempt == 1:
                inner = asyncio.create_task(asyncio.sleep(10))
                inner.cancel()
                await inner  # raises CancelledError: not the worker's cancellation

        worker = AsyncWorker(client, "selfcancel", handle)
        await run_until_acked(worker, 1)
        assert worker.counts["failed"] == 1 and worker.counts["acked"] == 1, worker.counts
        job = await q.job(job_id)
        assert job is not None and job["attempts"] == 2
        await client.aclose()

    asyncio.run(main())


def test_a_handler_abandoned_while_the_async_worker_drains_is_not_waited_for(
    server: Server,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "abandoned")
        job_id = await q.enqueue(b"a")
        started, release = asyncio.Event(), asyncio.Event()
        ended: List[bool] = []

        async def handle(job: echomq.Job) -> None:
            started.set()
            try:
                await asyncio.sleep(60)
            except asyncio.CancelledError:
                await asyncio.wait_for(release.wait(), 10)  # slow to give up
            finally:
                ended.append(True)

        # Its one slot taken, the claim loop waits for room, not on a claim: stop() ends it at
        # once, and the drain starts before the cancel below is heard.
        worker = AsyncWorker(
            client, "abandoned", handle, concurrency=1, lease=0.6, shutdown_timeout=20
        )
        task = asyncio.create_task(worker.run())
        await asyncio.wait_for(started.wait(), 10)
        worker.stop()
        await asyncio.sleep(0)  # draining: waits for the running handler
        await q.cancel(job_id)  # the next renewal hears it; the handler is abandoned
        await asyncio.wait_for(task, 15)
        assert ended == [], "run returned while the abandoned handler still ran"
        assert worker.counts["cancelled"] == 1
        release.set()
        await client.aclose()

    asyncio.run(main())


def test_async_workers_stop_together_on_one_signal_and_put_back_the_handlers(
    server: Server,
) -> None:
    def mine(signum: int, frame: Any) -> None:
        raise AssertionError("the app's handler ran while the workers held the signal")

    before = signal.signal(signal.SIGTERM, mine)
    try:
        async def main() -> None:
            client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)

            async def handle(job: echomq.Job) -> None:
                return None

            workers = {}
            for name in ("sig-a", "sig-b", "sig-c"):
                await AsyncQueue(client, name).enqueue(b"s")
                workers[name] = AsyncWorker(client, name, handle, block=0.1)
            tasks = {n: asyncio.create_task(w.run()) for n, w in workers.items()}
            # Each has run a job, so each has set its handlers first.
            while sum(w.counts["acked"] for w in workers.values()) < 3:
                await asyncio.sleep(0.02)
            # The first to start ends first: the others still hold the signal.
            workers["sig-a"].stop()
            await asyncio.wait_for(tasks["sig-a"], 10)
            os.kill(os.getpid(), signal.SIGTERM)
            await asyncio.wait_for(asyncio.gather(tasks["sig-b"], tasks["sig-c"]), 10)
            await client.aclose()

        asyncio.run(main())
        assert signal.getsignal(signal.SIGTERM) is mine
    finally:
        signal.signal(signal.SIGTERM, before)


def test_a_concurrency_over_a_claims_thousand_claims_a_thousand_at_most(server: Server) -> None:
    q = echomq.Queue(server.client(), "wide")
    job_id = q.enqueue(b"w")
    worker = echomq.Worker(server.client(), "wide", lambda job: None, concurrency=2000)
    assert worker.batch == 1000
    thread, raised = start_catching(worker)
    assert until(lambda: worker.counts["acked"] == 1, 30), (worker.counts, raised)
    worker.stop()
    assert joined(thread) and not raised
    job = q.job(job_id)
    assert job is None or job["state"] == "done"


@pytest.fixture
def quick_retries() -> Any:
    """A server whose failed attempts come back at once, three attempts a job."""
    s = Server(["--emq.backoff-base-ms", "10", "--emq.max-attempts", "3"])
    try:
        yield s
    finally:
        s.stop()


def test_an_attempt_claimed_again_while_the_last_still_runs_takes_a_slot_of_its_own(
    quick_retries: Server,
) -> None:
    # Each attempt may run 0.3 s; its handler waits to be told it ended (timed out, or its
    # lease lost once a later attempt timed out too) at the worker's renewal round (every 3 s).
    # The retry comes back at once and the same worker claims it while the attempt before
    # still runs: each takes a slot of its own (at most `concurrency` at once), and each is
    # renewed, so told.
    for asynchronous in (False, True):
        name = f"again-{int(asynchronous)}"
        echomq.Queue(quick_retries.client(), name).enqueue(b"x", timeout=0.3)
        running: List[echomq.Job] = []
        most, told = [0], []
        lock = threading.Lock()

        def heard(job: echomq.Job) -> bool:
            return job.timed_out or job.lease_lost.is_set()

        # A slot is the worker's until it hears the attempt ended (a handler may run on a
        # moment past that, its slot given to the next job): the most attempts not heard of
        # that ran at once.
        def started(job: echomq.Job) -> None:
            with lock:
                running.append(job)
                most[0] = max(most[0], sum(not heard(j) for j in running))

        def ended(job: echomq.Job) -> None:
            with lock:
                running.remove(job)
                told.append(heard(job))

        if asynchronous:
            async def wait_told(job: echomq.Job) -> None:
                started(job)
                try:
                    for _ in range(3000):
                        if heard(job):
                            break
                        await asyncio.sleep(0.02)
                finally:
                    ended(job)

            async def run() -> AsyncWorker:
                client = redis.asyncio.Redis(host="127.0.0.1", port=quick_retries.port)
                worker = AsyncWorker(client, name, wait_told, concurrency=2, lease=9, block=0.1)
                task = asyncio.create_task(worker.run())
                for _ in range(600):
                    if len(told) >= 3:
                        break
                    await asyncio.sleep(0.05)
                worker.stop()
                await asyncio.wait_for(task, 30)
                await client.aclose()
                return worker

            asyncio.run(run())
        else:
            def poll_told(job: echomq.Job) -> None:
                started(job)
                try:
                    until(lambda: heard(job), timeout=60)
                finally:
                    ended(job)

            worker = echomq.Worker(
                quick_retries.client(), name, poll_told, concurrency=2, lease=9, block=0.1
            )
            t = threading.Thread(target=worker.run, daemon=True)
            t.start()
            assert until(lambda: len(told) >= 3, timeout=30), told
            worker.stop()
            assert joined(t)
        assert told == [True, True, True], (asynchronous, told)
        assert most[0] <= 2, (asynchronous, most[0])
        assert echomq.Queue(quick_retries.client(), name).stats()["dead"] == 1


@pytest.mark.skipif(sys.version_info < (3, 11), reason="Task.cancelling() is Python 3.11's")
def test_an_event_loop_that_ends_with_the_async_worker_running_leaves_its_job_to_its_lease(
    server: Server,
) -> None:
    # The program's main coroutine returns with the worker still running: asyncio.run cancels
    # every task, the handler's with them. That is no failure of the job's: nothing is sent.
    started: List[str] = []

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await AsyncQueue(client, "loopend").enqueue(b"l")

        async def handle(job: echomq.Job) -> None:
            started.append(job.id)
            await asyncio.sleep(60)

        asyncio.get_running_loop().create_task(AsyncWorker(client, "loopend", handle).run())
        for _ in range(600):
            if started:
                break
            await asyncio.sleep(0.05)

    asyncio.run(main())
    job = echomq.Queue(server.client(), "loopend").job(started[0])
    assert job is not None and (job["state"], job["attempts"]) == ("active", 1), job
    assert "error" not in job, job
