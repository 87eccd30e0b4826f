"""A group's committed offsets that cannot be fetched in time (the coordinator cut off behind a
network partition, issue 50) are asked again, not raised: ``getmany`` raises only what asking
again cannot fix, as Java's ``poll`` does -- it returns no records while the committed-offset
fetch times out and goes on once the coordinator answers.

Found on Apache Kafka by tests/kafka/test_kafka_partitions.py (the active controller,
isolated, was also the group's coordinator: the workload's consumer died of a
KafkaTimeoutError out of getmany); shown here on FakeKafka and virtual time.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

OFFSET_FETCH = 9
TOPIC = "t"
FETCHER_LOG = "aiokafka_ng.consumer.fetcher"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_a_committed_offset_fetch_that_times_out_is_asked_again_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        coordinator = kafka.coordinator_for("g")
        # Every OffsetFetch answer held a minute: far past the consumer's request timeout.
        kafka.delay(coordinator, 60_000, api_key=OFFSET_FETCH)
        async with Consumer(
            TOPIC,
            **kafka.client_config(),
            group_id="g",
            auto_offset_reset="earliest",
            request_timeout_ms=5000,
        ) as consumer:

            def timed_out() -> bool:
                return any("resolving positions failed" in r.getMessage() for r in caplog.records)

            with anyio.fail_after(120):
                while not timed_out():
                    assert await consumer.getmany(timeout_ms=500) == {}
            kafka.delay(coordinator, 0, api_key=OFFSET_FETCH)  # the partition heals
            async with Producer(**kafka.client_config()) as producer:
                await producer.send_and_wait(TOPIC, b"after", partition=0)
            values: list[bytes | None] = []
            with anyio.fail_after(120):
                while not values:
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        values.extend(r.value for r in records)
            assert values == [b"after"]
        assert len(kafka.received(OFFSET_FETCH)) >= 2  # asked again after the timeout
