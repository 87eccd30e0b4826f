"""``aiokafka-ng consume``: print a topic's records to stdout.

Without ``--group`` the command assigns itself every partition of the topic (or those given
with ``--partition``) and commits nothing; with ``--group`` it joins that consumer group and
commits what it printed when it stops. ``--max-records`` stops after exactly that many
records (``getmany`` is asked for no more than are still wanted, so a group commits only
what was printed); ``--timeout`` stops after that many seconds without a new record; Ctrl-C
(SIGINT) or SIGTERM stops it cleanly, committing too, and the command then exits 130 (143 for
SIGTERM) as docs/cli.md says, after its summary line.
"""

from __future__ import annotations

import argparse
import base64
import json
import sys
from typing import TYPE_CHECKING, Any, BinaryIO

import anyio

from aiokafka_ng.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_connection_args,
    cancel_on_signal,
    client_settings,
    exit_code_for_signal,
    probe,
    run,
)

if TYPE_CHECKING:
    from aiokafka_ng.consumer import ConsumerRecord

FORMATS = ("value", "kv", "json", "full")


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("consume", help="print records of a topic")
    add_connection_args(p)
    p.add_argument("topic")
    p.add_argument("-g", "--group", help="consumer group to join (default: none, no commits)")
    start = p.add_mutually_exclusive_group()
    start.add_argument(
        "--from-beginning",
        dest="offset_reset",
        action="store_const",
        const="earliest",
        help="start at the earliest offset when there is no committed one",
    )
    start.add_argument(
        "--latest",
        dest="offset_reset",
        action="store_const",
        const="latest",
        help="start at the end when there is no committed one (the default)",
    )
    p.add_argument("-n", "--max-records", type=int, help="stop after N records")
    p.add_argument(
        "--timeout", type=float, metavar="SECONDS", help="stop after SECONDS without a record"
    )
    p.add_argument("-P", "--partition", type=int, action="append", help="read only this partition")
    p.add_argument(
        "--format",
        choices=FORMATS,
        default="value",
        help="value (default), kv (key SEP value), json (one object a line), full",
    )
    p.add_argument("-K", "--key-separator", default="\t", metavar="SEP", help="for --format kv")
    p.add_argument(
        "--session-timeout-ms",
        type=int,
        default=10000,
        help="group session timeout (default: 10000; some brokers delay a new group's first "
        "join by half of it)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line on stderr")
    p.set_defaults(func=cmd_consume, offset_reset="latest")


def _text(data: bytes | None) -> str | None:
    return None if data is None else data.decode("utf-8", errors="backslashreplace")


def _json_bytes(data: bytes | None) -> Any:
    if data is None:
        return None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        return {"base64": base64.b64encode(data).decode("ascii")}


class _Formatter:
    def __init__(self, fmt: str, sep: str) -> None:
        self.fmt = fmt
        self.sep = sep.encode()

    def __call__(self, rec: ConsumerRecord[Any, Any]) -> bytes:
        key: bytes | None = rec.key
        value: bytes | None = rec.value
        if self.fmt == "value":
            return value or b""
        if self.fmt == "kv":
            return (key or b"") + self.sep + (value or b"")
        if self.fmt == "json":
            doc = {
                "topic": rec.topic,
                "partition": rec.partition,
                "offset": rec.offset,
                "timestamp": rec.timestamp,
                "key": _json_bytes(key),
                "value": _json_bytes(value),
                "headers": [[k, _json_bytes(v)] for k, v in rec.headers],
            }
            return json.dumps(doc, separators=(",", ":")).encode()
        return (
            f"{rec.topic}[{rec.partition}]@{rec.offset} ts={rec.timestamp} "
            f"key={_text(key)!r} value={_text(value)!r} headers={list(rec.headers)!r}"
        ).encode()


def cmd_consume(args: argparse.Namespace) -> int:
    if args.max_records is not None and args.max_records < 1:
        raise CliError("--max-records must be at least 1", EXIT_USAGE)
    out = sys.stdout.buffer
    received: list[int] = []
    try:
        count = run(_consume, args, out, received, backend=args.backend)
    except BrokenPipeError:
        # The reader (`| head`) went away: that is how such a pipeline ends, not an error.
        return EXIT_OK
    if not args.quiet:
        print(f"consumed {count} records from {args.topic}", file=sys.stderr)
    return exit_code_for_signal(received[0]) if received else EXIT_OK


async def _consume(args: argparse.Namespace, out: BinaryIO, received: list[int]) -> int:
    from aiokafka_ng.consumer import Consumer, ConsumerConfig, TopicPartition

    await probe(args.bootstrap_servers, args.connect_timeout)
    fmt = _Formatter(args.format, args.key_separator)
    config: dict[str, Any] = {
        "auto_offset_reset": args.offset_reset,
        "allow_auto_create_topics": False,
    }
    if args.group:
        config["group_id"] = args.group
        config["session_timeout_ms"] = args.session_timeout_ms
        config["heartbeat_interval_ms"] = max(1, min(3000, args.session_timeout_ms // 3))
    count = 0
    async with Consumer(**client_settings(args, ConsumerConfig, **config)) as consumer:
        if args.topic not in await consumer.topics():
            raise CliError(f"topic {args.topic!r} does not exist")
        if args.group:
            if args.partition:
                raise CliError("--partition cannot be combined with --group", EXIT_USAGE)
            consumer.subscribe([args.topic])
            # Join first, so that --timeout counts time without records, not the join.
            await consumer.wait_for_assignment(timeout_ms=int(args.connect_timeout * 1000) + 60000)
        else:
            known = await consumer.partitions_for_topic(args.topic)
            wanted = sorted(set(args.partition) if args.partition else known)
            missing = [p for p in wanted if p not in known]
            if missing:
                raise CliError(f"topic {args.topic!r} has no partition {missing[0]}")
            consumer.assign(TopicPartition(args.topic, p) for p in wanted)
        idle_ms = int(args.timeout * 1000) if args.timeout is not None else 1000
        async with anyio.create_task_group() as tg:
            stop = anyio.CancelScope()
            await tg.start(cancel_on_signal, stop, received)
            with stop:
                while args.max_records is None or count < args.max_records:
                    want = None if args.max_records is None else args.max_records - count
                    batches = await consumer.getmany(timeout_ms=idle_ms, max_records=want)
                    if not batches:
                        if args.timeout is not None:
                            break
                        continue
                    lines = [fmt(rec) for records in batches.values() for rec in records]
                    out.write(b"\n".join(lines) + b"\n")
                    out.flush()
                    count += len(lines)
            tg.cancel_scope.cancel()
    return count


__all__ = ["register"]
