"""Partitioned queues (docs/cluster.md, "A queue bigger than one primary") through the client:
a ``Queue`` that does not know its queue is spanned learns the width from the server's
``EMQSPANNED`` and routes each job to its partition (by its group, else its id), a stale width
is corrected by the partition that refuses a job, a ``Worker`` (and an ``AsyncWorker``) drains
every partition exactly once, on a cluster with one blocked claim a primary, and settles and
delivers each job's flow hand-over on its own partition. The refusals are typed; limits are
shared out, counts summed. Order and counts only: nothing here is timed."""

from __future__ import annotations

import asyncio
import signal
import threading
import time
from typing import Any, Callable, Dict, List, Set, Tuple

import pytest
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import echomq
from echomq import routing, spans
from echomq.commands import pairs
from echomq.aio import AsyncQueue, AsyncWorker
from echomq.partitions import name, route
from echomq.rounds import Claim, Ends, Rotation
from echomq.slots import slot
from conftest import Cluster, Server, joined, until
from test_clients import move_slot


def pending(client: Any, queue: str) -> Set[str]:
    """The ids in a queue's pending set (the jobs without a group), every page of
    ``EMQ.JOBS``."""
    q, found, cursor = echomq.Queue(client, queue), set(), "0"
    while True:
        cursor, page = q.jobs("pending", cursor, count=500)
        found |= {job["id"] for job in page}
        if cursor == "0":
            return found


def drain(
    client: Any, queue: str, expected: int, **options: Any
) -> Dict[str, List[str]]:
    """Runs a ``Worker`` on `queue` until it acked `expected` jobs, then stops it: the queues
    each job id was handled from (one entry a run of its handler)."""
    handled: Dict[str, List[str]] = {}
    lock = threading.Lock()

    def handle(job: echomq.Job) -> None:
        with lock:
            handled.setdefault(job.id, []).append(job.queue)

    worker = echomq.Worker(client, queue, handle, **options)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        assert until(lambda: worker.counts["acked"] == expected, timeout=60), worker.counts
    finally:
        worker.stop()
        assert joined(t), "run() returned after stop()"
    assert worker.counts["lost"] == 0 and worker.counts["failed"] == 0, worker.counts
    return handled


def async_worker(
    client: Any, queue: str, **options: Any
) -> "Tuple[AsyncWorker, asyncio.Task[None], Dict[str, List[str]]]":
    """An ``AsyncWorker`` on `queue`, running as a task: it, the task, and the queues each job
    id was handled from (one entry a run of its handler)."""
    handled: Dict[str, List[str]] = {}

    async def handle(job: echomq.Job) -> None:
        handled.setdefault(job.id, []).append(job.queue)

    worker = AsyncWorker(client, queue, handle, **options)
    return worker, asyncio.create_task(worker.run()), handled


async def acked(worker: AsyncWorker, expected: int, timeout: float = 30) -> None:
    """Waits until `worker` acked `expected` jobs (failing past `timeout` seconds)."""
    deadline = time.monotonic() + timeout
    while worker.counts["acked"] < expected:
        assert time.monotonic() < deadline, worker.counts
        await asyncio.sleep(0.02)


# ---- one server ----


def test_a_queue_learns_the_width_from_the_refusal_and_routes_each_job_to_its_partition(
    server: Server,
) -> None:
    client = server.client()
    assert echomq.Queue(client, "orders").span(4) is True
    assert echomq.Queue(client, "orders").span(4) is False, "the same width again: no change"
    q = echomq.Queue(client, "orders")
    assert q.router.width is None
    batch = q.enqueue_many((b"job %d" % n for n in range(150)), chunk=40)
    assert q.router.width == 4, "learned from the queue's own EMQSPANNED"
    groups = {q.enqueue(b"grouped", group=f"tenant-{n % 7}"): f"tenant-{n % 7}" for n in range(30)}
    alone = [q.enqueue(b"alone %d" % n) for n in range(20)]
    every = batch + list(groups) + alone
    assert len(set(every)) == 200
    # Each job sits in the partition its group, or else its id, routes to; the queue holds none.
    partitions = spans.names("orders", 4)
    for job_id in every:
        holders = [p for p in partitions if server.cmd("EMQ.JOB", p, job_id) is not None]
        assert holders == [partitions[route(4, groups.get(job_id, job_id))]], job_id
    for index, partition in enumerate(partitions):
        routed = [i for i in every if route(4, groups.get(i, i)) == index]
        assert echomq.Queue(client, partition).stats()["pending"] == len(routed), partition
    assert pairs(server.cmd("EMQ.STATS", "orders"))["pending"] == 0
    # The batch's ids come back in the caller's order: each id's row has its payload.
    assert [(q.job(i) or {}).get("payload") for i in batch[:10]] == [
        "job %d" % n for n in range(10)
    ]
    stats = q.stats()
    assert (stats["pending"], stats["groups"], stats["partitions"]) == (200, 7, 4)

    handled = drain(client, "orders", 200, concurrency=8)
    assert sorted(handled) == sorted(every)
    assert all(len(queues) == 1 for queues in handled.values()), "each handled once"
    for job_id, (queue,) in handled.items():
        assert queue == partitions[route(4, groups.get(job_id, job_id))], job_id
    for partition, counts in q.partition_stats().items():
        assert (counts["pending"], counts["active"], counts["dead"]) == (0, 0, 0), partition


def test_the_server_s_refusals_are_typed(server: Server) -> None:
    client = server.client()
    q = echomq.Queue(client, "typed")
    q.span(3)
    with pytest.raises(echomq.EmqSpannedError) as spanned:
        q.call("EMQ.CLAIM")
    assert spanned.value.width == 3
    assert isinstance(spanned.value, echomq.EmqError)
    assert isinstance(spanned.value, redis.ResponseError)
    with pytest.raises(echomq.EmqSpanError):
        q.span(4)  # another width
    busy = echomq.Queue(client, "busy")
    busy.enqueue(b"x")
    with pytest.raises(echomq.EmqSpanError):
        busy.span(2)  # a queue that holds jobs
    # A refused span marked no partition: none of width 4 (but those that are of 3 too), and
    # none of busy's.
    unmarked = set(spans.names("typed", 4) + spans.names("busy", 2)) - set(spans.names("typed", 3))
    assert unmarked and all(pairs(server.cmd("EMQ.WIDTH", p))["width"] == 0 for p in unmarked)
    # A partition's own Queue does not route further: a job that routes elsewhere is refused.
    partition = echomq.Queue(client, name("typed", 0, 3) or "")
    elsewhere = next(i for i in (echomq.mint() for _ in range(100)) if route(3, i) != 0)
    with pytest.raises(echomq.EmqSpannedError):
        partition.enqueue(b"z", id=elsewhere)
    assert partition.router.width == 0
    with pytest.raises(echomq.EmqSpanError):
        partition.span(2)  # a partition
    q.enqueue(b"y")
    with pytest.raises(echomq.EmqSpanError):
        q.unspan()  # a partition holds a job


def test_a_stale_width_is_corrected_by_the_partition_that_refuses_the_job(server: Server) -> None:
    # A queue whose partition 0 of 2 is its partition 0 of 4 as well: once it spans 4, that
    # name is a partition again, and refuses a job that now routes to partition 2 with the
    # new width. (A retired partition, none of the new width, refuses with 0: the next test.)
    queue = next(f"stale-{n}" for n in range(100) if name(f"stale-{n}", 0, 2) == name(f"stale-{n}", 0, 4))
    client = server.client()
    echomq.Queue(client, queue).span(2)
    q = echomq.Queue(client, queue)
    q.enqueue(b"learns 2")
    assert q.router.width == 2
    assert q.purge("pending") == 1
    admin = echomq.Queue(client, queue)
    assert admin.unspan() is True
    assert admin.width() == 0
    assert admin.span(4) is True
    job_id = next(i for i in (echomq.mint() for _ in range(1000)) if route(4, i) == 2)
    assert route(2, job_id) == 0, "sent to partition 0 of 2, which is 0 of 4 now"
    assert q.enqueue(b"moved", id=job_id) == job_id
    assert q.router.width == 4
    assert pending(client, name(queue, 2, 4) or "") == {job_id}
    assert pending(client, name(queue, 0, 4) or "") == set()


def test_an_unspan_refused_by_a_partition_leaves_the_queue_spanned_and_a_retry_finishes_it(
    server: Server,
) -> None:
    # Partitions first, then the queue: a partition that holds a job refuses, the queue stays
    # spanned (its producers still route), and once drained the same call finishes the work.
    client = server.client()
    q = echomq.Queue(client, "unspanning")
    q.span(3)
    partitions = spans.names("unspanning", 3)
    last = next(i for i in (echomq.mint() for _ in range(100)) if route(3, i) == 2)
    q.enqueue(b"holds the last partition", id=last)
    with pytest.raises(echomq.EmqSpanError):
        q.unspan()
    assert pairs(server.cmd("EMQ.WIDTH", "unspanning"))["width"] == 3, "the queue is still spanned"
    assert q.width() == 3
    # The partitions before the refusing one are retired: each refuses a job with width 0.
    retired = [pairs(server.cmd("EMQ.WIDTH", p)) for p in partitions[:2]]
    assert all((w["width"], w["of"]) == (0, b"unspanning") for w in retired), retired
    assert q.purge("pending") == 1
    assert q.unspan() is True
    assert q.width() == 0
    # A retry leaves the partitions retired, not ordinary: a producer still holding width 3 is
    # led to the queue itself, never into a partition nobody claims.
    for p in partitions:
        assert (pairs(server.cmd("EMQ.WIDTH", p))["of"], p) == (b"unspanning", p)
    stale = echomq.Queue(client, "unspanning")
    stale.router.learn(3)
    first = next(i for i in (echomq.mint() for _ in range(100)) if route(3, i) == 0)
    assert stale.enqueue(b"to the queue", id=first) == first
    assert stale.router.width == 0
    assert pending(client, "unspanning") == {first}
    assert q.unspan() is False, "nothing left to change"


def test_an_async_unspan_goes_partitions_first_too(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "aunspanning")
        await q.span(3)
        partitions = spans.names("aunspanning", 3)
        last = next(i for i in (echomq.mint() for _ in range(100)) if route(3, i) == 2)
        await q.enqueue(b"holds the last partition", id=last)
        with pytest.raises(echomq.EmqSpanError):
            await q.unspan()
        assert await q.width() == 3, "the queue is still spanned"
        assert await q.purge("pending") == 1
        assert await q.unspan() is True
        assert await q.width() == 0
        for p in partitions:
            assert (pairs(server.cmd("EMQ.WIDTH", p))["of"], p) == (b"aunspanning", p), "retired"
        await client.aclose()

    asyncio.run(main())


def enqueues(server: Server, command: str = "emq.enqueue") -> int:
    """How many ``EMQ.ENQUEUE`` (or `command`: ``emq.width``...) the server was sent, refused
    ones included."""
    stats = server.cmd("INFO", "commandstats").get(f"cmdstat_{command}", {})
    return int(stats.get("calls", 0)) + int(stats.get("rejected_calls", 0))


def resized(server: Server, queue: str) -> str:
    """Changes `queue`, spanned over 4, to 2 as docs/cluster.md says (drained, every partition
    unspanned, then the queue, then spanned anew): an id whose partition of 4 is retired, a
    partition of no width now."""
    admin = echomq.Queue(server.client(), queue)
    admin.purge("pending")
    assert admin.unspan() is True and admin.span(2) is True
    old, new = spans.names(queue, 4), spans.names(queue, 2)
    return next(i for i in (echomq.mint() for _ in range(1000)) if old[route(4, i)] not in new)


def test_a_producer_holding_a_stale_width_is_led_by_the_retired_partition_to_the_queue(
    server: Server,
) -> None:
    client = server.client()
    echomq.Queue(client, "narrowed").span(4)
    q = echomq.Queue(client, "narrowed")
    q.enqueue(b"learns 4")
    assert q.router.width == 4
    job_id = resized(server, "narrowed")
    sent = enqueues(server)
    assert q.enqueue(b"moved", id=job_id) == job_id
    assert enqueues(server) - sent == 3, "refused by the retired partition (0), the queue (2)"
    assert q.router.width == 2
    assert pending(client, spans.names("narrowed", 2)[route(2, job_id)]) == {job_id}
    # The same with a batch: its jobs of a retired partition go round the same way.
    q.router.learn(4)
    batch = q.enqueue_many([b"a", b"b", b"c"])
    assert q.router.width == 2
    assert all((q.job(i) or {}).get("state") == "pending" for i in batch)
    # A Queue whose name is a retired partition sends to its own name: refused at once.
    retired = echomq.Queue(client, spans.names("narrowed", 4)[route(4, job_id)])
    sent = enqueues(server)
    with pytest.raises(echomq.EmqSpannedError) as refused:
        retired.enqueue(b"nowhere")
    assert (refused.value.width, enqueues(server) - sent) == (0, 1)
    sent = enqueues(server, "emq.menqueue")
    with pytest.raises(echomq.EmqSpannedError):
        retired.enqueue_many([b"nowhere"])
    assert enqueues(server, "emq.menqueue") - sent == 1


def test_a_queue_wide_limit_is_shared_out_and_its_report_adds_up(server: Server) -> None:
    client = server.client()
    echomq.Queue(client, "limited").span(4)
    q = echomq.Queue(client, "limited")
    assert q.limit(concurrency=10, rate=9, per=1)["concurrency"] == 10
    parts = [echomq.Queue(client, p).limit() for p in spans.names("limited", 4)]
    assert [p["concurrency"] for p in parts] == [3, 3, 2, 2]
    assert [p["rate"] for p in parts] == [3, 2, 2, 2]
    with pytest.raises(ValueError, match="at least 4"):
        q.limit(concurrency=3)
    assert q.limit()["concurrency"] == 10, "a refused limit changed nothing"
    assert q.pause() is True
    assert all(echomq.Queue(client, p).stats()["paused"] == 1 for p in spans.names("limited", 4))
    assert q.stats()["paused"] == 1
    assert q.resume() is True
    assert q.stats()["paused"] == 0


def test_a_worker_switches_to_the_partitions_of_a_queue_spanned_while_it_runs(
    server: Server,
) -> None:
    client = server.client()
    handled: List[str] = []

    def handle(job: echomq.Job) -> None:
        handled.append(job.queue)

    worker = echomq.Worker(client, "later", handle, block=0.2)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        # The worker waits in a blocked claim of the ordinary queue before it is spanned.
        assert until(lambda: server.cmd("INFO", "clients")["blocked_clients"] == 1)
        echomq.Queue(client, "later").span(3)
        echomq.Queue(client, "later").enqueue_many(b"%d" % n for n in range(30))
        assert until(lambda: worker.counts["acked"] == 30, timeout=30), worker.counts
    finally:
        worker.stop()
        assert joined(t)
    assert set(handled) <= set(spans.names("later", 3)) and len(handled) == 30


def rewidened(server: Server, queue: str, count: int) -> List[str]:
    """Changes `queue`, spanned over 4 and empty, to 2 (``resized``), then enqueues `count` jobs
    to its partition 1 of 2, a partition of no width 4 (its name is ``<queue>~1-j``, the
    width-4 partition 1 spans other slots): their ids."""
    resized(server, queue)
    q = echomq.Queue(server.client(), queue)
    ids = [i for i in (echomq.mint() for _ in range(20 * count)) if route(2, i) == 1][:count]
    assert spans.names(queue, 2)[1] not in spans.names(queue, 4)
    return [q.enqueue(b"after", id=i) for i in ids]


def test_a_worker_reads_the_width_again_when_its_blocking_claim_times_out(
    server: Server,
) -> None:
    client = server.client()
    echomq.Queue(client, "rewidth").span(4)
    handled: List[str] = []
    worker = echomq.Worker(client, "rewidth", lambda job: handled.append(job.queue), block=0.2)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        # Idle on the width-4 partitions: one blocked claim.
        assert until(lambda: server.cmd("INFO", "clients")["blocked_clients"] == 1)
        rewidened(server, "rewidth", 10)
        assert until(lambda: worker.counts["acked"] == 10, timeout=30), worker.counts
    finally:
        worker.stop()
        assert joined(t)
    assert handled == [spans.names("rewidth", 2)[1]] * 10


def test_an_async_worker_reads_the_width_again_when_its_blocking_claim_times_out(
    server: Server,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await AsyncQueue(client, "arewidth").span(4)
        handled: List[str] = []

        async def handle(job: echomq.Job) -> None:
            handled.append(job.queue)

        worker = AsyncWorker(client, "arewidth", handle, block=0.2)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 30
        while server.cmd("INFO", "clients")["blocked_clients"] != 1:
            assert time.monotonic() < deadline
            await asyncio.sleep(0.02)
        rewidened(server, "arewidth", 10)
        while worker.counts["acked"] < 10:
            assert time.monotonic() < deadline, worker.counts
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert handled == [spans.names("arewidth", 2)[1]] * 10
        await client.aclose()

    asyncio.run(main())


def test_an_async_queue_and_worker_route_and_drain_a_partitioned_queue(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await AsyncQueue(client, "async-parts").span(5)
        q = AsyncQueue(client, "async-parts")
        ids = await q.enqueue_many(b"%d" % n for n in range(100))
        ids += [await q.enqueue(b"g", group=f"g{n}") for n in range(20)]
        assert q.router.width == 5
        assert (await q.stats())["pending"] == 120
        worker, task, handled = async_worker(client, "async-parts", concurrency=8)
        await acked(worker, 120)
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert sorted(handled) == sorted(ids)
        assert all(len(queues) == 1 for queues in handled.values())
        stats = await q.stats()
        assert (stats["pending"], stats["active"], worker.counts["lost"]) == (0, 0, 0)
        assert await q.job(ids[0]) is not None, "a job is found in its partition by its id"
        await client.aclose()

    asyncio.run(main())


# ---- flows ----


def state(client: Any, queue: str, job_id: str) -> Any:
    return (echomq.Queue(client, queue).job(job_id) or {}).get("state")


def test_a_child_enqueued_with_a_stale_width_is_adopted_only_where_it_lands(
    server: Server,
) -> None:
    # The producer's width is 4, the queue's 2 now: the child's parent must register it in the
    # partition it lands in, and there only (a registration elsewhere takes the parent's only
    # place for a child that never comes).
    client = server.client()
    echomq.Queue(client, "grown").span(4)
    q = echomq.Queue(client, "grown")
    q.enqueue(b"learns 4")
    job_id = resized(server, "grown")
    assert q.router.width == 4
    sums = echomq.Queue(client, "sums")
    parent = sums.enqueue(b"sum", children=1)
    assert q.enqueue(b"part", id=job_id, parents=[("sums", parent)]) == job_id
    landed = spans.names("grown", 2)[route(2, job_id)]
    assert list(sums.children(parent)) == [(landed, job_id)]
    drain(client, "grown", 1)
    assert state(client, "sums", parent) == "pending", "its one child finished"


def test_a_child_names_its_parent_in_a_partitioned_queue_by_the_queue(server: Server) -> None:
    client = server.client()
    echomq.Queue(client, "reports").span(3)
    echomq.Queue(client, "wide-parts").span(2)
    reports = echomq.Queue(client, "reports")
    parent = reports.enqueue(b"sum", children=3)
    assert reports.router.width == 3
    # An ordinary queue's child, a partitioned queue's child, and a child in the parent's own
    # queue: each parent reference is the logical queue and the parent's id.
    above = [("reports", parent)]
    kids = [
        ("parts", echomq.Queue(client, "parts").enqueue(b"a", parents=above)),
        ("wide-parts", echomq.Queue(client, "wide-parts").enqueue(b"b", parents=above)),
        ("reports", echomq.Queue(client, "reports").enqueue(b"c", parents=above)),
    ]
    found = sorted(reports.children(parent))
    assert found == sorted((echomq.Queue(client, q).partition(i), i) for q, i in kids)
    for queue, _ in kids:
        drain(client, queue, 1 + (queue == "reports"))  # the parent too, once released
    assert state(client, "reports", parent) == "done"


def test_a_parent_s_queue_width_kept_is_read_again_when_the_parent_is_not_there(
    server: Server,
) -> None:
    client = server.client()
    echomq.Queue(client, "resizing").span(2)
    kids = echomq.Queue(client, "kids")
    first = echomq.Queue(client, "resizing").enqueue(b"p", children=1)
    kids.enqueue(b"k", parents=[("resizing", first)])
    assert kids.routers["resizing"].width == 2, "kept"
    assert echomq.Queue(client, "resizing").cancel(first)
    admin = echomq.Queue(client, "resizing")
    assert admin.unspan() is True and admin.span(3) is True
    old, new = spans.names("resizing", 2), spans.names("resizing", 3)
    moved = next(i for i in (echomq.mint() for _ in range(100)) if old[route(2, i)] != new[route(3, i)])
    parent = admin.enqueue(b"p", id=moved, children=1)
    child = kids.enqueue(b"k", parents=[("resizing", parent)])
    assert kids.routers["resizing"].width == 3
    assert list(admin.children(parent)) == [("kids", child)]


def test_a_flow_over_partitioned_queues_links_each_job_to_its_parent_s_partition(
    server: Server,
) -> None:
    client = server.client()
    echomq.Queue(client, "tree").span(3)
    echomq.Queue(client, "leaves").span(2)
    q = echomq.Queue(client, "tree")
    read = enqueues(server, "emq.width")
    tree = q.flow({"queue": "tree", "payload": b"root", "children": [
        {"queue": "leaves", "payload": b"a"},
        {"queue": "tree", "payload": b"b", "children": [{"queue": "leaves", "payload": b"c"}]},
    ]})
    # Each child's queue read once (its parents named by the partitions they went to).
    assert enqueues(server, "emq.width") - read == 2
    every = [node for _, node in tree.walk()]
    for node in every:
        assert state(client, node.queue, node.id or "") in ("pending", "waiting"), node
    b = tree.children[1]
    assert sorted(q.children(tree.id or "")) == sorted(
        (echomq.Queue(client, n.queue).partition(n.id or ""), n.id) for n in tree.children
    )
    assert list(q.children(b.id or "")) == [
        (echomq.Queue(client, "leaves").partition(b.children[0].id or ""), b.children[0].id)
    ]
    assert q.flow(tree) == tree, "given again: written once"
    order: List[str] = []
    worker = echomq.Worker(client, "tree", lambda job: order.append(job.id))
    leaves = echomq.Worker(client, "leaves", lambda job: order.append(job.id))
    threads = [threading.Thread(target=w.run, daemon=True) for w in (worker, leaves)]
    for t in threads:
        t.start()
    try:
        assert until(lambda: len(order) == 4, timeout=30), order
    finally:
        worker.stop()
        leaves.stop()
        assert all(joined(t) for t in threads)
    assert order.index(tree.id or "") == 3 and order.index(b.id or "") > order.index(
        b.children[0].id or ""
    )


def test_an_async_child_enqueued_with_a_stale_width_is_adopted_only_where_it_lands(
    server: Server,
) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await AsyncQueue(client, "agrown").span(4)
        q = AsyncQueue(client, "agrown")
        await q.enqueue(b"learns 4")
        job_id = resized(server, "agrown")
        sums = AsyncQueue(client, "asums")
        parent = await sums.enqueue(b"sum", children=1)
        assert await q.enqueue(b"stale", id=job_id, parents=[("asums", parent)]) == job_id
        landed = spans.names("agrown", 2)[route(2, job_id)]
        assert list(await sums.children(parent)) == [(landed, job_id)]
        await client.aclose()

    asyncio.run(main())


def test_an_async_queue_finds_a_parent_in_its_partition(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        await AsyncQueue(client, "areports").span(3)
        await AsyncQueue(client, "aleaves").span(2)
        reports = AsyncQueue(client, "areports")
        parent = await reports.enqueue(b"sum", children=1)
        child = await AsyncQueue(client, "parts").enqueue(b"p", parents=[("areports", parent)])
        assert list(await reports.children(parent)) == [("parts", child)]
        tree = await reports.flow({"queue": "areports", "payload": b"root", "children": [
            {"queue": "aleaves", "payload": b"leaf"},
        ]})
        leaf = tree.children[0]
        assert list(await reports.children(tree.id or "")) == [
            (spans.names("aleaves", 2)[route(2, leaf.id or "")], leaf.id)
        ]
        assert (await reports.job(tree.id or "") or {}).get("state") == "waiting"
        await client.aclose()

    asyncio.run(main())


# ---- the client's plans, no server ----


def test_a_round_claims_each_partition_then_blocks_on_the_next_waking_for_the_others() -> None:
    r = Rotation(["a", "b", "c"])
    seen: List[Claim] = []
    for found in (0, 0, 0, 0, 0, 0, 0, 2, 0):
        claim = r.next()
        seen.append(claim)
        r.took(claim, found)
    assert seen == [
        Claim("a", None), Claim("b", None), Claim("c", None),  # a round found nothing
        Claim("a", ["b", "c"]),  # so the next blocks, woken by the others
        Claim("b", None), Claim("c", None), Claim("a", None),  # its end: a new round
        Claim("b", ["c", "a"]),  # which blocks again, and gets 2 jobs
        Claim("c", None),  # going on with the next, without blocking
    ]


def test_only_an_answered_blocking_claim_resets_the_regroup_backoff() -> None:
    # After a regroup the first claims do not block, and are answered even while the slot map
    # is stale; the blocking claim then ends in MOVED (its WAKE names a partition another
    # primary serves). Those answers must not reset the backoff, or the worker regroups again
    # and again at once.
    ends = Ends()
    for claim in (Claim("a", None), Claim("b", None), Claim("c", None)):
        ends.took(claim)
    ends.failed(RuntimeError("MOVED 12 127.0.0.1:7001"), lapse=True)
    assert ends.after(3) == 3, "backs off longer each time"
    held = Ends()
    held.took(Claim("a", ["b", "c"]))  # a blocking claim answered: the loops held
    held.failed(RuntimeError("UNBLOCKED"), lapse=True)
    assert held.after(3) == 0


def test_a_batch_is_split_by_partition_in_its_order() -> None:
    router = routing.Router("split")
    router.learn(3)
    entries = [(echomq.mint(), [b"p"]) for _ in range(50)]
    sends = routing.split(router, entries, chunk=7)
    assert all(len(jobs) <= 7 for _, jobs in sends)
    for target, jobs in sends:
        assert {router.of(job_id) for job_id, _ in jobs} == {target}
    assert sorted(e for _, jobs in sends for e, _ in jobs) == sorted(e for e, _ in entries)
    by: Dict[str, List[str]] = {}
    for target, jobs in sends:
        by.setdefault(target, []).extend(e for e, _ in jobs)
    for target, ids in by.items():
        assert ids == [e for e, _ in entries if router.of(e) == target], "in the batch's order"
    assert [spans.portion(10, 4, i) for i in range(4)] == [3, 3, 2, 2]


# ---- on a cluster ----


def owner_of(cluster: Cluster) -> Callable[[str], int]:
    """The port of the primary that owns a queue's slot."""
    ranges = [(int(r[0]), int(r[1]), int(r[2][1])) for r in cluster.nodes[0].cmd("CLUSTER", "SLOTS")]
    return lambda queue: next(port for lo, hi, port in ranges if lo <= slot(queue) <= hi)


def blocked(cluster: Cluster) -> List[int]:
    return [n.cmd("INFO", "clients")["blocked_clients"] for n in cluster.nodes]


@pytest.mark.cluster
def test_a_worker_drains_a_queue_over_every_primary_blocking_once_a_primary(
    cluster: Cluster,
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    echomq.Queue(client, "wide").span(12)
    partitions = spans.names("wide", 12)
    owner = owner_of(cluster)
    assert {owner(p) for p in partitions} == {n.port for n in cluster.nodes}
    q = echomq.Queue(client, "wide")
    every = q.enqueue_many(b"%d" % n for n in range(250))
    every += [q.enqueue(b"g", group=f"tenant-{n % 9}") for n in range(50)]
    assert q.stats()["pending"] == 300

    running, most = [0], [0]
    lock = threading.Lock()
    handled: Dict[str, int] = {}

    def handle(job: echomq.Job) -> None:
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
            handled[job.id] = handled.get(job.id, 0) + 1
        time.sleep(0.002)  # the work: handlers overlap, up to the concurrency
        with lock:
            running[0] -= 1

    worker = echomq.Worker(client, "wide", handle, concurrency=6)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        assert until(lambda: worker.counts["acked"] == 300, timeout=60), worker.counts
        # Idle, it waits in one blocked claim on each primary, and never in more.
        assert until(lambda: blocked(cluster) == [1, 1, 1]), blocked(cluster)
        for _ in range(20):
            assert max(blocked(cluster)) <= 1
            time.sleep(0.05)
    finally:
        worker.stop()
        assert joined(t)
    assert sorted(handled) == sorted(every) and set(handled.values()) == {1}
    assert most[0] <= 6, "the loops of three primaries share the worker's 6 slots"
    assert worker.counts["lost"] == 0
    stats = q.stats()
    assert (stats["pending"], stats["active"]) == (0, 0)


@pytest.mark.cluster
def test_a_paused_primary_holds_up_no_other_primary_s_settles(cluster: Cluster) -> None:
    """Each partition is settled by a thread of its own: while one primary is paused (SIGSTOP)
    under an acknowledgement in flight, the other primary's partition's job is acknowledged."""
    for n in cluster.nodes:  # its primary cut off, the others serve their own slots still
        n.cmd("CONFIG", "SET", "cluster-require-full-coverage", "no")
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    owner = owner_of(cluster)
    # A queue whose own slot (its width is read there) is not on the primary to be paused, a
    # partition on that primary and one elsewhere.
    for number in range(1000):
        queue = f"held-{number}"
        ports = [owner(p) for p in spans.names(queue, 4)]
        at = [i for i in range(4) if ports[i] != owner(queue)]
        away = [i for i in range(4) if ports[i] == owner(queue)]
        if at and away:
            break
    echomq.Queue(client, queue).span(4)

    def id_in(partition: int) -> str:
        return next(i for i in iter(echomq.mint, "") if route(4, i) == partition)

    paused, elsewhere = id_in(at[0]), id_in(away[0])
    q = echomq.Queue(client, queue)
    q.enqueue(b"x", id=paused)
    release = threading.Event()
    events: List[echomq.WorkerEvent] = []

    def handle(job: echomq.Job) -> None:
        if job.id == paused:
            release.wait(30)

    def seen(kind: str, job_id: str) -> bool:
        return any(e.kind == kind and e.id == job_id for e in list(events))

    worker = echomq.Worker(client, queue, handle, on_event=events.append)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    node = next(n for n in cluster.nodes if n.port == ports[at[0]])
    try:
        assert until(lambda: seen("handler_start", paused), timeout=30)
        node.process.send_signal(signal.SIGSTOP)
        try:
            release.set()
            assert until(lambda: seen("handler_end", paused), timeout=30)
            q.enqueue(b"y", id=elsewhere)
            assert until(lambda: seen("settle", elsewhere), timeout=30), "the other job settled"
            assert not seen("settle", paused), "the paused primary's ack is still in flight"
        finally:
            node.process.send_signal(signal.SIGCONT)
        assert until(lambda: seen("settle", paused), timeout=30), "settled once it resumed"
    finally:
        worker.stop()
        assert joined(t)
    assert worker.counts["acked"] == 2


@pytest.mark.cluster
def test_a_worker_regroups_when_a_partition_s_slot_moves_to_another_primary(
    cluster: Cluster,
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    echomq.Queue(client, "moving").span(6)
    q = echomq.Queue(client, "moving")
    ids = q.enqueue_many(b"job %d" % n for n in range(300))
    moved = spans.names("moving", 6)[0]
    src = next(n for n in cluster.nodes if n.port == owner_of(cluster)(moved))
    dst = next(n for n in cluster.nodes if n is not src)
    worker = echomq.Worker(client, "moving", lambda job: time.sleep(0.005), concurrency=8, lease=2)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        assert until(lambda: worker.counts["acked"] >= 50, timeout=20)
        move_slot(cluster, slot(moved), src, dst)
        later = [q.enqueue(b"after the move", id=i) for i in
                 [i for i in (echomq.mint() for _ in range(400)) if q.partition(i) == moved][:20]]

        def all_done() -> bool:
            try:
                return all((q.job(i) or {}).get("state") == "done" for i in ids + later)
            except Exception:
                return False

        assert until(all_done, timeout=90), worker.counts
        # Regrouped: one blocked claim on each primary that holds partitions, the moved one's
        # new owner included.
        owners = {owner_of(cluster)(p) for p in spans.names("moving", 6)}
        assert until(lambda: sum(blocked(cluster)) == len(owners), timeout=10), blocked(cluster)
        assert max(blocked(cluster)) == 1
    finally:
        worker.stop()
        assert joined(t), "run() returned after stop()"


@pytest.mark.cluster
def test_a_partition_s_child_is_handed_to_its_parent_on_another_primary(cluster: Cluster) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    owner = owner_of(cluster)
    echomq.Queue(client, "kids").span(6)
    q = echomq.Queue(client, "kids")
    child = echomq.mint()
    partition = name("kids", route(6, child), 6) or ""
    parent_queue = next(f"parents-{n}" for n in range(100) if owner(f"parents-{n}") != owner(partition))
    parents = echomq.Queue(client, parent_queue)
    parent = parents.enqueue(b"sum", children=1)
    assert q.enqueue(b"part", id=child, parents=[(parent_queue, parent)]) == child
    assert (parents.job(parent) or {}).get("state") == "waiting"
    events: List[echomq.WorkerEvent] = []
    worker = echomq.Worker(client, "kids", lambda job: None, on_event=events.append)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        # The child's ack left its hand-over in its partition's outbox: the worker sweeps it.
        assert until(lambda: (parents.job(parent) or {}).get("state") == "pending", timeout=30)
    finally:
        worker.stop()
        assert joined(t)
    assert worker.counts["acked"] == 1
    assert [e.id for e in events if e.kind == "handover" and e.outcome == "ok"] == [child]
    assert echomq.Queue(client, partition).call("EMQ.OUTBOX")[1] in ([], None)


@pytest.mark.cluster
def test_a_flow_between_partitioned_queues_runs_its_root_last_across_primaries(
    cluster: Cluster,
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    echomq.Queue(client, "roots").span(6)
    echomq.Queue(client, "branches").span(6)
    q = echomq.Queue(client, "roots")
    trees = [
        q.batch([{"queue": "branches", "payload": b"%d" % n} for n in range(5)],
                on_complete=("roots", b"done"))
        for _ in range(6)
    ]
    roots = {t.id for t in trees}
    owner = owner_of(cluster)
    assert len({owner(q.partition(r or "")) for r in roots} | {
        owner(echomq.Queue(client, "branches").partition(c.id or ""))
        for t in trees for c in t.children
    }) > 1, "children and parents on several primaries"
    done: List[str] = []
    workers = [
        echomq.Worker(client, n, lambda job: done.append(job.id)) for n in ("roots", "branches")
    ]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        assert until(lambda: len(done) == 36, timeout=60), (len(done), workers[0].counts)
    finally:
        for w in workers:
            w.stop()
        assert all(joined(t) for t in threads)
    for tree in trees:
        assert done.index(tree.id or "") > max(done.index(c.id or "") for c in tree.children)
    assert sorted(done) == sorted(n.id or "" for t in trees for _, n in t.walk())


@pytest.mark.cluster
def test_an_async_worker_drains_a_queue_over_every_primary(cluster: Cluster) -> None:
    async def main() -> None:
        client = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        await AsyncQueue(client, "awide").span(6)
        q = AsyncQueue(client, "awide")
        ids = await q.enqueue_many(b"%d" % n for n in range(90))
        handled: List[str] = []

        async def handle(job: echomq.Job) -> None:
            handled.append(job.id)

        worker = AsyncWorker(client, "awide", handle, concurrency=8)
        task = asyncio.create_task(worker.run())
        deadline = time.monotonic() + 30
        while worker.counts["acked"] < 90:
            assert time.monotonic() < deadline, worker.counts
            await asyncio.sleep(0.02)
        # Idle, one blocked claim on each primary.
        while blocked(cluster) != [1, 1, 1]:
            assert time.monotonic() < deadline, blocked(cluster)
            await asyncio.sleep(0.02)
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert sorted(handled) == sorted(ids)
        assert (await q.stats())["pending"] == 0
        await client.aclose()

    asyncio.run(main())
