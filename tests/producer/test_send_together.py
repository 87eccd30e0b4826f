"""``Producer._send_batch_together`` (internal; the Spark sink's bulk path): one
``RunDelivery`` for a whole run, against the real broker (Tansu). It is done exactly when
every record of the run is decided, fails with the first error while the other records
still go, and leaves ordering, idempotent sequence numbers and the memory bound as
``send_batch`` has them."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import BufferExhaustedError, IllegalStateError, MessageSizeTooLargeError
from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.future import RunDelivery
from tests.producer.test_send_batch import read_all

pytestmark = pytest.mark.anyio


def topic_name() -> str:
    return f"st-{uuid.uuid4().hex[:10]}"


async def test_a_run_spanning_many_batches_is_done_when_all_are(kafka_broker: Any) -> None:
    topic = topic_name()
    n = 5000
    values = [b"v%d" % i for i in range(n)]
    keys = [b"k%d" % (i % 5) for i in range(n)]
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, batch_size=2048, linger_ms=50
    ) as p:
        run = await p._send_batch_together(topic, values, keys=keys)
        assert isinstance(run, RunDelivery) and run.count == n
        assert not run.done()
        batches = p._acc.batches_sent
        await run.wait_done()
        assert run.exception() is None and run.failed == 0
        assert p._acc.batches_sent - batches > 10  # it really spanned many batches
        assert p._acc.records_sent >= n
        assert p._pool.available == p._pool.total  # every byte came back
    got = await read_all(kafka_broker.bootstrap_servers, topic, n)
    by_key: dict[bytes, list[bytes]] = {}
    for rec in got:
        by_key.setdefault(rec.key, []).append(rec.value)
    for key, vals in by_key.items():  # one key, one partition: in send order
        assert vals == [values[i] for i in range(n) if keys[i] == key]
    assert len(got) == n


async def test_an_oversize_record_fails_the_run_and_the_others_go(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, max_request_size=10_000
    ) as p:
        run = await p._send_batch_together(topic, [b"a", b"x" * 20_000, b"b"], partition=0)
        await p.flush()
        assert run.done() and (run.count, run.failed, run.first_failed) == (3, 1, 1)
        assert isinstance(run.exception(), MessageSizeTooLargeError)
        with pytest.raises(TypeError):
            run.result()  # no single record's metadata
    got = await read_all(kafka_broker.bootstrap_servers, topic, 2)
    assert [r.value for r in got] == [b"a", b"b"]


async def test_buffer_exhausted_counts_each_failed_record(kafka_broker: Any) -> None:
    topic = topic_name()
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, buffer_memory=8192, max_block_ms=0
    ) as p:
        assert p._cluster is not None
        await p._cluster.wait_for_topics([topic], timeout=10)
        p._acc.linger = 3600.0  # keep batches queued: nothing frees memory
        run = await p._send_batch_together(topic, [b"z" * 50] * 200, partition=0)
        assert not run.done() and 0 < run.failed < 200
        failed = run.failed
        p._acc.linger = 0.0
        await p.flush()
        assert run.done() and run.failed == failed
        assert run.first_failed == 200 - failed  # the head went, the tail failed
        assert isinstance(run.exception(), BufferExhaustedError)
    got = await read_all(kafka_broker.bootstrap_servers, topic, 200 - failed)
    assert [r.offset for r in got] == list(range(200 - failed))


async def test_empty_run_and_transactional_producer(kafka_broker: Any) -> None:
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as p:
        run = await p._send_batch_together(topic_name(), [])
        assert run.done() and run.exception() is None and run.count == 0
    async with Producer(
        bootstrap_servers=kafka_broker.bootstrap_servers, transactional_id=topic_name()
    ) as p:
        with pytest.raises(IllegalStateError, match="transactional"):
            await p._send_batch_together(topic_name(), [b"v"])


async def test_waiting_on_a_run_from_a_callback(kafka_broker: Any) -> None:
    # add_done_callback fires once, after the last record, on both backends.
    topic = topic_name()
    seen: list[Any] = []
    done = anyio.Event()
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers, batch_size=1024) as p:
        run = await p._send_batch_together(topic, [b"w" * 100] * 300)
        run.add_done_callback(lambda f: (seen.append(f.exception()), done.set()))
        with anyio.fail_after(30):
            await done.wait()
    assert seen == [None]
