"""A share group with a Java KafkaShareConsumer (kafka-clients 4.4) and one of ours: both
accept everything they get, and together they get every record exactly once.

The Java peer is ``tests/kafka/java/Interop.java``'s ``share`` op (see its header).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng import ShareConsumer, TopicPartition
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic
from tests.kafka.test_java_interop import start_java, unb64
from tests.kafka.test_kafka_share import produce, share_group

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

RECORDS = 200


async def test_java_share_consumer_and_ours_get_every_record_once(
    kafka_cluster: KafkaCluster,
) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        tp = TopicPartition(topic, 0)
        group = await share_group(kafka_cluster)
        peer = await start_java(
            kafka_cluster,
            [{"op": "share", "topic": topic, "group_id": group, "max_poll_records": 10}],
        )
        ours: list[tuple[int, bytes | None, int]] = []
        java: list[tuple[int, bytes | None, int]] = []
        java_errors: list[str] = []
        async with (
            peer.process,
            ShareConsumer(
                topic,
                group_id=group,
                bootstrap_servers=kafka_cluster.bootstrap_servers,
                max_poll_records=10,
            ) as consumer,
            admin_for(kafka_cluster) as admin,
        ):
            with anyio.fail_after(120):
                while (await peer.next_line())["op"] != "share_started":
                    pass
                # Both members hold the partition before any record exists, so neither
                # can have taken everything before the other joined.
                await eventually(
                    lambda: admin.describe_share_groups([group]),
                    lambda d: (
                        group in d.succeeded
                        and len(d.result(group).members) == 2
                        and all(m.assignment == [tp] for m in d.result(group).members)
                    ),
                )
                await consumer.wait_for_assignment(30)

                def seen(line: dict[str, Any]) -> None:
                    if line["op"] == "record":
                        java.append((line["offset"], unb64(line["value"]), line["delivery_count"]))
                    elif line["op"] == "share_committed":
                        java_errors.extend(line["errors"])

                java_scope = anyio.CancelScope()

                async def read_java() -> None:
                    with java_scope:  # until ours saw the last record: Java prints as it goes
                        while True:
                            seen(await peer.next_line())

                async def read_ours() -> None:
                    while len(ours) + len(java) < RECORDS:
                        ours.extend(
                            (r.offset, r.value, r.delivery_count)
                            for r in await consumer.poll(timeout_ms=200)
                        )
                    assert await consumer.commit() in ({}, {tp: None})
                    java_scope.cancel()

                async with anyio.create_task_group() as tg:
                    # Produced while both read: each record goes to whichever fetch waits.
                    tg.start_soon(read_java)
                    tg.start_soon(read_ours)
                    await produce(kafka_cluster, topic, [b"s%d" % i for i in range(RECORDS)])
                assert peer.process.stdin is not None
                await peer.process.stdin.send(b"leave\n")
                # Whatever Java printed meanwhile counts too (a duplicate would show here).
                while (line := await peer.next_line())["op"] != "left":
                    seen(line)
            # Everything accepted: the group has nothing left to hand out.
            offsets = await eventually(
                lambda: admin.list_share_group_offsets(group),
                lambda got: tp in got and got[tp].lag == 0,
            )
    offsets_seen = sorted(o for o, _, _ in ours + java)
    assert offsets_seen == list(range(RECORDS)), (len(ours), len(java))  # exactly once
    # Both took part (each fetches at most 10 at a time, records one per batch).
    assert ours and java, (len(ours), len(java))
    assert {v for _, v, _ in ours + java} == {b"s%d" % i for i in range(RECORDS)}
    assert {n for _, _, n in ours + java} == {1}  # nobody's lock ran out
    assert java_errors == []
    assert offsets[tp].lag == 0
    print(f"share split: ours {len(ours)}, Java {len(java)} of {RECORDS}")
