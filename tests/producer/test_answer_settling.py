"""How a sender's answers are settled when they do not simply arrive: a request timing out
with others in flight behind it, and a producer closing with requests unanswered.

On asyncio the connection's reader settles each answer by a callback (``Pending.on_settled``),
on trio a task per node awaits them; either way every batch leaves the flight exactly once,
and the outcomes of one partition apply in send order. FakeKafka in memory, virtual time,
both backends.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

PRODUCE = 0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def in_flight(kafka: FakeKafka, n: int) -> None:
    """Wait until the producer has ``n`` requests on the wire, unanswered."""
    await kafka.wait_until(lambda: kafka.in_flight(1) == n)


def values(kafka: FakeKafka, topic: str, partition: int) -> list[bytes]:
    return [r.value or b"" for r in kafka.records(topic, partition)]


async def test_a_timed_out_request_and_those_behind_it_are_retried_once_each_in_order() -> None:
    topic = "timeouts"
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(
            **kafka.client_config(),
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,
            linger_ms=0,
            request_timeout_ms=1000,
        ) as producer,
    ):
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        kafka.black_hole(1)  # this connection never answers again
        futures = []
        for i in range(5):  # one request each: five in flight, none answered
            futures.append(await producer.send(topic, b"%d" % i, partition=0))
            await in_flight(kafka, i + 1)
        kafka.black_hole(1, on=False)  # a new connection is answered
        with anyio.fail_after(30):
            offsets = [(await f).offset for f in futures]
        assert offsets == [1, 2, 3, 4, 5]
        assert values(kafka, topic, 0) == [b"warm-up"] + [b"%d" % i for i in range(5)]
        stats = producer.statistics()
        assert stats["retries"] >= 5
        assert stats["records_failed"] == 0
        assert stats["in_flight_batches"] == 0


async def test_closing_with_requests_unanswered_fails_each_record_once() -> None:
    topic = "closing"
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        producer = Producer(
            **kafka.client_config(), linger_ms=0, max_in_flight_requests_per_connection=3
        )
        await producer.start()
        await producer.send_and_wait(topic, b"warm-up", partition=0)
        kafka.delay(1, 60_000, api_key=PRODUCE)  # answers come long after the close
        futures = []
        for i in range(3):
            futures.append(await producer.send(topic, b"%d" % i, partition=0))
            await in_flight(kafka, i + 1)
        await producer.close(timeout=0)
        assert all(f.done() for f in futures)
        errors = [f.exception() for f in futures]
        assert all(isinstance(e, KafkaError) for e in errors), errors
        assert producer.statistics()["records_failed"] == 3
        # The answers the broker still writes (or the closed connections' failures) settle
        # nothing again.
        await anyio.sleep(120)
        assert [f.exception() for f in futures] == errors
        stats = producer.statistics()
        assert stats["records_failed"] == 3
        # Each request ended once: none is counted in flight, none twice out of it.
        assert stats["in_flight_requests"] == 0
        assert stats["in_flight_by_node"] == {1: 0}
