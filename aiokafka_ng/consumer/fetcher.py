"""The fetcher: keeps a bounded buffer of records ahead of the application.

Theory of operation
-------------------
*One loop, one fetch per broker.* :meth:`Fetcher.run` is a single task that plans work and
sleeps on a wake-up event. Each round it groups the *fetchable* partitions by leader and,
for every broker that has no fetch in flight, starts one task sending one sessionless Fetch
(session id 0, epoch -1) over that broker's connection. A partition is fetchable when it is
assigned, not paused, has a position, has no fetch in flight, is not backing off, its leader
is known, and it has no buffered data or may be *fetched ahead* (below). Partitions without
a position are handed to one resolver task (:mod:`.positions`: committed offset, else
``auto_offset_reset``), as are positions that must be validated because the partition's
leader epoch moved (KIP-320: a truncated log is detected there, or by a Fetch v12+ answer's
diverging epoch). A broker whose fetchable partitions are all at their log end (their next
fetch would start at the last high watermark) gets no fetch while another of its partitions
is being drained: that fetch would be a long poll (``fetch_max_wait_ms``) holding the
broker's one fetch slot just when the drained partition needs its next fetch. Draining wakes
the planner, and the next fetch asks for both.

*Fetching ahead* (librdkafka's prefetch, bounded as its ``queued.max.messages.kbytes``).
A partition whose buffer holds only the answer being read (no later answer queued behind
it, see :mod:`.buffer`) is fetched again while that answer is read, so a drained buffer
does not wait one round trip for its next records. The fetch starts at the end of what is
buffered (and names the epoch of the last buffered batch as KIP-320's last fetched epoch),
never at the application's position; its answer is queued behind the buffered batches.
Bounds: at most one answer ahead per partition, and what is fetched ahead stays within the
first half of ``fetch_buffer_bytes`` (a fetch that asks for partitions ahead reserves no
more than ``buffered + reserved`` leaves of that half, beyond the share of the partitions
in it that have nothing buffered) -- the other half is always there for the partitions with
nothing buffered, so fetching ahead never holds back a partition that waits. Every
rule that drops buffered data drops what was fetched ahead with it (a seek, a reset, a
revocation, a leader-epoch change bump the partition's epoch); pause keeps it. An answer
fetched ahead that the fetcher would act on -- a partition error other than a retriable
one, a diverging epoch, a batch that does not decode -- is not acted on while records
before it are still buffered: the buffer is *held* (no more fetches ahead) and, once
drained, the partition is fetched again from the application's position, where the
answer, if it still holds, is acted on exactly as before (the application sees the
buffered records first, then the error, the reset or the truncation). An empty answer at
the log end (or the last stable offset), or a first batch larger than the whole fetch may
bring, holds the buffer too: asking again at once would be a long poll, or the same
answer dropped again. (An answer empty or trimmed only because others filled the
response is asked again.) Buffered bytes go
back to the budget one answer at a time, when the next one starts being read, and all of
them when the last record is handed out.

*Letting the fetcher run.* ``async for`` and ``getmany`` hand out buffered records without
awaiting anything, so an application that keeps finding records would never let the
fetcher's tasks run: a fetch ahead would be neither sent nor read until the buffers are
empty. ``drain_one`` (once a run of ``ONE_RUN`` records) and ``drain`` set ``loop_due``
while a fetch is in flight or the planner has been woken, and the consumer then takes one
trip through the event loop (a checkpoint, before it takes the next record) -- one loop
turn per few hundred records, not one per record.

*The memory cap* (``fetch_buffer_bytes``, KIP-72's idea on the client side). Two numbers:
``buffered`` (bytes of record batches kept and not yet fully handed to the application) and
``reserved`` (the ``max_bytes`` of fetches in flight). A fetch starts only when
``buffered + reserved`` leaves enough room, and asks for no more than that room nor more
than its partitions can bring (partitions x ``max_partition_fetch_bytes``): a fetch the
broker sits on (a long poll, an answer that never comes until ``request_timeout_ms``) must
not hold the budget the other brokers' partitions need
(tests/reliability/test_fetch_budget_stall.py). Brokers
may still answer with more than asked, so a response is *trimmed* (see
:mod:`.fetch_wire`): partitions are kept, in the order they were asked for, while their
batches fit in the reservation. So ``buffered`` never exceeds the cap except by one
oversize batch, and the statistics show the largest value ever seen.

*Fairness.* Partitions are listed in fetch requests least recently served first (a
partition is "served" when a response brings it data), and the drain that serves
``getmany`` starts from a rotating partition, so neither a busy partition nor the response
size limit starves the others (``async for`` takes runs of up to ``ONE_RUN`` records from
one partition, then the next: the same fairness at ``max_poll_records``' granularity).
Listing order matters: brokers fill a response in request
order, and some (Tansu) ignore ``partition_max_bytes`` and give the first partition all of
``max_bytes``; with this order such a broker still serves the partitions in turn.

*Buffered data* is kept as raw batches (a :class:`~.buffer.BufferedFetch` per partition) and
decoded one batch at a time as the application drains it; its bytes return to the budget
answer by answer (above), the last when the partition's buffer is empty. The cap counts
bytes as received (compressed batches count compressed); decoded records exist for at most
one batch per partition at a time.

*Errors.* A failed request (connection, timeout) backs off that broker with the shared
:class:`ExponentialBackoff`; a partition's error code is handled as :mod:`.fetch_wire`
says (refresh metadata, back off, reset, or raise to the application on its next poll).
"""

from __future__ import annotations

import logging
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.lowlevel
from anyio.abc import TaskGroup, TaskStatus

from aiokafka_ng.cluster import ClusterClient, ClusterMetadata, Link, RetryState
from aiokafka_ng.consumer.buffer import BufferedFetch
from aiokafka_ng.consumer.fetch_wire import (
    at_log_end,
    fetch_node,
    fetch_request,
    fetch_start,
    keep_batches,
    partition_answers,
    partition_error,
)
from aiokafka_ng.consumer.models import ConsumerRecord, TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient, current_leader_epoch
from aiokafka_ng.consumer.positions import complete_validation, resolve_positions
from aiokafka_ng.consumer.state import PartitionState, SubscriptionState
from aiokafka_ng.errors import KafkaError, OffsetOutOfRangeError, error_for_code
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.latency import LatencyRecorder
from aiokafka_ng.protocol.messages.fetch import (
    FetchRequest,
    FetchResponse,
    PartitionData,
)
from aiokafka_ng.protocol.records import RecordBatch

__all__ = ["FetchSettings", "Fetcher", "FetcherStatistics"]

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class FetchSettings:
    min_bytes: int = 1
    max_bytes: int = 52428800
    max_wait_ms: int = 500
    max_partition_bytes: int = 1048576
    buffer_bytes: int = 64 * 1024 * 1024
    isolation_level: int = 0  # 1 = read_committed
    check_crcs: bool = True
    auto_offset_reset: str = "latest"
    rack_id: str = ""
    request_timeout_s: float = 30.0
    #: How long a KIP-392 preferred read replica is used before asking the leader again.
    preferred_replica_ttl_s: float = 300.0


@dataclass(frozen=True, slots=True)
class FetcherStatistics:
    buffered_bytes: int  # record bytes fetched and not yet handed to the application
    max_buffered_bytes: int  # the largest buffered_bytes ever seen
    reserved_bytes: int  # max_bytes of fetches in flight
    buffer_limit: int
    fetches_in_flight: int
    fetch_requests: int
    fetch_failures: int
    bytes_dropped: int  # over-budget response data dropped to keep the cap
    partitions_buffered: int
    records_consumed: int  # records handed to the application
    fetch_latency_ms: dict[str, float]  # Fetch round trips (incl. the broker's long poll)


#: Records ``drain_one`` takes from one partition in a row (``max_poll_records``' default).
ONE_RUN = 500


class Fetcher:
    """Fetches ahead for the assigned partitions within a memory budget (module docstring)."""

    def __init__(
        self,
        cluster: ClusterClient,
        subscription: SubscriptionState,
        offsets: OffsetsClient,
        settings: FetchSettings,
        *,
        backoff: ExponentialBackoff,
        group_offsets: Callable[[], bool],
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        value_deserializer: Callable[[bytes | None], Any] | None = None,
    ) -> None:
        self._cluster = cluster
        self._subs = subscription
        self._offsets = offsets
        self._settings = settings
        self._backoff = backoff
        self._group_offsets = group_offsets  # True when committed offsets can be fetched
        self._key_de = key_deserializer
        self._value_de = value_deserializer
        self._wake = anyio.Event()
        self._data = anyio.Event()  # set when data or an error is ready for the application
        self._buffered = 0
        self._max_buffered = 0
        self._reserved = 0
        self._in_flight: set[int] = set()  # nodes with a fetch in flight
        # Per-node and position-lookup pacing: the cluster's RetryState, scheduled by its
        # retry_at (the planner never sleeps inline). A throttled node's retry_at is set
        # from the broker's throttle time without counting a failure.
        self._node_pacing: dict[int, RetryState] = {}
        self._resolving = False
        self._resolve_pacing = RetryState(self._backoff)
        self._served = 0  # counter behind PartitionState.served
        self._drain_rotation = 0
        # drain_one's current run: the partition, the assignment it belongs to, records left
        self._one_state: PartitionState | None = None
        self._one_states: tuple[PartitionState, ...] = ()
        self._one_left = 0
        #: Set by drain_one (once a run) and drain when the fetcher's tasks have work on
        #: the event loop (a fetch in flight, a wake-up pending): iteration and getmany,
        #: which hand out buffered records with no await at all, then yield to the loop
        #: once before they take more.
        self.loop_due = False
        self._requests = 0
        self._failures = 0
        self._records_out = 0
        self._fetch_latency = LatencyRecorder()
        self._dropped = 0
        self._error: KafkaError | None = None  # raised to the application (not per partition)
        self._kept: set[PartitionState] = set()  # states holding a buffer

    # ------------------------------------------------------------------ public

    def wake(self) -> None:
        """Re-plan soon (assignment, seek, pause or metadata changed)."""
        self._wake.set()
        self._data.set()  # a waiting getmany re-checks (e.g. its partitions were paused)

    def statistics(self) -> FetcherStatistics:
        return FetcherStatistics(
            buffered_bytes=self._buffered,
            max_buffered_bytes=self._max_buffered,
            reserved_bytes=self._reserved,
            buffer_limit=self._settings.buffer_bytes,
            fetches_in_flight=len(self._in_flight),
            fetch_requests=self._requests,
            fetch_failures=self._failures,
            bytes_dropped=self._dropped,
            partitions_buffered=sum(
                1 for s in self._subs.assignment.values() if s.buffer is not None
            ),
            records_consumed=self._records_out
            + (0 if self._one_state is None else ONE_RUN - 1 - self._one_left),
            fetch_latency_ms=self._fetch_latency.snapshot(),
        )

    async def wait_for_data(self) -> None:
        """Return when new data (or an error) may be ready; callers re-check with drain().

        Call it right after a drain() that found nothing, with no await in between: a
        signal raised before that drain was consumed by it, so a set event is stale and
        replaced. An unset event is shared by every waiter (getmany and position() may
        wait at once).
        """
        if self._data.is_set():
            self._data = anyio.Event()
        await self._data.wait()

    def drain(
        self, max_records: int, only: frozenset[TopicPartition] | None = None
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        """Up to ``max_records`` records, taken from the partitions in rotating order.

        Raises a pending error (its partition's error first) instead, once.
        """
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        out: dict[TopicPartition, list[ConsumerRecord[Any, Any]]] = {}
        states = self._subs.states
        count = len(states)
        if not count:
            return out
        start = self._drain_rotation % count
        self._drain_rotation += 1
        for i in range(count):
            state = states[(start + i) % count]
            if only is not None and state.tp not in only:
                continue
            if state.error is not None:
                pending, state.error = state.error, None
                if out:  # hand out what we have; the error comes next time
                    state.error = pending
                    return out
                self._raised(state)
                raise pending
            buf = state.buffer
            if buf is None or state.paused:
                continue
            if buf.epoch != state.epoch:
                self._release(state)
                continue
            records = self._take(state, buf, max_records)
            if records:
                out[state.tp] = records
                max_records -= len(records)
                self._records_out += len(records)
            if buf.exhausted:
                self._release(state)
            if max_records <= 0:
                break
        if out:  # a getmany that finds records does not await: see loop_due
            self.loop_due = bool(self._in_flight) or self._wake.is_set()
        return out

    def drain_batches(self, tp: TopicPartition, max_records: int) -> tuple[list[RecordBatch], int]:
        """Whole raw batches of ``tp`` (see ``BufferedFetch.take_batches``); raises a
        pending error once, as ``drain`` does."""
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        state = self._subs.state(tp)
        if state.error is not None:
            pending, state.error = state.error, None
            self._raised(state)
            raise pending
        buf = state.buffer
        if buf is None or state.paused:
            return [], state.position or 0
        if buf.epoch != state.epoch:
            self._release(state)
            return [], state.position or 0
        batches, position = buf.take_batches(max_records)
        self._records_out += sum(max(b.record_count, 0) for b in batches)
        if buf.exhausted:
            self._release(state)
        return batches, position

    def drain_one(
        self, only: frozenset[TopicPartition] | None = None
    ) -> ConsumerRecord[Any, Any] | None:
        """``drain(1)`` without building a dict: the ``getone``/iteration fast path.

        Records come from the partition served last while its buffer lasts, up to
        ``ONE_RUN`` in a row, then from the next in rotating order: ``drain``'s fairness at
        ``max_poll_records``' granularity, without looking at every partition per record
        (that scan was half the cost of ``async for``).
        """
        state = self._one_state
        if state is not None and only is None and self._one_left and self._error is None:
            buf = state.buffer
            if (
                buf is not None
                and state.error is None
                and not state.paused
                and buf.epoch == state.epoch
                and self._one_states is self._subs.states  # still assigned
            ):
                try:
                    record = buf.take_one(self._key_de, self._value_de)
                except Exception:
                    state.epoch += 1  # as in _take: drop the buffer, position stays put
                    raise
                # No exhausted check per record: the buffer hands its bytes back itself
                # when its last record goes out (on_release); the empty buffer is dropped
                # here at the next call, or by the planner's _reclaim.
                if record is not None:
                    self._one_left -= 1  # counted into records_out when the run ends
                    return record
                if buf.exhausted:
                    self._release(state)
        self._end_run()
        return self._drain_one_rotating(only)

    def _end_run(self) -> None:
        """drain_one's run ends: count its records (the fast path does not, per record)."""
        if self._one_state is not None:
            self._records_out += ONE_RUN - 1 - self._one_left
            self._one_state = None
            self._one_left = 0

    def _drain_one_rotating(
        self, only: frozenset[TopicPartition] | None
    ) -> ConsumerRecord[Any, Any] | None:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        states = self._subs.states
        count = len(states)
        if not count:
            return None
        start = self._drain_rotation % count
        self._drain_rotation += 1
        for i in range(count):
            state = states[(start + i) % count]
            if only is not None and state.tp not in only:
                continue
            if state.error is not None:
                pending, state.error = state.error, None
                self._raised(state)
                raise pending
            buf = state.buffer
            if buf is None or state.paused:
                continue
            if buf.epoch != state.epoch:
                self._release(state)
                continue
            try:
                record = buf.take_one(self._key_de, self._value_de)
            except Exception:
                state.epoch += 1  # as in _take: drop the buffer, position stays put
                raise
            if buf.exhausted:
                self._release(state)
            if record is not None:
                self._records_out += 1
                if only is None:
                    self._one_state, self._one_states = state, states
                    self._one_left = ONE_RUN - 1
                # Once a run (ONE_RUN records): a consumer that finds records buffered never
                # awaits, so without a yield the fetch answers would wait in the socket
                # until the buffers are drained, and no fetch ahead could be sent.
                self.loop_due = bool(self._in_flight) or self._wake.is_set()
                return record
        return None

    def _raised(self, state: PartitionState) -> None:
        """``state``'s error went to the application: a position still to validate (the
        log truncated with ``auto_offset_reset="none"``) is checked again, and raises
        again until the application seeks, so the planner must look at it."""
        if state.validate:
            self._wake.set()

    def _take(
        self, state: PartitionState, buf: BufferedFetch, n: int
    ) -> list[ConsumerRecord[Any, Any]]:
        out: list[ConsumerRecord[Any, Any]] = []
        try:
            buf.take_into(out, n, self._key_de, self._value_de)
        except Exception as exc:
            # A batch that does not decode (ProtocolError naming the partition and offset,
            # see buffer.batch_error) or a record that does not deserialize: drop the buffer,
            # keep the position at the batch (it is fetched again and fails again: the
            # application decides, e.g. seeks). The records taken before it are handed out
            # now -- their position is already past them -- and the error on the next call.
            # Any exception, not only KafkaError: whatever stops the decoding, the records
            # already taken must not be lost.
            state.epoch += 1
            if not out:
                raise
            state.error = exc
            self._data.set()
        return out

    def _release(self, state: PartitionState) -> None:
        buf = state.buffer
        if buf is not None:
            state.buffer = None
            self._buffered -= buf.size
            self._wake.set()

    def _reclaim(self) -> None:
        """Return the budget held by buffers that can no longer be handed out.

        That is: buffers of partitions no longer assigned (their states left the
        assignment still holding them), buffers older than a seek, and drained ones.
        """
        for state in list(self._kept):
            buf = state.buffer
            if buf is None:
                self._kept.discard(state)
            elif (
                self._subs.assignment.get(state.tp) is not state
                or buf.epoch != state.epoch
                or buf.exhausted  # its last record went out by drain_one (budget returned)
            ):
                self._kept.discard(state)
                self._release(state)

    # ------------------------------------------------------------------ the loop

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        remove = self._cluster.add_listener(lambda _snapshot: self._wake.set())
        try:
            async with anyio.create_task_group() as tg:
                task_status.started()
                while True:
                    # A cancelled fetcher must stop even when every wait ends at once: a
                    # fetch started in the cancelled group writes its request (shielded),
                    # is cancelled at its first wait and sets _wake on the way out, so the
                    # wait below may end normally every time; anyio then never finds this
                    # task waiting to cancel it, and run() would spin, writing fetches.
                    await anyio.lowlevel.checkpoint_if_cancelled()
                    self._wake = anyio.Event()
                    self._reclaim()
                    next_due = self._plan(tg)
                    delay = None if next_due is None else max(0.0, next_due - anyio.current_time())
                    with anyio.move_on_after(delay if delay is not None else float("inf")):
                        await self._wake.wait()
        finally:
            remove()

    def _plan(self, tg: TaskGroup) -> float | None:
        """Start the fetches (and position lookups) that can start; return when to re-plan."""
        now = anyio.current_time()
        next_due: float | None = None
        states = list(self._subs.assignment.values())
        if not states:
            return None
        metadata = self._cluster.metadata
        for state in states:
            self._follow_leader_epoch(state, metadata)
        unresolved = [s for s in states if not s.has_position and s.error is None]
        if unresolved and not self._resolving and self._resolve_pacing.retry_at > now:
            next_due = self._resolve_pacing.retry_at
        elif unresolved and not self._resolving:
            self._resolving = True
            tg.start_soon(self._resolve_positions, unresolved)
        by_node: dict[int, list[PartitionState]] = defaultdict(list)
        draining: set[int] = set()  # where partitions whose buffered records are going fetch
        for state in sorted(states, key=_served):
            buf = state.buffer
            if buf is not None and not state.paused:
                node = fetch_node(state, metadata, now)
                if node is not None:
                    draining.add(node)
            if state.paused or state.in_flight or state.error is not None or not state.has_position:
                continue
            if buf is not None and (buf.hold or buf.ahead or buf.epoch != state.epoch):
                continue
            if state.retry_at > now:
                next_due = state.retry_at if next_due is None else min(next_due, state.retry_at)
                continue
            node = fetch_node(state, metadata, now)
            if node is None:
                self._cluster.request_update([state.tp.topic])
                continue
            by_node[node].append(state)
        settings = self._settings
        # Tiny fetches would mostly be trimmed away: wait until a useful share is free.
        useful = max(1, min(settings.max_partition_bytes, settings.buffer_bytes // 4))
        for node, parts in by_node.items():
            if node in self._in_flight:
                continue
            # Fetching ahead (module docstring) only within the first half of the cap.
            waiting = [s for s in parts if s.buffer is None]
            ahead_room = settings.buffer_bytes // 2 - self._buffered - self._reserved
            if len(waiting) < len(parts) and ahead_room < useful:
                parts = waiting
                if not parts:
                    continue
            if node in draining and all(at_log_end(state) for state in parts):
                # Only partitions at their log end: the broker would hold this fetch for
                # fetch_max_wait_ms, and with it the node's one fetch slot, while the
                # partitions being drained need their next fetch (measured: a 500 ms
                # stall per round, 4x slower getmany on a log read from the start). The
                # drain wakes the planner; the long poll then covers them all.
                continue
            pacing = self._node_pacing.get(node)
            retry_at = 0.0 if pacing is None else pacing.retry_at
            if retry_at > now:
                next_due = retry_at if next_due is None else min(next_due, retry_at)
                continue
            budget = settings.buffer_bytes - self._buffered - self._reserved
            if budget < useful and not (self._buffered == 0 and self._reserved == 0):
                break
            # No more than this fetch can bring (every partition at partition_max_bytes):
            # a fetch that stalls (a long poll at the log end, a broker that does not
            # answer until request_timeout_ms) must not hold the budget that the other
            # brokers' partitions need.
            most = len(parts) * settings.max_partition_bytes
            if len(waiting) < len(parts):
                # What is fetched ahead stays within the first half of the cap.
                most = min(most, max(len(waiting) * settings.max_partition_bytes, ahead_room))
            reserve = max(1, min(settings.max_bytes, budget, most))
            self._reserved += reserve
            self._in_flight.add(node)
            for s in parts:
                s.in_flight = True
            tg.start_soon(self._fetch, node, parts, reserve)
        return next_due

    # ------------------------------------------------------------------ positions

    @staticmethod
    def _follow_leader_epoch(state: PartitionState, metadata: ClusterMetadata) -> None:
        """KIP-320: a position is known good under the leader epoch it was fetched (or
        validated) under; when metadata shows a newer epoch, a position that has an epoch
        is validated before the next fetch, one without just follows."""
        if not state.has_position:
            return
        current = current_leader_epoch(metadata, state.tp)
        if current <= state.seen_epoch:
            return
        if state.leader_epoch >= 0 and state.seen_epoch >= 0:
            log.debug(
                "%s-%s: leader epoch %s -> %s, validating position %s",
                state.tp.topic, state.tp.partition, state.seen_epoch, current, state.position,
            )  # fmt: skip
            state.request_validation()
        else:
            state.seen_epoch = current

    async def _resolve_positions(self, states: list[PartitionState]) -> None:
        try:
            await resolve_positions(
                states,
                self._subs.assignment,
                self._offsets,
                group_offsets=self._group_offsets,
                auto_offset_reset=self._settings.auto_offset_reset,
                on_error=lambda: self._data.set(),
            )
            self._resolve_pacing.succeeded()
        except KafkaError as exc:
            # Retried after the shared backoff, so a persistent failure (say, authorization)
            # is not a hot loop. Raised to the application once only when asking again cannot
            # fix it: a timeout (the coordinator or a leader behind a network partition) is
            # retried in the background and getmany returns nothing meanwhile, as Java's
            # poll does (its committed-offset and ListOffsets lookups throw only
            # non-retriable errors).
            log.warning("resolving positions failed: %r", exc)
            if not exc.retriable:
                self._error = exc
            self._resolve_pacing.failed(exc)
        finally:
            self._resolving = False
            self._wake.set()
            self._data.set()  # position() waiters re-check

    # ------------------------------------------------------------------ fetching

    def _pacing_of(self, node: int) -> RetryState:
        pacing = self._node_pacing.get(node)
        if pacing is None:
            pacing = self._node_pacing[node] = RetryState(self._backoff)
        return pacing

    async def _fetch(self, node: int, parts: list[PartitionState], reserve: int) -> None:
        epochs = [s.epoch for s in parts]
        starts = [fetch_start(s)[0] for s in parts]
        try:
            try:
                conn = await self._cluster.connection(node)
            except KafkaError as exc:
                # The pool alone paces reconnects: the next connection() waits for its next
                # dial (KIP-144's reconnect backoff). Pacing the node here as well made the
                # dials follow the slower retry curve (tests/consumer/test_fetch_pacing.py).
                # Only a node the cluster cannot dial (one the metadata no longer names)
                # fails without a dial: that one is paced here until the metadata moves
                # its partitions.
                if not self._cluster.can_dial(node):
                    self._pacing_of(node).failed(exc)
                self._fetch_failed(node, parts, exc)
                return
            try:
                response, version = await self._send_fetch(conn, parts, reserve)
            except KafkaError as exc:
                self._pacing_of(node).failed(exc)  # the node's answer: paced here
                self._fetch_failed(node, parts, exc)
                return
        finally:
            self._fetch_ended(node, parts, reserve)
        self._pacing_of(node).succeeded()
        self._handle_response(node, parts, epochs, starts, response, version, reserve)

    def _fetch_failed(self, node: int, parts: list[PartitionState], exc: KafkaError) -> None:
        self._failures += 1
        log.debug("fetch from node %s failed: %r", node, exc)
        for s in parts:
            s.preferred_replica = -1  # back to the leader
        if exc.invalid_metadata or not exc.retriable:
            self._cluster.request_update({s.tp.topic for s in parts})
        if not exc.retriable:
            self._error = exc
            self._data.set()

    def _fetch_ended(self, node: int, parts: list[PartitionState], reserve: int) -> None:
        self._reserved -= reserve
        self._in_flight.discard(node)
        for s in parts:
            s.in_flight = False
        self._wake.set()

    async def _send_fetch(
        self, conn: Link, parts: list[PartitionState], reserve: int
    ) -> tuple[FetchResponse, int]:
        settings = self._settings
        request, version = fetch_request(
            parts,
            self._cluster.metadata,
            conn.version_for(FetchRequest),
            max_bytes=reserve,
            partition_max_bytes=max(1, min(settings.max_partition_bytes, reserve)),
            max_wait_ms=settings.max_wait_ms,
            min_bytes=settings.min_bytes,
            isolation_level=settings.isolation_level,
            rack_id=settings.rack_id,
        )
        self._requests += 1
        timeout = settings.request_timeout_s + settings.max_wait_ms / 1000
        started = anyio.current_time()
        response = await conn.send(request, version=version, timeout=timeout)
        self._fetch_latency.record(anyio.current_time() - started)
        return response, version

    def _handle_response(
        self,
        node: int,
        parts: list[PartitionState],
        epochs: list[int],
        starts: list[int],
        response: FetchResponse,
        version: int,
        reserve: int,
    ) -> None:
        if response.error_code:
            error = error_for_code(response.error_code)
            self._failures += 1
            self._pacing_of(node).failed(error())
            log.debug("fetch from node %s: top-level error %s", node, error.__name__)
            return
        if response.throttle_time_ms > 0:
            # KIP-219: over quota, the broker wants no request on this connection for now.
            self._pacing_of(node).throttle(response.throttle_time_ms / 1000)
        answers = partition_answers(response, version, self._cluster.metadata)
        endpoints = {e.node_id: e for e in response.node_endpoints}
        budget = reserve
        for state, epoch, start in zip(parts, epochs, starts, strict=True):
            p = answers.get(state.tp)
            if p is None:
                continue
            if self._subs.assignment.get(state.tp) is not state or state.epoch != epoch:
                continue  # revoked or seeked while the fetch was in flight
            if fetch_start(state)[0] != start:
                continue  # not where the buffer ends now (defensive: a seek bumps epoch)
            ahead = state.buffer
            if ahead is not None and self._held(ahead, p, start):
                continue
            if p.error_code:
                state.preferred_replica = -1
                reset = self._settings.auto_offset_reset
                if partition_error(state, p, endpoints, self._cluster, self._backoff, reset):
                    self._data.set()
                continue
            diverging = p.diverging_epoch
            if diverging.epoch >= 0 and state.position is not None:
                # Fetch v12+: the leader's log diverges from ours before the position.
                reset = self._settings.auto_offset_reset
                end = diverging.end_offset
                if complete_validation(state, state.seen_epoch, diverging.epoch, end, reset):
                    self._data.set()
                self._wake.set()
                continue
            state.failures = 0
            if p.preferred_read_replica >= 0 and p.preferred_read_replica != node:
                # KIP-392: the leader sends no records, only where to fetch them from.
                state.preferred_replica = p.preferred_read_replica
                state.preferred_until = (
                    anyio.current_time() + self._settings.preferred_replica_ttl_s
                )
                self._wake.set()
            state.highwater = p.high_watermark
            state.polled_at_ms = int(time.time() * 1000)
            if p.last_stable_offset >= 0:
                state.last_stable_offset = p.last_stable_offset
            if p.log_start_offset >= 0:
                state.log_start_offset = p.log_start_offset
            if not p.records:
                continue
            budget -= self._keep(state, p, start, budget, whole=budget == reserve)

    def _held(self, buf: BufferedFetch, p: PartitionData, start: int) -> bool:
        """An answer fetched ahead that must wait until ``buf`` is drained (module
        docstring, *Fetching ahead*): the buffer is held; True when ``p`` is set aside."""
        if p.error_code:
            error = error_for_code(p.error_code)
            # Retriable errors only steer the fetching (metadata, backoff): handled now.
            if error.retriable and error is not OffsetOutOfRangeError:
                return False
        elif p.diverging_epoch.epoch < 0:
            if not p.records and p.preferred_read_replica < 0:
                # Nothing new at the log end (or the last stable offset): asking again now
                # would be a long poll holding the node's fetch slot. (Empty only because
                # the answer was full with other partitions: asked again.) The watermarks
                # of the answer are still taken.
                end = p.high_watermark
                if self._settings.isolation_level == 1 and p.last_stable_offset >= 0:
                    end = p.last_stable_offset
                if end < 0 or start >= end:
                    buf.hold = True
            return False
        buf.hold = True
        return True

    def _keep(
        self, state: PartitionState, p: PartitionData, start: int, budget: int, *, whole: bool
    ) -> int:
        """Buffer the batches of ``p`` (fetched from ``start``) that fit in ``budget``
        (``whole``: all of the fetch's reservation); return the bytes kept."""
        data = p.records or b""  # never empty here: the caller skips those
        alone, crc = self._buffered == 0 and self._reserved == 0, self._settings.check_crcs
        kept, size, error = keep_batches(data, state.tp, start, budget, alone=alone, verify_crc=crc)
        buf = state.buffer
        if error is not None:
            if buf is not None:  # fetched ahead: the error waits until buf is drained
                buf.hold = True
                return 0
            state.error = error
            self._data.set()
            return 0
        self._dropped += len(data) - size
        if not kept:
            if buf is not None and whole:
                # Fetched ahead, and its first batch alone is more than a whole fetch may
                # bring: asked again it would be dropped again (a refetch loop). It is
                # fetched once the buffer is drained, when a lone oversize batch is kept.
                buf.hold = True
            return 0
        aborted = p.aborted_transactions if self._settings.isolation_level == 1 else None
        if aborted is None and self._settings.isolation_level == 1:
            aborted = []
        self._served += 1
        state.served = self._served
        if buf is not None:
            buf.append(kept, size, aborted)
        else:
            state.buffer = BufferedFetch(state, kept, size, aborted, self._answer_read)
            self._kept.add(state)
        self._buffered += size
        self._max_buffered = max(self._max_buffered, self._buffered)
        self._data.set()
        return size

    def _answer_read(self, size: int) -> None:
        """A buffer started on the next answer fetched ahead (the one before is read), or
        handed out its last record: ``size`` bytes back to the budget."""
        self._buffered -= size
        self._wake.set()


def _served(state: PartitionState) -> int:
    return state.served
