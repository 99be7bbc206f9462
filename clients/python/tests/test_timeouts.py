"""Timeouts against a real server: ``timeout`` at enqueue (and on a flow's jobs) bounds each
attempt from its claim, which writes the attempt's ``deadline``; a queue's ``limit(timeout=...)``
is the default for jobs without their own, set, reported and removed. Past the deadline a
renewal is refused ``EMQTIMEOUT`` (``EmqTimeout``), and the workers give the handler up as for a
cancel (test_cancel.py): the threaded worker sets ``job.timed_out`` and stops waiting for it,
the asyncio worker cancels its task; nothing is sent, the slot runs the next job, one
``timed_out`` event and count an attempt, and the server retries the job, then buries it, with
the error ``timeout``. No timed assertions: each wait is for a condition, with a generous
bound."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Dict, List, Optional

import pytest
import redis
import redis.asyncio

import echomq
from echomq import commands as cmd, leases
from echomq.aio import AsyncQueue, AsyncWorker
from echomq.flows import steps
from echomq.job import Job
from echomq.worker import Claiming
from conftest import Server, joined, until
from test_cancel import kinds, recorder, run_async, start, until_async

#: A long lease (a job is not run a lease after its claim was sent: ``Claiming.stale``), so a
#: loaded machine's stall does not lose a job, renewed in rounds of 0.3 s (``RENEW_EVERY``):
#: an attempt's end is heard of soon after its limit, ``TIMEOUT``.
LEASE = 10.0
RENEW_EVERY = 0.03
TIMEOUT = 0.3


def row(q: echomq.Queue, job_id: str) -> Dict[str, Any]:
    found = q.job(job_id)
    assert found is not None, job_id
    return found


def claim_one(q: echomq.Queue, job_id: str) -> int:
    """Claims `job_id` by hand, with a minute's lease: its token."""
    [[claimed, _, token]] = q.call("EMQ.CLAIM", "LEASE", 60_000)
    assert claimed.decode() == job_id
    return int(token)


def deadline_ms(job: Dict[str, Any]) -> int:
    """The ms of a row's ``deadline``, ``<unix-ms>:<token>``."""
    ms, _, token = job["deadline"].partition(":")
    assert int(token) == int(job["attempts"]), job
    return int(ms)


def test_a_jobs_timeout_is_in_its_row_and_its_claim_writes_the_deadline(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed")
    job_id = q.enqueue(b"x", timeout=1.5)
    job = row(q, job_id)
    assert (job["timeout"], job["state"]) == ("1500", "pending"), job
    assert "deadline" not in job, job
    claim_one(q, job_id)
    job = row(q, job_id)
    # The lease asked was a minute: it ends at the deadline, 1.5 s after the claim, at the latest.
    assert int(job["lease-deadline"]) <= deadline_ms(job), job
    plain = q.enqueue(b"y")
    claim_one(q, plain)
    assert "deadline" not in row(q, plain) and "timeout" not in row(q, plain)


def test_a_flows_jobs_carry_their_timeouts(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed-flow")
    tree = q.flow({"queue": "timed-flow", "payload": b"parent", "timeout": 60,
                   "children": [{"queue": "timed-parts", "payload": b"child", "timeout": 2}]})
    assert [s.timeout for s in steps(tree)] == [60, 2]
    assert tree.id is not None and tree.children[0].id is not None
    assert row(q, tree.id)["timeout"] == "60000"
    assert row(echomq.Queue(server.client(), "timed-parts"), tree.children[0].id)["timeout"] == "2000"
    chain = q.chain([{"queue": "timed-flow", "payload": b"1", "timeout": 0.5},
                     {"queue": "timed-flow", "payload": b"2"}])
    assert chain.id is not None and chain.children[0].id is not None
    assert "timeout" not in row(q, chain.id)
    assert row(q, chain.children[0].id)["timeout"] == "500"


def test_the_queues_timeout_is_set_reported_kept_and_removed(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed-queue")
    assert q.limit()["timeout"] is None
    assert q.stats()["timeout"] is None
    assert q.limit(timeout=60)["timeout"] == 60_000
    assert q.limit()["timeout"] == 60_000 and q.stats()["timeout"] == 60_000
    # Another limit set leaves the timeout as it is.
    limits = q.limit(concurrency=2)
    assert (limits["concurrency"], limits["timeout"]) == (2, 60_000), limits
    # A job without its own timeout takes the queue's at its claim.
    job_id = q.enqueue(b"x")
    claim_one(q, job_id)
    job = row(q, job_id)
    assert "timeout" not in job and int(job["lease-deadline"]) <= deadline_ms(job), job
    # None removes that limit alone, whichever it is; off removes every limit.
    limits = q.limit(timeout=None)
    assert (limits["concurrency"], limits["timeout"]) == (2, None), limits
    limits = q.limit(timeout=1, rate=5, per=2)
    assert (limits["concurrency"], limits["rate"], limits["timeout"]) == (2, 5, 1000), limits
    limits = q.limit(concurrency=None)
    assert (limits["concurrency"], limits["rate"], limits["timeout"]) == (None, 5, 1000), limits
    limits = q.limit(rate=None)
    assert (limits["rate"], limits["timeout"]) == (None, 1000), limits
    q.limit(concurrency=2)
    limits = q.limit(off=True)
    assert (limits["concurrency"], limits["timeout"]) == (None, None), limits
    later = q.enqueue(b"y")
    claim_one(q, later)
    assert "deadline" not in row(q, later)


def test_the_limits_arguments() -> None:
    assert cmd.limit("q") == ["EMQ.LIMIT", "q"]
    assert cmd.limit("q", timeout=2.5) == ["EMQ.LIMIT", "q", "TIMEOUT", 2500]
    assert cmd.limit("q", 3, timeout=None) == [
        "EMQ.LIMIT", "q", "CONCURRENCY", 3, "TIMEOUT", "OFF"
    ]
    # None removes any one limit; KEEP (the default) leaves it out.
    assert cmd.limit("q", None, None, None, False, cmd.KEEP) == [
        "EMQ.LIMIT", "q", "CONCURRENCY", "OFF", "RATE", "OFF"
    ]
    assert cmd.limit("q", rate=10, per=1.5) == ["EMQ.LIMIT", "q", "RATE", 10, "PER", 1500]


def enqueued_timeout(timeout: float) -> int:
    _, args = cmd.enqueue("q", echomq.Raw(), b"p", "JOB00000000001", None, None, None, None, None,
                          timeout=timeout)
    assert args[-2] == "TIMEOUT", args
    ms: int = args[-1]
    return ms


def test_a_timeout_is_sent_to_the_nearest_ms_and_one_under_half_a_ms_is_refused() -> None:
    assert [enqueued_timeout(t) for t in (0.25, 0.3, 0.0299, 0.0016, 0.0006, 1e-3)] == [
        250, 300, 30, 2, 1, 1
    ]
    assert cmd.limit("q", timeout=0.0299) == ["EMQ.LIMIT", "q", "TIMEOUT", 30]
    for under in (0.0004, 1e-9):
        with pytest.raises(ValueError, match="rounds to 0 ms"):
            enqueued_timeout(under)
        with pytest.raises(ValueError, match="rounds to 0 ms"):
            cmd.limit("q", timeout=under)


def test_the_async_queue_enqueues_and_limits_with_timeouts(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            q = AsyncQueue(client, "timed-async")
            job_id = await q.enqueue(b"x", timeout=3)
            assert ((await q.job(job_id)) or {})["timeout"] == "3000"
            assert (await q.limit(timeout=0.5))["timeout"] == 500
            assert (await q.limit(timeout=None))["timeout"] is None
        finally:
            await client.aclose()

    asyncio.run(main())


def test_a_renewal_past_the_deadline_is_typed_and_the_late_ack_is_stale(server: Server) -> None:
    q = echomq.Queue(server.client(), "timed-renew")
    job_id = q.enqueue(b"x", timeout=0.2)
    token = claim_one(q, job_id)
    deadline = deadline_ms(row(q, job_id))
    refused: Optional[echomq.EmqTimeout] = None
    while refused is None:
        try:
            ends = q.call("EMQ.RENEW", job_id, token, 60_000)
            assert ends <= deadline, "a renewal never passes the deadline"
        except echomq.EmqTimeout as e:
            refused = e
    assert isinstance(refused, echomq.EmqError) and isinstance(refused, redis.ResponseError)
    assert refused.code == "EMQTIMEOUT" and str(refused).startswith("EMQTIMEOUT"), refused
    # Once the server ended the attempt, a renewal is still EMQTIMEOUT, the late ack EMQLEASE.
    assert until(lambda: row(q, job_id)["state"] != "active"), row(q, job_id)
    with pytest.raises(echomq.EmqTimeout):
        q.call("EMQ.RENEW", job_id, token, 60_000)
    with pytest.raises(echomq.EmqLeaseLost):
        q.call("EMQ.ACK", job_id, token)
    job = row(q, job_id)
    assert (job["error"], job["timedout"]) == ("timeout", str(token)), job


def test_a_lease_ending_before_the_next_round_is_renewed_then() -> None:
    """The renewer's plan, without a server: a lease that ends before the next round (at the
    attempt's deadline) is renewed just past its end; one that outlasts the round waits for it."""
    claiming = Claiming("q", 1, 30.0, None, 1.0, 1 / 3, 1.0, "w", None)
    interval = claiming.renew_interval
    deadline, later = Job("JOB00000000001", b"", 1, "q"), Job("JOB00000000002", b"", 1, "q")
    now_ms = int(time.time() * 1000)
    next_round = time.monotonic() + interval
    assert claiming.renewed(deadline, time.time_ns(), now_ms + 2_000, next_round) is None
    assert claiming.renewed(later, time.time_ns(), now_ms + 30_000, next_round) is None
    # The one that outlasts the round has no renewal of its own: the round renews every job.
    assert deadline._renew_at is not None and later._renew_at is None
    assert leases.wake([deadline, later], next_round) == deadline._renew_at < next_round
    renew, after = leases.due([deadline, later], next_round, deadline._renew_at, interval)
    assert (renew, after) == ([deadline], next_round)
    renew, after = leases.due([deadline, later], next_round, next_round, interval)
    assert renew == [deadline, later] and after > next_round
    # A refusal ends its renewals: it is in no plan again.
    refusal = redis.ResponseError("EMQTIMEOUT the attempt ran past its deadline")
    assert claiming.renewed(deadline, time.time_ns(), refusal, next_round) == "timed_out"
    deadline._end("timed_out")
    assert deadline._renew_at is None and deadline.timed_out and not deadline.cancelled
    assert leases.due([deadline, later], next_round, next_round, interval)[0] == [later]
    assert leases.wake([deadline, later], next_round) == next_round


def test_a_clock_ahead_of_the_servers_renews_a_few_times_more_then_at_the_rounds() -> None:
    """A server clock 5 s behind the worker's answers lease ends that have passed here: each
    renewal before a round waits twice as long past that end, none past the next round, so an
    attempt has a few of them, then is left to the rounds, not renewed every moment."""
    now, answered_ns, interval = 1000.0, 1_700_000_000 * 10**9, 10.0
    passed = answered_ns // 10**6 - 5_000
    waits: List[float] = []
    while (at := leases.renew_at(passed, answered_ns, now, now + interval, len(waits))) is not None:
        waits.append(at - now)
    assert waits == pytest.approx([leases.LATE * 2**n for n in range(len(waits))])
    assert 5 <= len(waits) <= 12 and leases.LATE * 2 ** len(waits) >= interval, waits
    # A lease that ends before the round (the attempt's deadline): renewed LATE past its end.
    soon = leases.renew_at(answered_ns // 10**6 + 2_000, answered_ns, now, now + interval, 0)
    assert soon == pytest.approx(now + 2 + leases.LATE)
    assert leases.renew_at(answered_ns // 10**6 + 20_000, answered_ns, now, now + interval, 0) is None
    assert leases.renew_at(None, answered_ns, now, now + interval, 0) is None
    # The worker's side: the same bound, one job's early renewals counted on it.
    claiming = Claiming("q", 1, 30.0, None, 1.0, 1 / 3, 1.0, "w", None)
    job = Job("JOB00000000001", b"", 1, "q")
    next_round = time.monotonic() + claiming.renew_interval
    plans: List[float] = []
    while True:
        sent = time.time_ns()
        assert claiming.renewed(job, sent, sent // 10**6 - 5_000, next_round) is None
        if job._renew_at is None:
            break
        plans.append(job._renew_at)
        assert len(plans) <= 12, plans
    assert job._early == len(plans) >= 5 and plans == sorted(plans), plans


def timed_out_worker(server: Server, queue: str, handle: Any, on_event: Any) -> echomq.Worker:
    return echomq.Worker(
        server.client(), queue, handle, concurrency=1, lease=LEASE, renew_every=RENEW_EVERY,
        on_event=on_event,
    )


def test_a_sync_handler_past_its_timeout_is_given_up_retried_then_dead() -> None:
    server = Server(["--emq.max-attempts", "2", "--emq.backoff-base-ms", "10"])
    try:
        q = echomq.Queue(server.client(), "timed-sync")
        job_id = q.enqueue(b"slow", timeout=TIMEOUT)
        of, on_event = recorder()
        saw: List[Any] = []

        def handle(job: echomq.Job) -> bytes:
            if job.payload == b"next":
                return b"done"
            if job.attempt == 1:
                q.pause()  # the retry waits here until the test looked at it
            # A cooperative handler: it checks the flag and stops early.
            saw.append((job.attempt, until(lambda: job.timed_out, timeout=30), job.cancelled))
            return b"too late"

        worker = timed_out_worker(server, "timed-sync", handle, on_event)
        t = start(worker)
        assert until(lambda: worker.counts["timed_out"] == 1, timeout=30), worker.counts
        # The server ended the first attempt: a retry, with the error timeout.
        assert until(lambda: row(q, job_id)["state"] in ("scheduled", "pending")), row(q, job_id)
        job = row(q, job_id)
        assert (job["error"], job["timedout"], job["attempts"]) == ("timeout", "1", 1), job
        assert until(lambda: "handler_end" in kinds(of(job_id)), timeout=30), of(job_id)
        q.resume()
        assert until(lambda: worker.counts["timed_out"] == 2, timeout=30), worker.counts
        assert until(lambda: row(q, job_id)["state"] == "dead"), row(q, job_id)
        assert until(lambda: kinds(of(job_id)).count("handler_end") == 2, timeout=30)
        other = q.enqueue(b"next")
        assert until(lambda: worker.counts["acked"] == 1, timeout=30), worker.counts
        worker.stop()
        assert joined(t), "run() returned after stop()"
        assert saw == [(1, True, False), (2, True, False)], saw
        each = ["claim", "handler_start", "timed_out", "handler_end"]
        assert kinds(of(job_id)) == each + each, of(job_id)
        for token in (1, 2):
            refused = [e for e in of(job_id) if e.token == token and e.outcome == "refused"]
            assert [e.kind for e in refused] == ["renew"], refused
            assert (refused[0].error or "").startswith("EMQTIMEOUT"), refused
        assert worker.counts == {
            "acked": 1, "failed": 0, "retried": 0, "lost": 0, "cancelled": 0, "timed_out": 2,
        }, worker.counts
        job = row(q, job_id)
        assert (job["state"], job["error"], job["timedout"]) == ("dead", "timeout", "2"), job
        assert row(q, other)["state"] == "done"
    finally:
        server.stop()


def test_a_sync_handler_that_ignores_its_timeout_does_not_hold_its_slot(server: Server) -> None:
    server.cmd("CONFIG", "SET", "emq.max-attempts", "1")
    q = echomq.Queue(server.client(), "timed-ignored")
    stuck = q.enqueue(b"stuck", timeout=TIMEOUT)
    of, on_event = recorder()
    started = threading.Event()
    release = threading.Event()
    order: List[str] = []

    def handle(job: echomq.Job) -> bytes:
        if job.payload == b"stuck":
            started.set()
            # Ignores job.timed_out: runs on until the test lets it go, then returns a result
            # that must never be sent.
            assert release.wait(60)
            order.append("stuck returned")
            return b"too late"
        order.append(job.payload.decode())
        return b"ok"

    # One slot: the next jobs run only once the worker stopped waiting for the stuck handler.
    worker = timed_out_worker(server, "timed-ignored", handle, on_event)
    t = start(worker)
    assert started.wait(30)
    later = q.enqueue_many([b"next 1", b"next 2"])
    assert until(lambda: worker.counts["acked"] == 2, timeout=30), worker.counts
    assert order == ["next 1", "next 2"], order
    assert until(lambda: row(q, stuck)["state"] == "dead"), row(q, stuck)
    release.set()
    assert until(lambda: "handler_end" in kinds(of(stuck)), timeout=30), of(stuck)
    assert q.enqueue(b"last") and until(lambda: worker.counts["acked"] == 3, timeout=30)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert order == ["next 1", "next 2", "stuck returned", "last"], order
    assert kinds(of(stuck)) == ["claim", "handler_start", "timed_out", "handler_end"], of(stuck)
    assert not [e for e in of(stuck) if e.kind == "settle"]
    assert worker.counts == {
        "acked": 3, "failed": 0, "retried": 0, "lost": 0, "cancelled": 0, "timed_out": 1,
    }, worker.counts
    for job_id in later:
        assert row(q, job_id)["state"] == "done"
    stats = q.stats()
    assert (stats["dead"], stats["active"], stats["pending"]) == (1, 0, 0), stats
    job = row(q, stuck)
    assert (job["error"], job["timedout"]) == ("timeout", "1"), job


def test_an_async_handler_past_its_timeout_has_its_task_cancelled(server: Server) -> None:
    server.cmd("CONFIG", "SET", "emq.max-attempts", "1")
    of, on_event = recorder()

    async def body(q: AsyncQueue, client: Any) -> None:
        job_id = await q.enqueue(b"x", timeout=TIMEOUT)
        stopped: List[Any] = []

        async def handle(job: echomq.Job) -> None:
            if job.payload == b"next":
                return
            try:
                await asyncio.sleep(600)
            except asyncio.CancelledError as e:
                stopped.append((job.timed_out, job.cancelled, str(e)))
                raise

        worker = AsyncWorker(client, "timed-async", handle, concurrency=1, lease=LEASE,
                             renew_every=RENEW_EVERY, on_event=on_event)
        task = asyncio.create_task(worker.run())
        assert await until_async(lambda: len(stopped) == 1), of(job_id)
        other = await q.enqueue(b"next")
        assert await until_async(lambda: worker.counts["acked"] == 1), worker.counts
        worker.stop()
        await asyncio.wait_for(task, 30)
        [(timed_out, cancelled, reason)] = stopped
        assert (timed_out, cancelled) == (True, False)
        assert "EMQTIMEOUT" in reason, reason
        assert kinds(of(job_id)) == ["claim", "handler_start", "timed_out", "handler_end"]
        end = [e for e in of(job_id) if e.kind == "handler_end"][0]
        assert (end.error or "").startswith("CancelledError"), end
        assert worker.counts == {
            "acked": 1, "failed": 0, "retried": 0, "lost": 0, "cancelled": 0, "timed_out": 1,
        }, worker.counts
        assert (await q.job(other) or {})["state"] == "done"
        for _ in range(1500):  # the server's timer ends the attempt (a bound, not a measure)
            job = await q.job(job_id)
            if job is None or job["state"] != "active":
                break
            await asyncio.sleep(0.02)
        assert job is not None and (job["state"], job["error"]) == ("dead", "timeout"), job

    run_async(server, "timed-async", body)
