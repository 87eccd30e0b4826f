"""The exactly-once sink's per-slot protocol, attempt by attempt, on Apache Kafka: what a
task retry, a speculative twin or an executor's zombie does (issue 35, item 2).

A write task runs as on an executor (``write_batches`` with Arrow batches), except that its
slot is given here: Spark's ``TaskContext`` (partition id, query id, micro-batch id) exists
only inside a Spark task, so ``slot_for_task`` is the one thing replaced. The producer,
transactions, fencing and markers are the real ones against the real cluster.
"""

from __future__ import annotations

from typing import Any

import anyio
import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from aiokafka_ng.admin import NewTopic
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark import _write
from aiokafka_ng.spark._exactly_once import Slot
from aiokafka_ng.spark._write import ExactlyOnceReplayError, plan_write, write_batches
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, unique

pytestmark = pytest.mark.kafka

SCHEMA = StructType([StructField("value", BinaryType())])


def _batches(values: list[bytes]) -> Any:
    return iter([pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])])


async def _topic(cluster: KafkaCluster) -> str:
    name = unique("eos-slot")
    async with admin_for(cluster) as admin:
        (await admin.create_topics([NewTopic(name, 1, 3)])).raise_on_error()
    return name


async def _committed(cluster: KafkaCluster, topic: str) -> list[bytes]:
    tp = TopicPartition(topic, 0)
    async with Consumer(
        bootstrap_servers=cluster.bootstrap_servers, isolation_level="read_committed"
    ) as c:
        c.assign([tp])
        await c.seek_to_beginning(tp)
        end = (await c.end_offsets([tp]))[tp]
        out: list[bytes] = []
        with anyio.fail_after(60):
            while await c.position(tp) < end:
                for records in (await c.getmany(timeout_ms=200)).values():
                    out.extend(r.value for r in records)
    return out


@pytest.fixture
def setup(kafka_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch) -> Any:
    topic = anyio.run(_topic, kafka_cluster)
    plan = plan_write(
        {
            "kafka.bootstrap.servers": kafka_cluster.bootstrap_servers,
            "topic": topic,
            "exactlyOnce": "true",
            "exactlyOnceId": unique("job"),
        },
        SCHEMA,
    )
    slot = {"batch": 0}
    txn_id = f"aiokafka_ng-spark-{plan.exactly_once.write_id}-0"  # type: ignore[union-attr]

    def fake_slot(eos: Any) -> Slot:  # Spark's TaskContext exists only in a Spark task
        return Slot(txn_id, slot["batch"], TopicPartition(topic, 0))

    monkeypatch.setattr(_write, "slot_for_task", fake_slot)
    return kafka_cluster, topic, plan, slot, txn_id


def test_a_retry_of_a_committed_task_writes_nothing(setup: Any) -> None:
    cluster, topic, plan, slot, _ = setup
    rows = [b"a", b"b", b"c"]
    first = write_batches(plan, _batches(rows))
    again = write_batches(plan, _batches(rows))  # the retry / the speculative twin
    assert (first.rows, first.replayed, again.rows, again.replayed) == (3, False, 3, True)
    slot["batch"] = 1  # the next micro-batch of the slot is written
    assert not write_batches(plan, _batches([b"d"])).replayed
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b", b"c", b"d"]


def test_a_zombie_attempt_is_fenced_and_its_rows_never_seen(setup: Any) -> None:
    cluster, topic, plan, _, txn_id = setup

    async def zombie_then_retry() -> None:
        async with Producer(
            bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id
        ) as zombie:
            zombie.begin_transaction()
            await zombie.send(topic, b"zombie")
            await zombie.flush()
            # The retry (or speculative copy) of the same slot starts while it is open.
            retry = await anyio.to_thread.run_sync(write_batches, plan, _batches([b"x", b"y"]))
            assert not retry.replayed
            with pytest.raises(KafkaError):
                await zombie.commit_transaction()  # fenced: ProducerFenced / invalid epoch

    anyio.run(zombie_then_retry)
    assert anyio.run(_committed, cluster, topic) == [b"x", b"y"]


def test_a_replay_with_other_rows_fails_instead_of_duplicating(setup: Any) -> None:
    cluster, topic, plan, _, _ = setup
    write_batches(plan, _batches([b"a", b"b"]))
    with pytest.raises(ExactlyOnceReplayError, match="replayed with 3 rows"):
        write_batches(plan, _batches([b"a", b"b", b"c"]))
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b"]
