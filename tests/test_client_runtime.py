"""The lifecycle every client shares (one ClientRuntime under all four), through the public
API only, on FakeKafka in memory: Producer, Consumer, ShareConsumer and AdminClient go
NEW -> RUNNING -> CLOSING -> CLOSED alike, answer ``status()`` and ``statistics()`` alike,
close twice as a no-op, refuse a second start, and may be closed from another task than
the one that started them. (tests/test_client_lifecycle.py runs the same clients against
the embedded broker; the per-client fault tests cover a failed background task.)
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any

import anyio
import pytest

from aiokafka_ng import AdminClient, Consumer, Producer, ShareConsumer
from aiokafka_ng.cluster import ClientStatistics
from aiokafka_ng.errors import IllegalStateError
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio

KINDS = ["producer", "consumer", "share_consumer", "admin"]
#: What start() on a client that is not new says (each client's own words; a pattern).
STARTED_TWICE = {
    "producer": r"^producer is {state}; start\(\) runs once$",
    "consumer": r"^a consumer can be started only once$",
    "share_consumer": r"^a share consumer can be started only once$",
    "admin": r"^this AdminClient is {state}; start\(\) runs once$",
}
PRODUCE = 0


def make(kind: str, config: dict[str, Any]) -> Any:
    client_id = f"runtime-{kind}"
    if kind == "producer":
        return Producer(client_id=client_id, **config)
    if kind == "consumer":
        return Consumer(client_id=client_id, **config)
    if kind == "share_consumer":
        # No topics: it joins no group (FakeKafka does not model share groups), and its
        # lifecycle is the one under test.
        return ShareConsumer(group_id="runtime-share", client_id=client_id, **config)
    return AdminClient(client_id=client_id, **config)


async def in_own_task(call: Callable[[], Coroutine[Any, Any, Any]]) -> None:
    """Run ``call()`` to its end in a task of its own (which then ends)."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(call)


def check_statistics(client: Any, state: str) -> ClientStatistics:
    stats = client.statistics()
    assert isinstance(stats, ClientStatistics)
    assert stats.state == state
    assert stats.client_id == client.config.client_id
    return stats


@pytest.mark.parametrize("kind", KINDS)
async def test_one_lifecycle_for_every_client(kind: str) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        client = make(kind, kafka.client_config())
        # NEW: not ready, no cluster yet.
        status = client.status()
        assert (status.state, status.ready, status.brokers) == ("new", False, ())
        assert check_statistics(client, "new").cluster is None

        # RUNNING, started in a task that then ends: ready once a broker answered.
        await in_own_task(client.start)
        assert client.status().state == "running"
        await client.wait_ready(30)
        status = client.status()
        assert (status.state, status.ready, status.brokers) == ("running", True, (1,))
        assert status.last_error is None
        stats = check_statistics(client, "running")
        assert stats.cluster is not None and stats.cluster.metadata_requests >= 1
        with pytest.raises(IllegalStateError, match=STARTED_TWICE[kind].format(state="running")):
            await client.start()

        # CLOSED, from yet another task: not ready, the last counters kept.
        await in_own_task(client.close)
        status = client.status()
        assert (status.state, status.ready) == ("closed", False)
        closed = check_statistics(client, "closed")
        assert closed.cluster is not None
        assert closed.cluster.metadata_requests >= stats.cluster.metadata_requests

        # Closing again is a no-op; starting again is refused.
        await client.close()
        assert client.status().state == "closed"
        with pytest.raises(IllegalStateError, match=STARTED_TWICE[kind].format(state="closed")):
            await client.start()
        with pytest.raises(IllegalStateError):
            await client.wait_ready(1)
        assert client.status().state == "closed"


@pytest.mark.parametrize("kind", KINDS)
async def test_a_client_never_started_closes_to_closed(kind: str) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        client = make(kind, kafka.client_config())
        await client.close()
        await client.close()
        status = client.status()
        assert (status.state, status.ready) == ("closed", False)
        assert check_statistics(client, "closed").cluster is None
        with pytest.raises(IllegalStateError, match=STARTED_TWICE[kind].format(state="closed")):
            await client.start()
        assert kafka.received() == []  # nothing was dialled


async def test_closing_is_a_state_of_its_own_and_not_ready() -> None:
    # The producer's close() delivers what is queued first: while it waits for the broker's
    # answer the producer is CLOSING -- not ready -- and a second close() returns at once.
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        arrived, release = anyio.Event(), anyio.Event()

        async def held(call: Any) -> Any:
            arrived.set()
            await release.wait()
            return await kafka.model_answer(call)

        kafka.answer(PRODUCE, held, times=1)
        producer = make("producer", kafka.client_config())
        await producer.start()
        fut = await producer.send("t", b"v")
        await arrived.wait()
        async with anyio.create_task_group() as tg:
            tg.start_soon(producer.close)
            await anyio.wait_all_tasks_blocked()  # close() waits for the held answer
            status = producer.status()
            assert (status.state, status.ready) == ("closing", False)
            assert producer.statistics().state == "closing"
            await producer.close()  # returns at once: the first close() is under way
            assert producer.status().state == "closing"
            release.set()
        assert producer.status().state == "closed"
        assert (await fut).offset == 0  # delivered while closing
