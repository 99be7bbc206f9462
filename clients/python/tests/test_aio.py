"""The asyncio queue and worker against a real server."""

from __future__ import annotations

import asyncio
import time
from typing import Any, List, Type

import pytest
import redis.asyncio
import redis.exceptions

import echomq
from echomq.aio import AsyncQueue, AsyncWorker
from conftest import Server


def test_an_async_worker_runs_every_job_and_fails_with_the_traceback(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "async", serializer=echomq.Json())
        await q.enqueue_many({"n": n} for n in range(100))
        broken = await q.enqueue({"n": -1})
        seen: List[int] = []

        async def handle(job: echomq.Job) -> None:
            if job.payload["n"] < 0:
                raise RuntimeError("negative")
            await asyncio.sleep(0.001)
            seen.append(job.payload["n"])

        worker = AsyncWorker(
            client, "async", handle, concurrency=16, lease=5, serializer=echomq.Json()
        )
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 10
        while worker.counts["acked"] + worker.counts["failed"] < 101:
            assert time.monotonic() < deadline, worker.counts
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 5)
        assert sorted(seen) == list(range(100))
        job = await q.job(broken)
        assert job is not None and "RuntimeError: negative" in job["error"]
        stats = await q.stats()
        # The failed job waits for its retry (or has come due for it); nothing is active.
        assert (stats["pending"] or 0) + (stats["scheduled"] or 0) == 1
        assert stats["active"] == 0
        await client.aclose()

    asyncio.run(main())


def test_an_async_handler_outliving_its_lease_keeps_it(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "async-long")
        job_id = await q.enqueue(b"slow")

        renewals: List[echomq.WorkerEvent] = []

        async def handle(job: echomq.Job) -> bytes:
            # Outlives its lease three renewals over.
            deadline = time.monotonic() + 20
            while len(renewals) < 3:
                assert time.monotonic() < deadline, "no renewal while the handler ran"
                await asyncio.sleep(0.02)
            return b"ok"

        worker = AsyncWorker(
            client, "async-long", handle, lease=0.3,
            on_event=lambda e: renewals.append(e) if e.kind == "renew" else None,
        )
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 10
        while worker.counts["acked"] < 1:
            assert time.monotonic() < deadline, worker.counts
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 5)
        job = await q.job(job_id)
        assert job is not None and job["attempts"] == 1 and job["result"] == "ok"
        assert all(e.outcome == "ok" for e in renewals), renewals
        await client.aclose()

    asyncio.run(main())


def test_an_async_job_whose_lease_ran_out_before_its_handler_started_is_not_run(
    server: Server,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "async-stalled")
        job_id = await q.enqueue(b"x")
        runs: List[int] = []
        events: List[echomq.WorkerEvent] = []

        def on_event(e: echomq.WorkerEvent) -> None:
            events.append(e)
            # The worker stalls between its first claim and the handler (as a frozen process
            # does): the lease runs out meanwhile and the job goes back to the queue.
            if e.kind == "claim" and e.token == 1:
                time.sleep(0.6)

        async def handle(job: echomq.Job) -> None:
            runs.append(job.attempt)

        worker = AsyncWorker(client, "async-stalled", handle, lease=0.3, on_event=on_event)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 10
        while worker.counts["acked"] < 1:
            assert time.monotonic() < deadline, worker.counts
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 5)
        # The first attempt's handler never ran; the second's did, and was acked.
        assert runs == [2]
        assert worker.counts["lost"] == 1
        kinds = [(e.kind, e.token) for e in events if e.id == job_id and e.kind != "renew"]
        assert kinds == [
            ("claim", 1), ("claim", 2), ("handler_start", 2), ("handler_end", 2), ("settle", 2)
        ], kinds
        await client.aclose()

    asyncio.run(main())


def test_an_async_payload_that_does_not_decode_fails_its_job_and_the_worker_goes_on() -> None:
    server = Server(["--emq.max-attempts", "2", "--emq.backoff-base-ms", "10"])

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        raw = AsyncQueue(client, "async-undecodable")  # enqueued raw, past the Json serializer
        first = await raw.enqueue_many([b'{"n": 1}', b'{"n": 2}'])
        bad = await raw.enqueue(b"{not json")
        last = await raw.enqueue(b'{"n": 3}')
        seen: List[int] = []

        async def handle(job: echomq.Job) -> None:
            seen.append(job.payload["n"])

        worker = AsyncWorker(client, "async-undecodable", handle, serializer=echomq.Json())
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 10
        while ((await raw.job(bad)) or {}).get("state") != "dead" or worker.counts["acked"] < 3:
            assert time.monotonic() < deadline and not task.done(), (task, worker.counts)
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert sorted(seen) == [1, 2, 3]
        dead = await raw.job(bad)
        assert dead is not None and dead["attempts"] == 2 and "JSONDecodeError" in dead["error"]
        assert worker.counts["failed"] == 2
        for job_id in [*first, last]:
            job = await raw.job(job_id)
            assert job is not None and (job["state"], job["attempts"]) == ("done", 1), job
        await client.aclose()

    try:
        asyncio.run(main())
    finally:
        server.stop()


class Halt(BaseException):
    """A BaseException that is not an Exception, as a handler might raise."""


@pytest.mark.parametrize("fatal", [SystemExit, Halt])
def test_an_async_handler_raising_a_base_exception_fails_its_job_and_stops_the_worker(
    server: Server, fatal: Type[BaseException]
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await client.config_set("emq.backoff-base-ms", 60_000)
        q = AsyncQueue(client, "async-fatal")
        other, stopper, never = await q.enqueue_many([b"other", b"stop", b"never"])

        async def handle(job: echomq.Job) -> None:
            if job.payload == b"stop":
                raise fatal("out")
            # Returns once the other job's failure is in: the worker stopped claiming by then.
            deadline = time.monotonic() + 10
            while ((await q.job(stopper)) or {}).get("state") != "scheduled":
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)

        worker = AsyncWorker(client, "async-fatal", handle, concurrency=2)
        # Awaited here, not as a task of its own: a task ending in SystemExit or
        # KeyboardInterrupt takes the loop down with it. The timer bounds a worker that never
        # stops by itself.
        timer = asyncio.get_running_loop().call_later(20, worker.stop)
        with pytest.raises(fatal):
            await worker.run()
        timer.cancel()
        failed = await q.job(stopper)
        assert failed is not None and failed["state"] == "scheduled" and failed["attempts"] == 1
        assert f"{fatal.__name__}: out" in failed["error"]
        assert ((await q.job(other)) or {}).get("state") == "done", "the other handler finished"
        assert ((await q.job(never)) or {}).get("state") == "pending", "nothing claimed after"
        assert (worker.counts["acked"], worker.counts["failed"]) == (1, 1)
        await client.aclose()

    asyncio.run(main())


def test_an_async_claim_refused_for_good_still_sends_the_running_jobs_outcomes(
    server: Server,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "async-revoked")
        first, second = await q.enqueue_many([b"revoke", b"wait"])

        async def handle(job: echomq.Job) -> None:
            if job.payload == b"revoke":
                # The next claim is refused for good (NOPERM); settling stays allowed.
                admin: Any = client
                await admin.execute_command("ACL", "SETUSER", "default", "-emq.claim")
                return
            # Still running when the claim loop fails: returns once the worker stopped claiming.
            deadline = time.monotonic() + 20
            while not worker._stopping.is_set():
                assert time.monotonic() < deadline
                await asyncio.sleep(0.02)

        worker = AsyncWorker(client, "async-revoked", handle, concurrency=2)
        with pytest.raises(redis.exceptions.NoPermissionError):
            await asyncio.wait_for(worker.run(), 30)
        assert worker.counts["acked"] == 2
        assert [((await q.job(i)) or {}).get("state") for i in (first, second)] == ["done", "done"]
        await client.aclose()

    asyncio.run(main())


def test_an_async_queue_operates_its_queue_as_queue_does(server: Server) -> None:
    # One attempt a job: a failed one is dead at once.
    server.cmd("CONFIG", "SET", "emq.max-attempts", "1")

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "async-ops", serializer=echomq.Json())
        first, second = await q.enqueue_many([{"n": 1}, {"n": 2}])
        for job_id in (first, second):
            server.cmd("EMQ.CLAIM", "async-ops")
            server.cmd("EMQ.FAIL", "async-ops", job_id, 1, "ERROR", f"broken {job_id}")
        cursor, dead = await q.jobs("dead", payloads=True)
        assert cursor == "0", "one page holds both"
        assert [(d["id"], d["attempts"], d["payload"], d["error"]) for d in dead] == [
            (first, 1, '{"n":1}', f"broken {first}"),
            (second, 1, '{"n":2}', f"broken {second}"),
        ]
        assert all(isinstance(d["died-at"], int) for d in dead)
        assert await q.requeue_dead(count=1) == 1
        _, pending = await q.jobs("pending")
        assert [(p["id"], sorted(p)) for p in pending] == [(first, ["attempts", "id"])]
        assert await q.purge("dead") == 1
        assert await q.purge("pending", count=10) == 1
        stats = await q.stats()
        assert (stats["pending"], stats["dead"]) == (0, 0)
        assert await q.cron("tick", {"tick": 1}, every=60, priority=2) > time.time() * 1000
        assert [(c["name"], c["spec"], c["every"], c["priority"], c["payload"]) for c in await q.crons()] == [
            ("tick", None, 60000, 2, '{"tick":1}')
        ]
        assert await q.uncron("tick") and not await q.uncron("tick")
        assert await q.crons() == []
        await client.aclose()

    asyncio.run(main())


def test_an_async_queue_reads_its_event_stream(server: Server) -> None:
    async def main() -> List[echomq.QueueEvent]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "async-ev")
        assert await q.enable_events()
        job_id = await q.enqueue(b"x")
        seen: List[echomq.QueueEvent] = []
        async for event in q.events(start="0", block=0.05):
            seen.append(event)
            break
        assert await q.disable_events()
        await client.aclose()
        assert [(e.event, e.id) for e in seen] == [("enqueued", job_id)]
        return seen

    assert len(asyncio.run(main())) == 1
