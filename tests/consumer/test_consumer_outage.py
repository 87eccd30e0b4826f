"""Stopping a group member while its broker is down takes at most close_timeout_ms (it was
2 x request_timeout_ms = 60 s): the final commit and LeaveGroup are given up on, with one
WARNING saying so. Real broker, stopped by the test."""

from __future__ import annotations

import logging
import time
import uuid
from typing import Any

import anyio
import pytest

from aiokafka_ng import Consumer, Producer

pytestmark = pytest.mark.anyio

# Tansu delays a new group's first join by session_timeout_ms / 2: keep it short.
GROUP_TIMING = {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}


async def test_stop_with_the_broker_down_takes_close_timeout(
    anyio_backend: str, fresh_kafka_broker: Any, caplog: pytest.LogCaptureFixture
) -> None:
    broker = fresh_kafka_broker
    topic = f"outage-{uuid.uuid4().hex[:8]}"
    group = f"g-{topic}"
    with anyio.fail_after(30):
        async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
            await producer.send_and_wait(topic, b"one", partition=0)
        consumer = Consumer(
            topic, bootstrap_servers=broker.bootstrap_servers, group_id=group,
            client_id="outage-consumer", auto_offset_reset="earliest", close_timeout_ms=1000,
            **GROUP_TIMING,
        )  # fmt: skip
        await consumer.start()
        record = await consumer.getone()  # joined, assigned, fetching
        assert record.value == b"one"
        await broker.stop()
        t0 = time.perf_counter()
        with caplog.at_level(logging.WARNING, logger="aiokafka_ng.consumer.consumer"):
            await consumer.stop()
        took = time.perf_counter() - t0
    assert took < 1.0 + 2.0, took
    assert consumer.status().state == "closed"
    assert [
        r.getMessage() for r in caplog.records if r.name == "aiokafka_ng.consumer.consumer"
    ] == [
        f"consumer outage-consumer: group {group} not left cleanly within 1 s "
        "(close_timeout_ms); its final commit may be lost"
    ]
