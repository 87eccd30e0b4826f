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
   producer of the slot (a failed attempt, a speculative twin, the task of a killed
   driver) and settles its transaction: an open one -- prepared or not -- is aborted, one
   already being committed finishes first (the coordinator answers CONCURRENT_TRANSACTIONS
   until then);
2. reads the marker with OffsetFetch ``require_stable`` (KIP-447: the broker refuses to
   answer while a transactional offset commit is pending, so what we read is final);
3. marker >= B: this slot's output of batch B is already in Kafka. The rows are read and
   counted, nothing is written; if the counts differ from the marker's the task fails
   (the batch is not the batch that was committed: see *Determinism*);
4. else: begin a transaction, send the rows, add the marker (TxnOffsetCommit B for the
   slot's group) to the same transaction, and *prepare* it (flush, every record
   acknowledged, no EndTxn); the commit message carries the transactional id, producer id
   and epoch.

*The driver* commits: Spark calls the writer's ``commit`` only when every task of the
write succeeded, with one commit message per task (the attempt it kept); it sends EndTxn
(commit) for each prepared transaction (``complete_prepared``). On ``abort`` it sends
EndTxn(abort) for those it got. Records and marker of (B, s) become visible together, and
only for an attempt Spark accepted.

*Why each Spark failure is exactly once.* Output of (B, s) is visible to read_committed
consumers iff the transaction holding it committed, and then the marker says B. Step 1
makes one producer per slot alive at a time, and step 2 runs after every earlier
transaction of the slot is settled, so a task sees the marker of every earlier committed
attempt; a transaction is committed only by the driver, for an attempt Spark accepted,
and only while no later attempt fenced it (EndTxn with a fenced epoch fails).

- Task retry, executor loss, a task that fails upstream of the sink (a UDF, the read)
  after the sink sent rows: Spark drops the failed attempt's commit message, so its
  transaction is never committed; the retry's step 1 aborts it. This holds even when
  Spark (4.3) ends a failing attempt's input to the writer as if it were complete (an
  Arrow stream cut at a batch boundary reads as a whole one) and the attempt prepares its
  partial rows: tests/kafka/test_spark_exactly_once_retry.py. (When tasks committed their
  own transactions, such an attempt committed partial rows and every retry then failed.)
  An executor killed mid-write (SIGKILL of its JVM, then Spark reruns the task on
  another executor): tests/kafka/test_spark_exactly_once_executor_loss.py.
- Speculative duplicates: the later step 1 of the two attempts fences the other and
  aborts its open transaction; Spark keeps the attempt that finishes first. The same
  attempt (usually the copy): the driver commits it. Different ones (the first attempt's
  writer started after the copy's, or the copy started after the first prepared): the
  driver's EndTxn for the kept one fails, the write fails with ExactlyOnceCommitError and
  nothing of that slot is visible; running it again writes it once. Never a duplicate or
  a loss (tests/kafka/test_spark_exactly_once_speculation.py, a two-host standalone
  cluster: Spark never runs a copy on the host of the first attempt).
- Driver killed after it committed some or all transactions but before the checkpoint's
  commit log has B: the restart replays B (same offsets, from the offset log); committed
  slots find their marker and write nothing, the others' open transactions are aborted by
  the replay's step 1 and written again.
- Driver killed mid-task or before its commit: the open transactions stay open until the
  replay's attempt fences them (or transaction.timeout.ms passes); read_committed
  consumers wait (LSO) and never see their records.
- A driver commit that fails half-way (a broker down past ``max.block.ms``): the slots
  committed so far are like the previous case, the rest are replayed.

*Determinism (what the replay must keep).* A replay of B must give slot s the same rows
as the first run. Spark replays a micro-batch from the offsets in its offset log, so this
holds for this source and any deterministic plan (narrow transformations, hash
partitioning); the source keeps ``startingOffsets=latest`` unresolved in batch 0's start,
since Spark asks for the initial offset again when it replays batch 0. A restart with a
different number of write partitions for a pending batch (a changed ``repartition(n)``, a
changed plan, nondeterministic expressions) breaks it. Step 3 catches it on any slot
whose row or byte count changed: the task fails with ExactlyOnceReplayError, so the write
fails and the driver commits none of it (no duplicate for read_committed readers); the
tasks of it that ran leave prepared transactions that hold read_committed readers until
the slot runs again or ``transaction.timeout.ms`` passes. Restoring the plan replays the
batch as it ran. A changed plan that keeps every slot's counts is not caught. A restart
with more *input* partitions is fine: the pending batch keeps the partitions in its
offset log, and the new ones join from the next batch
(tests/kafka/test_spark_exactly_once_restart.py has these cases).

*Cost.* Per task per micro-batch: InitProducerId, FindCoordinator + OffsetFetch,
AddPartitionsToTxn, AddOffsetsToTxn + TxnOffsetCommit (or neither with transactions v2);
on the driver one EndTxn per task (sent concurrently) and the transaction markers the
brokers write into each partition; a few milliseconds per task on a LAN, not per row.
Read_committed consumers see the records only after the driver's commit (end-to-end
latency grows by up to one micro-batch). A task's transaction stays open from its first
record until the driver commits, after the stage's last task, so the whole write stage
must fit in ``transaction.timeout.ms``: the sink sets it to 15 minutes
(:data:`EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS`, Kafka's default cap
``transaction.max.timeout.ms``) unless ``kafka.transaction.timeout.ms`` is given; a
stage that runs longer fails at the driver's commit (nothing of it visible). The same
timeout bounds how long an attempt nobody fences (a slot that no longer exists after a
restart) holds back read_committed readers. Markers are group offsets: Kafka expires
those of an empty group after ``offsets.retention.minutes`` (7 days); a query restarted
from a checkpoint after longer than that, whose last batch was committed to Kafka but not
to the checkpoint, writes that batch again.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import anyio

from aiokafka_ng.admin import AdminClient, AdminConfig
from aiokafka_ng.admin import TopicPartition as AdminTopicPartition
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import PreparedTransaction, Producer
from aiokafka_ng.spark._options import SparkOptionError, bool_option, option_value

__all__ = [
    "DEFAULT_PREFIX",
    "EXACTLY_ONCE_OPTIONS",
    "EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS",
    "ExactlyOnce",
    "ExactlyOnceCommitError",
    "Slot",
    "committed_marker",
    "complete_prepared",
    "plan_exactly_once",
    "slot_for_task",
]

#: Sink options of exactly-once mode (docs/spark.md's table is checked against these).
EXACTLY_ONCE_OPTIONS = frozenset(
    {"exactlyOnce", "exactlyOnceId", "exactlyOnceMarkerTopic", "transactionalIdPrefix"}
)
DEFAULT_PREFIX = "aiokafka_ng-spark-"
#: ``kafka.transaction.timeout.ms`` unless set: Kafka's default ``transaction.max.timeout.ms``
#: (the most a broker accepts unless raised), as a write stage may run for minutes.
EXACTLY_ONCE_TRANSACTION_TIMEOUT_MS = 900_000
_QUERY_ID = "sql.streaming.queryId"  # Spark's local properties, set on every task
_BATCH_ID = "streaming.sql.batchId"
_FORBIDDEN = ("transactional.id", "enable.idempotence")

log = logging.getLogger(__name__)


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


async def prepare_with_marker(
    producer: Producer, slot: Slot, rows: int, nbytes: int
) -> PreparedTransaction:
    """Add the marker to the open transaction and prepare it: every record and the marker
    are in Kafka, the EndTxn that makes them visible together is the driver's."""
    await producer.send_offsets_to_transaction(marker_value(slot, rows, nbytes), slot.group)
    return await producer.prepare_transaction()


class ExactlyOnceCommitError(RuntimeError):
    """The driver could not commit every task's transaction of a write (none of a task
    whose commit failed is visible; a replay of the batch writes it again)."""


def complete_prepared(
    properties: Mapping[str, str], prepared: list[PreparedTransaction], commit: bool
) -> None:
    """Driver: commit (or abort) the tasks' prepared transactions, all of them concurrently.

    Committing tries every transaction even when one fails (each commit that succeeds is
    progress a replay will find in its marker), then raises :class:`ExactlyOnceCommitError`
    naming the failures; aborting logs failures (an abort is only cleanup: a replay's
    InitProducerId or ``transaction.timeout.ms`` ends those transactions anyway)."""
    if not prepared:
        return
    failures: list[tuple[PreparedTransaction, BaseException]] = []

    async def one(producer: Producer, txn: PreparedTransaction) -> None:
        try:
            await producer.complete_transaction(txn, commit=commit)
        except KafkaError as exc:
            failures.append((txn, exc))

    async def run() -> None:
        # Not idempotent: its InitProducerId would be a wasted round trip.
        driver = Producer.from_properties({**properties, "enable.idempotence": "false"})
        async with driver, anyio.create_task_group() as tg:
            for txn in prepared:
                tg.start_soon(one, driver, txn)

    anyio.run(run)
    if not failures:
        return
    what = "; ".join(f"{t.transactional_id}: {exc!r}" for t, exc in failures)
    if not commit:
        log.warning(
            "aiokafka_ng exactly-once: aborting %d transactions failed: %s", len(failures), what
        )
        return
    raise ExactlyOnceCommitError(
        f"{len(failures)} of {len(prepared)} task transactions were not committed ({what}); "
        "their rows are not visible and the batch fails: a streaming query restarted from "
        "its checkpoint (or a batch write run again with the same exactlyOnceId) writes "
        "them again, and only them"
    )
