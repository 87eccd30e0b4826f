"""Senders, the producer's wake-up channel: what each event does, on a cluster that is never
started (no I/O) -- senders made lazily and only while attached, send()'s yield every
``_WAKES_PER_YIELD`` batch wake-ups, metadata asked of the cluster, a request's end told to
the producer id's owner, every sender woken."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster, Supervisor
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.producer.accumulator import Accumulator
from aiokafka_ng.producer.senders import _WAKES_PER_YIELD, Senders
from tests.producer.test_accumulator import Clock, make

pytestmark = pytest.mark.anyio


class Idle:
    """Stands in for the producer id's owner: counts ``on_idle``."""

    def __init__(self) -> None:
        self.calls = 0

    def on_idle(self) -> None:
        self.calls += 1


def parts(ids: Any = None) -> tuple[Senders, Accumulator, Cluster]:
    config = ProducerConfig(bootstrap_servers="127.0.0.1:9092")
    senders = Senders(config, ids)
    acc, _, _ = make(Clock())  # what the senders drain (nothing: no metadata)
    # The producer's own kind of cluster, never entered: with nothing to drain the senders
    # never connect, and what they ask of it shows in its statistics.
    return senders, acc, Cluster(config.cluster_config())


def crashed(exc: Exception) -> None:
    raise AssertionError(f"a sender crashed: {exc!r}")


async def test_senders_are_made_at_a_nodes_first_wakeup_only_while_attached() -> None:
    senders, acc, cluster = parts()
    senders.batch_ready(1)  # not started yet: the batch waits in the accumulator
    assert senders.by_node == {}
    async with anyio.create_task_group() as tg:
        senders.attach(cluster, acc, Supervisor(tg, crashed))
        senders.batch_ready(1)
        first = senders.by_node[1]
        senders.batch_ready(1)
        senders.batch_ready(2)
        assert senders.by_node == {1: first, 2: senders.by_node[2]}  # one per node
        senders.detach()  # closed: nothing new, the made ones stay (statistics)
        senders.batch_ready(3)
        assert sorted(senders.by_node) == [1, 2]
        tg.cancel_scope.cancel()


async def test_every_sender_is_woken_for_memory_and_for_wake_all() -> None:
    senders, acc, cluster = parts()
    async with anyio.create_task_group() as tg:
        senders.attach(cluster, acc, Supervisor(tg, crashed))
        senders.batch_ready(1)
        senders.batch_ready(2)
        await anyio.wait_all_tasks_blocked()  # both senders wait for their next wake-up
        for wake in (senders.memory_wanted, senders.wake_all):
            events = [s._event for s in senders.by_node.values()]
            assert not any(e.is_set() for e in events)
            wake()
            assert all(e.is_set() for e in events)
            await anyio.wait_all_tasks_blocked()  # they looked, found nothing, wait again
        tg.cancel_scope.cancel()


def test_send_yields_after_every_few_batch_wakeups() -> None:
    senders, _, _ = parts()
    seen = []
    for _ in range(3 * _WAKES_PER_YIELD):
        senders.batch_ready(1)  # counts whether or not a sender exists
        seen.append(senders.yield_due)
        senders.yield_due = False  # what send() does when it yields
    assert seen == ([False] * (_WAKES_PER_YIELD - 1) + [True]) * 3


def test_metadata_is_asked_of_the_cluster_once_attached() -> None:
    senders, acc, cluster = parts()
    senders.metadata_needed("a")  # no cluster yet: nothing to ask
    senders.attach(cluster, acc, None)  # type: ignore[arg-type]  # no sender is made here
    senders.metadata_needed("b")
    assert cluster.statistics().tracked_topics == ("b",)


def test_a_requests_end_is_told_to_the_producer_id_owner() -> None:
    idle = Idle()
    senders, _, _ = parts(idle)
    senders.request_ended()
    senders.request_ended()
    assert idle.calls == 2
    parts(None)[0].request_ended()  # without idempotence nobody listens
