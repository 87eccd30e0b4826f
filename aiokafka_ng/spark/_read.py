"""The source: batch and streaming reads of Kafka topics into DataFrames.

Theory of operation
-------------------
*Planning (driver).* :mod:`._plan` parses the options with Spark's Kafka connector rules;
then one lookup (:mod:`._offsets`) finds every partition of the subscription (assign,
subscribe or subscribePattern) with its earliest offset and high watermark. The starting
and ending positions (by timestamp, or earliest/latest/JSON offsets) are resolved against
those bounds into exact ranges ``[start, end)``, split by ``maxRecordsPerPartition`` and
``minPartitions`` so one Kafka partition can feed several Spark tasks. Empty ranges produce
no task. A start below the log start is data loss: ``failOnDataLoss`` decides.

*Tasks (executors).* Each task reads one range with a :class:`Consumer` (manual
``assign`` + ``seek``, no group, nothing committed) until its position reaches the end.
The consumer runs under ``anyio.run`` in a thread of the Python worker, handing Arrow record
batches to the task's generator through a small queue: Spark consumes batch N while batch
N+1 is fetched, memory stays bounded by the queue, and no ``Row`` is built per record.
If the generator is closed early (``limit``), the thread is told to stop and joined.
Records deleted after planning make the fetch go out of range: with ``failOnDataLoss``
(``auto.offset.reset=none``) the task fails naming the offset, without it the consumer
resets to the log start and the task reads on.

*Streaming.* Offsets are JSON ``{"topic": {"partition": next_offset}}``. ``initialOffset``
resolves the starting position (default ``latest``, as Spark's Kafka source), except that
``latest`` stays -1 and means the end of the partition when the first batch is planned:
Spark asks for the initial offset again when it replays batch 0 after a restart, and a
resolved ``latest`` would have moved by then (the replay would read other rows); each trigger's
``latestOffset(start, limit)`` reads the high watermarks and, under ``maxOffsetsPerTrigger``,
advances each partition by its share of the budget, proportional to its backlog; under
``minOffsetsPerTrigger`` it returns ``start`` (no batch) while fewer records wait and
``maxTriggerDelay`` has not passed. A partition that vanished, or now ends before our
offset, is data loss. Restarting from a checkpoint resumes from the checkpointed end offsets
(Spark passes them as ``start``). ``Trigger.AvailableNow`` is supported: the high watermarks
at the trigger are the target.
"""

from __future__ import annotations

import contextlib
import queue
import threading
import time
from array import array
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from pyspark.sql.datasource import DataSourceReader, DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadLimit, ReadMaxRows, SupportsTriggerAvailableNow

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.errors import KafkaTimeoutError, OffsetOutOfRangeError
from aiokafka_ng.protocol.record_columns import RecordColumns
from aiokafka_ng.spark._options import LATEST, OffsetSpec, SparkOptionError, log
from aiokafka_ng.spark._plan import (
    DATA_LOSS_HINT,
    ReadPlan,
    plan_bounds,
    plan_read,
    read_schema,
    resolve_positions,
    split_ranges,
)
from aiokafka_ng.spark._registry import ValueFormat, decode_column, reader_for

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

__all__ = [
    "KafkaBatchReader",
    "KafkaDataLossError",
    "KafkaRange",
    "KafkaStreamReader",
    "ReadPlan",
    "plan_read",
    "read_range",
    "read_schema",
]

_ARROW_BATCH_ROWS = 10_000
#: Keys + values per Arrow batch at most (binary columns use int32 offsets: < 2 GiB).
_ARROW_BATCH_BYTES = 64 << 20
_QUEUE_BATCHES = 4


class KafkaDataLossError(RuntimeError):
    """Records the query had to read are gone from Kafka, and ``failOnDataLoss`` is true."""


@dataclass(frozen=True)
class KafkaRange(InputPartition):  # type: ignore[misc,unused-ignore]
    """Offsets ``[start, end)`` of one partition: the work of one Spark task."""

    topic: str
    partition: int
    start: int
    end: int
    plan: ReadPlan


def _ranges(plan: ReadPlan, spans: Mapping[TopicPartition, tuple[int, int]]) -> list[KafkaRange]:
    return [
        KafkaRange(tp.topic, tp.partition, start, end, plan)
        for tp, start, end in split_ranges(plan, spans)
    ]


def _lost(plan: ReadPlan, what: str) -> None:
    """Data loss: fail the query, or (failOnDataLoss=false) log it and go on."""
    if plan.fail_on_data_loss:
        raise KafkaDataLossError(f"{what}: {DATA_LOSS_HINT}")
    log.warning("%s; failOnDataLoss=false, so the query reads on", what)


class KafkaBatchReader(DataSourceReader):  # type: ignore[misc,unused-ignore]
    """``spark.read.format("aiokafka_ng")``: ranges resolved once, at planning time."""

    def __init__(self, plan: ReadPlan) -> None:
        assert plan.ending is not None
        self.plan = plan
        bounds = plan_bounds(plan)
        starts = resolve_positions(plan, plan.starting, bounds, "starting")
        ends = resolve_positions(plan, plan.ending, bounds, "ending")
        spans: dict[TopicPartition, tuple[int, int]] = {}
        for tp, (low, high) in bounds.items():
            start, end = starts[tp], ends[tp]
            where = f"{tp.topic}-{tp.partition}"
            if end < start:
                raise SparkOptionError(f"{where}: the end ({end}) is before the start ({start})")
            if end > high:
                # A batch read never waits for records that are not written yet.
                raise SparkOptionError(
                    f"{where}: the end ({end}) is past the partition's end ({high})"
                )
            if start < low:
                _lost(plan, f"{where}: offsets {start}-{min(low, end) - 1} were deleted")
            spans[tp] = (max(start, low), end)
        self.ranges = _ranges(plan, spans)

    def partitions(self) -> Sequence[KafkaRange]:
        return self.ranges

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        assert isinstance(partition, KafkaRange)
        return read_range(partition)


def _begin(offset: int, high: int) -> int:
    """Where a partition's next batch starts: at ``offset``, unless the partition now ends
    before it (re-created, and allowed by failOnDataLoss=false): then from its start.
    ``LATEST`` (a start the first batch resolves, see ``initialOffset``): at ``high``."""
    if offset == LATEST:
        return high
    return offset if offset <= high else 0


class KafkaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):  # type: ignore[misc,unused-ignore]
    """``spark.readStream.format("aiokafka_ng")``; offsets are ``{topic: {partition: next}}``."""

    def __init__(self, plan: ReadPlan) -> None:
        self.plan = plan
        self._target: dict[str, dict[str, int]] | None = None
        self._last_trigger: float | None = None  # monotonic time of the last batch planned

    def _latest(self) -> dict[str, dict[str, int]]:
        out: dict[str, dict[str, int]] = {}
        for tp, (_, high) in plan_bounds(self.plan).items():
            out.setdefault(tp.topic, {})[str(tp.partition)] = high
        return out

    def initialOffset(self) -> dict[str, dict[str, int]]:
        bounds = plan_bounds(self.plan)
        starts = resolve_positions(self.plan, self.plan.starting, bounds, "starting")
        out: dict[str, dict[str, int]] = {}
        spec = self.plan.starting
        for tp, offset in starts.items():
            if isinstance(spec, OffsetSpec) and spec.offset_for(tp.topic, tp.partition) == LATEST:
                # Kept as LATEST: the first batch starts where it ends (reads nothing) and
                # later batches from there. Spark does not keep a stream's initial offset in
                # the checkpoint and asks again when it replays batch 0 after a restart;
                # the high watermark then is later, and resolved now it would change the
                # replayed batch's rows (read from the partition's start: beyond the end).
                offset = LATEST
            out.setdefault(tp.topic, {})[str(tp.partition)] = offset
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
        for t, ps in start.items():
            for p, offset in ps.items():
                high = latest.get(t, {}).get(p)
                if high is None:
                    _lost(self.plan, f"{t}-{p} is gone (deleted topic or partition)")
                elif offset > high:
                    # The partition restarted below our position (topic re-created):
                    # without failing, read the new records from its start.
                    _lost(self.plan, f"{t}-{p}: its end ({high}) is before our offset {offset}")
        # Partitions new since ``start`` (or re-created) begin at 0 (earliest: a fresh one).
        begin = {
            t: {p: _begin(start.get(t, {}).get(p, 0), high) for p, high in ps.items()}
            for t, ps in latest.items()
        }
        lag = {
            (t, p): max(0, high - begin[t][p]) for t, ps in latest.items() for p, high in ps.items()
        }
        total = sum(lag.values())
        if self._delay(total):
            return start
        budget = limit.max_rows if isinstance(limit, ReadMaxRows) else None
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

    def _delay(self, available: int) -> bool:
        """minOffsetsPerTrigger: skip this trigger while fewer records wait and less than
        maxTriggerDelay has passed since the last batch (not under Trigger.AvailableNow)."""
        wanted = self.plan.min_offsets_per_trigger
        now = time.monotonic()
        if wanted is None or self._target is not None:
            return False
        last = self._last_trigger
        if last is None or now - last >= self.plan.max_trigger_delay_s or available >= wanted:
            self._last_trigger = now
            return False
        return True

    def partitions(
        self, start: dict[str, dict[str, int]], end: dict[str, dict[str, int]]
    ) -> Sequence[KafkaRange]:
        spans = {
            TopicPartition(t, int(p)): (_begin(start.get(t, {}).get(p, 0), stop), stop)
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
    with_headers = part.plan.include_headers
    properties = dict(part.plan.properties)
    # failOnDataLoss: an offset out of range must reach us, not be reset silently.
    properties["auto.offset.reset"] = "none" if part.plan.fail_on_data_loss else "earliest"
    async with contextlib.AsyncExitStack() as stack:
        consumer = await stack.enter_async_context(Consumer.from_properties(properties))
        # Registry-framed key/value: one registry client and decoder per column and task.
        decoders = []
        for fmt in part.plan.formats:
            client = await stack.enter_async_context(fmt.client())
            decoders.append((fmt, reader_for(fmt, client)))
        consumer.assign([tp])
        consumer.seek(tp, start)
        position = start
        idle_since = anyio.current_time()
        # Whole record batches, decoded straight into column buffers (no object per record).
        columns = RecordColumns(with_headers)
        while position < end and not stop.is_set():
            try:
                batches, first = await consumer._getmany_batches(tp, 500, _ARROW_BATCH_ROWS)
            except OffsetOutOfRangeError as exc:
                raise KafkaDataLossError(
                    f"{tp.topic}-{tp.partition}: offset {position} is out of range ({exc}): "
                    + DATA_LOSS_HINT
                ) from exc
            if batches:
                idle_since = anyio.current_time()
                low = max(start, first)
                for batch in batches:
                    columns.add_batch(batch, low, end)
                position = batches[-1].next_offset
            else:
                # Gaps (compaction, transaction markers) end without a record at end - 1.
                position = max(position, await consumer.position(tp))
                if anyio.current_time() - idle_since > poll_timeout:
                    raise KafkaTimeoutError(
                        f"no records from {tp.topic}-{tp.partition} at offset {position} for "
                        f"{poll_timeout:.0f}s while reading up to {end} "
                        "(option kafkaConsumer.pollTimeoutMs)"
                    )
            full = columns.count >= _ARROW_BATCH_ROWS or columns.data_bytes >= _ARROW_BATCH_BYTES
            if full or (columns.count and position >= end):
                arrow = _to_arrow(pa, part, columns)
                for fmt, decoder in decoders:
                    arrow = await _decoded(arrow, fmt, decoder, tp)
                columns = RecordColumns(with_headers)
                if not await anyio.to_thread.run_sync(put, arrow):
                    return


_NAMES = ["key", "value", "topic", "partition", "offset", "timestamp", "timestampType"]


async def _decoded(
    arrow: pa.RecordBatch, fmt: ValueFormat, decoder: Any, tp: TopicPartition
) -> Any:
    """``arrow`` with its ``fmt.column`` decoded from registry-framed Avro (._registry)."""
    offsets = arrow.column(_NAMES.index("offset"))

    def where(i: int) -> str:
        return f"the {fmt.column} of {tp.topic}-{tp.partition} offset {offsets[i].as_py()}"

    index = _NAMES.index(fmt.column)
    typed = await decode_column(fmt, arrow.column(index), where, decoder)
    return arrow.set_column(index, fmt.column, typed)


def _binary(
    pa: Any, n: int, data: bytearray, offsets: array[int], valid: bytearray, nulls: int
) -> Any:
    """An Arrow binary column on the buffers as they are: data, offsets, validity (a byte
    per record, turned into Arrow's bitmap only when there is a null)."""
    if nulls == n:
        return pa.nulls(n, pa.binary())
    validity = None
    if nulls:
        mask = pa.Array.from_buffers(pa.uint8(), n, [None, pa.py_buffer(valid)])
        validity = mask.cast(pa.bool_()).buffers()[1]
    buffers = [validity, pa.py_buffer(offsets), pa.py_buffer(data)]
    return pa.Array.from_buffers(pa.binary(), n, buffers, null_count=nulls)


def _offsets(pa: Any, pc: Any, n: int, runs: list[int]) -> Any:
    """Every record's offset from the runs of consecutive offsets: a running sum of ones,
    with each run's jump at its first record."""
    steps = array("q", [1]) * n
    prior = 0  # the running sum just before the run's first record
    first = at = 0  # the previous run's first offset and index
    for j in range(0, len(runs), 2):
        index, offset = runs[j], runs[j + 1]
        if j:
            prior = first + (index - 1 - at)  # the offset of the record before this run
        steps[index] = offset - prior
        first, at = offset, index
    return pc.cumulative_sum(pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(steps)]))


def _by_batch(pa: Any, pc: Any, n: int, runs: list[int], field: int, arrow_type: Any) -> Any:
    """One value per record from the per-batch runs (index, base timestamp, type)."""
    values = runs[field::3]
    if len(values) == 1:
        return pa.repeat(pa.scalar(values[0], arrow_type), n)
    ends = [*runs[3::3], n]
    encoded = pa.RunEndEncodedArray.from_arrays(
        pa.array(ends, pa.int32()), pa.array(values, arrow_type)
    )
    return pc.run_end_decode(encoded)


def _to_arrow(pa: Any, part: KafkaRange, c: RecordColumns) -> pa.RecordBatch:
    """One Arrow batch in the source's schema, from column buffers and runs, by Arrow's own
    kernels (running sums, run-end decoding): no Python object is made per record here
    (headers, when asked for, are the records' own tuples)."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    n = c.count
    runs = c.batch_runs
    deltas = pa.Array.from_buffers(pa.int64(), n, [None, pa.py_buffer(c.ts_deltas)])
    millis = pc.add(deltas, _by_batch(pa, pc, n, runs, 1, pa.int64()))
    columns = [
        _binary(pa, n, c.keys, c.key_offsets, c.key_valid, c.key_nulls),
        _binary(pa, n, c.values, c.value_offsets, c.value_valid, c.value_nulls),
        pa.repeat(pa.scalar(part.topic, pa.string()), n),
        pa.repeat(pa.scalar(part.partition, pa.int32()), n),
        _offsets(pa, pc, n, c.offset_runs),
        millis.cast(pa.timestamp("ms", tz="UTC")).cast(pa.timestamp("us", tz="UTC")),
        _by_batch(pa, pc, n, runs, 2, pa.int32()),
    ]
    if not part.plan.include_headers:
        return pa.RecordBatch.from_arrays(columns, names=_NAMES)
    header_type = pa.list_(
        pa.struct([pa.field("key", pa.string()), pa.field("value", pa.binary())])
    )
    # A record without headers has a null `headers`, as Spark's own connector gives (its
    # converter returns null when the record's header iterator is empty), not an empty array.
    columns.append(pa.array([h or None for h in c.headers], header_type))
    return pa.RecordBatch.from_arrays(columns, names=[*_NAMES, "headers"])
