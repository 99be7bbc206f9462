"""Flows, jobs that wait for other jobs, as the client shapes them: a child's ``Parent``, a
flow's tree of ``Node``s and the order its jobs are enqueued in (``steps``), the trees
``chain`` and ``batch`` build, and what a parent reads of its children (``Children``). Pure:
``Queue`` and ``AsyncQueue`` send what these plan."""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import (
    Any, Callable, Dict, Iterable, Iterator, List, Literal, Mapping, NamedTuple, Optional, Sequence, Set,
    Tuple, Union, cast,
)

from . import ids
from .partitions import is_name

#: What a child's death or cancellation does to its parent: ``fail`` kills it (the default),
#: ``ignore`` just counts it as finished.
OnFail = Literal["fail", "ignore"]
#: Most parents a child may have (``PARENT`` repeats up to 16 times).
MAX_PARENTS = 16
#: Most children a parent may wait for (``CHILDREN`` 1..=100000).
MAX_CHILDREN = 100_000
#: Longest name of a group, in bytes (the server's rule, as for a queue's name).
MAX_GROUP_LEN = 128


class Parent(NamedTuple):
    """A parent of the job being enqueued: its queue, its id, and what the child's failure
    does to it. A plain ``(queue, id)`` or ``(queue, id, on_fail)`` tuple is one too."""

    queue: str
    id: str
    on_fail: OnFail = "fail"


#: A parent as ``enqueue`` takes it.
ParentLike = Union[Parent, Tuple[str, str], Tuple[str, str, str]]


def parents_of(given: Optional[Iterable[ParentLike]]) -> List[Parent]:
    """The `given` parents as ``Parent``s, checked before anything is sent: at most 16,
    distinct, each ``on_fail`` ``fail`` or ``ignore``."""
    found: List[Parent] = []
    for one in given or ():
        queue, job_id, *rest = one
        on_fail = rest[0] if rest else "fail"
        if on_fail not in ("fail", "ignore"):
            raise ValueError(f"on_fail is 'fail' or 'ignore', not {on_fail!r}")
        parent = Parent(queue, job_id, cast(OnFail, on_fail))
        if any((p.queue, p.id) == (parent.queue, parent.id) for p in found):
            raise ValueError(f"parent {parent.queue} {parent.id} given twice")
        found.append(parent)
    if len(found) > MAX_PARENTS:
        raise ValueError(f"a job has at most {MAX_PARENTS} parents")
    return found


@dataclass(frozen=True)
class Node:
    """A job of a flow: its queue and payload, its id (minted when missing), what its failure
    does to its parent (``on_fail``; the root's is unused), the children it waits for, its
    ``timeout`` (seconds: each attempt's limit, ``enqueue``'s), its ``group`` (``enqueue``'s:
    1 to 128 printable ASCII bytes without braces, checked before anything is sent), and its
    ``priority``, ``delay`` (seconds) or ``at`` (unix seconds), ``enqueue``'s (a parent's due
    time counts from its enqueue: released later than that, it is ready at once; both a delay
    and a time: ``ValueError``). A node of
    a partitioned queue goes to the partition its group, or else its id, routes to, and its
    children name that partition as their parent's queue."""

    queue: str
    payload: Any
    id: Optional[str] = None
    on_fail: OnFail = "fail"
    children: Sequence["Node"] = ()
    timeout: Optional[float] = None
    group: Optional[str] = None
    priority: Optional[int] = None
    delay: Optional[float] = None
    at: Optional[float] = None

    @classmethod
    def of(cls, node: NodeLike) -> Node:
        """A ``Node`` from a node or a mapping with the same keys (``{"queue", "payload",
        "id"?, "on_fail"?, "children"?, "timeout"?, "group"?, "priority"?, "delay"?,
        "at"?}``), its children too."""
        if isinstance(node, Node):
            fields = {f.name: getattr(node, f.name) for f in dataclasses.fields(node)}
        else:
            fields = dict(node)
        fields["children"] = tuple(cls.of(c) for c in fields.get("children") or ())
        return cls(**fields)

    def walk(self) -> Iterator[Tuple[Optional[Node], Node]]:
        """Each node of the tree with its parent (``None`` for this one), top down: a parent
        always before its children."""
        stack: List[Tuple[Optional[Node], Node]] = [(None, self)]
        while stack:
            parent, node = stack.pop()
            yield parent, node
            stack.extend((node, c) for c in reversed(node.children))


#: A flow's node as ``flow``, ``chain`` and ``batch`` take it.
NodeLike = Union[Node, Mapping[str, Any]]


def minted(tree: NodeLike) -> Node:
    """`tree` as ``Node``s with every missing id minted: enqueue this one, and give it again
    to retry, so a retry writes no job twice."""
    node = Node.of(tree)
    return dataclasses.replace(
        node, id=node.id or ids.mint(), children=tuple(minted(c) for c in node.children)
    )


class Step(NamedTuple):
    """One enqueue of a flow: the job, how many children it waits for (``None``: none), its
    parent (``None`` for the root), its timeout (seconds, or ``None``), its group, priority,
    delay (seconds) and due time (unix seconds), each ``None`` when not given."""

    queue: str
    id: str
    payload: Any
    children: Optional[int]
    parents: List[Parent]
    timeout: Optional[float] = None
    group: Optional[str] = None
    priority: Optional[int] = None
    delay: Optional[float] = None
    at: Optional[float] = None


def steps(tree: Node, encode: Callable[[Any], Any] = lambda payload: payload) -> List[Step]:
    """The enqueues of a minted tree, top down: the root with ``CHILDREN``, then each child
    with its ``PARENT`` (and ``CHILDREN`` when it has its own), a parent always before its
    children, which the module checks it has. Every node is checked before any is sent: a
    node the server would refuse (a bad ``on_fail`` or ``group``, a priority, delay, time or
    timeout out of range, a delay with a time), a payload `encode` (the queue's serializer)
    refuses, or a job named twice (its parent would wait for its duplicate) would leave its
    parent waiting for it."""
    out: List[Step] = []
    jobs: Set[Tuple[str, str]] = set()
    for parent, node in tree.walk():
        assert node.id is not None, "steps takes a minted tree"
        if (node.queue, node.id) in jobs:
            raise ValueError(f"the job {node.queue} {node.id} appears twice in the tree")
        jobs.add((node.queue, node.id))
        encode(node.payload)
        if node.timeout is not None and not 1 <= timeout_ms(node.timeout) <= MAX_DELAY_MS:
            raise ValueError(f"a timeout is 1 ms to 365 days, not {node.timeout!r} s")
        if node.group is not None and not is_name(node.group, MAX_GROUP_LEN):
            raise ValueError(
                f"a group is 1 to {MAX_GROUP_LEN} printable ASCII bytes without braces, "
                f"not {node.group!r}"
            )
        check_when(node.priority, node.delay, node.at)
        above = [] if parent is None else [(parent.queue, parent.id or "", node.on_fail)]
        children = len(node.children) or None
        out.append(
            Step(
                node.queue, node.id, node.payload, children, parents_of(above), node.timeout,
                node.group, node.priority, node.delay, node.at,
            )
        )
    return out


#: The priorities a job may have (the server's bounds).
PRIORITY_MIN, PRIORITY_MAX = -1_000_000, 1_000_000
#: The longest delay, in ms (a year), and the latest due time, in unix ms, the server takes.
MAX_DELAY_MS, MAX_AT_MS = 365 * 86_400_000, (1 << 53) - 1


def timeout_ms(timeout: float, name: str = "timeout") -> int:
    """A timeout (or another duration named `name`) in seconds as the protocol's ms, to the
    nearest: one under half a ms would be sent as 0, which is no duration the server takes,
    so it is refused here."""
    ms = math.floor(timeout * 1000 + 0.5)
    if timeout > 0 and ms < 1:
        raise ValueError(f"{name}={timeout!r} s rounds to 0 ms: the server takes 1 ms at least")
    return ms


def check_when(priority: Optional[int], delay: Optional[float], at: Optional[float]) -> None:
    """Refuses (``ValueError``) what the server would refuse of a flow's job: a priority that is
    not an integer from -1,000,000 to 1,000,000, a delay or a time out of its range, or both a
    delay and a time."""
    if delay is not None and at is not None:
        raise ValueError("give delay or at, not both")
    if priority is not None and (
        isinstance(priority, bool) or not isinstance(priority, int)
        or not PRIORITY_MIN <= priority <= PRIORITY_MAX
    ):
        raise ValueError(f"a priority is an integer from {PRIORITY_MIN} to {PRIORITY_MAX}")
    if delay is not None and not 0 <= delay * 1000 <= MAX_DELAY_MS:
        raise ValueError("a delay is 0 to 365 days")
    if at is not None and not 0 <= at * 1000 <= MAX_AT_MS:
        raise ValueError(f"a time (at) is 0 to {MAX_AT_MS} unix ms")


def chained(jobs: Sequence[NodeLike]) -> Node:
    """``chain([a, b, c])``'s tree: a runs, then b, then c; c is b's parent, b is a's."""
    if not jobs:
        raise ValueError("a chain has at least one job")
    nodes = [Node.of(j) for j in jobs]
    tree = nodes[0]
    for node in nodes[1:]:
        tree = dataclasses.replace(node, children=(*node.children, tree))
    return tree


def batched(jobs: Sequence[NodeLike], on_complete: Union[Tuple[str, Any], NodeLike]) -> Node:
    """``batch(jobs, on_complete=(queue, payload))``'s tree: the callback, a parent of every
    job, each with ``on_fail`` ``ignore``: it runs once all of them finished, however."""
    if not jobs:
        raise ValueError("a batch has at least one job")
    if isinstance(on_complete, tuple):
        callback = Node(on_complete[0], on_complete[1])
    else:
        callback = Node.of(on_complete)
    children = tuple(dataclasses.replace(Node.of(j), on_fail="ignore") for j in jobs)
    return dataclasses.replace(callback, children=(*callback.children, *children))


class Child(NamedTuple):
    """A child as its parent sees it: ``waiting``, ``acked``, ``dead`` or ``cancelled``, and
    its result's bytes (acked) or its error's (dead); empty when it has neither."""

    status: str
    data: bytes


class Children(Dict[Tuple[str, str], Child]):
    """A parent's children (``EMQ.CHILDREN``): ``(queue, id)`` -> ``Child``."""

    def count(self, status: str) -> int:
        """How many children have `status` (``acked``, ``dead``, ``cancelled``, ``waiting``)."""
        return sum(1 for c in self.values() if c.status == status)
