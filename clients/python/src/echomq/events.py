"""The workers' observability hook: a ``WorkerEvent`` for each claim, renewal and settle of a
job (with the server's answer to it), each start and end of its handler, an attempt the server
ended while it ran (cancelled, timed out), and each step of a flow's hand-over from the queue's
outbox, passed to the worker's ``on_event`` synchronously, from the thread or task that did it.
The Rust worker keeps the same contract."""

from __future__ import annotations

import logging
import os
import secrets
import socket
from dataclasses import dataclass
from typing import Any, Callable, Literal, Optional, Tuple

from .errors import refusal

log = logging.getLogger("echomq")

#: What happened: a job a claim returned, a lease renewal, an outcome sent (``ACK``/``MACK`` or
#: ``FAIL``), the handler's start and end; for a flow, a finished child's hand-over to its parent
#: (``EMQ.HANDOVER``) and its removal from the outbox (``EMQ.DELIVERED``), the child's id and
#: token 0, and a read of the outbox that failed (``EMQ.OUTBOX``, the id empty); ``cancelled``,
#: once per attempt, when a renewal or a settle answered ``EMQCANCELLED`` (the job was cancelled
#: while it ran), and ``timed_out``, once per attempt, when a renewal answered ``EMQTIMEOUT``
#: (the attempt ran past its deadline): either way the worker sends nothing more for that
#: attempt and frees its slot.
EventKind = Literal[
    "claim", "renew", "settle", "handler_start", "handler_end", "handover", "delivered", "outbox",
    "cancelled", "timed_out",
]
#: How the server ended an attempt while its handler ran: the event's kind, the job's flag and
#: the worker's count of that name.
Ending = Literal["cancelled", "timed_out"]
#: ``ok``: the server answered and did it. ``refused``: it answered with an error for that job
#: (a stale token, ``EMQLEASE``, say): it did not happen. ``unknown``: no answer came (a lost
#: connection, a timeout): it may or may not have happened.
Outcome = Literal["ok", "refused", "unknown"]
Action = Literal["ack", "fail"]


@dataclass(frozen=True)
class WorkerEvent:
    """One event of a worker, for ``on_event``."""

    kind: EventKind
    #: The worker's ``name``.
    worker: str
    queue: str
    #: The job's id.
    id: str
    #: The lease token: the attempt.
    token: int
    #: Wall-clock Unix-epoch nanoseconds (``time.time_ns()``) when the command was sent and
    #: when its reply (or error) came; for ``handler_start`` and ``handler_end`` both are that
    #: moment.
    sent_ns: int
    answered_ns: int
    outcome: Outcome = "ok"
    #: The error's text: the server's refusal, the lost connection, or for ``handler_end`` the
    #: exception that failed the job; ``None`` when there was none.
    error: Optional[str] = None
    #: For ``settle``: what was sent.
    action: Optional[Action] = None
    #: For ``settle``: ``None`` unless the worker has ``wait_replicas``, else whether ``WAIT``
    #: reported at least that many replicas.
    replicated: Optional[bool] = None


def default_name() -> str:
    """``<hostname>:<pid>:<6 random hex>``: unique to one worker."""
    return f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(3)}"


def answer(reply: Any) -> Tuple[Outcome, Optional[str]]:
    """The outcome of a command from its reply (an exception in place of a failed one)."""
    if not isinstance(reply, BaseException):
        return "ok", None
    return ("refused" if refusal(reply) else "unknown"), str(reply) or type(reply).__name__


def failure(error: Optional[BaseException]) -> Optional[str]:
    """A handler's exception as ``handler_end``'s error: ``Type: message``."""
    return None if error is None else f"{type(error).__name__}: {error}"


class Hook:
    """Calls ``on_event`` (when given) with a worker's events; what it raises is logged and
    ignored, never the worker's end."""

    def __init__(
        self, on_event: Optional[Callable[[WorkerEvent], None]], worker: str, queue: str
    ) -> None:
        self.on_event = on_event
        self.worker = worker
        self.queue = queue

    def __call__(
        self,
        kind: EventKind,
        job_id: str,
        token: int,
        sent_ns: int,
        answered_ns: Optional[int] = None,
        reply: Any = None,
        error: Optional[str] = None,
        action: Optional[Action] = None,
        replicated: Optional[bool] = None,
    ) -> None:
        if self.on_event is None:
            return
        outcome, refused = answer(reply)
        event = WorkerEvent(
            kind=kind,
            worker=self.worker,
            queue=self.queue,
            id=job_id,
            token=token,
            sent_ns=sent_ns,
            answered_ns=sent_ns if answered_ns is None else answered_ns,
            outcome=outcome,
            error=refused if refused is not None else error,
            action=action,
            replicated=replicated,
        )
        try:
            self.on_event(event)
        except BaseException:
            log.exception("echomq: the on_event hook raised on %s; the worker goes on", event)

