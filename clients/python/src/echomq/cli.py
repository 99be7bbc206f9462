"""``echomq``: a worker from a handler's module path (as ``rq worker`` takes one), and the
queue's operations from the shell.

    echomq worker myapp.jobs:send_email --queue emails --concurrency 8
    echomq enqueue emails '{"to": "ann"}' --delay 60
    echomq stats emails
    echomq dead emails --count 20
    echomq requeue emails --dead

The connection options (``--url``, ``--cluster``, ``--json``) go before the subcommand or
after it: ``echomq worker app:handle --url redis://...`` as ``rq worker --url`` takes it.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import sys
from typing import Any, Callable, List, Optional, Tuple

from redis.exceptions import RedisError

from .commands import text
from .job import Job
from .queue import Queue
from .worker import Worker


def client_for(args: argparse.Namespace) -> Any:
    """The server to talk to: ``--cluster URL`` (any node of a cluster) or ``--url URL``."""
    if args.cluster:
        from redis.cluster import RedisCluster

        return RedisCluster.from_url(args.cluster)
    import redis

    return redis.Redis.from_url(args.url)


def load_handler(path: str) -> Callable[[Job], Any]:
    """``package.module:function`` (or ``package.module.function``), imported."""
    module_name, sep, attr = path.partition(":")
    if not sep:
        module_name, _, attr = path.rpartition(".")
    if not module_name or not attr:
        raise SystemExit(f"echomq: {path!r} is not module:function")
    handler = getattr(importlib.import_module(module_name), attr, None)
    if not callable(handler):
        raise SystemExit(f"echomq: {path!r} is not a callable")
    result: Callable[[Job], Any] = handler
    return result


def show(value: Any, as_json: bool) -> None:
    if as_json:
        print(json.dumps(value, default=lambda v: text(v) if isinstance(v, bytes) else str(v)))
    elif isinstance(value, dict):
        for k, v in value.items():
            print(f"{k}: {'-' if v is None else text(v)}")
    elif isinstance(value, list):
        for item in value:
            show(item, as_json)
    else:
        print(text(value))


#: The server when no ``--url`` is given, before the subcommand or after it.
DEFAULT_URL = "redis://127.0.0.1:6379"


def header_pair(text: str) -> Tuple[str, str]:
    """A `--header` as its key and value: `<key>=<value>`, or a usage error."""
    key, equals, value = text.partition("=")
    if not equals:
        raise argparse.ArgumentTypeError(f"a header is <key>=<value>, not {text!r}")
    return key, value


def connection(defaults: bool) -> argparse.ArgumentParser:
    """The connection options: a parent of the top parser, with their defaults (`defaults`),
    and of each subcommand's, without them (``SUPPRESS``), so that one given after the
    subcommand wins and one not given there leaves what came before it."""
    unset = argparse.SUPPRESS
    p = argparse.ArgumentParser(add_help=False)
    p.add_argument(
        "--url", default=DEFAULT_URL if defaults else unset,
        help=f"the server (default: {DEFAULT_URL})",
    )
    p.add_argument(
        "--cluster", default=None if defaults else unset, metavar="URL",
        help="any node of a cluster, instead of --url",
    )
    p.add_argument(
        "--json", action="store_true", default=False if defaults else unset,
        help="print JSON, for scripts",
    )
    return p


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="echomq", description="EchoMQ's worker and queue operations", parents=[connection(True)]
    )
    sub = p.add_subparsers(dest="command", required=True)
    options = [connection(False)]

    w = sub.add_parser("worker", parents=options, help="run a worker: module:function is the handler")
    w.add_argument("handler")
    w.add_argument("--queue", required=True)
    w.add_argument("--concurrency", type=int, default=4)
    w.add_argument("--lease", type=float, default=30.0, help="seconds (default %(default)s)")
    w.add_argument("--batch", type=int, help="most jobs a claim takes (default: the concurrency)")
    w.add_argument("--shutdown-timeout", type=float, default=30.0)

    e = sub.add_parser("enqueue", parents=options, help="enqueue one job; prints its id")
    e.add_argument("queue")
    e.add_argument("payload")
    e.add_argument("--delay", type=float)
    e.add_argument("--priority", type=int)
    e.add_argument("--unique")
    e.add_argument("--timeout", type=float, help="seconds each attempt may run")
    e.add_argument("--group", help="the job's group (a tenant, say): claims take groups in turn")
    e.add_argument("--header", action="append", default=[], type=header_pair, metavar="KEY=VALUE",
                   help="a header the job carries to each attempt (repeatable)")

    s = sub.add_parser("stats", parents=options, help="a queue's counts, pause flag and limits")
    s.add_argument("queue")

    d = sub.add_parser("dead", parents=options, help="the oldest dead jobs, with their errors")
    d.add_argument("queue")
    d.add_argument("--count", type=int, default=10)

    r = sub.add_parser("requeue", parents=options, help="a dead job back to pending, or with --dead the oldest dead ones")
    r.add_argument("queue")
    r.add_argument("id", nargs="?")
    r.add_argument("--dead", action="store_true")
    r.add_argument("--count", type=int)
    return p


def main(argv: Optional[List[str]] = None) -> int:
    args = parser().parse_args(argv)
    try:
        client = client_for(args)
        if args.command == "worker":
            logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
            worker = Worker(
                client,
                args.queue,
                load_handler(args.handler),
                concurrency=args.concurrency,
                lease=args.lease,
                batch=args.batch,
                shutdown_timeout=args.shutdown_timeout,
            )
            worker.run()
            show(worker.counts, args.json)
            return 0
        q = Queue(client, args.queue)
        if args.command == "enqueue":
            headers = dict(args.header)
            show(q.enqueue(args.payload, delay=args.delay, priority=args.priority, unique=args.unique,
                           timeout=args.timeout, group=args.group, headers=headers), args.json)
        elif args.command == "stats":
            show(q.stats(), args.json)
        elif args.command == "dead":
            show(q.jobs("dead", count=args.count, payloads=True)[1], args.json)
        elif args.command == "requeue":
            if args.dead:
                show(q.requeue_dead(args.count), args.json)
            elif args.id:
                show(int(q.requeue(args.id)), args.json)
            else:
                raise SystemExit("echomq: requeue takes an id, or --dead")
        return 0
    except RedisError as e:
        print(f"echomq: {e}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
