"""``echomq``, the command line: the queue's operations, a worker run from a handler's module
path that SIGTERM stops mid-batch without losing or repeating a job, and the connection options
taken before the subcommand or after it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, List

import pytest

import echomq
from conftest import Server, joined
from echomq.cli import DEFAULT_URL, parser

TESTS = Path(__file__).resolve().parent
ECHOMQ = str(Path(sys.executable).with_name("echomq"))


def cli(server: Server, *args: str) -> Any:
    out = subprocess.run(
        [ECHOMQ, "--url", f"redis://127.0.0.1:{server.port}", "--json", *args],
        check=True, capture_output=True, text=True, timeout=30,
    )
    return json.loads(out.stdout)


def test_the_queue_operations_from_the_shell(server: Server) -> None:
    job_id = cli(server, "enqueue", "cli", "hello", "--priority", "3")
    assert job_id.startswith("JOB")
    assert cli(server, "stats", "cli")["pending"] == 1
    timed = cli(server, "enqueue", "cli-timed", "x", "--timeout", "90")
    assert (echomq.Queue(server.client(), "cli-timed").job(timed) or {})["timeout"] == "90000"
    headed = cli(server, "enqueue", "cli-headed", "x", "--header", "tenant=a=b", "--header", "k=v")
    row = echomq.Queue(server.client(), "cli-headed").job(headed) or {}
    assert row["headers"] == {"tenant": "a=b", "k": "v"}
    # A header without `=` is a usage error: nothing is enqueued.
    bare = subprocess.run(
        [ECHOMQ, "--url", f"redis://127.0.0.1:{server.port}", "enqueue", "cli-bare", "x", "--header", "k"],
        capture_output=True, text=True, timeout=30,
    )
    assert (bare.returncode, "<key>=<value>" in bare.stderr) == (2, True), bare.stderr
    assert cli(server, "stats", "cli-bare")["pending"] == 0
    server.cmd("EMQ.CLAIM", "cli")
    server.cmd("EMQ.FAIL", "cli", job_id, 1, "ERROR", "broken", "RETRY-IN", 0)
    # One attempt a job by default is not enough to die: bury it by hand through the server.
    q = echomq.Queue(server.client(), "cli")
    for _ in range(100):
        if (q.job(job_id) or {}).get("state") == "dead":
            break
        server.cmd("EMQ.CLAIM", "cli")
        attempts = int((q.job(job_id) or {}).get("attempts") or 0)
        server.cmd("EMQ.FAIL", "cli", job_id, attempts, "ERROR", "broken", "RETRY-IN", 0)
    assert (q.job(job_id) or {}).get("state") == "dead", "dead within 100 failed attempts"
    dead = cli(server, "dead", "cli")
    assert [(d["id"], d["error"]) for d in dead] == [(job_id, "broken")]
    assert cli(server, "requeue", "cli", "--dead") == 1
    assert cli(server, "stats", "cli")["pending"] == 1


def test_sigterm_mid_batch_loses_and_repeats_nothing(server: Server) -> None:
    q = echomq.Queue(server.client(), "term")
    ids = q.enqueue_many(b"job %d" % n for n in range(300))
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    worker = subprocess.Popen(
        [ECHOMQ, "--url", f"redis://127.0.0.1:{server.port}", "--json", "worker", "handlers:slow",
         "--queue", "term", "--concurrency", "8"],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while (q.stats()["pending"] or 0) > 200:
        assert time.monotonic() < deadline and worker.poll() is None
        time.sleep(0.01)
    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    counts = json.loads(out)
    stats = q.stats()
    assert stats["active"] == 0, "the running jobs finished and were acked"
    states = [(q.job(i) or {}).get("state") for i in ids]
    done = states.count("done")
    assert done == counts["acked"] and 0 < done < 300
    assert done + states.count("pending") == 300, "every job done or still queued"
    # A second worker takes the rest; no job runs twice.
    w2 = echomq.Worker(server.client(), "term", lambda job: None, concurrency=8)
    t = threading.Thread(target=w2.run, daemon=True)
    t.start()
    while w2.counts["acked"] < 300 - done:
        assert time.monotonic() < deadline + 20
        time.sleep(0.02)
    w2.stop()
    assert joined(t), "run() returned after stop()"
    attempts: List[Any] = [(q.job(i) or {}).get("attempts") for i in ids]
    assert attempts == [1] * 300, "each job claimed once"


@pytest.mark.parametrize(
    "command", [["worker", "handlers:slow", "--queue", "q"], ["enqueue", "q", "x"], ["stats", "q"],
                ["dead", "q"], ["requeue", "q", "--dead"]],
)
def test_the_connection_options_go_before_or_after_the_subcommand(command: List[str]) -> None:
    options = ["--url", "redis://before:1", "--cluster", "redis://node:2", "--json"]
    before = parser().parse_args([*options, *command])
    after = parser().parse_args([*command, *options])
    for args in (before, after):
        assert (args.url, args.cluster, args.json) == ("redis://before:1", "redis://node:2", True)
    neither = parser().parse_args(command)
    assert (neither.url, neither.cluster, neither.json) == (DEFAULT_URL, None, False)
    # Given on both sides, the one after the subcommand wins; one given only before stays.
    both = parser().parse_args(["--url", "redis://before:1", "--json", *command, "--url", "redis://after:3"])
    assert (both.url, both.json) == ("redis://after:3", True)


def test_a_worker_takes_url_after_the_subcommand_as_rq_worker_does(server: Server) -> None:
    q = echomq.Queue(server.client(), "after")
    q.enqueue_many(b"job %d" % n for n in range(20))
    url = f"redis://127.0.0.1:{server.port}"
    env = {**os.environ, "PYTHONPATH": str(TESTS)}
    worker = subprocess.Popen(
        [ECHOMQ, "worker", "handlers:slow", "--queue", "after", "--url", url, "--json"],
        env=env, stdout=subprocess.PIPE, text=True,
    )
    deadline = time.monotonic() + 20
    while (q.stats()["pending"] or 0) + (q.stats()["active"] or 0) > 0:
        assert time.monotonic() < deadline and worker.poll() is None, "the worker reached the server"
        time.sleep(0.02)
    worker.send_signal(signal.SIGTERM)
    out, _ = worker.communicate(timeout=30)
    assert worker.returncode == 0
    assert json.loads(out)["acked"] == 20
    stats = subprocess.run(
        [ECHOMQ, "stats", "after", "--url", url, "--json"],
        check=True, capture_output=True, text=True, timeout=30,
    )
    assert json.loads(stats.stdout)["pending"] == 0
