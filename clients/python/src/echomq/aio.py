"""The same queue and worker for asyncio, over ``redis.asyncio`` (or any client whose
``execute_command`` is a coroutine): ``AsyncQueue`` (aqueue.py) and ``AsyncWorker``
(aworker.py), whose handlers are coroutines, run as tasks, up to the worker's concurrency."""

from .aqueue import AsyncQueue
from .aworker import REASONS, AsyncWorker

__all__ = ["AsyncQueue", "AsyncWorker", "REASONS"]
