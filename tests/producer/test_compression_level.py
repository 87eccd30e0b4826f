"""KIP-390 ``compression_level`` end to end on FakeKafka: the producer compresses its batches
at the level asked for, so the same records go over the wire in fewer bytes at a higher
level, and read back the same."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol.messages.produce import ProduceRequest
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio

VALUES = [
    b"order=%d customer=user-%d amount=%d.%02d status=%s"
    % (i, i % 89, i * 13, i % 100, b"shipped" if i % 3 else b"pending")
    for i in range(2000)
]


async def wire_bytes(kafka: FakeKafka, topic: str, **settings: Any) -> int:
    """Produce VALUES to partition 0 of ``topic`` in one batch (no linger deadline, room for
    them all: the same batch whatever the timing), with fixed timestamps; the size of the
    record batches the broker received for it (each Produce's records field)."""
    kafka.create_topic(topic, partitions=1)
    one_batch = {"batch_size": 1 << 20, "linger_ms": 600_000}
    async with Producer(**kafka.client_config(), **one_batch, **settings) as p:
        for i, value in enumerate(VALUES):
            # Fixed timestamps: the same bytes to compress in every run.
            await p.send(topic, value, partition=0, timestamp_ms=1_700_000_000_000 + i)
        await p.flush()
    assert [r.value for r in kafka.records(topic, 0)] == VALUES
    total = 0
    for call in kafka.received(0):
        assert isinstance(call.request, ProduceRequest)
        for td in call.request.topic_data:
            if td.name == topic:
                total += sum(len(pd.records or b"") for pd in td.partition_data)
    return total


@pytest.mark.parametrize(
    ("codec", "low", "high", "default"),
    [("gzip", 1, 9, 6), ("lz4", 1, 17, 9), ("zstd", 1, 19, 3)],
)
async def test_a_higher_level_sends_smaller_batches(
    codec: str, low: int, high: int, default: int
) -> None:
    async with FakeKafka(tcp=False) as kafka:
        at_low = await wire_bytes(kafka, "low", compression_type=codec, compression_level=low)
        at_high = await wire_bytes(kafka, "high", compression_type=codec, compression_level=high)
        unset = await wire_bytes(kafka, "unset", compression_type=codec)
        at_default = await wire_bytes(
            kafka, "default", compression_type=codec, compression_level=default
        )
        plain = await wire_bytes(kafka, "plain")
    assert at_high < at_low < plain
    assert unset == at_default  # no level is Kafka's default level for the codec
