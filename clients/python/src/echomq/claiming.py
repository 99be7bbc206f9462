"""What ``Worker`` and ``AsyncWorker`` share: their claiming settings (``Claiming``, checked and
in ms), their name, ``on_event`` hook and counts, and what both build and read of their
commands: the claims (of a queue, or of a partitioned queue's partitions), the jobs a claim
returned, renewals, and what a handler's end means (``outcome``)."""

from __future__ import annotations

import asyncio
import logging
import math
import time
import traceback
from typing import Any, Callable, Dict, List, Optional, Tuple, Union

from . import commands as cmd
from . import leases
from ._retry import retry_after
from .events import Ending, Hook, WorkerEvent, default_name
from .job import Job, Retry
from .rounds import Claim
from .serializers import Serializer

log = logging.getLogger("echomq")

#: Most bytes of an error (the exception and its traceback) sent with ``EMQ.FAIL``.
MAX_ERROR = 4096
#: The longest wait a worker's ``backoff`` gives, in ms (the server's ``emq.backoff-max-ms``
#: default).
MAX_BACKOFF_MS = 3_600_000

#: A worker's own wait before a failed job's retry: seconds, or a function of the attempt that
#: failed (1 for the first) and its exception giving seconds.
Backoff = Union[float, Callable[[int, BaseException], float]]


def retry_in(backoff: Backoff, attempt: int, error: BaseException) -> Optional[int]:
    """`backoff`'s wait after failed attempt `attempt`, in ms, 0 to ``MAX_BACKOFF_MS``; ``None``
    (the server's backoff) when the function raised or gave no number of seconds (logged)."""
    try:
        wait = float(backoff(attempt, error) if callable(backoff) else backoff)
        if math.isnan(wait):
            raise ValueError("not a number")
    except Exception:
        log.exception("echomq: the worker's backoff failed; the server's backoff applies")
        return None
    return int(max(0.0, min(float(MAX_BACKOFF_MS), wait * 1000)))


#: Most jobs one claim takes (the server's bound on ``COUNT``).
MAX_CLAIM = 1000


def outcome(
    serializer: Serializer, result: Any = None, error: Optional[BaseException] = None,
    backoff: Optional[Backoff] = None, attempt: int = 1,
) -> Tuple[str, str, List[Any]]:
    """What a handler's end means: its count's name, the command and its options after the
    token. A return is ``ACK`` (with ``RESULT`` when it returned a value), ``Retry`` a ``FAIL``
    with ``RETRY-IN``, any other exception a ``FAIL`` with it and its traceback, and with the
    worker's `backoff` its wait after `attempt` (``RETRY-IN``; without, the server's backoff)."""
    if isinstance(error, Retry):
        return "retried", cmd.FAIL, cmd.fail_options(str(error), int(error.after * 1000))
    if error is not None:
        trace = "".join(traceback.format_exception(type(error), error, error.__traceback__))
        wait = None if backoff is None else retry_in(backoff, attempt, error)
        return "failed", cmd.FAIL, cmd.fail_options(trace[-MAX_ERROR:], wait)
    encoded = serializer.dumps(result) if result is not None else None
    return "acked", cmd.ACK, cmd.ack_options(encoded)


def refused_outcome(
    counted: str, command: str, options: List[Any], reply: Any, wait: Optional[int] = None
) -> Optional[Tuple[str, str, List[Any]]]:
    """What an outcome the server refused as too large (``EMQPAYLOAD``) is sent as instead: an
    acknowledgement's result, a ``FAIL`` that says so (the job retried, or dead, not left to run
    again at its lease's end with nothing said); a ``FAIL``'s error text, the ``FAIL`` without
    it. ``None`` for any other reply, and for an outcome with nothing left to drop. `wait`: the
    worker's backoff for that ``FAIL`` (ms; ``None``, the server's)."""
    if not cmd.payload_refused(reply):
        return None
    if command == cmd.ACK and options:
        size = len(options[1])
        text = f"EMQPAYLOAD the handler's result ({size} bytes) is larger than the server takes: {reply}"
        return "failed", cmd.FAIL, cmd.fail_options(text, wait)
    if command == cmd.FAIL and "ERROR" in options:
        at = options.index("ERROR")
        return counted, cmd.FAIL, options[:at] + options[at + 2:]
    return None


def jobs_of(queue: str, reply: Any) -> List[Job]:
    """The jobs an ``EMQ.CLAIM`` replied (``commands.claimed``), each payload still the bytes:
    it is decoded on the job's own path (``settled``), where a payload that does not decode is
    that job's failure, not the worker's."""
    return [
        Job(id=job_id, payload=payload, attempt=token, queue=queue, headers=headers)
        for job_id, payload, token, headers in cmd.claimed(reply)
    ]

def version_options(client: Any) -> Dict[str, Any]:
    """Where `client` sends ``EMQ.VERSION``: a cluster client (which cannot route a command
    without a key) to any node, as every node speaks the one protocol."""
    if hasattr(client, "get_random_node"):
        return {"target_nodes": client.get_random_node()}
    return {}


def check_server(client: Any, retries: int) -> None:
    """Checks the server's protocol version before a worker starts, trying again (another node,
    on a cluster) while a node restarts or fails over: the cluster client does not retry a
    command sent to a node it was given."""
    attempt = 0
    while True:
        try:
            answer = client.execute_command(*cmd.version(), **version_options(client))
            break
        except Exception as e:
            time.sleep(retry_after(e, attempt, retries))
            attempt += 1
    cmd.check_version(answer)


async def acheck_server(client: Any, retries: int) -> None:
    """``check_server`` for an asyncio client."""
    attempt = 0
    while True:
        try:
            answer = await client.execute_command(*cmd.version(), **version_options(client))
            break
        except Exception as e:
            await asyncio.sleep(retry_after(e, attempt, retries))
            attempt += 1
    cmd.check_version(answer)


class Claiming:
    """A worker's claiming settings, checked and in ms, its name, its ``on_event`` hook and
    what it counts (``Worker``'s and ``AsyncWorker``'s), and what both build and read of their
    commands."""

    def __init__(
        self,
        queue: str,
        concurrency: int,
        lease: float,
        batch: Optional[int],
        block: float,
        renew_every: float,
        shutdown_timeout: float,
        name: Optional[str],
        on_event: Optional[Callable[[WorkerEvent], None]],
        backoff: Optional[Backoff] = None,
    ) -> None:
        if concurrency < 1:
            raise ValueError("concurrency is at least 1")
        self.concurrency = concurrency
        self.lease_ms = max(1, int(lease * 1000))
        # At most the server's bound on a claim's COUNT.
        self.batch = max(1, min(batch or concurrency, MAX_CLAIM))
        # At most half the lease: a job's handler is not started a lease after its claim was
        # sent (`stale`), so a claim must not wait in the server for most of a lease.
        self.block_ms = max(1, min(int(block * 1000), self.lease_ms // 2))
        #: Renewals come every `renew_every` of the lease.
        self.renew_interval = lease * renew_every
        self.shutdown_timeout = shutdown_timeout
        if backoff is not None and not callable(backoff) and not 0 <= backoff < math.inf:
            raise ValueError("backoff is 0 seconds or more, or a function of the attempt")
        #: The worker's own wait before a failed job's retry; ``None``: the server's backoff.
        self.backoff = backoff
        self.name = name or default_name()
        self._event = Hook(on_event, self.name, queue)
        #: Set once the worker shut down: an outcome not sent by then is left to its lease.
        self._closed = False
        #: The first BaseException (not an Exception) a handler raised: ``run`` raises it again.
        self._fatal: Optional[BaseException] = None
        #: What happened, each attempt counted once (``tally``), for logs and tests: acked,
        #: failed, retried, lost, cancelled (the job was cancelled while it ran: nothing was
        #: sent for it, or the server refused it), timed_out (the attempt ran past its
        #: deadline: the same), and failed-to-settle (an outcome the server refused for another
        #: reason).
        self.counts: Dict[str, int] = {
            "acked": 0, "failed": 0, "retried": 0, "lost": 0, "cancelled": 0, "timed_out": 0,
        }

    def claim_args(self, queue: str, free: int) -> List[Any]:
        """The ``EMQ.CLAIM`` of up to `free` jobs (no more than ``batch``), with ``BLOCK``."""
        return cmd.claim(queue, min(free, self.batch), self.lease_ms, self.block_ms)

    def wants(self, claim: Claim, loops: int) -> int:
        """The slots a partition's claim (``rounds.Rotation``) holds from its sending until its
        reply: ``batch``. When several loops (one a primary) share the concurrency, at most the
        loop's share of it, so a primary that stops answering under a claim keeps no more than
        its share from the others; and 1 for a blocking claim, so an idle primary's blocked
        claim keeps one slot from them."""
        if loops <= 1:
            return self.batch
        return 1 if claim.wake is not None else min(self.batch, max(1, self.concurrency // loops))

    def partition_claim(self, claim: Claim, count: int) -> List[Any]:
        """The ``EMQ.CLAIM`` of `count` jobs of a partition's turn: a blocking claim's with
        ``BLOCK`` and ``WAKE`` (its primary's other partitions)."""
        block = None if claim.wake is None else self.block_ms
        return cmd.claim(claim.partition, count, self.lease_ms, block, claim.wake or ())

    def claimed(self, queue: str, reply: Any, sent_ns: int) -> List[Job]:
        """The jobs a claim's reply holds (``jobs_of``), with a claim event for each."""
        answered = time.time_ns()
        jobs = jobs_of(queue, reply)
        for job in jobs:
            job.claimed_ns = sent_ns
            self._event("claim", job.id, job.attempt, sent_ns, answered)
        return jobs

    def stale(self, job: Job) -> bool:
        """A lease's worth of time since the job's claim was sent: the process stalled between
        the claim and now (frozen, swapped out), so the lease may have run out and another
        attempt taken the job, even finished it. Its handler is not started (the job is left to
        its lease, counted as lost)."""
        if time.time_ns() < job.claimed_ns + self.lease_ms * 1_000_000:
            return False
        job.lease_lost.set()
        return True

    def renew_args(self, job: Job, progress: Optional[bytes] = None) -> List[Any]:
        """The ``EMQ.RENEW`` of a running job, with `progress` when there is one."""
        return cmd.renew(job.queue, job.id, job.attempt, self.lease_ms, progress)

    def renewed(
        self, job: Job, sent_ns: int, reply: Any, next_round: float
    ) -> Optional[Ending]:
        """A renewal's reply (an exception for one that failed), as a renew event: a lost
        lease ends the job's renewals; a failover or a lost connection, the next round tries
        again; a lease that ends before `next_round` (at the attempt's deadline) is renewed
        again just past its end (``leases.renew_at``). Whether the reply ended the attempt:
        ``EMQCANCELLED`` or ``EMQTIMEOUT`` (the worker then gives the job up)."""
        if cmd.lease_lost(reply):
            job.lease_lost.set()
        answered = time.time_ns()
        self._event("renew", job.id, job.attempt, sent_ns, answered, reply=reply)
        job._renew_at = leases.renew_at(
            cmd.lease_end(reply), answered, time.monotonic(), next_round, job._early
        )
        if job._renew_at is not None:
            job._early += 1
        if cmd.cancelled(reply):
            return "cancelled"
        if cmd.timed_out(reply):
            return "timed_out"
        return None

    def refused(
        self, job: Job, counted: str, command: str, options: List[Any], reply: Any
    ) -> Optional[Tuple[str, str, List[Any]]]:
        """``refused_outcome`` of `job`'s outcome, a result refused failing it with the worker's
        own backoff, as any failure does."""
        wait = None
        if self.backoff is not None and cmd.payload_refused(reply):
            wait = retry_in(self.backoff, job.attempt, reply)
        return refused_outcome(counted, command, options, reply, wait)

    def progress_refused(self, job: Job, reply: Any, sent: Optional[bytes]) -> bool:
        """Whether a renewal that sent `sent` as its progress was refused for it, larger than
        the server takes (``EMQPAYLOAD``): the progress is dropped (logged), unless the handler
        set another since, and the renewal is to be sent again without any, so the lease is
        kept."""
        if sent is None or not cmd.payload_refused(reply):
            return False
        log.warning("echomq: job %s's progress (%d bytes) was refused: %s", job.id, len(sent),
                    reply)
        if job.progress is sent:
            job.progress = None
        return True

    def tally(self, job: Job, outcome: str) -> None:
        """Counts the attempt as `outcome`, once: what comes after counts nothing more, but for
        an end the server made (``cancelled``, ``timed_out``) heard of after a settle it refused
        was counted ``lost``, which moves the attempt to that end's count. (``Worker`` calls it
        under its lock.)"""
        if job._counted == "lost" and outcome in ("cancelled", "timed_out"):
            self.counts["lost"] -= 1
        elif job._counted is not None:
            return
        job._counted = outcome
        self.counts[outcome] = self.counts.get(outcome, 0) + 1

    def settled(self, job: Job, reply: Any, counted: str) -> None:
        """Counts a settle's answer other than ``EMQCANCELLED`` (which ends the attempt as a
        cancel): ``counted`` when it went through; nothing when a renewal heard the attempt
        end meanwhile (that is its count); ``lost`` for ``EMQLEASE``; else failed-to-settle."""
        if not isinstance(reply, Exception):
            self.tally(job, counted)
        elif job._end_seen:
            pass
        elif cmd.lease_lost(reply):
            job.lease_lost.set()
            self.tally(job, "lost")
        else:
            self.tally(job, "failed-to-settle")
