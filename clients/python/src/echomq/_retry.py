"""What a failover or a reshard looks like to a client, how long to wait before trying again, and
when to stop trying."""

from __future__ import annotations

import random

from .errors import kinds, translate

# Replies that mean "not now, here": a slot in migration, a blocked call ended by a failover, a
# replica promoted or demoted, a server loading its data, a cluster without a majority.
TRANSIENT_CODES = ("TRYAGAIN", "UNBLOCKED", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN")

# The client library's exceptions (redis-py's or valkey-py's, named alike) for a lost or refused
# connection, a timeout, and the replies above its parser types. ClusterError: the cluster
# client's own retries through MOVED, ASK and TRYAGAIN ran out ("TTL exhausted") while a slot
# moved. SlotNotCoveredError: its map has no primary for a slot, as during a failover. The
# cluster client's parser strips the code from TRYAGAIN and MASTERDOWN, hence theirs.
TRANSIENT_KINDS = frozenset(
    {"ConnectionError", "TimeoutError", "BusyLoadingError", "ReadOnlyError", "ClusterError",
     "TryAgainError", "MasterDownError", "SlotNotCoveredError"}
)

# How the cluster client says none of the nodes it knows answered its request for the slot map.
CLUSTER_CLIENT_KINDS = frozenset({"RedisClusterException", "ValkeyClusterException"})
CLUSTER_UNREACHABLE = ("Redis Cluster cannot be connected", "Valkey Cluster cannot be connected")


def transient(error: Exception) -> bool:
    """Whether trying the same call again, a moment later, may succeed."""
    names = kinds(error)
    if names & TRANSIENT_KINDS:
        return True
    # The socket reader, when the peer resets the connection in mid-read (a node that hands a
    # slot on, or fails), can answer with the ValueError of its closed buffer instead of a
    # ConnectionError: it is the same lost connection.
    if isinstance(error, ValueError) and "closed file" in str(error):
        return True
    # Or, when another thread tore the connection down in mid-read (a redirect during a slot
    # migration), with the AttributeError of the parser whose buffer it dropped.
    if isinstance(error, AttributeError) and raised_by_client_library(error):
        return True
    # The cluster client refreshing its map of the slots while a primary fails tries every node
    # it knows; when each refuses for the moment (the failed one among them) it gives up so.
    if names & CLUSTER_CLIENT_KINDS and str(error).startswith(CLUSTER_UNREACHABLE):
        return True
    return "ResponseError" in names and str(error).startswith(TRANSIENT_CODES)


def raised_by_client_library(error: BaseException) -> bool:
    """Whether `error` was raised in redis-py's or valkey-py's reply reader, not a caller's code."""
    tb = error.__traceback__
    if tb is None:
        return False
    while tb.tb_next is not None:
        tb = tb.tb_next
    path = tb.tb_frame.f_code.co_filename.replace("\\", "/")
    return any(f"/{lib}/{part}" in path for lib in ("redis", "valkey")
               for part in ("_parsers/", "connection.py"))


def server_full(error: Exception) -> bool:
    """Whether the server refused a write for want of room: over its ``maxmemory`` (``OOM``,
    which redis-py's parser types, code stripped) or unable to persist (``MISCONF``). It lasts
    until memory or disk is freed: a worker's claim waits it out rather than stopping."""
    names = kinds(error)
    if "OutOfMemoryError" in names:
        return True
    return "ResponseError" in names and str(error).startswith(("OOM", "MISCONF"))


def backoff(attempt: int, base: float = 0.05, cap: float = 2.0) -> float:
    """Seconds to wait before try `attempt` (0-based): exponential, capped, with full jitter."""
    return random.uniform(0, min(cap, base * (2**attempt)))


def retry_after(error: Exception, attempt: int, retries: int) -> float:
    """How long to wait before trying a call again after `error`, its `attempt`-th failure;
    raises the error (typed, for a refusal) when it is not worth another try."""
    if transient(error) and attempt < retries:
        return backoff(attempt)
    typed = translate(error)
    if typed is error:
        raise error
    raise typed from error
