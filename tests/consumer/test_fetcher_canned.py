"""The fetcher against FakeKafka, in memory and on virtual time: the model's answers, and
answers the model does not give, written from its own with ``FakeKafka.answer``.

Why not Tansu: it does not send aborted-transaction lists in Fetch responses (its
read_committed does not hide aborted records), never answers OFFSET_OUT_OF_RANGE (a fetch
past the end just comes back empty) and never moves a leader. FakeKafka does all three as
Kafka does, so read_committed filtering, offset-out-of-range resets, KIP-951 leader hints,
ListOffsets errors and deserializer errors run on its model. A corrupt batch, a broker
ignoring max_bytes, a preferred read replica (KIP-392 needs racks, which the model does not
place replicas by) and which partitions a response fills first are not in the model: those
tests take the model's Fetch answer and edit it (``kafka.model_answer``).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng import Producer
from aiokafka_ng.cluster import Cluster
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.fetcher import Fetcher, FetchSettings
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.errors import NotLeaderOrFollowerError, OffsetOutOfRangeError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.fetch import FetchResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

TP0 = TopicPartition("t", 0)
FETCH, LIST_OFFSETS, METADATA = 1, 2, 3


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def wired(
    cluster: Any,
    offsets: OffsetsClient,
    backoff: ExponentialBackoff,
    value_deserializer: Callable[[bytes | None], Any] | None,
    settings: dict[str, Any],
) -> tuple[SubscriptionState, Fetcher]:
    """A subscription state whose changes wake the fetcher, as the consumer wires them."""
    made: list[Fetcher] = []
    subs = SubscriptionState(lambda: made[0].wake() if made else None)
    fetcher = Fetcher(
        cluster,
        subs,
        offsets,
        FetchSettings(**settings),
        backoff=backoff,
        group_offsets=lambda: False,
        value_deserializer=value_deserializer,
    )
    made.append(fetcher)
    return subs, fetcher


async def drain_values(fetcher: Fetcher, until: int) -> list[tuple[int, Any]]:
    out: list[tuple[int, Any]] = []  # values as deserialized
    while not out or out[-1][0] < until:
        for records in fetcher.drain(100).values():
            out.extend((r.offset, r.value) for r in records)
        if not out or out[-1][0] < until:
            await fetcher.wait_for_data()
    return out


@asynccontextmanager
async def fake_fetcher(
    kafka: FakeKafka,
    value_deserializer: Callable[[bytes | None], Any] | None = None,
    **settings: Any,
) -> AsyncIterator[tuple[Fetcher, SubscriptionState, Cluster]]:
    """A running Fetcher (no group) on a real cluster connected to ``kafka``."""
    async with Cluster(ConsumerConfig(**kafka.client_config()).cluster_config()) as cluster:
        await cluster.refresh(["t"])
        backoff = ExponentialBackoff(1, 5)
        offsets = OffsetsClient(
            cluster,
            group_id=None,
            isolation_level=settings.get("isolation_level", 0),
            backoff=backoff,
            timeout_s=5,
        )
        subs, fetcher = wired(cluster, offsets, backoff, value_deserializer, settings)
        async with anyio.create_task_group() as tg:
            await tg.start(fetcher.run)
            with anyio.fail_after(30):
                yield fetcher, subs, cluster
            tg.cancel_scope.cancel()


def fetch_offsets(kafka: FakeKafka) -> list[tuple[str, int]]:
    """The Fetch offsets and ListOffsets timestamps the nodes received, in order."""
    out: list[tuple[str, int]] = []
    for x in kafka.received():
        if x.api_key not in (FETCH, LIST_OFFSETS):
            continue
        for t in x.request.topics:
            for p in t.partitions:
                if x.api_key == FETCH:
                    out.append(("fetch", p.fetch_offset))
                else:
                    out.append(("list", p.timestamp))
    return out


def asked(call: Received) -> list[tuple[int, int]]:
    """(partition, fetch offset) of every partition a Fetch asks for."""
    return [(p.partition, p.fetch_offset) for t in call.request.topics for p in t.partitions]


async def write(kafka: FakeKafka, *values: bytes, partition: int = 0, **config: Any) -> None:
    """``values`` to t-``partition`` in one batch."""
    async with Producer(**kafka.client_config(), linger_ms=50, **config) as producer:
        futures = [await producer.send("t", v, partition=partition) for v in values]
        await producer.flush()
    assert all(f.exception() is None for f in futures)


async def model_fetch(kafka: FakeKafka, call: Received) -> FetchResponse:
    """What the model answers the Fetch ``call``, to edit."""
    response = await kafka.model_answer(call)
    assert isinstance(response, FetchResponse)
    return response


async def transactional_log(kafka: FakeKafka) -> None:
    """pid A aborts offsets 0-1, pid B commits 2-3 (LZ4), 4 is plain, then A's abort marker
    (5), B's commit marker (6), A commits 7 (marker 8) -- two transactions open at once."""
    config = kafka.client_config()
    async with (
        Producer(**config, transactional_id="a") as a,
        Producer(**config, transactional_id="b", compression_type="lz4") as b,
        Producer(**config) as plain,
    ):
        a.begin_transaction()
        b.begin_transaction()
        for producer, values in ((a, [b"a0", b"a1"]), (b, [b"c2", b"c3"]), (plain, [b"p4"])):
            for v in values:
                await producer.send("t", v, partition=0)
            await producer.flush()
        await a.abort_transaction()
        await b.commit_transaction()
        async with a.transaction():
            await a.send("t", b"c7", partition=0)
    assert kafka.end_offset("t", 0) == 9


@pytest.mark.parametrize(
    ("isolation", "expected"),
    [
        (1, [(2, b"c2"), (3, b"c3"), (4, b"p4"), (7, b"c7")]),
        (0, [(0, b"a0"), (1, b"a1"), (2, b"c2"), (3, b"c3"), (4, b"p4"), (7, b"c7")]),
    ],
)
async def test_read_committed_hides_aborted_and_control(
    isolation: int, expected: list[tuple[int, bytes]]
) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        await transactional_log(kafka)
        async with fake_fetcher(kafka, isolation_level=isolation) as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            assert await drain_values(fetcher, 7) == expected
            # The control batch at 8 was skipped too: the position is past it.
            assert subs.state(TP0).position == 9
        first = kafka.received(FETCH)[0].request
        assert first.isolation_level == isolation
        assert first.session_id == 0 and first.session_epoch == -1


async def test_offset_out_of_range_resets_by_policy() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        await write(kafka, b"x")
        async with fake_fetcher(kafka, auto_offset_reset="earliest") as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(1000)
            assert await drain_values(fetcher, 0) == [(0, b"x")]
        assert fetch_offsets(kafka)[:3] == [("fetch", 1000), ("list", -2), ("fetch", 0)]


async def test_offset_out_of_range_with_reset_none_raises() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        async with fake_fetcher(kafka, auto_offset_reset="none") as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(5)  # past the end of an empty log
            with pytest.raises(OffsetOutOfRangeError):
                while True:
                    fetcher.drain(10)
                    await fetcher.wait_for_data()
        assert ("list", -2) not in fetch_offsets(kafka)  # no reset


async def test_not_leader_refreshes_metadata_and_applies_kip951_hint() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", replication_factor=1)
        await write(kafka, b"ok")
        old = kafka.leader("t", 0)
        async with fake_fetcher(kafka) as (fetcher, subs, cluster):
            # Moved to the other node, and the old one is no replica any more: it answers
            # NOT_LEADER_OR_FOLLOWER with the new leader (KIP-951). Metadata is held back
            # for 10 s, so only the hint can move the fetcher there sooner.
            new = kafka.move_leader("t", 0, 3 - old)  # leader epoch + 1
            kafka.cluster.assign(kafka.cluster.topics["t"].partitions[0], [new])
            for node in (1, 2):
                kafka.delay(node, 10_000, api_key=METADATA)
            metadata_asked = kafka.requests()[METADATA]
            start = anyio.current_time()
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            assert await drain_values(fetcher, 0) == [(0, b"ok")]
            assert anyio.current_time() - start < 10
            moved = cluster.metadata.topics["t"].partitions[0]
            assert (moved.leader, moved.leader_epoch) == (new, kafka.leader_epoch("t", 0))
            # A refresh was asked for too (written at once, answered 10 s later).
            await kafka.wait_until(lambda: kafka.requests()[METADATA] > metadata_asked)
        assert [x.node for x in kafka.received(FETCH)][:2] == [old, new]


async def test_list_offsets_retries_leader_errors_and_reads_answers() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        await write(kafka, b"a", b"b", b"c")
        async with fake_fetcher(kafka) as (_, _, cluster):
            offsets = OffsetsClient(
                cluster,
                group_id=None,
                isolation_level=1,
                backoff=ExponentialBackoff(1, 5),
                timeout_s=5,
            )
            metadata_asked = kafka.requests()[METADATA]
            kafka.inject(LIST_OFFSETS, NotLeaderOrFollowerError.errno)
            latest = await offsets.list_offsets({TP0: -1})  # LATEST
            assert {tp: a[:2] for tp, a in latest.items()} == {TP0: (3, -1)}
            assert fetch_offsets(kafka) == [("list", -1), ("list", -1)]
            assert all(x.request.replica_id == -1 for x in kafka.received(LIST_OFFSETS))
            # The leader error asked for fresh metadata.
            await kafka.wait_until(lambda: kafka.requests()[METADATA] > metadata_asked)
            # No record at or after this timestamp: no offset.
            none = await offsets.list_offsets({TP0: 2**50})
            assert {tp: a[:2] for tp, a in none.items()} == {TP0: (-1, -1)}


async def test_failing_position_lookup_is_raised_and_backed_off() -> None:
    from aiokafka_ng.errors import TopicAuthorizationFailedError

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        kafka.inject(LIST_OFFSETS, TopicAuthorizationFailedError.errno, times=None)
        async with fake_fetcher(kafka, auto_offset_reset="earliest") as (fetcher, subs, _):
            subs.assign_manual([TP0])  # no group: the position comes from auto_offset_reset
            with pytest.raises(TopicAuthorizationFailedError):
                while True:
                    fetcher.drain(10)
                    await fetcher.wait_for_data()
            await anyio.sleep(0.3)  # the window the lookups are counted in (virtual)
        # Retried with the (1..5 ms) backoff, not in a hot loop: tens of lookups, not thousands.
        assert 2 <= kafka.requests()[LIST_OFFSETS] < 150


async def test_deserializer_error_keeps_position_at_the_bad_record() -> None:
    from aiokafka_ng.consumer import RecordDeserializationError

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        await write(kafka, b"1", b"2", b"oops", b"4")
        deserializer = lambda b: int(b or b"0")  # noqa: E731
        async with fake_fetcher(kafka, value_deserializer=deserializer) as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            got: list[int] = []
            while not got:
                for records in fetcher.drain(10).values():
                    got.extend(r.value for r in records)
                if not got:
                    await fetcher.wait_for_data()
            assert got == [1, 2]  # what came before the bad record is handed out first
            with pytest.raises(RecordDeserializationError) as info:
                while True:
                    fetcher.drain(10)
                    await fetcher.wait_for_data()
            assert info.value.offset == 2 and subs.state(TP0).position == 2
            subs.state(TP0).seek(3)  # the application skips it
            assert await drain_values(fetcher, 3) == [(3, 4)]


# ------------------------------------------------- answers the model does not give, edited


@pytest.mark.parametrize("check_crcs", [True, False])
async def test_crc_check_is_configurable(check_crcs: bool) -> None:
    from aiokafka_ng.protocol.records import CorruptRecordError

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        await write(kafka, b"abc")

        async def corrupt(call: Received) -> FetchResponse:
            response = await model_fetch(kafka, call)
            data = response.responses[0].partitions[0]
            bad = bytearray(data.records or b"")
            # The record value's last byte (the record ends with its header count, 0): the
            # batch's CRC no longer matches. The stored log stays intact.
            bad[-2] ^= 0xFF
            data.records = bytes(bad)
            return response

        rule = kafka.answer(FETCH, corrupt, match=lambda call: asked(call) == [(0, 0)])
        async with fake_fetcher(kafka, check_crcs=check_crcs) as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            if check_crcs:
                with pytest.raises(CorruptRecordError):
                    while True:
                        fetcher.drain(10)
                        await fetcher.wait_for_data()
            else:
                assert await drain_values(fetcher, 0) == [(0, b"ab\x9c")]
        assert rule.hits >= 1


async def test_response_over_budget_is_trimmed_to_the_cap() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        for _ in range(10):  # 10 batches of ~1 KB each
            await write(kafka, b"v" * 1000)
        log = kafka.cluster.topics["t"].partitions[0].log
        assert len(log.batches) == 10
        one = max(len(b.data) for b in log.batches)
        cap = 3 * one + 10

        async def ignoring_max_bytes(call: Received) -> FetchResponse:
            # A broker that ignores max_bytes: everything from the fetch offset on.
            response = await model_fetch(kafka, call)
            ((_, offset),) = asked(call)
            data = response.responses[0].partitions[0]
            data.records = b"".join(b.data for b in log.batches if b.last_offset >= offset)
            return response

        rule = kafka.answer(FETCH, ignoring_max_bytes, match=lambda call: asked(call)[0][1] < 10)
        async with fake_fetcher(kafka, buffer_bytes=cap, max_partition_bytes=one) as (
            fetcher,
            subs,
            _,
        ):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            got = await drain_values(fetcher, 9)
            assert [o for o, _ in got] == list(range(10))
            stats = fetcher.statistics()
            assert stats.max_buffered_bytes <= cap
            assert stats.bytes_dropped > 0
        assert rule.hits >= 1
        assert all(x.request.max_bytes <= cap for x in kafka.received(FETCH))


async def test_preferred_read_replica_is_followed() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", replication_factor=2)
        await write(kafka, b"r")
        leader = kafka.leader("t", 0)
        follower = 3 - leader

        async def redirect(call: Received) -> FetchResponse:
            # KIP-392: the leader answers with no records and the replica to fetch from
            # (a broker places it by rack; the model has no racks).
            response = await model_fetch(kafka, call)
            data = response.responses[0].partitions[0]
            data.records = None
            data.preferred_read_replica = follower
            return response

        kafka.answer(FETCH, redirect, times=1, match=leader)
        async with fake_fetcher(kafka, rack_id="rack-a") as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            assert await drain_values(fetcher, 0) == [(0, b"r")]
        fetches = kafka.received(FETCH)
        assert [x.node for x in fetches[:2]] == [leader, follower]
        assert fetches[0].request.rack_id == "rack-a"


async def test_no_long_poll_for_partitions_at_log_end_while_others_drain() -> None:
    # p0 and p1 on broker 1. The first answer brings all of p0 (high watermark 2) and part
    # of p1 (high watermark 20); p1's rest is fetched ahead at once (p0 rides along, the
    # broker answers at once as p1 has records). Once p0 is drained it sits at its log end
    # while p1's buffered records are still being handed out: a fetch for p0 alone would be
    # a long poll holding the broker's one fetch slot when p1 needs its next fetch (a 500 ms
    # stall per round against a real broker). The planner waits for p1's drain and then
    # asks for both in one fetch. (The first answer is edited: which partitions a real
    # broker's response fills first is not something a test can pick.)
    tp1 = TopicPartition("t", 1)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", partitions=2)
        await write(kafka, b"a", b"b", partition=0)
        await write(kafka, *[b"v%d" % i for i in range(10)], partition=1)
        await write(kafka, *[b"v%d" % i for i in range(10, 20)], partition=1)
        p1_log = kafka.cluster.topics["t"].partitions[1].log
        assert len(p1_log.batches) == 2

        async def p1_first_batch_only(call: Received) -> FetchResponse:
            response = await model_fetch(kafka, call)
            for data in response.responses[0].partitions:
                if data.partition_index == 1:
                    data.records = p1_log.batches[0].data  # offsets 0-9 of 0-19
            return response

        kafka.answer(FETCH, p1_first_batch_only, times=1)

        def requests() -> list[list[tuple[int, int]]]:
            return [asked(x) for x in kafka.received(FETCH)]

        async with fake_fetcher(kafka) as (fetcher, subs, _):
            subs.assign_manual([TP0, tp1])
            subs.state(TP0).seek(0)
            subs.state(tp1).seek(0)
            p0: list[int] = []
            while len(p0) < 2:
                p0 += [r.offset for r in fetcher.drain(10, only=frozenset({TP0})).get(TP0, [])]
                if len(p0) < 2:
                    await fetcher.wait_for_data()
            await anyio.wait_all_tasks_blocked()
            # p1's fetch ahead (from the end of its buffer, not its position), then nothing:
            # p0 at its log end, p1 draining (one answer ahead already).
            assert requests()[0] == [(0, 0), (1, 0)]
            assert [sorted(r) for r in requests()[1:]] == [[(0, 2), (1, 10)]]
            p1: list[int] = []
            while len(p1) < 20:
                p1 += [r.offset for r in fetcher.drain(100, only=frozenset({tp1})).get(tp1, [])]
                await anyio.wait_all_tasks_blocked()
                if len(p1) < 20:
                    assert len(requests()) == 2  # still no long poll while p1 drains
                    await fetcher.wait_for_data()
            assert p1 == list(range(20))
            await anyio.wait_all_tasks_blocked()
            # After p1's drain, one fetch for both.
            assert [sorted(r) for r in requests()[2:]] == [[(0, 2), (1, 20)]]


async def test_a_throttled_fetch_holds_the_next_one_back_for_the_throttle_time() -> None:
    # KIP-219: a broker over quota answers with throttle_time_ms and expects no request on
    # that connection until it has passed; it is no failure (no backoff grows from it).
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        await write(kafka, b"a")
        sent_at: list[float] = []

        async def throttled(call: Received) -> FetchResponse:
            response = await model_fetch(kafka, call)
            sent_at.append(anyio.current_time())
            response.throttle_time_ms = 2000
            return response

        rule = kafka.answer(FETCH, throttled, times=1)
        async with fake_fetcher(kafka, max_wait_ms=10) as (fetcher, subs, _):
            subs.assign_manual([TP0])
            subs.state(TP0).seek(0)
            assert await drain_values(fetcher, 0) == [(0, b"a")]
            await write(kafka, b"b")
            assert await drain_values(fetcher, 1) == [(1, b"b")]
            after = [x for x in kafka.received(FETCH) if x.at > sent_at[0]]
        assert rule.hits == 1
        assert after and after[0].at - sent_at[0] >= 2.0
