"""A broker that holds a fetch must not starve the partitions of the other brokers.

On a 3-node FakeKafka (in memory, on virtual time): every answer of partition 0's leader is
delayed by 20 s, as a broker that sits on a fetch until ``request_timeout_ms``.
With a 256 KiB fetch buffer, the fetch to that broker used to reserve all of the free
budget, so no other broker was asked until the stalled answer came (seen as a 60 s hang in
the garbage test). A fetch now reserves at most what it can bring back (its partitions x
``max_partition_fetch_bytes``): the other partitions are read at once.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.testing import virtual_time
from tests.reliability.helpers import PARTITIONS, fake_cluster, unpack
from tests.reliability.test_consumer_reliability import produce

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_a_stalled_broker_does_not_starve_the_others() -> None:
    topic = "stall"
    n = 4000
    async with fake_cluster(topic, seed=5) as kafka:
        sent = await produce(kafka, topic, n)
        async with Consumer(
            **kafka.client_config(),
            fetch_buffer_bytes=256 * 1024,
            max_partition_fetch_bytes=64 * 1024,
            fetch_max_wait_ms=100,
            request_timeout_ms=60_000,
        ) as consumer:
            assert len(await consumer.partitions_for_topic(topic)) == PARTITIONS
            slow = kafka.leader(topic, 0)
            others = [p for p in range(1, PARTITIONS) if kafka.leader(topic, p) != slow]
            assert others, "every partition is led by one node"
            kafka.delay(slow, 20_000)
            parts = [TopicPartition(topic, p) for p in range(PARTITIONS)]
            consumer.assign(parts)
            for tp in parts:
                consumer.seek(tp, 0)
            got = dict.fromkeys(others, 0)
            started = anyio.current_time()
            with anyio.fail_after(10):  # the stalled answer comes after 20 s
                while any(got[p] < sent[p] for p in others):
                    batch = await consumer.getmany(timeout_ms=200)
                    for tp, records in batch.items():
                        if tp.partition in got:
                            assert [unpack(r.value)[1] for r in records] == list(
                                range(got[tp.partition], got[tp.partition] + len(records))
                            )
                            got[tp.partition] += len(records)
            # Virtual time: the others are read at once, not after the stalled answer.
            assert anyio.current_time() - started < 1
            kafka.delay(slow, 0)
