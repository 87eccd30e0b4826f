"""Consumer throughput: aiokafka_ng vs aiokafka vs confluent-kafka, same LocalBroker, one run.

Workload: 200k records of 100-byte values and ~8-byte keys, written once by librdkafka
(uncompressed, linger.ms=20, its default batch limits) into a 4-partition topic; each client
then reads all of it from offset 0 with manual assignment (no group), in the same process,
one after the other, with its default fetch settings. aiokafka and confluent-kafka run in a
worker thread (aiokafka on its own asyncio loop).
Run: ``cd /work/main && PYTHONPATH=. python bench/bench_consumer.py [--records N] [--rounds R]
[--backend trio] [--broker kafka]``
Prints msgs/s per client per round, the best of ``--rounds`` (default 3; the rounds interleave
the clients), and ours against theirs as ratios; then the CPU per record of the best round,
client process + broker (all broker processes), and the broker's cores in use.

``--broker kafka`` runs on a 3-node Apache Kafka cluster (replication factor 3; see
``brokers.py``) and adds the Java client (``java/BenchClient.java``: assign, seekToBeginning,
``poll()``, default fetch settings) as a column, with ratios against it. Its time starts
after the client is built (class loading excluded), its CPU is the JVM's own report.

confluent-kafka runs twice: with its defaults, and with ``fetch.wait.max.ms=10``. With the
default 500 ms, librdkafka asks Tansu once in a while for only the partitions it has no
data buffered for, which are at their end, and Tansu holds that fetch for the full 500 ms:
about one second of a 0.15 s read (measured: 175k msg/s against 1.25M with 10 ms). Our
fetcher had the same stall (see ``fetcher.py``); the second figure is librdkafka without it,
and the ratios are against the better of the two.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import time
import uuid
from collections.abc import Awaitable, Callable
from contextlib import ExitStack

import anyio
import anyio.to_thread
from brokers import JavaClient, Target, add_options, describe, open_target
from confluent_kafka import Consumer as ConfluentConsumer
from confluent_kafka import Producer as ConfluentProducer
from confluent_kafka import TopicPartition as ConfluentTP

from aiokafka_ng.consumer import Consumer, TopicPartition

PARTITIONS = 4


def produce(bootstrap: str, topic: str, n: int) -> None:
    values = [os.urandom(50).hex().encode() for _ in range(1000)]
    producer = ConfluentProducer({"bootstrap.servers": bootstrap, "linger.ms": 20})
    for i in range(n):
        while True:
            try:
                producer.produce(
                    topic, values[i % 1000], key=b"key-%d" % (i % 1000), partition=i % PARTITIONS
                )
                break
            except BufferError:
                producer.poll(0.01)
        if i % 10000 == 0:
            producer.poll(0)
    assert producer.flush(60) == 0


async def ours_getmany(bootstrap: str, topic: str, n: int) -> int:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        count = 0
        while count < n:
            for records in (await consumer.getmany(timeout_ms=1000, max_records=10000)).values():
                count += len(records)
        return count


async def ours_iter(bootstrap: str, topic: str, n: int) -> int:
    async with Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest") as consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
        count = 0
        async for _ in consumer:
            count += 1
            if count == n:
                break
        return count


def aiokafka_getmany(bootstrap: str, topic: str, n: int) -> int:
    async def run() -> int:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as AkTP

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AkTP(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            count = 0
            while count < n:
                batch = await consumer.getmany(timeout_ms=1000, max_records=10000)
                for records in batch.values():
                    count += len(records)
            return count
        finally:
            await consumer.stop()

    return asyncio.run(run())


def aiokafka_iter(bootstrap: str, topic: str, n: int) -> int:
    async def run() -> int:
        from aiokafka import AIOKafkaConsumer
        from aiokafka.structs import TopicPartition as AkTP

        consumer = AIOKafkaConsumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
        await consumer.start()
        try:
            consumer.assign([AkTP(topic, p) for p in range(PARTITIONS)])
            await consumer.seek_to_beginning()
            count = 0
            async for _ in consumer:
                count += 1
                if count == n:
                    break
            return count
        finally:
            await consumer.stop()

    return asyncio.run(run())


def confluent_consume(bootstrap: str, topic: str, n: int, wait_ms: int | None = None) -> int:
    consumer = ConfluentConsumer({
        "bootstrap.servers": bootstrap,
        "group.id": f"bench-{uuid.uuid4().hex[:6]}",
        "enable.auto.commit": False,
        "auto.offset.reset": "earliest",
        **({} if wait_ms is None else {"fetch.wait.max.ms": wait_ms}),
    })  # fmt: skip
    try:
        consumer.assign([ConfluentTP(topic, p, 0) for p in range(PARTITIONS)])
        count = 0
        while count < n:
            for msg in consumer.consume(num_messages=10000, timeout=1.0):
                if msg.error() is None:
                    count += 1
        return count
    finally:
        consumer.close()


#: (msg/s, client CPU us/record, broker CPU us/record, broker cores in use) of one run.
Run = tuple[float, float, float, float]


async def timed(
    label: str, fn: Callable[[], Awaitable[int | tuple[float, float]]], n: int, target: Target
) -> Run:
    """One read; ``fn`` returns the count, or (elapsed, CPU seconds) when it measured itself
    (the Java client)."""
    own, broker = time.process_time(), target.cpu()
    start = time.perf_counter()
    got = await fn()
    elapsed = time.perf_counter() - start
    client = time.process_time() - own
    if isinstance(got, tuple):
        elapsed, client = got
    else:
        assert got >= n, f"{label}: read {got} of {n}"
    broker_cpu = target.cpu() - broker
    rate = n / elapsed
    print(f"{label:<28} {n} records in {elapsed:6.2f} s  {rate:>10,.0f} msg/s")
    return rate, client / n * 1e6, broker_cpu / n * 1e6, broker_cpu / elapsed


def java_consume(java: JavaClient, bootstrap: str, topic: str, n: int) -> tuple[float, float]:
    out = java.run("consume", bootstrap, topic, n, PARTITIONS)
    assert out["count"] >= n, out
    return out["elapsed"], out["cpu"]


async def main(n: int, rounds: int, target: Target, with_java: bool) -> None:
    with ExitStack() as stack:
        bootstrap = target.bootstrap
        topic = target.create_topic(PARTITIONS)
        java = stack.enter_context(JavaClient()) if with_java else None
        print(f"consumer benchmark: {n} records, {PARTITIONS} partitions, {describe(target)}")
        await anyio.to_thread.run_sync(produce, bootstrap, topic, n)
        clients: dict[str, Callable[[], Awaitable[int]]] = {
            "aiokafka_ng getmany": lambda: ours_getmany(bootstrap, topic, n),
            "aiokafka_ng async for": lambda: ours_iter(bootstrap, topic, n),
            "aiokafka getmany": lambda: anyio.to_thread.run_sync(
                aiokafka_getmany, bootstrap, topic, n
            ),
            "aiokafka async for": lambda: anyio.to_thread.run_sync(
                aiokafka_iter, bootstrap, topic, n
            ),
            "confluent-kafka consume": lambda: anyio.to_thread.run_sync(
                confluent_consume, bootstrap, topic, n
            ),
            "confluent-kafka, 10 ms wait": lambda: anyio.to_thread.run_sync(
                confluent_consume, bootstrap, topic, n, 10
            ),
        }
        if java is not None:
            clients["java poll"] = lambda: anyio.to_thread.run_sync(
                java_consume, java, bootstrap, topic, n
            )
        # Rounds interleave the clients so a noisy neighbour hits all of them; best per client.
        best: dict[str, Run] = {}
        for _ in range(rounds):
            for label, fn in clients.items():
                run = await timed(label, fn, n, target)
                if run[0] > best.get(label, (0.0,))[0]:
                    best[label] = run
        rates = {label: run[0] for label, run in best.items()}
        print(f"\nbest of {rounds} rounds (CPU us/record client + broker, broker cores in use):")
        for label, (rate, client, broker, cores) in best.items():
            print(f"{label:<28} {rate:>10,.0f} msg/s  {client:6.2f} + {broker:5.2f} ({cores:.1f})")
        print()
        confluent = max(("confluent-kafka consume", "confluent-kafka, 10 ms wait"), key=rates.get)
        pairs = [
            ("aiokafka_ng getmany", "aiokafka getmany"),
            ("aiokafka_ng getmany", confluent),
            ("aiokafka_ng async for", "aiokafka async for"),
            ("aiokafka_ng async for", confluent),
        ]
        if java is not None:
            pairs += [("aiokafka_ng getmany", "java poll"), ("aiokafka_ng async for", "java poll")]
        for ours, theirs in pairs:
            print(f"{ours:<22} / {theirs:<28} {rates[ours] / rates[theirs]:5.2f}x")
        if java is not None and java.overhead_cpu:
            low, high = min(java.overhead_cpu), max(java.overhead_cpu)
            print(f"java: JVM start and class loading, outside the figures: {low:.2f}-{high:.2f} s")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__)
    add_options(parser)
    parser.add_argument("--records", type=int, default=200_000)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--backend", default="asyncio", choices=["asyncio", "trio"])
    args = parser.parse_args()
    # Started outside the event loop: KafkaCluster's synchronous start runs a loop of its own.
    with open_target(args) as target:
        kafka = args.broker == "kafka"
        anyio.run(main, args.records, args.rounds, target, kafka, backend=args.backend)
