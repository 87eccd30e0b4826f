"""Partition assignors of the classic group protocol, and the consumer protocol encoding.

The group leader runs the assignor chosen by the coordinator (the first one every member
supports, in the leader's order of preference) over every member's subscription:

* ``range`` -- per topic, members sorted by id, each takes a contiguous range; the first
  ``partitions % members`` members take one extra (Java's RangeAssignor).
* ``roundrobin`` -- all partitions sorted, dealt to the members in turn, skipping members not
  subscribed to the partition's topic (Java's RoundRobinAssignor).
* ``cooperative-sticky`` -- balanced (counts differ by at most one where subscriptions allow)
  while keeping as many partitions with their current owner as possible; incremental
  (KIP-429): a partition moving from one member to another is *not* given to its new owner
  in the same rebalance. The old owner revokes it, rejoins, and the next rebalance hands it
  over, so no partition is ever owned by two members at once.

Ownership claims come from the subscriptions (``owned_partitions``, v1+) with the
generation they were owned in (v2+); when two members claim one partition the newer
generation wins and the other claim is ignored.

Encoding (``ConsumerProtocolSubscription``/``Assignment``): an int16 version followed by the
body. Newer versions only append fields, so a body of a version above ours is read with our
highest version and the rest ignored.
"""

from __future__ import annotations

import struct
from collections import defaultdict
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
    ConsumerProtocolSubscription,
    ConsumerProtocolSubscriptionTopicPartition,
)

__all__ = [
    "Assignor",
    "CooperativeStickyAssignor",
    "MemberSubscription",
    "RangeAssignor",
    "RoundRobinAssignor",
    "assignor_by_name",
    "decode_assignment",
    "decode_subscription",
    "encode_assignment",
    "encode_subscription",
]

_VERSION = struct.Struct(">h")
SUBSCRIPTION_VERSION = 3
ASSIGNMENT_VERSION = 3


@dataclass(frozen=True, slots=True)
class MemberSubscription:
    """One member's JoinGroup metadata, decoded."""

    member_id: str
    topics: tuple[str, ...]
    owned_partitions: tuple[TopicPartition, ...] = ()
    generation_id: int = -1
    group_instance_id: str | None = None
    rack_id: str | None = None
    user_data: bytes | None = None

    @property
    def sort_key(self) -> tuple[str, str]:
        # Java sorts static members by instance id first: their ids survive restarts, so
        # range assignments stay put across a rolling restart.
        return (self.group_instance_id or "\uffff", self.member_id)


class Assignor(Protocol):
    """What the coordinator needs from an assignor (user-supplied ones included)."""

    name: str
    cooperative: bool

    def assign(
        self, partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        """``partitions``: topic -> partition count; returns member id -> partitions."""
        ...


def _sorted_members(members: Mapping[str, MemberSubscription]) -> list[MemberSubscription]:
    return sorted(members.values(), key=lambda m: m.sort_key)


@dataclass(slots=True)
class RangeAssignor:
    name: str = "range"
    cooperative: bool = False

    def assign(
        self, partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        ordered = _sorted_members(members)
        for topic in sorted(partitions):
            subscribed = [m for m in ordered if topic in m.topics]
            if not subscribed:
                continue
            count = partitions[topic]
            per, extra = divmod(count, len(subscribed))
            start = 0
            for i, m in enumerate(subscribed):
                n = per + (1 if i < extra else 0)
                out[m.member_id].extend(TopicPartition(topic, p) for p in range(start, start + n))
                start += n
        return out


@dataclass(slots=True)
class RoundRobinAssignor:
    name: str = "roundrobin"
    cooperative: bool = False

    def assign(
        self, partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        out: dict[str, list[TopicPartition]] = {m: [] for m in members}
        ordered = _sorted_members(members)
        if not ordered:
            return out
        turn = 0
        for topic in sorted(partitions):
            for p in range(partitions[topic]):
                for _ in range(len(ordered)):
                    m = ordered[turn % len(ordered)]
                    turn += 1
                    if topic in m.topics:
                        out[m.member_id].append(TopicPartition(topic, p))
                        break
        return out


@dataclass(slots=True)
class CooperativeStickyAssignor:
    name: str = "cooperative-sticky"
    cooperative: bool = True
    #: Partitions that this round takes from one member for another (for tests/logs).
    last_transfers: dict[TopicPartition, tuple[str, str]] = field(default_factory=dict)

    def assign(
        self, partitions: Mapping[str, int], members: Mapping[str, MemberSubscription]
    ) -> dict[str, list[TopicPartition]]:
        all_parts = [TopicPartition(t, p) for t in sorted(partitions) for p in range(partitions[t])]
        valid = set(all_parts)
        eligible: dict[TopicPartition, list[str]] = defaultdict(list)
        ordered = _sorted_members(members)
        for m in ordered:
            for tp in all_parts:
                if tp.topic in m.topics:
                    eligible[tp].append(m.member_id)
        previous = _previous_owners(members, valid)
        owner: dict[TopicPartition, str] = dict(previous)
        counts: dict[str, int] = {m.member_id: 0 for m in ordered}
        for member_id in owner.values():
            counts[member_id] += 1
        # Unowned partitions go to the least loaded eligible member.
        for tp in all_parts:
            if tp in owner or not eligible[tp]:
                continue
            target = min(eligible[tp], key=lambda m: (counts[m], m))
            owner[tp] = target
            counts[target] += 1
        # Balance: move a partition from a member holding at least two more than an
        # eligible other, preferring partitions that were not previously owned there
        # (stickiness: previously owned partitions move last).
        moved = True
        while moved:
            moved = False
            for tp in sorted(owner, key=lambda t: (t in previous, t)):
                src = owner[tp]
                candidates = [m for m in eligible[tp] if counts[m] < counts[src] - 1]
                if not candidates:
                    continue
                dst = min(candidates, key=lambda m: (counts[m], m))
                owner[tp] = dst
                counts[src] -= 1
                counts[dst] += 1
                moved = True
        # KIP-429: a partition changing hands is withheld this round; its old owner
        # revokes it and the follow-up rebalance assigns it.
        self.last_transfers = {}
        out: dict[str, list[TopicPartition]] = {m.member_id: [] for m in ordered}
        for tp in all_parts:
            new = owner.get(tp)
            if new is None:
                continue
            old = previous.get(tp)
            if old is not None and old != new:
                self.last_transfers[tp] = (old, new)
                continue
            out[new].append(tp)
        return out


def _previous_owners(
    members: Mapping[str, MemberSubscription], valid: set[TopicPartition]
) -> dict[TopicPartition, str]:
    """Owner per partition from the members' claims; the newest generation wins."""
    best: dict[TopicPartition, tuple[int, str]] = {}
    for m in members.values():
        for tp in m.owned_partitions:
            if tp not in valid or tp.topic not in m.topics:
                continue
            claim = (m.generation_id, m.member_id)
            held = best.get(tp)
            if held is None or claim[0] > held[0]:
                best[tp] = claim
    return {tp: member for tp, (_, member) in best.items()}


_BY_NAME: dict[str, type[Any]] = {
    "range": RangeAssignor,
    "roundrobin": RoundRobinAssignor,
    "cooperative-sticky": CooperativeStickyAssignor,
}


def assignor_by_name(name_or_assignor: Any) -> Assignor:
    if isinstance(name_or_assignor, str):
        assignor: Assignor = _BY_NAME[name_or_assignor]()
        return assignor
    return name_or_assignor  # type: ignore[no-any-return]


# --------------------------------------------------------------------------- encoding


def _grouped(partitions: Iterable[TopicPartition]) -> dict[str, list[int]]:
    by_topic: dict[str, list[int]] = defaultdict(list)
    for tp in sorted(partitions):
        by_topic[tp.topic].append(tp.partition)
    return by_topic


def encode_subscription(
    topics: Iterable[str],
    owned: Iterable[TopicPartition] = (),
    generation_id: int = -1,
    rack_id: str | None = None,
    user_data: bytes | None = None,
) -> bytes:
    message = ConsumerProtocolSubscription(
        topics=sorted(topics),
        user_data=user_data,
        owned_partitions=[
            ConsumerProtocolSubscriptionTopicPartition(topic=t, partitions=ps)
            for t, ps in _grouped(owned).items()
        ],
        generation_id=generation_id,
        rack_id=rack_id or None,
    )
    return _VERSION.pack(SUBSCRIPTION_VERSION) + message.encode(SUBSCRIPTION_VERSION)


def _split_version(data: bytes, max_version: int) -> tuple[int, memoryview]:
    if len(data) < 2:
        raise ValueError("consumer protocol data shorter than its version")
    (version,) = _VERSION.unpack_from(data)
    if version < 0:
        raise ValueError(f"bad consumer protocol version {version}")
    return min(version, max_version), memoryview(data)[2:]


def decode_subscription(
    member_id: str, data: bytes, group_instance_id: str | None = None
) -> MemberSubscription:
    version, body = _split_version(data, ConsumerProtocolSubscription.MAX_VERSION)
    m = ConsumerProtocolSubscription.decode(body, version)
    owned = tuple(TopicPartition(t.topic, p) for t in m.owned_partitions for p in t.partitions)
    return MemberSubscription(
        member_id=member_id,
        topics=tuple(m.topics),
        owned_partitions=owned,
        generation_id=m.generation_id,
        group_instance_id=group_instance_id,
        rack_id=m.rack_id,
        user_data=m.user_data,
    )


def encode_assignment(
    partitions: Iterable[TopicPartition], user_data: bytes | None = None
) -> bytes:
    message = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(topic=t, partitions=ps)
            for t, ps in _grouped(partitions).items()
        ],
        user_data=user_data,
    )
    return _VERSION.pack(ASSIGNMENT_VERSION) + message.encode(ASSIGNMENT_VERSION)


def decode_assignment(data: bytes) -> list[TopicPartition]:
    if not data:  # a member the leader left out (e.g. no subscribed topic exists)
        return []
    version, body = _split_version(data, ConsumerProtocolAssignment.MAX_VERSION)
    m = ConsumerProtocolAssignment.decode(body, version)
    return [TopicPartition(t.topic, p) for t in m.assigned_partitions for p in t.partitions]
