"""Network-core guarantees observed from the other end of the connection: FakeKafka counts
the requests each connection has sent and not had answered, so these tests do not trust the
client's own bookkeeping: in-flight bounds, pipelining in call order, and the poisoning of a
connection whose answers come back out of order. In memory, on virtual time."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster.pool import ConnectionPool
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

NODE = 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _metadata(topic: str) -> MetadataRequest:
    return MetadataRequest(topics=[MetadataRequestTopic(name=topic)])


def _config(kafka: FakeKafka, **settings: Any) -> ConnectionConfig:
    return ConnectionConfig(transport=kafka.transport, request_timeout_s=20, **settings)


@pytest.mark.parametrize("max_in_flight", [1, 2, 5])
async def test_in_flight_never_exceeds_the_semaphore(max_in_flight: int) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        port = kafka.nodes[NODE].port
        async with connect("127.0.0.1", port, _config(kafka, max_in_flight=max_in_flight)) as conn:
            kafka.delay(NODE, 150)  # slow answers: a pipelining client piles requests up
            results: list[Any] = []

            async def one() -> None:
                results.append(await conn.send(_metadata(f"inflight-{max_in_flight}")))

            async with anyio.create_task_group() as tg:
                for _ in range(3 * max_in_flight):
                    tg.start_soon(one)
            assert len(results) == 3 * max_in_flight
            # Exactly N seen at the broker's end: never more, and pipelining reaches the bound.
            assert kafka.max_in_flight() == max_in_flight
            assert conn.statistics().max_in_flight_seen == max_in_flight


async def test_correlation_mismatch_poisons_and_next_request_reconnects() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        port = kafka.nodes[NODE].port
        async with connect("127.0.0.1", port, _config(kafka, max_in_flight=5)) as conn:
            kafka.swap_next_responses(NODE)
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
        await kafka.wait_until(lambda: kafka.open_connections() == 0, within=5)

        # The pool hands out a fresh connection for the next request.
        async with ConnectionPool(_config(kafka)) as pool:
            pool.set_address(NODE, "127.0.0.1", port)
            first = await pool.get(NODE)
            kafka.swap_next_responses(NODE)
            with anyio.fail_after(10):
                async with anyio.create_task_group() as tg:
                    for _ in range(2):
                        tg.start_soon(_swallow, first.send(_metadata("swap2")))
            assert first.closed
            await first.wait_closed()
            second = await pool.get(NODE)  # a closed connection is never handed out again
            assert second is not first
            response = await second.send(_metadata("swap2"))
            assert response.topics[0].name == "swap2"
            assert kafka.connections(NODE) == 3


async def _swallow(coro: Any) -> None:
    try:
        await coro
    except KafkaConnectionError:
        pass


async def test_submit_writes_in_call_order_and_answers_each_request() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        port = kafka.nodes[NODE].port
        async with connect("127.0.0.1", port, _config(kafka, max_in_flight=5)) as conn:
            kafka.delay(NODE, 100)
            before = conn.statistics().requests_sent
            pending = [await conn.submit(_metadata(f"submit-{i}")) for i in range(5)]
            # All five were written before any answer came back: pipelined, in call order.
            assert conn.statistics().requests_sent - before == 5
            assert conn.statistics().in_flight == 5
            for i, p in reversed(list(enumerate(pending))):
                response = await p.wait()
                assert [t.name for t in response.topics] == [f"submit-{i}"]
            assert kafka.max_in_flight() == 5
