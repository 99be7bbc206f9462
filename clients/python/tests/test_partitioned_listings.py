"""A partitioned queue's listings, schedules and metrics through its own name (docs/cluster.md,
"What holds across partitions"): ``cron`` and ``uncron`` go to the partition the schedule's
name routes to and ``crons`` lists every partition's; ``jobs`` and ``groups`` page through the
partitions in turn with a ``"<index>:<inner>"`` cursor, each job or group once, a page empty
only at the end; ``metrics`` adds the partitions' up. An ordinary queue's are as the server
answers. Split from test_partitioned.py (test files stay under 900 lines). Counts and order
only: nothing here is timed."""

from __future__ import annotations

import asyncio
import re
import threading
import time
from typing import Any, Dict, List, Sequence, Set, Tuple

import pytest
import redis.asyncio
import redis.cluster
import redis.exceptions

import echomq
from echomq import commands as cmd
from echomq import listings, spans
from echomq.aio import AsyncQueue, AsyncWorker
from echomq.metrics import Histogram, Metrics, plus, total
from echomq.partitions import route
from echomq.routing import Router, read_width
from conftest import Cluster, Server, joined, until
from test_partitioned import acked, async_worker, drain, owner_of

#: A partitioned queue's cursor, as a page returns it.
CURSOR = re.compile(r"^(\d+):(.+)$")


def ids_routing(width: int, partitions: Set[int], count: int) -> List[str]:
    """`count` minted ids that route, over `width`, to one of `partitions`."""
    found: List[str] = []
    while len(found) < count:
        job_id = echomq.mint()
        if route(width, job_id) in partitions:
            found.append(job_id)
    return found


def walk(
    page: Any, key: str, width: int, expected: Sequence[str]
) -> Tuple[List[str], List[Tuple[str, int]]]:
    """Every page of a walk from ``"0"`` (`page(cursor)` one page) over a queue of `width`
    partitions that lists `expected` (each item's `key`): the keys in the order seen, and each
    page's cursor and size. Each item comes once. Each page comes from one partition: the one
    the cursor named before the call (0 for ``"0"``), or a later one only when every partition
    from the one named up to it had nothing left to list (a partition that ends empty is
    passed within the call). The cursor after it names that partition while its listing goes
    on (its inner cursor not ``"0"``), the next one's start (``"<index + 1>:0"``) once it has
    nothing left, and ``"0"`` after the last; a page is empty only at the end."""
    left = {k: route(width, k) for k in expected}  # what is not seen yet, and its partition
    assert len(left) == len(expected)
    seen: List[str] = []
    pages: List[Tuple[str, int]] = []
    cursor = "0"
    while True:
        parts = CURSOR.match(cursor)
        named = 0 if cursor == "0" else int(parts.group(1)) if parts else -1
        assert named >= 0, cursor
        cursor, found = page(cursor)
        keys = [str(one[key]) for one in found]
        pages.append((cursor, len(found)))
        if not found:
            assert cursor == "0", f"an empty page before the end: {pages}"
            assert not [k for k, p in left.items() if p >= named], ("missed", left, pages)
            break
        came = {route(width, k) for k in keys}
        assert len(came) == 1, (pages, came)
        (source,) = came
        assert source >= named, (pages, source)
        assert not [k for k, p in left.items() if named <= p < source], ("passed over", pages)
        for k in keys:
            assert left.pop(k, None) == source, ("not listed, or twice", k, pages)
        seen += keys
        done = not [k for k, p in left.items() if p == source]
        if cursor == "0":
            assert source == width - 1 and done, (pages, left)
            break
        parts = CURSOR.match(cursor)
        assert parts is not None, cursor
        index, inner = int(parts.group(1)), parts.group(2)
        if inner == "0":
            assert index == source + 1 and done, (pages, left)
        else:
            assert index == source, (pages, source)
    assert not left, ("never listed", left)
    return seen, pages


def crons_of(client: Any, queue: str) -> List[str]:
    """The names of the schedules the server keeps for `queue` (``EMQ.CRONS``)."""
    return [one["name"] for one in cmd.schedules(client.execute_command("EMQ.CRONS", queue))]


# ---- schedules ----


def test_a_schedule_is_kept_by_the_partition_its_name_routes_to(server: Server) -> None:
    client = server.client()
    echomq.Queue(client, "timed").span(4)
    q = echomq.Queue(client, "timed")
    names = [f"report-{n}" for n in range(12)]
    for n in reversed(names):
        assert q.cron(n, b"run", every=3600) > 0
    partitions = spans.names("timed", 4)
    held = {p: crons_of(client, p) for p in partitions}
    for n in names:
        assert [p for p in partitions if n in held[p]] == [partitions[route(4, n)]], n
    assert len([p for p in partitions if held[p]]) > 1, "the names spread over partitions"
    assert crons_of(client, "timed") == [], "the queue's own name keeps none"
    assert [one["name"] for one in q.crons()] == sorted(names)
    assert all(one["every"] == 3_600_000 for one in q.crons())
    assert q.uncron("report-3") is True
    assert all("report-3" not in crons_of(client, p) for p in partitions)
    assert q.uncron("report-3") is False
    assert [one["name"] for one in q.crons()] == sorted(set(names) - {"report-3"})
    # A partition's own Queue lists its own schedules.
    first = partitions[route(4, "report-0")]
    assert [one["name"] for one in echomq.Queue(client, first).crons()] == held[first]


def test_a_schedule_set_through_a_width_learned_before_the_span_is_routed(server: Server) -> None:
    client = server.client()
    early = echomq.Queue(client, "respanned")
    assert early.width() == 0, "learned: an ordinary queue"
    echomq.Queue(client, "respanned").span(4)
    # Sent to the queue's own name, refused (EMQSPANNED 4), and sent again where it routes.
    names = [f"tick-{n}" for n in range(6)]
    for n in names:
        assert early.cron(n, b"t", every=60) > 0
    assert early.router.width == 4
    partitions = spans.names("respanned", 4)
    for n in names:
        assert n in crons_of(client, partitions[route(4, n)]), n
    assert crons_of(client, "respanned") == []

    async def main() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            q = AsyncQueue(aclient, "respanned")
            q.router.learn(0)  # as a handle that read the width before the span
            assert await q.cron("async-tick", b"t", every=60) > 0
        finally:
            await aclient.aclose()

    asyncio.run(main())
    assert "async-tick" in crons_of(client, partitions[route(4, "async-tick")])


def test_a_schedule_s_arguments_are_checked_before_anything_is_sent(server: Server) -> None:
    counted = Counted(server.client())
    q = echomq.Queue(counted, "checked")  # its width not known: not even that is read
    with pytest.raises(ValueError, match="spec or every"):
        q.cron("neither", b"x")
    with pytest.raises(ValueError, match="spec or every"):
        q.cron("both", b"x", spec="* * * * *", every=60)
    with pytest.raises(TypeError, match="payload"):
        q.cron("unencodable", 42, every=60)
    with pytest.raises(TypeError):
        echomq.Queue(counted, "checked", serializer=echomq.Json()).cron("json", {1, 2}, every=60)

    async def main() -> None:
        aq = AsyncQueue(counted, "checked")  # nothing is awaited before the check
        with pytest.raises(ValueError, match="spec or every"):
            await aq.cron("neither", b"x")

    asyncio.run(main())
    assert counted.sent == 0 and q.router.width is None


# ---- listing ----


def test_a_jobs_walk_visits_each_job_once_and_passes_over_empty_partitions(
    server: Server,
) -> None:
    client = server.client()
    echomq.Queue(client, "listed").span(4)
    q = echomq.Queue(client, "listed")
    # Partitions 1 and 3 (the last) hold nothing: the walk goes past them.
    every = ids_routing(4, {0, 2}, 60)
    for job_id in every:
        q.enqueue(b"job", id=job_id)
    assert [s["pending"] for s in q.partition_stats().values()][1::2] == [0, 0]
    seen, pages = walk(lambda c: q.jobs("pending", c, count=7), "id", 4, every)
    assert sorted(seen) == sorted(every) and len(seen) == 60, "each job once"
    assert pages[-1] == ("0", 0), "the last partition is empty: the walk ends with nothing"
    assert all(size > 0 for _, size in pages[:-1]), pages
    assert all(CURSOR.match(c) for c, _ in pages[:-1]), pages
    # Each partition's jobs in its order (pending: mint order), partition 0's first.
    order = [route(4, i) for i in seen]
    assert order == sorted(order)
    for index in (0, 2):
        mine = [i for i in seen if route(4, i) == index]
        assert mine == sorted(mine)
    # With payloads, each job's own.
    _, page = q.jobs("pending", "0", count=3, payloads=True)
    assert [j["payload"] for j in page] == ["job"] * 3


def test_a_groups_walk_visits_each_group_once(server: Server) -> None:
    client = server.client()
    echomq.Queue(client, "tenants").span(4)
    q = echomq.Queue(client, "tenants")
    groups = [f"tenant-{n}" for n in range(30)]
    for n, g in enumerate(groups):
        for _ in range(1 + n % 3):
            q.enqueue(b"work", group=g)
    seen, pages = walk(lambda c: q.groups(c, count=7), "group", 4, groups)
    assert sorted(seen) == sorted(groups) and len(seen) == len(groups)
    assert pages[-1][0] == "0"
    assert all(size > 0 for _, size in pages[:-1])
    # Each partition's groups come together, one partition after the other.
    order = [route(4, g) for g in seen]
    assert order == sorted(order)


def answered(course: Any, replies: List[Any]) -> Tuple[List[List[Any]], Any]:
    """`course` run with `replies`, one a command in turn: the commands it sent, and what it
    ended with."""
    sent: List[List[Any]] = []
    reply: Any = None
    while True:
        try:
            _, args = course.send(reply)
        except StopIteration as end:
            assert len(sent) == len(replies), ("replies left", sent)
            return sent, end.value
        sent.append(args)
        reply = replies[len(sent) - 1]


def test_a_walk_passes_over_empty_partitions_within_one_call() -> None:
    router = Router("w")
    router.learn(2)  # stale: a walk's start reads the width afresh
    p = spans.names("w", 5)

    def page(cursor: str, replies: List[Any]) -> Tuple[List[List[Any]], Any]:
        return answered(listings.walk(
            router, cursor, lambda queue, at: ["LIST", queue, at],
            lambda reply: (reply[0], [{"k": k} for k in reply[1]]),
        ), replies)

    # Partition 0 holds nothing: the first page is partition 1's.
    sent, out = page("0", [["width", 5], ["0", []], ["c1", ["a", "b"]]])
    assert sent == [["EMQ.WIDTH", "w"], ["LIST", p[0], "0"], ["LIST", p[1], "0"]]
    assert out == ("1:c1", [{"k": "a"}, {"k": "b"}]) and router.width == 5
    # Partition 1 ends with something: the next cursor is partition 2's start.
    sent, out = page("1:c1", [["0", ["c"]]])
    assert (sent, out) == ([["LIST", p[1], "c1"]], ("2:0", [{"k": "c"}])), "no width read"
    # Partitions 2 and 3 hold nothing, one after the other: the page is partition 4's.
    sent, out = page("2:0", [["0", []], ["0", []], ["c4", ["d"]]])
    assert sent == [["LIST", p[2], "0"], ["LIST", p[3], "0"], ["LIST", p[4], "0"]]
    assert out == ("4:c4", [{"k": "d"}])
    # The last partition ends empty: the walk ends, with nothing.
    assert page("4:c4", [["0", []]]) == ([["LIST", p[4], "c4"]], ("0", []))
    # Two empty partitions at the end: passed within the call, to the walk's end.
    sent, out = page("2:0", [["0", []], ["0", []], ["0", []]])
    assert [args[1] for args in sent] == p[2:] and out == ("0", [])
    # The last partition ends with something: "0", with it.
    assert page("4:0", [["0", ["e"]]])[1] == ("0", [{"k": "e"}])
    # Every partition empty.
    sent, out = page("0", [["width", 5]] + [["0", []]] * 5)
    assert [args[1] for args in sent[1:]] == p and out == ("0", [])
    # A cursor past the width known: refused before anything is sent.
    with pytest.raises(ValueError, match="no cursor"):
        page("5:0", [])
    # An ordinary queue's (width 0 read at the start): its own pages and cursors.
    sent, out = page("0", [["width", 0], ["0:JOBx", ["a"]]])
    assert (sent, out) == ([["EMQ.WIDTH", "w"], ["LIST", "w", "0"]], ("0:JOBx", [{"k": "a"}]))
    assert page("0:JOBx", [["0", ["b"]]]) == ([["LIST", "w", "0:JOBx"]], ("0", [{"k": "b"}]))


def test_a_stale_width_is_read_afresh_by_crons_uncron_and_a_walk_s_start(server: Server) -> None:
    client = server.client()
    admin = echomq.Queue(client, "rewidth")
    admin.span(4)
    stale = [echomq.Queue(client, "rewidth") for _ in range(4)]
    assert all(q.width() == 4 for q in stale)
    assert admin.unspan() is True and admin.span(2) is True, "drained, spanned again over 2"
    names = [f"rw-{n}" for n in range(8)]
    for n in names:
        admin.cron(n, b"r", every=60)
    every = admin.enqueue_many(b"x" for _ in range(20))
    groups = [f"rg-{n}" for n in range(6)]
    for g in groups:
        admin.enqueue(b"g", group=g)
    old, new = spans.names("rewidth", 4), spans.names("rewidth", 2)
    assert any(old[route(4, n)] != new[route(2, n)] for n in names), "the old width misroutes"

    crons, uncron, jobs, grouped = stale
    assert [one["name"] for one in crons.crons()] == names and crons.router.width == 2
    assert [uncron.uncron(n) for n in names] == [True] * len(names)
    assert crons.crons() == []
    assert sorted(walk(lambda c: jobs.jobs("pending", c, count=6), "id", 2, every)[0]) == sorted(
        every
    )
    assert sorted(walk(lambda c: grouped.groups(c, count=4), "group", 2, groups)[0]) == groups

    async def main() -> None:
        aclient = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            q = AsyncQueue(aclient, "rewidth")
            q.router.learn(4)  # as a handle that read the width before the queue changed
            assert await q.cron("async-rw", b"r", every=60) > 0
            q.router.learn(4)
            assert [one["name"] for one in await q.crons()] == ["async-rw"]
            q.router.learn(4)
            assert await q.uncron("async-rw") is True
            q.router.learn(4)
            assert (await q.jobs("pending"))[1], "read afresh: partition 0 of 2"
        finally:
            await aclient.aclose()

    asyncio.run(main())


def test_an_ordinary_queue_pages_with_the_server_s_own_cursors(server: Server) -> None:
    client = server.client()
    q = echomq.Queue(client, "plain")
    every = q.enqueue_many(b"%d" % n for n in range(5))
    cursor, page = q.jobs("pending", "0", count=2)
    raw = server.cmd("EMQ.JOBS", "plain", "pending", "CURSOR", "0", "COUNT", 2)
    assert cursor == raw[0].decode() and cursor.startswith("0:JOB"), "the server's own"
    assert [j["id"] for j in page] == every[:2]
    cursor, page = q.jobs("pending", cursor, count=10)
    assert (cursor, [j["id"] for j in page]) == ("0", every[2:])
    q.enqueue(b"g", group="only")
    assert q.groups() == ("0", [cmd.fields(g) for g in server.cmd("EMQ.GROUPS", "plain")[1]])
    assert q.cron("tick", b"t", every=3600) > 0 and crons_of(client, "plain") == ["tick"]
    assert [one["name"] for one in q.crons()] == ["tick"]
    assert q.metrics().events["enqueued"] == 6


def an_ordinary_queue_s_calls(q: echomq.Queue) -> None:
    """jobs, groups, cron, crons, uncron, metrics and stats of the ordinary queue ``plain``
    through `q`, whatever width reads it cannot make."""
    every = q.enqueue_many(b"%d" % n for n in range(3))
    q.enqueue(b"g", group="only")
    cursor, page = q.jobs("pending", "0", count=2)
    assert cursor.startswith("0:JOB") and [j["id"] for j in page] == every[:2]
    assert q.jobs("pending", cursor, count=10) == ("0", q.jobs("pending", "0")[1][2:])
    assert [g["group"] for g in q.groups()[1]] == ["only"]
    assert q.cron("tick", b"t", every=3600) > 0
    assert [one["name"] for one in q.crons()] == ["tick"]
    assert q.uncron("tick") is True and q.crons() == []
    assert q.metrics().events["enqueued"] == 4
    assert q.stats()["pending"] == 4


def test_a_user_not_allowed_emq_width_uses_an_ordinary_queue_as_before(server: Server) -> None:
    server.cmd("ACL", "SETUSER", "nowidth", "on", ">pw", "+@all", "-emq.width", "~*")
    limited: Any = redis.Redis(host="127.0.0.1", port=server.port, username="nowidth",
                               password="pw")
    with pytest.raises(redis.exceptions.NoPermissionError):
        limited.execute_command("EMQ.WIDTH", "plain")
    an_ordinary_queue_s_calls(echomq.Queue(limited, "plain"))

    async def main() -> None:
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=server.port, username="nowidth", password="pw"
        )
        try:
            q = AsyncQueue(client, "plain")
            cursor, page = await q.jobs("pending")
            assert cursor == "0" and len(page) == 3, "the default group's"
            assert await q.cron("tock", b"t", every=60) > 0
            assert [one["name"] for one in await q.crons()] == ["tock"]
            assert (await q.metrics()).events["enqueued"] == 4
        finally:
            await client.aclose()

    asyncio.run(main())
    # Its worker claims the ordinary queue as ever: the four jobs, each once, from "plain".
    assert drain(limited, "plain", 4) == {i: ["plain"] for i in drain_ids(server, "plain")}


def drain_ids(server: Server, queue: str) -> List[str]:
    """The ids of every job row `queue` holds (its rows' keys)."""
    prefix = f"emq:{{{queue}}}:job:"
    return [k.decode()[len(prefix):] for k in server.cmd("KEYS", prefix + "*")]


class NoWidth:
    """A client whose server has no ``EMQ.WIDTH`` (an unknown command), or refuses it with
    `error`."""

    def __init__(self, client: Any, error: str = "unknown command 'EMQ.WIDTH'") -> None:
        self.client, self.error = client, error

    def execute_command(self, *args: Any) -> Any:
        if args[0] == "EMQ.WIDTH":
            raise redis.exceptions.ResponseError(self.error)
        return self.client.execute_command(*args)


def test_a_server_without_emq_width_has_ordinary_queues_only(server: Server) -> None:
    an_ordinary_queue_s_calls(echomq.Queue(NoWidth(server.client()), "plain"))
    # Any other failure of the read is raised.
    q = echomq.Queue(NoWidth(server.client(), "ERR something else"), "plain")
    with pytest.raises(redis.exceptions.ResponseError, match="something else"):
        q.crons()
    assert not spans.untold(redis.exceptions.ConnectionError("unknown command"))


def test_only_the_command_refused_or_unknown_reads_as_no_width() -> None:
    noperm, refused = redis.exceptions.NoPermissionError, redis.exceptions.ResponseError
    untold = [
        noperm("User nowidth has no permissions to run the 'emq.width' command"),
        refused("NOPERM User nowidth has no permissions to run the 'emq.width' command"),
        noperm("this user has no permissions to run the 'emq.width' command or its subcommand"),
        refused("unknown command 'EMQ.WIDTH', with args beginning with: 'q' "),
        refused("ERR unknown command 'EMQ.WIDTH'"),
    ]
    told = [
        noperm("No permissions to access a key"),
        refused("NOPERM No permissions to access a key"),
        noperm("No permissions to access a channel"),
        refused("has no permissions to run"),  # not a NOPERM
        redis.exceptions.ConnectionError("unknown command"),
    ]
    assert [spans.untold(e) for e in untold] == [True] * len(untold)
    assert [spans.untold(e) for e in told] == [False] * len(told)


def width_read(router: Router, error: Exception) -> int:
    """What ``read_width`` of `router` ends with when its ``EMQ.WIDTH`` fails with `error`."""
    course = read_width(router)
    assert next(course)[1] == ["EMQ.WIDTH", router.queue]
    try:
        course.throw(error)
    except StopIteration as end:
        return int(end.value)
    raise AssertionError("read_width sent more than EMQ.WIDTH")


def test_a_width_the_server_will_not_tell_keeps_the_one_known() -> None:
    refused = redis.exceptions.NoPermissionError(
        "User nowidth has no permissions to run the 'emq.width' command"
    )
    router = Router("kept")
    assert width_read(router, refused) == 0 and router.width == 0, "none known: 0 learned"
    router.learn(3)  # from an EMQSPANNED refusal, or a clone's read
    assert width_read(router, refused) == 3 and router.width == 3
    with pytest.raises(redis.exceptions.NoPermissionError, match="access a key"):
        width_read(router, redis.exceptions.NoPermissionError("No permissions to access a key"))
    assert router.width == 3


def test_a_key_refused_to_the_width_read_is_raised(server: Server) -> None:
    client = NoWidth(server.client(), "NOPERM No permissions to access a key")
    with pytest.raises(redis.exceptions.ResponseError, match="access a key"):
        echomq.Queue(client, "plain").crons()


def limited_user(server: Server, queue: str, width: int) -> List[str]:
    """The user ``nowidth`` (no ``+emq.width``) made, `queue` spanned over `width` by the
    admin, with 10 jobs the admin enqueued: their ids."""
    server.cmd("ACL", "SETUSER", "nowidth", "on", ">pw", "+@all", "-emq.width", "~*")
    admin = server.client()
    assert echomq.Queue(admin, queue).span(width) is True
    return echomq.Queue(admin, queue).enqueue_many(b"%d" % n for n in range(10))


def from_partitions(handled: Dict[str, List[str]], ids: List[str], queue: str) -> None:
    """Each of `ids` handled once, from the partition of `queue` (over 3) its id routes to."""
    assert sorted(handled) == sorted(ids)
    partitions = spans.names(queue, 3)
    assert all(handled[i] == [partitions[route(3, i)]] for i in ids), handled


def test_a_worker_of_a_user_not_allowed_emq_width_claims_the_partitions(server: Server) -> None:
    # Its width read refused, the worker claims the queue's own name; its EMQSPANNED 3 is
    # learned and kept by the reads refused after it (a blocking claim timed out among them).
    ids = limited_user(server, "wide", 3)
    limited = redis.Redis(host="127.0.0.1", port=server.port, username="nowidth", password="pw")
    handled: Dict[str, List[str]] = {}

    def handle(job: echomq.Job) -> None:
        handled.setdefault(job.id, []).append(job.queue)

    worker = echomq.Worker(limited, "wide", handle, block=0.2)
    t = threading.Thread(target=worker.run, daemon=True)
    t.start()
    try:
        assert until(lambda: worker.counts["acked"] == 10, timeout=30), worker.counts
        assert until(lambda: server.cmd("INFO", "clients")["blocked_clients"] == 1)
        time.sleep(0.5)  # blocking claims time out on the idle partitions
        ids += echomq.Queue(limited, "wide").enqueue_many(b"%d" % n for n in range(10))
        assert until(lambda: worker.counts["acked"] == 20, timeout=30), worker.counts
    finally:
        worker.stop()
        assert joined(t)
    assert worker.queue.router.width == 3 and worker.counts["lost"] == 0
    from_partitions(handled, ids, "wide")


def test_an_async_worker_of_a_user_not_allowed_emq_width_claims_the_partitions(
    server: Server,
) -> None:
    ids = limited_user(server, "awide", 3)

    async def main() -> None:
        client = redis.asyncio.Redis(
            host="127.0.0.1", port=server.port, username="nowidth", password="pw"
        )
        worker, task, handled = async_worker(client, "awide", block=0.2)
        await acked(worker, 10)
        await asyncio.sleep(0.5)  # blocking claims time out on the idle partitions
        ids.extend(await AsyncQueue(client, "awide").enqueue_many(b"%d" % n for n in range(10)))
        await acked(worker, 20)
        worker.stop()
        await asyncio.wait_for(task, 10)
        assert worker.queue.router.width == 3 and worker.counts["lost"] == 0
        from_partitions(handled, ids, "awide")
        await client.aclose()

    asyncio.run(main())


class Counted:
    """A client that counts the commands sent through it."""

    def __init__(self, client: Any) -> None:
        self.client, self.sent = client, 0

    def execute_command(self, *args: Any) -> Any:
        self.sent += 1
        return self.client.execute_command(*args)


@pytest.mark.parametrize(
    "cursor", ["x", "1", "3:0", "4:0", "-1:0", "01:0", "+1:0", "1:", ":1", "", "١:0"]
)
def test_a_malformed_cursor_is_a_value_error_before_anything_is_sent(
    server: Server, cursor: str
) -> None:
    counted = Counted(server.client())
    echomq.Queue(counted, "paged").span(3)
    q = echomq.Queue(counted, "paged")
    assert q.width() == 3
    sent = counted.sent
    with pytest.raises(ValueError, match="no cursor"):
        q.jobs("pending", cursor)
    with pytest.raises(ValueError, match="no cursor"):
        q.groups(cursor)
    assert counted.sent == sent
    # Cursors a page could return are taken.
    assert q.jobs("pending", "2:0") == ("0", [])
    assert q.groups("1:5") == ("0", [])


# ---- metrics ----


def test_the_metrics_of_partitions_add_up() -> None:
    a = Histogram(2, 30, [(10, 1), (50, 2), (None, 2)])
    b = Histogram(3, 70, [(10, 0), (50, 3), (None, 3)])
    other = Histogram(9, 900, [(5, 9), (None, 9)])
    assert plus(a, b) == Histogram(5, 100, [(10, 1), (50, 5), (None, 5)])
    assert plus(a, other) == other and plus(other, a) == other, "unlike buckets: the larger"
    one = Metrics({"acked": 2, "claimed": 3}, a, {"acked": a}, a, None, True)
    two = Metrics({"acked": 3, "dead": 1}, b, {"acked": b, "dead": b}, b, 40, True)
    three = Metrics({}, Histogram(), {}, Histogram(), 25, True)
    found = total([one, two])
    assert found.events == {"acked": 5, "claimed": 3, "dead": 1}
    assert found.run == {"acked": plus(a, b), "dead": b}
    assert (found.wait, found.end_to_end) == (plus(a, b), plus(a, b))
    assert (found.oldest_pending_ms, found.enabled) == (40, True)
    assert total([one, three]).oldest_pending_ms == 25, "one partition's age, the only one"
    assert total([one]) is one


def test_the_oldest_pending_age_of_partitions_is_the_greatest_and_enabled_needs_every_one() -> None:
    young = Metrics(oldest_pending_ms=25)
    old = Metrics(oldest_pending_ms=40)
    assert total([young, old]).oldest_pending_ms == 40, "the greatest: a sum would be 65"
    assert total([old, young, Metrics()]).oldest_pending_ms == 40
    assert total([Metrics(), Metrics()]).oldest_pending_ms is None, "nothing pending in any"
    off = Metrics(enabled=False)
    assert total([young, old]).enabled is True
    assert total([young, off]).enabled is False, "one partition not keeping metrics"
    assert total([off, young]).enabled is False, "whichever it is"


@pytest.mark.cluster
def test_a_queue_over_every_primary_lists_schedules_walks_and_adds_its_metrics(
    cluster: Cluster,
) -> None:
    client = redis.cluster.RedisCluster(host="127.0.0.1", port=cluster.nodes[0].port)
    echomq.Queue(client, "spread").span(12)
    partitions = spans.names("spread", 12)
    assert {owner_of(cluster)(p) for p in partitions} == {n.port for n in cluster.nodes}
    q = echomq.Queue(client, "spread")
    for n in range(9):
        q.cron(f"nightly-{n}", b"n", every=86400)
    assert [one["name"] for one in q.crons()] == [f"nightly-{n}" for n in range(9)]
    for n in range(9):
        assert f"nightly-{n}" in crons_of(client, partitions[route(12, f"nightly-{n}")])

    every = q.enqueue_many(b"%d" % n for n in range(60))
    seen, pages = walk(lambda c: q.jobs("pending", c, count=7), "id", 12, every)
    assert sorted(seen) == sorted(every) and len(seen) == 60
    assert pages[-1][0] == "0" and all(size > 0 for _, size in pages[:-1])

    drain(client, "spread", 60, concurrency=4)
    later = q.enqueue_many(b"later" for _ in range(5))
    each = [echomq.Queue(client, p).metrics() for p in partitions]
    m = q.metrics()
    assert {k: m.events[k] for k in ("enqueued", "claimed", "acked")} == {
        "enqueued": 65, "claimed": 60, "acked": 60,
    }
    for key in set(m.events) | {k for one in each for k in one.events}:
        assert m.events.get(key) == sum(one.events.get(key, 0) for one in each), key
    summed = [sum(n for one in each for le2, n in one.wait.buckets if le2 == le)
              for le, _ in m.wait.buckets]
    assert [n for _, n in m.wait.buckets] == summed and m.wait.count == 60
    assert m.run["acked"].count == 60 == sum(one.run["acked"].count for one in each)
    assert m.end_to_end.count == 60
    # The 5 later jobs wait: the oldest is the longest of the partitions' (read before it).
    ages = [one.oldest_pending_ms for one in each if one.oldest_pending_ms is not None]
    assert len(ages) == len({q.partition(i) for i in later})
    assert m.oldest_pending_ms is not None and m.oldest_pending_ms >= max(ages)


# ---- asyncio ----


def test_an_async_queue_lists_schedules_and_walks_a_partitioned_queue(server: Server) -> None:
    async def main() -> None:
        client = redis.asyncio.Redis(host="127.0.0.1", port=server.port)
        try:
            await AsyncQueue(client, "async-listed").span(4)
            q = AsyncQueue(client, "async-listed")
            for n in range(8):
                await q.cron(f"job-{n}", b"c", every=600)
            partitions = spans.names("async-listed", 4)
            for n in range(8):
                assert f"job-{n}" in crons_of(server.client(), partitions[route(4, f"job-{n}")])
            assert [one["name"] for one in await q.crons()] == [f"job-{n}" for n in range(8)]
            assert await q.uncron("job-5") is True and await q.uncron("job-5") is False
            assert len(await q.crons()) == 7

            every = await q.enqueue_many(b"%d" % n for n in range(60))
            for n in range(10):
                await q.enqueue(b"g", group=f"g{n}")
            seen: List[str] = []
            cursor, sizes = "0", []
            while True:
                cursor, page = await q.jobs("pending", cursor, count=7)
                seen += [j["id"] for j in page]
                sizes.append(len(page))
                if cursor == "0":
                    break
            assert sorted(seen) == sorted(every) and len(seen) == 60
            assert all(sizes[:-1])
            groups: List[str] = []
            cursor = "0"
            while True:
                cursor, found = await q.groups(cursor, count=3)
                groups += [g["group"] for g in found]
                if cursor == "0":
                    break
            assert sorted(groups) == sorted(f"g{n}" for n in range(10))
            with pytest.raises(ValueError):
                await q.jobs("pending", "9:0")
            m = await q.metrics()
            assert m.events["enqueued"] == 70 and m.oldest_pending_ms is not None
        finally:
            await client.aclose()

    asyncio.run(main())

