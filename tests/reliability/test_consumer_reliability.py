"""Consumer guarantees on a 3-node FakeKafka (in memory, on virtual time): leaders moving,
nodes killed (with failover) or cut off (without), manual commits, and a second member
resuming from the commits.

What the application is handed must be every offset exactly once, in order, per partition:
no gap, no duplicate, across a handover between two consumers of the same group.
"""

from __future__ import annotations

import random
from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.reliability.helpers import (
    FETCH,
    METADATA,
    PARTITIONS,
    Stopwatch,
    fake_cluster,
    record_count,
    tally,
    unpack,
    value,
)

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


GROUP_SETTINGS: dict[str, Any] = {
    "auto_offset_reset": "earliest",
    "enable_auto_commit": False,
    "session_timeout_ms": 6000,  # Kafka's group.min.session.timeout.ms
    "heartbeat_interval_ms": 300,
    "retry_backoff_ms": 10,
    "retry_backoff_max_ms": 100,
    "reconnect_backoff_ms": 10,
    "reconnect_backoff_max_ms": 100,
    "request_timeout_ms": 3000,
    "fetch_max_wait_ms": 100,
    # Many small fetches, issued as records are consumed, so faults land between them.
    "max_partition_fetch_bytes": 64 * 1024,
    "fetch_buffer_bytes": 256 * 1024,
}


async def produce(
    kafka: FakeKafka, topic: str, n: int, start: dict[int, int] | None = None
) -> dict[int, int]:
    """``n`` numbered records (written before any fault); per-partition counts (continuing
    from ``start``)."""
    sent = dict(start) if start else dict.fromkeys(range(PARTITIONS), 0)
    config = kafka.client_config()
    async with Producer(**config, linger_ms=10, batch_size=64 * 1024) as p:
        futs = []
        for i in range(n):
            part = i % PARTITIONS
            futs.append(await p.send(topic, value(part, sent[part]), partition=part))
            sent[part] += 1
        await p.flush()
    assert all(f.exception() is None for f in futs)
    return sent


async def chaos(kafka: FakeKafka, topic: str, seed: int, moves: list[int]) -> None:
    """Until cancelled: a leader move every ~200 ms (counted in ``moves``); every 5th tick
    a node is down for ~0.6 s, alternately killed (its leaderships, the coordinators and
    the controller role fail over) and cut off from the clients (it keeps its roles: its
    partitions are unreachable until it comes back)."""
    rng = random.Random(seed)
    nodes = sorted(kafka.nodes)
    tick = 0
    while True:
        await anyio.sleep(0.2)
        tick += 1
        if kafka.move_random_leader(topic) is not None:
            moves[0] += 1
        if tick % 5 == 0:
            node = rng.choice(nodes)
            killed = tick % 10 == 0
            if killed:
                kafka.kill(node)
            else:
                kafka.isolate(node)
            await anyio.sleep(0.6)
            if killed:
                kafka.restart(node)
            else:
                kafka.isolate(node, False)


class Reader:
    """Consumes with manual commits after every poll, recording what it was handed."""

    def __init__(self, topic: str) -> None:
        self.topic = topic
        self.values: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.offsets: dict[int, list[int]] = {p: [] for p in range(PARTITIONS)}
        self.commits = 0

    @property
    def count(self) -> int:
        return sum(len(v) for v in self.values.values())

    async def read(
        self, consumer: Consumer, until: int, seconds: float, *, commit: bool = True
    ) -> None:
        """Read until ``until`` records in total were handed out, pacing the polls over
        about ``seconds`` so the faults land all through the run; commit after each poll
        that returned records (``commit``)."""
        begin = anyio.current_time()
        start = self.count
        while self.count < until:
            batch = await consumer.getmany(timeout_ms=200, max_records=2000)
            for tp, records in batch.items():
                for r in records:
                    self.values[tp.partition].append(unpack(r.value)[1])
                    self.offsets[tp.partition].append(r.offset)
            if batch and commit:
                await consumer.commit()
                self.commits += 1
            due = begin + seconds * (self.count - start) / max(1, until - start)
            await anyio.sleep(max(0.0, due - anyio.current_time()))


async def test_manual_commits_through_moves_and_killed_nodes(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """Two consumers of one group in turn (the second resumes from the first's commits),
    leaders moving every ~200 ms and a node killed every second: every offset is handed
    out exactly once, in order. 100k records on asyncio, 30k on trio."""
    backend = anyio_backend[0]
    n = record_count(backend, 100_000, 30_000)
    topic = "cons"
    group = "g-" + topic
    moves = [0]
    async with fake_cluster(topic, seed=21) as kafka:
        config = kafka.client_config()
        sent = await produce(kafka, topic, n)
        reader = Reader(topic)
        watch = Stopwatch()
        with anyio.fail_after(90):
            async with anyio.create_task_group() as tg:
                tg.start_soon(chaos, kafka, topic, 21, moves)
                for part, until in enumerate((n // 2, n)):
                    async with Consumer(
                        topic, **config, group_id=group, client_id=f"reader-{part}",
                        **GROUP_SETTINGS,
                    ) as consumer:  # fmt: skip
                        await reader.read(consumer, until, seconds=2.0)
                tg.cancel_scope.cancel()
        seconds = watch.seconds
        for node in kafka.nodes:
            if not kafka.alive(node):
                kafka.restart(node)
        kafka.clear_faults()
        committed_in_cluster = kafka.committed(group)
        # Nothing more is handed out after the last commit: a third member finds nothing.
        async with Consumer(topic, **config, group_id=group, **GROUP_SETTINGS) as consumer:
            await consumer.wait_for_assignment()
            extra = await consumer.getmany(timeout_ms=500)
            committed = {
                p: await consumer.committed(TopicPartition(topic, p)) for p in range(PARTITIONS)
            }
    t = tally("consumer, manual commits, moves + killed nodes", sent, reader.values)
    t.seconds = seconds
    t.extra.update(
        backend=backend,
        leader_moves=moves[0],
        not_leader=kafka.errors(FETCH, 6),
        commits=reader.commits,
        refused_connections=kafka.refused(),
    )
    t.report()
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    for p in range(PARTITIONS):
        assert reader.offsets[p] == list(range(sent[p])), f"partition {p}"
        assert committed[p] == sent[p]
    assert committed_in_cluster == {(topic, p): sent[p] for p in range(PARTITIONS)}
    assert sum(len(v) for v in extra.values()) == 0
    assert moves[0] >= 5 and kafka.refused() + kafka.errors(FETCH, 6) > 0


async def test_fetches_follow_the_failover_of_a_dead_leader(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """A caught-up consumer (long polls in flight); the leader of a partition dies for good
    and leadership fails over to a live node; more records arrive. The consumer must find
    the new leader -- a failed connection to the old one has to make it refresh metadata,
    as Java's NetworkClient does on a disconnect -- and read on, with no gap and no
    duplicate. 2 x 10k records."""
    n = 10_000
    topic = "failover"
    async with fake_cluster(topic, seed=22) as kafka:
        sent = await produce(kafka, topic, n)
        reader = Reader(topic)
        async with Consumer(
            **kafka.client_config(),
            **{k: v for k, v in GROUP_SETTINGS.items() if "commit" not in k},
        ) as consumer:
            consumer.assign([TopicPartition(topic, p) for p in range(PARTITIONS)])
            with anyio.fail_after(20):
                await reader.read(consumer, n, seconds=0.2, commit=False)
            leaders = {kafka.leader(topic, p) for p in range(PARTITIONS)}
            # Caught up: a long-poll Fetch waits at every leader.
            await kafka.wait_until(lambda: all(kafka.in_flight(node) for node in leaders))
            dead = kafka.leader(topic, 0)
            kafka.kill(dead)  # its partitions elect live replicas
            kafka.reset_counters()
            more = await produce(kafka, topic, n, start=sent)
            started = anyio.current_time()
            with anyio.move_on_after(5):  # a refresh takes milliseconds; 5 s is "never"
                await reader.read(consumer, 2 * n, seconds=0.2, commit=False)
            seconds = anyio.current_time() - started
    t = tally("consumer, leader killed with failover (no restart)", more, reader.values)
    t.seconds = seconds
    t.extra.update(
        backend=anyio_backend[0],
        dead_node=dead,
        refused_connections=kafka.refused(dead),
        metadata_requests=kafka.requests()[METADATA],
    )
    t.report()
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    for p in range(PARTITIONS):
        assert reader.offsets[p] == list(range(more[p])), f"partition {p}"
    assert kafka.requests()[METADATA] >= 1  # the consumer refreshed to find the new leader
