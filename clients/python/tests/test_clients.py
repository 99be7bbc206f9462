"""The clients the package claims: ``redis.cluster.RedisCluster`` on a three-primary cluster,
whose queues live on every node, and valkey-py's ``valkey.Valkey``."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import pytest
import redis.cluster
import valkey

import echomq
from conftest import Cluster, Server, joined, until


@pytest.mark.cluster
def test_queues_on_every_primary_of_a_cluster(cluster: Cluster) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    names = [f"orders-{n}" for n in range(9)]
    for name in names:
        echomq.Queue(client, name).enqueue_many(b"%s job %d" % (name.encode(), i) for i in range(20))
    owners = {n.port for n in cluster.nodes if n.cmd("DBSIZE") > 0}
    assert len(owners) > 1, "the queues are spread over the primaries"
    done: List[Any] = []
    workers = [
        echomq.Worker(client, name, lambda job: done.append(job.payload), concurrency=2)
        for name in names
    ]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 20
    while sum(w.counts["acked"] for w in workers) < 180:
        assert time.monotonic() < deadline, [w.counts for w in workers]
        time.sleep(0.05)
    for w in workers:
        w.stop()
    for t in threads:
        assert joined(t), "run() returned after stop()"
    assert len(done) == 180
    assert all(echomq.Queue(client, name).stats()["pending"] == 0 for name in names)


def test_valkey_py(server: Server) -> None:
    client = valkey.Valkey(host="127.0.0.1", port=server.port)
    q = echomq.Queue(client, "vk")
    job_id = q.enqueue(b"hello")
    got: List[str] = []
    worker = echomq.Worker(client, "vk", lambda job: got.append(job.id))
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    deadline = time.monotonic() + 10
    while not got:
        assert time.monotonic() < deadline
        time.sleep(0.02)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert got == [job_id]
    job = q.job(job_id)
    assert job is not None and job["state"] == "done"


@pytest.mark.cluster
def test_a_primary_killed_under_load_leaves_every_job_done_once() -> None:
    # The queue's primary gets SIGKILL while a worker drains it; the cluster promotes its
    # replica and the worker, retrying, goes on there. Every job enqueued (and replicated)
    # before ends done, with one row: at least once, never lost, never two rows.
    cluster = Cluster(replicas=1, node_timeout_ms=2000)
    try:
        client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        q = echomq.Queue(client, "failover")
        ids = q.enqueue_many(b"job %d" % n for n in range(300))
        slot = int(cluster.nodes[0].cmd("CLUSTER", "KEYSLOT", "emq:{failover}:pending"))
        owner = next(
            n for n in cluster.nodes
            if n.cmd("ROLE")[0] == b"master"
            and int(n.cmd("CLUSTER", "COUNTKEYSINSLOT", slot)) > 0
        )
        # Replicated before the kill: the replica holds every job.
        replica = next(
            n for n in cluster.nodes
            if n.cmd("ROLE")[0] == b"slave" and int(n.cmd("ROLE")[2]) == owner.port
        )
        assert until(lambda: int(replica.cmd("DBSIZE")) == 301, timeout=20)  # 300 rows and pending
        worker = echomq.Worker(client, "failover", lambda job: time.sleep(0.005), concurrency=8, lease=2)
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        assert until(lambda: worker.counts["acked"] >= 50, timeout=20)
        owner.process.kill()
        owner.process.wait()

        def settled() -> bool:
            try:
                s = q.stats()
            except Exception:
                return False
            return (s["pending"], s["active"], s["scheduled"]) == (0, 0, 0)

        assert until(settled, timeout=90), worker.counts
        worker.stop()
        assert joined(t), "run() returned after stop()"
        states = [(q.job(i) or {}).get("state") for i in ids]
        assert states == ["done"] * 300, {s: states.count(s) for s in set(states)}
    finally:
        cluster.stop()


def move_slot(cluster: Cluster, slot: int, src: Server, dst: Server) -> None:
    """Moves `slot` from `src` to `dst` as `valkey-cli --cluster reshard` does: importing and
    migrating marks, the keys with MIGRATE, then the new owner everywhere."""
    src_id, dst_id = src.cmd("CLUSTER", "MYID"), dst.cmd("CLUSTER", "MYID")
    dst.cmd("CLUSTER", "SETSLOT", slot, "IMPORTING", src_id)
    src.cmd("CLUSTER", "SETSLOT", slot, "MIGRATING", dst_id)
    deadline = time.monotonic() + 60
    while True:
        assert time.monotonic() < deadline, "the slot's keys never all moved"
        keys = src.cmd("CLUSTER", "GETKEYSINSLOT", slot, 50)
        if not keys:
            break
        src.cmd("MIGRATE", "127.0.0.1", dst.port, "", 0, 5000, "KEYS", *keys)
        time.sleep(0.01)
    for n in cluster.nodes:
        n.cmd("CLUSTER", "SETSLOT", slot, "NODE", dst_id)


@pytest.mark.cluster
def test_a_worker_goes_on_through_a_slot_migration_of_its_queue(cluster: Cluster) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    q = echomq.Queue(client, "moving")
    ids = q.enqueue_many(b"job %d" % n for n in range(300))
    slot = int(cluster.nodes[0].cmd("CLUSTER", "KEYSLOT", "emq:{moving}:pending"))
    src = next(n for n in cluster.nodes if int(n.cmd("CLUSTER", "COUNTKEYSINSLOT", slot)) > 0)
    dst = next(n for n in cluster.nodes if n is not src)
    worker = echomq.Worker(client, "moving", lambda job: time.sleep(0.005), concurrency=8, lease=2)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    assert until(lambda: worker.counts["acked"] >= 50, timeout=20)
    move_slot(cluster, slot, src, dst)

    def all_done() -> bool:
        try:
            return all((q.job(i) or {}).get("state") == "done" for i in ids)
        except Exception:
            return False

    assert until(all_done, timeout=90), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert int(src.cmd("DBSIZE")) == 0, "everything moved"
