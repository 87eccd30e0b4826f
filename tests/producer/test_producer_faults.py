"""The producer through a ClusterSimulator: slow metadata, cut connections, a black-holed
broker.

The simulator presents the broker as one node on its own port, so every connection the
producer makes (bootstrap and leader) goes through it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

import anyio
import anyio.to_thread
import pytest

from aiokafka_ng.errors import BufferExhaustedError, IllegalStateError, KafkaTimeoutError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import ClusterSimulator, LocalBroker

# broker: it starts its own brokers, no fixture says so (see tests/conftest.py)
pytestmark = [pytest.mark.anyio, pytest.mark.broker]

METADATA = 3


def read_back(bootstrap: str, topic: str, partitions: int, n: int) -> dict[int, list[bytes]]:
    from confluent_kafka import Consumer, TopicPartition

    consumer = Consumer(
        {"bootstrap.servers": bootstrap, "group.id": "faults-" + topic, "enable.auto.commit": False}
    )
    try:
        consumer.assign([TopicPartition(topic, p, 0) for p in range(partitions)])
        got: dict[int, list[bytes]] = {p: [] for p in range(partitions)}
        count = 0
        idle = 0
        while idle < 6:  # read until nothing more arrives for ~3 s after reaching n
            msgs = consumer.consume(num_messages=5000, timeout=0.5)
            for msg in msgs:
                assert msg.error() is None, msg.error()
                got[msg.partition()].append(msg.value())
                count += 1
            idle = idle + 1 if (not msgs and count >= n) else 0
        return got
    finally:
        consumer.close()


async def test_send_does_not_wait_for_slow_metadata() -> None:
    async with (
        LocalBroker() as broker,
        ClusterSimulator(broker, brokers=1) as sim,
        Producer(bootstrap_servers=sim.bootstrap_servers) as producer,
    ):
        sim.delay(0, 500, api_key=METADATA)
        topic = f"slowmeta-{uuid.uuid4().hex[:8]}"
        t0 = time.perf_counter()
        futs = [await producer.send(topic, b"%d" % i) for i in range(1000)]
        elapsed = time.perf_counter() - t0
        print(f"1000 sends with Metadata delayed 500 ms: {elapsed * 1000:.1f} ms")
        assert elapsed < 0.25, elapsed  # a few ms normally; never the 500 ms delay
        assert not any(f.done() for f in futs)
        await producer.flush(timeout=30)
        assert all(f.exception() is None for f in futs)
        # The producer starts without waiting for bootstrap, so its first (delayed)
        # Metadata request may already carry the topic: one request or more.
        assert sim.requests[0][METADATA] >= 1


async def _produce_under_cuts(
    sim: ClusterSimulator, producer: Producer, topic: str, n: int
) -> None:
    # Every connection dies after its 6th request, which still reaches the broker (its
    # answer is lost): the nastiest case, a write that happened but was not acknowledged.
    sim.cut_after(0, 6, forward_last=True, scope="each")
    try:
        futs = [await producer.send(topic, b"%06d" % i, partition=i % 4) for i in range(n)]
        await producer.flush(timeout=120)
    finally:
        sim.clear_faults()
    failed = [f.exception() for f in futs if f.exception() is not None]
    assert failed == []
    assert sim.connections[0] >= 5  # the cuts really happened


async def test_idempotent_cuts_no_loss_no_dup_no_reorder() -> None:
    n = 20_000
    async with LocalBroker() as broker, ClusterSimulator(broker, brokers=1) as sim:
        topic = f"cuts-idem-{uuid.uuid4().hex[:8]}"
        async with Producer(
            bootstrap_servers=sim.bootstrap_servers,
            batch_size=1024,
            linger_ms=1,
            max_in_flight_requests_per_connection=5,
        ) as producer:
            await producer.partitions_for(topic)
            await _produce_under_cuts(sim, producer, topic, n)
        got = await anyio.to_thread.run_sync(read_back, broker.bootstrap_servers, topic, 4, n)
    for p in range(4):
        assert got[p] == [b"%06d" % i for i in range(p, n, 4)], f"partition {p}"


async def test_non_idempotent_one_in_flight_cuts_keep_order() -> None:
    n = 10_000
    async with LocalBroker() as broker, ClusterSimulator(broker, brokers=1) as sim:
        topic = f"cuts-ord-{uuid.uuid4().hex[:8]}"
        async with Producer(
            bootstrap_servers=sim.bootstrap_servers,
            enable_idempotence=False,
            max_in_flight_requests_per_connection=1,
            batch_size=1024,
            linger_ms=1,
        ) as producer:
            await producer.partitions_for(topic)
            await _produce_under_cuts(sim, producer, topic, n)
            assert sim.max_in_flight <= 1
        got = await anyio.to_thread.run_sync(read_back, broker.bootstrap_servers, topic, 4, n)
    for p in range(4):
        want = [b"%06d" % i for i in range(p, n, 4)]
        first_seen = list(dict.fromkeys(got[p]))
        assert first_seen == want, f"partition {p}: lost or reordered"
        # a duplicate may only be a resent batch: it never goes back past a newer record
        # than the one it repeats... so every value is >= the value before it minus a batch
        assert set(got[p]) == set(want)


def _rss() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    raise AssertionError("no VmRSS")


async def test_black_holed_broker_blocks_then_raises_within_memory() -> None:
    buffer_memory = 4 * 1024 * 1024
    async with LocalBroker() as broker, ClusterSimulator(broker, brokers=1) as sim:
        topic = f"bh-{uuid.uuid4().hex[:8]}"
        async with Producer(
            bootstrap_servers=sim.bootstrap_servers,
            buffer_memory=buffer_memory,
            max_block_ms=300,
            request_timeout_ms=2000,
        ) as producer:
            await producer.send_and_wait(topic, b"warm-up")
            sim.black_hole(0)
            value = b"v" * 100
            before = _rss()
            futs = []
            with anyio.fail_after(30):
                while True:
                    t0 = time.perf_counter()
                    try:
                        futs.append(await producer.send(topic, value))
                    except BufferExhaustedError:
                        blocked = time.perf_counter() - t0
                        break
            sent = len(futs)
            grown = _rss() - before
            print(f"black hole: sent={sent} blocked={blocked:.3f}s rss_growth={grown}")
            assert 0.25 <= blocked < 3, blocked
            assert sent > 1000
            assert producer.statistics()["memory"].available < 1024
            assert grown < buffer_memory + 4 * 1024 * 1024, grown
            # (not under fail_after: close() leaves the producer's task group, which was
            # entered outside any scope opened here)
            with pytest.raises(KafkaTimeoutError):
                await producer.flush(timeout=0.2)
            t0 = time.perf_counter()
            await producer.close(timeout=0)
            assert time.perf_counter() - t0 < 5
            # nothing hangs: every record has an outcome, the undelivered ones a timeout
            assert all(f.done() for f in futs)
            assert all(isinstance(f.exception(), KafkaTimeoutError) for f in futs)
            assert producer.statistics()["memory"].available == buffer_memory


async def test_a_bug_in_a_background_task_fails_records_loudly_not_a_hang(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    # An exception nothing handles (here injected where responses are applied) must not
    # silently stop the senders and leave every awaiter hanging until close(): the pending
    # record fails, later sends are refused, close() returns, and the log says why.
    from aiokafka_ng.producer.sender import NodeSender

    def broken(self: Any, response: Any, batches: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(NodeSender, "on_response", broken)
    topic = f"bug-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(20):
        async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
            fut = await p.send(topic, b"x")
            with pytest.raises(IllegalStateError, match="background task failed") as info:
                await fut
            assert isinstance(info.value.__cause__, RuntimeError)
            with pytest.raises(IllegalStateError, match="injected bug"):
                await p.send(topic, b"y")
            with pytest.raises(IllegalStateError, match="injected bug"):
                await p.send_many(topic, [b"z"])
    assert "a background task failed" in caplog.text


async def test_a_bug_placing_records_at_metadata_time_fails_them_loudly(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Records waiting for their topic are placed from the cluster's metadata task; a bug
    # there stops the producer the same way instead of leaving them queued until expiry.
    from aiokafka_ng.producer import bulk

    def broken(*args: Any) -> None:
        raise RuntimeError("injected bug")

    monkeypatch.setattr(bulk, "_place_chunk", broken)
    with anyio.fail_after(20):
        async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
            run = await p.send_many(f"bug-{uuid.uuid4().hex[:8]}", [b"a", b"b"])
            with pytest.raises(IllegalStateError, match="injected bug"):
                await run
            assert run.failed == 2
