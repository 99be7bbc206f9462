"""Each attempt counted once, against a real server, where a worker's settle and its renewal
race past an attempt's deadline: the handler returned and its outcome is on its way as a
renewal sent before learns ``EMQTIMEOUT``. The settle is refused ``EMQLEASE`` (the server ended
the attempt), and whichever reply the worker takes in first, the attempt is counted
``timed_out`` once, never ``lost`` too, with one ``timed_out`` event. No timing: the tests drive
the workers' own steps in each order (the settle's event hook is where a reply taken in
between goes), once the server ended each attempt."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Dict, List

import pytest
import redis
import redis.asyncio

import echomq
from echomq import commands as cmd, worker as worker_module
from echomq._replicas import pipelined
from echomq.aio import AsyncWorker
from echomq.job import Job
from echomq.worker import Claiming
from conftest import Server, until
from test_cancel import recorder

#: Long enough that nothing here depends on it: the tests renew by hand.
LEASE = 30.0
#: Every count, none of them yet.
NONE = {"acked": 0, "failed": 0, "retried": 0, "lost": 0, "cancelled": 0, "timed_out": 0}


async def handle(job: echomq.Job) -> None:
    """An ``AsyncWorker``'s handler, never run here: the tests drive the worker's steps."""


def past_deadline(server: Server, worker: Claiming, queue: str) -> Job:
    """A job with a short timeout, claimed with `worker`'s claim, its handler returned (its
    outcome on the way), once the server ended the attempt at its deadline."""
    q = echomq.Queue(server.client(), queue)
    job_id = q.enqueue(b"x", timeout=0.05)
    sent = time.time_ns()
    [job] = worker.claimed(queue, server.cmd(*worker.claim_args(queue, 1)), sent)
    assert job.id == job_id
    assert until(lambda: (q.job(job_id) or {}).get("state") != "active"), q.job(job_id)
    job._phase = "ended"
    return job


def hear_timeout(server: Server, worker: Any, job: Job) -> None:
    """The renewer's step for `job` (``Worker`` or ``AsyncWorker``): a renewal, answered
    ``EMQTIMEOUT``, taken in."""
    sent = time.time_ns()
    try:
        reply = server.cmd(*worker.renew_args(job))
    except redis.ResponseError as e:
        reply = e
    why = worker.renewed(job, sent, reply, time.monotonic() + worker.renew_interval)
    assert why == "timed_out", reply
    worker._ended(job, why)


def ended_once(events: List[echomq.WorkerEvent], job: Job, kinds: List[str]) -> None:
    """`job`'s events, renewals aside, are `kinds`: one ``timed_out`` among them."""
    assert [e.kind for e in events if e.id == job.id and e.kind != "renew"] == kinds, events
    assert job.timed_out and not job.cancelled


def test_a_settle_and_a_renewal_racing_past_the_deadline_count_the_attempt_once(
    server: Server,
) -> None:
    of, record = recorder()
    #: Jobs whose renewal's reply is taken in once their settle's reply came, before it counts.
    between: Dict[str, Job] = {}

    def on_event(event: echomq.WorkerEvent) -> None:
        record(event)
        if event.kind == "settle" and event.id in between:
            hear_timeout(server, worker, between.pop(event.id))

    worker = echomq.Worker(server.client(), "raced", lambda job: None, lease=LEASE,
                           on_event=on_event)
    # The settle's refusal first (counted lost), then the renewal's EMQTIMEOUT: moved.
    first = past_deadline(server, worker, "raced")
    worker._settle([(first, "acked", cmd.ACK, [])])
    assert worker.counts == {**NONE, "lost": 1}, worker.counts
    hear_timeout(server, worker, first)
    assert worker.counts == {**NONE, "timed_out": 1}, worker.counts
    # The renewal's EMQTIMEOUT taken in while the settle's refusal is on its way: nothing more.
    second = past_deadline(server, worker, "raced")
    between[second.id] = second
    worker._settle([(second, "acked", cmd.ACK, [])])
    assert worker.counts == {**NONE, "timed_out": 2}, worker.counts
    # Heard of before the settle: nothing sent.
    third = past_deadline(server, worker, "raced")
    hear_timeout(server, worker, third)
    worker._settle([(third, "failed", cmd.FAIL, cmd.fail_options("late"))])
    # An end heard of again counts nothing, nor emits.
    worker._ended(first, "timed_out")
    assert worker.counts == {**NONE, "timed_out": 3}, worker.counts
    for job in (first, second):
        ended_once(of(job.id), job, ["claim", "settle", "timed_out"])
        [settle] = [e for e in of(job.id) if e.kind == "settle"]
        assert (settle.error or "").startswith("EMQLEASE"), settle
    ended_once(of(third.id), third, ["claim", "timed_out"])


def test_an_async_settle_and_a_renewal_racing_past_the_deadline_count_the_attempt_once(
    server: Server,
) -> None:
    of, record = recorder()
    between: Dict[str, Job] = {}
    worker: Any = None

    def on_event(event: echomq.WorkerEvent) -> None:
        record(event)
        if event.kind == "settle" and event.id in between:
            hear_timeout(server, worker, between.pop(event.id))

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            nonlocal worker
            worker = AsyncWorker(client, "raced-async", handle, lease=LEASE, on_event=on_event)
            first = past_deadline(server, worker, "raced-async")
            await worker._settle(first, "acked", cmd.ACK, [])
            assert worker.counts == {**NONE, "lost": 1}, worker.counts
            hear_timeout(server, worker, first)
            assert worker.counts == {**NONE, "timed_out": 1}, worker.counts
            second = past_deadline(server, worker, "raced-async")
            between[second.id] = second
            await worker._settle(second, "acked", cmd.ACK, [])
            assert worker.counts == {**NONE, "timed_out": 2}, worker.counts
            third = past_deadline(server, worker, "raced-async")
            hear_timeout(server, worker, third)
            await worker._settle(third, "acked", cmd.ACK, [])
            worker._ended(first, "timed_out")
            assert worker.counts == {**NONE, "timed_out": 3}, worker.counts
            for job in (first, second):
                ended_once(of(job.id), job, ["claim", "settle", "timed_out"])
            ended_once(of(third.id), third, ["claim", "timed_out"])
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_settle_is_not_sent_again_once_a_renewal_heard_the_attempt_end(
    server: Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The settle's first try is lost with the connection; a renewal hears ``EMQTIMEOUT``
    before the retry: the retry is not sent (it would be refused ``EMQLEASE``)."""
    of, record = recorder()
    lost: List[Job] = []

    def on_event(event: echomq.WorkerEvent) -> None:
        record(event)
        if event.kind == "settle" and event.outcome == "unknown":
            hear_timeout(server, worker, lost.pop())

    worker = echomq.Worker(server.client(), "raced-retry", lambda job: None, lease=LEASE,
                           on_event=on_event)
    job = past_deadline(server, worker, "raced-retry")
    lost.append(job)
    def lost_once(*args: Any) -> Any:
        monkeypatch.setattr(worker_module, "pipelined", pipelined)
        raise redis.ConnectionError("the connection was lost")

    monkeypatch.setattr(worker_module, "pipelined", lost_once)
    worker._settle([(job, "acked", cmd.ACK, [])])
    assert worker.counts == {**NONE, "timed_out": 1}, worker.counts
    ended_once(of(job.id), job, ["claim", "settle", "timed_out"])


def test_an_async_settle_is_not_sent_again_once_a_renewal_heard_the_attempt_end(
    server: Server,
) -> None:
    of, record = recorder()
    lost: List[Job] = []
    worker: Any = None

    def on_event(event: echomq.WorkerEvent) -> None:
        record(event)
        if event.kind == "settle" and event.outcome == "unknown":
            hear_timeout(server, worker, lost.pop())

    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        sent: Any = client.execute_command
        failures = [redis.ConnectionError("the connection was lost")]

        async def lost_once(*args: Any, **options: Any) -> Any:
            if args[0] == cmd.ACK and failures:
                raise failures.pop()
            return await sent(*args, **options)

        try:
            nonlocal worker
            worker = AsyncWorker(client, "raced-retry-async", handle, lease=LEASE,
                                 on_event=on_event)
            job = past_deadline(server, worker, "raced-retry-async")
            lost.append(job)
            client.execute_command = lost_once  # type: ignore[method-assign]
            await worker._settle(job, "acked", cmd.ACK, [])
            assert worker.counts == {**NONE, "timed_out": 1}, worker.counts
            ended_once(of(job.id), job, ["claim", "settle", "timed_out"])
        finally:
            await client.aclose()

    asyncio.run(main())


def test_the_count_of_an_attempt_moves_only_from_lost_to_the_servers_end() -> None:
    """``Claiming.tally`` alone: the first count stands, but a ``lost`` the server's end
    (heard of later) explains."""
    claiming = Claiming("q", 1, 30.0, None, 1.0, 1 / 3, 1.0, "w", None)
    jobs = [Job(f"JOB0000000000{n}", b"", 1, "q") for n in range(5)]
    for job, first, then in zip(jobs, ["lost", "lost", "timed_out", "acked", "cancelled"],
                                ["timed_out", "cancelled", "lost", "timed_out", "timed_out"]):
        claiming.tally(job, first)
        claiming.tally(job, then)
        claiming.tally(job, then)
    assert claiming.counts == {**NONE, "timed_out": 2, "cancelled": 2, "acked": 1}, claiming.counts
    assert [j._counted for j in jobs] == [
        "timed_out", "cancelled", "timed_out", "acked", "cancelled"
    ]
