"""``async for`` / ``getone``: runs of one partition, and what interrupts a run.

The iteration fast path (``Fetcher.drain_one``) keeps taking records from the partition it
served last, up to ``ONE_RUN`` in a row, instead of looking at every partition per record.
These tests pin what a user relies on: every partition is served in turn (no partition waits
for another's whole backlog), and pause, seek and a new assignment take effect at the very
next record, in the middle of a run. On FakeKafka and virtual time.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.consumer import Consumer, ConsumerRecord, TopicPartition
from aiokafka_ng.consumer.fetcher import ONE_RUN
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

TOPIC = "t"
PARTITIONS = 4
PER_PARTITION = 3 * ONE_RUN
TPS = [TopicPartition(TOPIC, p) for p in range(PARTITIONS)]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def filled(kafka: FakeKafka) -> None:
    kafka.create_topic(TOPIC, partitions=PARTITIONS)
    async with Producer(**kafka.client_config(), linger_ms=5) as producer:
        for p in range(PARTITIONS):
            await producer.send_many(
                TOPIC, [b"%d-%d" % (p, i) for i in range(PER_PARTITION)], partition=p
            )
        await producer.flush()


def runs(partitions: list[int]) -> list[tuple[int, int]]:
    """[(partition, length)] of consecutive records from one partition."""
    out: list[tuple[int, int]] = []
    for p in partitions:
        if out and out[-1][0] == p:
            out[-1] = (p, out[-1][1] + 1)
        else:
            out.append((p, 1))
    return out


async def test_every_partition_is_served_in_turn() -> None:
    async with FakeKafka() as kafka:
        await filled(kafka)
        config = kafka.client_config()
        async with Consumer(**config, auto_offset_reset="earliest") as consumer:
            consumer.assign(TPS)
            seen: list[ConsumerRecord[Any, Any]] = []
            with anyio.fail_after(60):
                async for record in consumer:
                    seen.append(record)
                    if len(seen) == PARTITIONS * PER_PARTITION:
                        break
    by_partition = {tp.partition: [r.offset for r in seen if r.partition == tp.partition]
                    for tp in TPS}  # fmt: skip
    assert by_partition == {p: list(range(PER_PARTITION)) for p in range(PARTITIONS)}
    spans = runs([r.partition for r in seen])
    assert max(length for _, length in spans) <= ONE_RUN
    # No partition waits for another's backlog: when a partition's first record comes, no
    # other partition has had more than one run.
    for p in range(PARTITIONS):
        before = seen[: next(i for i, r in enumerate(seen) if r.partition == p)]
        assert all(sum(r.partition == q for r in before) <= ONE_RUN for q in range(4)), p


async def mid_run(consumer: Consumer) -> TopicPartition:
    """Start a run: the partition whose records the next getone() would hand out."""
    consumer.assign(TPS)
    first = await consumer.getone()
    current = TopicPartition(TOPIC, first.partition)
    assert (await consumer.getone()).partition == current.partition  # a run, not rotation
    return current


@pytest.mark.parametrize("interruption", ["pause", "seek", "assign"])
async def test_pause_seek_and_assign_take_effect_mid_run(interruption: str) -> None:
    async with FakeKafka() as kafka:
        await filled(kafka)
        async with Consumer(**kafka.client_config(), auto_offset_reset="earliest") as consumer:
            with anyio.fail_after(60):
                current = await mid_run(consumer)
                if interruption == "pause":
                    consumer.pause(current)
                    after = [await consumer.getone() for _ in range(2 * ONE_RUN)]
                    assert current.partition not in {r.partition for r in after}
                elif interruption == "seek":
                    consumer.seek(current, 7)  # its buffer is dropped: it is fetched again
                    nxt = await consumer.getone()
                    while nxt.partition != current.partition:
                        nxt = await consumer.getone()
                    assert nxt.offset == 7
                else:
                    consumer.assign([tp for tp in TPS if tp != current])
                    after = [await consumer.getone() for _ in range(3)]
                    assert current.partition not in {r.partition for r in after}
