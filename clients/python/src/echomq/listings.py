"""A partitioned queue's listings and schedules as one queue's (docs/cluster.md, "What holds
across partitions"): ``EMQ.JOBS`` and ``EMQ.GROUPS`` paged with a cursor that walks the
partitions in turn, every partition's schedules (``EMQ.CRONS``) together, and a schedule set
(``EMQ.CRON``) or removed (``EMQ.UNCRON``) in the partition its name routes to. An ordinary
queue's (width 0) are its own, with the server's cursors as they are. Pure: ``Queue`` and
``AsyncQueue`` send what these ask (``routing.Course``)."""

from __future__ import annotations

from typing import Any, Callable, Dict, List, Optional, Sequence, Tuple

from . import commands as cmd
from .partitions import name
from .routing import SEND, Course, Router, each, known_width, read_width, routed

#: A page of a listing: the next cursor (``"0"`` at the end) and what it holds.
Page = Tuple[str, List[Dict[str, Any]]]


def position(cursor: str, width: int) -> Tuple[int, str]:
    """A partitioned queue's cursor as ``(partition, the server's cursor in it)``: ``"0"``
    starts at partition 0; any other is ``"<index>:<inner>"``, as ``walk`` returns it, `index`
    a partition of `width` (written without a sign or leading zeros) and `inner` not empty.
    ``ValueError`` for any other. Of `inner`, only that it is there is checked here: the
    server checks the rest (``EmqCursorError``)."""
    if cursor == "0":
        return 0, "0"
    index, colon, inner = cursor.partition(":")
    if not (colon and inner and index.isdigit() and index.isascii() and str(int(index)) == index
            and int(index) < width):
        raise ValueError(f"{cursor!r} is no cursor of a queue of {width} partitions: give "
                         f"\"0\", or a cursor a page returned")
    return int(index), inner


def walk(
    router: Router, cursor: str, build: Callable[[str, str], List[Any]],
    parse: Callable[[Any], Page],
) -> Course[Page]:
    """One page of a listing (`build` its command to a queue after a server's cursor, `parse`
    its reply). An ordinary queue's (width 0) is its own page and cursor. A partitioned
    queue's comes from one partition, ``"<index>:<inner>"`` the cursor after it: when a
    partition's page ends its listing (the server's cursor ``"0"``), the next cursor is the
    next partition's start (``"<index + 1>:0"``), and ``"0"`` after the last; a page that ends
    its partition with nothing in it goes on to the next partition at once, so a page is empty
    only where the walk ends.

    A walk's start (`cursor` ``"0"``) reads the width afresh (``read_width``: a handle's may be
    stale); a later page takes the width known (``known_width``), and its cursor's
    ``<index>:`` part is checked against it (``position``) before the page is asked for."""
    if cursor == "0":
        width = yield from read_width(router)
    else:
        width = yield from known_width(router)
    index, inner = position(cursor, width) if width else (0, cursor)
    return (yield from _walk(router.queue, width, index, inner, build, parse))


def _walk(
    queue: str, width: int, index: int, inner: str, build: Callable[[str, str], List[Any]],
    parse: Callable[[Any], Page],
) -> Course[Page]:
    """``walk`` from partition `index` of `width` (0: `queue` itself), the server's cursor
    `inner` in it."""
    if not width:
        return parse((yield SEND, build(queue, inner)))
    while True:
        partition = name(queue, index, width)
        if partition is None:
            raise ValueError(f"{queue!r} has no partitions of width {width}")
        after, found = parse((yield SEND, build(partition, inner)))
        if after != "0":
            return f"{index}:{after}", found
        index, inner = index + 1, "0"
        if index == width:
            return "0", found
        if found:
            return f"{index}:0", found


def jobs(
    router: Router, set_name: str, cursor: str, count: Optional[int], payloads: bool
) -> Course[Page]:
    """``walk`` of a set's jobs (``EMQ.JOBS``, ``commands.page``)."""
    return walk(
        router, cursor, lambda queue, at: cmd.jobs(queue, set_name, at, count, payloads),
        lambda reply: cmd.page(reply, set_name),
    )


def groups(router: Router, cursor: str, count: Optional[int]) -> Course[Page]:
    """``walk`` of the named groups (``EMQ.GROUPS``, ``commands.groups_page``): each partition's
    largest backlog first."""
    return walk(
        router, cursor, lambda queue, at: cmd.groups(queue, at, count), cmd.groups_page
    )


def cron(router: Router, schedule: str, args: List[Any]) -> Course[Any]:
    """A schedule's ``EMQ.CRON`` (`args`, built for the queue's own name: checked before
    anything is sent, the width read included) sent to the partition its name routes to (the
    width known, read when not known yet), and sent again where it then routes after an
    ``EMQSPANNED`` refusal (``routing.routed``: a stale width, or 0 learned before a span)."""
    yield from known_width(router)
    return (yield from routed(router, schedule, args))


def uncron(router: Router, schedule: str) -> Course[Any]:
    """A schedule's ``EMQ.UNCRON``, to the partition its name routes to over the width read
    afresh (``read_width``: a partition retired takes the command, and would answer that no
    such schedule is there)."""
    yield from read_width(router)
    return (yield SEND, cmd.uncron(router.of(schedule), schedule))


def crons(router: Router) -> Course[List[Dict[str, Any]]]:
    """The queue's schedules (``schedules``), every partition's over the width read afresh
    (``routing.each``)."""
    return schedules((yield from each(router, cmd.crons, fresh=True)))


def schedules(replies: Sequence[Any]) -> List[Dict[str, Any]]:
    """Each queue's ``EMQ.CRONS`` reply (an ordinary queue's one, a partitioned queue's one a
    partition) as one list of schedules (``commands.schedules``), by name."""
    if len(replies) == 1:
        return cmd.schedules(replies[0])
    found = [one for reply in replies for one in cmd.schedules(reply)]
    return sorted(found, key=lambda one: str(one.get("name")))
