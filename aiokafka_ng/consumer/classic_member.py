"""The classic group protocol's member, :class:`ClassicMember`: join, sync, heartbeat, leave.

It runs on the membership core (:class:`~.membership.GroupMembership`: the member task, the
poll timer, revoking and losing partitions, commits and auto-commit, closing), which the
consumer holds; this module is only what the classic protocol does.

Theory of operation
-------------------
:meth:`ClassicMember.life`, run by the core's member task, owns the member's life cycle::

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

from aiokafka_ng.cluster import ClusterMetadata, Periodic, Retry, RetryState
from aiokafka_ng.cluster.retry import retrying
from aiokafka_ng.cluster.topics import list_topics
from aiokafka_ng.consumer.assignors import (
    Assignor,
    MemberSubscription,
    assignor_by_name,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from aiokafka_ng.consumer.membership import MemberState
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.state import SubscriptionMode
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

    from aiokafka_ng.consumer.membership import GroupMembership

__all__ = ["ClassicMember"]

# Under the group's logger (membership.py's), which log filters select the group by.
log = logging.getLogger("aiokafka_ng.consumer.group.classic")

_PROTOCOL_TYPE = "consumer"


class ClassicMember:
    """One consumer's membership in its group with the classic protocol, on the core
    ``core`` (:class:`~.membership.GroupMembership`). See the module docstring."""

    def __init__(self, core: GroupMembership) -> None:
        self._core = core
        self._assignors: list[Assignor] = [assignor_by_name(a) for a in core.settings.assignors]
        self.cooperative = all(a.cooperative for a in self._assignors)
        self._assigned_counts: dict[str, int] = {}  # leader: partition counts it assigned
        self._lead_topics: frozenset[str] = frozenset()  # leader: every member's topics

    @property
    def settled(self) -> bool:
        """Stable, with no rejoin pending."""
        return self._core.state is MemberState.STABLE and not self._core.rejoin_requested

    # ------------------------------------------------------------------ main task

    def on_metadata(self, snapshot: ClusterMetadata) -> None:
        """Leader only: rebalance when a subscribed topic appeared or changed its size."""
        if self._core.state is not MemberState.STABLE or not self._lead_topics:
            return
        for topic in self._lead_topics:
            t = snapshot.topics.get(topic)
            if t is None or not t.ready:
                continue
            if len(t.partitions) != self._assigned_counts.get(topic):
                log.info(
                    "group %s: partitions of %r changed; rebalancing", self._core.group_id, topic
                )
                self._lead_topics = frozenset()
                self._core.request_rejoin()
                return

    async def life(self) -> None:
        # A pattern is matched against the cluster's topic list before the first join with
        # it (as Java does; a new pattern from subscribe() too), then every
        # metadata_max_age_ms. A failed listing is retried on the retry backoff; until one
        # succeeds the member does not join with nothing to ask for.
        matched: re.Pattern[str] | None = None
        pattern_timer = Periodic(self._core.settings.metadata_max_age_s, self._core.backoff)
        while True:
            if await self._core.standby():
                continue
            subs = self._core.subscription
            pattern = subs.pattern if subs.mode is SubscriptionMode.PATTERN else None
            if pattern is not None and (pattern is not matched or pattern_timer.is_due()):
                if await self._match_pattern():
                    matched = pattern
                    pattern_timer.succeeded()
                else:
                    pattern_timer.failed()
                    if pattern is not matched:
                        await self._core.sleep_until_woken(idle=True, until=pattern_timer.due)
                        continue
            if self._core.rejoin_requested or self._core.state is not MemberState.STABLE:
                await self._join_and_sync()
                continue
            await self._heartbeat_once()
            await self._core.sleep_until_woken()

    # ------------------------------------------------------------------ join / sync

    async def _join_and_sync(self) -> None:
        self._core.state = MemberState.JOINING
        self._core.rejoin_requested = False
        if self._core.generation < 0:
            # A first join can take a while with nothing else to show for it: brokers hold a
            # new group's first join open so more members can arrive (Kafka's
            # group.initial.rebalance.delay.ms, 3 s; Tansu waits half the session timeout).
            log.info(
                "group %s: joining (a broker may hold a new group's first join for a few "
                "seconds; Tansu for half of session_timeout_ms=%d)",
                self._core.group_id, self._core.settings.session_timeout_ms,
            )  # fmt: skip
        if not self.cooperative:
            await self._core.revoke(set(self._core.subscription.assignment), commit=True)

        async def attempt() -> list[TopicPartition]:
            while True:
                try:
                    return await self._join_once()
                except (RebalanceInProgressError, MemberIdRequiredError):
                    continue  # join again at once
                except (UnknownMemberIdError, IllegalGenerationError):
                    if self._core.instance_id is None:
                        self._core.member_id = ""
                    self._core.generation = -1
                    await self._core.lose()

        async def on_retry(exc: KafkaError) -> None:
            # A stale coordinator was forgotten already, by the route of the request that
            # failed (aiokafka_ng.cluster.retry); any other error keeps it.
            log.info("group %s: join failed (%r); retrying", self._core.group_id, exc)

        # Until it succeeds (no deadline: leaving or closing cancels it); FencedInstanceId
        # and any other non-retriable error end it.
        assignment = await retrying(
            attempt,
            RetryState(self._core.backoff),
            what=f"JoinGroup {self._core.group_id}",
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
            f"JoinGroup {self._core.group_id}: no assignor in common with the group's members; "
            f"this member offered {ours} (protocol type {_PROTOCOL_TYPE!r})"
        )
        try:
            with anyio.fail_after(self._core.settings.request_timeout_s):
                answer = await self._core.send(DescribeGroupsRequest(groups=[self._core.group_id]))
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
        owned = set(self._core.subscription.assignment) if self.cooperative else set()
        return encode_subscription(
            self._core.subscription.topics,
            owned,
            self._core.generation,
            self._core.settings.client_rack,
        )

    async def _join_once(self) -> list[TopicPartition]:
        self._lead_topics = frozenset()
        metadata = self._subscription_bytes()
        rebalance_ms = self._core.settings.rebalance_timeout_ms
        join = JoinGroupRequest(
            group_id=self._core.group_id,
            session_timeout_ms=self._core.settings.session_timeout_ms,
            rebalance_timeout_ms=rebalance_ms,
            member_id=self._core.member_id,
            group_instance_id=self._core.instance_id,
            protocol_type=_PROTOCOL_TYPE,
            protocols=[
                JoinGroupRequestProtocol(name=a.name, metadata=metadata) for a in self._assignors
            ],
        )
        # JoinGroup is answered only when the rebalance completes: up to the rebalance
        # timeout (plus the request timeout for the network).
        timeout = rebalance_ms / 1000 + self._core.settings.request_timeout_s
        response = await self._core.send(join, timeout=timeout)
        if response.error_code:
            if response.error_code == MemberIdRequiredError.errno:
                self._core.member_id = response.member_id  # KIP-394: join again with this id
            if response.error_code == InconsistentGroupProtocolError.errno:
                raise InconsistentGroupProtocolError(await self._no_common_assignor())
            raise error_for_code(response.error_code)(f"JoinGroup {self._core.group_id}")
        self._core.member_id = response.member_id
        self._core.generation = response.generation_id
        protocol = response.protocol_name or self._assignors[0].name
        assignments: list[SyncGroupRequestAssignment] = []
        if response.leader == self._core.member_id and not response.skip_assignment:
            assignments = await self._lead(protocol, response.members)
        sync = SyncGroupRequest(
            group_id=self._core.group_id,
            generation_id=self._core.generation,
            member_id=self._core.member_id,
            group_instance_id=self._core.instance_id,
            protocol_type=_PROTOCOL_TYPE,
            protocol_name=protocol,
            assignments=assignments,
        )
        answer = await self._core.send(sync, timeout=timeout)
        if answer.error_code:
            raise error_for_code(answer.error_code)(f"SyncGroup {self._core.group_id}")
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
                    "group %s: bad subscription of %s: %r", self._core.group_id, m.member_id, exc
                )
                members[m.member_id] = MemberSubscription(m.member_id, ())
        topics = sorted({t for m in members.values() for t in m.topics})
        partitions = await self._partition_counts(topics)
        self._assigned_counts = partitions
        self._lead_topics = frozenset(topics)
        result = assignor.assign(partitions, members)
        log.info("group %s: leader assigned %s", self._core.group_id, result)
        return [
            SyncGroupRequestAssignment(member_id=member, assignment=encode_assignment(parts))
            for member, parts in result.items()
        ]

    async def _partition_counts(self, topics: list[str]) -> dict[str, int]:
        if topics:
            try:
                # Briefly: the group waits for our SyncGroup. Topics missing now are assigned
                # once they appear (_on_metadata rebalances then).
                limit = min(self._core.settings.request_timeout_s, 5.0)
                await self._core.cluster.wait_for_topics(topics, timeout=limit)
            except KafkaError as exc:  # assign what exists; the rest waits for a rejoin
                log.warning("group %s: topics unavailable: %r", self._core.group_id, exc)
        snapshot = self._core.cluster.metadata
        counts: dict[str, int] = {}
        for t in topics:
            meta = snapshot.topics.get(t)
            if meta is not None and meta.ready:
                counts[t] = len(meta.partitions)
        return counts

    async def _install(self, assigned: list[TopicPartition]) -> None:
        new = set(assigned)
        owned = set(self._core.subscription.assignment)
        revoked = owned - new
        added = new - owned
        if revoked:
            await self._core.revoke(revoked, commit=True)
        self._core.subscription.set_assignment(new, needs_committed=True)
        self._core.became_stable()
        self._core.rebalances += 1
        log.info(
            "group %s: generation %s member %s assigned %s",
            self._core.group_id, self._core.generation, self._core.member_id, sorted(new),
        )  # fmt: skip
        await self._core.call_listener("on_partitions_assigned", added)
        self._core.assignment_settled()
        if revoked and self.cooperative:
            self._core.request_rejoin()  # KIP-429: let the next rebalance hand them over

    # ------------------------------------------------------------------ heartbeat

    async def _heartbeat_once(self) -> None:
        request = HeartbeatRequest(
            group_id=self._core.group_id,
            generation_id=self._core.generation,
            member_id=self._core.member_id,
            group_instance_id=self._core.instance_id,
        )
        # The next heartbeat: an interval on, or after the backoff when this one failed
        # retriably (the coordinator moved, is loading or is unreachable), as Java's; a
        # rejoin or an expulsion wakes the member task at once. A stale coordinator is the
        # route's to forget (aiokafka_ng.cluster.retry), not every retriable error's.
        try:
            response = await self._core.send(request, timeout=self._core.settings.request_timeout_s)
            if response.error_code:
                raise error_for_code(response.error_code)(f"Heartbeat {self._core.group_id}")
            self._core.timer.succeeded()
        except RebalanceInProgressError:
            self._core.request_rejoin()
        except (UnknownMemberIdError, IllegalGenerationError) as exc:
            log.info("group %s: member expelled (%r); rejoining", self._core.group_id, exc)
            if isinstance(exc, UnknownMemberIdError) and self._core.instance_id is None:
                self._core.member_id = ""
            self._core.generation = -1
            await self._core.lose()
            self._core.request_rejoin()
        except FencedInstanceIdError:
            raise
        except KafkaError as exc:
            if not exc.retriable:
                raise
            log.debug("group %s: heartbeat failed (%r)", self._core.group_id, exc)
            self._core.timer.failed(exc)

    # ------------------------------------------------------------------ pattern

    async def _match_pattern(self) -> bool:
        """List the cluster's topics and match the pattern; False when the listing failed."""
        internal = not self._core.settings.exclude_internal_topics
        try:
            names = await list_topics(self._core.cluster, include_internal=internal)
        except KafkaError as exc:
            log.debug("group %s: listing topics failed (%r)", self._core.group_id, exc)
            return False
        before = self._core.subscription.topics
        after = self._core.subscription.match_topics(names)
        if after != before:
            self._core.cluster.request_update(after)
            self._core.request_rejoin()
        return True

    # ------------------------------------------------------------------ commit / leave

    async def commit(
        self,
        offsets: dict[TopicPartition, OffsetAndMetadata],
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (the retries' budget, as OffsetsClient's)
    ) -> None:
        """Commit with this member's generation (CommitFailedError if stale), retrying
        retriable errors for ``timeout`` seconds (None: ``request_timeout_ms``)."""
        core = self._core
        await core.offsets.commit(
            offsets,
            generation=core.generation,
            member_id=core.member_id,
            group_instance_id=core.instance_id,
            timeout=timeout,
        )

    async def leave(self, *, reason: str, force: bool = False, permanent: bool = False) -> None:
        """LeaveGroup (dynamic members only, unless ``force`` or ``permanent``: a static
        member's LeaveGroup names its instance id); forgets the member id."""
        core = self._core
        if not core.member_id or (core.instance_id is not None and not (force or permanent)):
            return
        request = LeaveGroupRequest(
            group_id=core.group_id,
            member_id=core.member_id,
            members=[
                MemberIdentity(
                    member_id=core.member_id, group_instance_id=core.instance_id, reason=reason
                )
            ],
        )
        try:
            with anyio.fail_after(core.settings.request_timeout_s):
                response = await core.send(request)
            if response.error_code:
                log.info("group %s: LeaveGroup error %s", core.group_id, response.error_code)
        except (KafkaError, TimeoutError) as exc:
            log.info("group %s: LeaveGroup failed: %r", core.group_id, exc)
        if core.instance_id is None:
            core.member_id = ""
        core.generation = -1
        core.state = MemberState.UNJOINED
