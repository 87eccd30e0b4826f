"""Clients started in one task and closed in another, as startup/cleanup hooks run in
separate tasks, sync code behind a blocking portal, ``loop.run_until_complete(p.start())``
... ``loop.run_until_complete(p.stop())`` (aiokafka's old examples; pytest-asyncio's async
fixtures too) and ``await asyncio.create_task(client.start())`` do. Before the clients ran
their task groups in a task of their own (cluster/host.py), each of these failed with
anyio's "Attempted to exit cancel scope in a different task". Real broker."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine
from dataclasses import dataclass
from functools import partial
from typing import Any

import anyio
import anyio.from_thread
import pytest

from aiokafka_ng import AdminClient, Consumer, Producer
from aiokafka_ng.compat import AIOKafkaAdminClient, AIOKafkaConsumer, AIOKafkaProducer
from tests.helpers import topic_name

# aiohttp is not installed here: FakeApp below runs each hook signal in a task of its own,
# the pattern reported for aiohttp's on_startup/on_cleanup (not checked against aiohttp).


Step = Callable[[], Coroutine[Any, Any, Any]]


@dataclass
class Kind:
    """How to start, use and close one kind of client."""

    make: Callable[[str], Any]
    start: str
    close: str
    use: Callable[[Any, str], Coroutine[Any, Any, Any]]

    def steps(self, client: Any, topic: str) -> list[Step]:
        """start, use, close: each test runs them in tasks of its own choosing, then
        passes what they returned to :func:`check_lifecycle`."""
        return [
            getattr(client, self.start),
            partial(self.use, client, topic),
            getattr(client, self.close),
        ]


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
    topic = topic_name("life")
    async with Producer(bootstrap_servers=bootstrap) as producer:
        await producer.send_and_wait(topic, b"first", partition=0)
    return topic


async def new_client(kind: str, bootstrap: str) -> tuple[Kind, Any, str]:
    """The kind, a client of it not started yet, and a topic with one record."""
    topic = await ensure_topic(bootstrap)
    k = KINDS[kind]
    return k, k.make(bootstrap), topic


def check_used(result: Any) -> None:
    # produce -> the offset after "first"; partitions -> a non-empty set; topics -> True
    assert result == 1 or result is True or (isinstance(result, frozenset) and result), result


def check_lifecycle(client: Any, results: list[Any]) -> None:
    """What :meth:`Kind.steps` returned: the use step worked, and the client is closed."""
    check_used(results[1])
    assert client.status().state == "closed"


@pytest.mark.anyio
@pytest.mark.parametrize("kind", list(KINDS))
async def test_start_use_and_close_in_three_tasks(
    anyio_backend: str, kafka_broker: Any, kind: str
) -> None:
    k, client, topic = await new_client(kind, kafka_broker.bootstrap_servers)
    results: list[Any] = []

    async def in_a_task_of_its_own(step: Step) -> None:
        async def run() -> None:
            results.append(await step())

        async with anyio.create_task_group() as tg:
            tg.start_soon(run)

    with anyio.fail_after(30):
        for step in k.steps(client, topic):  # start in task A, use in B, close in C
            await in_a_task_of_its_own(step)
    check_lifecycle(client, results)


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
@pytest.mark.parametrize("kind", list(KINDS))
async def test_create_task_start_then_close(
    anyio_backend: str, kafka_broker: Any, kind: str
) -> None:
    k, client, topic = await new_client(kind, kafka_broker.bootstrap_servers)
    start, use, close = k.steps(client, topic)
    with anyio.fail_after(30):
        results = [await asyncio.create_task(start()), await use(), await close()]
    check_lifecycle(client, results)


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
        results = [
            loop.run_until_complete(asyncio.wait_for(step(), 30)) for step in k.steps(client, topic)
        ]
        check_lifecycle(client, results)
    finally:
        loop.close()
