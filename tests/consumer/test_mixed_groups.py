"""Groups whose members are different clients, as in a rolling migration (real broker).

Each client's default assignors differ: aiokafka offers only ``roundrobin``, librdkafka
``range, roundrobin``, Java ``range, cooperative-sticky``. The coordinator needs one that every
member offers, so ours (and the compat consumer) offer all three by default. aiokafka runs
on asyncio only, so its tests do too. Tansu holds a new group's first join for half the
session timeout: 2000 ms here, as in test_group_broker.py.
"""

from __future__ import annotations

import asyncio
from typing import Any

import anyio
import anyio.to_thread
import pytest
from aiokafka import AIOKafkaConsumer as RealAIOKafkaConsumer
from confluent_kafka import Consumer as ConfluentConsumer

from aiokafka_ng.compat import AIOKafkaConsumer
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.errors import InconsistentGroupProtocolError
from tests.consumer.helpers import Row, confluent_produce_async
from tests.helpers import topic_name

TIMING = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}
PARTITIONS = 4
asyncio_only = [pytest.mark.anyio, pytest.mark.parametrize("anyio_backend", ["asyncio"])]


async def _topic(bootstrap: str) -> str:
    topic = topic_name("mix")
    rows: list[Row] = [(i % PARTITIONS, None, b"%d" % i, [], 1) for i in range(40)]
    await confluent_produce_async(bootstrap, topic, rows)
    return topic


def _split(a: set[Any], b: set[Any], everything: set[Any]) -> bool:
    return bool(a) and bool(b) and not (a & b) and (a | b) == everything


@asyncio_only[0]
@asyncio_only[1]
async def test_aiokafka_and_the_compat_consumer_split_partitions(kafka_broker: Any) -> None:
    # Before: INCONSISTENT_GROUP_PROTOCOL (aiokafka: roundrobin; compat: range, coop-sticky).
    bootstrap = kafka_broker.bootstrap_servers
    topic = await _topic(bootstrap)
    group = topic_name("g")
    everything = {(topic, p) for p in range(PARTITIONS)}
    theirs = RealAIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, **TIMING, auto_offset_reset="earliest"
    )
    ours = AIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, **TIMING, auto_offset_reset="earliest"
    )
    await theirs.start()
    try:
        async with ours:
            with anyio.fail_after(60):
                while True:
                    await asyncio.gather(
                        theirs.getmany(timeout_ms=100), ours.getmany(timeout_ms=100)
                    )
                    a = {(tp.topic, tp.partition) for tp in theirs.assignment()}
                    b = {(tp.topic, tp.partition) for tp in ours.assignment()}
                    if _split(a, b, everything):
                        break
            assert len(a) == len(b) == PARTITIONS // 2
    finally:
        await theirs.stop()


@pytest.mark.anyio
async def test_confluent_kafka_and_the_native_consumer_split_partitions(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = await _topic(bootstrap)
    group = topic_name("g")
    everything = {(topic, p) for p in range(PARTITIONS)}
    theirs = ConfluentConsumer(
        {
            "bootstrap.servers": bootstrap,
            "group.id": group,
            "auto.offset.reset": "earliest",
            "session.timeout.ms": TIMING["session_timeout_ms"],
            "heartbeat.interval.ms": TIMING["heartbeat_interval_ms"],
        }
    )
    theirs.subscribe([topic])
    try:
        async with Consumer(
            bootstrap_servers=bootstrap, group_id=group, auto_offset_reset="earliest", **TIMING
        ) as ours:
            ours.subscribe([topic])
            with anyio.fail_after(60):
                while True:
                    await anyio.to_thread.run_sync(theirs.poll, 0.1)
                    await ours.getmany(timeout_ms=100)
                    a = {(tp.topic, tp.partition) for tp in theirs.assignment()}
                    b = {(tp.topic, tp.partition) for tp in ours.assignment()}
                    if _split(a, b, everything):
                        break
    finally:
        await anyio.to_thread.run_sync(theirs.close)


@asyncio_only[0]
@asyncio_only[1]
async def test_no_common_assignor_names_both_sides(kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = await _topic(bootstrap)
    group = topic_name("g")
    theirs = RealAIOKafkaConsumer(
        topic, bootstrap_servers=bootstrap, group_id=group, **TIMING, auto_offset_reset="earliest"
    )
    await theirs.start()
    try:
        with anyio.fail_after(60):
            while not theirs.assignment():
                await theirs.getmany(timeout_ms=100)
        ours = Consumer(
            bootstrap_servers=bootstrap,
            group_id=group,
            partition_assignment_strategy=["cooperative-sticky"],
            **TIMING,
        )
        async with ours:
            ours.subscribe([topic])
            with anyio.fail_after(60), pytest.raises(InconsistentGroupProtocolError) as info:
                while True:
                    await asyncio.gather(
                        theirs.getmany(timeout_ms=100), ours.getmany(timeout_ms=100)
                    )
    finally:
        await theirs.stop()
    text = str(info.value)
    assert "['cooperative-sticky']" in text, text
    # Kafka's DescribeGroups names the group's assignor; Tansu's leaves it empty (TANSU.md),
    # and then the message says so rather than guessing.
    assert "use 'roundrobin'" in text or "does not say which assignor" in text, text
    assert "1 members" in text, text
    assert TopicPartition(topic, 0) not in ours.assignment()
