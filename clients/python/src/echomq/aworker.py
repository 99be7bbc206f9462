"""``Worker`` for asyncio, over ``redis.asyncio`` (or any client whose ``execute_command`` is a
coroutine): handlers are coroutines, run as tasks, up to the worker's concurrency."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Awaitable, Callable, Dict, List, Optional, Set, Tuple

from . import commands as cmd
from . import leases, outbox, rounds, tracing
from ._replicas import arefresh, moved, pipelined_async, retryable
from ._retry import backoff, server_full, transient
from .aqueue import AsyncQueue
from .claiming import Backoff, Claiming, acheck_server, outcome
from .errors import EmqSpannedError, translate
from .events import Action, Ending, WorkerEvent, failure
from .job import Job
from .serializers import Serializer
from .signals import stop_on_signals


#: The message of the ``asyncio.CancelledError`` a handler whose attempt ended gets.
REASONS: Dict[Ending, str] = {
    "cancelled": "the job was cancelled (EMQCANCELLED)",
    "timed_out": "the attempt ran past its deadline (EMQTIMEOUT)",
}


def _on(loop: asyncio.AbstractEventLoop) -> bool:
    """Whether the calling thread is running `loop`."""
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


def _cancelled_from_outside(task: "Optional[asyncio.Task[Any]]") -> bool:
    """Whether the job's own task is being cancelled (``Task.cancelling``, Python 3.11 and
    later), not a task its handler awaited: the worker cancels one only once it marked it."""
    cancelling = getattr(task, "cancelling", None)
    return cancelling is not None and cancelling() > 0


class AsyncWorker(Claiming):
    """``echomq.Worker`` for asyncio: ``await handler(job)`` for each job, as a task, up to
    ``concurrency`` at once, leases renewed by a background task, stopped by ``stop()`` or, on
    the main thread's loop, SIGTERM and SIGINT. A payload that does not decode fails its job; a
    handler's ``BaseException`` that is not an ``Exception`` fails its job and stops the
    worker, and ``run`` raises it once the other running jobs are settled. A task delivers the
    queue's flow hand-overs, as ``Worker``'s thread does; a parent's handler reads its children
    with ``await job.achildren()``. ``name``, ``on_event``, ``wait_replicas`` and
    ``wait_timeout`` are ``Worker``'s. A partitioned queue is claimed as ``Worker`` claims
    one, with a task (and on a cluster its node's connections) a primary, its width read again
    each time a blocking claim times out.

    A job cancelled while it runs (``EMQ.CANCEL``; the next renewal or the settle answers
    ``EMQCANCELLED``) has its handler's task cancelled (``asyncio.CancelledError`` in the
    handler) and ``job.cancelled`` set; its slot is freed at once, even for a handler that
    swallows the cancellation, and nothing is sent for it. An attempt past its deadline (a
    renewal answers ``EMQTIMEOUT``) is given up the same way, with ``job.timed_out``."""

    def __init__(
        self,
        client: Any,
        queue: str,
        handler: Callable[[Job], Awaitable[Any]],
        concurrency: int = 16,
        lease: float = 30.0,
        batch: Optional[int] = None,
        block: float = 1.0,
        renew_every: float = 1 / 3,
        shutdown_timeout: float = 30.0,
        serializer: Optional[Serializer] = None,
        name: Optional[str] = None,
        on_event: Optional[Callable[[WorkerEvent], None]] = None,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        tracer_provider: Any = None,
        backoff: Optional[Backoff] = None,
    ) -> None:
        self.queue = AsyncQueue(
            client, queue, serializer, wait_replicas=wait_replicas, wait_timeout=wait_timeout,
            tracer_provider=tracer_provider,
        )
        self.handler = handler
        super().__init__(
            queue, concurrency, lease, batch, block, renew_every, shutdown_timeout, name, on_event,
            backoff,
        )
        #: The attempts in flight, by job id and attempt: an attempt claimed again while an
        #: earlier one still runs (its lease or deadline ran out) takes a slot of its own.
        self._running: Dict[Tuple[str, int], "asyncio.Task[None]"] = {}
        self._jobs: Dict[Tuple[str, int], Job] = {}
        #: The tasks of handlers whose attempt ended (cancelled, timed out) while they ran and
        #: not yet ended: no longer waited for, cancelled again when ``run`` ends.
        self._abandoned: Set["asyncio.Task[None]"] = set()
        self._stopping = asyncio.Event()
        self._room = asyncio.Event()
        #: Slots a partition's claim holds while it is on its way (``_reserve``).
        self._held = 0
        #: The queues claimed: the queue, or its partitions (their outboxes are swept).
        self._queues = [queue]
        #: A partition's ``AsyncQueue``, for its jobs' ``achildren``.
        self._partitions: Dict[str, AsyncQueue] = {}
        #: The loop ``run`` runs on, while it does: ``stop`` from another thread goes through it.
        self._loop: Optional[asyncio.AbstractEventLoop] = None

    def stop(self) -> None:
        """Stops the worker gracefully (``run`` returns once its running jobs are settled);
        safe from any thread."""
        loop = self._loop
        if loop is not None and not loop.is_closed() and not _on(loop):
            loop.call_soon_threadsafe(self.stop)
            return
        self._stopping.set()
        self._room.set()

    async def run(self) -> None:
        client = self.queue.client
        loop = self._loop = asyncio.get_running_loop()
        await acheck_server(client, self.queue.retries)
        renewer = asyncio.create_task(self._renew_loop())
        courier = asyncio.create_task(
            outbox.adeliver(
                client, lambda: self._queues, self._stopping, self._event,
                self.queue.wait_replicas, self.queue.wait_timeout_ms,
            )
        )
        # A signal's handler runs between two steps of whatever the loop runs: it only asks the
        # loop to stop the worker.
        restore = stop_on_signals(lambda: loop.call_soon_threadsafe(self.stop))
        try:
            try:
                await self._claim_loop()
            finally:
                # Even when claiming failed for good: the running jobs' outcomes are sent.
                self._stopping.set()
                await self._drain(loop.time() + self.shutdown_timeout)
        finally:
            # A handler still running now is left to its lease: its outcome is not sent.
            self._closed = True
            for task in [*self._running.values(), *self._abandoned]:
                task.cancel()
            renewer.cancel()
            courier.cancel()
            restore()
        if self._fatal is not None:
            raise self._fatal

    async def _drain(self, deadline: float) -> None:
        """Waits until no job runs, or `deadline` (the loop's time): a handler abandoned
        meanwhile (cancelled, timed out) is no longer one of them, nor waited for."""
        loop = asyncio.get_running_loop()
        while self._running and deadline > loop.time():
            self._room.clear()
            room = asyncio.ensure_future(self._room.wait())
            await asyncio.wait(
                [*self._running.values(), room], timeout=deadline - loop.time(),
                return_when=asyncio.FIRST_COMPLETED,
            )
            room.cancel()

    async def _claim_loop(self) -> None:
        """``Worker._claim_loop``, awaited: an ordinary queue claimed as ever, a partitioned
        one with a task a primary (``_claim_partitions``)."""
        failures = 0
        while not self._stopping.is_set():
            try:
                if await self.queue._read_width() == 0:
                    await self._claim_queue()
                    continue
                ends = await self._claim_partitions()
                if ends.fatal is not None:
                    raise ends.fatal
                if ends.lapse is None:
                    continue
                failures = ends.after(failures)
            except Exception as e:
                if not (transient(e) or server_full(e)):
                    raise
            # A failover, a reshard, a lost connection: the width read again after a while.
            await self._pause(backoff(failures))
            failures += 1

    async def _pause(self, seconds: float) -> None:
        """Waits `seconds`, or until stopped."""
        try:
            await asyncio.wait_for(self._stopping.wait(), seconds)
        except asyncio.TimeoutError:
            pass

    async def _claim_queue(self) -> None:
        """Claims of the queue itself, up to the free slots, until stopped; returns once it
        answers ``EMQSPANNED`` (it was spanned since)."""
        self._queues = [self.queue.name]
        failures = 0
        while not self._stopping.is_set():
            free = self.concurrency - len(self._running)
            if free <= 0:
                self._room.clear()
                await self._room.wait()
                continue
            try:
                sent = time.time_ns()
                args = self.claim_args(self.queue.name, free)
                claimed = await self.queue.client.execute_command(*args)
                failures = 0
            except Exception as e:
                if not (transient(e) or server_full(e)):
                    typed = translate(e)
                    if isinstance(typed, EmqSpannedError):
                        # Spanned: its width learned (as an enqueue's refusal teaches it), so a user
                        # whose width read the server refuses claims the partitions next.
                        if typed.width:
                            self.queue.router.refused(typed, 0)
                        return
                    raise typed
                await self._pause(backoff(failures))
                failures += 1
                continue
            self._dispatch(self.claimed(self.queue.name, claimed, sent), 0)

    async def _claim_partitions(self) -> rounds.Ends:
        """``Worker._claim_partitions``, awaited: a task a primary (``_claim_group``), on its
        node's connections on a cluster."""
        client = self.queue.client
        width = self.queue.router.width or 0
        self._queues = self.queue.router.partitions()
        groups = rounds.by_primary(client, self._queues)
        over, ends = asyncio.Event(), rounds.Ends()
        await asyncio.gather(*(
            self._claim_group(
                client.execute_command if node is None else node.execute_command, partitions,
                len(groups), width, over, ends,
            )
            for node, partitions in groups
        ))
        if ends.lapse is not None:
            await arefresh(client)
        return ends

    async def _claim_group(
        self, send: Callable[..., Awaitable[Any]], partitions: List[str], loops: int,
        width: int, over: asyncio.Event, ends: rounds.Ends,
    ) -> None:
        """``Worker._claim_group``, awaited: one primary's claims, each sent by `send`; the
        width read again when a blocking claim times out (``_resized``)."""
        rotation = rounds.Rotation(partitions)
        while not (self._stopping.is_set() or over.is_set()):
            claim = rotation.next()
            count = await self._reserve(self.wants(claim, loops), over)
            if not count:
                continue
            sent = time.time_ns()
            try:
                reply = await send(*self.partition_claim(claim, count))
            except Exception as e:
                self._dispatch([], count)
                ends.failed(translate(e), transient(e) or server_full(e) or moved(e))
                over.set()
                self._room.set()
                return
            jobs = self.claimed(claim.partition, reply, sent)
            self._dispatch(jobs, count)
            ends.took(claim)
            rotation.took(claim, len(jobs))
            if claim.wake is not None and reply is None and await self._resized(width, ends):
                over.set()
                self._room.set()
                return

    async def _resized(self, width: int, ends: rounds.Ends) -> bool:
        """``Worker._resized``, awaited."""
        try:
            found = await self.queue._read_width()
        except Exception as e:
            ends.failed(translate(e), transient(e) or server_full(e) or moved(e))
            return True
        return found != width

    async def _reserve(self, wanted: int, over: asyncio.Event) -> int:
        """Holds up to `wanted` free slots for a claim, once one is free: how many; 0 once the
        worker stops or `over` is set. The tasks share the concurrency."""
        while not (self._stopping.is_set() or over.is_set()):
            free = self.concurrency - len(self._running) - self._held
            if free > 0:
                self._held += min(free, wanted)
                return min(free, wanted)
            self._room.clear()
            await self._room.wait()
        return 0

    def _dispatch(self, jobs: List[Job], held: int) -> None:
        """Runs the jobs a claim returned, each as a task taking a slot, and gives back the
        `held` slots the claim held."""
        self._held -= held
        for job in jobs:
            job._achildren = self._queue_of(job.queue).children
            self._jobs[(job.id, job.attempt)] = job
            self._running[(job.id, job.attempt)] = asyncio.create_task(self._run_job(job))
        self._room.set()

    def _queue_of(self, queue: str) -> AsyncQueue:
        """The ``AsyncQueue`` of a job's queue: the worker's, or its partition's."""
        if queue == self.queue.name:
            return self.queue
        if queue not in self._partitions:
            self._partitions[queue] = self.queue._on(queue)
        return self._partitions[queue]

    async def _run_job(self, job: Job) -> None:
        serializer = self.queue.serializer
        task = asyncio.current_task()
        try:
            if self.stale(job):
                self.tally(job, "lost")
                return
            if job._over:
                return  # cancelled or timed out before its handler started
            job._phase = "running"
            self._event("handler_start", job.id, job.attempt, time.time_ns())
            error: Optional[BaseException] = None
            ended: Optional[Tuple[str, str, List[Any]]] = None
            provider = self.queue.tracer_provider
            with tracing.processing(job.queue, job.id, job.attempt, job.headers, provider) as span:
                try:
                    # Decoded here, on the job's own path: a payload that does not decode
                    # fails it.
                    job.payload = serializer.loads(job.payload)
                    result = await self.handler(job)
                    ended = outcome(serializer, result=result)
                except asyncio.CancelledError as e:
                    if job._phase == "abandoned":
                        error = e  # cancelled by ``_ended``: the handler's end, nothing to send
                    elif self._closed or _cancelled_from_outside(task):
                        # Cancelled by ``run``'s end, or the job's own task by the program
                        # (an event loop that ends with the worker running): left to its lease.
                        raise
                    else:
                        # A cancellation from within the handler (a task it awaited, say): its
                        # failure, as any exception's.
                        error = e
                        ended = outcome(serializer, error=e, backoff=self.backoff, attempt=job.attempt)
                except Exception as e:
                    error, ended = e, outcome(serializer, error=e, backoff=self.backoff, attempt=job.attempt)
                except BaseException as e:
                    # KeyboardInterrupt, SystemExit...: the job fails with it and the worker
                    # stops (before the failure frees the slot, so nothing is claimed after
                    # it); ``run`` raises it once the other running jobs are settled.
                    if job._phase != "abandoned":
                        self._fatal = self._fatal or e
                        self.stop()
                    error, ended = e, outcome(serializer, error=e, backoff=self.backoff, attempt=job.attempt)
                if ended is not None:
                    tracing.outcome(span, ended[0], error)
            self._event("handler_end", job.id, job.attempt, time.time_ns(), error=failure(error))
            if job._phase == "abandoned" or ended is None:
                return  # ended while it ran (even if it went on after its task's cancel)
            job._phase = "ended"
            await self._settle(job, *ended)
        finally:
            # Unless its end, heard while it ran, freed the slot already.
            key = (job.id, job.attempt)
            if self._running.get(key) is task:
                del self._running[key]
            if self._jobs.get(key) is job:
                del self._jobs[key]
            if task is not None:
                self._abandoned.discard(task)
            self._room.set()

    def _ended(self, job: Job, why: Ending) -> None:
        """The server ended this attempt while it ran: ``cancelled`` (a renewal or a settle
        answered ``EMQCANCELLED``) or ``timed_out`` (a renewal answered ``EMQTIMEOUT``). Once:
        the event of that name, then the flag (``job.cancelled``, ``job.timed_out``) set and
        counted (``tally``: a settle counted ``lost`` before is moved). A handler still running
        has its task cancelled, the reason its message, and is no longer waited for: its slot
        is freed now, whether or not the handler heeds the cancellation, and its end sends
        nothing."""
        if job._end_seen:
            return
        job._end_seen = True
        self._event(why, job.id, job.attempt, time.time_ns())
        job._end(why)
        self.tally(job, why)
        key = (job.id, job.attempt)
        task = self._running.get(key)
        if job._phase != "running" or task is None or self._jobs.get(key) is not job:
            return  # not started (its task skips it) or ended (its settle drops it)
        job._phase = "abandoned"
        del self._running[key]
        del self._jobs[key]
        self._abandoned.add(task)
        task.cancel(REASONS[why])
        self._room.set()

    async def _settle(self, job: Job, counted: str, command: str, options: List[Any]) -> None:
        """Sends the outcome (with ``WAIT`` after it, with ``wait_replicas``), again while the
        failure is a moment's and the attempt's end (cancelled, timed out: a renewal sent
        before the handler ended heard of it) is not heard of; a settle event for each try.
        Counted once (``tally``): a refusal of an attempt whose end was heard of counts nothing
        more."""
        if job._end_seen:
            return
        if self._closed or job.lease_lost.is_set():
            self.tally(job, "lost")
            return
        waiting = self.queue.wait_replicas
        action: Action = "ack" if command == cmd.ACK else "fail"
        attempt = 0
        while True:
            sent = time.time_ns()
            args = cmd.settle(job.queue, command, job.id, job.attempt, options)
            try:
                if waiting > 0:
                    (reply,), confirmed = await pipelined_async(
                        self.queue.client, job.queue, [args], waiting,
                        self.queue.wait_timeout_ms,
                    )
                else:
                    reply, confirmed = await self.queue.client.execute_command(*args), None
            except Exception as e:
                reply, confirmed = e, (0 if waiting > 0 else None)
            replicated = None if confirmed is None else confirmed >= waiting
            self._event(
                "settle", job.id, job.attempt, sent, time.time_ns(), reply=reply,
                action=action, replicated=replicated,
            )
            if not retryable(reply) or attempt >= self.queue.retries:
                break
            if moved(reply):
                await arefresh(self.queue.client)
            await asyncio.sleep(backoff(attempt))
            attempt += 1
            if job._end_seen:
                return  # a renewal heard the attempt end meanwhile: that is its count
        instead = self.refused(job, counted, command, options, reply)
        if cmd.cancelled(reply):
            self._ended(job, "cancelled")  # cancelled as it ended: not retried, not lost
        elif instead is not None:
            await self._settle(job, *instead)
        else:
            self.settled(job, reply, counted)

    async def _renew(self, job: Job, progress: Optional[bytes]) -> Any:
        """One renewal's reply (with `progress`), or the exception it failed with."""
        try:
            return await self.queue.client.execute_command(*self.renew_args(job, progress))
        except Exception as e:
            return e

    async def _renew_loop(self) -> None:
        next_round = time.monotonic() + self.renew_interval
        while True:
            wake = leases.wake(list(self._jobs.values()), next_round)
            await asyncio.sleep(max(0.0, wake - time.monotonic()))
            running = list(self._jobs.values())
            jobs, next_round = leases.due(running, next_round, time.monotonic(), self.renew_interval)
            for job in jobs:
                if not leases.renewing(job):
                    continue  # its outcome went on its way (or its end was heard) meanwhile
                sent = time.time_ns()
                progress = job.progress
                reply = await self._renew(job, progress)
                if self.progress_refused(job, reply, progress):
                    reply = await self._renew(job, None)
                why = self.renewed(job, sent, reply, next_round)
                if why is not None:
                    self._ended(job, why)
