"""The sink: batch and streaming writes of a DataFrame to Kafka.

Theory of operation
-------------------
*Planning (driver).* :func:`plan_write` checks the DataFrame's schema and the options before
any task runs: a ``value`` column (binary or string) is required; ``key`` (binary/string),
``topic`` (string), ``partition`` (int) and ``headers``
(``array<struct<key:string,value:binary>>``) are optional; a topic must come from the
``topic`` option or a ``topic`` column. As in Spark's own Kafka sink, the option wins:
when it is set every row goes to it and the ``topic`` column is ignored; without it each
row's ``topic`` column names its topic (one DataFrame can fan out). Producer settings are
the ``kafka.*`` options (``kafka.key.serializer``/``kafka.value.serializer`` are refused,
as Spark does: keys and values are the columns' bytes), validated by
:class:`~aiokafka_ng.config.ProducerConfig` now rather than in every task.

*Tasks (executors).* Spark hands each task its rows as Arrow record batches (the Arrow
writer interfaces), so no ``Row`` object is built per record. A batch of values (and keys)
for one topic goes through the producer's bulk path with one ``BatchDelivery`` for the batch
instead of a future per record (the largest per-record cost: a write task alone went from
0.52M to 1.06M rows/s); where the C kernel is built (``aiokafka_ng.protocol.speedups``) the
key and value columns go as ``BinaryColumn`` objects, their Arrow buffers read in place, so
record batches are encoded straight from the Arrow columns with no Python object per record
(else each column becomes a list once per batch). Other shapes (a topic or partition per
row, headers) go through ``Producer.send`` in a tight loop over lists. Each task runs
``anyio.run`` in its Python worker with one idempotent :class:`Producer` (the default;
``kafka.enable.idempotence=false`` turns it off) whose ``batch.size`` defaults to
:data:`SINK_BATCH_SIZE` (1 MB, librdkafka's default) rather than 16 KiB. The next Arrow
batch is read from Spark in a worker thread, so decoding input overlaps with the producer's
network I/O.

*Outcomes.* Delivery futures are checked as they complete; at the end the task flushes and
checks the rest. The first failed record fails the task with that record's error (with a
note naming the record and topic), so Spark's task retry applies. Like Spark's own Kafka
sink the guarantee is at-least-once by default: a retried task sends its rows again. With
``exactlyOnce`` each task writes in a Kafka transaction together with a marker of its
micro-batch and leaves it prepared, the driver commits the transactions of the attempts
Spark accepted, and a replayed batch whose marker is committed writes nothing
(:mod:`aiokafka_ng.spark._exactly_once` has the protocol and why it is correct).
The commit message counts rows and payload bytes per topic; the driver logs the totals.
"""

from __future__ import annotations

import contextlib
import logging
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread
from pyspark.sql.datasource import (
    DataSourceArrowWriter,
    DataSourceStreamArrowWriter,
    WriterCommitMessage,
)
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    DataType,
    IntegerType,
    LongType,
    ShortType,
    StringType,
    StructType,
)

from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.producer import BatchDelivery, PreparedTransaction, Producer
from aiokafka_ng.producer.future import Delivery
from aiokafka_ng.protocol.speedups import BinaryColumn
from aiokafka_ng.spark._exactly_once import (
    EXACTLY_ONCE_OPTIONS,
    EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS,
    ExactlyOnce,
    committed_marker,
    complete_prepared,
    plan_exactly_once,
    prepare_with_marker,
    slot_for_task,
)
from aiokafka_ng.spark._options import (
    WRITE_OPTIONS,
    SparkOptionError,
    bool_option,
    option_value,
    producer_properties,
    warn_unknown,
)
from aiokafka_ng.spark._registry import (
    REGISTRY_OPTIONS,
    ValueFormat,
    check_column,
    encoder,
    plan_formats,
)

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

__all__ = [
    "SINK_BATCH_SIZE",
    "ExactlyOnceReplayError",
    "KafkaBatchWriter",
    "KafkaCommitMessage",
    "KafkaStreamWriter",
    "WritePlan",
    "plan_write",
]

log = logging.getLogger(__name__)

_KNOWN = ("key", "value", "topic", "partition", "headers")
#: The sink's ``batch.size`` unless ``kafka.batch.size`` is set: librdkafka's default, not the
#: Java client's 16 KiB. A sink task only ever bulk-loads, and at 100 B records a 16 KiB batch
#: costs more CPU per record than a 1 MB one, in our producer and in the broker (Spark
#: write, 2 tasks, 1M x 100 B, bench/bench_spark.py: 424k -> 714k rows/s). Linger still caps
#: how long a batch waits, so a slow stream's latency does not change.
SINK_BATCH_SIZE = 1_000_000
_BYTES_OR_STRING = (BinaryType, StringType)


@dataclass
class KafkaCommitMessage(WriterCommitMessage):  # type: ignore[misc,unused-ignore]
    """What one task wrote: rows and payload bytes (keys + values) per topic."""

    rows: int = 0
    bytes: int = 0
    per_topic: dict[str, int] = field(default_factory=dict)
    #: exactlyOnce: the rows were already committed by an earlier attempt (none sent now)
    replayed: bool = False
    #: exactlyOnce: the task's transaction, left open for the driver to commit
    prepared: PreparedTransaction | None = None


@dataclass(frozen=True)
class WritePlan:
    """Everything a task needs, checked on the driver; pickled to the executors."""

    properties: dict[str, str]
    topic: str | None
    columns: dict[str, int]  # role in _KNOWN -> position in the rows (names match any case)
    exactly_once: ExactlyOnce | None = None
    formats: tuple[ValueFormat, ...] = ()  # registry-framed key/value (._registry)


class ExactlyOnceReplayError(RuntimeError):
    """A replayed micro-batch differs from the committed one (exactly-once cannot hold)."""


def _type_error(column: str, actual: DataType, wanted: str) -> SparkOptionError:
    return SparkOptionError(f"column '{column}' must be {wanted}, not {actual.simpleString()}")


def _is_header_type(dt: DataType) -> bool:
    if not isinstance(dt, ArrayType) or not isinstance(dt.elementType, StructType):
        return False
    fields = {f.name: f.dataType for f in dt.elementType.fields}
    return (
        set(fields) == {"key", "value"}
        and isinstance(fields["key"], StringType)
        and isinstance(fields["value"], BinaryType)
    )


def plan_write(
    options: Mapping[str, str], schema: StructType, streaming: bool = False
) -> WritePlan:
    """Validate the options and the DataFrame's columns (driver, planning time)."""
    warn_unknown(options, WRITE_OPTIONS | EXACTLY_ONCE_OPTIONS | REGISTRY_OPTIONS, "sink")
    properties = producer_properties(options)
    exactly_once = plan_exactly_once(options, properties, streaming)
    if exactly_once is not None and "transaction.timeout.ms" not in properties:
        # A task's transaction stays open until the driver commits, after the stage's last
        # task: the whole write stage must fit (module _exactly_once, "Cost").
        properties["transaction.timeout.ms"] = str(EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS)
    if "batch.size" not in properties:
        # Never plan a batch larger than a request may carry.
        limit = ProducerConfig.from_properties(properties).max_request_size
        properties["batch.size"] = str(min(SINK_BATCH_SIZE, limit))
    # Accepted as Spark's sink does; headers are written whenever the column exists.
    bool_option(options, "includeHeaders", False)
    types = {f.name.lower(): f.dataType for f in schema.fields}
    if "value" not in types:
        raise SparkOptionError(
            "column 'value' (binary or string) is required to write to Kafka; "
            f"the DataFrame has columns {[f.name for f in schema.fields]}"
        )
    topic = (option_value(options, "topic") or "").strip() or None
    formats = plan_formats(options, [] if topic is None else [topic], writing=True)
    typed = {f.column: f for f in formats}
    for name in ("key", "value"):
        if name in typed and name in types:
            check_column(typed[name], types[name])
        elif name in types and not isinstance(types[name], _BYTES_OR_STRING):
            raise _type_error(name, types[name], "binary or string")
    if "topic" in types and not isinstance(types["topic"], StringType):
        raise _type_error("topic", types["topic"], "string")
    if "partition" in types and not isinstance(
        types["partition"], IntegerType | LongType | ShortType
    ):
        raise _type_error("partition", types["partition"], "int")
    if "headers" in types and not _is_header_type(types["headers"]):
        raise _type_error("headers", types["headers"], "array<struct<key:string,value:binary>>")
    if topic is None and "topic" not in types:
        raise SparkOptionError(
            "no topic to write to: set option 'topic' or add a string column 'topic'"
        )
    positions = {f.name.lower(): i for i, f in enumerate(schema.fields)}
    return WritePlan(
        properties,
        topic,
        {c: positions[c] for c in _KNOWN if c in positions},
        exactly_once,
        formats,
    )


class KafkaBatchWriter(DataSourceArrowWriter):  # type: ignore[misc,unused-ignore]
    """``df.write.format("aiokafka_ng")``: one producer per task."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        _complete(self.plan, messages, commit=True)
        _log_totals("batch write", messages)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        _complete(self.plan, messages, commit=False)
        _log_totals(_aborted(self.plan, "batch write"), messages)


class KafkaStreamWriter(DataSourceStreamArrowWriter):  # type: ignore[misc,unused-ignore]
    """``df.writeStream.format("aiokafka_ng")``: each micro-batch as a batch write."""

    def __init__(self, plan: WritePlan) -> None:
        self.plan = plan

    def write(self, iterator: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
        return write_batches(self.plan, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _complete(self.plan, messages, commit=True)
        _log_totals(f"micro-batch {batchId}", messages)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        _complete(self.plan, messages, commit=False)
        _log_totals(_aborted(self.plan, f"micro-batch {batchId}"), messages)


def _complete(plan: WritePlan, messages: list[WriterCommitMessage | None], commit: bool) -> None:
    """exactlyOnce, on the driver: end the transactions the accepted task attempts left
    open. Spark calls commit only when every task succeeded, with the message of the one
    attempt per task it kept; a failed attempt's transaction is never committed (the
    retry's InitProducerId aborts it)."""
    if plan.exactly_once is None:
        return
    prepared = [
        m.prepared for m in messages if isinstance(m, KafkaCommitMessage) and m.prepared is not None
    ]
    complete_prepared(plan.properties, prepared, commit)


def _aborted(plan: WritePlan, what: str) -> str:
    if plan.exactly_once is None:
        return f"aborted {what} (records already sent stay in Kafka)"
    return f"aborted {what} (the tasks' transactions are aborted)"


def _log_totals(what: str, messages: list[WriterCommitMessage | None]) -> None:
    done = [m for m in messages if isinstance(m, KafkaCommitMessage)]
    replayed = [m for m in done if m.replayed]
    log.info(
        "aiokafka_ng %s: %d tasks wrote %d rows (%d bytes)%s",
        what,
        len(done) - len(replayed),
        sum(m.rows for m in done if not m.replayed),
        sum(m.bytes for m in done if not m.replayed),
        f"; {len(replayed)} tasks found their rows already committed" if replayed else "",
    )


# ---------------------------------------------------------------------- executor side


def write_batches(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
    """Send every row of ``batches`` (runs in the executor's Python worker)."""
    return anyio.run(_produce, plan, batches)


_END = object()


def _next_batch(batches: Iterator[pa.RecordBatch]) -> Any:
    return next(batches, _END)


def _arrow_column(batch: pa.RecordBatch, plan: WritePlan, name: str) -> Any:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    index = plan.columns.get(name)
    if index is None:
        return None
    col = batch.column(index)
    if name in ("key", "value") and (
        pa.types.is_string(col.type) or pa.types.is_large_string(col.type)
    ):
        # Zero-copy reinterpretation: UTF-8 text is sent as its bytes.
        col = col.cast(pa.binary() if pa.types.is_string(col.type) else pa.large_binary())
    return col


def _column(batch: pa.RecordBatch, plan: WritePlan, name: str) -> list[Any] | None:
    col = _arrow_column(batch, plan, name)
    return None if col is None else col.to_pylist()


def _bytes_column(
    batch: pa.RecordBatch, plan: WritePlan, name: str
) -> Sequence[bytes | None] | None:
    """Column ``name`` (key or value) for the producer's bulk path: its Arrow buffers read
    in place by the C kernel (a ``BinaryColumn``: the records are encoded straight from
    them, no Python object per record), or a list where the kernel is not built."""
    if BinaryColumn is None:
        return _column(batch, plan, name)
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    col = _arrow_column(batch, plan, name)
    if col is None:
        return None
    validity, offsets, data = col.buffers()
    return BinaryColumn(
        offsets, data, validity, col.offset, len(col), pa.types.is_large_binary(col.type)
    )


def _payload_bytes(batch: pa.RecordBatch, plan: WritePlan, name: str) -> int:
    """Bytes of column ``name`` (0 without it), summed by Arrow, not per value in Python."""
    import pyarrow.compute as pc  # type: ignore[import-untyped,unused-ignore]

    index = plan.columns.get(name)
    if index is None:
        return 0
    total = pc.sum(pc.binary_length(batch.column(index))).as_py()
    return int(total or 0)  # None when every value is null


def _headers(raw: list[Any]) -> list[list[tuple[str, bytes | None]] | None]:
    return [None if hs is None else [(h["key"], h["value"]) for h in hs] for hs in raw]


def _failed(fut: Delivery[Any], index: int) -> BaseException:
    exc = fut.exception()
    assert exc is not None
    if isinstance(fut, BatchDelivery):
        errors = fut.errors()  # the earliest failed record of the batch names the error
        first = min(errors, default=0)
        exc = errors.get(first, exc)
        where = (
            f"record #{index + first} ({fut.failed} of records #{index}-#{index + fut.count - 1}"
            " failed)"
        )
    else:
        where = f"record #{index}"
    exc.add_note(f"aiokafka_ng spark sink: {where} of this task (topic {fut.topic!r})")
    return exc


def _settle(pending: deque[tuple[int, list[Delivery[Any]]]]) -> None:
    """Drop the chunks whose futures are all done, raising the first delivery error.

    Futures are kept per Arrow batch (one list, no per-record tuple) and checked in order;
    they complete roughly in send order, so this keeps memory bounded by what is in flight
    and fails the task soon after the first error."""
    while pending:
        base, futs = pending[0]
        for j, fut in enumerate(futs):
            if not fut.done():
                del futs[:j]  # the settled prefix is checked; don't scan it again
                pending[0] = (base + j, futs)
                return
            if fut.exception() is not None:
                raise _failed(fut, base + j)
        pending.popleft()


async def _produce(plan: WritePlan, batches: Iterator[pa.RecordBatch]) -> KafkaCommitMessage:
    async with contextlib.AsyncExitStack() as stack:
        # Registry-framed key/value: one registry client and encoder per column and task.
        encoders: dict[str, Callable[[Any], Any]] = {}
        for fmt in plan.formats:
            client = await stack.enter_async_context(fmt.client())
            encoders[fmt.column] = await encoder(fmt, client)
        return await _produce_with(plan, batches, encoders)


def _typed(
    batch: pa.RecordBatch, plan: WritePlan, name: str, encoders: Mapping[str, Callable[[Any], Any]]
) -> list[bytes | None] | None:
    """Column ``name`` encoded by its registry format (._registry); None without one."""
    encode = encoders.get(name)
    index = plan.columns.get(name)
    if encode is None or index is None:
        return None
    out = []
    for i, value in enumerate(batch.column(index).to_pylist()):
        try:
            out.append(encode(value))
        except Exception as exc:
            exc.add_note(f"aiokafka_ng spark sink: the {name} of row #{i} of an Arrow batch")
            raise
    return out


def _nbytes(
    batch: pa.RecordBatch, plan: WritePlan, name: str, typed: list[bytes | None] | None
) -> int:
    if typed is None:
        return _payload_bytes(batch, plan, name)
    return sum(len(v) for v in typed if v is not None)


async def _produce_with(
    plan: WritePlan, batches: Iterator[pa.RecordBatch], encoders: Mapping[str, Callable[[Any], Any]]
) -> KafkaCommitMessage:
    result = KafkaCommitMessage()
    per_topic = result.per_topic
    pending: deque[tuple[int, list[Delivery[Any]]]] = deque()
    eos = plan.exactly_once
    slot = None if eos is None else slot_for_task(eos)
    properties = plan.properties
    if slot is not None:
        properties = {**properties, "transactional.id": slot.transactional_id}
    producer = Producer.from_properties(properties)
    # Transactional: start() is InitProducerId, which fences the slot's older producers and
    # settles their transaction before the marker is read (step 1 of _exactly_once).
    await producer.start()
    ok = False
    try:
        if slot is not None:
            marker = await committed_marker(properties, slot)
            if marker is not None and marker[0] >= slot.batch:
                result = await _replayed(plan, batches, slot.batch, marker[0], marker[1], encoders)
                ok = True
                return result
            producer.begin_transaction()
        sent = 0
        default_topic = plan.topic
        send = producer.send
        if default_topic is not None:
            # The topic's metadata before its first rows, as the Java producer in Spark's
            # own sink waits for it: a topic that cannot be found fails the task after
            # max.block.ms, not each row after delivery.timeout.ms. (It also kept ~30k rows
            # of a fresh task off the producer's one-by-one path for records without
            # metadata: 25% of a 500k-row task's time, before the producer learned to
            # queue a bulk chunk whole.)
            await producer.partitions_for(default_topic)
        # Values (and keys) for one topic, no per-row partition or headers: the bulk path.
        bulk = default_topic is not None and not {"partition", "headers"} & plan.columns.keys()
        while True:
            batch = await anyio.to_thread.run_sync(_next_batch, batches)
            if batch is _END:
                break
            n = batch.num_rows
            if not n:
                continue
            futs: list[Delivery[Any]]
            if bulk:
                # The common shape: values (and keys), one topic: the producer's bulk path,
                # with one future for the whole Arrow batch instead of one per record.
                assert default_topic is not None
                topic = default_topic
                typed_values = _typed(batch, plan, "value", encoders)
                typed_keys = _typed(batch, plan, "key", encoders)
                values = (
                    _bytes_column(batch, plan, "value") if typed_values is None else typed_values
                )
                assert values is not None
                keys = _bytes_column(batch, plan, "key") if typed_keys is None else typed_keys
                futs = [await producer.send_many(topic, values, keys=keys)]
                per_topic[topic] = per_topic.get(topic, 0) + n
                result.bytes += _nbytes(batch, plan, "value", typed_values)
                result.bytes += _nbytes(batch, plan, "key", typed_keys)
            else:
                values = _typed(batch, plan, "value", encoders)
                values = _column(batch, plan, "value") if values is None else values
                assert values is not None
                keys = _typed(batch, plan, "key", encoders)
                keys = _column(batch, plan, "key") if keys is None else keys
                # The option wins over the column (Spark's rule): the column is not read.
                topics = None if default_topic is not None else _column(batch, plan, "topic")
                parts = _column(batch, plan, "partition")
                raw_headers = _column(batch, plan, "headers")
                headers = None if raw_headers is None else _headers(raw_headers)
                # Per-row fields: call send() directly rather than building a
                # ProducerRecord per row for send_batch().
                futs = []
                for i in range(n):
                    row_topic = default_topic or (topics[i] if topics is not None else None)
                    if row_topic is None:
                        raise SparkOptionError(
                            f"row #{sent + i} has a null 'topic' and no option 'topic' is set"
                        )
                    key = keys[i] if keys is not None else None
                    futs.append(
                        await send(
                            row_topic,
                            values[i],
                            key,
                            parts[i] if parts is not None else None,
                            None,
                            headers[i] if headers is not None else None,
                        )
                    )
                    per_topic[row_topic] = per_topic.get(row_topic, 0) + 1
                    result.bytes += len(values[i] or b"") + len(key or b"")
            pending.append((sent, futs))
            sent += n
            _settle(pending)
        if slot is not None:
            # Flushes and checks every record; the driver commits once Spark accepted this
            # attempt (the EndTxn that makes records and marker visible together).
            result.prepared = await prepare_with_marker(producer, slot, sent, result.bytes)
        else:
            await producer.flush()
        _settle(pending)
        assert not pending, "flush() returned with records still in flight"
        result.rows = sent
        ok = True
    finally:
        # On failure do not wait for the rest: the task fails and Spark retries it anyway.
        await producer.close(timeout=None if ok else 0)
    return result


async def _replayed(
    plan: WritePlan,
    batches: Iterator[pa.RecordBatch],
    batch_id: int,
    committed: int,
    meta: Mapping[str, Any],
    encoders: Mapping[str, Callable[[Any], Any]],
) -> KafkaCommitMessage:
    """Batch ``batch_id`` of this slot is committed already: count its rows, send nothing.

    The counts are compared with those the committing attempt stored in the marker: a
    replay that gives this slot other rows (a changed plan or number of partitions, a
    nondeterministic expression) cannot be exactly once, and fails the task instead."""
    rows = nbytes = 0
    while True:
        batch = await anyio.to_thread.run_sync(_next_batch, batches)
        if batch is _END:
            break
        rows += batch.num_rows
        for name in ("value", "key"):  # counted as the committed attempt counted them
            nbytes += _nbytes(batch, plan, name, _typed(batch, plan, name, encoders))
    if committed == batch_id and (meta.get("rows"), meta.get("bytes")) != (rows, nbytes):
        raise ExactlyOnceReplayError(
            f"micro-batch {batch_id} is replayed with {rows} rows ({nbytes} bytes) in this "
            f"task slot, but its committed attempt wrote {meta.get('rows')} rows "
            f"({meta.get('bytes')} bytes): the replay does not give each write task the "
            "rows it had (number of partitions or plan changed, or a nondeterministic "
            "expression), so exactly-once cannot hold; restore the plan the batch ran with"
        )
    log.info(
        "aiokafka_ng exactly-once: batch %d of this slot already committed (marker %d); "
        "%d rows not sent again",
        batch_id,
        committed,
        rows,
    )
    return KafkaCommitMessage(rows=rows, bytes=nbytes, replayed=True)
