#!/usr/bin/env python3
"""Sends N enqueues of one kind to a server as one pipelined write, waits for every reply,
then shuts the server down. Used by scripts/profile.sh under callgrind.

    profile-driver.py <module|batch|native|lua|foreign|life|...> <port> <jobs> <lua-script>

`idle-module` and `idle-bare` write <jobs> queues of one job due in an hour (EMQ.ENQUEUE, or
the same keys as HSET and ZADD) and leave the server running.

`life` runs three phases, each one pipelined write whose replies are all read before the next:
EMQ.MENQUEUE x100, then EMQ.CLAIM COUNT 100 LEASE 60000 until every job is claimed, then one
EMQ.ACK per claimed job with its token. With PROFILE_CALLGRIND_PID set (the valgrind process
running the server), it has callgrind dump and zero its counters after each phase, so each
phase's instructions land in a file of their own (<out>.1 enqueue, .2 claim, .3 ack).

`groups-<G>` enqueues <jobs> jobs in G groups in turn, then claims them 100 at a time, a dump
after each phase (see `groups`).

`flows` runs <jobs> plain jobs' lives one command at a time, then <jobs>/10 flows of a parent and
10 children, a dump after each phase (see `flows`).
"""
import os
import socket
import subprocess
import sys
import time

ALPHABET = b"0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz"
PAYLOAD = b'{"sku":4242,"qty":1,"note":"forty-eight bytes!"}'


def resp(*args):
    out = b"*%d\r\n" % len(args)
    for a in args:
        a = a if isinstance(a, bytes) else str(a).encode()
        out += b"$%d\r\n%s\r\n" % (len(a), a)
    return out


def job_id(n):
    digits = b""
    for _ in range(11):
        digits = ALPHABET[n % 62:n % 62 + 1] + digits
        n //= 62
    return b"JOB" + digits


def read_replies(sock, count):
    """Reads until `count` top-level replies have arrived (integers, bulk strings, arrays)."""
    buf, pos, seen = b"", 0, 0

    def end_of(at):
        line_end = buf.find(b"\r\n", at)
        if line_end < 0:
            return None
        kind, body, nxt = buf[at:at + 1], buf[at + 1:line_end], line_end + 2
        if kind in b"+-:":
            if kind == b"-":
                raise SystemExit("error reply: " + body.decode(errors="replace"))
            return nxt
        if kind == b"$":
            n = int(body)
            return nxt if n < 0 else (nxt + n + 2 if nxt + n + 2 <= len(buf) else None)
        if kind == b"*":
            for _ in range(int(body)):
                nxt = end_of(nxt)
                if nxt is None:
                    return None
            return nxt
        raise SystemExit("unexpected reply")

    while seen < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk
        while seen < count:
            end = end_of(pos)
            if end is None:
                break
            pos, seen = end, seen + 1
    return buf[pos:]


def parse(buf, at):
    """One RESP value at `at`: (value, next position), or None while it is incomplete."""
    line_end = buf.find(b"\r\n", at)
    if line_end < 0:
        return None
    kind, body, nxt = buf[at:at + 1], buf[at + 1:line_end], line_end + 2
    if kind == b"-":
        raise SystemExit("error reply: " + body.decode(errors="replace"))
    if kind == b"+":
        return body, nxt
    if kind == b":":
        return int(body), nxt
    if kind == b"$":
        n = int(body)
        if n < 0:
            return None, nxt
        return (buf[nxt:nxt + n], nxt + n + 2) if nxt + n + 2 <= len(buf) else None
    if kind == b"*":
        n, items = int(body), []
        for _ in range(max(n, 0)):
            got = parse(buf, nxt)
            if got is None:
                return None
            item, nxt = got
            items.append(item)
        return (items if n >= 0 else None), nxt
    raise SystemExit("unexpected reply")


def read_values(sock, count):
    """Reads and returns `count` top-level replies."""
    buf, pos, values = b"", 0, []
    while len(values) < count:
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise SystemExit("connection closed")
        buf += chunk
        while len(values) < count:
            got = parse(buf, pos)
            if got is None:
                break
            value, pos = got
            values.append(value)
        buf, pos = buf[pos:], 0
    return values


def dump(phase):
    """Has callgrind write out and zero its counters, so `phase` gets a file of its own."""
    pid = os.environ.get("PROFILE_CALLGRIND_PID")
    if pid:
        done = subprocess.run(["callgrind_control", "--dump=" + phase, pid],
                              capture_output=True, text=True)
        if done.returncode != 0:
            raise SystemExit("callgrind_control: " + done.stdout + done.stderr)


def menqueue_calls(jobs):
    """`jobs` jobs as `EMQ.MENQUEUE` calls of 100, encoded."""
    calls = []
    for start in range(0, jobs, 100):
        args = ["EMQ.MENQUEUE", "bench"]
        for i in range(start, min(start + 100, jobs)):
            args += [job_id(i + 1), PAYLOAD]
        calls.append(resp(*args))
    return calls


def enqueue_batches(sock, jobs):
    """The enqueue phase of a life: `jobs` jobs as `EMQ.MENQUEUE` ×100, then a dump."""
    calls = menqueue_calls(jobs)
    sock.sendall(b"".join(calls))
    read_replies(sock, len(calls))
    dump("enqueue")


def life(sock, jobs, limits=(), mack=False):
    """Enqueue, claim and ack `jobs` jobs, one phase after another (see the module's doc); with
    `limits`, the options of an `EMQ.LIMIT` of the queue (limits that never bind); with `mack`,
    the acks go as `EMQ.MACK` of each claim's 100 jobs."""
    if limits:
        sock.sendall(resp("EMQ.LIMIT", "bench", *limits))
        read_replies(sock, 1)
    enqueue_batches(sock, jobs)
    claims = (jobs + 99) // 100
    sock.sendall(resp("EMQ.CLAIM", "bench", "COUNT", "100", "LEASE", "60000") * claims)
    claimed = [job for reply in read_values(sock, claims) for job in reply]
    if len(claimed) != jobs:
        raise SystemExit("claimed %d of %d jobs" % (len(claimed), jobs))
    dump("claim")
    if mack:
        calls = []
        for start in range(0, jobs, 100):
            args = ["EMQ.MACK", "bench"]
            for job in claimed[start:start + 100]:
                args += [job[0], job[2]]
            calls.append(resp(*args))
        sock.sendall(b"".join(calls))
        acks = [a for reply in read_values(sock, len(calls)) for a in reply]
    else:
        sock.sendall(b"".join(resp("EMQ.ACK", "bench", job[0], job[2]) for job in claimed))
        acks = read_values(sock, jobs)
    if len(acks) != jobs or any(a != 1 for a in acks):
        raise SystemExit("an ack did not reply 1")
    dump("ack")


def life_next(sock, jobs, next_in_ack=True):
    """Enqueue `jobs` jobs, claim the first 100, then settle each batch with `EMQ.MACK ... CLAIM
    100`, which replies the next batch (one call a batch, each waiting for the last's reply), and
    the last batch with a plain `EMQ.MACK`: the phase after the first claim is every job's claim
    and acknowledgement. Without `next_in_ack`, each batch is settled by a plain `EMQ.MACK` and
    the next claimed by its own `EMQ.CLAIM COUNT 100` (two calls a batch, pipelined): the same
    sizes of the `active` set."""
    enqueue_batches(sock, jobs)
    claim = resp("EMQ.CLAIM", "bench", "COUNT", "100", "LEASE", "60000")
    sock.sendall(claim)
    batch = read_values(sock, 1)[0]
    dump("first-claim")
    settled = 0
    while batch:
        args, sent = ["EMQ.MACK", "bench"], len(batch)
        for job in batch:
            args += [job[0], job[2]]
        last = settled + sent >= jobs
        if next_in_ack and not last:
            args += ["CLAIM", "100", "LEASE", "60000"]
            sock.sendall(resp(*args))
            acks, batch = read_values(sock, 1)[0]
        else:
            sock.sendall(resp(*args) + (b"" if last else claim))
            replies = read_values(sock, 1 if last else 2)
            acks, batch = replies[0], ([] if last else replies[1])
        if len(acks) != sent or any(a != 1 for a in acks):
            raise SystemExit("a settle did not reply 1")
        settled += sent
    if settled != jobs:
        raise SystemExit("settled %d of %d jobs" % (settled, jobs))
    dump("claim-next" if next_in_ack else "claim-then-mack")


def claim_and_ack(sock, queue, jobs, phase):
    """`EMQ.CLAIM <queue> COUNT 1` `jobs` times, then an `EMQ.ACK` of each job taken: a dump
    after each (`<phase>-claim`, `<phase>-ack`)."""
    sock.sendall(resp("EMQ.CLAIM", queue, "COUNT", "1", "LEASE", "60000") * jobs)
    claimed = [reply[0] for reply in read_values(sock, jobs) if reply]
    if len(claimed) != jobs:
        raise SystemExit("claimed %d of %d jobs" % (len(claimed), jobs))
    dump(phase + "-claim")
    sock.sendall(b"".join(resp("EMQ.ACK", queue, job[0], job[2]) for job in claimed))
    if any(a != 1 for a in read_values(sock, jobs)):
        raise SystemExit("an ack did not reply 1")
    dump(phase + "-ack")


def flows(sock, jobs):
    """`jobs` plain jobs' lives one command at a time (`EMQ.ENQUEUE`, `EMQ.CLAIM COUNT 1`,
    `EMQ.ACK`), then `jobs / 10` flows of 1 parent and 10 children the same way: the parents
    (`CHILDREN 10`), the children (`PARENT`, each registering with its parent), the children
    claimed and acked (each ack handing over to its parent in its call; the last releases it),
    the parents claimed and acked; a dump after each phase (.1 to .9)."""
    sock.sendall(b"".join(resp("EMQ.ENQUEUE", "plain", job_id(i + 1), PAYLOAD) for i in range(jobs)))
    read_replies(sock, jobs)
    dump("plain-enqueue")
    claim_and_ack(sock, "plain", jobs, "plain")
    parents = [job_id(jobs + f + 1) for f in range(jobs // 10)]
    sock.sendall(b"".join(resp("EMQ.ENQUEUE", "flows", p, PAYLOAD, "CHILDREN", "10") for p in parents))
    read_replies(sock, len(parents))
    dump("parent-enqueue")
    sock.sendall(b"".join(
        resp("EMQ.ENQUEUE", "kids", job_id(2 * jobs + 10 * f + k + 1), PAYLOAD, "PARENT", "flows", p)
        for f, p in enumerate(parents) for k in range(10)
    ))
    read_replies(sock, 10 * len(parents))
    dump("child-enqueue")
    claim_and_ack(sock, "kids", 10 * len(parents), "child")
    claim_and_ack(sock, "flows", len(parents), "parent")


def groups(sock, jobs, many):
    """`jobs` jobs enqueued one `EMQ.ENQUEUE ... GROUP g<n mod many>` each, then claimed with
    `EMQ.CLAIM COUNT 100` until none is left (each claim takes one job from each of 100 groups
    when `many` is 100 or more): a dump after each (.1 enqueue, .2 claim)."""
    sock.sendall(b"".join(
        resp("EMQ.ENQUEUE", "bench", job_id(i + 1), PAYLOAD, "GROUP", "g%d" % (i % many))
        for i in range(jobs)
    ))
    read_replies(sock, jobs)
    dump("enqueue")
    claims = (jobs + 99) // 100
    sock.sendall(resp("EMQ.CLAIM", "bench", "COUNT", "100", "LEASE", "60000") * claims)
    claimed = sum(len(reply) for reply in read_values(sock, claims))
    if claimed != jobs:
        raise SystemExit("claimed %d of %d jobs" % (claimed, jobs))
    dump("claim")


def main():
    mode, port, jobs, script_path = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    sock = socket.create_connection(("127.0.0.1", port))
    row = lambda i: b"emq:{bench}:job:" + job_id(i)
    if mode == "module":
        buf, replies = b"".join(resp("EMQ.ENQUEUE", "bench", job_id(i + 1), PAYLOAD) for i in range(jobs)), jobs
    elif mode == "unique":
        # Each job with a unique key of its own: a lookup and a table entry a job.
        buf = b"".join(
            resp("EMQ.ENQUEUE", "bench", job_id(i + 1), PAYLOAD, "UNIQUE", job_id(i + 1))
            for i in range(jobs)
        )
        replies = jobs
    elif mode == "batch":
        calls = menqueue_calls(jobs)
        buf, replies = b"".join(calls), len(calls)
    elif mode == "native":
        buf = b"".join(
            resp("HSET", row(i + 1), "state", "pending", "attempts", "0", "payload", PAYLOAD)
            + resp("ZADD", "emq:{bench}:pending", "0", job_id(i + 1))
            for i in range(jobs)
        )
        replies = 2 * jobs
    elif mode == "lua":
        sock.sendall(resp("SCRIPT", "LOAD", open(script_path, "rb").read()))
        sha = b""
        while sha.count(b"\r\n") < 2:
            sha += sock.recv(4096)
        sha = sha.split(b"\r\n")[1]
        buf = b"".join(
            resp("EVALSHA", sha, "2", row(i + 1), "emq:{bench}:pending", job_id(i + 1), PAYLOAD)
            for i in range(jobs)
        )
        replies = jobs
    elif mode == "foreign":
        # Keys that are not EchoMQ's: what loading the module costs other workloads.
        buf = b"".join(
            resp("ZADD", b"other:%d" % i, "1", "m")
            + resp("SET", b"cache:%d" % i, "v", "EX", "100")
            + resp("DEL", b"other:%d" % i)
            for i in range(jobs)
        )
        replies = 3 * jobs
    elif mode in ("life-next", "life-batches"):
        life_next(sock, jobs, next_in_ack=mode == "life-next")
        buf, replies = b"", 0
    elif mode == "life-mack":
        life(sock, jobs, mack=True)
        buf, replies = b"", 0
    elif mode in ("life", "life-concurrency", "life-limits"):
        limits = {
            "life": (),
            "life-concurrency": ("CONCURRENCY", "1000000"),
            "life-limits": ("CONCURRENCY", "1000000", "RATE", "10000", "PER", "1"),
        }[mode]
        life(sock, jobs, limits)
        buf, replies = b"", 0
    elif mode.startswith("groups-"):
        groups(sock, jobs, int(mode.split("-")[1]))
        buf, replies = b"", 0
    elif mode == "flows":
        flows(sock, jobs)
        buf, replies = b"", 0
    elif mode in ("idle-module", "idle-bare"):
        # Queues of one job due in an hour each, for an idle server to hold; it keeps running.
        due = int(time.time() * 1000) + 3_600_000
        for start in range(0, jobs, 1000):
            if mode == "idle-module":
                buf = b"".join(
                    resp("EMQ.ENQUEUE", b"idle%d" % i, job_id(i + 1), "x", "DELAY", "3600000")
                    for i in range(start, min(start + 1000, jobs))
                )
                replies = min(start + 1000, jobs) - start
            else:
                buf = b"".join(
                    resp("HSET", b"emq:{idle%d}:job:" % i + job_id(i + 1), "state", "scheduled",
                         "attempts", "0", "payload", "x")
                    + resp("ZADD", b"emq:{idle%d}:schedule" % i, due, job_id(i + 1))
                    for i in range(start, min(start + 1000, jobs))
                )
                replies = 2 * (min(start + 1000, jobs) - start)
            sock.sendall(buf)
            read_replies(sock, replies)
        return
    else:
        raise SystemExit(
            "mode: module, unique, batch, native, lua, foreign, life, life-mack, life-next, life-batches, life-concurrency,"
            " life-limits, flows, idle-module or idle-bare"
        )
    if buf:
        sock.sendall(buf)
        read_replies(sock, replies)
    sock.sendall(resp("SHUTDOWN", "NOSAVE"))


if __name__ == "__main__":
    main()
