"""The fake cluster's group coordinator: classic groups, KIP-848 consumer groups, offsets.

Theory of operation
-------------------
One :class:`GroupCoordinator` serves every node of the fake. A request first checks that its
node coordinates the group (``NOT_COORDINATOR``, or ``COORDINATOR_NOT_AVAILABLE`` while the
group's ``__consumer_offsets`` partition has no leader); then it follows the rules of Kafka
4's ``GroupMetadataManager`` and ``OffsetMetadataManager`` wherever a client can tell.

**Classic groups** (JoinGroup, SyncGroup, Heartbeat, LeaveGroup; KIP-62, KIP-345, KIP-394)
go Empty -> PreparingRebalance -> CompletingRebalance -> Stable. A JoinGroup is parked until
the join phase completes: once every member has rejoined and no member id handed out with
``MEMBER_ID_REQUIRED`` (v4+) is still pending, or at the rebalance timeout (the largest of
the members'), which removes the dynamic members that did not rejoin. A group's first
rebalance waits ``group.initial.rebalance.delay.ms`` instead, extended by as much again
(up to the rebalance timeout) while new members keep arriving. The first member to join
leads; the protocol is the one most members prefer among those every member supports. A
SyncGroup is parked until the leader's SyncGroup brings the assignments; members that send
none within the rebalance timeout are removed. A member expires after its session timeout
without a heartbeat; one parked in a JoinGroup or SyncGroup counts as alive, except a new
member, whose parked join expires after 5 minutes (Kafka's
``group.classic.new.member.join.timeout``).

**Consumer groups** (ConsumerGroupHeartbeat; KIP-848) have a group epoch, bumped when a
member joins, leaves, is fenced or changes its subscription, or when a subscribed topic
appears or grows; the next heartbeat computes a new target assignment at that epoch. Each
member then converges on its target by the steps of Kafka's ``CurrentAssignmentBuilder``:
partitions it must give up are taken away first, while it keeps its epoch
(UNREVOKED_PARTITIONS), until a heartbeat no longer lists them among its owned partitions;
it then moves to the target epoch, and gets a partition only once no other member holds it
(UNRELEASED_PARTITIONS until then). A member is fenced when its session
(``group.consumer.session.timeout.ms``) passes without a heartbeat, or when it keeps
partitions to revoke past its rebalance timeout.

**Offsets** live in ``cluster.offsets``, shared with the transaction coordinator's
TxnOffsetCommit. Transactional offsets not yet committed are the transaction coordinator's:
the ``pending_txn_offsets`` callable given to the constructor (its ``pending_offsets``)
names them for a group, and an OffsetFetch with ``require_stable`` answers
``UNSTABLE_OFFSET_COMMIT`` for those partitions (KIP-447).

**Time** is ``anyio.current_time()``, virtual under trio's ``MockClock``. Timers are deadlines
in one heap and there is no background task: every request first fires the timers that are
due, in deadline order and each as of its own deadline (so what a timer sets off is computed
at the time it fired, not when someone looked), and a parked request sleeps until the
earliest deadline or until something changes, whichever comes first. What a timer changes is
only visible through a later request, or a parked one, and both fire it first: the answers
are those of a broker whose timers run on time.

Not modelled: classic-protocol members inside consumer groups and the online upgrade and
downgrade between the two (a JoinGroup to a non-empty consumer group is answered
``INCONSISTENT_GROUP_PROTOCOL``, a ConsumerGroupHeartbeat to a non-empty classic group
``GROUP_ID_NOT_FOUND``, as with ``group.consumer.migration.policy=disabled``); share and
streams groups; offset retention and expiry; ``group.max.size``; group configs per group;
client ids and hosts (members are described with ``""`` and ``/127.0.0.1``). The server-side
assignors are approximations: ``uniform`` is a sticky, balanced round robin (keeps what a
member had while it stays within one partition of the others, hands out the rest to the
members with the fewest), ``range`` gives each topic's members contiguous ranges in member
id order; both honour each member's subscription but not Kafka's exact choices or racks.
"""

from __future__ import annotations

import heapq
import itertools
import random
import re
from collections.abc import Callable, Collection, Hashable
from dataclasses import dataclass, field
from enum import Enum
from typing import ClassVar, Generic, TypeVar
from uuid import UUID

import anyio

from aiokafka_ng.protocol.messages.consumer_group_describe import (
    Assignment as DescribedAssignment,
)
from aiokafka_ng.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from aiokafka_ng.protocol.messages.consumer_group_describe import (
    DescribedGroup as DescribedConsumerGroup,
)
from aiokafka_ng.protocol.messages.consumer_group_describe import (
    Member as DescribedMember,
)
from aiokafka_ng.protocol.messages.consumer_group_describe import (
    TopicPartitions as DescribedTopicPartitions,
)
from aiokafka_ng.protocol.messages.consumer_group_heartbeat import (
    Assignment,
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from aiokafka_ng.protocol.messages.consumer_protocol import ConsumerProtocolSubscription
from aiokafka_ng.protocol.messages.delete_groups import (
    DeletableGroupResult,
    DeleteGroupsRequest,
    DeleteGroupsResponse,
)
from aiokafka_ng.protocol.messages.describe_groups import (
    DescribedGroup,
    DescribedGroupMember,
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiokafka_ng.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from aiokafka_ng.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from aiokafka_ng.protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
    MemberResponse,
)
from aiokafka_ng.protocol.messages.list_groups import (
    ListedGroup,
    ListGroupsRequest,
    ListGroupsResponse,
)
from aiokafka_ng.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from aiokafka_ng.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteResponse,
    OffsetDeleteResponsePartition,
    OffsetDeleteResponseTopic,
)
from aiokafka_ng.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
    OffsetFetchResponseGroup,
    OffsetFetchResponsePartition,
    OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic,
    OffsetFetchResponseTopics,
)
from aiokafka_ng.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing.fake import _codes as E
from aiokafka_ng.testing.fake._cluster import FakeCluster

__all__ = ["GroupCoordinator"]

T = TypeVar("T")

#: Topic id -> partitions: a KIP-848 member's assignment, as the protocol names topics.
Partitions = dict[UUID, set[int]]
#: Committed offsets of one group: (topic, partition) -> (offset, leader epoch, metadata).
GroupOffsets = dict[tuple[str, int], tuple[int, int, str | None]]

_UUID_ZERO = UUID(int=0)
LEAVE_GROUP_MEMBER_EPOCH = -1
LEAVE_GROUP_STATIC_MEMBER_EPOCH = -2
#: Kafka's ``offset.metadata.max.bytes``.
OFFSET_METADATA_MAX_BYTES = 4096
#: KIP-848 server assignors the fake offers; the first is the default, as in Kafka.
ASSIGNORS = ("uniform", "range")
#: ConsumerGroupDescribe v1's member type of a member using the consumer protocol.
MEMBER_TYPE_CONSUMER = 1
#: JoinGroup versions that make a new dynamic member join twice (KIP-394).
JOIN_REQUIRES_MEMBER_ID_VERSION = 4
#: OffsetCommit version from which a missing group is GROUP_ID_NOT_FOUND, not
#: ILLEGAL_GENERATION, and from which KIP-848 members may commit.
OFFSET_COMMIT_KIP848_VERSION = 9
#: ConsumerGroupHeartbeat version from which the member names itself (KIP-1082).
CLIENT_MEMBER_ID_VERSION = 1
_CLIENT_HOST = "/127.0.0.1"


# ---- timers -------------------------------------------------------------------------------


class _Timers:
    """Deadlines by key: scheduling a key again replaces its deadline, as Kafka's timer does."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, Hashable]] = []
        self._live: dict[Hashable, tuple[float, int, Callable[[], None]]] = {}
        self._seq = itertools.count()

    def schedule(self, key: Hashable, at: float, fire: Callable[[], None]) -> None:
        seq = next(self._seq)
        self._live[key] = (at, seq, fire)
        heapq.heappush(self._heap, (at, seq, key))

    def cancel(self, key: Hashable) -> None:
        self._live.pop(key, None)

    def cancel_group(self, group_id: str) -> None:
        """Cancel every timer of ``group_id`` (keys are ``(kind, group_id, ...)``)."""
        for key in [k for k in self._live if isinstance(k, tuple) and k[1] == group_id]:
            del self._live[key]

    def _drop_stale(self) -> None:
        heap = self._heap
        while heap:
            _, seq, key = heap[0]
            live = self._live.get(key)
            if live is not None and live[1] == seq:
                return
            heapq.heappop(heap)

    def next_deadline(self) -> float | None:
        self._drop_stale()
        return self._heap[0][0] if self._heap else None

    def pop_due(self, now: float) -> tuple[float, Callable[[], None]] | None:
        self._drop_stale()
        if not self._heap or self._heap[0][0] > now:
            return None
        at, _, key = heapq.heappop(self._heap)
        return at, self._live.pop(key)[2]


@dataclass(slots=True, frozen=True)
class _Join:
    """What a JoinGroup asks, as its version means it."""

    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int

    @classmethod
    def of(cls, version: int, req: JoinGroupRequest) -> _Join:
        # v0 has no rebalance timeout: Kafka uses the session timeout.
        rebalance = req.rebalance_timeout_ms if version >= 1 else req.session_timeout_ms
        return cls(
            member_id=req.member_id,
            instance_id=req.group_instance_id if version >= 5 else None,
            protocol_type=req.protocol_type,
            protocols=[(p.name, p.metadata) for p in req.protocols],
            session_timeout_ms=req.session_timeout_ms,
            rebalance_timeout_ms=rebalance,
        )

    def names(self) -> set[str]:
        return {name for name, _ in self.protocols}


class _Parked(Generic[T]):
    """A request parked until the group answers it (a JoinGroup or a SyncGroup)."""

    __slots__ = ("response",)

    def __init__(self) -> None:
        self.response: T | None = None


# ---- classic groups -----------------------------------------------------------------------


class ClassicState(Enum):
    EMPTY = "Empty"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"


_CAN_REBALANCE = (ClassicState.EMPTY, ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE)


@dataclass(slots=True, eq=False)
class ClassicMember:
    member_id: str
    instance_id: str | None
    protocol_type: str
    protocols: list[tuple[str, bytes]]
    session_timeout_ms: int
    rebalance_timeout_ms: int
    assignment: bytes = b""
    join: _Parked[JoinGroupResponse] | None = None
    sync: _Parked[SyncGroupResponse] | None = None
    #: Joined but not yet through a completed join phase: expires on the new-member timeout.
    is_new: bool = False

    def metadata(self, protocol: str) -> bytes:
        return next((m for name, m in self.protocols if name == protocol), b"")

    def vote(self, candidates: set[str]) -> str:
        return next(name for name, _ in self.protocols if name in candidates)

    def has_satisfied_heartbeat(self) -> bool:
        # Kafka's ClassicGroupMember.hasSatisfiedHeartbeat: a member parked in a rebalance
        # is alive, unless it is new (it may have given up and will join again).
        if self.is_new:
            return False
        return self.join is not None or self.sync is not None


class ClassicGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        self.state = ClassicState.EMPTY
        self.previous_state = ClassicState.EMPTY
        self.generation = 0
        self.protocol_type: str | None = None
        self.protocol_name: str | None = None
        self.leader: str | None = None
        self.members: dict[str, ClassicMember] = {}
        #: Member ids handed out with MEMBER_ID_REQUIRED, not yet joined with.
        self.pending_members: set[str] = set()
        self.static: dict[str, str] = {}
        #: Members of the current generation that have not sent SyncGroup yet.
        self.pending_sync: set[str] = set()
        #: A member joined during the initial delay, which extends it.
        self.new_member_added = False
        #: Topics the members subscribe to, from the consumer protocol's metadata.
        self.subscribed_topics: set[str] | None = set()

    def __repr__(self) -> str:
        return (
            f"<ClassicGroup {self.group_id!r} {self.state.value} gen={self.generation} "
            f"members={len(self.members)}>"
        )

    def transition(self, state: ClassicState) -> None:
        self.previous_state, self.state = self.state, state

    def is_empty(self) -> bool:
        return self.state is ClassicState.EMPTY

    def _support_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for m in self.members.values():
            for name in {n for n, _ in m.protocols}:
                counts[name] = counts.get(name, 0) + 1
        return counts

    def supports_protocols(self, protocol_type: str, names: set[str]) -> bool:
        if self.state is ClassicState.EMPTY:
            return bool(protocol_type) and bool(names)
        counts = self._support_counts()
        return self.protocol_type == protocol_type and any(
            counts.get(n, 0) == len(self.members) for n in names
        )

    def select_protocol(self) -> str:
        counts = self._support_counts()
        candidates = {n for n, c in counts.items() if c == len(self.members)}
        votes: dict[str, int] = {}
        for m in self.members.values():
            choice = m.vote(candidates)
            votes[choice] = votes.get(choice, 0) + 1
        # Most votes wins; Kafka leaves ties to hash order, the fake to the first voted.
        return max(votes, key=lambda n: votes[n])

    def add(self, member: ClassicMember) -> None:
        if member.instance_id is not None:
            self.static[member.instance_id] = member.member_id
        if not self.members:
            self.protocol_type = member.protocol_type
        if self.leader is None:
            self.leader = member.member_id
        self.members[member.member_id] = member
        self.pending_members.discard(member.member_id)

    def remove(self, member_id: str) -> None:
        member = self.members.pop(member_id, None)
        if member is not None and member.instance_id is not None:
            self.static.pop(member.instance_id, None)
        if self.leader == member_id:
            self.leader = next(iter(self.members), None)
        self.pending_members.discard(member_id)
        self.pending_sync.discard(member_id)

    def has_all_members_joined(self) -> bool:
        joined = sum(m.join is not None for m in self.members.values())
        return joined == len(self.members) and not self.pending_members

    def rebalance_timeout_ms(self) -> int:
        return max((m.rebalance_timeout_ms for m in self.members.values()), default=0)

    def validate_member(self, member_id: str, instance_id: str | None) -> int:
        if instance_id is not None:
            existing = self.static.get(instance_id)
            if existing is None:
                return E.UNKNOWN_MEMBER_ID
            if existing != member_id:
                return E.FENCED_INSTANCE_ID
        return E.NONE if member_id in self.members else E.UNKNOWN_MEMBER_ID

    def maybe_elect_new_joined_leader(self) -> bool:
        if self.leader is None:
            return False
        if self.members[self.leader].join is not None:
            return True
        for m in self.members.values():
            if m.join is not None:
                self.leader = m.member_id
                return True
        return False

    def join_members(self) -> list[JoinGroupResponseMember]:
        protocol = self.protocol_name or ""
        return [
            JoinGroupResponseMember(
                member_id=m.member_id,
                group_instance_id=m.instance_id,
                metadata=m.metadata(protocol),
            )
            for m in self.members.values()
        ]

    def compute_subscribed_topics(self) -> set[str] | None:
        """The topics the consumer-protocol members subscribe to (None: unknown)."""
        if not self.members:
            return set()
        if self.protocol_type != "consumer" or self.protocol_name is None:
            return None
        topics: set[str] = set()
        for m in self.members.values():
            data = m.metadata(self.protocol_name)
            try:
                version = int.from_bytes(data[:2], "big", signed=True)
                version = min(version, ConsumerProtocolSubscription.MAX_VERSION)
                topics.update(ConsumerProtocolSubscription.decode(data[2:], version).topics)
            except Exception:
                return None
        return topics

    def is_subscribed_to(self, topic: str) -> bool:
        if self.subscribed_topics is not None:
            return topic in self.subscribed_topics
        return self.protocol_type == "consumer"


# ---- consumer (KIP-848) groups ------------------------------------------------------------


class MemberState(Enum):
    STABLE = "stable"
    UNREVOKED_PARTITIONS = "unrevoked_partitions"
    UNRELEASED_PARTITIONS = "unreleased_partitions"


@dataclass(slots=True, eq=False)
class ConsumerMember:
    member_id: str
    instance_id: str | None = None
    rack_id: str | None = None
    rebalance_timeout_ms: int = -1
    server_assignor: str | None = None
    subscribed_names: list[str] = field(default_factory=list)
    subscribed_regex: str | None = None
    member_epoch: int = 0
    previous_epoch: int = 0
    state: MemberState = MemberState.STABLE
    assigned: Partitions = field(default_factory=dict)
    pending_revocation: Partitions = field(default_factory=dict)

    def is_reconciled_to(self, epoch: int) -> bool:
        return self.state is MemberState.STABLE and self.member_epoch == epoch


class ConsumerGroup:
    def __init__(self, group_id: str) -> None:
        self.group_id = group_id
        # A new group starts at epoch 1 with a target assignment at epoch 1 (Kafka 4.4's
        # ModernGroup and TargetAssignmentMetadata.INITIAL), so its first member's join
        # bumps the group to epoch 2 and is given member epoch 2, as Kafka 4.4 answered.
        self.group_epoch = 1
        self.assignment_epoch = 1
        self.members: dict[str, ConsumerMember] = {}
        self.target: dict[str, Partitions] = {}
        #: Subscribed topic -> (id, partitions): a change bumps the group epoch.
        self.subscription: dict[str, tuple[UUID, int]] = {}

    def __repr__(self) -> str:
        return (
            f"<ConsumerGroup {self.group_id!r} {self.state_name()} epoch={self.group_epoch} "
            f"members={len(self.members)}>"
        )

    def is_empty(self) -> bool:
        return not self.members

    def static_member(self, instance_id: str) -> ConsumerMember | None:
        return next((m for m in self.members.values() if m.instance_id == instance_id), None)

    def state_name(self) -> str:
        if not self.members:
            return "Empty"
        if self.group_epoch > self.assignment_epoch:
            return "Assigning"
        if any(not m.is_reconciled_to(self.assignment_epoch) for m in self.members.values()):
            return "Reconciling"
        return "Stable"

    def assignor(self) -> str:
        # Kafka's preferredServerAssignor: the one most members ask for, else the default.
        votes: dict[str, int] = {}
        for m in self.members.values():
            if m.server_assignor is not None:
                votes[m.server_assignor] = votes.get(m.server_assignor, 0) + 1
        return max(votes, key=lambda n: votes[n]) if votes else ASSIGNORS[0]

    def holders(self) -> dict[tuple[UUID, int], str]:
        """Who holds each partition (assigned or still to revoke): Kafka's partition epochs."""
        out: dict[tuple[UUID, int], str] = {}
        for m in self.members.values():
            for owned in (m.assigned, m.pending_revocation):
                for tid, parts in owned.items():
                    for p in parts:
                        out[(tid, p)] = m.member_id
        return out


Group = ClassicGroup | ConsumerGroup


def _none_pending(group_id: str) -> Collection[tuple[str, int]]:
    return ()


def _copy(partitions: Partitions) -> Partitions:
    return {tid: set(ps) for tid, ps in partitions.items() if ps}


def _overlaps(a: Partitions, owned: list[TopicPartitions] | None) -> bool:
    """Whether the member still owns any of ``a`` (unknown owned partitions: assume so)."""
    if owned is None:
        return True
    return any(p in a.get(tp.topic_id, ()) for tp in owned for p in tp.partitions)


def _is_subset(owned: list[TopicPartitions] | None, of: Partitions) -> bool:
    if owned is None:
        return False
    return all(p in of.get(tp.topic_id, ()) for tp in owned for p in tp.partitions)


def _to_topic_partitions(partitions: Partitions) -> list[TopicPartitions]:
    return [
        TopicPartitions(topic_id=tid, partitions=sorted(ps))
        for tid, ps in sorted(partitions.items(), key=lambda kv: str(kv[0]))
        if ps
    ]


def assign_uniform(
    subscriptions: dict[str, set[str]],
    topics: dict[str, int],
    previous: dict[str, set[tuple[str, int]]],
) -> dict[str, set[tuple[str, int]]]:
    """Sticky, balanced round robin (an approximation of Kafka's UniformAssignor).

    ``subscriptions``: member -> subscribed topics that exist; ``topics``: name -> partition
    count; ``previous``: the last target. A member keeps what it had while it still
    subscribes to it; the rest goes to the eligible member with the fewest partitions; then
    partitions move from the fullest members to eligible ones holding two or more fewer.
    """
    result: dict[str, set[tuple[str, int]]] = {m: set() for m in subscriptions}
    taken: set[tuple[str, int]] = set()
    for m in sorted(subscriptions):
        for t, p in sorted(previous.get(m, ())):
            if t in subscriptions[m] and p < topics.get(t, 0) and (t, p) not in taken:
                result[m].add((t, p))
                taken.add((t, p))
    for t in sorted(topics):
        eligible = [m for m in sorted(subscriptions) if t in subscriptions[m]]
        if not eligible:
            continue
        for p in range(topics[t]):
            if (t, p) not in taken:
                fewest = min(eligible, key=lambda m: (len(result[m]), m))
                result[fewest].add((t, p))
                taken.add((t, p))
    # Each move lowers the sum of squared counts, so this ends.
    moved = True
    while moved:
        moved = False
        for giver in sorted(result, key=lambda m: (-len(result[m]), m)):
            for t, p in sorted(result[giver], reverse=True):
                takers = [
                    m
                    for m in result
                    if m != giver
                    and t in subscriptions[m]
                    and len(result[m]) + 1 < len(result[giver])
                ]
                if takers:
                    taker = min(takers, key=lambda m: (len(result[m]), m))
                    result[giver].discard((t, p))
                    result[taker].add((t, p))
                    moved = True
                    break
            if moved:
                break
    return result


def assign_range(
    subscriptions: dict[str, set[str]], topics: dict[str, int]
) -> dict[str, set[tuple[str, int]]]:
    """Per topic, contiguous ranges to its subscribers in member id order (the first
    ``partitions % members`` get one more), as the classic RangeAssignor does."""
    result: dict[str, set[tuple[str, int]]] = {m: set() for m in subscriptions}
    for t in sorted(topics):
        members = sorted(m for m in subscriptions if t in subscriptions[m])
        if not members:
            continue
        share, extra = divmod(topics[t], len(members))
        start = 0
        for i, m in enumerate(members):
            n = share + (1 if i < extra else 0)
            result[m].update((t, p) for p in range(start, start + n))
            start += n
    return result


# ---- the coordinator ----------------------------------------------------------------------


class GroupCoordinator:
    """Answers the group and offset APIs for every node of a :class:`FakeCluster`.

    See the module docstring for what it models. Options (Kafka's broker settings):

    Args:
        initial_rebalance_delay_ms: ``group.initial.rebalance.delay.ms``. Kafka's default is
            3000; 0 here, as test configurations usually set it.
        min_session_timeout_ms / max_session_timeout_ms: ``group.min.session.timeout.ms``
            (6000) and ``group.max.session.timeout.ms`` (1800000): a JoinGroup outside them
            is answered ``INVALID_SESSION_TIMEOUT``.
        consumer_session_timeout_ms: ``group.consumer.session.timeout.ms`` (45000).
        consumer_heartbeat_interval_ms: ``group.consumer.heartbeat.interval.ms`` (5000).
        new_member_join_timeout_ms: ``group.classic.new.member.join.timeout`` (300000).
        pending_txn_offsets: group id -> the (topic, partition)s with a transactional
            offset commit not yet completed: the transaction coordinator's
            ``pending_offsets`` (default: none ever pending).
        seed: seeds the member ids the coordinator makes up, so that a run replays.
    """

    API_KEYS: ClassVar[frozenset[int]] = frozenset(
        {
            OffsetCommitRequest.API_KEY,
            OffsetFetchRequest.API_KEY,
            JoinGroupRequest.API_KEY,
            HeartbeatRequest.API_KEY,
            LeaveGroupRequest.API_KEY,
            SyncGroupRequest.API_KEY,
            DescribeGroupsRequest.API_KEY,
            ListGroupsRequest.API_KEY,
            DeleteGroupsRequest.API_KEY,
            OffsetDeleteRequest.API_KEY,
            ConsumerGroupHeartbeatRequest.API_KEY,
            ConsumerGroupDescribeRequest.API_KEY,
        }
    )

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        initial_rebalance_delay_ms: int = 0,
        min_session_timeout_ms: int = 6_000,
        max_session_timeout_ms: int = 1_800_000,
        consumer_session_timeout_ms: int = 45_000,
        consumer_heartbeat_interval_ms: int = 5_000,
        new_member_join_timeout_ms: int = 300_000,
        pending_txn_offsets: Callable[[str], Collection[tuple[str, int]]] | None = None,
        seed: int = 0,
    ) -> None:
        self.cluster = cluster
        self.initial_rebalance_delay_ms = initial_rebalance_delay_ms
        self.min_session_timeout_ms = min_session_timeout_ms
        self.max_session_timeout_ms = max_session_timeout_ms
        self.consumer_session_timeout_ms = consumer_session_timeout_ms
        self.consumer_heartbeat_interval_ms = consumer_heartbeat_interval_ms
        self.new_member_join_timeout_ms = new_member_join_timeout_ms
        self._pending_txn_offsets = pending_txn_offsets or _none_pending
        self._groups: dict[str, Group] = {}
        self._timers = _Timers()
        self._now = float("-inf")
        self._wake: anyio.Event | None = None
        self._rng = random.Random(seed)

    def __repr__(self) -> str:
        return f"<GroupCoordinator groups={len(self._groups)}>"

    # ---- dispatch -----------------------------------------------------------------------

    async def handle(self, node_id: int, version: int, request: ApiMessage) -> ApiMessage:
        """Answer ``request`` (API version ``version``) as node ``node_id``; a JoinGroup or
        SyncGroup returns only once its rebalance step completes."""
        self._advance(anyio.current_time())
        if isinstance(request, JoinGroupRequest):
            return await self._join_group(node_id, version, request)
        if isinstance(request, SyncGroupRequest):
            return await self._sync_group(node_id, version, request)
        if isinstance(request, HeartbeatRequest):
            return self._heartbeat(node_id, request)
        if isinstance(request, LeaveGroupRequest):
            return self._leave_group(node_id, version, request)
        if isinstance(request, OffsetCommitRequest):
            return self._offset_commit(node_id, version, request)
        if isinstance(request, OffsetFetchRequest):
            return self._offset_fetch(node_id, version, request)
        if isinstance(request, ConsumerGroupHeartbeatRequest):
            return self._consumer_heartbeat(node_id, version, request)
        if isinstance(request, DescribeGroupsRequest):
            return self._describe_groups(node_id, version, request)
        if isinstance(request, ListGroupsRequest):
            return self._list_groups(node_id, version, request)
        if isinstance(request, DeleteGroupsRequest):
            return self._delete_groups(node_id, request)
        if isinstance(request, ConsumerGroupDescribeRequest):
            return self._consumer_group_describe(node_id, request)
        if isinstance(request, OffsetDeleteRequest):
            return self._offset_delete(node_id, request)
        raise ValueError(f"the group coordinator does not answer {type(request).__name__}")

    def wake(self) -> None:
        """Re-examine parked requests: call after moving a coordinator, so that a JoinGroup
        or SyncGroup parked on the old one is answered ``NOT_COORDINATOR``."""
        self._notify()

    # ---- time -----------------------------------------------------------------------------

    def _advance(self, now: float) -> None:
        """Fire the timers due by ``now``, each as of its own deadline."""
        while (due := self._timers.pop_due(now)) is not None:
            at, fire = due
            self._now = max(self._now, at)
            fire()
        self._now = max(self._now, now)

    def _schedule(self, key: Hashable, delay_ms: float, fire: Callable[[], None]) -> None:
        self._timers.schedule(key, self._now + delay_ms / 1000, fire)
        # A parked request may be sleeping until a later deadline.
        self._notify()

    def _notify(self) -> None:
        if self._wake is not None:
            self._wake.set()
            self._wake = None

    async def _park(self, parked: _Parked[T], node_id: int, group_id: str) -> T | None:
        """Wait until ``parked`` is answered; None once ``node_id`` stops coordinating."""
        while parked.response is None:
            if self.cluster.coordinator(group_id) != node_id:
                return None
            if self._wake is None:
                self._wake = anyio.Event()
            wake = self._wake
            deadline = self._timers.next_deadline()
            if deadline is None:
                await wake.wait()
                self._advance(anyio.current_time())
                continue
            with anyio.move_on_after(deadline - anyio.current_time()) as scope:
                await wake.wait()
            # The clock may stop a hair short of the deadline (float rounding): having slept
            # until it, fire what was due then.
            self._advance(
                max(anyio.current_time(), deadline)
                if scope.cancelled_caught
                else anyio.current_time()
            )
        return parked.response

    # ---- lookups --------------------------------------------------------------------------

    def _route(self, node_id: int, group_id: str) -> int:
        coordinator = self.cluster.coordinator(group_id)
        if coordinator == -1:
            return E.COORDINATOR_NOT_AVAILABLE
        return E.NONE if coordinator == node_id else E.NOT_COORDINATOR

    def _group(self, group_id: str) -> Group | None:
        group = self._groups.get(group_id)
        if group is None and group_id in self.cluster.offsets:
            # Offsets committed without a group (by TxnOffsetCommit, say) make a simple group,
            # as in Kafka.
            group = self._groups[group_id] = ClassicGroup(group_id)
        return group

    def _new_member_id(self, prefix: str) -> str:
        return f"{prefix}-{UUID(int=self._rng.getrandbits(128), version=4)}"

    def _offsets(self, group_id: str) -> GroupOffsets:
        return self.cluster.offsets.setdefault(group_id, {})

    # ---- JoinGroup ------------------------------------------------------------------------

    async def _join_group(
        self, node_id: int, version: int, req: JoinGroupRequest
    ) -> JoinGroupResponse:
        def error(code: int, member_id: str = req.member_id) -> JoinGroupResponse:
            return JoinGroupResponse(error_code=code, member_id=member_id)

        if not req.group_id:
            return error(E.INVALID_GROUP_ID)
        if not self.min_session_timeout_ms <= req.session_timeout_ms <= self.max_session_timeout_ms:
            return error(E.INVALID_SESSION_TIMEOUT)
        if problem := self._route(node_id, req.group_id):
            return error(problem)
        join = _Join.of(version, req)
        group = self._group(req.group_id)
        if isinstance(group, ConsumerGroup):
            if not group.is_empty():
                return error(E.INCONSISTENT_GROUP_PROTOCOL, "")  # classic members: not modelled
            del self._groups[req.group_id]  # an empty consumer group becomes a classic one
            group = None
        unknown = req.member_id == ""
        if group is None:
            if not unknown:
                return error(E.UNKNOWN_MEMBER_ID)
            group = self._groups[req.group_id] = ClassicGroup(req.group_id)
        parked: _Parked[JoinGroupResponse] = _Parked()
        if unknown:
            self._join_new_member(group, version, join, parked)
        else:
            self._join_existing_member(group, version, join, parked)
        response = await self._park(parked, node_id, req.group_id)
        return response if response is not None else error(E.NOT_COORDINATOR)

    def _join_new_member(
        self,
        group: ClassicGroup,
        version: int,
        join: _Join,
        parked: _Parked[JoinGroupResponse],
    ) -> None:
        if not group.supports_protocols(join.protocol_type, join.names()):
            self._answer_join(parked, JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL))
            return
        instance_id = join.instance_id
        new_id = self._new_member_id(instance_id if instance_id is not None else "member")
        if instance_id is not None:
            existing = group.static.get(instance_id)
            if existing is not None:
                self._replace_static_member(group, version, join, existing, new_id, parked)
            else:
                self._add_member(group, join, new_id, parked)
        elif version >= JOIN_REQUIRES_MEMBER_ID_VERSION:
            # KIP-394: a new member joins twice; the id it is given stays pending (and holds
            # up the join phase) until it joins with it or its session timeout passes.
            group.pending_members.add(new_id)
            self._schedule_heartbeat(group, new_id, join.session_timeout_ms)
            self._answer_join(
                parked, JoinGroupResponse(error_code=E.MEMBER_ID_REQUIRED, member_id=new_id)
            )
        else:
            self._add_member(group, join, new_id, parked)

    def _join_existing_member(
        self,
        group: ClassicGroup,
        version: int,
        join: _Join,
        parked: _Parked[JoinGroupResponse],
    ) -> None:
        member_id = join.member_id
        instance_id = join.instance_id
        if not group.supports_protocols(join.protocol_type, join.names()):
            self._answer_join(
                parked,
                JoinGroupResponse(error_code=E.INCONSISTENT_GROUP_PROTOCOL, member_id=member_id),
            )
            return
        if member_id in group.pending_members:
            if instance_id is not None:  # Kafka: IllegalStateException
                self._answer_join(
                    parked,
                    JoinGroupResponse(error_code=E.UNKNOWN_SERVER_ERROR, member_id=member_id),
                )
                return
            self._add_member(group, join, member_id, parked)
            return
        problem = group.validate_member(member_id, instance_id)
        if problem:
            self._answer_join(
                parked,
                JoinGroupResponse(
                    error_code=problem,
                    member_id=member_id,
                    protocol_name=None if version >= 7 else "",
                ),
            )
            return
        member = group.members[member_id]
        same = member.protocols == join.protocols
        if group.state is ClassicState.PREPARING_REBALANCE:
            self._update_member(member, join, parked)
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is ClassicState.COMPLETING_REBALANCE:
            if same:
                # It missed the JoinGroup answer: the current generation's, again.
                self._answer_join(parked, self._generation_answer(group, member_id))
            else:
                self._update_member(member, join, parked)
                self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is ClassicState.STABLE:
            if group.leader == member_id or not same:
                # The leader joining again asks for a rebalance (its topics' metadata may
                # have changed without its subscription changing).
                self._update_member(member, join, parked)
                self._maybe_prepare_rebalance_or_complete_join(group)
            else:
                self._answer_join(parked, self._generation_answer(group, member_id, lead=False))
        else:
            self._answer_join(
                parked, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID, member_id=member_id)
            )

    def _generation_answer(
        self, group: ClassicGroup, member_id: str, *, lead: bool = True
    ) -> JoinGroupResponse:
        is_leader = lead and group.leader == member_id
        return JoinGroupResponse(
            generation_id=group.generation,
            protocol_type=group.protocol_type,
            protocol_name=group.protocol_name,
            leader=group.leader or "",
            member_id=member_id,
            members=group.join_members() if is_leader else [],
        )

    def _answer_join(self, parked: _Parked[JoinGroupResponse], response: JoinGroupResponse) -> None:
        parked.response = response
        self._notify()

    def _complete_join(self, member: ClassicMember, response: JoinGroupResponse) -> None:
        if member.join is not None:
            self._answer_join(member.join, response)
            member.join = None

    def _complete_sync(self, member: ClassicMember, response: SyncGroupResponse) -> bool:
        if member.sync is None:
            return False
        member.sync.response = response
        member.sync = None
        self._notify()
        return True

    def _add_member(
        self,
        group: ClassicGroup,
        join: _Join,
        member_id: str,
        parked: _Parked[JoinGroupResponse],
    ) -> None:
        member = ClassicMember(
            member_id=member_id,
            instance_id=join.instance_id,
            protocol_type=join.protocol_type,
            protocols=list(join.protocols),
            session_timeout_ms=join.session_timeout_ms,
            rebalance_timeout_ms=join.rebalance_timeout_ms,
            join=parked,
            is_new=True,
        )
        if (
            group.state is ClassicState.PREPARING_REBALANCE
            and group.previous_state is ClassicState.EMPTY
        ):
            group.new_member_added = True
        group.add(member)
        # A new member cannot heartbeat (it has no id yet) and a parked JoinGroup cannot
        # notice its client leaving: its join expires on its own timeout instead.
        self._schedule_heartbeat(group, member_id, self.new_member_join_timeout_ms)
        self._maybe_prepare_rebalance_or_complete_join(group)

    def _update_member(
        self, member: ClassicMember, join: _Join, parked: _Parked[JoinGroupResponse]
    ) -> None:
        member.protocols = list(join.protocols)
        member.rebalance_timeout_ms = join.rebalance_timeout_ms
        member.session_timeout_ms = join.session_timeout_ms
        # A JoinGroup parked earlier for this member is never answered, as in Kafka (its
        # client has given up on it).
        member.join = parked

    def _replace_static_member(
        self,
        group: ClassicGroup,
        version: int,
        join: _Join,
        old_id: str,
        new_id: str,
        parked: _Parked[JoinGroupResponse],
    ) -> None:
        """A static member joins with a new member id (KIP-345): it takes over the old one's
        place; a duplicate of the old one still waiting is fenced."""
        old_leader = group.leader
        member = group.members.pop(old_id)
        fenced = JoinGroupResponse(error_code=E.FENCED_INSTANCE_ID, member_id=old_id)
        self._complete_join(member, fenced)
        self._complete_sync(member, SyncGroupResponse(error_code=E.FENCED_INSTANCE_ID))
        self._timers.cancel(("heartbeat", group.group_id, old_id))
        member.member_id = new_id
        group.members[new_id] = member
        assert member.instance_id is not None
        group.static[member.instance_id] = new_id
        if group.leader == old_id:
            group.leader = new_id
        if old_id in group.pending_sync:
            group.pending_sync.discard(old_id)
            group.pending_sync.add(new_id)
        self._schedule_heartbeat(group, new_id, member.session_timeout_ms)
        self._update_member(member, join, parked)
        if group.state is ClassicState.STABLE:
            if group.select_protocol() == group.protocol_name:
                # Same protocol: no rebalance, the member gets the current generation.
                if version >= 9:
                    is_leader = group.leader == new_id
                    response = self._generation_answer(group, new_id, lead=is_leader)
                    response.skip_assignment = is_leader
                else:
                    response = self._generation_answer(group, new_id, lead=False)
                    response.leader = old_leader or ""
                self._complete_join(member, response)
            else:
                self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is ClassicState.COMPLETING_REBALANCE:
            # The leader may be assigning for the old member id: rebalance again.
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    # ---- the join phase -----------------------------------------------------------------

    def _maybe_prepare_rebalance_or_complete_join(self, group: ClassicGroup) -> None:
        if group.state in _CAN_REBALANCE:
            self._prepare_rebalance(group)
        else:
            self._maybe_complete_join_phase(group)

    def _prepare_rebalance(self, group: ClassicGroup) -> None:
        if group.state is ClassicState.COMPLETING_REBALANCE:
            self._reset_and_propagate(group, E.REBALANCE_IN_PROGRESS)
        group.pending_sync.clear()
        self._timers.cancel(("sync", group.group_id))
        initial = group.state is ClassicState.EMPTY
        if initial:
            delay = self.initial_rebalance_delay_ms
            remaining = max(group.rebalance_timeout_ms() - delay, 0)
            gid = group.group_id
            self._schedule(
                ("join", gid), delay, lambda: self._try_complete_initial(gid, delay, remaining)
            )
        group.transition(ClassicState.PREPARING_REBALANCE)
        if not initial:
            if group.has_all_members_joined():
                self._complete_join_phase(group)
            else:
                self._schedule_join_timeout(group)

    def _schedule_join_timeout(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self._schedule(("join", gid), group.rebalance_timeout_ms(), lambda: self._join_timeout(gid))

    def _join_timeout(self, group_id: str) -> None:
        group = self._groups.get(group_id)
        if isinstance(group, ClassicGroup):
            self._complete_join_phase(group)

    def _try_complete_initial(self, group_id: str, delay: int, remaining: int) -> None:
        group = self._groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return
        if group.new_member_added and remaining != 0:
            group.new_member_added = False
            new_delay = min(self.initial_rebalance_delay_ms, remaining)
            new_remaining = max(remaining - delay, 0)
            self._schedule(
                ("join", group_id),
                new_delay,
                lambda: self._try_complete_initial(group_id, new_delay, new_remaining),
            )
        else:
            self._complete_join_phase(group)

    def _maybe_complete_join_phase(self, group: ClassicGroup) -> None:
        if (
            group.state is ClassicState.PREPARING_REBALANCE
            # The initial rebalance ends on its delay, not when everyone has joined.
            and group.previous_state is not ClassicState.EMPTY
            and group.has_all_members_joined()
        ):
            self._complete_join_phase(group)

    def _complete_join_phase(self, group: ClassicGroup) -> None:
        gid = group.group_id
        self._timers.cancel(("join", gid))
        for member in [m for m in group.members.values() if m.join is None]:
            if member.instance_id is None:  # static members keep their place
                group.remove(member.member_id)
                self._timers.cancel(("heartbeat", gid, member.member_id))
        if not group.maybe_elect_new_joined_leader() and group.members:
            # Nobody rejoined: try again after another rebalance timeout, by when the
            # session timeouts will have removed the silent members.
            self._schedule_join_timeout(group)
            return
        group.generation += 1
        if group.members:
            group.protocol_name = group.select_protocol()
            group.subscribed_topics = group.compute_subscribed_topics()
            group.transition(ClassicState.COMPLETING_REBALANCE)
        else:
            group.protocol_name = None
            group.subscribed_topics = set()
            group.transition(ClassicState.EMPTY)
        group.pending_sync.clear()
        if group.state is ClassicState.EMPTY:
            return
        for member in list(group.members.values()):
            self._complete_join(member, self._generation_answer(group, member.member_id))
            self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
            member.is_new = False
            group.pending_sync.add(member.member_id)
        generation = group.generation
        self._schedule(
            ("sync", gid),
            group.rebalance_timeout_ms(),
            lambda: self._expire_pending_sync(gid, generation),
        )

    def _expire_pending_sync(self, group_id: str, generation: int) -> None:
        group = self._groups.get(group_id)
        if not isinstance(group, ClassicGroup) or group.generation != generation:
            return
        if (
            group.state in (ClassicState.COMPLETING_REBALANCE, ClassicState.STABLE)
            and group.pending_sync
        ):
            for member_id in list(group.pending_sync):
                group.remove(member_id)
                self._timers.cancel(("heartbeat", group_id, member_id))
            self._prepare_rebalance(group)

    def _reset_and_propagate(self, group: ClassicGroup, code: int) -> None:
        for member in group.members.values():
            member.assignment = b""
        self._propagate(group, code)

    def _propagate(self, group: ClassicGroup, code: int) -> None:
        for member in group.members.values():
            response = SyncGroupResponse(error_code=code, assignment=member.assignment)
            if code == E.NONE:
                response.protocol_type = group.protocol_type
                response.protocol_name = group.protocol_name
            if self._complete_sync(member, response):
                # A session that ran out while the member waited counts from now.
                self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)

    # ---- member expiry --------------------------------------------------------------------

    def _schedule_heartbeat(self, group: ClassicGroup, member_id: str, timeout_ms: int) -> None:
        gid = group.group_id
        self._schedule(
            ("heartbeat", gid, member_id),
            timeout_ms,
            lambda: self._expire_heartbeat(gid, member_id),
        )

    def _expire_heartbeat(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if not isinstance(group, ClassicGroup):
            return
        if member_id in group.pending_members:
            group.remove(member_id)
            if group.state is ClassicState.PREPARING_REBALANCE and group.has_all_members_joined():
                self._complete_join_phase(group)
            return
        member = group.members.get(member_id)
        if member is not None and not member.has_satisfied_heartbeat():
            self._remove_member_and_update(group, member)

    def _remove_member_and_update(self, group: ClassicGroup, member: ClassicMember) -> None:
        # A new member may have expired while parked: tell it, so that it joins again.
        self._complete_join(member, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
        group.remove(member.member_id)
        if group.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
            self._maybe_prepare_rebalance_or_complete_join(group)
        elif group.state is ClassicState.PREPARING_REBALANCE and group.has_all_members_joined():
            self._complete_join_phase(group)

    # ---- SyncGroup, Heartbeat, LeaveGroup -------------------------------------------------

    async def _sync_group(
        self, node_id: int, version: int, req: SyncGroupRequest
    ) -> SyncGroupResponse:
        if not req.group_id:
            return SyncGroupResponse(error_code=E.INVALID_GROUP_ID)
        if problem := self._route(node_id, req.group_id):
            return SyncGroupResponse(error_code=problem)
        group = self._group(req.group_id)
        if not isinstance(group, ClassicGroup) or group.is_empty():
            return SyncGroupResponse(error_code=E.UNKNOWN_MEMBER_ID)
        instance_id = req.group_instance_id if version >= 3 else None
        problem = group.validate_member(req.member_id, instance_id)
        if not problem and req.generation_id != group.generation:
            problem = E.ILLEGAL_GENERATION
        if (
            not problem
            and version >= 5
            and (
                (req.protocol_type is not None and req.protocol_type != group.protocol_type)
                or (req.protocol_name is not None and req.protocol_name != group.protocol_name)
            )
        ):
            problem = E.INCONSISTENT_GROUP_PROTOCOL
        if problem:
            return SyncGroupResponse(error_code=problem)
        member = group.members[req.member_id]
        if group.state is ClassicState.PREPARING_REBALANCE:
            return SyncGroupResponse(error_code=E.REBALANCE_IN_PROGRESS)
        if group.state is ClassicState.STABLE:
            self._remove_pending_sync(group, req.member_id)
            return SyncGroupResponse(
                protocol_type=group.protocol_type,
                protocol_name=group.protocol_name,
                assignment=member.assignment,
            )
        parked: _Parked[SyncGroupResponse] = _Parked()
        member.sync = parked
        self._remove_pending_sync(group, req.member_id)
        if group.leader == req.member_id:
            given = {a.member_id: a.assignment for a in req.assignments}
            for m in group.members.values():
                m.assignment = given.get(m.member_id, b"")
            self._propagate(group, E.NONE)
            group.transition(ClassicState.STABLE)
        response = await self._park(parked, node_id, req.group_id)
        return response if response is not None else SyncGroupResponse(error_code=E.NOT_COORDINATOR)

    def _remove_pending_sync(self, group: ClassicGroup, member_id: str) -> None:
        group.pending_sync.discard(member_id)
        if not group.pending_sync:
            self._timers.cancel(("sync", group.group_id))

    def _heartbeat(self, node_id: int, req: HeartbeatRequest) -> HeartbeatResponse:
        if not req.group_id:
            return HeartbeatResponse(error_code=E.INVALID_GROUP_ID)
        if problem := self._route(node_id, req.group_id):
            return HeartbeatResponse(error_code=problem)
        group = self._group(req.group_id)
        if not isinstance(group, ClassicGroup):
            return HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID)
        problem = group.validate_member(req.member_id, req.group_instance_id)
        if not problem and req.generation_id != group.generation:
            problem = E.ILLEGAL_GENERATION
        if problem:
            return HeartbeatResponse(error_code=problem)
        if group.state is ClassicState.EMPTY:
            return HeartbeatResponse(error_code=E.UNKNOWN_MEMBER_ID)
        member = group.members[req.member_id]
        self._schedule_heartbeat(group, member.member_id, member.session_timeout_ms)
        if group.state is ClassicState.PREPARING_REBALANCE:
            return HeartbeatResponse(error_code=E.REBALANCE_IN_PROGRESS)
        return HeartbeatResponse()

    def _leave_group(
        self, node_id: int, version: int, req: LeaveGroupRequest
    ) -> LeaveGroupResponse:
        identities = req.members if version >= 3 else [MemberIdentity(member_id=req.member_id)]

        def answer(top: int, members: list[MemberResponse]) -> LeaveGroupResponse:
            if version >= 3:
                return LeaveGroupResponse(error_code=top, members=members)
            # v0-2 name one member: its error is the answer's.
            first = members[0].error_code if members else E.NONE
            return LeaveGroupResponse(error_code=top or first)

        if not req.group_id:
            return answer(E.INVALID_GROUP_ID, [])
        if problem := self._route(node_id, req.group_id):
            return answer(problem, [])
        group = self._group(req.group_id)
        if group is None:
            return answer(E.UNKNOWN_MEMBER_ID, [])
        results: list[MemberResponse] = []
        if isinstance(group, ConsumerGroup):
            # Only classic-protocol members may leave this way; the fake has none there.
            results = [
                MemberResponse(
                    member_id=ident.member_id,
                    group_instance_id=ident.group_instance_id,
                    error_code=E.UNKNOWN_MEMBER_ID,
                )
                for ident in identities
            ]
            return answer(E.NONE, results)
        left = False
        for ident in identities:
            code = E.NONE
            if ident.member_id == "":
                # Removal by instance id alone: the admin client's removeMembersFromGroup.
                target = group.static.get(ident.group_instance_id or "")
                if ident.group_instance_id is not None and target is not None:
                    self._remove_current_member(group, target)
                else:
                    code = E.UNKNOWN_MEMBER_ID
            elif ident.member_id in group.pending_members:
                group.remove(ident.member_id)
                self._timers.cancel(("heartbeat", group.group_id, ident.member_id))
            else:
                code = group.validate_member(ident.member_id, ident.group_instance_id)
                if not code:
                    self._remove_current_member(group, ident.member_id)
            left = left or code == E.NONE
            results.append(
                MemberResponse(
                    member_id=ident.member_id,
                    group_instance_id=ident.group_instance_id,
                    error_code=code,
                )
            )
        if left:
            if group.state in (ClassicState.STABLE, ClassicState.COMPLETING_REBALANCE):
                self._maybe_prepare_rebalance_or_complete_join(group)
            elif group.state is ClassicState.PREPARING_REBALANCE:
                self._maybe_complete_join_phase(group)
        return answer(E.NONE, results)

    def _remove_current_member(self, group: ClassicGroup, member_id: str) -> None:
        member = group.members[member_id]
        self._timers.cancel(("heartbeat", group.group_id, member_id))
        self._complete_join(member, JoinGroupResponse(error_code=E.UNKNOWN_MEMBER_ID))
        group.remove(member_id)

    # ---- ConsumerGroupHeartbeat (KIP-848) -------------------------------------------------

    def _consumer_heartbeat(
        self, node_id: int, version: int, req: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse:
        def error(code: int, message: str | None = None) -> ConsumerGroupHeartbeatResponse:
            return ConsumerGroupHeartbeatResponse(error_code=code, error_message=message)

        invalid = self._invalid_heartbeat(version, req)
        if invalid is not None:
            return invalid
        if problem := self._route(node_id, req.group_id):
            return error(problem)
        epoch = req.member_epoch
        if epoch in (LEAVE_GROUP_MEMBER_EPOCH, LEAVE_GROUP_STATIC_MEMBER_EPOCH):
            return self._consumer_leave(req)
        group = self._group(req.group_id)
        if isinstance(group, ClassicGroup):
            if not group.is_empty() or epoch != 0:
                return error(E.GROUP_ID_NOT_FOUND, f"Group {req.group_id} is not a consumer group")
            group = None  # an empty classic group becomes a consumer group
        if group is None:
            if epoch != 0:
                return error(E.GROUP_ID_NOT_FOUND, f"Consumer group {req.group_id} not found.")
            group = ConsumerGroup(req.group_id)
            self._groups[req.group_id] = group
        member_id = req.member_id or str(UUID(int=self._rng.getrandbits(128), version=4))
        got = self._consumer_member(group, member_id, req)
        if isinstance(got, ConsumerGroupHeartbeatResponse):
            return got
        member, is_new = got
        old_assigned = _copy(member.assigned)
        old_subscription = (list(member.subscribed_names), member.subscribed_regex)
        if req.instance_id is not None:
            member.instance_id = req.instance_id
        if req.rack_id is not None:
            member.rack_id = req.rack_id
        if req.rebalance_timeout_ms != -1:
            member.rebalance_timeout_ms = req.rebalance_timeout_ms
        if req.server_assignor is not None:
            member.server_assignor = req.server_assignor
        if req.subscribed_topic_names is not None:
            member.subscribed_names = sorted(set(req.subscribed_topic_names))
        if version >= 1 and req.subscribed_topic_regex is not None:
            member.subscribed_regex = req.subscribed_topic_regex or None
        group.members[member.member_id] = member
        bump = (
            is_new or (list(member.subscribed_names), member.subscribed_regex) != old_subscription
        )
        subscription = self._subscription(group)
        if subscription != group.subscription:
            group.subscription = subscription
            bump = True
        if bump:
            group.group_epoch += 1
        if group.group_epoch > group.assignment_epoch:
            self._compute_target(group)
        self._reconcile(group, member, req.topic_partitions)
        gid, mid = group.group_id, member.member_id
        self._schedule(
            ("session", gid, mid),
            self.consumer_session_timeout_ms,
            lambda: self._fence_consumer_member(gid, mid),
        )
        response = ConsumerGroupHeartbeatResponse(
            member_id=member.member_id,
            member_epoch=member.member_epoch,
            heartbeat_interval_ms=self.consumer_heartbeat_interval_ms,
        )
        # A full request (joining, or after an error) or a changed assignment gets the
        # assignment; otherwise it is left out.
        full = epoch == 0 or (
            req.rebalance_timeout_ms != -1
            and req.subscribed_topic_names is not None
            and req.topic_partitions is not None
        )
        if full or member.assigned != old_assigned:
            response.assignment = Assignment(topic_partitions=_to_topic_partitions(member.assigned))
        return response

    def _invalid_heartbeat(
        self, version: int, req: ConsumerGroupHeartbeatRequest
    ) -> ConsumerGroupHeartbeatResponse | None:
        def invalid(message: str) -> ConsumerGroupHeartbeatResponse:
            return ConsumerGroupHeartbeatResponse(
                error_code=E.INVALID_REQUEST, error_message=message
            )

        epoch = req.member_epoch
        regex = req.subscribed_topic_regex if version >= 1 else None
        if not req.group_id:
            return invalid("GroupId can't be empty.")
        if req.instance_id == "":
            return invalid("InstanceId can't be empty.")
        if req.rack_id == "":
            return invalid("RackId can't be empty.")
        if version >= CLIENT_MEMBER_ID_VERSION and not req.member_id:
            return invalid("MemberId can't be empty.")
        if epoch > 0 or epoch == LEAVE_GROUP_MEMBER_EPOCH:
            if not req.member_id:
                return invalid("MemberId can't be empty.")
        elif epoch == 0:
            if req.rebalance_timeout_ms == -1:
                return invalid("RebalanceTimeoutMs must be provided in first request.")
            if req.topic_partitions is None or req.topic_partitions:
                return invalid("TopicPartitions must be empty when (re-)joining.")
            if req.subscribed_topic_names is None and regex is None:
                return invalid(
                    "Either SubscribedTopicNames or SubscribedTopicRegex must be non-null when "
                    "(re-)joining."
                )
        elif epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
            if not req.member_id:
                return invalid("MemberId can't be empty.")
            if req.instance_id is None:
                return invalid("InstanceId can't be null.")
        else:
            return invalid("MemberEpoch is invalid.")
        if req.server_assignor is not None and req.server_assignor not in ASSIGNORS:
            return ConsumerGroupHeartbeatResponse(
                error_code=E.code("UNSUPPORTED_ASSIGNOR"),
                error_message=f"ServerAssignor {req.server_assignor} is not supported. "
                f"Supported assignors: {', '.join(ASSIGNORS)}.",
            )
        if regex:
            try:
                re.compile(regex)
            except re.error as exc:
                return ConsumerGroupHeartbeatResponse(
                    error_code=E.code("INVALID_REGULAR_EXPRESSION"), error_message=str(exc)
                )
        return None

    def _consumer_member(
        self, group: ConsumerGroup, member_id: str, req: ConsumerGroupHeartbeatRequest
    ) -> tuple[ConsumerMember, bool] | ConsumerGroupHeartbeatResponse:
        """The member the heartbeat is from (and whether it is new), or the error."""

        def error(code: int, message: str) -> ConsumerGroupHeartbeatResponse:
            return ConsumerGroupHeartbeatResponse(error_code=code, error_message=message)

        joining = req.member_epoch == 0
        if req.instance_id is None:
            member = group.members.get(member_id)
            if member is None:
                if not joining:
                    return error(
                        E.UNKNOWN_MEMBER_ID,
                        f"Member {member_id} is not a member of group {group.group_id}.",
                    )
                return ConsumerMember(member_id), True
        else:
            existing = group.static_member(req.instance_id)
            if joining:
                if existing is None:
                    member = group.members.get(member_id)
                    return (
                        (member, False) if member is not None else (ConsumerMember(member_id), True)
                    )
                if existing.member_epoch != LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                    return error(
                        E.UNRELEASED_INSTANCE_ID,
                        f"Static member {member_id} with instance id {req.instance_id} cannot "
                        f"join the group because the instance id is owned by "
                        f"{existing.member_id} member.",
                    )
                # The static member is back under a new member id: it takes the old one's
                # place and assignment.
                self._timers.cancel(("session", group.group_id, existing.member_id))
                self._timers.cancel(("rebalance", group.group_id, existing.member_id))
                del group.members[existing.member_id]
                target = group.target.pop(existing.member_id, None)
                if target is not None:
                    group.target[member_id] = target
                existing.member_id = member_id
                existing.member_epoch = existing.previous_epoch = 0
                return existing, False
            if existing is None:
                return error(E.UNKNOWN_MEMBER_ID, f"Instance id {req.instance_id} is unknown.")
            if existing.member_id != member_id:
                return error(
                    E.FENCED_INSTANCE_ID,
                    f"Static member {member_id} with instance id {req.instance_id} was fenced "
                    f"by member {existing.member_id}.",
                )
            member = existing
        if not joining:
            got = req.member_epoch
            if got > member.member_epoch or (
                got < member.member_epoch
                # The answer with the new epoch may have been lost: the previous epoch is
                # accepted while the member owns no more than it is assigned.
                and (
                    got != member.previous_epoch
                    or not _is_subset(req.topic_partitions, member.assigned)
                )
            ):
                which = "greater" if got > member.member_epoch else "smaller"
                return error(
                    E.FENCED_MEMBER_EPOCH,
                    f"The consumer group member has a {which} "
                    f"member epoch ({got}) than the one known by the group coordinator "
                    f"({member.member_epoch}). The member must abandon all its partitions and "
                    "rejoin.",
                )
        return member, False

    def _consumer_leave(self, req: ConsumerGroupHeartbeatRequest) -> ConsumerGroupHeartbeatResponse:
        group = self._group(req.group_id)
        if not isinstance(group, ConsumerGroup):
            return ConsumerGroupHeartbeatResponse(
                error_code=E.GROUP_ID_NOT_FOUND,
                error_message=f"Consumer group {req.group_id} not found.",
            )
        if req.instance_id is None:
            member = group.members.get(req.member_id)
            if member is None:
                return ConsumerGroupHeartbeatResponse(
                    error_code=E.UNKNOWN_MEMBER_ID,
                    error_message=f"Member {req.member_id} is not a member of group "
                    f"{req.group_id}.",
                )
        else:
            member = group.static_member(req.instance_id)
            if member is None:
                return ConsumerGroupHeartbeatResponse(
                    error_code=E.UNKNOWN_MEMBER_ID,
                    error_message=f"Instance id {req.instance_id} is unknown.",
                )
            if member.member_id != req.member_id:
                return ConsumerGroupHeartbeatResponse(
                    error_code=E.FENCED_INSTANCE_ID,
                    error_message=f"Static member {req.member_id} with instance id "
                    f"{req.instance_id} was fenced by member {member.member_id}.",
                )
            if req.member_epoch == LEAVE_GROUP_STATIC_MEMBER_EPOCH:
                # Left for a while (a restart): it keeps its partitions, and nobody else gets
                # them, until it rejoins or its session runs out.
                member.member_epoch = LEAVE_GROUP_STATIC_MEMBER_EPOCH
                member.pending_revocation = {}
                return ConsumerGroupHeartbeatResponse(
                    member_id=member.member_id, member_epoch=LEAVE_GROUP_STATIC_MEMBER_EPOCH
                )
        self._fence_consumer_member(group.group_id, member.member_id)
        return ConsumerGroupHeartbeatResponse(
            member_id=req.member_id, member_epoch=req.member_epoch
        )

    def _fence_consumer_member(self, group_id: str, member_id: str) -> None:
        group = self._groups.get(group_id)
        if not isinstance(group, ConsumerGroup) or member_id not in group.members:
            return
        del group.members[member_id]
        group.target.pop(member_id, None)
        self._timers.cancel(("session", group_id, member_id))
        self._timers.cancel(("rebalance", group_id, member_id))
        group.subscription = self._subscription(group)
        group.group_epoch += 1

    def _subscribed_topics(self, member: ConsumerMember) -> set[str]:
        topics = {t for t in member.subscribed_names if t in self.cluster.topics}
        if member.subscribed_regex:
            pattern = re.compile(member.subscribed_regex)
            topics.update(
                name
                for name, topic in self.cluster.topics.items()
                if not topic.internal and pattern.fullmatch(name)
            )
        return topics

    def _subscription(self, group: ConsumerGroup) -> dict[str, tuple[UUID, int]]:
        out: dict[str, tuple[UUID, int]] = {}
        for m in group.members.values():
            for name in self._subscribed_topics(m):
                topic = self.cluster.topics[name]
                out[name] = (topic.topic_id, len(topic.partitions))
        return out

    def _compute_target(self, group: ConsumerGroup) -> None:
        subscriptions = {mid: self._subscribed_topics(m) for mid, m in group.members.items()}
        topics = {name: count for name, (_, count) in group.subscription.items()}
        ids = {name: tid for name, (tid, _) in group.subscription.items()}
        names = {tid: name for name, tid in ids.items()}
        if group.assignor() == "range":
            result = assign_range(subscriptions, topics)
        else:
            previous = {
                mid: {(names[tid], p) for tid, ps in parts.items() if tid in names for p in ps}
                for mid, parts in group.target.items()
            }
            result = assign_uniform(subscriptions, topics, previous)
        group.target = {}
        for mid, tps in result.items():
            parts: Partitions = {}
            for t, p in tps:
                parts.setdefault(ids[t], set()).add(p)
            group.target[mid] = parts
        group.assignment_epoch = group.group_epoch

    def _reconcile(
        self, group: ConsumerGroup, member: ConsumerMember, owned: list[TopicPartitions] | None
    ) -> None:
        """Kafka's CurrentAssignmentBuilder: one step of ``member`` towards its target."""
        target_epoch = group.assignment_epoch
        if member.is_reconciled_to(target_epoch):
            return
        if member.state is MemberState.STABLE:
            self._next_assignment(group, member, member.member_epoch, owned)
        elif member.state is MemberState.UNREVOKED_PARTITIONS:
            if _overlaps(member.pending_revocation, owned):
                return  # still owns what it must give up
            self._next_assignment(group, member, member.member_epoch + 1, owned)
        else:
            self._next_assignment(group, member, member.member_epoch, owned)
        key = ("rebalance", group.group_id, member.member_id)
        if member.state is MemberState.UNREVOKED_PARTITIONS:
            gid, mid, epoch = group.group_id, member.member_id, member.member_epoch
            self._schedule(
                key, member.rebalance_timeout_ms, lambda: self._rebalance_timeout(gid, mid, epoch)
            )
        else:
            self._timers.cancel(key)

    def _next_assignment(
        self,
        group: ConsumerGroup,
        member: ConsumerMember,
        epoch: int,
        owned: list[TopicPartitions] | None,
    ) -> None:
        target = group.target.get(member.member_id, {})
        holders = group.holders()
        kept: Partitions = {}
        revoke: Partitions = {}
        gain: Partitions = {}
        unreleased = False
        for tid in set(target) | set(member.assigned):
            want = target.get(tid, set())
            have = member.assigned.get(tid, set())
            kept[tid] = have & want
            revoke[tid] = have - want
            free = set()
            for p in want - have:
                # A partition another member still holds is given once it lets go.
                if holders.get((tid, p), member.member_id) != member.member_id or (
                    p in member.pending_revocation.get(tid, ())
                ):
                    unreleased = True
                else:
                    free.add(p)
            gain[tid] = free
        kept, revoke, gain = _copy(kept), _copy(revoke), _copy(gain)
        previous = member.member_epoch
        if revoke and _overlaps(revoke, owned):
            member.state = MemberState.UNREVOKED_PARTITIONS
            member.member_epoch, member.previous_epoch = epoch, previous
            member.assigned, member.pending_revocation = kept, revoke
            return
        for tid, ps in gain.items():
            kept.setdefault(tid, set()).update(ps)
        unreleased_left = unreleased
        member.state = MemberState.UNRELEASED_PARTITIONS if unreleased_left else MemberState.STABLE
        member.member_epoch, member.previous_epoch = group.assignment_epoch, previous
        member.assigned, member.pending_revocation = kept, {}

    def _rebalance_timeout(self, group_id: str, member_id: str, epoch: int) -> None:
        group = self._groups.get(group_id)
        if not isinstance(group, ConsumerGroup):
            return
        member = group.members.get(member_id)
        if member is not None and member.member_epoch == epoch:
            self._fence_consumer_member(group_id, member_id)

    # ---- OffsetCommit / OffsetFetch / OffsetDelete --------------------------------------

    def _offset_commit(
        self, node_id: int, version: int, req: OffsetCommitRequest
    ) -> OffsetCommitResponse:
        by_id = version >= 10
        response = OffsetCommitResponse()
        valid: list[tuple[str, int, OffsetCommitResponsePartition, int, int, str]] = []
        for t in req.topics:
            topic = (
                self.cluster.topic_by_id(t.topic_id) if by_id else self.cluster.topics.get(t.name)
            )
            out = OffsetCommitResponseTopic(name=t.name, topic_id=t.topic_id)
            response.topics.append(out)
            for p in t.partitions:
                answer = OffsetCommitResponsePartition(partition_index=p.partition_index)
                out.partitions.append(answer)
                if topic is None:
                    answer.error_code = (
                        E.UNKNOWN_TOPIC_ID if by_id else E.UNKNOWN_TOPIC_OR_PARTITION
                    )
                elif not 0 <= p.partition_index < len(topic.partitions):
                    answer.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                else:
                    epoch = p.committed_leader_epoch if version >= 6 else -1
                    metadata = p.committed_metadata or ""
                    valid.append(
                        (topic.name, p.partition_index, answer, p.committed_offset, epoch, metadata)
                    )
        # Kafka's broker drops unknown partitions before asking the coordinator (which is
        # not asked at all when none is left).
        problem = self._commit_problem(node_id, version, req) if valid else E.NONE
        for name, index, answer, offset, epoch, metadata in valid:
            if problem:
                answer.error_code = problem
            elif len(metadata.encode()) > OFFSET_METADATA_MAX_BYTES:
                answer.error_code = E.code("OFFSET_METADATA_TOO_LARGE")
            else:
                self._offsets(req.group_id)[(name, index)] = (offset, epoch, metadata)
        return response

    def _commit_problem(self, node_id: int, version: int, req: OffsetCommitRequest) -> int:
        """Why the group refuses the commit (``OffsetMetadataManager.validateOffsetCommit``)."""
        if not req.group_id:
            return E.INVALID_GROUP_ID
        if problem := self._route(node_id, req.group_id):
            return problem
        generation = req.generation_id_or_member_epoch
        instance_id = req.group_instance_id if version >= 7 else None
        group = self._group(req.group_id)
        if group is None:
            if generation >= 0:
                return (
                    E.GROUP_ID_NOT_FOUND
                    if version >= OFFSET_COMMIT_KIP848_VERSION
                    else E.ILLEGAL_GENERATION
                )
            # A commit outside group management (the admin client, assign()): a simple group.
            group = self._groups[req.group_id] = ClassicGroup(req.group_id)
        if isinstance(group, ConsumerGroup):
            if generation < 0 and group.is_empty():
                return E.NONE
            member = group.members.get(req.member_id)
            if member is None:
                return E.UNKNOWN_MEMBER_ID
            if version < OFFSET_COMMIT_KIP848_VERSION:
                return E.UNSUPPORTED_VERSION
            return E.NONE if generation == member.member_epoch else E.STALE_MEMBER_EPOCH
        if generation < 0 and group.is_empty():
            return E.NONE
        if generation >= 0 or req.member_id or instance_id is not None:
            problem = group.validate_member(req.member_id, instance_id)
            if problem:
                return problem
            if generation != group.generation:
                return E.ILLEGAL_GENERATION
        elif not group.is_empty():
            return E.UNKNOWN_MEMBER_ID
        if group.state is ClassicState.COMPLETING_REBALANCE:
            return E.REBALANCE_IN_PROGRESS
        if group.state in (ClassicState.STABLE, ClassicState.PREPARING_REBALANCE):
            # A commit keeps a classic member's session alive.
            classic = group.members[req.member_id]
            self._schedule_heartbeat(group, classic.member_id, classic.session_timeout_ms)
        return E.NONE

    def _offset_fetch(
        self, node_id: int, version: int, req: OffsetFetchRequest
    ) -> OffsetFetchResponse:
        if version >= 8:
            groups = req.groups
        else:
            topics = None
            if req.topics is not None:
                topics = [
                    OffsetFetchRequestTopics(name=t.name, partition_indexes=t.partition_indexes)
                    for t in req.topics
                ]
            groups = [OffsetFetchRequestGroup(group_id=req.group_id, topics=topics)]
        stable = req.require_stable if version >= 7 else False
        answers = [self._fetch_group(node_id, version, g, stable) for g in groups]
        if version >= 8:
            return OffsetFetchResponse(groups=answers)
        (answer,) = answers
        topics_out = [
            OffsetFetchResponseTopic(
                name=t.name,
                partitions=[
                    OffsetFetchResponsePartition(
                        partition_index=p.partition_index,
                        committed_offset=p.committed_offset,
                        committed_leader_epoch=p.committed_leader_epoch,
                        metadata=p.metadata,
                        error_code=p.error_code,
                    )
                    for p in t.partitions
                ],
            )
            for t in answer.topics
        ]
        if answer.error_code and version < 2:
            # v0-1 have no group error: each partition asked for carries it.
            topics_out = [
                OffsetFetchResponseTopic(
                    name=t.name,
                    partitions=[
                        OffsetFetchResponsePartition(
                            partition_index=i, committed_offset=-1, error_code=answer.error_code
                        )
                        for i in t.partition_indexes
                    ],
                )
                for t in req.topics or []
            ]
        return OffsetFetchResponse(topics=topics_out, error_code=answer.error_code)

    def _fetch_group(
        self, node_id: int, version: int, req: OffsetFetchRequestGroup, stable: bool
    ) -> OffsetFetchResponseGroup:
        out = OffsetFetchResponseGroup(group_id=req.group_id)
        if not req.group_id:
            out.error_code = E.INVALID_GROUP_ID
            return out
        if problem := self._route(node_id, req.group_id):
            out.error_code = problem
            return out
        group = self._group(req.group_id)
        member_id = req.member_id if version >= 9 else None
        member_epoch = req.member_epoch if version >= 9 else -1
        if isinstance(group, ConsumerGroup) and (member_id is not None or member_epoch >= 0):
            member = group.members.get(member_id or "")
            if member is None:
                out.error_code = E.UNKNOWN_MEMBER_ID
                return out
            if member.member_epoch != member_epoch:
                out.error_code = E.STALE_MEMBER_EPOCH
                return out
        offsets = self.cluster.offsets.get(req.group_id, {}) if group is not None else {}
        pending = set(self._pending_txn_offsets(req.group_id)) if stable else set()
        by_id = version >= 10

        def partition(name: str, index: int) -> OffsetFetchResponsePartitions:
            if (name, index) in pending:
                return OffsetFetchResponsePartitions(
                    partition_index=index,
                    committed_offset=-1,
                    metadata="",
                    error_code=E.code("UNSTABLE_OFFSET_COMMIT"),
                )
            committed = offsets.get((name, index))
            if committed is None:
                return OffsetFetchResponsePartitions(
                    partition_index=index, committed_offset=-1, metadata=""
                )
            offset, leader_epoch, metadata = committed
            return OffsetFetchResponsePartitions(
                partition_index=index,
                committed_offset=offset,
                committed_leader_epoch=leader_epoch,
                metadata=metadata if metadata is not None else "",
            )

        if req.topics is None:
            by_topic: dict[str, list[int]] = {}
            for name, index in sorted(offsets):
                by_topic.setdefault(name, []).append(index)
            for name, indexes in by_topic.items():
                topic = self.cluster.topics.get(name)
                if by_id and topic is None:
                    continue  # no id to name it by
                out.topics.append(
                    OffsetFetchResponseTopics(
                        name=name,
                        topic_id=topic.topic_id if topic is not None else _UUID_ZERO,
                        partitions=[partition(name, i) for i in indexes],
                    )
                )
            return out
        for t in req.topics:
            found = self.cluster.topic_by_id(t.topic_id) if by_id else None
            name = found.name if found is not None else t.name
            answer = OffsetFetchResponseTopics(name=t.name, topic_id=t.topic_id)
            if by_id and found is None:
                answer.partitions = [
                    OffsetFetchResponsePartitions(
                        partition_index=i, committed_offset=-1, error_code=E.UNKNOWN_TOPIC_ID
                    )
                    for i in t.partition_indexes
                ]
            else:
                answer.partitions = [partition(name, i) for i in t.partition_indexes]
            out.topics.append(answer)
        return out

    def _offset_delete(self, node_id: int, req: OffsetDeleteRequest) -> OffsetDeleteResponse:
        if not req.group_id:
            return OffsetDeleteResponse(error_code=E.INVALID_GROUP_ID)
        if problem := self._route(node_id, req.group_id):
            return OffsetDeleteResponse(error_code=problem)
        group = self._group(req.group_id)
        if group is None:
            return OffsetDeleteResponse(error_code=E.GROUP_ID_NOT_FOUND)
        if (
            isinstance(group, ClassicGroup)
            and not group.is_empty()
            and group.protocol_type != "consumer"
        ):
            return OffsetDeleteResponse(error_code=E.NON_EMPTY_GROUP)
        offsets = self.cluster.offsets.get(req.group_id, {})
        response = OffsetDeleteResponse()
        for t in req.topics:
            topic = self.cluster.topics.get(t.name)
            if isinstance(group, ClassicGroup):
                subscribed = group.is_subscribed_to(t.name)
            else:
                subscribed = any(
                    t.name in self._subscribed_topics(m) for m in group.members.values()
                )
            out = OffsetDeleteResponseTopic(name=t.name)
            response.topics.append(out)
            for p in t.partitions:
                answer = OffsetDeleteResponsePartition(partition_index=p.partition_index)
                out.partitions.append(answer)
                if topic is None or not 0 <= p.partition_index < len(topic.partitions):
                    answer.error_code = E.UNKNOWN_TOPIC_OR_PARTITION
                elif subscribed:
                    answer.error_code = E.code("GROUP_SUBSCRIBED_TO_TOPIC")
                else:
                    offsets.pop((t.name, p.partition_index), None)
        return response

    # ---- DescribeGroups / ListGroups / DeleteGroups / ConsumerGroupDescribe ---------------

    def _describe_groups(
        self, node_id: int, version: int, req: DescribeGroupsRequest
    ) -> DescribeGroupsResponse:
        response = DescribeGroupsResponse()
        for gid in req.groups:
            out = DescribedGroup(group_id=gid)
            response.groups.append(out)
            if not gid:
                out.error_code = E.INVALID_GROUP_ID
                continue
            if problem := self._route(node_id, gid):
                out.error_code = problem
                continue
            group = self._group(gid)
            if not isinstance(group, ClassicGroup):
                out.group_state = "Dead"
                if version >= 6:  # KIP-1043
                    out.error_code = E.GROUP_ID_NOT_FOUND
                    out.error_message = (
                        f"Group {gid} not found."
                        if group is None
                        else f"Group {gid} is not a classic group."
                    )
                continue
            out.group_state = group.state.value
            out.protocol_type = group.protocol_type or ""
            stable = group.state is ClassicState.STABLE
            if stable:
                out.protocol_data = group.protocol_name or ""
            for m in group.members.values():
                out.members.append(
                    DescribedGroupMember(
                        member_id=m.member_id,
                        group_instance_id=m.instance_id,
                        client_host=_CLIENT_HOST,
                        member_metadata=m.metadata(group.protocol_name or "") if stable else b"",
                        member_assignment=m.assignment if stable else b"",
                    )
                )
        return response

    def _list_groups(
        self, node_id: int, version: int, req: ListGroupsRequest
    ) -> ListGroupsResponse:
        states = {s.strip().lower() for s in req.states_filter} if version >= 4 else set()
        types = {t.strip().lower() for t in req.types_filter} if version >= 5 else set()
        for gid in list(self.cluster.offsets):
            self._group(gid)
        response = ListGroupsResponse()
        for gid, group in sorted(self._groups.items()):
            if self.cluster.coordinator(gid) != node_id:
                continue
            if isinstance(group, ClassicGroup):
                state, kind, protocol_type = group.state.value, "classic", group.protocol_type
            else:
                state, kind, protocol_type = group.state_name(), "consumer", "consumer"
            if (states and state.lower() not in states) or (types and kind not in types):
                continue
            response.groups.append(
                ListedGroup(
                    group_id=gid,
                    protocol_type=protocol_type or "",
                    group_state=state,
                    group_type=kind,
                )
            )
        return response

    def _delete_groups(self, node_id: int, req: DeleteGroupsRequest) -> DeleteGroupsResponse:
        response = DeleteGroupsResponse()
        for gid in req.groups_names:
            out = DeletableGroupResult(group_id=gid)
            response.results.append(out)
            if not gid:
                out.error_code = E.INVALID_GROUP_ID
            elif problem := self._route(node_id, gid):
                out.error_code = problem
            elif (group := self._group(gid)) is None:
                out.error_code = E.GROUP_ID_NOT_FOUND
            elif not group.is_empty():
                out.error_code = E.NON_EMPTY_GROUP
            else:
                del self._groups[gid]
                self.cluster.offsets.pop(gid, None)
                self._timers.cancel_group(gid)
        return response

    def _consumer_group_describe(
        self, node_id: int, req: ConsumerGroupDescribeRequest
    ) -> ConsumerGroupDescribeResponse:
        response = ConsumerGroupDescribeResponse()
        for gid in req.group_ids:
            out = DescribedConsumerGroup(group_id=gid)
            response.groups.append(out)
            if not gid:
                out.error_code = E.INVALID_GROUP_ID
                continue
            if problem := self._route(node_id, gid):
                out.error_code = problem
                continue
            group = self._group(gid)
            if not isinstance(group, ConsumerGroup):
                out.error_code = E.GROUP_ID_NOT_FOUND
                out.error_message = (
                    f"Group {gid} not found."
                    if group is None
                    else f"Group {gid} is not a consumer group."
                )
                continue
            out.group_state = group.state_name()
            out.group_epoch = group.group_epoch
            out.assignment_epoch = group.assignment_epoch
            out.assignor_name = group.assignor()
            for m in group.members.values():
                out.members.append(
                    DescribedMember(
                        member_id=m.member_id,
                        instance_id=m.instance_id,
                        rack_id=m.rack_id,
                        member_epoch=m.member_epoch,
                        client_host=_CLIENT_HOST,
                        subscribed_topic_names=list(m.subscribed_names),
                        subscribed_topic_regex=m.subscribed_regex,
                        assignment=self._described(m.assigned),
                        target_assignment=self._described(group.target.get(m.member_id, {})),
                        member_type=MEMBER_TYPE_CONSUMER,
                    )
                )
        return response

    def _described(self, partitions: Partitions) -> DescribedAssignment:
        out: list[DescribedTopicPartitions] = []
        for tp in _to_topic_partitions(partitions):
            topic = self.cluster.topic_by_id(tp.topic_id)
            out.append(
                DescribedTopicPartitions(
                    topic_id=tp.topic_id,
                    topic_name=topic.name if topic is not None else "",
                    partitions=tp.partitions,
                )
            )
        return DescribedAssignment(topic_partitions=out)
