"""Fetching ahead: a partition's next range is fetched while its buffer is still read.

The fetcher asks for a partition again while its buffered records are being handed out
(see the theory of operation in ``aiokafka_ng/consumer/fetcher.py``, *Fetching ahead*).
These tests pin what that must not change: the next range starts where the buffer ends
(not at the application's position), records come out contiguous, the memory cap holds,
a seek drops what was fetched ahead, a pause holds it, and an error in an answer fetched
ahead reaches the application only after the records buffered before it. On FakeKafka and
virtual time, asyncio and trio.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.consumer.fetcher import ONE_RUN
from aiokafka_ng.errors import OffsetOutOfRangeError
from aiokafka_ng.protocol.messages.fetch import FetchResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

TOPIC = "t"
FETCH = 1
OFFSET_OUT_OF_RANGE = 1
BATCHES, PER_BATCH = 10, 10
N = BATCHES * PER_BATCH
TP = TopicPartition(TOPIC, 0)
# About two batches of ten 100-byte records per fetch: the log takes five fetches.
PARTITION_BYTES = 2600


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def filled(kafka: FakeKafka, partitions: int = 1) -> None:
    """``BATCHES`` batches of ``PER_BATCH`` records in each partition."""
    kafka.create_topic(TOPIC, partitions=partitions)
    async with Producer(**kafka.client_config(), linger_ms=5) as producer:
        for p in range(partitions):
            for b in range(BATCHES):
                values = [
                    b"%d-%03d-" % (p, b * PER_BATCH + i) + b"x" * 100 for i in range(PER_BATCH)
                ]
                await producer.send_many(TOPIC, values, partition=p)
                await producer.flush()


def asked(kafka: FakeKafka, partition: int = 0) -> list[int]:
    """The fetch offsets the Fetch requests asked ``partition`` for, in order."""
    return [
        p.fetch_offset
        for call in kafka.received(FETCH)
        for t in call.request.topics
        for p in t.partitions
        if p.partition == partition
    ]


def consumer(kafka: FakeKafka, **config: Any) -> Consumer:
    settings: dict[str, Any] = {
        "auto_offset_reset": "earliest",
        "max_partition_fetch_bytes": PARTITION_BYTES,
        **config,
    }
    return Consumer(**kafka.client_config(), **settings)


async def test_the_next_range_is_fetched_from_the_end_of_the_buffer_while_it_is_read() -> None:
    async with FakeKafka() as kafka:
        await filled(kafka)
        async with consumer(kafka) as c:
            c.assign([TP])
            first = await c.getone()
            assert first.offset == 0
            # No more records taken: the fetcher asks again on its own.
            await kafka.wait_until(lambda: len(asked(kafka)) >= 2)
            offsets = asked(kafka)
            assert offsets[0] == 0
            # From where the first answer ended (whole batches), not from the position.
            assert offsets[1] % PER_BATCH == 0 and offsets[1] > 1
            assert await c.position(TP) == 1
            stats = c.statistics().fetcher
            # Both answers buffered (or the second in flight) for one partition.
            assert stats.partitions_buffered == 1
            assert stats.buffered_bytes + stats.reserved_bytes <= stats.buffer_limit
            got = [first.offset]
            with anyio.fail_after(30):
                async for record in c:
                    got.append(record.offset)
                    if len(got) == N:
                        break
            assert got == list(range(N))
            assert await c.position(TP) == N
    # One answer ahead at most: every fetch starts where the previous one ended.
    starts = asked(kafka)
    assert starts == sorted(set(starts))


async def test_never_more_than_the_cap_buffered_and_reserved() -> None:
    cap = 16 * PARTITION_BYTES  # less than the four logs: the cap binds
    async with FakeKafka() as kafka:
        await filled(kafka, partitions=4)
        async with consumer(kafka, fetch_buffer_bytes=cap) as c:
            c.assign([TopicPartition(TOPIC, p) for p in range(4)])
            seen: dict[int, list[int]] = {p: [] for p in range(4)}
            peak = 0
            ahead = 0  # records after which a fetch had asked beyond the position
            with anyio.fail_after(60):
                async for record in c:
                    seen[record.partition].append(record.offset)
                    stats = c.statistics().fetcher
                    peak = max(peak, stats.buffered_bytes + stats.reserved_bytes)
                    ahead += max(asked(kafka, record.partition)) > record.offset + 1
                    if sum(map(len, seen.values())) == 4 * N:
                        break
                    # An application's own await per record (as one that processes them
                    # does): a fetch ahead takes a few loop turns to reach the broker (its
                    # task starts, gets the connection, writes), and a loop that awaits
                    # nothing gives the fetcher one turn per run -- here 20 records, the
                    # whole buffer: on trio's shuffled run queue those turns were sometimes
                    # not enough for any request ahead to arrive (ci40; 14 in 200 runs).
                    await anyio.lowlevel.checkpoint()
            stats = c.statistics().fetcher
    assert seen == {p: list(range(N)) for p in range(4)}
    assert peak <= cap
    assert stats.max_buffered_bytes <= cap
    assert stats.bytes_dropped == 0
    assert ahead  # within the cap, fetches went ahead of the application


async def read_one_with_a_fetch_ahead_in_flight(kafka: FakeKafka, c: Consumer) -> None:
    """With every Fetch answer delayed a second (virtual; the caller's ``kafka.delay``):
    the first record read, and the fetch ahead, from the end of the buffer, in flight."""
    c.assign([TP])
    assert (await c.getone()).offset == 0
    await kafka.wait_until(lambda: len(asked(kafka)) >= 2)
    assert asked(kafka)[1] > 1
    assert c.statistics().fetcher.fetches_in_flight == 1


async def test_a_seek_while_a_fetch_ahead_is_in_flight_returns_only_the_new_position() -> None:
    async with FakeKafka() as kafka:
        await filled(kafka)
        kafka.delay(kafka.leader(TOPIC, 0), 1000, api_key=FETCH)
        async with consumer(kafka) as c:
            await read_one_with_a_fetch_ahead_in_flight(kafka, c)
            c.seek(TP, 5)  # back into the buffered range: everything buffered is dropped
            got = []
            with anyio.fail_after(60):
                async for record in c:
                    got.append(record.offset)
                    if record.offset == N - 1:
                        break
            assert got == list(range(5, N))
            # The fetch after the seek asked from the new position, not from the old end.
            assert asked(kafka)[2] == 5


async def test_a_pause_while_a_fetch_ahead_is_in_flight_holds_its_answer() -> None:
    async with FakeKafka() as kafka:
        await filled(kafka)
        kafka.delay(kafka.leader(TOPIC, 0), 1000, api_key=FETCH)
        async with consumer(kafka) as c:
            await read_one_with_a_fetch_ahead_in_flight(kafka, c)
            c.pause(TP)
            # The answer fetched ahead comes during this wait; nothing is handed out.
            assert await c.getmany(timeout_ms=3000) == {}
            assert len(asked(kafka)) == 2  # a paused partition is not fetched
            assert c.statistics().fetcher.fetches_in_flight == 0
            c.resume(TP)
            got = []
            with anyio.fail_after(60):
                async for record in c:
                    got.append(record.offset)
                    if record.offset == N - 1:
                        break
            assert got == list(range(1, N))
            # The answer that came while paused was kept: the next fetch went on from its
            # end instead of asking for the same range again.
            assert asked(kafka)[2] > asked(kafka)[1]


async def test_an_error_fetched_ahead_comes_after_the_records_buffered_before_it() -> None:
    async with FakeKafka() as kafka:
        await filled(kafka)

        async def out_of_range_past_zero(call: Received) -> FetchResponse:
            # As a log whose start moved past everything but the first answer's range.
            response = await kafka.model_answer(call)
            assert isinstance(response, FetchResponse)
            for t, rt in zip(call.request.topics, response.responses, strict=True):
                for p, data in zip(t.partitions, rt.partitions, strict=True):
                    if p.fetch_offset > 0:
                        data.error_code = OFFSET_OUT_OF_RANGE
                        data.records = None
            return response

        kafka.answer(FETCH, out_of_range_past_zero)
        async with consumer(kafka, auto_offset_reset="none") as c:
            c.assign([TP])
            c.seek(TP, 0)
            assert (await c.getone()).offset == 0
            await kafka.wait_until(lambda: len(asked(kafka)) >= 2)
            first_end = asked(kafka)[1]  # the fetch ahead, answered with the error
            assert first_end > 1
            await anyio.wait_all_tasks_blocked()  # its answer is in, not acted on
            assert c.statistics().fetcher.fetches_in_flight == 0
            assert len(asked(kafka)) == 2  # nor asked again while records are buffered
            got = [0]
            with anyio.fail_after(60), pytest.raises(OffsetOutOfRangeError):
                while True:
                    got.append((await c.getone()).offset)
            # Every buffered record first, then the error, for the position after them.
            assert got == list(range(first_end))
            assert await c.position(TP) == first_end


async def test_async_for_lets_the_fetcher_run_while_it_hands_out_buffered_records() -> None:
    # An `async for` whose body never awaits finds every record buffered and so never
    # waits: without a trip through the event loop now and then, the fetch ahead would
    # be neither sent nor read until the buffer is empty (measured on Tansu: each drained
    # buffer waited one fetch round trip).
    per_batch, batches = 1000, 30
    async with FakeKafka() as kafka:
        kafka.create_topic(TOPIC, partitions=1)
        async with Producer(**kafka.client_config(), linger_ms=5) as producer:
            for b in range(batches):
                await producer.send_many(
                    TOPIC, [b"%06d" % (b * per_batch + i) for i in range(per_batch)], partition=0
                )
                await producer.flush()
        async with consumer(kafka, max_partition_fetch_bytes=80 * per_batch) as c:
            c.assign([TP])
            buffered_after: dict[int, int] = {}  # offset -> bytes still buffered after it
            with anyio.fail_after(60):
                async for record in c:
                    buffered_after[record.offset] = c.statistics().fetcher.buffered_bytes
                    if record.offset == batches * per_batch - 1:
                        break
        starts = asked(kafka)
    # Each answer's last record: the next answer was already in (fetched ahead and read
    # while the records before were handed out), so the application never waited for it.
    # (The first answer ahead may have come while the first getone waited: from the
    # third answer on, only trips through the loop during the iteration bring them.)
    ends = [start - 1 for start in starts[2:]]
    assert starts[1] > 2 * ONE_RUN and len(ends) >= 2
    assert all(buffered_after[end] > 0 for end in ends)


async def test_an_answer_ahead_empty_before_the_log_end_is_asked_again() -> None:
    # A response filled by other partitions brings nothing for a partition fetched ahead
    # (Tansu gives the first partition it lists all of max_bytes): not the log end, so it
    # is asked again at once, not only once its buffer is drained.
    async with FakeKafka() as kafka:
        await filled(kafka)
        calls = 0

        async def second_answer_empty(call: Received) -> FetchResponse:
            nonlocal calls
            calls += 1
            response = await kafka.model_answer(call)
            assert isinstance(response, FetchResponse)
            if calls == 2:  # the first fetch ahead
                for rt in response.responses:
                    for data in rt.partitions:
                        data.records = b""
            return response

        kafka.answer(FETCH, second_answer_empty)
        async with consumer(kafka) as c:
            c.assign([TP])
            assert (await c.getone()).offset == 0
            await kafka.wait_until(lambda: len(asked(kafka)) >= 3)
            offsets = asked(kafka)
            assert offsets[1] == offsets[2] > 1  # the same range, asked again
            assert await c.position(TP) == 1  # while the first answer is still buffered
