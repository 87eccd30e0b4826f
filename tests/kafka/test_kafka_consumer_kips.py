"""Issue 48's Kafka 4 consumer features on Apache Kafka 4.4: Metadata v13 (KIP-1102's
version), closing with or without leaving the group (KIP-1092), ``auto_offset_reset=
"by_duration:..."`` (KIP-1106), strict share acquisition (KIP-1206) and ListOffsets with
the current leader epoch (KIP-320).

Kafka 4.4 sends REBOOTSTRAP_REQUIRED only in ApiVersions v5 answers (KafkaApis'
``handleApiVersionsRequest``, for a cluster or node id that does not match; KIP-1242),
never in Metadata, so the client's reaction to the Metadata signal is shown on FakeKafka
(tests/cluster/test_rebootstrap_signal.py); here, that v13 is the version spoken and read.
"""

from __future__ import annotations

import time
from contextlib import AsyncExitStack
from typing import Any

import anyio
import pytest

from aiokafka_ng import Consumer, Producer, ShareConsumer
from aiokafka_ng.admin import (
    AlterConfigOp,
    ConfigResource,
    ElectionType,
    NewPartitionReassignment,
)
from aiokafka_ng.admin import TopicPartition as AdminPartition
from aiokafka_ng.cluster import Cluster, ClusterConfig, parse_bootstrap_servers
from aiokafka_ng.consumer import CloseOptions, GroupMembershipOperation, TopicPartition
from aiokafka_ng.errors import RebootstrapRequiredError
from aiokafka_ng.net.connection import connect
from aiokafka_ng.protocol.handshake import ExpectedNode
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, new_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

HOUR_MS = 3_600_000


# ------------------------------------------------------------------ KIP-1102: Metadata v13


async def test_metadata_is_spoken_at_v13(kafka_cluster: KafkaCluster) -> None:
    config = ClusterConfig(
        bootstrap_servers=parse_bootstrap_servers(kafka_cluster.bootstrap_servers)
    )
    async with new_topic(kafka_cluster, 2) as topic, Cluster(config) as cluster:
        await cluster.wait_ready(30)
        conn = await cluster.any_connection()
        assert conn.version_for(MetadataRequest) == 13
        answer = await conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)]))
        assert answer.error_code == 0  # the field v13 added, read: no error
        snapshot = await cluster.refresh([topic])  # the refresher's own v13 request
        assert set(snapshot.brokers) == {n.node_id for n in kafka_cluster.brokers}
        assert len(snapshot.topics[topic].partitions) == 2
        assert topic in await cluster.all_topics()
        assert cluster.statistics().rebootstraps == 0


# ------------------------------------------------------------------ KIP-1242: is it the node?


async def test_a_broker_that_is_not_the_node_meant_says_so(kafka_cluster: KafkaCluster) -> None:
    """ApiVersions v5 names the cluster and node a connection is meant for; Kafka 4.4 answers
    REBOOTSTRAP_REQUIRED when it is not that node of that cluster, and serves the right one
    (tests/cluster/test_cluster_check.py: what the client does with the answer)."""
    config = ClusterConfig(
        bootstrap_servers=parse_bootstrap_servers(kafka_cluster.bootstrap_servers)
    )
    async with Cluster(config) as cluster:
        await cluster.wait_ready(30)
        cluster_id = cluster.metadata.cluster_id
        assert cluster_id is not None
    first, second = kafka_cluster.brokers[:2]
    right = ExpectedNode(cluster_id, first.node_id)
    async with connect(first.host, first.port, expected=right) as conn:
        assert conn.version_for(ApiVersionsRequest) == 5
    for wrong in (ExpectedNode(cluster_id, second.node_id), ExpectedNode("x" * 22, first.node_id)):
        with pytest.raises(RebootstrapRequiredError, match=f"node {wrong.node_id} of cluster"):
            async with connect(first.host, first.port, expected=wrong):
                pass


# ------------------------------------------------------------------ KIP-1092: close options


async def joined(cluster: KafkaCluster, topic: str, group: str, **config: Any) -> Consumer:
    consumer = Consumer(
        topic, bootstrap_servers=cluster.bootstrap_servers, group_id=group, **config
    )
    await consumer.start()
    with anyio.fail_after(60):
        # A KIP-848 member may first be given an empty assignment; polling lets it heartbeat
        # until the group's target assignment reaches it.
        while not await consumer.wait_for_assignment(timeout_ms=60_000):
            await consumer.getmany(timeout_ms=100)
    return consumer


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_close_remains_in_or_leaves_the_group(
    kafka_cluster: KafkaCluster, protocol: str
) -> None:
    cases: list[tuple[GroupMembershipOperation, str | None, bool]] = [
        (GroupMembershipOperation.REMAIN_IN_GROUP, None, True),  # dynamic, still a member
        (GroupMembershipOperation.DEFAULT, None, False),  # dynamic leaves
        (GroupMembershipOperation.LEAVE_GROUP, "host-1", False),  # static, let go at once
        (GroupMembershipOperation.DEFAULT, "host-2", True),  # static stays by default
    ]
    async with new_topic(kafka_cluster, 2) as topic, admin_for(kafka_cluster) as admin:
        for operation, instance, stays in cases:
            group = unique("close")
            consumer = await joined(
                kafka_cluster,
                topic,
                group,
                group_protocol=protocol,
                group_instance_id=instance,
            )
            member_id = consumer.group_metadata().member_id
            await consumer.close(CloseOptions(operation, timeout=30))
            described = (await admin.describe_consumer_groups([group])).result(group)
            members = [m.member_id for m in described.members]
            # Asked right after close() returned: a leave is applied by then, and a member
            # that stays is there until its session (45 s) times out.
            assert members == ([member_id] if stays else []), (operation, instance)


# ------------------------------------------------------------------ KIP-1106: by_duration


async def test_by_duration_starts_at_records_of_known_age(kafka_cluster: KafkaCluster) -> None:
    now_ms = time.time_ns() // 1_000_000
    ages = [3 * HOUR_MS, 2 * HOUR_MS, HOUR_MS // 2, 60_000]  # offsets 0..3
    async with new_topic(kafka_cluster, 1) as topic:
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i, age in enumerate(ages):
                await producer.send_and_wait(topic, b"%d" % i, timestamp_ms=now_ms - age)
        tp = TopicPartition(topic, 0)
        for strategy, first in [
            ("by_duration:PT1H", 2),
            ("by_duration:PT2H30M", 1),
            ("by_duration:P1D", 0),
            ("by_duration:PT10S", 4),  # nothing that recent: the log end
        ]:
            async with Consumer(
                topic,
                bootstrap_servers=kafka_cluster.bootstrap_servers,
                group_id=unique("dur"),
                auto_offset_reset=strategy,
            ) as consumer:
                with anyio.fail_after(60):
                    await consumer.wait_for_assignment(timeout_ms=60_000)
                    assert await consumer.position(tp, timeout_ms=30_000) == first, strategy
                    if first < len(ages):
                        record = await consumer.getone()
                        assert (record.offset, record.value) == (first, b"%d" % first)


# ------------------------------------------------------------------ KIP-1206: record_limit


@pytest.mark.parametrize("mode", ["batch_optimized", "record_limit"])
async def test_record_limit_acquires_no_more_than_a_poll_returns(
    kafka_cluster: KafkaCluster, mode: str
) -> None:
    # Twenty records in one batch. batch_optimized: the first member's poll acquires the
    # whole batch (5 handed out, 15 waiting in it), so a second member gets nothing while
    # the locks hold; record_limit: the broker acquires 5, and the second member gets the
    # next records.
    group = unique("acq")
    async with new_topic(kafka_cluster, 1) as topic:
        async with admin_for(kafka_cluster) as admin:
            ops = [AlterConfigOp("share.auto.offset.reset", "earliest")]
            result = await admin.incremental_alter_configs({ConfigResource.group(group): ops})
            result.raise_on_error()
        async with Producer(
            bootstrap_servers=kafka_cluster.bootstrap_servers, linger_ms=1000
        ) as producer:
            futures = [await producer.send(topic, b"%d" % i) for i in range(20)]
            await producer.flush()
            assert {(await f).offset for f in futures} == set(range(20))
        async with AsyncExitStack() as stack:
            first, second = [
                await stack.enter_async_context(
                    ShareConsumer(
                        topic,
                        group_id=group,
                        bootstrap_servers=kafka_cluster.bootstrap_servers,
                        acknowledgement_mode="explicit",
                        share_acquire_mode=mode,
                        max_poll_records=5,
                    )
                )
                for _ in range(2)
            ]
            for member in (first, second):
                await member.wait_for_assignment(30)
            with anyio.fail_after(60):
                got: list[Any] = []
                while not got:
                    got = await first.poll(timeout_ms=1000)
            assert [r.offset for r in got] == [0, 1, 2, 3, 4]
            held = first.statistics().buffered_records
            others = await second.poll(timeout_ms=3000)
            if mode == "batch_optimized":
                assert held == 15 and others == []
            else:
                assert held == 0
                assert [r.offset for r in others] == [5, 6, 7, 8, 9]


# ------------------------------------------------------------------ ListOffsets epoch


async def test_list_offsets_follows_a_leader_election(kafka_cluster: KafkaCluster) -> None:
    # ListOffsets names the leader epoch the consumer knows; Kafka checks it against its
    # own. After a preferred election moves the leader (epoch + 1), the consumer's cached
    # view is stale: the broker refuses it, and the answer comes once the metadata is fresh.
    async with new_topic(kafka_cluster, 1) as topic:
        tp = TopicPartition(topic, 0)
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i in range(3):
                await producer.send_and_wait(topic, b"%d" % i)
        async with (
            Consumer(bootstrap_servers=kafka_cluster.bootstrap_servers) as consumer,
            admin_for(kafka_cluster) as admin,
        ):
            assert await consumer.end_offsets([tp]) == {tp: 3}
            before = (await admin.describe_topics([topic])).result(topic).partitions[0]
            assert before.leader is not None
            # The same replicas, the current leader last: the preferred leader is another.
            order = [n.node_id for n in before.replicas if n != before.leader]
            order.append(before.leader.node_id)
            where = AdminPartition(topic, 0)
            moved = await admin.alter_partition_reassignments(
                {where: NewPartitionReassignment(order)}
            )
            moved.raise_on_error()
            with anyio.fail_after(60):
                while True:
                    await admin.elect_leaders(ElectionType.PREFERRED, [where])
                    now = (await admin.describe_topics([topic])).result(topic).partitions[0]
                    if now.leader is not None and now.leader.node_id == order[0]:
                        break
                    await anyio.sleep(0.2)
            assert now.leader_epoch > before.leader_epoch
            with anyio.fail_after(30):
                assert await consumer.end_offsets([tp]) == {tp: 3}
                assert await consumer.beginning_offsets([tp]) == {tp: 0}
