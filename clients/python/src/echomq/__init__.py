"""EchoMQ's Python client: ``Queue`` to produce and operate, ``Worker`` to consume.

    import redis, echomq
    q = echomq.Queue(redis.Redis(), "emails")
    q.enqueue(b"welcome ann")
    echomq.Worker(redis.Redis(), "emails", lambda job: print(job.payload)).run()
"""

from .errors import (
    EmqCancelIncomplete,
    EmqCancelled,
    EmqCronError,
    EmqCursorError,
    EmqError,
    EmqIdError,
    EmqKeyError,
    EmqKindError,
    EmqLeaseLost,
    EmqNotReplicated,
    EmqParentError,
    EmqPayloadError,
    EmqQueueNameError,
    EmqSetError,
    EmqSpanError,
    EmqSpannedError,
    EmqTimeout,
    EmqTypeError,
    EmqVersionError,
)
from .commands import PROTOCOL_MAJOR, BulkJob, check_version
from .events import WorkerEvent
from .flows import Child, Children, Node, Parent, minted
from .ids import mint
from .job import Job, Retry
from .metrics import Histogram, Metrics
from .queue import Queue
from .serializers import Json, Raw, Serializer
from .stream import QueueEvent
from .worker import Worker

__all__ = [
    "EmqCancelIncomplete",
    "EmqCancelled",
    "EmqCronError",
    "EmqCursorError",
    "EmqError",
    "EmqIdError",
    "EmqKeyError",
    "EmqKindError",
    "EmqLeaseLost",
    "EmqNotReplicated",
    "EmqParentError",
    "EmqPayloadError",
    "EmqQueueNameError",
    "EmqSetError",
    "EmqSpanError",
    "EmqSpannedError",
    "EmqTimeout",
    "EmqTypeError",
    "EmqVersionError",
    "BulkJob",
    "Child",
    "Children",
    "Job",
    "Histogram",
    "Json",
    "Metrics",
    "Node",
    "Parent",
    "PROTOCOL_MAJOR",
    "Queue",
    "QueueEvent",
    "Raw",
    "Retry",
    "Serializer",
    "Worker",
    "WorkerEvent",
    "check_version",
    "mint",
    "minted",
]
