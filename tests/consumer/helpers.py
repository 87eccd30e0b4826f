"""Shared helpers for consumer tests."""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.to_thread
from confluent_kafka import Producer as ConfluentProducer

from aiokafka_ng.consumer import Consumer, ConsumerRecord, TopicPartition

Row = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def confluent_produce(
    bootstrap: str,
    topic: str,
    rows: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]], int]],
    **config: Any,
) -> None:
    """Write ``(partition, key, value, headers, timestamp_ms)`` rows with librdkafka, in order.

    Idempotence is on because the tests compare each partition's order: without it
    librdkafka keeps up to a million requests in flight and a retried batch (the topic is
    auto-created, so its first batches can meet NOT_LEADER_OR_FOLLOWER) lands behind later
    ones -- seen once on Apache Kafka (record 4 at offset 0 of partition 0).
    """
    producer = ConfluentProducer({
        "bootstrap.servers": bootstrap,
        "linger.ms": 5,
        "enable.idempotence": True,
        **config,
    })  # fmt: skip
    errors: list[Any] = []
    for partition, key, value, headers, ts in rows:
        producer.produce(
            topic,
            value=value,
            key=key,
            partition=partition,
            headers=headers or None,
            timestamp=ts,
            on_delivery=lambda err, _msg: errors.append(err) if err else None,
        )
        producer.poll(0)
    assert producer.flush(30) == 0
    assert not errors, errors


async def confluent_produce_async(
    bootstrap: str, topic: str, rows: list[Row], **config: Any
) -> None:
    await anyio.to_thread.run_sync(lambda: confluent_produce(bootstrap, topic, rows, **config))


async def aiokafka_produce(bootstrap: str, topic: str, rows: list[Row], **config: Any) -> None:
    """aiokafka runs on asyncio only: give it a loop of its own in a worker thread."""

    async def produce() -> None:
        from aiokafka import AIOKafkaProducer

        producer = AIOKafkaProducer(bootstrap_servers=bootstrap, **config)
        await producer.start()
        try:
            futs = [
                await producer.send(
                    topic, value=v, key=k, partition=p, headers=h or None, timestamp_ms=ts
                )
                for p, k, v, h, ts in rows
            ]
            await asyncio.gather(*futs)
        finally:
            await producer.stop()

    await anyio.to_thread.run_sync(lambda: asyncio.run(produce()))


async def consume_n(
    consumer: Consumer, n: int, *, seconds: float = 20.0, max_records: int | None = None
) -> list[ConsumerRecord[Any, Any]]:
    """Exactly ``n`` records (fails on timeout or if more arrive in the last poll)."""
    out: list[ConsumerRecord[Any, Any]] = []
    with anyio.fail_after(seconds):
        while len(out) < n:
            batch = await consumer.getmany(timeout_ms=200, max_records=max_records)
            for records in batch.values():
                out.extend(records)
    assert len(out) == n, f"expected {n} records, got {len(out)}"
    return out


def by_partition(records: list[ConsumerRecord[Any, Any]]) -> dict[TopicPartition, list[int]]:
    out: dict[TopicPartition, list[int]] = {}
    for r in records:
        out.setdefault(TopicPartition(r.topic, r.partition), []).append(r.offset)
    return out
