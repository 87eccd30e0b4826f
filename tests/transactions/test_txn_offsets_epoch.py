"""Offsets committed in a transaction with the leader epoch of the last record read are
checked against the leader's log when a consumer goes back to them (``seek_to_committed``,
KIP-320): after an unclean election under them, it resumes where the new leader's log
diverges and reads the records that took the replaced offsets. A bare ``seek(committed)``
has no epoch to check and jumps over them. What the transactional workload of
tests/kafka/partitions.py (issue 50) relies on since an unclean election on its input
(seed 100) made its loop, going back by bare offset, skip 364 input records. FakeKafka,
virtual time."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from aiokafka_ng import Consumer, ConsumerRecord, OffsetAndMetadata, Producer, TopicPartition
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

TP = TopicPartition("in", 0)
OLD = [b"old-%d" % i for i in range(10)]
NEW = [b"new-%d" % i for i in range(3)]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def _produce(kafka: FakeKafka, values: list[bytes]) -> None:
    async with Producer(**kafka.client_config()) as producer:
        for v in values:
            await producer.send_and_wait("in", v, partition=0)


async def _read(consumer: Consumer, n: int) -> list[ConsumerRecord[Any, Any]]:
    out: list[ConsumerRecord[Any, Any]] = []
    with anyio.fail_after(30):
        while len(out) < n:
            for records in (await consumer.getmany(timeout_ms=200)).values():
                out.extend(records)
    return out


def _at(records: list[ConsumerRecord[Any, Any]]) -> list[tuple[int, bytes | None]]:
    return [(r.offset, r.value) for r in records]


@pytest.mark.parametrize("back", ["seek_to_committed", "seek"])
async def test_going_back_to_offsets_a_transaction_committed_past_a_truncation(
    back: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokafka_ng.consumer.fetcher")
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("in", 1)
        kafka.create_topic("out", 1)
        await _produce(kafka, OLD)
        config = kafka.client_config()
        async with (
            Consumer(
                **config,
                group_id="g",
                isolation_level="read_committed",
                auto_offset_reset="earliest",
                enable_auto_commit=False,
            ) as consumer,
            Producer(**config, transactional_id="t") as producer,
        ):
            consumer.assign([TP])
            read = await _read(consumer, len(OLD))
            assert [r.value for r in read] == OLD
            producer.begin_transaction()
            await producer.send("out", b"x", partition=0)
            # As the workload commits them: the next offset, the last record's leader epoch.
            last = read[-1]
            await producer.send_offsets_to_transaction(
                {TP: OffsetAndMetadata(last.offset + 1, "", last.leader_epoch)},
                consumer.group_metadata(),
            )
            await producer.commit_transaction()
            kafka.truncate("in", 0, 6)  # an unclean election: 6-9 replaced
            await _produce(kafka, NEW)  # at 6, 7, 8 in the new epoch
            if back == "seek_to_committed":
                await consumer.seek_to_committed()
                assert _at(await _read(consumer, 3)) == list(zip(range(6, 9), NEW, strict=True))
                warnings = [r.getMessage() for r in caplog.records]
                assert any("log truncation detected" in m for m in warnings), warnings
            else:
                committed = await consumer.committed(TP)
                assert committed == 10
                consumer.seek(TP, committed)
                # The next record read is the one at 10: those at 6-9 are never read.
                await _produce(kafka, [b"later-9", b"later-10"])
                assert _at(await _read(consumer, 1)) == [(10, b"later-10")]
