"""A partitioned queue as a whole (docs/cluster.md, "A queue bigger than one primary"): the
commands that mark it (``EMQ.SPAN``, ``EMQ.UNSPAN``) and read its width (``EMQ.WIDTH``), its
partitions' names, their counts summed into the queue's, and a queue-wide limit shared out
between them. Pure: ``Queue`` and ``AsyncQueue`` send what these build."""

from __future__ import annotations

import re
from typing import Any, Dict, List, Optional, Sequence, Union

from . import commands as cmd
from .errors import kinds, refusal
from .partitions import MAX_PARTITIONS, name

#: The counts of ``EMQ.STATS`` (and ``EMQ.LIMIT``) a partitioned queue's are the sum of its
#: partitions'; a limit the client shared out (``portion``) sums back to the queue's too.
SUMMED = (
    "pending", "active", "scheduled", "dead", "waiting", "groups", "rate-used", "concurrency",
    "rate",
)


def names(queue: str, width: int) -> List[str]:
    """The partitions of `queue` spanned over `width`, in order (none for width 0)."""
    found = [name(queue, i, width) for i in range(width)]
    if not all(found):
        raise ValueError(f"{queue!r} has no partitions of width {width}: a name of 1-112 "
                         f"printable ASCII bytes without braces, a width of 1-{MAX_PARTITIONS}")
    return [n for n in found if n is not None]


def span(queue: str, width: int) -> List[List[Any]]:
    """Each partition's ``EMQ.SPAN <partition> <n> OF <queue> INDEX <i>``, then the queue's
    ``EMQ.SPAN <queue> <n>``: the queue refuses jobs only once every partition takes them."""
    marks: List[List[Any]] = [
        ["EMQ.SPAN", p, width, "OF", queue, "INDEX", i] for i, p in enumerate(names(queue, width))
    ]
    return marks + [["EMQ.SPAN", queue, width]]


def refused(width_reply: Any, stats_reply: Any, width: int) -> bool:
    """Whether the server will refuse to span a queue over `width`, from its ``EMQ.WIDTH`` and
    ``EMQ.STATS``: a partition, a queue spanned over another width, or one that holds jobs. A
    client asks first, so a refused span leaves no partition marked."""
    found, counts = cmd.pairs(width_reply), cmd.pairs(stats_reply)
    held = sum(counts.get(k) or 0 for k in ("pending", "active", "scheduled", "dead", "waiting"))
    return found.get("of") is not None or found.get("width") not in (0, width) or held > 0


def unspan(queue: str, width: int) -> List[List[Any]]:
    """The ``EMQ.WIDTH`` of each of the queue's `width` partitions, in order: an unspan
    (``unspanning``) retires each still marked, then unmarks the queue."""
    return [width_command(p) for p in names(queue, width)]


def unspanning(queue: str, width: int, widths: Sequence[Any]) -> List[List[Any]]:
    """``EMQ.UNSPAN`` of each partition still marked as one of `queue`'s (from its
    ``EMQ.WIDTH``, in `widths`), then of the queue (docs/cluster.md, "Changing the width"). The
    partitions go first: one that holds jobs refuses (``EMQSPAN``) and leaves the queue spanned,
    so its producers still route and the same call, once the jobs are gone, finishes. A
    partition retired already is left so: ``EMQ.UNSPAN`` again would make it an ordinary queue,
    which takes a stale producer's job where no worker claims, instead of sending it on."""
    marked = [
        p for p, reply in zip(names(queue, width), widths)
        if cmd.pairs(reply).get("index") is not None
    ]
    return [["EMQ.UNSPAN", p] for p in marked] + [["EMQ.UNSPAN", queue]]


def width_command(queue: str) -> List[Any]:
    return ["EMQ.WIDTH", queue]


def width(reply: Any) -> int:
    """``EMQ.WIDTH``'s map as the partitions a client routes to: its ``width``, but 0 for a
    partition (``of`` names its queue), which takes jobs and claims as an ordinary queue does."""
    found = cmd.pairs(reply)
    return 0 if found.get("of") is not None else int(found.get("width") or 0)


#: How a server refuses a command to a user not allowed it (Valkey's "User <u> has no
#: permissions to run the '<command>' command", Redis's "this user has no permissions to run
#: ..."), as against a key or a channel the user may not touch; and a command it does not
#: know (redis-py strips the ``ERR`` of the second).
NOT_ALLOWED = re.compile(r"has no permissions to run", re.IGNORECASE)
UNKNOWN = re.compile(r"^(ERR )?unknown command", re.IGNORECASE)


def untold(error: BaseException) -> bool:
    """Whether `error`, an ``EMQ.WIDTH``'s, means the server will not tell this user the width:
    the command refused to the user (``NOPERM ... has no permissions to run``: the user lacks
    ``+emq.width``) or unknown. Such a reader has ordinary queues only: the width read as 0 (as
    the Node client's ``knowWidth``). Any other ``NOPERM`` (a key the user may not access) is
    a real error."""
    if not refusal(error):
        return False
    text = str(error)
    noperm = "NoPermissionError" in kinds(error) or text.upper().startswith("NOPERM")
    return UNKNOWN.match(text) is not None or (noperm and NOT_ALLOWED.search(text) is not None)


def totals(each: Sequence[Dict[str, Optional[int]]]) -> Dict[str, Optional[int]]:
    """The partitions' ``EMQ.STATS`` (or ``EMQ.LIMIT``) maps as the queue's: ``SUMMED`` fields
    added up (``None`` where a partition has none: no limit), ``paused`` 1 when any partition
    is, any other field its value where every partition has the same, else ``None``."""
    out: Dict[str, Optional[int]] = {}
    for key in each[0] if each else ():
        values = [one.get(key) for one in each]
        if key in SUMMED:
            out[key] = None if None in values else sum(v or 0 for v in values)
        elif key == "paused":
            out[key] = max((v or 0) for v in values)
        else:
            out[key] = values[0] if all(v == values[0] for v in values) else None
    return out


def portion(limit: int, width: int, index: int) -> int:
    """Partition `index`'s part of a queue-wide `limit` over `width` partitions: ``limit // width``,
    one more for the first ``limit % width``, so the parts add up to `limit`. A limit below the
    width is refused: a partition given 0 would never run a job."""
    if limit < width:
        raise ValueError(f"a limit of {limit} cannot be shared between {width} partitions: "
                         f"give at least {width}")
    return limit // width + (1 if index < limit % width else 0)


Limit = Union[int, None, cmd.Keep]


def shared(limit: Limit, width: int, index: int) -> Limit:
    """A limit as partition `index` of `width` gets it: a number its ``portion``; ``None``
    (removed), ``KEEP`` (left as it is), and any limit of an ordinary queue (width 0) as they
    are."""
    return portion(limit, width, index) if isinstance(limit, int) and width else limit
