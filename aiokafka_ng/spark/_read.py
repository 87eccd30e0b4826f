"""The source: batch and streaming reads of Kafka topics into DataFrames.

Theory of operation
-------------------
*Planning (driver).* Options are parsed and the ``kafka.*`` consumer settings validated;
then one lookup (:mod:`._offsets`) finds every partition of the subscribed topics with its
earliest offset and high watermark. ``startingOffsets``/``endingOffsets`` (``earliest``,
``latest`` or JSON per partition) are resolved against those bounds into exact ranges
``[start, end)``; a range longer than ``maxRecordsPerPartition`` is split, so one Kafka
partition can feed several Spark tasks. Empty ranges produce no task.

*Tasks (executors).* Each task reads one range with a :class:`Consumer` (manual
``assign`` + ``seek``, no group, nothing committed) until its position reaches the end.
The consumer runs under ``anyio.run`` in a thread of the Python worker, handing Arrow record
batches to the task's generator through a small queue: Spark consumes batch N while batch
N+1 is fetched, memory stays bounded by the queue, and no ``Row`` is built per record.
If the generator is closed early (``limit``), the thread is told to stop and joined.
Records already deleted by retention are skipped (the range starts at the log start); there
is no ``failOnDataLoss`` option yet.

*Streaming.* Offsets are JSON ``{"topic": {"partition": next_offset}}``. ``initialOffset``
resolves ``startingOffsets`` (default ``latest``, as Spark's Kafka source); each trigger's
``latestOffset(start, limit)`` reads the high watermarks and, under ``maxOffsetsPerTrigger``,
advances each partition by its share of the budget, proportional to its backlog. Restarting
from a checkpoint resumes from the checkpointed end offsets (Spark passes them as ``start``).
``Trigger.AvailableNow`` is supported: the high watermarks at the trigger are the target.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.errors import KafkaTimeoutError
from aiokafka_ng.spark._offsets import Bounds, partition_bounds
from aiokafka_ng.spark._options import (
    EARLIEST,
    LATEST,
    OffsetSpec,
    SparkOptionError,
    consumer_properties,
    parse_offsets,
    positive_int,
    topics_option,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

__all__ = [
    "SCHEMA",
    "KafkaBatchReader",
    "KafkaRange",
    "KafkaStreamReader",
    "ReadPlan",
    "plan_read",
    "read_range",
]

#: The columns of Spark's own Kafka source (headers always included). Built from types, not
#: DDL: parsing DDL needs a SparkContext, which the planner's Python worker does not have.
SCHEMA = StructType(
    [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
        StructField(
            "headers",
            ArrayType(
                StructType([StructField("key", StringType()), StructField("value", BinaryType())])
            ),
        ),
    ]
)

_ARROW_BATCH_ROWS = 10_000
_QUEUE_BATCHES = 4
_DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs default


@dataclass(frozen=True)
class ReadPlan:
    """Validated read options (pickled to the executors inside each partition)."""

    properties: dict[str, str]
    topics: list[str]
    starting: OffsetSpec
    ending: OffsetSpec
    max_records_per_partition: int | None
    max_offsets_per_trigger: int | None
    poll_timeout_ms: int


def plan_read(options: Mapping[str, str], *, streaming: bool) -> ReadPlan:
    properties = consumer_properties(options)
    topics = topics_option(options)
    starting = parse_offsets(options, "startingOffsets", "latest" if streaming else "earliest")
    if streaming and options.get("endingOffsets") is not None:
        raise SparkOptionError("option 'endingOffsets' is for batch reads only")
    ending = parse_offsets(options, "endingOffsets", "latest")
    poll = positive_int(options, "kafkaConsumer.pollTimeoutMs", _DEFAULT_POLL_TIMEOUT_MS)
    assert poll is not None
    return ReadPlan(
        properties,
        topics,
        starting,
        ending,
        positive_int(options, "maxRecordsPerPartition", None),
        positive_int(options, "maxOffsetsPerTrigger", None),
        poll,
    )


@dataclass(frozen=True)
class KafkaRange(InputPartition):  # type: ignore[misc,unused-ignore]
    """Offsets ``[start, end)`` of one partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int
    plan: ReadPlan


def _resolve(spec: OffsetSpec, tp: TopicPartition, bounds: tuple[int, int]) -> int:
    offset = spec.offset_for(tp.topic, tp.partition)
    if offset == EARLIEST:
        return bounds[0]
    if offset == LATEST:
        return bounds[1]
    return offset


def _ranges(plan: ReadPlan, spans: Mapping[TopicPartition, tuple[int, int]]) -> list[KafkaRange]:
    out: list[KafkaRange] = []
    step = plan.max_records_per_partition
    for tp in sorted(spans):
        start, end = spans[tp]
        while start < end:
            stop = end if step is None else min(end, start + step)
            out.append(KafkaRange(tp.topic, tp.partition, start, stop, plan))
            start = stop
    return out


def _bounds(plan: ReadPlan) -> Bounds:
    return anyio.run(partition_bounds, plan.properties, plan.topics)


class KafkaBatchReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    """``spark.read.format("aiokafka_ng")``: ranges resolved once, at planning time."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        bounds = _bounds(plan)
        spans: dict[TopicPartition, tuple[int, int]] = {}
        for tp, b in bounds.items():
            start = _resolve(plan.starting, tp, b)
            end = _resolve(plan.ending, tp, b)
            where = f"{tp.topic}-{tp.partition}"
            if end < start:
                raise SparkOptionError(
                    f"{where}: endingOffsets ({end}) is before startingOffsets ({start})"
                )
            if end > b[1]:
                # A batch read never waits for records that are not written yet.
                raise SparkOptionError(
                    f"{where}: endingOffsets ({end}) is past the partition's end ({b[1]})"
                )
            spans[tp] = (max(start, b[0]), end)  # records before the log start are gone
        self.ranges = _ranges(plan, spans)

    def partitions(self) -> Sequence[KafkaRange]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        return read_range(partition)


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
    """``spark.readStream.format("aiokafka_ng")``; offsets are ``{topic: {partition: next}}``."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        self._target: dict[str, dict[str, int]] | None = None

    def _latest(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for tp, (_, high) in _bounds(self.plan).items():
            out.setdefault(tp.topic, {})[str(tp.partition)] = high
        return out

    def initialOffset(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for tp, b in _bounds(self.plan).items():
            out.setdefault(tp.topic, {})[str(tp.partition)] = _resolve(self.plan.starting, tp, b)
        return out

    def prepareForTriggerAvailableNow(self) -> None:
        self._target = self._latest()

    def getDefaultReadLimit(self) -> ReadLimit:
        if self.plan.max_offsets_per_trigger is None:
            return super().getDefaultReadLimit()
        return ReadMaxRows(self.plan.max_offsets_per_trigger)

    def latestOffset(
        self, start: dict[str, dict[str, int]], limit: ReadLimit
    ) -> dict[str, dict[str, int]]:
        latest = self._target if self._target is not None else self._latest()
        # Partitions new since ``start`` begin at 0 (their earliest, on a fresh partition).
        begin = {t: {p: start.get(t, {}).get(p, 0) for p in ps} for t, ps in latest.items()}
        lag = {
            (t, p): max(0, high - begin[t][p]) for t, ps in latest.items() for p, high in ps.items()
        }
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
        total = sum(lag.values())
        if budget is None or total <= budget:
            return {t: {p: max(begin[t][p], h) for p, h in ps.items()} for t, ps in latest.items()}
        # Share the budget by backlog; leftovers from rounding go to the largest backlogs.
        share = {k: lag[k] * budget // total for k in lag}
        left = budget - sum(share.values())
        for k in sorted(lag, key=lambda k: lag[k] - share[k], reverse=True):
            if left <= 0:
                break
            if share[k] < lag[k]:
                share[k] += 1
                left -= 1
        return {t: {p: begin[t][p] + share[(t, p)] for p in ps} for t, ps in latest.items()}

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[KafkaRange]:
        spans = {
            TopicPartition(t, int(p)): (start.get(t, {}).get(p, 0), stop)
            for t, ps in end.items()
            for p, stop in ps.items()
        }
        return _ranges(self.plan, spans)

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        return read_range(partition)

    def reportLatestOffset(self) -> dict[str, dict[str, int]]:
        """The high watermarks, for the query's progress report (Spark 4.2+)."""
        return self._latest()

    def commit(self, end: dict[str, dict[str, int]]) -> None:
        """Nothing to do: progress lives in Spark's checkpoint, not in a consumer group."""


# ---------------------------------------------------------------------- executor side

_DONE = object()


def read_range(part: KafkaRange) -> Iterator[pa.RecordBatch]:
    """Arrow batches of the records in ``part`` (runs in the executor's Python worker)."""
    out: queue.Queue[Any] = queue.Queue(maxsize=_QUEUE_BATCHES)
    stop = threading.Event()

    def put(item: Any) -> bool:
        # Blocking put that gives up once the reader side went away.
        while not stop.is_set():
            try:
                out.put(item, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def run() -> None:
        try:
            anyio.run(_consume, part, put, stop)
        except BaseException as exc:  # handed to the task thread, which raises it
            put(exc)
        else:
            put(_DONE)

    thread = threading.Thread(
        target=run, name=f"aiokafka_ng-read-{part.topic}-{part.partition}", daemon=True
    )
    thread.start()
    try:
        while True:
            item = out.get()
            if item is _DONE:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        thread.join()


async def _consume(part: KafkaRange, put: Any, stop: threading.Event) -> None:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    tp = TopicPartition(part.topic, part.partition)
    start, end = part.start, part.end
    poll_timeout = part.plan.poll_timeout_ms / 1000
    pending: list[Any] = []  # records for the next Arrow batch
    async with Consumer.from_properties(part.plan.properties) as consumer:
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        idle_since = anyio.current_time()
        while position < end and not stop.is_set():
            got = await consumer.getmany(tp, timeout_ms=500, max_records=_ARROW_BATCH_ROWS)
            records = got.get(tp, [])
            if records:
                position = records[-1].offset + 1
                idle_since = anyio.current_time()
                # Records come in offset order: trim the ends, keep the middle as is.
                if records[0].offset < start:
                    records = [r for r in records if r.offset >= start]
                if position > end:
                    records = [r for r in records if r.offset < end]
                pending.extend(records)
            else:
                # Gaps (compaction, transaction markers) end without a record at end - 1.
                position = max(position, await consumer.position(tp))
                if anyio.current_time() - idle_since > poll_timeout:
                    raise KafkaTimeoutError(
                        f"no records from {tp.topic}-{tp.partition} at offset {position} for "
                        f"{poll_timeout:.0f}s while reading up to {end} "
                        "(option kafkaConsumer.pollTimeoutMs)"
                    )
            if len(pending) >= _ARROW_BATCH_ROWS or (pending and position >= end):
                batch = _to_arrow(pa, part, pending)
                pending = []
                if not await anyio.to_thread.run_sync(put, batch):
                    return


_NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType", "headers"]


def _to_arrow(pa: Any, part: KafkaRange, records: list[Any]) -> pa.RecordBatch:
    """One Arrow batch in the source's schema: a list comprehension per column, no dict or
    Row per record (headers are passed as the records' own (key, value) tuples)."""
    n = len(records)
    header_type = pa.list_(
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    )
    millis = pa.array([r.timestamp for r in records], pa.int64())
    return pa.RecordBatch.from_arrays(
        [
            pa.array([r.key for r in records], pa.binary()),
            pa.array([r.value for r in records], pa.binary()),
            pa.array([part.topic] * n, pa.string()),
            pa.array([part.partition] * n, pa.int32()),
            pa.array([r.offset for r in records], pa.int64()),
            millis.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
            pa.array([r.timestamp_type for r in records], pa.int32()),
            pa.array([r.headers for r in records], header_type),
        ],
        names=_NAMES,
    )
