"""A KIP-848 group shared with the Java client: one Java ``group.protocol=consumer`` member
(tests/kafka/java/Interop.java) and one of ours split a topic, each reads only its own
partitions, and the group's committed offsets cover every record."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic, unique
from tests.kafka.test_java_interop import start_java, unb64

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # the Java side is what is tested
async def test_consumer_group_with_a_java_member(kafka_cluster: KafkaCluster) -> None:
    partitions = 6
    group_id = unique("jg848")
    async with new_topic(kafka_cluster, partitions) as topic:
        spec = {"op": "group", "topic": topic, "group_id": group_id, "group_protocol": "consumer"}
        peer = await start_java(kafka_cluster, [spec])
        ours_rows: list[tuple[int, bytes | None]] = []
        java_rows: list[tuple[int, bytes | None]] = []
        consumer = Consumer(
            bootstrap_servers=kafka_cluster.bootstrap_servers,
            group_id=group_id,
            group_protocol="consumer",
            enable_auto_commit=False,
            auto_offset_reset="earliest",
        )
        async with peer.process, consumer, anyio.create_task_group() as tg:
            with anyio.fail_after(120):
                while (await peer.next_line())["op"] != "assigned":
                    pass  # Java is in the group
                consumer.subscribe([topic])
                while len(consumer.assignment()) != partitions // 2:
                    await consumer.getmany(timeout_ms=100)  # the broker splits the topic
                mine = {tp.partition for tp in consumer.assignment()}
                stop = anyio.Event()

                async def ours() -> None:
                    while not stop.is_set():
                        batches = await consumer.getmany(timeout_ms=200)
                        for tp, records in batches.items():
                            ours_rows.extend((tp.partition, r.value) for r in records)
                        if batches:
                            await consumer.commit()

                tg.start_soon(ours)
                async with Producer(
                    bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all"
                ) as producer:
                    for i in range(60):
                        await producer.send(topic, b"r%d" % i, partition=i % partitions)
                    await producer.flush()
                while len(java_rows) < 30:
                    line = await peer.next_line()
                    if line["op"] == "record":
                        java_rows.append((line["partition"], unb64(line["value"])))
                async with admin_for(kafka_cluster) as admin:
                    offsets = await eventually(
                        lambda: admin.list_consumer_group_offsets(group_id),
                        lambda got: sorted(o.offset for o in got.values()) == [10] * partitions,
                    )
                assert sorted(o.offset for o in offsets.values()) == [10] * partitions
                stop.set()
                assert peer.process.stdin is not None
                await peer.process.stdin.send(b"leave\n")
                while (await peer.next_line())["op"] != "left":
                    pass
    expected = {(i % partitions, b"r%d" % i) for i in range(60)}
    assert sorted(ours_rows) == sorted(r for r in expected if r[0] in mine)
    assert sorted(java_rows) == sorted(r for r in expected if r[0] not in mine)
