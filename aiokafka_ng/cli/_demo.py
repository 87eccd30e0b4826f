"""``aiokafka-ng demo``: Kafka working end to end in seconds, with no JVM and no docker.

Starts a :class:`~aiokafka_ng.testing.LocalBroker` (unless ``--bootstrap-servers`` names a
running one), creates a topic, produces ``--records`` records with a progress bar, reads
them back and prints one table: produce and consume throughput, send->ack latency
percentiles, and whether every record came back exactly once and in order.

Latency is measured per record from just before ``send()`` to its delivery callback. The
demo sends as fast as it can with at most ``--window`` records awaiting their ack, so the
figure includes the time a record waits behind up to that many others: the latency of a
busy producer, not of a lone record.
"""

from __future__ import annotations

import argparse
import uuid
from collections import deque
from contextlib import AsyncExitStack
from dataclasses import dataclass
from functools import partial
from time import perf_counter
from typing import TYPE_CHECKING

from aiokafka_ng.cli._common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    isatty_stderr,
    percentile,
    probe,
    progress_bar,
    run,
    stderr_console,
    stdout_console,
)

if TYPE_CHECKING:
    from rich.console import Console

    from aiokafka_ng.producer import DeliveryFuture

_INDEX_WIDTH = 10  # each value starts with its zero-padded index: b"0000000042xxxx..."
_IDLE_TIMEOUT_MS = 15000
#: Records in flight at most (sent, not yet acknowledged). Without a bound, a tight send loop
#: fills the whole 32 MiB buffer and the latency measured is mostly time spent queued behind
#: it; a window keeps batches full (throughput) while latency stays what a steady producer
#: would see.
_WINDOW = 5_000


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("demo", help="start a local broker, produce and consume, print numbers")
    p.add_argument("-n", "--records", type=int, default=200_000, help="default: 200000")
    p.add_argument("--size", type=int, default=100, help="value bytes (default: 100)")
    p.add_argument("--partitions", type=int, default=3, help="default: 3")
    p.add_argument(
        "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none"
    )
    p.add_argument(
        "-b",
        "--bootstrap-servers",
        default=None,
        help="use this running broker instead of starting a local one",
    )
    p.add_argument(
        "--window",
        type=int,
        default=_WINDOW,
        help=f"most records awaiting their ack at once (default: {_WINDOW})",
    )
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS")
    p.add_argument(
        "--progress",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="progress bars on stderr (default: when stderr is a terminal)",
    )
    p.set_defaults(func=cmd_demo)


@dataclass(slots=True)
class DemoResult:
    records: int
    size: int
    partitions: int
    window: int
    produce_s: float
    consume_s: float
    latencies_ms: list[float]
    received: int
    missing: int
    duplicates: int
    out_of_order: int
    corrupted: int
    failed: int

    @property
    def verified(self) -> int:
        """Distinct records read back with the content they were sent with."""
        return self.records - self.missing

    @property
    def ok(self) -> bool:
        bad = self.missing + self.duplicates + self.out_of_order + self.corrupted + self.failed
        return bad == 0


def cmd_demo(args: argparse.Namespace) -> int:
    if args.records < 1 or args.size < _INDEX_WIDTH or args.partitions < 1 or args.window < 1:
        raise CliError(
            f"need --records >= 1, --size >= {_INDEX_WIDTH}, --partitions >= 1, --window >= 1",
            EXIT_USAGE,
        )
    show = isatty_stderr() if args.progress is None else args.progress
    err = stderr_console()
    result: DemoResult = run(_demo, args, err, show, backend=args.backend)
    _print_table(stdout_console(), result)
    return EXIT_OK if result.ok else EXIT_FAILURE


async def _demo(args: argparse.Namespace, err: Console, show: bool) -> DemoResult:
    from aiokafka_ng.admin import AdminClient, NewTopic
    from aiokafka_ng.consumer import Consumer, TopicPartition
    from aiokafka_ng.producer import Producer

    n, size = args.records, args.size
    async with AsyncExitStack() as stack:
        if args.bootstrap_servers:
            bootstrap = args.bootstrap_servers
            await probe(bootstrap, args.connect_timeout)
        else:
            from aiokafka_ng.testing import LocalBroker, LocalBrokerError

            err.print("starting a local Kafka-compatible broker (Tansu: no JVM, no docker)")
            try:
                broker = await stack.enter_async_context(LocalBroker())
            except LocalBrokerError as exc:
                raise CliError(f"the local broker could not start: {exc.reason}") from None
            bootstrap = broker.bootstrap_servers
        err.print(f"broker at {bootstrap}")
        topic = f"aiokafka-ng-demo-{uuid.uuid4().hex[:8]}"
        async with AdminClient(bootstrap_servers=bootstrap) as admin:
            created = await admin.create_topics([NewTopic(topic, args.partitions, 1)])
            created.raise_on_error()
        err.print(f"created topic {topic} with {args.partitions} partitions")

        sent_at = [0.0] * n
        acked_at = [0.0] * n
        failed = 0

        def on_ack(i: int, fut: DeliveryFuture) -> None:
            nonlocal failed
            acked_at[i] = perf_counter()
            if fut.exception() is not None:
                failed += 1

        pad = b"x" * (size - _INDEX_WIDTH)
        step = max(1, n // 200)
        async with Producer(
            bootstrap_servers=bootstrap, acks="all", compression_type=args.compression
        ) as producer:
            await producer.partitions_for(topic)
            send = producer.send
            with progress_bar(err, enabled=show) as progress:
                task = progress.add_task("producing", total=n)
                t0 = perf_counter()
                window: deque[DeliveryFuture] = deque()
                for i in range(n):
                    value = b"%010d" % i + pad
                    if len(window) >= args.window:
                        await window.popleft().wait_done()
                    sent_at[i] = perf_counter()
                    fut = await send(topic, value)
                    fut.add_done_callback(partial(on_ack, i))
                    window.append(fut)
                    if i % step == 0:
                        progress.update(task, completed=i)
                await producer.flush()
                produce_s = perf_counter() - t0
                progress.update(task, completed=n)
        latencies = sorted((a - s) * 1000 for s, a in zip(sent_at, acked_at, strict=True))

        seen = bytearray(n)
        received = duplicates = out_of_order = corrupted = 0
        async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
            parts = await consumer.partitions_for_topic(topic)
            consumer.assign(TopicPartition(topic, p) for p in sorted(parts))
            last_index = dict.fromkeys(parts, -1)
            with progress_bar(err, enabled=show) as progress:
                task = progress.add_task("consuming", total=n)
                t0 = perf_counter()
                while received < n - failed:
                    batches = await consumer.getmany(timeout_ms=_IDLE_TIMEOUT_MS)
                    if not batches:
                        break  # nothing more is coming: what is missing stays missing
                    for tp, records in batches.items():
                        prev = last_index[tp.partition]
                        for rec in records:
                            value = rec.value
                            i = int(value[:_INDEX_WIDTH]) if value[:_INDEX_WIDTH].isdigit() else -1
                            if not 0 <= i < n or value[_INDEX_WIDTH:] != pad:
                                corrupted += 1
                                continue
                            if seen[i]:
                                duplicates += 1
                            seen[i] = 1
                            # One producer, one task: a partition holds its records in the
                            # order they were sent, so indexes must rise along a partition.
                            if i < prev:
                                out_of_order += 1
                            prev = i
                        last_index[tp.partition] = prev
                        received += len(records)
                    progress.update(task, completed=received)
                consume_s = perf_counter() - t0
    return DemoResult(
        records=n,
        size=size,
        partitions=args.partitions,
        window=args.window,
        produce_s=produce_s,
        consume_s=consume_s,
        latencies_ms=latencies,
        received=received,
        missing=n - sum(seen),
        duplicates=duplicates,
        out_of_order=out_of_order,
        corrupted=corrupted,
        failed=failed,
    )


def _print_table(console: Console, r: DemoResult) -> None:
    from rich.table import Table

    mb = r.records * r.size / 1e6

    def rate(seconds: float) -> str:
        if seconds <= 0:
            return "-"
        return f"{r.records / seconds:,.0f} records/s  ({mb / seconds:,.1f} MB/s, {seconds:.2f} s)"

    table = Table(title="aiokafka-ng demo", title_justify="left")
    table.add_column("measure")
    table.add_column("result", justify="right")
    table.add_row(
        "records",
        f"{r.records:,} x {r.size} B, {r.partitions} partitions, <= {r.window:,} awaiting ack",
    )
    table.add_row("produce throughput", rate(r.produce_s))
    table.add_row("send->ack latency p50", f"{percentile(r.latencies_ms, 0.50):,.1f} ms")
    table.add_row("send->ack latency p99", f"{percentile(r.latencies_ms, 0.99):,.1f} ms")
    table.add_row("consume throughput", rate(r.consume_s))
    verdict = f"{r.verified:,} / {r.records:,} OK"
    if not r.ok:
        verdict = (
            f"FAILED: {r.verified:,} / {r.records:,} (missing {r.missing}, duplicates "
            f"{r.duplicates}, out of order {r.out_of_order}, corrupted {r.corrupted}, "
            f"failed {r.failed})"
        )
    table.add_row("records verified", verdict)
    table.add_row("build", _build_name())
    console.print(table)


def _build_name() -> str:
    from aiokafka_ng import _native

    compiled = _native.compiled_modules()
    if all(compiled.values()):
        return "compiled (mypyc)"
    why = "AIOKAFKA_NG_PURE_PYTHON=1" if _native.pure_python_requested() else "not compiled"
    return f"pure Python ({why})"


__all__ = ["DemoResult", "register"]
