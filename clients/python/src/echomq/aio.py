"""The same queue and worker for asyncio, over ``redis.asyncio`` (or any client whose
``execute_command`` is a coroutine): handlers are coroutines, run as tasks, up to the worker's
concurrency."""

from __future__ import annotations

import asyncio
import signal
from typing import Any, Awaitable, Callable, Dict, Iterable, List, Optional

from ._retry import backoff, transient
from .errors import EmqLeaseLost, translate
from .queue import CHUNK, batches, cron_args, enqueue_args, enqueued, limit_args, pairs, retry_after, text
from .serializers import Raw, Serializer
from .worker import Claiming, Job, check_version, job_of, outcome, renew_args, version_call


class AsyncQueue:
    """``echomq.Queue`` for asyncio: the same calls, awaited, retried the same way."""

    def __init__(
        self, client: Any, name: str, serializer: Optional[Serializer] = None, retries: int = 8
    ) -> None:
        self.client = client
        self.name = name
        self.serializer: Serializer = serializer or Raw()
        self.retries = retries

    async def call(self, command: str, *args: Any) -> Any:
        attempt = 0
        while True:
            try:
                return await self.client.execute_command(command, self.name, *args)
            except Exception as e:
                await asyncio.sleep(retry_after(e, attempt, self.retries))
                attempt += 1

    async def enqueue(
        self,
        payload: Any,
        id: Optional[str] = None,
        delay: Optional[float] = None,
        at: Optional[float] = None,
        priority: Optional[int] = None,
        unique: Optional[str] = None,
        unique_for: Optional[float] = None,
    ) -> str:
        job_id, args = enqueue_args(
            self.serializer, payload, id, delay, at, priority, unique, unique_for
        )
        return enqueued(await self.call("EMQ.ENQUEUE", *args), job_id)

    async def enqueue_many(self, payloads: Iterable[Any], chunk: int = CHUNK) -> List[str]:
        out: List[str] = []
        for job_ids, args in batches(self.serializer, payloads, chunk):
            await self.call("EMQ.MENQUEUE", *args)
            out += job_ids
        return out

    async def stats(self) -> Dict[str, Optional[int]]:
        reply: Dict[str, Optional[int]] = pairs(await self.call("EMQ.STATS"))
        return reply

    async def job(self, job_id: str) -> Optional[Dict[str, Any]]:
        reply = await self.call("EMQ.JOB", job_id)
        return None if reply is None else {k: text(v) for k, v in pairs(reply).items()}

    async def cancel(self, job_id: str) -> bool:
        return bool(await self.call("EMQ.CANCEL", job_id))

    async def requeue(self, job_id: str) -> bool:
        return bool(await self.call("EMQ.REQUEUE", job_id))

    async def pause(self) -> bool:
        return bool(await self.call("EMQ.PAUSE"))

    async def resume(self) -> bool:
        return bool(await self.call("EMQ.RESUME"))

    async def limit(
        self,
        concurrency: Optional[int] = None,
        rate: Optional[int] = None,
        per: Optional[float] = None,
        off: bool = False,
    ) -> Dict[str, Optional[int]]:
        reply: Dict[str, Optional[int]] = pairs(
            await self.call("EMQ.LIMIT", *limit_args(concurrency, rate, per, off))
        )
        return reply

    async def cron(
        self,
        name: str,
        payload: Any,
        spec: Optional[str] = None,
        every: Optional[float] = None,
        priority: Optional[int] = None,
    ) -> int:
        args = cron_args(self.serializer, payload, spec, every, priority)
        return int(await self.call("EMQ.CRON", name, *args))


class AsyncWorker(Claiming):
    """``echomq.Worker`` for asyncio: ``await handler(job)`` for each job, as a task, up to
    ``concurrency`` at once, leases renewed by a background task, stopped by ``stop()`` or, on
    the main thread's loop, SIGTERM and SIGINT. A payload that does not decode fails its job; a
    handler's ``BaseException`` that is not an ``Exception`` fails its job and stops the
    worker, and ``run`` raises it once the other running jobs are settled."""

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
    ) -> None:
        self.queue = AsyncQueue(client, queue, serializer)
        self.handler = handler
        super().__init__(concurrency, lease, batch, block, renew_every, shutdown_timeout)
        self._running: Dict[str, "asyncio.Task[None]"] = {}
        self._jobs: Dict[str, Job] = {}
        self._stopping = asyncio.Event()
        self._room = asyncio.Event()
        self._closed = False
        #: The first BaseException (not an Exception) a handler raised: ``run`` raises it again.
        self._fatal: Optional[BaseException] = None
        self.counts: Dict[str, int] = {"acked": 0, "failed": 0, "retried": 0, "lost": 0}

    def stop(self) -> None:
        self._stopping.set()
        self._room.set()

    async def run(self) -> None:
        args, options = version_call(self.queue.client)
        check_version(await self.queue.client.execute_command(*args, **options))
        loop = asyncio.get_running_loop()
        signals: List[signal.Signals] = []
        for s in (signal.SIGTERM, signal.SIGINT):
            try:
                loop.add_signal_handler(s, self.stop)
                signals.append(s)
            except (NotImplementedError, RuntimeError, ValueError):
                pass  # not the main thread's loop, or no signals here
        renewer = asyncio.create_task(self._renew_loop())
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
            for task in list(self._running.values()):
                task.cancel()
            renewer.cancel()
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
                claimed = await self.queue.client.execute_command(
                    "EMQ.CLAIM", self.queue.name, "COUNT", min(free, self.batch),
                    "LEASE", self.lease_ms, "BLOCK", self.block_ms,
                )
                failures = 0
            except Exception as e:
                if not transient(e):
                    raise translate(e)
                try:
                    await asyncio.wait_for(self._stopping.wait(), backoff(failures))
                except asyncio.TimeoutError:
                    pass
                failures += 1
                continue
            for raw in claimed or []:
                job = job_of(self.queue.name, raw)
                self._jobs[job.id] = job
                self._running[job.id] = asyncio.create_task(self._run_job(job))

    async def _run_job(self, job: Job) -> None:
        serializer = self.queue.serializer
        try:
            try:
                # Decoded here, on the job's own path: a payload that does not decode fails it.
                job.payload = serializer.loads(job.payload)
                result = await self.handler(job)
                ended = outcome(serializer, result=result)
            except asyncio.CancelledError:
                raise
            except Exception as e:
                ended = outcome(serializer, error=e)
            except BaseException as e:
                # KeyboardInterrupt, SystemExit...: the job fails with it and the worker stops
                # (before the failure frees the slot, so nothing is claimed after it); ``run``
                # raises it once the other running jobs are settled.
                self._fatal = self._fatal or e
                self.stop()
                ended = outcome(serializer, error=e)
            await self._settle(job, *ended)
        finally:
            self._running.pop(job.id, None)
            self._jobs.pop(job.id, None)
            self._room.set()

    async def _settle(self, job: Job, counted: str, command: str, extra: List[Any]) -> None:
        if self._closed or job.lease_lost.is_set():
            self.counts["lost"] += 1
            return
        try:
            await self.queue.call(command, job.id, job.attempt, *extra)
        except EmqLeaseLost:
            job.lease_lost.set()
            self.counts["lost"] += 1
            return
        self.counts[counted] += 1

    async def _renew_loop(self) -> None:
        while True:
            await asyncio.sleep(self.renew_interval)
            for job in list(self._jobs.values()):
                if job.lease_lost.is_set():
                    continue
                try:
                    await self.queue.client.execute_command(
                        *renew_args(self.queue.name, job, self.lease_ms)
                    )
                except Exception as e:
                    # A lost lease ends the renewals; a failover or a lost connection: the next
                    # round tries again.
                    if isinstance(translate(e), EmqLeaseLost):
                        job.lease_lost.set()
