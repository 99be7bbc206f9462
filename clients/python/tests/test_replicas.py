"""``wait_replicas`` against real servers: a primary with a replica (``--replicaof``) confirms
enqueues and settles; a lone server confirms none, so an enqueue raises ``EmqNotReplicated``
(the job taken all the same) and a settle is reported unreplicated, not retried."""

from __future__ import annotations

import asyncio
import threading
from typing import Iterator, List, Tuple

import pytest
import redis.asyncio

import echomq
from echomq.aio import AsyncQueue
from conftest import Server, joined, until


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


def settles(worker_queue: str, client_of: Server, n: int) -> Tuple[echomq.Worker, List[echomq.WorkerEvent]]:
    """A worker with ``wait_replicas=1`` run until it acknowledged `n` jobs; its settle events."""
    events: List[echomq.WorkerEvent] = []
    lock = threading.Lock()

    def on_event(event: echomq.WorkerEvent) -> None:
        if event.kind == "settle":
            with lock:
                events.append(event)

    worker = echomq.Worker(
        client_of.client(), worker_queue, lambda job: None, wait_replicas=1, wait_timeout=0.05,
        on_event=on_event,
    )
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    assert until(lambda: worker.counts["acked"] == n, timeout=30), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    return worker, events


def test_a_replica_confirms_enqueues_and_settles(replicated: Tuple[Server, Server]) -> None:
    primary, replica = replicated
    q = echomq.Queue(primary.client(), "safe", wait_replicas=1, wait_timeout=10)
    one = q.enqueue(b"one")
    many = q.enqueue_many([b"a", b"b", b"c"], chunk=2)
    # WAIT confirmed them: the replica holds each row already.
    for job_id in [one, *many]:
        assert replica.cmd("EXISTS", f"emq:{{safe}}:job:{job_id}") == 1, job_id
    worker, events = settles("safe", primary, 4)
    assert sorted(e.id for e in events) == sorted([one, *many])
    assert all((e.outcome, e.action, e.replicated) == ("ok", "ack", True) for e in events), events
    assert worker.counts["acked"] == 4


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
    worker, events = settles("unsafe-settle", server, 2)
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
