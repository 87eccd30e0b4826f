"""A transactional producer whose coordinator moves (FakeKafka, 3 nodes, virtual time): the
old coordinator answers NOT_COORDINATOR, the producer looks the coordinator up again and
carries on, and both transactions commit."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng import Consumer, Producer, TopicPartition
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

NOT_COORDINATOR = 16


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_moved_coordinator_is_found_again() -> None:
    topic, tid = "t", "txn"
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(topic, 1, replication_factor=3)
        config = kafka.client_config()
        async with Producer(**config, transactional_id=tid, linger_ms=1) as producer:
            async with producer.transaction():
                await producer.send(topic, b"a", partition=0)
            old = kafka.coordinator_for(tid)
            new = next(n for n in sorted(kafka.nodes) if n != old)
            kafka.move_coordinator(tid, new)
            async with producer.transaction():
                await producer.send(topic, b"b", partition=0)
        assert kafka.errors(error_code=NOT_COORDINATOR, node=old) >= 1  # the old one said so
        assert kafka.requests(new)[26] >= 1  # ...and the new one ended the transaction
        # Two records and two commit markers; a read_committed reader sees both records.
        assert kafka.end_offset(topic, 0) == 4
        async with Consumer(
            **config, isolation_level="read_committed", auto_offset_reset="earliest"
        ) as consumer:
            consumer.assign([TopicPartition(topic, 0)])
            batch = await consumer.getmany(timeout_ms=5000)
        assert [r.value for rs in batch.values() for r in rs] == [b"a", b"b"]
