"""Producer throughput: aiokafka_ng vs aiokafka vs confluent-kafka, one run, same broker.

Workloads (acks=all, 6 partitions, null keys, linger 5 ms, 16 KiB batches -- every client's
defaults apart from acks/linger/codec): 100-byte values uncompressed, 1 KiB values with lz4.
Each client writes ``--records`` records (default 200k) to a fresh topic on the same
LocalBroker; the time runs from the first send to the end of flush (everything acked).

Run: ``cd /work/main && PYTHONPATH=. python bench/bench_producer.py [--records N] [--repeat R]``
Prints msgs/s per client (best of ``--repeat`` runs, default 2, each on a fresh topic: the
machine is shared, so one run can be slowed by a neighbour) and the ratios
ours/aiokafka and ours/confluent-kafka.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import anyio

from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import LocalBroker

PARTITIONS = 6


def payloads(size: int) -> list[bytes]:
    # Half random hex: compressible about 2x, like typical JSON-ish payloads.
    return [os.urandom(size // 4).hex().encode().ljust(size, b"x")[:size] for _ in range(64)]


def create_topic(bootstrap: str, topic: str) -> None:
    from confluent_kafka.admin import AdminClient, NewTopic

    admin = AdminClient({"bootstrap.servers": bootstrap})
    for fut in admin.create_topics([NewTopic(topic, PARTITIONS, 1)]).values():
        fut.result(30)


async def run_ours(bootstrap: str, topic: str, n: int, values: list[bytes], codec: str) -> float:
    async with Producer(
        bootstrap_servers=bootstrap, acks="all", linger_ms=5, compression_type=codec
    ) as producer:
        await producer.partitions_for(topic)
        send = producer.send
        k = len(values)
        t0 = time.perf_counter()
        futs = [await send(topic, values[i % k]) for i in range(n)]
        await producer.flush()
        elapsed = time.perf_counter() - t0
        failed = sum(1 for f in futs if f.exception() is not None)
        assert failed == 0, f"{failed} records failed"
    return elapsed


async def run_aiokafka(
    bootstrap: str, topic: str, n: int, values: list[bytes], codec: str
) -> float:
    from aiokafka import AIOKafkaProducer

    producer = AIOKafkaProducer(
        bootstrap_servers=bootstrap,
        acks="all",
        linger_ms=5,
        compression_type=None if codec == "none" else codec,
    )
    await producer.start()
    try:
        await producer.partitions_for(topic)
        k = len(values)
        t0 = time.perf_counter()
        futs = [await producer.send(topic, values[i % k]) for i in range(n)]
        await producer.flush()
        elapsed = time.perf_counter() - t0
        assert all(f.done() and f.exception() is None for f in futs)
    finally:
        await producer.stop()
    return elapsed


def run_confluent(bootstrap: str, topic: str, n: int, values: list[bytes], codec: str) -> float:
    from confluent_kafka import Producer as CProducer

    producer = CProducer(
        {
            "bootstrap.servers": bootstrap,
            "acks": "all",
            "linger.ms": 5,
            "compression.type": codec,
        }
    )
    errors: list[Any] = []

    def on_delivery(err: Any, msg: Any) -> None:
        if err is not None:
            errors.append(err)

    producer.list_topics(topic, timeout=30)
    k = len(values)
    t0 = time.perf_counter()
    for i in range(n):
        while True:
            try:
                producer.produce(topic, values[i % k], on_delivery=on_delivery)
                break
            except BufferError:
                producer.poll(0.001)
        if i % 1000 == 0:
            producer.poll(0)
    producer.flush(60)
    elapsed = time.perf_counter() - t0
    assert not errors, errors[:3]
    return elapsed


def measure(
    name: str, bootstrap: str, n: int, size: int, codec: str, runner: Callable[..., Any]
) -> float:
    topic = f"bench-{name}-{uuid.uuid4().hex[:8]}"
    create_topic(bootstrap, topic)
    values = payloads(size)
    if asyncio.iscoroutinefunction(runner):
        elapsed = float(anyio.run(runner, bootstrap, topic, n, values, codec))
    else:
        elapsed = runner(bootstrap, topic, n, values, codec)
    return n / elapsed


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--only", choices=["ours", "aiokafka", "confluent"], default=None)
    args = parser.parse_args()
    n = args.records
    clients: dict[str, Callable[..., Any]] = {
        "aiokafka_ng": run_ours,
        "aiokafka": run_aiokafka,
        "confluent-kafka": run_confluent,
    }
    if args.only:
        key = {"ours": "aiokafka_ng", "confluent": "confluent-kafka"}.get(args.only, args.only)
        clients = {key: clients[key]}
    with LocalBroker() as broker:
        bootstrap = broker.bootstrap_servers
        print(f"producer benchmark: {n} records, acks=all, {PARTITIONS} partitions, Tansu")
        print(f"{'workload':<16}{'client':<18}{'msgs/s':>12}")
        for label, size, codec in (("100 B", 100, "none"), ("1 KiB lz4", 1024, "lz4")):
            rates: dict[str, float] = {}
            for name, runner in clients.items():
                rates[name] = max(
                    measure(name.replace("_", ""), bootstrap, n, size, codec, runner)
                    for _ in range(max(1, args.repeat))
                )
                print(f"{label:<16}{name:<18}{rates[name]:>12,.0f}", flush=True)
            ours = rates.get("aiokafka_ng")
            if ours is not None:
                for other in ("aiokafka", "confluent-kafka"):
                    if other in rates:
                        print(f"{label:<16}{'ours / ' + other:<30}{ours / rates[other]:>6.2f}x")


if __name__ == "__main__":
    main()
