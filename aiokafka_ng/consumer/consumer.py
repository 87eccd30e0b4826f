"""The public Consumer.

``async with Consumer("events", bootstrap_servers=..., group_id="g") as consumer:`` starts a
:class:`~aiokafka_ng.cluster.Cluster`, the :class:`~.fetcher.Fetcher` task and, with a
``group_id``, the task of its :class:`~.membership.GroupMembership` (with the member of the
configured ``group_protocol``), all in one task group owned by the consumer. Leaving the
block commits (with auto-commit), leaves the group and stops them.
The lifecycle, the task group and the cluster in a task of their own, the supervision of
the tasks and ``status()`` are the consumer's :class:`~aiokafka_ng.cluster.ClientRuntime`
(the same for every client), so ``start()`` and ``close()`` (``stop()``, aiokafka's name)
may run in different tasks; committing and leaving the group on close take at most
``close_timeout_ms`` (or ``close(timeout)``).

Without a ``group_id``, ``subscribe(topics)`` reads every partition of the topics (kept up to
date from metadata) and nothing is committed; ``assign()`` works with or without a group.

Positions: ``position(tp)`` is the offset of the next record the application will get. It
advances as records are handed out by ``getone``/``getmany``/iteration, never ahead of
them; ``commit()`` without arguments commits these positions. Auto-commit commits the
positions as of the application's previous poll (see ``GroupMembership.mark_processed``).
"""

from __future__ import annotations

import dataclasses
import logging
import re
import uuid
from collections.abc import Iterable, Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Unpack, cast

import anyio
import anyio.lowlevel

from aiokafka_ng.cluster import ClientRuntime, ClientState, ClientStatus, Cluster, ClusterMetadata
from aiokafka_ng.cluster.topics import list_topics
from aiokafka_ng.consumer.config import ConsumerConfig, check_topic_args
from aiokafka_ng.consumer.errors import ConsumerStoppedError
from aiokafka_ng.consumer.fetcher import Fetcher
from aiokafka_ng.consumer.membership import GroupMembership
from aiokafka_ng.consumer.models import (
    CloseOptions,
    ConsumerRecord,
    GroupMembershipOperation,
    GroupMetadata,
    OffsetAndMetadata,
    OffsetAndTimestamp,
    TopicPartition,
)
from aiokafka_ng.consumer.offsets import EARLIEST, LATEST, OffsetsClient
from aiokafka_ng.consumer.parts import (
    ConsumerStatistics,
    build_parts,
    build_tracing,
    no_fetches,
    telemetry_engine,
)
from aiokafka_ng.consumer.state import SubscriptionMode, SubscriptionState
from aiokafka_ng.errors import IllegalStateError, KafkaTimeoutError
from aiokafka_ng.protocol.records import RecordBatch

if TYPE_CHECKING:
    from aiokafka_ng._settings import ConsumerSettings

__all__ = ["Consumer", "ConsumerStatistics"]

_RUNNING = ClientState.RUNNING  # a global read on the per-record path of iteration

log = logging.getLogger(__name__)


class Consumer:
    """A Kafka consumer. See the module docstring; config names follow the Java client."""

    def __init__(self, *topics: str, **config: Unpack[ConsumerSettings]) -> None:
        # The validators take more than the fields' types (the TypedDict's).
        self._initial_topics = check_topic_args(type(self).__name__, topics)
        self._config = ConsumerConfig(**cast("dict[str, Any]", config))
        self._subs = SubscriptionState(self._on_subscription_change)
        self._runtime = ClientRuntime(
            "consumer",
            client_id=self._config.client_id,
            bootstrap_servers=self._config.bootstrap_servers,
            started_twice="a consumer can be started only once",
            on_failure=self._task_failed,
        )
        self._fetcher: Fetcher | None = None
        self._group: GroupMembership | None = None
        self._offsets: OffsetsClient | None = None
        #: Spans of records handed out (aiokafka_ng.tracing), or None: a check per record.
        self._tracing = build_tracing(self._config)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any], *topics: str) -> Consumer:
        """Build from Kafka-style properties (``{"group.id": "g", ...}``)."""
        config: ConsumerConfig = ConsumerConfig.from_properties(properties)
        return cls(*topics, **{k: getattr(config, k) for k in config.model_fields_set})

    @property
    def config(self) -> ConsumerConfig:
        return self._config

    @property
    def _api_timeout_s(self) -> float:
        return self._config.default_api_timeout_ms / 1000

    @property
    def _cluster(self) -> Cluster | None:
        """The cluster while running, else None."""
        return self._runtime.open_cluster

    def __repr__(self) -> str:
        return f"Consumer(group_id={self._config.group_id!r}, {self._runtime.state.value})"

    # ------------------------------------------------------------------ lifecycle

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def start(self) -> None:
        """Connect and start the background tasks (``async with`` does this). Once only:
        ``IllegalStateError`` on a started or closed consumer.

        ``start()`` and ``close()`` may be called from different tasks.
        """
        c = self._config
        cluster_config = dataclasses.replace(
            c.cluster_config(),
            allow_auto_topic_creation=c.allow_auto_create_topics,
            role="consumer",
        )
        self._runtime.check_new()  # before the parts are made
        cluster = Cluster(cluster_config)
        self._offsets, self._fetcher, self._group = build_parts(c, cluster, self._subs)

        async def open_(cluster: Cluster, stack: AsyncExitStack) -> None:
            # Run by the runtime's host task, in which the cluster was entered.
            assert self._fetcher is not None
            await self._runtime.start_task(self._fetcher.run)
            if self._group is not None:
                await self._runtime.start_task(self._group.run)
            else:
                cluster.add_listener(self._assign_from_metadata)
            if c.enable_metrics_push:
                self._runtime.push_metrics(
                    telemetry_engine(c, self.statistics),
                    request_timeout=c.request_timeout_ms / 1000,
                )

        await self._runtime.start(cluster, open_)
        if self._initial_topics:
            self.subscribe(self._initial_topics)

    async def close(
        self,
        timeout: float | CloseOptions | None = None,  # noqa: ASYNC109 (public API)
        *,
        group_membership_operation: GroupMembershipOperation | str | None = None,
    ) -> None:
        """Commit (auto-commit), leave the group, stop the tasks, close the connections.

        Committing and leaving take at most ``timeout`` seconds (default
        ``close_timeout_ms``): an unreachable coordinator must not hold an application's
        shutdown; then the rest is stopped anyway. Idempotent; closing a consumer that was
        never started just marks it closed. ``stop()`` is the same method (aiokafka's name).

        ``group_membership_operation`` (KIP-1092, :class:`GroupMembershipOperation`):
        ``DEFAULT`` leaves the group unless the member is static, ``LEAVE_GROUP`` leaves
        (static members too), ``REMAIN_IN_GROUP`` stays until the session times out (no
        rebalance at the close). Java's form,
        ``close(CloseOptions(group_membership_operation=..., timeout=...))``, is accepted
        too.
        """
        options = _close_options(timeout, group_membership_operation)  # checked when unused too
        timeout = options.timeout
        if not self._runtime.begin_close():
            return
        if self._fetcher is not None:
            self._fetcher.wake()  # waiting polls wake up and raise ConsumerStoppedError
        limit = self._config.close_timeout_ms / 1000 if timeout is None else timeout
        deadline = anyio.current_time() + limit
        try:
            if self._group is not None:
                # Shielded (a cancelled owner still leaves the group cleanly), but bounded:
                # an unreachable coordinator must not hold the shutdown forever.
                with anyio.move_on_after(limit, shield=True) as scope:
                    await self._group.close(options.operation)
                if scope.cancelled_caught:
                    log.warning(
                        "consumer %s: group %s not left cleanly within %g s (%s);"
                        " its final commit may be lost",
                        self._config.client_id, self._config.group_id, limit,
                        "close_timeout_ms" if timeout is None else "close's timeout",
                    )  # fmt: skip
            # KIP-714's terminating push, after the final commit, in what close has left.
            await self._runtime.stop_metrics(max(0.0, deadline - anyio.current_time()))
        finally:
            # The host leaves the task group (cancelling its tasks) and the cluster.
            await self._runtime.finish_close()

    #: aiokafka's name for :meth:`close` (same method, same ``timeout``).
    stop = close

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until a broker answered (the consumer starts without the cluster). For
        apps that want to fail fast: ``KafkaTimeoutError`` naming the bootstrap servers."""
        if self._cluster is None:
            raise IllegalStateError("the consumer is not running")
        await self._cluster.wait_ready(timeout)

    def status(self) -> ClientStatus:
        """Health at a glance, without waiting (see :class:`ClientStatus`): ready only
        while running, connected and no background task has failed."""
        return self._runtime.status()

    def _task_failed(self, exc: Exception) -> None:
        """A background task failed (the runtime's ``on_failure``): the consumer stops."""
        if self._fetcher is not None:
            self._fetcher.wake()  # waiting polls re-check and raise

    def _running(self) -> tuple[Cluster, Fetcher, OffsetsClient]:
        cluster = self._cluster
        if cluster is None:
            raise ConsumerStoppedError("the consumer is not running (use `async with`)")
        failure = self._runtime.failure
        if failure is not None:
            err = IllegalStateError(
                f"the consumer stopped: a background task failed ({failure!r}); close it"
            )
            raise err from failure
        assert self._fetcher is not None and self._offsets is not None
        return cluster, self._fetcher, self._offsets

    def _on_subscription_change(self) -> None:
        if self._fetcher is not None:
            self._fetcher.wake()
        if self._cluster is not None and self._subs.topics:
            self._cluster.request_update(self._subs.topics)

    # ------------------------------------------------------------------ subscription

    def subscribe(
        self,
        topics: Iterable[str] = (),
        pattern: str | re.Pattern[str] | None = None,
        listener: Any = None,
    ) -> None:
        """Join the group for ``topics`` (or every topic matching ``pattern``).

        Without a ``group_id`` the consumer reads every partition of ``topics`` itself
        (no group, no commits), as aiokafka does.
        """
        cluster, _, _ = self._running()
        if isinstance(topics, str):
            topics = [topics]
        topics = list(topics)
        if self._group is None:
            # No group (aiokafka allows this): read every partition of the topics, kept up
            # to date from metadata by _assign_from_metadata.
            if pattern is not None or not topics:
                raise IllegalStateError("without a group_id, subscribe() needs topic names")
            self._subs.subscribe(topics, listener)
            self._assign_from_metadata(cluster.metadata)
            return
        if pattern is not None:
            if topics:
                raise IllegalStateError("give topics or a pattern, not both")
            compiled = re.compile(pattern) if isinstance(pattern, str) else pattern
            self._subs.subscribe_pattern(compiled, listener)
        else:
            if not topics:
                raise IllegalStateError("subscribe() needs topics or a pattern")
            self._subs.subscribe(topics, listener)
        self._group.request_rejoin()

    def _assign_from_metadata(self, snapshot: ClusterMetadata) -> None:
        if self._group is not None or self._subs.mode is not SubscriptionMode.TOPICS:
            return
        wanted: set[TopicPartition] = set()
        for topic in self._subs.topics:
            meta = snapshot.topics.get(topic)
            if meta is not None and meta.ready:
                wanted.update(TopicPartition(topic, p) for p in meta.partitions)
        if wanted != set(self._subs.assignment):
            self._subs.set_assignment(wanted, needs_committed=True)

    def subscription(self) -> frozenset[str]:
        return self._subs.topics

    def unsubscribe(self) -> None:
        """Drop the subscription or manual assignment.

        A group member revokes its partitions (listener called, auto-commit committed) and
        leaves the group, in the background.
        """
        if self._group is not None and self._subs.mode in (
            SubscriptionMode.TOPICS,
            SubscriptionMode.PATTERN,
        ):
            self._group.note_unsubscribe(set(self._subs.assignment), self._subs.listener)
        self._subs.unsubscribe()

    def assign(self, partitions: Iterable[TopicPartition]) -> None:
        """Read exactly these partitions, without group management."""
        self._running()
        self._subs.assign_manual([TopicPartition(*tp) for tp in partitions])

    def assignment(self) -> frozenset[TopicPartition]:
        return frozenset(self._subs.assignment)

    # ------------------------------------------------------------------ consuming

    def _poll_entry(self) -> None:
        if self._group is not None:
            if self._group.fatal is not None:
                raise self._group.fatal
            self._group.notify_poll()
            self._group.mark_processed()

    def _check_after_wait(self) -> None:
        self._running()
        if self._group is not None and self._group.fatal is not None:
            raise self._group.fatal

    async def _wait(self, fetcher: Fetcher) -> None:
        """Wait for data; the group counts the wait as polling (no poll timeout meanwhile)."""
        group = self._group
        if group is None:
            await fetcher.wait_for_data()
            return
        group.poll_started()
        try:
            await fetcher.wait_for_data()
        finally:
            group.poll_ended()

    async def getmany(
        self,
        *partitions: TopicPartition,
        timeout_ms: int = 0,
        max_records: int | None = None,
    ) -> dict[TopicPartition, list[ConsumerRecord[Any, Any]]]:
        """Records for each partition (of ``partitions``, or all assigned), waiting up to
        ``timeout_ms`` for some; at most ``max_records`` (default ``max_poll_records``)."""
        _, fetcher, _ = self._running()
        if fetcher.loop_due:  # see Fetcher.loop_due; before anything is taken
            fetcher.loop_due = False
            await anyio.lowlevel.checkpoint()
            self._check_after_wait()
        self._poll_entry()
        limit = max_records or self._config.max_poll_records
        only = frozenset(partitions) if partitions else None
        deadline = anyio.current_time() + timeout_ms / 1000
        while True:
            records = fetcher.drain(limit, only)
            now = anyio.current_time()
            if records or now >= deadline:
                if records and self._tracing is not None:
                    self._tracing.received_many(records.values())
                return records
            with anyio.move_on_after(deadline - now):
                await self._wait(fetcher)
            self._check_after_wait()

    async def _getmany_batches(
        self, tp: TopicPartition, timeout_ms: int, max_records: int
    ) -> tuple[list[RecordBatch], int]:
        """Internal, for ``aiokafka_ng.spark``'s columnar reader (not public API): whole raw
        record batches of ``tp`` instead of records, waiting up to ``timeout_ms`` for some.
        Returns ``(batches, position)``; records before ``position`` are not the caller's.
        The batches are what ``getmany`` would have decoded (control and, for
        read_committed, aborted ones skipped); the position moves past them."""
        _, fetcher, _ = self._running()
        self._poll_entry()
        deadline = anyio.current_time() + timeout_ms / 1000
        while True:
            batches, position = fetcher.drain_batches(tp, max_records)
            now = anyio.current_time()
            if batches or now >= deadline:
                return batches, position
            with anyio.move_on_after(deadline - now):
                await self._wait(fetcher)
            self._check_after_wait()

    async def getone(self, *partitions: TopicPartition) -> ConsumerRecord[Any, Any]:
        """The next record (of ``partitions``, or any assigned), waiting as long as needed."""
        _, fetcher, _ = self._running()
        self._poll_entry()
        only = frozenset(partitions) if partitions else None
        while True:
            record = fetcher.drain_one(only)
            if record is not None:
                if self._tracing is not None:
                    self._tracing.received(record)
                return record
            await self._wait(fetcher)
            self._check_after_wait()

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ConsumerRecord[Any, Any]:
        # Fast path, the same steps as getone() without its coroutine: a buffered record is
        # returned with no await at all (one coroutine per record instead of two).
        fetcher = self._fetcher
        if fetcher is not None and fetcher.loop_due:
            # The fetcher's tasks have work (see Fetcher.loop_due): one trip through the
            # event loop, before a record is taken (a cancellation here loses none).
            fetcher.loop_due = False
            await anyio.lowlevel.checkpoint()
        if fetcher is not None and self._runtime.state is _RUNNING:
            if self._group is not None:  # _poll_entry's work, without its call per record
                self._poll_entry()
            record = fetcher.drain_one(None)
            if record is not None:
                if self._tracing is not None:
                    self._tracing.received(record)
                return record
        try:
            return await self.getone()
        except ConsumerStoppedError:
            raise StopAsyncIteration from None

    # ------------------------------------------------------------------ positions

    def seek(self, partition: TopicPartition, offset: int) -> None:
        """Read ``partition`` from ``offset`` next."""
        if offset < 0:
            raise ValueError("offset must be >= 0")
        self._subs.state(partition).seek(offset)
        self._wake()

    async def seek_to_beginning(self, *partitions: TopicPartition) -> None:
        """Read from the earliest offset (all assigned partitions by default)."""
        for tp in partitions or tuple(self._subs.assignment):
            self._subs.state(tp).request_reset("earliest")
        self._wake()

    async def seek_to_end(self, *partitions: TopicPartition) -> None:
        """Read only records written from now on (all assigned partitions by default)."""
        for tp in partitions or tuple(self._subs.assignment):
            self._subs.state(tp).request_reset("latest")
        self._wake()

    async def seek_to_committed(self, *partitions: TopicPartition) -> None:
        for tp in partitions or tuple(self._subs.assignment):
            state = self._subs.state(tp)
            state.request_reset("earliest")
            state.reset = None
            state.needs_committed = True
        self._wake()

    def _wake(self) -> None:
        if self._fetcher is not None:
            self._fetcher.wake()

    async def position(self, partition: TopicPartition, *, timeout_ms: int | None = None) -> int:
        """The offset of the next record to be handed out (looked up if not known yet)."""
        _, fetcher, _ = self._running()
        state = self._subs.state(partition)
        limit = (timeout_ms if timeout_ms is not None else self._config.request_timeout_ms) / 1000
        with anyio.move_on_after(limit):
            while not state.has_position:
                if state.error is not None:
                    error, state.error = state.error, None
                    # A position still to validate (a log truncation with "none") is
                    # checked again, and the error raised again, until a seek.
                    self._wake()
                    raise error
                await fetcher.wait_for_data()
                self._running()
                state = self._subs.state(partition)
            assert state.position is not None
            return state.position
        raise KafkaTimeoutError(f"position of {partition.topic}-{partition.partition} unknown")

    def highwater(self, partition: TopicPartition) -> int | None:
        """The partition's high watermark from the last fetch response (None before one)."""
        return self._subs.state(partition).highwater

    def last_stable_offset(self, partition: TopicPartition) -> int | None:
        return self._subs.state(partition).last_stable_offset

    def last_poll_timestamp(self, partition: TopicPartition) -> int | None:
        """When :meth:`highwater` was last updated from a fetch answer for the partition
        (wall-clock ms since the epoch; None before one). It says the broker answered, not
        that records came."""
        return self._subs.state(partition).polled_at_ms

    def pause(self, *partitions: TopicPartition) -> None:
        """Stop fetching and returning records of ``partitions`` (buffered data is kept)."""
        for tp in partitions:
            self._subs.state(tp).paused = True
        self._wake()

    def resume(self, *partitions: TopicPartition) -> None:
        for tp in partitions:
            self._subs.state(tp).paused = False
        self._wake()

    def paused(self) -> frozenset[TopicPartition]:
        return frozenset(tp for tp, s in self._subs.assignment.items() if s.paused)

    # ------------------------------------------------------------------ offsets

    async def commit(
        self, offsets: Mapping[TopicPartition, int | OffsetAndMetadata] | None = None
    ) -> None:
        """Commit ``offsets`` (next offset to read per partition), or every position."""
        self._running()
        if self._group is None:
            raise IllegalStateError("commit() needs a group_id")
        if offsets is None:
            todo: dict[TopicPartition, OffsetAndMetadata] = {}
            for tp, s in self._subs.assignment.items():
                if s.has_position and s.position is not None:
                    todo[tp] = OffsetAndMetadata(s.position, "", s.leader_epoch)
        else:
            todo = {
                TopicPartition(*tp): om
                if isinstance(om, OffsetAndMetadata)
                else OffsetAndMetadata(om)
                for tp, om in offsets.items()
            }
        # Retriable errors are retried for default_api_timeout_ms, as Java's commitSync:
        # a coordinator that moves or is away for a few seconds is no failed commit.
        await self._group.commit(todo, timeout=self._api_timeout_s)

    async def committed(self, partition: TopicPartition) -> int | None:
        """The group's committed offset for ``partition`` (None when nothing committed)."""
        _, _, offsets = self._running()
        answer = (await offsets.fetch_committed([partition], timeout=self._api_timeout_s)).get(
            partition
        )
        return None if answer is None else answer.offset

    async def offsets_for_times(
        self, timestamps: Mapping[TopicPartition, int]
    ) -> dict[TopicPartition, OffsetAndTimestamp | None]:
        """Per partition, the first offset whose timestamp is >= the given one (ms)."""
        _, _, offsets = self._running()
        for ts in timestamps.values():
            if ts < 0:
                raise ValueError("timestamps must be >= 0")
        answers = await offsets.list_offsets(dict(timestamps), timeout=self._api_timeout_s)
        return {
            tp: None if a.offset < 0 else OffsetAndTimestamp(a.offset, a.timestamp)
            for tp, a in answers.items()
        }

    async def beginning_offsets(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        _, _, offsets = self._running()
        answers = await offsets.list_offsets(
            dict.fromkeys(partitions, EARLIEST), timeout=self._api_timeout_s
        )
        return {tp: a.offset for tp, a in answers.items()}

    async def end_offsets(self, partitions: Iterable[TopicPartition]) -> dict[TopicPartition, int]:
        """The offset the next written record will get (the high watermark)."""
        _, _, offsets = self._running()
        answers = await offsets.list_offsets(
            dict.fromkeys(partitions, LATEST), timeout=self._api_timeout_s
        )
        return {tp: a.offset for tp, a in answers.items()}

    # ------------------------------------------------------------------ metadata

    async def partitions_for_topic(self, topic: str) -> frozenset[int]:
        cluster, _, _ = self._running()
        meta = (await cluster.wait_for_topics([topic]))[topic]
        return frozenset(meta.partitions)

    async def topics(self) -> frozenset[str]:
        """Every topic in the cluster (internal ones excluded by default, as are topics the
        answer has an error for, such as one this client may not describe)."""
        cluster, _, _ = self._running()
        internal = not self._config.exclude_internal_topics
        return frozenset(await list_topics(cluster, include_internal=internal))

    async def client_instance_id(self, timeout: float = 0.0) -> uuid.UUID | None:  # noqa: ASYNC109
        """The id the brokers assigned this consumer for its metrics (KIP-714; Java's
        ``clientInstanceId``): operators find its pushed metrics under it. Waits up to
        ``timeout`` seconds for the first telemetry subscription; None if there is none yet
        (or the brokers have no telemetry plugin). ``IllegalStateError`` when
        ``enable_metrics_push`` is off or the consumer is not started."""
        return await self._runtime.client_instance_id(timeout)

    def statistics(self) -> ConsumerStatistics:
        """Counters for monitoring and tests, in any state (never blocks), as the producer's
        and the admin client's: before ``start()`` nothing fetched and no cluster, after
        ``close()`` the last counters."""
        c = self._config
        fetcher = self._fetcher
        g = self._group
        return self._runtime.statistics(
            ConsumerStatistics,
            fetcher=no_fetches(c.fetch_buffer_bytes) if fetcher is None else fetcher.statistics(),
            assignment=tuple(self._subs.assignment),
            group_state=None if g is None else g.state.value,
            generation=None if g is None else g.generation,
            member_id=None if g is None else g.member_id,
            rebalances=0 if g is None else g.rebalances,
        )

    def group_metadata(self) -> GroupMetadata:
        """The group, generation and member id to pass to
        ``Producer.send_offsets_to_transaction`` (KIP-447)."""
        self._running()
        group_id = self._config.group_id
        if group_id is None:
            raise IllegalStateError("group_metadata() needs a consumer with a group_id")
        g = self._group
        if g is None:
            return GroupMetadata(group_id, group_instance_id=self._config.group_instance_id)
        return GroupMetadata(group_id, g.generation, g.member_id, self._config.group_instance_id)

    async def wait_for_assignment(self, *, timeout_ms: int = 60000) -> frozenset[TopicPartition]:
        """Wait until the group has given this member an assignment (possibly empty)."""
        self._running()
        # A checkpoint even when the answer is known: a caller looping until the assignment
        # is non-empty must let the group's tasks (and its own deadline) run.
        await anyio.lowlevel.checkpoint()
        if self._group is None:
            return self.assignment()
        with anyio.move_on_after(timeout_ms / 1000):
            while not self._group.settled:
                if self._group.fatal is not None:
                    raise self._group.fatal
                await self._group.wait_joined()
            return self.assignment()
        raise KafkaTimeoutError("no assignment from the group in time")


def _close_options(
    timeout: float | CloseOptions | None, operation: GroupMembershipOperation | str | None
) -> CloseOptions:
    """``close()``'s arguments as one :class:`CloseOptions` (Java's form or keywords)."""
    if isinstance(timeout, CloseOptions):
        if operation is not None:
            raise TypeError("give group_membership_operation in the CloseOptions, not both")
        return timeout
    return CloseOptions(
        GroupMembershipOperation.DEFAULT if operation is None else operation, timeout
    )
