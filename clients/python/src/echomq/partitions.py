"""A partitioned queue's partitions, as the module names and routes them: partition ``i`` of
``n`` is the queue ``<queue>~<i>-<j>``, ``j`` the least number that puts its slot in the
``i``-th of ``n`` shares of the slot range; a job goes to partition FNV-1a-32(its group, else
its id) mod ``n``. testing/vectors/ holds every client to the same."""

from __future__ import annotations

from functools import lru_cache

from .slots import SLOTS, slot

MAX_PARTITIONS = 1024
"""Most partitions a queue may have."""

MAX_NAME_LEN = 112
"""Longest name of a partitioned queue, in bytes."""


def fnv1a32(data: bytes) -> int:
    """FNV-1a, 32 bits."""
    h = 0x811C9DC5
    for b in data:
        h = ((h ^ b) * 0x01000193) & 0xFFFFFFFF
    return h


def route(width: int, key: str) -> int:
    """The partition, of `width` (0 reads as 1), of a job with this group, or this id where it
    has none."""
    return fnv1a32(key.encode()) % max(width, 1)


def share(index: int, width: int) -> tuple[int, int] | None:
    """The slots partition `index` of `width` owns, as (first, past the last): from
    ceil(index * 16384 / width) up to the next index's; None for a width out of 1-1024 or an
    index past it."""
    if type(index) is not int or type(width) is not int:
        return None
    if not 1 <= width <= MAX_PARTITIONS or not 0 <= index < width:
        return None
    return -(-index * SLOTS // width), -(-(index + 1) * SLOTS // width)


def is_name(text: object, longest: int) -> bool:
    """Whether `text` is a name as the server takes a queue's or a group's: a ``str`` of 1 to
    `longest` bytes of printable ASCII (0x21-0x7e) without braces."""
    if not isinstance(text, str) or not text.isascii():
        return False
    raw = text.encode()
    return 1 <= len(raw) <= longest and all(0x21 <= b <= 0x7E and b not in b"{}" for b in raw)


def name(queue: str, index: int, width: int) -> str | None:
    """The name of partition `index` of `queue`'s `width`; None for a name that is no queue
    name (1-112 bytes of printable ASCII without braces), a width out of 1-1024 or an index
    past it. Each name is found once and kept (``_named``: up to ``NAMES_KEPT``), so every
    call after the first on a queue's partitions is a look-up."""
    if not isinstance(queue, str) or type(index) is not int or type(width) is not int:
        return None
    return _named(queue, index, width)


NAMES_KEPT = 8192
"""Most partition names kept: every partition of eight queues of 1,024."""


@lru_cache(maxsize=NAMES_KEPT)
def _named(queue: str, index: int, width: int) -> str | None:
    """``name``, found: the least ``j`` whose name's slot is in the partition's share (a
    thousand partitions take about a second)."""
    if not is_name(queue, MAX_NAME_LEN):
        return None
    bounds = share(index, width)
    if bounds is None:
        return None
    low, high = bounds
    for j in range(1_000_000):
        candidate = f"{queue}~{index}-{j}"
        if low <= slot(candidate) < high:
            return candidate
    return None
