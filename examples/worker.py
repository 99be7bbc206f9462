#!/usr/bin/env python3
"""An EchoMQ worker on the ``echomq`` package (clients/python): a handler, and the package's
worker runtime around it (batched blocking claims, leases renewed while the handler runs,
ACK or FAIL with the traceback, graceful shutdown on SIGTERM or SIGINT).

    pip install ./clients/python
    EMQ_PORT=6379 EMQ_QUEUE=orders python3 examples/worker.py

EMQ_CONCURRENCY sets how many jobs run at once (default 4). With EMQ_IDLE_EXIT=1 it stops once
the queue has nothing pending, scheduled or running (the tests use it): a failing job is
retried with backoff until it is dead (`emq.max-attempts`), so that can take a while.
"""
import os
import sys
import threading
import time

import redis

import echomq

client = redis.Redis(host=os.environ.get("EMQ_HOST", "127.0.0.1"), port=int(os.environ.get("EMQ_PORT", "6379")))
queue = os.environ.get("EMQ_QUEUE", "orders")


def say(line: str) -> None:
    # One write a line: handlers run on several threads at once.
    sys.stdout.write(line + "\n")
    sys.stdout.flush()


def handle(job: echomq.Job) -> None:
    """A return acknowledges the job; an exception fails it (retried with backoff, then dead)."""
    if job.payload.startswith(b"fail"):
        say(f"fail {job.id}")
        raise ValueError("cannot process " + job.payload.decode(errors="replace"))
    say(f"ok {job.id}")


def stop_when_idle(worker: echomq.Worker) -> None:
    stats = echomq.Queue(client, queue).stats
    while True:
        time.sleep(0.5)
        counts = stats()
        if not (counts["pending"] or counts["scheduled"] or counts["active"]):
            worker.stop()
            return


worker = echomq.Worker(client, queue, handle, concurrency=int(os.environ.get("EMQ_CONCURRENCY", "4")))
if os.environ.get("EMQ_IDLE_EXIT") == "1":
    threading.Thread(target=stop_when_idle, args=(worker,), daemon=True).start()
worker.run()
print("settled", worker.counts["acked"], "acked,", worker.counts["failed"], "failed", flush=True)
