"""Groups against a real server: ``group`` at enqueue (and ``echomq enqueue --group``) puts a
job in that group of its queue, which its row names (a job without one has no ``group``);
claims take the groups with ready jobs in turn, the jobs without a group being one more, so a
group enqueued behind a long one is not starved, while each group's jobs keep their order; the
stats count the groups with ready jobs (``groups``) and every ready job (``pending``). Order and
counts only: nothing here is timed."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List

import redis.asyncio

import echomq
from echomq import commands as cmd
from echomq.aio import AsyncQueue
from conftest import Server
from test_cli import cli

#: The fairness test's queue: a long group, then a short one enqueued behind it.
LONG, SHORT = 30, 3


def row(q: echomq.Queue, job_id: str) -> Dict[str, Any]:
    found = q.job(job_id)
    assert found is not None, job_id
    return found


def claim_order(q: echomq.Queue, count: int) -> List[str]:
    """Claims `count` jobs one call each, as a worker of one slot would: their ids in order."""
    order = []
    for _ in range(count):
        [[job_id, _, _]] = q.call("EMQ.CLAIM", "COUNT", 1, "LEASE", 60_000)
        order.append(job_id.decode())
    return order


def test_the_enqueue_sends_group_only_when_given() -> None:
    _, args = cmd.enqueue("q", echomq.Raw(), b"p", "JOB00000000001", None, None, None, None, None,
                          group="tenant-7")
    assert args[-2:] == ["GROUP", "tenant-7"], args
    _, args = cmd.enqueue("q", echomq.Raw(), b"p", "JOB00000000001", None, None, None, None, None)
    assert "GROUP" not in args, args


def test_a_jobs_group_is_in_its_row_and_a_job_without_one_has_none(server: Server) -> None:
    q = echomq.Queue(server.client(), "grouped")
    job_id = q.enqueue(b"x", group="tenant-1")
    assert row(q, job_id)["group"] == "tenant-1"
    plain = q.enqueue(b"y")
    assert row(q, plain).get("group") is None, row(q, plain)
    # The group stays the job's through its claim.
    assert sorted(claim_order(q, 2)) == sorted([job_id, plain])
    assert (row(q, job_id)["state"], row(q, job_id)["group"]) == ("active", "tenant-1")


def test_a_group_enqueued_behind_a_long_one_is_claimed_in_turn(server: Server) -> None:
    q = echomq.Queue(server.client(), "fair")
    a = [q.enqueue(f"a{n}".encode(), group="a") for n in range(LONG)]
    b = [q.enqueue(f"b{n}".encode(), group="b") for n in range(SHORT)]
    stats = q.stats()
    assert (stats["groups"], stats["pending"]) == (2, LONG + SHORT), stats
    order = claim_order(q, LONG + SHORT)
    assert sorted(order) == sorted(a + b), order
    assert all(order.index(job_id) < 2 * SHORT for job_id in b), order
    assert [job_id for job_id in order if job_id in a] == a, order
    stats = q.stats()
    assert (stats["groups"], stats["pending"], stats["active"]) == (0, 0, LONG + SHORT), stats


def test_a_queue_that_never_used_groups_counts_none(server: Server) -> None:
    q = echomq.Queue(server.client(), "ungrouped")
    q.enqueue(b"x")
    stats = q.stats()
    assert (stats["groups"], stats["pending"]) == (0, 1), stats


def test_the_async_queue_enqueues_in_a_group(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            q = AsyncQueue(client, "grouped-async")
            job_id = await q.enqueue(b"x", group="tenant-2")
            assert ((await q.job(job_id)) or {})["group"] == "tenant-2"
            plain = await q.enqueue(b"y")
            assert ((await q.job(plain)) or {}).get("group") is None
            assert (await q.stats())["pending"] == 2
        finally:
            await client.aclose()

    asyncio.run(main())


def test_the_command_line_enqueues_in_a_group(server: Server) -> None:
    job_id = cli(server, "enqueue", "cli-grouped", "x", "--group", "tenant-3")
    assert row(echomq.Queue(server.client(), "cli-grouped"), job_id)["group"] == "tenant-3"
