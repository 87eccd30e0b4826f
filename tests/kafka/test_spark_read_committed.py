"""The source honours ``kafka.isolation.level=read_committed`` (issue 35, item 3): a read
task of a topic holding committed and aborted transactions yields only the committed
records, and read_uncommitted (the default) yields all of them. Apache Kafka, because
Tansu does not hide aborted records. The read task runs as Spark runs it on an executor
(``KafkaBatchReader`` plans on the "driver", ``read`` is the task), without a JVM."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng.admin import NewTopic
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark._read import KafkaBatchReader, plan_read
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, unique

pytestmark = pytest.mark.kafka


async def _seed(cluster: KafkaCluster, topic: str) -> None:
    async with admin_for(cluster) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 3)])).raise_on_error()
    async with Producer(
        bootstrap_servers=cluster.bootstrap_servers, transactional_id=unique("rc")
    ) as producer:
        for txn, commit in (("a", True), ("b", False), ("c", True)):
            producer.begin_transaction()
            for i in range(5):
                await producer.send(topic, f"{txn}{i}".encode())
            await producer.flush()
            if commit:
                await producer.commit_transaction()
            else:
                await producer.abort_transaction()


def _read(cluster: KafkaCluster, topic: str, isolation: str | None) -> list[str]:
    options = {"kafka.bootstrap.servers": cluster.bootstrap_servers, "subscribe": topic}
    if isolation is not None:
        options["kafka.isolation.level"] = isolation
    reader = KafkaBatchReader(plan_read(options, streaming=False))
    values: list[str] = []
    for part in reader.partitions():
        for batch in reader.read(part):
            values.extend(v.decode() for v in batch.column("value").to_pylist())
    return values


def test_source_reads_only_committed_records_under_read_committed(
    kafka_cluster: KafkaCluster,
) -> None:
    topic = unique("rc")
    anyio.run(_seed, kafka_cluster, topic)
    committed = [f"{t}{i}" for t in "ac" for i in range(5)]
    assert _read(kafka_cluster, topic, "read_committed") == committed
    everything = [f"{t}{i}" for t in "abc" for i in range(5)]
    assert _read(kafka_cluster, topic, None) == everything
