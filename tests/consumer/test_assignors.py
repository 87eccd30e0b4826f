"""Assignors (range, round-robin, cooperative-sticky) and the consumer protocol encoding."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka_ng.consumer.assignors import (
    CooperativeStickyAssignor,
    MemberSubscription,
    RangeAssignor,
    RoundRobinAssignor,
    decode_assignment,
    decode_subscription,
    encode_assignment,
    encode_subscription,
)
from aiokafka_ng.consumer.models import TopicPartition as TP
from aiokafka_ng.protocol.messages.consumer_protocol import ConsumerProtocolSubscription


def members(*specs: tuple[str, tuple[str, ...]]) -> dict[str, MemberSubscription]:
    return {m: MemberSubscription(m, topics) for m, topics in specs}


def test_range_per_topic_contiguous_ranges() -> None:
    result = RangeAssignor().assign(
        {"t": 4, "u": 3}, members(("m2", ("t", "u")), ("m1", ("t", "u")))
    )
    assert result == {
        "m1": [TP("t", 0), TP("t", 1), TP("u", 0), TP("u", 1)],
        "m2": [TP("t", 2), TP("t", 3), TP("u", 2)],
    }


def test_range_respects_subscriptions_and_static_ids() -> None:
    subs = {
        "a": MemberSubscription("a", ("t",), group_instance_id="z"),
        "b": MemberSubscription("b", ("t",), group_instance_id="y"),
        "c": MemberSubscription("c", ("u",)),
    }
    result = RangeAssignor().assign({"t": 3, "u": 1}, subs)
    # Static members sort by instance id: "y" (b) before "z" (a).
    assert result == {"b": [TP("t", 0), TP("t", 1)], "a": [TP("t", 2)], "c": [TP("u", 0)]}


def test_round_robin_deals_in_turn_skipping_unsubscribed() -> None:
    result = RoundRobinAssignor().assign(
        {"t": 5}, members(("m1", ("t",)), ("m2", ("t",)), ("m3", ("t",)))
    )
    assert result == {
        "m1": [TP("t", 0), TP("t", 3)],
        "m2": [TP("t", 1), TP("t", 4)],
        "m3": [TP("t", 2)],
    }
    result = RoundRobinAssignor().assign(
        {"t": 2, "u": 2}, members(("m1", ("t", "u")), ("m2", ("u",)))
    )
    assert sorted(result["m1"]) == [TP("t", 0), TP("t", 1), TP("u", 1)]
    assert result["m2"] == [TP("u", 0)]


# --------------------------------------------------------------------------- cooperative


class Group:
    """Members running the cooperative protocol against the assignor, round by round."""

    def __init__(self, topics: dict[str, int]) -> None:
        self.topics = topics
        self.owned: dict[str, set[TP]] = {}
        self.subs: dict[str, tuple[str, ...]] = {}
        self.generation = 0
        self.assignor = CooperativeStickyAssignor()

    def rebalance(self) -> int:
        """Rebalance until no member revokes; returns the number of rounds."""
        rounds = 0
        while True:
            rounds += 1
            self.generation += 1
            subs = {
                m: MemberSubscription(m, t, tuple(sorted(self.owned[m])), self.generation - 1)
                for m, t in self.subs.items()
            }
            result = self.assignor.assign(self.topics, subs)
            revoked_any = False
            for m, assigned in result.items():
                new = set(assigned)
                # Never hand a member a partition another member still owns.
                for other, owned in self.owned.items():
                    if other != m:
                        assert not (new - self.owned[m]) & owned, (m, other, new, owned)
                revoked_any |= bool(self.owned[m] - new)
                self.owned[m] = new
            self.check_no_double_ownership()
            if not revoked_any:
                return rounds

    def check_no_double_ownership(self) -> None:
        seen: set[TP] = set()
        for owned in self.owned.values():
            assert not owned & seen
            seen |= owned

    def join(self, member: str, topics: tuple[str, ...]) -> None:
        self.subs[member] = topics
        self.owned[member] = set()

    def leave(self, member: str) -> None:
        del self.subs[member]
        del self.owned[member]


def test_cooperative_sticky_join_moves_only_what_balance_needs() -> None:
    g = Group({"t": 6})
    g.join("a", ("t",))
    assert g.rebalance() == 1
    assert len(g.owned["a"]) == 6
    g.join("b", ("t",))
    before = set(g.owned["a"])
    assert g.rebalance() == 2  # revoke round, then hand-over round
    assert len(g.owned["a"]) == 3 and len(g.owned["b"]) == 3
    assert g.owned["a"] <= before
    kept_a, kept_b = set(g.owned["a"]), set(g.owned["b"])
    g.join("c", ("t",))
    g.rebalance()
    assert {len(o) for o in g.owned.values()} == {2}
    # Sticky: a and b each gave up exactly one partition.
    assert len(g.owned["a"] & kept_a) == 2 and len(g.owned["b"] & kept_b) == 2
    g.leave("b")
    kept = {m: set(o) for m, o in g.owned.items()}
    assert g.rebalance() == 1  # nothing to revoke when a member leaves
    assert all(kept[m] <= g.owned[m] for m in kept)
    assert sorted(len(o) for o in g.owned.values()) == [3, 3]


def test_cooperative_sticky_stale_claims_lose() -> None:
    subs = {
        "a": MemberSubscription("a", ("t",), (TP("t", 0), TP("t", 1)), generation_id=5),
        "b": MemberSubscription("b", ("t",), (TP("t", 0),), generation_id=3),
    }
    result = CooperativeStickyAssignor().assign({"t": 2}, subs)
    # a's claim is newer; balance moves one partition to b, withheld for this round.
    assert result["a"] in ([TP("t", 0)], [TP("t", 1)])
    assert result["b"] == []


@settings(max_examples=100, deadline=None)
@given(
    counts=st.lists(st.integers(1, 6), min_size=1, max_size=3),
    ops=st.lists(st.tuples(st.booleans(), st.integers(0, 4), st.integers(0, 7)), max_size=8),
)
def test_cooperative_sticky_random_membership(
    counts: list[int], ops: list[tuple[bool, int, int]]
) -> None:
    topics = {f"t{i}": n for i, n in enumerate(counts)}
    names = sorted(topics)
    g = Group(topics)
    for join, who, mask in ops:
        member = f"m{who}"
        if join and member not in g.subs:
            chosen = tuple(t for i, t in enumerate(names) if mask & (1 << i)) or (names[0],)
            g.join(member, chosen)
        elif not join and member in g.subs:
            g.leave(member)
        else:
            continue
        assert g.rebalance() <= 3
        # Everything subscribed is owned once the group settles.
        wanted = {
            TP(t, p)
            for t in names
            if any(t in s for s in g.subs.values())
            for p in range(topics[t])
        }
        owned = set().union(*g.owned.values()) if g.owned else set()
        assert owned == wanted
        # Members with identical subscriptions are balanced within one partition.
        by_subs: dict[tuple[str, ...], list[int]] = {}
        for m, s in g.subs.items():
            by_subs.setdefault(s, []).append(len(g.owned[m]))
        if len(by_subs) == 1:
            sizes = next(iter(by_subs.values()))
            assert max(sizes) - min(sizes) <= 1


# --------------------------------------------------------------------------- encoding


def test_subscription_round_trip() -> None:
    data = encode_subscription(["b", "a"], {TP("a", 1), TP("a", 0)}, 7, "rack-1")
    m = decode_subscription("m", data, "inst")
    assert m.topics == ("a", "b")
    assert m.owned_partitions == (TP("a", 0), TP("a", 1))
    assert (m.generation_id, m.rack_id, m.group_instance_id) == (7, "rack-1", "inst")


def test_subscription_from_future_version_and_v0() -> None:
    body = ConsumerProtocolSubscription(topics=["x"], generation_id=2).encode(3)
    m = decode_subscription("m", struct.pack(">h", 9) + body + b"future fields")
    assert m.topics == ("x",) and m.generation_id == 2
    v0 = struct.pack(">h", 0) + ConsumerProtocolSubscription(topics=["y"]).encode(0)
    m = decode_subscription("m", v0)
    assert m.topics == ("y",) and m.owned_partitions == () and m.generation_id == -1


def test_assignment_round_trip() -> None:
    tps = [TP("b", 2), TP("a", 0), TP("a", 3)]
    assert decode_assignment(encode_assignment(tps)) == sorted(tps)
    assert decode_assignment(b"") == []


def test_encoding_interoperates_with_aiokafka() -> None:
    # Mixed groups: aiokafka members read our metadata/assignments and we read theirs.
    from aiokafka.coordinator.protocol import (
        ConsumerProtocolMemberAssignment,
        ConsumerProtocolMemberMetadata,
    )

    theirs = ConsumerProtocolMemberMetadata.decode(encode_subscription(["t", "u"], {TP("t", 0)}))
    assert theirs.subscription == ["t", "u"]
    assignment = ConsumerProtocolMemberAssignment.decode(encode_assignment([TP("t", 2)]))
    assert assignment.assignment == [("t", [2])]
    raw = ConsumerProtocolMemberAssignment(0, [("t", [1, 3])], b"").encode()
    assert decode_assignment(raw) == [TP("t", 1), TP("t", 3)]
    ours = decode_subscription("m", ConsumerProtocolMemberMetadata(0, ["x"], b"").encode())
    assert ours.topics == ("x",) and ours.owned_partitions == ()
