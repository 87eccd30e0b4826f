"""KIP-320: the consumer notices when the log it read is truncated under it.

On FakeKafka and virtual time. ``kafka.truncate(topic, partition, offset)`` is an unclean
leader election: the log loses everything from ``offset`` on and the leader epoch goes up;
records produced afterwards take the lost offsets in the new epoch. A consumer that had
read past ``offset`` is fenced by the new epoch, asks the leader where its epoch ends
(OffsetForLeaderEpoch) and finds its position past it: with a reset policy it logs a
warning and resumes at the divergence; with ``auto_offset_reset="none"`` the application
gets a LogTruncationError. A clean leader change (same log) is validated and changes
nothing the application sees.
"""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.consumer import Consumer, ConsumerRecord, TopicPartition
from aiokafka_ng.errors import FencedLeaderEpochError, LogTruncationError, OffsetOutOfRangeError
from aiokafka_ng.protocol.messages.metadata import MetadataResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

FETCH, METADATA, OFFSET_FOR_LEADER_EPOCH = 1, 3, 23
TOPIC = "t"
TP = TopicPartition(TOPIC, 0)
FETCHER_LOG = "aiokafka_ng.consumer.fetcher"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def produce(kafka: FakeKafka, values: list[bytes]) -> None:
    """One batch per record (so any offset is a batch boundary), from a fresh producer (a
    truncation leaves an old producer's sequence numbers ahead of the log)."""
    async with Producer(**kafka.client_config(), linger_ms=0) as producer:
        for v in values:
            await producer.send_and_wait(TOPIC, v, partition=0)


async def read(consumer: Consumer, n: int) -> list[ConsumerRecord[Any, Any]]:
    out: list[ConsumerRecord[Any, Any]] = []
    with anyio.fail_after(60):
        while len(out) < n:
            got = await consumer.getmany(timeout_ms=200)
            out.extend(got.get(TP, []))
    return out


def truncation_warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [
        r.getMessage()
        for r in caplog.records
        if r.name == FETCHER_LOG and r.levelno == logging.WARNING and "truncation" in r.getMessage()
    ]


OLD = [b"old-%d" % i for i in range(10)]
NEW = [b"new-%d" % i for i in range(3)]


@pytest.mark.parametrize("reset", ["earliest", "latest"])
async def test_truncation_with_a_reset_policy_resumes_at_the_divergence(
    reset: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset=reset) as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            first = await read(consumer, 10)
            assert [r.value for r in first] == OLD
            assert await consumer.position(TP) == 10
            epoch = kafka.leader_epoch(TOPIC, 0)
            kafka.truncate(TOPIC, 0, 6)  # offsets 6..9 are lost
            assert kafka.leader_epoch(TOPIC, 0) == epoch + 1
            await produce(kafka, NEW)  # offsets 6..8, in the new epoch
            again = await read(consumer, 3)
            # Neither "earliest" (0) nor "latest" (9): the divergence, 6.
            assert [(r.offset, r.value) for r in again] == list(zip(range(6, 9), NEW, strict=True))
            assert await consumer.position(TP) == 9
    (warning,) = truncation_warnings(caplog)
    assert f"{TOPIC}-0" in warning and "position 10" in warning and "at 6" in warning
    asked = [r.request for r in kafka.received(OFFSET_FOR_LEADER_EPOCH)]
    assert asked and asked[0].topics[0].partitions[0].leader_epoch == epoch


async def test_truncation_without_a_reset_policy_raises_until_the_application_seeks() -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset="none") as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            assert [r.value for r in await read(consumer, 10)] == OLD
            kafka.truncate(TOPIC, 0, 6)
            await produce(kafka, NEW)
            with anyio.fail_after(60), pytest.raises(LogTruncationError) as caught:
                while True:
                    assert not await consumer.getmany(timeout_ms=200)
            error = caught.value
            assert isinstance(error, OffsetOutOfRangeError)
            assert error.divergent_offsets == {TP: 6}
            assert error.fetch_offsets == {TP: 10}
            assert f"{TOPIC}-0" in str(error)
            # Nothing moves on by itself: position(), getone and iteration raise it again.
            with anyio.fail_after(60), pytest.raises(LogTruncationError):
                await consumer.position(TP)
            with anyio.fail_after(60), pytest.raises(LogTruncationError):
                await consumer.getone()
            with anyio.fail_after(60), pytest.raises(LogTruncationError):
                async for _record in consumer:
                    pytest.fail("a record after a truncation was not seeked past")
            consumer.seek(TP, error.divergent_offsets[TP])
            again = await read(consumer, 3)
            assert [(r.offset, r.value) for r in again] == list(zip(range(6, 9), NEW, strict=True))


async def test_a_clean_leader_change_is_validated_and_skips_or_repeats_nothing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset="none") as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            records = await read(consumer, 10)
            kafka.move_leader(TOPIC, 0)  # epoch + 1, the same log
            await produce(kafka, NEW)
            records += await read(consumer, 3)
            kafka.move_leader(TOPIC, 0)
            records += await read(consumer, 0)
            await produce(kafka, [b"last"])
            records += await read(consumer, 1)
        assert [r.offset for r in records] == list(range(14))
        assert [r.value for r in records] == [*OLD, *NEW, b"last"]
        # Each change was checked with the epoch of the last record read before it.
        asked = [
            p.leader_epoch
            for r in kafka.received(OFFSET_FOR_LEADER_EPOCH)
            for t in r.request.topics
            for p in t.partitions
        ]
        assert asked[:1] == [0] and set(asked) <= {0, 1}
    assert truncation_warnings(caplog) == []


@pytest.mark.parametrize("reset", ["earliest", "none"])
async def test_a_committed_offset_past_a_truncation_is_detected_on_assignment(
    reset: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        config = {**kafka.client_config(), "group_id": "g", "enable_auto_commit": False}
        async with Consumer(**config, auto_offset_reset="earliest") as consumer:
            consumer.assign([TP])
            assert [r.value for r in await read(consumer, 10)] == OLD
            await consumer.commit()  # offset 10, with the epoch of record 9
        kafka.truncate(TOPIC, 0, 6)
        await produce(kafka, NEW)
        async with Consumer(**config, auto_offset_reset=reset) as consumer:
            consumer.assign([TP])
            if reset == "none":
                with anyio.fail_after(60), pytest.raises(LogTruncationError) as caught:
                    while True:
                        assert not await consumer.getmany(timeout_ms=200)
                assert caught.value.divergent_offsets == {TP: 6}
                assert truncation_warnings(caplog) == []
                return
            again = await read(consumer, 3)
            assert [(r.offset, r.value) for r in again] == list(zip(range(6, 9), NEW, strict=True))
        (warning,) = truncation_warnings(caplog)
        assert f"{TOPIC}-0" in warning and "position 10" in warning


async def test_a_fetch_answer_with_a_diverging_epoch_is_a_truncation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """Fetch v12+ carries the epoch of the last record read: where metadata gives no leader
    epochs (so nothing fences the fetch), the broker's diverging epoch tells instead."""
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)

    async with FakeKafka(brokers=1, tcp=False) as kafka:

        async def no_epochs(call: Received) -> Any:
            answer = await kafka.model_answer(call)
            assert isinstance(answer, MetadataResponse)
            for t in answer.topics:
                for p in t.partitions:
                    p.leader_epoch = -1
            return answer

        kafka.answer(METADATA, no_epochs)
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset="latest") as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            assert [r.value for r in await read(consumer, 10)] == OLD
            kafka.truncate(TOPIC, 0, 6)
            await produce(kafka, NEW)
            again = await read(consumer, 3)
            assert [(r.offset, r.value) for r in again] == list(zip(range(6, 9), NEW, strict=True))
        assert kafka.received(OFFSET_FOR_LEADER_EPOCH) == []
        fetches = [p for r in kafka.received(FETCH) for t in r.request.topics for p in t.partitions]
        assert {p.current_leader_epoch for p in fetches} == {-1}
        assert any(p.last_fetched_epoch == 0 and p.fetch_offset == 10 for p in fetches)
    (warning,) = truncation_warnings(caplog)
    assert f"{TOPIC}-0" in warning and "position 10" in warning


@pytest.mark.parametrize("code", [74, 75])  # FENCED_LEADER_EPOCH, UNKNOWN_LEADER_EPOCH
async def test_leader_epoch_errors_on_fetch_are_retried(code: int) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset="earliest") as consumer:
            consumer.assign([TP])
            kafka.inject(FETCH, code, times=3)
            records = await read(consumer, 10)
        assert [r.value for r in records] == OLD
        assert kafka.errors(FETCH, code) == 3


async def test_without_offset_for_leader_epoch_the_fetch_still_finds_the_divergence(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A leader that does not offer OffsetForLeaderEpoch is not asked (Java skips the
    check): the position follows the new epoch, and Fetch v12+ still says where the log
    diverged from the epoch of the last record read."""
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        del kafka.api_versions[OFFSET_FOR_LEADER_EPOCH]
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset="earliest") as consumer:
            consumer.assign([TP])
            consumer.seek(TP, 0)
            records = await read(consumer, 10)
            kafka.move_leader(TOPIC, 0)  # a clean change: nothing to see
            await produce(kafka, [b"more"])
            records += await read(consumer, 1)
            assert [r.offset for r in records] == list(range(11))
            assert truncation_warnings(caplog) == []
            kafka.truncate(TOPIC, 0, 6)
            await produce(kafka, NEW)
            again = await read(consumer, 3)
            assert [(r.offset, r.value) for r in again] == list(zip(range(6, 9), NEW, strict=True))
        assert kafka.received(OFFSET_FOR_LEADER_EPOCH) == []
    (warning,) = truncation_warnings(caplog)
    assert f"{TOPIC}-0" in warning and "position 11" in warning


LIST_OFFSETS = 2


async def test_list_offsets_names_the_leader_epoch_it_knows() -> None:
    # KIP-320's follow-up: ListOffsets carries the metadata's leader epoch, as Java's does.
    # The leader is re-elected (same node, epoch + 1) after the consumer cached the old
    # epoch: the broker fences the stale request, the consumer refreshes and asks again
    # with the new epoch. Without the epoch the stale view would be answered as if current.
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1, replication_factor=3)
        await produce(kafka, [b"a", b"b"])
        async with Consumer(**kafka.client_config()) as consumer:
            assert await consumer.end_offsets([TP]) == {TP: 2}
            (first,) = kafka.received(LIST_OFFSETS)
            partition = kafka.cluster.partition(TOPIC, 0)
            assert partition is not None
            epoch, leader = partition.leader_epoch, partition.leader
            assert [p.current_leader_epoch for p in first.request.topics[0].partitions] == [epoch]
            kafka.move_leader(TOPIC, 0, to_node=leader)  # the same node, a new epoch
            assert await consumer.beginning_offsets([TP]) == {TP: 0}
            later = kafka.received(LIST_OFFSETS)[1:]
            sent = [p.current_leader_epoch for r in later for p in r.request.topics[0].partitions]
            assert sent == [epoch, epoch + 1]  # fenced, refreshed, asked again
            fenced = FencedLeaderEpochError.errno
            assert kafka.errors(LIST_OFFSETS) == kafka.errors(LIST_OFFSETS, fenced) == 1


async def test_a_reset_position_carries_its_epoch_and_is_validated_after_a_truncation(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A position from ``auto_offset_reset`` (ListOffsets) has the epoch the broker gives
    for it, as Java's reset does: a consumer at the log end that has fetched nothing yet
    still notices the truncation and reads the records written in the new epoch from the
    divergence, instead of resuming at its old (now too high) offset and skipping them."""
    caplog.set_level(logging.WARNING, logger=FETCHER_LOG)
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1)
        await produce(kafka, OLD)
        async with Consumer(**kafka.client_config(), auto_offset_reset="latest") as consumer:
            consumer.assign([TP])
            assert await consumer.position(TP) == 10  # reset to the end: nothing read
            kafka.truncate(TOPIC, 0, 6)  # offsets 6..9 are lost, a new leader epoch
            await produce(kafka, NEW)  # offsets 6..8, in the new epoch
            again = await read(consumer, 3)
            assert [(r.offset, r.value) for r in again] == list(zip(range(6, 9), NEW, strict=True))
    (warning,) = truncation_warnings(caplog)
    assert "position 10" in warning and "at 6" in warning
