"""The share consumer against Apache Kafka 4.4, continued: changing the subscription of a
running member, the acknowledgement callback, and acquisition lock renewal (KIP-1222).

Groups, producing and the consumers come from test_kafka_share (every group reads from
the earliest offset; one record per batch).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng import AcknowledgeType, ShareConsumer, ShareRecord, TopicPartition
from aiokafka_ng.admin import NewTopic
from aiokafka_ng.errors import IllegalStateError, InvalidRecordStateError, KafkaError
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic, unique
from tests.kafka.test_kafka_share import consumers, poll_until, produce, share_group

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

Outcome = tuple[dict[TopicPartition, frozenset[int]], KafkaError | None]


def recorder() -> tuple[list[Outcome], Any]:
    seen: list[Outcome] = []

    def callback(offsets: dict[TopicPartition, frozenset[int]], error: KafkaError | None) -> None:
        seen.append((offsets, error))

    return seen, callback


async def poll_accepting(
    consumer: ShareConsumer, done: Any, within: float = 30
) -> list[ShareRecord[Any, Any]]:
    """Explicit mode: poll, accepting every record, until ``done(records so far)``."""
    got: list[ShareRecord[Any, Any]] = []
    with anyio.fail_after(within):
        while not done(got):
            batch = await consumer.poll(timeout_ms=500)
            for record in batch:
                consumer.acknowledge(record)
            got += batch
    return got


async def test_subscribe_while_running_moves_to_the_new_topics(
    kafka_cluster: KafkaCluster,
) -> None:
    seen, callback = recorder()
    async with new_topic(kafka_cluster, 1, 3) as ta, new_topic(kafka_cluster, 1, 3) as tb:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, ta, [b"a0", b"a1"])
        async with (
            consumers(
                kafka_cluster, ta, group,
                acknowledgement_mode="explicit", acknowledgement_callback=callback,
            ) as [c],
            admin_for(kafka_cluster) as admin,
        ):  # fmt: skip
            held = await poll_until(c, lambda got: len(got) == 2)
            c.acknowledge(held[0])  # ACCEPT: pending when the subscription changes
            c.acknowledge(held[1], AcknowledgeType.RELEASE)
            c.subscribe([tb])
            assert c.subscription() == {tb}
            await produce(kafka_cluster, tb, [b"b0"])
            await produce(kafka_cluster, ta, [b"a2"])
            after = await poll_accepting(c, lambda got: any(r.value == b"b0" for r in got))
            # The heartbeat carried the new subscription: the broker assigns tb only.
            desc = await eventually(
                lambda: admin.describe_share_groups([group]),
                lambda d: (
                    [m.subscribed_topics for m in d.result(group).members] == [[tb]]
                    and [m.assignment for m in d.result(group).members] == [[TopicPartition(tb, 0)]]
                ),
            )
            # This poll carries b0's acceptance, and still returns nothing of ta.
            assert await c.poll(timeout_ms=500) == []
            assert await c.commit() == {}  # everything rode on the fetches
        # Another member reading ta finds a1 (released, delivered again) and a2, not a0.
        async with consumers(kafka_cluster, ta, group) as [other]:
            rest = await poll_until(other, lambda got: {b"a1", b"a2"} <= {r.value for r in got})
    assert {r.topic for r in after} == {tb} and [r.value for r in after] == [b"b0"]
    [member] = desc.result(group).members
    assert member.member_id == c.member_id
    tpa = TopicPartition(ta, 0)
    assert ({tpa: frozenset({0, 1})}, None) in seen  # the pending ones were sent, and taken
    assert sorted((r.value, r.delivery_count) for r in rest) == [(b"a1", 2), (b"a2", 1)]


@asynccontextmanager
async def topics_led_by_one_broker(cluster: KafkaCluster, n: int) -> AsyncIterator[list[str]]:
    """``n`` one-partition topics whose preferred leader is the same broker, so one share
    session holds them all."""
    names = [unique("k") for _ in range(n)]
    leader = cluster.brokers[0].node_id
    replicas = [leader] + [node.node_id for node in cluster.brokers[1:]]
    async with admin_for(cluster) as admin:
        created = await admin.create_topics(
            [NewTopic(name, replica_assignments={0: replicas}) for name in names]
        )
        created.raise_on_error()
        await eventually(
            lambda: admin.describe_topics(names), lambda r: set(names) <= set(r.succeeded)
        )
        try:
            yield names
        finally:
            await admin.delete_topics(names)


async def test_a_partition_left_behind_is_forgotten_with_its_acknowledgements(
    kafka_cluster: KafkaCluster,
) -> None:
    # Both topics in one share session: after subscribe([tb]) the next ShareFetch names ta's
    # partition with its acknowledgements and forgets it in the same request.
    seen, callback = recorder()
    async with topics_led_by_one_broker(kafka_cluster, 2) as [ta, tb]:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, ta, [b"a0", b"a1"])
        async with ShareConsumer(
            ta, tb, group_id=group, bootstrap_servers=kafka_cluster.bootstrap_servers,
            acknowledgement_mode="explicit", acknowledgement_callback=callback,
        ) as c:  # fmt: skip
            await eventually(c.wait_for_assignment, lambda a: len(a) == 2)
            held = await poll_until(c, lambda got: len(got) == 2)
            c.acknowledge(held[0])
            c.acknowledge(held[1], AcknowledgeType.REJECT)
            c.subscribe([tb])
            await produce(kafka_cluster, tb, [b"b0"])
            after = await poll_accepting(c, lambda got: got)
            assert await c.poll(timeout_ms=200) == []
        await produce(kafka_cluster, ta, [b"a2"])
        async with consumers(kafka_cluster, ta, group) as [other]:
            rest = await poll_until(other, lambda got: got)
    tpa = TopicPartition(ta, 0)
    assert [r.value for r in after] == [b"b0"]
    assert seen[0] == ({tpa: frozenset({0, 1})}, None)
    assert [r.value for r in rest] == [b"a2"]  # a0 accepted and a1 rejected, as sent


async def test_unsubscribe_leaves_and_subscribe_joins_again(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"x"])
        async with consumers(kafka_cluster, topic, group) as [c], admin_for(kafka_cluster) as admin:
            first = await poll_until(c, lambda got: got)
            await c.unsubscribe()  # accepts x (implicit mode), closes sessions, leaves
            assert c.subscription() == frozenset() and c.assignment() == frozenset()
            with pytest.raises(IllegalStateError, match="not subscribed"):
                await c.poll()
            left = await eventually(
                lambda: admin.describe_share_groups([group]),
                lambda d: not d.result(group).members,
            )
            c.subscribe([topic])
            await c.wait_for_assignment(30)
            await produce(kafka_cluster, topic, [b"y"])
            again = await poll_until(c, lambda got: any(r.value == b"y" for r in got))
            rejoined = (await admin.describe_share_groups([group])).result(group)
    assert [r.value for r in first] == [b"x"]
    assert not left.result(group).members
    assert [r.value for r in again] == [b"y"]  # x was accepted on unsubscribe
    assert [m.member_id for m in rejoined.members] == [c.member_id]


async def test_callback_reports_a_piggybacked_acknowledgement_that_failed(
    kafka_cluster: KafkaCluster,
) -> None:
    held_seen, held_cb = recorder()
    other_seen, other_cb = recorder()
    async with new_topic(kafka_cluster, 1, 3) as topic:
        tp = TopicPartition(topic, 0)
        group = await share_group(kafka_cluster, share_record_lock_duration_ms="1000")
        await produce(kafka_cluster, topic, [b"x"])
        async with (
            consumers(
                kafka_cluster, topic, group,
                acknowledgement_mode="explicit", acknowledgement_callback=held_cb,
            ) as [holder],
            consumers(
                kafka_cluster, topic, group,
                acknowledgement_mode="explicit", acknowledgement_callback=other_cb,
            ) as [other],
        ):  # fmt: skip
            [held] = await poll_until(holder, lambda got: got)
            # Unacknowledged for 1 s: the broker gives it to `other` (delivery 2).
            [later] = await poll_until(other, lambda got: got)
            holder.acknowledge(held)
            # This poll's ShareFetch carries the too-late acceptance; the broker refuses it
            # in the partition's acknowledge error, and the callback hears of it. (Once
            # `other` accepted it, Kafka 4.4 would answer no error at all: the record would
            # lie below the share-partition start offset.)
            assert await holder.poll(timeout_ms=200) == []
            other.acknowledge(later)
            assert await other.commit() == {tp: None}
    assert (held.offset, held.delivery_count, later.delivery_count) == (0, 1, 2)
    assert [offsets for offsets, _ in held_seen] == [{tp: frozenset({0})}]
    assert isinstance(held_seen[0][1], InvalidRecordStateError), held_seen
    assert other_seen == [({tp: frozenset({0})}, None)]


async def test_renewed_record_is_not_redelivered_after_its_lock_duration(
    kafka_cluster: KafkaCluster,
) -> None:
    seen, callback = recorder()
    async with new_topic(kafka_cluster, 1, 3) as topic:
        tp = TopicPartition(topic, 0)
        group = await share_group(kafka_cluster, share_record_lock_duration_ms="1000")
        await produce(kafka_cluster, topic, [b"slow"])
        async with (
            consumers(
                kafka_cluster, topic, group,
                acknowledgement_mode="explicit", acknowledgement_callback=callback,
            ) as [holder],
            consumers(kafka_cluster, topic, group, acknowledgement_mode="explicit") as [other],
        ):  # fmt: skip
            [record] = await poll_until(holder, lambda got: got)
            start = anyio.current_time()
            stolen: list[ShareRecord[Any, Any]] = []
            renewals = 0
            # Three lock durations, renewing about every quarter of one; without the
            # renewals `other` gets the record after 1 s (test_lock_expiry_... shows it).
            while anyio.current_time() - start < 3.0:
                holder.acknowledge(record, AcknowledgeType.RENEW)
                assert await holder.commit() == {tp: None}
                renewals += 1
                stolen += await poll_accepting(other, lambda got: True)
                stolen += await other.poll(timeout_ms=250)
            with pytest.raises(IllegalStateError, match="not acknowledged"):
                await holder.poll()  # a renewed record still wants its final acknowledgement
            holder.acknowledge(record)
            assert await holder.commit() == {tp: None}
    assert stolen == []
    assert renewals >= 6
    assert seen[-1] == ({tp: frozenset({0})}, None)
    assert len(seen) == renewals + 1 and all(error is None for _, error in seen)


async def test_started_without_topics_joins_on_subscribe(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"z"])
        async with (
            ShareConsumer(group_id=group, bootstrap_servers=kafka_cluster.bootstrap_servers) as c,
            admin_for(kafka_cluster) as admin,
        ):
            with pytest.raises(IllegalStateError, match="not subscribed"):
                await c.poll()
            before = await admin.describe_share_groups([group])
            c.subscribe([topic])
            await c.wait_for_assignment(30)
            got = await poll_until(c, lambda got: got)
    # No heartbeat went out without a subscription: Kafka does not know the group yet.
    assert group not in before.succeeded
    assert [r.value for r in got] == [b"z"]
