"""aiokafka_ng.compat.AIOKafkaAdminClient: aiokafka 0.14's admin surface, argument order
and result shapes. Against the real broker (Tansu) where it answers; CreatePartitions and
AlterConfigs (not advertised by Tansu) and DeleteRecords (Tansu panics) against FakeKafka in
memory (its model answers CreatePartitions and DeleteRecords, AlterConfigs is scripted), as
TANSU.md says."""

from __future__ import annotations

import uuid
from typing import Any

import pytest

from aiokafka_ng.compat import (
    AIOKafkaAdminClient,
    ConfigResource,
    ConfigResourceType,
    NewPartitions,
    NewTopic,
    OffsetAndMetadata,
    RecordsToDelete,
    TopicPartition,
)
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.errors import OffsetOutOfRangeError, PolicyViolationError
from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol.messages import alter_configs as ac
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received
from aiokafka_ng.testing.pytest_plugin import KafkaClusterBroker
from tests.kafka.helpers import known_everywhere

pytestmark = pytest.mark.anyio
DELETE_RECORDS, CREATE_PARTITIONS, ALTER_CONFIGS = 21, 37, 33


async def test_aiokafka_shapes_against_the_broker(kafka_broker: Any) -> None:
    name = f"compat-{uuid.uuid4().hex[:8]}"
    group = f"g-{uuid.uuid4().hex[:8]}"
    admin = AIOKafkaAdminClient(bootstrap_servers=kafka_broker.bootstrap_servers)
    await admin.start()
    try:
        # aiokafka's order: (new_topics, timeout_ms, validate_only)
        created = await admin.create_topics(
            [NewTopic(name, 2, 1, topic_configs={"retention.ms": "60000"})], 30000, False
        )
        assert created.result(name).num_partitions == 2
        # Apache Kafka: each broker learns of the topic a moment after the controller, and
        # each call below may ask any of them (ci at e8f1c98: describe_topics met one that
        # answered UNKNOWN_TOPIC_OR_PARTITION after list_topics had met one that knew it).
        if isinstance(kafka_broker, KafkaClusterBroker):
            await known_everywhere(kafka_broker.cluster, name, 2)
        assert name in await admin.list_topics()

        (desc,) = await admin.describe_topics([name])
        assert desc["topic"] == name and desc["error_code"] == 0 and not desc["is_internal"]
        assert sorted(p["partition"] for p in desc["partitions"]) == [0, 1]
        part = desc["partitions"][0]
        assert set(part) == {"error_code", "partition", "leader", "replicas", "isr",
                             "offline_replicas"}  # fmt: skip
        assert part["leader"] in part["replicas"]

        cluster = await admin.describe_cluster()
        assert set(cluster) == {"brokers", "cluster_id", "controller_id"}
        brokers = cluster["brokers"]
        assert all(set(broker) == {"node_id", "host", "port", "rack"} for broker in brokers)
        assert kafka_broker.port in {broker["port"] for broker in brokers}

        configs = await admin.describe_configs([ConfigResource("TOPIC", name)])
        (res,) = list(configs)
        assert res.type is ConfigResourceType.TOPIC and res.name == name
        assert configs.result(res)["retention.ms"].value == "60000"

        async with Consumer(
            bootstrap_servers=kafka_broker.bootstrap_servers, group_id=group,
            enable_auto_commit=False,
        ) as consumer:  # fmt: skip
            await consumer.commit({TopicPartition(name, 1): OffsetAndMetadata(5, "m")})
        assert (group, "consumer") in await admin.list_consumer_groups() or any(
            g == group for g, _ in await admin.list_consumer_groups()
        )
        assert await admin.find_coordinator(group) in {broker["node_id"] for broker in brokers}
        offsets = await admin.list_consumer_group_offsets(group)
        assert offsets[TopicPartition(name, 1)].offset == 5
        # (Tansu 0.6 answers OffsetFetch with empty metadata: the commit sends "m", the
        # metadata round trip is not Tansu's to show.)
        described = await admin.describe_consumer_groups([group])
        assert described.result(group).group_id == group

        deleted = await admin.delete_topics([name], 30000)
        assert deleted.result(name) is None
    finally:
        await admin.close()


async def test_create_partitions_alter_configs_delete_records_on_a_fake() -> None:
    def alter_configs(call: Received) -> Any:
        return ac.AlterConfigsResponse(
            responses=[
                ac.AlterConfigsResourceResponse(
                    error_code=44 if r.resource_name == "bad" else 0,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in call.request.resources
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 2)
        kafka.answer(ALTER_CONFIGS, alter_configs)
        async with Producer(**kafka.client_config()) as producer:
            for _ in range(10):
                await producer.send_and_wait("t", b"v", partition=0)
        admin = AIOKafkaAdminClient(
            **kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50
        )
        await admin.start()
        try:
            grown = await admin.create_partitions({"t": NewPartitions(4)}, 5000, True)
            assert grown.result("t") is None
            (cp,) = (r.request for r in kafka.received(CREATE_PARTITIONS))
            assert (cp.validate_only, [(t.name, t.count) for t in cp.topics]) == (True, [("t", 4)])
            assert cp.timeout_ms <= 5000
            assert len(kafka.cluster.topics["t"].partitions) == 2  # validate only

            altered = await admin.alter_configs(
                [
                    ConfigResource(ConfigResourceType.TOPIC, "t", {"retention.ms": 1000}),
                    ConfigResource("TOPIC", "bad", {"cleanup.policy": "compact"}),
                ]
            )
            (sent,) = kafka.received(ALTER_CONFIGS)
            by_name = {r.resource_name: r.configs for r in sent.request.resources}
            assert [(c.name, c.value) for c in by_name["t"]] == [("retention.ms", "1000")]
            assert altered.result(ConfigResource("TOPIC", "t").native()) is None
            with pytest.raises(PolicyViolationError):
                altered.result(ConfigResource("TOPIC", "bad").native())

            low = await admin.delete_records({TopicPartition("t", 0): RecordsToDelete(7)})
            assert low == {TopicPartition("t", 0): 7}
            assert [r.offset for r in kafka.records("t", 0)] == [7, 8, 9]
            with pytest.raises(OffsetOutOfRangeError):  # raised, as aiokafka does
                await admin.delete_records({TopicPartition("t", 1): RecordsToDelete(500)})
        finally:
            await admin.close()
