"""``Queue`` for asyncio, over ``redis.asyncio`` (or any client whose ``execute_command`` is a
coroutine): the same calls, awaited."""

from __future__ import annotations

import asyncio
from typing import (
    Any, AsyncIterator, Callable, Dict, Iterable, List, Mapping, Optional, Sequence, Set, Tuple,
    TypeVar, Union,
)

from . import commands as cmd
from . import ids, listings, routing, spans, stream, tracing
from ._replicas import arefresh, moved, pipelined_async
from ._retry import backoff, retry_after
from .cancel import cancel as cancelling
from .flows import (
    Children, Node, NodeLike, Parent, ParentLike, batched, chained, minted, parents_of, steps,
)
from .metrics import Metrics
from .metrics import read as read_metrics
from .queue import CHUNK, RAW, Settings

T = TypeVar("T")


class AsyncQueue(Settings):
    """``echomq.Queue`` for asyncio: the same calls, awaited, retried the same way, and the
    same ``wait_replicas``. Each call builds its command and parses the reply with
    ``commands``, as ``Queue``'s do."""

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
                if moved(e) and attempt < self.retries:
                    await arefresh(self.client)
                    await asyncio.sleep(backoff(attempt))
                else:
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
        return (await self._enqueue(
            payload, id, delay, at, priority, unique, unique_for, children, parents_of(parents),
            timeout, group, headers,
        ))[0]

    async def _enqueue(
        self, payload: Any, id: Optional[str], delay: Optional[float], at: Optional[float],
        priority: Optional[int], unique: Optional[str], unique_for: Optional[float],
        children: Optional[int], parents: List[Parent], timeout: Optional[float],
        group: Optional[str], headers: Optional[Mapping[str, str]], fresh: bool = False,
        resolved: bool = False,
    ) -> Tuple[str, str]:
        """``Queue._enqueue``, awaited."""
        job_id, data = id or ids.mint(), self.serializer.dumps(payload)
        with tracing.sending(self.name, headers, self.tracer_provider) as sent:

            def build(target: str, above: Sequence[Parent]) -> List[Any]:
                return cmd.enqueue(
                    target, RAW, data, job_id, delay, at, priority, unique, unique_for,
                    children, above, timeout, group, sent.headers,
                )[1]

            build(self.name, parents)  # checked before anything is sent
            written, target = await self._course(routing.enqueue(
                self.router, self.routers, job_id, group if group is not None else job_id,
                parents, build, fresh, resolved,
            ))
            if written is None:
                return job_id, target
            out = cmd.enqueued(*written, job_id, self.wait_replicas)
            sent.sent(out)
            return out, target

    async def _course(self, course: routing.Course[T]) -> T:
        """``Queue._course``, awaited."""
        reply: Any = None
        error: Optional[Exception] = None
        while True:
            try:
                kind, args = course.send(reply) if error is None else course.throw(error)
            except StopIteration as end:
                result: T = end.value
                return result
            try:
                reply = await (self._write(args) if kind == routing.WRITE else self._send(args))
                error = None
            except Exception as e:  # the course decides what it means (routing.py)
                reply, error = None, e

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
        went: Dict[Tuple[str, str], str] = {}
        fresh: Set[str] = set()
        for step in steps(tree, self.serializer.dumps):
            parents = [p._replace(queue=went[(p.queue, p.id)]) for p in step.parents]
            _, went[(step.queue, step.id)] = await self._on(step.queue)._enqueue(
                step.payload, step.id, step.delay, step.at, step.priority, None, None,
                step.children, parents,
                step.timeout, step.group, None, step.queue in fresh, True,
            )
            if parents:
                fresh.add(step.queue)
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
        marks = spans.span(self.name, width)
        found = await self._send(spans.width_command(self.name))
        if spans.refused(found, await self._send(cmd.stats(self.name)), width):
            await self._send(marks[-1])  # the queue's own mark: the server's refusal, nothing marked
        changed = [cmd.flag(await self._send(mark)) for mark in marks]
        self.router.learn(width)
        return any(changed)

    async def unspan(self) -> bool:
        """``Queue.unspan``, awaited: each partition, then the queue."""
        found = spans.unspan(self.name, await self.width())
        widths = [await self._send(c) for c in found]
        commands = spans.unspanning(self.name, len(found), widths)
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
        targets = self.router.partitions() if await self._read_width() else [self.name]
        return {t: cmd.counts(await self._send(cmd.stats(t))) for t in targets}

    async def _width_known(self) -> int:
        """``Queue._width_known``, awaited."""
        return await self._course(routing.known_width(self.router))

    async def _read_width(self) -> int:
        """``Queue._read_width``, awaited."""
        return await self._course(routing.read_width(self.router))

    async def _each(self, build: Callable[[str], List[Any]]) -> List[Any]:
        """``Queue._each``, awaited."""
        return await self._course(routing.each(self.router, build))

    # ---- looking ----

    async def stats(self) -> Dict[str, Optional[int]]:
        """``Queue.stats``, awaited: a partitioned queue's added up."""
        if not await self._width_known():
            return cmd.counts(await self._send(cmd.stats(self.name)))
        each = await self.partition_stats()
        return {**spans.totals(list(each.values())), "partitions": len(each)}

    async def metrics(self) -> Metrics:
        """``Queue.metrics``, awaited: a partitioned queue's partitions' added up, over the width
        known."""
        return await self._course(read_metrics(self.router))

    async def job(self, job_id: str) -> Optional[Dict[str, Any]]:
        return cmd.row(await self._send(cmd.job(await self.partition(job_id), job_id)))

    async def jobs(
        self, set_name: str, cursor: str = "0", count: Optional[int] = None, payloads: bool = False
    ) -> Tuple[str, List[Dict[str, Any]]]:
        """``Queue.jobs``, awaited: a partitioned queue's paged one partition after the other."""
        return await self._course(listings.jobs(self.router, set_name, cursor, count, payloads))

    async def crons(self) -> List[Dict[str, Any]]:
        """``Queue.crons``, awaited: a partitioned queue's, every partition's together."""
        return await self._course(listings.crons(self.router))

    async def groups(
        self, cursor: str = "0", count: Optional[int] = None
    ) -> Tuple[str, List[Dict[str, Any]]]:
        """``Queue.groups``, awaited: a partitioned queue's paged as ``jobs``'."""
        return await self._course(listings.groups(self.router, cursor, count))

    async def children(self, job_id: str) -> Children:
        found, cursor = Children(), "0"
        while True:
            reply = await self._send(cmd.children(await self.partition(job_id), job_id, cursor))
            cursor = cmd.children_page(reply, found)
            if cursor == "0":
                return found

    # ---- the event stream ----

    async def enable_events(self, maxlen: Optional[int] = None) -> bool:
        """``Queue.enable_events``, awaited."""
        return any(map(cmd.flag, await self._each(lambda q: stream.switch(q, True, maxlen))))

    async def disable_events(self) -> bool:
        """``Queue.disable_events``, awaited."""
        return any(map(cmd.flag, await self._each(lambda q: stream.switch(q, False))))

    async def events(
        self, start: str = "$", block: float = 1.0, count: int = stream.READ_COUNT
    ) -> AsyncIterator[stream.QueueEvent]:
        """``Queue.events``, as an async iterator."""
        if await self._width_known():
            raise ValueError(f"queue {self.name} is partitioned: read each partition's events")
        # "$" read once as the id it stands for: an entry appended between two reads that
        # waited for nothing is read too.
        last = start if start != "$" else stream.newest_id(await self._send(stream.newest(self.name)))
        while True:
            reply = await self._send(stream.read(self.name, last, int(block * 1000), count))
            found, end = stream.entries(reply)
            for event in found:
                yield event
            last = end or last

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
        """``Queue.purge``, awaited."""
        step = cmd.purge_step(count)
        total = 0
        for _ in range(cmd.purge_rounds((await self.stats()).get(set_name), step)):
            replies = await self._each(lambda q: cmd.purge(q, set_name, step))
            deleted = [cmd.count(r) for r in replies]
            total += sum(deleted)
            if all(n < step for n in deleted):
                break
        return total

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
        """``Queue.cron``, awaited: checked before anything is sent, a partitioned queue's kept
        by the partition its name routes to."""
        args = cmd.cron(self.name, self.serializer, name, payload, spec, every, priority)
        return cmd.count(await self._course(listings.cron(self.router, name, args)))

    async def uncron(self, name: str) -> bool:
        """``Queue.uncron``, awaited: over the width read afresh."""
        return cmd.flag(await self._course(listings.uncron(self.router, name)))
