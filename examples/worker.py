#!/usr/bin/env python3
"""An EchoMQ worker with the stock redis-py client: block on EMQ.CLAIM, process, ACK or FAIL.

    EMQ_PORT=6379 EMQ_QUEUE=orders python3 examples/worker.py

EMQ_LEASE_MS sets the lease (default 30000). With EMQ_IDLE_EXIT=1 it stops once no job arrived
for one BLOCK period (used by the tests).
"""
import os
import time

import redis

r = redis.Redis(host=os.environ.get("EMQ_HOST", "127.0.0.1"), port=int(os.environ.get("EMQ_PORT", "6379")))
queue = os.environ.get("EMQ_QUEUE", "orders")
lease_ms = int(os.environ.get("EMQ_LEASE_MS", "30000"))
idle_exit = os.environ.get("EMQ_IDLE_EXIT") == "1"


def handle(payload: bytes) -> None:
    if payload.startswith(b"slow"):
        time.sleep(1)
    if payload.startswith(b"fail"):
        raise ValueError("cannot process " + payload.decode(errors="replace"))


def settle(command: str, job_id: str, token: int, *extra):
    """EMQ.ACK or EMQ.FAIL; None if the lease ran out first and the job went back to the queue
    (another attempt has it now, or will)."""
    try:
        return r.execute_command(command, queue, job_id, token, *extra)
    except redis.ResponseError as e:
        if str(e).startswith("EMQLEASE"):
            return None
        raise


while True:
    # Up to 10 jobs under the lease, waiting in the server up to 2 s for one.
    jobs = r.execute_command("EMQ.CLAIM", queue, "COUNT", 10, "LEASE", lease_ms, "BLOCK", 2000)
    if jobs is None:
        if idle_exit:
            break
        continue
    for job_id, payload, token in jobs:
        job_id = job_id.decode()
        try:
            handle(payload)
        except Exception as e:
            outcome = settle("EMQ.FAIL", job_id, token, "ERROR", str(e))
            print(outcome.decode() if outcome else "lost", job_id, flush=True)
        else:
            print("done" if settle("EMQ.ACK", job_id, token) else "lost", job_id, flush=True)
