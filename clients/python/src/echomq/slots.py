"""A queue's hash slot (protocol.md §3): CRC16-XMODEM of its name mod 16384, the server's
``CLUSTER KEYSLOT``, as redis-py computes it for its cluster client. A queue name is its keys'
hashtag (§1.1), so every key of the queue has this slot. A child whose parent's queue has
another slot is out of the module's reach on a cluster: the client adopts it first."""

from __future__ import annotations

from redis.crc import key_slot

SLOTS = 16384
"""The slots of a cluster."""


def slot(queue: str) -> int:
    """The slot of every key of `queue`."""
    found: int = key_slot(queue.encode())
    return found
