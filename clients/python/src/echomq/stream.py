"""A queue's event stream (``emq:{<queue>}:events``, docs/commands.md's ``EMQ.EVENTS``): the
commands that turn it on and off, and its entries as ``XREAD`` replies them."""

from __future__ import annotations

from typing import Any, List, NamedTuple, Optional, Tuple

from .commands import text

#: Entries one ``XREAD`` of the stream asks for.
READ_COUNT = 100


class QueueEvent(NamedTuple):
    """One entry of a queue's event stream: its stream id (give it back as ``start`` to read on
    from there), the event (``enqueued``, ``claimed``, ``acked``, ...), and the job's id and
    attempt (``None`` for an event of the queue itself: ``paused``, ``resumed``)."""

    stream_id: str
    event: str
    id: Optional[str]
    attempt: Optional[int]


def key(queue: str) -> str:
    """The stream's key."""
    return f"emq:{{{queue}}}:events"


def switch(queue: str, on: bool, maxlen: Optional[int] = None) -> List[Any]:
    """``EMQ.EVENTS <queue> ON [MAXLEN <n>]``, or ``OFF``."""
    if not on:
        return ["EMQ.EVENTS", queue, "OFF"]
    return ["EMQ.EVENTS", queue, "ON", *(["MAXLEN", maxlen] if maxlen is not None else [])]


def read(queue: str, start: str, block_ms: int, count: int = READ_COUNT) -> List[Any]:
    """``XREAD COUNT <count> BLOCK <ms> STREAMS <key> <start>``: what follows ``start``."""
    return ["XREAD", "COUNT", count, "BLOCK", max(1, block_ms), "STREAMS", key(queue), start]


def newest(queue: str) -> List[Any]:
    """``XREVRANGE <key> + - COUNT 1``: the stream's last entry, which ``"$"`` stands for."""
    return ["XREVRANGE", key(queue), "+", "-", "COUNT", 1]


def newest_id(reply: Any) -> str:
    """The last entry's id from a ``newest`` reply; ``"0-0"`` for an empty or missing stream
    (every entry then comes after it)."""
    return str(text(reply[0][0])) if reply else "0-0"


def entries(reply: Any) -> Tuple[List[QueueEvent], Optional[str]]:
    """An ``XREAD`` reply's entries as ``QueueEvent``s, and the last one's stream id (``None``
    when it timed out with none). Read under RESP2 (a list of ``[key, entries]``) or RESP3 (a
    map of key to entries)."""
    if not reply:
        return [], None
    streams = reply.values() if isinstance(reply, dict) else (entries for _, entries in reply)
    out: List[QueueEvent] = []
    for found in streams:
        # redis-py's RESP3 reading wraps a stream's entries in one more list.
        if len(found) == 1 and isinstance(found[0], list) and found[0] and isinstance(found[0][0], (list, tuple)):
            found = found[0]
        for stream_id, fields in found:
            pairs = fields if isinstance(fields, dict) else dict(zip(fields[::2], fields[1::2]))
            f = {str(text(k)): str(text(v)) for k, v in pairs.items()}
            attempt = f.get("attempt")
            out.append(QueueEvent(
                str(text(stream_id)), f.get("event", ""), f.get("id"),
                int(attempt) if attempt is not None else None,
            ))
    return out, (out[-1].stream_id if out else None)
