"""Groups against a real server: ``group`` at enqueue (and ``echomq enqueue --group``) puts a
job in that group of its queue, which its row names (a job without one has no ``group``);
claims take the groups with ready jobs in turn, the jobs without a group being one more, so a
group enqueued behind a long one is not starved, while each group's jobs keep their order; the
stats count the named groups the queue knows (``groups``: with ready or active jobs) and every
ready job (``pending``). A group's limits (the queue's default ``group_concurrency``, a group's
own ``group_limit``, ``group_rate``) hold it back at its limit while the others go on; a paused
group (``pause_group``) is skipped until resumed, by ``resume_group`` or its time's end;
``groups`` pages them, the largest backlog first. Order and counts only: nothing here is
timed."""

from __future__ import annotations

import asyncio
from typing import Any, Dict, List, Sequence, Tuple

import pytest
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


def claim(q: echomq.Queue, count: int = 100) -> List[Tuple[str, int]]:
    """One claim of up to `count` jobs (a lease of a minute), as a worker elsewhere would: each
    job's id and token, in claim order."""
    reply = q.call("EMQ.CLAIM", "COUNT", count, "LEASE", 60_000)
    return [(job_id, token) for job_id, _, token, _ in cmd.claimed(reply)]


def ids(claimed: Sequence[Tuple[str, int]]) -> List[str]:
    return [job_id for job_id, _ in claimed]


def ack(q: echomq.Queue, claimed: Sequence[Tuple[str, int]]) -> None:
    for job_id, token in claimed:
        assert q.call("EMQ.ACK", job_id, token) == 1, job_id


def enqueue_to(q: echomq.Queue, group: str, count: int) -> List[str]:
    """`count` jobs enqueued to `group`; their ids, in order."""
    return [q.enqueue(f"{group}{n}".encode(), group=group) for n in range(count)]


def listed(q: echomq.Queue, *names: str) -> Dict[str, Tuple[Any, ...]]:
    """Each group of the first page of ``groups()``: the fields `names`, by group."""
    _, found = q.groups()
    return {g["group"]: tuple(g[n] for n in names) for g in found}


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
    # Groups with active jobs are still known; once every job is acked, none is.
    stats = q.stats()
    assert (stats["groups"], stats["pending"], stats["active"]) == (2, 0, LONG + SHORT), stats
    ack(q, [(job_id, 1) for job_id in order])
    stats = q.stats()
    assert (stats["groups"], stats["pending"], stats["active"]) == (0, 0, 0), stats


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


def test_the_group_limits_and_pauses_send_what_they_set() -> None:
    assert cmd.limit("q", group_concurrency=2) == ["EMQ.LIMIT", "q", "GROUP-CONCURRENCY", 2]
    assert cmd.limit("q", group_concurrency=None, group_rate=None) == [
        "EMQ.LIMIT", "q", "GROUP-CONCURRENCY", "OFF", "GROUP-RATE", "OFF",
    ]
    assert cmd.limit("q", concurrency=9, group_rate=5, group_per=1.5) == [
        "EMQ.LIMIT", "q", "CONCURRENCY", 9, "GROUP-RATE", 5, "PER", 1500,
    ]
    with pytest.raises(ValueError, match="group_per"):
        cmd.limit("q", group_rate=5)
    assert cmd.group_limit("q", "a") == ["EMQ.LIMIT", "q", "GROUP", "a"]
    assert cmd.group_limit("q", "a", concurrency=None, rate=2, per=60) == [
        "EMQ.LIMIT", "q", "GROUP", "a", "CONCURRENCY", "OFF", "RATE", 2, "PER", 60_000,
    ]
    assert cmd.pause_group("q", "a") == ["EMQ.PAUSE", "q", "GROUP", "a"]
    assert cmd.pause_group("q", "a", 2.0004) == ["EMQ.PAUSE", "q", "GROUP", "a", "FOR", 2000]
    with pytest.raises(ValueError, match="rounds to 0 ms"):
        cmd.pause_group("q", "a", 0.0004)
    assert cmd.groups("q", "0", None) == ["EMQ.GROUPS", "q", "CURSOR", "0"]


def test_a_group_at_its_concurrency_limit_is_held_back_until_a_job_of_it_leaves(
    server: Server,
) -> None:
    q = echomq.Queue(server.client(), "group-limits")
    assert q.limit(group_concurrency=2)["group-concurrency"] == 2
    own = q.group_limit("a", concurrency=1)
    assert (own["group"], own["concurrency"], own["group-concurrency"], own["held"]) == (
        "a", 1, 2, 0,
    ), own
    a, b = enqueue_to(q, "a", 3), enqueue_to(q, "b", 3)
    first = claim(q)
    # At most each group's limit, each group's jobs in their order.
    assert sorted(ids(first)) == sorted(a[:1] + b[:2]), first
    assert claim(q) == []
    report = q.group_limit("a")
    assert (report["active"], report["ready"], report["held"]) == (1, 2, 1), report
    assert listed(q, "ready", "active", "concurrency", "held") == {
        "a": (2, 1, 1, 1), "b": (1, 2, 2, 1),
    }
    # An ack frees one place of that group: one more of a's, none of b's.
    ack(q, [c for c in first if c[0] == a[0]])
    assert ids(claim(q)) == [a[1]]
    assert claim(q) == []
    # Without its own limit, a has the default's two places.
    assert q.group_limit("a", concurrency=None)["concurrency"] is None
    assert ids(claim(q)) == [a[2]]
    assert q.limit(group_concurrency=None)["group-concurrency"] is None
    assert ids(claim(q)) == [b[2]]


def test_a_paused_group_is_skipped_until_it_is_resumed(server: Server) -> None:
    q = echomq.Queue(server.client(), "group-pauses")
    a, b = enqueue_to(q, "a", 2), enqueue_to(q, "b", 1)
    assert q.pause_group("a") and not q.pause_group("a")
    assert listed(q, "paused", "paused-until") == {"a": (1, None), "b": (0, None)}
    assert ids(claim(q)) == b
    assert claim(q) == []
    assert q.stats()["pending"] == 2
    assert q.resume_group("a") and not q.resume_group("a")
    assert ids(claim(q)) == a


def test_a_group_paused_for_a_while_is_claimed_by_a_blocked_claim_after(server: Server) -> None:
    q = echomq.Queue(server.client(), "group-paused-for")
    job_id = q.enqueue(b"x", group="a")
    assert q.pause_group("a", seconds=0.3)
    # However long the claim waited, it ends with the job: the pause ended by itself.
    reply = q.call("EMQ.CLAIM", "COUNT", 1, "LEASE", 60_000, "BLOCK", 30_000)
    assert [c[0] for c in cmd.claimed(reply)] == [job_id]


def test_the_groups_are_listed_largest_backlog_first_over_pages(server: Server) -> None:
    q = echomq.Queue(server.client(), "group-listing")
    for group, count in (("one", 1), ("five", 5), ("three", 3)):
        enqueue_to(q, group, count)
    pages, cursor = [], "0"
    while True:
        cursor, page = q.groups(cursor=cursor, count=2)
        pages.append([(g["group"], g["ready"]) for g in page])
        if cursor == "0":
            break
    assert pages == [[("five", 5), ("three", 3)], [("one", 1)]], pages
    _, [first, *_] = q.groups()
    fields = ("group", "ready", "active", "concurrency", "paused", "paused-until", "held")
    assert {k: first[k] for k in fields} == {
        "group": "five", "ready": 5, "active": 0, "concurrency": None, "paused": 0,
        "paused-until": None, "held": 0,
    }, first


def test_a_group_at_its_rate_gets_no_more_claims_while_another_goes_on(server: Server) -> None:
    q = echomq.Queue(server.client(), "group-rates")
    limits = q.limit(group_rate=5, group_per=60)
    assert (limits["group-rate"], limits["group-rate-per"]) == (5, 60_000), limits
    own = q.group_limit("a", rate=2, per=60)
    assert (own["rate"], own["rate-per"], own["group-rate"], own["rate-used"]) == (
        2, 60_000, 5, 0,
    ), own
    a, b = enqueue_to(q, "a", 4), enqueue_to(q, "b", 3)
    taken = ids(claim(q))
    assert sorted(taken) == sorted(a[:2] + b), taken
    assert claim(q) == []
    assert q.group_limit("a")["rate-used"] == 2
    assert listed(q, "rate", "rate-per", "rate-used")["a"] == (2, 60_000, 2)
    # Without its own rate, a has the default's five claims a window: its last two come.
    assert q.group_limit("a", rate=None)["rate"] is None
    assert ids(claim(q)) == a[2:]
    assert q.limit(group_rate=None)["group-rate"] is None


def test_the_async_queue_limits_pauses_and_lists_groups(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            q = AsyncQueue(client, "grouped-async-ops")
            await q.enqueue(b"x", group="a")
            await q.enqueue(b"y", group="a")
            await q.enqueue(b"z", group="b")
            assert (await q.limit(group_concurrency=3))["group-concurrency"] == 3
            assert (await q.group_limit("a", concurrency=1))["concurrency"] == 1
            assert await q.pause_group("b", seconds=60)
            cursor, found = await q.groups(count=10)
            assert cursor == "0"
            assert [(g["group"], g["ready"], g["concurrency"], g["paused"]) for g in found] == [
                ("a", 2, 1, 0), ("b", 1, 3, 1),
            ]
            assert all(g["paused-until"] is not None for g in found if g["paused"])
            assert await q.resume_group("b") and not await q.resume_group("b")
        finally:
            await client.aclose()

    asyncio.run(main())
