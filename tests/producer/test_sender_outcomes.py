"""What an answer does to a request's batches: ``ProducerEngine.settle`` (``producer/settle.py``'s
rules carried out by ``ProducerEngine.apply``), on canned Produce responses -- what a sender
hands the engine.

Tansu cannot show leader moves or sequence gaps, so the error paths are driven here with
the exact response objects a broker would send. The engine's metadata signals reach a
cluster of the producer's own kind (:class:`~aiokafka_ng.cluster.Cluster`), as the producer
routes them: never started where the outcome leaves it alone, on a FakeKafka where what the
answer does to it is the point (a leader hint).
"""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

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
from aiokafka_ng.producer.batch import ProducerBatch
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.producer.signals import Signals
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
    idempotent: bool = False, retries: int = 10, cluster: Cluster | None = None
) -> tuple[ProducerEngine, Cluster, Clock]:
    """An engine on its own clock, with partitions 0-1 of "t" led by node 1; its metadata
    signals reach ``cluster`` as a producer routes them. Idempotent: producer id 5."""
    clock = Clock()
    if cluster is None:
        cluster = Cluster(ProducerConfig(bootstrap_servers="127.0.0.1:9092").cluster_config())
    config = ProducerConfig(
        bootstrap_servers="127.0.0.1:9092",
        batch_size=1000,
        linger_ms=0,
        delivery_timeout_ms=10_000,
        request_timeout_ms=1000,
        retries=retries,
        enable_idempotence=idempotent,
    )
    engine = ProducerEngine(
        config,
        signals=Signals(
            leader_moved=cluster.update_leader,
            need_metadata=lambda topic: cluster.request_update([topic]),
        ),
        clock=clock,
    )
    parts = {p: PartitionMetadata(p, leader=1) for p in range(2)}
    engine.update_metadata(
        ClusterMetadata(
            brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
            topics=MappingProxyType({"t": TopicMetadata("t", partitions=MappingProxyType(parts))}),
        )
    )
    if idempotent:
        engine.new_producer_id(5, 0)
    return engine, cluster, clock


def batch_for(
    engine: ProducerEngine, clock: Clock, partition: int, n: int = 3
) -> tuple[ProducerBatch, list[DeliveryFuture]]:
    acc = engine.acc
    futs = []
    for i in range(n):
        f = DeliveryFuture("t", 5)
        assert engine.pool.try_reserve(10)
        acc.append("t", partition, None, b"%d" % i, None, 5, 10, f)
        futs.append(f)
    clock.now += 1
    batches, _ = engine.drain(1, clock.now)
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
    engine, _, clock = setup()
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], response(0, 0, 40, log_append_time_ms=777, log_start_offset=12))
    assert [f.result().offset for f in futs] == [40, 41, 42]
    assert futs[0].result().timestamp == 777
    assert futs[0].result().timestamp_type == 1  # LogAppendTime
    assert [f.result().log_start_offset for f in futs] == [12, 12, 12]
    assert engine.pool.available == engine.pool.total


@pytest.mark.anyio
async def test_not_leader_uses_kip951_hint_and_requeues() -> None:
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", partitions=2)
        config = ProducerConfig(**kafka.client_config())
        async with Cluster(config.cluster_config()) as cluster:
            await cluster.refresh(["t"])
            assert cluster.metadata.topics["t"].partitions[1].leader_epoch < 9
            engine, _, clock = setup(cluster=cluster)
            b, futs = batch_for(engine, clock, 1)
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
            engine.settle([b], resp)
            # The hint is in the cluster's metadata at once, endpoint and all (node 3 and
            # epoch 9 come from nowhere else) ...
            moved = cluster.metadata.topics["t"].partitions[1]
            assert (moved.leader, moved.leader_epoch) == (3, 9)
            assert cluster.metadata.brokers[3] == BrokerMetadata(3, "127.0.0.1", 3, None)
            # ... and a refresh is asked for: the cluster sends Metadata.
            await kafka.wait_until(lambda: kafka.requests()[3] > metadata_asked)
            assert not futs[0].done()
            pq = engine.acc.topics["t"].partitions[1]
            assert pq.batches[0] is b and b.attempts == 1


def test_connection_error_requeues_every_batch_at_head() -> None:
    engine, _, clock = setup()
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], None, KafkaConnectionError("cut"))
    assert engine.acc.topics["t"].partitions[0].batches[0] is b
    assert not futs[0].done()


def test_fatal_error_fails_batch() -> None:
    engine, _, clock = setup()
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], response(0, 29))  # TOPIC_AUTHORIZATION_FAILED
    assert all(isinstance(f.exception(), TopicAuthorizationFailedError) for f in futs)
    assert engine.pool.available == engine.pool.total


def test_retriable_error_after_delivery_timeout_fails_with_timeout() -> None:
    engine, _, clock = setup()
    b, futs = batch_for(engine, clock, 0)
    clock.now += 11
    engine.settle([b], None, KafkaConnectionError("cut"))
    assert isinstance(futs[0].exception(), KafkaTimeoutError)


def test_missing_partition_in_response_is_retried() -> None:
    engine, _, clock = setup()
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], ProduceResponse(responses=[]))
    assert not futs[0].done() and b.attempts == 1


def test_duplicate_sequence_counts_as_delivered() -> None:
    engine, _, clock = setup(idempotent=True)
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], response(0, 46, -1))  # Tansu: base offset -1
    assert all(f.exception() is None for f in futs)
    assert futs[0].result().offset == -1


def test_out_of_order_behind_a_failed_batch_just_retries() -> None:
    engine, _, clock = setup(idempotent=True)
    idem = engine.idem
    assert idem is not None
    # The partition has written a batch of this producer id: later ones pipeline.
    b0, _ = batch_for(engine, clock, 0)
    engine.settle([b0], response(0, 0))
    b1, _ = batch_for(engine, clock, 0)
    b2, _ = batch_for(engine, clock, 0)
    # b1 lost on a cut, b2 reached the broker first -> OOOSN for b2: not a real gap
    engine.settle([b1], None, KafkaConnectionError("cut"))
    engine.settle([b2], response(0, 45))
    assert idem.ready and idem.resets == 0
    pq = engine.acc.topics["t"].partitions[0]
    assert list(pq.batches) == [b1, b2]


def test_out_of_order_for_next_sequence_resets_producer_id() -> None:
    engine, _, clock = setup(idempotent=True)
    idem = engine.idem
    assert idem is not None
    b1, futs = batch_for(engine, clock, 0)
    engine.settle([b1], response(0, 45))  # b1 IS the next expected: real gap
    assert not idem.ready and idem.resets == 1
    assert not futs[0].done()  # retried after the reset, not failed
    engine.new_producer_id(6, 0)
    (again,), _ = engine.drain(1, clock.now + 10)
    assert again is b1 and again.base_sequence == 0


@pytest.mark.parametrize("code", [59, 47, 90])  # UNKNOWN_PRODUCER_ID, INVALID_EPOCH, FENCED
def test_lost_producer_state_resets(code: int) -> None:
    engine, _, clock = setup(idempotent=True)
    idem = engine.idem
    assert idem is not None
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], response(0, code))
    assert idem.resets == 1 and not futs[0].done()


def test_message_too_large_splits_batch_keeping_order() -> None:
    engine, _, clock = setup()
    b, futs = batch_for(engine, clock, 0, n=5)
    engine.settle([b], response(0, 10))  # MESSAGE_TOO_LARGE
    pq = engine.acc.topics["t"].partitions[0]
    assert [len(x.futures) for x in pq.batches] == [2, 3]
    assert not any(f.done() for f in futs)
    first, _ = engine.drain(1, clock.now + 1)
    engine.settle(first, response(0, 0, 100))
    second, _ = engine.drain(1, clock.now + 1)
    engine.settle(second, response(0, 0, 102))
    assert [f.result().offset for f in futs] == [100, 101, 102, 103, 104]
    assert engine.pool.available == engine.pool.total
    # a single record that is too large fails
    b1, f1 = batch_for(engine, clock, 1, n=1)
    engine.settle([b1], response(1, 10))
    assert f1[0].exception() is not None


def test_retries_exhausted_fails_with_last_error() -> None:
    engine, _, clock = setup(retries=1)
    b, futs = batch_for(engine, clock, 0)
    engine.settle([b], None, KafkaConnectionError("cut"))
    assert not futs[0].done() and b.attempts == 1
    (again,), _ = engine.drain(1, clock.now + 10)
    engine.settle([again], None, KafkaConnectionError("cut again"))
    assert isinstance(futs[0].exception(), KafkaConnectionError)


def test_batch_delivery_knows_each_record_through_a_split_and_a_failure() -> None:
    # A run's records share batches with a send() record; one batch is split (Tansu never
    # answers MESSAGE_TOO_LARGE), another fails for good. Each record of the run still gets
    # its own offset or error, by position.
    from aiokafka_ng.producer.batch import QueuedRun
    from aiokafka_ng.producer.future import BatchDelivery

    engine, _, clock = setup()
    run = BatchDelivery("t", 5, None, 6)
    assert engine.try_reserve(70)

    def add_run(partition: int, values: list[bytes], positions: list[int]) -> None:
        # "t" is known to the metadata: placed at once.
        chunk = QueuedRun(partition, 5, None, values, [10, 10], [run, run], run, positions)
        engine.add_run("t", chunk)

    add_run(0, [b"a", b"b"], [0, 1])
    single = DeliveryFuture("t", 5)
    engine.add("t", 0, None, b"x", None, 5, 10, single)
    add_run(0, [b"c", b"d"], [2, 3])
    add_run(1, [b"e", b"f"], [5, 4])
    clock.now += 1
    batches, _ = engine.drain(1, clock.now)
    b0, b1 = sorted(batches, key=lambda b: b.partition)
    assert b0.positions == [0, 1, -1, 2, 3] and b1.positions == [5, 4]
    engine.settle([b0], response(0, 10))  # MESSAGE_TOO_LARGE: split 2 + 3
    engine.settle([b1], response(1, 29))  # TOPIC_AUTHORIZATION_FAILED: fatal
    assert not run.done() and run.failed == 2
    first, _ = engine.drain(1, clock.now + 1)
    engine.settle(first, response(0, 0, 100))  # a, b: this run's records only
    second, _ = engine.drain(1, clock.now + 1)
    engine.settle(second, response(0, 0, 102))  # x, c, d: shared with send()
    assert run.done() and single.result().offset == 102
    assert [run.metadata(i).offset for i in range(4)] == [100, 101, 103, 104]
    assert sorted(run.errors()) == [4, 5]
    assert all(isinstance(e, TopicAuthorizationFailedError) for e in run.errors().values())
    assert isinstance(run.exception(), TopicAuthorizationFailedError)
    assert engine.pool.available == engine.pool.total
