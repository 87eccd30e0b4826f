"""``aiokafka-ng produce``: lines from stdin or a file become records.

Lines are read in a thread of their own, whatever the input has ready (up to 64 KiB at a time),
so a slow pipe or a person typing never blocks the event loop, where the producer's senders
run, and each line is sent once it has arrived: ``tail -f app.log | aiokafka-ng produce
logs`` sends every line as it is written, not once 64 KiB or the end of input have come.
Each line, minus its line ending, is one record; with ``--key-separator`` the text before
the first separator is the key. Delivery failures are counted by a done-callback; the
command exits 1 if any record failed, after flushing everything else.

Ctrl-C (or SIGTERM) stops reading; what was already sent is delivered (within the producer's
``close_timeout_ms``), and the command says how many records were read, acknowledged and
not delivered before it exits 130 (143). A second Ctrl-C stops at once.
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from typing import IO, TYPE_CHECKING

import anyio
import anyio.from_thread
import anyio.lowlevel

from aiokafka_ng.cli._common import (
    EXIT_OK,
    CliError,
    add_connection_args,
    cancel_on_signal,
    client_settings,
    exit_code_for_signal,
    first_line,
    isatty_stderr,
    parse_key_values,
    probe,
    progress_bar,
    run,
    stderr_console,
)

if TYPE_CHECKING:
    from anyio.streams.memory import MemoryObjectReceiveStream

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
    received: list[int] = []
    try:
        tally = run(
            _produce, args, stream, sep, headers or None, total, show, received,
            backend=args.backend,
        )  # fmt: skip
    finally:
        if args.file:
            stream.close()
    if received:
        # Said even with --quiet: the records that did not land are the user's to resend.
        print(f"interrupted: {tally.summary(args.topic)}", file=sys.stderr)
        return exit_code_for_signal(received[0])
    if tally.failed:
        raise CliError(
            f"{tally.failed} of {tally.sent} records failed; first error: {tally.first_error}"
        )
    if not args.quiet:
        print(f"produced {tally.summary(args.topic)}", file=sys.stderr)
    return EXIT_OK


def _start_reader(
    stream: IO[bytes],
) -> tuple[MemoryObjectReceiveStream[bytes], list[OSError]]:
    """Chunks of ``stream`` as it has them (one ``os.read``: a line typed at a terminal, what
    a pipe's writer wrote so far, 64 KiB of a file), read by a daemon thread of its own, one
    chunk ahead at most; an empty chunk ends the input, after a read error too (which goes
    to the list). A daemon thread, not a worker of anyio's: after a Ctrl-C it may stay
    blocked on input that never comes, and the process must be able to exit anyway; and
    ``os.read`` on the descriptor, not the stream's buffered reader, whose lock such a
    thread would hold while the interpreter shuts down (a fatal error)."""
    send, receive = anyio.create_memory_object_stream[bytes](1)
    errors: list[OSError] = []
    token = anyio.lowlevel.current_token()
    fd = stream.fileno()

    def read() -> None:
        chunk = b"-"
        try:
            while chunk:
                try:
                    chunk = os.read(fd, _READ_HINT)
                except OSError as exc:
                    errors.append(exc)
                    chunk = b""
                anyio.from_thread.run(send.send, chunk, token=token)
        except Exception:
            pass

    threading.Thread(target=read, name="produce-input", daemon=True).start()
    return receive, errors


class _LineSplitter:
    """Lines out of the chunks of a stream: each without its ``\n`` (or ``\r\n``); a line
    split across chunks is kept until its end arrives, or the input's (an empty chunk)."""

    def __init__(self) -> None:
        self._start = bytearray()  # the current line's bytes so far

    def feed(self, chunk: bytes) -> list[bytes]:
        if not chunk:  # the end of input: a last line without its line ending
            last = bytes(self._start)
            self._start.clear()
            return [last.removesuffix(b"\r")] if last else []
        if b"\n" not in chunk:  # appended only: a long line costs linear time
            self._start += chunk
            return []
        lines = chunk.split(b"\n")
        lines[0] = bytes(self._start) + lines[0]
        self._start[:] = lines.pop()
        return [line.removesuffix(b"\r") for line in lines]


class _Tally:
    """What the command did: records sent, acknowledged and failed, and its duration."""

    def __init__(self) -> None:
        self.sent = 0
        self.acked = 0
        self.failed = 0
        self.first_error = ""
        self.elapsed = 0.0

    def on_done(self, fut: DeliveryFuture) -> None:
        exc = fut.exception()
        if exc is None:
            self.acked += 1
            return
        self.failed += 1
        if not self.first_error:
            self.first_error = first_line(exc)

    def summary(self, topic: str) -> str:
        """``3 records to T in 0.02 s``; a rate only for a hundred records or more over a
        second or more (a few typed lines have none worth saying); what was not delivered
        when some records were not."""
        records = "record" if self.sent == 1 else "records"
        text = f"{self.sent} {records} to {topic} in {self.elapsed:.2f} s"
        if self.elapsed >= 1.0 and self.sent >= 100:
            text += f" ({self.sent / self.elapsed:,.0f} records/s)"
        if self.acked < self.sent:
            text += f"; {self.acked:,} acknowledged, {self.sent - self.acked:,} not delivered" + (
                f" (first error: {self.first_error})" if self.first_error else ""
            )
        return text


async def _produce(
    args: argparse.Namespace,
    stream: IO[bytes],
    sep: bytes | None,
    headers: list[tuple[str, bytes | None]] | None,
    total: int | None,
    show: bool,
    received: list[int],
) -> _Tally:
    from aiokafka_ng.config import ProducerConfig
    from aiokafka_ng.producer import Producer

    await probe(args.bootstrap_servers, args.connect_timeout)
    tally = _Tally()
    on_done = tally.on_done
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
            split = _LineSplitter()
            chunks, read_errors = _start_reader(stream)
            async with anyio.create_task_group() as tg:
                reading = anyio.CancelScope()
                await tg.start(cancel_on_signal, reading, received)
                with reading:
                    chunk = b"-"
                    while chunk:
                        chunk = await chunks.receive()
                        if read_errors:
                            raise CliError(f"cannot read the input: {read_errors[0]}")
                        for line in split.feed(chunk):
                            key: bytes | None = None
                            if sep is not None:
                                key, found, line = line.partition(sep)
                                if not found:
                                    raise CliError(
                                        f"line {tally.sent + 1} has no key separator {sep!r}"
                                    )
                            fut = await send(
                                topic, line, key=key, partition=partition, headers=headers
                            )
                            fut.add_done_callback(on_done)
                            tally.sent += 1
                        progress.update(task, completed=tally.sent)
                tg.cancel_scope.cancel()
            if not received:
                await producer.flush()
            progress.update(task, completed=tally.sent, total=tally.sent)
        # Interrupted, leaving the block closes the producer: it delivers what was sent
        # within close_timeout_ms, and fails the rest.
    # close() has decided every record; their callbacks may still be queued on the loop.
    await anyio.lowlevel.checkpoint()
    tally.elapsed = time.perf_counter() - started
    return tally


__all__ = ["register"]
