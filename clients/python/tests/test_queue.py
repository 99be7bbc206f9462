"""The producer API against a real server: ids minted here and idempotent retries, batches,
options, typed errors, and the operations."""

from __future__ import annotations

import threading
import time
from typing import List

import pytest
import redis

import echomq
from echomq import ids
from conftest import Server, until


def test_minted_ids_are_job_ids_in_mint_order(server: Server) -> None:
    minted = [ids.mint() for _ in range(1000)]
    assert minted == sorted(minted) and len(set(minted)) == 1000
    assert all(len(i) == 14 and i.startswith("JOB") for i in minted)
    assert server.cmd("EMQ.DECODE", f"emq:{{q}}:job:{minted[0]}")


def test_an_enqueue_retried_with_its_id_is_one_job(server: Server) -> None:
    q = echomq.Queue(server.client(), "orders")
    job_id = q.enqueue(b"order 7")
    assert q.enqueue(b"order 7", id=job_id) == job_id
    assert q.stats()["pending"] == 1
    job = q.job(job_id)
    assert job is not None and job["payload"] == "order 7" and job["state"] == "pending"


def test_batches_options_and_operations(server: Server) -> None:
    q = echomq.Queue(server.client(), "ops", serializer=echomq.Json())
    many = q.enqueue_many(({"n": n} for n in range(2500)), chunk=1000)
    assert len(many) == 2500 and q.stats()["pending"] == 2500
    later = q.enqueue({"late": True}, delay=60)
    assert q.stats()["scheduled"] == 1
    assert q.cancel(later) and not q.cancel(later)
    urgent = q.enqueue({"urgent": True}, priority=-5)
    claimed = server.cmd("EMQ.CLAIM", "ops")
    assert claimed[0][0].decode() == urgent, "the lower priority first"
    assert q.pause() and not q.pause() and q.resume()
    assert q.purge("pending", count=500) == 2500, "every pending job, 500 a call"
    with pytest.raises(ValueError):
        q.purge("pending", count=0)
    limits = q.limit(concurrency=3, rate=10, per=1.5)
    assert (limits["concurrency"], limits["rate"], limits["rate-per"]) == (3, 10, 1500)
    assert q.limit(off=True)["concurrency"] is None
    assert q.cron("tick", {"tick": 1}, every=60) > time.time() * 1000
    assert q.uncron("tick") and not q.uncron("tick")


def test_a_batch_s_jobs_carry_their_own_ids_priorities_and_headers(server: Server) -> None:
    q = echomq.Queue(server.client(), "bulk")
    given = echomq.mint()
    jobs = [
        echomq.BulkJob(b"urgent", id=given, priority=-5),
        b"plain",
        echomq.BulkJob(b"tagged", headers={"k": "v", "tenant": "mine"}),
    ]
    ids = q.enqueue_many(jobs, headers={"tenant": "acme"})
    assert ids[0] == given and len(set(ids)) == 3
    urgent, plain, tagged = (q.job(i) for i in ids)
    assert urgent is not None and urgent["priority"] == -5
    assert plain is not None and plain["headers"] == {"tenant": "acme"}
    assert tagged is not None and tagged["headers"] == {"tenant": "mine", "k": "v"}
    claimed = server.cmd("EMQ.CLAIM", "bulk")
    assert claimed[0][0].decode() == given, "its priority first"
    # Sent again with its id: written once.
    assert q.enqueue_many([echomq.BulkJob(b"urgent", id=given)]) == [given]
    assert q.stats()["pending"] == 2


def test_pages_of_a_set_and_the_schedules(server: Server) -> None:
    q = echomq.Queue(server.client(), "pages")
    ids = q.enqueue_many(b"job %d" % n for n in range(5))
    later = q.enqueue(b"later", delay=60)
    seen = []
    cursor = "0"
    while True:
        cursor, page = q.jobs("pending", cursor=cursor, count=2, payloads=True)
        assert len(page) <= 2
        seen += [(j["id"], j["payload"], j["error"]) for j in page]
        if cursor == "0":
            break
    assert seen == [(i, f"job {n}", None) for n, i in enumerate(ids)], "mint order, each once"
    _, scheduled = q.jobs("scheduled")
    assert [j["id"] for j in scheduled] == [later] and scheduled[0]["due"] > time.time() * 1000
    assert q.crons() == []
    q.cron("nightly", b"report", spec="0 3 * * *")
    q.cron("beat", b"ping", every=1.5, priority=-1)
    assert [(c["name"], c["spec"], c["every"], c["priority"], c["payload"], c["last"]) for c in q.crons()] == [
        ("beat", None, 1500, -1, "ping", None),
        ("nightly", "0 3 * * *", None, 0, "report", None),
    ]
    with pytest.raises(echomq.EmqSetError):
        q.jobs("done")


def test_a_held_unique_key_answers_the_holders_id(server: Server) -> None:
    q = echomq.Queue(server.client(), "uniq")
    first = q.enqueue(b"welcome ann", unique="welcome:ann", unique_for=60)
    assert q.enqueue(b"welcome ann", unique="welcome:ann", unique_for=60) == first
    assert q.stats()["pending"] == 1


def test_refusals_are_typed_and_unknown_errors_stay_plain(server: Server) -> None:
    with pytest.raises(echomq.EmqQueueNameError):
        echomq.Queue(server.client(), "bad{name}").stats()
    q = echomq.Queue(server.client(), "typed")
    with pytest.raises(echomq.EmqKindError):
        q.enqueue(b"x", id="ORD0NgWEfAEJfs")
    with pytest.raises(echomq.EmqSetError):
        q.purge("active")
    with pytest.raises(echomq.EmqCronError):
        q.cron("bad", b"x", spec="61 * * * *")
    with pytest.raises(echomq.EmqLeaseLost):
        q.call("EMQ.ACK", q.enqueue(b"x"), 1)
    try:
        q.call("EMQ.STATS", "extra", "args")
    except redis.ResponseError as e:
        assert type(e) is redis.ResponseError, "an error EchoMQ does not type stays plain"
    else:
        raise AssertionError("EMQ.STATS with extra arguments answered")


def test_valkey_py_refusals_are_typed_and_still_valkey_py_s(server: Server) -> None:
    import valkey
    import valkey.exceptions

    from echomq._retry import transient

    q = echomq.Queue(valkey.Valkey(host="127.0.0.1", port=server.port), "typed-valkey")
    with pytest.raises(echomq.EmqLeaseLost) as lost:
        q.call("EMQ.ACK", q.enqueue(b"x"), 1)
    assert isinstance(lost.value, valkey.exceptions.ResponseError)
    assert isinstance(lost.value, redis.ResponseError)
    try:
        q.call("EMQ.STATS", "extra", "args")
    except valkey.exceptions.ResponseError as e:
        assert type(e) is valkey.exceptions.ResponseError, "an error EchoMQ does not type stays plain"
    else:
        raise AssertionError("EMQ.STATS with extra arguments answered")
    # valkey-py's lost connection and cluster refusals are tried again, as redis-py's are.
    assert transient(valkey.exceptions.ConnectionError("Connection refused"))
    assert transient(valkey.exceptions.ResponseError("TRYAGAIN Multiple keys request during rehashing of slot"))
    assert transient(
        valkey.exceptions.ValkeyClusterException(
            "Valkey Cluster cannot be connected. Please provide at least one reachable node: reset"
        )
    )
    assert not transient(valkey.exceptions.ResponseError("EMQLEASE stale or missing lease token"))


def test_the_protocol_fence() -> None:
    echomq.check_version(b"echomq:2.0.0")
    echomq.check_version("echomq:2.7.1")
    with pytest.raises(echomq.EmqVersionError, match="echomq:3.0.0"):
        echomq.check_version(b"echomq:3.0.0")
    with pytest.raises(echomq.EmqVersionError):
        echomq.check_version(b"something else")


def test_the_event_stream_read_as_it_comes(server: Server) -> None:
    q = echomq.Queue(server.client(), "ev")
    assert q.enable_events(maxlen=1000) and not q.enable_events(maxlen=1000)
    job_id = q.enqueue(b"x")
    server.cmd("EMQ.CLAIM", "ev")
    server.cmd("EMQ.ACK", "ev", job_id, 1)
    seen = []
    for event in q.events(start="0", block=0.1):
        seen.append(event)
        if len(seen) == 3:
            break
    assert [(e.event, e.id, e.attempt) for e in seen] == [
        ("enqueued", job_id, 0), ("claimed", job_id, 1), ("acked", job_id, 1),
    ]
    # From "$" (the newest entry when the reading starts): what comes after it, nothing before
    # it, after reads that waited for nothing (whether the enqueue lands between two reads is
    # the scheduler's; the Rust client's test makes it land there).
    later: List[echomq.QueueEvent] = []
    server.cmd("CONFIG", "RESETSTAT")

    def listen() -> None:
        later.append(next(q.events(block=0.05)))

    t = threading.Thread(target=listen, daemon=True)
    t.start()

    def reads() -> int:
        stats = server.client().info("commandstats").get("cmdstat_xread", {})
        return int(stats.get("calls", 0))

    assert until(lambda: reads() >= 2), "a read waited for nothing, and another began"
    second = q.enqueue(b"y")
    t.join(10)
    assert [(e.event, e.id) for e in later] == [("enqueued", second)]
    # Read over RESP3 alike.
    resp3 = echomq.Queue(redis.Redis(port=server.port, protocol=3), "ev")
    events = resp3.events(start="0", block=0.05)
    assert [next(events).event for _ in range(4)] == ["enqueued", "claimed", "acked", "enqueued"]
    assert q.disable_events() and not q.disable_events()


def test_a_partitioned_queue_s_events_are_its_partitions(server: Server) -> None:
    q = echomq.Queue(server.client(), "wide-ev")
    assert q.span(3)
    assert q.enable_events()
    for n in range(3):
        part = echomq.partitions.name("wide-ev", n, 3)
        assert server.cmd("EMQ.EVENTS", part, "ON") == 0, f"{part}'s stream is on"
    with pytest.raises(ValueError, match="partitioned"):
        next(q.events())
    assert q.disable_events()
