"""The asyncio queue and worker against a real server."""

from __future__ import annotations

import asyncio
import time
from typing import List

import redis.asyncio

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

        async def handle(job: echomq.Job) -> bytes:
            await asyncio.sleep(1.2)
            return b"ok"

        worker = AsyncWorker(client, "async-long", handle, lease=0.3)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 10
        while worker.counts["acked"] < 1:
            assert time.monotonic() < deadline, worker.counts
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 5)
        job = await q.job(job_id)
        assert job is not None and job["attempts"] == 1 and job["result"] == "ok"
        await client.aclose()

    asyncio.run(main())
