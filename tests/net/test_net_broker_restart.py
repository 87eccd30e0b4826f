"""A restarted broker is reconnected without user action (the real local broker, stopped
and started on the same port). What is on the wire -- in-flight bounds, correlation-mismatch
poisoning, pipelining -- is observed at FakeKafka's end of the connection in
test_net_wire.py; the reconnect backoff curve is measured on virtual time in
test_reconnect_backoff.py."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng.cluster import Cluster, ClusterConfig
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import LocalBroker
from tests.helpers import free_port

pytestmark = pytest.mark.anyio


def _metadata(topic: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name=topic)])


@pytest.mark.broker  # starts a broker of its own (see tests/conftest.py)
async def test_broker_restart_is_reconnected_without_user_action() -> None:
    port = free_port()
    broker = LocalBroker(port=port)
    await broker.start()
    try:
        config = ClusterConfig(
            bootstrap_servers=[(broker.host, broker.port)],
            connection=ConnectionConfig(request_timeout_s=10),
        )
        async with Cluster(config) as cluster:
            before = await cluster.request(111, _metadata("restart"))
            assert before.topics[0].error_code == 0
            conn = await cluster.connection(111)
            await broker.stop()
            await conn.wait_closed()
            await broker.start()  # same port
            with anyio.fail_after(15):
                while True:
                    try:
                        after = await cluster.request(111, _metadata("restart"))
                        break
                    except KafkaConnectionError:
                        await anyio.sleep(0.05)  # the pool's own backoff paces the attempts
            assert after.topics[0].name == "restart"
            assert after.brokers[0].node_id == 111
            assert cluster.statistics().pool.nodes[111].connects >= 2
    finally:
        await broker.stop()
