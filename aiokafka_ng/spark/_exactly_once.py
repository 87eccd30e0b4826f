"""Exactly-once writes for the sink (``.option("exactlyOnce", "true")``).

Theory of operation
-------------------
*Names.* Every write task has a **slot**: the Spark partition id of the write stage
(``TaskContext.partitionId()``), the same for a task, its retries and its speculative
copies. A write has an **id**: the streaming query's id (``sql.streaming.queryId``, kept in
the checkpoint, so it survives restarts) or, for a batch write, the option
``exactlyOnceId``. A streaming write's **batch** is the micro-batch id
(``streaming.sql.batchId``); a batch write is batch 0. Slot ``s`` of write ``id`` uses the
transactional id ``{prefix}{id}-{s}`` (one per slot, reused by every micro-batch) and keeps
its **marker** as the committed offset of the consumer group of the same name on partition
0 of the marker topic (``exactlyOnceMarkerTopic``, by default the ``topic`` option): offset
= the last batch the slot committed, metadata = that batch's row and byte counts.

*A task of batch B in slot s* (``_write.py`` runs it):

1. starts a producer with the slot's transactional id. InitProducerId fences every older
   producer of the slot (a zombie attempt, a speculative twin, the task of a killed
   driver) and settles its transaction: an open one is aborted, one already being
   committed finishes first (the coordinator answers CONCURRENT_TRANSACTIONS until then);
2. reads the marker with OffsetFetch ``require_stable`` (KIP-447: the broker refuses to
   answer while a transactional offset commit is pending, so what we read is final);
3. marker >= B: this slot's output of batch B is already in Kafka. The rows are read and
   counted, nothing is written; if the counts differ from the marker's the task fails
   (the batch is not the batch that was committed: see *Determinism*);
4. else: begin a transaction, send the rows, add the marker (TxnOffsetCommit B for the
   slot's group) to the same transaction, commit. Records and marker become visible
   together or not at all.

*Why each Spark failure is exactly once.* Output of (B, s) is visible to read_committed
consumers iff the transaction holding it committed, and then the marker says B. Step 1
makes one producer per slot alive at a time, and step 2 runs after every earlier
transaction of the slot is settled, so a task sees the marker of every earlier committed
attempt. Hence at most one attempt of (B, s) commits, and the batch is complete once
every slot has committed or found its marker.

- Task retry, executor loss: the new attempt fences the old one (whose commit then fails
  with ProducerFenced) and writes only if no attempt committed. Not covered: a task that
  fails *upstream* of the sink (a UDF, the read) after the sink sent rows. Spark 4.3 can
  end that attempt's input to the writer as if it were complete (an Arrow stream cut at a
  batch boundary reads as a whole one), and the attempt then commits its partial rows and
  marker; every retry finds fewer rows in the marker than it has and fails with
  ExactlyOnceReplayError (step 3): no duplicate, but the write fails with rows missing
  (tests/kafka/test_spark_exactly_once_retry.py). Telling a cut input from a whole one, or
  committing the slots' transactions on the driver once Spark accepted the tasks, would
  close it.
- Speculative duplicates: the same, whichever starts second; both succeed from Spark's view
  and Spark keeps one commit message.
- Driver killed after some or all tasks committed but before the checkpoint's commit log
  has B: the restart replays B (same offsets, from the offset log); committed slots find
  their marker and write nothing, the others write.
- Driver killed mid-task: the task's transaction stays open until the replay's attempt
  fences it (or transaction.timeout.ms passes); read_committed consumers wait (LSO) and
  never see its records.

*Determinism (what the replay must keep).* A replay of B must give slot s the same rows
as the first run. Spark replays a micro-batch from the offsets in its offset log, so this
holds for this source and any deterministic plan (narrow transformations, hash
partitioning). A restart with a different number of write partitions for a batch that was
half committed (a changed ``repartition(n)``, a changed plan, nondeterministic expressions)
breaks it: new slots have no marker and rewrite rows old slots committed. Step 3 catches
it on any slot whose row or byte count changed, failing the query rather than continuing;
slots that already ran may have written duplicates. A restart with a different number of
*input* partitions is fine: the pending batch keeps the partitions in its offset log, and
the new ones join from the next batch (new slots start without a marker).

*Cost.* Per task per micro-batch: InitProducerId, FindCoordinator + OffsetFetch,
AddPartitionsToTxn, AddOffsetsToTxn + TxnOffsetCommit, EndTxn, and the transaction markers
the brokers write into each partition; a few milliseconds per task on a LAN, not per row.
Read_committed consumers see the records only after the commit (end-to-end latency grows
by up to one micro-batch). Markers are group offsets: Kafka expires those of an empty group
after ``offsets.retention.minutes`` (7 days); a query restarted from a checkpoint after
longer than that, whose last batch was committed to Kafka but not to the checkpoint,
writes that batch again.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka_ng.admin import AdminClient, AdminConfig
from aiokafka_ng.admin import TopicPartition as AdminTopicPartition
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.spark._options import SparkOptionError, bool_option, option_value

__all__ = [
    "DEFAULT_PREFIX",
    "EXACTLY_ONCE_OPTIONS",
    "ExactlyOnce",
    "Slot",
    "committed_marker",
    "plan_exactly_once",
    "slot_for_task",
]

#: Sink options of exactly-once mode (docs/spark.md's table is checked against these).
EXACTLY_ONCE_OPTIONS = frozenset(
    {"exactlyOnce", "exactlyOnceId", "exactlyOnceMarkerTopic", "transactionalIdPrefix"}
)
DEFAULT_PREFIX = "aiokafka_ng-spark-"
_QUERY_ID = "sql.streaming.queryId"  # Spark's local properties, set on every task
_BATCH_ID = "streaming.sql.batchId"
_FORBIDDEN = ("transactional.id", "enable.idempotence")


@dataclass(frozen=True)
class ExactlyOnce:
    """Exactly-once settings, checked on the driver."""

    prefix: str
    write_id: str | None  # None: the streaming query's id (known in the task)
    marker_topic: str
    streaming: bool


@dataclass(frozen=True)
class Slot:
    """One write task's place in the protocol: its transactional id and batch."""

    transactional_id: str
    batch: int
    marker: TopicPartition

    @property
    def group(self) -> str:
        return self.transactional_id


def plan_exactly_once(
    options: Mapping[str, str], properties: Mapping[str, str], streaming: bool
) -> ExactlyOnce | None:
    """``None`` unless ``exactlyOnce`` is true; otherwise the checked settings."""
    if not bool_option(options, "exactlyOnce", False):
        for name in ("exactlyOnceId", "exactlyOnceMarkerTopic", "transactionalIdPrefix"):
            if option_value(options, name) is not None:
                raise SparkOptionError(f"option '{name}' needs option 'exactlyOnce' = true")
        return None
    for key in _FORBIDDEN:
        if key in properties:
            raise SparkOptionError(
                f"Kafka option 'kafka.{key}' is not allowed with exactlyOnce: the sink "
                "derives one transactional id per task slot (option transactionalIdPrefix)"
            )
    write_id = (option_value(options, "exactlyOnceId") or "").strip() or None
    if write_id is None and not streaming:
        raise SparkOptionError(
            "a batch write with exactlyOnce needs option 'exactlyOnceId': a name for this "
            "write, the same when the job is run again after a failure (slots that "
            "committed under it write nothing again), new for new data"
        )
    marker = (
        option_value(options, "exactlyOnceMarkerTopic") or option_value(options, "topic") or ""
    ).strip()
    if not marker:
        raise SparkOptionError(
            "exactlyOnce without option 'topic' needs option 'exactlyOnceMarkerTopic': an "
            "existing topic whose partition 0 keys the slots' markers (group offsets)"
        )
    prefix = option_value(options, "transactionalIdPrefix")
    return ExactlyOnce(DEFAULT_PREFIX if prefix is None else prefix, write_id, marker, streaming)


def slot_for_task(eos: ExactlyOnce) -> Slot:
    """The running Spark task's slot (executor side)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        raise RuntimeError("the exactly-once sink runs only inside a Spark task")
    write_id = eos.write_id
    batch = 0
    if eos.streaming:
        write_id = write_id or ctx.getLocalProperty(_QUERY_ID)
        raw = ctx.getLocalProperty(_BATCH_ID)
        if write_id is None or raw is None:
            raise RuntimeError(
                "Spark did not pass the streaming query id and micro-batch id to the task "
                f"(local properties {_QUERY_ID!r}, {_BATCH_ID!r})"
            )
        batch = int(raw)
    marker = TopicPartition(eos.marker_topic, 0)
    return Slot(f"{eos.prefix}{write_id}-{ctx.partitionId()}", batch, marker)


def marker_value(slot: Slot, rows: int, nbytes: int) -> dict[TopicPartition, OffsetAndMetadata]:
    """The offsets to commit with the transaction: the batch id, the counts as metadata."""
    meta = json.dumps({"batch": slot.batch, "rows": rows, "bytes": nbytes})
    return {slot.marker: OffsetAndMetadata(slot.batch, meta)}


async def committed_marker(
    properties: Mapping[str, str], slot: Slot
) -> tuple[int, dict[str, Any]] | None:
    """The slot's last committed batch and its counts (None: nothing committed yet).

    Call it after the slot's producer started: its InitProducerId settled every earlier
    transaction, so ``require_stable`` waits at most for the markers being written."""
    # The connection settings the producer has (bootstrap, security, timeouts), not its own.
    admin_props = {k: v for k, v in properties.items() if AdminConfig.field_for(k) is not None}
    marker = AdminTopicPartition(slot.marker.topic, slot.marker.partition)
    async with AdminClient.from_properties(admin_props) as admin:
        found = await admin.list_consumer_group_offsets(slot.group, [marker], require_stable=True)
    got = found.get(marker)
    if got is None:
        return None
    try:
        meta = json.loads(got.metadata or "{}")
    except ValueError:
        meta = {}
    return got.offset, meta if isinstance(meta, dict) else {}


async def commit_with_marker(producer: Producer, slot: Slot, rows: int, nbytes: int) -> None:
    """Add the marker to the open transaction and commit it (records + marker, atomically)."""
    await producer.send_offsets_to_transaction(marker_value(slot, rows, nbytes), slot.group)
    await producer.commit_transaction()
