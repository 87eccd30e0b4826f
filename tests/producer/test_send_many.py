"""``Producer.send_many``: one ``BatchDelivery`` for a whole run, against the real broker
(Tansu). It is done exactly when every record of the run is decided; awaited it gives each
record's metadata (checked against what a consumer reads back) or the first error, and every
record's own outcome stays readable (``metadata(i)``, ``errors()``) on every path a record
can take: the bulk path, the per-record paths (topic without metadata yet, a custom
partitioner), and a batch shared with ``send()`` records. Splits and broker-side batch
failures, which Tansu cannot produce, are in ``test_sender_outcomes.py`` on canned responses.
Runs go in as lists and, where the C kernel is built, as ``BinaryColumn`` objects over
Arrow buffers (how the Spark sink hands them over): the ``as_run`` fixture.
"""

from __future__ import annotations

import asyncio
import gc
from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import BufferExhaustedError, KafkaTimeoutError, MessageSizeTooLargeError
from aiokafka_ng.producer import BatchDelivery, Producer
from aiokafka_ng.producer import future as future_module
from aiokafka_ng.producer.future import DeliveryFuture, FutureNotDoneError
from aiokafka_ng.producer.partitioner import default_partition
from aiokafka_ng.producer.runs import run_stretches
from aiokafka_ng.testing import FakeKafka
from tests.helpers import topic_name
from tests.producer.test_send_batch import read_all
from tests.protocol.arrow_columns import column

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["list", "column"])
def as_run(request: pytest.FixtureRequest) -> Callable[[list[bytes]], Any]:
    """How a test hands values and keys to ``send_many``: lists, or ``BinaryColumn`` objects
    read in place from Arrow buffers (sliced, so their offsets do not start at 0)."""
    if request.param == "list":
        return lambda items: items
    return lambda items: column(list(items), pad=3)


def futures_alive() -> int:
    """How many record futures (``send()``'s, or one per record of a run) are alive and
    tracked by the GC: a run that takes the bulk path adds none."""
    gc.collect()
    return sum(1 for o in gc.get_objects() if isinstance(o, DeliveryFuture))


def landed(records: list[Any]) -> dict[bytes, tuple[int, int]]:
    """value -> (partition, offset) of what a consumer read."""
    return {r.value: (r.partition, r.offset) for r in records}


async def test_a_keyed_run_spanning_many_batches(kafka_broker: Any, as_run: Any) -> None:
    topic = topic_name()
    n = 5000
    values = [b"v%d" % i for i in range(n)]
    keys = [b"k%d" % (i % 5) for i in range(n)]
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, batch_size=2048, linger_ms=50
    ) as p:
        # Metadata known: the bulk path, no per-record future.
        partitions = len(await p.partitions_for(topic))
        run = await p.send_many(topic, as_run(values), keys=as_run(keys))
        assert isinstance(run, BatchDelivery) and run.count == n
        assert not run.done()
        # The last record's batch still lingers (linger_ms=50) when send_many returns; an
        # earlier record may be delivered already: send_many lets the senders run between
        # its chunks, and a full batch goes at once (metadata(0) once raced here on a
        # loaded machine, ci30).
        with pytest.raises(FutureNotDoneError):
            run.metadata(n - 1)
        assert futures_alive() == 0  # no record needed a future of its own
        batches = p.statistics().batches_sent
        metas = await run
        assert run.exception() is None and run.failed == 0 and run.errors() == {}
        assert p.statistics().batches_sent - batches > 10  # it really spanned many batches
        assert p.statistics().buffer_bytes_used == 0  # every byte came back
    got = landed(await read_all(kafka_broker.bootstrap_servers, topic, n))
    assert len(metas) == n
    for i, meta in enumerate(metas):
        assert (meta.partition, meta.offset) == got[values[i]]
        assert meta.partition == default_partition(keys[i], partitions)
    assert run.metadata(17) == metas[17] and metas[10:12] == [metas[10], metas[11]]


async def test_an_oversize_record_fails_alone_and_is_named(kafka_broker: Any, as_run: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, max_request_size=10_000
    ) as p:
        run = await p.send_many(topic, as_run([b"a", b"x" * 20_000, b"b"]), partition=0)
        await p.flush()
        assert run.done() and (run.count, run.failed) == (3, 1)
        assert isinstance(run.exception(), MessageSizeTooLargeError)
        assert list(run.errors()) == [1]
        with pytest.raises(MessageSizeTooLargeError):
            await run
        with pytest.raises(MessageSizeTooLargeError):
            run.metadata(1)
        ok = [run.metadata(0), run.metadata(2)]
    got = await read_all(kafka_broker.bootstrap_servers, topic, 2)
    assert [r.value for r in got] == [b"a", b"b"]
    assert [(m.partition, m.offset) for m in ok] == [(0, got[0].offset), (0, got[1].offset)]


async def test_buffer_exhausted_fails_the_tail_by_position(kafka_broker: Any, as_run: Any) -> None:
    topic = topic_name()
    # Batches held back (a linger of an hour; only flush() sends them): nothing frees memory.
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        buffer_memory=8192,
        max_block_ms=0,
        linger_ms=3_600_000,
    ) as p:
        # The topic's metadata, learnt by delivering one record to another partition
        # (partitions_for would not wait under max_block_ms=0).
        await p.send(topic, b"warm", partition=3)
        await p.flush()
        run = await p.send_many(topic, as_run([b"z" * 50] * 200), partition=0)
        assert not run.done() and 0 < run.failed < 200
        failed = run.failed
        await p.flush()
        assert run.done() and run.failed == failed
        errors = run.errors()
        assert sorted(errors) == list(range(200 - failed, 200))  # the head went, the tail not
        assert all(isinstance(e, BufferExhaustedError) for e in errors.values())
        offsets = [run.metadata(i).offset for i in range(200 - failed)]
    got = [r for r in await read_all(kafka_broker.bootstrap_servers, topic, 201 - failed)]
    assert offsets == [r.offset for r in got if r.partition == 0] == list(range(200 - failed))


async def test_unknown_topic_run_waits_with_no_future_per_record_in_send_order(
    as_run: Any,
) -> None:
    # The topic does not exist yet (a cluster that creates none on its own): a run waits in
    # the topic's queue between the send() records queued before and after it, with no
    # future per record; when the topic comes every record lands in send order.
    topic = topic_name()
    async with FakeKafka(tcp=False, auto_create_topics=False) as kafka:
        async with Producer(**kafka.client_config()) as p:
            alive = futures_alive()
            before = await p.send(topic, b"before", partition=0)
            run = await p.send_many(topic, as_run([b"r%d" % i for i in range(5000)]), partition=0)
            after = await p.send(topic, b"after", partition=0)
            assert futures_alive() - alive == 2  # send()'s two: none for the run's records
            assert not run.done() and not before.done()
            kafka.create_topic(topic, partitions=1)
            metas = await run
            assert (await before).offset == 0 and (await after).offset == 5001
        assert [m.offset for m in metas] == list(range(1, 5001))
        got = {r.value: r.offset for r in kafka.records(topic, 0)}
    assert [got[b"r%d" % i] for i in range(5000)] == list(range(1, 5001))


async def test_custom_partitioner_takes_per_record_futures(kafka_broker: Any, as_run: Any) -> None:
    # A custom partitioner decides record by record: each record of the run gets a future
    # of its own (a member of the run) -- also for a run that waited for its topic. With an
    # explicit partition the partitioner is not asked and the run takes the bulk path.
    # (Nothing is delivered before the flush -- a linger of a minute -- so the futures
    # counted are the live ones each run added.)
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        partitioner=lambda key, all_parts, available: all_parts[-1],
        linger_ms=60_000,
    ) as p:
        alive = futures_alive()
        first = await p.send_many(topic, as_run([b"p%d" % i for i in range(50)]))
        await p.partitions_for(topic)
        added = [futures_alive() - alive]
        second = await p.send_many(
            topic, as_run([b"q%d" % i for i in range(50)]), keys=as_run([b"k"] * 50)
        )
        added.append(futures_alive() - alive - sum(added))
        third = await p.send_many(topic, as_run([b"x%d" % i for i in range(50)]), partition=0)
        added.append(futures_alive() - alive - sum(added))
        assert added == [50, 50, 0]
        await p.flush()
        metas = list(await first) + list(await second)
        fixed = list(await third)
    got = landed(await read_all(kafka_broker.bootstrap_servers, topic, 150))
    values = [b"p%d" % i for i in range(50)] + [b"q%d" % i for i in range(50)]
    assert [(m.partition, m.offset) for m in metas] == [got[v] for v in values]
    assert len({m.partition for m in metas}) == 1  # the custom partitioner's choice
    assert [(m.partition, m.offset) for m in fixed] == [got[b"x%d" % i] for i in range(50)]
    assert {m.partition for m in fixed} == {0}


async def test_a_batch_shared_with_send_records(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=100) as p:
        await p.partitions_for(topic)
        single = await p.send(topic, b"before", partition=0)
        run = await p.send_many(topic, [b"r0", b"r1"], partition=0)
        after = await p.send(topic, b"after", partition=0)
        run2 = await p.send_many(topic, [b"r2"], partition=0)
        metas = [await single, *(await run), await after, *(await run2)]
    got = landed(await read_all(kafka_broker.bootstrap_servers, topic, 5))
    values = [b"before", b"r0", b"r1", b"after", b"r2"]
    assert [(m.partition, m.offset) for m in metas] == [got[v] for v in values]
    assert [m.offset for m in metas] == sorted(m.offset for m in metas)


async def test_keyed_runs_sharing_batches_with_each_other_and_send(
    kafka_broker: Any, monkeypatch: pytest.MonkeyPatch, as_run: Any
) -> None:
    # Large batches and a long linger: every partition's batch holds a stretch of each run
    # with send() records between them, and each stretch is settled in one step.
    stretches: list[int] = []

    def spy(entries: list[Any], positions: list[int]) -> tuple[list[int], list[Any]]:
        bounds, others = run_stretches(entries, positions)
        stretches.append(len(bounds) // 2)
        return bounds, others

    monkeypatch.setattr(future_module, "run_stretches", spy)
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, linger_ms=200, batch_size=1 << 20
    ) as p:
        await p.partitions_for(topic)
        runs: list[tuple[list[bytes], BatchDelivery]] = []
        singles: list[tuple[bytes, Any]] = []
        for r in range(3):
            values = [b"run%d-%d" % (r, i) for i in range(300)]
            keys = [b"k%d" % (i % 17) for i in range(300)]
            runs.append((values, await p.send_many(topic, as_run(values), keys=as_run(keys))))
            value = b"single%d" % r
            singles.append((value, await p.send(topic, value, key=b"k3")))
        metas = [(values, list(await run)) for values, run in runs]
        single_metas = [(value, await fut) for value, fut in singles]
    got = landed(await read_all(kafka_broker.bootstrap_servers, topic, 903))
    for values, run_metas in metas:
        assert [(m.partition, m.offset) for m in run_metas] == [got[v] for v in values]
    assert [(m.partition, m.offset) for _, m in single_metas] == [got[v] for v, _ in singles]
    assert all(run.errors() == {} and run.failed == 0 for _, run in runs)
    assert max(stretches) == 3  # the premise: a batch held all three runs


async def test_empty_run_and_a_transaction(kafka_broker: Any) -> None:
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
        run = await p.send_many(topic_name(), [])
        assert run.done() and run.exception() is None and list(await run) == []
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=topic_name()
    ) as p:
        await p.partitions_for(topic)
        async with p.transaction():
            run = await p.send_many(topic, [b"t%d" % i for i in range(20)])
        assert run.done() and run.exception() is None
    got = await read_all(kafka_broker.bootstrap_servers, topic, 20)
    assert sorted(r.value for r in got) == sorted(b"t%d" % i for i in range(20))


async def test_waiting_on_a_run_from_a_callback(kafka_broker: Any) -> None:
    # add_done_callback fires once, after the last record, on both backends.
    topic = topic_name()
    seen: list[Any] = []
    done = anyio.Event()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, batch_size=1024) as p:
        run = await p.send_many(topic, [b"w" * 100] * 300)
        run.add_done_callback(lambda f: (seen.append(f.exception()), done.set()))
        with anyio.fail_after(30):
            await done.wait()
    assert seen == [None]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_asyncio_gathers_runs_without_a_task_each(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
        runs = [await p.send_many(topic, [b"g%d" % i] * 10) for i in range(5)]
        assert all(asyncio.isfuture(r) for r in runs)
        tasks = len(asyncio.all_tasks())
        gathered = asyncio.gather(*runs)
        assert len(asyncio.all_tasks()) == tasks  # the runs are futures to asyncio
        results = await gathered
    assert [len(r) for r in results] == [10] * 5


async def test_closing_fails_every_queued_record_by_position() -> None:
    # Records still queued (a long linger) and records still waiting for their topic's
    # metadata (a topic the cluster does not have and creates none on its own) all fail
    # when the producer closes first.
    known, unknown = topic_name(), topic_name()
    async with FakeKafka(tcp=False, auto_create_topics=False) as kafka:
        kafka.create_topic(known, partitions=2)
        p = Producer(**kafka.client_config(), linger_ms=60_000)
        await p.start()
        await p.partitions_for(known)
        queued = await p.send_many(known, [b"q%d" % i for i in range(30)], partition=0)
        waiting = await p.send_many(unknown, [b"w%d" % i for i in range(5)])
        cancelled = await p.send_many(known, [b"c"], partition=1)
        assert cancelled.cancel() and cancelled.cancelled()  # detaches the waiters only
        await p.close(timeout=0)
    for run, n in ((queued, 30), (waiting, 5), (cancelled, 1)):
        assert run.failed == n
        assert sorted(run.errors()) == list(range(n))
    assert queued.done() and isinstance(queued.exception(), KafkaTimeoutError)
    with pytest.raises(KafkaTimeoutError, match="closed before"):
        queued.metadata(3)
    with pytest.raises(KafkaTimeoutError, match="closed before"):
        await waiting


@pytest.mark.parametrize("call", ["send_many", "send_batch"])
async def test_a_run_mixing_null_and_non_null_keys_keeps_send_order_per_partition(
    as_run: Any, call: str
) -> None:
    # Null-keyed records go to the sticky partition, which can be a keyed record's too (and
    # moves as batches fill): placed group after group, every null-keyed record went ahead
    # of the keyed ones sent before it in the same partition.
    n = 600
    values = [b"%d" % i for i in range(n)]
    keys = [None if i % 3 == 1 else b"k%d" % (i % 7) for i in range(n)]
    async with FakeKafka(tcp=False) as kafka:
        kafka.create_topic("mixed", 3)
        config = kafka.client_config()
        async with Producer(**config, batch_size=1024, linger_ms=50) as p:
            await p.partitions_for("mixed")  # metadata known: the bulk path
            if call == "send_many":
                await (await p.send_many("mixed", as_run(values), keys=as_run(keys)))
            else:
                for fut in await p.send_batch("mixed", as_run(values), keys=as_run(keys)):
                    await fut
        seen = 0
        for partition in range(3):
            order = [int(r.value) for r in kafka.records("mixed", partition)]
            assert order == sorted(order), (partition, order[:20])
            seen += len(order)
        assert seen == n
