"""The producer id's one owner (``producer/producer_id.py``): a reset waits for the batches
in flight, a new id resets every sequence, the idempotent ask is retried whatever the
error, and both idempotent and transactional producers get their id through it.

The first tests drive :class:`ProducerIdOwner` with a scripted ``Ask`` and a real engine
(ProducerEngine), because the order they check (no InitProducerId while a batch is on the
wire) cannot be forced against a real broker without a race; the last ones run real
producers against the embedded broker.
"""

from __future__ import annotations

import logging
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
from aiokafka_ng.errors import ClusterAuthorizationFailedError, KafkaError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.batch import ProducerBatch
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.producer.producer_id import ProducerIdOwner
from aiokafka_ng.producer.signals import Signals
from aiokafka_ng.protocol.records import iter_batches
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

_LOG = logging.getLogger("tests.producer_id")


class Rig:
    """An owner over a real engine (its idempotence state and accumulator); the ask answers
    ``ids`` in turn and records the (id, epoch) it was asked with; the engine's signals
    reach the rig (an applied id wakes every sender: ``wake_all``) and the owner (a reset
    requested), as the producer routes them."""

    def __init__(self, ids: list[tuple[int, int]], failures: int = 0) -> None:
        config = ProducerConfig(
            bootstrap_servers="127.0.0.1:9092",
            batch_size=1000,
            linger_ms=0,
            delivery_timeout_ms=60000,
            retry_backoff_ms=1,
            retry_backoff_max_ms=5,
        )
        self.engine = ProducerEngine(
            config,
            signals=Signals(
                wake_all=self.wake_all,
                producer_id_wanted=lambda: self.owner.renewal_requested(),
            ),
            clock=lambda: 1000.0,
        )
        assert self.engine.idem is not None
        self.idem = self.engine.idem
        self.acc = self.engine.acc
        self.owner = ProducerIdOwner(self.engine, label="producer", log=_LOG)
        parts = {p: PartitionMetadata(partition=p, leader=1) for p in range(3)}
        self.engine.update_metadata(
            ClusterMetadata(
                brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
                topics=MappingProxyType(
                    {"t": TopicMetadata("t", partitions=MappingProxyType(parts))}
                ),
            )
        )
        self.applied = anyio.Event()
        self.ids = ids
        self.failures = failures
        self.asked: list[tuple[int, int]] = []

    async def ask(self, producer_id: int, epoch: int) -> tuple[int, int]:
        self.asked.append((producer_id, epoch))
        if self.failures:
            self.failures -= 1
            raise ClusterAuthorizationFailedError("not retriable by its class")
        return self.ids.pop(0)

    async def next_id(self) -> None:
        await self.applied.wait()
        self.applied = anyio.Event()

    def wake_all(self) -> None:  # the owner's wake-up channel: an id was applied
        self.applied.set()

    def send(self, partition: int) -> DeliveryFuture:
        fut = DeliveryFuture("t", 0)
        self.acc.append("t", partition, None, b"v", None, 0, 20, fut)
        return fut

    def drain(self) -> list[ProducerBatch]:
        batches, _ = self.engine.drain(1, 1000.0)
        return batches


async def test_a_reset_requested_while_batches_are_in_flight_waits_for_them() -> None:
    rig = Rig([(7, 0), (8, 0)])
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.owner.run, rig.ask, ExponentialBackoff(1, 5, jitter=0))
        await rig.next_id()
        assert (rig.idem.producer_id, rig.idem.epoch, rig.idem.ready) == (7, 0, True)
        for p in range(3):
            rig.send(p)
        b0, b1, b2 = rig.drain()
        assert [b.base_sequence for b in (b0, b1, b2)] == [0, 0, 0]
        rig.send(0)  # queued behind b0: it gets a sequence at its first drain
        # b1 fails for good holding a sequence: a hole, a reset is requested ...
        rig.acc.fail(b1, KafkaError("x"))
        assert not rig.idem.ready and rig.idem.resets == 1
        assert rig.drain() == []  # ... and nothing drains meanwhile
        # ... but b0 and b2 are still on the wire: no InitProducerId yet.
        await anyio.wait_all_tasks_blocked()
        assert rig.asked == [(-1, -1)]
        rig.acc.complete(b0, 0, -1)
        rig.engine.request_ended()  # what a sender does when a request ends
        await anyio.wait_all_tasks_blocked()
        assert rig.asked == [(-1, -1)]  # b2 is still in flight
        rig.acc.complete(b2, 0, -1)
        rig.engine.request_ended()
        await rig.next_id()
        assert rig.asked == [(-1, -1), (7, 0)]
        assert (rig.idem.producer_id, rig.idem.epoch, rig.idem.ready) == (8, 0, True)
        # Every partition starts again at 0 under the new id.
        (queued,) = rig.drain()
        assert queued.pq.partition == 0 and queued.base_sequence == 0
        header = next(iter_batches(queued.close()))
        assert (header.producer_id, header.base_sequence) == (8, 0)
        tg.cancel_scope.cancel()


async def test_the_idempotent_ask_is_retried_whatever_the_error() -> None:
    rig = Rig([(5, 1)], failures=2)
    seen: list[KafkaError] = []
    async with anyio.create_task_group() as tg:
        tg.start_soon(rig.owner.run, rig.ask, ExponentialBackoff(1, 5, jitter=0), seen.append)
        await rig.next_id()
        tg.cancel_scope.cancel()
    assert rig.asked == [(-1, -1)] * 3
    assert [type(e) for e in seen] == [ClusterAuthorizationFailedError] * 2
    assert (rig.idem.producer_id, rig.idem.epoch, rig.idem.ready) == (5, 1, True)


async def test_renew_raises_what_the_ask_raises_and_changes_nothing() -> None:
    # The transactional path judges errors itself: renew must not swallow or retry them.
    rig = Rig([], failures=1)
    rig.idem.set_producer(3, 4)
    with pytest.raises(ClusterAuthorizationFailedError):
        await rig.owner.renew(rig.ask)
    assert rig.asked == [(3, 4)]
    assert (rig.idem.producer_id, rig.idem.epoch) == (3, 4) and not rig.applied.is_set()


@pytest.fixture
def applied(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int, int]]:
    """Every id any producer takes, through the owner (label, producer id, epoch)."""
    calls: list[tuple[str, int, int]] = []
    original = ProducerIdOwner.apply

    def spy(self: ProducerIdOwner, producer_id: int, epoch: int, **kw: Any) -> None:
        calls.append((self.label, producer_id, epoch))
        original(self, producer_id, epoch, **kw)

    monkeypatch.setattr(ProducerIdOwner, "apply", spy)
    return calls


async def test_an_idempotent_producer_gets_its_id_through_the_owner(
    kafka_broker: Any, applied: list[tuple[str, int, int]]
) -> None:
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        await producer.send_and_wait(topic_name("pid"), b"v")
        pid = producer.statistics()["producer_id"]
        assert pid is not None and pid >= 0
    assert [(label, p) for label, p, _ in applied] == [("producer", pid)]


async def test_a_transactional_producer_gets_its_id_through_the_owner(
    kafka_broker: Any, applied: list[tuple[str, int, int]]
) -> None:
    tid = topic_name("tid")
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=tid
    ) as producer:
        assert producer._txn is not None
        idem = producer._txn.idem
        assert applied == [(f"transaction {tid}", idem.producer_id, idem.epoch)]
        async with producer.transaction():
            await producer.send(topic_name("txn"), b"v")
        # Whatever EndTxn did to the epoch (v2 moves it), the owner applied it.
        assert applied[-1] == (f"transaction {tid}", idem.producer_id, idem.epoch)
