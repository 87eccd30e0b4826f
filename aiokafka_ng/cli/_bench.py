"""``aiokafka-ng bench``: our producer against the peers installed next to it.

Each client writes the same ``--records`` records (``--size`` bytes, ``acks=all``,
``linger.ms=5``) to a fresh topic on the same broker; the clock runs from the first send to
the end of the flush, when everything is acknowledged. Peers (``aiokafka``,
``confluent-kafka``) are measured only when importable; aiokafka needs asyncio, so it always
runs on asyncio whatever ``--backend`` says. A compact, self-contained cousin of the
repository's ``bench/`` scripts (which are not part of the installed package).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import os
import uuid
from collections.abc import Callable
from contextlib import ExitStack
from time import perf_counter
from typing import Any

from aiokafka_ng.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    probe,
    run,
    stderr_console,
    stdout_console,
)

CLIENTS = ("aiokafka_ng", "aiokafka", "confluent-kafka")
_MODULES = {
    "aiokafka_ng": "aiokafka_ng",
    "aiokafka": "aiokafka",
    "confluent-kafka": "confluent_kafka",
}


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bench", help="producer throughput: aiokafka_ng vs installed peers")
    p.add_argument("-n", "--records", type=int, default=100_000, help="default: 100000")
    p.add_argument("--size", type=int, default=100, help="value bytes (default: 100)")
    p.add_argument("--partitions", type=int, default=6, help="default: 6")
    p.add_argument(
        "--compression", choices=["none", "gzip", "snappy", "lz4", "zstd"], default="none"
    )
    p.add_argument(
        "--clients",
        default=",".join(CLIENTS),
        help=f"comma-separated subset of {', '.join(CLIENTS)} (default: all installed)",
    )
    p.add_argument(
        "-b", "--bootstrap-servers", default=None, help="a running broker (default: start one)"
    )
    p.add_argument("--connect-timeout", type=float, default=10.0, metavar="SECONDS")
    p.set_defaults(func=cmd_bench)


def _values(size: int) -> list[bytes]:
    # Half random hex: compresses about 2x, like typical JSON-ish payloads.
    return [os.urandom(size // 4 + 1).hex().encode().ljust(size, b"x")[:size] for _ in range(64)]


async def _ours(bootstrap: str, topic: str, n: int, values: list[bytes], codec: str) -> float:
    from aiokafka_ng.producer import Producer

    async with Producer(bootstrap_servers=bootstrap, linger_ms=5, compression_type=codec) as prod:
        await prod.partitions_for(topic)
        send, k = prod.send, len(values)
        t0 = perf_counter()
        futs = [await send(topic, values[i % k]) for i in range(n)]
        await prod.flush()
        elapsed = perf_counter() - t0
    if any(f.exception() is not None for f in futs):
        raise CliError("aiokafka_ng: some records failed")
    return elapsed


async def _aiokafka(bootstrap: str, topic: str, n: int, values: list[bytes], codec: str) -> float:
    from aiokafka import AIOKafkaProducer

    prod = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=None if codec == "none" else codec,
    )
    await prod.start()
    try:
        await prod.partitions_for(topic)
        k = len(values)
        t0 = perf_counter()
        futs = [await prod.send(topic, values[i % k]) for i in range(n)]
        await prod.flush()
        elapsed = perf_counter() - t0
    finally:
        await prod.stop()
    if any(f.exception() is not None for f in futs):
        raise CliError("aiokafka: some records failed")
    return float(elapsed)


def _confluent(bootstrap: str, topic: str, n: int, values: list[bytes], codec: str) -> float:
    from confluent_kafka import Producer as CProducer

    errors: list[Any] = []
    prod = CProducer(
        {"bootstrap.servers": bootstrap, "acks": "all", "linger.ms": 5, "compression.type": codec}
    )

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    prod.list_topics(topic, timeout=30)
    k = len(values)
    t0 = perf_counter()
    for i in range(n):
        while True:
            try:
                prod.produce(topic, values[i % k], on_delivery=on_delivery)
                break
            except BufferError:  # librdkafka's queue is full: serve callbacks, try again
                prod.poll(0.001)
        if i % 1000 == 0:
            prod.poll(0)
    prod.flush(60)
    elapsed = perf_counter() - t0
    if errors:
        raise CliError(f"confluent-kafka: {len(errors)} records failed")
    return elapsed


def _version(client: str) -> str:
    try:
        return importlib.metadata.version(client.replace("_", "-"))
    except importlib.metadata.PackageNotFoundError:
        return "?"


async def _create(bootstrap: str, topic: str, partitions: int) -> None:
    from aiokafka_ng.admin import AdminClient, NewTopic

    async with AdminClient(bootstrap_servers=bootstrap) as admin:
        (await admin.create_topics([NewTopic(topic, partitions, 1)])).raise_on_error()


def cmd_bench(args: argparse.Namespace) -> int:
    wanted = [c.strip() for c in args.clients.split(",") if c.strip()]
    unknown = [c for c in wanted if c not in CLIENTS]
    if unknown or not wanted:
        raise CliError(
            f"unknown client {unknown[0] if unknown else ''!r}; known: {CLIENTS}", EXIT_USAGE
        )
    if args.records < 1 or args.size < 1:
        raise CliError("need --records >= 1 and --size >= 1", EXIT_USAGE)
    err = stderr_console()
    rows: list[tuple[str, str, float | None]] = []
    with ExitStack() as stack:
        bootstrap = args.bootstrap_servers
        if bootstrap is None:
            from aiokafka_ng.testing import LocalBroker, LocalBrokerError

            try:
                bootstrap = stack.enter_context(LocalBroker()).bootstrap_servers
            except LocalBrokerError as exc:
                raise CliError(f"the local broker could not start: {exc.reason}") from None
        else:
            run(probe, bootstrap, args.connect_timeout, backend=args.backend)
        values = _values(args.size)
        runners: dict[str, tuple[Callable[..., Any], str | None]] = {
            "aiokafka_ng": (_ours, args.backend),
            "aiokafka": (_aiokafka, "asyncio"),
            "confluent-kafka": (_confluent, None),
        }
        for client in wanted:
            if importlib.util.find_spec(_MODULES[client]) is None:
                rows.append((client, "not installed", None))
                continue
            topic = f"bench-{client.replace('_', '-')}-{uuid.uuid4().hex[:8]}"
            run(_create, bootstrap, topic, args.partitions, backend=args.backend)
            err.print(f"{client}: {args.records:,} records of {args.size} B ...")
            func, backend = runners[client]
            call = (bootstrap, topic, args.records, values, args.compression)
            elapsed = float(func(*call) if backend is None else run(func, *call, backend=backend))
            rows.append((client, _version(client), args.records / elapsed))
    _print(args, rows)
    return EXIT_OK


def _print(args: argparse.Namespace, rows: list[tuple[str, str, float | None]]) -> None:
    from rich.table import Table

    ours = next((rate for name, _, rate in rows if name == "aiokafka_ng"), None)
    table = Table(
        title=f"producer: {args.records:,} x {args.size} B, acks=all, {args.compression}",
        title_justify="left",
    )
    for col, justify in (
        ("client", "left"),
        ("version", "left"),
        ("records/s", "right"),
        ("MB/s", "right"),
        ("aiokafka_ng is", "right"),
    ):
        table.add_column(col, justify=justify)  # type: ignore[arg-type]
    for name, version, rate in rows:
        if rate is None:
            table.add_row(name, version, "-", "-", "-")
            continue
        ratio = "" if ours is None or name == "aiokafka_ng" else f"{ours / rate:.2f}x"
        table.add_row(name, version, f"{rate:,.0f}", f"{rate * args.size / 1e6:,.1f}", ratio)
    stdout_console().print(table)


__all__ = ["CLIENTS", "register"]
