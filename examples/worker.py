#!/usr/bin/env python3
"""An EchoMQ worker with the stock redis-py client: block on EMQ.CLAIM, process, ACK or FAIL.

    EMQ_PORT=6379 EMQ_QUEUE=orders python3 examples/worker.py

With EMQ_IDLE_EXIT=1 it stops once no job arrived for one BLOCK period (used by the tests).
"""
import os

import redis

r = redis.Redis(host=os.environ.get("EMQ_HOST", "127.0.0.1"), port=int(os.environ.get("EMQ_PORT", "6379")))
queue = os.environ.get("EMQ_QUEUE", "orders")
idle_exit = os.environ.get("EMQ_IDLE_EXIT") == "1"


def handle(payload: bytes) -> None:
    if payload.startswith(b"fail"):
        raise ValueError("cannot process " + payload.decode(errors="replace"))


while True:
    # Up to 10 jobs under a 30 s lease, waiting in the server up to 2 s for one.
    jobs = r.execute_command("EMQ.CLAIM", queue, "COUNT", 10, "LEASE", 30000, "BLOCK", 2000)
    if jobs is None:
        if idle_exit:
            break
        continue
    for job_id, payload, token in jobs:
        job_id = job_id.decode()
        try:
            handle(payload)
            r.execute_command("EMQ.ACK", queue, job_id, token)
            print("done", job_id, flush=True)
        except Exception as e:
            outcome = r.execute_command("EMQ.FAIL", queue, job_id, token, "ERROR", str(e))
            print(outcome.decode(), job_id, flush=True)
