"""Our producer in the scenario that broke librdkafka's idempotent stream in CI.

librdkafka (idempotent, 5 in flight): a Produce answered NOT_LEADER_OR_FOLLOWER after its
partition moved, and the new leader's connection sent the *next* batch before the failed one
was queued again; the broker answered OUT_OF_ORDER_SEQUENCE_NUMBER and librdkafka had to
bump its epoch and re-send, writing duplicates. Here the same moves hit our producer while
several batches of the moved partition are in flight: the ones the old leader refuses must
reach the new leader before any later batch, so nothing is lost, duplicated or reordered and
the broker never sees a sequence gap (no producer id reset).

On a FakeKafka of 3 nodes, on virtual time; its observers see what is in flight on each
connection and what the old leaders refused.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.producer import Producer
from aiokafka_ng.producer.partitioner import default_partition
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.reliability.helpers import MISPLACED, record_count, tally, unpack, value

pytestmark = pytest.mark.anyio

PARTITIONS = 4
PRODUCE, NOT_LEADER = 0, 6
KEYS = [f"key-{i}".encode() for i in range(16)]
MOVES = 12
TOPIC = "move-order"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def produce_requests(kafka: FakeKafka, partition: int) -> int:
    """Produce requests that named ``partition`` so far, at any node."""
    return len(kafka.partition_request_times(PRODUCE, TOPIC, partition))


async def move_under_load(kafka: FakeKafka, done: anyio.Event) -> int:
    """``MOVES`` times: wait until a connection has 3+ requests awaiting answers, move a
    partition its node leads, then wait for two more requests naming that partition."""
    busy: list[int] = []

    def pipelined() -> bool:
        busy[:] = [p for p in range(PARTITIONS) if kafka.in_flight(kafka.leader(TOPIC, p)) >= 3]
        return bool(busy)

    moves = 0
    for _ in range(MOVES):
        await kafka.wait_until(pipelined, within=30)
        partition = busy[0]
        before = produce_requests(kafka, partition)
        kafka.move_leader(TOPIC, partition)
        moves += 1
        # The partition's next batches went somewhere: refused by the old leader (the
        # scenario) or, if a metadata refresh for an earlier move came first, to the new one.
        await kafka.wait_until(
            lambda p=partition, n=before: produce_requests(kafka, p) >= n + 2,
            within=30,
        )
    done.set()
    return moves


async def test_idempotent_keeps_order_when_leaders_move_under_in_flight_batches(
    anyio_backend: tuple[str, dict[str, Any]],
) -> None:
    """Idempotent, 5 in flight, keyed records in small batches; every node answers 20 ms
    late so batches pipeline, and 12 times a partition moves while its leader has 3+
    requests in flight. 0 lost, 0 duplicated, 0 reordered per partition, no producer id
    reset. At least 20k records on asyncio, 8k on trio (it sends until the moves are done)."""
    backend = anyio_backend[0]
    floor = record_count(backend, 20_000, 8_000)
    partition_of = {key: default_partition(key, PARTITIONS) for key in KEYS}
    assert len(set(partition_of.values())) == PARTITIONS  # every partition gets keys
    moves = 0
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(TOPIC, PARTITIONS, replication_factor=3)
        async with Producer(
            **kafka.client_config(),
            enable_idempotence=True,
            max_in_flight_requests_per_connection=5,
            linger_ms=2,
            batch_size=1024,  # ~40 records a batch: many batches per partition in flight
            retry_backoff_ms=10,
            retry_backoff_max_ms=50,
        ) as producer:
            await producer.partitions_for(TOPIC)
            for node in kafka.nodes:
                kafka.delay(node, 20)
            sent = dict.fromkeys(range(PARTITIONS), 0)
            futures = []
            done = anyio.Event()

            async def mover() -> None:
                nonlocal moves
                moves = await move_under_load(kafka, done)

            with anyio.fail_after(120):
                async with anyio.create_task_group() as tg:
                    tg.start_soon(mover)
                    i = 0
                    # keep sending past the last move, so it too has batches behind it
                    while not done.is_set() or i < floor:
                        key = KEYS[i % len(KEYS)]
                        p = partition_of[key]
                        futures.append(await producer.send(TOPIC, value(p, sent[p]), key=key))
                        sent[p] += 1
                        i += 1
                        if i % 20 == 0:
                            # The send rate: 20 records per virtual millisecond, faster than
                            # the 20 ms answers drain them, so batches queue and pipeline.
                            await anyio.sleep(0.001)
                    await producer.flush()
            stats = producer.statistics()
        kafka.clear_faults()
        got = {
            p: [
                seq if part == p else MISPLACED
                for part, seq in (unpack(r.value or b"") for r in kafka.records(TOPIC, p))
            ]
            for p in range(PARTITIONS)
        }
    t = tally("idempotent, 5 in flight, moves under in-flight batches", sent, got)
    t.extra.update(
        backend=backend,
        moves=moves,
        not_leader=kafka.errors(PRODUCE, NOT_LEADER),
        max_in_flight=kafka.max_in_flight(),
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
    assert moves == MOVES and kafka.errors(PRODUCE, NOT_LEADER) > 0
    assert kafka.max_in_flight() >= 3
