"""Group membership (classic protocol): join, sync, heartbeat, leave, auto-commit.

Theory of operation
-------------------
:meth:`GroupCoordinator.run` is one task owning the member's life cycle::

    UNJOINED --join/sync--> STABLE --heartbeat error / poll timeout / new topics--> UNJOINED

*Joining.* JoinGroup names every configured assignor with this member's subscription
(topics, owned partitions and their generation, rack). Since KIP-394 a broker may answer a
first join with MEMBER_ID_REQUIRED and a member id: we join again at once with that id.
The leader (the coordinator picks it) decodes every member's subscription, loads metadata
for all their topics, runs the chosen assignor and sends the assignments in its SyncGroup;
followers send an empty SyncGroup. SyncGroup's answer is this member's assignment.

*Eager vs cooperative* (KIP-429). When every configured assignor is cooperative the group
runs the incremental protocol: partitions are kept across the rebalance, only those the new
assignment takes away are revoked (``on_partitions_revoked``), and if any were, the member
rejoins at once so the next rebalance can hand them to their new owner. Otherwise (eager,
the default with ``range`` first) everything is revoked before joining.

*Heartbeats* go every ``heartbeat_interval_ms`` while STABLE. REBALANCE_IN_PROGRESS means
rejoin; UNKNOWN_MEMBER_ID/ILLEGAL_GENERATION mean this member was expelled: its partitions are
*lost* (``on_partitions_lost``: they may already belong to someone else, so nothing is
committed) and it rejoins; coordinator errors forget the coordinator and find it again.

*max_poll_interval_ms.* The consumer calls :meth:`notify_poll` on every poll. If the
application does not poll in time, the heartbeat task sends LeaveGroup (so the group does not
wait on a stuck member), drops the partitions as lost and waits for the next poll to rejoin.

*Static membership* (KIP-345): with ``group_instance_id`` the member keeps its identity
across restarts; close() does not send LeaveGroup (the coordinator keeps its partitions until
``session_timeout_ms``), as in the Java client.

Rebalance listener callbacks may be plain or ``async`` methods; they run in this task, so the
assignment does not change under them.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import TaskStatus

from aiokafka_ng.cluster import Cluster, ClusterMetadata, Retry, RetryState
from aiokafka_ng.cluster.retry import retrying
from aiokafka_ng.consumer.assignors import (
    Assignor,
    MemberSubscription,
    assignor_by_name,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from aiokafka_ng.consumer.errors import CommitFailedError
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.state import SubscriptionMode, SubscriptionState
from aiokafka_ng.errors import (
    FencedInstanceIdError,
    IllegalGenerationError,
    InconsistentGroupProtocolError,
    KafkaError,
    MemberIdRequiredError,
    RebalanceInProgressError,
    UnknownMemberIdError,
    error_for_code,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.describe_groups import DescribeGroupsRequest
from aiokafka_ng.protocol.messages.heartbeat import HeartbeatRequest
from aiokafka_ng.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from aiokafka_ng.protocol.messages.leave_group import LeaveGroupRequest, MemberIdentity
from aiokafka_ng.protocol.messages.metadata import MetadataRequest
from aiokafka_ng.protocol.messages.sync_group import SyncGroupRequest, SyncGroupRequestAssignment

if TYPE_CHECKING:
    import re

    from aiokafka_ng.consumer.offsets import OffsetsClient

__all__ = ["ConsumerRebalanceListener", "GroupCoordinator", "GroupSettings", "MemberState"]

log = logging.getLogger(__name__)

_PROTOCOL_TYPE = "consumer"


class ConsumerRebalanceListener:
    """Override what you need; methods may be ``async``. Partitions come as sets."""

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> Any:
        """Before partitions are taken away (commit their offsets here if you manage them)."""

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> Any:
        """After a rebalance; ``assigned`` is what was added (all of it, with eager)."""

    def on_partitions_lost(self, lost: set[TopicPartition]) -> Any:
        """Partitions already owned by someone else (expelled member). Default: revoked."""
        return self.on_partitions_revoked(lost)


@dataclass(frozen=True, slots=True)
class GroupSettings:
    """Exactly what group membership reads of the consumer's settings; the consumer builds
    it once from its configuration (``ConsumerConfig.group_settings()``), whose defaults
    these are. Values sent to the broker (JoinGroup's timeouts) or logged under their Kafka
    names stay in ms; timers are in seconds.
    """

    group_id: str
    group_instance_id: str | None = None
    #: Assignor names or objects, in order of preference (``partition_assignment_strategy``).
    assignors: tuple[Any, ...] = ("range", "cooperative-sticky", "roundrobin")
    #: KIP-848's broker-side assignor (``group_remote_assignor``); None: the broker's default.
    remote_assignor: str | None = None
    client_rack: str | None = None  # None: no rack (``client_rack=""``)
    session_timeout_ms: int = 45000
    #: JoinGroup's (and KIP-848's) rebalance timeout: ``rebalance_timeout_ms`` or, unset,
    #: ``max_poll_interval_ms``.
    rebalance_timeout_ms: int = 300000
    max_poll_interval_ms: int = 300000
    heartbeat_interval_s: float = 3.0
    request_timeout_s: float = 30.0
    #: How often a pattern subscription looks for new matching topics.
    metadata_max_age_s: float = 300.0
    retry_backoff_ms: int = 100
    retry_backoff_max_ms: int = 1000
    enable_auto_commit: bool = True
    auto_commit_interval_s: float = 5.0
    exclude_internal_topics: bool = True


class MemberState(Enum):
    UNJOINED = "unjoined"
    JOINING = "joining"
    STABLE = "stable"
    CLOSED = "closed"


class GroupCoordinator:
    """One consumer's membership in its group. See the module docstring."""

    def __init__(
        self,
        cluster: Cluster,
        settings: GroupSettings,
        subscription: SubscriptionState,
        offsets: OffsetsClient,
        *,
        on_assignment: Any = None,
    ) -> None:
        self._cluster = cluster
        self._settings = settings
        self._group_id = settings.group_id
        self._instance_id = settings.group_instance_id
        self._subs = subscription
        self._offsets = offsets
        self._on_assignment = on_assignment
        self._assignors: list[Assignor] = [assignor_by_name(a) for a in settings.assignors]
        self.cooperative = all(a.cooperative for a in self._assignors)
        self._backoff = ExponentialBackoff.retry(
            settings.retry_backoff_ms, settings.retry_backoff_max_ms
        )
        self.member_id = ""
        self.generation = -1
        self.state = MemberState.UNJOINED
        self._rejoin = True
        self._wakeup = anyio.Event()
        self._last_poll = anyio.current_time()
        self._poll_expired = False
        self._joined = anyio.Event()  # set after each successful join (tests, position waits)
        self.fatal: KafkaError | None = None
        self.rebalances = 0
        self._last_committed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._processed: dict[TopicPartition, OffsetAndMetadata] = {}
        self._run_scope = anyio.CancelScope()
        self._run_done = anyio.Event()
        self._started = False
        self._in_poll = 0
        self._unsubscribed: tuple[set[TopicPartition], Any] | None = None
        self._assigned_counts: dict[str, int] = {}  # leader: partition counts it assigned
        self._lead_topics: frozenset[str] = frozenset()  # leader: every member's topics

    def __repr__(self) -> str:
        return (
            f"GroupCoordinator({self._group_id!r}, state={self.state.value}, "
            f"member_id={self.member_id!r}, generation={self.generation})"
        )

    # ------------------------------------------------------------------ hooks

    def request_rejoin(self) -> None:
        self._rejoin = True
        self._wakeup.set()

    def notify_poll(self) -> None:
        self._last_poll = anyio.current_time()
        if self._poll_expired:
            self._poll_expired = False
            self.request_rejoin()

    @property
    def settled(self) -> bool:
        """Stable, with no rejoin pending."""
        return self.state is MemberState.STABLE and not self._rejoin

    async def wait_joined(self) -> None:
        await self._joined.wait()

    # ------------------------------------------------------------------ main task

    async def run(self, *, task_status: TaskStatus[None] = anyio.TASK_STATUS_IGNORED) -> None:
        self._started = True
        remove = self._cluster.add_listener(self._on_metadata)
        try:
            with self._run_scope:
                task_status.started()
                async with anyio.create_task_group() as tg:
                    if self._settings.enable_auto_commit:
                        tg.start_soon(self._auto_commit_loop)
                    try:
                        await self._life()
                    except KafkaError as exc:
                        log.error("group %s: fatal error %r", self._group_id, exc)
                        self.fatal = exc
                        self.state = MemberState.UNJOINED
                        self._joined.set()
                        if self._on_assignment is not None:
                            self._on_assignment()  # wakes a waiting poll, which raises it
                    tg.cancel_scope.cancel()
        finally:
            remove()
            self._run_done.set()

    def _on_metadata(self, snapshot: ClusterMetadata) -> None:
        """Leader only: rebalance when a subscribed topic appeared or changed its size."""
        if self.state is not MemberState.STABLE or not self._lead_topics:
            return
        for topic in self._lead_topics:
            t = snapshot.topics.get(topic)
            if t is None or not t.ready:
                continue
            if len(t.partitions) != self._assigned_counts.get(topic):
                log.info("group %s: partitions of %r changed; rebalancing", self._group_id, topic)
                self._lead_topics = frozenset()
                self.request_rejoin()
                return

    async def _life(self) -> None:
        # A pattern is matched against the cluster's topic list before the first join with
        # it (as Java does; a new pattern from subscribe() too), then every
        # metadata_max_age_ms. A failed listing is retried on the retry backoff; until one
        # succeeds the member does not join with nothing to ask for.
        pattern_check_at = 0.0
        matched: re.Pattern[str] | None = None
        pattern_retry = RetryState(self._backoff)
        while True:
            if self._subs.mode not in (SubscriptionMode.TOPICS, SubscriptionMode.PATTERN):
                if self._unsubscribed is not None:
                    await self._leave_after_unsubscribe()
                await self._sleep_until_woken(None)
                continue
            now = anyio.current_time()
            pattern = self._subs.pattern if self._subs.mode is SubscriptionMode.PATTERN else None
            if pattern is not None and (pattern is not matched or now >= pattern_check_at):
                if await self._match_pattern():
                    matched = pattern
                    pattern_retry.succeeded()
                    pattern_check_at = now + self._settings.metadata_max_age_s
                else:
                    pause = pattern_retry.failed()
                    pattern_check_at = pattern_retry.retry_at
                    if pattern is not matched:
                        await self._sleep_until_woken(pause)
                        continue
            if self._poll_expired:
                await self._sleep_until_woken(None)
                continue
            if self._rejoin or self.state is not MemberState.STABLE:
                await self._join_and_sync()
                continue
            await self._heartbeat_once()
            await self._sleep_until_woken(self._settings.heartbeat_interval_s)

    async def _sleep_until_woken(self, seconds: float | None) -> None:
        self._wakeup = anyio.Event()
        if self._rejoin and self.state is MemberState.STABLE:
            return
        poll_deadline = self._last_poll + self._settings.max_poll_interval_ms / 1000
        limit = seconds if seconds is not None else float("inf")
        watch = self.state is MemberState.STABLE and not self._in_poll
        if watch:
            limit = min(limit, max(0.0, poll_deadline - anyio.current_time()))
        with anyio.move_on_after(limit):
            await self._wakeup.wait()
        # A getmany() waiting for data is polling (as Java's poll() loop keeps resetting
        # its poll timer): only an application that does not call us at all times out.
        if (
            self.state is MemberState.STABLE
            and not self._in_poll
            and anyio.current_time() >= self._last_poll + self._settings.max_poll_interval_ms / 1000
        ):
            await self._poll_timeout()

    def poll_started(self) -> None:
        self._in_poll += 1
        self.notify_poll()

    def poll_ended(self) -> None:
        self._in_poll -= 1
        self._last_poll = anyio.current_time()

    def note_unsubscribe(self, assignment: set[TopicPartition], listener: Any) -> None:
        """Called before the subscription is dropped: revoke and leave in the group task."""
        self._unsubscribed = (assignment, listener)
        self._wakeup.set()

    async def _leave_after_unsubscribe(self) -> None:
        assert self._unsubscribed is not None
        assignment, listener = self._unsubscribed
        self._unsubscribed = None
        if self.state is MemberState.STABLE and assignment:
            if self._settings.enable_auto_commit:
                await self.commit_positions(assignment, swallow=True)
            await self._call("on_partitions_revoked", assignment, listener)
        self._forget(assignment)
        await self.leave(reason="the consumer unsubscribed")

    # ------------------------------------------------------------------ join / sync

    async def _join_and_sync(self) -> None:
        self.state = MemberState.JOINING
        self._rejoin = False
        if self.generation < 0:
            # A first join can take a while with nothing else to show for it: brokers hold a
            # new group's first join open so more members can arrive (Kafka's
            # group.initial.rebalance.delay.ms, 3 s; Tansu waits half the session timeout).
            log.info(
                "group %s: joining (a broker may hold a new group's first join for a few "
                "seconds; Tansu for half of session_timeout_ms=%d)",
                self._group_id, self._settings.session_timeout_ms,
            )  # fmt: skip
        if not self.cooperative:
            await self._revoke(set(self._subs.assignment), commit=True)

        async def attempt() -> list[TopicPartition]:
            while True:
                try:
                    return await self._join_once()
                except (RebalanceInProgressError, MemberIdRequiredError):
                    continue  # join again at once
                except (UnknownMemberIdError, IllegalGenerationError):
                    self.member_id = "" if self._instance_id is None else self.member_id
                    self.generation = -1
                    await self._lose()

        async def on_retry(exc: KafkaError) -> None:
            self._cluster.invalidate_coordinator(self._group_id)
            log.info("group %s: join failed (%r); retrying", self._group_id, exc)

        # Until it succeeds (no deadline: leaving or closing cancels it); FencedInstanceId
        # and any other non-retriable error end it.
        assignment = await retrying(
            attempt,
            RetryState(self._backoff),
            what=f"JoinGroup {self._group_id}",
            retry=Retry(fatal=(FencedInstanceIdError,)),
            on_retry=on_retry,
        )
        await self._install(assignment)

    async def _send(self, request: Any, *, timeout: float | None = None) -> Any:  # noqa: ASYNC109
        node = await self._cluster.coordinator(self._group_id)
        conn = await self._cluster.coordinator_connection(node)
        return await conn.send(request, version=conn.version_for(type(request)), timeout=timeout)

    async def _no_common_assignor(self) -> str:
        """INCONSISTENT_GROUP_PROTOCOL's message: what this member offered and, as far as
        DescribeGroups tells, what the group's members use. The error code alone names
        neither side, and the fix is to make the lists meet (a rolling migration from
        aiokafka, whose only default is roundrobin, is the usual way to get here)."""
        ours = [a.name for a in self._assignors]
        text = (
            f"JoinGroup {self._group_id}: no assignor in common with the group's members; "
            f"this member offered {ours} (protocol type {_PROTOCOL_TYPE!r})"
        )
        try:
            with anyio.fail_after(self._settings.request_timeout_s):
                answer = await self._send(DescribeGroupsRequest(groups=[self._group_id]))
            group = answer.groups[0]
        except (KafkaError, OSError, TimeoutError, IndexError):
            return text + "; the group's own could not be described"
        if group.error_code or not group.protocol_data:
            # Rebalancing, or a broker that leaves it out (Tansu's DescribeGroups does).
            return text + (
                f"; the group ({group.group_state or 'state unknown'}, "
                f"{len(group.members)} members) does not say which assignor its members use"
            )
        return text + (
            f"; the group's {len(group.members)} members use {group.protocol_data!r} "
            f"(protocol type {group.protocol_type!r}): add it to partition_assignment_strategy "
            "or have them offer one of this member's"
        )

    def _subscription_bytes(self) -> bytes:
        owned = set(self._subs.assignment) if self.cooperative else set()
        return encode_subscription(
            self._subs.topics,
            owned,
            self.generation,
            self._settings.client_rack,
        )

    async def _join_once(self) -> list[TopicPartition]:
        self._lead_topics = frozenset()
        metadata = self._subscription_bytes()
        rebalance_ms = self._settings.rebalance_timeout_ms
        join = JoinGroupRequest(
            group_id=self._group_id,
            session_timeout_ms=self._settings.session_timeout_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=self.member_id,
            group_instance_id=self._instance_id,
            protocol_type=_PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequestProtocol(name=a.name, metadata=metadata) for a in self._assignors
            ],
        )
        # JoinGroup is answered only when the rebalance completes: up to the rebalance
        # timeout (plus the request timeout for the network).
        timeout = rebalance_ms / 1000 + self._settings.request_timeout_s
        response = await self._send(join, timeout=timeout)
        if response.error_code:
            if response.error_code == MemberIdRequiredError.errno:
                self.member_id = response.member_id  # KIP-394: join again with this id
            if response.error_code == InconsistentGroupProtocolError.errno:
                raise InconsistentGroupProtocolError(await self._no_common_assignor())
            raise error_for_code(response.error_code)(f"JoinGroup {self._group_id}")
        self.member_id = response.member_id
        self.generation = response.generation_id
        protocol = response.protocol_name or self._assignors[0].name
        assignments: list[SyncGroupRequestAssignment] = []
        if response.leader == self.member_id and not response.skip_assignment:
            assignments = await self._lead(protocol, response.members)
        sync = SyncGroupRequest(
            group_id=self._group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self._instance_id,
            protocol_type=_PROTOCOL_TYPE,
            protocol_name=protocol,
            assignments=assignments,
        )
        answer = await self._send(sync, timeout=timeout)
        if answer.error_code:
            raise error_for_code(answer.error_code)(f"SyncGroup {self._group_id}")
        return decode_assignment(answer.assignment)

    async def _lead(
        self, protocol: str, raw_members: list[Any]
    ) -> list[SyncGroupRequestAssignment]:
        assignor = next((a for a in self._assignors if a.name == protocol), None)
        if assignor is None:
            raise KafkaError(f"the group chose assignor {protocol!r}, which is not configured")
        members: dict[str, MemberSubscription] = {}
        for m in raw_members:
            try:
                members[m.member_id] = decode_subscription(
                    m.member_id, m.metadata, m.group_instance_id
                )
            except (KafkaError, ValueError) as exc:
                log.warning(
                    "group %s: bad subscription of %s: %r", self._group_id, m.member_id, exc
                )
                members[m.member_id] = MemberSubscription(m.member_id, ())
        topics = sorted({t for m in members.values() for t in m.topics})
        partitions = await self._partition_counts(topics)
        self._assigned_counts = partitions
        self._lead_topics = frozenset(topics)
        result = assignor.assign(partitions, members)
        log.info("group %s: leader assigned %s", self._group_id, result)
        return [
            SyncGroupRequestAssignment(member_id=member, assignment=encode_assignment(parts))
            for member, parts in result.items()
        ]

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        if topics:
            try:
                # Briefly: the group waits for our SyncGroup. Topics missing now are assigned
                # once they appear (_on_metadata rebalances then).
                limit = min(self._settings.request_timeout_s, 5.0)
                await self._cluster.wait_for_topics(topics, timeout=limit)
            except KafkaError as exc:  # assign what exists; the rest waits for a rejoin
                log.warning("group %s: topics unavailable: %r", self._group_id, exc)
        snapshot = self._cluster.metadata
        counts: dict[str, int] = {}
        for t in topics:
            meta = snapshot.topics.get(t)
            if meta is not None and meta.ready:
                counts[t] = len(meta.partitions)
        return counts

    async def _install(self, assigned: list[TopicPartition]) -> None:
        new = set(assigned)
        owned = set(self._subs.assignment)
        revoked = owned - new
        added = new - owned
        if revoked:
            await self._revoke(revoked, commit=True)
        self._subs.set_assignment(new, needs_committed=True)
        self.state = MemberState.STABLE
        self.rebalances += 1
        self._last_poll = anyio.current_time()
        log.info(
            "group %s: generation %s member %s assigned %s",
            self._group_id, self.generation, self.member_id, sorted(new),
        )  # fmt: skip
        await self._call("on_partitions_assigned", added)
        if self._on_assignment is not None:
            self._on_assignment()
        self._joined.set()
        self._joined = anyio.Event()
        if revoked and self.cooperative:
            self.request_rejoin()  # KIP-429: let the next rebalance hand them over

    # ------------------------------------------------------------------ revoke / lose

    async def _revoke(self, partitions: set[TopicPartition], *, commit: bool) -> None:
        if not partitions:
            return
        if commit and self._settings.enable_auto_commit:
            await self.commit_positions(partitions, swallow=True)
        await self._call("on_partitions_revoked", partitions)
        self._forget(partitions)
        remaining = set(self._subs.assignment) - partitions
        self._subs.set_assignment(remaining, needs_committed=True)

    async def _lose(self) -> None:
        lost = set(self._subs.assignment)
        self.state = MemberState.UNJOINED
        if lost:
            self._forget(lost)
            await self._call("on_partitions_lost", lost)
            self._subs.set_assignment((), needs_committed=True)

    def _forget(self, partitions: Iterable[TopicPartition]) -> None:
        for tp in partitions:
            self._processed.pop(tp, None)
            self._last_committed.pop(tp, None)

    async def _call(
        self, method: str, partitions: set[TopicPartition], listener: Any = None
    ) -> None:
        listener = listener if listener is not None else self._subs.listener
        if listener is None:
            return
        fn = getattr(listener, method, None)
        if fn is None and method == "on_partitions_lost":
            fn = getattr(listener, "on_partitions_revoked", None)
        if fn is None:
            return
        try:
            result = fn(set(partitions))
            if inspect.isawaitable(result):
                await result
        except Exception:
            log.exception("rebalance listener %s.%s failed", type(listener).__name__, method)

    # ------------------------------------------------------------------ heartbeat

    async def _heartbeat_once(self) -> None:
        request = HeartbeatRequest(
            group_id=self._group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self._instance_id,
        )
        try:
            response = await self._send(request, timeout=self._settings.request_timeout_s)
            if response.error_code:
                raise error_for_code(response.error_code)(f"Heartbeat {self._group_id}")
        except RebalanceInProgressError:
            self.request_rejoin()
        except (UnknownMemberIdError, IllegalGenerationError) as exc:
            log.info("group %s: member expelled (%r); rejoining", self._group_id, exc)
            if isinstance(exc, UnknownMemberIdError) and self._instance_id is None:
                self.member_id = ""
            self.generation = -1
            await self._lose()
            self.request_rejoin()
        except FencedInstanceIdError:
            raise
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.debug("group %s: heartbeat failed (%r)", self._group_id, exc)
            self._cluster.invalidate_coordinator(self._group_id)

    async def _poll_timeout(self) -> None:
        log.warning(
            "group %s: no poll for max_poll_interval_ms=%s; leaving the group",
            self._group_id, self._settings.max_poll_interval_ms,
        )  # fmt: skip
        self._poll_expired = True
        await self.leave(reason="consumer poll timeout expired", force=True)
        await self._lose()

    # ------------------------------------------------------------------ pattern

    async def _match_pattern(self) -> bool:
        """List the cluster's topics and match the pattern; False when the listing failed."""
        try:
            response = await self._cluster.request_any(
                MetadataRequest(topics=None, allow_auto_topic_creation=False)
            )
        except KafkaError as exc:
            log.debug("group %s: listing topics failed (%r)", self._group_id, exc)
            return False
        names = [
            t.name
            for t in response.topics
            if t.name
            and not (self._settings.exclude_internal_topics and t.is_internal)
            and t.error_code == 0
        ]
        before = self._subs.topics
        after = self._subs.match_topics(names)
        if after != before:
            self._cluster.request_update(after)
            self.request_rejoin()
        return True

    # ------------------------------------------------------------------ commits / leave

    def mark_processed(self) -> None:
        """The application polled again: what it was given before counts as processed.

        Auto-commit (and commits on revocation) commit these offsets, not the live
        positions, so records handed out but still being worked on are never committed
        behind the application's back (the Java client's at-least-once rule).
        """
        processed: dict[TopicPartition, OffsetAndMetadata] = {}
        for tp, state in self._subs.assignment.items():
            if state.has_position and state.position is not None:
                processed[tp] = OffsetAndMetadata(state.position, "", state.leader_epoch)
        self._processed = processed

    def _positions(
        self, partitions: Iterable[TopicPartition]
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return {tp: self._processed[tp] for tp in partitions if tp in self._processed}

    async def commit(self, offsets: dict[TopicPartition, OffsetAndMetadata]) -> None:
        """Commit ``offsets`` with this member's generation (CommitFailedError if stale)."""
        if self.fatal is not None:
            raise self.fatal
        await self._offsets.commit(
            offsets,
            generation=self.generation,
            member_id=self.member_id,
            group_instance_id=self._instance_id,
        )

    async def commit_positions(
        self, partitions: Iterable[TopicPartition] | None = None, *, swallow: bool = False
    ) -> None:
        """Commit the current positions (all assigned partitions by default)."""
        offsets = self._positions(self._subs.assignment if partitions is None else partitions)
        offsets = {tp: om for tp, om in offsets.items() if self._last_committed.get(tp) != om}
        if not offsets:
            return
        try:
            await self.commit(offsets)
            self._last_committed.update(offsets)
        except (CommitFailedError, KafkaError) as exc:
            if not swallow:
                raise
            log.warning("group %s: auto-commit failed: %r", self._group_id, exc)

    async def _auto_commit_loop(self) -> None:
        interval = self._settings.auto_commit_interval_s
        while True:
            await anyio.sleep(interval)
            if self.state is MemberState.STABLE or self._subs.mode is SubscriptionMode.ASSIGNED:
                await self.commit_positions(swallow=True)

    async def leave(self, *, reason: str = "the consumer is closing", force: bool = False) -> None:
        """LeaveGroup (dynamic members only, unless ``force``); forgets the member id."""
        if not self.member_id or (self._instance_id is not None and not force):
            return
        request = LeaveGroupRequest(
            group_id=self._group_id,
            member_id=self.member_id,
            members=[
                MemberIdentity(
                    member_id=self.member_id, group_instance_id=self._instance_id, reason=reason
                )
            ],
        )
        try:
            with anyio.fail_after(self._settings.request_timeout_s):
                response = await self._send(request)
            if response.error_code:
                log.info("group %s: LeaveGroup error %s", self._group_id, response.error_code)
        except (KafkaError, TimeoutError) as exc:
            log.info("group %s: LeaveGroup failed: %r", self._group_id, exc)
        if self._instance_id is None:
            self.member_id = ""
        self.generation = -1
        self.state = MemberState.UNJOINED

    async def close(self) -> None:
        """Stop heartbeats and auto-commit, then commit, revoke, and leave the group."""
        self._run_scope.cancel()
        if self._started:
            await self._run_done.wait()
        manual = self._subs.mode is SubscriptionMode.ASSIGNED
        if self.state is MemberState.STABLE or manual:
            if self._settings.enable_auto_commit:
                self.mark_processed()  # closing: everything handed out was processed
                await self.commit_positions(swallow=True)
            if not manual:
                await self._call("on_partitions_revoked", set(self._subs.assignment))
        await self.leave()
        self.state = MemberState.CLOSED
