"""What we write, confluent-kafka (librdkafka) and aiokafka read back exactly.

100k records in total, 20k per codec (none, gzip, snappy, lz4, zstd), with keys, headers
(including a null header value), explicit timestamps and a few null values; both peers must
see, per partition and in offset order, the same bytes, headers and timestamps.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from typing import Any

import anyio
import anyio.to_thread
import pytest

from aiokafka_ng.producer import Producer

pytestmark = pytest.mark.anyio

CODECS = ["none", "gzip", "snappy", "lz4", "zstd"]
PER_CODEC = 20_000
BASE_TS = 1_700_000_000_000

Rec = tuple[bytes | None, bytes | None, list[tuple[str, bytes | None]], int]


def make_records(n: int) -> list[Rec]:
    blobs = [os.urandom(i % 300) for i in range(211)]
    out: list[Rec] = []
    for i in range(n):
        key = None if i % 50 == 0 else b"key-%d" % (i % 97)
        value = None if i % 333 == 0 else blobs[i % 211] + b"#%d" % i
        headers: list[tuple[str, bytes | None]] = (
            [] if i % 3 else [("i", b"%d" % i), ("nul", None), ("ünï", b"\x00\xff")]
        )
        out.append((key, value, headers, BASE_TS + i))
    return out


def read_confluent(bootstrap: str, topic: str, partitions: int, n: int) -> dict[int, list[Rec]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": "interop-" + topic,
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[Rec]] = {}
        count = 0
        for _ in range(600):
            for msg in consumer.consume(num_messages=5000, timeout=0.5):
                assert msg.error() is None, msg.error()
                hdrs = [(k, v) for k, v in (msg.headers() or [])]
                got.setdefault(msg.partition(), []).append(
                    (msg.key(), msg.value(), hdrs, msg.timestamp()[1])
                )
                count += 1
            if count >= n:
                break
        return got
    finally:
        consumer.close()


def read_aiokafka(bootstrap: str, topic: str, partitions: int, n: int) -> dict[int, list[Rec]]:
    async def main() -> dict[int, list[Rec]]:
        from aiokafka import AIOKafkaConsumer, TopicPartition

        consumer = AIOKafkaConsumer(
            bootstrap_servers=bootstrap, enable_auto_commit=False, auto_offset_reset="earliest"
        )
        await consumer.start()
        try:
            tps = [TopicPartition(topic, p) for p in range(partitions)]
            consumer.assign(tps)
            await consumer.seek_to_beginning(*tps)
            got: dict[int, list[Rec]] = {}
            count = 0
            for _ in range(600):
                batch = await consumer.getmany(timeout_ms=500, max_records=5000)
                for tp, msgs in batch.items():
                    for m in msgs:
                        got.setdefault(tp.partition, []).append(
                            (m.key, m.value, list(m.headers), m.timestamp)
                        )
                        count += 1
                if count >= n:
                    break
            return got
        finally:
            await consumer.stop()

    return asyncio.run(main())


@pytest.mark.parametrize("codec", CODECS)
async def test_peers_read_exactly_what_we_wrote(kafka_broker: Any, codec: str) -> None:
    topic = f"interop-{codec}-{uuid.uuid4().hex[:8]}"
    records = make_records(PER_CODEC)
    bootstrap = kafka_broker.bootstrap_servers
    async with Producer(
        bootstrap_servers=bootstrap, compression_type=codec, linger_ms=2
    ) as producer:
        futs = [
            await producer.send(topic, value, key=key, headers=headers, timestamp_ms=ts)
            for key, value, headers, ts in records
        ]
        await producer.flush(timeout=60)
        partitions = len(await producer.partitions_for(topic))
    expected: dict[int, list[tuple[int, Rec]]] = {}
    for rec, fut in zip(records, futs, strict=True):
        md = fut.result()
        assert md.timestamp == rec[3]
        expected.setdefault(md.partition, []).append((md.offset, rec))
    want = {p: [r for _, r in sorted(lst)] for p, lst in expected.items()}
    for offsets in ([o for o, _ in sorted(lst)] for lst in expected.values()):
        assert offsets == list(range(len(offsets)))  # gapless, no duplicates

    got_c = await anyio.to_thread.run_sync(
        read_confluent, bootstrap, topic, partitions, len(records)
    )
    assert got_c == want
    got_a = await anyio.to_thread.run_sync(
        read_aiokafka, bootstrap, topic, partitions, len(records)
    )
    assert got_a == want
