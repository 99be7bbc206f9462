"""The same queue and worker for asyncio, over ``redis.asyncio`` (or any client whose
``execute_command`` is a coroutine): handlers are coroutines, run as tasks, up to the worker's
concurrency."""

from __future__ import annotations

import asyncio
import signal
import time
from typing import (
    Any, Awaitable, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple, Union,
)

from . import commands as cmd
from . import ids, leases, outbox, routing, spans, tracing
from ._replicas import pipelined_async
from ._retry import backoff, retry_after, server_full, transient
from .cancel import cancel as cancelling
from .errors import translate
from .errors import EmqParentError, EmqSpannedError
from .events import Action, Ending, WorkerEvent, failure
from .flows import (
    Children, Node, NodeLike, ParentLike, batched, chained, minted, parents_of, steps,
)
from .job import Job
from .metrics import Metrics
from .metrics import command as metrics_command
from .metrics import parse as parse_metrics
from .queue import CHUNK, Settings
from .serializers import Serializer
from .claiming import Claiming, outcome, version_options


#: The message of the ``asyncio.CancelledError`` a handler whose attempt ended gets.
REASONS: Dict[Ending, str] = {
    "cancelled": "the job was cancelled (EMQCANCELLED)",
    "timed_out": "the attempt ran past its deadline (EMQTIMEOUT)",
}


class AsyncQueue(Settings):
    """``echomq.Queue`` for asyncio: the same calls, awaited, retried the same way, and the
    same ``wait_replicas`` (not with an asyncio cluster client: ``ValueError``). Each call
    builds its command and parses the reply with ``commands``, as ``Queue``'s do."""

    waits_on_cluster = False

    async def call(self, command: str, *args: Any) -> Any:
        """``Queue.call``, awaited."""
        return await self._send([command, self.name, *args])

    async def write(self, command: str, *args: Any) -> Tuple[Any, Optional[int]]:
        """``Queue.write``, awaited."""
        return await self._write([command, self.name, *args])

    async def _send(self, args: List[Any]) -> Any:
        attempt = 0
        while True:
            try:
                return await self.client.execute_command(*args)
            except Exception as e:
                await asyncio.sleep(retry_after(e, attempt, self.retries))
                attempt += 1

    async def _write(self, args: List[Any]) -> Tuple[Any, Optional[int]]:
        if self.wait_replicas <= 0:
            return await self._send(args), None
        attempt = 0
        while True:
            try:
                (reply,), confirmed = await pipelined_async(
                    self.client, args[1], [args], self.wait_replicas, self.wait_timeout_ms
                )
                if isinstance(reply, Exception):
                    raise reply
                return reply, confirmed
            except Exception as e:
                await asyncio.sleep(retry_after(e, attempt, self.retries))
                attempt += 1

    # ---- producing ----

    async def enqueue(
        self, payload: Any, id: Optional[str] = None, delay: Optional[float] = None,
        at: Optional[float] = None, priority: Optional[int] = None,
        unique: Optional[str] = None, unique_for: Optional[float] = None,
        children: Optional[int] = None, parents: Optional[Sequence[ParentLike]] = None,
        timeout: Optional[float] = None, group: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> str:
        """``Queue.enqueue``, awaited: a partitioned queue's job routed alike."""
        above = parents_of(parents)
        job_id = id or ids.mint()
        if above and self.router.width is None:
            await self.width()
        with tracing.sending(self.name, headers, self.tracer_provider) as sent:
            reroutes = 0
            while True:
                target = self.router.of(group if group is not None else job_id)
                _, args = cmd.enqueue(
                    target, self.serializer, payload, job_id, delay, at, priority, unique,
                    unique_for, children, above, timeout, group, sent.headers,
                )
                try:
                    for adopt in cmd.adoptions(target, job_id, above):
                        await self._send(adopt)
                    reply, confirmed = await self._write(args)
                except EmqSpannedError as e:
                    if not self.router.refused(e, reroutes):
                        raise
                    reroutes += 1
                    continue
                except EmqParentError:
                    if above and cmd.row(await self._send(cmd.job(target, job_id))) is not None:
                        return job_id
                    raise
                written = cmd.enqueued(reply, confirmed, job_id, self.wait_replicas)
                sent.sent(written)
                return written

    async def enqueue_many(
        self, payloads: Iterable[Any], chunk: int = CHUNK,
        headers: Optional[Mapping[str, str]] = None,
    ) -> List[str]:
        """``Queue.enqueue_many``, awaited: a partitioned queue's jobs split alike."""
        written = cmd.Written(self.wait_replicas)
        with tracing.sending(self.name, headers, self.tracer_provider) as sent:
            entries = cmd.entries(self.serializer, payloads, sent.headers)
            course = routing.enqueue_many(self.router, entries, chunk)
            failure: Optional[BaseException] = None
            while True:
                try:
                    job_ids, args = course.send(failure)
                except StopIteration as end:
                    return written.ids(end.value)
                try:
                    written.add(job_ids, (await self._write(args))[1])
                    failure = None
                except Exception as e:  # the course decides what it means (routing.py)
                    failure = e

    async def flow(self, tree: NodeLike) -> Node:
        """``Queue.flow``, awaited."""
        tree = minted(tree)
        for step in steps(tree):
            await self._on(step.queue).enqueue(
                step.payload, id=step.id, children=step.children, parents=step.parents,
                timeout=step.timeout,
            )
        return tree

    async def chain(self, jobs: Sequence[NodeLike]) -> Node:
        return await self.flow(chained(jobs))

    async def batch(
        self, jobs: Sequence[NodeLike], on_complete: Union[Tuple[str, Any], NodeLike]
    ) -> Node:
        return await self.flow(batched(jobs, on_complete))

    # ---- partitions ----

    async def span(self, width: int) -> bool:
        """``Queue.span``, awaited."""
        changed = [cmd.flag(await self._send(mark)) for mark in spans.span(self.name, width)]
        self.router.learn(width)
        return any(changed)

    async def unspan(self) -> bool:
        """``Queue.unspan``, awaited."""
        commands = spans.unspan(self.name, await self.width())
        changed = [cmd.flag(await self._send(command)) for command in commands]
        self.router.learn(0)
        return any(changed)

    async def width(self) -> int:
        """``Queue.width``, awaited."""
        found = spans.width(await self._send(spans.width_command(self.name)))
        self.router.learn(found)
        return found

    async def partition(self, key: str) -> str:
        """``Queue.partition``, awaited."""
        await self._width_known()
        return self.router.of(key)

    async def partition_stats(self) -> Dict[str, Dict[str, Optional[int]]]:
        """``Queue.partition_stats``, awaited."""
        targets = self.router.partitions() if await self.width() else [self.name]
        return {t: cmd.counts(await self._send(cmd.stats(t))) for t in targets}

    async def _width_known(self) -> int:
        return await self.width() if self.router.width is None else self.router.width

    async def _each(self, build: Callable[[str], List[Any]]) -> List[Any]:
        """``Queue._each``, awaited."""
        targets = self.router.partitions() if await self._width_known() else [self.name]
        return [await self._send(build(t)) for t in targets]

    # ---- looking ----

    async def stats(self) -> Dict[str, Optional[int]]:
        """``Queue.stats``, awaited: a partitioned queue's added up."""
        if not await self._width_known():
            return cmd.counts(await self._send(cmd.stats(self.name)))
        each = await self.partition_stats()
        return {**spans.totals(list(each.values())), "partitions": len(each)}

    async def metrics(self) -> Metrics:
        return parse_metrics(await self._send(metrics_command(self.name)))

    async def job(self, job_id: str) -> Optional[Dict[str, Any]]:
        return cmd.row(await self._send(cmd.job(await self.partition(job_id), job_id)))

    async def jobs(
        self, set_name: str, cursor: str = "0", count: Optional[int] = None, payloads: bool = False
    ) -> Tuple[str, List[Dict[str, Any]]]:
        reply = await self._send(cmd.jobs(self.name, set_name, cursor, count, payloads))
        return cmd.page(reply, set_name)

    async def crons(self) -> List[Dict[str, Any]]:
        return cmd.schedules(await self._send(cmd.crons(self.name)))

    async def groups(
        self, cursor: str = "0", count: Optional[int] = None
    ) -> Tuple[str, List[Dict[str, Any]]]:
        """``Queue.groups``, awaited."""
        return cmd.groups_page(await self._send(cmd.groups(self.name, cursor, count)))

    async def children(self, job_id: str) -> Children:
        found, cursor = Children(), "0"
        while True:
            reply = await self._send(cmd.children(await self.partition(job_id), job_id, cursor))
            cursor = cmd.children_page(reply, found)
            if cursor == "0":
                return found

    # ---- operating ----

    async def cancel(self, job_id: str) -> bool:
        """``Queue.cancel``, awaited: a running job's attempt ends too (dead, ``cancelled``)."""
        return await self.cancel_flow(job_id) > 0

    async def cancel_flow(self, job_id: str) -> int:
        return await self._cancel(job_id, False)

    async def cancel_unstarted(self, job_id: str) -> int:
        """``Queue.cancel_unstarted``, awaited: a running job is left to run (0)."""
        return await self._cancel(job_id, True)

    async def _cancel(self, job_id: str, unstarted: bool) -> int:
        steps, reply = cancelling(await self.partition(job_id), job_id, unstarted), None
        try:
            while True:
                command = steps.send(reply)
                try:
                    reply = await self._send(command)
                except Exception as e:  # the cancel decides what it means (cancel.py)
                    reply = e
        except StopIteration as end:
            return int(end.value)

    async def requeue(self, job_id: str) -> bool:
        return cmd.flag(await self._send(cmd.requeue(await self.partition(job_id), job_id)))

    async def requeue_dead(self, count: Optional[int] = None) -> int:
        return sum(map(cmd.count, await self._each(lambda q: cmd.requeue_dead(q, count))))

    async def purge(self, set_name: str, count: Optional[int] = None) -> int:
        return sum(map(cmd.count, await self._each(lambda q: cmd.purge(q, set_name, count))))

    async def pause(self) -> bool:
        return any(map(cmd.flag, await self._each(cmd.pause)))

    async def resume(self) -> bool:
        return any(map(cmd.flag, await self._each(cmd.resume)))

    async def limit(
        self, concurrency: Union[int, None, cmd.Keep] = cmd.KEEP,
        rate: Union[int, None, cmd.Keep] = cmd.KEEP, per: Optional[float] = None,
        off: bool = False, timeout: Union[float, None, cmd.Keep] = cmd.KEEP,
        group_concurrency: Union[int, None, cmd.Keep] = cmd.KEEP,
        group_rate: Union[int, None, cmd.Keep] = cmd.KEEP, group_per: Optional[float] = None,
    ) -> Dict[str, Optional[int]]:
        """``Queue.limit``, awaited: ``None`` removes a limit, one left out stays; a partitioned
        queue's shared out alike."""
        width = await self._width_known()
        targets = self.router.partitions() if width else [self.name]
        replies = [
            cmd.counts(await self._send(cmd.limit(
                target, spans.shared(concurrency, width, i), spans.shared(rate, width, i), per,
                off, timeout, group_concurrency, group_rate, group_per,
            )))
            for i, target in enumerate(targets)
        ]
        return spans.totals(replies) if width else replies[0]

    async def group_limit(
        self, group: str, concurrency: Union[int, None, cmd.Keep] = cmd.KEEP,
        rate: Union[int, None, cmd.Keep] = cmd.KEEP, per: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``Queue.group_limit``, awaited."""
        args = cmd.group_limit(await self.partition(group), group, concurrency, rate, per)
        return cmd.fields(await self._send(args))

    async def pause_group(self, group: str, seconds: Optional[float] = None) -> bool:
        args = cmd.pause_group(await self.partition(group), group, seconds)
        return cmd.flag(await self._send(args))

    async def resume_group(self, group: str) -> bool:
        return cmd.flag(await self._send(cmd.resume_group(await self.partition(group), group)))

    async def cron(
        self, name: str, payload: Any, spec: Optional[str] = None,
        every: Optional[float] = None, priority: Optional[int] = None,
    ) -> int:
        args = cmd.cron(self.name, self.serializer, name, payload, spec, every, priority)
        return cmd.count(await self._send(args))

    async def uncron(self, name: str) -> bool:
        return cmd.flag(await self._send(cmd.uncron(self.name, name)))


class AsyncWorker(Claiming):
    """``echomq.Worker`` for asyncio: ``await handler(job)`` for each job, as a task, up to
    ``concurrency`` at once, leases renewed by a background task, stopped by ``stop()`` or, on
    the main thread's loop, SIGTERM and SIGINT. A payload that does not decode fails its job; a
    handler's ``BaseException`` that is not an ``Exception`` fails its job and stops the
    worker, and ``run`` raises it once the other running jobs are settled. A task delivers the
    queue's flow hand-overs, as ``Worker``'s thread does; a parent's handler reads its children
    with ``await job.achildren()``. ``name``, ``on_event``, ``wait_replicas`` and
    ``wait_timeout`` are ``Worker``'s.

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
    ) -> None:
        self.queue = AsyncQueue(
            client, queue, serializer, wait_replicas=wait_replicas, wait_timeout=wait_timeout,
            tracer_provider=tracer_provider,
        )
        self.handler = handler
        super().__init__(
            queue, concurrency, lease, batch, block, renew_every, shutdown_timeout, name, on_event
        )
        self._running: Dict[str, "asyncio.Task[None]"] = {}
        self._jobs: Dict[str, Job] = {}
        #: The tasks of handlers whose attempt ended (cancelled, timed out) while they ran and
        #: not yet ended: no longer waited for, cancelled again when ``run`` ends.
        self._abandoned: Set["asyncio.Task[None]"] = set()
        self._stopping = asyncio.Event()
        self._room = asyncio.Event()

    def stop(self) -> None:
        self._stopping.set()
        self._room.set()

    async def run(self) -> None:
        client = self.queue.client
        cmd.check_version(await client.execute_command(*cmd.version(), **version_options(client)))
        loop = asyncio.get_running_loop()
        signals: List[signal.Signals] = []
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(s, self.stop)
                signals.append(s)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread's loop, or no signals here
        renewer = asyncio.create_task(self._renew_loop())
        courier = asyncio.create_task(
            outbox.adeliver(
                client, self.queue.name, self._stopping, self._event,
                self.queue.wait_replicas, self.queue.wait_timeout_ms,
            )
        )
        try:
            try:
                await self._claim_loop()
            finally:
                # Even when claiming failed for good: the running jobs' outcomes are sent.
                self._stopping.set()
                if self._running:
                    await asyncio.wait(list(self._running.values()), timeout=self.shutdown_timeout)
        finally:
            # A handler still running now is left to its lease: its outcome is not sent.
            self._closed = True
            for task in [*self._running.values(), *self._abandoned]:
                task.cancel()
            renewer.cancel()
            courier.cancel()
            for s in signals:
                loop.remove_signal_handler(s)
        if self._fatal is not None:
            raise self._fatal

    async def _claim_loop(self) -> None:
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
                    raise translate(e)
                try:
                    await asyncio.wait_for(self._stopping.wait(), backoff(failures))
                except asyncio.TimeoutError:
                    pass
                failures += 1
                continue
            for job in self.claimed(self.queue.name, claimed, sent):
                job._achildren = self.queue.children
                self._jobs[job.id] = job
                self._running[job.id] = asyncio.create_task(self._run_job(job))

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
                    if job._phase != "abandoned":
                        raise
                    error = e  # cancelled by ``_ended``: the handler's end, nothing to send
                except Exception as e:
                    error, ended = e, outcome(serializer, error=e)
                except BaseException as e:
                    # KeyboardInterrupt, SystemExit...: the job fails with it and the worker
                    # stops (before the failure frees the slot, so nothing is claimed after
                    # it); ``run`` raises it once the other running jobs are settled.
                    if job._phase != "abandoned":
                        self._fatal = self._fatal or e
                        self.stop()
                    error, ended = e, outcome(serializer, error=e)
                if ended is not None:
                    tracing.outcome(span, ended[0], error)
            self._event("handler_end", job.id, job.attempt, time.time_ns(), error=failure(error))
            if job._phase == "abandoned" or ended is None:
                return  # ended while it ran (even if it went on after its task's cancel)
            job._phase = "ended"
            await self._settle(job, *ended)
        finally:
            # Unless a later attempt of the same id holds the slot now.
            if self._running.get(job.id) is task:
                del self._running[job.id]
            if self._jobs.get(job.id) is job:
                del self._jobs[job.id]
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
        task = self._running.get(job.id)
        if job._phase != "running" or task is None or self._jobs.get(job.id) is not job:
            return  # not started (its task skips it) or ended (its settle drops it)
        job._phase = "abandoned"
        del self._running[job.id]
        del self._jobs[job.id]
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
            args = cmd.settle(self.queue.name, command, job.id, job.attempt, options)
            try:
                if waiting > 0:
                    (reply,), confirmed = await pipelined_async(
                        self.queue.client, self.queue.name, [args], waiting,
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
            if not (isinstance(reply, Exception) and transient(reply)) or attempt >= self.queue.retries:
                break
            await asyncio.sleep(backoff(attempt))
            attempt += 1
            if job._end_seen:
                return  # a renewal heard the attempt end meanwhile: that is its count
        if cmd.cancelled(reply):
            self._ended(job, "cancelled")  # cancelled as it ended: not retried, not lost
        else:
            self.settled(job, reply, counted)

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
                try:
                    reply = await self.queue.client.execute_command(*self.renew_args(job))
                except Exception as e:
                    reply = e
                why = self.renewed(job, sent, reply, next_round)
                if why is not None:
                    self._ended(job, why)
