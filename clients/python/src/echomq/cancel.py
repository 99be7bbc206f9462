"""Cancelling a job with the rest of its flow (docs/flows.md, "Cancelling"). ``EMQ.CANCEL`` of a
waiting parent cancels the children that have not started only where the module reaches them
(the same server; on a cluster, the same slot): children in other slots would run on, and their
hand-overs find no parent. So the client reads the parent's tree first (``EMQ.CHILDREN``, paged,
and ``EMQ.JOB`` of each unfinished child, each job once), cancels the parent, then sends
``EMQ.CANCEL`` for each unstarted child read, top down, below each one gone.

A cancel (``cancel``) yields the commands and takes their replies (an exception for one that
failed), no I/O; ``Queue`` and ``AsyncQueue`` send them (each routed by the queue it names)."""

from __future__ import annotations

from typing import Any, Generator, List, NamedTuple, Set, Tuple

from . import commands as cmd
from .errors import EmqCancelIncomplete, kinds

#: Most unfinished children of one parent a cancel takes, in ``EMQ.CHILDREN``'s order (the
#: module's bound).
MAX_CHILDREN = 1000
#: Most levels of children below the cancelled job the client reads.
MAX_DEPTH = 8
#: Most jobs one cancel reads (``EMQ.JOB``) in the tree: a job with several parents is read
#: once, and a tree larger than this has its jobs past it left to run.
MAX_READS = 10_000
#: A child in one of these states has not started: a cancel removes it.
UNSTARTED = ("pending", "scheduled", "waiting")


class Unstarted(NamedTuple):
    """A child that had not started when the tree was read: its queue and id, and its parent's
    place in the tree (-1: the job cancelled)."""

    queue: str
    id: str
    parent: int


#: A cancel's course: each command sent, each reply taken back; at its end how many jobs went.
Cancel = Generator[List[Any], Any, int]
#: The tree read: each unstarted child, a parent before its children.
Tree = List[Unstarted]


def cancel(queue: str, job_id: str, unstarted: bool = False) -> Cancel:
    """Cancels `job_id` of `queue` and the unstarted children of its flow: how many jobs went
    (0 when the job itself was not pending, scheduled, waiting or active, and then nothing else
    is; an active job's attempt ends, and it goes to dead with the error ``cancelled``).
    A child counts when its ``EMQ.CANCEL`` answered 1, or answered 0 and its row is gone (the
    module cancelled it with its parent: on one server every child, on a cluster those in the
    parent's slot). A child the user may not read or cancel (``NOPERM``) is left as the module
    leaves it. An error after the job went raises ``EmqCancelIncomplete``. With `unstarted`,
    only a job that has not started goes (a running one is left to run: 0)."""
    tree: Tree = []
    yield from read_tree(queue, job_id, -1, 1, tree, {(queue, job_id)})
    if not cmd.flag(answer((yield cmd.cancel(queue, job_id, unstarted)))):
        return 0
    gone = yield from cancel_tree(tree)
    return 1 + gone


def read_tree(
    queue: str, job_id: str, parent: int, depth: int, tree: Tree, seen: Set[Tuple[str, str]]
) -> Generator[List[Any], Any, None]:
    """Adds to `tree` the children of `job_id` that have not started, each followed by its own
    while `depth` is within ``MAX_DEPTH``, each job once (`seen`) and no more than
    ``MAX_READS``. A child's read refused leaves it out; the cancelled job's must go through."""
    waiting = yield from waiting_children(queue, job_id, parent >= 0)
    for key in waiting:
        if len(seen) > MAX_READS:
            return
        if key in seen:
            continue
        seen.add(key)
        reply = yield cmd.job(*key)
        if refused(reply):
            continue
        row = cmd.row(answer(reply))
        state = None if row is None else row.get("state")
        if state not in UNSTARTED:
            continue
        tree.append(Unstarted(key[0], key[1], parent))
        if state == "waiting" and depth < MAX_DEPTH:
            yield from read_tree(key[0], key[1], len(tree) - 1, depth + 1, tree, seen)


def waiting_children(
    queue: str, job_id: str, lenient: bool
) -> Generator[List[Any], Any, List[Tuple[str, str]]]:
    """The ``(queue, id)`` of `job_id`'s unfinished children, page by page, up to
    ``MAX_CHILDREN`` in scan order; none when `lenient` and the read is refused."""
    found: List[Tuple[str, str]] = []
    cursor = "0"
    while True:
        reply = yield cmd.children(queue, job_id, cursor)
        if lenient and refused(reply):
            return found
        cursor, rows = answer(reply)
        for child_queue, child_id, status, *_ in rows or []:
            if cmd.text(status) != "waiting":
                continue
            found.append((str(cmd.text(child_queue)), str(cmd.text(child_id))))
            if len(found) == MAX_CHILDREN:
                return found
        if str(cmd.text(cursor)) == "0":
            return found


def cancel_tree(tree: Tree) -> Cancel:
    """After the job went: ``EMQ.CANCEL`` of each child read whose parent went, top down; how
    many went. An error other than ``NOPERM`` raises ``EmqCancelIncomplete``."""
    went: List[bool] = []
    gone = 0
    for i, child in enumerate(tree):
        went.append(False)
        if child.parent >= 0 and not went[child.parent]:
            continue  # it started since: its own run on
        # A child that started since runs on: only one that has not started goes.
        reply = yield cmd.cancel(child.queue, child.id, unstarted=True)
        if not refused(reply) and not isinstance(reply, Exception) and not cmd.flag(reply):
            # Where the module reached it, it cancelled it already, unless it started since.
            row = yield cmd.job(child.queue, child.id)
            reply = row if isinstance(row, Exception) else row is None
        if refused(reply):
            continue  # the module too skips a child it may not write
        if isinstance(reply, Exception):
            raise EmqCancelIncomplete(1 + gone, remaining(tree, went, i)) from reply
        went[i] = cmd.flag(reply)
        gone += went[i]
    return gone


def remaining(tree: Tree, went: List[bool], start: int) -> List[Tuple[str, str]]:
    """The children from `start` on that a cancel stopped at `start` leaves: each whose parent
    is the job cancelled, went, or is itself left."""
    left: Set[int] = set()
    for j in range(start, len(tree)):
        parent = tree[j].parent
        if parent < 0 or (parent < start and went[parent]) or parent in left:
            left.add(j)
    return [(tree[j].queue, tree[j].id) for j in sorted(left)]


def answer(reply: Any) -> Any:
    """`reply`, or its exception raised."""
    if isinstance(reply, Exception):
        raise reply
    return reply


def refused(reply: Any) -> bool:
    """Whether `reply` is the server refusing the user the keys or the command (``NOPERM``)."""
    return isinstance(reply, Exception) and "NoPermissionError" in kinds(reply)
