"""The record accumulator: topic queues, partition batches, readiness and drain.

Theory of operation
-------------------
``send()`` never waits for metadata (KIP-286's intent; franz-go's ``unknownTopics``,
librdkafka's UA queue). A record goes to one of two places, synchronously:

* its partition's open batch -- the fast path, when the topic's metadata is known *and* the
  topic's pending queue is empty (so a record can never overtake an earlier one of its
  topic);
* otherwise the topic's pending queue, in send order. When the topic's metadata arrives
  (:meth:`Accumulator.update_metadata`) the queue is partitioned entry by entry, in order.
  Records whose topic never gets usable metadata fail alone at ``delivery_timeout_ms`` --
  or, once the brokers say the topic does not exist (UNKNOWN_TOPIC_OR_PARTITION for
  ``MISSING_AFTER_S``: auto-creation is off), ``max_block_ms`` after their ``send()``: how
  long the Java client's ``send()`` blocks for a topic's metadata before it fails "not
  present in metadata". The error names the brokers' answer. (Not ``max_block_ms`` for
  every wait: ``send()`` never blocks on metadata, and ``max_block_ms=0`` -- never wait for
  memory -- must not fail the first records of every new topic.)
  A chunk of a bulk run (``send_many``/``send_batch``) waits as *one* entry
  (:class:`QueuedRun`) and is placed whole (:meth:`Accumulator.place_chunk`) when its turn
  comes, not as a queue entry and a future per record: a fresh producer's first runs queue
  thousands of records before the metadata's round trip ends, and one by one they cost ~10x
  as much.

Placement has one rule, :meth:`Accumulator.place` (a record's partition, its batch, a full
batch closed and the sticky partition switched, the future bound, the memory counted);
:meth:`Accumulator.place_run` applies it to a run of records a batch at a time (one builder
call per batch), landing each record where ``place`` would (``tests/producer/
test_placement.py``), and ``send_fast`` (C) mirrors it for a record that fits its open batch.

Per partition there is a deque of batches; only the last one is open for appends. A batch
is *ready* to drain when it is full (or not the last), has lingered ``linger_ms``, a flush
or close is under way, or someone waits for memory (freeing memory beats batching then). A
retried batch is ready once its backoff (the shared ``ExponentialBackoff``) has passed.

Linger is an upper bound on the wait (Kafka's definition), and event-loop timers fire late:
both asyncio and trio sleep in ``epoll_wait``, which counts whole milliseconds rounded *up*,
so a sender that sleeps until a batch's deadline wakes 0-1 ms after it (0.67 ms at the
median, measured at 40k msg/s: p99 send->ack paid it on every request). A batch is therefore
ready ``_TIMER_SLACK`` (1 ms, at most half the linger) before its deadline: the sender wakes
between that point and the deadline. The Java client is early by up to a millisecond the
same way, since it measures linger on a millisecond clock.

Drain (per node, Java's ``RecordAccumulator.drain``): go round the node's partitions from a
rotating start index, take at most one batch per partition, stop before ``max_request_size``
(a lone oversize batch still goes), and keep the index so the next drain starts where this
one stopped: no partition starves.

Ordering. A failed batch goes back to the *head* of its partition's deque.

* ``guarantee_order`` (``max_in_flight_requests_per_connection == 1``): a drained partition
  is *muted* until its batch is done -- completed, failed or re-queued at the head -- on every
  path, connection errors included, and unmuting wakes the node's sender. The mute is per
  partition, not per connection, so it also holds when the partition's leader moves while
  its batch is in flight on the old one. These are the ways Sarama got it wrong: #2619 (a
  later batch sent while an earlier one was in flight or being retried), #3644 (a
  connection-error path released the mute before the retry was queued), #3689 (unmute did
  not wake the producer: deadlock), #3693 (a gap between success and unmute). Here the
  outcome and the unmute happen in one synchronous step, with no await in between.
* idempotence (KIP-98/KIP-360): sequence numbers are assigned at the first drain and kept
  on retry; retries are inserted in sequence order and a retried batch drains only when it
  is the lowest sequence in flight (see :mod:`aiokafka_ng.producer.idempotence`).

Expiry: ``delivery_timeout_ms`` bounds every record from ``send()`` to its outcome -- in the
topic queue, in a partition queue and in flight (a late answer for an expired batch is
ignored); a record waiting for a topic said not to exist, by ``max_block_ms`` (above).
The expiry timer (:mod:`aiokafka_ng.producer.expiry`) sleeps until
:meth:`Accumulator.next_expiry`, the earliest deadline among what :meth:`Accumulator.expire`
looks at, and not at all while the accumulator is empty. A batch's deadline is its creation
time plus ``delivery_timeout_ms``, a waiting record's its arrival plus the same or, for a
topic said not to exist, ``max_block_ms``, on one monotonic clock: an item entering never
has an earlier deadline than those of its kind already held. So the timer needs a signal
only when something enters an accumulator it has left alone (``expiry_armed`` False), one
flag test per new batch or queued record (the ``wake_expiry`` signal), or
when waiting records get the shorter limit: a topic is said not to exist, or a missing
topic's first waiting record is due before ``expiry_at``, the deadline the timer sleeps
for.

Memory: each record reserves its estimated size from the ``MemoryPool`` in ``send()``; a
batch releases the sum when it completes or fails.

Signals: the accumulator never calls a sender. It calls the engine's signals
(:mod:`aiokafka_ng.producer.signals`): ``wake_node(node)`` whenever a node's drain may take
something or its next deadline moved (a batch closed, an unmute, a re-queue or split, a
leader moved there), ``node_due(node, at)`` for a new head batch that only lingers until
``at``, ``need_metadata(topic)`` when a record starts waiting for its topic,
``wake_expiry()`` for the expiry timer.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Sequence
from typing import Any

from aiokafka_ng.cluster.metadata import ClusterMetadata, TopicMetadata
from aiokafka_ng.cluster.refresher import MISSING_AFTER_S
from aiokafka_ng.errors import KafkaError, KafkaTimeoutError, UnknownTopicOrPartitionError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.latency import LatencyRecorder
from aiokafka_ng.producer.batch import (
    Headers,
    PartitionQueue,
    ProducerBatch,
    QueuedRecord,
    QueuedRun,
    TopicQueue,
    halves,
    no_partition_error,
)
from aiokafka_ng.producer.delivery import bind_entries, bind_entry, decide
from aiokafka_ng.producer.future import (
    BatchDelivery,
    Delivery,
    fail_position,
    finish_all,
    run_members,
)
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.partitioner import CustomPartitioner, StickyPartitioner, murmur2
from aiokafka_ng.producer.runs import split_keyed_run
from aiokafka_ng.producer.signals import QUIET, Signals
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.limits import MAX_PARTITIONS_PER_TOPIC, ResponseLimitError
from aiokafka_ng.protocol.records import RecordBatchBuilder

log = logging.getLogger(__name__)

__all__ = [
    "PENDING_OVERHEAD",
    "Accumulator",
    "PartitionQueue",
    "ProducerBatch",
    "QueuedRun",
    "TopicQueue",
]

#: Charged to the memory pool on top of a record's estimate when it must wait for its
#: topic's metadata: its queue entry (a tuple and a float, ~150 B) and the key/value bytes
#: objects' own headers (33 B each).
PENDING_OVERHEAD = 128

#: How late an event-loop timer may fire (epoll's millisecond rounding): lingering batches
#: are ready this much before their deadline, so they never leave after it.
_TIMER_SLACK = 0.001

#: New batches assume compression 5% worse than observed (Java's estimation factor).
_RATIO_MARGIN = 1.05


class Accumulator:
    """Holds every record between ``send()`` and the sender. Synchronous; no I/O."""

    def __init__(
        self,
        *,
        pool: MemoryPool,
        batch_size: int,
        linger_ms: float,
        compression: Compression,
        compression_level: int | None = None,
        max_request_size: int,
        delivery_timeout_ms: float,
        retry_backoff: ExponentialBackoff,
        max_block_ms: float | None = None,
        guarantee_order: bool,
        idempotence: IdempotenceState | None,
        partitioner: CustomPartitioner | None = None,
        sticky: StickyPartitioner | None = None,
        signals: Signals = QUIET,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.pool = pool
        self.batch_size = max(1, batch_size)
        self.linger = linger_ms / 1000
        self.compression = compression
        #: Kafka's level for the codec (KIP-390), None for its default.
        self.compression_level = compression_level
        self.max_request_size = max_request_size
        self.delivery_timeout = delivery_timeout_ms / 1000
        #: How long a record waits for a topic said not to exist (module docstring).
        self.metadata_wait = min(
            self.delivery_timeout,
            self.delivery_timeout if max_block_ms is None else max_block_ms / 1000,
        )
        self.retry_backoff = retry_backoff
        self.guarantee_order = guarantee_order
        self.idem = idempotence
        self.partitioner = partitioner
        self.sticky = sticky or StickyPartitioner()
        #: Where it signals a node's batch becoming ready and a topic needing metadata (the
        #: engine's signals).
        self.signals = signals
        self.clock = clock
        #: The asyncio loop the producer runs on (None under trio): futures' callbacks go
        #: through it, one call_soon per batch.
        self.loop: asyncio.AbstractEventLoop | None = None
        self.topics: dict[str, TopicQueue] = {}
        self._meta = ClusterMetadata()
        #: topic -> compression ratio estimate for new batches (see _close)
        self._ratios: dict[str, float] = {}
        self.nodes: dict[int, list[PartitionQueue]] = {}
        self._drain_index: dict[int, int] = {}
        self.flushing = 0
        self.closing = False
        #: True while the expiry timer knows there is something to expire (it sleeps until
        #: a deadline, or is about to look); False once it found nothing and waits for
        #: ``expiry_needed`` (see "Expiry" in the module docstring).
        self.expiry_armed = False
        #: The deadline the expiry timer sleeps for while armed.
        self.expiry_at = float("inf")
        #: Topics whose waiting records wait on a retriable topic error, that error (named
        #: when they fail) and since when it has been the answer.
        self.waiting_on: dict[str, tuple[type[KafkaError], float]] = {}
        #: Topics the brokers have said do not exist for ``MISSING_AFTER_S``: their waiting
        #: records have the shorter limit, ``metadata_wait`` (said once per wait).
        self.missing: set[str] = set()
        #: batches drained and not yet completed/re-queued (all nodes)
        self.flight: set[ProducerBatch] = set()
        #: counters for statistics(): batches re-queued for retry, split, expired
        self.retries = 0
        self.splits = 0
        self.expired_batches = 0
        #: records delivered / failed, batches delivered, Produce round trips (all nodes)
        self.records_sent = 0
        self.records_failed = 0
        self.batches_sent = 0
        self.request_latency = LatencyRecorder()

    # ------------------------------------------------------------------ send side

    def topic(self, name: str) -> TopicQueue:
        """``name``'s entry, made now if it has none (ready at once when the cluster knows
        the topic already)."""
        t = self.topics.get(name)
        return t if t is not None else self.new_topic(name)

    def append(
        self,
        topic: str,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int,
        size: int,
        future: Delivery[Any],
    ) -> None:
        """Place one record, or queue it for its topic's metadata (memory already reserved):
        ``ProducerEngine.add``. Never blocks, never raises for a record-specific problem:
        such a record's future fails instead."""
        t = self.topics.get(topic)
        if t is None:
            t = self.new_topic(topic)
        if t.ready and not t.pending:  # t.placing(), inline: once per record
            self.place(t, partition, key, value, headers, timestamp_ms, size, future)
            return
        refused = self._refused(t)
        if refused is not None:
            self.fail_record(future, size, refused)
            return
        now = self.clock()
        t.pending.append((partition, key, value, headers, timestamp_ms, size, future, now))
        self._queued(t, now)

    def append_run(self, topic: str, chunk: QueuedRun) -> None:
        """:meth:`append` for a chunk of a bulk run: placed at once, or queued as one entry
        for its topic's metadata and placed whole in its turn (memory already reserved)."""
        t = self.topic(topic)
        if t.placing():
            self.place_chunk(t, chunk)
        else:
            self.queue_run(t, chunk)

    def queue_run(self, t: TopicQueue, run: QueuedRun) -> None:
        """Queue a bulk chunk in the pending queue of ``t``, whose metadata is not known yet
        or which has records waiting before it (memory already reserved)."""
        refused = self._refused(t)
        if refused is not None:
            self.fail_run(run, refused)
            return
        run.keep()
        run.enqueued_at = now = self.clock()
        t.pending.append(run)
        self._queued(t, now)

    def _refused(self, t: TopicQueue) -> KafkaError | None:
        """A record or run is about to wait in ``t``'s queue: the error it fails with now
        when the topic's last answer was one retrying cannot fix (e.g. authorization, as the
        Java client's metadata wait fails), else None -- and the first to wait asks for the
        topic's metadata."""
        if t.pending:
            return None
        tm = self._meta.topics.get(t.name)
        if tm is not None and tm.fatal and tm.error is not None:
            return tm.error(f"topic {t.name!r}: {tm.error.__name__}")
        self.signals.need_metadata(t.name)
        return None

    def _queued(self, t: TopicQueue, now: float) -> None:
        """Something entered ``t``'s queue at ``now``: the expiry timer must know when the
        timer is idle, or when it is the topic's first waiter and due before the deadline
        the timer sleeps for (see "Expiry" above)."""
        if not self.expiry_armed or (
            len(t.pending) == 1 and now + self._wait_limit(t.name) < self.expiry_at
        ):
            self.arm_expiry()

    def fail_run(self, run: QueuedRun, exc: BaseException) -> None:
        shared, positions = run.shared, run.positions
        for j, (fut, size) in enumerate(zip(run.futures, run.sizes, strict=True)):
            if shared is not None and positions is not None:
                fail_position(shared, positions[j], exc)
            self.fail_record(fut, size, exc)

    def new_topic(self, name: str) -> TopicQueue:
        t = self.topics[name] = TopicQueue(name)
        tm = self._meta.topics.get(name)
        if tm is not None and tm.ready:
            # Known already (another client call asked for it): no need to wait.
            self._apply_topic(t, tm)
            for pq in t.partitions:
                if pq.leader >= 0:
                    self.nodes.setdefault(pq.leader, []).append(pq)
        return t

    def place(
        self,
        t: TopicQueue,
        partition: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers | None,
        timestamp_ms: int,
        size: int,
        future: Delivery[Any],
    ) -> None:
        """The placement rule, for one record of ``t`` (placing; its memory reserved):

        1. its partition: the one given, else the custom partitioner's choice, else the
           murmur2 hash of its key, else the topic's sticky partition (KIP-794); one that
           does not exist fails the record;
        2. its batch: the partition's open tail batch, else a new one (:meth:`_tail`);
        3. a batch that refuses it is full: closed, and the record tries again
           (:meth:`_full`) -- in the partition drawn next if that was the sticky one and the
           record's first refusal, else in a new batch of the same partition, which takes
           any record;
        4. its future is bound to its entry, its memory counted in the batch.

        :meth:`place_run` is this rule applied to a run a batch at a time; ``send_fast``
        (C, ``producer/_send.c``) mirrors it for a record that fits the open batch."""
        n = len(t.partitions)
        sticky = False
        if partition < 0:
            if self.partitioner is not None:
                partition = self.partitioner(key, t.all_partitions, t.available)
            elif key is not None:
                partition = (murmur2(key) & 0x7FFFFFFF) % n
            else:
                partition = self.sticky_partition(t)
                sticky = True
        if not 0 <= partition < n:
            self.fail_record(future, size, no_partition_error(t, partition))
            return
        # self._tail(t, partition), inline: once per record.
        pq = t.partitions[partition]
        batches = pq.batches
        batch = batches[-1] if batches else None
        if batch is None or batch.data is not None:
            batch = self.open_batch(t, pq)
        delta = batch.builder.append(timestamp_ms, key, value, headers or ())
        if delta is None:
            partition = self._full(t, batch, sticky)
            batch = self._tail(t, partition)
            delta = batch.builder.append(timestamp_ms, key, value, headers or ())
            if delta is None:  # the new sticky partition's open batch is full too
                batch = self._tail(t, self._full(t, batch, False))
                delta = batch.builder.append(timestamp_ms, key, value, headers or ())
                assert delta is not None  # a new batch takes any record
        bind_entry(future, batch, delta)
        batch.futures.append(future)
        if batch.positions is not None:
            batch.positions.append(-1)
        batch.memory += size

    def place_chunk(self, t: TopicQueue, chunk: QueuedRun) -> None:
        """Place a bulk chunk (memory reserved) in its partitions' batches; the topic is
        ready and nothing of it waits before the chunk."""
        partition, ts, keys, values = chunk.partition, chunk.timestamp_ms, chunk.keys, chunk.values
        sizes, futures, shared = chunk.sizes, chunk.futures, chunk.shared
        positions, headers = chunk.positions, chunk.headers
        if self.partitioner is not None and partition < 0:
            # A user partitioner decides record by record.
            self._place_each(t, chunk)
            return
        if partition >= 0 or keys is None:
            self.place_run(
                t, partition, ts, keys, values, sizes, futures, shared, positions, headers
            )
            return
        # Keyed: the default partitioner per key; null keys go to the sticky partition.
        # Grouped by partition, send order kept inside each group.
        num_partitions = len(t.partitions)
        if num_partitions > MAX_PARTITIONS_PER_TOPIC:
            # split_keyed_run allocates a slot per partition, whatever the run's size: the
            # count comes from a broker, so it is held to the decoder's per-topic limit here
            # too, should a snapshot ever come from elsewhere (10**8 partitions cost 1.5 GB
            # for one record).
            self.fail_run(
                chunk,
                ResponseLimitError(
                    f"topic {t.name!r} has {num_partitions} partitions, more than the "
                    f"{MAX_PARTITIONS_PER_TOPIC} the client accepts"
                ),
            )
            return
        groups = split_keyed_run(keys, values, sizes, num_partitions, positions)
        if -1 in groups and len(groups) > 1:
            # Null keys beside keyed ones: the sticky partition (and each one it moves to
            # as batches fill) may be a keyed record's partition too, and placing the
            # groups one after the other put every null-keyed record ahead of keyed ones
            # sent before it. A mixed run is placed record by record, as send() would
            # place it: send order kept in every partition.
            self._place_each(t, chunk)
            return
        for p, group in groups.items():
            futs: list[Delivery[Any]] = (
                [futures[i] for i in group.index]
                if shared is None
                else [shared] * len(group.values)
            )
            self.place_run(
                t, p, ts, group.keys, group.values, group.sizes, futs, shared, group.positions,
                headers,
            )  # fmt: skip

    def _place_each(self, t: TopicQueue, chunk: QueuedRun) -> None:
        """Place a chunk record by record with :meth:`place`'s own rule (partition -1: the
        partitioner per record); each record of a shared run gets a future of its own,
        which counts into the run."""
        keys, futures, sizes, headers = chunk.keys, chunk.futures, chunk.sizes, chunk.headers
        if chunk.shared is not None:
            assert chunk.positions is not None
            futures = run_members(chunk.shared, chunk.positions)
        for i, value in enumerate(chunk.values):
            key = None if keys is None else keys[i]
            self.place(t, -1, key, value, headers, chunk.timestamp_ms, sizes[i], futures[i])

    def place_run(
        self,
        t: TopicQueue,
        partition: int,
        timestamp_ms: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        sizes: list[int],
        futures: list[Delivery[Any]],
        shared: BatchDelivery | None = None,
        positions: list[int] | None = None,
        headers: Headers | None = None,
    ) -> None:
        """:meth:`place`'s rule for a run of records of one partition (or, with
        ``partition`` -1, null-keyed ones for the sticky partition), all with the same
        ``headers`` (or none), applied a batch at a time: the batch takes as many as fit in
        one builder call, then the next record is refused as :meth:`place` would be refused
        -- closed batch, the next partition drawn if sticky and that record's first
        refusal, else a new batch. So the records land where one :meth:`place` per record
        puts them (a test holds the two to it).
        ``shared``: every entry of ``futures`` is that one BatchDelivery, and ``positions``
        are the records' places in it (kept beside the batch's entries)."""
        sticky = partition < 0
        if sticky:
            partition = self.sticky_partition(t)
        if not 0 <= partition < len(t.partitions):
            exc = no_partition_error(t, partition)
            for j, (fut, size) in enumerate(zip(futures, sizes, strict=True)):
                if shared is not None and positions is not None:
                    fail_position(shared, positions[j], exc)
                self.fail_record(fut, size, exc)
            return
        i = 0
        count = len(values)
        again = False  # record i was refused once already
        while True:
            batch = self._tail(t, partition)
            delta = batch.builder.record_count
            stop = batch.builder.append_run(timestamp_ms, keys, values, i, count, headers or ())
            if stop > i:
                again = False
                bfuts = batch.futures
                if shared is not None:
                    # Entries still one per record (sequence numbers, counts and splits go
                    # by them), added in one step, with the records' positions beside them.
                    assert positions is not None
                    if batch.positions is None:
                        batch.positions = [-1] * len(bfuts)
                    batch.positions.extend(positions[i:stop])
                else:
                    if batch.positions is not None:
                        batch.positions.extend([-1] * (stop - i))
                    bind_entries(futures, i, stop, batch, delta)
                bfuts.extend(futures[i:stop])
                batch.memory += sum(sizes[i:stop])
                i = stop
                if i == count:
                    return
            partition = self._full(t, batch, sticky and not again)
            again = True

    def sticky_partition(self, t: TopicQueue) -> int:
        """KIP-794 uniform sticky: the partition unkeyed records stay on until its batch is
        full (drawn at random when there is none yet)."""
        n = len(t.partitions)
        if not 0 <= t.sticky < n:
            t.sticky = self.sticky.pick(-1, n, t.available, self._leader_rack(t))
        return t.sticky

    def _leader_rack(self, t: TopicQueue) -> Callable[[int], str | None] | None:
        """partition of ``t`` -> its leader's rack, for a rack-aware sticky draw (KIP-1123);
        None when the draw is not rack-aware (nothing to look up)."""
        if self.sticky.rack is None:
            return None
        brokers, partitions = self._meta.brokers, t.partitions

        def rack(partition: int) -> str | None:
            broker = brokers.get(partitions[partition].leader)
            return None if broker is None else broker.rack

        return rack

    def _tail(self, t: TopicQueue, partition: int) -> ProducerBatch:
        """The batch ``partition``'s next record goes to: its open tail batch, else a new
        one."""
        pq = t.partitions[partition]
        batches = pq.batches
        if batches:
            batch = batches[-1]
            if batch.data is None:
                return batch
        return self.open_batch(t, pq)

    def _full(self, t: TopicQueue, batch: ProducerBatch, switch: bool) -> int:
        """``batch`` refused a record: a later batch exists now, so it is ready -- close it
        and wake its sender. Returns the partition the record tries next: with ``switch``
        (it was the sticky partition's, KIP-794) one drawn uniformly at random -- switching
        exactly on "full" (rather than on a byte count) never leaves a nearly empty batch
        behind -- else the same one (a new batch)."""
        self._close(batch)
        pq = batch.pq
        if pq.leader >= 0:
            self.signals.wake_node(pq.leader)
        if not switch:
            return pq.partition
        t.sticky = self.sticky.pick(
            pq.partition, len(t.partitions), t.available, self._leader_rack(t)
        )
        return t.sticky

    def open_batch(self, t: TopicQueue, pq: PartitionQueue) -> ProducerBatch:
        """A new, empty batch at the tail of ``pq`` (sized by the topic's compression
        estimate)."""
        batch = ProducerBatch(
            pq,
            RecordBatchBuilder(
                self.compression,
                max_size=self.batch_size,
                compression_ratio_estimate=self._ratios.get(t.name, 1.0),
                compression_level=self.compression_level,
            ),
            self.clock(),
        )
        batches = pq.batches
        batches.append(batch)
        if len(batches) == 1 and pq.leader >= 0:
            # A new head batch: its sender must learn the linger deadline (or drain now).
            at = self._is_ready(pq, batch, batch.created)
            if at:
                self.signals.node_due(pq.leader, at)
            else:
                self.signals.wake_node(pq.leader)
        if not self.expiry_armed:
            self.arm_expiry()
        return batch

    def arm_expiry(self) -> None:
        """Something with a deadline entered while the expiry timer was idle, or one due
        before the timer's: wake it."""
        self.expiry_armed = True
        self.signals.wake_expiry()

    def _close(self, batch: ProducerBatch) -> bytes:
        """Build a batch; with compression, learn how well the topic compresses so the next
        batches are filled to about ``batch_size`` *compressed* bytes (the Java client's
        CompressionRatioEstimator: the estimate improves slowly, worsens fast, and new
        batches assume 5% worse than observed)."""
        if batch.data is not None:
            return batch.data
        data = batch.close()
        if self.compression is not Compression.NONE:
            observed = batch.builder.compression_ratio
            old = self._ratios.get(batch.topic, 1.0) / _RATIO_MARGIN
            step = 0.05 if observed > old else -0.005
            new = max(old + step, observed)
            # Never plan a batch larger than a request can carry.
            floor = self.batch_size / self.max_request_size
            self._ratios[batch.topic] = min(1.0, max(floor, new * _RATIO_MARGIN))
        return data

    def fail_record(self, future: Delivery[Any], size: int, exc: BaseException) -> None:
        self.pool.release(size)
        self.records_failed += 1
        decide(future, exc)

    # ------------------------------------------------------------------ metadata

    def update_metadata(self, meta: ClusterMetadata) -> None:
        """Apply a metadata snapshot: leaders, new partitions, and release pending records."""
        self._meta = meta
        nodes: dict[int, list[PartitionQueue]] = {}
        for name, t in self.topics.items():
            tm = meta.topics.get(name)
            if tm is not None and tm.ready:
                self._end_wait(name)
                self._apply_topic(t, tm)
            elif tm is not None and tm.fatal and tm.error is not None:
                self._fail_pending(t, tm.error(f"topic {name!r}: {tm.error.__name__}"))
            elif tm is not None and tm.error is not None and t.pending:
                self._note_waiting(t, tm.error)
            for pq in t.partitions:
                if pq.leader >= 0:
                    nodes.setdefault(pq.leader, []).append(pq)
        old = self.nodes
        self.nodes = nodes
        for node in nodes:
            if node not in old or nodes[node] != old[node]:
                self.signals.wake_node(node)

    def _apply_topic(self, t: TopicQueue, tm: TopicMetadata) -> None:
        count = max(tm.partitions) + 1
        while len(t.partitions) < count:
            t.partitions.append(PartitionQueue(t.name, len(t.partitions)))
        for pq in t.partitions:
            pm = tm.partitions.get(pq.partition)
            pq.leader = pm.leader if pm is not None and pm.leader >= 0 else -1
        t.all_partitions = list(range(count))
        t.available = list(tm.available_partitions())
        t.ready = True
        pending = t.pending
        while pending:
            # Taken off the queue once placed: should placing raise (a bug), the entry is
            # still queued and fails with everything else instead of being lost.
            entry = pending[0]
            if isinstance(entry, QueuedRun):
                self.place_chunk(t, entry)
            else:
                p, key, value, headers, ts, size, fut, _ = entry
                self.place(t, p, key, value, headers, ts, size, fut)
            pending.popleft()

    def _fail_pending(self, t: TopicQueue, exc: BaseException) -> None:
        while t.pending:
            self._fail_entry(t.pending.popleft(), exc)

    def _fail_entry(self, entry: QueuedRecord | QueuedRun, exc: BaseException) -> None:
        if isinstance(entry, QueuedRun):
            self.fail_run(entry, exc)
        else:
            self.fail_record(entry[6], entry[5], exc)

    # ------------------------------------------------------------------ drain

    def _is_ready(self, pq: PartitionQueue, batch: ProducerBatch, now: float) -> float:
        """0.0 when ready, else the time it becomes ready by lingering."""
        if batch.attempts:
            return 0.0 if now >= batch.retry_at else batch.retry_at
        if (
            batch.data is not None
            or len(pq.batches) > 1
            or self.flushing
            or self.closing
            or self.pool.waiters
            or batch.builder.is_full
        ):
            return 0.0
        # Ready a timer tick early: see "Linger" in the module docstring.
        linger = self.linger
        deadline = batch.created + linger - min(_TIMER_SLACK, linger / 2)
        return 0.0 if now >= deadline else deadline

    def drain(self, node: int, now: float) -> tuple[list[ProducerBatch], float | None]:
        """Take ready batches for ``node``: at most one per partition, within
        ``max_request_size``. Returns the batches and the next time something becomes
        ready by lingering (None if nothing is waiting on a timer)."""
        parts = self.nodes.get(node)
        if not parts:
            return [], None
        idem = self.idem
        if idem is not None and not idem.ready:
            return [], None
        n = len(parts)
        start = self._drain_index.get(node, 0) % n
        out: list[ProducerBatch] = []
        size = 0
        next_at: float | None = None
        # As the Java client's drain: once one batch makes the node ready, the lingering
        # batches of its other partitions ride along in the same request (linger decides
        # *when* a node sends, not which partitions go): fewer, fuller requests and no
        # partition waiting out its own linger right after a request left without it.
        node_ready = False
        for pq in parts:
            if not pq.muted and pq.batches and not self._is_ready(pq, pq.batches[0], now):
                node_ready = True
                break
        i = 0
        for i in range(n):
            pq = parts[(start + i) % n]
            if pq.muted or not pq.batches:
                continue
            batch = pq.batches[0]
            at = self._is_ready(pq, batch, now)
            if at and (batch.attempts or not node_ready):
                if next_at is None or at < next_at:
                    next_at = at
                continue
            if idem is not None and not idem.may_drain(pq, batch, node):
                if idem.drain_error is not None:
                    # A transaction aborting or failed: what is queued will never be part
                    # of a committed one. Fail it now, so flush()/abort() need not wait.
                    exc = idem.drain_error
                    while pq.batches:
                        self.fail(pq.batches.popleft(), exc)
                continue
            data = self._close(batch)
            if out and size + len(data) > self.max_request_size:
                break
            pq.batches.popleft()
            if idem is not None:
                data = idem.stamp(pq, batch)
            size += len(data)
            batch.node = node
            batch.in_request = True
            self.flight.add(batch)
            if self.guarantee_order:
                pq.muted = True
            out.append(batch)
        else:
            i = n
        self._drain_index[node] = (start + i) % n
        return out, next_at

    def next_deadline(self, node: int, now: float) -> float | None:
        """Earliest time a batch of ``node`` becomes ready by time alone."""
        best: float | None = None
        for pq in self.nodes.get(node, ()):
            if pq.batches and not pq.muted:
                at = self._is_ready(pq, pq.batches[0], now) or now
                if best is None or at < best:
                    best = at
        return best

    # ------------------------------------------------------------------ outcomes

    def _leave_flight(self, batch: ProducerBatch) -> None:
        if batch.in_request:
            batch.in_request = False
            self.flight.discard(batch)
        pq = batch.pq
        pq.muted = False
        if pq.batches and pq.leader >= 0:
            # Sarama #3689: unmuting (or an idempotence slot freeing up) must wake the
            # drain, or the partition's next batch waits forever.
            self.signals.wake_node(pq.leader)

    def complete(
        self,
        batch: ProducerBatch,
        base_offset: int,
        log_append_time: int,
        log_start_offset: int = -1,
    ) -> None:
        """The batch was written (or is a known duplicate): resolve its futures."""
        if batch.done:
            return
        if self.idem is not None:
            self.idem.acked(batch.pq, batch)
        self._leave_flight(batch)
        batch.base_offset = base_offset
        batch.log_append_time = log_append_time
        batch.log_start_offset = log_start_offset
        self._finish(batch, None)

    def fail(self, batch: ProducerBatch, exc: BaseException) -> None:
        """The batch will not be delivered."""
        if batch.done:
            return
        if self.idem is not None:
            self.idem.failed(batch.pq, batch)
        self._leave_flight(batch)
        self._finish(batch, exc)

    def _finish(self, batch: ProducerBatch, exc: BaseException | None) -> None:
        batch.done = True
        self.pool.release(batch.memory)
        batch.memory = 0
        if exc is None:
            self.records_sent += len(batch.futures)
            self.batches_sent += 1
        else:
            self.records_failed += len(batch.futures)
        futures, batch.futures = batch.futures, []
        # Dropping the batch's list breaks the future <-> batch reference cycle: finished
        # records are freed by reference counting as soon as the caller lets go of their
        # futures, not by the cyclic GC -- whose full collections were the send->ack
        # latency's p99 under load (tens of ms pauses at 40k msg/s).
        finish_all(futures, exc, self.loop, batch)

    def requeue(self, batch: ProducerBatch, now: float) -> None:
        """Put a failed batch back at the head of its partition (in sequence order with
        idempotence), due after the retry backoff. Unmutes only after it is queued (#3644)."""
        if batch.done:
            return  # expired while in flight; its late answer changes nothing
        self.retries += 1
        batch.attempts += 1
        batch.retry_at = now + self.retry_backoff.backoff_s(batch.attempts)
        pq = batch.pq
        seq = batch.base_sequence
        if seq >= 0:
            at = 0
            for at, queued in enumerate(pq.batches):  # noqa: B007
                if queued.base_sequence < 0 or queued.base_sequence > seq:
                    break
            else:
                at = len(pq.batches)
            pq.batches.insert(at, batch)
        else:
            pq.batches.appendleft(batch)
        self._leave_flight(batch)  # unmutes and wakes the node, in that order

    def split(self, batch: ProducerBatch) -> bool:
        """Split a batch the broker refused as too large (MESSAGE_TOO_LARGE) into two halves,
        queued at the head in order; False if it holds a single record. As in the Java
        client, this is not counted as a retry attempt."""
        n = len(batch.futures)
        if n < 2 or batch.done or batch.data is None:
            return False
        self.splits += 1
        pq = batch.pq
        if self.idem is not None:
            self.idem.failed(pq, batch)  # its sequence range is abandoned: reset
        self._leave_flight(batch)
        parts = halves(batch, self.compression, self.compression_level)
        batch.memory = 0
        batch.futures = []
        batch.done = True
        pq.batches.extendleft(reversed(parts))
        if pq.leader >= 0:
            self.signals.wake_node(pq.leader)
        return True

    def next_expiry(self) -> float | None:
        """The earliest delivery deadline :meth:`expire` acts on (a topic's oldest waiting
        record, a partition's head batch, a batch in flight); None when nothing is held.
        Heads only, as :meth:`expire`: a partition's head is its oldest batch (re-queued
        batches return to the head, in sequence order), and a timer woken for a deadline
        ``expire`` would not act on would wake again at once."""
        oldest: float | None = None
        for t in self.topics.values():
            if t.pending:
                # In the frame of the others (+ delivery_timeout below): a shorter limit
                # comes out earlier.
                shorter = self._wait_limit(t.name) - self.delivery_timeout
                at = _enqueued_at(t.pending[0]) + shorter
                if oldest is None or at < oldest:
                    oldest = at
            for pq in t.partitions:
                if pq.batches:
                    at = pq.batches[0].created
                    if oldest is None or at < oldest:
                        oldest = at
        for batch in self.flight:
            if oldest is None or batch.created < oldest:
                oldest = batch.created
        return None if oldest is None else oldest + self.delivery_timeout

    def expire(self, now: float) -> None:
        """Fail what outlived ``delivery_timeout_ms``, queued or in flight. (Deadlines are
        compared as :meth:`next_expiry` computes them, ``created + limit <= now``: in
        floating point ``now - created >= limit`` can be false at that very moment, and
        the expiry timer would wake for it again and again.)"""
        limit = self.delivery_timeout
        for t in self.topics.values():
            waiting = self._wait_limit(t.name)
            while t.pending and _enqueued_at(t.pending[0]) + waiting <= now:
                self._fail_entry(t.pending.popleft(), self._not_in_metadata(t.name))
                if not t.pending:  # the wait is over: a new one is said anew
                    self._end_wait(t.name)
            for pq in t.partitions:
                while pq.batches and pq.batches[0].created + limit <= now:
                    batch = pq.batches.popleft()
                    self.expired_batches += 1
                    self.fail(batch, _expired_error(batch, now))
        # In flight too (Java does the same): the request is bounded by request_timeout_ms
        # anyway, but delivery_timeout_ms is the promise made to the caller. A late answer
        # for such a batch is ignored (complete/requeue check ``done``).
        for batch in [b for b in self.flight if b.created + limit <= now]:
            self.expired_batches += 1
            self.fail(batch, _expired_error(batch, now))

    def _note_waiting(self, t: TopicQueue, error: type[KafkaError]) -> None:
        """The records waiting in ``t`` wait on ``error``, a retriable topic error, this
        metadata round. UNKNOWN_TOPIC_OR_PARTITION answered for ``MISSING_AFTER_S`` makes the
        topic missing: a WARNING says so once per wait (Java logs it every round), and the
        records get the shorter limit. Not at once: Kafka answers it to the first Metadata
        request that auto-creates a topic, while the controller creates it (KRaft's
        AutoTopicCreationManager). Other errors (LEADER_NOT_AVAILABLE while a topic is
        created) are routine: DEBUG."""
        name = t.name
        now = self.clock()
        known = self.waiting_on.get(name)
        if known is None or known[0] is not error:
            self.waiting_on[name] = (error, now)
            log.debug("producer: topic %r: the brokers answer %s", name, error.__name__)
            return
        if (
            error is not UnknownTopicOrPartitionError
            or name in self.missing
            or now - known[1] < MISSING_AFTER_S
        ):
            return
        self.missing.add(name)
        log.warning(
            "producer: topic %r does not exist: the brokers answer UNKNOWN_TOPIC_OR_PARTITION "
            "(auto-creation is off or not allowed); %d record(s) wait for it and fail %.0f ms "
            "after their send if it does not come",
            name, _waiting(t), self.metadata_wait * 1000,
        )  # fmt: skip
        self.arm_expiry()  # the shorter limit may be due before expiry_at

    def _end_wait(self, topic: str) -> None:
        self.waiting_on.pop(topic, None)
        self.missing.discard(topic)

    def _wait_limit(self, topic: str) -> float:
        """How long records of ``topic`` may wait for its metadata (module docstring)."""
        return self.metadata_wait if topic in self.missing else self.delivery_timeout

    def waiting_reason(self, topic: str) -> str:
        """What a record of ``topic`` not yet acknowledged waits for, said to a caller who
        stopped waiting (``send_and_wait``'s timeout)."""
        t = self.topics.get(topic)
        if t is None or not t.pending:
            return "the record stays queued and may still be delivered"
        known = self.waiting_on.get(topic)
        answer = "" if known is None else f" (the brokers answer {known[0].__name__})"
        return (
            f"it waits for the metadata of topic {topic!r}{answer}, and fails if that does "
            f"not come within {self._wait_limit(topic) * 1000:.0f} ms of its send"
        )

    def _not_in_metadata(self, topic: str) -> KafkaTimeoutError:
        """The error of a record whose topic had no usable metadata in time: what the
        brokers last answered for the topic is named, and chained as the cause."""
        waited = self._wait_limit(topic)
        wait_ms = f"{waited * 1000:.0f} ms"
        limit = "max_block_ms" if waited < self.delivery_timeout else "delivery_timeout_ms"
        known = self.waiting_on.get(topic)
        if known is None:
            return KafkaTimeoutError(
                f"topic {topic!r} not present in metadata after {wait_ms} ({limit}): no "
                "broker answered for it"
            )
        why = (
            "it does not exist, and the brokers do not create it (auto.create.topics.enable "
            "is off, or allow_auto_create_topics=False)"
            if known[0] is UnknownTopicOrPartitionError
            else "retrying did not help"
        )
        error = known[0]
        exc = KafkaTimeoutError(
            f"topic {topic!r} not present in metadata after {wait_ms} ({limit}): the brokers "
            f"answer {error.__name__}: {why}"
        )
        exc.__cause__ = error(f"topic {topic!r}")
        return exc

    # ------------------------------------------------------------------ flush / close

    def incomplete(self) -> list[Delivery[Any]]:
        """One future per unfinished batch (its last record) plus every pending record:
        awaiting them all awaits everything sent so far."""
        out: list[Delivery[Any]] = []
        for t in self.topics.values():
            for entry in t.pending:
                if not isinstance(entry, QueuedRun):
                    out.append(entry[6])
                elif entry.shared is not None:
                    out.append(entry.shared)
                else:
                    out.extend(entry.futures)
            for pq in t.partitions:
                out.extend(b.futures[-1] for b in pq.batches if b.futures)
        out.extend(b.futures[-1] for b in self.flight if b.futures)
        return out

    def abort_all(self, exc: BaseException, *, in_flight: bool = False) -> None:
        """Fail everything not in flight (and, with ``in_flight``, what is: the senders
        were stopped, no response will come)."""
        if in_flight:
            for batch in list(self.flight):
                self.fail(batch, exc)
        for t in self.topics.values():
            self._fail_pending(t, exc)
            for pq in t.partitions:
                while pq.batches:
                    self.fail(pq.batches.popleft(), exc)

    def reset_sequences(self) -> None:
        """After a new producer id/epoch: every partition starts again at sequence 0 and
        queued retries lose their old sequence (re-stamped at their next drain)."""
        for t in self.topics.values():
            for pq in t.partitions:
                pq.next_sequence = 0
                pq.last_acked = -1
                pq.unresolved = []
                for b in pq.batches:
                    b.base_sequence = -1


def _waiting(t: TopicQueue) -> int:
    """How many records wait in ``t``'s pending queue."""
    return sum(len(e.futures) if isinstance(e, QueuedRun) else 1 for e in t.pending)


def _enqueued_at(entry: QueuedRecord | QueuedRun) -> float:
    return entry.enqueued_at if isinstance(entry, QueuedRun) else entry[7]


def _expired_error(batch: ProducerBatch, now: float) -> KafkaError:
    return KafkaTimeoutError(
        f"{len(batch.futures)} record(s) for {batch.topic}-{batch.partition} expired after "
        f"{(now - batch.created) * 1000:.0f} ms (delivery_timeout_ms)"
    )
