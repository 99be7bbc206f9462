"""``make bench-clients``: one Python worker draining no-op jobs on one Valkey with the module,
with EchoMQ's package, with bullmq's Python worker and with rq's ``SimpleWorker``, in
interleaved rounds. Reports jobs/s (measured by the client) and the server's main-thread CPU per
job (``INFO cpu``: everything the server did for the job), as medians and as ratios of the
per-round figures, into the clients section of docs/bench.md. Figures, never assertions."""

from __future__ import annotations

import asyncio
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Callable, Dict, List, Tuple

import redis

ROOT = Path(__file__).resolve().parents[3]
sys.path.insert(0, str(ROOT / "clients/python/tests"))
from conftest import Server  # noqa: E402

import echomq  # noqa: E402

JOBS = int(os.environ.get("BENCH_CLIENT_JOBS", "20000"))
ROUNDS = int(os.environ.get("BENCH_CLIENT_ROUNDS", "3"))
CONCURRENCY = 64
#: The Node.js worker's concurrency (its row: 50, as the issue that added it measured).
NODE_CONCURRENCY = int(os.environ.get("BENCH_NODE_CONCURRENCY", "50"))


def main_thread_cpu(client: Any) -> float:
    info = client.info("cpu")
    return float(info["used_cpu_user_main_thread"]) + float(info["used_cpu_sys_main_thread"])


def fresh(client: Any) -> None:
    client.flushall()
    client.config_resetstat()


def measured(client: Any, drain: Callable[[Callable[[], None]], None]) -> Tuple[float, float]:
    """(jobs/s, server main-thread µs a job) of `drain`, from its start until it calls the
    callback it is given, once the last job is done (a worker's shutdown after is not timed)."""
    cpu0, t0 = main_thread_cpu(client), time.monotonic()
    end: List[float] = []

    def all_done() -> None:
        end.extend([time.monotonic() - t0, main_thread_cpu(client) - cpu0])

    drain(all_done)
    elapsed, cpu = end
    return JOBS / elapsed, cpu * 1e6 / JOBS


def run_echomq(server: Server) -> Tuple[float, float]:
    client = server.client()
    fresh(client)
    echomq.Queue(client, "bench").enqueue_many(b"{}" for _ in range(JOBS))

    def drain(all_done: Callable[[], None]) -> None:
        worker = echomq.Worker(
            server.client(), "bench", lambda job: None, concurrency=CONCURRENCY, batch=100
        )
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        while worker.counts["acked"] < JOBS:
            time.sleep(0.001)
        all_done()
        worker.stop()
        t.join(10)

    return measured(client, drain)


def run_bullmq(server: Server) -> Tuple[float, float]:
    import bullmq

    client = server.client()
    fresh(client)
    url = f"redis://127.0.0.1:{server.port}"

    async def add() -> None:
        q = bullmq.Queue("bench", {"connection": url})
        for start in range(0, JOBS, 1000):
            await q.addBulk([{"name": "noop", "data": {}} for _ in range(start, min(JOBS, start + 1000))])
        await q.close()

    asyncio.run(add())

    async def drain_async(all_done: Callable[[], None]) -> None:
        done = asyncio.Event()
        count = 0

        async def process(job: Any, token: Any) -> None:
            return None

        worker = bullmq.Worker("bench", process, {"connection": url, "concurrency": CONCURRENCY})

        def completed(*_: Any) -> None:
            nonlocal count
            count += 1
            if count >= JOBS:
                done.set()

        worker.on("completed", completed)
        await done.wait()
        all_done()
        await worker.close()

    return measured(client, lambda all_done: asyncio.run(drain_async(all_done)))


def run_rq(server: Server) -> Tuple[float, float]:
    from rq import Queue as RqQueue, SimpleWorker

    client = redis.Redis(host="127.0.0.1", port=server.port)
    fresh(client)
    q = RqQueue("bench", connection=client)
    for start in range(0, JOBS, 1000):
        q.enqueue_many([RqQueue.prepare_data(abs, (1,)) for _ in range(start, min(JOBS, start + 1000))])

    def drain(all_done: Callable[[], None]) -> None:
        # Burst mode: it returns once the queue is empty.
        SimpleWorker([q], connection=client).work(burst=True, logging_level="WARNING")
        all_done()

    return measured(client, drain)


def run_rust(server: Server) -> Tuple[float, float]:
    """The Rust crate's worker (`clients/rust/examples/drain.rs`, built by the make target):
    its own jobs/s, and the server's CPU over its whole run."""
    client = server.client()
    fresh(client)
    echomq.Queue(client, "bench").enqueue_many(b"{}" for _ in range(JOBS))
    drain = ROOT / "target/release/examples/drain"
    cpu0 = main_thread_cpu(client)
    out = subprocess.run(
        [str(drain), str(server.port), "bench", str(JOBS), str(CONCURRENCY)],
        check=True, capture_output=True, text=True, timeout=300,
    )
    cpu = main_thread_cpu(client) - cpu0
    return float(out.stdout.strip()), cpu * 1e6 / JOBS


def run_node(server: Server) -> Tuple[float, float]:
    """The Node.js package's worker (`clients/node/bench/drain.js`, node-redis from
    NODE_PATH): its own jobs/s, and the server's CPU over its whole run."""
    client = server.client()
    fresh(client)
    echomq.Queue(client, "bench").enqueue_many(b"{}" for _ in range(JOBS))
    env = {**os.environ, "NODE_PATH": os.environ.get("NODE_PATH", "/usr/share/nodejs")}
    cpu0 = main_thread_cpu(client)
    out = subprocess.run(
        ["node", str(ROOT / "clients/node/bench/drain.js"), str(server.port), "bench", str(JOBS), str(NODE_CONCURRENCY)],
        check=True, capture_output=True, text=True, timeout=300, env=env,
    )
    cpu = main_thread_cpu(client) - cpu0
    return float(out.stdout.strip()), cpu * 1e6 / JOBS


def enqueue_runs(server: Server) -> Dict[str, Tuple[float, float]]:
    """Each library enqueueing JOBS jobs one call at a time, and in batches of 1,000."""
    import bullmq
    from rq import Queue as RqQueue

    client = server.client()
    url = f"redis://127.0.0.1:{server.port}"
    out: Dict[str, Tuple[float, float]] = {}

    def timed(name: str, work: Callable[[], None]) -> None:
        fresh(client)
        out[name] = measured(client, lambda done: (work(), done())[1])

    q = echomq.Queue(client, "bench")
    timed("echomq one", lambda: [q.enqueue(b"{}") for _ in range(JOBS)] and None)
    timed("echomq bulk", lambda: q.enqueue_many((b"{}" for _ in range(JOBS)), chunk=1000) and None)

    async def bullmq_one() -> None:
        bq = bullmq.Queue("bench", {"connection": url})
        for _ in range(JOBS):
            await bq.add("noop", {})
        await bq.close()

    async def bullmq_bulk() -> None:
        bq = bullmq.Queue("bench", {"connection": url})
        for start in range(0, JOBS, 1000):
            await bq.addBulk([{"name": "noop", "data": {}} for _ in range(start, min(JOBS, start + 1000))])
        await bq.close()

    timed("bullmq one", lambda: asyncio.run(bullmq_one()))
    timed("bullmq bulk", lambda: asyncio.run(bullmq_bulk()))
    rq_client = redis.Redis(host="127.0.0.1", port=server.port)
    rq = RqQueue("bench", connection=rq_client)
    timed("rq one", lambda: [rq.enqueue(abs, 1) for _ in range(JOBS)] and None)

    def rq_bulk() -> None:
        for start in range(0, JOBS, 1000):
            rq.enqueue_many([RqQueue.prepare_data(abs, (1,)) for _ in range(start, min(JOBS, start + 1000))])

    timed("rq bulk", rq_bulk)
    return out


def median_spread(values: List[float]) -> str:
    return f"{statistics.median(values):.2f} ({min(values):.2f}–{max(values):.2f})"


def commit() -> str:
    """The commit the figures come from, with ``+changes`` when the tree differs from it."""
    def git(*args: str) -> str:
        out = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return out.stdout.strip() if out.returncode == 0 else ""
    head = git("rev-parse", "--short", "HEAD") or "unknown"
    return head + ("+changes" if git("status", "--porcelain", "--untracked-files=no") else "")


def main() -> None:
    server = Server()
    version = server.client().info("server")["valkey_version"] if "valkey_version" in server.client().info("server") else server.client().info("server")["redis_version"]
    results: Dict[str, List[Tuple[float, float]]] = {}
    runners = {"echomq": run_echomq, "rust": run_rust, "node": run_node, "bullmq": run_bullmq, "rq": run_rq}
    try:
        for r in range(ROUNDS):
            for name, run in runners.items():
                jobs_s, cpu = run(server)
                results.setdefault(name, []).append((jobs_s, cpu))
                print(f"round {r + 1} {name:11} {jobs_s:9.0f} jobs/s  {cpu:7.2f} µs main-thread CPU a job", flush=True)
            for name, (jobs_s, cpu) in enqueue_runs(server).items():
                results.setdefault(name, []).append((jobs_s, cpu))
                print(f"round {r + 1} {name:11} {jobs_s:9.0f} jobs/s  {cpu:7.2f} µs main-thread CPU a job", flush=True)
    finally:
        server.stop()
    def row(label: str, name: str, base: str) -> str:
        jobs = [j for j, _ in results[name]]
        cpu = [c for _, c in results[name]]
        vs_j = statistics.median(e[0] / b[0] for e, b in zip(results[base], results[name]))
        vs_c = statistics.median(e[1] / b[1] for e, b in zip(results[base], results[name]))
        mid = statistics.median(jobs)
        return f"| {label} | {mid:.0f} ({min(jobs):.0f}–{max(jobs):.0f}) | {median_spread(cpu)} | {vs_j:.1f}× | {vs_c:.2f}× |"

    rows = [
        row("`echomq.Worker` (64 threads, claims of up to 100, pipelined acks)", "echomq", "echomq"),
        row("`echomq_client::Worker` (Rust, 64 tasks)", "rust", "echomq"),
        row(f"`echomq` `Worker` (Node.js, concurrency {NODE_CONCURRENCY})", "node", "echomq"),
        row("bullmq `Worker` (Python, concurrency 64)", "bullmq", "echomq"),
        row("rq `SimpleWorker` (burst)", "rq", "echomq"),
    ]
    enqueue_rows = [
        row("`Queue.enqueue`, one call a job", "echomq one", "echomq one"),
        row("bullmq `Queue.add`, one call a job", "bullmq one", "echomq one"),
        row("rq `Queue.enqueue`, one call a job", "rq one", "echomq one"),
        row("`Queue.enqueue_many`, 1,000 a call (`EMQ.MENQUEUE`)", "echomq bulk", "echomq bulk"),
        row("bullmq `Queue.addBulk`, 1,000 a call", "bullmq bulk", "echomq bulk"),
        row("rq `Queue.enqueue_many`, 1,000 a call", "rq bulk", "echomq bulk"),
    ]
    section = "\n".join([
        "<!-- clients bench -->",
        "### Client libraries: one worker against bullmq and rq, and enqueueing",
        "",
        f"Produced by `make bench-clients` (`BENCH_CLIENT_ROUNDS={ROUNDS} BENCH_CLIENT_JOBS={JOBS} python clients/python/bench/clients.py`) at commit {commit()} on {platform.processor() or platform.machine()} ({os.cpu_count()} cores), valkey-server {version} with the module: each round drains {JOBS} no-op jobs (enqueued before the clock starts, in batches) with one worker of each library in this process (the Rust crate's in a process of its own, `clients/rust/examples/drain.rs`, timed by itself to its last handler done, its server CPU over its whole run), on an emptied server, timed from the worker's start to its last job done (its shutdown after is not); jobs/s is the client's, main-thread CPU the server's `INFO cpu` over the same span, per job. Medians (min–max) over {ROUNDS} rounds; the last two columns are EchoMQ's figure over the row's, the median of the per-round ratios (EchoMQ's own row is 1).",
        "",
        "| worker | jobs/s | server main-thread CPU µs/job | EchoMQ (Python) jobs/s ÷ this | EchoMQ (Python) CPU ÷ this |",
        "|---|---|---|---|---|",
        *rows,
        "",
        f"Enqueueing: {JOBS} jobs from this process, one call a job (each waiting for its reply) and in batches of 1,000, on an emptied server; the ratios are the package's figure over the row's, for the same way of enqueueing.",
        "",
        "| producer | jobs/s | server main-thread CPU µs/job | EchoMQ jobs/s ÷ this | EchoMQ CPU ÷ this |",
        "|---|---|---|---|---|",
        *enqueue_rows,
        "<!-- /clients bench -->",
    ])
    print(section)
    path = ROOT / "docs/bench.md"
    text = path.read_text()
    start, end = text.find("<!-- clients bench -->"), text.find("<!-- /clients bench -->")
    if start >= 0 and end > start:
        text = text[:start] + section + text[end + len("<!-- /clients bench -->"):]
    else:
        marker = "## How these figures were reached"
        text = text.replace(marker, section + "\n\n" + marker, 1)
    path.write_text(text)


if __name__ == "__main__":
    main()
