"""How a producer's jobs find a partitioned queue's partitions (docs/cluster.md): a ``Router``
keeps the width its queue is known to have (unknown at first, sent to as an ordinary queue,
so an ordinary queue's enqueue pays nothing), learns it from an ``EMQSPANNED <n>`` refusal, and
routes a job by its group, else its id. ``enqueue_many`` is a batch's course: the jobs split by
partition, one ``EMQ.MENQUEUE`` (chunked) each; ``enqueue`` is one job's, its parents' partitions
found first (``resolve``). ``read_width`` reads the width (0 for a user the server will not
tell), ``each`` sends a command to every partition. Pure: ``Queue`` and ``AsyncQueue`` send."""

from __future__ import annotations

import re
from itertools import islice
from typing import (
    Any, Callable, Dict, Generator, Iterable, List, Optional, Sequence, Set, Tuple, TypeVar,
)

from . import commands as cmd
from .errors import EmqParentError, EmqSpannedError
from .flows import Parent
from .partitions import name, route
from .spans import names, untold, width, width_command

#: Most times one call routes its jobs again after an ``EMQSPANNED`` refusal (a width learned,
#: then a stale one corrected); the next refusal is raised.
MAX_REROUTES = 2

#: A partition's name: ``<queue>~<index>-<j>``.
PARTITION = re.compile(r"^(.+)~(\d+)-\d+$")

#: A job of a batch: its id, and its part of an ``EMQ.MENQUEUE`` (headers, id, payload).
Entry = Tuple[str, List[Any]]


class Router:
    """What a ``Queue`` knows of its queue's partitions: ``width`` (``None``: not known yet,
    sent to as an ordinary queue; 0: an ordinary queue, or a partition) and where a job goes."""

    def __init__(self, queue: str) -> None:
        self.queue = queue
        self.width: Optional[int] = None

    def learn(self, width: int) -> None:
        """Takes `width` as the queue's."""
        self.width = width

    def partitions(self) -> List[str]:
        """Every partition, in order (none for an ordinary queue; each name found once:
        ``partitions.name``)."""
        return names(self.queue, self.width or 0)

    def of(self, key: str) -> str:
        """The queue a job whose group (or else id) is `key` goes to: its partition, or the
        queue itself while it is not known to be partitioned."""
        if not self.width:
            return self.queue
        found = name(self.queue, route(self.width, key), self.width)
        if found is None:
            raise ValueError(f"{self.queue!r} has no partitions of width {self.width}")
        return found

    def refused(self, error: EmqSpannedError, reroutes: int) -> bool:
        """Learns the width an ``EMQSPANNED`` refusal names; whether to route and send again:
        not past ``MAX_REROUTES``, and not when this queue is itself a partition of that width
        (which refuses a job that routes elsewhere: the caller's to send to its queue), nor
        for a width of 0 to a call sent to this queue's own name: a retired partition's
        "send to the queue's own name" (docs/cluster.md, "Changing the width"), which is this
        queue's name already (a stale width's call to a retired partition goes to the queue
        itself next, which answers with its width)."""
        if self.partition_of(error.width) or (error.width == 0 and not self.width):
            self.learn(0)  # taken as an ordinary queue: no further routing
            return False
        if reroutes >= MAX_REROUTES:
            return False
        self.learn(error.width)
        return True

    def partition_of(self, width: int) -> bool:
        """Whether this queue's name is a partition's name of that width."""
        found = PARTITION.match(self.queue)
        if found is None or not width:
            return False
        return name(found.group(1), int(found.group(2)), width) == self.queue


def split(router: Router, entries: List[Entry], chunk: int) -> List[Tuple[str, List[Entry]]]:
    """The next ``EMQ.MENQUEUE``s of a batch: the first `chunk` entries to an ordinary queue
    (or one not known to be partitioned); else every entry, by partition, `chunk` at most to a
    command, each partition's in the batch's order."""
    if not router.width:
        return [(router.queue, entries[:chunk])]
    by: Dict[str, List[Entry]] = {}
    for entry in entries:
        by.setdefault(router.of(entry[0]), []).append(entry)
    return [
        (target, jobs[i:i + chunk]) for target, jobs in by.items()
        for i in range(0, len(jobs), chunk)
    ]


#: A batch's course: each ``(ids, EMQ.MENQUEUE ...)`` sent, the exception taken back for one
#: that failed (``None`` otherwise); at its end every id, in the batch's order.
Batch = Generator[Tuple[List[str], List[Any]], Optional[BaseException], List[str]]


def enqueue_many(router: Router, entries: Iterable[Entry], chunk: int) -> Batch:
    """Sends a batch: to an ordinary queue a chunk at a time as the entries come; once the queue
    is known to be partitioned (or refuses with ``EMQSPANNED``, which writes nothing of that
    command), the rest at once, split by partition. A job refused is sent again where it now
    routes, at most ``MAX_REROUTES`` times a call; every other failure is raised. The ids are
    minted before the first try, so a job sent twice is written once."""
    source = iter(entries)
    order: List[str] = []
    left: List[Entry] = []
    reroutes = 0
    while True:
        more = list(source) if router.width else list(islice(source, max(0, chunk - len(left))))
        order += [job_id for job_id, _ in more]
        left += more
        if not left:
            return order
        sent: Set[str] = set()
        for target, jobs in split(router, left, chunk):
            ids = [job_id for job_id, _ in jobs]
            failure = yield ids, ["EMQ.MENQUEUE", target, *(a for _, part in jobs for a in part)]
            if isinstance(failure, EmqSpannedError) and router.refused(failure, reroutes):
                reroutes += 1
                break
            if failure is not None:
                raise failure
            sent.update(ids)
        left = [entry for entry in left if entry[0] not in sent]


#: A command of a course (``enqueue``, ``resolve``) and how to send it: ``SEND``, or ``WRITE``
#: (a job's write: with ``WAIT`` after it under ``wait_replicas``). The sender answers with its
#: reply (a ``WRITE``'s: the reply and how many replicas confirmed it), or throws the exception
#: it failed with into the course.
SEND, WRITE = "send", "write"
Step = Tuple[str, List[Any]]
T = TypeVar("T")
Course = Generator[Step, Any, T]


def read_width(router: Router) -> Course[int]:
    """The queue's width read afresh (``EMQ.WIDTH``, ``spans.width``) and learned. Where the
    server will not tell (``spans.untold``: a user without ``+emq.width``), the width the router
    knows already (learned from an ``EMQSPANNED`` refusal, or shared with another handle), else
    0: such a user has ordinary queues only, till a refusal tells it otherwise."""
    try:
        found = width((yield SEND, width_command(router.queue)))
    except Exception as e:  # what the sender failed with: any other is raised
        if not untold(e):
            raise
        if router.width is not None:
            return router.width
        found = 0
    router.learn(found)
    return found


def known_width(router: Router) -> Course[int]:
    """The width the router knows, read (``read_width``) when it knows none yet."""
    if router.width is None:
        return (yield from read_width(router))
    return router.width


def each(
    router: Router, build: Callable[[str], List[Any]], fresh: bool = False
) -> Course[List[Any]]:
    """`build`'s command sent to each partition of a partitioned queue, in order, or to the
    queue itself: the replies. The width is the one known (``known_width``), or with `fresh`
    read afresh (``read_width``)."""
    found = (yield from read_width(router)) if fresh else (yield from known_width(router))
    replies: List[Any] = []
    for target in router.partitions() if found else [router.queue]:
        replies.append((yield SEND, build(target)))
    return replies


def routed(router: Router, key: str, args: List[Any]) -> Course[Any]:
    """`args`, a command to the queue (``args[1]`` its name), sent to the queue `key` routes to
    (``Router.of``): after an ``EMQSPANNED`` refusal, sent again where it then routes, at most
    ``MAX_REROUTES`` times (``Router.refused``, as ``enqueue``). Its reply."""
    reroutes = 0
    while True:
        try:
            return (yield SEND, [args[0], router.of(key), *args[2:]])
        except EmqSpannedError as e:
            if not router.refused(e, reroutes):
                raise
            reroutes += 1


def resolve(
    routers: Dict[str, Router], parents: Sequence[Parent], again: bool = False
) -> Course[List[Parent]]:
    """Each parent as a child's enqueue names it: in the partition its id routes to when its
    queue is partitioned (the width read, ``EMQ.WIDTH``, once a queue name and kept in
    `routers`; with `again`, read anew), as given when its queue is an ordinary one or a
    partition. A grouped parent of a partitioned queue is in its group's partition, which its
    id does not tell: its reference names that partition (``Queue.partition(group)``, or its
    handler's ``job.queue``)."""
    found: List[Parent] = []
    read: Set[str] = set()
    for parent in parents:
        router = routers.setdefault(parent.queue, Router(parent.queue))
        if (router.width is None or again) and parent.queue not in read:
            yield from read_width(router)
            read.add(parent.queue)
        found.append(parent._replace(queue=router.of(parent.id)))
    return found


#: What an enqueue's course ends with: the write's reply and confirmations (``None`` when the
#: job was found written already), and the queue the job is in.
Enqueued = Tuple[Optional[Tuple[Any, Optional[int]]], str]


def enqueue(
    router: Router, routers: Dict[str, Router], job_id: str, key: str,
    parents: Sequence[Parent], build: Callable[[str, Sequence[Parent]], List[Any]],
    fresh: bool = False, resolved: bool = False,
) -> Course[Enqueued]:
    """One job's enqueue (`build` its ``EMQ.ENQUEUE`` to a queue, with its parents): to the
    queue `key` (its group, else its id) routes to, sent again where it routes after an
    ``EMQSPANNED`` refusal (``Router.refused``).

    A child is registered with each parent out of its slot first (``EMQ.ADOPT``), which must
    name the queue the child lands in: a registration elsewhere holds one of the parent's places
    for a child that never comes. So a child's enqueue reads its queue's width first (one
    ``EMQ.WIDTH``), and again after a refusal (a retired partition's 0 is not the queue's
    width). Its parents' references are resolved to their partitions (``resolve``), read anew
    once when a parent is not where a kept width put it (``EMQPARENT``, nothing registered).
    A flow reads each queue's width once (`fresh`: read in this call already) and names each
    parent by the partition it went to (`resolved`)."""
    if parents and not fresh:
        yield from read_width(router)
    above = list(parents) if resolved else (yield from resolve(routers, parents))
    reroutes, reread = 0, resolved
    while True:
        target = router.of(key)
        try:
            for adopt in cmd.adoptions(target, job_id, above):
                yield SEND, adopt
            return (yield WRITE, build(target, above)), target
        except EmqSpannedError as e:
            if not router.refused(e, reroutes):
                raise
            reroutes += 1
            if parents:
                yield from read_width(router)
        except EmqParentError:
            # A retry of an enqueue that went through (its row is there): the parent may have
            # run since, and refuses the child it counted already.
            if parents and cmd.row((yield SEND, cmd.job(target, job_id))) is not None:
                return None, target
            if reread:
                raise
            above, reread = (yield from resolve(routers, parents, again=True)), True
