"""Admin operations against a real 3-node Apache Kafka cluster.

Tansu does not advertise CreatePartitions, and its DescribeConfigs lists only explicitly
set keys (no defaults, no sources), so these were shown through canned responses before.
"""

from __future__ import annotations

import pytest

from aiokafka_ng.admin import (
    AdminClient,
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigSource,
    NewPartitions,
    TopicDescription,
)
from aiokafka_ng.errors import InvalidPartitionsError
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


async def describe(admin: AdminClient, topic: str) -> TopicDescription:
    return (await admin.describe_topics([topic])).result(topic)


async def configs_of(admin: AdminClient, resource: ConfigResource) -> dict[str, ConfigEntry]:
    return dict((await admin.describe_configs([resource])).result(resource))


async def test_cluster_has_three_brokers_and_a_controller(kafka_cluster: KafkaCluster) -> None:
    async with admin_for(kafka_cluster) as admin:
        cluster = await admin.describe_cluster()
    assert cluster.cluster_id == kafka_cluster.cluster_id
    assert sorted((b.node_id, b.port) for b in cluster.brokers) == [
        (node.node_id, node.port) for node in kafka_cluster.brokers
    ]
    assert cluster.controller is not None and cluster.controller.node_id in (1, 2, 3)


async def test_create_partitions_grows_a_replicated_topic(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic, admin_for(kafka_cluster) as admin:
        (await admin.create_partitions({topic: NewPartitions(4)})).raise_on_error()
        # The controller answers once the change is in the metadata log; each broker applies
        # it a moment later (KRaft), so its Metadata answer may still show 1 partition.
        desc = await eventually(lambda: describe(admin, topic), lambda d: len(d.partitions) == 4)
        assert [p.partition for p in desc.partitions] == [0, 1, 2, 3]
        assert all(sorted(r.node_id for r in p.replicas) == [1, 2, 3] for p in desc.partitions)
        # Shrinking is refused, named, and checked before anything is sent.
        results = await admin.create_partitions({topic: NewPartitions(2)})
        assert isinstance(results[topic], InvalidPartitionsError)
        # validate_only checks without growing.
        (
            await admin.create_partitions({topic: NewPartitions(6)}, validate_only=True)
        ).raise_on_error()
        desc = (await admin.describe_topics([topic])).result(topic)
        assert len(desc.partitions) == 4


async def test_incremental_alter_configs_and_describe_configs(
    kafka_cluster: KafkaCluster,
) -> None:
    """SET then DELETE on a topic; Kafka lists every config with its source, so a deleted
    key falls back to the broker's setting instead of disappearing (unlike Tansu)."""
    async with new_topic(kafka_cluster, 1, 3) as topic, admin_for(kafka_cluster) as admin:
        resource = ConfigResource.topic(topic)
        before = (await admin.describe_configs([resource])).result(resource)
        # The test cluster sets log.retention.ms=-1 (see testing/_kafka_config.py).
        assert before["retention.ms"].source is ConfigSource.STATIC_BROKER_CONFIG
        assert before["retention.ms"].value == "-1"
        assert before["min.insync.replicas"].value == "1"

        (
            await admin.incremental_alter_configs(
                {
                    resource: [
                        AlterConfigOp("retention.ms", "3600000", AlterConfigOpType.SET),
                        AlterConfigOp("cleanup.policy", "compact", AlterConfigOpType.SET),
                        AlterConfigOp("min.insync.replicas", "2", AlterConfigOpType.SET),
                    ]
                }
            )
        ).raise_on_error()
        after = await eventually(
            lambda: configs_of(admin, resource), lambda c: c["retention.ms"].value == "3600000"
        )
        assert after["retention.ms"].value == "3600000"
        assert after["retention.ms"].source is ConfigSource.DYNAMIC_TOPIC_CONFIG
        assert after["cleanup.policy"].value == "compact"
        assert after["min.insync.replicas"].value == "2"

        (
            await admin.incremental_alter_configs(
                {
                    resource: [
                        AlterConfigOp("retention.ms", op_type=AlterConfigOpType.DELETE),
                        AlterConfigOp("cleanup.policy", "delete", AlterConfigOpType.APPEND),
                    ]
                }
            )
        ).raise_on_error()
        reverted = await eventually(
            lambda: configs_of(admin, resource), lambda c: "delete" in c["cleanup.policy"].value
        )
        assert reverted["retention.ms"].value == "-1"
        assert reverted["retention.ms"].source is ConfigSource.STATIC_BROKER_CONFIG
        assert reverted["cleanup.policy"].value == "compact,delete"

        broker = ConfigResource.broker(1)
        broker_configs = (await admin.describe_configs([broker])).result(broker)
        assert broker_configs["offsets.topic.num.partitions"].value == "5"
