"""Our producer in the scenario that broke librdkafka's idempotent stream in CI.

librdkafka (idempotent, 5 in flight): a Produce answered NOT_LEADER_OR_FOLLOWER after its
partition moved, and the new leader's connection sent the *next* batch before the failed one
was queued again; the broker answered OUT_OF_ORDER_SEQUENCE_NUMBER and librdkafka had to
bump its epoch and re-send, writing duplicates. Here the same moves hit our producer while
several batches of the moved partition are in flight: the ones the old leader refuses must
reach the new leader before any later batch, so nothing is lost, duplicated or reordered and
the broker never sees a sequence gap (no producer id reset).
"""

from __future__ import annotations

import anyio
import anyio.lowlevel
import pytest

from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.partitioner import default_partition
from aiokafka_ng.testing import ClusterSimulator
from tests.helpers import topic_name
from tests.reliability.helpers import (
    PRODUCE,
    read_back,
    record_count,
    simulated_cluster,
    tally,
    value,
)

# broker: it starts its own brokers, no fixture says so (see tests/conftest.py)
pytestmark = [pytest.mark.anyio, pytest.mark.broker]

PARTITIONS = 4  # Tansu auto-creates topics with 4 partitions
NOT_LEADER = 6
KEYS = [f"key-{i}".encode() for i in range(16)]
MOVES = 12


async def move_under_load(sim: ClusterSimulator, topic: str, done: anyio.Event) -> None:
    """``MOVES`` times: wait until a connection has 3+ requests awaiting answers, move a
    partition its node leads, then wait for two more requests naming that partition."""
    busy: list[int] = []

    def pipelined() -> bool:
        busy[:] = [
            p
            for c in sim.connection_list()
            if c.in_flight >= 3
            for p in range(PARTITIONS)
            if sim.leader(topic, p) == c.node.node_id
        ]
        return bool(busy)

    for _ in range(MOVES):
        await sim.wait_until(pipelined, within=30)
        partition = busy[0]
        before = len(sim.partition_request_times(PRODUCE, topic, partition))
        sim.move_leader(topic, partition)
        # The partition's next batches went somewhere: refused by the old leader (the
        # scenario) or, if a metadata refresh for an earlier move came first, to the new one.
        await sim.wait_until(
            lambda p=partition, n=before: (
                len(sim.partition_request_times(PRODUCE, topic, p)) >= n + 2
            ),
            within=30,
        )
    done.set()


async def test_idempotent_keeps_order_when_leaders_move_under_in_flight_batches(
    anyio_backend: str,
) -> None:
    """Idempotent, 5 in flight, keyed records in small batches; every node answers 20 ms
    late so batches pipeline, and 12 times a partition moves while its leader has 3+
    requests in flight. 0 lost, 0 duplicated, 0 reordered per partition, no producer id
    reset. At least 20k records on asyncio, 8k on trio (it sends until the moves are done)."""
    floor = record_count(anyio_backend, 20_000, 8_000)
    topic = topic_name("move-order")
    partition_of = {key: default_partition(key, PARTITIONS) for key in KEYS}
    assert len(set(partition_of.values())) == PARTITIONS  # every partition gets keys
    async with simulated_cluster(seed=17) as (broker, sim):
        async with Producer(
            bootstrap_servers=sim.bootstrap_servers,
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,
            linger_ms=2,
            batch_size=1024,  # ~40 records a batch: many batches per partition in flight
            retry_backoff_ms=10,
            retry_backoff_max_ms=50,
        ) as producer:
            await producer.partitions_for(topic)
            for node in sim.nodes:
                sim.delay(node, 20)
            sent = dict.fromkeys(range(PARTITIONS), 0)
            futures = []
            done = anyio.Event()
            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(move_under_load, sim, topic, done)
                    i = 0
                    # keep sending past the last move, so it too has batches behind it
                    while not done.is_set() or i < floor:
                        key = KEYS[i % len(KEYS)]
                        p = partition_of[key]
                        futures.append(await producer.send(topic, value(p, sent[p]), key=key))
                        sent[p] += 1
                        i += 1
                        if i % 200 == 0:
                            await anyio.lowlevel.checkpoint()  # let the mover look at the pipeline
                    await producer.flush()
            stats = producer.statistics()
        sim.clear_faults()
        got = await read_back(broker.bootstrap_servers, topic, range(PARTITIONS), i)
    t = tally("idempotent, 5 in flight, moves under in-flight batches", sent, got)
    t.extra.update(
        backend=anyio_backend,
        moves=sim.leader_moves,
        not_leader=sim.errors(PRODUCE, NOT_LEADER),
        max_in_flight=sim.max_in_flight,
        retries=stats["retries"],
    )
    t.report()
    assert [e for f in futures if (e := f.exception()) is not None] == []
    # the producer put every key where the partitioner says (the values were numbered so)
    assert all(
        f.result().partition == partition_of[KEYS[j % len(KEYS)]] for j, f in enumerate(futures)
    )
    assert (t.lost, t.duplicated, t.reordered) == (0, 0, 0)
    assert stats["producer_id_resets"] == 0  # the broker never saw a sequence gap
    # The first move at least is refused (no metadata refresh can precede it).
    assert sim.leader_moves == MOVES and sim.errors(PRODUCE, NOT_LEADER) > 0
    assert sim.max_in_flight >= 3
