"""The accumulator's containers: ProducerBatch (one record batch from first append to
outcome), PartitionQueue (a partition's batches, leader, mute flag and idempotence sequence
state), TopicQueue (a topic's partitions, the records waiting for its metadata, the sticky
partition) and QueuedRun (a run of records waiting for metadata); and ``halves``, a batch
rewritten as two (MESSAGE_TOO_LARGE).

Plain slotted containers; the rules that move batches between states live in
:mod:`aiokafka_ng.producer.accumulator` and :mod:`aiokafka_ng.producer.idempotence`.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from typing import Any

from aiokafka_ng.errors import KafkaError, UnknownTopicOrPartitionError
from aiokafka_ng.producer.delivery import bind_entry
from aiokafka_ng.producer.future import Delivery
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.records import RecordBatchBuilder, iter_batches
from aiokafka_ng.protocol.speedups import BinaryColumn

__all__ = [
    "PartitionQueue",
    "ProducerBatch",
    "QueuedRecord",
    "QueuedRun",
    "TopicQueue",
    "halves",
    "no_partition_error",
]


class ProducerBatch:
    """One record batch for one partition, from first append to outcome."""

    __slots__ = (
        "attempts",
        "base_offset",
        "base_sequence",
        "builder",
        "created",
        "data",
        "done",
        "futures",
        "in_request",
        "log_append_time",
        "log_start_offset",
        "memory",
        "node",
        "partition",
        "positions",
        "pq",
        "retry_at",
        "topic",
    )

    def __init__(self, pq: PartitionQueue, builder: RecordBatchBuilder, now: float) -> None:
        self.pq = pq
        self.topic = pq.topic
        self.partition = pq.partition
        self.builder = builder
        self.futures: list[Delivery[Any]] = []
        self.memory = 0
        self.created = now
        self.attempts = 0
        self.retry_at = 0.0
        self.data: bytes | None = None
        self.base_sequence = -1
        self.node = -1  # the broker it was last drained for (idempotence's leader-move rule)
        #: True from its drain until its request is settled (it is in the accumulator's
        #: ``flight`` then).
        self.in_request = False
        self.done = False
        self.base_offset = -1
        self.log_append_time = -1
        self.log_start_offset = -1
        #: Once a BatchDelivery's records are in the batch: per entry of ``futures``, that
        #: record's position in its run (-1 for an entry that is a future of its own).
        self.positions: list[int] | None = None

    @property
    def record_count(self) -> int:
        return len(self.futures)

    def close(self) -> bytes:
        """Build the batch bytes (once; later appends go to a new batch)."""
        if self.data is None:
            self.data = self.builder.build()
        return self.data

    def __repr__(self) -> str:
        return (
            f"<ProducerBatch {self.topic}-{self.partition} n={len(self.futures)} "
            f"seq={self.base_sequence} attempts={self.attempts}>"
        )


class PartitionQueue:
    """The batches of one partition, its leader, mute flag and sequence state."""

    __slots__ = (
        "acked_producer_id",
        "batches",
        "last_acked",
        "leader",
        "muted",
        "next_sequence",
        "partition",
        "topic",
        "unresolved",
    )

    def __init__(self, topic: str, partition: int) -> None:
        self.topic = topic
        self.partition = partition
        self.leader = -1
        self.batches: deque[ProducerBatch] = deque()
        self.muted = False
        # idempotence: next sequence to assign, last acknowledged sequence, and the batches
        # holding sequences that are not resolved yet, in sequence order.
        self.next_sequence = 0
        self.last_acked = -1
        self.unresolved: list[ProducerBatch] = []
        #: The producer id this partition last acknowledged a batch of (-1: none yet).
        self.acked_producer_id = -1


Headers = list[tuple[str, bytes | None]]


class QueuedRun:
    """A chunk of a bulk run, placed at once when its topic is ready, else queued as one
    entry until its topic's metadata comes.

    ``futures[i]`` and ``sizes[i]`` belong to record ``i`` (with ``send_many`` every entry
    is the run's ``shared`` BatchDelivery and ``positions[i]`` the record's place in it).
    ``headers``: the headers every record of the run carries (a traced call's trace
    context), or None. The accumulator places it (``Accumulator.place_chunk``) once the
    topic is ready."""

    __slots__ = (
        "enqueued_at", "futures", "headers", "keys", "partition", "positions", "shared",
        "sizes", "timestamp_ms", "values",
    )  # fmt: skip

    def __init__(
        self,
        partition: int,
        timestamp_ms: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        sizes: list[int],
        futures: list[Delivery[Any]],
        shared: Any,
        positions: list[int] | None,
        headers: Headers | None = None,
    ) -> None:
        self.partition = partition
        self.timestamp_ms = timestamp_ms
        self.keys = keys
        self.values = values
        self.sizes = sizes
        self.futures = futures
        self.shared = shared  # BatchDelivery | None (future.py's class; typed loosely here)
        self.positions = positions
        self.headers = headers  # the producer's own list (bulk.py), never the caller's
        self.enqueued_at = 0.0

    def keep(self) -> None:
        """The run is about to wait for its topic's metadata: it must not share a buffer with
        the caller, who may change it once ``send_many`` returns (a column is copied; lists
        are the run's own already)."""
        self.keys, self.values = _owned(self.keys), _owned(self.values)


def _owned(items: Any) -> Any:
    """``items`` with nothing shared with the caller: a column's copy, else as it is."""
    if BinaryColumn is not None and items.__class__ is BinaryColumn:
        return items.copy()
    return items


# (partition or -1, key, value, headers, timestamp_ms, size, future, enqueued_at)
QueuedRecord = tuple[
    int, bytes | None, bytes | None, Headers | None, int, int, Delivery[Any], float
]


class TopicQueue:
    """One topic's state in the accumulator: its partitions' queues once metadata is known
    (``ready``), the records waiting for it before then (``pending``), the sticky partition.
    Slotted: ``intake.send_fast`` (C) reads these slots by offset."""

    __slots__ = (
        "all_partitions",
        "available",
        "name",
        "partitions",
        "pending",
        "ready",
        "sticky",
    )

    def __init__(self, name: str) -> None:
        self.name = name
        self.sticky = -1
        self.pending: deque[QueuedRecord | QueuedRun] = deque()
        self.partitions: list[PartitionQueue] = []
        self.all_partitions: list[int] = []
        self.available: list[int] = []
        self.ready = False

    def placing(self) -> bool:
        """Its records go into batches at once: its metadata is known and nothing of it
        waits before them. Otherwise they wait in its queue for the metadata (charged
        ``PENDING_OVERHEAD``). ``send_fast`` (C) makes the same test by slot."""
        return self.ready and not self.pending


def no_partition_error(t: TopicQueue, partition: int) -> KafkaError:
    return UnknownTopicOrPartitionError(
        f"partition {partition} of {t.name!r} does not exist ({len(t.partitions)} partitions)"
    )


def halves(
    batch: ProducerBatch, compression: Compression, level: int | None = None
) -> list[ProducerBatch]:
    """``batch`` (closed, two records or more) rewritten as two closed batches of its first
    and second half (compressed by ``compression`` at ``level``), each record's future moved
    to its new place; the memory it holds is shared between them by record count
    (``split``: MESSAGE_TOO_LARGE)."""
    assert batch.data is not None
    records = [r for b in iter_batches(batch.data) for r in b.records()]
    n = len(batch.futures)
    parts: list[ProducerBatch] = []
    for lo, hi in ((0, n // 2), (n // 2, n)):
        new = ProducerBatch(
            batch.pq,
            RecordBatchBuilder(compression, max_size=1 << 31, compression_level=level),
            batch.created,
        )
        if batch.positions is not None:
            new.positions = batch.positions[lo:hi]
        for rec, fut in zip(records[lo:hi], batch.futures[lo:hi], strict=True):
            delta = new.builder.append(rec.timestamp, rec.key, rec.value, rec.headers)
            bind_entry(fut, new, delta or 0)
            new.futures.append(fut)
        new.close()
        new.attempts = batch.attempts
        new.memory = batch.memory * (hi - lo) // n
        parts.append(new)
    parts[1].memory = batch.memory - parts[0].memory
    return parts
