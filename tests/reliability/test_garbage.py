"""Connections fed garbage: FakeKafka (3 nodes, in memory, on virtual time) replaces some
answers with a well-framed frame (right correlation id) whose body no schema decodes. The
client must drop that connection (everything pipelined on it included), reconnect and retry
-- and still deliver, or hand out, every record exactly once and in order."""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.reliability.helpers import (
    FETCH,
    PARTITIONS,
    PRODUCE,
    Stopwatch,
    fake_cluster,
    logged,
    record_count,
    tally,
    unpack,
)
from tests.reliability.test_consumer_reliability import produce
from tests.reliability.test_producer_reliability import send_numbered

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def garbage_every(kafka: FakeKafka, api_key: int, interval: float) -> None:
    """Until cancelled: every ``interval`` s, the next ``api_key`` response of one node
    (in turn) is garbage -- once that node's previous shot was fired. (A shot waits for a
    response of its API; piling up shots faster than the client calls a node would turn
    every answer into garbage. A fired shot drops the connection, so the node's
    connection count tells when it went off.)"""
    nodes = sorted(kafka.nodes)
    shots = dict.fromkeys(nodes, 0)
    tick = 0
    while True:
        await anyio.sleep(interval)
        node = nodes[tick % len(nodes)]
        tick += 1
        if kafka.connections(node) > shots[node]:
            kafka.inject_garbage(node, 1, api_key)
            shots[node] += 1


async def test_producer_survives_garbage_responses(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """Idempotent producer, 5 in flight, a garbage Produce answer every ~150 ms: 0 lost,
    0 duplicated, 0 reordered. 100k records on asyncio, 30k on trio."""
    backend = anyio_backend[0]
    n = record_count(backend, 100_000, 30_000)
    topic = "garbage-p"
    async with fake_cluster(topic, seed=41) as kafka:
        watch = Stopwatch()
        async with Producer(
            **kafka.client_config(),
            retry_backoff_ms=10,
            retry_backoff_max_ms=100,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=100,
            linger_ms=10,
            batch_size=64 * 1024,
        ) as producer:
            await producer.partitions_for(topic)
            kafka.reset_counters()
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(garbage_every, kafka, PRODUCE, 0.15)
                    futs, sent = await send_numbered(producer, topic, n, spread_s=2)
                    await producer.flush()
                    tg.cancel_scope.cancel()
        seconds = watch.seconds
        connections = kafka.connections()
        got = logged(kafka, topic)
    t = tally("producer fed garbage", sent, got)
    t.seconds = seconds
    t.extra.update(backend=backend, reconnections=connections)
    t.report()
    assert [f.exception() for f in futs if f.exception() is not None] == []
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    assert connections >= 5  # the garbage really dropped connections


async def test_consumer_survives_garbage_responses(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """A garbage Fetch answer every ~100 ms: every offset handed out exactly once, in
    order. 100k records on asyncio, 30k on trio."""
    backend = anyio_backend[0]
    n = record_count(backend, 100_000, 30_000)
    topic = "garbage-c"
    async with fake_cluster(topic, seed=42) as kafka:
        sent = await produce(kafka, topic, n)
        kafka.reset_counters()
        values: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        watch = Stopwatch()
        async with Consumer(
            **kafka.client_config(),
            auto_offset_reset="earliest",
            max_partition_fetch_bytes=64 * 1024,
            fetch_buffer_bytes=256 * 1024,  # fetch as the records are consumed, all along
            fetch_max_wait_ms=100,
            retry_backoff_ms=10,
            retry_backoff_max_ms=100,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=100,
        ) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            count = 0
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(garbage_every, kafka, FETCH, 0.1)
                    begin = anyio.current_time()
                    while count < n:
                        batch = await consumer.getmany(timeout_ms=200, max_records=2000)
                        for tp, records in batch.items():
                            for r in records:
                                values[tp.partition].append(unpack(r.value)[1])
                                offsets[tp.partition].append(r.offset)
                            count += len(records)
                        # paced over ~2 s, so the garbage lands all through the run
                        await anyio.sleep(max(0.0, begin + 2 * count / n - anyio.current_time()))
                    tg.cancel_scope.cancel()
            failures = consumer.statistics().fetcher.fetch_failures
        seconds = watch.seconds
        connections = kafka.connections()
    t = tally("consumer fed garbage", sent, values)
    t.seconds = seconds
    t.extra.update(backend=backend, fetch_failures=failures, connections=connections)
    t.report()
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    for p in range(PARTITIONS):
        assert offsets[p] == list(range(sent[p]))
    # the garbage really dropped connections (3 to start with, one per node)
    assert failures >= 3 and connections >= 6
