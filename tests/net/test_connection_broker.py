"""Connection against a real broker: Tansu or the 3-node Apache Kafka cluster (``kafka_broker``)."""

from __future__ import annotations

import uuid

import anyio
import pytest

from aiokafka_ng.net.connection import Connection, ConnectionConfig, connect
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokafka_ng.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from aiokafka_ng.protocol.records import RecordBatchBuilder
from aiokafka_ng.testing import LocalBroker
from aiokafka_ng.testing.pytest_plugin import KafkaClusterBroker

pytestmark = pytest.mark.anyio

TANSU_NODE_ID = 111
AUTO_CREATED_PARTITIONS = 4  # Tansu's fixed count; the Kafka fixture sets num.partitions=4


def node_ids(broker: LocalBroker | KafkaClusterBroker) -> set[int]:
    if isinstance(broker, LocalBroker):
        return {TANSU_NODE_ID}
    return {node.node_id for node in broker.cluster.brokers}


async def metadata_until_led(conn: Connection, topic: str) -> MetadataResponse:
    """Metadata for ``topic`` (auto-creating it) until every partition has a leader.

    Tansu answers the first request with the topic ready; Kafka starts the creation and
    answers LEADER_NOT_AVAILABLE until the controller has elected the leaders.
    """
    request = MetadataRequest(
        topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
    )
    with anyio.fail_after(30):
        while True:
            response = await conn.send(request)
            (answer,) = response.topics
            led = answer.partitions and all(p.leader_id >= 0 for p in answer.partitions)
            if answer.error_code == 0 and led:
                return response
            await anyio.sleep(0.05)  # polling the broker's view, not synchronising on time


async def test_api_versions_and_metadata(kafka_broker: LocalBroker | KafkaClusterBroker) -> None:
    topic = f"net-{uuid.uuid4().hex[:12]}"
    async with connect(kafka_broker.host, kafka_broker.port, ConnectionConfig()) as conn:
        # Negotiated on connect: Tansu advertises Metadata 0-12, ApiVersions 0-4, Produce 0-11.
        assert conn.api_versions[MetadataRequest.API_KEY][1] >= 12
        assert conn.version_for(MetadataRequest) == min(
            MetadataRequest.MAX_STABLE_VERSION, conn.api_versions[MetadataRequest.API_KEY][1]
        )
        assert conn.version_for(ProduceRequest) >= 9

        # Kafka checks the v3+ software name and version (INVALID_REQUEST when empty).
        versions = await conn.send(
            ApiVersionsRequest(client_software_name="test", client_software_version="1")
        )
        assert isinstance(versions, ApiVersionsResponse)
        assert versions.error_code == 0

        response = await metadata_until_led(conn, topic)
        assert isinstance(response, MetadataResponse)
        assert {b.node_id for b in response.brokers} == node_ids(kafka_broker)
        assert all(b.host == "127.0.0.1" for b in response.brokers)
        if isinstance(kafka_broker, LocalBroker):
            assert response.brokers[0].port == kafka_broker.advertised_port
        else:
            assert {b.port for b in response.brokers} == {
                node.port for node in kafka_broker.cluster.brokers
            }
        (created,) = response.topics
        assert created.name == topic
        assert created.error_code == 0
        assert len(created.partitions) == AUTO_CREATED_PARTITIONS
        assert {p.leader_id for p in created.partitions} <= node_ids(kafka_broker)


async def test_pipelined_requests_on_the_real_broker(
    kafka_broker: LocalBroker | KafkaClusterBroker,
) -> None:
    config = ConnectionConfig(max_in_flight=3)
    responses: list[MetadataResponse] = []

    async def one(conn: Connection) -> None:
        responses.append(await conn.send(MetadataRequest(topics=[])))

    async with connect(kafka_broker.host, kafka_broker.port, config) as conn:
        async with anyio.create_task_group() as tg:
            for _ in range(20):
                tg.start_soon(one, conn)
        stats = conn.statistics()
    assert len(responses) == 20
    assert all({b.node_id for b in r.brokers} == node_ids(kafka_broker) for r in responses)
    assert 1 <= stats.max_in_flight_seen <= 3
    assert stats.responses_received == 21  # + ApiVersions on connect


async def test_run_in_an_owner_task_group(kafka_broker: LocalBroker | KafkaClusterBroker) -> None:
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            conn = await tg.start(Connection.run, kafka_broker.host, kafka_broker.port)
            response = await conn.send(MetadataRequest(topics=[]))
            assert {b.node_id for b in response.brokers} == node_ids(kafka_broker)
            await conn.aclose()
    assert conn.closed


async def test_answer_to_an_acks0_produce_is_dropped_not_a_mismatch(
    kafka_broker: LocalBroker | KafkaClusterBroker,
) -> None:
    """Kafka never answers Produce acks=0; Tansu does (seen on v3-v11). Either way the
    connection must stay usable and its correlation check intact."""
    topic = f"acks0-conn-{uuid.uuid4().hex[:12]}"
    # Kafka closes the connection on an acks=0 produce it rejects (unknown topic, not the
    # leader), so the topic exists first and the produce goes to partition 0's leader.
    async with connect(kafka_broker.host, kafka_broker.port) as bootstrap:
        metadata = await metadata_until_led(bootstrap, topic)
    leader_id = next(p.leader_id for p in metadata.topics[0].partitions if p.partition_index == 0)
    leader = next(b for b in metadata.brokers if b.node_id == leader_id)

    def produce(acks: int) -> ProduceRequest:
        builder = RecordBatchBuilder()
        builder.append(0, b"k", b"v")
        return ProduceRequest(
            acks=acks,
            timeout_ms=5000,
            topic_data=[
                TopicProduceData(
                    name=topic,
                    partition_data=[PartitionProduceData(index=0, records=builder.build())],
                )
            ],
        )

    async with connect(leader.host, leader.port) as conn:
        # The leader may apply the new metadata a moment after the broker that answered
        # above: an answered produce first, until it is accepted (at once on Tansu).
        with anyio.fail_after(30):
            while True:
                answered = await conn.send(produce(1))
                if answered.responses[0].partition_responses[0].error_code == 0:
                    break
                await anyio.sleep(0.05)  # polling the leader's state, not a timing guess
        for _ in range(3):
            assert await conn.send(produce(0), expect_response=False) is None
        response = await conn.send(MetadataRequest(topics=[MetadataRequestTopic(name=topic)]))
        assert response.topics[0].name == topic
        assert not conn.closed
        stats = conn.statistics()
        assert stats.in_flight == 0
        # Tansu answered each acks=0 request (and the answers were dropped); Kafka sent none.
        assert stats.responses_discarded == (3 if isinstance(kafka_broker, LocalBroker) else 0)
