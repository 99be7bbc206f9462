"""The producer's side: ``Queue`` enqueues jobs and operates a queue, over any redis-py
compatible client (``redis.Redis``, ``redis.cluster.RedisCluster``, ``valkey.Valkey``). Each
call builds its command and parses the reply with ``commands``; this is the sending. A
partitioned queue's jobs go to their partitions (``routing``), and what acts on the whole queue
acts on each partition (``spans``)."""

from __future__ import annotations

import time
from typing import (
    Any, Callable, Dict, Iterable, Iterator, List, Mapping, Optional, Sequence, Set, Tuple,
    TypeVar, Union,
)

from . import commands as cmd
from . import ids, listings, routing, spans, stream, tracing
from ._replicas import moved, pipelined, refresh, wait_settings
from ._retry import backoff, retry_after
from .cancel import cancel as cancelling
from .metrics import Metrics
from .metrics import read as read_metrics
from .flows import (
    Children, Node, NodeLike, Parent, ParentLike, batched, chained, minted, parents_of, steps,
)
from .serializers import Raw, Serializer

#: An encoded payload, as ``cmd.enqueue`` sends it.
RAW = Raw()

#: Jobs one ``EMQ.MENQUEUE`` carries (the server takes up to 10,000).
CHUNK = cmd.CHUNK

S = TypeVar("S", bound="Settings")
T = TypeVar("T")


class Settings:
    """A queue's settings, ``Queue``'s and ``AsyncQueue``'s: its client and name, how payloads
    are encoded, how often a call is tried again, and how many replicas a write waits for."""

    def __init__(
        self,
        client: Any,
        name: str,
        serializer: Optional[Serializer] = None,
        retries: int = 8,
        wait_replicas: int = 0,
        wait_timeout: float = 1.0,
        tracer_provider: Any = None,
    ) -> None:
        self.client = client
        #: Where the client's spans go (``tracing``): ``None`` for OpenTelemetry's global
        #: tracer provider.
        self.tracer_provider = tracer_provider
        self.name = name
        self.serializer: Serializer = serializer or Raw()
        self.retries = retries
        self.wait_replicas, self.wait_timeout_ms = wait_settings(wait_replicas, wait_timeout)
        #: The queue's partitions as far as known: learned from an ``EMQSPANNED`` refusal, a
        #: ``width()``, ``span`` or ``unspan``.
        self.router = routing.Router(name)
        #: Each queue's ``Router`` by name, this one's included, shared with the queues of
        #: ``_on``: where a parent's queue is partitioned (``routing.resolve``).
        self.routers: Dict[str, routing.Router] = {name: self.router}

    def _on(self: S, queue: str) -> S:
        """This queue's like for `queue` (a flow's jobs on other queues): the same client and
        settings."""
        if queue == self.name:
            return self
        other = type(self)(
            self.client, queue, self.serializer, self.retries, self.wait_replicas,
            self.wait_timeout_ms / 1000, self.tracer_provider,
        )
        other.routers = self.routers
        other.router = self.routers.setdefault(queue, other.router)
        return other


class Queue(Settings):
    """One queue of a deployment. Calls are retried, with backoff, through failovers and slot
    migrations (``TRYAGAIN``, ``READONLY``, ``LOADING``, lost connections); an enqueue carries
    an id minted here, so a retried one stays a single job.

    With ``wait_replicas`` n > 0, each enqueue is followed by ``WAIT n`` (``wait_timeout``
    seconds) on the same connection, and one that fewer replicas confirmed raises
    ``EmqNotReplicated``: the primary took it, but it may be lost in a failover.

    A partitioned queue (``span``) is used through its own name: a job goes to its partition,
    a call on one job (``job``, ``cancel``, ``requeue``, ``children``) or one group to the
    partition its id or group routes to, a schedule (``cron``, ``uncron``) to the one its
    name routes to, and ``stats``, ``metrics``, ``crons``, ``limit``, ``pause``, ``resume``,
    ``purge``, ``requeue_dead``, ``enable_events`` and ``disable_events`` act on every
    partition (``events`` reads one partition's stream, through a ``Queue`` of its name: the
    queue's own is refused, ``ValueError``). ``jobs`` and ``groups`` page
    through the partitions in turn. The width is the one known (``EMQ.WIDTH`` read once, when
    not known yet), read afresh by ``uncron``, ``crons`` and a walk's start (cursor ``"0"``);
    a user the server will not tell it (no ``+emq.width``: ``NOPERM``) has ordinary queues
    only."""

    def call(self, command: str, *args: Any) -> Any:
        """``command <queue> args...``, retried while the failure is transient; a refusal as
        its typed exception (``echomq.errors``)."""
        return self._send([command, self.name, *args])

    def write(self, command: str, *args: Any) -> Tuple[Any, Optional[int]]:
        """``call`` for a write: with ``wait_replicas``, the command and ``WAIT`` pipelined on
        one connection, retried alike. The reply and how many replicas confirmed the write
        (``None`` without a wait)."""
        return self._write([command, self.name, *args])

    def _send(self, args: List[Any]) -> Any:
        """`args` sent, retried while the failure is transient; a refusal raised typed."""
        attempt = 0
        while True:
            try:
                return self.client.execute_command(*args)
            except Exception as e:
                time.sleep(retry_after(e, attempt, self.retries))
                attempt += 1

    def _write(self, args: List[Any]) -> Tuple[Any, Optional[int]]:
        """``_send`` of a write, with ``WAIT`` on the node of the queue it names (``args[1]``: a
        partition, for a partitioned queue's job)."""
        if self.wait_replicas <= 0:
            return self._send(args), None
        attempt = 0
        while True:
            try:
                (reply,), confirmed = pipelined(
                    self.client, args[1], [args], self.wait_replicas, self.wait_timeout_ms
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
        self, payload: Any, id: Optional[str] = None, delay: Optional[float] = None,
        at: Optional[float] = None, priority: Optional[int] = None,
        unique: Optional[str] = None, unique_for: Optional[float] = None,
        children: Optional[int] = None, parents: Optional[Sequence[ParentLike]] = None,
        timeout: Optional[float] = None, group: Optional[str] = None,
        headers: Optional[Mapping[str, str]] = None,
    ) -> str:
        """Enqueues one job and returns its id. ``delay`` (seconds) or ``at`` (unix seconds)
        parks it until then; ``priority`` puts it ahead of (lower) or behind (higher) the
        default 0; with ``unique``, the job is written only while no job holds that key (for
        ``unique_for`` seconds, or until the holder is done or dead), and the holder's id is
        returned otherwise. ``timeout`` (seconds) bounds each attempt from its claim: the server
        ends one still running then (a retry, or ``dead`` after the last), error ``timeout``.
        ``group`` (a tenant, say: 1 to 128 printable ASCII bytes, no braces) puts the job in
        that group: claims take the groups with ready jobs in turn, the jobs without a group
        being one more (priorities hold within a group); the row's ``group`` names it.
        ``headers`` (at most 32 ``str`` keys and values) go with the job to each attempt
        (``job.headers``), with the trace context where ``opentelemetry-api`` traces the call
        (``tracing``). With ``wait_replicas``, ``EmqNotReplicated`` when fewer replicas confirmed it.

        Flows: with ``children`` n the job waits (``waiting``) until n children finished; with
        ``parents`` (``Parent``s or ``(queue, id[, on_fail])``, at most 16) it is a child of
        each, which a parent out of the queue's slot registers first (``EMQ.ADOPT``).
        ``EmqParentError`` when a parent refuses it.

        A partitioned queue's job goes to the partition its group, or else its id, routes to:
        the width is learned from the queue's first ``EMQSPANNED`` refusal (``EmqSpannedError``
        once a call was routed again twice). A job with parents reads its queue's width first
        (``EMQ.WIDTH``), so its parents register it in the partition it lands in, and a parent
        of a partitioned queue is found in the partition its id routes to (``routing.enqueue``;
        a grouped parent is named by its partition: ``partition(group)``, or ``job.queue``)."""
        return self._enqueue(
            payload, id, delay, at, priority, unique, unique_for, children, parents_of(parents),
            timeout, group, headers,
        )[0]

    def _enqueue(
        self, payload: Any, id: Optional[str], delay: Optional[float], at: Optional[float],
        priority: Optional[int], unique: Optional[str], unique_for: Optional[float],
        children: Optional[int], parents: List[Parent], timeout: Optional[float],
        group: Optional[str], headers: Optional[Mapping[str, str]], fresh: bool = False,
        resolved: bool = False,
    ) -> Tuple[str, str]:
        """``enqueue`` (``routing.enqueue``): the id, and the queue the job went to."""
        job_id, data = id or ids.mint(), self.serializer.dumps(payload)
        with tracing.sending(self.name, headers, self.tracer_provider) as sent:

            def build(target: str, above: Sequence[Parent]) -> List[Any]:
                return cmd.enqueue(
                    target, RAW, data, job_id, delay, at, priority, unique, unique_for,
                    children, above, timeout, group, sent.headers,
                )[1]

            build(self.name, parents)  # checked before anything is sent
            written, target = self._course(routing.enqueue(
                self.router, self.routers, job_id, group if group is not None else job_id,
                parents, build, fresh, resolved,
            ))
            if written is None:
                return job_id, target
            out = cmd.enqueued(*written, job_id, self.wait_replicas)
            sent.sent(out)
            return out, target

    def _course(self, course: routing.Course[T]) -> T:
        """Sends what `course` asks (``routing.SEND``: retried as ``_send``; ``WRITE``: as
        ``_write``), gives it each reply or throws it the exception; what it ends with."""
        reply: Any = None
        error: Optional[Exception] = None
        while True:
            try:
                kind, args = course.send(reply) if error is None else course.throw(error)
            except StopIteration as end:
                result: T = end.value
                return result
            try:
                reply = self._write(args) if kind == routing.WRITE else self._send(args)
                error = None
            except Exception as e:  # the course decides what it means (routing.py)
                reply, error = None, e

    def enqueue_many(
        self, payloads: Iterable[Any], chunk: int = CHUNK,
        headers: Optional[Mapping[str, str]] = None,
    ) -> List[str]:
        """Enqueues every payload, ``chunk`` to an atomic ``EMQ.MENQUEUE``; their ids, in order,
        each job with ``headers`` (and the trace context, as ``enqueue``). A ``BulkJob`` carries
        its own id, priority and headers (the job's over the call's). With
        ``wait_replicas``, every chunk is written, then ``EmqNotReplicated`` names the jobs of
        the chunks fewer replicas confirmed (the fewest confirmations its count). A partitioned
        queue's jobs are split by partition, ``chunk`` to a command (``routing.enqueue_many``)."""
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
                    written.add(job_ids, self._write(args)[1])
                    failure = None
                except Exception as e:  # the course decides what it means (routing.py)
                    failure = e

    def flow(self, tree: NodeLike) -> Node:
        """Enqueues a flow: a tree of ``Node``s (or mappings ``{"queue", "payload", "id"?,
        "on_fail"?, "timeout"?, "group"?, "priority"?, "delay"?, "at"?, "children"?}``), each
        job waiting for its children.
        Every missing id is minted first; the tree with them is returned, and giving it again
        retries the flow without a job written twice (``flows.minted`` mints them ahead, for a
        retry after an exception). Every node is checked before anything is sent (a bad
        ``on_fail``, ``group``, priority, delay, time or timeout, or a job named twice:
        ``ValueError``; a payload the serializer refuses: its error). Jobs are enqueued top down, each parent
        before its children, each in its ``group``, each child naming its parent by the queue
        (the partition: the one its group, or else its id, routes to) its parent went to."""
        tree = minted(tree)
        went: Dict[Tuple[str, str], str] = {}  # each job's queue: its partition, if any
        fresh: Set[str] = set()  # the queues whose width this flow read
        for step in steps(tree, self.serializer.dumps):
            parents = [p._replace(queue=went[(p.queue, p.id)]) for p in step.parents]
            _, went[(step.queue, step.id)] = self._on(step.queue)._enqueue(
                step.payload, step.id, step.delay, step.at, step.priority, None, None,
                step.children, parents,
                step.timeout, step.group, None, step.queue in fresh, True,
            )
            if parents:
                fresh.add(step.queue)
        return tree

    def chain(self, jobs: Sequence[NodeLike]) -> Node:
        """``flow`` of jobs that run one after the other, in the order given: each the parent
        of the one before. The flow's tree (its root the last job)."""
        return self.flow(chained(jobs))

    def batch(self, jobs: Sequence[NodeLike], on_complete: Union[Tuple[str, Any], NodeLike]) -> Node:
        """``flow`` of `jobs` and a callback, ``on_complete`` (``(queue, payload)`` or a node),
        which runs once after every job finished, however (each its child with ``on_fail``
        ``ignore``): its handler counts them with ``job.children().count("acked")``."""
        return self.flow(batched(jobs, on_complete))

    # ---- partitions ----

    def span(self, width: int) -> bool:
        """Makes the queue, while it holds no job, a partitioned queue of `width` partitions
        (1-1024; docs/cluster.md): each partition is marked, then the queue, which refuses jobs
        and claims from then on (``EMQSPANNED``), so producers and workers route. Whether
        anything changed (spanning again over the same width changes nothing);
        ``EmqSpanError`` for a queue that holds jobs, is spanned over another width or is a
        partition, asked first so that a refused span marks no partition."""
        marks = spans.span(self.name, width)
        found = self._send(spans.width_command(self.name))
        if spans.refused(found, self._send(cmd.stats(self.name)), width):
            self._send(marks[-1])  # the queue's own mark: the server's refusal, nothing marked
        changed = [cmd.flag(self._send(mark)) for mark in marks]
        self.router.learn(width)
        return any(changed)

    def unspan(self) -> bool:
        """Makes a partitioned queue an ordinary one again: each partition, then the queue
        (``spans.unspanning``). ``EmqSpanError`` for a partition that holds jobs: the queue
        stays spanned; drain them and call it again. Whether anything changed."""
        found = spans.unspan(self.name, self.width())
        commands = spans.unspanning(self.name, len(found), [self._send(c) for c in found])
        changed = [cmd.flag(self._send(command)) for command in commands]
        self.router.learn(0)
        return any(changed)

    def width(self) -> int:
        """The queue's partitions (``EMQ.WIDTH``), 0 for an ordinary queue (and for a
        partition, which takes jobs as one); learned for routing."""
        found = spans.width(self._send(spans.width_command(self.name)))
        self.router.learn(found)
        return found

    def partition(self, key: str) -> str:
        """The queue that holds a job with this group, or else this id: its partition, or the
        queue itself for an ordinary queue (the width read once, when not known yet). A grouped
        job of a partitioned queue is reached so, or through its worker's ``job.queue``:
        ``Queue(client, q.partition(group)).job(job_id)``."""
        self._width_known()
        return self.router.of(key)

    def partition_stats(self) -> Dict[str, Dict[str, Optional[int]]]:
        """Each partition's ``stats``, by name, in order (the width read again first); an
        ordinary queue's own, by its name."""
        targets = self.router.partitions() if self._read_width() else [self.name]
        return {t: cmd.counts(self._send(cmd.stats(t))) for t in targets}

    def _width_known(self) -> int:
        """The queue's width, read (``EMQ.WIDTH``) when not known yet: 0 where the server will
        not tell this user (``routing.known_width``)."""
        return self._course(routing.known_width(self.router))

    def _read_width(self) -> int:
        """The queue's width read afresh: where the server will not tell this user, the width
        known, else 0 (``routing.read_width``), so a worker run by a user without
        ``+emq.width`` claims an ordinary queue as ever, and a partitioned one's partitions
        once its claim's ``EMQSPANNED`` refusal taught it the width."""
        return self._course(routing.read_width(self.router))

    def _each(self, build: Callable[[str], List[Any]]) -> List[Any]:
        """`build`'s command sent to each partition of a partitioned queue, or to the queue
        itself: the replies, in order (``routing.each``: the width known)."""
        return self._course(routing.each(self.router, build))

    # ---- looking ----

    def stats(self) -> Dict[str, Optional[int]]:
        """The counts of each set (``waiting``: the flow parents that wait for children;
        ``pending`` counts every ready job, grouped or not), how many named groups the queue
        knows (``groups``: those with ready or active jobs, a limit of their own or a pause),
        whether the queue is paused, and its limits and their use. A partitioned queue's are
        its partitions' added up (``spans.totals``), with ``partitions``, their number."""
        if not self._width_known():
            return cmd.counts(self._send(cmd.stats(self.name)))
        each = self.partition_stats()
        return {**spans.totals(list(each.values())), "partitions": len(each)}

    def metrics(self) -> Metrics:
        """The queue's metrics as the server that holds it keeps them (``EMQ.METRICS``): they
        start from zero when that server restarts or a replica takes over. A partitioned
        queue's are its partitions' added up (``metrics.total``: the counts summed; the
        histograms summed bucket by bucket, where a partition's bucket bounds differ the one
        with more counted kept; the oldest pending age the greatest; ``enabled`` only when
        every partition's is), over the width known (read once, when not known yet; ``width``
        reads it again)."""
        return self._course(read_metrics(self.router))

    def job(self, job_id: str) -> Optional[Dict[str, Any]]:
        """A job's row, its set and its score there; ``None`` when there is no such job. (A
        partitioned queue's job is looked for in the partition its id routes to:
        ``partition``.)"""
        return cmd.row(self._send(cmd.job(self.partition(job_id), job_id)))

    def jobs(
        self, set_name: str, cursor: str = "0", count: Optional[int] = None, payloads: bool = False
    ) -> Tuple[str, List[Dict[str, Any]]]:
        """One page of a set (``EMQ.JOBS``), in its order, after ``cursor``: the next cursor
        (``"0"`` at the end) and the jobs (``commands.page``), up to ``count`` (default 100).

        A partitioned queue's page comes from one partition, each partition's set in its order,
        one partition after the other (``listings.walk``): its cursor is ``"<index>:<inner>"``,
        ``"0"`` after the last partition, and a page is empty only at the end. A walk's start
        (``"0"``) reads the width afresh; a later page takes the width known. A cursor whose
        partition is not one of the queue's raises ``ValueError`` before anything is sent (but
        the width, read when not known yet): the client checks only its ``<index>:`` part, the
        server the rest (``EmqCursorError``)."""
        return self._course(listings.jobs(self.router, set_name, cursor, count, payloads))

    def crons(self) -> List[Dict[str, Any]]:
        """The queue's schedules (``EMQ.CRONS``), by name (``commands.schedules``): a
        partitioned queue's, every partition's together, over the width read afresh."""
        return self._course(listings.crons(self.router))

    def groups(
        self, cursor: str = "0", count: Optional[int] = None
    ) -> Tuple[str, List[Dict[str, Any]]]:
        """One page of the queue's named groups (``EMQ.GROUPS``), the largest backlog first,
        after ``cursor``: the next cursor (``"0"`` at the end) and the groups
        (``commands.groups_page``), up to ``count`` (default 100). A group whose backlog
        changes between two pages may come twice, or not at all, in one walk. A partitioned
        queue's are paged one partition after the other, as ``jobs``' (each partition's largest
        backlog first), its cursor checked alike."""
        return self._course(listings.groups(self.router, cursor, count))

    def children(self, job_id: str) -> Children:
        """A flow parent's children, every page of ``EMQ.CHILDREN``: ``(queue, id)`` ->
        ``Child`` (status, data)."""
        found, cursor = Children(), "0"
        while True:
            reply = self._send(cmd.children(self.partition(job_id), job_id, cursor))
            cursor = cmd.children_page(reply, found)
            if cursor == "0":
                return found

    # ---- the event stream ----

    def enable_events(self, maxlen: Optional[int] = None) -> bool:
        """Turns the queue's event stream on (``EMQ.EVENTS ... ON``, capped near `maxlen`
        entries, 10,000 unless given): from then on each transition appends an entry to
        ``emq:{<queue>}:events`` (each partition's own, of a partitioned queue). Whether it
        changed (anywhere)."""
        return any(map(cmd.flag, self._each(lambda q: stream.switch(q, True, maxlen))))

    def disable_events(self) -> bool:
        """Turns the queue's event stream off (the stream stays; each partition's); whether it
        changed."""
        return any(map(cmd.flag, self._each(lambda q: stream.switch(q, False))))

    def events(
        self, start: str = "$", block: float = 1.0, count: int = stream.READ_COUNT
    ) -> Iterator[stream.QueueEvent]:
        """The queue's events as they come, after `start` (a stream id: ``"0"`` from the
        stream's first, ``"$"`` what comes next), until the caller stops iterating: an
        ``XREAD BLOCK`` of `block` seconds at a time, retried as any call. A blocked read holds
        a connection of the client's pool while it waits: give the client a ``socket_timeout``
        past `block`. A partitioned queue's events are in its partitions' streams, each read
        on its own (a ``Queue`` of each name ``partition_stats`` gives): ``ValueError``."""
        if self._width_known():
            raise ValueError(f"queue {self.name} is partitioned: read each partition's events")
        # "$" read once as the id it stands for: an entry appended between two reads that
        # waited for nothing is read too.
        last = start if start != "$" else stream.newest_id(self._send(stream.newest(self.name)))
        while True:
            reply = self._send(stream.read(self.name, last, int(block * 1000), count))
            found, end = stream.entries(reply)
            yield from found
            last = end or last

    # ---- operating ----

    def cancel(self, job_id: str) -> bool:
        """``cancel_flow``: whether the job was cancelled. A pending, scheduled or waiting job
        is removed; a running (active) job has its attempt ended at once: it goes to ``dead``
        with the error ``cancelled``, its worker's next renewal or outcome is refused with
        ``EmqCancelled`` and the worker stops its handler (``job.cancelled``); it can be
        requeued."""
        return self.cancel_flow(job_id) > 0

    def cancel_flow(self, job_id: str) -> int:
        """Removes a pending, scheduled or waiting job, or ends a running job's attempt (it
        goes to ``dead`` with the error ``cancelled``: see ``cancel``); for a waiting parent,
        with the children of its flow that have not started, in any slot (``echomq.cancel``):
        how many jobs went, 0 when the job was not there to cancel (or had finished)."""
        return self._cancel(job_id, False)

    def cancel_unstarted(self, job_id: str) -> int:
        """``cancel_flow`` only while the job has not started (``EMQ.CANCEL ... UNSTARTED``): a
        running job is left to run (0). It finishes an ``EmqCancelIncomplete``'s children."""
        return self._cancel(job_id, True)

    def _cancel(self, job_id: str, unstarted: bool) -> int:
        steps, reply = cancelling(self.partition(job_id), job_id, unstarted), None
        try:
            while True:
                command = steps.send(reply)
                try:
                    reply = self._send(command)
                except Exception as e:  # the cancel decides what it means (cancel.py)
                    reply = e
        except StopIteration as end:
            return int(end.value)

    def requeue(self, job_id: str) -> bool:
        return cmd.flag(self._send(cmd.requeue(self.partition(job_id), job_id)))

    def requeue_dead(self, count: Optional[int] = None) -> int:
        """Up to ``count`` (default 1,000) of the oldest dead jobs back to pending (of each
        partition, for a partitioned queue); how many."""
        return sum(map(cmd.count, self._each(lambda q: cmd.requeue_dead(q, count))))

    def purge(self, set_name: str, count: Optional[int] = None) -> int:
        """Deletes the jobs of the set (``pending``, ``scheduled``, ``dead`` or ``waiting``;
        ``active`` is refused, ``EmqSetError``): ``EMQ.PURGE ... COUNT`` of ``count`` (1,000)
        jobs, of each partition of a partitioned queue, until no call deletes that many, or as
        many rounds as the set's size at the start takes (so jobs that keep coming cannot hold
        it in the loop); how many in all."""
        step = cmd.purge_step(count)
        total = 0
        for _ in range(cmd.purge_rounds(self.stats().get(set_name), step)):
            deleted = [cmd.count(r) for r in self._each(lambda q: cmd.purge(q, set_name, step))]
            total += sum(deleted)
            if all(n < step for n in deleted):
                break
        return total

    def pause(self) -> bool:
        """Stops claims taking the queue's jobs (every partition's); whether it was not paused."""
        return any(map(cmd.flag, self._each(cmd.pause)))

    def resume(self) -> bool:
        return any(map(cmd.flag, self._each(cmd.resume)))

    def limit(
        self, concurrency: Union[int, None, cmd.Keep] = cmd.KEEP,
        rate: Union[int, None, cmd.Keep] = cmd.KEEP, per: Optional[float] = None,
        off: bool = False, timeout: Union[float, None, cmd.Keep] = cmd.KEEP,
        group_concurrency: Union[int, None, cmd.Keep] = cmd.KEEP,
        group_rate: Union[int, None, cmd.Keep] = cmd.KEEP, group_per: Optional[float] = None,
    ) -> Dict[str, Optional[int]]:
        """``EMQ.LIMIT``: sets the limits given (``concurrency`` jobs active at once; ``rate``
        claims every ``per`` seconds; ``timeout`` seconds for each attempt of a job without its
        own; ``group_concurrency`` jobs of each group active at once and ``group_rate`` claims
        of each group every ``group_per`` seconds, for the groups without limits of their own),
        ``None`` removes one, one left out stays; ``off`` removes them all; with nothing
        given, reports them. The limits and their use, in the server's units: ``rate-per``,
        ``group-rate-per`` and ``timeout`` in ms.

        A partitioned queue's ``concurrency`` and ``rate`` are shared out between its
        partitions (``spans.portion``: ``L // n``, one more for the first ``L % n``; a limit
        below the number of partitions is a ``ValueError``), its other limits set on each; the
        report adds the partitions' up (``spans.totals``)."""
        width = self._width_known()
        targets = self.router.partitions() if width else [self.name]
        replies = [
            cmd.counts(self._send(cmd.limit(
                target, spans.shared(concurrency, width, i), spans.shared(rate, width, i), per,
                off, timeout, group_concurrency, group_rate, group_per,
            )))
            for i, target in enumerate(targets)
        ]
        return spans.totals(replies) if width else replies[0]

    def group_limit(
        self, group: str, concurrency: Union[int, None, cmd.Keep] = cmd.KEEP,
        rate: Union[int, None, cmd.Keep] = cmd.KEEP, per: Optional[float] = None,
    ) -> Dict[str, Any]:
        """``EMQ.LIMIT <queue> GROUP <group>``: sets the group's own limits given, over the
        queue's defaults (``concurrency`` of its jobs active at once, ``rate`` claims of its
        jobs every ``per`` seconds), ``None`` removes one, one left out stays; with nothing
        given, reports. The group's ``group``, ``active`` and ``ready`` jobs, its own
        ``concurrency`` (``None``: the default applies), the queue's ``group-concurrency``,
        ``held`` (1 while its limit holds it back) and, with group rates, ``rate``,
        ``rate-per`` (ms), ``rate-used``, ``group-rate`` and ``group-rate-per``."""
        target = self.partition(group)
        return cmd.fields(self._send(cmd.group_limit(target, group, concurrency, rate, per)))

    def pause_group(self, group: str, seconds: Optional[float] = None) -> bool:
        """Stops claims taking the group's jobs (it keeps them, and takes enqueues), for
        ``seconds`` (the server resumes it then) or until ``resume_group``; whether it was not
        paused already."""
        return cmd.flag(self._send(cmd.pause_group(self.partition(group), group, seconds)))

    def resume_group(self, group: str) -> bool:
        """Lets claims take the group's jobs again; whether it was paused."""
        return cmd.flag(self._send(cmd.resume_group(self.partition(group), group)))

    def cron(
        self, name: str, payload: Any, spec: Optional[str] = None,
        every: Optional[float] = None, priority: Optional[int] = None,
    ) -> int:
        """A repeating schedule: ``spec`` (a cron expression, UTC) or ``every`` seconds; its
        next firing, unix ms. The arguments and the payload are checked and encoded before
        anything is sent (``ValueError``). A partitioned queue's is kept by the partition its
        name routes to (``partition``), as a job of that group is, and fires into it; a stale
        width is corrected by the server's ``EMQSPANNED`` as an enqueue's is
        (``listings.cron``)."""
        args = cmd.cron(self.name, self.serializer, name, payload, spec, every, priority)
        return cmd.count(self._course(listings.cron(self.router, name, args)))

    def uncron(self, name: str) -> bool:
        """Removes the schedule (from the partition its name routes to, over the width read
        afresh); whether it was there."""
        return cmd.flag(self._course(listings.uncron(self.router, name)))
