"""Network-core guarantees observed from the outside, through a fault-injecting proxy.

A ClusterSimulator in pass-through mode (one node, nothing rewritten) sits between our
client and the real local broker and counts what is actually on the wire, so these tests do
not trust the client's own bookkeeping: in-flight bounds, correlation-mismatch poisoning,
and recovery from a broker restart. (The reconnect backoff curve is measured exactly on
virtual time: test_reconnect_backoff.py.)
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster, ClusterConfig
from aiokafka_ng.cluster.pool import ConnectionPool
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import ClusterSimulator, LocalBroker
from tests.helpers import free_port

pytestmark = pytest.mark.anyio


def _proxy(broker: Any) -> ClusterSimulator:
    return ClusterSimulator(broker, brokers=1, passthrough=True)


def _metadata(topic: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name=topic)])


@pytest.mark.parametrize("max_in_flight", [1, 2, 5])
async def test_in_flight_never_exceeds_the_semaphore(kafka_broker: Any, max_in_flight: int) -> None:
    async with _proxy(kafka_broker) as proxy:
        config = ConnectionConfig(max_in_flight=max_in_flight, request_timeout_s=20)
        async with connect("127.0.0.1", proxy.ports[0], config) as conn:
            proxy.delay(0, 150)  # slow answers: a pipelining client piles requests up
            results: list[Any] = []

            async def one(i: int) -> None:
                results.append(await conn.send(_metadata(f"inflight-{max_in_flight}")))

            async with anyio.create_task_group() as tg:
                for i in range(3 * max_in_flight):
                    tg.start_soon(one, i)
            assert len(results) == 3 * max_in_flight
            # Exactly N observed on the wire: never more, and pipelining reaches the bound.
            assert proxy.max_in_flight == max_in_flight
            assert conn.statistics().max_in_flight_seen == max_in_flight


async def test_correlation_mismatch_poisons_and_next_request_reconnects(
    kafka_broker: Any,
) -> None:
    async with _proxy(kafka_broker) as proxy:
        config = ConnectionConfig(max_in_flight=5, request_timeout_s=20)
        async with connect("127.0.0.1", proxy.ports[0], config) as conn:
            proxy.swap_next_responses(0)
            outcomes: list[BaseException | object] = []

            async def one() -> None:
                try:
                    outcomes.append(await conn.send(_metadata("swap")))
                except KafkaConnectionError as exc:
                    outcomes.append(exc)

            async with anyio.create_task_group() as tg:
                for _ in range(3):
                    tg.start_soon(one)
            # Every pending request failed exactly once, with a retriable connection error.
            assert len(outcomes) == 3
            assert all(isinstance(o, KafkaConnectionError) and o.retriable for o in outcomes)
            assert conn.closed
            with pytest.raises(KafkaConnectionError):
                await conn.send(_metadata("swap"))
        await proxy.wait_until(lambda: proxy.open_connections() == 0, within=5)

        # The pool hands out a fresh connection for the next request.
        pool_config = ConnectionConfig(request_timeout_s=20)
        async with ConnectionPool(pool_config) as pool:
            pool.set_address(111, "127.0.0.1", proxy.ports[0])
            first = await pool.get(111)
            proxy.swap_next_responses(0)
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for _ in range(2):
                        tg.start_soon(_swallow, first.send(_metadata("swap2")))
            assert first.closed
            await first.wait_closed()
            second = await pool.get(111)  # a closed connection is never handed out again
            assert second is not first
            response = await second.send(_metadata("swap2"))
            assert response.topics[0].name == "swap2"
            assert proxy.connections[0] >= 3


async def _swallow(coro: Any) -> None:
    try:
        await coro
    except KafkaConnectionError:
        pass


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


async def test_submit_writes_in_call_order_and_answers_each_request(kafka_broker: Any) -> None:
    async with (
        _proxy(kafka_broker) as proxy,
        connect("127.0.0.1", proxy.ports[0], ConnectionConfig(max_in_flight=5)) as conn,
    ):
        proxy.delay(0, 100)
        before = conn.statistics().requests_sent
        pending = [await conn.submit(_metadata(f"submit-{i}")) for i in range(5)]
        # All five were written before any answer came back: pipelined, in call order.
        assert conn.statistics().requests_sent - before == 5
        assert conn.statistics().in_flight == 5
        for i, p in reversed(list(enumerate(pending))):
            response = await p.wait()
            assert [t.name for t in response.topics] == [f"submit-{i}"]
        assert proxy.max_in_flight == 5
