"""``aiokafka-ng produce``: lines from stdin or a file become records.

Lines are read in a worker thread (up to 64 KiB at a time) so a slow pipe or a person
typing never blocks the event loop, where the producer's senders run. Each line, minus its
line ending, is one record; with ``--key-separator`` the text before the first separator is
the key. Delivery failures are counted by a done-callback; the command exits 1 if any
record failed, after flushing everything else.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import IO, TYPE_CHECKING

import anyio
import anyio.to_thread

from aiokafka_ng.cli._common import (
    EXIT_OK,
    CliError,
    add_connection_args,
    client_settings,
    first_line,
    isatty_stderr,
    parse_key_values,
    probe,
    progress_bar,
    run,
    stderr_console,
)

if TYPE_CHECKING:
    from aiokafka_ng.producer import DeliveryFuture

_READ_HINT = 1 << 16


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("produce", help="send lines from stdin or a file as records")
    add_connection_args(p)
    p.add_argument("topic")
    p.add_argument("-f", "--file", help="read lines from FILE instead of stdin")
    p.add_argument(
        "-K",
        "--key-separator",
        metavar="SEP",
        help="split each line at the first SEP into key and value (a line without SEP fails)",
    )
    p.add_argument(
        "-H", "--header", action="append", metavar="KEY=VALUE", help="header for every record"
    )
    p.add_argument("-P", "--partition", type=int, help="write every record to this partition")
    p.add_argument("--acks", choices=["all", "1", "0"], default="all")
    p.add_argument(
        "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none"
    )
    p.add_argument("--linger-ms", type=float, default=5.0)
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bar on stderr (default: when stderr is a terminal)",
    )
    p.add_argument("-q", "--quiet", action="store_true", help="no summary line")
    p.set_defaults(func=cmd_produce)


def _count_lines(path: str) -> int:
    count = 0
    last = b"\n"
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            count += chunk.count(b"\n")
            last = chunk[-1:]
    return count + (0 if last == b"\n" else 1)


def cmd_produce(args: argparse.Namespace) -> int:
    headers = [(k, v.encode()) for k, v in parse_key_values(args.header, "--header").items()]
    sep: bytes | None = args.key_separator.encode() if args.key_separator else None
    total: int | None = None
    stream: IO[bytes]
    if args.file:
        try:
            total = _count_lines(args.file)
            stream = open(args.file, "rb")  # noqa: SIM115 (closed in finally below)
        except OSError as exc:
            raise CliError(f"cannot read {args.file}: {exc.strerror or exc}") from None
    else:
        stream = sys.stdin.buffer
    show = isatty_stderr() if args.progress is None else args.progress
    try:
        sent, failed, first_error, elapsed = run(
            _produce, args, stream, sep, headers or None, total, show, backend=args.backend
        )
    finally:
        if args.file:
            stream.close()
    if failed:
        raise CliError(f"{failed} of {sent} records failed; first error: {first_error}")
    if not args.quiet:
        rate = sent / elapsed if elapsed > 0 else 0.0
        print(
            f"produced {sent} records to {args.topic} in {elapsed:.2f} s ({rate:,.0f} records/s)",
            file=sys.stderr,
        )
    return EXIT_OK


async def _produce(
    args: argparse.Namespace,
    stream: IO[bytes],
    sep: bytes | None,
    headers: list[tuple[str, bytes | None]] | None,
    total: int | None,
    show: bool,
) -> tuple[int, int, str, float]:
    from aiokafka_ng.config import ProducerConfig
    from aiokafka_ng.producer import Producer

    await probe(args.bootstrap_servers, args.connect_timeout)
    failed = 0
    first_error = ""

    def on_done(fut: DeliveryFuture) -> None:
        nonlocal failed, first_error
        exc = fut.exception()
        if exc is not None:
            failed += 1
            if not first_error:
                first_error = first_line(exc)

    sent = 0
    started = time.perf_counter()
    settings = client_settings(
        args,
        ProducerConfig,
        acks=args.acks,
        compression_type=args.compression,
        linger_ms=args.linger_ms,
        max_block_ms=int(args.connect_timeout * 1000),
    )
    async with Producer(**settings) as producer:
        # Fails (KafkaTimeoutError) within --connect-timeout when the topic has no metadata;
        # the same bound applies to send() waiting for buffer space behind a stuck broker.
        await producer.partitions_for(args.topic)
        started = time.perf_counter()
        send = producer.send
        topic = args.topic
        partition = args.partition
        with progress_bar(stderr_console(), enabled=show) as progress:
            task = progress.add_task(f"producing to {topic}", total=total)
            # A terminal gets one line per read, so each typed line is sent when typed; a
            # file or pipe is read 64 KiB at a time, one thread hop per chunk.
            hint = 1 if stream.isatty() else _READ_HINT
            while lines := await anyio.to_thread.run_sync(stream.readlines, hint):
                for raw in lines:
                    line = raw[:-1] if raw.endswith(b"\n") else raw
                    if line.endswith(b"\r"):
                        line = line[:-1]
                    key: bytes | None = None
                    if sep is not None:
                        key, found, line = line.partition(sep)
                        if not found:
                            raise CliError(f"line {sent + 1} has no key separator {sep!r}")
                    fut = await send(topic, line, key=key, partition=partition, headers=headers)
                    fut.add_done_callback(on_done)
                    sent += 1
                progress.update(task, completed=sent)
            await producer.flush()
            progress.update(task, completed=sent, total=sent)
    return sent, failed, first_error, time.perf_counter() - started


__all__ = ["register"]
