"""The consumer's side: ``Worker`` claims jobs in batches up to its free concurrency, runs them
in a pool of one thread a slot, renews their leases in the background for as long as they run, settles
each (``ACK``, or ``FAIL`` with the exception and its traceback), gives up a handler whose
attempt the server ended (cancelled, or timed out), delivers its queue's flow hand-overs
(``outbox``), tells an ``on_event`` hook of each step (``events``), and stops gracefully on
SIGTERM or SIGINT. Its commands are built and their replies parsed by ``commands``."""

from __future__ import annotations

import threading
import time
from queue import Empty, SimpleQueue
from typing import Any, Callable, Dict, List, Optional, Tuple

from . import commands as cmd
from . import leases, outbox, rounds, tracing
from ._replicas import moved, pipelined, refresh, retryable
from ._retry import backoff, server_full, transient
from .claiming import (
    MAX_ERROR, Backoff, Claiming, check_server, jobs_of, outcome, version_options,
)
from .errors import EmqSpannedError, translate
from .events import Action, Ending, WorkerEvent, failure, log
from .signals import stop_on_signals
from .job import Job, Retry
from .queue import Queue
from .serializers import Serializer

#: ``Job`` and ``Retry`` (job.py), ``Claiming``, ``outcome``... (claiming.py) are still found
#: here, where they were first.
__all__ = [
    "Claiming", "Job", "MAX_ERROR", "Retry", "Worker", "jobs_of", "outcome", "version_options",
]

#: Most outcomes (``ACK``, ``FAIL``) sent in one pipeline.
SETTLE_BATCH = 100

#: An outcome on its way to its queue's settler: the job, what it counts as, the settle
#: command and its options.
Settling = Tuple[Job, str, str, List[Any]]


def settled(
    serializer: Serializer, job: Job, run: Callable[[Job], Any], provider: Any = None,
    backoff: Optional[Backoff] = None,
) -> Tuple[Tuple[str, str, List[Any]], Optional[BaseException]]:
    """Decodes the job's payload, runs `run` (the handler) and says what its end means
    (``outcome``), in the attempt's span (``tracing.processing``): a payload that does not
    decode, a handler's exception and a result that does not encode each fail the job. The
    second value is the exception it failed with; one that is not an ``Exception``
    (``KeyboardInterrupt``, ``SystemExit``...) stops the worker."""
    with tracing.processing(job.queue, job.id, job.attempt, job.headers, provider) as span:
        ended, error = _settled(serializer, job, run, backoff)
        tracing.outcome(span, ended[0], error)
        return ended, error


def _settled(
    serializer: Serializer, job: Job, run: Callable[[Job], Any], backoff: Optional[Backoff]
) -> Tuple[Tuple[str, str, List[Any]], Optional[BaseException]]:
    try:
        job.payload = serializer.loads(job.payload)
        result = run(job)
    except BaseException as e:
        return outcome(serializer, error=e, backoff=backoff, attempt=job.attempt), e
    try:
        return outcome(serializer, result=result), None
    except Exception as e:
        return outcome(serializer, error=e, backoff=backoff, attempt=job.attempt), e


class Worker(Claiming):
    """Runs ``handler(job)`` for the jobs of ``queue``, up to ``concurrency`` at once.

    A return acknowledges the job (a returned value is kept as its result); ``Retry(after)``
    fails it for a retry after that many seconds; any other exception, and a payload that does
    not decode, fails it with the exception and its traceback (the server retries it with
    backoff, then buries it). The client must not time out a blocked read sooner than
    ``block`` seconds (redis-py's default has no socket timeout).

    A job cancelled while it runs (``EMQ.CANCEL``; the next renewal, every ``renew_every`` of
    the lease, or the settle answers ``EMQCANCELLED``) sets ``job.cancelled`` for its handler to
    check; the worker stops waiting for that handler: its slot takes the next job (a new pool
    thread, while the old one finishes the handler) and nothing is sent for it. An attempt past
    its deadline (a renewal answers ``EMQTIMEOUT``) is given up the same way, with
    ``job.timed_out``.

    A thread of its own delivers the hand-overs of the queue's finished flow children that
    wait in its outbox (``outbox``); a parent's handler reads its children with
    ``job.children()``.

    A partitioned queue (``Queue.span``; docs/cluster.md) is claimed with one loop a primary,
    each on a thread and a connection of its own: it goes round that primary's partitions with
    claims that do not block and, once a whole round found nothing, blocks on the next with
    ``WAKE`` naming the others, so the worker holds one blocked claim a primary. The loops
    share ``concurrency``: a claim holds the slots it asks for until its reply (a blocked one,
    when there are several primaries, one), so give a worker more slots than the queue has
    primaries. Each job's ``queue`` is its partition, where its renewals and its outcome go.
    The width is read at start, and again each time a blocking claim times out (a width
    changed, docs/cluster.md "Changing the width", is claimed anew); a queue spanned later is
    switched to at its first ``EMQSPANNED``, and a failed claim (a failover, a ``MOVED``) has
    the worker read the slot map and the width again and regroup.

    ``name`` identifies the worker in its events (default ``<hostname>:<pid>:<6 random hex>``);
    ``on_event`` is called with a ``WorkerEvent`` for each claim, renewal, settle, handler
    start and end, and hand-over. With ``wait_replicas`` n > 0, each settle pipeline ends with ``WAIT n``
    (``wait_timeout`` seconds); what it reported goes into the settle events' ``replicated``.
    A handler's exception is retried after the server's backoff, or with ``backoff`` (seconds,
    or a function of the attempt, 1 for the first, and the exception) after the worker's own.
    With ``opentelemetry-api`` installed, each attempt runs in a consumer span of the trace its
    job's headers carry (``tracing``), from ``tracer_provider`` (default: the global one).
    """

    def __init__(
        self,
        client: Any,
        queue: str,
        handler: Callable[[Job], Any],
        concurrency: int = 4,
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
        self.queue = Queue(
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
        self._running: Dict[Tuple[str, int], Job] = {}
        self._outcomes: "SimpleQueue[Settling]" = SimpleQueue()
        self._inbox: "SimpleQueue[Optional[Job]]" = SimpleQueue()
        self._lock = threading.Condition()
        self._stopping = threading.Event()
        #: Slots a partition's claim holds while it is on its way (``_reserve``), and the claim
        #: loops waiting for room, first come first served.
        self._held = 0
        self._turns: List[object] = []
        #: The queues claimed: the queue, or its partitions (their outboxes are swept).
        self._queues = [queue]
        #: A partition's ``Queue``, for its jobs' ``children``.
        self._partitions: Dict[str, Queue] = {}

    # ---- control ----

    def stop(self) -> None:
        """Stops claiming; ``run`` returns once the running jobs finished, or the timeout ran."""
        self._stopping.set()
        with self._lock:
            self._lock.notify_all()

    def run(self) -> None:
        """Claims and runs jobs until ``stop`` (or SIGTERM/SIGINT, when run on the main thread).
        A handler's ``BaseException`` that is not an ``Exception`` (``KeyboardInterrupt``,
        ``SystemExit``...) fails its job and stops the worker as ``stop`` does; ``run`` raises it
        once the other running jobs are settled."""
        client = self.queue.client
        check_server(client, self.queue.retries)
        renewer = threading.Thread(target=self._renew_loop, name="echomq-renew", daemon=True)
        renewer.start()
        settler = threading.Thread(target=self._settle_loop, name="echomq-settle", daemon=True)
        settler.start()
        courier = threading.Thread(
            target=outbox.deliver,
            args=(client, lambda: self._queues, self._stopping, self._event,
                  self.queue.wait_replicas, self.queue.wait_timeout_ms),
            name="echomq-outbox", daemon=True,
        )
        courier.start()
        # The pool: one thread a slot, each taking the next claimed job (daemon threads, so a
        # handler still running past the shutdown timeout does not hold the process).
        for n in range(self.concurrency):
            threading.Thread(target=self._handler_loop, name=f"echomq-handler-{n}", daemon=True).start()
        restore = self._install_signals()
        try:
            try:
                self._claim_loop()
            finally:
                # Even when claiming failed for good: the running jobs' outcomes are sent.
                self._stopping.set()
                self._drain()
        finally:
            with self._lock:
                # A handler still running now is left to its lease: its outcome is not sent.
                self._closed = True
            for _ in range(self.concurrency):
                self._inbox.put(None)
            restore()
        if self._fatal is not None:
            raise self._fatal

    def _install_signals(self) -> Callable[[], None]:
        return stop_on_signals(self.stop)

    # ---- claiming ----

    def _claim_loop(self) -> None:
        """Reads the queue's width and claims it: an ordinary queue as ever (``_claim_queue``),
        a partitioned one with a loop a primary (``_claim_partitions``). Again once the queue
        was spanned meanwhile, or a partition's claim failed (the slot map read again, the
        loops regrouped, after a backoff)."""
        failures = 0
        while not self._stopping.is_set():
            try:
                if self.queue._read_width() == 0:
                    self._claim_queue()
                    continue
                ends = self._claim_partitions()
                if ends.fatal is not None:
                    raise ends.fatal
                if ends.lapse is None:
                    continue
                failures = ends.after(failures)
            except Exception as e:
                if not (transient(e) or server_full(e)):
                    raise
            # A failover, a reshard, a lost connection: the width read again after a while.
            self._stopping.wait(backoff(failures))
            failures += 1

    def _claim_queue(self) -> None:
        """Claims of the queue itself, up to the free slots, until stopped; returns once it
        answers ``EMQSPANNED`` (it was spanned since)."""
        self._queues = [self.queue.name]
        failures = 0
        while not self._stopping.is_set():
            with self._lock:
                free = self.concurrency - len(self._running)
                if free <= 0:
                    self._lock.wait(timeout=0.1)
                    continue
            try:
                sent = time.time_ns()
                claimed = self.queue.client.execute_command(*self.claim_args(self.queue.name, free))
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
                # A failover, a reshard, a lost connection: claim again after a while.
                self._stopping.wait(backoff(failures))
                failures += 1
                continue
            self._dispatch(self.claimed(self.queue.name, claimed, sent), 0)

    def _claim_partitions(self) -> rounds.Ends:
        """Claims the queue's partitions with one loop a primary (``_claim_group``, each on a
        thread of its own and, on a cluster, on its node's connection), until stopped or a
        claim failed (the slot map is read again then): how they ended."""
        client = self.queue.client
        width = self.queue.router.width or 0
        self._queues = self.queue.router.partitions()
        groups = rounds.by_primary(client, self._queues)
        over, ends = threading.Event(), rounds.Ends()
        threads = [
            threading.Thread(
                target=self._claim_group, name=f"echomq-claim-{n}", daemon=True,
                args=(client if node is None else client.get_redis_connection(node), partitions,
                      len(groups), width, over, ends),
            )
            for n, (node, partitions) in enumerate(groups)
        ]
        for t in threads:
            t.start()
        while not (self._stopping.is_set() or over.is_set()):
            over.wait(0.1)
        over.set()
        for t in threads:
            t.join()
        if ends.lapse is not None:
            refresh(client)
        return ends

    def _claim_group(
        self, conn: Any, partitions: List[str], loops: int, width: int,
        over: threading.Event, ends: rounds.Ends,
    ) -> None:
        """One primary's claim loop, round its partitions (``rounds.Rotation``), each claim
        holding the slots it asks for (``_reserve``), until stopped or `over`. A failed claim
        (a ``MOVED`` among them: the slot map changed) sets `over`: every loop ends, and the
        worker regroups, or raises one refused for good. So does a blocking claim that timed
        out once the queue's width is no longer `width` (``_resized``)."""
        rotation = rounds.Rotation(partitions)
        while not (self._stopping.is_set() or over.is_set()):
            claim = rotation.next()
            count = self._reserve(self.wants(claim, loops), over)
            if not count:
                continue
            sent = time.time_ns()
            try:
                reply = conn.execute_command(*self.partition_claim(claim, count))
            except Exception as e:
                self._dispatch([], count)
                with self._lock:
                    ends.failed(translate(e), transient(e) or server_full(e) or moved(e))
                over.set()
                return
            jobs = self.claimed(claim.partition, reply, sent)
            self._dispatch(jobs, count)
            with self._lock:
                ends.took(claim)
            rotation.took(claim, len(jobs))
            if claim.wake is not None and reply is None and self._resized(width, ends):
                over.set()
                return

    def _resized(self, width: int, ends: rounds.Ends) -> bool:
        """Whether the queue's width (``EMQ.WIDTH``, read when a blocking claim timed out: the
        partitions were idle) is no longer `width`: it was unspanned, and maybe spanned over
        another width, since the worker read it. Its loops then end and it claims anew. A read
        that failed ends them too, as a failed claim does (noted in `ends`). Read as the
        queue's calls read it (``Queue._read_width``): for a user the server will not tell,
        the width known, so its loops go on."""
        try:
            found = self.queue._read_width()
        except Exception as e:
            with self._lock:
                ends.failed(translate(e), transient(e) or server_full(e) or moved(e))
            return True
        return found != width

    def _reserve(self, wanted: int, over: threading.Event) -> int:
        """Holds up to `wanted` free slots for a claim, once it is the first of the loops
        waiting for room: how many; 0 once the worker stops or `over` is set. The loops share
        the concurrency: a job claimed has its slot until its outcome is sent."""
        turn = object()
        with self._lock:
            self._turns.append(turn)
            try:
                while not (self._stopping.is_set() or over.is_set()):
                    free = self.concurrency - len(self._running) - self._held
                    if self._turns[0] is turn and free > 0:
                        self._held += min(free, wanted)
                        return min(free, wanted)
                    self._lock.wait(timeout=0.1)
                return 0
            finally:
                self._turns.remove(turn)
                self._lock.notify_all()

    def _dispatch(self, jobs: List[Job], held: int) -> None:
        """Hands the jobs a claim returned to the pool, each taking a slot, and gives back the
        `held` slots the claim held."""
        for job in jobs:
            job._children = self._queue_of(job.queue).children
        with self._lock:
            self._held -= held
            for job in jobs:
                self._running[(job.id, job.attempt)] = job
            self._lock.notify_all()
        for job in jobs:
            self._inbox.put(job)

    def _queue_of(self, queue: str) -> Queue:
        """The ``Queue`` of a job's queue: the worker's, or its partition's."""
        if queue == self.queue.name:
            return self.queue
        if queue not in self._partitions:
            self._partitions[queue] = self.queue._on(queue)
        return self._partitions[queue]

    def _drain(self) -> None:
        deadline = time.monotonic() + self.shutdown_timeout
        with self._lock:
            while self._running and time.monotonic() < deadline:
                self._lock.wait(timeout=max(0.0, min(0.1, deadline - time.monotonic())))

    # ---- one job ----

    def _handler_loop(self) -> None:
        while True:
            job = self._inbox.get()
            if job is None:
                return
            if not self._run_job(job):
                return  # ended while its handler ran: another thread took this slot

    def _release(self, job: Job) -> None:
        """Frees `job`'s slot (under the lock)."""
        self._running.pop((job.id, job.attempt), None)
        self._lock.notify_all()

    def _run_job(self, job: Job) -> bool:
        """Runs the job's handler and hands its outcome to the settler; False when the attempt
        ended while the handler ran (``_ended``): its outcome is dropped, and this thread is no
        longer one of the pool's."""
        if self.stale(job):
            with self._lock:
                self.tally(job, "lost")
                self._release(job)
            return True
        with self._lock:
            if job._over:
                self._release(job)
                return True
            job._phase = "running"
        self._event("handler_start", job.id, job.attempt, time.time_ns())
        ended, error = settled(
            self.queue.serializer, job, self.handler, self.queue.tracer_provider, self.backoff
        )
        self._event("handler_end", job.id, job.attempt, time.time_ns(), error=failure(error))
        with self._lock:
            if job._phase == "abandoned":
                return False
            job._phase = "ended"
        fatal = None if isinstance(error, Exception) else error
        if fatal is not None:
            # Stops claiming before the failure frees the slot: nothing is claimed after it.
            with self._lock:
                self._fatal = self._fatal or fatal
            self.stop()
        # The settler sends it, with the other outcomes waiting then, and frees the slot.
        self._outcomes.put((job, *ended))
        return True

    def _ended(self, job: Job, why: Ending) -> None:
        """The server ended this attempt while it ran: ``cancelled`` (a renewal or a settle
        answered ``EMQCANCELLED``) or ``timed_out`` (a renewal answered ``EMQTIMEOUT``). Once:
        the event of that name, then the flag (``job.cancelled``, ``job.timed_out``) set and
        counted (``tally``: a settle counted ``lost`` before is moved). A handler still running
        is no longer waited for: its slot is freed and a new pool thread takes the next job,
        while the old one runs the handler to its end, which sends nothing."""
        with self._lock:
            if job._end_seen:
                return
            job._end_seen = True
        self._event(why, job.id, job.attempt, time.time_ns())
        with self._lock:
            job._end(why)
            self.tally(job, why)
            if job._phase != "running":
                return  # not started (its thread skips it) or ended (the settler drops it)
            job._phase = "abandoned"
            self._release(job)
            if not self._closed:
                threading.Thread(
                    target=self._handler_loop, name=f"echomq-handler-{job.id}", daemon=True
                ).start()

    def _settle_loop(self) -> None:
        """Hands each outcome to its queue's settler thread (a partitioned queue's partitions
        each have one, started at the first), so a queue whose primary fails over holds up no
        other queue's settles; ends them once the worker has stopped and no job runs."""
        settlers: Dict[str, "SimpleQueue[Optional[Settling]]"] = {}
        while True:
            try:
                one = self._outcomes.get(timeout=0.1)
            except Empty:
                with self._lock:
                    if self._closed or (self._stopping.is_set() and not self._running):
                        break
                continue
            settler = settlers.get(one[0].queue)
            if settler is None:
                settler = settlers[one[0].queue] = SimpleQueue()
                threading.Thread(
                    target=self._settle_queue, args=(settler,),
                    name=f"echomq-settle-{one[0].queue}", daemon=True,
                ).start()
            settler.put(one)
        for settler in settlers.values():
            settler.put(None)

    def _settle_queue(self, waiting: "SimpleQueue[Optional[Settling]]") -> None:
        """One queue's settler: sends the outcomes waiting, as many as are waiting in one
        pipeline, and frees their slots once the server has them: the queue's `active` count
        never exceeds the concurrency. Ends at ``None``."""
        while True:
            first = waiting.get()
            if first is None:
                return
            batch = [first]
            last = False
            while len(batch) < SETTLE_BATCH:
                try:
                    more = waiting.get_nowait()
                except Empty:
                    break
                if more is None:
                    last = True
                    break
                batch.append(more)
            try:
                self._settle(batch)
            except Exception:
                # None that a settle foresees (a refusal, a lost connection, a slot on the move
                # are each outcome's own): the outcomes not sent are dropped (their jobs run
                # again once their leases run out), and this thread goes on settling the next.
                log.exception("echomq: a settle of %d outcomes failed; the worker goes on",
                              len(batch))
            finally:
                with self._lock:
                    for job, *_ in batch:
                        self._release(job)
            if last:
                return

    def _settle(self, batch: List[Settling]) -> None:
        """Sends each outcome, unless its lease was lost, its attempt ended (cancelled, timed
        out: a renewal sent before the handler ended heard of it), or the worker shut down
        first. Each attempt is counted once (``tally``): a refusal of an attempt whose end was
        heard of counts nothing more."""
        send: List[Settling] = []
        with self._lock:
            for one in batch:
                job = one[0]
                if job._end_seen:
                    continue
                if self._closed or job.lease_lost.is_set():
                    self.tally(job, "lost")
                    continue
                send.append(one)
        if not send:
            return
        replies = self._send(send)
        # What did not get through (a failover, a lost connection, a slot on the move) is sent
        # again one by one, each retried while its attempt's end is not heard of; one applied
        # already answers EMQLEASE, counted as lost.
        for i, one in enumerate(send):
            attempt = 0
            while retryable(replies[i]) and attempt < self.queue.retries and not one[0]._end_seen:
                if moved(replies[i]):
                    refresh(self.queue.client)
                time.sleep(backoff(attempt))
                attempt += 1
                replies[i] = self._send([one])[0]
            # One result larger than the server takes refuses its whole EMQ.MACK, nothing of it
            # written: each acknowledgement goes again alone, and only a refused one's changes.
            if one[2] == cmd.ACK and cmd.payload_refused(replies[i]):
                replies[i] = self._send([one])[0]
            instead = self.refused(*one, replies[i])
            while instead is not None:
                send[i] = one = (one[0], *instead)
                replies[i] = self._send([one])[0]
                instead = self.refused(*one, replies[i])
        for (job, counted, _, _), reply in zip(send, replies):
            if cmd.cancelled(reply):
                self._ended(job, "cancelled")  # cancelled as it ended: not retried, not lost
                continue
            with self._lock:
                self.settled(job, reply, counted)

    def _send(self, send: List[Settling]) -> List[Any]:
        """The outcomes in one pipeline (``_pipeline``), or with ``wait_replicas`` one a queue
        (a partitioned queue's jobs are in its partitions), each ``WAIT`` on that queue's node;
        the replies in the order of ``send`` (an exception for one that failed)."""
        by_queue: Dict[str, List[int]] = {}
        for i, (job, *_) in enumerate(send):
            by_queue.setdefault(job.queue, []).append(i)
        each_queue = self.queue.wait_replicas > 0
        replies: List[Any] = [None] * len(send)
        for places in list(by_queue.values()) if each_queue else [list(range(len(send)))]:
            self._pipeline(send, places, replies)
        return replies

    def _pipeline(
        self, send: List[Settling], places: List[int], replies: List[Any]
    ) -> None:
        """One pipeline of the outcomes at `places` of `send`: each queue's acknowledgements as
        one ``EMQ.MACK`` (each job's outcome in its place), each ``FAIL`` on its own, then
        ``WAIT`` with ``wait_replicas``; each reply put in `replies` at its place, a settle
        event for each."""
        acks: Dict[str, List[int]] = {}
        for i in places:
            if send[i][2] == cmd.ACK:
                acks.setdefault(send[i][0].queue, []).append(i)
        commands: List[List[Any]] = []
        stands: List[List[int]] = []  # the places each command stands for
        for queue, acked in acks.items():
            jobs = (send[i] for i in acked)
            commands.append(cmd.mack(queue, ((j.id, j.attempt, o) for j, _, _, o in jobs)))
            stands.append(acked)
        for i in places:
            job, _, command, options = send[i]
            if command != cmd.ACK:
                commands.append(cmd.settle(job.queue, command, job.id, job.attempt, options))
                stands.append([i])
        waiting = self.queue.wait_replicas
        sent = time.time_ns()
        try:
            answers, confirmed = pipelined(
                self.queue.client, send[places[0]][0].queue, commands, waiting,
                self.queue.wait_timeout_ms,
            )
        except Exception as e:
            answers, confirmed = [e] * len(commands), (0 if waiting > 0 else None)
        answered = time.time_ns()
        for args, at, answer in zip(commands, stands, answers):
            each = cmd.macked(answer, len(at)) if args[0] == "EMQ.MACK" else [answer]
            for i, reply in zip(at, each):
                replies[i] = reply
        replicated = None if confirmed is None else confirmed >= waiting
        for i in places:
            job, _, command, _ = send[i]
            action: Action = "ack" if command == cmd.ACK else "fail"
            self._event(
                "settle", job.id, job.attempt, sent, answered, reply=replies[i],
                action=action, replicated=replicated,
            )

    # ---- leases ----

    def _renew(self, job: Job, progress: Optional[bytes]) -> Any:
        """One renewal's reply (with `progress`), or the exception it failed with."""
        try:
            return self.queue.client.execute_command(*self.renew_args(job, progress))
        except Exception as e:
            return e

    def _renew_loop(self) -> None:
        next_round = time.monotonic() + self.renew_interval
        while True:
            with self._lock:
                pause = leases.wake(list(self._running.values()), next_round) - time.monotonic()
            if self._stopping.is_set():
                time.sleep(max(0.0, pause))  # draining: the running jobs keep their leases
            else:
                self._stopping.wait(max(0.0, pause))
            with self._lock:
                if self._closed:
                    return
                jobs = list(self._running.values())
            if self._stopping.is_set() and not jobs:
                return
            jobs, next_round = leases.due(jobs, next_round, time.monotonic(), self.renew_interval)
            for job in jobs:
                if not leases.renewing(job):
                    continue  # its outcome went on its way (or its end was heard) meanwhile
                sent = time.time_ns()
                progress = job.progress
                reply = self._renew(job, progress)
                if self.progress_refused(job, reply, progress):
                    reply = self._renew(job, None)
                why = self.renewed(job, sent, reply, next_round)
                if why is not None:
                    self._ended(job, why)
