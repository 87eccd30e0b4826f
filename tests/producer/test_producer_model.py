"""A model check of the ordering machinery: the producer engine (accumulator + idempotence +
response handling) against a simulated broker, with random pipelining, lost responses and
connection cuts.

The simulated broker keeps a log per partition and, for idempotent producers, the next
expected sequence per (producer id, partition): it appends a batch whose first sequence is
the expected one, answers DUPLICATE_SEQUENCE_NUMBER for an older one and
OUT_OF_ORDER_SEQUENCE_NUMBER for a newer one -- as Kafka and Tansu do. A connection cut
lets the broker process a random *prefix* of the requests on the wire (TCP keeps order) and
fails the rest of them, with their answers lost, as a connection error. There are two
nodes (connections); partition leadership moves between them at random while requests are
on the wire, which is where muting earns its keep (a partition must not be drained on the
new leader while its batch is in flight on the old one).

Checked at the end, for every partition: idempotent -> the log is exactly the send order
(0 lost, 0 duplicated, 0 reordered); max_in_flight=1 without idempotence -> nothing lost,
first occurrences in send order (a resent batch may appear twice, never out of order).
"""

from __future__ import annotations

import random
from types import MappingProxyType

import pytest

from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.producer.batch import ProducerBatch
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from aiokafka_ng.protocol.records import iter_batches

PARTITIONS = 3
NODES = (1, 2)


class Clock:
    now = 1000.0

    def __call__(self) -> float:
        return self.now


class Broker:
    def __init__(self) -> None:
        self.logs: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
        self.next_seq: dict[tuple[int, int], int] = {}

    def produce(self, batches: list[ProducerBatch]) -> ProduceResponse:
        parts = []
        for b in batches:
            assert b.data is not None
            (rb,) = list(iter_batches(b.data))
            values = [r.value or b"" for r in rb.records()]
            log = self.logs[b.partition]
            code, base = 0, len(log)
            if rb.producer_id >= 0:
                key = (rb.producer_id, b.partition)
                expected = self.next_seq.get(key, 0)
                if rb.base_sequence == expected:
                    self.next_seq[key] = expected + len(values)
                    log.extend(values)
                elif rb.base_sequence < expected:
                    code, base = 46, -1  # DUPLICATE_SEQUENCE_NUMBER (Tansu: offset -1)
                else:
                    code, base = 45, -1  # OUT_OF_ORDER_SEQUENCE_NUMBER
            else:
                log.extend(values)
            parts.append(
                TopicProduceResponse(
                    name="t",
                    partition_responses=[
                        PartitionProduceResponse(
                            index=b.partition, error_code=code, base_offset=base
                        )
                    ],
                )
            )
        return ProduceResponse(responses=parts)


def run_model(seed: int, idempotent: bool) -> tuple[dict[int, list[bytes]], dict[int, list[bytes]]]:
    rng = random.Random(seed)
    clock = Clock()
    batch_size = rng.choice([80, 200, 1000])
    linger_ms = rng.choice([0, 5])
    max_request_size = rng.choice([300, 1 << 20])
    config = ProducerConfig(
        bootstrap_servers="127.0.0.1:9092",
        buffer_memory=1 << 30,
        batch_size=batch_size,
        linger_ms=linger_ms,
        max_request_size=max_request_size,
        delivery_timeout_ms=10**9,
        retry_backoff_ms=10,
        retry_backoff_max_ms=100,
        retries=10**9,
        enable_idempotence=idempotent,
        max_in_flight_requests_per_connection=5 if idempotent else 1,
    )
    # The engine alone: the model is its I/O side -- it drains, carries requests to the
    # simulated broker and hands the answers (or the cuts) to the engine, as a sender does.
    engine = ProducerEngine(config, clock=clock)
    acc = engine.acc
    idem = engine.idem
    leaders = {p: 1 for p in range(PARTITIONS)}

    def publish() -> None:
        parts = {p: PartitionMetadata(p, leader=leaders[p]) for p in range(PARTITIONS)}
        engine.update_metadata(
            ClusterMetadata(
                brokers=MappingProxyType({n: BrokerMetadata(n, "127.0.0.1", n) for n in NODES}),
                topics=MappingProxyType(
                    {"t": TopicMetadata("t", partitions=MappingProxyType(parts))}
                ),
            )
        )

    publish()
    max_in_flight = config.max_in_flight_requests_per_connection
    broker = Broker()
    sent: dict[int, list[bytes]] = {p: [] for p in range(PARTITIONS)}
    futures: list[DeliveryFuture] = []
    # requests written per node's connection, oldest first
    wires: dict[int, list[list[ProducerBatch]]] = {n: [] for n in NODES}
    pid = 100

    def maybe_reset() -> None:
        nonlocal pid
        if idem is not None and not idem.ready and not acc.flight:
            pid += 1  # InitProducerId: a new producer id, sequences from 0
            engine.new_producer_id(pid, 0)

    if idem is not None:
        engine.new_producer_id(pid, 0)
    counter = 0
    steps = 400
    for step in range(steps * 3):
        producing = step < steps
        op = rng.random()
        if producing and op < 0.35:
            p = rng.randrange(PARTITIONS)
            for _ in range(rng.randint(1, 8)):
                value = b"%06d" % counter
                counter += 1
                fut = DeliveryFuture("t", 1)
                assert acc.pool.try_reserve(40)
                acc.append("t", p, None, value, None, 1, 40, fut)
                sent[p].append(value)
                futures.append(fut)
        elif op < 0.6:
            node = rng.choice(NODES)
            if len(wires[node]) < max_in_flight:
                batches, _ = engine.drain(node, clock.now)
                if batches:
                    wires[node].append(batches)
        elif op < 0.85:
            node = rng.choice(NODES)
            if wires[node]:
                batches = wires[node].pop(0)
                engine.settle(batches, broker.produce(batches))
        elif op < 0.88 and producing:
            # connection cut: a prefix of the wire was processed, every answer is lost
            node = rng.choice(NODES)
            wire = wires[node]
            processed = rng.randint(0, len(wire))
            for i, batches in enumerate(wire):
                if i < processed:
                    broker.produce(batches)
                for b in batches:
                    engine.settle([b], None, KafkaConnectionError("cut"))
            wire.clear()
        elif op < 0.9 and producing:
            # leadership moves (metadata update); requests already on the wire stay there
            p = rng.randrange(PARTITIONS)
            leaders[p] = 3 - leaders[p]
            publish()
        else:
            clock.now += rng.choice([0.001, 0.005, 0.05])
        maybe_reset()
    # answer what is on the wires, then drain everything without faults
    for node in NODES:
        while wires[node]:
            batches = wires[node].pop(0)
            engine.settle(batches, broker.produce(batches))
    for _ in range(100_000):
        if all(f.done() for f in futures):
            break
        clock.now += 0.2
        maybe_reset()
        for node in NODES:
            batches, _ = engine.drain(node, clock.now)
            if batches:
                engine.settle(batches, broker.produce(batches))
    assert all(f.done() for f in futures), "some records never completed"
    assert all(f.exception() is None for f in futures)
    assert acc.pool.available == acc.pool.total
    return sent, broker.logs


@pytest.mark.parametrize("seed", range(40))
def test_idempotent_model_exactly_once_in_order(seed: int) -> None:
    sent, logs = run_model(seed, idempotent=True)
    assert logs == sent


@pytest.mark.parametrize("seed", range(40))
def test_one_in_flight_model_no_loss_no_reorder(seed: int) -> None:
    sent, logs = run_model(seed, idempotent=False)
    for p in range(PARTITIONS):
        assert list(dict.fromkeys(logs[p])) == sent[p]
