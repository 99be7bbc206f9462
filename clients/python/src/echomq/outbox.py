"""A worker's delivery of its queue's outbox (flows): the hand-overs of finished children whose
parent the module could not reach in the child's own ack or death (its queue on another slot of
a cluster, or no permission on its keys). Each is handed to the parent's queue
(``EMQ.HANDOVER``, which a cluster client sends to that queue's node), then removed from the
child's (``EMQ.DELIVERED``, ``ORPHAN`` when the parent had no place for it). A failed step
leaves the entry to the next sweep: a worker killed between the two delays the parent, never
loses it, and the parent counts a child once (a re-delivery answers ``duplicate``).

A sweep (``sweep``) yields the commands and takes their replies, no I/O; ``deliver`` and
``adeliver`` send them, for ``Worker`` and ``AsyncWorker``: at least once a second, and again
at once while the last sweep found hand-overs (and every step of it went through); a sweep
that raised is logged and told as a failed step, never the sweeps' end. With the
worker's ``wait_replicas``, a hand-over is followed by ``WAIT`` on the parent's node, and left
in the outbox until that many of the parent's replicas confirmed it: a failover of the
parent's primary cannot then lose a count whose entry is gone. A partitioned queue's worker
sweeps each of its partitions' outboxes in turn (the queues it claims, as they are then)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import (
    Any, Awaitable, Callable, Generator, List, NamedTuple, Optional, Sequence, Tuple, Union,
)

from . import commands as cmd
from ._replicas import arefresh, moved, pipelined, pipelined_async, refresh
from .errors import EmqNotReplicated
from .events import EventKind, Hook

#: Most seconds between two sweeps of a queue's outbox.
EVERY = 1.0

log = logging.getLogger("echomq")


class Sent(NamedTuple):
    """A command of a sweep: its event's kind, the child it is for (``""`` for a page of the
    outbox), the command, and the queue it goes to (the parent's, for a hand-over)."""

    kind: EventKind
    id: str
    command: List[Any]
    route: str


#: A sweep's course: each command sent, each reply (an exception for a failed one) taken back,
#: and at its end how many hand-overs it found and whether every step went through.
Sweep = Generator[Sent, Any, Tuple[int, bool]]


def sweep(queue: str) -> Sweep:
    """One pass over `queue`'s outbox, page by page to the end: per hand-over ``EMQ.HANDOVER``,
    then, once the parent's side answered, ``EMQ.DELIVERED``."""
    cursor, found, clean = "0", 0, True
    while True:
        reply = yield Sent("outbox", "", cmd.outbox(queue, cursor), queue)
        if isinstance(reply, Exception):
            return found, False
        cursor, page = cmd.outboxed(queue, reply)
        for h in page:
            found += 1
            answer = yield Sent("handover", h.id, cmd.handover(h), h.parent_queue)
            if isinstance(answer, Exception):
                clean = False  # left in the outbox for the next sweep
                continue
            removed = yield Sent(
                "delivered", h.id, cmd.delivered(h, cmd.orphaned(answer)), queue
            )
            clean = clean and not isinstance(removed, Exception)
        if cursor == "0":
            return found, clean


def pause(found: int, clean: bool) -> float:
    """Seconds until the next sweep: none after one that found hand-overs and delivered them
    all (more may be waiting); else ``EVERY`` (a failed step is not tried again in a loop)."""
    return 0.0 if found and clean else EVERY


class Course:
    """A sweep as its drivers step it, each from the reply to the last step: the next command
    (``None`` at the end, ``result`` then holding how many hand-overs it found and whether every
    step went through), and what the sweep takes back for each reply."""

    def __init__(self, queue: str, event: Hook, wanted: int) -> None:
        self.steps = sweep(queue)
        self.event = event
        self.wanted = wanted
        self.result: Tuple[int, bool] = (0, True)
        self.sent = Sent("outbox", "", [], queue)
        self.sent_ns = 0

    def next(self, reply: Any) -> Optional[Sent]:
        """The command to send after `reply` (``None`` before the first)."""
        try:
            self.sent = self.steps.send(reply)
        except StopIteration as end:
            self.result = end.value
            return None
        self.sent_ns = time.time_ns()
        return self.sent

    def took(self, reply: Any, confirmed: Optional[int]) -> Any:
        """What the sweep takes back for the step sent (an exception for one that did not go
        through, and for a hand-over fewer of the parent's replicas than ``wanted`` confirmed:
        left in the outbox, the parent's count may yet be lost in a failover), reported as its
        event (a page of the outbox only when its read failed)."""
        sent, wanted = self.sent, self.wanted
        replicated = None if confirmed is None else confirmed >= wanted
        if sent.kind != "outbox" or isinstance(reply, Exception):
            self.event(
                sent.kind, sent.id, 0, self.sent_ns, time.time_ns(), reply=reply,
                replicated=replicated,
            )
        if replicated is False and not isinstance(reply, Exception):
            return EmqNotReplicated([sent.id], confirmed or 0, wanted)
        return reply


#: How a driver sends a sweep's command: its reply (the exception in its place, for one that
#: failed), and how many of the parent's replicas confirmed a hand-over (``None`` without
#: ``wait_replicas``).
Send = Callable[[Sent], Tuple[Any, Optional[int]]]


def sender(client: Any, replicas: int, timeout_ms: int) -> Send:
    """``Worker``'s: each command on its own; with `replicas`, a hand-over and ``WAIT`` in one
    pipeline on the parent's node."""

    def send(sent: Sent) -> Tuple[Any, Optional[int]]:
        try:
            if sent.kind != "handover" or replicas <= 0:
                return client.execute_command(*sent.command), None
            (reply,), confirmed = pipelined(client, sent.route, [sent.command], replicas, timeout_ms)
            if moved(reply):
                refresh(client)  # the parent's slot moved: the next sweep finds its new node
        except Exception as e:
            return e, None
        return reply, confirmed

    return send


def swept(send: Send, queue: str, event: Hook, wanted: int) -> Tuple[int, bool]:
    """One sweep, each command sent by `send`."""
    course, reply = Course(queue, event, wanted), None
    while (sent := course.next(reply)) is not None:
        reply = course.took(*send(sent))
    return course.result


def failed(event: Hook, error: Exception) -> Tuple[int, bool]:
    """A sweep that raised (a cluster's map not read again, a bug): logged, told as a failed
    step (an ``outbox`` event), and the next sweep after ``EVERY``; never the sweeps' end."""
    log.error("echomq: an outbox sweep failed; the next in %ss", EVERY, exc_info=error)
    now = time.time_ns()
    event("outbox", "", 0, now, now, reply=error)
    return 0, False


#: The queues whose outboxes are swept: one, or what a worker claims at each pass (a
#: partitioned queue's partitions).
Queues = Union[str, Callable[[], Sequence[str]]]


def listed(queues: Queues) -> Sequence[str]:
    """The queues to sweep now."""
    return [queues] if isinstance(queues, str) else queues()


def deliver(
    client: Any, queues: Queues, stopping: threading.Event, event: Hook, replicas: int = 0,
    timeout_ms: int = 1000,
) -> None:
    """``Worker``'s delivery thread: sweeps until `stopping` is set."""
    sweeps(sender(client, replicas, timeout_ms), queues, stopping, event, replicas)


def sweeps(
    send: Send, queues: Queues, stopping: threading.Event, event: Hook, wanted: int
) -> None:
    """Sweeps each queue with `send` until `stopping` is set, whatever a sweep raises
    (``failed``); the next pass at once while one found hand-overs and none failed."""
    while not stopping.is_set():
        found, clean = 0, True
        for queue in listed(queues):
            try:
                result = swept(send, queue, event, wanted)
            except Exception as e:
                result = failed(event, e)
            found, clean = found + result[0], clean and result[1]
        wait = pause(found, clean)
        if wait:
            stopping.wait(wait)


ASend = Callable[[Sent], Awaitable[Tuple[Any, Optional[int]]]]


def asender(client: Any, replicas: int, timeout_ms: int) -> ASend:
    """``sender`` for an asyncio client."""

    async def send(sent: Sent) -> Tuple[Any, Optional[int]]:
        try:
            if sent.kind != "handover" or replicas <= 0:
                return await client.execute_command(*sent.command), None
            pipe = await pipelined_async(client, sent.route, [sent.command], replicas, timeout_ms)
            (reply,), confirmed = pipe
            if moved(reply):
                await arefresh(client)  # the parent's slot moved: the next sweep finds its new node
        except Exception as e:
            return e, None
        return reply, confirmed

    return send


async def aswept(send: ASend, queue: str, event: Hook, wanted: int) -> Tuple[int, bool]:
    """``swept``, each command awaited."""
    course, reply = Course(queue, event, wanted), None
    while (sent := course.next(reply)) is not None:
        reply = course.took(*await send(sent))
    return course.result


async def adeliver(
    client: Any, queues: Queues, stopping: asyncio.Event, event: Hook, replicas: int = 0,
    timeout_ms: int = 1000,
) -> None:
    """``AsyncWorker``'s delivery task: sweeps until `stopping` is set (or it is cancelled)."""
    await asweeps(asender(client, replicas, timeout_ms), queues, stopping, event, replicas)


async def asweeps(
    send: ASend, queues: Queues, stopping: asyncio.Event, event: Hook, wanted: int
) -> None:
    """``sweeps``, each command awaited."""
    while not stopping.is_set():
        found, clean = 0, True
        for queue in listed(queues):
            try:
                result = await aswept(send, queue, event, wanted)
            except Exception as e:
                result = failed(event, e)
            found, clean = found + result[0], clean and result[1]
        wait = pause(found, clean)
        if wait:
            try:
                await asyncio.wait_for(stopping.wait(), wait)
            except asyncio.TimeoutError:
                pass
        else:
            await asyncio.sleep(0)  # a long drain of the outbox still lets the handlers run
