"""What a failover or a reshard looks like to a client, and how long to wait before trying again."""

from __future__ import annotations

import random

from redis.exceptions import (
    BusyLoadingError,
    ClusterError,
    ConnectionError,
    MasterDownError,
    ReadOnlyError,
    RedisClusterException,
    ResponseError,
    TimeoutError,
    TryAgainError,
)

# Replies that mean "not now, here": a slot in migration, a blocked call ended by a failover, a
# replica promoted or demoted, a server loading its data, a cluster without a majority.
TRANSIENT_CODES = ("TRYAGAIN", "UNBLOCKED", "READONLY", "LOADING", "MASTERDOWN", "CLUSTERDOWN")
# How redis-py's cluster client says none of the nodes it knows answered its slot map request.
CLUSTER_UNREACHABLE = "Redis Cluster cannot be connected"


def transient(error: Exception) -> bool:
    """Whether trying the same call again, a moment later, may succeed."""
    # ClusterError: the cluster client's own retries through MOVED, ASK and TRYAGAIN ran out
    # ("TTL exhausted") while a slot moved. The cluster client's parser strips the code from
    # TRYAGAIN and MASTERDOWN, hence their classes.
    if isinstance(
        error,
        (ConnectionError, TimeoutError, BusyLoadingError, ReadOnlyError, ClusterError,
         TryAgainError, MasterDownError),
    ):
        return True
    # redis-py's socket reader, when the peer resets the connection in mid-read (a node that
    # hands a slot on, or fails), can answer with the ValueError of its closed buffer instead
    # of a ConnectionError: it is the same lost connection.
    if isinstance(error, ValueError) and "closed file" in str(error):
        return True
    # The cluster client, refreshing its map of the slots while a primary fails, tries every
    # node it knows; when each refuses for the moment (the failed one among them) it answers
    # "Redis Cluster cannot be connected", raised from the last of those lost connections.
    if isinstance(error, RedisClusterException) and str(error).startswith(CLUSTER_UNREACHABLE):
        return True
    return isinstance(error, ResponseError) and str(error).startswith(TRANSIENT_CODES)


def backoff(attempt: int, base: float = 0.05, cap: float = 2.0) -> float:
    """Seconds to wait before try `attempt` (0-based): exponential, capped, with full jitter."""
    return random.uniform(0, min(cap, base * (2**attempt)))
