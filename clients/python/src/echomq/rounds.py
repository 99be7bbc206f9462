"""How a worker claims a partitioned queue (docs/cluster.md): its partitions grouped by the
primary that holds them (``by_primary``), and one claim loop a primary going round that group's
partitions (``Rotation``): a claim without ``BLOCK`` from each in turn, and once a whole round
found nothing, one blocking claim on the next whose ``WAKE`` names the others, so a worker
holds one blocked claim a primary and a ready job is claimed within a round."""

from __future__ import annotations

from typing import Any, Dict, List, NamedTuple, Optional, Sequence, Tuple


class Claim(NamedTuple):
    """The next claim of a loop: its partition, and for a blocking claim the partitions whose
    ready job ends its wait (``None``: a claim that does not block)."""

    partition: str
    wake: Optional[List[str]]


class Rotation:
    """One primary's partitions as its claim loop goes round them."""

    def __init__(self, partitions: Sequence[str]) -> None:
        self.partitions = list(partitions)
        self.at = 0
        #: Claims in a row that found nothing: a round's worth, and the next one blocks.
        self.empty = 0

    def next(self) -> Claim:
        """The claim to send next."""
        partition = self.partitions[self.at]
        if self.empty < len(self.partitions):
            return Claim(partition, None)
        others = self.partitions[self.at + 1:] + self.partitions[:self.at]
        return Claim(partition, others)

    def took(self, claim: Claim, jobs: int) -> None:
        """What `claim` found: the next partition's turn; after a blocking claim (jobs, a
        wake with none, or its time out) or jobs, a round of claims that do not block."""
        self.at = (self.at + 1) % len(self.partitions)
        self.empty = 0 if jobs or claim.wake is not None else self.empty + 1


class Ends:
    """How a worker's claim loops over the partitions went, for it to go on: the blocking
    claims answered, the first claim that failed for the moment (a failover, a lost connection,
    a ``MOVED``: the worker reads the slot map again and regroups) and the first refused for
    good (raised)."""

    def __init__(self) -> None:
        #: Blocking claims answered (jobs, a wake with none, or a time out).
        self.answered = 0
        self.lapse: Optional[BaseException] = None
        self.fatal: Optional[BaseException] = None

    def took(self, claim: Claim) -> None:
        """Notes a claim answered: only a blocking claim's counts (``after``)."""
        if claim.wake is not None:
            self.answered += 1

    def after(self, failures: int) -> int:
        """The failures in a row the worker backs off for once these loops lapsed: none when
        one of their blocking claims was answered (the loops held), else `failures` still. A
        regroup's first claims do not block and are answered even while the slot map is
        stale; the blocking claim whose ``WAKE`` names a partition another primary serves then
        ends in ``MOVED`` at once, and counting those answers would regroup again and again
        with no backoff."""
        return 0 if self.answered else failures

    def failed(self, error: BaseException, lapse: bool) -> None:
        """Notes a claim's failure: a lapse, or one for good."""
        if lapse:
            self.lapse = self.lapse or error
        else:
            self.fatal = self.fatal or error


def by_primary(client: Any, partitions: Sequence[str]) -> List[Tuple[Any, List[str]]]:
    """The partitions grouped by the primary that holds each, as a cluster client's map of the
    slots has it: each group's node (``None`` for a client of one server, which holds them all)
    and its partitions, in order."""
    if not hasattr(client, "get_node_from_key"):
        return [(None, list(partitions))]
    groups: Dict[str, Tuple[Any, List[str]]] = {}
    for partition in partitions:
        node = client.get_node_from_key(partition)
        groups.setdefault(node.name, (node, []))[1].append(partition)
    return list(groups.values())
