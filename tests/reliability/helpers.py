"""Shared pieces of the reliability suite: a 3-node FakeKafka, numbered records, reading a
topic back, and the lost/duplicated/reordered tally each scenario prints.

Records are 16 bytes: ``>QQ`` of (partition, sequence number within that partition), so a
partition's log read back must be exactly ``0, 1, 2, ...`` for "0 lost, 0 duplicated,
0 reordered". :func:`logged` reads the fake's logs themselves (no client in between), so
what is counted is what the cluster stored.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import AsyncIterator, Iterable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.testing import FakeKafka

PRODUCE, FETCH, LIST_OFFSETS, METADATA = 0, 1, 2, 3
PARTITIONS = 4
_VALUE = struct.Struct(">QQ")
MISPLACED = 2**62  # stands for a record read from a partition it was not sent to


def value(partition: int, seq: int) -> bytes:
    return _VALUE.pack(partition, seq)


def unpack(data: bytes) -> tuple[int, int]:
    partition, seq = _VALUE.unpack(data)
    return int(partition), int(seq)


def record_count(backend: str, full: int, small: int) -> int:
    """The full count on asyncio; a smaller one on trio (the suite must stay fast)."""
    return full if backend == "asyncio" else small


@asynccontextmanager
async def fake_cluster(topic: str, brokers: int = 3, seed: int = 1) -> AsyncIterator[FakeKafka]:
    """A FakeKafka of ``brokers`` nodes, in memory, with ``topic`` (``PARTITIONS``
    partitions, each replicated on every node, so a killed leader fails over)."""
    async with FakeKafka(brokers, tcp=False, seed=seed) as kafka:
        kafka.create_topic(topic, PARTITIONS, replication_factor=brokers)
        yield kafka


def logged(kafka: FakeKafka, topic: str) -> dict[int, list[int]]:
    """Each partition's sequence numbers in log order, read from the fake's logs (a record
    in the wrong partition counts as never sent)."""
    got: dict[int, list[int]] = {}
    for p in range(PARTITIONS):
        seqs = (unpack(r.value or b"") for r in kafka.records(topic, p))
        got[p] = [seq if part == p else MISPLACED for part, seq in seqs]
    return got


@dataclass
class Tally:
    """Per-scenario figures: what was sent against what a partition's log holds."""

    name: str
    records: int = 0
    lost: int = 0
    duplicated: int = 0
    reordered: int = 0
    seconds: float = 0.0
    extra: dict[str, object] = field(default_factory=dict)

    def report(self) -> str:
        extra = "".join(f" {k}={v}" for k, v in self.extra.items())
        line = (
            f"[reliability] {self.name}: records={self.records} lost={self.lost} "
            f"duplicated={self.duplicated} reordered={self.reordered} "
            f"time={self.seconds:.2f}s{extra}"
        )
        print(line)
        return line


def tally(name: str, sent: dict[int, int], got: dict[int, list[int]]) -> Tally:
    """Compare each partition's sequence numbers read back with ``0 .. sent[p]-1``.

    lost: sent numbers never read; duplicated: reads beyond the first of a number;
    reordered: first reads of a number smaller than an earlier first read (an overtaking).
    A number that was never sent (a corrupted or misrouted record) counts as reordered.
    """
    t = Tally(name, records=sum(sent.values()))
    for partition, count in sent.items():
        seen: set[int] = set()
        highest = -1
        for seq in got.get(partition, []):
            if seq in seen:
                t.duplicated += 1
                continue
            seen.add(seq)
            if seq < highest or seq >= count:
                t.reordered += 1
            highest = max(highest, seq)
        t.lost += sum(1 for seq in range(count) if seq not in seen)
    return t


def broken_replays(seqs: list[int]) -> int:
    """How many times a partition's log breaks the shape that re-sending whole batches in
    order allows: each step is either the next number, or a jump back to some ``x`` that
    then replays ``x .. highest`` in full before anything new (a batch written twice, its
    first answer lost). With one request in flight this must be 0 (Sarama #2619 breaks it).
    """
    broken = 0
    highest = -1
    replaying = False
    prev = -1
    for seq in seqs:
        if replaying and seq != prev + 1:
            if seq > prev:  # left a replay before reaching the newest record
                broken += 1
            replaying = seq <= highest
        elif not replaying and seq != highest + 1:
            if seq > highest:  # skipped ahead: something in between is missing or late
                broken += 1
            replaying = seq <= highest
        if replaying and seq == highest:
            replaying = False
        highest = max(highest, seq)
        prev = seq
    return broken


async def read_back(
    bootstrap: str, topic: str, partitions: Iterable[int], expect: int, seconds: float = 60
) -> dict[int, list[int]]:
    """Every record of ``topic`` as (partition -> sequence numbers in log order), read with
    our Consumer straight from ``bootstrap``; stops at the high watermarks once at least
    ``expect`` records were read (duplicates count, so ``expect`` is a floor)."""
    parts = sorted(partitions)
    got: dict[int, list[int]] = {p: [] for p in parts}
    async with Consumer(
        bootstrap_servers=bootstrap,
        auto_offset_reset="earliest",
        fetch_max_bytes=8 * 1024 * 1024,
        max_partition_fetch_bytes=4 * 1024 * 1024,
    ) as consumer:
        tps = [TopicPartition(topic, p) for p in parts]
        consumer.assign(tps)
        count = 0
        with anyio.fail_after(seconds):
            while True:
                batch = await consumer.getmany(timeout_ms=300, max_records=100_000)
                for tp, records in batch.items():
                    out = got[tp.partition]
                    for r in records:
                        partition, seq = unpack(r.value)
                        # A record in the wrong partition is counted as never sent.
                        out.append(seq if partition == tp.partition else MISPLACED)
                    count += len(records)
                if count >= expect and not batch:
                    done = True
                    for tp in tps:
                        hw = consumer.highwater(tp)
                        if hw is None or await consumer.position(tp) < hw:
                            done = False
                    if done:
                        return got


class Stopwatch:
    def __init__(self) -> None:
        self.start = time.perf_counter()

    @property
    def seconds(self) -> float:
        return time.perf_counter() - self.start


def rss_bytes() -> int:
    """Resident set size of this process, from /proc/self/statm (pages)."""
    with open("/proc/self/statm") as f:
        resident = int(f.read().split()[1])
    return resident * os.sysconf("SC_PAGE_SIZE")
