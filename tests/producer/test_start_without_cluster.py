"""Clients start without the cluster (as the Java client and librdkafka do): start() returns
at once, records queue, and a broker that appears later gets them, in order; with no
broker ever, futures fail at delivery_timeout_ms and close() returns in time. Real broker
(Tansu) started late on the port the clients were pointed at."""

from __future__ import annotations

import time
from typing import Any

import anyio
import pytest

from aiokafka_ng import AdminClient, ClientStatus, Consumer, KafkaTimeoutError, NewTopic
from aiokafka_ng.consumer import TopicPartition
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import LocalBroker
from tests.helpers import free_port

pytestmark = pytest.mark.anyio


@pytest.mark.broker  # starts a broker of its own (see tests/conftest.py)
async def test_producer_queues_until_the_broker_appears(anyio_backend: str) -> None:
    port = free_port()
    n = 10_000
    t0 = time.perf_counter()
    async with Producer(
        bootstrap_servers=f"127.0.0.1:{port}", retry_backoff_max_ms=200
    ) as producer:
        started = time.perf_counter() - t0
        assert started < 1.0, started
        status = producer.status()
        assert isinstance(status, ClientStatus)
        assert status.state == "running" and not status.ready
        futs = [await producer.send("late", b"%d" % i, partition=i % 3) for i in range(n)]
        assert not any(f.done() for f in futs)
        with pytest.raises(KafkaTimeoutError, match=f"127.0.0.1:{port}"):
            await producer.wait_ready(timeout=0.2)
        broker = LocalBroker(port=port)
        await broker.start()
        try:
            await producer.wait_ready(timeout=30)
            await producer.flush(timeout=60)
            assert producer.status().ready and producer.status().brokers
            offsets: dict[int, list[int]] = {0: [], 1: [], 2: []}
            for i, f in enumerate(futs):
                meta = f.result()
                assert meta.partition == i % 3
                offsets[meta.partition].append(meta.offset)
            # In send order per partition, nothing lost, nothing doubled.
            assert all(o == list(range(len(o))) for o in offsets.values())
            assert sum(map(len, offsets.values())) == n
        finally:
            await producer.close()
            await broker.stop()
    assert producer.status().state == "closed"


async def test_no_broker_ever_fails_every_record_in_time() -> None:
    port = free_port()
    t0 = time.perf_counter()
    producer = Producer(
        bootstrap_servers=f"127.0.0.1:{port}", delivery_timeout_ms=1500, linger_ms=5,
        request_timeout_ms=1000,
    )  # fmt: skip
    await producer.start()
    assert time.perf_counter() - t0 < 1.0
    futs = [await producer.send("never", b"x") for _ in range(500)]
    with anyio.fail_after(10):
        for f in futs:
            await f.wait_done()
    took = time.perf_counter() - t0
    assert all(isinstance(f.exception(), KafkaTimeoutError) for f in futs)
    assert 1.4 < took < 6, took
    status = producer.status()
    assert (
        not status.ready and status.last_error and f"127.0.0.1:{port}" in (status.bootstrap_servers)
    )
    t1 = time.perf_counter()
    await producer.close()  # (not under fail_after: close() must leave start()'s scopes)
    assert time.perf_counter() - t1 < 3


async def test_admin_and_consumer_start_and_fail_by_their_own_timeouts() -> None:
    port = free_port()
    where = f"127.0.0.1:{port}"
    t0 = time.perf_counter()
    async with (
        AdminClient(
            bootstrap_servers=where, default_api_timeout_ms=800, request_timeout_ms=800
        ) as admin,
        Consumer(bootstrap_servers=where, request_timeout_ms=1000) as consumer,
    ):
        assert time.perf_counter() - t0 < 1.0
        assert not admin.status().ready and not consumer.status().ready
        with pytest.raises(KafkaError) as info:
            (await admin.create_topics([NewTopic("t", 1)])).raise_on_error()
        assert f"no broker of {where} has answered" in str(info.value)
        with pytest.raises(KafkaTimeoutError, match=where):
            await consumer.wait_ready(timeout=0.2)
        consumer.assign([TopicPartition("t", 0)])
        with anyio.fail_after(5):
            assert await consumer.getmany(timeout_ms=300) == {}
    assert time.perf_counter() - t0 < 8


async def test_status_of_a_client_that_never_started(kafka_broker: Any) -> None:
    producer = Producer(bootstrap_servers=kafka_broker.bootstrap_servers)
    assert producer.status() == ClientStatus("new", False, kafka_broker.bootstrap_servers, (), None)
    async with producer:
        await producer.wait_ready(timeout=30)
        status = producer.status()
        assert status.ready and status.brokers and status.last_error is None
