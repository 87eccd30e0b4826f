"""Connection against the real local broker (Tansu via the ``kafka_broker`` fixture)."""

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

pytestmark = pytest.mark.anyio

TANSU_NODE_ID = 111
TANSU_AUTO_CREATED_PARTITIONS = 4


async def test_api_versions_and_metadata(kafka_broker: LocalBroker) -> None:
    topic = f"net-{uuid.uuid4().hex[:12]}"
    async with connect(kafka_broker.host, kafka_broker.port, ConnectionConfig()) as conn:
        # Negotiated on connect: Tansu advertises Metadata 0-12, ApiVersions 0-4, Produce 0-11.
        assert conn.api_versions[MetadataRequest.API_KEY][1] >= 12
        assert conn.version_for(MetadataRequest) == min(
            MetadataRequest.MAX_STABLE_VERSION, conn.api_versions[MetadataRequest.API_KEY][1]
        )
        assert conn.version_for(ProduceRequest) >= 9

        versions = await conn.send(ApiVersionsRequest())
        assert isinstance(versions, ApiVersionsResponse)
        assert versions.error_code == 0

        request = MetadataRequest(
            topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
        )
        response = await conn.send(request)
        assert isinstance(response, MetadataResponse)
        assert [b.node_id for b in response.brokers] == [TANSU_NODE_ID]
        assert response.brokers[0].host == "127.0.0.1"
        assert response.brokers[0].port == kafka_broker.advertised_port
        (created,) = response.topics
        assert created.name == topic
        assert created.error_code == 0
        assert len(created.partitions) == TANSU_AUTO_CREATED_PARTITIONS
        assert {p.leader_id for p in created.partitions} == {TANSU_NODE_ID}


async def test_pipelined_requests_on_the_real_broker(kafka_broker: LocalBroker) -> None:
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
    assert all(r.brokers[0].node_id == TANSU_NODE_ID for r in responses)
    assert 1 <= stats.max_in_flight_seen <= 3
    assert stats.responses_received == 21  # + ApiVersions on connect


async def test_run_in_an_owner_task_group(kafka_broker: LocalBroker) -> None:
    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            conn = await tg.start(Connection.run, kafka_broker.host, kafka_broker.port)
            response = await conn.send(MetadataRequest(topics=[]))
            assert response.brokers[0].node_id == TANSU_NODE_ID
            await conn.aclose()
    assert conn.closed


async def test_answer_to_an_acks0_produce_is_dropped_not_a_mismatch(
    kafka_broker: LocalBroker,
) -> None:
    """Kafka never answers Produce acks=0; Tansu does (seen on v3-v11). Either way the
    connection must stay usable and its correlation check intact."""
    builder = RecordBatchBuilder()
    builder.append(0, b"k", b"v")
    request = ProduceRequest(
        acks=0,
        timeout_ms=5000,
        topic_data=[
            TopicProduceData(
                name="acks0-conn",
                partition_data=[PartitionProduceData(index=0, records=builder.build())],
            )
        ],
    )
    async with connect(kafka_broker.host, kafka_broker.port) as conn:
        for _ in range(3):
            assert await conn.send(request, expect_response=False) is None
        response = await conn.send(
            MetadataRequest(topics=[MetadataRequestTopic(name="acks0-conn")])
        )
        assert response.topics[0].name == "acks0-conn"
        assert not conn.closed
        stats = conn.statistics()
        assert stats.in_flight == 0
        assert stats.responses_discarded == 3  # Tansu answered each acks=0 request
