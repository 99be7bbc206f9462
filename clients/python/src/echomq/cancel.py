"""Cancelling a job with the rest of its flow (docs/flows.md, "Cancelling"). ``EMQ.CANCEL`` of a
waiting parent cancels the children that have not started only where the module reaches them
(the same server; on a cluster, the same slot): children in other slots would run on, and their
hand-overs find no parent. So the client reads the parent's tree first (``EMQ.CHILDREN``, paged,
and ``EMQ.JOB`` of each unfinished child), cancels the parent, then each unstarted child in
another slot on its own queue, and below each child cancelled, its own, bounded as the module
is: 1,000 children a parent, 8 levels.

A cancel (``cancel``) yields the commands and takes their replies, no I/O; ``Queue`` and
``AsyncQueue`` send them (each command routed by the queue it names)."""

from __future__ import annotations

from typing import Any, Generator, List, NamedTuple, Set, Tuple

from . import commands as cmd
from .flows import Children
from .slots import slot

#: Most unfinished children of one parent a cancel takes (the module's bound).
MAX_CHILDREN = 1000
#: Most levels of children below the cancelled job (the module's bound).
MAX_DEPTH = 8
#: A child in one of these states has not started: a cancel removes it.
UNSTARTED = ("pending", "scheduled", "waiting")


class Unstarted(NamedTuple):
    """A child that had not started when its parent's tree was read: its queue and id, whether
    the module reaches it from its parent (the same slot), and its own unstarted children."""

    queue: str
    id: str
    in_reach: bool
    below: List["Unstarted"]


#: A cancel's course: each command sent, each reply taken back; at its end how many jobs went.
Cancel = Generator[List[Any], Any, int]


def cancel(queue: str, job_id: str) -> Cancel:
    """Cancels `job_id` of `queue` and the unstarted children of its flow: how many jobs went
    (0 when the job itself was not pending, scheduled or waiting, and then nothing else is).
    A child counts when the client's ``EMQ.CANCEL`` removed it, or when its row is gone after
    its parent's (the module cancelled it in reach)."""
    below = yield from unstarted(queue, job_id, 1)
    if not cmd.flag((yield cmd.cancel(queue, job_id))):
        return 0
    gone = yield from cancel_below(below, set())
    return 1 + gone


def unstarted(queue: str, job_id: str, depth: int) -> Generator[List[Any], Any, List[Unstarted]]:
    """The children of `job_id` that have not started, at most ``MAX_CHILDREN``, each with its
    own below it while `depth` is within ``MAX_DEPTH`` (a job that is no parent has none)."""
    found: List[Unstarted] = []
    if depth > MAX_DEPTH:
        return found
    children, cursor = Children(), "0"
    while True:
        cursor = cmd.children_page((yield cmd.children(queue, job_id, cursor)), children)
        if cursor == "0" or children.count("waiting") >= MAX_CHILDREN:
            break
    waiting = [key for key, child in children.items() if child.status == "waiting"]
    for child_queue, child_id in waiting[:MAX_CHILDREN]:
        row = cmd.row((yield cmd.job(child_queue, child_id)))
        state = None if row is None else row.get("state")
        if state not in UNSTARTED:
            continue
        below: List[Unstarted] = []
        if state == "waiting":
            below = yield from unstarted(child_queue, child_id, depth + 1)
        near = slot(child_queue) == slot(queue)
        found.append(Unstarted(child_queue, child_id, near, below))
    return found


def cancel_below(children: List[Unstarted], seen: Set[Tuple[str, str]]) -> Cancel:
    """After their parent went: each child in another slot cancelled here, each in reach
    looked up (the module cancelled it with its parent unless it started since), and below
    each one gone, its own; how many went (a child of two parents counted once)."""
    gone = 0
    for child in children:
        if (child.queue, child.id) in seen:
            continue
        seen.add((child.queue, child.id))
        removed = False
        if not child.in_reach:
            removed = cmd.flag((yield cmd.cancel(child.queue, child.id)))
        if not removed:
            # On a single server every child is in reach: the module took it already.
            removed = cmd.row((yield cmd.job(child.queue, child.id))) is None
        if removed:
            below = yield from cancel_below(child.below, seen)
            gone += 1 + below
    return gone
