"""The consumer against a faulty FakeKafka node, on virtual time: connections cut
mid-response, slow fetches, and bugs of ours in its background tasks.

Every record must still arrive exactly once, in order per partition: a fetch whose
connection dies is retried (after the shared backoff) from the unchanged position.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.consumer import Consumer, ConsumerStoppedError, TopicPartition
from aiokafka_ng.errors import IllegalStateError
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

FETCH = 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def produce(kafka: FakeKafka, topic: str, rows: list[tuple[int, bytes]]) -> None:
    """Write (partition, value) rows in batches of about 100 records."""
    async with Producer(**kafka.client_config(), linger_ms=5, batch_size=1500) as producer:
        futures = [await producer.send(topic, v, partition=p) for p, v in rows]
        await producer.flush()
    assert all(f.exception() is None for f in futures)


async def test_cut_connections_lose_and_duplicate_nothing() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        topic = "cut"
        kafka.create_topic(topic, 2)
        rows = [(i % 2, b"%06d" % i) for i in range(3000)]
        await produce(kafka, topic, rows)
        async with Consumer(
            **kafka.client_config(),
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
                            kafka.cut_after_bytes(1, 3000)
                        else:
                            kafka.cut_after(1, 1)  # the next request: its connection closes
                    got = await consumer.getmany(timeout_ms=200, max_records=40)
                    for tp, records in got.items():
                        seen[tp.partition].extend(r.value or b"" for r in records)
                        offsets[tp.partition].extend(r.offset for r in records)
            stats = consumer.statistics().fetcher
        assert cuts == 8 and stats.fetch_failures >= 4
        for p in (0, 1):
            assert offsets[p] == list(range(1500))
            assert seen[p] == [v for q, v in rows if q == p]


async def test_slow_fetch_does_not_block_getmany_timeout() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        topic = "slow"
        kafka.create_topic(topic)
        await produce(kafka, topic, [(0, b"x")])
        async with Consumer(**kafka.client_config(), auto_offset_reset="earliest") as c:
            tp = TopicPartition(topic, 0)
            c.assign([tp])
            assert (await c.getone()).value == b"x"
            kafka.delay(1, 2000, api_key=FETCH)
            start = anyio.current_time()
            assert await c.getmany(timeout_ms=300) == {}
            # the poll's own timeout, not the 2 s the fetch answer takes
            assert anyio.current_time() - start == pytest.approx(0.3, abs=1e-6)
            kafka.delay(1, 0, api_key=FETCH)


async def test_a_bug_in_the_fetcher_task_fails_polls_loudly_not_a_hang(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An exception nothing handles (here injected where fetch responses are applied) must
    # not cancel the task group -- whose scope covers the caller's code -- nor leave a poll
    # waiting forever: polls raise it, stop() returns, and the log says why.
    from aiokafka_ng.consumer.fetcher import Fetcher

    def broken(self: Any, *args: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(Fetcher, "_handle_response", broken)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        topic = "bug"
        kafka.create_topic(topic)
        await produce(kafka, topic, [(0, b"v")])
        with anyio.fail_after(20):
            async with Consumer(**kafka.client_config()) as consumer:
                consumer.assign([TopicPartition(topic, 0)])
                with pytest.raises(IllegalStateError, match="background task failed") as info:
                    await consumer.getmany(timeout_ms=10_000)
                assert isinstance(info.value.__cause__, RuntimeError)
                with pytest.raises(IllegalStateError, match="injected bug"):
                    await consumer.getone()
                # A health check sees it: running, but not ready, and why.
                status = consumer.status()
                assert (status.state, status.ready) == ("running", False)
                assert status.last_error == "RuntimeError: injected bug"
    assert "a background task failed" in caplog.text


async def test_a_task_failing_before_it_started_fails_start_with_its_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from aiokafka_ng.consumer.fetcher import Fetcher

    async def broken(self: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected bug at start")

    monkeypatch.setattr(Fetcher, "run", broken)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        consumer = Consumer(**kafka.client_config())
        with anyio.fail_after(20), pytest.raises(RuntimeError, match="injected bug at start"):
            await consumer.start()
        with pytest.raises(ConsumerStoppedError):
            await consumer.getmany()
