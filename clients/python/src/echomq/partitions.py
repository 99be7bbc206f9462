"""A partitioned queue's partitions (docs/cluster.md), as the module names and routes them:
partition ``i`` of ``n`` is the queue ``<queue>~<i>-<j>``, ``j`` the least number that puts its
slot in the ``i``-th of ``n`` equal shares of the slot range; a job goes to partition
FNV-1a-32(its group, else its id) mod ``n``. testing/vectors/partitions.tsv holds every client
to the same."""

from __future__ import annotations

from .slots import slot

MAX_PARTITIONS = 1024
"""Most partitions a queue may have."""

MAX_NAME_LEN = 112
"""Longest name of a partitioned queue."""

SLOTS = 16384


def fnv1a32(data: bytes) -> int:
    """FNV-1a, 32 bits."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def route(width: int, key: str) -> int:
    """The partition, of `width`, of a job with this group, or this id where it has none."""
    return fnv1a32(key.encode()) % max(width, 1)


def name(queue: str, index: int, width: int) -> str | None:
    """The name of partition `index` of `queue`'s `width`; None for a name over MAX_NAME_LEN
    bytes, a width out of 1-1024 or an index past it."""
    if len(queue.encode()) > MAX_NAME_LEN or not 1 <= width <= MAX_PARTITIONS:
        return None
    if not 0 <= index < width:
        return None
    low, high = -(-index * SLOTS // width), -(-(index + 1) * SLOTS // width)
    for j in range(1_000_000):
        candidate = f"{queue}~{index}-{j}"
        if low <= slot(candidate) < high:
            return candidate
    return None
