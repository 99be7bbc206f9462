"""The clients the package claims: ``redis.cluster.RedisCluster`` on a three-primary cluster,
whose queues live on every node, and valkey-py's ``valkey.Valkey``."""

from __future__ import annotations

import threading
import time
from typing import Any, List

import redis.cluster
import valkey

import echomq
from conftest import Cluster, Server


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
        t.join(5)
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
    t.join(5)
    assert got == [job_id]
    job = q.job(job_id)
    assert job is not None and job["state"] == "done"
