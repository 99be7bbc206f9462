"""Flows against a real server: a parent waits for its children and reads their outcomes; a
child's death kills its parent (``fail``) or just counts (``ignore``); ``batch``'s callback
runs once, ``chain`` runs in order, a retried ``flow`` counts each child once; the typed
``EMQPARENT``; the asyncio queue and worker alike; a cancelled parent takes its unstarted tree
with it, across slots on a cluster; a node's group, checked before anything is sent, and a
grouped parent in a partitioned queue in its group's partition, where its children find it.
And what the client plans before it sends anything: the
enqueues' order, the trees of ``chain`` and ``batch``, the slots, the arguments."""

from __future__ import annotations

import asyncio
import threading
import time
from typing import Any, Callable, Dict, Iterator, List, NamedTuple, Tuple

import pytest
import redis.asyncio
import redis.asyncio.cluster
import redis.cluster

import echomq
from echomq import commands as cmd
from echomq.aio import AsyncQueue, AsyncWorker
from echomq.flows import batched, chained, parents_of, steps
from echomq.partitions import name, route
from echomq.slots import slot
from conftest import Cluster, Server, joined, until


class Running:
    """Workers on threads of their own, stopped and joined at the end of the test."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.workers: List[Tuple[echomq.Worker, threading.Thread]] = []

    def start(self, queue: str, handler: Callable[[echomq.Job], Any], **options: Any) -> echomq.Worker:
        worker = echomq.Worker(self.client, queue, handler, **options)
        t = threading.Thread(target=worker.run, daemon=True)
        t.start()
        self.workers.append((worker, t))
        return worker

    def stop(self) -> None:
        for worker, _ in self.workers:
            worker.stop()
        for _, t in self.workers:
            assert joined(t), "run() returned after stop()"


@pytest.fixture
def running(server: Server) -> Iterator[Running]:
    r = Running(server.client())
    try:
        yield r
    finally:
        r.stop()


def state(q: echomq.Queue, job_id: str) -> Any:
    return (q.job(job_id) or {}).get("state")


def upper(job: echomq.Job) -> bytes:
    return bytes(job.payload).upper()


# ---- on a server ----


def test_a_parent_waits_for_its_children_then_runs_and_reads_their_results(
    server: Server, running: Running
) -> None:
    client = server.client()
    reports, parts = echomq.Queue(client, "reports"), echomq.Queue(client, "parts")
    parent = reports.enqueue(b"sum", children=2)
    a = parts.enqueue(b"a", parents=[("reports", parent)])
    b = parts.enqueue(b"b", parents=[echomq.Parent("reports", parent)])
    assert state(reports, parent) == "waiting"
    assert reports.stats()["waiting"] == 1
    seen: List[Tuple[str, echomq.Children]] = []
    summing = running.start("reports", lambda job: seen.append((job.id, job.children())))
    # A job enqueued after the parent runs while the parent still waits: it is not claimable.
    other = reports.enqueue(b"other")
    assert until(lambda: summing.counts["acked"] == 1)
    assert [job_id for job_id, _ in seen] == [other]
    assert state(reports, parent) == "waiting"
    running.start("parts", upper)
    assert until(lambda: summing.counts["acked"] == 2, timeout=30), summing.counts
    assert [job_id for job_id, _ in seen] == [other, parent]
    assert seen[1][1] == {
        ("parts", a): echomq.Child("acked", b"A"),
        ("parts", b): echomq.Child("acked", b"B"),
    }
    assert seen[1][1].count("acked") == 2
    assert reports.stats()["waiting"] == 0
    row = reports.job(parent) or {}
    assert (row["state"], row["children"], row["finished"]) == ("done", "2", "2"), row


class GoodAndBad(NamedTuple):
    reports: echomq.Queue
    parts: echomq.Queue
    parent: str
    good: str
    bad: str


def good_and_bad(server: Server, on_fail: str) -> GoodAndBad:
    """A parent in ``reports`` waiting for a good part and a bad one (with `on_fail`), on a
    server whose jobs die at their first failure."""
    client = server.client()
    client.config_set("emq.max-attempts", 1)
    reports, parts = echomq.Queue(client, "reports"), echomq.Queue(client, "parts")
    parent = reports.enqueue(b"sum", children=2)
    good = parts.enqueue(b"good", parents=[("reports", parent)])
    bad = parts.enqueue(b"bad", parents=[("reports", parent, on_fail)])
    return GoodAndBad(reports, parts, parent, good, bad)


def out_of_stock(job: echomq.Job) -> bytes:
    """The parts' handler: the bad one fails (and dies), any other is ``ok``."""
    if job.payload == b"bad":
        raise ValueError("no stock for sku 42")
    return b"ok"


def test_a_dead_child_kills_its_parent_with_the_childs_name_in_the_error(
    server: Server, running: Running
) -> None:
    reports, parts, parent, good, bad = good_and_bad(server, "fail")
    ran: List[str] = []
    running.start("reports", lambda job: ran.append(job.id))
    running.start("parts", out_of_stock)
    assert until(lambda: state(reports, parent) == "dead", timeout=30), reports.job(parent)
    assert until(lambda: state(parts, good) == "done")
    error = (reports.job(parent) or {})["error"]
    assert error.startswith(f"child parts {bad} dead: "), error
    assert "no stock for sku 42" in error
    assert ran == []
    assert reports.stats()["waiting"] == 0


def test_an_ignored_childs_death_counts_and_the_parent_runs(
    server: Server, running: Running
) -> None:
    reports, _, parent, good, bad = good_and_bad(server, "ignore")
    seen: List[echomq.Children] = []
    summing = running.start("reports", lambda job: seen.append(job.children()))
    running.start("parts", out_of_stock)
    assert until(lambda: summing.counts["acked"] == 1, timeout=30), reports.job(parent)
    (children,) = seen
    assert children[("parts", good)] == echomq.Child("acked", b"ok")
    assert children[("parts", bad)].status == "dead"
    assert b"no stock for sku 42" in children[("parts", bad)].data
    assert (children.count("acked"), children.count("dead")) == (1, 1)


def test_a_batch_callback_runs_once_with_the_counts(server: Server, running: Running) -> None:
    client = server.client()
    client.config_set("emq.max-attempts", 1)
    q = echomq.Queue(client, "imports")
    jobs = [{"queue": "rows", "payload": b"row %d" % n} for n in range(10)]
    tree = q.batch(jobs, on_complete=("imports", b"report"))
    assert tree.id is not None and len(tree.children) == 10
    assert all(c.on_fail == "ignore" and c.id for c in tree.children)

    def row(job: echomq.Job) -> None:
        if int(bytes(job.payload).split()[1]) % 3 == 0:  # rows 0, 3, 6 and 9
            raise ValueError("bad row")

    reports: List[Tuple[str, int, int]] = []
    callback = running.start(
        "imports",
        lambda job: reports.append((job.id, job.children().count("acked"), job.children().count("dead"))),
    )
    rows = running.start("rows", row, concurrency=4)
    assert until(lambda: rows.counts["acked"] + rows.counts["failed"] == 10, timeout=30), rows.counts
    assert until(lambda: callback.counts["acked"] == 1, timeout=30), q.job(tree.id)
    assert reports == [(tree.id, 6, 4)]
    assert state(q, tree.id) == "done"


def test_a_chain_runs_in_order(server: Server, running: Running) -> None:
    client = server.client()
    q = echomq.Queue(client, "steps")
    tree = q.chain([
        {"queue": "steps", "payload": b"a"},
        {"queue": "other", "payload": b"b"},
        {"queue": "steps", "payload": b"c"},
        {"queue": "steps", "payload": b"d"},
    ])
    assert tree.payload == b"d" and tree.children[0].payload == b"c"
    order: List[bytes] = []
    lock = threading.Lock()

    def record(job: echomq.Job) -> None:
        with lock:
            order.append(bytes(job.payload))

    running.start("steps", record, concurrency=4)
    running.start("other", record, concurrency=4)
    assert until(lambda: len(order) == 4, timeout=30), order
    assert order == [b"a", b"b", b"c", b"d"]
    assert state(q, tree.id or "") == "done"


def test_a_retried_flow_with_the_same_ids_counts_each_child_once(
    server: Server, running: Running
) -> None:
    client = server.client()
    q = echomq.Queue(client, "reports")
    # Two children on the parent's queue (in reach) and one on another slot (adopted first).
    assert slot("parts") != slot("reports")
    tree = echomq.minted({
        "queue": "reports",
        "payload": b"sum",
        "children": [
            {"queue": "reports", "payload": b"x"},
            {"queue": "reports", "payload": b"y"},
            {"queue": "parts", "payload": b"z"},
        ],
    })
    assert q.flow(tree) == tree
    assert q.flow(tree) == tree  # the retry: each id again
    row = q.job(tree.id or "") or {}
    assert (row["state"], row["children"], row["adopted"]) == ("waiting", "3", "3"), row
    seen: List[echomq.Children] = []
    ran = running.start("reports", lambda job: seen.append(job.children()) if job.id == tree.id else None)
    running.start("parts", upper)
    assert until(lambda: ran.counts["acked"] == 3, timeout=30), ran.counts
    assert len(seen) == 1 and len(seen[0]) == 3, seen
    row = q.job(tree.id or "") or {}
    assert (row["state"], row["finished"]) == ("done", "3"), row
    # A retry once the parent ran, which now refuses children: each job is there already.
    assert q.flow(tree) == tree
    assert (q.stats()["pending"], echomq.Queue(client, "parts").stats()["pending"]) == (0, 0)
    assert ran.counts["acked"] == 3


def test_a_parent_that_refuses_a_child_is_a_typed_error(server: Server) -> None:
    client = server.client()
    q = echomq.Queue(client, "reports")
    missing = echomq.mint()
    # In reach (the same queue) the enqueue refuses; out of the slot, the adoption does.
    for queue in ("reports", "parts"):
        with pytest.raises(echomq.EmqParentError) as refused:
            echomq.Queue(client, queue).enqueue(b"orphan", parents=[("reports", missing)])
        assert str(refused.value).startswith("EMQPARENT"), refused.value
    one = q.enqueue(b"one child", children=1)
    q.enqueue(b"first", parents=[("reports", one)])
    for queue in ("reports", "parts"):
        with pytest.raises(echomq.EmqParentError):
            echomq.Queue(client, queue).enqueue(b"second", parents=[("reports", one)])
    plain = q.enqueue(b"not a parent")
    with pytest.raises(echomq.EmqParentError):
        q.enqueue(b"child", parents=[("reports", plain)])
    assert q.stats()["waiting"] == 1
    assert [j["id"] for j in q.jobs("waiting")[1]] == [one]


def test_a_node_s_group_is_checked_before_anything_is_sent_and_taken_as_the_server_takes_it(
    server: Server,
) -> None:
    client = server.client()
    reports, parts = echomq.Queue(client, "reports"), echomq.Queue(client, "parts")

    def spec(group: Any) -> Dict[str, Any]:
        # The bad group on the last node: the root and the first child would go first.
        return {"queue": "reports", "payload": b"sum", "children": [
            {"queue": "parts", "payload": b"a"},
            {"queue": "parts", "payload": b"b", "group": group},
        ]}

    async def aflow(tree: Dict[str, Any]) -> echomq.Node:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            return await AsyncQueue(aclient, "reports").flow(tree)
        finally:
            await aclient.aclose()

    for bad in ["", "a{b", "b}", "a b", "tab\there", "x" * 129, "caf\u00e9", "\udc80", 7, b"bytes"]:
        with pytest.raises(ValueError, match="group"):
            reports.flow(spec(bad))
        with pytest.raises(ValueError, match="group"):
            asyncio.run(aflow(spec(bad)))
        with pytest.raises(ValueError, match="group"):
            reports.flow({"queue": "reports", "payload": b"root", "group": bad})
    sent = [k for k in client.info("commandstats") if "enqueue" in k or "adopt" in k]
    assert sent == [], "nothing sent"
    for q in (reports, parts):
        assert q.stats()["pending"] == q.stats()["waiting"] == 0, q.name

    # The longest group, and every printable byte but the braces, the server takes too.
    every = "".join(chr(b) for b in range(0x21, 0x7F) if chr(b) not in "{}")
    tree = reports.flow(spec("x" * 128))
    atree = asyncio.run(aflow({**spec(every), "group": every}))
    assert (parts.job(tree.children[1].id or "") or {}).get("group") == "x" * 128
    assert (reports.job(atree.id or "") or {}).get("group") == every
    assert (parts.job(atree.children[1].id or "") or {}).get("group") == every
    assert "group" not in (parts.job(tree.children[0].id or "") or {}), "a node without one"
    assert reports.stats()["waiting"] == 2


def test_a_node_s_priority_delay_and_due_time_are_its_job_s(server: Server) -> None:
    q = echomq.Queue(server.client(), "reports")
    at = time.time() + 7200
    tree = q.flow(echomq.Node("reports", b"album", priority=-3, children=[
        echomq.Node("images", b"now", priority=7),
        echomq.Node("images", b"soon", delay=600),
        echomq.Node("images", b"later", at=at),
    ]))
    images = echomq.Queue(server.client(), "images")
    now, soon, later = (images.job(c.id or "") for c in tree.children)
    assert now is not None and (now["set"], now["priority"]) == ("pending", 7)
    assert soon is not None and soon["set"] == "scheduled"
    assert later is not None and (later["set"], later["due"]) == ("scheduled", int(at * 1000))
    parent = q.job(tree.id or "")
    assert parent is not None and (parent["set"], parent["priority"]) == ("waiting", -3)
    with pytest.raises(ValueError, match="not both"):
        q.flow(echomq.Node("reports", b"bad", children=[echomq.Node("images", b"x", delay=1, at=at)]))
    wrong: List[Dict[str, Any]] = [
        {"priority": 2_000_000}, {"delay": -1}, {"at": -5.0},
        {"timeout": 0.0003}, {"timeout": -5}, {"timeout": 366 * 86_400},
    ]
    for bad in wrong:
        with pytest.raises(ValueError):
            q.flow(echomq.Node("reports", b"bad", children=[echomq.Node("images", b"x", **bad)]))
    # A payload the serializer refuses, and one job named twice (its parent would wait for its
    # duplicate), found before the parent goes too.
    with pytest.raises(TypeError):
        q.flow(echomq.Node("reports", b"bad", children=[echomq.Node("images", object())]))
    twice = echomq.Node("images", b"x", id=echomq.ids.mint())
    with pytest.raises(ValueError, match="twice"):
        q.flow(echomq.Node("reports", b"bad", children=[twice, twice]))
    assert q.stats()["waiting"] == 1, "a refused flow sends nothing"

    async def awaited() -> echomq.Node:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            node = echomq.Node("reports", b"a", children=[echomq.Node("images", b"y", delay=600)])
            return await AsyncQueue(client, "reports").flow(node)
        finally:
            await client.aclose()

    waited = images.job(asyncio.run(awaited()).children[0].id or "")
    assert waited is not None and waited["set"] == "scheduled", "the asyncio queue's flow alike"


def test_the_asyncio_queue_and_worker_run_a_flow(server: Server) -> None:
    async def main() -> Tuple[Dict[str, Any], List[echomq.Children], echomq.Node]:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        q = AsyncQueue(client, "reports")
        tree = await q.flow({
            "queue": "reports",
            "payload": b"sum",
            "children": [{"queue": "parts", "payload": b"a"}, {"queue": "parts", "payload": b"b"}],
        })
        seen: List[echomq.Children] = []

        async def summing(job: echomq.Job) -> None:
            if job.id == tree.id:
                seen.append(await job.achildren())

        async def part(job: echomq.Job) -> bytes:
            return bytes(job.payload).upper()

        workers = [AsyncWorker(client, "reports", summing), AsyncWorker(client, "parts", part)]
        tasks = [asyncio.create_task(w.run()) for w in workers]
        for _ in range(1500):
            if seen:
                break
            await asyncio.sleep(0.02)
        for w in workers:
            w.stop()
        await asyncio.wait_for(asyncio.gather(*tasks), 30)
        row = await q.job(tree.id or "")
        await client.aclose()
        return row or {}, seen, tree

    row, seen, tree = asyncio.run(main())
    a, b = tree.children
    assert seen == [{("parts", a.id): echomq.Child("acked", b"A"), ("parts", b.id): echomq.Child("acked", b"B")}]
    assert row["state"] == "done"


def three_below(q: echomq.Queue, kids: str, crops: str) -> echomq.Node:
    """A parent on `q` with two children on `kids`, the second the parent of one on `crops`."""
    return q.flow({"queue": q.name, "payload": b"publish", "children": [
        {"queue": kids, "payload": b"t1"},
        {"queue": kids, "payload": b"t2", "children": [{"queue": crops, "payload": b"c1"}]},
    ]})


def test_cancelling_a_parent_cancels_its_unstarted_tree_and_counts_it(server: Server) -> None:
    q = echomq.Queue(server.client(), "albums")
    tree = three_below(q, "thumbs", "crops")
    t1, t2 = tree.children
    (c1,) = t2.children
    # The whole tree was in the server's reach: each job gone, and counted.
    assert q.cancel_flow(tree.id or "") == 4
    for queue, job_id in (("albums", tree.id), ("thumbs", t1.id), ("thumbs", t2.id), ("crops", c1.id)):
        assert echomq.Queue(server.client(), queue).job(job_id or "") is None, (queue, job_id)
    assert q.cancel_flow(tree.id or "") == 0
    lone = q.enqueue(b"lone")
    assert q.cancel(lone) and not q.cancel(lone)

    async def main() -> int:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        aq = AsyncQueue(client, "albums")
        again = await aq.flow({"queue": "albums", "payload": b"p", "children": [{"queue": "thumbs", "payload": b"t"}]})
        n = await aq.cancel_flow(again.id or "")
        await client.aclose()
        return n

    assert asyncio.run(main()) == 2


def calls(server: Server, command: str) -> int:
    """How many times `command` ran since the last ``CONFIG RESETSTAT``."""
    stats = server.client().info("commandstats")
    return int(stats.get(f"cmdstat_{command}", {}).get("calls", 0))


def test_cancelling_a_layered_graph_reads_each_job_once(server: Server) -> None:
    # Three layers of 3 below the top, each job the child of all 3 above it (ON-FAIL IGNORE: a
    # cancelled child fails no other parent): read once a path, the middle layer's children
    # would be paged 9 times, not 3.
    client = server.client()
    top = echomq.Queue(client, "layer-top")
    tid = top.enqueue(b"top", children=3)
    above = [echomq.Parent("layer-top", tid, "ignore")]
    for n, name in enumerate(("layer-a", "layer-b", "layer-c")):
        q = echomq.Queue(client, name)
        ids = [q.enqueue(b"x", children=3 if n < 2 else None, parents=above) for _ in range(3)]
        above = [echomq.Parent(name, i, "ignore") for i in ids]
    server.cmd("CONFIG", "RESETSTAT")
    assert top.cancel_flow(tid) == 10, "the top and its 9"
    assert calls(server, "emq.children") == 7, "the top and the 6 waiting parents, each once"
    assert calls(server, "emq.job") == 18, "each child read once before, looked up once after"
    assert calls(server, "emq.cancel") == 10


def test_cancelling_leaves_a_child_the_user_may_not_read(server: Server) -> None:
    server.cmd("ACL", "SETUSER", "scoped", "on", ">pw", "+@all", "~emq:{scoped-top}:*")
    scoped = redis.Redis(host="127.0.0.1", port=server.port, username="scoped", password="pw")
    top = echomq.Queue(server.client(), "scoped-top")
    tree = top.flow({"queue": "scoped-top", "payload": b"top", "children": [
        {"queue": "scoped-top", "payload": b"mine"},
        {"queue": "scoped-other", "payload": b"not mine"},
    ]})
    mine, other = tree.children
    assert echomq.Queue(scoped, "scoped-top").cancel_flow(tree.id or "") == 2
    assert top.job(mine.id or "") is None
    assert state(echomq.Queue(server.client(), "scoped-other"), other.id or "") == "pending"


class Breaking:
    """A client whose connection breaks after the first ``EMQ.CANCEL``: every later one fails."""

    def __init__(self, client: Any) -> None:
        self.client, self.cancels = client, 0

    def execute_command(self, *args: Any) -> Any:
        if args[0] == "EMQ.CANCEL":
            self.cancels += 1
            if self.cancels > 1:
                raise ValueError("the connection broke")
        return self.client.execute_command(*args)


def test_a_cancel_failing_after_its_parent_went_names_the_children_left(server: Server) -> None:
    q = echomq.Queue(server.client(), "broken-top")
    tree = three_below(q, "broken-kids", "broken-crops")
    k1, k2 = tree.children
    with pytest.raises(echomq.EmqCancelIncomplete) as failed:
        echomq.Queue(Breaking(server.client()), "broken-top", retries=0).cancel_flow(tree.id or "")
    assert failed.value.cancelled == 1, "the parent went"
    assert failed.value.remaining == [
        ("broken-kids", k1.id), ("broken-kids", k2.id), ("broken-crops", k2.children[0].id)
    ]
    assert isinstance(failed.value.__cause__, ValueError)
    assert q.job(tree.id or "") is None


# ---- on a cluster ----


def owners(cluster: Cluster) -> Callable[[str], int]:
    """The port of the primary that owns a queue's slot."""
    ranges = [(int(r[0]), int(r[1]), int(r[2][1])) for r in cluster.nodes[0].cmd("CLUSTER", "SLOTS")]
    return lambda queue: next(port for lo, hi, port in ranges if lo <= slot(queue) <= hi)


@pytest.mark.cluster
def test_a_flow_across_primaries_is_delivered_by_the_workers_outbox_sweep(cluster: Cluster) -> None:
    for node in cluster.nodes:
        node.cmd("CONFIG", "SET", "emq.max-attempts", 1)
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    owner = owners(cluster)
    # The parent's queue on one primary, its children's on each of the two others.
    names = [f"parts-{n}" for n in range(100)]
    left = next(q for q in names if owner(q) != owner("reports"))
    right = next(q for q in names if owner(q) not in (owner("reports"), owner(left)))
    q = echomq.Queue(client, "reports")
    tree = q.flow({
        "queue": "reports", "payload": b"sum", "children": [
            {"queue": left, "payload": b"a"}, {"queue": left, "payload": b"b"},
            {"queue": right, "payload": b"c"},
        ],
    })
    assert q.flow(tree) == tree  # a retry: each child adopted and enqueued once
    doomed = q.enqueue(b"doomed", children=2)
    survivor = echomq.Queue(client, left).enqueue(b"fine", parents=[("reports", doomed)])
    bad = echomq.Queue(client, right).enqueue(b"bad", parents=[("reports", doomed)])
    row = q.job(tree.id or "") or {}
    assert (row["state"], row["adopted"]) == ("waiting", "3"), row

    events: List[echomq.WorkerEvent] = []
    lock = threading.Lock()

    def record(event: echomq.WorkerEvent) -> None:
        with lock:
            events.append(event)

    def part(job: echomq.Job) -> bytes:
        if job.payload == b"bad":
            raise ValueError("bad part")
        return bytes(job.payload).upper()

    seen: List[echomq.Children] = []
    workers = [
        echomq.Worker(client, "reports", lambda job: seen.append(job.children())),
        echomq.Worker(client, left, part, on_event=record),
        echomq.Worker(client, right, part, on_event=record),
    ]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        assert until(lambda: workers[0].counts["acked"] == 1, timeout=60), q.job(tree.id or "")
        assert until(lambda: (q.job(doomed) or {}).get("state") == "dead", timeout=60), q.job(doomed)
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            assert joined(t), "run() returned after stop()"
    a, b, c = tree.children
    assert seen == [{
        (left, a.id): echomq.Child("acked", b"A"), (left, b.id): echomq.Child("acked", b"B"),
        (right, c.id): echomq.Child("acked", b"C"),
    }]
    assert (q.job(doomed) or {})["error"].startswith(f"child {right} {bad} dead: ")
    # Each child was handed over from its queue's outbox, then removed from it.
    children = {a.id, b.id, c.id, survivor, bad}
    for kind in ("handover", "delivered"):
        done = [e.id for e in events if e.kind == kind and e.outcome == "ok"]
        assert set(done) == children, (kind, events)
    raw: Any = client
    for queue in (left, right):
        assert raw.execute_command("EMQ.OUTBOX", queue)[1] in ([], None)


@pytest.mark.cluster
def test_cancelling_a_parent_on_a_cluster_cancels_its_unstarted_children_in_other_slots(
    cluster: Cluster,
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    owner = owners(cluster)
    names = [f"cut-{n}" for n in range(100)]
    left = next(q for q in names if owner(q) != owner("reports"))
    right = next(q for q in names if owner(q) not in (owner("reports"), owner(left)))
    started = next(q for q in names if q not in (left, right) and owner(q) != owner("reports"))
    q = echomq.Queue(client, "reports")
    # A parent; a child in another slot; a child in its own queue (in reach) that is a parent
    # of a child in a third; and a child in another slot that has started.
    tree = q.flow({"queue": "reports", "payload": b"sum", "children": [
        {"queue": left, "payload": b"a"},
        {"queue": "reports", "payload": b"b", "children": [{"queue": right, "payload": b"c"}]},
        {"queue": started, "payload": b"d"},
    ]})
    a, b, d = tree.children
    (c,) = b.children
    raw: Any = client
    claimed = raw.execute_command("EMQ.CLAIM", started, "COUNT", 1, "LEASE", 60_000)
    assert [bytes(j[0]).decode() for j in claimed] == [d.id]
    assert q.cancel_flow(tree.id or "") == 4, "the parent, a, b (by the module) and c"
    for queue, job_id in ((left, a.id), ("reports", b.id), (right, c.id)):
        assert echomq.Queue(client, queue).job(job_id or "") is None, (queue, job_id)
    assert state(echomq.Queue(client, started), d.id or "") == "active", "a started child runs on"


@pytest.mark.cluster
def test_a_flow_s_grouped_parent_in_a_partitioned_queue_is_in_its_group_s_partition_and_runs_last(
    cluster: Cluster,
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    owner = owners(cluster)
    echomq.Queue(client, "invoices").span(6)
    echomq.Queue(client, "lines").span(4)

    def spec(group: str) -> Dict[str, Any]:
        # Its id routes elsewhere than its group: the parent is found by its group only. Half
        # its children are grouped too, in a partition on another primary than the parent's.
        root = next(i for i in iter(echomq.mint, "") if route(6, i) != route(6, group))
        home = owner(name("invoices", route(6, group), 6) or "")
        lines = next(f"{group}-lines-{n}" for n in range(100)
                     if owner(name("lines", route(4, f"{group}-lines-{n}"), 4) or "") != home)
        return {"queue": "invoices", "id": root, "group": group, "payload": b"invoice",
                "children": [{"queue": "lines", "payload": f"{group} {n}".encode(),
                              "group": lines if n % 2 == 0 else None} for n in range(4)]}

    async def aflow() -> echomq.Node:
        aclient = redis.asyncio.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
        try:
            return await AsyncQueue(aclient, "invoices").flow(spec("globex"))
        finally:
            await aclient.aclose()

    trees = [echomq.Queue(client, "invoices").flow(spec("acme")), asyncio.run(aflow())]
    invoices, lines = echomq.Queue(client, "invoices"), echomq.Queue(client, "lines")
    homes: Dict[str, str] = {}
    for tree in trees:
        home = homes[tree.id or ""] = invoices.partition(tree.group or "")
        row = echomq.Queue(client, home).job(tree.id or "") or {}
        assert (row.get("state"), row.get("group"), row.get("children"), row.get("adopted")) == (
            "waiting", tree.group, "4", "4"), row
        assert invoices.job(tree.id or "") is None, "not in the partition its id routes to"
        for child in tree.children:
            child_row = echomq.Queue(client, lines.partition(child.group or child.id or "")).job(
                child.id or "") or {}
            assert child_row.get("state") == "pending", child_row
            assert child_row.get("parents", "").startswith(f"{home} {tree.id}"), child_row

    ran: List[Tuple[str, str, echomq.Children]] = []
    lock = threading.Lock()

    def invoice(job: echomq.Job) -> None:
        children = job.children()
        with lock:
            ran.append((job.queue, job.id, children))

    workers = [echomq.Worker(client, "invoices", invoice), echomq.Worker(client, "lines", upper)]
    threads = [threading.Thread(target=w.run, daemon=True) for w in workers]
    for t in threads:
        t.start()
    try:
        assert until(lambda: workers[0].counts["acked"] == 2, timeout=60), workers[0].counts
    finally:
        for w in workers:
            w.stop()
        for t in threads:
            assert joined(t), "run() returned after stop()"
    assert workers[1].counts["acked"] == 8
    # Each parent ran once, from its group's partition, after its four children were acked.
    assert sorted((job_id, queue) for queue, job_id, _ in ran) == sorted(homes.items())
    for tree in trees:
        (children,) = [c for _, job_id, c in ran if job_id == tree.id]
        assert children == {
            (lines.partition(c.group or c.id or ""), c.id): echomq.Child("acked", bytes(c.payload).upper())
            for c in tree.children
        }
    for q in (invoices, lines):
        stats = q.stats()
        assert [stats[s] for s in ("pending", "active", "waiting", "dead")] == [0, 0, 0, 0], stats


# ---- what the client plans ----


def test_slots_are_the_servers() -> None:
    # protocol.md §3's vectors.
    assert [slot(q) for q in ("123456789", "orders", "fills", "quotes")] == [12739, 105, 4165, 3378]


def test_a_flow_is_enqueued_top_down_each_parent_before_its_children() -> None:
    tree = echomq.minted({
        "queue": "a", "payload": b"root", "children": [
            {"queue": "b", "payload": b"mid", "on_fail": "ignore", "children": [
                {"queue": "c", "payload": b"leaf"},
            ]},
            {"queue": "a", "payload": b"sibling", "id": "JOB0KHTOWnGLuC"},
        ],
    })
    root, (mid, sibling) = tree, tree.children
    (leaf,) = mid.children
    assert sibling.id == "JOB0KHTOWnGLuC" and len({root.id, mid.id, leaf.id, sibling.id}) == 4
    assert [(s.payload, s.children, s.parents) for s in steps(tree)] == [
        (b"root", 2, []),
        (b"mid", 1, [echomq.Parent("a", root.id or "", "ignore")]),
        (b"leaf", None, [echomq.Parent("b", mid.id or "", "fail")]),
        (b"sibling", None, [echomq.Parent("a", root.id or "", "fail")]),
    ]
    assert echomq.minted(tree) == tree, "a minted tree keeps its ids"


def test_chain_and_batch_trees() -> None:
    chain = chained([{"queue": "q", "payload": p} for p in (b"a", b"b", b"c")])
    assert (chain.payload, chain.children[0].payload, chain.children[0].children[0].payload) == (b"c", b"b", b"a")
    batch = batched([{"queue": "q", "payload": b"x"}, echomq.Node("r", b"y")], on_complete=("done", b"cb"))
    assert (batch.queue, batch.payload) == ("done", b"cb")
    assert [(c.queue, c.on_fail) for c in batch.children] == [("q", "ignore"), ("r", "ignore")]
    with pytest.raises(ValueError):
        chained([])
    with pytest.raises(ValueError):  # refused before anything is sent
        steps(echomq.minted({"queue": "q", "payload": b"p", "children": [
            {"queue": "q", "payload": b"c", "on_fail": "later"}]}))


def test_the_enqueue_arguments_of_a_child_and_a_parent() -> None:
    parents = parents_of([("reports", "JOB0KHTOWnGLuC"), ("parts", "JOB0KHTOWnGLuD", "ignore")])
    job_id, args = cmd.enqueue(
        "parts", echomq.Raw(), b"p", "JOB0KHTOWnGLuE", None, None, None, None, None, 3, parents
    )
    assert args == [
        "EMQ.ENQUEUE", "parts", job_id, b"p", "CHILDREN", 3,
        "PARENT", "reports", "JOB0KHTOWnGLuC", "PARENT", "parts", "JOB0KHTOWnGLuD", "ON-FAIL", "IGNORE",
    ]
    # Only the parent on another slot is adopted first.
    assert cmd.adoptions("parts", job_id, parents) == [
        ["EMQ.ADOPT", "reports", "JOB0KHTOWnGLuC", "parts", job_id]
    ]
    for bad in ([("q", "JOB0KHTOWnGLuC", "later")], [("q", "JOB0KHTOWnGLuC")] * 2,
                [("q", echomq.mint()) for _ in range(17)]):
        with pytest.raises(ValueError):
            parents_of(bad)
    with pytest.raises(ValueError):
        cmd.enqueue("q", echomq.Raw(), b"p", None, None, None, None, None, None, 0, [])


def test_a_sweep_delivers_each_hand_over_and_leaves_what_failed() -> None:
    from echomq import outbox
    from echomq.events import Hook

    entries = [
        [b"JOB0KHTOWnGLuA", b"p", b"JOB0KHTOWnGLu1", b"acked", b"fail", b"r"],  # counted
        [b"JOB0KHTOWnGLuB", b"p", b"JOB0KHTOWnGLu2", b"dead", b"ignore", b"e"],  # orphan
        [b"JOB0KHTOWnGLuC", b"p", b"JOB0KHTOWnGLu3", b"acked", b"fail", b""],  # refused
        [b"JOB0KHTOWnGLuD", b"p", b"JOB0KHTOWnGLu4", b"acked", b"fail", b""],  # not replicated
    ]
    answers = {b"JOB0KHTOWnGLuA": b"counted", b"JOB0KHTOWnGLuB": b"orphan"}
    sent: List[List[Any]] = []

    def send(one: Any) -> Tuple[Any, Any]:
        sent.append(one.command)
        if one.kind == "outbox":
            return [b"0", entries], None
        if one.kind == "handover":
            child = one.command[4].encode()
            if child == b"JOB0KHTOWnGLuC":
                return ConnectionError("lost"), None
            return answers.get(child, b"counted"), (0 if child == b"JOB0KHTOWnGLuD" else 1)
        return 1, None

    events: List[echomq.WorkerEvent] = []
    assert outbox.swept(send, "c", Hook(events.append, "w", "c"), 1) == (4, False)
    assert [c for c in sent if c[0] == "EMQ.DELIVERED"] == [
        ["EMQ.DELIVERED", "c", "JOB0KHTOWnGLuA", "p", "JOB0KHTOWnGLu1"],
        ["EMQ.DELIVERED", "c", "JOB0KHTOWnGLuB", "p", "JOB0KHTOWnGLu2", "ORPHAN"],
    ]
    assert sent[1] == ["EMQ.HANDOVER", "p", "JOB0KHTOWnGLu1", "c", "JOB0KHTOWnGLuA", b"acked", b"fail", b"r"]
    assert [(e.kind, e.id[-1], e.outcome, e.replicated) for e in events] == [
        ("handover", "A", "ok", True), ("delivered", "A", "ok", None),
        ("handover", "B", "ok", True), ("delivered", "B", "ok", None),
        ("handover", "C", "unknown", None), ("handover", "D", "ok", False),
    ]
    # Once every step went through, the next sweep comes at once; else after a second.
    assert (outbox.pause(4, True), outbox.pause(4, False), outbox.pause(0, True)) == (0.0, 1.0, 1.0)


def test_a_sweep_that_raises_is_told_and_the_sweeps_go_on() -> None:
    from echomq import outbox
    from echomq.events import Hook

    # The first page read raises (as a cluster client's map read again after MOVED may); the
    # next sweeps answer an empty outbox. The thread and the task sweep on, the failure told.
    Reply = Callable[[Any], Tuple[Any, Any]]

    def sweeps_until_third(run: Callable[[Reply, List[echomq.WorkerEvent]], None]) -> List[Any]:
        pages: List[int] = []
        events: List[echomq.WorkerEvent] = []

        def reply(sent: Any) -> Tuple[Any, Any]:
            pages.append(len(pages))
            if len(pages) == 1:
                raise RuntimeError("the map could not be read")
            return [b"0", []], None

        run(reply, events)
        return [len(pages), [(e.kind, e.outcome, e.error) for e in events]]

    def threaded(reply: Reply, events: List[echomq.WorkerEvent]) -> None:
        stopping = threading.Event()
        hook = Hook(events.append, "w", "c")
        calls: List[int] = []

        def send(sent: Any) -> Tuple[Any, Any]:
            calls.append(1)
            if len(calls) == 3:
                stopping.set()
            return reply(sent)

        t = threading.Thread(target=outbox.sweeps, args=(send, "c", stopping, hook, 0), daemon=True)
        t.start()
        assert joined(t), "the sweeps stopped when asked, not before"

    def tasked(reply: Reply, events: List[echomq.WorkerEvent]) -> None:
        async def main() -> None:
            stopping = asyncio.Event()
            calls: List[int] = []

            async def send(sent: Any) -> Tuple[Any, Any]:
                calls.append(1)
                if len(calls) == 3:
                    stopping.set()
                return reply(sent)

            await outbox.asweeps(send, "c", stopping, Hook(events.append, "w", "c"), 0)

        asyncio.run(main())

    told = [("outbox", "unknown", "the map could not be read")]
    assert sweeps_until_third(threaded) == [3, told]
    assert sweeps_until_third(tasked) == [3, told]
