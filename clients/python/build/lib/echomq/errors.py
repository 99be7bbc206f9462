"""The error catalogue as exceptions: each EchoMQ refusal is a typed subclass of redis-py's
``ResponseError``, so existing ``except ResponseError`` code still catches it. An error this
module does not know stays the plain ``ResponseError`` the client raised, never swallowed."""

from __future__ import annotations

from typing import Dict, Type

from redis.exceptions import ResponseError


class EmqError(ResponseError):
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


class EmqSetError(EmqError):
    """``EMQSET``: an unknown set name, or a purge of the active set."""

    code = "EMQSET"


class EmqCursorError(EmqError):
    """``EMQCURSOR``: a cursor no reply gave."""

    code = "EMQCURSOR"


class EmqCronError(EmqError):
    """``EMQCRON``: a repeating schedule refused (the parser's reason, or a full queue)."""

    code = "EMQCRON"


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
        EmqSetError,
        EmqCursorError,
        EmqCronError,
    )
}


def translate(error: ResponseError) -> ResponseError:
    """The typed exception for a server refusal, or ``error`` itself when its code is not
    EchoMQ's."""
    text = str(error)
    cls = CODES.get(text.split(" ", 1)[0])
    if cls is None:
        return error
    typed = cls(text)
    typed.__cause__ = error
    return typed
