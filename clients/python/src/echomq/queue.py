"""The producer's side: ``Queue`` enqueues jobs and operates a queue, over any redis-py
compatible client (``redis.Redis``, ``redis.cluster.RedisCluster``, ``valkey.Valkey``)."""

from __future__ import annotations

import time
from typing import Any, Dict, Iterable, Iterator, List, Optional, Sequence, Tuple

from . import ids
from ._replicas import moved, pipelined, refresh, wait_settings
from ._retry import backoff, transient
from .errors import EmqNotReplicated, translate
from .serializers import Raw, Serializer

#: Jobs one ``EMQ.MENQUEUE`` carries (the server takes up to 10,000).
CHUNK = 1000


def retry_after(error: Exception, attempt: int, retries: int) -> float:
    """How long to wait before trying a call again after `error`, its `attempt`-th failure;
    raises the error (typed, for a refusal) when it is not worth another try."""
    if transient(error) and attempt < retries:
        return backoff(attempt)
    typed = translate(error)
    if typed is error:
        raise error
    raise typed from error


def text(value: Any) -> Any:
    """A reply's bytes as ``str``; other values as they are."""
    return value.decode() if isinstance(value, bytes) else value


def pairs(flat: Sequence[Any]) -> Dict[str, Any]:
    """A map reply (a flat array under RESP2, a dict under RESP3) as a ``dict``."""
    if isinstance(flat, dict):
        return {text(k): v for k, v in flat.items()}
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def enqueue_args(
    serializer: Serializer,
    payload: Any,
    id: Optional[str],
    delay: Optional[float],
    at: Optional[float],
    priority: Optional[int],
    unique: Optional[str],
    unique_for: Optional[float],
) -> Tuple[str, List[Any]]:
    """The job's id (minted when not given) and ``EMQ.ENQUEUE``'s arguments after the queue."""
    job_id = id or ids.mint()
    args: List[Any] = [job_id, serializer.dumps(payload)]
    if delay is not None and at is not None:
        raise ValueError("give delay or at, not both")
    if delay is not None:
        args += ["DELAY", int(delay * 1000)]
    if at is not None:
        args += ["AT", int(at * 1000)]
    if priority is not None:
        args += ["PRIORITY", priority]
    if unique is not None:
        args += ["UNIQUE", unique]
        if unique_for is not None:
            args += ["FOR", int(unique_for * 1000)]
    elif unique_for is not None:
        raise ValueError("unique_for is the window of a unique key")
    return job_id, args


def enqueued(reply: Any, job_id: str) -> str:
    """The id an enqueue stands for: 1 (written) or 0 (this id was enqueued already) is the
    job's own; an id is the unique key's holder."""
    return str(text(reply)) if isinstance(reply, bytes) else job_id


def batches(
    serializer: Serializer, payloads: Iterable[Any], chunk: int
) -> Iterator[Tuple[List[str], List[Any]]]:
    """``EMQ.MENQUEUE``'s arguments, ``chunk`` jobs each, with the ids minted for them."""
    job_ids: List[str] = []
    args: List[Any] = []
    for payload in payloads:
        job_ids.append(ids.mint())
        args += [job_ids[-1], serializer.dumps(payload)]
        if len(job_ids) >= chunk:
            yield job_ids, args
            job_ids, args = [], []
    if job_ids:
        yield job_ids, args


def limit_args(
    concurrency: Optional[int], rate: Optional[int], per: Optional[float], off: bool
) -> List[Any]:
    """``EMQ.LIMIT``'s options."""
    args: List[Any] = ["OFF"] if off else []
    if concurrency is not None:
        args += ["CONCURRENCY", concurrency]
    if rate is not None:
        if per is None:
            raise ValueError("a rate needs its window, per")
        args += ["RATE", rate, "PER", int(per * 1000)]
    return args


def cron_args(
    serializer: Serializer,
    payload: Any,
    spec: Optional[str],
    every: Optional[float],
    priority: Optional[int],
) -> List[Any]:
    """``EMQ.CRON``'s arguments after the schedule's name."""
    if (spec is None) == (every is None):
        raise ValueError("give spec or every")
    when: List[Any] = [spec] if spec is not None else ["EVERY", int((every or 0) * 1000)]
    extra: List[Any] = ["PRIORITY", priority] if priority is not None else []
    return [*when, serializer.dumps(payload), *extra]


def unconfirmed(job_ids: List[str], confirmed: Optional[int], wanted: int) -> List[str]:
    """The ids of a write ``WAIT`` confirmed on fewer replicas than `wanted` (none without a
    wait)."""
    return job_ids if confirmed is not None and confirmed < wanted else []


class Queue:
    """One queue of a deployment. Calls are retried, with backoff, through failovers and slot
    migrations (``TRYAGAIN``, ``READONLY``, ``LOADING``, lost connections); an enqueue carries
    an id minted here, so a retried one stays a single job.

    With ``wait_replicas`` n > 0, each enqueue is followed by ``WAIT n`` (``wait_timeout``
    seconds) on the same connection, and one that fewer replicas confirmed raises
    ``EmqNotReplicated``: the primary took it, but it may be lost in a failover."""

    def __init__(
        self,
        client: Any,
        name: str,
        serializer: Optional[Serializer] = None,
        retries: int = 8,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
    ) -> None:
        self.client = client
        self.name = name
        self.serializer: Serializer = serializer or Raw()
        self.retries = retries
        self.wait_replicas, self.wait_timeout_ms = wait_settings(wait_replicas, wait_timeout)

    def call(self, command: str, *args: Any) -> Any:
        """``command <queue> args...``, retried while the failure is transient; a refusal as
        its typed exception (``echomq.errors``)."""
        attempt = 0
        while True:
            try:
                return self.client.execute_command(command, self.name, *args)
            except Exception as e:
                time.sleep(retry_after(e, attempt, self.retries))
                attempt += 1

    def write(self, command: str, *args: Any) -> Tuple[Any, Optional[int]]:
        """``call`` for a write: with ``wait_replicas``, the command and ``WAIT`` pipelined on
        one connection, retried alike. The reply and how many replicas confirmed the write
        (``None`` without a wait)."""
        if self.wait_replicas <= 0:
            return self.call(command, *args), None
        attempt = 0
        while True:
            try:
                (reply,), confirmed = pipelined(
                    self.client, self.name, [[command, self.name, *args]],
                    self.wait_replicas, self.wait_timeout_ms,
                )
                if isinstance(reply, Exception):
                    raise reply
                return reply, confirmed
            except Exception as e:
                if moved(e) and attempt < self.retries:
                    refresh(self.client)
                    time.sleep(backoff(attempt))
                else:
                    time.sleep(retry_after(e, attempt, self.retries))
                attempt += 1

    # ---- producing ----

    def enqueue(
        self,
        payload: Any,
        id: Optional[str] = None,
        delay: Optional[float] = None,
        at: Optional[float] = None,
        priority: Optional[int] = None,
        unique: Optional[str] = None,
        unique_for: Optional[float] = None,
    ) -> str:
        """Enqueues one job and returns its id. ``delay`` (seconds) or ``at`` (unix seconds)
        parks it until then; ``priority`` puts it ahead of (lower) or behind (higher) the
        default 0; with ``unique``, the job is written only while no job holds that key (for
        ``unique_for`` seconds, or until the holder is done or dead), and the holder's id is
        returned otherwise. With ``wait_replicas``, ``EmqNotReplicated`` when fewer replicas
        confirmed it."""
        job_id, args = enqueue_args(
            self.serializer, payload, id, delay, at, priority, unique, unique_for
        )
        reply, confirmed = self.write("EMQ.ENQUEUE", *args)
        out = enqueued(reply, job_id)
        if unconfirmed([out], confirmed, self.wait_replicas):
            raise EmqNotReplicated([out], confirmed or 0, self.wait_replicas)
        return out

    def enqueue_many(self, payloads: Iterable[Any], chunk: int = CHUNK) -> List[str]:
        """Enqueues every payload, ``chunk`` to an atomic ``EMQ.MENQUEUE``; their ids, in order.
        With ``wait_replicas``, every chunk is written, then ``EmqNotReplicated`` names the jobs
        of the chunks fewer replicas confirmed (the fewest confirmations its count)."""
        out: List[str] = []
        short: List[str] = []
        fewest: Optional[int] = None
        for job_ids, args in batches(self.serializer, payloads, chunk):
            _, confirmed = self.write("EMQ.MENQUEUE", *args)
            out += job_ids
            if unconfirmed(job_ids, confirmed, self.wait_replicas):
                short += job_ids
                fewest = confirmed if fewest is None else min(fewest, confirmed or 0)
        if short:
            raise EmqNotReplicated(short, fewest or 0, self.wait_replicas, enqueued=out)
        return out

    # ---- looking ----

    def stats(self) -> Dict[str, Optional[int]]:
        """The counts of each set, whether the queue is paused, and its limits and their use."""
        reply: Dict[str, Optional[int]] = pairs(self.call("EMQ.STATS"))
        return reply

    def job(self, job_id: str) -> Optional[Dict[str, Any]]:
        """A job's row, its set and its score there; ``None`` when there is no such job."""
        reply = self.call("EMQ.JOB", job_id)
        return None if reply is None else {k: text(v) for k, v in pairs(reply).items()}

    # ---- operating ----

    def cancel(self, job_id: str) -> bool:
        return bool(self.call("EMQ.CANCEL", job_id))

    def requeue(self, job_id: str) -> bool:
        return bool(self.call("EMQ.REQUEUE", job_id))

    def requeue_dead(self, count: Optional[int] = None) -> int:
        """Up to ``count`` (default 1,000) of the oldest dead jobs back to pending; how many."""
        extra = ["COUNT", count] if count is not None else []
        return int(self.call("EMQ.REQUEUE", "DEAD", *extra))

    def purge(self, set_name: str, count: Optional[int] = None) -> int:
        extra = ["COUNT", count] if count is not None else []
        return int(self.call("EMQ.PURGE", set_name, *extra))

    def pause(self) -> bool:
        return bool(self.call("EMQ.PAUSE"))

    def resume(self) -> bool:
        return bool(self.call("EMQ.RESUME"))

    def limit(
        self,
        concurrency: Optional[int] = None,
        rate: Optional[int] = None,
        per: Optional[float] = None,
        off: bool = False,
    ) -> Dict[str, Optional[int]]:
        """``EMQ.LIMIT``: sets the given limits (``rate`` claims every ``per`` seconds), or with
        ``off`` removes both; with nothing given, reports them. The limits and their use."""
        args = limit_args(concurrency, rate, per, off)
        reply: Dict[str, Optional[int]] = pairs(self.call("EMQ.LIMIT", *args))
        return reply

    def cron(
        self,
        name: str,
        payload: Any,
        spec: Optional[str] = None,
        every: Optional[float] = None,
        priority: Optional[int] = None,
    ) -> int:
        """A repeating schedule: ``spec`` (a cron expression, UTC) or ``every`` seconds; its
        next firing, unix ms."""
        return int(self.call("EMQ.CRON", name, *cron_args(self.serializer, payload, spec, every, priority)))

    def uncron(self, name: str) -> bool:
        return bool(self.call("EMQ.UNCRON", name))
