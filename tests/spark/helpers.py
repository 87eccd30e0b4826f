"""Shared helpers of the Spark tests: produce with our client, read with confluent-kafka."""

from __future__ import annotations

from typing import Any

import anyio

from aiokafka_ng.producer import Producer
from aiokafka_ng.spark._offsets import partition_bounds

Record = tuple[int, int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def total_records(bootstrap: str, topic: str) -> int:
    """Records in ``topic``: the sum of high watermarks (Fetch, right on Tansu too)."""
    bounds = anyio.run(partition_bounds, {"bootstrap.servers": bootstrap}, [topic])
    return sum(high - low for low, high in bounds.values())


def produce(
    bootstrap: str,
    topic: str,
    rows: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]],
) -> list[Record]:
    """Send ``(partition, key, value, headers)`` rows; return them with offset and timestamp,
    as ``(partition, offset, key, value, headers, timestamp_ms)``."""

    async def main() -> list[Record]:
        async with Producer(bootstrap_servers=bootstrap, linger_ms=2) as producer:
            futs = [
                await producer.send(topic, value, key, partition, None, headers)
                for partition, key, value, headers in rows
            ]
            await producer.flush()
            out: list[Record] = []
            for (partition, key, value, headers), fut in zip(rows, futs, strict=True):
                meta = fut.result()
                assert meta.partition == partition
                out.append((partition, meta.offset, key, value, headers, meta.timestamp))
            return out

    return anyio.run(main)


def read_confluent(bootstrap: str, topic: str, expected: int) -> list[Any]:
    """Every message of ``topic`` read by confluent-kafka (librdkafka), until ``expected``
    messages arrived (or 60 s passed)."""
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "spark-" + topic, "enable.auto.commit": False}
    )
    try:
        partitions = consumer.list_topics(topic, timeout=10).topics[topic].partitions
        consumer.assign([TopicPartition(topic, p, 0) for p in partitions])
        got: list[Any] = []
        for _ in range(120):
            for msg in consumer.consume(num_messages=10_000, timeout=0.5):
                assert msg.error() is None, msg.error()
                got.append(msg)
            if len(got) >= expected:
                break
        return got
    finally:
        consumer.close()
