"""One placement rule: a bulk run lands where one ``add`` per record puts it.

``Accumulator.place`` is the rule for one record (partition, tail batch, a full batch
closed and, for the sticky partition, a switch, the future bound, the memory counted);
``place_run`` applies it to a run a batch at a time. Two engines with the same seeded
sticky picker and the same records already queued are given the same records, one by
``ProducerEngine.add`` per record and one by ``ProducerEngine.add_run`` (the bulk path):
their batches must hold the same records in the same partitions, in the same order, with
the same memory and the same futures in the same places. The records queued first (with
partitions of their own, some large) leave open batches half full or nearly full, so a
run meets every case: a tail that takes part of it, one that takes none of it, a sticky
switch onto a partition whose open batch is full.
"""

from __future__ import annotations

import random
from types import MappingProxyType
from typing import Any

from hypothesis import example, given, settings
from hypothesis import strategies as st

from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.producer.batch import ProducerBatch, QueuedRun
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.future import BatchDelivery, Delivery, DeliveryFuture
from aiokafka_ng.producer.partitioner import StickyPartitioner
from aiokafka_ng.protocol.records import iter_batches

TS = 1_700_000_000_000
SIZE = 100  # what each record is charged (the test's own figure: memory is only counted)


def engine(partitions: int, batch_size: int, seed: int) -> ProducerEngine:
    built = ProducerEngine(
        ProducerConfig(
            bootstrap_servers="127.0.0.1:9092",
            linger_ms=0,
            batch_size=batch_size,
            enable_idempotence=False,
        ),
        clock=lambda: 1000.0,
        sticky=StickyPartitioner(random.Random(seed)),
    )
    parts = {p: PartitionMetadata(p, leader=1) for p in range(partitions)}
    built.update_metadata(
        ClusterMetadata(
            brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
            topics=MappingProxyType({"t": TopicMetadata("t", partitions=MappingProxyType(parts))}),
        )
    )
    return built


def batches(e: ProducerEngine) -> list[ProducerBatch]:
    """Everything the engine holds, drained (a flush makes every batch ready)."""
    e.begin_flush()
    out: list[ProducerBatch] = []
    while True:
        drained, _ = e.drain(1, 1000.0)
        if not drained:
            return sorted(out, key=lambda b: b.partition)  # stable: order per partition kept
        out += drained


def layout(e: ProducerEngine, numbered: dict[int, int]) -> list[tuple[Any, ...]]:
    """Per batch: its partition, records, memory, and its entries as record numbers
    (``numbered``: id of a future -> its record's number; a run's entries by position)."""
    out = []
    for b in batches(e):
        records = [
            (r.key, r.value, r.timestamp) for x in iter_batches(b.close()) for r in x.records()
        ]
        if b.positions is None:
            entries = [numbered[id(f)] for f in b.futures]
        else:
            entries = [
                numbered[id(f)] if pos < 0 else ("run", pos)
                for f, pos in zip(b.futures, b.positions, strict=True)
            ]
        out.append((b.partition, records, b.memory, entries))
    return out


RECORD = st.binary(max_size=150)


@settings(max_examples=150, deadline=None, database=None)
@given(
    partitions=st.integers(1, 4),
    batch_size=st.sampled_from([120, 300, 1000]),
    seed=st.integers(0, 2**32),
    queued=st.lists(st.tuples(st.integers(0, 3), RECORD), max_size=6),
    run=st.lists(RECORD, min_size=1, max_size=40),
    mode=st.sampled_from(["sticky", "partition", "keyed"]),
    shared=st.booleans(),
)
# The sticky partition's open batch is full, and so is the one it switches to: the record
# switches once and takes a new batch there (a run switched again, before the one rule).
@example(
    partitions=2, batch_size=120, seed=1, queued=[(0, b"x" * 150), (1, b"y" * 150)],
    run=[b"a", b"b", b"c"], mode="sticky", shared=False,
)  # fmt: skip
def test_a_run_lands_where_one_add_per_record_puts_it(
    partitions: int,
    batch_size: int,
    seed: int,
    queued: list[tuple[int, bytes]],
    run: list[bytes],
    mode: str,
    shared: bool,
) -> None:
    one, bulk = engine(partitions, batch_size, seed), engine(partitions, batch_size, seed)
    numbered: dict[int, int] = {}
    number = 0

    def future() -> DeliveryFuture:
        nonlocal number
        fut = DeliveryFuture("t", TS)
        numbered[id(fut)] = number
        number += 1
        return fut

    for e in (one, bulk):
        number = 0
        for partition, value in queued:
            assert e.try_reserve(SIZE)
            e.add("t", partition % partitions, None, value, None, TS, SIZE, future())
    # Keys without None: a keyed run is split by partition, each part keeping send order.
    keys = [b"k%d" % i for i in range(len(run))] if mode == "keyed" else None
    partition = partitions - 1 if mode == "partition" else -1
    first = number
    for i, value in enumerate(run):
        assert one.try_reserve(SIZE)
        one.add("t", partition, None if keys is None else keys[i], value, None, TS, SIZE, future())
    assert bulk.try_reserve(SIZE * len(run))
    futures: list[Delivery[Any]]
    whole: BatchDelivery | None = None
    if shared:
        whole = BatchDelivery("t", TS, None, len(run))
        futures = [whole] * len(run)
    else:
        number = first
        futures = [future() for _ in run]
    positions = list(range(len(run))) if shared else None
    sizes = [SIZE] * len(run)
    bulk.add_run("t", QueuedRun(partition, TS, keys, run, sizes, futures, whole, positions))

    expected = layout(one, numbered)
    if shared:
        # A run's records are entries of its BatchDelivery, by position: record first + i.
        expected = [
            (p, records, memory, [("run", n - first) if n >= first else n for n in entries])
            for p, records, memory, entries in expected
        ]
    assert layout(bulk, numbered) == expected
