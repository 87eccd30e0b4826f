"""The producer engine as a seam: built from a config alone, it tells the world what it needs
through the signals it was given (no attach, no patched callbacks), and the producer id's
owner waits on it for an empty flight. No producer, connection or event loop task here
beyond what a wait needs; the engine's clock is the test's."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.signals import Signals
from aiokafka_ng.producer.txn_idempotence import TransactionalIdempotence
from aiokafka_ng.protocol.messages.produce import (
    PartitionProduceResponse,
    ProduceResponse,
    TopicProduceResponse,
)
from aiokafka_ng.protocol.records import iter_batches

NOW = 1000.0


def config(**settings: Any) -> ProducerConfig:
    return ProducerConfig(bootstrap_servers="127.0.0.1:9092", linger_ms=0, **settings)


def metadata() -> ClusterMetadata:
    parts = {p: PartitionMetadata(p, leader=1) for p in range(2)}
    return ClusterMetadata(
        brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
        topics=MappingProxyType({"t": TopicMetadata("t", partitions=MappingProxyType(parts))}),
    )


def answer(code: int) -> ProduceResponse:
    part = PartitionProduceResponse(index=0, error_code=code, base_offset=7)
    return ProduceResponse(responses=[TopicProduceResponse(name="t", partition_responses=[part])])


def send(engine: ProducerEngine) -> DeliveryFuture:
    fut = DeliveryFuture("t", 1)
    assert engine.try_reserve(200)
    engine.add("t", 0, None, b"v", None, 1, 200, fut)
    return fut


def test_the_engine_is_built_from_the_config() -> None:
    plain = ProducerEngine(config(enable_idempotence=False))
    assert plain.idem is None and plain.max_produce_version == 11
    idempotent = ProducerEngine(config())
    assert type(idempotent.idem) is IdempotenceState and not idempotent.idem.ready
    txn = ProducerEngine(config(transactional_id="tid"))
    assert isinstance(txn.idem, TransactionalIdempotence)
    assert txn.idem.transactional_id == "tid"
    for engine in (plain, idempotent, txn):
        # One pool, the accumulator's, sized by buffer_memory.
        assert engine.acc.pool is engine.pool and engine.pool.total == 32 * 1024 * 1024


def test_a_lost_producer_state_asks_for_a_new_id_through_the_signal() -> None:
    heard: list[str] = []
    engine = ProducerEngine(
        config(),
        signals=Signals(
            producer_id_wanted=lambda: heard.append("id wanted"),
            wake_all=lambda: heard.append("wake all"),
            wake_node=lambda node: heard.append(f"wake {node}"),
        ),
        clock=lambda: NOW,
    )
    engine.update_metadata(metadata())
    engine.new_producer_id(5, 0)
    assert heard[-1] == "wake all"  # the senders drain under the new id
    fut = send(engine)
    (batch,), _ = engine.drain(1, NOW)
    heard.clear()
    engine.settle([batch], answer(59))  # UNKNOWN_PRODUCER_ID: the broker lost our state
    assert "id wanted" in heard and not fut.done()  # retried under a new id, not failed
    assert engine.drain(1, NOW + 10) == ([], None)  # nothing drains until then
    engine.new_producer_id(6, 0)
    (again,), _ = engine.drain(1, NOW + 10)
    header = next(iter_batches(again.close()))
    assert again is batch and (header.producer_id, header.base_sequence) == (6, 0)
    engine.settle([again], answer(0))
    assert fut.result().offset == 7
    assert engine.pool.available == engine.pool.total


@pytest.mark.anyio
async def test_the_wait_for_an_empty_flight_ends_with_the_request_that_empties_it() -> None:
    engine = ProducerEngine(config(), clock=lambda: NOW)
    engine.update_metadata(metadata())
    engine.new_producer_id(5, 0)
    await engine.wait_nothing_in_flight()  # nothing in flight: at once
    send(engine)
    (batch,), _ = engine.drain(1, NOW)
    done = anyio.Event()

    async def owner() -> None:
        await engine.wait_nothing_in_flight()
        done.set()

    async with anyio.create_task_group() as tg:
        tg.start_soon(owner)
        await anyio.wait_all_tasks_blocked()
        engine.request_ended()  # a request ended, but the batch is still in flight
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()
        engine.settle([batch], answer(0))  # settled: the flight is empty ...
        await anyio.wait_all_tasks_blocked()
        assert not done.is_set()  # ... looked at when its request ends
        engine.request_ended()
        await done.wait()
