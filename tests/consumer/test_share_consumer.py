"""ShareConsumer on FakeKafka: settings, member ids, and what it does with ShareFetch answers
no real broker can be made to send (garbage records, acquired ranges far beyond the records
sent), acknowledgement runs, renewals, pacing. The protocol against Apache Kafka is in
tests/kafka/test_kafka_share.py.

FakeKafka does not model share groups: each test runs a ShareConsumer against FakeKafka on
virtual time with ShareGroupHeartbeat, ShareFetch and ShareAcknowledge answered by scripts
(``FakeKafka.answer``), and reads what the consumer did off the wire (``received``): the
acknowledgements it sent, the pauses between its requests.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng import AcknowledgeType, ShareConsumer, TopicPartition
from aiokafka_ng.consumer.errors import ConsumerStoppedError, RecordDeserializationError
from aiokafka_ng.errors import ConfigError, IllegalStateError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import share_acknowledge as sa
from aiokafka_ng.protocol.messages import share_fetch as sf
from aiokafka_ng.protocol.messages import share_group_heartbeat as sgh
from aiokafka_ng.protocol.records import RecordBatchBuilder
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)
GAP, ACCEPT, RELEASE, REJECT, RENEW = 0, 1, 2, 3, 4  # the acknowledgement types on the wire


def batch(base: int, *values: bytes) -> bytes:
    b = RecordBatchBuilder(base_offset=base)
    for v in values:
        b.append(1000, None, v)
    return b.build()


def answer(records: bytes, *ranges: tuple[int, int, int], partition: int = 0) -> sf.PartitionData:
    return sf.PartitionData(
        partition_index=partition,
        records=records,
        acquired_records=[sf.AcquiredRecords(a, b, n) for a, b, n in ranges],
    )


def test_settings_are_checked() -> None:
    with pytest.raises(ConfigError, match="acknowledgement_mode"):
        ShareConsumer("t", group_id="g", acknowledgement_mode="manual")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="group_id"):
        ShareConsumer("t", group_id="")


def test_member_ids_are_unique_url_safe_uuids() -> None:
    ids = {ShareConsumer("t", group_id="g").member_id for _ in range(50)}
    assert len(ids) == 50
    for member_id in ids:
        assert len(member_id) == 22
        assert uuid.UUID(bytes=base64.urlsafe_b64decode(member_id + "=="))


@pytest.mark.anyio
async def test_not_started_consumer_refuses_calls(anyio_backend: str) -> None:
    c = ShareConsumer("t", group_id="g")
    with pytest.raises(ConsumerStoppedError):
        await c.poll()
    with pytest.raises(ConsumerStoppedError):
        await c.commit()
    await c.stop()  # stopping a consumer never started is fine
    with pytest.raises(IllegalStateError, match="only once"):
        await c.start()


def test_subscribe_before_start_sets_the_topics_to_join_with() -> None:
    c = ShareConsumer(group_id="g")
    assert c.subscription() == frozenset()
    c.subscribe("t")
    c.subscribe(["u", "t", "u"])
    assert c.subscription() == {"t", "u"}


@pytest.mark.anyio
async def test_a_stopped_consumer_refuses_a_new_subscription(anyio_backend: str) -> None:
    c = ShareConsumer("t", group_id="g")
    await c.stop()
    with pytest.raises(ConsumerStoppedError):
        c.subscribe(["u"])


SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
VIRTUAL_TIME = pytest.mark.parametrize(
    "anyio_backend",
    [virtual_time.backend("asyncio"), virtual_time.backend("trio")],
    ids=["asyncio", "trio"],
)


def coordinator(kafka: FakeKafka, assigned: dict[str, list[int]] | None = None) -> None:
    """Script the share group coordinator FakeKafka does not model: every member is
    assigned ``assigned`` (t-0 unless told) and joins at epoch 1; a leave (epoch -1) and
    ShareAcknowledge (which closes the member's share sessions at stop) are answered
    without error."""
    topics = kafka.cluster.topics
    assignment = sgh.Assignment(
        [sgh.TopicPartitions(topics[t].topic_id, ps) for t, ps in (assigned or {"t": [0]}).items()]
    )

    def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse:
        req = call.request
        if req.member_epoch == -1:
            return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
        return sgh.ShareGroupHeartbeatResponse(
            member_id=req.member_id,
            member_epoch=1,
            heartbeat_interval_ms=5000,
            assignment=assignment,
        )

    kafka.answer(SHARE_GROUP_HEARTBEAT, heartbeat)
    kafka.answer(SHARE_ACKNOWLEDGE, lambda call: sa.ShareAcknowledgeResponse())


def given(
    answer: sf.ShareFetchResponse | None,
) -> Callable[[Received], sf.ShareFetchResponse | None]:
    return lambda call: answer


def fetches(kafka: FakeKafka) -> list[Received]:
    """The ShareFetch requests received, the closing ones (epoch -1) left out."""
    return [x for x in kafka.received(SHARE_FETCH) if x.request.share_session_epoch != -1]


async def nothing_yet(call: Received) -> sf.ShareFetchResponse:
    await anyio.sleep(call.request.max_wait_ms / 1000)  # a long poll with no records
    return sf.ShareFetchResponse()


def records_of(
    kafka: FakeKafka, parts: list[tuple[str, sf.PartitionData]]
) -> sf.ShareFetchResponse:
    by_topic: dict[str, list[sf.PartitionData]] = {}
    for name, data in parts:
        by_topic.setdefault(name, []).append(data)
    return sf.ShareFetchResponse(
        responses=[
            sf.ShareFetchableTopicResponse(topic_id=kafka.cluster.topics[n].topic_id, partitions=ps)
            for n, ps in by_topic.items()
        ]
    )


def acknowledgements(kafka: FakeKafka) -> dict[TopicPartition, list[tuple[int, int, list[int]]]]:
    """Every acknowledgement batch the consumer sent, on ShareFetch and ShareAcknowledge
    alike, per partition in the order sent: ``(first offset, last offset, types)``."""
    names = {t.topic_id: n for n, t in kafka.cluster.topics.items()}
    out: dict[TopicPartition, list[tuple[int, int, list[int]]]] = {}
    for x in kafka.received():
        if x.api_key not in (SHARE_FETCH, SHARE_ACKNOWLEDGE):
            continue
        for t in x.request.topics:
            for p in t.partitions:
                for b in p.acknowledgement_batches:
                    out.setdefault(TopicPartition(names[t.topic_id], p.partition_index), []).append(
                        (b.first_offset, b.last_offset, list(b.acknowledge_types))
                    )
    return out


@asynccontextmanager
async def scripted(
    *first: tuple[str, sf.PartitionData],
    assigned: dict[str, list[int]] | None = None,
    **config: Any,
) -> AsyncIterator[tuple[FakeKafka, ShareConsumer]]:
    """A started ShareConsumer of the topics ``assigned`` names (t-0 unless told), assigned
    them; its first ShareFetch is answered with ``first`` (topic, partition data), every
    later one after its ``max_wait_ms`` with nothing."""
    assigned = assigned or {"t": [0]}
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        for name, partitions in assigned.items():
            kafka.create_topic(name, max(partitions) + 1)
        coordinator(kafka, assigned)
        kafka.answer(SHARE_FETCH, given(records_of(kafka, list(first))), times=1)
        kafka.answer(SHARE_FETCH, nothing_yet)
        async with ShareConsumer(*assigned, group_id="g", **kafka.client_config(), **config) as c:
            await c.wait_for_assignment(timeout=10)
            yield kafka, c


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_acquired_records_become_share_records_and_gaps_are_acknowledged(
    anyio_backend: str,
) -> None:
    # Offsets 0-2 and 5-6 sent; 0-6 acquired, so 3 and 4 (no record) are gaps, acknowledged
    # at once; the records wait for the application (explicit mode).
    sent = answer(batch(0, b"a", b"b", b"c") + batch(5, b"f", b"g"), (0, 2, 1), (3, 6, 3))
    async with scripted(("t", sent), acknowledgement_mode="explicit") as (kafka, c):
        records = await c.poll(timeout_ms=100)
        assert [(r.offset, r.value, r.delivery_count) for r in records] == [
            (0, b"a", 1), (1, b"b", 1), (2, b"c", 1), (5, b"f", 3), (6, b"g", 3),
        ]  # fmt: skip
        assert {r.topic_partition for r in records} == {TP}
        assert await c.commit() == {TP: None}
        assert acknowledgements(kafka) == {TP: [(3, 4, [GAP])]}


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_records_not_acquired_for_us_are_not_handed_out(anyio_backend: str) -> None:
    sent = answer(batch(0, b"a", b"b", b"c"), (1, 1, 2))
    async with scripted(("t", sent), acknowledgement_mode="explicit") as (kafka, c):
        assert [(r.offset, r.delivery_count) for r in await c.poll(timeout_ms=100)] == [(1, 2)]
        assert await c.commit() == {}
        assert acknowledgements(kafka) == {}


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_acquired_range_beyond_the_records_sent_is_clamped(anyio_backend: str) -> None:
    # A broker naming 2**62 acquired offsets must not make us walk them (nor call the
    # offsets before the batch gaps).
    sent = answer(batch(10, b"x"), (0, 2**62, 1))
    async with scripted(("t", sent), acknowledgement_mode="explicit") as (kafka, c):
        assert [r.offset for r in await c.poll(timeout_ms=100)] == [10]
        assert await c.commit() == {}
        assert acknowledgements(kafka) == {}


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_undecodable_records_are_released_not_handed_out(anyio_backend: str) -> None:
    good = batch(0, b"a", b"b")
    bad = bytearray(batch(2, b"c"))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    async with scripted(("t", answer(good + bytes(bad), (0, 2, 1)))) as (kafka, c):
        assert await c.poll(timeout_ms=100) == []
        # The offsets of the batches read before the bad one are released (with the next
        # request to the broker); the bad one's lock runs out on the broker.
        assert acknowledgements(kafka) == {TP: [(0, 1, [RELEASE])]}


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_failing_deserializer_releases_its_record_and_keeps_the_others(
    anyio_backend: str,
) -> None:
    def value_de(raw: bytes | None) -> str:
        if raw == b"bad":
            raise ValueError("not text")
        return (raw or b"").decode()

    sent = answer(batch(0, b"ok", b"bad", b"fine"), (0, 2, 1))
    async with scripted(("t", sent), value_deserializer=value_de) as (kafka, c):
        with pytest.raises(RecordDeserializationError) as info:
            await c.poll(timeout_ms=100)
        err = info.value
        assert (err.topic, err.partition, err.offset) == ("t", 0, 1)
        assert isinstance(err.__cause__, ValueError)
        # Raised once; the others are handed out by the next poll.
        assert [(r.offset, r.value) for r in await c.poll(timeout_ms=100)] == [
            (0, "ok"), (2, "fine"),
        ]  # fmt: skip
        assert await c.commit() == {TP: None}  # implicit mode: the batch is accepted
        assert acknowledgements(kafka) == {
            TP: [(0, 0, [ACCEPT]), (1, 1, [RELEASE]), (2, 2, [ACCEPT])]
        }


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_records_of_partitions_no_longer_wanted_are_released(anyio_backend: str) -> None:
    # Acquired for a topic unsubscribed while the fetch was out: not handed out, and given
    # back at once (not at lock expiry) as the session drops the partition.
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        kafka.create_topic("u")
        coordinator(kafka)
        consumers: list[ShareConsumer] = []

        def meanwhile(call: Received) -> sf.ShareFetchResponse:
            consumers[0].subscribe(["u"])
            return records_of(kafka, [("t", answer(batch(0, b"a"), (0, 0, 1)))])

        kafka.answer(SHARE_FETCH, meanwhile, times=1)
        kafka.answer(SHARE_FETCH, nothing_yet)
        async with ShareConsumer("t", group_id="g", **kafka.client_config()) as c:
            consumers.append(c)
            await c.wait_for_assignment(timeout=10)
            assert await c.poll(timeout_ms=100) == []
            assert acknowledgements(kafka) == {TP: [(0, 0, [RELEASE])]}


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_acknowledgements_go_out_as_runs_of_one_type(anyio_backend: str) -> None:
    sent = answer(batch(0, *[b"x"] * 8), (0, 7, 1))
    async with scripted(("t", sent), acknowledgement_mode="explicit") as (kafka, c):
        records = await c.poll(timeout_ms=100)
        kinds = [ACCEPT, ACCEPT, ACCEPT, RELEASE, RELEASE, REJECT, ACCEPT]
        for record, kind in zip(records, kinds, strict=False):  # the last one left alone
            c.acknowledge(record, AcknowledgeType(kind))
        assert await c.commit() == {TP: None}
        assert acknowledgements(kafka) == {
            TP: [(0, 2, [ACCEPT]), (3, 4, [RELEASE]), (5, 5, [REJECT]), (6, 6, [ACCEPT])]
        }


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_renewal_keeps_the_record_unacknowledged_and_waits_for_share_acknowledge(
    anyio_backend: str,
) -> None:
    sent = answer(batch(0, b"a", b"b"), (0, 1, 1))
    async with scripted(("t", sent), acknowledgement_mode="explicit") as (kafka, c):
        a, b = await c.poll(timeout_ms=100)
        c.acknowledge(a, AcknowledgeType.RENEW)
        c.acknowledge(b, AcknowledgeType.REJECT)
        assert await c.commit() == {TP: None}
        renewing = kafka.received(SHARE_ACKNOWLEDGE)
        assert [x.request.is_renew_ack for x in renewing] == [True]
        # a still wants its final acknowledgement; b had its own.
        c.acknowledge(a)
        with pytest.raises(IllegalStateError, match="not an unacknowledged"):
            c.acknowledge(b)
        assert await c.poll(timeout_ms=50) == []  # carries a's ACCEPT
        assert acknowledgements(kafka) == {
            TP: [(0, 0, [RENEW]), (1, 1, [REJECT]), (0, 0, [ACCEPT])]
        }
        # A ShareFetch that renews may not fetch (KIP-1222): no renewal rode on one.
        assert all(
            RENEW not in b.acknowledge_types
            for x in kafka.received(SHARE_FETCH)
            for t in x.request.topics
            for p in t.partitions
            for b in p.acknowledgement_batches
        )


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_subscribe_releases_buffered_records_of_the_topics_left(anyio_backend: str) -> None:
    u0 = TopicPartition("u", 0)
    first = [("u", answer(batch(0, b"b"), (0, 0, 1))), ("t", answer(batch(0, b"a"), (0, 0, 1)))]
    async with scripted(*first, assigned={"t": [0], "u": [0]}) as (kafka, c):
        assert [r.topic for r in await c.poll(timeout_ms=100, max_records=1)] == ["u"]
        c.subscribe(["u"])  # t's record waits in the consumer: released, never handed out
        assert c.subscription() == {"u"}
        # The heartbeat carries it at once, not after its 5 s interval.
        await kafka.wait_until(
            lambda: any(
                x.request.subscribed_topic_names == ["u"]
                for x in kafka.received(SHARE_GROUP_HEARTBEAT)
            ),
            within=1,
        )
        assert await c.poll(timeout_ms=50) == []
        assert acknowledgements(kafka) == {u0: [(0, 0, [ACCEPT])], TP: [(0, 0, [RELEASE])]}
        with pytest.raises(IllegalStateError, match="needs topic names"):
            c.subscribe([])


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_failed_share_fetches_back_off_more_with_each_failure(anyio_backend: str) -> None:
    # The shared policy (KIP-580) per broker: consecutive failures grow the pause; an
    # answer starts it over. (A session-lost answer reopens at once: see _SESSION_LOST.)
    # Read off the wire on virtual time: the gap before each next ShareFetch is the pause.
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        coordinator(kafka)
        scripted = [
            None,  # the connection closed unanswered: node 1 down
            None,
            sf.ShareFetchResponse(error_code=7),  # REQUEST_TIMED_OUT: retriable, paced
            sf.ShareFetchResponse(),  # an answer (no records)
            None,
        ]
        # Then a record, for poll() to return with (an empty answer would have it fetch
        # again until its timeout).
        record = sf.ShareFetchableTopicResponse(
            topic_id=kafka.cluster.topics["t"].topic_id,
            partitions=[answer(batch(0, b"r"), (0, 0, 1))],
        )
        scripted.append(sf.ShareFetchResponse(responses=[record]))
        for a in scripted:  # rules are tried in the order added: each answers once
            kafka.answer(SHARE_FETCH, given(a), times=1)
        # No reconnect backoff: the gaps are the fetch pacing's alone.
        config = {**kafka.client_config(), "reconnect_backoff_ms": 0}
        async with ShareConsumer(
            "t", group_id="g", retry_backoff_ms=1, retry_backoff_max_ms=50, **config
        ) as c:
            await c.wait_for_assignment(timeout=10)
            assert [r.value for r in await c.poll(timeout_ms=100)] == [b"r"]
        at = [x.at for x in fetches(kafka)]
    assert len(at) == len(scripted)
    gaps = [b - a for a, b in itertools.pairwise(at)]
    # backoff(n) is 1 ms * 2**(n-1), +-20 %: after 1, 2, 3 failures, none after the
    # answer, then 1 failure again.
    assert 0.0008 <= gaps[0] <= 0.0012
    assert 0.0016 <= gaps[1] <= 0.0024
    assert 0.0032 <= gaps[2] <= 0.0048
    assert gaps[3] == 0
    assert 0.0008 <= gaps[4] <= 0.0012


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_share_fetch_backoff_never_outlasts_the_round(anyio_backend: str) -> None:
    # Deep into failures the policy asks for up to a minute; poll()'s round (wait_ms) bounds
    # the pause so poll keeps its timeout. Without the bound a poll sleeps ~60 s.
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        coordinator(kafka)
        kafka.answer(SHARE_FETCH, given(sf.ShareFetchResponse(error_code=7)))  # every one
        async with ShareConsumer(
            "t",
            group_id="g",
            retry_backoff_ms=1,
            retry_backoff_max_ms=60_000,
            **kafka.client_config(),
        ) as c:
            await c.wait_for_assignment(timeout=10)
            took: list[float] = []
            # 20 ms polls until 20 consecutive failures: the policy's pause is then its
            # cap, 60 s (1 ms * 2**19 is past it).
            while len(fetches(kafka)) <= 20:
                start = anyio.current_time()
                assert await c.poll(timeout_ms=20) == []
                took.append(anyio.current_time() - start)
    # Each poll kept its 20 ms, give or take the policy's first step (1 ms) its last pause
    # may take when less than that was left.
    assert took and max(took) <= 0.021 + 1e-9


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_poll_with_under_a_millisecond_left_waits_instead_of_spinning(
    anyio_backend: str,
) -> None:
    # Each empty answer comes after 0.7 ms, or at once when the request may not wait (as
    # a broker answers max_wait_ms=0): a 2 ms poll has 0.6 ms left after three answers.
    # Its next ShareFetch must still wait (1 ms, rounded up), not ask for 0 ms and spin.
    # A spinning poll is cut off after 50 fetches by holding the answer for a second.
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        coordinator(kafka)

        async def empty(call: Received) -> sf.ShareFetchResponse:
            if len(fetches(kafka)) > 50:
                await anyio.sleep(1)
            elif call.request.max_wait_ms > 0:
                await anyio.sleep(0.0007)
            return sf.ShareFetchResponse()

        kafka.answer(SHARE_FETCH, empty)
        async with ShareConsumer("t", group_id="g", **kafka.client_config()) as c:
            await c.wait_for_assignment(timeout=10)
            before = len(fetches(kafka))
            start = anyio.current_time()
            assert await c.poll(timeout_ms=2) == []
            took = anyio.current_time() - start
            polled = fetches(kafka)[before:]
    assert len(polled) <= 4, [x.request.max_wait_ms for x in polled]
    assert all(x.request.max_wait_ms >= 1 for x in polled)
    assert 0.002 <= took <= 0.0029


@pytest.mark.anyio
async def test_a_heartbeat_error_retrying_cannot_fix_stops_the_consumer(
    anyio_backend: str, caplog: pytest.LogCaptureFixture
) -> None:
    # GROUP_AUTHORIZATION_FAILED: the heartbeat task stops the consumer through its runtime,
    # as a failed background task does: calls raise the error, status() is not ready and
    # says why, stop() returns without leaving (there is no membership to leave).
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        kafka.answer(
            SHARE_GROUP_HEARTBEAT,
            lambda call: sgh.ShareGroupHeartbeatResponse(error_code=30, error_message="no"),
        )
        c = ShareConsumer("t", group_id="g", **kafka.client_config())
        await c.start()
        with pytest.raises(IllegalStateError, match="share consumer stopped") as info:
            await c.wait_for_assignment(timeout=10)
        assert type(info.value.__cause__).__name__ == "GroupAuthorizationFailedError"
        status = c.status()
        assert (status.state, status.ready) == ("running", False)
        assert status.last_error is not None
        assert status.last_error.startswith("GroupAuthorizationFailedError")
        with pytest.raises(IllegalStateError, match="share consumer stopped"):
            await c.poll()
        await c.stop()
        assert c.status().state == "closed"
        assert c.statistics().state == "closed"
        # One heartbeat, no leave (epoch -1) after the failure.
        assert [x.request.member_epoch for x in kafka.received(SHARE_GROUP_HEARTBEAT)] == [0]
    assert "heartbeat answered" in caplog.text


# ---------------------------------------------------------------- share_acquire_mode (KIP-1206)


def test_share_acquire_mode_is_checked() -> None:
    ShareConsumer("t", group_id="g", share_acquire_mode="RECORD_LIMIT")  # case-insensitive
    with pytest.raises(ConfigError) as info:
        ShareConsumer(
            "t",
            group_id="g",
            share_acquire_mode="strict",
            acknowledgement_mode="auto",  # type: ignore[arg-type]
        )
    assert set(info.value.errors) == {"share_acquire_mode", "acknowledgement_mode"}


def two_leaders(kafka: FakeKafka) -> dict[int, int]:
    """Topic t with a partition led by each of the two nodes, both assigned to every member
    (the scripted coordinator); returns partition -> leader."""
    topic = kafka.create_topic("t", 2)
    topic_id = topic.topic_id
    leaders = {p.index: p.leader for p in topic.partitions}
    assert set(leaders.values()) == {1, 2}

    def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse:
        req = call.request
        if req.member_epoch == -1:
            return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
        return sgh.ShareGroupHeartbeatResponse(
            member_id=req.member_id,
            member_epoch=1,
            heartbeat_interval_ms=5000,
            assignment=sgh.Assignment([sgh.TopicPartitions(topic_id, [0, 1])]),
        )

    kafka.answer(SHARE_GROUP_HEARTBEAT, heartbeat)
    kafka.answer(SHARE_ACKNOWLEDGE, lambda call: sa.ShareAcknowledgeResponse())
    kafka.answer(SHARE_FETCH, nothing_yet)
    return leaders


@VIRTUAL_TIME
@pytest.mark.anyio
@pytest.mark.parametrize("mode", ["batch_optimized", "record_limit"])
async def test_record_limit_asks_one_leader_at_a_time_for_records(
    anyio_backend: str, mode: str
) -> None:
    # Java's record_limit: one ShareFetch asks for records per round, from the leaders in
    # turn; the other brokers get only session changes (nothing asked, nothing waited for)
    # or no request. batch_optimized asks every leader every round.
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        two_leaders(kafka)
        async with ShareConsumer(
            "t",
            group_id="g",
            share_acquire_mode=mode,
            max_poll_records=7,
            fetch_max_wait_ms=25,
            **kafka.client_config(),
        ) as c:
            await c.wait_for_assignment(timeout=10)
            assert await c.poll(timeout_ms=100) == []
        sent = fetches(kafka)
    asking = [x for x in sent if x.request.max_records > 0]
    assert {x.request.share_acquire_mode for x in sent} == {int(mode == "record_limit")}
    assert all(x.version == 2 for x in sent)
    assert {x.request.max_records for x in asking} == {7}
    if mode == "batch_optimized":
        assert len(asking) == len(sent) and {x.node for x in asking} == {1, 2}
        return
    nodes = [x.node for x in asking]
    assert len(nodes) >= 3 and nodes == [1 + i % 2 for i in range(len(nodes))]
    quiet = [x.request for x in sent if x.request.max_records == 0]
    assert quiet, "the other leader's session was opened without asking for records"
    assert all(r.max_wait_ms == 0 and r.max_bytes == 0 and r.topics for r in quiet)


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_record_limit_against_a_broker_without_share_fetch_v2_is_an_error(
    anyio_backend: str,
) -> None:
    # Kafka 4.1 speaks ShareFetch v1 only: the mode would be dropped silently (the field is
    # ignorable), so the poll says so instead.
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        two_leaders(kafka)
        kafka.api_versions[SHARE_FETCH] = (1, 1)
        async with ShareConsumer(
            "t", group_id="g", share_acquire_mode="record_limit", **kafka.client_config()
        ) as c:
            await c.wait_for_assignment(timeout=10)
            with pytest.raises(UnsupportedVersionError, match=r"record_limit.*Kafka 4\.2"):
                await c.poll(timeout_ms=100)
        assert [x for x in fetches(kafka) if x.request.max_records > 0] == []


# ---------------------------------------------------------------- leaders not known yet

METADATA = 3


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_fetch_goes_out_as_soon_as_metadata_names_the_leader(anyio_backend: str) -> None:
    # t-0's only replica is down, so metadata names no leader: the poll asks for metadata
    # and waits for the refresher's next snapshot. The first ShareFetch goes out in the
    # instant the Metadata answer naming the restarted leader comes, not up to a backoff
    # step later (a loop sleeping retry_backoff_ms between looks), and a poll meanwhile
    # keeps its timeout.
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        leader = kafka.create_topic("t", 1, replication_factor=1).partitions[0].leader
        kafka.move_coordinator("g", 3 - leader)
        coordinator(kafka)
        kafka.answer(SHARE_FETCH, nothing_yet)
        kafka.kill(leader)
        async with ShareConsumer(
            "t",
            group_id="g",
            retry_backoff_ms=200,
            retry_backoff_max_ms=1000,
            **kafka.client_config(),
        ) as c:
            await c.wait_for_assignment(timeout=10)
            start = anyio.current_time()
            assert await c.poll(timeout_ms=700) == []
            # (Give or take the millisecond a last wait is rounded up to.)
            assert 0.7 <= anyio.current_time() - start <= 0.701
            assert fetches(kafka) == []
            asked_before = len(kafka.received(METADATA))
            kafka.restart(leader)
            assert await c.poll(timeout_ms=3000) == []
        first_fetch = fetches(kafka)[0]
        named = kafka.received(METADATA)[asked_before]  # the first answer naming the leader
    assert first_fetch.node == leader
    assert first_fetch.at == named.at


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_stop_wakes_a_poll_waiting_for_a_leader(anyio_backend: str) -> None:
    # A poll waiting for metadata that names a leader ends when the consumer stops, not
    # when its wait (fetch_max_wait_ms, here 5 s) runs out.
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        leader = kafka.create_topic("t", 1, replication_factor=1).partitions[0].leader
        kafka.move_coordinator("g", 3 - leader)
        coordinator(kafka)
        kafka.kill(leader)
        c = ShareConsumer("t", group_id="g", fetch_max_wait_ms=5000, **kafka.client_config())
        await c.start()
        await c.wait_for_assignment(timeout=10)
        ended: list[float] = []

        async def poll() -> None:
            with pytest.raises(ConsumerStoppedError):
                await c.poll(timeout_ms=60_000)
            ended.append(anyio.current_time())

        async with anyio.create_task_group() as tg:
            tg.start_soon(poll)
            await anyio.wait_all_tasks_blocked()
            stopping = anyio.current_time()
            await c.stop()
            stopped = anyio.current_time()
    assert fetches(kafka) == []
    assert len(ended) == 1 and stopping <= ended[0] <= stopped


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_new_assignment_wakes_a_poll_waiting_for_a_leader(anyio_backend: str) -> None:
    # t-0 has no leader; the second heartbeat (1 s later) also assigns u-0, whose leader is
    # up: the poll waiting for t's leader fetches u-0 in the instant the assignment comes,
    # not at the next metadata snapshot (the refresher's backoff here is 1 s and up).
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        t = kafka.create_topic("t", 1, replication_factor=1)
        leader = t.partitions[0].leader
        up = 3 - leader
        u = kafka.create_topic("u", 1, replication_factor=1)
        kafka.cluster.assign(u.partitions[0], [up])
        kafka.move_coordinator("g", up)
        kafka.answer(SHARE_FETCH, nothing_yet)
        kafka.answer(SHARE_ACKNOWLEDGE, lambda call: sa.ShareAcknowledgeResponse())

        def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse:
            req = call.request
            if req.member_epoch == -1:
                return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
            parts = [sgh.TopicPartitions(t.topic_id, [0])]
            if len(kafka.received(SHARE_GROUP_HEARTBEAT)) > 1:
                parts.append(sgh.TopicPartitions(u.topic_id, [0]))
            return sgh.ShareGroupHeartbeatResponse(
                member_id=req.member_id,
                member_epoch=1,
                heartbeat_interval_ms=1000,
                assignment=sgh.Assignment(parts),
            )

        kafka.answer(SHARE_GROUP_HEARTBEAT, heartbeat)
        kafka.kill(leader)
        async with ShareConsumer(
            "t",
            "u",
            group_id="g",
            retry_backoff_ms=1000,
            retry_backoff_max_ms=5000,
            fetch_max_wait_ms=5000,
            **kafka.client_config(),
        ) as c:
            await c.wait_for_assignment(timeout=10)
            assert await c.poll(timeout_ms=3000) == []
            assert c.assignment() == {TP, TopicPartition("u", 0)}
        assigned_u = kafka.received(SHARE_GROUP_HEARTBEAT)[1]
        first_fetch = fetches(kafka)[0]
    assert first_fetch.node == up
    assert first_fetch.at == assigned_u.at


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_consumer_failing_wakes_a_poll_waiting_for_a_leader(anyio_backend: str) -> None:
    # The second heartbeat (1 s in) is answered GROUP_AUTHORIZATION_FAILED: the consumer
    # stops, and the poll waiting for t's leader raises then, not when its 5 s wait ends.
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        t = kafka.create_topic("t", 1, replication_factor=1)
        leader = t.partitions[0].leader
        kafka.move_coordinator("g", 3 - leader)

        def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse:
            if len(kafka.received(SHARE_GROUP_HEARTBEAT)) > 1:
                return sgh.ShareGroupHeartbeatResponse(error_code=30, error_message="no")
            return sgh.ShareGroupHeartbeatResponse(
                member_id=call.request.member_id,
                member_epoch=1,
                heartbeat_interval_ms=1000,
                assignment=sgh.Assignment([sgh.TopicPartitions(t.topic_id, [0])]),
            )

        kafka.answer(SHARE_GROUP_HEARTBEAT, heartbeat)
        kafka.kill(leader)
        async with ShareConsumer(
            "t", group_id="g", fetch_max_wait_ms=5000, **kafka.client_config()
        ) as c:
            await c.wait_for_assignment(timeout=10)
            with pytest.raises(IllegalStateError, match="share consumer stopped"):
                await c.poll(timeout_ms=60_000)
            raised = anyio.current_time()
        failed_at = kafka.received(SHARE_GROUP_HEARTBEAT)[1].at
    assert fetches(kafka) == []
    assert raised == failed_at


# ---------------------------------------------------------------- the epoch heartbeat


@VIRTUAL_TIME
@pytest.mark.anyio
async def test_a_fenced_member_drops_its_assignment_and_joins_again_at_once(
    anyio_backend: str,
) -> None:
    # FENCED_MEMBER_EPOCH on a heartbeat: the member holds nothing until it has joined
    # again, and the join (epoch 0, the same member id) goes at once, as Java's heartbeat
    # manager sends it -- not after the retry backoff (here 1 s, so a pause would show).
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        topic_id = kafka.cluster.topics["t"].topic_id
        epochs = iter([1, None, 2])  # None: fenced
        seen: list[frozenset[TopicPartition]] = []

        def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse:
            req = call.request
            if req.member_epoch == -1:
                return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
            seen.append(c.assignment())
            epoch = next(epochs, 2)
            if epoch is None:
                return sgh.ShareGroupHeartbeatResponse(error_code=110, error_message="fenced")
            return sgh.ShareGroupHeartbeatResponse(
                member_id=req.member_id,
                member_epoch=epoch,
                heartbeat_interval_ms=5000,
                assignment=sgh.Assignment([sgh.TopicPartitions(topic_id, [0])]),
            )

        kafka.answer(SHARE_GROUP_HEARTBEAT, heartbeat)
        config = {**kafka.client_config(), "retry_backoff_ms": 1000, "retry_backoff_max_ms": 1000}
        async with ShareConsumer("t", group_id="g", **config) as c:
            await c.wait_for_assignment(timeout=10)
            await kafka.wait_until(lambda: len(kafka.received(SHARE_GROUP_HEARTBEAT)) >= 3)
            assert await c.wait_for_assignment(timeout=10) == {TP}
            assert c.statistics().member_epoch == 2
        beats = kafka.received(SHARE_GROUP_HEARTBEAT)
    assert [x.request.member_epoch for x in beats[:3]] == [0, 1, 0]
    assert len({x.request.member_id for x in beats}) == 1
    fenced, rejoin = beats[1], beats[2]
    assert rejoin.at - fenced.at < 0.001  # at once, not after the 1 s backoff
    assert seen[2] == frozenset()  # the assignment was dropped before joining again


async def lost(call: Received, how: str) -> None:
    """A heartbeat the coordinator did not answer: the connection dropped at once, or left
    unanswered past the request timeout (then dropped)."""
    if how == "unanswered":
        await anyio.sleep(60)


@VIRTUAL_TIME
@pytest.mark.anyio
@pytest.mark.parametrize(
    ("fault", "lookups"),
    [
        (14, 0),  # COORDINATOR_LOAD_IN_PROGRESS: the right coordinator, still loading
        (16, 1),  # NOT_COORDINATOR
        ("dropped", 1),
        ("unanswered", 1),
    ],
)
async def test_only_a_heartbeat_the_coordinator_did_not_answer_finds_it_again(
    anyio_backend: str, fault: int | str, lookups: int
) -> None:
    # Whether a failed heartbeat costs a new FindCoordinator is the coordinator route's to
    # decide (aiokafka_ng.cluster.retry), as for the KIP-848 member: as Java's heartbeat
    # manager, only an answer saying the coordinator moved, a dropped connection or no
    # answer within the request timeout.
    FIND_COORDINATOR = 10
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        topic_id = kafka.cluster.topics["t"].topic_id
        beats = itertools.count()

        async def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse | None:
            req = call.request
            if req.member_epoch == -1:
                return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
            if next(beats) == 1:  # the first after the join
                if isinstance(fault, int):
                    return sgh.ShareGroupHeartbeatResponse(error_code=fault)
                await lost(call, fault)
                return None  # the connection is closed
            return sgh.ShareGroupHeartbeatResponse(
                member_id=req.member_id,
                member_epoch=1,
                heartbeat_interval_ms=5000,
                assignment=sgh.Assignment([sgh.TopicPartitions(topic_id, [0])]),
            )

        kafka.answer(SHARE_GROUP_HEARTBEAT, heartbeat)
        config = {**kafka.client_config(), "request_timeout_ms": 5000}
        async with ShareConsumer("t", group_id="g", **config) as c:
            await c.wait_for_assignment(timeout=10)
            await kafka.wait_until(
                lambda: len(kafka.received(SHARE_GROUP_HEARTBEAT)) >= 3, within=60
            )
            assert c.assignment() == {TP}
        order = kafka.received()
        failed, retried = kafka.received(SHARE_GROUP_HEARTBEAT)[1:3]  # after the join
    between = order[order.index(failed) : order.index(retried)]
    assert sum(x.api_key == FIND_COORDINATOR for x in between) == lookups
    assert retried.request.member_epoch == failed.request.member_epoch == 1  # not fenced
