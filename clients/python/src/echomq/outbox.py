"""A worker's delivery of its queue's outbox (flows): the hand-overs of finished children whose
parent the module could not reach in the child's own ack or death (its queue on another slot of
a cluster, or no permission on its keys). Each is handed to the parent's queue
(``EMQ.HANDOVER``, which a cluster client sends to that queue's node), then removed from the
child's (``EMQ.DELIVERED``, ``ORPHAN`` when the parent had no place for it). A failed step
leaves the entry to the next sweep: a worker killed between the two delays the parent, never
loses it, and the parent counts a child once (a re-delivery answers ``duplicate``).

A sweep (``sweep``) yields the commands and takes their replies, no I/O; ``deliver`` and
``adeliver`` send them, for ``Worker`` and ``AsyncWorker``: at least once a second, and again
at once while the last sweep found hand-overs (and every step of it went through)."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Awaitable, Callable, Generator, List, NamedTuple, Tuple

from . import commands as cmd
from .events import EventKind, Hook

#: Most seconds between two sweeps of a queue's outbox.
EVERY = 1.0


class Sent(NamedTuple):
    """A command of a sweep: its event's kind, the child it is for (``""`` for a page of the
    outbox), and the command."""

    kind: EventKind
    id: str
    command: List[Any]


#: A sweep's course: each command sent, each reply (an exception for a failed one) taken back,
#: and at its end how many hand-overs it found and whether every step went through.
Sweep = Generator[Sent, Any, Tuple[int, bool]]


def sweep(queue: str) -> Sweep:
    """One pass over `queue`'s outbox, page by page to the end: per hand-over ``EMQ.HANDOVER``,
    then, once the parent's side answered, ``EMQ.DELIVERED``."""
    cursor, found, clean = "0", 0, True
    while True:
        reply = yield Sent("outbox", "", cmd.outbox(queue, cursor))
        if isinstance(reply, Exception):
            return found, False
        cursor, page = cmd.outboxed(queue, reply)
        for h in page:
            found += 1
            answer = yield Sent("handover", h.id, cmd.handover(h))
            if isinstance(answer, Exception):
                clean = False  # left in the outbox for the next sweep
                continue
            removed = yield Sent("delivered", h.id, cmd.delivered(h, cmd.orphaned(answer)))
            clean = clean and not isinstance(removed, Exception)
        if cursor == "0":
            return found, clean


def pause(found: int, clean: bool) -> float:
    """Seconds until the next sweep: none after one that found hand-overs and delivered them
    all (more may be waiting); else ``EVERY`` (a failed step is not tried again in a loop)."""
    return 0.0 if found and clean else EVERY


def report(event: Hook, sent: Sent, sent_ns: int, reply: Any) -> None:
    """Each hand-over's steps as events; a page of the outbox only when its read failed."""
    if sent.kind != "outbox" or isinstance(reply, Exception):
        event(sent.kind, sent.id, 0, sent_ns, time.time_ns(), reply=reply)


def swept(send: Callable[[List[Any]], Any], queue: str, event: Hook) -> Tuple[int, bool]:
    """One sweep, each command sent by `send` (a failure in place of its reply)."""
    steps = sweep(queue)
    reply: Any = None
    try:
        while True:
            sent = steps.send(reply)
            sent_ns = time.time_ns()
            try:
                reply = send(sent.command)
            except Exception as e:
                reply = e
            report(event, sent, sent_ns, reply)
    except StopIteration as end:
        result: Tuple[int, bool] = end.value
        return result


def deliver(client: Any, queue: str, stopping: threading.Event, event: Hook) -> None:
    """``Worker``'s delivery thread: sweeps until `stopping` is set."""
    while not stopping.is_set():
        wait = pause(*swept(lambda args: client.execute_command(*args), queue, event))
        if wait:
            stopping.wait(wait)


async def aswept(
    send: Callable[[List[Any]], Awaitable[Any]], queue: str, event: Hook
) -> Tuple[int, bool]:
    """``swept``, each command awaited."""
    steps = sweep(queue)
    reply: Any = None
    try:
        while True:
            sent = steps.send(reply)
            sent_ns = time.time_ns()
            try:
                reply = await send(sent.command)
            except Exception as e:
                reply = e
            report(event, sent, sent_ns, reply)
    except StopIteration as end:
        result: Tuple[int, bool] = end.value
        return result


async def adeliver(client: Any, queue: str, stopping: asyncio.Event, event: Hook) -> None:
    """``AsyncWorker``'s delivery task: sweeps until `stopping` is set (or it is cancelled)."""
    while not stopping.is_set():
        wait = pause(*await aswept(lambda args: client.execute_command(*args), queue, event))
        if wait:
            try:
                await asyncio.wait_for(stopping.wait(), wait)
            except asyncio.TimeoutError:
                pass
        else:
            await asyncio.sleep(0)  # a long drain of the outbox still lets the handlers run
