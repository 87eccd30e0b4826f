"""Senders, the producer's I/O side: what each of the engine's signals does there -- senders
made lazily and only while the runtime runs and until closed, send()'s yield every
``_WAKES_PER_YIELD`` batch wake-ups, metadata asked of the cluster, every sender woken. On
a FakeKafka in memory; the engine has nothing to drain, so the senders never send."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager

import anyio
import pytest

from aiokafka_ng.cluster import ClientRuntime, Cluster
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.senders import _WAKES_PER_YIELD, Senders
from aiokafka_ng.testing import FakeKafka

pytestmark = pytest.mark.anyio


class Looks(ProducerEngine):
    """An engine that counts its senders' looks (one ``next_deadline`` per trip round a
    sender's loop): a woken sender looks once more."""

    __slots__ = ("looked", "looks")

    def __init__(self, config: ProducerConfig) -> None:
        super().__init__(config)
        self.looks = 0
        self.looked = anyio.Event()

    def next_deadline(self, node: int, now: float) -> float | None:
        self.looks += 1
        self.looked.set()
        return super().next_deadline(node, now)


def runtime_for(config: ProducerConfig) -> ClientRuntime:
    return ClientRuntime(
        "producer",
        client_id=config.client_id,
        bootstrap_servers=config.bootstrap_servers,
        started_twice="started twice",
    )


@asynccontextmanager
async def running() -> AsyncIterator[tuple[Callable[[], Senders], ClientRuntime, Looks]]:
    """A runtime started on a FakeKafka, its engine, and a maker of senders for both."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        config = ProducerConfig(**kafka.client_config())
        runtime = runtime_for(config)
        engine = Looks(config)
        await runtime.start(Cluster(config.cluster_config()))
        try:
            yield (lambda: Senders(engine, config, runtime)), runtime, engine
        finally:
            runtime.begin_close()
            await runtime.finish_close()


async def test_senders_are_made_at_a_nodes_first_wakeup_only_while_running() -> None:
    config = ProducerConfig(bootstrap_servers="127.0.0.1:9092")
    idle = Senders(ProducerEngine(config), config, runtime_for(config))
    idle.wake_node(1)  # not started: the batch waits in the engine
    assert idle.by_node == {}
    async with running() as (make, _, _):
        senders = make()
        senders.wake_node(1)
        first = senders.by_node[1]
        senders.wake_node(1)
        senders.node_due(2, 0.0)
        assert senders.by_node == {1: first, 2: senders.by_node[2]}  # one per node
        senders.close()  # closed: nothing new, the made ones stay (statistics)
        senders.wake_node(3)
        assert sorted(senders.by_node) == [1, 2]


async def test_wake_all_wakes_every_sender() -> None:
    async with running() as (make, _, engine):
        senders = make()
        senders.wake_node(1)
        senders.wake_node(2)
        await anyio.wait_all_tasks_blocked()  # both looked, found nothing, wait
        before = engine.looks
        assert before >= 2
        senders.wake_all()
        await anyio.wait_all_tasks_blocked()
        assert engine.looks == before + 2  # each looked once more


def test_send_yields_after_every_few_batch_wakeups() -> None:
    config = ProducerConfig(bootstrap_servers="127.0.0.1:9092")
    senders = Senders(ProducerEngine(config), config, runtime_for(config))
    seen = []
    for _ in range(3 * _WAKES_PER_YIELD):
        senders.wake_node(1)  # counts whether or not a sender exists
        seen.append(senders.yield_due)
        senders.yield_due = False  # what send() does when it yields
    assert seen == ([False] * (_WAKES_PER_YIELD - 1) + [True]) * 3


async def test_metadata_is_asked_of_the_cluster_once_started() -> None:
    config = ProducerConfig(bootstrap_servers="127.0.0.1:9092")
    Senders(ProducerEngine(config), config, runtime_for(config)).need_metadata("a")  # no cluster
    async with running() as (make, runtime, _):
        make().need_metadata("b")
        assert runtime.cluster is not None
        assert runtime.cluster.statistics().tracked_topics == ("b",)
