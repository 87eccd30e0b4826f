"""ShareConsumer without a broker: settings, member ids, acknowledgement runs, and what it
does with ShareFetch answers no real broker can be made to send (garbage records, acquired
ranges far beyond the records sent). The protocol against Apache Kafka is in
tests/kafka/test_kafka_share.py.

FakeKafka does not model share groups: the two ShareFetch pacing tests run a ShareConsumer
against FakeKafka on virtual time with ShareGroupHeartbeat, ShareFetch and ShareAcknowledge
answered by scripts (``FakeKafka.answer``), and read the pauses off the wire.
"""

from __future__ import annotations

import base64
import itertools
import uuid
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiokafka_ng import AcknowledgeType, ShareConsumer, TopicPartition
from aiokafka_ng.cluster import ClientState, Cluster
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.errors import ConsumerStoppedError, RecordDeserializationError
from aiokafka_ng.consumer.share._wire import _GAP, _runs
from aiokafka_ng.errors import ConfigError, IllegalStateError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import share_acknowledge as sa
from aiokafka_ng.protocol.messages import share_fetch as sf
from aiokafka_ng.protocol.messages import share_group_heartbeat as sgh
from aiokafka_ng.protocol.records import RecordBatchBuilder
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.unit

TP = TopicPartition("t", 0)


def batch(base: int, *values: bytes) -> bytes:
    b = RecordBatchBuilder(base_offset=base)
    for v in values:
        b.append(1000, None, v)
    return b.build()


def answer(records: bytes, *ranges: tuple[int, int, int]) -> sf.PartitionData:
    return sf.PartitionData(
        partition_index=0,
        records=records,
        acquired_records=[sf.AcquiredRecords(a, b, n) for a, b, n in ranges],
    )


def consumer(**config: Any) -> ShareConsumer:
    c = ShareConsumer("t", group_id="g", **config)
    c._assignment = frozenset({TP})  # as if the broker had assigned it
    return c


def idle_cluster() -> Cluster:
    """A real cluster, never started: what is asked of it shows in its statistics."""
    return Cluster(ConsumerConfig(bootstrap_servers="127.0.0.1:9092").cluster_config())


def take(c: ShareConsumer, p: sf.PartitionData, tp: TopicPartition = TP) -> None:
    # _take_partition asks the cluster for metadata only after a partition error.
    cluster = idle_cluster()
    c._take_partition(cluster, tp, p)
    assert cluster.statistics().tracked_topics == (), "no metadata refresh expected"


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
    assert c.subscription() == {"t", "u"} and c._topics == ["t", "u"]


@pytest.mark.anyio
async def test_a_stopped_consumer_refuses_a_new_subscription(anyio_backend: str) -> None:
    c = ShareConsumer("t", group_id="g")
    await c.stop()
    with pytest.raises(ConsumerStoppedError):
        c.subscribe(["u"])


def test_acknowledgements_fold_into_runs_of_one_type() -> None:
    assert _runs({}) == []
    acks = {5: 1, 6: 1, 7: 2, 9: 2, 10: 2, 3: 0, 4: 1}
    assert _runs(acks) == [(3, 3, 0), (4, 6, 1), (7, 7, 2), (9, 10, 2)]


def test_acquired_records_become_share_records_and_gaps_are_acknowledged() -> None:
    c = consumer()
    # Offsets 0-2 and 5-6 sent; 0-6 acquired, so 3 and 4 (no record) are gaps.
    take(c, answer(batch(0, b"a", b"b", b"c") + batch(5, b"f", b"g"), (0, 2, 1), (3, 6, 3)))
    assert [(r.offset, r.value, r.delivery_count) for r in c._buffer] == [
        (0, b"a", 1), (1, b"b", 1), (2, b"c", 1), (5, b"f", 3), (6, b"g", 3),
    ]  # fmt: skip
    assert c._acks == {TP: {3: _GAP, 4: _GAP}}


def test_records_not_acquired_for_us_are_not_handed_out() -> None:
    c = consumer()
    take(c, answer(batch(0, b"a", b"b", b"c"), (1, 1, 2)))
    assert [(r.offset, r.delivery_count) for r in c._buffer] == [(1, 2)]
    assert TP not in c._acks


def test_acquired_range_beyond_the_records_sent_is_clamped() -> None:
    # A broker naming 2**62 acquired offsets must not make us walk them.
    c = consumer()
    take(c, answer(batch(10, b"x"), (0, 2**62, 1)))
    assert [r.offset for r in c._buffer] == [10]
    assert TP not in c._acks


def test_undecodable_records_are_released_not_handed_out() -> None:
    c = consumer()
    good = batch(0, b"a", b"b")
    bad = bytearray(batch(2, b"c"))
    bad[-1] ^= 0xFF  # the CRC no longer matches
    take(c, answer(good + bytes(bad), (0, 2, 1)))
    assert not c._buffer
    # The offsets of the batches read before the bad one are released; the bad one's
    # lock runs out on the broker.
    assert c._acks == {TP: {0: int(AcknowledgeType.RELEASE), 1: int(AcknowledgeType.RELEASE)}}


def test_a_failing_deserializer_releases_its_record_and_keeps_the_others() -> None:
    def value_de(raw: bytes | None) -> str:
        if raw == b"bad":
            raise ValueError("not text")
        return (raw or b"").decode()

    c = consumer(value_deserializer=value_de)
    take(c, answer(batch(0, b"ok", b"bad", b"fine"), (0, 2, 1)))
    assert [(r.offset, r.value) for r in c._buffer] == [(0, "ok"), (2, "fine")]
    assert c._acks == {TP: {1: int(AcknowledgeType.RELEASE)}}
    err = c._decode_error
    assert isinstance(err, RecordDeserializationError)
    assert (err.topic, err.partition, err.offset) == ("t", 0, 1)
    assert isinstance(err.__cause__, ValueError)


def test_records_of_partitions_no_longer_wanted_are_released() -> None:
    # Acquired for a partition the broker no longer assigns, or of a topic unsubscribed
    # while the fetch was out: not handed out, and given back at once (not at lock expiry).
    c = consumer()
    c._assignment = frozenset()
    take(c, answer(batch(0, b"a"), (0, 0, 1)))
    assert not c._buffer and c._acks == {TP: {0: int(AcknowledgeType.RELEASE)}}
    c = consumer()
    c.subscribe(["other"])  # before start: only the topics to join with change
    take(c, answer(batch(0, b"a"), (0, 0, 1)))
    assert not c._buffer and c._acks == {TP: {0: int(AcknowledgeType.RELEASE)}}


def test_renewal_keeps_the_record_unacknowledged_and_waits_for_share_acknowledge() -> None:
    c = consumer(acknowledgement_mode="explicit")
    take(c, answer(batch(0, b"a", b"b"), (0, 1, 1)))
    a, b = c._buffer
    c._unacked = {(r.topic_partition, r.offset): r for r in (a, b)}
    c.acknowledge(a, AcknowledgeType.RENEW)
    c.acknowledge(b, AcknowledgeType.REJECT)
    assert (TP, 0) in c._unacked and (TP, 1) not in c._unacked  # a still wants its final ack
    # A ShareFetch may not renew (KIP-1222): the fetch path leaves the renewal pending ...
    batches, offsets = c._take_acks(TP, renew=False)
    assert [(x.first_offset, x.last_offset, x.acknowledge_types) for x in batches] == [(1, 1, [3])]
    assert offsets == {1} and c._acks == {TP: {0: int(AcknowledgeType.RENEW)}}
    # ... for ShareAcknowledge; then the final acknowledgement replaces nothing pending.
    batches, offsets = c._take_acks(TP, renew=True)
    assert [(x.first_offset, x.acknowledge_types) for x in batches] == [(0, [4])]
    assert offsets == {0} and not c._acks
    c.acknowledge(a)
    assert not c._unacked and c._acks == {TP: {0: int(AcknowledgeType.ACCEPT)}}


def test_subscribe_releases_buffered_records_of_the_topics_left() -> None:
    cluster = idle_cluster()
    c = consumer()
    c.subscribe(["t", "u"])  # before start
    # As if started (subscribe() only asks the cluster for metadata).
    c._runtime.state, c._runtime.cluster = ClientState.RUNNING, cluster
    other = TopicPartition("u", 0)
    c._assignment = frozenset({TP, other})
    take(c, answer(batch(0, b"a"), (0, 0, 1)))
    take(c, answer(batch(0, b"b"), (0, 0, 1)), other)
    c.subscribe(["u"])
    assert c.subscription() == {"u"} and cluster.statistics().tracked_topics == ("u",)
    assert c._heartbeats.woken  # the heartbeat carries it at once
    assert [r.topic for r in c._buffer] == ["u"]
    assert c._acks == {TP: {0: int(AcknowledgeType.RELEASE)}}
    with pytest.raises(IllegalStateError, match="needs topic names"):
        c.subscribe([])


SHARE_GROUP_HEARTBEAT, SHARE_FETCH, SHARE_ACKNOWLEDGE = 76, 78, 79
VIRTUAL_TIME = pytest.mark.parametrize(
    "anyio_backend",
    [virtual_time.backend("asyncio"), virtual_time.backend("trio")],
    ids=["asyncio", "trio"],
)


def coordinator(kafka: FakeKafka) -> None:
    """Script the share group coordinator FakeKafka does not model: every member is
    assigned t-0 and joins at epoch 1; a leave (epoch -1) and ShareAcknowledge (which closes
    the member's share sessions at stop) are answered without error."""
    topic_id = kafka.cluster.topics["t"].topic_id

    def heartbeat(call: Received) -> sgh.ShareGroupHeartbeatResponse:
        req = call.request
        if req.member_epoch == -1:
            return sgh.ShareGroupHeartbeatResponse(member_id=req.member_id, member_epoch=-1)
        return sgh.ShareGroupHeartbeatResponse(
            member_id=req.member_id,
            member_epoch=1,
            heartbeat_interval_ms=5000,
            assignment=sgh.Assignment([sgh.TopicPartitions(topic_id, [0])]),
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
    assert consumer(share_acquire_mode="RECORD_LIMIT") is not None  # case-insensitive
    with pytest.raises(ConfigError) as info:
        consumer(share_acquire_mode="strict", acknowledgement_mode="auto")
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

    async def nothing_yet(call: Received) -> sf.ShareFetchResponse:
        await anyio.sleep(call.request.max_wait_ms / 1000)  # a long poll with no records
        return sf.ShareFetchResponse()

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
