"""What Tansu cannot show for the Spark source, on FakeKafka (its model over 127.0.0.1 TCP):
Tansu answers every by-timestamp ListOffsets with 0 and does not implement DeleteRecords
(TANSU.md; checked: a delete_records call times out and the log start stays 0), so positions
by timestamp and ``failOnDataLoss`` are shown against a log whose records 0-4 were deleted
(it starts at offset 5) and whose record at offset ``o`` has timestamp ``o * 1000``.

The planner and the read task are synchronous (they run ``anyio.run`` themselves, on an
event loop of their own), so the tests call them in a worker thread while the fake serves
on the test's loop -- over TCP, since an in-memory connection belongs to the fake's loop."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import TypeVar

import anyio
import anyio.to_thread
import pyarrow as pa
import pytest
from pyspark.sql.types import BinaryType, StructField, StructType

from aiokafka_ng.admin import AdminClient, TopicPartition
from aiokafka_ng.errors import KafkaTimeoutError
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark import SparkOptionError
from aiokafka_ng.spark._read import (
    KafkaBatchReader,
    KafkaDataLossError,
    KafkaRange,
    plan_read,
    read_range,
)
from aiokafka_ng.spark._write import plan_write, write_batches
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio

PRODUCE = 0
LOG_START, HIGH = 5, 10
T = TypeVar("T")


@asynccontextmanager
async def _fake() -> AsyncIterator[FakeKafka]:
    """Topic ``t``, 2 partitions, each holding offsets 5-9 (0-4 deleted), timestamps o*1000."""
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t", 2)
        config = kafka.client_config()
        async with Producer(**config, linger_ms=0) as producer:
            for p in (0, 1):
                for o in range(HIGH):
                    value = b"v%d" % o
                    await producer.send_and_wait(
                        "t", value, key=b"k%d" % o, partition=p, timestamp_ms=o * 1000
                    )
        async with AdminClient(**config) as admin:
            deleted = await admin.delete_records(
                {TopicPartition("t", 0): LOG_START, TopicPartition("t", 1): LOG_START}
            )
            deleted.raise_on_error()
        assert [r.offset for r in kafka.records("t", 0)] == list(range(LOG_START, HIGH))
        yield kafka


async def _in_thread(fn: Callable[[], T]) -> T:
    return await anyio.to_thread.run_sync(fn)


def _spans(reader: KafkaBatchReader) -> list[tuple[int, int, int]]:
    return [(r.partition, r.start, r.end) for r in reader.ranges]


async def test_positions_by_timestamp() -> None:
    async with _fake() as fake:
        boot = {"kafka.bootstrap.servers": fake.bootstrap_servers, "subscribe": "t"}

        def plan(**options: str) -> KafkaBatchReader:
            return KafkaBatchReader(plan_read({**boot, **options}, streaming=False))

        # First offset at or after each timestamp: 6500 -> 7, 8000 -> 8.
        reader = await _in_thread(lambda: plan(startingTimestamp="6500", endingTimestamp="8000"))
        assert _spans(reader) == [(0, 7, 8), (1, 7, 8)]
        # Per partition; an ending timestamp after every record ends at the high watermark.
        by_partition = '{"t": {"0": 0, "1": 9000}}'
        reader = await _in_thread(
            lambda: plan(startingOffsetsByTimestamp=by_partition, endingTimestamp="99999999")
        )
        assert _spans(reader) == [(0, LOG_START, HIGH), (1, 9, HIGH)]
        # The global timestamp is preferred over the per-partition JSON and the offsets.
        reader = await _in_thread(
            lambda: plan(
                startingTimestamp="9000",
                startingOffsetsByTimestamp=by_partition,
                startingOffsets="earliest",
            )
        )
        assert _spans(reader) == [(0, 9, HIGH), (1, 9, HIGH)]
        # No record that late: fail (Spark's default strategy), or start at the end.
        with pytest.raises(SparkOptionError, match="no record at or after timestamp 99999"):
            await _in_thread(lambda: plan(startingTimestamp="99999"))
        reader = await _in_thread(
            lambda: plan(startingTimestamp="99999", startingOffsetsByTimestampStrategy="latest")
        )
        assert _spans(reader) == []
        # Per-partition JSON must name every partition read.
        with pytest.raises(SparkOptionError, match="must name every partition"):
            await _in_thread(lambda: plan(startingOffsetsByTimestamp='{"t": {"0": 0}}'))


async def test_fail_on_data_loss_at_planning() -> None:
    async with _fake() as fake:
        options = {
            "kafka.bootstrap.servers": fake.bootstrap_servers,
            "assign": '{"t": [0]}',
            "startingOffsets": '{"t": {"0": 2}}',
        }
        with pytest.raises(KafkaDataLossError, match="offsets 2-4 were deleted"):
            await _in_thread(lambda: KafkaBatchReader(plan_read(options, streaming=False)))
        lenient = {**options, "failOnDataLoss": "false"}
        reader = await _in_thread(lambda: KafkaBatchReader(plan_read(lenient, streaming=False)))
        assert _spans(reader) == [(0, LOG_START, HIGH)]


async def test_fail_on_data_loss_in_a_read_task() -> None:
    # Records deleted after planning: the task's first fetch is out of range.
    async with _fake() as fake:
        options = {"kafka.bootstrap.servers": fake.bootstrap_servers, "subscribe": "t"}

        def read(**extra: str) -> pa.Table:
            plan = plan_read({**options, **extra}, streaming=False)
            return pa.Table.from_batches(list(read_range(KafkaRange("t", 0, 2, 8, plan))))

        with pytest.raises(KafkaDataLossError, match="offset 2 is out of range"):
            await _in_thread(read)
        table = await _in_thread(lambda: read(failOnDataLoss="false"))
        assert table.column("offset").to_pylist() == [5, 6, 7]
        assert table.column("value").to_pylist() == [b"v5", b"v6", b"v7"]


async def test_write_task_waits_for_its_topic_and_fails_when_it_never_appears() -> None:
    # The fake, without auto-creation, answers Metadata for an unknown topic with
    # UNKNOWN_TOPIC_OR_PARTITION (Tansu creates every topic it is asked about).
    async with FakeKafka(brokers=1, auto_create_topics=False) as fake:
        fake.create_topic("t", 1)
        batch = pa.RecordBatch.from_arrays([pa.array([b"a", b"b"])], names=["value"])
        options = {
            "kafka.bootstrap.servers": fake.bootstrap_servers,
            "kafka.enable.idempotence": "false",
            "kafka.max.block.ms": "300",
            "topic": "missing",
        }
        plan = plan_write(options, StructType([StructField("value", BinaryType())]))
        # Before its first row the task waits for the topic (max.block.ms), as the Java
        # producer in Spark's sink does, rather than queueing rows for delivery.timeout.ms.
        with pytest.raises(KafkaTimeoutError, match="missing"), anyio.fail_after(20):
            await anyio.to_thread.run_sync(
                lambda: write_batches(plan, iter([batch])), abandon_on_cancel=True
            )
        assert fake.requests()[PRODUCE] == 0  # no row left the task
        assert "missing" not in fake.cluster.topics
