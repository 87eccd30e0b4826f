"""Transactions v2 (KIP-890 part 2) on Apache Kafka 4.4, whose new clusters finalize
``transaction.version`` 2: partitions and the consumer group join the transaction through
Produce v12 / TxnOffsetCommit v5 (no AddPartitionsToTxn, no AddOffsetsToTxn), and every
EndTxn moves the epoch. A consume-transform-produce run of 20 commits and 5 aborts keeps
exactly-once; the same run with the cluster set back to transaction.version 1 takes the
classic path, so the producer still works with version 1 clusters."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import TopicPartition
from aiokafka_ng.admin.features import FeatureUpdate, UpgradeType
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic, unique
from tests.kafka.test_java_interop import run_java, unb64

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

CHUNK = 4


async def read_committed(cluster: KafkaCluster, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        auto_offset_reset="earliest",
        isolation_level="read_committed",
    )
    got: list[bytes] = []
    async with consumer:
        consumer.assign([TopicPartition(topic, 0)])
        with anyio.fail_after(30):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records if r.value is not None]
        # Nothing after the last committed record (an aborted one would show up here).
        extra = await consumer.getmany(timeout_ms=1000)
        got += [r.value for rs in extra.values() for r in rs if r.value is not None]
    return got


async def transform_run(
    cluster: KafkaCluster, source: str, sink: str, group: str, transactions: int
) -> tuple[Producer, list[bytes], int]:
    """``transactions`` transactions of CHUNK records each; every fifth is aborted (its
    records and offsets must vanish). Returns the producer (closed), what was committed,
    and the epoch before the first transaction."""
    inputs = await read_committed(cluster, source, transactions * CHUNK)
    producer = Producer(bootstrap_servers=cluster.bootstrap_servers, transactional_id=unique("tv2"))
    committed: list[bytes] = []
    position = 0
    async with producer:
        assert producer._txn is not None
        first_epoch = producer._txn.idem.epoch
        for n in range(transactions):
            producer.begin_transaction()
            if n % 5 == 4:
                for i in range(CHUNK):
                    await producer.send(sink, b"aborted-%d-%d" % (n, i), partition=0)
                await producer.send_offsets_to_transaction(
                    {TopicPartition(source, 0): position + 1000}, group
                )
                await producer.abort_transaction()
                continue
            chunk = inputs[position : position + CHUNK]
            for value in chunk:
                await producer.send(sink, value.upper(), partition=0)
            position += CHUNK
            await producer.send_offsets_to_transaction({TopicPartition(source, 0): position}, group)
            await producer.commit_transaction()
            committed += [v.upper() for v in chunk]
    return producer, committed, first_epoch


async def check_run(cluster: KafkaCluster, transactions: int, *, v2: bool) -> tuple[Producer, int]:
    async with new_topic(cluster, 1, 3) as source, new_topic(cluster, 1, 3) as sink:
        async with Producer(bootstrap_servers=cluster.bootstrap_servers) as feeder:
            for i in range(transactions * CHUNK):
                await feeder.send(source, b"record-%03d" % i, partition=0)
        group = unique("tv2-group")
        producer, committed, first_epoch = await transform_run(
            cluster, source, sink, group, transactions
        )
        assert producer._txn is not None and producer._txn.v2 is v2
        assert await read_committed(cluster, sink, len(committed)) == committed
        if v2:  # the Java client's read_committed consumer as a second witness
            lines = await run_java(
                cluster,
                [
                    {
                        "op": "consume",
                        "topic": sink,
                        "isolation": "read_committed",
                        "count": len(committed),
                    }
                ],
            )
            assert [unb64(line["value"]) for line in lines if line["op"] == "record"] == committed
        async with admin_for(cluster) as admin:
            offsets = await admin.list_consumer_group_offsets(group)
        tp = TopicPartition(source, 0)
        assert offsets[tp].offset == len(committed)  # no aborted offset commit applied
        return producer, first_epoch


async def test_transactions_v2_consume_transform_produce(kafka_cluster: KafkaCluster) -> None:
    async with admin_for(kafka_cluster) as admin:
        features = await admin.describe_features()
    assert features.finalized.get("transaction.version", (0, 0))[1] >= 2
    producer, first_epoch = await check_run(kafka_cluster, 25, v2=True)
    assert producer._txn is not None
    requests = producer._txn.client.requests if producer._txn.client else {}
    # Transactions v2: nothing added explicitly, and every EndTxn moved the epoch.
    assert requests.get("AddPartitionsToTxn", 0) == 0
    assert requests.get("AddOffsetsToTxn", 0) == 0
    assert producer._txn.idem.epoch == first_epoch + 25


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # flips a cluster-wide feature
async def test_transaction_version_1_still_works(
    anyio_backend: str, kafka_cluster: KafkaCluster
) -> None:
    async def set_level(level: int) -> None:
        async with admin_for(kafka_cluster) as admin:
            kind = UpgradeType.SAFE_DOWNGRADE if level < 2 else UpgradeType.UPGRADE
            result = await admin.update_features(
                {"transaction.version": FeatureUpdate(level, kind)}
            )
            result.raise_on_error()
            await eventually(
                admin.describe_features,
                lambda f: f.finalized.get("transaction.version", (0, 0))[1] == level,
            )

    await set_level(1)
    try:
        producer, first_epoch = await check_run(kafka_cluster, 10, v2=False)
        assert producer._txn is not None and producer._txn.client is not None
        assert producer._txn.client.requests.get("AddPartitionsToTxn", 0) >= 8
        assert producer._txn.idem.epoch == first_epoch  # v1: EndTxn leaves the epoch
    finally:
        await set_level(2)
