"""What a handler sees: the ``Job`` a worker claimed (its payload, its attempt, the flags its
worker sets while it runs: ``lease_lost``, ``cancelled``, ``timed_out``; its headers and flow
children),
and ``Retry``, which a handler raises to fail the attempt for a retry at a time it names."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable, Dict, Optional

from .events import Ending
from .flows import Children


#: The longest wait a ``Retry`` may ask, in seconds (the server's bound on ``RETRY-IN``).
MAX_RETRY_AFTER = 365 * 86_400


class Retry(Exception):
    """Raised by a handler: fail this attempt and retry after ``after`` seconds (0 to 365 days;
    anything else is refused with ``ValueError`` where the ``Retry`` is made)."""

    def __init__(self, after: float, reason: str = "retry") -> None:
        if isinstance(after, bool) or not isinstance(after, (int, float)) or not (
            0 <= after <= MAX_RETRY_AFTER
        ):
            raise ValueError(f"a retry waits 0 to {MAX_RETRY_AFTER} seconds, not {after!r}")
        super().__init__(reason)
        self.after = after


@dataclass
class Job:
    """A claimed job, as its handler sees it."""

    id: str
    payload: Any
    #: This attempt (the lease token): 1 for the first.
    attempt: int
    #: The queue it was claimed from: a partitioned queue's job, its partition (where its
    #: renewals and outcome go, and where ``Queue(client, job.queue)`` finds it).
    queue: str
    #: The headers it was enqueued with (``enqueue(..., headers=...)``), the trace context
    #: among them: empty for none.
    headers: Dict[str, str] = field(default_factory=dict)
    #: Set when the lease was lost (it ran out and another attempt took the job): the
    #: handler's outcome will not be sent.
    lease_lost: threading.Event = field(default_factory=threading.Event)
    #: Set when the job was cancelled (``EMQ.CANCEL``) while this attempt ran: read it as
    #: ``job.cancelled``.
    _cancel: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    #: Set when this attempt ran past its deadline (``EMQTIMEOUT``): read it as
    #: ``job.timed_out``.
    _timeout: threading.Event = field(default_factory=threading.Event, repr=False, compare=False)
    #: What the next renewal sends as the row's ``progress`` (``RENEW ... PROGRESS``).
    progress: Optional[bytes] = None
    #: When the claim that returned it was sent (``time.time_ns()``): its lease began no sooner.
    claimed_ns: int = 0
    #: How ``children`` (a ``Worker``'s job) or ``achildren`` (an ``AsyncWorker``'s) reads them:
    #: the claiming worker's queue's ``children``.
    _children: Optional[Callable[[str], Children]] = field(default=None, repr=False, compare=False)
    _achildren: Optional[Callable[[str], Awaitable[Children]]] = field(
        default=None, repr=False, compare=False
    )
    #: Where its worker is with it: ``claimed``, ``running`` (its handler), ``ended`` (its
    #: outcome on the way), ``abandoned`` (cancelled or timed out while its handler ran: no
    #: longer waited for). Read and written under the ``Worker``'s lock (on the
    #: ``AsyncWorker``'s loop).
    _phase: str = field(default="claimed", repr=False, compare=False)
    #: Whether its worker took note of the attempt's end (a cancel or a timeout: its event,
    #: once).
    _end_seen: bool = field(default=False, repr=False, compare=False)
    #: When (``time.monotonic()``) the renewer renews it before its next round, just past the
    #: end of a lease that ends sooner (``leases.renew_at``); ``None``: at the round.
    _renew_at: Optional[float] = field(default=None, repr=False, compare=False)
    #: How many renewals came so, before a round: each waits twice as long past the lease's end.
    _early: int = field(default=0, repr=False, compare=False)
    #: What its worker counted the attempt as (``Claiming.tally``): once, but for a ``lost``
    #: settle whose attempt the server had ended, moved to that end's count when heard of.
    _counted: Optional[str] = field(default=None, repr=False, compare=False)

    @property
    def cancelled(self) -> bool:
        """Whether the job was cancelled (``EMQ.CANCEL``) while this attempt ran, as a renewal
        (or a settle) learned: it is dead now, with the error ``cancelled``. A sync handler
        checks it and returns early; what it returns or raises then is not sent, and its worker
        no longer waits for it (its slot runs the next job). An ``AsyncWorker``'s handler has
        its task cancelled as well."""
        return self._cancel.is_set()

    @property
    def timed_out(self) -> bool:
        """Whether this attempt ran past its deadline (the job's ``timeout``, or its queue's),
        as a renewal learned (``EMQTIMEOUT``): the server ended the attempt (a retry, or
        ``dead`` after the last), with the error ``timeout``. The worker gives the handler up as
        for ``cancelled``: a sync handler checks it and returns early, an ``AsyncWorker``'s has
        its task cancelled, and nothing it returns or raises is sent."""
        return self._timeout.is_set()

    @property
    def _over(self) -> bool:
        """Whether the server ended this attempt while it ran (cancelled or timed out): nothing
        more is sent for it."""
        return self._cancel.is_set() or self._timeout.is_set()

    def _end(self, why: Ending) -> None:
        """Sets the flag of the attempt's end: ``cancelled`` or ``timed_out``."""
        (self._cancel if why == "cancelled" else self._timeout).set()

    def children(self) -> Children:
        """This job's children, when it is a flow's parent: ``(queue, id)`` -> ``Child``
        (status, data), every page of ``EMQ.CHILDREN``; empty for a job without children. In
        an ``AsyncWorker``'s handler, ``await job.achildren()``."""
        if self._children is None:
            raise TypeError("an AsyncWorker's job reads its children with await job.achildren()")
        return self._children(self.id)

    async def achildren(self) -> Children:
        """``children``, in an ``AsyncWorker``'s handler."""
        if self._achildren is None:
            raise TypeError("a Worker's job reads its children with job.children()")
        return await self._achildren(self.id)
