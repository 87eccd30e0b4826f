"""Connections fed garbage: the simulator replaces some responses with a well-framed frame
(right correlation id) whose body no schema decodes. The client must drop that connection
(everything pipelined on it included), reconnect and retry -- and still deliver, or hand
out, every record exactly once and in order."""

from __future__ import annotations

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import ClusterSimulator
from tests.helpers import topic_name
from tests.reliability.helpers import (
    FETCH,
    PRODUCE,
    Stopwatch,
    read_back,
    record_count,
    simulated_cluster,
    tally,
    unpack,
)
from tests.reliability.test_consumer_reliability import produce
from tests.reliability.test_producer_reliability import PARTITIONS, send_numbered

# broker: it starts its own brokers, no fixture says so (see tests/conftest.py)
pytestmark = [pytest.mark.anyio, pytest.mark.broker]


async def garbage_every(sim: ClusterSimulator, api_key: int, interval: float) -> None:
    """Until cancelled: every ``interval`` s, the next ``api_key`` response of one node
    (in turn) is garbage -- once that node's previous shot was fired. (A shot waits for a
    response of its API; piling up shots faster than the client calls a node would turn
    every answer into garbage. A fired shot drops the connection, so the node's
    connection count tells when it went off.)"""
    shots = dict.fromkeys(sim.nodes, 0)
    tick = 0
    while True:
        await anyio.sleep(interval)
        node = tick % len(sim.nodes)
        tick += 1
        if sim.connections[node] > shots[node]:
            sim.inject_garbage(node, 1, api_key)
            shots[node] += 1


async def test_producer_survives_garbage_responses(anyio_backend: str) -> None:
    """Idempotent producer, 5 in flight, a garbage Produce answer every ~150 ms: 0 lost,
    0 duplicated, 0 reordered. 100k records on asyncio, 30k on trio."""
    n = record_count(anyio_backend, 100_000, 30_000)
    topic = topic_name("garbage-p")
    async with simulated_cluster(seed=41) as (broker, sim):
        watch = Stopwatch()
        async with Producer(
            bootstrap_servers=sim.bootstrap_servers,
            retry_backoff_ms=10,
            retry_backoff_max_ms=100,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=100,
            linger_ms=10,
            batch_size=64 * 1024,
        ) as producer:
            await producer.partitions_for(topic)
            sim.reset_counters()
            with anyio.fail_after(60):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(garbage_every, sim, PRODUCE, 0.15)
                    futs, sent = await send_numbered(producer, topic, n, spread_s=2)
                    await producer.flush()
                    tg.cancel_scope.cancel()
        seconds = watch.seconds
        connections = sum(sim.connections.values())
        sim.clear_faults()
        got = await read_back(broker.bootstrap_servers, topic, range(PARTITIONS), n)
    t = tally("producer fed garbage", sent, got)
    t.seconds = seconds
    t.extra.update(backend=anyio_backend, reconnections=connections)
    t.report()
    assert [f.exception() for f in futs if f.exception() is not None] == []
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    assert connections >= 5  # the garbage really dropped connections


async def test_consumer_survives_garbage_responses(anyio_backend: str) -> None:
    """A garbage Fetch answer every ~100 ms: every offset handed out exactly once, in
    order. 100k records on asyncio, 30k on trio."""
    n = record_count(anyio_backend, 100_000, 30_000)
    topic = topic_name("garbage-c")
    async with simulated_cluster(seed=42) as (broker, sim):
        sent = await produce(broker.bootstrap_servers, topic, n)
        values: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        watch = Stopwatch()
        async with Consumer(
            bootstrap_servers=sim.bootstrap_servers,
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
                    tg.start_soon(garbage_every, sim, FETCH, 0.1)
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
        connections = sum(sim.connections.values())
    t = tally("consumer fed garbage", sent, values)
    t.seconds = seconds
    t.extra.update(backend=anyio_backend, fetch_failures=failures, connections=connections)
    t.report()
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    for p in range(PARTITIONS):
        assert offsets[p] == list(range(sent[p]))
    # the garbage really dropped connections (3 to start with, one per node)
    assert failures >= 3 and connections >= 6
