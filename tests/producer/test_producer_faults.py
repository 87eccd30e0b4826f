"""The producer against a faulty FakeKafka node, on virtual time: slow metadata, cut
connections, a black-holed broker, and bugs of ours in its background tasks.

One node, reached in memory, so every connection the producer makes (bootstrap and leader)
goes to it and the timings asserted are exact.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import BufferExhaustedError, IllegalStateError, KafkaTimeoutError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

METADATA = 3


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def requests_received(kafka: FakeKafka) -> int:
    return sum(kafka.requests(1).values())


def values(kafka: FakeKafka, topic: str, partition: int) -> list[bytes]:
    return [r.value or b"" for r in kafka.records(topic, partition)]


async def test_send_does_not_wait_for_slow_metadata() -> None:
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(**kafka.client_config()) as producer,
    ):
        kafka.delay(1, 500, api_key=METADATA)
        topic = "slowmeta"
        t0 = anyio.current_time()
        futs = [await producer.send(topic, b"%d" % i) for i in range(1000)]
        # No virtual time passed: no send waited for anything, least of all the 500 ms delay.
        assert anyio.current_time() - t0 == 0
        assert not any(f.done() for f in futs)
        await producer.flush(timeout=30)
        assert anyio.current_time() - t0 >= 0.5  # the records did wait for the metadata
        assert all(f.exception() is None for f in futs)
        # The producer starts without waiting for bootstrap, so its first (delayed)
        # Metadata request may already carry the topic: one request or more.
        assert kafka.requests(1)[METADATA] >= 1
    assert values(kafka, topic, 0) == [b"%d" % i for i in range(1000)]


async def cut_every_sixth_answer(kafka: FakeKafka) -> None:
    """Until cancelled: after each 5 more requests, cut the connection writing the next
    answer after its first byte, and wait for the client to connect again. That request was
    handled (a Produce written) and its answer lost: the nastiest case, a write that
    happened but was not acknowledged."""
    while True:
        seen = requests_received(kafka)
        await kafka.wait_until(lambda n=seen: requests_received(kafka) >= n + 5, within=None)
        attempts = len(kafka.connection_attempts(1))
        kafka.cut_after_bytes(1, 1)
        await kafka.wait_until(
            lambda n=attempts: len(kafka.connection_attempts(1)) > n, within=None
        )


async def _produce_under_cuts(kafka: FakeKafka, producer: Producer, topic: str, n: int) -> None:
    attempts = len(kafka.connection_attempts(1))
    async with anyio.create_task_group() as tg:
        tg.start_soon(cut_every_sixth_answer, kafka)
        futs = [await producer.send(topic, b"%06d" % i, partition=i % 4) for i in range(n)]
        await producer.flush(timeout=120)
        tg.cancel_scope.cancel()
    kafka.clear_faults()
    failed = [f.exception() for f in futs if f.exception() is not None]
    assert failed == []
    assert len(kafka.connection_attempts(1)) - attempts >= 5  # the cuts really happened


async def test_idempotent_cuts_no_loss_no_dup_no_reorder() -> None:
    n = 20_000
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        topic = "cuts-idem"
        kafka.create_topic(topic, 4)
        async with Producer(
            **kafka.client_config(),
            batch_size=1024,
            linger_ms=1,
            max_in_flight_requests_per_connection=5,
        ) as producer:
            await producer.partitions_for(topic)
            await _produce_under_cuts(kafka, producer, topic, n)
        for p in range(4):
            assert values(kafka, topic, p) == [b"%06d" % i for i in range(p, n, 4)], p


async def test_non_idempotent_one_in_flight_cuts_keep_order() -> None:
    n = 10_000
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        topic = "cuts-ord"
        kafka.create_topic(topic, 4)
        async with Producer(
            **kafka.client_config(),
            enable_idempotence=False,
            max_in_flight_requests_per_connection=1,
            batch_size=1024,
            linger_ms=1,
        ) as producer:
            await producer.partitions_for(topic)
            await _produce_under_cuts(kafka, producer, topic, n)
            assert kafka.max_in_flight() == 1
        for p in range(4):
            got = values(kafka, topic, p)
            want = [b"%06d" % i for i in range(p, n, 4)]
            first_seen = list(dict.fromkeys(got))
            assert first_seen == want, f"partition {p}: lost or reordered"
            assert set(got) == set(want)


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_black_holed_broker_blocks_then_raises_within_memory() -> None:
    buffer_memory = 4 * 1024 * 1024
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        topic = "bh"
        async with Producer(
            **kafka.client_config(),
            buffer_memory=buffer_memory,
            max_block_ms=300,
            request_timeout_ms=2000,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up")
            kafka.black_hole(1)
            value = b"v" * 100
            before = _rss()
            futs = []
            with anyio.fail_after(30):
                while True:
                    t0 = anyio.current_time()
                    try:
                        futs.append(await producer.send(topic, value))
                    except BufferExhaustedError:
                        blocked = anyio.current_time() - t0
                        break
            sent = len(futs)
            grown = _rss() - before
            print(f"black hole: sent={sent} blocked={blocked:.3f}s rss_growth={grown}")
            assert blocked == pytest.approx(0.3, abs=1e-6)  # max_block_ms, exactly
            assert sent > 1000
            assert producer.statistics()["memory"].available < 1024
            assert grown < buffer_memory + 4 * 1024 * 1024, grown
            # (not under fail_after: close() leaves the producer's task group, which was
            # entered outside any scope opened here)
            t0 = anyio.current_time()
            with pytest.raises(KafkaTimeoutError):
                await producer.flush(timeout=0.2)
            assert anyio.current_time() - t0 == pytest.approx(0.2, abs=1e-6)
            t0 = anyio.current_time()
            await producer.close(timeout=0)
            assert anyio.current_time() - t0 == 0
            # nothing hangs: every record has an outcome, the undelivered ones a timeout
            assert all(f.done() for f in futs)
            assert all(isinstance(f.exception(), KafkaTimeoutError) for f in futs)
            assert producer.statistics()["memory"].available == buffer_memory
    assert kafka.end_offset(topic, 0) == 1


async def test_a_bug_in_a_background_task_fails_records_loudly_not_a_hang(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An exception nothing handles (here injected where a sender hands an answer to the
    # engine) must not silently stop the senders and leave every awaiter hanging until
    # close(): the pending record fails, later sends are refused, close() returns, and the
    # log says why.
    from aiokafka_ng.producer.engine import ProducerEngine

    def broken(self: Any, *args: Any, **kwargs: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(ProducerEngine, "settle", broken)
    topic = "bug"
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        with anyio.fail_after(20):
            async with Producer(**kafka.client_config()) as p:
                fut = await p.send(topic, b"x")
                with pytest.raises(IllegalStateError, match="background task failed") as info:
                    await fut
                assert isinstance(info.value.__cause__, RuntimeError)
                with pytest.raises(IllegalStateError, match="injected bug"):
                    await p.send(topic, b"y")
                with pytest.raises(IllegalStateError, match="injected bug"):
                    await p.send_many(topic, [b"z"])
                # A health check sees it: running, but not ready, and why.
                status = p.status()
                assert (status.state, status.ready) == ("running", False)
                assert status.last_error == "RuntimeError: injected bug"
    assert "a background task failed" in caplog.text


async def test_a_bug_placing_records_at_metadata_time_fails_them_loudly(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Records waiting for their topic are placed from the cluster's metadata task; a bug
    # there stops the producer the same way instead of leaving them queued until expiry.
    from aiokafka_ng.producer.accumulator import Accumulator

    def broken(*args: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(Accumulator, "place_chunk", broken)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        with anyio.fail_after(20):
            async with Producer(**kafka.client_config()) as p:
                run = await p.send_many("bug", [b"a", b"b"])
                with pytest.raises(IllegalStateError, match="injected bug"):
                    await run
                assert run.failed == 2
