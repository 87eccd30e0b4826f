"""KIP-848 consumer groups (``group_protocol="consumer"``) on Apache Kafka 4.4.

The broker computes the assignment; these tests check what a member does with it: split a
topic, hand over only what moves when a member joins or leaves, commit with the member
epoch, and follow a server-side regex to a topic created after subscribing.
"""

from __future__ import annotations

from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import NewTopic
from aiokafka_ng.consumer.membership import ConsumerRebalanceListener
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, new_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.calls: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.calls.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.calls.append(("assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.calls.append(("lost", frozenset(lost)))

    def revoked(self, since: int = 0) -> set[TopicPartition]:
        return {tp for kind, tps in self.calls[since:] if kind in ("revoked", "lost") for tp in tps}


def member(cluster: KafkaCluster, group: str, **config: Any) -> Consumer:
    return Consumer(
        bootstrap_servers=cluster.bootstrap_servers,
        group_id=group,
        group_protocol="consumer",
        auto_offset_reset="earliest",
        **config,
    )


async def until_split(consumers: list[Consumer], partitions: int, limit: float = 60) -> None:
    """Until the members' assignments are disjoint, even and cover every partition (the
    broker's uniform assignor balances them; partitions move one release at a time)."""
    share = partitions // len(consumers)
    with anyio.fail_after(limit):
        while True:
            sets = [c.assignment() for c in consumers]
            union = set().union(*sets)
            if len(union) == partitions and all(len(s) == share for s in sets):
                return
            await anyio.sleep(0.05)  # polling shared state; each member settles on its own


async def test_members_split_then_only_moved_partitions_are_revoked(
    kafka_cluster: KafkaCluster,
) -> None:
    async with new_topic(kafka_cluster, partitions=6) as topic, AsyncExitStack() as stack:
        group = unique("g848")
        listeners = [Recorder() for _ in range(3)]
        consumers = [member(kafka_cluster, group) for _ in range(3)]
        for c, listener in zip(consumers[:2], listeners, strict=False):
            await stack.enter_async_context(c)
            c.subscribe([topic], listener=listener)
        await until_split(consumers[:2], 6)
        before = [c.assignment() for c in consumers[:2]]
        marks = [len(listener.calls) for listener in listeners[:2]]
        assert all(len(a) == 3 for a in before)
        assert (consumers[0].statistics().generation or 0) > 0  # the member epoch

        await stack.enter_async_context(consumers[2])
        consumers[2].subscribe([topic], listener=listeners[2])
        await until_split(consumers, 6)
        after = [c.assignment() for c in consumers]
        assert all(len(a) == 2 for a in after)
        for old, new, listener, mark in zip(before, after, listeners, marks, strict=False):
            # Only what moved to the third member was revoked; what stays was never touched.
            assert listener.revoked(mark) == set(old - new)
            assert all(kind == "revoked" for kind, _ in listener.calls[mark:])
            assert new <= old
        # The newcomer gets each partition as its owner releases it (KIP-848: no barrier).
        assert {kind for kind, _ in listeners[2].calls} == {"assigned"}
        assert set().union(*(tps for _, tps in listeners[2].calls)) == after[2]
        mark = len(listeners[2].calls)

        # The third leaves (epoch -1): its partitions go back to the first two.
        await consumers[2].stop()
        await until_split(consumers[:2], 6)
        assert listeners[2].calls[mark:] == [("revoked", after[2])]
        regained = set().union(*(c.assignment() for c in consumers[:2])) & after[2]
        assert regained == after[2]


async def test_commit_with_member_epoch_is_read_back(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, partitions=2) as topic:
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i in range(10):
                await producer.send_and_wait(topic, b"v%d" % i, partition=i % 2)
        group = unique("g848")
        async with member(kafka_cluster, group, enable_auto_commit=False) as consumer:
            consumer.subscribe([topic])
            got = 0
            with anyio.fail_after(60):
                while got < 10:
                    got += sum(map(len, (await consumer.getmany(timeout_ms=500)).values()))
            epoch = consumer.statistics().generation
            assert epoch is not None and epoch > 0
            assert consumer.group_metadata().generation_id == epoch
            await consumer.commit()  # OffsetCommit v9 with member id and epoch
            for p in range(2):
                assert await consumer.committed(TopicPartition(topic, p)) == 5
        # And as seen from outside the member, after it left.
        async with admin_for(kafka_cluster) as admin:
            offsets = await admin.list_consumer_group_offsets(group)
        assert {tp.partition: om.offset for tp, om in offsets.items()} == {0: 5, 1: 5}


async def test_regex_subscription_picks_up_a_later_topic(kafka_cluster: KafkaCluster) -> None:
    prefix = "rx" + unique("t").replace("-", "")
    async with member(kafka_cluster, unique("g848")) as consumer:
        # Evaluated by the broker (RE2J), not here: no Metadata listing on the client.
        consumer.subscribe(pattern=prefix + ".*")
        async with admin_for(kafka_cluster) as admin:
            name = prefix + "late"
            (await admin.create_topics([NewTopic(name, 2, 3)])).raise_on_error()
            try:
                with anyio.fail_after(60):
                    while len(consumer.assignment()) < 2:
                        await consumer.getmany(timeout_ms=200)
                assert consumer.assignment() == {TopicPartition(name, 0), TopicPartition(name, 1)}
                assert consumer.subscription() == {name}
            finally:
                await admin.delete_topics([name])


async def test_static_member_returns_to_its_partitions(kafka_cluster: KafkaCluster) -> None:
    """A static member leaves with epoch -2: the broker keeps its partitions for it, so the
    same group_instance_id coming back gets them again and the other member keeps its own
    without a revocation."""
    async with new_topic(kafka_cluster, partitions=6) as topic:
        group = unique("g848")
        stay_listener = Recorder()
        async with member(kafka_cluster, group, group_instance_id="stay") as stay:
            stay.subscribe([topic], listener=stay_listener)
            async with member(kafka_cluster, group, group_instance_id="back") as first:
                first.subscribe([topic])
                await until_split([stay, first], 6)
                held = first.assignment()
                mark = len(stay_listener.calls)
            async with member(kafka_cluster, group, group_instance_id="back") as again:
                again.subscribe([topic])
                with anyio.fail_after(60):
                    while again.assignment() != held:
                        await again.getmany(timeout_ms=100)
                assert stay_listener.calls[mark:] == []


@pytest.mark.parametrize("strategy", ["cooperative-sticky", "range"])
async def test_classic_group_upgraded_online_by_a_consumer_member(
    kafka_cluster: KafkaCluster, strategy: str
) -> None:
    """A classic member of ours is in the group; a consumer-protocol member joins and the
    broker converts the group online (KIP-848 migration, group.consumer.migration.policy's
    default): the two split the topic. The classic member may be cooperative or eager
    (range: it gives up everything at each rebalance and rejoins)."""
    async with new_topic(kafka_cluster, partitions=6) as topic:
        group = unique("g848")
        classic = Consumer(
            bootstrap_servers=kafka_cluster.bootstrap_servers,
            group_id=group,
            partition_assignment_strategy=[strategy],
        )
        async with classic, member(kafka_cluster, group) as new, anyio.create_task_group() as tg:
            classic.subscribe([topic])

            async def poll() -> None:
                while True:
                    await classic.getmany(timeout_ms=100)

            tg.start_soon(poll)
            await until_split([classic], 6)
            new.subscribe([topic])
            await until_split([classic, new], 6, limit=90)
            tg.cancel_scope.cancel()


# A fenced member is a race on a real cluster (the coordinator moved on from the epoch the
# member heartbeats with). Its timing cannot be arranged from outside, so the test moves the
# member's own epoch by hand and lets the real broker answer: what it answers, and what the
# member does next, is the behaviour under test.


async def _member_with_records(
    cluster: KafkaCluster, topic: str, group: str, listener: Recorder, **config: Any
) -> Consumer:
    consumer = member(cluster, group, **config)
    await consumer.start()
    consumer.subscribe([topic], listener=listener)
    got = 0
    with anyio.fail_after(60):
        while got < 10:
            got += sum(map(len, (await consumer.getmany(timeout_ms=500)).values()))
    return consumer


async def test_a_stale_member_epoch_commit_is_retried_after_the_next_heartbeat(
    kafka_cluster: KafkaCluster, caplog: pytest.LogCaptureFixture
) -> None:
    async with new_topic(kafka_cluster, partitions=2) as topic:
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i in range(10):
                await producer.send_and_wait(topic, b"v%d" % i, partition=i % 2)
        consumer = await _member_with_records(
            kafka_cluster, topic, unique("g848"), Recorder(), enable_auto_commit=False
        )
        try:
            group = consumer._group
            assert group is not None
            offsets = group.offsets
            real_commit = offsets.commit
            sent: list[int] = []

            # The race Kafka cannot be made to lose on demand: a commit that left with the
            # epoch the member had just before a heartbeat answer moved it. The first two
            # commits go out one epoch behind (the broker's real STALE_MEMBER_EPOCH answers
            # them); the member keeps retrying after each heartbeat until the deadline, and
            # the last retry carries the member's epoch as the heartbeat left it.
            async def commit(*args: Any, **kwargs: Any) -> None:
                if len(sent) < 2:
                    kwargs["generation"] -= 1
                sent.append(kwargs["generation"])
                await real_commit(*args, **kwargs)

            offsets.commit = commit  # type: ignore[method-assign]
            with caplog.at_level("INFO", logger="aiokafka_ng"):
                await consumer.commit()
            assert len(sent) == 3 and sent[2] == group.generation > sent[0] == sent[1]
            assert any("STALE_MEMBER_EPOCH" in r.getMessage() for r in caplog.records)
            for p in range(2):
                committed = await consumer.committed(TopicPartition(topic, p))
                assert committed == 5
        finally:
            await consumer.stop()


async def test_fenced_member_loses_its_partitions_and_rejoins(
    kafka_cluster: KafkaCluster,
) -> None:
    async with new_topic(kafka_cluster, partitions=2) as topic:
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i in range(10):
                await producer.send_and_wait(topic, b"v%d" % i, partition=i % 2)
        listener = Recorder()
        # Auto-commit on (with an interval beyond the test): a revocation would commit the
        # positions, a loss must not.
        consumer = await _member_with_records(
            kafka_cluster, topic, unique("g848"), listener, auto_commit_interval_ms=600_000
        )
        try:
            group = consumer._group
            assert group is not None
            everything = {TopicPartition(topic, p) for p in range(2)}
            assert consumer.assignment() == everything
            member_id, epoch = group.member_id, group.generation
            calls = len(listener.calls)
            # An epoch the coordinator never gave: its next heartbeat is FENCED_MEMBER_EPOCH.
            group.generation = epoch + 5
            group.request_rejoin()  # heartbeat now rather than at the broker's interval
            with anyio.fail_after(60):
                while ("lost", frozenset(everything)) not in listener.calls[calls:] or (
                    consumer.assignment() != everything
                ):
                    await consumer.getmany(timeout_ms=200)
            # Lost (not revoked: nothing committed for it), then assigned again to the same
            # member id (rejoining with epoch 0; Kafka gives back the group's current epoch).
            kinds = [kind for kind, _ in listener.calls[calls:]]
            assert kinds[:2] == ["lost", "assigned"] and "revoked" not in kinds
            assert group.member_id == member_id and group.generation > 0
            # Nothing was committed on the way: the lost partitions were not the member's.
            for p in range(2):
                assert await consumer.committed(TopicPartition(topic, p)) is None
        finally:
            await consumer.stop()
