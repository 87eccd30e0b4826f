"""NodeSender's response handling (``producer/settle.py``'s rules carried out by ``apply``), on
canned Produce responses.

Tansu cannot show leader moves or sequence gaps, so the error paths are driven here with
the exact response objects a broker would send. The sender's cluster is the producer's own
kind (:class:`~aiokafka_ng.cluster.Cluster`): never started where the outcome leaves it
alone, on a FakeKafka where what the sender does to it is the point (a leader hint).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import (
    KafkaConnectionError,
    KafkaTimeoutError,
    TopicAuthorizationFailedError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.accumulator import Accumulator
from aiokafka_ng.producer.batch import ProducerBatch
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.sender import NodeSender
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.messages.produce import (
    LeaderIdAndEpoch,
    NodeEndpoint,
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from aiokafka_ng.testing import FakeKafka


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


def setup(
    idem: IdempotenceState | None = None, retries: int = 10, cluster: Cluster | None = None
) -> tuple[Accumulator, NodeSender, Cluster, Clock]:
    clock = Clock()
    acc = Accumulator(
        pool=MemoryPool(1 << 20),
        batch_size=1000,
        linger_ms=0,
        compression=Compression.NONE,
        max_request_size=1 << 20,
        delivery_timeout_ms=10_000,
        retry_backoff=ExponentialBackoff(100, 1000, jitter=0),
        guarantee_order=False,
        idempotence=idem,
        clock=clock,
    )
    parts = {p: PartitionMetadata(p, leader=1) for p in range(2)}
    acc.update_metadata(
        ClusterMetadata(
            brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
            topics=MappingProxyType({"t": TopicMetadata("t", partitions=MappingProxyType(parts))}),
        )
    )
    if cluster is None:
        cluster = Cluster(ProducerConfig(bootstrap_servers="127.0.0.1:9092").cluster_config())
    sender = NodeSender(
        1,
        cluster=cluster,
        accumulator=acc,
        task_group=None,  # type: ignore[arg-type]
        acks=-1,
        request_timeout_ms=1000,
        max_in_flight=5,
        retries=retries,
    )
    return acc, sender, cluster, clock


def batch_for(
    acc: Accumulator, clock: Clock, partition: int, n: int = 3
) -> tuple[ProducerBatch, list[DeliveryFuture]]:
    futs = []
    for i in range(n):
        f = DeliveryFuture("t", 5)
        assert acc.pool.try_reserve(10)
        acc.append("t", partition, None, b"%d" % i, None, 5, 10, f)
        futs.append(f)
    clock.now += 1
    batches, _ = acc.drain(1, clock.now)
    assert len(batches) == 1
    return batches[0], futs


def response(partition: int, code: int, base_offset: int = 0, **kw: Any) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name="t",
                partition_responses=[
                    PartitionProduceResponse(
                        index=partition, error_code=code, base_offset=base_offset, **kw
                    )
                ],
            )
        ],
        node_endpoints=kw.pop("endpoints", []),
    )


def test_success_resolves_offsets_and_log_append_time() -> None:
    acc, sender, _, clock = setup()
    b, futs = batch_for(acc, clock, 0)
    sender.on_response(response(0, 0, 40, log_append_time_ms=777, log_start_offset=12), [b])
    assert [f.result().offset for f in futs] == [40, 41, 42]
    assert futs[0].result().timestamp == 777
    assert futs[0].result().timestamp_type == 1  # LogAppendTime
    assert [f.result().log_start_offset for f in futs] == [12, 12, 12]
    assert acc.pool.available == acc.pool.total


@pytest.mark.anyio
async def test_not_leader_uses_kip951_hint_and_requeues() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", partitions=2)
        config = ProducerConfig(**kafka.client_config())
        async with Cluster(config.cluster_config()) as cluster:
            await cluster.refresh(["t"])
            assert cluster.metadata.topics["t"].partitions[1].leader_epoch < 9
            acc, sender, _, clock = setup(cluster=cluster)
            b, futs = batch_for(acc, clock, 1)
            metadata_asked = kafka.requests()[3]  # Metadata
            resp = ProduceResponse(
                responses=[
                    TopicProduceResponse(
                        name="t",
                        partition_responses=[
                            PartitionProduceResponse(
                                index=1,
                                error_code=6,  # NOT_LEADER_OR_FOLLOWER
                                current_leader=LeaderIdAndEpoch(leader_id=3, leader_epoch=9),
                            )
                        ],
                    )
                ],
                # A broker the metadata does not know yet: only the hint's endpoint has it.
                node_endpoints=[NodeEndpoint(node_id=3, host="127.0.0.1", port=3)],
            )
            sender.on_response(resp, [b])
            # The hint is in the cluster's metadata at once, endpoint and all (node 3 and
            # epoch 9 come from nowhere else) ...
            moved = cluster.metadata.topics["t"].partitions[1]
            assert (moved.leader, moved.leader_epoch) == (3, 9)
            assert cluster.metadata.brokers[3] == BrokerMetadata(3, "127.0.0.1", 3, None)
            # ... and a refresh is asked for: the cluster sends Metadata.
            await kafka.wait_until(lambda: kafka.requests()[3] > metadata_asked)
            assert not futs[0].done()
            pq = acc.topics["t"].partitions[1]
            assert pq.batches[0] is b and b.attempts == 1


def test_connection_error_requeues_every_batch_at_head() -> None:
    acc, sender, _, clock = setup()
    b, futs = batch_for(acc, clock, 0)
    sender.on_failure([b], KafkaConnectionError("cut"))
    assert acc.topics["t"].partitions[0].batches[0] is b
    assert not futs[0].done()


def test_fatal_error_fails_batch() -> None:
    acc, sender, _, clock = setup()
    b, futs = batch_for(acc, clock, 0)
    sender.on_response(response(0, 29), [b])  # TOPIC_AUTHORIZATION_FAILED
    assert all(isinstance(f.exception(), TopicAuthorizationFailedError) for f in futs)
    assert acc.pool.available == acc.pool.total


def test_retriable_error_after_delivery_timeout_fails_with_timeout() -> None:
    acc, sender, _, clock = setup()
    b, futs = batch_for(acc, clock, 0)
    clock.now += 11
    sender.on_failure([b], KafkaConnectionError("cut"))
    assert isinstance(futs[0].exception(), KafkaTimeoutError)


def test_missing_partition_in_response_is_retried() -> None:
    acc, sender, _, clock = setup()
    b, futs = batch_for(acc, clock, 0)
    sender.on_response(ProduceResponse(responses=[]), [b])
    assert not futs[0].done() and b.attempts == 1


def _idem() -> IdempotenceState:
    idem = IdempotenceState()
    idem.set_producer(5, 0)
    return idem


def test_duplicate_sequence_counts_as_delivered() -> None:
    acc, sender, _, clock = setup(_idem())
    b, futs = batch_for(acc, clock, 0)
    sender.on_response(response(0, 46, -1), [b])  # Tansu: base offset -1
    assert all(f.exception() is None for f in futs)
    assert futs[0].result().offset == -1


def test_out_of_order_behind_a_failed_batch_just_retries() -> None:
    idem = _idem()
    acc, sender, _, clock = setup(idem)
    # The partition has written a batch of this producer id: later ones pipeline.
    b0, _ = batch_for(acc, clock, 0)
    sender.on_response(response(0, 0), [b0])
    b1, _ = batch_for(acc, clock, 0)
    b2, _ = batch_for(acc, clock, 0)
    # b1 lost on a cut, b2 reached the broker first -> OOOSN for b2: not a real gap
    sender.on_failure([b1], KafkaConnectionError("cut"))
    sender.on_response(response(0, 45), [b2])
    assert idem.ready and idem.resets == 0
    pq = acc.topics["t"].partitions[0]
    assert list(pq.batches) == [b1, b2]


def test_out_of_order_for_next_sequence_resets_producer_id() -> None:
    idem = _idem()
    acc, sender, _, clock = setup(idem)
    b1, futs = batch_for(acc, clock, 0)
    sender.on_response(response(0, 45), [b1])  # b1 IS the next expected: real gap
    assert not idem.ready and idem.resets == 1
    assert not futs[0].done()  # retried after the reset, not failed
    acc.reset_sequences()
    idem.set_producer(6, 0)
    (again,), _ = acc.drain(1, clock.now + 10)
    assert again is b1 and again.base_sequence == 0


@pytest.mark.parametrize("code", [59, 47, 90])  # UNKNOWN_PRODUCER_ID, INVALID_EPOCH, FENCED
def test_lost_producer_state_resets(code: int) -> None:
    idem = _idem()
    acc, sender, _, clock = setup(idem)
    b, futs = batch_for(acc, clock, 0)
    sender.on_response(response(0, code), [b])
    assert idem.resets == 1 and not futs[0].done()


def test_wake_sets_event() -> None:
    async def main() -> None:
        _, sender, _, _ = setup()
        sender._event = anyio.Event()
        sender.wake()
        assert sender._event.is_set()

    anyio.run(main)


def test_message_too_large_splits_batch_keeping_order() -> None:
    acc, sender, _, clock = setup()
    b, futs = batch_for(acc, clock, 0, n=5)
    sender.on_response(response(0, 10), [b])  # MESSAGE_TOO_LARGE
    pq = acc.topics["t"].partitions[0]
    assert [len(x.futures) for x in pq.batches] == [2, 3]
    assert not any(f.done() for f in futs)
    first, _ = acc.drain(1, clock.now + 1)
    sender.on_response(response(0, 0, 100), first)
    second, _ = acc.drain(1, clock.now + 1)
    sender.on_response(response(0, 0, 102), second)
    assert [f.result().offset for f in futs] == [100, 101, 102, 103, 104]
    assert acc.pool.available == acc.pool.total
    # a single record that is too large fails
    b1, f1 = batch_for(acc, clock, 1, n=1)
    sender.on_response(response(1, 10), [b1])
    assert f1[0].exception() is not None


def test_retries_exhausted_fails_with_last_error() -> None:
    acc, sender, _, clock = setup(retries=1)
    b, futs = batch_for(acc, clock, 0)
    sender.on_failure([b], KafkaConnectionError("cut"))
    assert not futs[0].done() and b.attempts == 1
    (again,), _ = acc.drain(1, clock.now + 10)
    sender.on_failure([again], KafkaConnectionError("cut again"))
    assert isinstance(futs[0].exception(), KafkaConnectionError)


def test_batch_delivery_knows_each_record_through_a_split_and_a_failure() -> None:
    # A run's records share batches with a send() record; one batch is split (Tansu never
    # answers MESSAGE_TOO_LARGE), another fails for good. Each record of the run still gets
    # its own offset or error, by position.
    from aiokafka_ng.producer.bulk import place_run
    from aiokafka_ng.producer.future import BatchDelivery

    acc, sender, _, clock = setup()
    t = acc.new_topic("t")  # known to the metadata: ready at once
    run = BatchDelivery("t", 5, None, 6)
    assert acc.pool.try_reserve(70)
    place_run(acc, t, 0, 5, None, [b"a", b"b"], [10, 10], [run, run], run, [0, 1])
    single = DeliveryFuture("t", 5)
    acc.append("t", 0, None, b"x", None, 5, 10, single)
    place_run(acc, t, 0, 5, None, [b"c", b"d"], [10, 10], [run, run], run, [2, 3])
    place_run(acc, t, 1, 5, None, [b"e", b"f"], [10, 10], [run, run], run, [5, 4])
    clock.now += 1
    batches, _ = acc.drain(1, clock.now)
    b0, b1 = sorted(batches, key=lambda b: b.partition)
    assert b0.positions == [0, 1, -1, 2, 3] and b1.positions == [5, 4]
    sender.on_response(response(0, 10), [b0])  # MESSAGE_TOO_LARGE: split 2 + 3
    sender.on_response(response(1, 29), [b1])  # TOPIC_AUTHORIZATION_FAILED: fatal
    assert not run.done() and run.failed == 2
    first, _ = acc.drain(1, clock.now + 1)
    sender.on_response(response(0, 0, 100), first)  # a, b: this run's records only
    second, _ = acc.drain(1, clock.now + 1)
    sender.on_response(response(0, 0, 102), second)  # x, c, d: shared with send()
    assert run.done() and single.result().offset == 102
    assert [run.metadata(i).offset for i in range(4)] == [100, 101, 103, 104]
    assert sorted(run.errors()) == [4, 5]
    assert all(isinstance(e, TopicAuthorizationFailedError) for e in run.errors().values())
    assert isinstance(run.exception(), TopicAuthorizationFailedError)
    assert acc.pool.available == acc.pool.total
