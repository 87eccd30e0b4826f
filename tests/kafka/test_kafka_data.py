"""Produce, consume and offsets against a real 3-node Apache Kafka cluster.

These behaviours were shown only through canned responses before, because Tansu gets them
wrong (TANSU.md): ListOffsets LATEST / MAX_TIMESTAMP / by timestamp, DeleteRecords (Tansu
drops the connection), read_committed hiding aborted records (Tansu sends no aborted
transactions list), and acks=all on a topic replicated 3 times with min.insync.replicas=2.
"""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import IsolationLevel, ListOffsetsSpec, TopicPartition
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, new_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


async def consume_all(
    cluster: KafkaCluster, topic: str, partitions: int, count: int, **config: object
) -> list[tuple[int, int, bytes | None, bytes | None, int]]:
    """(partition, offset, key, value, timestamp) of ``count`` records read from offset 0."""
    out: list[tuple[int, int, bytes | None, bytes | None, int]] = []
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers, auto_offset_reset="earliest", **config
    )
    async with consumer:
        consumer.assign([TopicPartition(topic, p) for p in range(partitions)])
        with anyio.fail_after(30):
            while len(out) < count:
                for tp, records in (await consumer.getmany(timeout_ms=500)).items():
                    out += [(tp.partition, r.offset, r.key, r.value, r.timestamp) for r in records]
    return out


async def test_round_trip_acks_all_on_rf3(kafka_cluster: KafkaCluster) -> None:
    """Keyed records, acks=all + idempotence, RF 3 and min.insync.replicas=2: every record
    comes back once, in order per partition, with its key, and the ISR is all 3 brokers."""
    async with new_topic(kafka_cluster, 3, 3, min_insync_replicas="2") as topic:
        async with admin_for(kafka_cluster) as admin:
            desc = (await admin.describe_topics([topic])).result(topic)
        assert all(len(p.replicas) == 3 and len(p.isr) == 3 for p in desc.partitions)
        sent: dict[int, list[bytes]] = {}
        async with Producer(
            bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all", enable_idempotence=True
        ) as producer:
            futures = [
                await producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7)) for i in range(300)
            ]
            for i, fut in enumerate(futures):
                meta = await fut
                sent.setdefault(meta.partition, []).append(b"v%d" % i)
                assert meta.offset == len(sent[meta.partition]) - 1
        got = await consume_all(kafka_cluster, topic, 3, 300)
        by_partition: dict[int, list[bytes | None]] = {}
        for partition, offset, key, value, _ in got:
            assert offset == len(by_partition.setdefault(partition, []))
            assert value is not None and key == b"k%d" % (int(value[1:]) % 7)
            by_partition[partition].append(value)
        assert by_partition == sent


async def test_list_offsets_latest_max_timestamp_and_by_timestamp(
    kafka_cluster: KafkaCluster,
) -> None:
    """Tansu answers these three wrongly; Kafka's answers are checked here for real."""
    stamps = [1_000, 5_000, 3_000, 2_000, 4_000]
    async with new_topic(kafka_cluster, 1, 3) as topic:
        tp = TopicPartition(topic, 0)
        async with Producer(
            bootstrap_servers=kafka_cluster.bootstrap_servers, acks="all"
        ) as producer:
            for ts in stamps:  # one batch each: send_and_wait
                await producer.send_and_wait(topic, b"x", partition=0, timestamp_ms=ts)
        async with admin_for(kafka_cluster) as admin:
            specs = {
                "earliest": ListOffsetsSpec.earliest(),
                "latest": ListOffsetsSpec.latest(),
                "max": ListOffsetsSpec.max_timestamp(),
                "ts-2500": ListOffsetsSpec.for_timestamp(2_500),
                "ts-5000": ListOffsetsSpec.for_timestamp(5_000),
                "ts-0": ListOffsetsSpec.for_timestamp(0),
                "ts-9999": ListOffsetsSpec.for_timestamp(9_999),
            }
            found = {}
            for name, spec in specs.items():
                found[name] = (await admin.list_offsets({tp: spec})).result(tp)
    assert found["earliest"].offset == 0
    assert found["latest"].offset == len(stamps)
    assert (found["max"].offset, found["max"].timestamp) == (1, 5_000)
    # The earliest offset whose timestamp is >= the target (not the smallest timestamp).
    assert (found["ts-2500"].offset, found["ts-2500"].timestamp) == (1, 5_000)
    assert (found["ts-5000"].offset, found["ts-5000"].timestamp) == (1, 5_000)
    assert (found["ts-0"].offset, found["ts-0"].timestamp) == (0, 1_000)
    assert found["ts-9999"].offset == -1  # no such record


async def test_delete_records_then_earliest(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        tp = TopicPartition(topic, 0)
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i in range(10):
                await producer.send(topic, b"%d" % i, partition=0)
        async with admin_for(kafka_cluster) as admin:
            deleted = (await admin.delete_records({tp: 4})).result(tp)
            assert deleted.low_watermark == 4
            earliest = (await admin.list_offsets({tp: ListOffsetsSpec.earliest()})).result(tp)
            assert earliest.offset == 4
            # -1 deletes up to the high watermark.
            deleted = (await admin.delete_records({tp: -1})).result(tp)
            assert deleted.low_watermark == 10
        got = await consume_all(kafka_cluster, topic, 1, 0)
        assert got == []


async def test_read_committed_hides_an_aborted_transaction(kafka_cluster: KafkaCluster) -> None:
    """commit [a, b], abort [x, y], commit [c]: read_committed sees a, b, c; read_uncommitted
    sees all five; the last stable offset is the high watermark once nothing is open."""
    async with new_topic(kafka_cluster, 1, 3, min_insync_replicas="2") as topic:
        tp = TopicPartition(topic, 0)
        async with Producer(
            bootstrap_servers=kafka_cluster.bootstrap_servers, transactional_id=unique("tx")
        ) as producer:
            for values, commit in (([b"a", b"b"], True), ([b"x", b"y"], False), ([b"c"], True)):
                producer.begin_transaction()
                for value in values:
                    await producer.send(topic, value, partition=0)
                await producer.flush()
                if commit:
                    await producer.commit_transaction()
                else:
                    await producer.abort_transaction()
        committed = await consume_all(kafka_cluster, topic, 1, 3, isolation_level="read_committed")
        assert [value for *_, value, _ in committed] == [b"a", b"b", b"c"]
        everything = await consume_all(kafka_cluster, topic, 1, 5)
        assert [value for *_, value, _ in everything] == [b"a", b"b", b"x", b"y", b"c"]
        async with admin_for(kafka_cluster) as admin:
            latest = (
                await admin.list_offsets(
                    {tp: ListOffsetsSpec.latest()}, IsolationLevel.READ_COMMITTED
                )
            ).result(tp)
        # 5 records and 3 transaction markers.
        assert latest.offset == 8


async def test_record_metadata_timestamp_type_and_log_start_offset(
    kafka_cluster: KafkaCluster,
) -> None:
    """aiokafka's RecordMetadata fields, as the broker reports them: on a LogAppendTime topic
    the timestamp is the broker's and ``timestamp_type`` is 1; ``log_start_offset`` follows
    DeleteRecords. Through the compat producer, as code ported from aiokafka reads them."""
    from aiokafka_ng.compat import AIOKafkaProducer

    async with new_topic(kafka_cluster, 1, 3, message_timestamp_type="LogAppendTime") as topic:
        tp = TopicPartition(topic, 0)
        producer = AIOKafkaProducer(bootstrap_servers=kafka_cluster.bootstrap_servers)
        await producer.start()
        try:
            first = await producer.send_and_wait(topic, b"a", partition=0, timestamp_ms=1_000)
            assert (first.timestamp_type, first.log_start_offset) == (1, 0)
            assert first.timestamp > 1_600_000_000_000  # the broker's clock, not ours
            assert first.topic_partition == tp
            for i in range(4):
                await producer.send_and_wait(topic, b"%d" % i, partition=0)
            async with admin_for(kafka_cluster) as admin:
                assert (await admin.delete_records({tp: 3})).result(tp).low_watermark == 3
            after = await producer.send_and_wait(topic, b"b", partition=0)
            assert (after.offset, after.log_start_offset, after.timestamp_type) == (5, 3, 1)
        finally:
            await producer.stop()
    async with new_topic(kafka_cluster, 1, 3) as topic:  # CreateTime, Kafka's default
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as native:
            metas = await (
                await native.send_many(topic, [b"x", b"y"], partition=0, timestamp_ms=1_000)
            )
            single = await native.send_and_wait(topic, b"z", partition=0, timestamp_ms=2_000)
        assert [(m.timestamp, m.timestamp_type, m.log_start_offset) for m in metas] == [
            (1_000, 0, 0),
            (1_000, 0, 0),
        ]
        assert (single.timestamp, single.timestamp_type, single.log_start_offset) == (2_000, 0, 0)
