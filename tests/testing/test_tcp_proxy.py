"""TcpProxy: bytes forwarded to the broker, a new upstream for new connections, cut."""

from __future__ import annotations

from collections.abc import Callable

import anyio
import pytest

from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import LocalBroker, TcpProxy

pytestmark = pytest.mark.anyio


def _metadata() -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name="proxied")])


async def test_forwards_switches_upstream_and_cuts(
    kafka_broker_factory: Callable[..., LocalBroker],
) -> None:
    first, second = kafka_broker_factory(), kafka_broker_factory()
    config = ConnectionConfig(request_timeout_s=20)
    async with TcpProxy(first) as proxy, connect("127.0.0.1", proxy.port, config) as old:
        answer = await old.send(_metadata())
        assert answer.brokers[0].port == first.port  # the broker's own address
        proxy.set_upstream(second)
        async with connect("127.0.0.1", proxy.port, config) as new:
            assert (await new.send(_metadata())).brokers[0].port == second.port
            # the open connection stays with the first broker
            assert (await old.send(_metadata())).brokers[0].port == first.port
            assert (proxy.connections, proxy.open_connections()) == (2, 2)
            proxy.cut()
            with anyio.fail_after(10):
                await old.wait_closed()
                await new.wait_closed()
            with pytest.raises(KafkaConnectionError):
                await new.send(_metadata())


async def test_a_stopped_upstream_closes_the_client_connection(
    kafka_broker_factory: Callable[..., LocalBroker],
) -> None:
    broker = kafka_broker_factory()
    async with TcpProxy(broker) as proxy:
        await broker.stop()
        config = ConnectionConfig(request_timeout_s=20)
        with anyio.fail_after(10), pytest.raises(KafkaConnectionError):
            async with connect("127.0.0.1", proxy.port, config) as conn:
                await conn.send(_metadata())
