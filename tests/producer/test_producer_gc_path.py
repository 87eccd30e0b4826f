"""The per-record path and the cyclic collector (issue 36): a record in flight is one object
the collector tracks (its future), whatever callback waits on it; finished records are
freed by reference counting (no cycles); and keeping fewer objects changes nothing a
callback can see of ``contextvars``. Counts, not timings: each assertion fails on the
former layout (a (callback, context) tuple and a Context copy per callback: three objects
per record in flight), against the real broker."""

from __future__ import annotations

import asyncio
import contextvars
import gc
import uuid
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from aiokafka_ng.net.connection import Connection
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.protocol import speedups
from aiokafka_ng.testing import LocalBroker

pytestmark = pytest.mark.anyio
asyncio_only = pytest.mark.parametrize("anyio_backend", ["asyncio"])

N = 3000


def topic_name() -> str:
    return f"gc-{uuid.uuid4().hex[:10]}"


def _closed_connections(garbage: list[Any]) -> tuple[list[str], list[str]]:
    """Of the collector's garbage: the closed connections and transports in it, and the
    type names of what none of them reaches (the garbage that is not a closed connection's)."""
    roots = [o for o in garbage if isinstance(o, (Connection, asyncio.Transport))]
    assert all(o.is_closing() if isinstance(o, asyncio.Transport) else o.closed for o in roots)
    ids = {id(o) for o in garbage}
    seen = {id(o) for o in roots}
    todo = list(roots)
    while todo:
        for ref in gc.get_referents(todo.pop()):
            if id(ref) in ids and id(ref) not in seen:
                seen.add(id(ref))
                todo.append(ref)
    stray = sorted(type(o).__name__ for o in garbage if id(o) not in seen)
    return [repr(o) for o in roots], stray


@contextmanager
def collector_off() -> Iterator[None]:
    """No collection during the count (one would untrack what it finds untrackable)."""
    was = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was:
            gc.enable()


def tracked_types() -> Counter[type]:
    """How many objects of each type the collector tracks (counted, not compared by id:
    the id of an object freed meanwhile may be a new one's).

    Counted in a loop, not by ``Counter(iterable)``: that asks ``isinstance(iterable,
    Mapping)``, and the first such question about a generator in a process fills a
    negative cache in ``Mapping`` and in each of its subclasses (a set, two weakrefs and
    a callback per ABC: 86 objects in the pure pass of ``tools/pythons.py``, which imports
    every test module first), all made after the snapshot and so counted as the
    producer's."""
    counts: Counter[type] = Counter()
    for o in gc.get_objects():
        counts[type(o)] += 1
    return counts


async def test_a_record_in_flight_is_one_tracked_object(
    kafka_broker: Any, anyio_backend: str
) -> None:
    # A long linger keeps every record of the loop below in its batch until flush(): the
    # objects tracked meanwhile are what records in flight cost the collector. With a
    # shared done-callback each (a gather's, a Task's or an application's): the future,
    # and no more -- its one callback is kept in the future's own slots, and its context
    # (under asyncio: empty, as a task's is unless a variable was set; none under trio)
    # is shared, not copied per record.
    seen = [0]

    def done(fut: DeliveryFuture) -> None:
        seen[0] += 1

    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=60_000, batch_size=1 << 20
    ) as producer:
        topic = topic_name()
        # Metadata, and a sender (and connection) for every partition's leader: on Kafka
        # the leaders are spread over three nodes.
        for partition in await producer.partitions_for(topic):
            await producer.send(topic, b"warm", partition=partition)
        await producer.flush()

        async def send_all() -> tuple[list[DeliveryFuture], Counter[type]]:
            gc.collect()
            with collector_off():
                before = tracked_types()
                futs = []
                for i in range(N):
                    fut = await producer.send(topic, b"v", key=b"key-%d" % (i % 100))
                    fut.add_done_callback(done)
                    futs.append(fut)
                return futs, tracked_types() - before

        if anyio_backend == "asyncio":
            # (pytest's own runner leaves variables in the test's context)
            loop = asyncio.get_running_loop()
            futs, grown = await loop.create_task(send_all(), context=contextvars.Context())
        else:
            futs, grown = await send_all()
        per_record = grown.pop(DeliveryFuture, 0)
        others = sorted(f"{t.__name__} {n}" for t, n in grown.items())
        assert per_record == N and not any(f.done() for f in futs)
        # Batches, their builders and the producer's own bookkeeping: a few dozen per
        # leader node, not one or two per record (3000 tuples and 3000 Contexts before).
        # Each node's sender may wake on its partitions' first batch and arm its linger
        # timer (a TimerHandle and its scope): ~45 objects per node, 147 on Kafka's three.
        nodes = 1 if isinstance(kafka_broker, LocalBroker) else len(kafka_broker.cluster.brokers)
        assert sum(grown.values()) < 50 + 50 * nodes, others
        await producer.flush()
        if anyio_backend == "asyncio":
            # A callback added to a done future waits for the next loop turn: kept with
            # the shared empty context too, not a copy per record (gather over futures
            # that are mostly done already adds N of them at once).
            async def add_to_done() -> Counter[type]:
                with collector_off():
                    before = tracked_types()
                    for fut in futs:
                        fut.add_done_callback(done)
                    return tracked_types() - before

            grown = await loop.create_task(add_to_done(), context=contextvars.Context())
            assert sum(grown.values()) < 100, sorted(f"{t.__name__} {n}" for t, n in grown.items())
            await asyncio.sleep(0)
            assert seen[0] == 2 * N
            seen[0] -= N
        # Delivered, a future and its metadata leave the collector's lists (C kernel).
        if speedups.AVAILABLE:
            assert not any(gc.is_tracked(f) or gc.is_tracked(f.result()) for f in futs)
        else:
            assert all(f.result().offset >= 0 for f in futs)
    assert seen[0] == N


async def test_finished_records_are_freed_without_the_collector(
    kafka_broker: Any, anyio_backend: str
) -> None:
    # Send, await and drop N records with callbacks (gather under asyncio, one by one
    # under trio): nothing of theirs is left for the collector -- every object on the
    # per-record path was freed by reference counting, none sits in a cycle.
    results: list[Any] = []
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        topic = topic_name()
        await producer.send_and_wait(topic, b"warm")
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        try:
            with collector_off():
                futs = []
                for i in range(N):
                    fut = await producer.send(topic, b"v%d" % i, key=b"k%d" % (i % 7))
                    fut.add_done_callback(lambda f: results.append(f.result().offset))
                    futs.append(fut)
                if anyio_backend == "asyncio":
                    await asyncio.gather(*futs)
                else:
                    for fut in futs:
                        await fut
                await producer.flush()  # returns once every done-callback ran
                del futs, fut
                found = gc.collect()
                closed, stray = _closed_connections(gc.garbage)
                cluster = producer.statistics().cluster
        finally:
            gc.set_debug(0)
            gc.garbage.clear()
    assert len(results) == N
    # A connection closed in the window (ci11, ci38: one of a Kafka node's, which and why
    # not known) leaves asyncio's transport for the collector -- it holds its own bound read
    # callback -- and what it reaches: not the per-record path, which must leave nothing.
    assert found == 0 or closed, found
    assert stray == [], (stray, closed, cluster)


@asyncio_only
async def test_a_task_resumed_by_a_future_keeps_its_own_context(kafka_broker: Any) -> None:
    # A Task waits with its wake-up and its own context as the callback: the wake-up must
    # run in that context itself -- what the task sets after resuming stays set at its
    # next step (run in a copy, it would be lost).
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        topic = topic_name()

        async def task() -> tuple[str, str]:
            await (await producer.send(topic, b"v"))
            var.set("after the future")
            first = var.get()
            await asyncio.sleep(0)
            return first, var.get()

        assert await asyncio.create_task(task()) == ("after the future", "after the future")


@asyncio_only
async def test_callbacks_sharing_the_empty_context_see_nothing_of_each_other(
    kafka_broker: Any,
) -> None:
    # Callbacks registered from an empty context share one kept context; each still runs
    # in a fresh one, as asyncio's copy per callback would: a value one sets is not seen
    # by the next, and the shared one stays empty.
    from aiokafka_ng.producer.future import _EMPTY_CONTEXT

    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    def cb(f: DeliveryFuture) -> None:
        seen.append(var.get())
        var.set("set by a callback")

    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as producer:
        topic = topic_name()

        async def register() -> list[DeliveryFuture]:
            # A fresh task with no variable set: its context is empty.
            futs = [await producer.send(topic, b"v%d" % i) for i in range(3)]
            for fut in futs:
                fut.add_done_callback(cb)
            futs[0].add_done_callback(cb)
            assert futs[0]._waiters.__class__ is list and futs[1]._waiters is cb
            assert futs[1]._ctx is _EMPTY_CONTEXT
            return futs

        futs = await asyncio.get_running_loop().create_task(
            register(), context=contextvars.Context()
        )
        await asyncio.gather(*futs)
        await asyncio.sleep(0)
    assert seen == ["unset"] * 4
    assert len(_EMPTY_CONTEXT) == 0
