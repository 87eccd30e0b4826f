"""FakeKafka's fault verbs and observers, one at a time, on raw in-memory connections on
virtual time: request cuts (their scope, forward_last, repeat), garbage and swapped answers,
random leader moves, and the counters (requests in flight, request times, errors,
connections, refused attempts, reset)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.connection import Connection, ConnectionConfig, connect
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

PRODUCE, METADATA, API_VERSIONS = 0, 3, 18
UNKNOWN_TOPIC = 3


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _metadata(*topics: str) -> MetadataRequest:
    return MetadataRequest(
        topics=[MetadataRequestTopic(name=t) for t in topics], allow_auto_topic_creation=True
    )


def _connect(kafka: FakeKafka, node: int = 1, **settings: Any) -> Any:
    config = ConnectionConfig(transport=kafka.transport, request_timeout_s=30, **settings)
    return connect("127.0.0.1", kafka.nodes[node].port, config)


async def _closed(conn: Connection) -> bool:
    with anyio.fail_after(5):
        await conn.wait_closed()
    return conn.closed


async def test_cut_of_one_connection_leaves_the_others() -> None:
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        _connect(kafka) as a,
        _connect(kafka) as b,
    ):
        kafka.cut_after(1, 2, scope="connection")
        await a.send(_metadata())  # the first request: answered
        with pytest.raises(KafkaConnectionError):
            await b.send(_metadata())  # the second closes its own connection
        assert await _closed(b)
        assert not a.closed
        await a.send(_metadata())  # one shot: the rule is spent
        assert kafka.open_connections(1) == 1


@pytest.mark.parametrize("forward_last", [True, False])
async def test_the_cut_request_is_handled_or_dropped(forward_last: bool) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        async with _connect(kafka) as conn:
            kafka.cut_after(1, 1, forward_last=forward_last)
            with pytest.raises(KafkaConnectionError):
                await conn.send(_metadata("made-by-the-cut-request"))
        # Auto-created by the request the client never heard back about (handled by a task
        # of its own), or never seen (dropped when the cut fired: it cannot appear later).
        created = lambda: "made-by-the-cut-request" in kafka.cluster.topics  # noqa: E731
        if forward_last:
            await kafka.wait_until(created)
        assert created() is forward_last


async def test_repeat_cuts_every_nth_request_until_cleared() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.cut_after(1, 3, repeat=True)
        for _ in range(3):
            async with _connect(kafka) as conn:  # ApiVersions: the first of the three
                await conn.send(_metadata())
                with pytest.raises(KafkaConnectionError):
                    await conn.send(_metadata())
        kafka.clear_faults()
        async with _connect(kafka) as conn:
            for _ in range(4):
                await conn.send(_metadata())
        assert kafka.connections(1) == 4


async def test_each_connection_is_cut_after_its_own_count() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        async with _connect(kafka) as old:
            await old.send(_metadata())  # before the rule: not counted
            kafka.cut_after(1, 2, scope="each")
            # A new connection counts from its first request, its ApiVersions.
            async with _connect(kafka) as new:
                await old.send(_metadata())
                for conn in (old, new):
                    with pytest.raises(KafkaConnectionError):
                        await conn.send(_metadata())
                    assert await _closed(conn)
        kafka.clear_faults()
        async with _connect(kafka) as conn:
            for _ in range(3):
                await conn.send(_metadata())


async def test_garbage_replaces_an_answer_of_the_given_api() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        async with _connect(kafka) as conn:
            kafka.inject_garbage(1, 1, api_key=PRODUCE)
            await conn.send(_metadata())  # not Produce: answered as usual
            kafka.clear_faults()
            kafka.inject_garbage(1, 1)
            with pytest.raises(KafkaConnectionError):
                await conn.send(_metadata())
            assert await _closed(conn)
        async with _connect(kafka) as conn:
            await conn.send(_metadata())  # one shot
        with pytest.raises(ValueError):
            kafka.inject_garbage(1, 0)


async def test_requests_in_flight_are_seen_at_the_node() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        async with _connect(kafka, 1, max_in_flight=5) as conn:
            kafka.black_hole(1)
            for _ in range(3):
                await conn.submit(_metadata())
            await kafka.wait_until(lambda: kafka.in_flight(1) == 3)
            assert (kafka.in_flight(), kafka.in_flight(2)) == (3, 0)
            assert kafka.max_in_flight(1) == kafka.max_in_flight() == 3
            assert kafka.max_in_flight(2) == 0
            kafka.isolate(1)  # drops the connection
            assert await _closed(conn)
        assert kafka.in_flight(1) == 0 and kafka.max_in_flight(1) == 3
        kafka.reset_counters()
        assert kafka.max_in_flight() == 0


async def test_request_times_errors_and_connection_counts() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", 2, replication_factor=2)
        kafka.delay(1, 100)
        async with _connect(kafka, 1) as conn:
            start = anyio.current_time()
            await conn.send(_metadata())
            await conn.send(_metadata("t", "no-such-topic-here"))
        kafka.inject(METADATA, UNKNOWN_TOPIC, times=1, match=2)
        async with _connect(kafka, 2) as conn:
            answer = await conn.send(_metadata("t"))
        assert [t.error_code for t in answer.topics] == [UNKNOWN_TOPIC]
        # Handled 100 ms apart: each answer waited out the delay before the next was read.
        times = kafka.request_times(METADATA, node=1)
        assert [round(t - start, 3) for t in times] == [0.0, 0.1]
        assert len(kafka.request_times(METADATA)) == 3
        assert len(kafka.request_times(API_VERSIONS, node=2)) == 1  # one per connection
        # Errors are counted per failed item, at the node that answered, by API and code:
        # node 1 auto-created the new topic (its first answer for it is UNKNOWN_TOPIC, as
        # Kafka 4's), node 2 answered the injected error.
        assert kafka.errors(METADATA, UNKNOWN_TOPIC, node=1) == 1
        assert kafka.errors(METADATA, UNKNOWN_TOPIC, node=2) == 1
        assert kafka.errors() == kafka.errors(METADATA) == 2
        assert kafka.errors(PRODUCE) == 0
        assert (kafka.connections(1), kafka.connections(2), kafka.connections()) == (1, 1, 2)
        kafka.kill(2)
        with pytest.raises(KafkaConnectionError):
            async with _connect(kafka, 2):
                pass
        assert kafka.refused(2) == 1 and kafka.refused() == 1
        kafka.reset_counters()
        assert (kafka.connections(), kafka.refused(), kafka.errors()) == (0, 0, 0)
        assert kafka.request_times(METADATA) == [] and kafka.requests() == {}
        assert kafka.connection_attempts(2) == []


async def test_partition_request_times_name_every_partition_of_a_produce() -> None:
    from aiokafka_ng import Producer

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 2)
        async with Producer(**kafka.client_config(), linger_ms=50) as producer:
            await producer.partitions_for("t")
            start = anyio.current_time()
            futures = [await producer.send("t", b"v", partition=p) for p in (0, 1)]
            for future in futures:
                await future
        for p in (0, 1):
            # One Produce named both partitions, after the linger.
            [when] = kafka.partition_request_times(PRODUCE, "t", p)
            assert when - start == pytest.approx(0.05, abs=0.002)
        assert len(kafka.request_times(PRODUCE)) == 1


async def test_move_random_leader_is_seeded_and_moves_to_a_live_node() -> None:
    moves: list[list[tuple[str, int, int] | None]] = []
    for _ in range(2):
        async with FakeKafka(brokers=3, tcp=False, seed=7) as kafka:
            kafka.create_topic("a", 4, replication_factor=3)
            kafka.create_topic("b", 4, replication_factor=3)
            kafka.kill(3)
            run: list[tuple[str, int, int] | None] = []
            for _ in range(10):
                before = {(t, p): kafka.leader(t, p) for t in "ab" for p in range(4)}
                moved = kafka.move_random_leader("a")
                assert moved is not None
                topic, partition, leader = moved
                assert topic == "a" and leader != before[(topic, partition)]
                assert leader in (1, 2) and kafka.leader(topic, partition) == leader
                run.append(moved)
            assert kafka.move_random_leader("nope") is None
            moves.append(run)
    assert moves[0] == moves[1]  # the same seed, the same moves
