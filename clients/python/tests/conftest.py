"""Real servers for the client's tests: a ``valkey-server`` with the module, on a free port, in
a directory of its own, stopped after the test."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Iterator, List, Optional

import pytest
import redis

ROOT = Path(__file__).resolve().parents[3]


def until(f: Callable[[], Any], timeout: float = 10.0) -> bool:
    """Waits (up to `timeout` seconds) until `f()` is true; whether it became so."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if f():
            return True
        time.sleep(0.02)
    return False


async def run_until_acked(worker: Any, acked: int) -> None:
    """Runs an ``AsyncWorker`` until it has acknowledged `acked` jobs (30 s at most), then
    stops it."""
    task = asyncio.create_task(worker.run())
    for _ in range(600):
        if worker.counts["acked"] >= acked or task.done():
            break
        await asyncio.sleep(0.05)
    worker.stop()
    await asyncio.wait_for(task, 10)


def joined(thread: threading.Thread, timeout: float = 30.0) -> bool:
    """Joins `thread` (up to `timeout` seconds: a bound, not a measure); whether it ended."""
    thread.join(timeout)
    return not thread.is_alive()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


class Server:
    def __init__(self, extra: Optional[List[str]] = None) -> None:
        # Not the port `extra` gives the cluster bus, which `free_port` may hand out again.
        args = extra or []
        bus = {args[i + 1] for i, a in enumerate(args[:-1]) if a == "--cluster-port"}
        self.port = free_port()
        while str(self.port) in bus:
            self.port = free_port()
        self.dir = tempfile.TemporaryDirectory()
        module = os.environ.get("ECHOMQ_MODULE", str(ROOT / "target/release/libechomq.so"))
        binary = os.environ.get("VALKEY_SERVER", "valkey-server")
        self.process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self.dir.name, "--loadmodule", module, *(extra or [])],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 10
        while True:
            try:
                if self.client().ping():
                    return
            except redis.ConnectionError:
                if time.monotonic() > deadline or self.process.poll() is not None:
                    raise RuntimeError(f"valkey-server did not start on {self.port}") from None
                time.sleep(0.05)

    def client(self) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port)

    def cmd(self, *args: Any) -> Any:
        """One command on a connection of its own (redis-py leaves `execute_command` untyped)."""
        client: Any = self.client()
        return client.execute_command(*args)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.dir.cleanup()


@pytest.fixture
def server() -> Iterator[Server]:
    s = Server()
    try:
        yield s
    finally:
        s.stop()


class Cluster:
    """Three primaries with the module (and a replica each, with ``replicas``), their slots
    spread by ``valkey-cli --cluster create``."""

    def __init__(self, replicas: int = 0, node_timeout_ms: int = 5000) -> None:
        # The bus on a free port of its own (the default, the port + 10000, may not be free).
        self.nodes = [
            Server(["--cluster-enabled", "yes", "--cluster-node-timeout", str(node_timeout_ms),
                    "--cluster-port", str(free_port())])
            for _ in range(3 * (1 + replicas))
        ]
        cli = os.environ.get("VALKEY_CLI", "valkey-cli")
        subprocess.run(
            [cli, "--cluster", "create", *(f"127.0.0.1:{n.port}" for n in self.nodes),
             "--cluster-replicas", str(replicas), "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        deadline = time.monotonic() + 30
        while not all(b"cluster_state:ok" in n.cmd("CLUSTER", "INFO") for n in self.live()):
            if time.monotonic() > deadline:
                raise RuntimeError("the cluster never became ok")
            time.sleep(0.1)

    def live(self) -> List[Server]:
        return [n for n in self.nodes if n.process.poll() is None]

    def stop(self) -> None:
        for n in self.nodes:
            n.stop()


@pytest.fixture
def cluster() -> Iterator[Cluster]:
    c = Cluster()
    try:
        yield c
    finally:
        c.stop()
