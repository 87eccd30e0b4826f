"""Cluster-wide admin operations on a real 3-node Apache Kafka cluster: the quorum and
features, log dirs, partition reassignment and leader election, quotas, consumer groups,
and the transaction tools (fence producers, abort a transaction). Tansu has one broker, no
quorum, no reassignment and no DescribeProducers, so these ran only against fakes before.
"""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import (
    AbortTransactionSpec,
    AdminClient,
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ConsumerGroupState,
    ElectionType,
    IsolationLevel,
    ListOffsetsSpec,
    NewPartitionReassignment,
    TopicPartition,
)
from aiokafka_ng.errors import ElectionNotNeededError, ProducerFencedError
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


async def test_quorum_features_and_log_dirs(kafka_cluster: KafkaCluster) -> None:
    async with admin_for(kafka_cluster) as admin:
        quorum = await admin.describe_metadata_quorum()
        features = await admin.describe_features()
        dirs = (await admin.describe_log_dirs()).raise_on_error()
    assert sorted(v.replica_id for v in quorum.voters) == [1, 2, 3]
    assert quorum.leader_id in (1, 2, 3) and quorum.high_watermark > 0
    # 4.4 finalizes share groups (KIP-932) and transactions v2 (KIP-890) by default.
    assert features.finalized["share.version"][1] >= 1
    assert features.finalized["transaction.version"][1] == 2
    assert sorted(dirs) == [1, 2, 3]
    for node in kafka_cluster.brokers:
        (only,) = dirs[node.node_id].values()
        assert only.path == str(node.directory / "data") and only.error is None


async def test_reassign_a_partition_and_elect_its_preferred_leader(
    kafka_cluster: KafkaCluster,
) -> None:
    async with new_topic(kafka_cluster, 1, 2) as topic, admin_for(kafka_cluster) as admin:
        tp = TopicPartition(topic, 0)
        before = (await admin.describe_topics([topic])).result(topic).partitions[0]
        old = [r.node_id for r in before.replicas]
        (missing,) = {1, 2, 3} - set(old)
        # Move to [missing, old[0]]: one replica added, one removed, a new preferred leader.
        target = [missing, old[0]]
        (
            await admin.alter_partition_reassignments({tp: NewPartitionReassignment(target)})
        ).raise_on_error()
        done = await eventually(
            admin.list_partition_reassignments, lambda ongoing: tp not in ongoing
        )
        assert tp not in done
        after = await eventually(
            lambda: admin.describe_topics([topic]),
            lambda r: [x.node_id for x in r.result(topic).partitions[0].replicas] == target,
        )
        partition = after.result(topic).partitions[0]
        assert [r.node_id for r in partition.replicas] == target
        # The preferred leader (first replica) takes over by election, if not already.
        results = await admin.elect_leaders(ElectionType.PREFERRED, [tp])
        assert results[tp] is None or isinstance(results[tp], ElectionNotNeededError)
        led = await eventually(
            lambda: admin.describe_topics([topic]),
            lambda r: (
                (leader := r.result(topic).partitions[0].leader) is not None
                and leader.node_id == missing
            ),
        )
        leader = led.result(topic).partitions[0].leader
        assert leader is not None and leader.node_id == missing


async def test_client_quotas_set_describe_remove(kafka_cluster: KafkaCluster) -> None:
    entity = ClientQuotaEntity({"user": unique("quota-user")})
    async with admin_for(kafka_cluster) as admin:
        (
            await admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"producer_byte_rate": 1024.0})]
            )
        ).raise_on_error()
        quotas = await eventually(admin.describe_client_quotas, lambda q: entity in q)
        assert quotas[entity] == {"producer_byte_rate": 1024.0}
        (
            await admin.alter_client_quotas(
                [ClientQuotaAlteration(entity, {"producer_byte_rate": None})]
            )
        ).raise_on_error()
        quotas = await eventually(admin.describe_client_quotas, lambda q: entity not in q)
        assert entity not in quotas


async def test_consumer_group_describe_list_offsets_delete(kafka_cluster: KafkaCluster) -> None:
    """Two members of one classic group split 4 partitions, commit, and the admin client
    sees the group, its members and its offsets, then deletes it once it is empty."""
    group = unique("group")
    async with new_topic(kafka_cluster, 4, 3) as topic, admin_for(kafka_cluster) as admin:
        async with Producer(bootstrap_servers=kafka_cluster.bootstrap_servers) as producer:
            for i in range(200):
                await producer.send(topic, b"%d" % i, partition=i % 4)
        seen: set[tuple[int, int]] = set()
        described = anyio.Event()
        assignments: list[set[int]] = []

        async def member() -> None:
            async with Consumer(
                topic,
                bootstrap_servers=kafka_cluster.bootstrap_servers,
                group_id=group,
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            ) as consumer:
                while not described.is_set():
                    batches = await consumer.getmany(timeout_ms=200)
                    for tp, records in batches.items():
                        seen.update((tp.partition, r.offset) for r in records)
                    if batches:
                        await consumer.commit()
                assignments.append({tp.partition for tp in consumer.assignment()})

        async with anyio.create_task_group() as tg:
            tg.start_soon(member)
            tg.start_soon(member)
            with anyio.fail_after(60):
                desc = await eventually(
                    lambda: admin.describe_consumer_groups([group]),
                    lambda r: (
                        group in r.succeeded
                        and r.result(group).state is ConsumerGroupState.STABLE
                        and len(r.result(group).members) == 2
                        and len(seen) == 200
                    ),
                    attempts=1000,
                )
            described.set()
        info = desc.result(group)
        assert info.state is ConsumerGroupState.STABLE and info.protocol_type == "consumer"
        assert len(info.members) == 2
        assert sorted(p for a in assignments for p in a) == [0, 1, 2, 3]
        assert all(len(a) == 2 for a in assignments)

        listed = await admin.list_consumer_groups()
        assert group in {g.group_id for g in listed}
        offsets = await admin.list_consumer_group_offsets(group)
        assert {tp.partition: o.offset for tp, o in offsets.items()} == {p: 50 for p in range(4)}
        deleted = await eventually(
            lambda: admin.delete_consumer_groups([group]), lambda r: group in r.succeeded
        )
        assert deleted.raise_on_error() == {group: None}


async def test_fence_producers_then_the_old_producer_is_fenced(
    kafka_cluster: KafkaCluster,
) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic, admin_for(kafka_cluster) as admin:
        tid = unique("fence")
        async with Producer(
            bootstrap_servers=kafka_cluster.bootstrap_servers, transactional_id=tid
        ) as producer:
            producer.begin_transaction()
            await producer.send_and_wait(topic, b"doomed", partition=0)
            fenced = (await admin.fence_producers([tid])).result(tid)
            assert fenced.producer_epoch >= 1
            with pytest.raises(ProducerFencedError):
                await producer.commit_transaction()
        tp = TopicPartition(topic, 0)
        # The fence aborted the open transaction: nothing is visible to read_committed, and
        # the last stable offset passed the record and its abort marker.
        latest = await eventually(
            lambda: admin.list_offsets(
                {tp: ListOffsetsSpec.latest()}, IsolationLevel.READ_COMMITTED
            ),
            lambda r: r.result(tp).offset == 2,
        )
        assert latest.result(tp).offset == 2


async def test_abort_a_hanging_transaction_from_the_admin_client(
    kafka_cluster: KafkaCluster,
) -> None:
    """A transaction left open by its producer holds back the last stable offset; the
    admin client finds it with describe_producers and aborts it on the partition."""
    async with new_topic(kafka_cluster, 1, 3) as topic, admin_for(kafka_cluster) as admin:
        tp = TopicPartition(topic, 0)
        async with Producer(
            bootstrap_servers=kafka_cluster.bootstrap_servers,
            transactional_id=unique("hang"),
            transaction_timeout_ms=60000,
        ) as producer:
            producer.begin_transaction()
            await producer.send_and_wait(topic, b"open", partition=0)
            (state,) = (await admin.describe_producers([tp])).result(tp)
            assert state.current_transaction_start_offset == 0
            lso = await _lso(admin, tp)
            assert lso == 0  # held back by the open transaction
            await admin.abort_transaction(
                AbortTransactionSpec(
                    tp, state.producer_id, state.producer_epoch, state.coordinator_epoch
                )
            )
            after = await eventually(lambda: _lso(admin, tp), lambda offset: offset == 2)
            assert after == 2  # the record and the ABORT marker
            # The producer itself is not told; its own abort cleans up its side.
            await producer.abort_transaction()


async def _lso(admin: AdminClient, tp: TopicPartition) -> int:
    result = await admin.list_offsets({tp: ListOffsetsSpec.latest()}, IsolationLevel.READ_COMMITTED)
    return result.result(tp).offset
