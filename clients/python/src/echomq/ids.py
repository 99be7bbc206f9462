"""Branded ids minted by the client, in the module's own layout (protocol.md §2): ``JOB`` and 11 base62
digits of a 63-bit value, the milliseconds since 2024-01-01 in the high bits, so ids sort as
they were minted. A producer that mints its ids can retry an enqueue with the same id, which
the server makes idempotent."""

from __future__ import annotations

import secrets
import threading
import time

ALPHABET = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
EPOCH_MS = 1_704_067_200_000
LOW_BITS = 22  # the module's node (10) and sequence (12) bits
MAX_VALUE = (1 << 63) - 1

_lock = threading.Lock()
_last = 0


def encode(kind: str, value: int) -> str:
    """``kind`` (three upper-case letters) and ``value`` as the 14-byte wire form."""
    if len(kind) != 3 or not kind.isupper() or not 0 <= value <= MAX_VALUE:
        raise ValueError("a branded id is 3 upper-case letters and a value below 2^63")
    digits = []
    for _ in range(11):
        value, d = divmod(value, 62)
        digits.append(ALPHABET[d])
    return kind + "".join(reversed(digits))


def mint() -> str:
    """A fresh ``JOB`` id: the time, then random low bits; always above the last one minted
    by this process."""
    global _last
    ms = max(0, int(time.time() * 1000) - EPOCH_MS)
    value = (ms << LOW_BITS) | secrets.randbits(LOW_BITS)
    with _lock:
        if value <= _last:
            value = _last + 1
        _last = value
    return encode("JOB", value)
