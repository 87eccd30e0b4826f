"""The producer against the real local broker (Tansu), on asyncio and trio."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import (
    IllegalStateError,
    InvalidTopicError,
    KafkaTimeoutError,
    MessageSizeTooLargeError,
    ProducerClosedError,
)
from aiokafka_ng.producer import Producer, ProducerRecord, RecordMetadata
from aiokafka_ng.producer.partitioner import default_partition
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio


async def test_send_and_await_metadata(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        fut = await producer.send(topic, b"v1", key=b"k", headers=[("h", b"x")], timestamp_ms=12345)
        md = await fut
        assert isinstance(md, RecordMetadata)
        assert md.topic == topic and md.offset == 0 and md.timestamp == 12345
        assert md.partition == default_partition(b"k", 4)  # Tansu auto-creates 4 partitions
        md2 = await producer.send_and_wait(topic, b"v2", key=b"k")
        assert (md2.partition, md2.offset) == (md.partition, 1)
        assert await producer.partitions_for(topic) == {0, 1, 2, 3}


async def test_callbacks_and_many_records_in_order(kafka_broker: Any) -> None:
    topic = topic_name()
    seen: list[int] = []
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=2) as producer:
        futs = []
        for i in range(2000):
            fut = await producer.send(topic, b"%d" % i, partition=1)
            fut.add_done_callback(lambda f: seen.append(f.result().offset))
            futs.append(fut)
        await producer.flush()
        assert all(f.done() for f in futs)
        assert [f.result().offset for f in futs] == list(range(2000))
    assert seen == list(range(2000))


async def test_send_does_not_wait_for_metadata(kafka_broker: Any) -> None:
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        topic = topic_name("fresh")
        t0 = time.perf_counter()
        futs = [await producer.send(topic, b"x") for _ in range(1000)]
        elapsed = time.perf_counter() - t0
        assert not futs[0].done()  # returned before anything could be delivered
        assert elapsed < 0.5
        await producer.flush(timeout=30)
        assert all(f.result().topic == topic for f in futs)


async def test_bad_input(kafka_broker: Any) -> None:
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, max_request_size=10_000
    ) as producer:
        topic = topic_name()
        with pytest.raises(TypeError, match="value"):
            await producer.send(topic, "not bytes")
        with pytest.raises(TypeError, match="key"):
            await producer.send(topic, b"v", key=123)
        with pytest.raises(InvalidTopicError):
            await producer.send("bad topic!", b"v")
        with pytest.raises(InvalidTopicError):
            await producer.send("..", b"v")
        with pytest.raises(TypeError, match="headers"):
            await producer.send(topic, b"v", headers=[(1, b"x")])
        before = await producer.send(topic, b"small", partition=0)
        big = await producer.send(topic, b"x" * 20_000, partition=0)
        after = await producer.send(topic, b"small", partition=0)
        assert isinstance(big.exception(), MessageSizeTooLargeError)
        assert (await before).offset + 1 == (await after).offset
    with pytest.raises(ProducerClosedError):
        await producer.send(topic, b"v")


async def test_not_started() -> None:
    producer = Producer(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(IllegalStateError):
        await producer.send("t", b"v")
    await producer.close()


async def test_serializers_and_send_batch(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        key_serializer=lambda k: None if k is None else k.encode(),
        value_serializer=lambda v: repr(v).encode(),
    ) as producer:
        futs = await producer.send_batch(
            topic, [ProducerRecord({"a": 1}, key="x", partition=2), [1, 2], None]
        )
        mds = [await f for f in futs]
        assert mds[0].partition == 2


@pytest.mark.parametrize("acks", [0, 1])
async def test_acks_variants(kafka_broker: Any, acks: int) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, acks=acks, enable_idempotence=False
    ) as producer:
        futs = [await producer.send(topic, b"%d" % i, partition=0) for i in range(100)]
        await producer.flush(timeout=30)
        offsets = [f.result().offset for f in futs]
        if acks == 0:
            assert offsets == [-1] * 100  # acks=0: delivered, offset unknown
        else:
            assert offsets == list(range(100))


async def test_max_in_flight_one_keeps_order(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        enable_idempotence=False,
        max_in_flight_requests_per_connection=1,
        batch_size=200,
        linger_ms=0,
    ) as producer:
        futs = [await producer.send(topic, b"%05d" % i, partition=3) for i in range(500)]
        await producer.flush(timeout=30)
        assert [f.result().offset for f in futs] == list(range(500))


async def test_flush_timeout_and_close_fail_pending(kafka_broker: Any) -> None:
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=60_000, batch_size=1 << 20
    ) as producer:
        topic = topic_name()
        await producer.partitions_for(topic)  # metadata known
        fut0 = await producer.send(topic, b"warm", partition=0)
        # flush overrides linger
        fut = await producer.send(topic, b"lingering", partition=0)
        await producer.flush(timeout=10)
        assert fut.result().offset == 1
        assert fut0.result().offset == 0
    # close with timeout 0 on a lingering batch: delivered (close drains) or failed, never hung
    producer2 = Producer(bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=60_000)
    await producer2.start()
    fut = await producer2.send(topic_name(), b"x")
    await producer2.close(timeout=0)
    assert fut.done()
    if fut.exception() is not None:
        assert isinstance(fut.exception(), KafkaTimeoutError)


async def test_broker_restart_gets_a_new_producer_id_and_keeps_going(
    fresh_kafka_broker: Any,
) -> None:
    # Tansu with memory storage forgets everything on restart, so our next batch carries a
    # producer id it does not know: UNKNOWN_PRODUCER_ID. KIP-360: reset and keep producing.
    broker = fresh_kafka_broker
    topic = topic_name("restart")
    async with Producer(
        bootstrap_servers=broker.bootstrap_servers, request_timeout_ms=3000
    ) as producer:
        first = [await producer.send(topic, b"a%d" % i, partition=0) for i in range(50)]
        await producer.flush(timeout=30)
        assert [f.result().offset for f in first] == list(range(50))
        pid = producer.statistics()["producer_id"]
        await broker.stop()
        await broker.start()
        second = [await producer.send(topic, b"b%d" % i, partition=0) for i in range(50)]
        await producer.flush(timeout=60)
        assert all(f.exception() is None for f in second), second[0].exception()
        # the restarted broker started the partition again from offset 0
        assert [f.result().offset for f in second] == list(range(50))
        stats = producer.statistics()
        assert stats["producer_id_resets"] >= 1
        assert stats["producer_id"] != pid or stats["producer_id_resets"] >= 1


async def test_pipelined_idempotent_requests_reach_the_broker_in_order(kafka_broker: Any) -> None:
    # 5 requests in flight with small batches: if two requests of a partition were ever
    # written out of order, the broker would answer OUT_OF_ORDER_SEQUENCE_NUMBER and we would
    # see a retry. (trio shuffles task start order, so this checks write ordering for real.)
    topic = topic_name("pipe")
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, batch_size=512, linger_ms=0
    ) as producer:
        futs = [await producer.send(topic, b"%05d" % i, partition=i % 2) for i in range(20_000)]
        await producer.flush(timeout=60)
        stats = producer.statistics()
        assert all(f.exception() is None for f in futs)
        assert stats["retries"] == 0 and stats["producer_id_resets"] == 0
        assert sum(stats["senders"].values()) > 50  # many requests were pipelined
        for p in (0, 1):
            offsets = [f.result().offset for f in futs[p::2]]
            assert offsets == list(range(10_000))


async def test_cancelled_while_producing_cleans_up(kafka_broker: Any) -> None:
    # An outer cancel scope fires inside `async with Producer`: close() still runs, every
    # future gets an outcome, and no socket or task is left behind (warnings are errors).
    futs = []
    with anyio.move_on_after(0.5) as scope:
        async with Producer(
            bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=60_000, batch_size=1 << 20
        ) as producer:
            futs = [await producer.send(topic_name(), b"x") for _ in range(10)]
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert futs and all(f.done() for f in futs)


def test_from_properties_builds_a_producer() -> None:
    producer = Producer.from_properties(
        {"bootstrap.servers": "127.0.0.1:9092", "linger.ms": "7", "acks": "1"}
    )
    assert producer.config.linger_ms == 7 and producer.config.acks == 1
    assert producer.config.enable_idempotence is False  # acks=1 and idempotence not set
    assert "new" in repr(producer)


async def test_record_larger_than_buffer_memory_fails_alone(kafka_broker: Any) -> None:
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, buffer_memory=100_000, max_block_ms=100
    ) as producer:
        topic = topic_name()
        big = await producer.send(topic, b"x" * 150_000)  # < max_request_size, > buffer
        assert isinstance(big.exception(), MessageSizeTooLargeError)
        ok = await producer.send_and_wait(topic, b"fine", partition=0)
        assert ok.offset == 0


async def test_statistics_count_records_batches_and_round_trips(kafka_broker: Any) -> None:
    topic = topic_name("stats")
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, max_request_size=4096, linger_ms=1
    ) as producer:
        futures = [await producer.send(topic, b"x" * 100, partition=i % 2) for i in range(200)]
        too_big = await producer.send(topic, b"y" * 10_000)
        await producer.flush()
        for fut in futures:
            await fut
        assert isinstance(too_big.exception(), MessageSizeTooLargeError)
        stats = producer.statistics()
        assert stats["records_sent"] == 200
        assert stats["records_failed"] == 1
        assert 2 <= stats["batches_sent"] <= 200
        assert stats["buffer_bytes_used"] == 0  # everything settled: all memory returned
        assert stats["in_flight_requests"] == 0
        latency = stats["request_latency_ms"]
        assert latency["count"] >= 1
        assert 0 < latency["avg"] <= latency["max"]
