"""A worker through the moments a cluster changes under it: a node that does not answer while
the worker starts, a slot map that cannot be read for a moment, and a settle that fails in a way
no settle foresees. Each was a way for a worker to die (the chaos harness's rolling restart
found the first)."""

from __future__ import annotations

import asyncio
from typing import Any, List

import pytest
from redis.exceptions import RedisClusterException, ResponseError, TimeoutError

import echomq
from conftest import Server, joined, until
from test_worker import start_catching
from echomq import worker as worker_module
from echomq._replicas import arefresh, refresh
from echomq.claiming import acheck_server


class VersionRefused:
    """A client whose first ``EMQ.VERSION`` calls fail with `error`, as a restarting node's
    connection does; everything else goes to the real client."""

    def __init__(self, client: Any, error: Exception, times: int) -> None:
        self._client, self._error, self._left = client, error, times
        self.refused = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._client, name)

    def execute_command(self, *args: Any, **options: Any) -> Any:
        if args[0] == "EMQ.VERSION" and self._left > 0:
            self._left -= 1
            self.refused += 1
            raise self._error
        return self._client.execute_command(*args, **options)


def test_a_worker_whose_node_times_out_while_it_starts_tries_again_and_runs(
    server: Server,
) -> None:
    client = VersionRefused(server.client(), TimeoutError("Timeout connecting to server"), 2)
    done: List[str] = []
    worker = echomq.Worker(client, "starting", lambda job: done.append(job.id))
    t, raised = start_catching(worker)
    job = echomq.Queue(server.client(), "starting").enqueue(b"x")
    assert until(lambda: done == [job]), (raised, client.refused)
    worker.stop()
    assert joined(t)
    assert raised == [] and client.refused == 2


def test_a_server_without_the_protocol_still_stops_the_worker_at_once(server: Server) -> None:
    refusal = ResponseError("unknown command 'EMQ.VERSION'")
    client = VersionRefused(server.client(), refusal, 1)
    worker = echomq.Worker(client, "starting", lambda job: None)
    t, raised = start_catching(worker)
    assert joined(t)
    assert len(raised) == 1 and client.refused == 1, raised


def test_the_async_check_tries_a_timed_out_node_again_and_not_a_refusal() -> None:
    class Async:
        def __init__(self, failures: List[Exception]) -> None:
            self.failures, self.calls = failures, 0

        async def execute_command(self, *args: Any) -> Any:
            self.calls += 1
            if self.failures:
                raise self.failures.pop(0)
            return f"echomq:{echomq.PROTOCOL_MAJOR}.0".encode()

    timed_out = Async([TimeoutError("Timeout connecting to server")] * 2)
    asyncio.run(acheck_server(timed_out, retries=5))
    assert timed_out.calls == 3
    refused = Async([ResponseError("unknown command 'EMQ.VERSION'")])
    with pytest.raises(Exception):
        asyncio.run(acheck_server(refused, retries=5))
    assert refused.calls == 1


class Nodes:
    """A cluster client's node manager whose slot map read fails with `error`."""

    def __init__(self, error: Exception) -> None:
        self.error, self.reads = error, 0

    def initialize(self) -> None:
        self.reads += 1
        raise self.error


class Cluster:
    def __init__(self, error: Exception) -> None:
        self.nodes_manager = Nodes(error)

    def get_node_from_key(self, key: str) -> None:
        return None


def test_a_slot_map_that_cannot_be_read_while_the_cluster_changes_keeps_the_old_one() -> None:
    for error in [
        RedisClusterException("All slots are not covered after query all startup_nodes."),
        RedisClusterException("Redis Cluster cannot be connected."),
        TimeoutError("Timeout connecting to server"),
    ]:
        cluster = Cluster(error)
        refresh(cluster)
        assert cluster.nodes_manager.reads == 1
    bug = Cluster(ValueError("not the cluster's"))
    with pytest.raises(ValueError):
        refresh(bug)


def test_the_async_slot_map_read_keeps_the_old_one_too() -> None:
    class AsyncNodes(Nodes):
        async def initialize(self) -> None:  # type: ignore[override]
            super().initialize()

    cluster = Cluster(RedisClusterException("All slots are not covered."))
    cluster.nodes_manager = AsyncNodes(cluster.nodes_manager.error)
    asyncio.run(arefresh(cluster))
    assert cluster.nodes_manager.reads == 1


def test_a_settle_that_fails_unforeseen_frees_its_slot_and_the_job_runs_again(
    server: Server, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    settle = worker_module.Worker._settle
    failed: List[int] = []

    def once(self: echomq.Worker, batch: Any) -> None:
        if not failed:
            failed.append(len(batch))
            raise RuntimeError("not a settle's own failure")
        settle(self, batch)

    monkeypatch.setattr(worker_module.Worker, "_settle", once)
    runs: List[str] = []
    q = echomq.Queue(server.client(), "unforeseen")
    first = q.enqueue(b"1")
    worker = echomq.Worker(
        server.client(), "unforeseen", lambda job: runs.append(job.id), concurrency=1, lease=1.0,
    )
    t, raised = start_catching(worker)
    # The lost outcome's lease runs out and the job runs again; the slot it held was freed, so
    # with a concurrency of one the next job runs too.
    assert until(lambda: runs.count(first) == 2), (runs, raised)
    second = q.enqueue(b"2")
    assert until(lambda: (q.job(second) or {}).get("state") == "done"), (runs, raised)
    assert until(lambda: (q.job(first) or {}).get("state") == "done"), (runs, raised)
    worker.stop()
    assert joined(t)
    assert raised == [] and failed == [1]
    assert "a settle of 1 outcomes failed; the worker goes on" in caplog.text
