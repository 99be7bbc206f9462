"""Timeouts against a real server: ``timeout`` at enqueue (and on a flow's jobs) bounds each
attempt from its claim, which writes the attempt's ``deadline``; a queue's ``limit(timeout=...)``
is the default for jobs without their own, set, reported and removed."""

from __future__ import annotations

import asyncio
from typing import Any, Dict

import redis.asyncio

import echomq
from echomq import commands as cmd
from echomq.aio import AsyncQueue
from echomq.flows import steps
from conftest import Server


def row(q: echomq.Queue, job_id: str) -> Dict[str, Any]:
    found = q.job(job_id)
    assert found is not None, job_id
    return found


def claim_one(q: echomq.Queue, job_id: str) -> int:
    """Claims `job_id` by hand, with a minute's lease: its token."""
    [[claimed, _, token]] = q.call("EMQ.CLAIM", "LEASE", 60_000)
    assert claimed.decode() == job_id
    return int(token)


def test_a_jobs_timeout_is_in_its_row_and_its_claim_writes_the_deadline(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed")
    job_id = q.enqueue(b"x", timeout=1.5)
    job = row(q, job_id)
    assert (job["timeout"], job["state"]) == ("1500", "pending"), job
    assert "deadline" not in job, job
    claim_one(q, job_id)
    job = row(q, job_id)
    # The lease asked was a minute: it ends at the deadline, 1.5 s after the claim, at the latest.
    assert int(job["lease-deadline"]) <= int(job["deadline"]), job
    plain = q.enqueue(b"y")
    claim_one(q, plain)
    assert "deadline" not in row(q, plain) and "timeout" not in row(q, plain)


def test_a_flows_jobs_carry_their_timeouts(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed-flow")
    tree = q.flow({"queue": "timed-flow", "payload": b"parent", "timeout": 60,
                   "children": [{"queue": "timed-parts", "payload": b"child", "timeout": 2}]})
    assert [s.timeout for s in steps(tree)] == [60, 2]
    assert tree.id is not None and tree.children[0].id is not None
    assert row(q, tree.id)["timeout"] == "60000"
    assert row(echomq.Queue(server.client(), "timed-parts"), tree.children[0].id)["timeout"] == "2000"
    chain = q.chain([{"queue": "timed-flow", "payload": b"1", "timeout": 0.5},
                     {"queue": "timed-flow", "payload": b"2"}])
    assert chain.id is not None and chain.children[0].id is not None
    assert "timeout" not in row(q, chain.id)
    assert row(q, chain.children[0].id)["timeout"] == "500"


def test_the_queues_timeout_is_set_reported_kept_and_removed(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed-queue")
    assert q.limit()["timeout"] is None
    assert q.stats()["timeout"] is None
    assert q.limit(timeout=60)["timeout"] == 60_000
    assert q.limit()["timeout"] == 60_000 and q.stats()["timeout"] == 60_000
    # Another limit set leaves the timeout as it is.
    limits = q.limit(concurrency=2)
    assert (limits["concurrency"], limits["timeout"]) == (2, 60_000), limits
    # A job without its own timeout takes the queue's at its claim.
    job_id = q.enqueue(b"x")
    claim_one(q, job_id)
    job = row(q, job_id)
    assert "timeout" not in job and int(job["lease-deadline"]) <= int(job["deadline"]), job
    # None removes it alone; off removes every limit.
    limits = q.limit(timeout=None)
    assert (limits["concurrency"], limits["timeout"]) == (2, None), limits
    q.limit(timeout=1)
    limits = q.limit(off=True)
    assert (limits["concurrency"], limits["timeout"]) == (None, None), limits
    later = q.enqueue(b"y")
    claim_one(q, later)
    assert "deadline" not in row(q, later)


def test_the_limits_arguments() -> None:
    assert cmd.limit("q", None, None, None, False) == ["EMQ.LIMIT", "q"]
    assert cmd.limit("q", None, None, None, False, 2.5) == ["EMQ.LIMIT", "q", "TIMEOUT", 2500]
    assert cmd.limit("q", 3, None, None, False, None) == [
        "EMQ.LIMIT", "q", "CONCURRENCY", 3, "TIMEOUT", "OFF"
    ]
    _, args = cmd.enqueue("q", echomq.Raw(), b"p", "JOB00000000001", None, None, None, None, None,
                          timeout=0.25)
    assert args[-2:] == ["TIMEOUT", 250]


def test_the_async_queue_enqueues_and_limits_with_timeouts(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            q = AsyncQueue(client, "timed-async")
            job_id = await q.enqueue(b"x", timeout=3)
            assert ((await q.job(job_id)) or {})["timeout"] == "3000"
            assert (await q.limit(timeout=0.5))["timeout"] == 500
            assert (await q.limit(timeout=None))["timeout"] is None
        finally:
            await client.aclose()

    asyncio.run(main())
