"""Clients started in one task and closed in another, as startup/cleanup hooks run in
separate tasks, sync code behind a blocking portal, ``loop.run_until_complete(p.start())``
... ``loop.run_until_complete(p.stop())`` (aiokafka's old examples; pytest-asyncio's async
fixtures too) and ``await asyncio.create_task(client.start())`` do. Before the clients ran
their task groups in a task of their own (cluster/host.py), each of these failed with
anyio's "Attempted to exit cancel scope in a different task". Real broker."""

from __future__ import annotations

import asyncio
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

import anyio
import anyio.from_thread
import pytest

from aiokafka_ng import AdminClient, Consumer, Producer
from aiokafka_ng.compat import AIOKafkaAdminClient, AIOKafkaConsumer, AIOKafkaProducer

# aiohttp is not installed here: FakeApp below runs each hook signal in a task of its own,
# the pattern reported for aiohttp's on_startup/on_cleanup (not checked against aiohttp).


@dataclass
class Kind:
    """How to start, use and close one kind of client."""

    make: Callable[[str], Any]
    start: str
    close: str
    use: Callable[[Any, str], Awaitable[Any]]


async def produce(client: Any, topic: str) -> int:
    meta = await client.send_and_wait(topic, b"v", partition=0)
    return int(meta.offset)


async def partitions(client: Any, topic: str) -> frozenset[int]:
    return frozenset(await client.partitions_for_topic(topic))


async def topics(client: Any, topic: str) -> bool:
    return topic in await client.list_topics()


KINDS = {
    "Producer": Kind(lambda b: Producer(bootstrap_servers=b), "start", "close", produce),
    "AIOKafkaProducer": Kind(
        lambda b: AIOKafkaProducer(bootstrap_servers=b), "start", "stop", produce
    ),
    "Consumer": Kind(lambda b: Consumer(bootstrap_servers=b), "start", "stop", partitions),
    "AIOKafkaConsumer": Kind(
        lambda b: AIOKafkaConsumer(bootstrap_servers=b), "start", "stop", partitions
    ),
    "AdminClient": Kind(lambda b: AdminClient(bootstrap_servers=b), "__aenter__", "close", topics),
    "AIOKafkaAdminClient": Kind(
        lambda b: AIOKafkaAdminClient(bootstrap_servers=b), "start", "close", topics
    ),
}


async def ensure_topic(bootstrap: str) -> str:
    topic = f"life-{uuid.uuid4().hex[:8]}"
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_and_wait(topic, b"first", partition=0)
    return topic


def check_used(result: Any) -> None:
    # produce -> the offset after "first"; partitions -> a non-empty set; topics -> True
    assert result == 1 or result is True or (isinstance(result, frozenset) and result), result


@pytest.mark.anyio
@pytest.mark.parametrize("kind", list(KINDS))
async def test_start_use_and_close_in_three_tasks(
    anyio_backend: str, kafka_broker: Any, kind: str
) -> None:
    k = KINDS[kind]
    bootstrap = kafka_broker.bootstrap_servers
    topic = await ensure_topic(bootstrap)
    client = k.make(bootstrap)
    results: list[Any] = []

    async def use() -> None:
        results.append(await k.use(client, topic))

    with anyio.fail_after(30):
        async with anyio.create_task_group() as tg:
            tg.start_soon(getattr(client, k.start))  # task A
        async with anyio.create_task_group() as tg:
            tg.start_soon(use)  # task C
        async with anyio.create_task_group() as tg:
            tg.start_soon(getattr(client, k.close))  # task B
    check_used(results[0])
    assert client.status().state == "closed"


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kind", list(KINDS))
async def test_create_task_start_then_close(
    anyio_backend: str, kafka_broker: Any, kind: str
) -> None:
    k = KINDS[kind]
    bootstrap = kafka_broker.bootstrap_servers
    topic = await ensure_topic(bootstrap)
    client = k.make(bootstrap)
    with anyio.fail_after(30):
        await asyncio.create_task(getattr(client, k.start)())
        check_used(await k.use(client, topic))
        await getattr(client, k.close)()
    assert client.status().state == "closed"


class FakeApp:
    """A web app's hook registry: every signal (startup, cleanup) runs in a task of its
    own, requests in tasks of their own."""

    def __init__(self) -> None:
        self.state: dict[str, Any] = {}
        self.on_startup: list[Callable[[FakeApp], Awaitable[None]]] = []
        self.on_cleanup: list[Callable[[FakeApp], Awaitable[None]]] = []

    async def _signal(self, hooks: list[Callable[[FakeApp], Awaitable[None]]]) -> None:
        async with anyio.create_task_group() as tg:
            for hook in hooks:
                tg.start_soon(hook, self)
                await anyio.lowlevel.checkpoint()

    async def serve(self, handler: Callable[[FakeApp], Awaitable[Any]], requests: int) -> list[Any]:
        await self._signal(self.on_startup)
        answers: list[Any] = []

        async def request() -> None:
            answers.append(await handler(self))

        async with anyio.create_task_group() as tg:
            for _ in range(requests):
                tg.start_soon(request)
        await self._signal(self.on_cleanup)
        return answers


@pytest.mark.anyio
async def test_startup_and_cleanup_hooks_in_separate_tasks(
    anyio_backend: str, kafka_broker: Any
) -> None:
    bootstrap = kafka_broker.bootstrap_servers
    topic = await ensure_topic(bootstrap)
    app = FakeApp()

    async def start_kafka(app: FakeApp) -> None:
        app.state["producer"] = AIOKafkaProducer(bootstrap_servers=bootstrap)
        await app.state["producer"].start()
        app.state["admin"] = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
        await app.state["admin"].start()

    async def stop_kafka(app: FakeApp) -> None:
        await app.state["producer"].stop()
        await app.state["admin"].close()

    async def handler(app: FakeApp) -> int:
        assert topic in await app.state["admin"].list_topics()
        return await produce(app.state["producer"], topic)

    app.on_startup.append(start_kafka)
    app.on_cleanup.append(stop_kafka)
    with anyio.fail_after(30):
        offsets = await app.serve(handler, requests=5)
    assert sorted(offsets) == [1, 2, 3, 4, 5]
    assert app.state["producer"].status().state == "closed"
    assert app.state["admin"].status().state == "closed"


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_sync_code_through_a_blocking_portal(backend: str, kafka_broker: Any) -> None:
    # Every portal.call runs in a new task of the portal's event loop: Flask/Django code
    # (and Starlette's TestClient.portal) drive async clients this way.
    bootstrap = kafka_broker.bootstrap_servers
    with anyio.from_thread.start_blocking_portal(backend) as portal:
        topic = portal.call(ensure_topic, bootstrap)
        producer = Producer(bootstrap_servers=bootstrap)
        consumer = Consumer(bootstrap_servers=bootstrap)
        portal.call(producer.start)
        portal.call(consumer.start)
        assert portal.call(produce, producer, topic) == 1
        assert portal.call(partitions, consumer, topic)
        portal.call(consumer.stop)
        portal.call(producer.close)
    assert producer.status().state == "closed" and consumer.status().state == "closed"


@pytest.mark.parametrize("kind", ["AIOKafkaProducer", "AIOKafkaConsumer", "AIOKafkaAdminClient"])
def test_run_until_complete_per_call(kafka_broker: Any, kind: str) -> None:
    # Each run_until_complete wraps its coroutine in a new asyncio Task.
    k = KINDS[kind]
    bootstrap = kafka_broker.bootstrap_servers
    loop = asyncio.new_event_loop()
    try:
        topic = loop.run_until_complete(ensure_topic(bootstrap))
        client = k.make(bootstrap)
        loop.run_until_complete(asyncio.wait_for(getattr(client, k.start)(), 30))
        check_used(loop.run_until_complete(asyncio.wait_for(k.use(client, topic), 30)))
        loop.run_until_complete(asyncio.wait_for(getattr(client, k.close)(), 30))
        assert client.status().state == "closed"
    finally:
        loop.close()
