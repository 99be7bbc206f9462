"""Every ``EMQ.*`` command the package sends: a pure function per command that builds its
arguments (the command's name, then the queue, then the rest), and one per reply shape that
parses what the server answered. No I/O: ``Queue``, ``AsyncQueue`` and the workers send what
these build, each its own way (blocking or awaited, alone or pipelined)."""

from __future__ import annotations

import enum
import re
from typing import (
    Any, Dict, Iterable, Iterator, List, Mapping, NamedTuple, Optional, Sequence, Tuple, Union,
)

from . import ids
from .errors import (
    EmqCancelled, EmqLeaseLost, EmqNotReplicated, EmqPayloadError, EmqTimeout, EmqVersionError,
    translate,
)
from .flows import MAX_CHILDREN, Child, Children, Parent, check_when, timeout_ms
from .serializers import Serializer
from .slots import slot

#: The protocol major version this client speaks (``EMQ.VERSION`` answers ``echomq:<x.y.z>``).
PROTOCOL_MAJOR = 2
#: Jobs one ``EMQ.MENQUEUE`` carries (the server takes up to 10,000).
CHUNK = 1000
#: Jobs one ``EMQ.PURGE`` deletes unless told otherwise (the server's default).
PURGE_COUNT = 1000
#: The two outcomes of a job's attempt (``settle``).
ACK, FAIL = "EMQ.ACK", "EMQ.FAIL"
#: Entries an ``EMQ.OUTBOX`` or an ``EMQ.CHILDREN`` page asks for.
PAGE = 1000
#: The name ``jobs`` gives each set's score, as ``EMQ.JOB`` names it (pending has none).
SCORES = {"scheduled": "due", "active": "lease-deadline", "dead": "died-at", "waiting": "due"}


class Keep(enum.Enum):
    """A limit left out of ``EMQ.LIMIT``: it stays as it is."""

    KEEP = "keep"


#: A ``limit`` not given: it stays as it is (``None`` removes it).
KEEP = Keep.KEEP


# ---- building: producing ----


def enqueue(
    queue: str,
    serializer: Serializer,
    payload: Any,
    id: Optional[str],
    delay: Optional[float],
    at: Optional[float],
    priority: Optional[int],
    unique: Optional[str],
    unique_for: Optional[float],
    children: Optional[int] = None,
    parents: Sequence[Parent] = (),
    timeout: Optional[float] = None,
    group: Optional[str] = None,
    headers: Optional[Mapping[str, str]] = None,
) -> Tuple[str, List[Any]]:
    """The job's id (minted when not given) and its ``EMQ.ENQUEUE``: a parent waits for
    ``children`` children; a child names its ``parents`` (``flows.parents_of`` checked them);
    ``timeout`` (seconds, sent in ms) bounds each attempt from its claim; ``group`` (sent as
    is: the server checks it) puts the job in that group of the queue; ``headers`` go with
    the job to each of its attempts (the server checks them)."""
    job_id = id or ids.mint()
    args: List[Any] = ["EMQ.ENQUEUE", queue, job_id, serializer.dumps(payload)]
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
    if children is not None:
        if not 1 <= children <= MAX_CHILDREN:
            raise ValueError(f"children is 1 to {MAX_CHILDREN}")
        args += ["CHILDREN", children]
    for parent in parents:
        args += ["PARENT", parent.queue, parent.id]
        if parent.on_fail != "fail":  # the default
            args += ["ON-FAIL", parent.on_fail.upper()]
    if timeout is not None:
        args += ["TIMEOUT", timeout_ms(timeout)]
    if group is not None:
        args += ["GROUP", group]
    return job_id, args + header_args(headers)


#: Most headers one job carries (the server's bound).
MAX_HEADERS = 32


#: A header key: an HTTP token of 1 to 64 bytes (the server's bound).
HEADER_KEY = re.compile(r"[A-Za-z0-9!#$%&'*+\-.^_`|~]{1,64}")


def header_args(headers: Optional[Mapping[str, str]]) -> List[Any]:
    """``HEADERS <n> <key> <value> ...``, or nothing for no headers. What the server would
    refuse is refused (``ValueError``) before anything is sent: more than ``MAX_HEADERS``, a key
    that is not 1 to 64 letters, digits or ``!#$%&'*+-.^_`|~``, a value over 8,192 bytes (UTF-8)
    or with a line break, or more than 16,384 bytes in all."""
    if not headers:
        return []
    if len(headers) > MAX_HEADERS:
        raise ValueError(f"a job carries at most {MAX_HEADERS} headers, not {len(headers)}")
    args: List[Any] = ["HEADERS", len(headers)]
    size = len(headers) - 1  # the line breaks between them
    for key, value in headers.items():
        if not isinstance(key, str) or not HEADER_KEY.fullmatch(key):
            raise ValueError(
                f"a header key is 1 to 64 letters, digits or !#$%&'*+-.^_`|~, not {key!r}"
            )
        data = value.encode() if isinstance(value, str) else None
        if data is None or len(data) > 8192 or b"\r" in data or b"\n" in data:
            raise ValueError(f"header {key}'s value is text of at most 8,192 bytes, no CR or LF")
        size += len(key) + 1 + len(data)
        args += [key, value]
    if size > 16384:
        raise ValueError("a job's headers take at most 16,384 bytes")
    return args


def header_map(reply: Any) -> Dict[str, str]:
    """A job's headers as a claim or ``EMQ.JOB`` replies them (a flat array under RESP2, a map
    under RESP3), as text: bytes that are not UTF-8 (the server takes any but CR and LF) read
    as U+FFFD, never as a worker's end."""
    items = reply.items() if isinstance(reply, dict) else zip(reply[::2], reply[1::2])
    return {lossy(k): lossy(v) for k, v in items}


def lossy(value: Any) -> str:
    """A reply's bytes as ``str``, each byte that is not UTF-8 as U+FFFD."""
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def adoptions(queue: str, job_id: str, parents: Sequence[Parent]) -> List[List[Any]]:
    """The ``EMQ.ADOPT`` each parent out of the child's slot needs before the child's enqueue
    (on one server they are harmless): the module cannot reach that parent from the child's
    enqueue on a cluster, so the parent's node registers the child first."""
    here = slot(queue)
    return [
        ["EMQ.ADOPT", p.queue, p.id, queue, job_id] for p in parents if slot(p.queue) != here
    ]


class BulkJob(NamedTuple):
    """A job of ``enqueue_many`` with options of its own: its payload, its id (minted when
    ``None``: a job given its id and sent again is written once), its priority and its headers
    (beside the call's ``headers``; the job's win)."""

    payload: Any
    id: Optional[str] = None
    priority: Optional[int] = None
    headers: Optional[Mapping[str, str]] = None


def entries(
    serializer: Serializer, payloads: Iterable[Any], headers: Optional[Mapping[str, str]] = None
) -> List[Tuple[str, List[Any]]]:
    """Each job of an ``EMQ.MENQUEUE``: its id (a ``BulkJob``'s, or one minted for it), and its
    part of the command (its priority, its ``headers``, its id, its payload). All are made, and
    so checked (a payload that does not serialize, a priority or headers the server would
    refuse), before the first chunk is sent: a bad job at the end writes none before it."""
    each = header_args(headers)
    out: List[Tuple[str, List[Any]]] = []
    for payload in payloads:
        if not isinstance(payload, BulkJob):
            job_id = ids.mint()
            out.append((job_id, [*each, job_id, serializer.dumps(payload)]))
            continue
        check_when(payload.priority, None, None)
        job_id = payload.id or ids.mint()
        priority = [] if payload.priority is None else ["PRIORITY", payload.priority]
        own = each if not payload.headers else header_args({**(headers or {}), **payload.headers})
        out.append((job_id, [*priority, *own, job_id, serializer.dumps(payload.payload)]))
    return out


# ---- building: looking ----


def stats(queue: str) -> List[Any]:
    return ["EMQ.STATS", queue]


def job(queue: str, job_id: str) -> List[Any]:
    return ["EMQ.JOB", queue, job_id]


def jobs(queue: str, set_name: str, cursor: str, count: Optional[int], payloads: bool) -> List[Any]:
    """``EMQ.JOBS``: one page of a set, after ``cursor`` (``"0"``: from the start)."""
    args: List[Any] = ["EMQ.JOBS", queue, set_name, "CURSOR", cursor]
    if count is not None:
        args += ["COUNT", count]
    return args + (["WITHPAYLOADS"] if payloads else [])


def children(queue: str, job_id: str, cursor: str) -> List[Any]:
    """``EMQ.CHILDREN``: one page of a parent's children, after ``cursor``."""
    return ["EMQ.CHILDREN", queue, job_id, "CURSOR", cursor, "COUNT", PAGE]


def crons(queue: str) -> List[Any]:
    return ["EMQ.CRONS", queue]


def groups(queue: str, cursor: str, count: Optional[int]) -> List[Any]:
    """``EMQ.GROUPS``: one page of the named groups, the largest backlog first, after
    ``cursor`` (``"0"``: from the start)."""
    return ["EMQ.GROUPS", queue, "CURSOR", cursor, *(["COUNT", count] if count is not None else [])]


def version() -> List[Any]:
    return ["EMQ.VERSION"]


# ---- building: operating ----


def cancel(queue: str, job_id: str, unstarted: bool = False) -> List[Any]:
    """``EMQ.CANCEL``; with `unstarted`, only a job that has not started goes (a running one
    answers 0 and runs on)."""
    return ["EMQ.CANCEL", queue, job_id] + (["UNSTARTED"] if unstarted else [])


def requeue(queue: str, job_id: str) -> List[Any]:
    return ["EMQ.REQUEUE", queue, job_id]


def requeue_dead(queue: str, count: Optional[int]) -> List[Any]:
    return ["EMQ.REQUEUE", queue, "DEAD", *(["COUNT", count] if count is not None else [])]


def purge(queue: str, set_name: str, count: Optional[int]) -> List[Any]:
    return ["EMQ.PURGE", queue, set_name, *(["COUNT", count] if count is not None else [])]


def purge_step(count: Optional[int]) -> int:
    """The jobs one ``EMQ.PURGE`` of a purge deletes: `count`, 1,000 unless given; less than 1
    is refused (``ValueError``) before anything is sent."""
    if count is None:
        return PURGE_COUNT
    if count < 1:
        raise ValueError("a purge deletes at least 1 job a call")
    return count


def purge_rounds(size: Optional[int], step: int) -> int:
    """The most ``EMQ.PURGE`` calls of `step` jobs a purge makes of a set that held `size` when
    it began: enough for those, and one more, so jobs that keep coming cannot hold it."""
    return -(-max(size or 0, 0) // max(step, 1)) + 1


def pause(queue: str) -> List[Any]:
    return ["EMQ.PAUSE", queue]


def resume(queue: str) -> List[Any]:
    return ["EMQ.RESUME", queue]


def limit(
    queue: str,
    concurrency: Union[int, None, Keep] = KEEP,
    rate: Union[int, None, Keep] = KEEP,
    per: Optional[float] = None,
    off: bool = False,
    timeout: Union[float, None, Keep] = KEEP,
    group_concurrency: Union[int, None, Keep] = KEEP,
    group_rate: Union[int, None, Keep] = KEEP,
    group_per: Optional[float] = None,
) -> List[Any]:
    """``EMQ.LIMIT``: the given limits, ``OFF``, or with neither a report. Each limit is set,
    ``None`` removed (``CONCURRENCY OFF``, ``RATE OFF``, ``TIMEOUT OFF``, ...), ``KEEP`` left
    out; ``per``, ``group_per`` and ``timeout`` are seconds, sent in ms. ``group_concurrency``
    and ``group_rate`` (every ``group_per`` seconds) are the default limits of each group."""
    args: List[Any] = ["EMQ.LIMIT", queue, *(["OFF"] if off else [])]
    args += limit_options("CONCURRENCY", concurrency)
    args += rate_options("RATE", rate, per, "per")
    if timeout is None:
        args += ["TIMEOUT", "OFF"]
    elif not isinstance(timeout, Keep):
        args += ["TIMEOUT", timeout_ms(timeout)]
    args += limit_options("GROUP-CONCURRENCY", group_concurrency)
    args += rate_options("GROUP-RATE", group_rate, group_per, "group_per")
    return args


def group_limit(
    queue: str,
    group: str,
    concurrency: Union[int, None, Keep] = KEEP,
    rate: Union[int, None, Keep] = KEEP,
    per: Optional[float] = None,
) -> List[Any]:
    """``EMQ.LIMIT <queue> GROUP <group>``: that group's own limits, as ``limit`` sends the
    queue's (``None`` removes one, ``KEEP`` leaves it; with neither, a report)."""
    return [
        "EMQ.LIMIT", queue, "GROUP", group, *limit_options("CONCURRENCY", concurrency),
        *rate_options("RATE", rate, per, "per"),
    ]


def limit_options(word: str, n: Union[int, None, Keep]) -> List[Any]:
    """``<word> <n>``, ``<word> OFF`` for ``None``, nothing for ``KEEP``."""
    if isinstance(n, Keep):
        return []
    return [word, "OFF" if n is None else n]


def rate_options(word: str, n: Union[int, None, Keep], per: Optional[float], name: str) -> List[Any]:
    """``<word> <n> PER <ms>`` (`per` seconds, the parameter `name`), ``<word> OFF`` for
    ``None``, nothing for ``KEEP``."""
    if n is None:
        return [word, "OFF"]
    if isinstance(n, Keep):
        return []
    if per is None:
        raise ValueError(f"a rate needs its window, {name}")
    return [word, n, "PER", int(per * 1000)]


def pause_group(queue: str, group: str, seconds: Optional[float] = None) -> List[Any]:
    """``EMQ.PAUSE <queue> GROUP <group>``, for `seconds` (sent in ms, as a timeout is) or
    until resumed."""
    extra = [] if seconds is None else ["FOR", timeout_ms(seconds, "seconds")]
    return ["EMQ.PAUSE", queue, "GROUP", group, *extra]


def resume_group(queue: str, group: str) -> List[Any]:
    return ["EMQ.RESUME", queue, "GROUP", group]


def cron(
    queue: str,
    serializer: Serializer,
    name: str,
    payload: Any,
    spec: Optional[str],
    every: Optional[float],
    priority: Optional[int],
) -> List[Any]:
    """``EMQ.CRON``: a cron ``spec``, or ``EVERY`` so many seconds (sent in ms)."""
    if (spec is None) == (every is None):
        raise ValueError("give spec or every")
    when: List[Any] = [spec] if spec is not None else ["EVERY", int((every or 0) * 1000)]
    extra: List[Any] = ["PRIORITY", priority] if priority is not None else []
    return ["EMQ.CRON", queue, name, *when, serializer.dumps(payload), *extra]


def uncron(queue: str, name: str) -> List[Any]:
    return ["EMQ.UNCRON", queue, name]


# ---- building: working ----


def claim(
    queue: str, count: int, lease_ms: int, block_ms: Optional[int] = None,
    wake: Sequence[str] = (),
) -> List[Any]:
    """``EMQ.CLAIM``, blocking for `block_ms` when given; with `wake` (the other partitions of
    one primary), a wait that a job ready in one of those ends with no job."""
    args: List[Any] = ["EMQ.CLAIM", queue, "COUNT", count, "LEASE", lease_ms]
    if block_ms is not None:
        args += ["BLOCK", block_ms, *(["WAKE", len(wake), *wake] if wake else [])]
    return args


def renew(
    queue: str, job_id: str, token: int, lease_ms: int, progress: Optional[bytes]
) -> List[Any]:
    """``EMQ.RENEW`` of a running job, with its progress when it has one."""
    extra: List[Any] = ["PROGRESS", progress] if progress is not None else []
    return ["EMQ.RENEW", queue, job_id, token, lease_ms, *extra]


def ack_options(result: Optional[bytes]) -> List[Any]:
    """What follows the token in an ``EMQ.ACK`` (or an ``EMQ.MACK``'s job): the result's."""
    return ["RESULT", result] if result is not None else []


def fail_options(error: str, retry_in_ms: Optional[int] = None) -> List[Any]:
    """What follows the token in an ``EMQ.FAIL``: the error, and when to retry if it says."""
    return ["ERROR", error, *(["RETRY-IN", retry_in_ms] if retry_in_ms is not None else [])]


def settle(queue: str, command: str, job_id: str, token: int, options: Sequence[Any]) -> List[Any]:
    """One job's outcome: ``EMQ.ACK`` or ``EMQ.FAIL`` with its options."""
    return [command, queue, job_id, token, *options]


def mack(queue: str, acks: Iterable[Tuple[str, int, Sequence[Any]]]) -> List[Any]:
    """One ``EMQ.MACK`` of several jobs' acknowledgements (id, token, ``ack_options``)."""
    args: List[Any] = ["EMQ.MACK", queue]
    for job_id, token, options in acks:
        args += [job_id, token, *options]
    return args


# ---- building: delivering a flow's hand-overs (workers) ----


class Handover(NamedTuple):
    """A finished child's hand-over waiting in its queue's outbox: the child, its parent, how
    it finished (``acked``, ``dead``, ``cancelled``), the parent's policy and the data."""

    queue: str
    id: str
    parent_queue: str
    parent_id: str
    outcome: Any
    policy: Any
    data: Any


def outbox(queue: str, cursor: str) -> List[Any]:
    """``EMQ.OUTBOX``: one page of the hand-overs waiting in `queue`'s outbox."""
    return ["EMQ.OUTBOX", queue, "CURSOR", cursor, "COUNT", PAGE]


def handover(h: Handover) -> List[Any]:
    """``EMQ.HANDOVER`` to the parent's queue (so to its node, on a cluster)."""
    return ["EMQ.HANDOVER", h.parent_queue, h.parent_id, h.queue, h.id, h.outcome, h.policy, h.data]


def delivered(h: Handover, orphan: bool) -> List[Any]:
    """``EMQ.DELIVERED``: the outbox entry removed once the parent's side answered."""
    return ["EMQ.DELIVERED", h.queue, h.id, h.parent_queue, h.parent_id, *(["ORPHAN"] if orphan else [])]


# ---- parsing ----


def text(value: Any) -> Any:
    """A reply's bytes as ``str``; other values as they are."""
    return value.decode() if isinstance(value, bytes) else value


def pairs(flat: Any) -> Dict[str, Any]:
    """A map reply (a flat array under RESP2, a dict under RESP3) as a ``dict``."""
    if isinstance(flat, dict):
        return {text(k): v for k, v in flat.items()}
    return {text(flat[i]): flat[i + 1] for i in range(0, len(flat), 2)}


def flag(reply: Any) -> bool:
    """An integer reply that says whether the call did something."""
    return bool(reply)


def count(reply: Any) -> int:
    """An integer reply: how many, or a time in unix ms."""
    return int(reply)


def counts(reply: Any) -> Dict[str, Optional[int]]:
    """``EMQ.STATS``'s and ``EMQ.LIMIT``'s map: each field's integer (or null)."""
    out: Dict[str, Optional[int]] = pairs(reply)
    return out


def row(reply: Any) -> Optional[Dict[str, Any]]:
    """``EMQ.JOB``'s map, its values as text (``headers`` a ``dict``, where the job has
    some); ``None`` when there is no such job."""
    if reply is None:
        return None
    raw = pairs(reply)
    found = {k: text(v) for k, v in raw.items() if k != "headers"}
    if "headers" in raw:
        found["headers"] = header_map(raw["headers"])
    return found


def page(reply: Any, set_name: str) -> Tuple[str, List[Dict[str, Any]]]:
    """``EMQ.JOBS``'s ``[next-cursor, jobs]``: the cursor (``"0"`` at the end) and each job's
    ``id``, its score under ``SCORES``' name for the set (pending's is left out),
    ``attempts``, and with payloads ``payload`` and ``error``; values as text."""
    cursor, found = reply
    fields = ["id", SCORES.get(set_name, ""), "attempts", "payload", "error"]
    return str(text(cursor)), [
        {k: text(v) for k, v in zip(fields, one) if k} for one in found or []
    ]


def outboxed(queue: str, reply: Any) -> Tuple[str, List[Handover]]:
    """``EMQ.OUTBOX``'s ``[next-cursor, [[cid, pq, pid, outcome, policy, data], ...]]``: the
    cursor (``"0"`` at the end) and each hand-over, the names as text, the rest as sent."""
    cursor, found = reply
    return str(text(cursor)), [
        Handover(queue, str(text(cid)), str(text(pq)), str(text(pid)), outcome, policy, data)
        for cid, pq, pid, outcome, policy, data in found or []
    ]


def orphaned(reply: Any) -> bool:
    """Whether ``EMQ.HANDOVER`` answered ``orphan`` (not ``counted`` or ``duplicate``): the
    parent is gone, or neither waits for the child nor has room for it."""
    return bool(text(reply) == "orphan")


def children_page(reply: Any, into: Children) -> str:
    """``EMQ.CHILDREN``'s ``[next-cursor, [[cq, cid, status, data], ...]]`` added to `into`;
    the next cursor (``"0"`` at the end)."""
    cursor, found = reply
    for cq, cid, status, data in found or []:
        raw = data.encode() if isinstance(data, str) else bytes(data or b"")
        into[(str(text(cq)), str(text(cid)))] = Child(str(text(status)), raw)
    return str(text(cursor))


def fields(reply: Any) -> Dict[str, Any]:
    """A map of integers (or nulls) and text, as ``EMQ.LIMIT <queue> GROUP`` and each group of
    ``EMQ.GROUPS`` answer: the text as ``str``, the rest as they are."""
    return {k: text(v) for k, v in pairs(reply).items()}


def groups_page(reply: Any) -> Tuple[str, List[Dict[str, Any]]]:
    """``EMQ.GROUPS``' ``[next-cursor, [group, ...]]``: the cursor (``"0"`` at the end) and each
    group's map (``fields``): ``group``, ``ready``, ``active``, ``concurrency`` (its own or the
    queue's default; ``None``), ``paused`` (0 or 1), ``paused-until`` (unix ms or ``None``),
    ``held`` (0 or 1) and, with group rates, ``rate``, ``rate-per`` and ``rate-used``."""
    cursor, found = reply
    return str(text(cursor)), [fields(one) for one in found or []]


def schedules(reply: Any) -> List[Dict[str, Any]]:
    """``EMQ.CRONS``: each schedule's ``name``, ``spec`` (or ``every``, ms), ``priority``,
    ``next`` and ``last`` firings (unix ms; ``last`` null before the first) and ``payload``,
    by name; values as text, as ``row``'s."""
    return [fields(one) for one in reply or []]


def enqueued(reply: Any, confirmed: Optional[int], job_id: str, wanted: int) -> str:
    """The id an enqueue stands for: 1 (written) or 0 (this id was enqueued already) is the
    job's own; an id is the unique key's holder. ``EmqNotReplicated`` when ``WAIT`` confirmed
    it on fewer replicas than `wanted`."""
    out = str(text(reply)) if isinstance(reply, bytes) else job_id
    if unconfirmed(confirmed, wanted):
        raise EmqNotReplicated([out], confirmed or 0, wanted)
    return out


def unconfirmed(confirmed: Optional[int], wanted: int) -> bool:
    """Whether a write's ``WAIT`` confirmed it on fewer replicas than `wanted` (never, without
    a wait)."""
    return confirmed is not None and confirmed < wanted


class Written:
    """What an ``enqueue_many``'s ``EMQ.MENQUEUE``s wrote, chunk by chunk (``add``): every id,
    and which of them fewer replicas than `wanted` confirmed (``ids`` raises for those)."""

    def __init__(self, wanted: int) -> None:
        self.wanted = wanted
        self.enqueued: List[str] = []
        self.short: List[str] = []
        self.fewest: Optional[int] = None

    def add(self, job_ids: List[str], confirmed: Optional[int]) -> None:
        self.enqueued += job_ids
        if unconfirmed(confirmed, self.wanted):
            self.short += job_ids
            self.fewest = confirmed if self.fewest is None else min(self.fewest, confirmed or 0)

    def ids(self, order: Optional[List[str]] = None) -> List[str]:
        """Every id, in `order` where given (a partitioned queue's batch is written partition
        by partition), else as written; ``EmqNotReplicated`` naming the unconfirmed chunks'
        jobs."""
        enqueued = self.enqueued if order is None else order
        if self.short:
            raise EmqNotReplicated(self.short, self.fewest or 0, self.wanted, enqueued=enqueued)
        return enqueued


def payload_refused(reply: Any) -> bool:
    """Whether a reply is ``EMQPAYLOAD``: a payload, result, progress or error text larger than
    the server's ``emq.max-payload-bytes``."""
    return isinstance(reply, Exception) and isinstance(translate(reply), EmqPayloadError)


def lease_lost(reply: Any) -> bool:
    """Whether a renewal's or a settle's reply is ``EMQLEASE``: the lease ran out and another
    attempt holds the job (a failover or a lost connection is not: it may be tried again)."""
    return isinstance(reply, Exception) and isinstance(translate(reply), EmqLeaseLost)


def cancelled(reply: Any) -> bool:
    """Whether a renewal's or a settle's reply is ``EMQCANCELLED``: the job was cancelled while
    this attempt ran (it is dead now), so the attempt is over and nothing more is sent for it."""
    return isinstance(reply, Exception) and isinstance(translate(reply), EmqCancelled)


def timed_out(reply: Any) -> bool:
    """Whether a renewal's reply is ``EMQTIMEOUT``: the attempt ran past its deadline (the
    server ends it, or has: a retry or ``dead``, error ``timeout``), so nothing more is sent for
    it. Its settle is refused ``EMQLEASE``, as a stale attempt's."""
    return isinstance(reply, Exception) and isinstance(translate(reply), EmqTimeout)


def lease_end(reply: Any) -> Optional[int]:
    """When a renewal's lease ends (unix ms), from its reply; ``None`` for a refusal or a
    failure."""
    return reply if isinstance(reply, int) and not isinstance(reply, bool) else None


def claimed(reply: Any) -> List[Tuple[str, Any, int, Dict[str, str]]]:
    """``EMQ.CLAIM``'s jobs, each ``[id, payload, attempts]`` and its headers where it has
    some: the id, the payload's bytes (a worker decodes them on the job's own path), the
    attempt (the lease token) and the headers (``header_map``; empty for none)."""
    return [
        (str(text(job[0])), job[1], int(job[2]), header_map(job[3]) if len(job) > 3 else {})
        for job in reply or []
    ]


def macked(reply: Any, count: int) -> List[Any]:
    """``EMQ.MACK``'s reply for each of its `count` jobs, in order: each job's own, or the
    refusal of the whole call (a failover, say) standing for each."""
    return list(reply) if isinstance(reply, list) else [reply] * count


def check_version(answer: Any) -> None:
    """Refuses a server that speaks another protocol major version than ``PROTOCOL_MAJOR``."""
    version = text(answer)
    try:
        name, number = str(version).split(":", 1)
        major = int(number.split(".", 1)[0])
    except ValueError:
        raise EmqVersionError(f"EMQ.VERSION answered {version!r}, not echomq:<version>") from None
    if name != "echomq" or major != PROTOCOL_MAJOR:
        raise EmqVersionError(
            f"the server speaks {version}; this client speaks echomq:{PROTOCOL_MAJOR}.x"
        )
