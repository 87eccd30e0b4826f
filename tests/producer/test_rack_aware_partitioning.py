"""KIP-1123 rack-aware partitioning end to end on FakeKafka with racked brokers: records
without key or partition stay on partitions led in the producer's ``client_rack`` while
there are any, as Java's BuiltInPartitioner draws with ``partitioner.rack.aware=true``."""

from __future__ import annotations

import random
from typing import Any

import pytest

from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio

RACKS = {1: "az-a", 2: "az-b", 3: "az-c"}
TOPIC = "clicks"


async def partitions_used(kafka: FakeKafka, keys: bool = False, **settings: Any) -> set[int]:
    """Send 300 unkeyed ~100-byte records in batches of a few records (the sticky partition
    switches on every full batch); the partitions they landed on."""
    random.seed(1234)  # the sticky draws replay (StickyPartitioner seeds from it)
    async with Producer(**kafka.client_config(), batch_size=512, **settings) as p:
        futures = [
            await p.send(TOPIC, b"v" * 100, key=b"k%d" % i if keys else None) for i in range(300)
        ]
        return {(await f).partition for f in futures}


def led_in(kafka: FakeKafka, rack: str) -> set[int]:
    return {p for p in range(9) if RACKS[kafka.leader(TOPIC, p)] == rack}


async def test_unkeyed_records_stay_on_partitions_led_in_the_clients_rack() -> None:
    async with FakeKafka(tcp=False, racks=RACKS) as kafka:
        kafka.create_topic(TOPIC, partitions=9, replication_factor=3)
        near = led_in(kafka, "az-b")
        assert 0 < len(near) < 9
        used = await partitions_used(kafka, client_rack="az-b", partitioner_rack_aware=True)
        assert used == near  # every one of the rack's partitions, and only those


async def test_rack_awareness_is_off_by_default_and_without_a_rack_leader() -> None:
    async with FakeKafka(tcp=False, racks=RACKS) as kafka:
        kafka.create_topic(TOPIC, partitions=9, replication_factor=3)
        near = led_in(kafka, "az-b")
        # client_rack alone does not make the partitioner rack-aware (Java's default).
        assert not (await partitions_used(kafka, client_rack="az-b")) <= near
        # No partition led in the client's rack: every available partition, as Java falls back.
        far = await partitions_used(kafka, client_rack="az-z", partitioner_rack_aware=True)
        assert not far <= near and len(far) > 3
        # Keyed records go where their key hashes, rack or not.
        keyed = await partitions_used(
            kafka, keys=True, client_rack="az-b", partitioner_rack_aware=True
        )
        assert not keyed <= near


async def test_a_rack_losing_its_leaders_falls_back_to_the_others() -> None:
    async with FakeKafka(tcp=False, racks=RACKS) as kafka:
        kafka.create_topic(TOPIC, partitions=9, replication_factor=3)
        for p in led_in(kafka, "az-b"):
            kafka.move_leader(TOPIC, p, to_node=1)  # rack az-b leads nothing now
        used = await partitions_used(kafka, client_rack="az-b", partitioner_rack_aware=True)
        assert len(used) > 3
