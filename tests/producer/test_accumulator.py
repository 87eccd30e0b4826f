"""Accumulator: pending topic queues, batching, readiness, drain fairness, muting, retries.

Pure unit tests with a fake clock; no broker, no event loop (the accumulator is sync).
"""

from __future__ import annotations

from types import MappingProxyType

import pytest

from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.errors import KafkaTimeoutError, UnknownTopicOrPartitionError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.accumulator import Accumulator, QueuedRun
from aiokafka_ng.producer.future import BatchDelivery, DeliveryFuture
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.signals import Signals
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.records import iter_batches


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def meta(
    topic: str = "t", partitions: int = 3, leaders: dict[int, int] | None = None
) -> ClusterMetadata:
    leaders = leaders or {}
    parts = {p: PartitionMetadata(partition=p, leader=leaders.get(p, 1)) for p in range(partitions)}
    return ClusterMetadata(
        brokers=MappingProxyType(
            {1: BrokerMetadata(1, "127.0.0.1", 1), 2: BrokerMetadata(2, "127.0.0.1", 2)}
        ),
        topics=MappingProxyType({topic: TopicMetadata(topic, partitions=MappingProxyType(parts))}),
    )


class Heard:
    """The accumulator's signals, recorded: nodes woken and topics asked for, in order. A
    lingering head batch's ``node_due`` counts as its node woken."""

    def __init__(self) -> None:
        self.woken: list[int] = []
        self.requested: list[str] = []
        self.signals = Signals(
            wake_node=self.woken.append,
            node_due=lambda node, at: self.woken.append(node),
            need_metadata=self.requested.append,
        )


def make(
    clock: Clock,
    *,
    batch_size: int = 1000,
    linger_ms: float = 5,
    max_request_size: int = 1 << 20,
    guarantee_order: bool = False,
    idem: IdempotenceState | None = None,
    pool: MemoryPool | None = None,
) -> tuple[Accumulator, list[int], list[str]]:
    heard = Heard()
    acc = Accumulator(
        pool=pool or MemoryPool(1 << 20),
        batch_size=batch_size,
        linger_ms=linger_ms,
        compression=Compression.NONE,
        max_request_size=max_request_size,
        delivery_timeout_ms=1000,
        retry_backoff=ExponentialBackoff(100, 1000, jitter=0),
        guarantee_order=guarantee_order,
        idempotence=idem,
        signals=heard.signals,
        clock=clock,
    )
    return acc, heard.woken, heard.requested


def send(
    acc: Accumulator, value: bytes, partition: int = -1, key: bytes | None = None
) -> DeliveryFuture:
    fut = DeliveryFuture("t", 1)
    assert acc.pool.try_reserve(len(value) + 30)
    acc.append("t", partition, key, value, None, 1, len(value) + 30, fut)
    return fut


def values(batch_bytes: bytes) -> list[bytes | None]:
    return [r.value for b in iter_batches(batch_bytes) for r in b.records()]


def test_records_wait_for_metadata_then_keep_send_order() -> None:
    clock = Clock()
    acc, woken, requested = make(clock)
    futs = [send(acc, b"v%d" % i, partition=0) for i in range(5)]
    assert requested == ["t"]  # one metadata request for the topic, not one per record
    assert acc.drain(1, clock.now) == ([], None)
    acc.update_metadata(meta())
    assert 1 in woken
    clock.now += 0.006  # linger
    batches, _ = acc.drain(1, clock.now)
    assert len(batches) == 1
    assert values(batches[0].close()) == [b"v%d" % i for i in range(5)]
    acc.complete(batches[0], 100, -1)
    assert [f.result().offset for f in futs] == [100, 101, 102, 103, 104]
    assert acc.pool.available == acc.pool.total


def test_fast_path_after_metadata_and_no_overtaking() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta())
    send(acc, b"a", partition=1)
    assert acc.topics["t"].pending == deque_empty()
    batch = acc.topics["t"].partitions[1].batches[0]
    assert batch.record_count == 1


def deque_empty() -> object:
    from collections import deque

    return deque()


def test_linger_and_full_batches() -> None:
    clock = Clock()
    acc, _, _ = make(clock, batch_size=200)
    acc.update_metadata(meta())
    send(acc, b"x" * 50, partition=0)
    batches, next_at = acc.drain(1, clock.now)
    # Ready 1 ms before the 5 ms linger is up: timers fire up to 1 ms late (epoll).
    assert batches == [] and next_at == pytest.approx(clock.now + 0.004)
    for _ in range(5):  # overflows the 200-byte batch: the first is now ready
        send(acc, b"x" * 50, partition=0)
    batches, _ = acc.drain(1, clock.now)
    # one batch per partition per drain, the oldest, full one
    assert len(batches) == 1 and batches[0].record_count == 2
    left = acc.topics["t"].partitions[0].batches
    assert len(left) == 2 and sum(b.record_count for b in left) == 4


@pytest.mark.parametrize(("linger_ms", "ready_after"), [(5, 0.004), (1.5, 0.00075), (0, 0.0)])
def test_a_lingering_batch_is_ready_a_timer_tick_before_its_deadline(
    linger_ms: float, ready_after: float
) -> None:
    # linger is an upper bound on the wait and the sender's wake-up may come up to 1 ms
    # after the time it asked for (epoll rounds up to whole ms): ready 1 ms early -- at
    # most half the linger early, so a short linger still batches.
    clock = Clock()
    acc, _, _ = make(clock, linger_ms=linger_ms)
    acc.update_metadata(meta())
    send(acc, b"x", partition=0)
    created = clock.now
    batches, next_at = acc.drain(1, clock.now)
    if ready_after == 0.0:
        assert len(batches) == 1
        return
    assert batches == [] and next_at == pytest.approx(created + ready_after)
    clock.now = created + ready_after - 1e-6
    assert acc.drain(1, clock.now)[0] == []
    clock.now = created + ready_after
    assert len(acc.drain(1, clock.now)[0]) == 1


def test_lingering_batches_ride_along_once_the_node_is_ready() -> None:
    # Java's drain: linger decides when a node sends; then every partition's head batch
    # goes (a retry still waits for its backoff).
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(partitions=3))
    send(acc, b"old", partition=0)
    clock.now += 0.003
    send(acc, b"young", partition=1)
    assert acc.drain(1, clock.now)[0] == []  # nothing is near its 5 ms linger yet
    clock.now += 0.002
    batches, _ = acc.drain(1, clock.now)
    assert sorted(b.partition for b in batches) == [0, 1]


def test_drain_one_batch_per_partition_rotating_and_size_bound() -> None:
    clock = Clock()
    acc, _, _ = make(clock, batch_size=100, max_request_size=250)
    acc.update_metadata(meta(partitions=3))
    for p in range(3):
        for _ in range(3):
            send(acc, b"y" * 60, partition=p)
    clock.now += 1
    first, _ = acc.drain(1, clock.now)
    # each batch ~ 61 + 70 bytes: only one fits in 250 after the first? two fit.
    assert len({b.partition for b in first}) == len(first) >= 1
    total = sum(len(b.close()) for b in first)
    assert total <= 250 or len(first) == 1
    second, _ = acc.drain(1, clock.now)
    # the rotating index starts after the partitions served first
    assert second and second[0].partition != first[0].partition


def test_single_oversize_batch_goes_alone() -> None:
    clock = Clock()
    acc, _, _ = make(clock, batch_size=10000, max_request_size=100)
    acc.update_metadata(meta(partitions=1))
    send(acc, b"z" * 500, partition=0)
    clock.now += 1
    batches, _ = acc.drain(1, clock.now)
    assert len(batches) == 1


def test_muting_until_done_and_unmute_wakes() -> None:
    clock = Clock()
    acc, woken, _ = make(clock, guarantee_order=True)
    acc.update_metadata(meta(partitions=1))
    send(acc, b"1", partition=0)
    clock.now += 1
    (b1,), _ = acc.drain(1, clock.now)
    send(acc, b"2", partition=0)
    clock.now += 1
    assert acc.drain(1, clock.now)[0] == []  # muted while b1 is in flight
    woken.clear()
    acc.requeue(b1, clock.now)  # e.g. connection error: back at the head, then unmuted
    assert woken == [1]
    clock.now += 10
    (again,), _ = acc.drain(1, clock.now)
    assert again is b1  # the retry goes before the newer batch
    acc.complete(b1, 0, -1)
    (b2,), _ = acc.drain(1, clock.now)
    assert values(b2.close()) == [b"2"]


def test_retry_waits_for_backoff() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(partitions=1))
    send(acc, b"1", partition=0)
    clock.now += 1
    (b1,), _ = acc.drain(1, clock.now)
    acc.requeue(b1, clock.now)
    batches, next_at = acc.drain(1, clock.now)
    assert batches == [] and next_at == pytest.approx(clock.now + 0.1)
    clock.now += 0.1
    assert acc.drain(1, clock.now)[0] == [b1]


def test_pending_topic_fails_alone_at_delivery_timeout() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(topic="other"))
    f = send(acc, b"lost")
    clock.now += 0.999
    acc.expire(clock.now)
    assert not f.done()
    clock.now += 0.002
    acc.expire(clock.now)
    assert isinstance(f.exception(), KafkaTimeoutError)
    assert acc.pool.available == acc.pool.total


def _pending_run(acc: Accumulator) -> tuple[BatchDelivery, QueuedRun]:
    run = BatchDelivery("t", 1, None, 3)
    assert acc.pool.try_reserve(3 * 40)
    values = [b"r0", b"r1", b"r2"]
    return run, QueuedRun(0, 1, None, values, [40] * 3, [run] * 3, run, [0, 1, 2])


def test_pending_run_waits_as_one_entry_in_send_order() -> None:
    # A bulk chunk behind the topic's metadata: one queue entry, placed in its turn (after
    # the send() record queued before it) when the metadata comes.
    clock = Clock()
    acc, _, requested = make(clock)
    first = send(acc, b"first", partition=0)
    run, entry = _pending_run(acc)
    acc.queue_run(acc.topics["t"], entry)
    assert requested == ["t"] and len(acc.topics["t"].pending) == 2
    assert acc.incomplete() == [first, run]  # flush waits for the run as a whole
    acc.update_metadata(meta())
    assert not acc.topics["t"].pending
    clock.now += 0.006
    (batch,), _ = acc.drain(1, clock.now)
    assert values(batch.close()) == [b"first", b"r0", b"r1", b"r2"]


def test_pending_run_fails_by_position_at_delivery_timeout() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(topic="other"))
    run, entry = _pending_run(acc)
    acc.queue_run(acc.new_topic("t"), entry)
    clock.now += 0.999
    acc.expire(clock.now)
    assert not run.done()
    clock.now += 0.002
    acc.expire(clock.now)
    assert run.done() and run.failed == 3
    assert sorted(run.errors()) == [0, 1, 2]
    assert all(isinstance(e, KafkaTimeoutError) for e in run.errors().values())
    assert acc.pool.available == acc.pool.total


def test_queued_batch_expires() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(partitions=1, leaders={0: -1}))  # no leader: cannot drain
    f = send(acc, b"a", partition=0)
    clock.now += 2
    acc.expire(clock.now)
    assert isinstance(f.exception(), KafkaTimeoutError)


def test_bad_partition_fails_that_record_only() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(partitions=2))
    bad = send(acc, b"a", partition=7)
    good = send(acc, b"b", partition=1)
    assert isinstance(bad.exception(), UnknownTopicOrPartitionError)
    assert not good.done()


def test_keyed_records_use_murmur2() -> None:
    clock = Clock()
    acc, _, _ = make(clock)
    acc.update_metadata(meta(partitions=6))
    send(acc, b"v", key=b"21")
    # (murmur2("21") & 0x7fffffff) % 6
    assert acc.topics["t"].partitions[(1173551340 % 6)].batches


def test_idempotent_sequences_and_ordered_retry() -> None:
    clock = Clock()
    resets: list[int] = []
    idem = IdempotenceState(on_reset=lambda: resets.append(1))
    acc, _, _ = make(clock, batch_size=80, idem=idem)
    acc.update_metadata(meta(partitions=1))
    for i in range(9):
        send(acc, b"r%02d" % i + b"." * 20, partition=0)
    clock.now += 1
    assert acc.drain(1, clock.now)[0] == []  # no producer id yet
    idem.set_producer(7, 0)
    b0 = acc.drain(1, clock.now)[0][0]
    n0 = b0.record_count
    # The partition's first batch of this producer id goes alone (a broker with no state
    # for the id would take a later batch first if this one failed): nothing until it is in.
    assert acc.drain(1, clock.now)[0] == []
    acc.complete(b0, 0, -1)
    b1 = acc.drain(1, clock.now)[0][0]
    b2 = acc.drain(1, clock.now)[0][0]
    assert b1.base_sequence == n0
    assert b2.base_sequence == n0 + b1.record_count
    hdr = next(iter_batches(b2.close()))
    assert (hdr.producer_id, hdr.producer_epoch, hdr.base_sequence) == (7, 0, b2.base_sequence)
    # b2 fails first (e.g. OOOSN because b1 is still in flight), then b1 fails
    acc.requeue(b2, clock.now)
    acc.requeue(b1, clock.now)
    pq = acc.topics["t"].partitions[0]
    assert list(pq.batches)[:2] == [b1, b2]  # sequence order
    clock.now += 10
    (first,), _ = acc.drain(1, clock.now)
    assert first is b1 and first.base_sequence == n0  # sequence kept
    assert acc.drain(1, clock.now)[0] == []  # b2 is not the lowest in flight: waits
    acc.complete(b1, 0, -1)
    assert acc.drain(1, clock.now)[0] == [b2]
    assert resets == []
    # a sequenced batch failing for good leaves a hole: reset requested, draining stops
    acc.fail(b2, RuntimeError("x"))
    assert resets == [1] and not idem.ready
    acc.reset_sequences()
    idem.set_producer(8, 0)
    nxt = acc.drain(1, clock.now)[0][0]
    assert nxt.base_sequence == 0
    assert next(iter_batches(nxt.close())).producer_id == 8


def test_new_batches_wait_for_the_old_leaders_answer_after_a_leader_move() -> None:
    """A batch still unresolved at the old leader holds back new batches to the new one:
    sent meanwhile and accepted in sequence there (the old leader had replicated the first
    one), they pushed it out of the five batches the broker remembers, and its retry was
    refused with OUT_OF_ORDER_SEQUENCE_NUMBER ("seq 0, broker at 307") until it failed."""
    clock = Clock()
    idem = IdempotenceState()
    acc, woken, _ = make(clock, batch_size=80, idem=idem)
    acc.update_metadata(meta(partitions=1))
    for i in range(5):
        send(acc, b"r%02d" % i + b"." * 20, partition=0)
    idem.set_producer(7, 0)
    clock.now += 1
    (b0,), _ = acc.drain(1, clock.now)
    acc.complete(b0, 0, -1)  # the partition knows producer 7: batches may pipeline
    (b1,), _ = acc.drain(1, clock.now)
    acc.update_metadata(meta(partitions=1, leaders={0: 2}))  # the leader moved to broker 2
    assert acc.drain(2, clock.now)[0] == []  # b1's answer from broker 1 is still due
    # It fails (the old leader's NOT_LEADER, or its connection timing out): the retry goes
    # to the new leader first, and new batches may follow it there.
    woken.clear()
    acc.requeue(b1, clock.now)
    assert woken == [2]
    clock.now += 10
    assert acc.drain(2, clock.now)[0] == [b1]
    (b2,), _ = acc.drain(2, clock.now)
    assert b2.base_sequence == b1.base_sequence + b1.record_count
    # Same leader: up to five unresolved batches pipeline as before.
    acc.complete(b1, 0, -1)
    acc.complete(b2, b1.record_count, -1)
    assert resets_free(idem)


def resets_free(idem: IdempotenceState) -> bool:
    return idem.ready and idem.resets == 0


def test_flush_makes_batches_ready() -> None:
    clock = Clock()
    acc, _, _ = make(clock, linger_ms=10_000)
    acc.update_metadata(meta(partitions=1))
    f = send(acc, b"a", partition=0)
    assert acc.drain(1, clock.now)[0] == []
    assert acc.incomplete() == [f]
    acc.flushing += 1
    assert len(acc.drain(1, clock.now)[0]) == 1


def test_in_flight_batch_expires_and_late_answer_is_ignored() -> None:
    clock = Clock()
    acc, _, _ = make(clock, guarantee_order=True)
    acc.update_metadata(meta(partitions=1))
    f = send(acc, b"a", partition=0)
    clock.now += 0.01
    (b,), _ = acc.drain(1, clock.now)
    assert acc.incomplete() == [f]  # flush/close wait for in-flight batches too
    clock.now += 1.0
    acc.expire(clock.now)
    assert isinstance(f.exception(), KafkaTimeoutError)
    assert not acc.flight and not acc.topics["t"].partitions[0].muted
    acc.requeue(b, clock.now)  # the late connection error: nothing comes back
    acc.complete(b, 5, -1)  # or a late success: the outcome stays
    assert not acc.topics["t"].partitions[0].batches
    assert isinstance(f.exception(), KafkaTimeoutError)
    assert acc.pool.available == acc.pool.total


def test_null_keys_stick_to_one_partition_until_its_batch_is_full() -> None:
    clock = Clock()
    acc, _, _ = make(clock, batch_size=500)
    acc.update_metadata(meta(partitions=4))
    for _ in range(40):
        send(acc, b"n" * 40)
    t = acc.topics["t"]
    used = [pq for pq in t.partitions if pq.batches]
    # ~10 records of ~48 bytes fill a 500-byte batch: every batch but the last is full and
    # the partition changes exactly when a batch fills up
    full = [b for pq in used for b in pq.batches if b.data is not None]
    assert len(full) >= 3
    assert all(b.record_count >= 9 for b in full)
    counts = [b.record_count for pq in used for b in pq.batches]
    assert sum(counts) == 40


def test_topic_with_fatal_metadata_error_fails_records() -> None:
    from aiokafka_ng.errors import TopicAuthorizationFailedError

    clock = Clock()
    acc, _, _ = make(clock)
    first = send(acc, b"a")  # waits for metadata
    waiting, waiting_entry = _pending_run(acc)
    acc.queue_run(acc.topics["t"], waiting_entry)
    denied = ClusterMetadata(
        topics=MappingProxyType({"t": TopicMetadata("t", error=TopicAuthorizationFailedError)})
    )
    acc.update_metadata(denied)
    assert isinstance(first.exception(), TopicAuthorizationFailedError)
    assert waiting.failed == 3 and isinstance(waiting.exception(), TopicAuthorizationFailedError)
    later = send(acc, b"b")  # the known fatal error fails it at once, not at the timeout
    assert isinstance(later.exception(), TopicAuthorizationFailedError)
    run, entry = _pending_run(acc)  # a bulk chunk likewise, every record by position
    acc.queue_run(acc.topics["t"], entry)
    assert run.failed == 3 and sorted(run.errors()) == [0, 1, 2]
    assert isinstance(run.exception(), TopicAuthorizationFailedError)
    assert acc.pool.available == acc.pool.total


def test_compression_ratio_estimate_fills_batches_to_compressed_size() -> None:
    clock = Clock()
    acc = Accumulator(
        pool=MemoryPool(1 << 30),
        batch_size=4096,
        linger_ms=5,
        compression=Compression.LZ4,
        max_request_size=1 << 20,
        delivery_timeout_ms=1000,
        retry_backoff=ExponentialBackoff(100, 1000, jitter=0),
        guarantee_order=False,
        idempotence=None,
        clock=clock,
    )
    acc.update_metadata(meta(partitions=1))
    value = b"abcd" * 50  # compresses very well
    for _ in range(6000):
        f = DeliveryFuture("t", 1)
        assert acc.pool.try_reserve(300)
        acc.append("t", 0, None, value, None, 1, 300, f)
    batches = list(acc.topics["t"].partitions[0].batches)
    first, late = batches[0], batches[-2]
    assert late.record_count > 2 * first.record_count  # learned the topic compresses well
    for b in batches[:-1]:
        assert len(b.close()) <= 4096 * 1.1  # still about batch_size on the wire
    assert 0 < acc._ratios["t"] < 0.9
