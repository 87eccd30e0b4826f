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
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark import _write
from aiokafka_ng.spark._exactly_once import ExactlyOnceCommitError, Slot
from aiokafka_ng.spark._write import (
    ExactlyOnceReplayError,
    KafkaBatchWriter,
    KafkaCommitMessage,
    plan_write,
    write_batches,
)
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, read_all, unique

pytestmark = pytest.mark.kafka

SCHEMA = StructType([StructField("value", BinaryType())])


def _batches(values: list[bytes]) -> Any:
    return iter([pa.RecordBatch.from_arrays([pa.array(values, pa.binary())], ["value"])])


async def _topic(cluster: KafkaCluster) -> str:
    name = unique("eos-slot")
    async with admin_for(cluster) as admin:
        (await admin.create_topics([NewTopic(name, 1, 3)])).raise_on_error()
    return name


async def _committed(cluster: KafkaCluster, topic: str, settle: bool = True) -> list[bytes]:
    return [r.value for r in await read_all(cluster, topic, 1, settle=settle)]


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


def task(plan: Any, rows: list[bytes]) -> KafkaCommitMessage:
    """One task attempt (executor side): its transaction is prepared, not committed."""
    return write_batches(plan, _batches(rows))


def driver_commits(plan: Any, *kept: KafkaCommitMessage) -> None:
    """Spark accepted these attempts: the driver's commit (EndTxn of each)."""
    KafkaBatchWriter(plan).commit(list(kept))


def test_rows_are_visible_only_once_the_driver_commits(setup: Any) -> None:
    cluster, topic, plan, _, _ = setup
    first = task(plan, [b"a", b"b"])
    assert first.prepared is not None and not first.replayed
    assert anyio.run(_committed, cluster, topic, False) == []  # prepared, open: held back
    driver_commits(plan, first)
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b"]


def test_a_retry_of_a_committed_task_writes_nothing(setup: Any) -> None:
    cluster, topic, plan, slot, _ = setup
    rows = [b"a", b"b", b"c"]
    first = task(plan, rows)
    driver_commits(plan, first)
    again = task(plan, rows)  # a replay of the batch after the driver's commit
    assert (first.rows, first.replayed, again.rows, again.replayed) == (3, False, 3, True)
    assert again.prepared is None
    driver_commits(plan, again)  # nothing to end
    slot["batch"] = 1  # the next micro-batch of the slot is written
    driver_commits(plan, task(plan, [b"d"]))
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b", b"c", b"d"]


def test_a_failed_attempts_prepared_rows_are_never_seen(setup: Any) -> None:
    """The gap this design closes: an attempt whose input Spark cut (the task failed
    upstream) prepares a transaction of partial rows; Spark drops its message, the retry's
    InitProducerId aborts that transaction, and only the retry's rows are committed."""
    cluster, topic, plan, _, _ = setup
    failed = task(plan, [b"a"])  # partial: the attempt failed after this
    assert failed.prepared is not None
    retry = task(plan, [b"a", b"b", b"c"])
    assert not retry.replayed
    driver_commits(plan, retry)
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b", b"c"]


def test_a_kept_attempt_fenced_by_its_speculative_twin_fails_the_batch_not_the_data(
    setup: Any,
) -> None:
    """Spark keeps the first attempt to finish; a speculative twin started later has fenced
    it (InitProducerId aborted its transaction). The driver's commit fails, nothing of the
    batch is visible, and the replay writes it once."""
    cluster, topic, plan, _, _ = setup
    kept = task(plan, [b"a", b"b"])
    twin = task(plan, [b"a", b"b"])
    assert twin.prepared is not None and not twin.replayed
    with pytest.raises(ExactlyOnceCommitError, match="1 of 1 task transactions"):
        driver_commits(plan, kept)
    # The twin's transaction is still open (Spark killed the twin): nothing is readable.
    assert anyio.run(_committed, cluster, topic, False) == []
    driver_commits(plan, task(plan, [b"a", b"b"]))  # the replay
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b"]


def test_the_driver_aborts_a_failed_writes_transactions(setup: Any) -> None:
    cluster, topic, plan, _, _ = setup
    attempt = task(plan, [b"a"])
    KafkaBatchWriter(plan).abort([attempt, None])
    assert anyio.run(_committed, cluster, topic) == []
    again = task(plan, [b"a"])  # run again: no marker, written
    assert not again.replayed
    driver_commits(plan, again)
    assert anyio.run(_committed, cluster, topic) == [b"a"]


def test_a_zombie_attempt_is_fenced_and_its_rows_never_seen(setup: Any) -> None:
    cluster, topic, plan, _, txn_id = setup

    async def zombie_then_retry() -> KafkaCommitMessage:
        async with Producer(
            bootstrap_servers=cluster.bootstrap_servers, transactional_id=txn_id
        ) as zombie:
            zombie.begin_transaction()
            await zombie.send(topic, b"zombie")
            await zombie.flush()
            # The retry (or speculative copy) of the same slot starts while it is open.
            retry = await anyio.to_thread.run_sync(task, plan, [b"x", b"y"])
            assert not retry.replayed
            with pytest.raises(KafkaError):
                await zombie.commit_transaction()  # fenced: ProducerFenced / invalid epoch
        return retry

    driver_commits(plan, anyio.run(zombie_then_retry))
    assert anyio.run(_committed, cluster, topic) == [b"x", b"y"]


def test_a_replay_with_other_rows_fails_instead_of_duplicating(setup: Any) -> None:
    cluster, topic, plan, _, _ = setup
    driver_commits(plan, task(plan, [b"a", b"b"]))
    with pytest.raises(ExactlyOnceReplayError, match="replayed with 3 rows"):
        task(plan, [b"a", b"b", b"c"])
    assert anyio.run(_committed, cluster, topic) == [b"a", b"b"]
