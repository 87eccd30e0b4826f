"""Cancelling a send at any of its waits leaves nothing half-done, against the real broker
(Tansu): the records it had queued are delivered (exactly once), the rest were never sent,
``flush()`` and ``commit_transaction()`` return, and every byte of ``buffer_memory`` comes
back. The only waits of ``send``/``send_batch``/``send_many`` are for memory (and the
checkpoint after each chunk), so each test cancels its send deterministically at the moment
it blocks: ``cancel_when_blocked`` cancels the scope from the memory pool's wake-up
(``memory_wanted``), which ``MemoryPool.reserve`` signals just before it waits -- no
sleeps, no timing.

What a cancelled call had queued is read back from partition 0's log as stored
(``read_log``): the values must be the run's first ``q`` records, in order, each once, and
the log must end there (no duplicate, nothing of the withdrawn tail).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import KafkaError, ProducerClosedError
from aiokafka_ng.producer import BatchDelivery, Producer
from aiokafka_ng.producer.transactions import TransactionAbortedError
from tests.helpers import topic_name
from tests.kafka.helpers import eventually
from tests.transactions.test_txn_broker import _ABORT, _COMMIT, Log, read_log

pytestmark = pytest.mark.anyio

#: Small enough that a run of N records blocks on memory after a few chunks; every chunk is
#: at most a quarter of it.
BUFFER = 64 * 1024
N = 2000


async def settled(bootstrap: str, topic: str, high_watermark: int) -> Log:
    """The log once it reaches ``high_watermark``: Kafka writes the transaction markers after
    EndTxn has answered, so a read right after commit/abort may not see them yet."""
    return await eventually(
        lambda: read_log(bootstrap, topic), lambda log: log.high_watermark >= high_watermark
    )


def values(n: int = N, tag: bytes = b"v") -> list[bytes]:
    return [tag + b"%06d" % i + b"x" * 150 for i in range(n)]


@asynccontextmanager
async def producer(broker: Any, **kw: Any) -> AsyncIterator[Producer]:
    """A started producer with a small buffer; closed with a deadline, so that a run the
    producer could never finish fails the test instead of hanging it in close()."""
    p = Producer(bootstrap_servers=broker.bootstrap_servers, buffer_memory=BUFFER, **kw)
    await p.start()
    try:
        yield p
    finally:
        await p.close(timeout=10)


class Blocked:
    """What ``cancel_when_blocked`` saw when the send blocked."""

    def __init__(self) -> None:
        self.times = 0
        self.runs: list[BatchDelivery] = []  # the runs holding memory at that moment
        self.held = 0  # bytes the queued records held then (not what the waiter gathered)


@contextmanager
def cancel_when_blocked(p: Producer) -> Iterator[Blocked]:
    """Run the body in a cancel scope that is cancelled the first time a send blocks on
    the producer's memory pool. The pool's wake-up (``memory_wanted`` of the producer's
    wake-up channel, still called) runs synchronously inside ``reserve()`` right before it
    waits, so the cancel is delivered at that wait -- or, if memory came free in the same
    loop turn, at the send's next checkpoint, after that chunk was queued; the tests allow
    for both."""
    pool = p._pool
    wake = p._senders.memory_wanted
    seen = Blocked()
    with anyio.CancelScope() as scope:

        def memory_wanted() -> None:
            wake()
            if not seen.times:
                runs = [f for f in p._acc.incomplete() if isinstance(f, BatchDelivery)]
                seen.runs = list({id(r): r for r in runs}.values())  # one per batch: once
                stats = pool.statistics()
                seen.held = stats.total - stats.available - stats.accumulating
                scope.cancel()
            seen.times += 1

        p._senders.memory_wanted = memory_wanted
        try:
            yield seen
        finally:
            p._senders.memory_wanted = wake
    assert scope.cancelled_caught and seen.times == 1


def memory_back(p: Producer) -> None:
    stats = p._pool.statistics()
    assert (stats.available, stats.waiters, stats.accumulating) == (stats.total, 0, 0)


def not_queued(exc: BaseException) -> bool:
    return isinstance(exc, KafkaError) and "cancelled before the record was queued" in str(exc)


def withdrawn_tail(run: BatchDelivery, n: int) -> int:
    """The run is decided and its tail [q, n) was never queued (the cancellation's error,
    by position); returns q, how many records it had queued."""
    assert run.done() and run.count == n
    q = n - run.withdrawn
    assert 0 < q < n
    errors = run.errors()
    assert all(not_queued(errors[i]) for i in range(q, n))
    return q


def check_withdrawn(run: BatchDelivery, n: int) -> int:
    """As ``withdrawn_tail``, and the records it had queued were delivered, at offsets
    0..q-1 of partition 0."""
    q = withdrawn_tail(run, n)
    assert sorted(run.errors()) == list(range(q, n))
    assert [run.metadata(i).offset for i in range(q)] == list(range(q))
    assert run.queued_error() is None  # what was queued went through
    assert not_queued(run.exception())  # the run as a whole was not all sent
    return q


async def test_send_many_cancelled_between_chunks(kafka_broker: Any) -> None:
    topic, vals = topic_name("cm"), values()
    async with producer(kafka_broker) as p:
        await p.partitions_for(topic)
        with cancel_when_blocked(p) as seen:
            await p.send_many(topic, vals, partition=0)
            pytest.fail("send_many was not cancelled")
        [run] = seen.runs  # chunks were queued before it blocked: the run holds memory
        with anyio.fail_after(20):
            await p.flush()
        q = check_withdrawn(run, N)
        memory_back(p)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == vals[:q] and log.high_watermark == q


async def test_send_many_cancelled_while_its_topic_has_no_metadata(kafka_broker: Any) -> None:
    # The chunks wait for the topic's metadata as queue entries; nothing can free memory
    # meanwhile, so the run blocks exactly when the buffer is full and the cancellation
    # is delivered at that wait: what it had queued is what held the memory then.
    topic, vals = topic_name("cu"), values()
    async with producer(kafka_broker) as p:
        request = p._senders.metadata_needed
        p._senders.metadata_needed = lambda topic: None  # keep the topic unknown for now
        with cancel_when_blocked(p) as seen:
            await p.send_many(topic, vals, partition=0)
        [run] = seen.runs
        assert not run.done()  # queued records are waiting for the metadata
        p._senders.metadata_needed = request
        await p.partitions_for(topic)  # the metadata comes: the queued chunks are placed
        with anyio.fail_after(20):
            await p.flush()
        q = check_withdrawn(run, N)
        charge = len(vals[0]) + 192 + 128  # a record waiting for metadata (bulk._queue_chunk)
        assert q * charge == seen.held
        memory_back(p)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == vals[:q] and log.high_watermark == q


async def test_send_many_and_send_batch_cancelled_at_the_checkpoint_after_a_chunk(
    kafka_broker: Any,
) -> None:
    # Called in a scope already cancelled, with memory free: the first chunk is queued
    # without a wait, and the cancellation lands at the checkpoint after it -- exactly one
    # chunk (a quarter of the buffer) is sent, the rest is not.
    topic, vals = topic_name("ck"), values()
    async with producer(kafka_broker) as p:
        await p.partitions_for(topic)
        with anyio.CancelScope() as scope:
            scope.cancel()
            await p.send_many(topic, vals, partition=0)
        assert scope.cancelled_caught
        runs = [f for f in p._acc.incomplete() if isinstance(f, BatchDelivery)]
        with anyio.CancelScope() as scope:
            scope.cancel()
            await p.send_batch(topic, values(N, b"w"), partition=0)
        assert scope.cancelled_caught
        with anyio.fail_after(20):
            await p.flush()
        q = check_withdrawn(runs[0], N)
        assert q == BUFFER // 4 // (len(vals[0]) + 192)  # one chunk
        memory_back(p)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == vals[:q] + values(q, b"w")
    assert log.high_watermark == 2 * q


async def test_send_many_cancelled_before_its_first_chunk(kafka_broker: Any) -> None:
    # A first run fills the buffer (its topic's metadata held back); the second blocks
    # on its first chunk and is cancelled there: none of it is sent, flush and the first
    # run are unaffected.
    topic = topic_name("cf")
    first_vals, second_vals = values(120, b"a"), values(500, b"b")
    async with producer(kafka_broker) as p:
        request = p._senders.metadata_needed
        p._senders.metadata_needed = lambda topic: None
        first = await p.send_many(topic, first_vals, partition=0)
        with cancel_when_blocked(p) as seen:
            await p.send_many(topic, second_vals, partition=0)
        assert seen.runs == [first]  # nothing of the second run was queued
        p._senders.metadata_needed = request
        await p.partitions_for(topic)
        with anyio.fail_after(20):
            await p.flush()
        assert first.done() and first.exception() is None and first.failed == 0
        memory_back(p)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == first_vals and log.high_watermark == 120


async def test_send_batch_cancelled_between_chunks(kafka_broker: Any) -> None:
    # send_batch hands out no future once cancelled, so what it queued is found on the log:
    # a prefix of the run, each record once, at least what was queued before it blocked.
    topic, vals = topic_name("cb"), values()
    async with producer(kafka_broker) as p:
        await p.partitions_for(topic)
        with cancel_when_blocked(p):
            await p.send_batch(topic, vals, partition=0)
        with anyio.fail_after(20):
            await p.flush()
        memory_back(p)
        sent = p.statistics()["records_sent"]
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    q = log.high_watermark
    assert 0 < q < N and q == sent
    assert [v for _, _, v in log.data] == vals[:q]


async def test_send_cancelled_waiting_for_memory(kafka_broker: Any) -> None:
    # The buffer is full of records waiting for their topic's metadata; a send() that
    # must wait for memory is cancelled there (also through send_and_wait): not queued.
    topic = topic_name("cs")
    async with producer(kafka_broker) as p:
        request = p._senders.metadata_needed
        p._senders.metadata_needed = lambda topic: None
        vals: list[bytes] = []
        futs = []
        while p._pool.available >= 1000:  # each takes less: none of them waits
            vals.append(b"f%d" % len(vals))
            futs.append(await p.send(topic, vals[-1], partition=0))
        with cancel_when_blocked(p):
            await p.send(topic, b"c" * 1000, partition=0)
        with cancel_when_blocked(p):
            await p.send_and_wait(topic, b"c" * 1000, partition=0)
        assert p._pool.statistics().waiters == 0
        p._senders.metadata_needed = request
        await p.partitions_for(topic)
        with anyio.fail_after(20):
            await p.flush()
        n = len(vals)
        assert [f.result().offset for f in futs] == list(range(n))
        memory_back(p)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == vals and log.high_watermark == n


async def test_send_many_cancelled_in_a_transaction_commits_what_was_queued(
    kafka_broker: Any,
) -> None:
    # As in the Java client, a record whose send was interrupted before it was appended is
    # not part of the transaction: the commit goes through with what was queued.
    topic, vals = topic_name("ct"), values()
    async with producer(kafka_broker, transactional_id=topic_name("tid")) as p:
        await p.partitions_for(topic)
        p.begin_transaction()
        with cancel_when_blocked(p) as seen:
            await p.send_many(topic, vals, partition=0)
        [run] = seen.runs
        with anyio.fail_after(20):
            await p.commit_transaction()
        q = check_withdrawn(run, N)
        memory_back(p)
        # Cancelled before its first chunk (the buffer full of the first run, whose topic
        # has no metadata yet): nothing of the second run is in the transaction.
        other = topic_name("ct")
        request = p._senders.metadata_needed
        p._senders.metadata_needed = lambda topic: None
        p.begin_transaction()
        first = await p.send_many(other, values(120, b"a"), partition=0)
        with cancel_when_blocked(p):
            await p.send_many(other, values(500, b"b"), partition=0)
        p._senders.metadata_needed = request
        await p.partitions_for(other)
        with anyio.fail_after(20):
            await p.commit_transaction()
        assert first.done() and first.exception() is None
        memory_back(p)
    log = await settled(kafka_broker.bootstrap_servers, topic, q + 1)
    assert [v for _, _, v in log.data] == vals[:q]
    assert [(o, k) for o, _, k in log.markers] == [(q, _COMMIT)]
    log = await settled(kafka_broker.bootstrap_servers, other, 121)
    assert [v for _, _, v in log.data] == values(120, b"a")
    assert [(o, k) for o, _, k in log.markers] == [(120, _COMMIT)]


async def test_cancelled_transaction_with_a_cancelled_send_many_is_aborted(
    kafka_broker: Any,
) -> None:
    # The cancellation leaves the transaction() block too: the producer's own task aborts
    # the transaction (it waits for what the run had in flight; what was still queued
    # fails), and the next transaction commits.
    topic, vals = topic_name("ca"), values()
    async with producer(kafka_broker, transactional_id=topic_name("tid")) as p:
        await p.partitions_for(topic)
        with cancel_when_blocked(p) as seen:
            async with p.transaction():
                # The partition joins the transaction first: the abort marker is certain.
                await (await p.send(topic, b"first", partition=0))
                await p.send_many(topic, vals, partition=0)
        [run] = seen.runs
        with anyio.fail_after(20):
            async with p.transaction():  # waits for the background abort first
                last = await p.send(topic, b"next", partition=0)
        q = withdrawn_tail(run, N)
        errors = run.errors()
        # Written before the abort: a prefix of what was queued; the rest of it failed.
        k = min([*(i for i in range(q) if i in errors), q])
        assert all(isinstance(errors[i], TransactionAbortedError) for i in range(k, q))
        assert [run.metadata(i).offset for i in range(k)] == list(range(1, k + 1))
        assert (await last).offset == k + 2  # after the aborted records and the marker
        memory_back(p)
    log = await settled(kafka_broker.bootstrap_servers, topic, k + 4)
    assert [(o, m) for o, _, m in log.markers] == [(k + 1, _ABORT), (k + 3, _COMMIT)]
    assert [v for _, _, v in log.data] == [b"first", *vals[:k], b"next"]


async def test_closed_while_send_many_waits_for_memory(kafka_broker: Any) -> None:
    # close() while a run waits for memory between chunks: the call raises
    # ProducerClosedError, close() delivers what the run had queued and returns (it waits
    # for the run, which must therefore be decided), the rest was never sent.
    topic, vals = topic_name("cc"), values()
    p = Producer(bootstrap_servers=kafka_broker.bootstrap_servers, buffer_memory=BUFFER)
    blocked = anyio.Event()

    async def send_many() -> None:
        with pytest.raises(ProducerClosedError):
            await p.send_many(topic, vals, partition=0)

    with anyio.fail_after(20):
        async with anyio.create_task_group() as tg:
            await p.start()  # inside the task group: close() below leaves it in order
            await p.partitions_for(topic)
            wake = p._senders.memory_wanted

            def memory_wanted() -> None:
                wake()
                blocked.set()

            p._senders.memory_wanted = memory_wanted
            tg.start_soon(send_many)
            await blocked.wait()
            runs = [f for f in p._acc.incomplete() if isinstance(f, BatchDelivery)]
            await p.close()
    [run] = list({id(r): r for r in runs}.values())
    assert run.done() and run.count == N
    q = N - run.withdrawn
    assert 0 < q < N
    errors = run.errors()
    assert sorted(errors) == list(range(q, N))
    assert all("stopped before the record was queued" in str(e) for e in errors.values())
    assert isinstance(errors[q].__cause__, ProducerClosedError)
    assert [run.metadata(i).offset for i in range(q)] == list(range(q))
    memory_back(p)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [v for _, _, v in log.data] == vals[:q] and log.high_watermark == q
