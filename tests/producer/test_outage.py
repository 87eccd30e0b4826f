"""A broker outage a web service can live with: leaving ``async with`` / ``close()`` returns
within ``close_timeout_ms`` and fails what is left with ClosedBeforeDeliveryError;
``send_and_wait(timeout=...)`` raises SendTimeoutError; a broker that goes away is logged
once at WARNING (client id, broker) and once at INFO when it is back. The outage is real:
the test's own broker is stopped (and started again on the same port)."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import ClosedBeforeDeliveryError, SendTimeoutError
from aiokafka_ng.producer import Producer

pytestmark = pytest.mark.anyio

SLACK = 2.0  # seconds on top of a configured bound, for a loaded CI machine


class Capture(logging.Handler):
    """Collects aiokafka_ng records; ``wait_for`` blocks until a matching one arrives."""

    def __init__(self) -> None:
        super().__init__(logging.DEBUG)
        self.records: list[logging.LogRecord] = []
        self._waiters: list[tuple[Any, int, anyio.Event]] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        for match, count, event in self._waiters:
            if sum(1 for r in self.records if match(r)) >= count:
                event.set()

    async def wait_for(self, match: Any, count: int = 1) -> None:
        event = anyio.Event()
        self._waiters.append((match, count, event))
        if sum(1 for r in self.records if match(r)) >= count:
            event.set()
        await event.wait()


@pytest.fixture
def capture() -> Any:
    handler = Capture()
    logger = logging.getLogger("aiokafka_ng")
    old_level = logger.level
    logger.addHandler(handler)
    logger.setLevel(logging.DEBUG)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(old_level)


async def test_leaving_async_with_during_an_outage_takes_close_timeout(
    anyio_backend: str, fresh_kafka_broker: Any, capture: Capture
) -> None:
    broker = fresh_kafka_broker
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    client_id = f"web-{uuid.uuid4().hex[:6]}"
    with anyio.fail_after(30):
        async with Producer(
            bootstrap_servers=broker.bootstrap_servers, client_id=client_id,
            close_timeout_ms=1000,
        ) as producer:  # fmt: skip
            await producer.send_and_wait(topic, b"before", partition=0)
            await broker.stop()
            fut = await producer.send(topic, b"queued", partition=0)
            t0 = time.perf_counter()
    took = time.perf_counter() - t0
    # Before close_timeout_ms existed this waited delivery_timeout_ms (120 s).
    assert 0.9 <= took < 1.0 + SLACK, took
    exc = fut.exception()
    assert isinstance(exc, ClosedBeforeDeliveryError), exc
    assert "close_timeout_ms=1000" in str(exc)
    warned = [
        r.getMessage()
        for r in capture.records
        if r.levelno == logging.WARNING and r.name == "aiokafka_ng.producer.producer"
    ]
    assert warned == [
        f"producer {client_id}: closed with 1 record(s) undelivered after 1 s "
        "(close_timeout_ms); they fail with ClosedBeforeDeliveryError"
    ]


async def test_close_argument_overrides_close_timeout(
    anyio_backend: str, fresh_kafka_broker: Any
) -> None:
    broker = fresh_kafka_broker
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    producer = Producer(bootstrap_servers=broker.bootstrap_servers, close_timeout_ms=60_000)
    with anyio.fail_after(30):
        await producer.start()
        await producer.send_and_wait(topic, b"before", partition=0)
        await broker.stop()
        futs = [await producer.send(topic, b"%d" % i, partition=0) for i in range(3)]
        t0 = time.perf_counter()
        await producer.close(timeout=0.2)
    assert time.perf_counter() - t0 < 0.2 + SLACK
    assert all(isinstance(f.exception(), ClosedBeforeDeliveryError) for f in futs)


async def test_send_and_wait_timeout(anyio_backend: str, fresh_kafka_broker: Any) -> None:
    broker = fresh_kafka_broker
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(30):
        async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            meta = await producer.send_and_wait(topic, b"up", partition=0, timeout=20)
            assert meta.offset == 0
            await broker.stop()
            t0 = time.perf_counter()
            with pytest.raises(SendTimeoutError, match="may still be delivered"):
                await producer.send_and_wait(topic, b"down", partition=0, timeout=0.5)
            took = time.perf_counter() - t0
            assert 0.45 <= took < 0.5 + SLACK, took
            # The record stays queued (not failed, still holding buffer memory).
            stats = producer.statistics()
            assert stats["records_failed"] == 0 and stats["buffer_bytes_used"] > 0
            await producer.close(timeout=0)


async def test_send_and_wait_timeout_while_waiting_for_buffer_memory(
    anyio_backend: str, fresh_kafka_broker: Any
) -> None:
    broker = fresh_kafka_broker
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    with anyio.fail_after(30):
        async with Producer(
            bootstrap_servers=broker.bootstrap_servers, buffer_memory=4096, batch_size=1024,
            max_block_ms=60_000,
        ) as producer:  # fmt: skip
            await producer.send_and_wait(topic, b"up", partition=0)
            await broker.stop()
            fut = await producer.send(topic, b"x" * 3000, partition=0)  # fills the buffer
            with pytest.raises(SendTimeoutError, match="was not queued"):
                await producer.send_and_wait(topic, b"y" * 3000, partition=0, timeout=0.3)
            await producer.close(timeout=0)
    assert isinstance(fut.exception(), ClosedBeforeDeliveryError)


def pool_record(client_id: str, level: int) -> Any:
    def match(r: logging.LogRecord) -> bool:
        return (
            r.name == "aiokafka_ng.cluster.pool"
            and r.levelno == level
            and r.getMessage().startswith(f"producer {client_id}: ")
        )

    return match


async def test_broker_loss_logged_once_at_warning_and_return_at_info(
    anyio_backend: str, fresh_kafka_broker: Any, capture: Capture
) -> None:
    broker = fresh_kafka_broker
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    client_id = f"web-{uuid.uuid4().hex[:6]}"
    where = f"broker 111 at 127.0.0.1:{broker.port}"

    def connect_failed(r: logging.LogRecord) -> bool:
        return r.name == "aiokafka_ng.cluster.pool" and r.getMessage().startswith(
            f"connect to node 111 at 127.0.0.1:{broker.port} failed"
        )

    with anyio.fail_after(60):
        async with Producer(
            bootstrap_servers=broker.bootstrap_servers, client_id=client_id,
            retry_backoff_max_ms=200, reconnect_backoff_max_ms=200,
        ) as producer:  # fmt: skip
            await producer.send_and_wait(topic, b"up", partition=0)
            await broker.stop()
            await capture.wait_for(pool_record(client_id, logging.WARNING))
            fut = await producer.send(topic, b"during", partition=0)
            # Several reconnects fail during the outage; none of them may log again.
            await capture.wait_for(connect_failed, count=5)
            await broker.start()
            await capture.wait_for(pool_record(client_id, logging.INFO))
            meta = await fut  # delivered after the outage
            assert meta.topic == topic
    warnings = [r.getMessage() for r in capture.records if pool_record(client_id, 30)(r)]
    infos = [r.getMessage() for r in capture.records if pool_record(client_id, 20)(r)]
    assert len(warnings) == 1 and where in warnings[0], warnings
    assert "lost" in warnings[0] and "logged again once it is back" in warnings[0]
    assert len(infos) == 1 and where in infos[0] and "reachable again" in infos[0], infos
    # Nothing else of ours above DEBUG repeated per reconnect attempt (it once was INFO).
    noisy = [
        r.getMessage()
        for r in capture.records
        if r.levelno >= logging.INFO and "unreachable" in r.getMessage()
    ]
    assert noisy == []
