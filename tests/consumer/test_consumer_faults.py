"""The consumer through a ClusterSimulator (one node): connections cut mid-response, slow
fetches.

Every record must still arrive exactly once, in order per partition: a fetch whose
connection dies is retried (after the shared backoff) from the unchanged position.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, ConsumerStoppedError, TopicPartition
from aiokafka_ng.errors import IllegalStateError
from aiokafka_ng.testing import ClusterSimulator, LocalBroker
from tests.consumer.helpers import Row, confluent_produce_async
from tests.helpers import topic_name

# broker: it starts its own brokers, no fixture says so (see tests/conftest.py)
pytestmark = [pytest.mark.anyio, pytest.mark.broker]

FETCH = 1


async def test_cut_connections_lose_and_duplicate_nothing() -> None:
    async with LocalBroker() as broker, ClusterSimulator(broker, brokers=1) as sim:
        topic = topic_name("cut")
        rows: list[Row] = [(i % 2, None, b"%06d" % i, [], 1) for i in range(3000)]
        await confluent_produce_async(
            f"127.0.0.1:{broker.port}", topic, rows, **{"batch.num.messages": 100}
        )
        async with Consumer(
            bootstrap_servers=sim.bootstrap_servers,
            auto_offset_reset="earliest",
            fetch_max_bytes=8 * 1024,  # many small fetches, so cuts land in the middle
            retry_backoff_ms=10,
            retry_backoff_max_ms=50,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=50,
        ) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(2)])
            seen: dict[int, list[bytes]] = {0: [], 1: []}
            offsets: dict[int, list[int]] = {0: [], 1: []}
            cuts = 0
            polls = 0
            with anyio.fail_after(60):
                while sum(len(v) for v in seen.values()) < len(rows):
                    polls += 1
                    if polls % 6 == 0 and cuts < 8:
                        cuts += 1
                        # Alternate: a response cut halfway, and a request that never returns.
                        if cuts % 2:
                            sim.cut_after_bytes(0, 3000)
                        else:
                            sim.cut_after(0, 1, forward_last=True, scope="connection")
                    got = await consumer.getmany(timeout_ms=200, max_records=40)
                    for tp, records in got.items():
                        seen[tp.partition].extend(r.value for r in records)
                        offsets[tp.partition].extend(r.offset for r in records)
            stats = consumer.statistics().fetcher
        assert cuts == 8 and stats.fetch_failures >= 4
        for p in (0, 1):
            assert offsets[p] == list(range(1500))
            assert seen[p] == [v for q, _, v, _, _ in rows if q == p]


async def test_slow_fetch_does_not_block_getmany_timeout() -> None:
    async with LocalBroker() as broker, ClusterSimulator(broker, brokers=1) as sim:
        topic = topic_name("slow")
        await confluent_produce_async(f"127.0.0.1:{broker.port}", topic, [(0, None, b"x", [], 1)])
        async with Consumer(
            bootstrap_servers=sim.bootstrap_servers, auto_offset_reset="earliest"
        ) as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            assert (await c.getone()).value == b"x"
            sim.delay(0, 2000, api_key=FETCH)
            start = anyio.current_time()
            assert await c.getmany(timeout_ms=300) == {}
            assert anyio.current_time() - start < 1.5
            sim.delay(0, 0, api_key=FETCH)


async def test_a_bug_in_the_fetcher_task_fails_polls_loudly_not_a_hang(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An exception nothing handles (here injected where fetch responses are applied) must
    # not cancel the task group -- whose scope covers the caller's code -- nor leave a poll
    # waiting forever: polls raise it, stop() returns, and the log says why.
    from aiokafka_ng.consumer.fetcher import Fetcher

    def broken(self: Any, *args: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(Fetcher, "_handle_response", broken)
    topic = topic_name()
    await confluent_produce_async(
        kafka_broker.bootstrap_servers, topic, [(0, None, b"v", [], 1000)]
    )
    with anyio.fail_after(20):
        async with Consumer(bootstrap_servers=kafka_broker.bootstrap_servers) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            with pytest.raises(IllegalStateError, match="background task failed") as info:
                await consumer.getmany(timeout_ms=10_000)
            assert isinstance(info.value.__cause__, RuntimeError)
            with pytest.raises(IllegalStateError, match="injected bug"):
                await consumer.getone()
    assert "a background task failed" in caplog.text


async def test_a_task_failing_before_it_started_fails_start_with_its_error(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    from aiokafka_ng.consumer.fetcher import Fetcher

    async def broken(self: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected bug at start")

    monkeypatch.setattr(Fetcher, "run", broken)
    consumer = Consumer(bootstrap_servers=kafka_broker.bootstrap_servers)
    with anyio.fail_after(20), pytest.raises(RuntimeError, match="injected bug at start"):
        await consumer.start()
    with pytest.raises(ConsumerStoppedError):
        await consumer.getmany()
