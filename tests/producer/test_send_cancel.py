"""Cancelling a send at any of its waits leaves nothing half-done, against FakeKafka on
virtual time: the records it had queued are delivered (exactly once), the rest were never
sent, ``flush()`` and ``commit_transaction()`` return, and every byte of ``buffer_memory``
comes back. The only waits of ``send``/``send_batch``/``send_many`` are for memory (and the
checkpoint after each chunk), so each test cancels its send deterministically while it
waits for memory: ``cancel_when_blocked`` runs the send in a task of its own and cancels it
once every task waits -- with nothing that could free memory meanwhile (the topic does not
exist yet, or the leader holds its Produce answers), the send can only be waiting for
memory then, and the producer's statistics say it is (one memory waiter). No sleeps: the
clock jumps only when every task waits.

What a cancelled call had queued is read back from partition 0's log as stored
(``FakeKafka.records``): the values must be the run's first ``q`` records, in order, each
once, and the log must end there (no duplicate, nothing of the withdrawn tail).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.errors import ProducerClosedError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

#: Small enough that a run of N records blocks on memory after a few chunks; every chunk is
#: at most a quarter of it.
BUFFER = 64 * 1024
N = 2000
PRODUCE = 0
#: How long the leader holds its Produce answers while a send is made to wait for memory
#: (virtual time; well inside the request timeout, so nothing is sent twice).
HOLD_MS = 5_000


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def values(n: int = N, tag: bytes = b"v") -> list[bytes]:
    return [tag + b"%06d" % i + b"x" * 150 for i in range(n)]


@asynccontextmanager
async def cluster(*topics: str) -> AsyncIterator[FakeKafka]:
    """One node, in memory; it creates no topic on its own, so a topic not in ``topics``
    stays without metadata until the test creates it."""
    async with FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka:
        for topic in topics:
            kafka.create_topic(topic)
        yield kafka


@asynccontextmanager
async def producer(kafka: FakeKafka, **kw: Any) -> AsyncIterator[Producer]:
    """A started producer with a small buffer; closed with a deadline, so that a run the
    producer could never finish fails the test instead of hanging it in close()."""
    p = Producer(**kafka.client_config(), buffer_memory=BUFFER, **kw)
    await p.start()
    try:
        yield p
    finally:
        await p.close(timeout=10)


@asynccontextmanager
async def answers_held(kafka: FakeKafka) -> AsyncIterator[None]:
    """The leader holds its Produce answers: memory in flight stays taken meanwhile."""
    kafka.delay(1, HOLD_MS, api_key=PRODUCE)
    try:
        yield
    finally:
        kafka.delay(1, 0, api_key=PRODUCE)


async def cancel_when_blocked(
    p: Producer, send: Callable[[], Awaitable[Any]], ready: anyio.Event | None = None
) -> int:
    """Run ``send()`` in a task and cancel it while it waits for memory; returns the bytes
    the queued records held then. The caller makes sure nothing can free memory until it
    returns, so once every task waits, the send must be at its wait for memory. (``ready``:
    set by a ``send`` that waits for something else first, once past it.)"""
    scope = anyio.CancelScope()
    finished: list[bool] = []

    async def run() -> None:
        with scope:
            await send()
            finished.append(True)

    async with anyio.create_task_group() as tg:
        tg.start_soon(run)
        if ready is not None:
            await ready.wait()
        await anyio.wait_all_tasks_blocked()
        memory = p.statistics().memory
        assert memory.waiters == 1, "the send is not waiting for memory"
        held = memory.total - memory.available - memory.accumulating
        scope.cancel()
    assert scope.cancelled_caught and not finished
    return held


def memory_back(p: Producer) -> None:
    stats = p.statistics().memory
    assert (stats.available, stats.waiters, stats.accumulating) == (stats.total, 0, 0)


def log(kafka: FakeKafka, topic: str) -> list[tuple[int, bytes | None]]:
    """(offset, value) of partition 0's data records, as stored."""
    return [(r.offset, r.value) for r in kafka.records(topic, 0)]


def prefix(kafka: FakeKafka, topic: str, vals: list[bytes], markers: int = 0) -> int:
    """Partition 0 holds the first q of ``vals`` at offsets 0..q-1 and after them nothing
    but ``markers`` transaction markers (0 < q < len(vals)); returns q."""
    stored = log(kafka, topic)
    q = len(stored)
    assert 0 < q < len(vals)
    assert stored == list(enumerate(vals[:q]))
    assert kafka.end_offset(topic, 0) == q + markers
    return q


async def read_committed(kafka: FakeKafka, topic: str) -> list[bytes | None]:
    """What a read_committed consumer reads from partition 0, up to its end."""
    tp = TopicPartition(topic, 0)
    out: list[bytes | None] = []
    async with Consumer(
        **kafka.client_config(), isolation_level="read_committed", auto_offset_reset="earliest"
    ) as consumer:
        consumer.assign([tp])
        end = (await consumer.end_offsets([tp]))[tp]
        while await consumer.position(tp) < end:
            for records in (await consumer.getmany(timeout_ms=500)).values():
                out.extend(r.value for r in records)
    return out


async def test_send_many_cancelled_between_chunks() -> None:
    topic, vals = "cm", values()
    async with cluster(topic) as kafka, producer(kafka) as p:
        await p.partitions_for(topic)
        async with answers_held(kafka):
            held = await cancel_when_blocked(p, lambda: p.send_many(topic, vals, partition=0))
        assert held > 0  # chunks were queued before it blocked
        await p.flush(timeout=60)
        memory_back(p)
        q = prefix(kafka, topic, vals)
        assert p.statistics().records_sent == q


async def test_send_many_cancelled_while_its_topic_has_no_metadata() -> None:
    # The chunks wait for the topic's metadata as queue entries; nothing can free memory
    # meanwhile, so the run blocks exactly when the buffer is full and the cancellation
    # is delivered at that wait: what it had queued is what held the memory then.
    topic, vals = "cu", values()
    async with cluster() as kafka, producer(kafka) as p:
        held = await cancel_when_blocked(p, lambda: p.send_many(topic, vals, partition=0))
        assert p.statistics().records_sent == 0  # queued records wait for the metadata
        kafka.create_topic(topic)
        await p.partitions_for(topic)  # the metadata comes: the queued chunks are placed
        await p.flush(timeout=60)
        memory_back(p)
        q = prefix(kafka, topic, vals)
        charge = len(vals[0]) + 192 + 128  # a record waiting for metadata (bulk.py)
        assert q * charge == held


async def test_send_many_and_send_batch_cancelled_at_the_checkpoint_after_a_chunk() -> None:
    # Called in a scope already cancelled, with memory free: the first chunk is queued
    # without a wait, and the cancellation lands at the checkpoint after it -- exactly one
    # chunk (a quarter of the buffer) is sent, the rest is not.
    topic, vals = "ck", values()
    async with cluster(topic) as kafka, producer(kafka) as p:
        await p.partitions_for(topic)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await p.send_many(topic, vals, partition=0)
        assert scope.cancelled_caught
        with anyio.CancelScope() as scope:
            scope.cancel()
            await p.send_batch(topic, values(N, b"w"), partition=0)
        assert scope.cancelled_caught
        await p.flush(timeout=60)
        memory_back(p)
        q = BUFFER // 4 // (len(vals[0]) + 192)  # one chunk
        assert log(kafka, topic) == list(enumerate(vals[:q] + values(q, b"w")))
        assert kafka.end_offset(topic, 0) == 2 * q


async def test_send_many_cancelled_before_its_first_chunk() -> None:
    # A first run fills the buffer (its topic has no metadata yet); the second blocks on
    # its first chunk and is cancelled there: none of it is sent, flush and the first run
    # are unaffected.
    topic = "cf"
    first_vals, second_vals = values(120, b"a"), values(500, b"b")
    async with cluster() as kafka, producer(kafka) as p:
        first = await p.send_many(topic, first_vals, partition=0)
        held = await cancel_when_blocked(p, lambda: p.send_many(topic, second_vals, partition=0))
        charge = len(first_vals[0]) + 192 + 128  # a record waiting for metadata (bulk.py)
        assert held == 120 * charge  # the first run's records: nothing of the second
        kafka.create_topic(topic)
        await p.partitions_for(topic)
        await p.flush(timeout=60)
        assert first.done() and first.exception() is None and first.failed == 0
        memory_back(p)
        assert log(kafka, topic) == list(enumerate(first_vals))
        assert kafka.end_offset(topic, 0) == 120


async def test_send_batch_cancelled_between_chunks() -> None:
    # send_batch hands out no future once cancelled, so what it queued is found on the log:
    # a prefix of the run, each record once.
    topic, vals = "cb", values()
    async with cluster(topic) as kafka, producer(kafka) as p:
        await p.partitions_for(topic)
        async with answers_held(kafka):
            await cancel_when_blocked(p, lambda: p.send_batch(topic, vals, partition=0))
        await p.flush(timeout=60)
        memory_back(p)
        q = prefix(kafka, topic, vals)
        assert p.statistics().records_sent == q


async def test_send_cancelled_waiting_for_memory() -> None:
    # The buffer is full of records waiting for their topic's metadata; a send() that
    # must wait for memory is cancelled there (also through send_and_wait): not queued.
    topic = "cs"
    async with cluster() as kafka, producer(kafka) as p:
        vals: list[bytes] = []
        futs = []
        while p.statistics().memory.available >= 1000:  # each takes less: none of them waits
            vals.append(b"f%d" % len(vals))
            futs.append(await p.send(topic, vals[-1], partition=0))
        await cancel_when_blocked(p, lambda: p.send(topic, b"c" * 1000, partition=0))
        await cancel_when_blocked(p, lambda: p.send_and_wait(topic, b"c" * 1000, partition=0))
        assert p.statistics().memory.waiters == 0
        kafka.create_topic(topic)
        await p.partitions_for(topic)
        await p.flush(timeout=60)
        n = len(vals)
        assert [f.result().offset for f in futs] == list(range(n))
        memory_back(p)
        assert log(kafka, topic) == list(enumerate(vals))
        assert kafka.end_offset(topic, 0) == n


async def test_send_many_cancelled_in_a_transaction_commits_what_was_queued() -> None:
    # As in the Java client, a record whose send was interrupted before it was appended is
    # not part of the transaction: the commit goes through with what was queued.
    topic, vals = "ct", values()
    async with cluster(topic) as kafka, producer(kafka, transactional_id="tid") as p:
        await p.partitions_for(topic)
        p.begin_transaction()
        async with answers_held(kafka):
            await cancel_when_blocked(p, lambda: p.send_many(topic, vals, partition=0))
        with anyio.fail_after(60):  # virtual seconds
            await p.commit_transaction()
        memory_back(p)
        q = prefix(kafka, topic, vals, markers=1)
        assert await read_committed(kafka, topic) == vals[:q]  # the marker commits them
        # Cancelled before its first chunk (the buffer full of the first run, whose topic
        # has no metadata yet): nothing of the second run is in the transaction.
        other = "ct2"
        p.begin_transaction()
        first = await p.send_many(other, values(120, b"a"), partition=0)
        await cancel_when_blocked(p, lambda: p.send_many(other, values(500, b"b"), partition=0))
        kafka.create_topic(other)
        await p.partitions_for(other)
        with anyio.fail_after(60):
            await p.commit_transaction()
        assert first.done() and first.exception() is None
        memory_back(p)
        assert log(kafka, other) == list(enumerate(values(120, b"a")))
        assert kafka.end_offset(other, 0) == 121  # and the commit marker
        assert await read_committed(kafka, other) == values(120, b"a")


async def test_cancelled_transaction_with_a_cancelled_send_many_is_aborted() -> None:
    # The cancellation leaves the transaction() block too: the producer's own task aborts
    # the transaction (it waits for what the run had in flight; what was still queued
    # fails), and the next transaction commits.
    topic, vals = "ca", values()
    async with cluster(topic) as kafka, producer(kafka, transactional_id="tid") as p:
        await p.partitions_for(topic)
        first_delivered = anyio.Event()

        async def in_a_transaction() -> None:
            async with p.transaction():
                # The partition joins the transaction first: the abort marker is certain.
                await (await p.send(topic, b"first", partition=0))
                kafka.delay(1, HOLD_MS, api_key=PRODUCE)  # the run must wait for memory
                first_delivered.set()
                await p.send_many(topic, vals, partition=0)

        try:
            await cancel_when_blocked(p, in_a_transaction, ready=first_delivered)
        finally:
            kafka.delay(1, 0, api_key=PRODUCE)
        with anyio.fail_after(60):  # virtual seconds
            async with p.transaction():  # waits for the background abort first
                last = await p.send(topic, b"next", partition=0)
        memory_back(p)
        # Written before the abort: a prefix of what was queued.
        data = log(kafka, topic)
        k = len(data) - 2
        assert [v for _, v in data] == [b"first", *vals[:k], b"next"]
        assert [o for o, _ in data] == [*range(k + 1), k + 2]  # the abort marker at k + 1
        assert (await last).offset == k + 2
        assert kafka.end_offset(topic, 0) == k + 4  # the commit marker at k + 3
        # The first marker aborts (the run's records are hidden), the second commits.
        assert await read_committed(kafka, topic) == [b"next"]


async def test_closed_while_send_many_waits_for_memory() -> None:
    # close() while a run waits for memory between chunks: the call raises
    # ProducerClosedError, close() delivers what the run had queued and returns (it waits
    # for the run, which must therefore be decided), the rest was never sent.
    topic, vals = "cc", values()
    async with cluster(topic) as kafka:
        p = Producer(**kafka.client_config(), buffer_memory=BUFFER)
        raised: list[bool] = []

        async def send_many() -> None:
            with pytest.raises(ProducerClosedError):
                await p.send_many(topic, vals, partition=0)
            raised.append(True)

        with anyio.fail_after(60):  # virtual seconds
            async with anyio.create_task_group() as tg:
                await p.start()  # inside the task group: close() below leaves it in order
                await p.partitions_for(topic)
                async with answers_held(kafka):
                    tg.start_soon(send_many)
                    await anyio.wait_all_tasks_blocked()
                    assert p.statistics().memory.waiters == 1
                await p.close()
        assert raised == [True]
        memory_back(p)
        prefix(kafka, topic, vals)
