"""``wait_replicas`` against real servers: a primary with a replica (``--replicaof``) confirms
enqueues and settles; a lone server confirms none, so an enqueue raises ``EmqNotReplicated``
(the job taken all the same) and a settle is reported unreplicated, not retried."""

from __future__ import annotations

import asyncio
import threading
from typing import Any, Iterator, List, Tuple

import pytest
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import echomq
from echomq.aio import AsyncQueue, AsyncWorker
from conftest import Cluster, Server, joined, run_until_acked, until


async def async_settle_events(client: Any, queue: str, n: int) -> List[echomq.WorkerEvent]:
    """``settle_events`` for an ``AsyncWorker``."""
    events: List[echomq.WorkerEvent] = []

    async def handle(job: echomq.Job) -> None:
        return None

    worker = AsyncWorker(
        client, queue, handle, wait_replicas=1, wait_timeout=0.2,
        on_event=lambda e: events.append(e) if e.kind == "settle" else None,
    )
    await run_until_acked(worker, n)
    assert worker.counts["acked"] == n, worker.counts
    return events


@pytest.fixture
def replicated() -> Iterator[Tuple[Server, Server]]:
    """A primary and its replica, the link up."""
    # The first sync at once, not after the default 5 s wait for more replicas.
    primary = Server(["--repl-diskless-sync-delay", "0"])
    replica = None
    try:
        replica = Server(["--replicaof", "127.0.0.1", str(primary.port)])
        linked = replica.client()
        assert until(
            lambda: linked.info("replication").get("master_link_status") == "up", timeout=30
        ), "the replica never linked"
        yield primary, replica
    finally:
        if replica is not None:
            replica.stop()
        primary.stop()


def settle_events(client: Any, queue: str, n: int) -> List[echomq.WorkerEvent]:
    """The settle events of a worker with ``wait_replicas=1`` (``WAIT`` for 0.2 s) run until it
    acknowledged `n` jobs."""
    events: List[echomq.WorkerEvent] = []
    lock = threading.Lock()

    def on_event(event: echomq.WorkerEvent) -> None:
        if event.kind == "settle":
            with lock:
                events.append(event)

    worker = echomq.Worker(
        client, queue, lambda job: None, wait_replicas=1, wait_timeout=0.2, on_event=on_event
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    assert until(lambda: worker.counts["acked"] == n, timeout=30), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    return events


def test_a_replica_confirms_enqueues_and_settles(replicated: Tuple[Server, Server]) -> None:
    primary, replica = replicated
    q = echomq.Queue(primary.client(), "safe", wait_replicas=1, wait_timeout=10)
    one = q.enqueue(b"one")
    many = q.enqueue_many([b"a", b"b", b"c"], chunk=2)
    # WAIT confirmed them: the replica holds each row already.
    for job_id in [one, *many]:
        assert replica.cmd("EXISTS", f"emq:{{safe}}:job:{job_id}") == 1, job_id
    events = settle_events(primary.client(), "safe", 4)
    assert sorted(e.id for e in events) == sorted([one, *many])
    assert all((e.outcome, e.action, e.replicated) == ("ok", "ack", True) for e in events), events


def test_an_enqueue_no_replica_confirms_raises_and_is_taken(server: Server) -> None:
    q = echomq.Queue(server.client(), "unsafe", wait_replicas=1, wait_timeout=0.05)
    with pytest.raises(echomq.EmqNotReplicated) as one:
        q.enqueue(b"one")
    assert isinstance(one.value, echomq.EmqError)
    assert (len(one.value.ids), one.value.replicas, one.value.wanted) == (1, 0, 1)
    assert (q.job(one.value.ids[0]) or {}).get("state") == "pending", "the primary took it"
    with pytest.raises(echomq.EmqNotReplicated) as many:
        q.enqueue_many([b"a", b"b", b"c"], chunk=2)
    assert many.value.replicas == 0 and len(many.value.ids) == 3
    assert many.value.ids == many.value.enqueued
    assert q.stats()["pending"] == 4
    # Without a wait, nothing is asked of the replicas.
    assert echomq.Queue(server.client(), "unsafe").enqueue(b"plain")


def test_a_settle_no_replica_confirms_is_reported_not_retried(server: Server) -> None:
    q = echomq.Queue(server.client(), "unsafe-settle")
    ids = q.enqueue_many([b"a", b"b"])
    events = settle_events(server.client(), "unsafe-settle", 2)
    assert sorted(e.id for e in events) == sorted(ids), "one settle each: none sent again"
    assert all((e.outcome, e.replicated) == ("ok", False) for e in events), events
    assert all((q.job(i) or {}).get("state") == "done" for i in ids)


def test_an_async_enqueue_with_and_without_a_replica(replicated: Tuple[Server, Server]) -> None:
    primary, replica = replicated

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=primary.port)
        job_id = await AsyncQueue(client, "async-safe", wait_replicas=1, wait_timeout=10).enqueue(b"x")
        assert replica.cmd("EXISTS", f"emq:{{async-safe}}:job:{job_id}") == 1
        # Two replicas asked, one there.
        with pytest.raises(echomq.EmqNotReplicated) as short:
            await AsyncQueue(client, "async-safe", wait_replicas=2, wait_timeout=0.05).enqueue(b"y")
        assert (short.value.replicas, short.value.wanted) == (1, 2)
        await client.aclose()

    asyncio.run(main())


@pytest.mark.cluster
def test_on_a_cluster_the_wait_goes_to_the_node_that_took_the_write() -> None:
    # Two queues on two primaries; the first's replica is killed. Its writes are confirmed by
    # no replica, the second's by its replica: each WAIT went to its own queue's primary.
    cluster = Cluster(replicas=1)
    try:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        primaries = [n for n in cluster.nodes if n.cmd("ROLE")[0] == b"master"]

        def owner(name: str) -> Server:
            slot = int(cluster.nodes[0].cmd("CLUSTER", "KEYSLOT", f"emq:{{{name}}}:pending"))
            port = next(
                int(primary[1]) for lo, hi, primary, *_ in cluster.nodes[0].cmd("CLUSTER", "SLOTS")
                if lo <= slot <= hi
            )
            return next(n for n in primaries if n.port == port)

        def replica_of(primary: Server) -> Server:
            return next(
                n for n in cluster.nodes
                if n.cmd("ROLE")[0] == b"slave" and int(n.cmd("ROLE")[2]) == primary.port
            )

        names = [f"spread-{n}" for n in range(20)]
        lone = names[0]
        safe = next(name for name in names if owner(name).port != owner(lone).port)
        gone, kept = replica_of(owner(lone)), replica_of(owner(safe))
        gone.process.kill()
        gone.process.wait()

        q = echomq.Queue(client, lone, wait_replicas=1, wait_timeout=0.2)
        with pytest.raises(echomq.EmqNotReplicated) as short:
            q.enqueue(b"x")
        assert short.value.replicas == 0
        assert (q.job(short.value.ids[0]) or {}).get("state") == "pending", "the primary took it"

        job_id = echomq.Queue(client, safe, wait_replicas=1, wait_timeout=30).enqueue(b"y")
        # Confirmed by that primary's replica: it holds the row already (read there after
        # READONLY, on the same connection).
        reads: Any = kept.client().pipeline(transaction=False)
        reads.execute_command("READONLY")
        reads.execute_command("EXISTS", f"emq:{{{safe}}}:job:{job_id}")
        assert reads.execute()[1] == 1

        assert [e.replicated for e in settle_events(client, lone, 1)] == [False]
        assert [e.replicated for e in settle_events(client, safe, 1)] == [True]

        # The same through an asyncio cluster client: its WAIT on the queue's primary too.
        async def on_asyncio() -> str:
            aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
            with pytest.raises(echomq.EmqNotReplicated) as ashort:
                await AsyncQueue(aclient, lone, wait_replicas=1, wait_timeout=0.2).enqueue(b"x")
            assert ashort.value.replicas == 0
            job_id = await AsyncQueue(aclient, safe, wait_replicas=1, wait_timeout=30).enqueue(b"z")
            assert [e.replicated for e in await async_settle_events(aclient, lone, 1)] == [False]
            assert [e.replicated for e in await async_settle_events(aclient, safe, 1)] == [True]
            await aclient.aclose()
            return str(job_id)

        job_id = asyncio.run(on_asyncio())
        reads = kept.client().pipeline(transaction=False)
        reads.execute_command("READONLY")
        reads.execute_command("EXISTS", f"emq:{{{safe}}}:job:{job_id}")
        assert reads.execute()[1] == 1, "confirmed by the replica of the queue's primary"
    finally:
        cluster.stop()
