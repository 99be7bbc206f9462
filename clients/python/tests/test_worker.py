"""The worker runtime against a real server: concurrency, acks with results, failures with
their traceback, retries, leases renewed while a handler runs, a lost lease never acked, and a
graceful stop."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, List, Tuple, Type

import pytest
import redis.asyncio

import echomq
from echomq.aio import AsyncWorker
from conftest import Server, joined, until


def start(worker: echomq.Worker) -> threading.Thread:
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    return t


def start_catching(worker: echomq.Worker) -> Tuple[threading.Thread, List[BaseException]]:
    """``run`` on a thread of its own, and what it raised (empty while it has raised nothing)."""
    raised: List[BaseException] = []

    def target() -> None:
        try:
            worker.run()
        except BaseException as e:
            raised.append(e)

    t = threading.Thread(target=target, daemon=True)
    t.start()
    return t, raised


def test_a_worker_runs_every_job_once_up_to_its_concurrency(server: Server) -> None:
    q = echomq.Queue(server.client(), "work")
    q.enqueue_many(b"job %d" % n for n in range(200))
    seen: List[bytes] = []
    running = [0, 0]  # now, most
    lock = threading.Lock()
    # Eight at a time, all eight in at once: each handler waits for seven others.
    rounds = threading.Barrier(8, timeout=30)

    def handle(job: echomq.Job) -> bytes:
        with lock:
            running[0] += 1
            running[1] = max(running[1], running[0])
        rounds.wait()
        with lock:
            running[0] -= 1
            seen.append(job.payload)
        return b"done " + bytes(job.payload)

    worker = echomq.Worker(server.client(), "work", handle, concurrency=8, lease=5)
    t = start(worker)
    assert until(lambda: worker.counts["acked"] == 200, timeout=60), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert sorted(seen) == sorted(b"job %d" % n for n in range(200))
    assert running[1] == 8, running
    stats = q.stats()
    assert (stats["pending"], stats["active"]) == (0, 0)


def test_a_failure_keeps_the_traceback_and_retry_sets_the_delay(server: Server) -> None:
    # A backoff of a minute: with the default second, a slow machine could see the failed job
    # come due and be claimed again before the worker stops.
    server.client().config_set("emq.backoff-base-ms", 60_000)
    q = echomq.Queue(server.client(), "fail")
    broken = q.enqueue(b"broken")
    later = q.enqueue(b"later")

    def handle(job: echomq.Job) -> None:
        if job.payload == b"broken":
            raise ValueError("no stock for sku 42")
        raise echomq.Retry(after=30, reason="upstream busy")

    worker = echomq.Worker(server.client(), "fail", handle)
    before = int(time.time() * 1000)
    t = start(worker)
    assert until(lambda: worker.counts["failed"] + worker.counts["retried"] == 2)
    after = int(time.time() * 1000) + 1
    worker.stop()
    assert joined(t), "run() returned after stop()"
    failed = q.job(broken)
    # Waiting for its retry in `schedule`, for the backoff.
    assert failed is not None and failed["state"] == "scheduled"
    assert failed["attempts"] == 1
    assert "ValueError: no stock for sku 42" in failed["error"]
    assert "Traceback" in failed["error"]
    retried = q.job(later)
    assert retried is not None and retried["error"] == "upstream busy"
    # Due 30 s after the failure, which came between `before` and `after` (one clock).
    assert before + 30_000 <= int(retried["due"]) <= after + 30_000, (before, retried["due"], after)


def test_a_worker_s_backoff_is_its_own_wait_and_without_one_the_server_s(server: Server) -> None:
    server.client().config_set("emq.backoff-base-ms", 3_600_000)

    def boom(job: echomq.Job) -> None:
        raise ValueError("no")

    async def aboom(job: echomq.Job) -> None:
        raise ValueError("no")

    def due_after(queue: str, make: Callable[[str], None]) -> Tuple[int, int]:
        """How long after its failure the failed job of `queue`, failed by `make`, is due (ms):
        at least (counted from after it) and at most (from before it)."""
        q = echomq.Queue(server.client(), queue)
        job_id = q.enqueue(b"boom")
        before = int(time.time() * 1000)
        make(queue)
        row = q.job(job_id)
        assert row is not None and row["state"] == "scheduled", row
        return int(row["due"]) - int(time.time() * 1000), int(row["due"]) - before

    def threaded(**options: Any) -> Callable[[str], None]:
        def run(queue: str) -> None:
            worker = echomq.Worker(server.client(), queue, boom, **options)
            t = start(worker)
            assert until(lambda: worker.counts["failed"] == 1)
            worker.stop()
            assert joined(t)
        return run

    def awaited(**options: Any) -> Callable[[str], None]:
        def run(queue: str) -> None:
            async def main() -> None:
                client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
                worker = AsyncWorker(client, queue, aboom, **options)
                task = asyncio.create_task(worker.run())
                while worker.counts["failed"] < 1:
                    await asyncio.sleep(0.02)
                worker.stop()
                await asyncio.wait_for(task, 5)
                await client.aclose()
            asyncio.run(main())
        return run

    # Without a backoff of its own the server's applies: an hour.
    least, most = due_after("server-backoff", threaded())
    assert least > 3_000_000, least
    least, most = due_after("server-backoff-aio", awaited())
    assert least > 3_000_000, least
    # Its own: ten minutes, or a function of the attempt (1) and the error.
    for queue, make in [
        ("own-backoff", threaded(backoff=600)),
        ("own-backoff-aio", awaited(backoff=600)),
        ("own-function", threaded(backoff=lambda attempt, e: 300.0 * attempt * 2)),
    ]:
        least, most = due_after(queue, make)
        assert least <= 600_000 <= most, (queue, least, most)
    # A function that raises, or gives no number: logged, and the server's backoff applies.
    for queue, make in [
        ("raising", threaded(backoff=lambda attempt, e: 1 / 0)),
        ("raising-aio", awaited(backoff=lambda attempt, e: float("nan"))),
    ]:
        least, most = due_after(queue, make)
        assert least > 3_000_000, (queue, least)
    with pytest.raises(ValueError):
        echomq.Worker(server.client(), "bad", boom, backoff=-1)


def test_a_long_handler_keeps_its_lease(server: Server) -> None:
    q = echomq.Queue(server.client(), "long")
    job_id = q.enqueue(b"slow")
    renewals: List[echomq.WorkerEvent] = []
    renewed = threading.Semaphore(0)

    def on_event(event: echomq.WorkerEvent) -> None:
        if event.kind == "renew":
            renewals.append(event)
            renewed.release()

    def handle(job: echomq.Job) -> None:
        # Outlives its lease three renewals over.
        for _ in range(3):
            assert renewed.acquire(timeout=20), "no renewal while the handler ran"

    worker = echomq.Worker(server.client(), "long", handle, lease=0.4, on_event=on_event)
    t = start(worker)
    assert until(lambda: worker.counts["acked"] == 1)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert worker.counts["lost"] == 0
    assert len(renewals) >= 3 and all(e.outcome == "ok" for e in renewals), renewals
    assert server.client().hget(f"emq:{{long}}:job:{job_id}", "attempts") == b"1"


def test_a_handler_s_progress_reaches_the_row_while_it_runs(server: Server) -> None:
    q = echomq.Queue(server.client(), "progress")
    job_id = q.enqueue(b"import")
    seen = threading.Event()

    def handle(job: echomq.Job) -> None:
        job.progress = b'{"rows":500}'
        seen.wait(10)  # runs until the test has read the progress from the row

    worker = echomq.Worker(server.client(), "progress", handle, lease=0.3)
    t = start(worker)
    key = f"emq:{{progress}}:job:{job_id}"
    try:
        shown = until(lambda: server.cmd("HGET", key, "progress") == b'{"rows":500}')
        state = server.cmd("HGET", key, "state")
    finally:
        seen.set()
    assert shown, "the row shows the progress"
    assert state == b"active", "while the job ran"
    assert until(lambda: worker.counts["acked"] == 1)
    worker.stop()
    assert joined(t)


def test_a_lost_lease_is_reported_and_never_acked(server: Server) -> None:
    q = echomq.Queue(server.client(), "stolen")
    job_id = q.enqueue(b"x")
    admin = server.client()
    lost = threading.Event()
    admin_cmd: Any = admin

    def take_over(job_id: str) -> bool:
        # The lease ends now (again, should a renewal have come between), and a claim by
        # someone else takes the job.
        admin.zadd("emq:{stolen}:active", {job_id: 0}, xx=True)
        return bool(admin_cmd.execute_command("EMQ.CLAIM", "stolen") != [])

    def handle(job: echomq.Job) -> None:
        # The lease runs out under the handler (as on a stalled worker), another attempt takes
        # the job, and this handler hears of it through its job.
        assert until(lambda: take_over(job.id))
        if until(job.lease_lost.is_set, timeout=5):
            lost.set()

    # One slot: while the handler runs, the worker claims nothing, so the only other attempt
    # is the one the handler's claim takes.
    worker = echomq.Worker(server.client(), "stolen", handle, concurrency=1, lease=0.3)
    t = start(worker)
    assert until(lambda: worker.counts["lost"] == 1)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert lost.is_set()
    assert worker.counts["acked"] == 0
    assert server.client().hget(f"emq:{{stolen}}:job:{job_id}", "attempts") == b"2"
    assert server.client().hget(f"emq:{{stolen}}:job:{job_id}", "state") == b"active"


def test_a_job_whose_lease_ran_out_before_its_handler_started_is_not_run(server: Server) -> None:
    q = echomq.Queue(server.client(), "stalled")
    job_id = q.enqueue(b"x")
    runs: List[int] = []
    events: List[echomq.WorkerEvent] = []

    def on_event(e: echomq.WorkerEvent) -> None:
        events.append(e)
        # The worker stalls between its first claim and the handler (as a frozen process
        # does): the lease runs out meanwhile and the job goes back to the queue.
        if e.kind == "claim" and e.token == 1:
            time.sleep(0.6)

    worker = echomq.Worker(
        server.client(), "stalled", lambda job: runs.append(job.attempt), lease=0.3,
        on_event=on_event,
    )
    t = start(worker)
    assert until(lambda: server.client().hget(f"emq:{{stalled}}:job:{job_id}", "state") == b"done")
    worker.stop()
    assert joined(t), "run() returned after stop()"
    # The first attempt's handler never ran; the second's did, and was acked.
    assert runs == [2]
    assert (worker.counts["acked"], worker.counts["lost"]) == (1, 1)
    kinds = [(e.kind, e.token) for e in events if e.id == job_id and e.kind != "renew"]
    assert kinds == [
        ("claim", 1), ("claim", 2), ("handler_start", 2), ("handler_end", 2), ("settle", 2)
    ], kinds


def test_a_claim_refused_for_want_of_memory_is_waited_out(server: Server) -> None:
    q = echomq.Queue(server.client(), "full")
    job_id = q.enqueue(b"x")
    admin = server.client()
    admin.config_set("maxmemory", 1)
    try:
        worker = echomq.Worker(server.client(), "full", lambda job: None, lease=5)
        t, raised = start_catching(worker)
        time.sleep(0.5)
        # Each claim is refused with OOM meanwhile: the worker waits, it does not stop.
        assert t.is_alive() and raised == [], raised
    finally:
        admin.config_set("maxmemory", 0)
    assert until(lambda: server.client().hget(f"emq:{{full}}:job:{job_id}", "state") == b"done")
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert raised == [] and worker.counts["acked"] == 1


def test_stop_lets_running_handlers_finish_and_acks_them(server: Server) -> None:
    q = echomq.Queue(server.client(), "stop")
    q.enqueue_many([b"a", b"b"])
    started = threading.Event()

    def handle(job: Any) -> None:
        started.set()
        time.sleep(0.5)

    worker = echomq.Worker(server.client(), "stop", handle, concurrency=2)
    t = start(worker)
    assert started.wait(5)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert worker.counts["acked"] == 2
    assert q.stats()["active"] == 0


def test_a_handler_past_the_shutdown_timeout_is_left_to_its_lease(server: Server) -> None:
    q = echomq.Queue(server.client(), "timeout")
    job_id = q.enqueue(b"forever")
    started = threading.Event()
    release = threading.Event()

    def handle(job: Any) -> None:
        started.set()
        release.wait(10)

    worker = echomq.Worker(server.client(), "timeout", handle, shutdown_timeout=0.2, lease=30)
    t = start(worker)
    assert started.wait(5)
    worker.stop()
    assert joined(t), "run() returned after stop()"
    release.set()
    time.sleep(0.2)
    job = q.job(job_id)
    assert job is not None and job["state"] == "active", "not acked after the shutdown"
    assert worker.counts["acked"] == 0


def test_the_servers_active_count_never_exceeds_the_concurrency(server: Server) -> None:
    q = echomq.Queue(server.client(), "bounded")
    q.enqueue_many(b"x" for _ in range(60))
    # Three handlers at a time, all three in at once: each reads the server's active count
    # while the three are in (between the barriers). A slot is freed only once its job's
    # outcome is in, so each read counts exactly the three running jobs.
    inside = threading.Barrier(3, timeout=30)
    counted = threading.Barrier(3, timeout=30)
    active: List[int] = []
    lock = threading.Lock()

    def handle(job: echomq.Job) -> None:
        inside.wait()
        n = int(server.cmd("ZCARD", "emq:{bounded}:active"))
        with lock:
            active.append(n)
        counted.wait()

    worker = echomq.Worker(server.client(), "bounded", handle, concurrency=3)
    t = start(worker)
    assert until(lambda: worker.counts["acked"] == 60, timeout=60), worker.counts
    worker.stop()
    assert joined(t), "run() returned after stop()"
    assert active == [3] * 60, active


def test_an_exception_is_retried_then_the_job_is_dead() -> None:
    server = Server(["--emq.max-attempts", "3", "--emq.backoff-base-ms", "10"])
    try:
        q = echomq.Queue(server.client(), "dies")
        job_id = q.enqueue(b"x")
        calls: List[int] = []

        def handle(job: echomq.Job) -> None:
            calls.append(job.attempt)
            raise KeyError("missing")

        worker = echomq.Worker(server.client(), "dies", handle)
        t = start(worker)
        assert until(lambda: (q.job(job_id) or {}).get("state") == "dead")
        worker.stop()
        assert joined(t), "run() returned after stop()"
        assert calls == [1, 2, 3]
        job = q.job(job_id)
        assert job is not None and "KeyError: 'missing'" in job["error"]
        assert q.stats()["dead"] == 1
    finally:
        server.stop()


def test_a_connection_reset_in_mid_read_is_tried_again_and_a_plain_value_error_is_not() -> None:
    from echomq._retry import transient

    # What redis-py's socket reader raises when the peer resets the connection in mid-read.
    assert transient(ValueError("I/O operation on closed file."))
    assert not transient(ValueError("no stock for sku 42"))


def test_a_reply_reader_torn_down_by_another_thread_is_tried_again_and_a_callers_bug_is_not() -> None:
    from redis._parsers import _RESP2Parser

    from echomq._retry import transient

    # A parser whose connection was disconnected in mid-redirect has no buffer to read from.
    parser = _RESP2Parser(socket_read_size=65536)  # type: ignore[no-untyped-call]
    try:
        parser.read_response()
    except AttributeError as e:
        torn = e
    assert transient(torn)
    try:
        None.readline()  # type: ignore[attr-defined]
    except AttributeError as e:
        mine = e
    assert not transient(mine)


def test_a_cluster_map_refresh_that_finds_no_node_for_a_moment_is_tried_again() -> None:
    from redis.exceptions import RedisClusterException

    from echomq._retry import transient

    # What redis-py's cluster client raises when a primary fails while it refreshes the slots.
    assert transient(
        RedisClusterException(
            "Redis Cluster cannot be connected. Please provide at least one reachable node: "
            "I/O operation on closed file."
        )
    )
    # A cluster client given a command it cannot route is not a moment's failure.
    assert not transient(RedisClusterException("No way to dispatch this command to Redis Cluster."))


def test_a_payload_that_does_not_decode_fails_its_job_and_the_worker_goes_on() -> None:
    server = Server(["--emq.max-attempts", "2", "--emq.backoff-base-ms", "10"])
    try:
        # Enqueued raw, past the Json serializer: one payload is not JSON.
        raw = echomq.Queue(server.client(), "undecodable")
        first = raw.enqueue_many([b'{"n": 1}', b'{"n": 2}'])
        bad = raw.enqueue(b"{not json")
        last = raw.enqueue(b'{"n": 3}')
        seen: List[int] = []
        worker = echomq.Worker(
            server.client(), "undecodable", lambda job: seen.append(job.payload["n"]),
            serializer=echomq.Json(),
        )
        t, raised = start_catching(worker)
        assert until(lambda: (raw.job(bad) or {}).get("state") == "dead"), (raised, worker.counts)
        assert until(lambda: worker.counts["acked"] == 3), (raised, worker.counts)
        worker.stop()
        assert joined(t), "run() returned after stop()"
        assert raised == []
        assert sorted(seen) == [1, 2, 3]
        dead = raw.job(bad)
        assert dead is not None and dead["attempts"] == 2 and "JSONDecodeError" in dead["error"]
        assert worker.counts["failed"] == 2
        for job_id in [*first, last]:
            job = raw.job(job_id)
            assert job is not None and (job["state"], job["attempts"]) == ("done", 1), job
    finally:
        server.stop()


class Halt(BaseException):
    """A BaseException that is not an Exception, as a handler might raise."""


@pytest.mark.parametrize("fatal", [KeyboardInterrupt, SystemExit, Halt])
def test_a_handler_raising_a_base_exception_fails_its_job_and_stops_the_worker(
    server: Server, fatal: Type[BaseException]
) -> None:
    server.client().config_set("emq.backoff-base-ms", 60_000)
    q = echomq.Queue(server.client(), "fatal")
    other, stopper, never = q.enqueue_many([b"other", b"stop", b"never"])

    def handle(job: echomq.Job) -> None:
        if job.payload == b"stop":
            raise fatal("out")
        # Returns once the other job's failure is in: the worker has stopped claiming by then.
        assert until(lambda: (q.job(stopper) or {}).get("state") == "scheduled")

    worker = echomq.Worker(server.client(), "fatal", handle, concurrency=2)
    t, raised = start_catching(worker)
    assert joined(t), "the worker stopped by itself"
    assert [type(e) for e in raised] == [fatal], raised
    failed = q.job(stopper)
    assert failed is not None and failed["state"] == "scheduled" and failed["attempts"] == 1
    assert f"{fatal.__name__}: out" in failed["error"]
    assert (q.job(other) or {}).get("state") == "done", "the running handler finished and was acked"
    assert (q.job(never) or {}).get("state") == "pending", "nothing claimed after the stop"
    assert (worker.counts["acked"], worker.counts["failed"]) == (1, 1)


def test_a_claim_refused_for_good_still_sends_the_running_jobs_outcomes(server: Server) -> None:
    q = echomq.Queue(server.client(), "revoked")
    first, second = q.enqueue_many([b"revoke", b"wait"])
    admin: Any = server.client()

    def handle(job: echomq.Job) -> None:
        if job.payload == b"revoke":
            # The next claim is refused for good (NOPERM); settling stays allowed.
            admin.execute_command("ACL", "SETUSER", "default", "-emq.claim")
            return
        # Still running when the claim loop fails: returns once the worker stopped claiming.
        assert until(worker._stopping.is_set, timeout=20)

    worker = echomq.Worker(server.client(), "revoked", handle, concurrency=2)
    t, raised = start_catching(worker)
    assert joined(t), "run() raised once the running job was settled"
    assert [type(e).__name__ for e in raised] == ["NoPermissionError"], raised
    assert worker.counts["acked"] == 2
    assert [(q.job(i) or {}).get("state") for i in (first, second)] == ["done", "done"]
