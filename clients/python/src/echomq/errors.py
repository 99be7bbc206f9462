"""The error catalogue as exceptions: each EchoMQ refusal is a typed subclass of the client's
``ResponseError`` (redis-py's, and valkey-py's too where it is installed), so existing
``except ResponseError`` code still catches it. An error this module does not know stays the
plain ``ResponseError`` the client raised, never swallowed."""

from __future__ import annotations

from typing import TYPE_CHECKING, Dict, FrozenSet, List, Optional, Sequence, Tuple, Type

from redis.exceptions import ResponseError

#: Where redis-py and valkey-py define their exceptions; the two name theirs alike.
CLIENT_MODULES = ("redis.exceptions", "valkey.exceptions")


def kinds(error: BaseException) -> FrozenSet[str]:
    """The names of the client library's exception classes `error` is an instance of, whichever
    of the two libraries raised it: ``{"ResponseError", "NoPermissionError", ...}``."""
    return frozenset(c.__name__ for c in type(error).__mro__ if c.__module__ in CLIENT_MODULES)


def refusal(error: BaseException) -> bool:
    """Whether `error` is a server's error reply (a ``ResponseError`` of either library)."""
    return "ResponseError" in kinds(error)


def _refusal_base() -> type:
    """redis-py's ``ResponseError``, joined with valkey-py's where that is installed."""
    try:
        from valkey.exceptions import ResponseError as ValkeyResponseError
    except ImportError:
        return ResponseError
    return type("ResponseError", (ResponseError, ValkeyResponseError), {"__module__": __name__})


if TYPE_CHECKING:
    _Refusal = ResponseError
else:
    _Refusal = _refusal_base()


class EmqError(_Refusal):
    """A refusal from the EchoMQ module (its reply starts with the code below)."""

    code = ""


class EmqQueueNameError(EmqError):
    """``EMQQUEUE``: the queue name is not 1-128 printable ASCII bytes without braces."""

    code = "EMQQUEUE"


class EmqTypeError(EmqError):
    """``EMQTYPE``: an unknown key type."""

    code = "EMQTYPE"


class EmqIdError(EmqError):
    """``EMQID``: a malformed branded id."""

    code = "EMQID"


class EmqKindError(EmqError):
    """``EMQKIND``: an id of another kind than ``JOB`` at enqueue."""

    code = "EMQKIND"


class EmqKeyError(EmqError):
    """``EMQKEY``: a key outside the grammar."""

    code = "EMQKEY"


class EmqPayloadError(EmqError):
    """``EMQPAYLOAD``: a payload over ``emq.max-payload-bytes``."""

    code = "EMQPAYLOAD"


class EmqLeaseLost(EmqError):
    """``EMQLEASE``: the lease token is stale or missing; the job is no longer this worker's."""

    code = "EMQLEASE"


class EmqCancelled(EmqError):
    """``EMQCANCELLED``: the job was cancelled (``EMQ.CANCEL``) while this attempt ran; it is
    dead with the error ``cancelled``, and this attempt's renewal or outcome is refused."""

    code = "EMQCANCELLED"


class EmqTimeout(EmqError):
    """``EMQTIMEOUT``: a renewal of an attempt past its deadline (the job's ``timeout``, or its
    queue's): the server ends that attempt itself (a retry with backoff, or ``dead`` after the
    last), with the error ``timeout``; the attempt's outcome is refused as stale (``EMQLEASE``)."""

    code = "EMQTIMEOUT"


class EmqSetError(EmqError):
    """``EMQSET``: an unknown set name, or a purge of the active set."""

    code = "EMQSET"


class EmqCursorError(EmqError):
    """``EMQCURSOR``: a cursor no reply gave."""

    code = "EMQCURSOR"


class EmqCronError(EmqError):
    """``EMQCRON``: a repeating schedule refused (the parser's reason, or a full queue)."""

    code = "EMQCRON"


class EmqParentError(EmqError):
    """``EMQPARENT``: a child's parent refused it (no such parent, not waiting, or all its
    children registered already)."""

    code = "EMQPARENT"


class EmqSpannedError(EmqError):
    """``EMQSPANNED <n>``: a job or a claim sent to a partitioned queue's own name, or a job to a
    partition its group (or else its id) does not route to. ``width``: the queue's partitions,
    ``n``, from which a client routes again (docs/cluster.md)."""

    code = "EMQSPANNED"

    def __init__(self, *args: object) -> None:
        super().__init__(*args)
        words = str(args[0]).split(" ", 2) if args else []
        self.width = int(words[1]) if len(words) > 1 and words[1].isdigit() else 0


class EmqSpanError(EmqError):
    """``EMQSPAN``: ``EMQ.SPAN`` of a queue that holds jobs or is marked otherwise already (another
    width, another place), or ``EMQ.UNSPAN`` of a partition that holds jobs."""

    code = "EMQSPAN"


class EmqNotReplicated(EmqError):
    """The write was taken by the primary but not confirmed by ``wanted`` replicas (``WAIT``,
    with a queue's ``wait_replicas``, reported ``replicas``): it may be lost in a failover.
    ``ids``: the jobs of the unconfirmed writes; ``enqueued``: every job the call enqueued
    (all of them taken by the primary), in order. Not a server refusal: its ``code`` is empty."""

    def __init__(
        self,
        ids: Sequence[str],
        replicas: int,
        wanted: int,
        enqueued: Optional[Sequence[str]] = None,
    ) -> None:
        super().__init__(
            f"{len(ids)} job(s) taken by the primary but confirmed by {replicas} of the "
            f"{wanted} replicas asked: they may be lost in a failover ({', '.join(ids[:3])}"
            f"{', ...' if len(ids) > 3 else ''})"
        )
        self.ids: List[str] = list(ids)
        self.replicas = replicas
        self.wanted = wanted
        self.enqueued: List[str] = list(enqueued if enqueued is not None else ids)


class EmqCancelIncomplete(Exception):
    """A cancel that failed after its job went (its cause chained): ``remaining``, the
    ``(queue, id)`` of the children not yet cancelled, top down (the caller may cancel them one
    by one with ``EMQ.CANCEL <queue> <id> UNSTARTED``, which leaves one that started since
    running); ``cancelled``, how many jobs went before, the job itself counted. Not a server
    refusal."""

    def __init__(self, cancelled: int, remaining: Sequence[Tuple[str, str]]) -> None:
        super().__init__(
            f"the cancel stopped after {cancelled} job(s), {len(remaining)} child(ren) not "
            "cancelled"
        )
        self.cancelled = cancelled
        self.remaining: List[Tuple[str, str]] = list(remaining)


class EmqVersionError(Exception):
    """The server speaks another major version of the EchoMQ protocol than this client."""


CODES: Dict[str, Type[EmqError]] = {
    cls.code: cls
    for cls in (
        EmqQueueNameError,
        EmqTypeError,
        EmqIdError,
        EmqKindError,
        EmqKeyError,
        EmqPayloadError,
        EmqLeaseLost,
        EmqCancelled,
        EmqTimeout,
        EmqSetError,
        EmqCursorError,
        EmqCronError,
        EmqParentError,
        EmqSpannedError,
        EmqSpanError,
    )
}


def translate(error: Exception) -> Exception:
    """The typed exception for a server refusal, or ``error`` itself when it is not a refusal
    or its code is not EchoMQ's."""
    if not refusal(error):
        return error
    text = str(error)
    cls = CODES.get(text.split(" ", 1)[0])
    if cls is None:
        return error
    typed = cls(text)
    typed.__cause__ = error
    return typed
