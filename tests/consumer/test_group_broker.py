"""Consumer groups against the real local broker (Tansu), on asyncio and trio.

Tansu makes the first join of a group wait session_timeout_ms / 2, so these tests use a
2000 ms session timeout (and a 500 ms heartbeat) and keep the number of groups small.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, ConsumerRebalanceListener, TopicPartition
from aiokafka_ng.testing import LocalBroker
from tests.consumer.helpers import Row, by_partition, confluent_produce_async
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio


def group_timing(broker: Any) -> dict[str, int]:
    """Short sessions on Tansu (it holds a new group's first join for half the session
    timeout); Kafka's defaults-like 10 s elsewhere: Kafka does not hold the join here
    (group.initial.rebalance.delay.ms=0 in the test cluster) and a 2 s session on a CI
    machine at load ~18 can expire members mid-test and churn the group."""
    if isinstance(broker, LocalBroker):
        return {"session_timeout_ms": 2000, "heartbeat_interval_ms": 500}
    return {"session_timeout_ms": 10000, "heartbeat_interval_ms": 1000}


class Recorder(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    async def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))


async def _wait_assignment(
    consumer: Consumer, predicate: Any, seconds: float = 60.0
) -> frozenset[TopicPartition]:
    """Poll (as an application does, keeping the member alive) until ``predicate`` holds.

    Bounded, not timed: on the 3-node Kafka cluster a new group waits out
    ``group.initial.rebalance.delay.ms`` (3 s) and a pattern's topics must reach every broker's
    metadata first; full CI-style runs at a load average of ~18 went past 20 s twice."""
    with anyio.fail_after(seconds):
        while True:
            await consumer.getmany(timeout_ms=100)
            if consumer.statistics().group_state == "stable" and predicate(consumer.assignment()):
                return consumer.assignment()


@pytest.mark.parametrize("strategy", ["range", "cooperative-sticky"])
async def test_two_members_split_then_one_takes_all(kafka_broker: Any, strategy: str) -> None:
    topic = topic_name("grp")
    group = topic_name("g")
    rows: list[Row] = [(i % 4, None, b"%d" % i, [], 1) for i in range(200)]
    await confluent_produce_async(kafka_broker.bootstrap_servers, topic, rows)
    everything = {TopicPartition(topic, p) for p in range(4)}
    config = dict(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        partition_assignment_strategy=[strategy],
        **group_timing(kafka_broker),
    )
    listener_a, listener_b = Recorder(), Recorder()
    async with Consumer(**config) as a:
        a.subscribe([topic], listener=listener_a)
        assert await _wait_assignment(a, lambda s: s == everything) == everything
        async with Consumer(**config) as b:
            b.subscribe([topic], listener=listener_b)
            # Both members poll while the group rebalances to two members.
            async with anyio.create_task_group() as tg:
                tg.start_soon(_wait_assignment, a, lambda s: len(s) == 2)
                await _wait_assignment(b, lambda s: len(s) == 2)
            share_a, share_b = a.assignment(), b.assignment()
            assert share_a | share_b == everything and not share_a & share_b
            if strategy == "cooperative-sticky":
                # Incremental: a gave up exactly b's share and kept its own all along.
                assert ("revoked", share_b) in listener_a.events
                assert all(
                    e[1] <= everything - share_a for e in listener_a.events if e[0] == "revoked"
                )
        # b left the group on close: a gets everything back.
        assert await _wait_assignment(a, lambda s: s == everything) == everything
        assert ("assigned", frozenset(share_b)) in listener_a.events or strategy == "range"
    assert listener_b.events[-1] == ("revoked", frozenset(share_b))


async def test_committed_offsets_survive_restart(kafka_broker: Any) -> None:
    topic = topic_name("commit")
    group = topic_name("g")
    rows: list[Row] = [(i % 4, None, b"%d" % i, [], 1) for i in range(400)]
    await confluent_produce_async(kafka_broker.bootstrap_servers, topic, rows)
    base = dict(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id=group,
        auto_offset_reset="earliest",
        max_poll_records=40,
        **group_timing(kafka_broker),
    )
    # 1) Manual commits: read, commit, read an uncommitted tail, crash-stop (no commit).
    async with Consumer(topic, enable_auto_commit=False, **base) as c1:
        first: list[Any] = []
        with anyio.fail_after(20):
            while len(first) < 120:
                for records in (await c1.getmany(timeout_ms=200)).values():
                    first.extend(records)
        await c1.commit()
        committed = {tp: await c1.position(tp) for tp in c1.assignment()}
        tail: list[Any] = []
        with anyio.fail_after(20):
            while not tail:
                for records in (await c1.getmany(timeout_ms=200)).values():
                    tail.extend(records)
        for tp, offset in committed.items():
            assert await c1.committed(tp) == offset
    # 2) A restarted member starts exactly at the committed offsets: the uncommitted tail
    #    is delivered again, nothing before it, nothing lost. Auto-commit on close.
    async with Consumer(topic, **base) as c2:
        second: list[Any] = []
        with anyio.fail_after(60):
            while len(first) + len(second) < 400:
                for records in (await c2.getmany(timeout_ms=200)).values():
                    second.extend(records)
        starts = {tp: offsets[0] for tp, offsets in by_partition(second).items()}
        assert starts == {tp: o for tp, o in committed.items() if o < 100}
        assert {(r.partition, r.offset) for r in tail} <= {(r.partition, r.offset) for r in second}
        assert sorted((r.partition, r.offset) for r in first + second) == sorted(
            (p, o) for p in range(4) for o in range(100)
        )
    # 3) Auto-commit committed everything on close: a third member gets nothing again.
    async with Consumer(topic, **base) as c3:
        await _wait_assignment(c3, lambda s: len(s) == 4)
        assert await c3.getmany(timeout_ms=300) == {}
        for p in range(4):
            assert await c3.committed(TopicPartition(topic, p)) == 100


async def test_pattern_poll_timeout_rejoin_and_unsubscribe(kafka_broker: Any) -> None:
    prefix = topic_name("pat")
    for suffix in ("a", "b"):
        await confluent_produce_async(
            kafka_broker.bootstrap_servers, f"{prefix}-{suffix}", [(0, None, b"x", [], 1)]
        )
    listener = Recorder()
    async with Consumer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id=topic_name("g"),
        max_poll_interval_ms=1200,
        **group_timing(kafka_broker),
    ) as consumer:
        consumer.subscribe(pattern=f"{prefix}-.*", listener=listener)
        # Two topics of four partitions each match the pattern.
        assert len(await _wait_assignment(consumer, lambda s: len(s) == 8)) == 8
        assert consumer.subscription() == {f"{prefix}-a", f"{prefix}-b"}
        generation = consumer.statistics().generation
        # The application stops polling: the member leaves the group on its own (bounded
        # generously: on Kafka under load the poll timer and LeaveGroup took over 10 s).
        with anyio.fail_after(30):
            # Observed from outside, as a user would; there is no event for "left".
            while consumer.statistics().group_state == "stable":  # noqa: ASYNC110
                await anyio.sleep(0.1)
        assert consumer.assignment() == frozenset()
        # Polling again rejoins.
        assert len(await _wait_assignment(consumer, lambda s: len(s) == 8)) == 8
        assert (consumer.statistics().generation or 0) > (generation or 0)
        # unsubscribe() revokes (listener called) and leaves the group.
        events = len(listener.events)
        consumer.unsubscribe()
        assert consumer.assignment() == frozenset()
        with anyio.fail_after(30):
            while consumer.statistics().member_id:  # noqa: ASYNC110
                await anyio.sleep(0.05)
        assert listener.events[events:] == [("revoked", frozenset(listener.events[-2][1]))]


async def test_manual_assignment_commits_with_group_id(kafka_broker: Any) -> None:
    topic = topic_name("manual")
    rows: list[Row] = [(0, None, b"%d" % i, [], 1) for i in range(30)]
    await confluent_produce_async(kafka_broker.bootstrap_servers, topic, rows)
    tp = TopicPartition(topic, 0)
    config = dict(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id=topic_name("g"),
        auto_offset_reset="earliest",
    )
    received: list[int] = []

    async def iterate(consumer: Consumer) -> None:
        async for record in consumer:
            received.append(record.offset)  # noqa: PERF401 (the loop must end on close)
        received.append(-1)  # the loop ended because the consumer closed

    async with anyio.create_task_group() as tg:  # noqa: SIM117 (the nesting is the point)
        async with Consumer(**config) as consumer:
            consumer.assign([tp])
            got = await consumer.getmany(tp, timeout_ms=5000, max_records=10)
            assert [r.offset for r in got[tp]] == list(range(10))
            await consumer.commit({tp: 4})  # explicit offsets
            assert await consumer.committed(tp) == 4
            await consumer.commit()  # the positions
            assert await consumer.committed(tp) == 10
            tg.start_soon(iterate, consumer)
            with anyio.fail_after(10):
                while len(received) < 20:  # noqa: ASYNC110
                    await anyio.sleep(0.01)
        # Leaving the block woke the iteration waiting in the other task, and it ended.
    assert received == [*range(10, 30), -1]
    # Auto-commit on close committed what was handed out; a new consumer resumes there.
    async with Consumer(**config) as consumer:
        consumer.assign([tp])
        assert await consumer.position(tp) == 30


async def test_auto_commit_on_interval_commits_what_was_processed(kafka_broker: Any) -> None:
    topic = topic_name("auto")
    rows: list[Row] = [(0, None, b"%d" % i, [], 1) for i in range(20)]
    await confluent_produce_async(kafka_broker.bootstrap_servers, topic, rows)
    tp = TopicPartition(topic, 0)
    async with Consumer(
        bootstrap_servers=kafka_broker.bootstrap_servers,
        group_id=topic_name("g"),
        auto_offset_reset="earliest",
        auto_commit_interval_ms=100,
    ) as consumer:
        consumer.assign([tp])
        got = await consumer.getmany(tp, timeout_ms=5000, max_records=10)
        assert len(got[tp]) == 10
        # The next poll marks those 10 as processed; the interval commit picks them up.
        await consumer.getmany(tp, timeout_ms=0, max_records=5)
        with anyio.fail_after(10):
            while await consumer.committed(tp) != 10:  # noqa: ASYNC110 (broker-side state)
                await anyio.sleep(0.05)
