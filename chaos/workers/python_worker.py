"""The chaos harness's Python worker: the shipped ``echomq.Worker`` with its defaults (blocking
claims, renewals, ``EMQ.MACK`` settles) and ``wait_replicas=1``, on a ``RedisCluster`` as the
queue's worker ACL user, writing each ``on_event`` call to stdout as one JSON line for the
harness's history. The handler holds a job up to 60 ms and fails one in ten (``Retry``, 100 ms),
drawn from ``--seed``.

    python_worker.py --queue Q --user U --password P --nodes ip:port,... --seed S --name N --lease MS
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys
import threading
import time

import echomq
from redis.cluster import ClusterNode, RedisCluster

_out = threading.Lock()


def on_event(e: echomq.WorkerEvent) -> None:
    line = json.dumps(
        {
            "kind": e.kind,
            "worker": e.worker,
            "queue": e.queue,
            "id": e.id,
            "token": e.token,
            "sent_ns": e.sent_ns,
            "answered_ns": e.answered_ns,
            "outcome": e.outcome,
            "error": e.error,
            "action": e.action,
            "replicated": e.replicated,
        }
    )
    with _out:
        try:
            sys.stdout.write(line + "\n")
            sys.stdout.flush()
        except BrokenPipeError:
            # The harness gone (its end of the pipe closed): so is the worker.
            os._exit(0)


def main() -> None:
    p = argparse.ArgumentParser()
    for flag in ("--queue", "--user", "--password", "--nodes", "--name"):
        p.add_argument(flag, required=True)
    p.add_argument("--seed", type=int, required=True)
    p.add_argument("--lease", type=int, required=True, help="the lease, in ms")
    a = p.parse_args()
    rng = random.Random(a.seed)
    draws = threading.Lock()

    def handle(job: echomq.Job) -> None:
        with draws:
            hold, fail = rng.uniform(0, 0.06), rng.randrange(10) == 0
        time.sleep(hold)
        if fail:
            raise echomq.Retry(after=0.1, reason="one in ten fails")

    nodes = [ClusterNode(h, int(port)) for h, port in (n.rsplit(":", 1) for n in a.nodes.split(","))]
    client = RedisCluster(
        startup_nodes=nodes,
        username=a.user,
        password=a.password,
        # Past the blocking claim's second; a request to a node cut off fails in 3 s.
        socket_timeout=3,
        socket_connect_timeout=1,
    )
    echomq.Worker(
        client,
        a.queue,
        handle,
        lease=a.lease / 1000,
        shutdown_timeout=5,
        name=a.name,
        on_event=on_event,
        wait_replicas=1,
    ).run()


if __name__ == "__main__":
    main()
