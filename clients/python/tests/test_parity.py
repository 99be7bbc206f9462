"""``Queue`` and ``AsyncQueue`` expose the same calls: the same public methods, each with the
same parameters, the asyncio ones awaited, so the two cannot drift apart again."""

from __future__ import annotations

import inspect
from typing import Any, Dict, List, Tuple

import echomq
from echomq.aio import AsyncQueue


def public(cls: type) -> Dict[str, Any]:
    return {n: f for n, f in inspect.getmembers(cls, inspect.isfunction) if not n.startswith("_")}


def parameters(f: Any) -> List[Tuple[str, Any, Any, Any]]:
    return [(p.name, p.kind, p.default, p.annotation) for p in inspect.signature(f).parameters.values()]


def test_the_async_queue_has_each_call_of_the_queue_with_its_parameters() -> None:
    sync, aio = public(echomq.Queue), public(AsyncQueue)
    assert sorted(aio) == sorted(sync)
    # The calls this parity was written for, which AsyncQueue once lacked.
    assert {"purge", "requeue_dead", "uncron", "crons", "jobs"} <= set(sync)
    # And the flows' calls.
    assert {"flow", "chain", "batch", "children"} <= set(sync)
    for name in sync:
        assert parameters(aio[name]) == parameters(sync[name]), name
        awaited = inspect.iscoroutinefunction(aio[name]) or inspect.isasyncgenfunction(aio[name])
        assert awaited, f"AsyncQueue.{name} is awaited (or iterated with async for)"
        assert not inspect.iscoroutinefunction(sync[name]), f"Queue.{name} is not"
        assert not inspect.isasyncgenfunction(sync[name]), f"Queue.{name} is not"
    assert parameters(AsyncQueue.__init__) == parameters(echomq.Queue.__init__)
