"""The share consumer (KIP-932, "queues for Kafka"): ``ShareConsumer``.

async with ShareConsumer("jobs", bootstrap_servers=..., group_id="workers") as consumer:
    async for record in consumer:          # implicit mode: accepted when the next batch
        ...                                # is asked for

Members of a share group read the same partitions together: the broker hands each member
records it *acquires* for it (under a time lock), and the member acknowledges each one as
ACCEPT (done), RELEASE (give it to someone again; its delivery count grows) or REJECT
(never again). A record whose lock expires unacknowledged is delivered again, possibly to
another member.

The lifecycle, the host task, the supervision of the heartbeat task, ``status()`` and the
common part of ``statistics()`` are the consumer's :class:`~aiokafka_ng.cluster.ClientRuntime`,
the same for every client; a heartbeat answer that retrying cannot fix stops it as a failed
task does.

Theory of operation. Two activities share the state below, on one event loop:

- The heartbeat task (``_heartbeat``) keeps the membership: ShareGroupHeartbeat to the group
  coordinator at the interval the broker asks for, with a member id this client makes (as
  Java does), epoch 0 to join, the broker's epoch after; the answer's assignment (topic ids
  and partitions) replaces ``_assignment`` when present. Fenced or unknown -> join again at
  epoch 0 with the same member id. ``stop()`` leaves with epoch -1. The member id, the
  epoch and the reading of each answer are the epoch heartbeat the KIP-848 consumer uses
  too (:class:`~aiokafka_ng.consumer.epoch_heartbeat.EpochHeartbeat`).
- ``poll()`` (and iteration, which uses it) does the fetching in the caller's task, through
  the :class:`~aiokafka_ng.consumer.share.fetcher.ShareFetcher` that ``start()`` builds
  (``_fetcher``): it owns the share sessions (one per broker, KIP-932's session epochs),
  acquisition, the pending acknowledgements and ``share_acquire_mode="record_limit"``; its
  module docstring tells how. It fetches the assigned partitions of subscribed topics
  (``_fetchable``) and hands each acquired record to ``_buffer``. A new assignment and
  the consumer stopping (or failing) wake a round that waits for leaders.

This module keeps what the application sees: ``_buffer`` (fetched, not handed out),
``_unacked`` (handed out, not acknowledged yet), ``_iter_batch`` (iteration's current
batch). Acknowledging a record hands its type to the fetcher, which sends it with the next
ShareFetch to its broker, or with ShareAcknowledge on ``commit()`` (which returns each
partition's outcome) and on ``stop()``. Every acknowledging request's outcome per partition
is queued (``_outcomes``) and handed to the acknowledgement callback in the caller's task
when poll/commit/unsubscribe/stop end.

``subscribe()`` changes ``_topics`` at once: fetches name only subscribed topics, so a
partition left behind is forgotten by its share session in the next ShareFetch, which also
carries its pending acknowledgements (the broker acknowledges, then forgets); records of it
fetched later are released. ``unsubscribe()`` leaves under ``_hb_lock``, the lock every
heartbeat exchange holds, so no heartbeat answered after the leave undoes it.
"""

from __future__ import annotations

import base64
import dataclasses
import logging
import math
import uuid
from collections import deque
from collections.abc import Callable, Iterable
from contextlib import AsyncExitStack
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Literal, Self

import anyio
from anyio.abc import TaskStatus

from aiokafka_ng.cluster import (
    ClientRuntime,
    ClientState,
    ClientStatistics,
    ClientStatus,
    Cluster,
    ClusterClient,
    Periodic,
)
from aiokafka_ng.cluster.telemetry import TelemetryEngine, connection_table, table_collector
from aiokafka_ng.cluster.topics import resolve_topic_ids
from aiokafka_ng.consumer.config import ConsumerConfig, check_topic_args
from aiokafka_ng.consumer.epoch_heartbeat import LEAVE_EPOCH, EpochHeartbeat
from aiokafka_ng.consumer.errors import ConsumerStoppedError
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.parts import build_tracing
from aiokafka_ng.consumer.share.fetcher import ShareFetcher
from aiokafka_ng.consumer.share.records import AcknowledgeType, ShareRecord
from aiokafka_ng.errors import ConfigError, IllegalStateError, KafkaError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages import share_group_heartbeat as sgh

__all__ = ["AcknowledgementCallback", "ShareConsumer", "ShareConsumerStatistics"]

#: ``callback({tp: offsets}, error)``: called once per partition and acknowledging request,
#: with the record offsets it carried and None (acknowledged) or the error.
AcknowledgementCallback = Callable[[dict[TopicPartition, frozenset[int]], KafkaError | None], None]

log = logging.getLogger("aiokafka_ng.consumer.share")


@dataclass(frozen=True, slots=True)
class ShareConsumerStatistics(ClientStatistics):
    """The share consumer's ``statistics()`` snapshot: the common part (state, client id,
    cluster; keyword-only), its membership and what it holds."""

    member_id: str
    member_epoch: int
    assignment: tuple[TopicPartition, ...]
    share_sessions: int  # brokers this member has a share session with
    buffered_records: int  # fetched, not handed out yet
    unacknowledged_records: int  # handed out, not acknowledged yet


class ShareConsumer:
    """A member of the share group ``group_id`` reading ``topics`` (none: it joins on
    :meth:`subscribe`).

    ``acknowledgement_mode``: ``"implicit"`` (the default, Java's too) accepts every record
    of a batch when the next batch is asked for (``poll``, iteration, ``commit``, ``stop``);
    ``"explicit"`` makes the application call :meth:`acknowledge` for each record before it
    asks for the next batch. Other settings are the consumer's connection settings
    (``bootstrap_servers``, ``client_id``, security, ``request_timeout_ms``, ...) plus
    ``max_poll_records``, ``fetch_max_wait_ms``, ``fetch_max_bytes`` and the deserializers.

    ``acknowledgement_callback({tp: offsets}, error)`` hears how each acknowledgement went
    (see :data:`AcknowledgementCallback` and docs/share-groups.md).

    ``share_acquire_mode`` (Java's ``share.acquire.mode``, KIP-1206): ``"batch_optimized"``
    (the default) lets the broker acquire whole record batches, so a poll may acquire more
    than ``max_poll_records`` (the rest wait in the consumer, their locks running);
    ``"record_limit"`` has the broker acquire at most ``max_poll_records`` records per poll,
    splitting batches, and fetches records from one broker at a time (in turn) so the limit
    holds across brokers. It needs ShareFetch v2 (Kafka 4.2+): against an older broker
    ``poll()`` raises ``UnsupportedVersionError``.

    Where a share group starts reading is the *group's* config ``share.auto.offset.reset``
    (``latest`` unless set; see docs/share-groups.md), not a client setting.
    """

    def __init__(
        self,
        *topics: str,
        group_id: str,
        acknowledgement_mode: Literal["implicit", "explicit"] = "implicit",
        acknowledgement_callback: AcknowledgementCallback | None = None,
        share_acquire_mode: Literal["batch_optimized", "record_limit"] | str = "batch_optimized",
        **config: Any,
    ) -> None:
        topics = check_topic_args(type(self).__name__, topics)
        bad: dict[str, str] = {}
        if acknowledgement_mode not in ("implicit", "explicit"):
            bad["acknowledgement_mode"] = f"'implicit' or 'explicit', not {acknowledgement_mode!r}"
        mode = share_acquire_mode.lower() if isinstance(share_acquire_mode, str) else None
        if mode not in ("batch_optimized", "record_limit"):
            bad["share_acquire_mode"] = (
                f"'batch_optimized' or 'record_limit', not {share_acquire_mode!r}"
            )
        if bad:
            raise ConfigError(bad)
        if not group_id:
            raise ConfigError({"group_id": "a share consumer needs a group_id"})
        self._config = ConsumerConfig(group_id=group_id, enable_auto_commit=False, **config)
        self._topics = sorted(set(topics))
        self._explicit = acknowledgement_mode == "explicit"
        self._record_limit = mode == "record_limit"
        self._tracing = build_tracing(self._config)  # aiokafka_ng.tracing's spans, or None
        # A member id of our own (KIP-1082, as Java makes it): 22 chars of URL-safe base64.
        self.member_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        self._assignment: frozenset[TopicPartition] = frozenset()
        self._assigned = anyio.Event()
        # The broker's latest assignment while a topic id of it is not resolved to a name
        # (it sends one only when it changes); the heartbeat task resolves it each round.
        self._target: sgh.Assignment | None = None
        # Held around each heartbeat exchange and the leave of unsubscribe(), so a heartbeat
        # answered after the leave cannot bring back the epoch or assignment it ended.
        self._hb_lock = anyio.Lock()
        self._callback = acknowledgement_callback
        self._outcomes: deque[tuple[TopicPartition, frozenset[int], KafkaError | None]] = deque()
        self._fetcher: ShareFetcher | None = None  # built by start(), with the cluster
        self._unacked: dict[tuple[TopicPartition, int], ShareRecord[Any, Any]] = {}
        self._buffer: deque[ShareRecord[Any, Any]] = deque()
        self._iter_batch: deque[ShareRecord[Any, Any]] = deque()
        self._runtime = ClientRuntime(
            "share consumer",
            client_id=self._config.client_id,
            bootstrap_servers=self._config.bootstrap_servers,
            started_twice="a share consumer can be started only once",
            on_failure=self._stopped,
        )
        self._backoff = ExponentialBackoff.retry(
            self._config.retry_backoff_ms, self._config.retry_backoff_max_ms
        )
        # Heartbeats: at the interval the broker asks for (1 s until it says), at once when
        # the subscription changes, after the shared backoff when one fails.
        self._heartbeats = Periodic(1.0, self._backoff)
        # The membership: this member id, the broker's epoch, the reading of each answer.
        self._beat = EpochHeartbeat(
            group_id,
            self.member_id,
            self._heartbeats,
            request_timeout=self._config.request_timeout_ms / 1000,
            on_fenced=self._fenced,
            what="ShareGroupHeartbeat",
            log=log,
        )

    @property
    def config(self) -> ConsumerConfig:
        """The settings (a consumer's; ``group_id`` set, auto-commit off), as the other
        clients' ``config``."""
        return self._config

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
        await self.stop()

    async def start(self) -> None:
        """Connect and join the group (``async with`` does this). Once only:
        ``IllegalStateError`` on a started or closed consumer. ``start()`` and ``stop()``
        may run in different tasks."""
        self._runtime.check_new()
        cluster = Cluster(
            dataclasses.replace(self._config.cluster_config(), allow_auto_topic_creation=False)
        )
        self._fetcher = ShareFetcher(
            cluster,
            self._config,
            member_id=self.member_id,
            record_limit=self._record_limit,
            backoff=self._backoff,
            wanted=self._fetchable,
            deliver=self._buffer.append,
            outcome=self._acked,
        )

        async def open_(cluster: Cluster, stack: AsyncExitStack) -> None:
            await self._runtime.start_task(self._heartbeat)
            c = self._config
            if c.enable_metrics_push:
                # KIP-714: what our statistics measure as Java's share consumer does is its
                # connections (Java pushes them under consumer.*, as a consumer's).
                engine = TelemetryEngine(
                    table_collector(self.statistics, connection_table("consumer")),
                    resource=(("group_id", c.group_id or ""),),
                )
                self._runtime.push_metrics(engine, request_timeout=c.request_timeout_ms / 1000)

        await self._runtime.start(cluster, open_)

    async def stop(self) -> None:
        """Acknowledge what is pending (implicit mode: accept the last batch), close the
        share sessions, leave the group; at most ``close_timeout_ms`` for all of that.
        Idempotent; stopping a consumer never started just marks it closed."""
        runtime = self._runtime
        if not runtime.begin_close():
            return
        self._assigned.set()  # a poll waiting for an assignment wakes up and raises
        if self._fetcher is not None:
            self._fetcher.wake()  # ... and one waiting for leaders
        try:
            if runtime.failure is None:
                limit = self._config.close_timeout_ms / 1000
                deadline = anyio.current_time() + limit
                with anyio.move_on_after(limit, shield=True) as scope:
                    self._settle_previous("close")
                    if self._fetcher is not None:
                        await self._fetcher.send_acknowledgements(closing=True)
                    await self._leave()
                if scope.cancelled_caught:
                    log.warning(
                        "share consumer %s: not closed cleanly in %g s", self.member_id, limit
                    )
                # KIP-714's terminating push, in what close has left.
                await runtime.stop_metrics(max(0.0, deadline - anyio.current_time()))
        finally:
            await runtime.finish_close()
        self._report_acks()

    close = stop

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until a broker answered (the consumer starts without the cluster), as the
        other clients' ``wait_ready``: ``KafkaTimeoutError`` naming the bootstrap servers."""
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise IllegalStateError("the share consumer is not running")
        await cluster.wait_ready(timeout)

    def status(self) -> ClientStatus:
        """Health at a glance, without waiting (see :class:`ClientStatus`): ready only
        while running, connected and not stopped by a failure."""
        return self._runtime.status()

    async def client_instance_id(self, timeout: float = 0.0) -> uuid.UUID | None:  # noqa: ASYNC109
        """The id the brokers assigned this consumer for its metrics (KIP-714; Java's
        ``clientInstanceId``), waiting up to ``timeout`` seconds for the first telemetry
        subscription; None if there is none yet. ``IllegalStateError`` when
        ``enable_metrics_push`` is off or the consumer is not started."""
        return await self._runtime.client_instance_id(timeout)

    def statistics(self) -> ShareConsumerStatistics:
        """Counters for monitoring and tests, in any state (never blocks), as the other
        clients': before ``start()`` no cluster, after ``stop()`` the last counters."""
        return self._runtime.statistics(
            ShareConsumerStatistics,
            member_id=self.member_id,
            member_epoch=self._beat.epoch,
            assignment=tuple(sorted(self._assignment)),
            share_sessions=0 if self._fetcher is None else self._fetcher.share_sessions,
            buffered_records=len(self._buffer),
            unacknowledged_records=len(self._unacked),
        )

    def assignment(self) -> frozenset[TopicPartition]:
        """The partitions the broker assigned to this member (shared with other members)."""
        return self._assignment

    async def wait_for_assignment(self, timeout: float | None = None) -> frozenset[TopicPartition]:  # noqa: ASYNC109
        """Wait until the broker assigned this member some partitions (a share group
        assigns every partition to every member, after its assignment interval)."""
        with anyio.fail_after(timeout):
            while not self._assignment:
                self._running()
                await self._assigned.wait()
        self._running()
        return self._assignment

    def _fetchable(self) -> frozenset[TopicPartition]:
        """The partitions to fetch: assigned, of a subscribed topic (the broker's next
        assignment drops those of topics just unsubscribed)."""
        return frozenset(tp for tp in self._assignment if tp.topic in self._topics)

    def _live_fetcher(self) -> ShareFetcher:
        self._running()
        assert self._fetcher is not None  # built by start()
        return self._fetcher

    def _acknowledge(self, tp: TopicPartition, offset: int, kind: AcknowledgeType) -> None:
        # Only records this consumer fetched are acknowledged: start() built the fetcher.
        assert self._fetcher is not None
        self._fetcher.acknowledge(tp, offset, kind)

    def _running(self) -> Cluster:
        failure = self._runtime.failure
        if failure is not None:
            raise IllegalStateError(f"the share consumer stopped: {failure!r}; close it") from (
                failure
            )
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise ConsumerStoppedError("the share consumer is not running (use `async with`)")
        return cluster

    # ------------------------------------------------------------------ subscription

    def subscription(self) -> frozenset[str]:
        """The topics this member is subscribed to."""
        return frozenset(self._topics)

    def subscribe(self, topics: Iterable[str]) -> None:
        """Read ``topics`` instead of the current ones (also after :meth:`unsubscribe`).

        The next heartbeat, sent at once, carries the new subscription. From now on no
        record of a topic left behind is returned: those fetched and not handed out yet
        are released to the group; those handed out keep their acknowledgement (implicit
        mode: accepted with the next batch; explicit: ``acknowledge()`` them as usual),
        which the next fetch from their broker carries as it drops the partition.

        Before ``start()`` it sets the topics to join with (as the constructor's do)."""
        names = sorted({topics} if isinstance(topics, str) else set(topics))
        if not names or not all(names):
            raise IllegalStateError("subscribe() needs topic names (unsubscribe() to stop)")
        if self._runtime.state is ClientState.NEW:
            self._topics = names
            return
        cluster = self._running()
        removed = set(self._topics) - set(names)
        self._topics = names
        if removed:
            self._release_buffered(lambda r: r.topic in removed)
        cluster.request_update(names)
        self._heartbeats.wake()

    async def unsubscribe(self) -> None:
        """Stop reading: send the pending acknowledgements (implicit mode: the last batch,
        accepted), close the share sessions (the broker releases what this member still
        holds) and leave the group. :meth:`subscribe` joins again."""
        fetcher = self._live_fetcher()
        self._settle_previous("close")
        self._topics = []
        self._release_buffered(lambda r: True)
        limit = self._config.request_timeout_ms / 1000
        try:
            with anyio.fail_after(limit):
                await fetcher.send_acknowledgements(closing=True)
                async with self._hb_lock:
                    await self._leave()
                    self._set_assignment(frozenset())
        finally:
            self._report_acks()

    def _release_buffered(self, which: Callable[[ShareRecord[Any, Any]], bool]) -> None:
        """Records fetched but not handed out yet that ``which`` picks go back to the group."""
        for queue in (self._buffer, self._iter_batch):
            kept = [r for r in queue if not which(r)]
            for r in queue:
                if which(r):
                    self._unacked.pop((r.topic_partition, r.offset), None)
                    self._acknowledge(r.topic_partition, r.offset, AcknowledgeType.RELEASE)
            queue.clear()
            queue.extend(kept)

    # ------------------------------------------------------------------ acknowledgement outcomes

    def _acked(self, tp: TopicPartition, offsets: frozenset[int], error: KafkaError | None) -> None:
        if error is not None:
            log.warning(
                "share consumer %s: acknowledging %s%s failed: %r",
                self.member_id, tp, sorted(offsets)[:10], error,
            )  # fmt: skip
        if self._callback is not None and offsets:
            self._outcomes.append((tp, offsets, error))

    def _report_acks(self) -> None:
        """Hand the acknowledgement outcomes to the callback, in the caller's task (not
        inside a fetch, whose other requests must not be cancelled by what it raises)."""
        while self._outcomes and self._callback is not None:
            tp, offsets, error = self._outcomes.popleft()
            self._callback({tp: offsets}, error)

    # ------------------------------------------------------------------ membership

    async def _heartbeat(
        self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        task_status.started()
        # An exception it does not handle is a bug of ours: the runtime's supervision stops
        # the consumer loudly, not the task group.
        await self._membership()

    async def _membership(self) -> None:
        cluster = self._runtime.cluster
        group = self._config.group_id
        assert cluster is not None and group is not None
        timer = self._heartbeats
        # Ends when closing: a heartbeat after the leave (epoch -1) would join again.
        while not self._runtime.closing:
            if not self._topics:
                # Unsubscribed (unsubscribe() left the group): idle until subscribe().
                self._target = None
                await timer.until_woken()
                continue
            async with self._hb_lock:
                if not self._topics:
                    continue
                req = sgh.ShareGroupHeartbeatRequest(
                    group_id=group,
                    member_id=self.member_id,
                    member_epoch=self._beat.epoch,
                    rack_id=self._config.client_rack or None,
                    subscribed_topic_names=list(self._topics),
                )
                try:
                    resp = await self._beat.beat(cluster, req)
                except KafkaError as exc:
                    self._runtime.fail(exc, f"share group {group}: heartbeat answered {exc!r}")
                    return
                if resp is not None:
                    if self._topics and req.subscribed_topic_names != self._topics:
                        # The subscription changed while this heartbeat was out: send the
                        # new one at once rather than after a whole interval.
                        timer.wake()
                    if resp.assignment is not None:
                        self._target = resp.assignment
                    if self._target is not None and await self._apply(cluster, self._target):
                        self._target = None
            await timer.wait()  # the interval, a wake-up, or the backoff after a failure

    async def _fenced(self, error: KafkaError) -> None:
        """The broker dropped this member (the epoch heartbeat's ``on_fenced``): it holds
        nothing until it has joined again."""
        self._target = None
        self._set_assignment(frozenset())

    async def _apply(self, cluster: ClusterClient, assignment: sgh.Assignment) -> bool:
        """Topic ids -> names, from metadata (the subscribed topics refreshed if an id is
        not known yet); True when every topic of ``assignment`` was named."""
        wanted = {t.topic_id for t in assignment.topic_partitions}
        names = await resolve_topic_ids(cluster, wanted, among=self._topics)
        self._set_assignment(
            frozenset(
                TopicPartition(names[t.topic_id], p)
                for t in assignment.topic_partitions
                if t.topic_id in names
                for p in t.partitions
            )
        )
        return wanted <= names.keys()

    def _set_assignment(self, tps: frozenset[TopicPartition]) -> None:
        if tps != self._assignment:
            log.debug("share consumer %s: assignment %s", self.member_id, sorted(tps))
        # Pending acknowledgements of partitions that left stay: the next ShareFetch to their
        # broker carries them as it forgets the partition (as Java does), or commit() sends
        # them while the share session still holds it.
        self._assignment = tps
        if self._fetcher is not None:
            self._fetcher.wake()  # a round waiting for leaders looks at the new partitions
        if tps:
            self._assigned.set()
        elif self._assigned.is_set():
            self._assigned = anyio.Event()

    def _stopped(self, exc: Exception) -> None:
        """The runtime's ``on_failure``: the consumer stopped; a poll waiting for an
        assignment wakes up and raises, as one waiting for leaders does."""
        self._assigned.set()
        if self._fetcher is not None:
            self._fetcher.wake()

    async def _leave(self) -> None:
        cluster = self._runtime.cluster
        group = self._config.group_id
        assert cluster is not None and group is not None
        if self._beat.epoch <= 0 and not self._assignment:
            return  # never joined (or fenced): nothing to leave
        req = sgh.ShareGroupHeartbeatRequest(
            group_id=group, member_id=self.member_id, member_epoch=LEAVE_EPOCH
        )
        await self._beat.leave(cluster, req)

    # ------------------------------------------------------------------ records

    async def poll(
        self, timeout_ms: int = 0, max_records: int | None = None
    ) -> list[ShareRecord[Any, Any]]:
        """The next batch of records (up to ``max_records``, default ``max_poll_records``),
        waiting up to ``timeout_ms`` for some; an empty list when none came.

        Implicit mode accepts the previous batch first; explicit mode raises
        ``IllegalStateError`` if a record of the previous batch is unacknowledged."""
        fetcher = self._live_fetcher()
        if not self._topics:
            raise IllegalStateError("the share consumer is not subscribed to any topic")
        self._settle_previous("poll")
        if fetcher.renewals_pending:
            # A ShareFetch that renews may not fetch (KIP-1222).
            await fetcher.send_acknowledgements()
        limit = max_records or self._config.max_poll_records
        deadline = anyio.current_time() + timeout_ms / 1000
        # No cancellation around a fetch: a ShareFetch abandoned in flight would leave its
        # session's epoch unknown. Each round waits at most what is left of the timeout.
        while not self._buffer and not fetcher.error_pending:
            remaining = deadline - anyio.current_time()
            if not self._assignment:
                if remaining <= 0:
                    break
                with anyio.move_on_after(remaining):
                    await self._assigned.wait()
                self._running()
                continue
            # Rounded up: with under 1 ms left, a wait of 0 is answered at once and the
            # loop would fetch again and again until the clock moved (never, on virtual time).
            wait_ms = max(0, min(self._config.fetch_max_wait_ms, math.ceil(remaining * 1000)))
            await fetcher.fetch(limit, wait_ms)
            self._running()
            if anyio.current_time() >= deadline:
                break
        error = fetcher.take_error()
        if error is not None:
            raise error
        if not self._buffer and fetcher.acknowledgements_pending:
            # Nothing came, but the previous batch's acknowledgements must not wait for
            # the next poll (their locks run out meanwhile).
            await fetcher.send_acknowledgements()
        self._report_acks()  # before handing out: if the callback raises, nothing is lost
        out: list[ShareRecord[Any, Any]] = []
        while self._buffer and len(out) < limit:
            record = self._buffer.popleft()
            self._unacked[(record.topic_partition, record.offset)] = record
            out.append(record)
        if out and self._tracing is not None:
            self._tracing.received_many((out,))
        return out

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> ShareRecord[Any, Any]:
        """One record at a time; the batch it came in is settled when it is used up."""
        while not self._iter_batch:
            try:
                batch = await self.poll(timeout_ms=self._config.fetch_max_wait_ms)
            except ConsumerStoppedError:
                raise StopAsyncIteration from None
            self._iter_batch.extend(batch)
        return self._iter_batch.popleft()

    def acknowledge(
        self, record: ShareRecord[Any, Any], type: AcknowledgeType = AcknowledgeType.ACCEPT
    ) -> None:
        """Explicit mode: acknowledge one record of the last batch. It is sent with the
        next fetch from its broker, or by ``commit()``.

        ``RENEW`` restarts the record's acquisition lock (Kafka 4.2+, KIP-1222) and leaves it
        unacknowledged: acknowledge it again when done. Renewals go out with ShareAcknowledge
        on ``commit()`` (or before the next fetch)."""
        if not self._explicit:
            raise IllegalStateError("acknowledge() needs acknowledgement_mode='explicit'")
        key = (record.topic_partition, record.offset)
        if self._unacked.get(key) is not record:
            raise IllegalStateError(
                f"{record.topic}[{record.partition}]@{record.offset} is not an unacknowledged"
                " record of this consumer's last batch"
            )
        kind = AcknowledgeType(type)
        if kind is not AcknowledgeType.RENEW:
            del self._unacked[key]
        self._acknowledge(record.topic_partition, record.offset, kind)

    async def commit(
        self, timeout_ms: int | None = None
    ) -> dict[TopicPartition, KafkaError | None]:
        """Send the pending acknowledgements now (implicit mode: the last batch's, as
        accepted) with ShareAcknowledge; each partition's outcome (None = acknowledged)."""
        fetcher = self._live_fetcher()
        self._settle_previous("commit")
        limit = (timeout_ms if timeout_ms is not None else self._config.request_timeout_ms) / 1000
        try:
            with anyio.fail_after(limit):
                return await fetcher.send_acknowledgements()
        finally:
            self._report_acks()

    def _settle_previous(self, why: Literal["poll", "commit", "close"]) -> None:
        """Before a new batch (``poll``), a commit or closing: implicit mode accepts the
        records handed out. Records iteration has not yielded yet were not handed out:
        a poll releases them (the application moved on), commit and close leave them (the
        broker releases what a closed session held)."""
        if not self._unacked:
            return
        waiting = {(r.topic_partition, r.offset) for r in self._iter_batch}
        if self._explicit and why == "poll" and len(self._unacked) > len(waiting):
            raise IllegalStateError(
                f"explicit acknowledgement mode: {len(self._unacked) - len(waiting)} record(s)"
                " of the last batch are not acknowledged"
            )
        for key in list(self._unacked):
            tp, offset = key
            if key in waiting:
                if why != "poll":
                    continue
                kind = AcknowledgeType.RELEASE
            elif self._explicit:
                continue  # closing with records unacknowledged: the broker releases them
            else:
                kind = AcknowledgeType.ACCEPT
            self._acknowledge(tp, offset, kind)
            del self._unacked[key]
        if why != "commit":
            self._unacked.clear()
            self._iter_batch.clear()
