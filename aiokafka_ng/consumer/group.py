"""Group membership with the classic protocol: join, sync, heartbeat, leave.

What the classic and the KIP-848 protocols share (the member task, the poll timer, revoking
and losing partitions, commits and auto-commit, closing) is :class:`~.membership.GroupMembership`.

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

*max_poll_interval_ms* (see :mod:`.membership`): the leave sent is LeaveGroup.

*Static membership* (KIP-345): with ``group_instance_id`` the member keeps its identity
across restarts; close() does not send LeaveGroup (the coordinator keeps its partitions until
``session_timeout_ms``), as in the Java client. KIP-1092's close options change that:
LEAVE_GROUP sends LeaveGroup naming the instance id, REMAIN_IN_GROUP keeps a dynamic member
in the group too (no LeaveGroup) until its session times out.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.cluster import ClusterClient, ClusterMetadata, Periodic, Retry, RetryState
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
from aiokafka_ng.consumer.membership import (
    ConsumerRebalanceListener,
    GroupMembership,
    GroupSettings,
    MemberState,
)
from aiokafka_ng.consumer.models import TopicPartition
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
from aiokafka_ng.protocol.messages.describe_groups import DescribeGroupsRequest
from aiokafka_ng.protocol.messages.heartbeat import HeartbeatRequest
from aiokafka_ng.protocol.messages.join_group import JoinGroupRequest, JoinGroupRequestProtocol
from aiokafka_ng.protocol.messages.leave_group import LeaveGroupRequest, MemberIdentity
from aiokafka_ng.protocol.messages.sync_group import SyncGroupRequest, SyncGroupRequestAssignment

if TYPE_CHECKING:
    import re

    from aiokafka_ng.consumer.offsets import OffsetsClient

# ConsumerRebalanceListener, GroupSettings and MemberState live in membership.py; they stay
# importable from here, where they were defined before.
__all__ = ["ConsumerRebalanceListener", "GroupCoordinator", "GroupSettings", "MemberState"]

log = logging.getLogger(__name__)

_PROTOCOL_TYPE = "consumer"


class GroupCoordinator(GroupMembership):
    """One consumer's membership in its group, classic protocol. See the module docstring."""

    def __init__(
        self,
        cluster: ClusterClient,
        settings: GroupSettings,
        subscription: SubscriptionState,
        offsets: OffsetsClient,
        *,
        on_assignment: Any = None,
    ) -> None:
        super().__init__(cluster, settings, subscription, offsets, on_assignment=on_assignment)
        self._assignors: list[Assignor] = [assignor_by_name(a) for a in settings.assignors]
        self.cooperative = all(a.cooperative for a in self._assignors)
        self._assigned_counts: dict[str, int] = {}  # leader: partition counts it assigned
        self._lead_topics: frozenset[str] = frozenset()  # leader: every member's topics

    def __repr__(self) -> str:
        return (
            f"GroupCoordinator({self._group_id!r}, state={self.state.value}, "
            f"member_id={self.member_id!r}, generation={self.generation})"
        )

    # ------------------------------------------------------------------ main task

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
        matched: re.Pattern[str] | None = None
        pattern_timer = Periodic(self._settings.metadata_max_age_s, self._backoff)
        while True:
            if self._subs.mode not in (SubscriptionMode.TOPICS, SubscriptionMode.PATTERN):
                if self._unsubscribed is not None:
                    await self._leave_after_unsubscribe()
                await self._sleep_until_woken(idle=True)
                continue
            pattern = self._subs.pattern if self._subs.mode is SubscriptionMode.PATTERN else None
            if pattern is not None and (pattern is not matched or pattern_timer.is_due()):
                if await self._match_pattern():
                    matched = pattern
                    pattern_timer.succeeded()
                else:
                    pattern_timer.failed()
                    if pattern is not matched:
                        await self._sleep_until_woken(idle=True, until=pattern_timer.due)
                        continue
            if self._poll_expired:
                await self._sleep_until_woken(idle=True)
                continue
            if self._rejoin or self.state is not MemberState.STABLE:
                await self._join_and_sync()
                continue
            await self._heartbeat_once()
            await self._sleep_until_woken()

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

    # ------------------------------------------------------------------ heartbeat

    async def _heartbeat_once(self) -> None:
        request = HeartbeatRequest(
            group_id=self._group_id,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self._instance_id,
        )
        # The next heartbeat: an interval on, or after the backoff when this one failed
        # retriably (the coordinator moved or is unreachable), as Java's; a rejoin or an
        # expulsion wakes the member task at once.
        try:
            response = await self._send(request, timeout=self._settings.request_timeout_s)
            if response.error_code:
                raise error_for_code(response.error_code)(f"Heartbeat {self._group_id}")
            self._timer.succeeded()
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
            self._timer.failed(exc)

    # ------------------------------------------------------------------ pattern

    async def _match_pattern(self) -> bool:
        """List the cluster's topics and match the pattern; False when the listing failed."""
        try:
            topics = await self._cluster.all_topics()
        except KafkaError as exc:
            log.debug("group %s: listing topics failed (%r)", self._group_id, exc)
            return False
        names = [
            name
            for name, t in topics.items()
            if not (self._settings.exclude_internal_topics and t.is_internal) and t.error is None
        ]
        before = self._subs.topics
        after = self._subs.match_topics(names)
        if after != before:
            self._cluster.request_update(after)
            self.request_rejoin()
        return True

    # ------------------------------------------------------------------ leave

    async def leave(
        self,
        *,
        reason: str = "the consumer is closing",
        force: bool = False,
        permanent: bool = False,
    ) -> None:
        """LeaveGroup (dynamic members only, unless ``force`` or ``permanent``: a static
        member's LeaveGroup names its instance id); forgets the member id."""
        if not self.member_id or (self._instance_id is not None and not (force or permanent)):
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
