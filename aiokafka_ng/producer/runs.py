"""Per-record work of the producer's bulk path (``send_batch``), one call per run.

Compiled with the other hot modules (``aiokafka_ng._native.COMPILED_MODULES``): the loops
here run once per record of a run, so interpreted they were a large share of a bulk send
(sizes and type checks about 0.15 us per record, grouping keys by partition 0.35 us); the
same file is the pure-Python twin, and the twin tests hold the two to each other.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from aiokafka_ng.producer.partitioner import _murmur2_py
from aiokafka_ng.protocol import speedups

__all__ = ["KeyedRun", "record_sizes", "run_stretches", "split_keyed_run"]

# The C kernel's versions of the two loops below, or None (then the loops run, interpreted:
# the compiled build always has the kernel; they are the reference, see
# ``aiokafka_ng.protocol.speedups``).
_KERNEL = speedups.kernel(__name__)
_C_RECORD_SIZES = _KERNEL.record_sizes
_C_SPLIT_KEYED = _KERNEL.split_keyed


def record_sizes(
    values: Sequence[Any], keys: Sequence[Any] | None, overhead: int
) -> list[int] | None:
    """What each record of a run charges to ``buffer_memory``: ``overhead`` plus the
    lengths of its key and value (``keys``, when given, as long as ``values``: the caller
    checked). None when a key or value is neither bytes nor None (the caller converts or
    refuses it, then asks again)."""
    c_record_sizes = _C_RECORD_SIZES
    if c_record_sizes is not None:
        return c_record_sizes(values, keys, overhead)
    sizes: list[int] = []
    if keys is None:
        for v in values:
            if v is None:
                sizes.append(overhead)
            elif isinstance(v, bytes):
                sizes.append(overhead + len(v))
            else:
                return None
        return sizes
    for i in range(len(values)):
        v = values[i]
        k = keys[i]
        size = overhead
        if v is not None:
            if not isinstance(v, bytes):
                return None
            size += len(v)
        if k is not None:
            if not isinstance(k, bytes):
                return None
            size += len(k)
        sizes.append(size)
    return sizes


class KeyedRun:
    """The records of a keyed run that go to one partition, in run order:
    ``keys``/``values``/``sizes`` their items, and either ``positions`` (when asked for:
    their places in the caller's run) or ``index`` (otherwise: their indexes in this run).
    Keys and values are lists, or columns when the run's were (the C kernel's split)."""

    __slots__ = ("index", "keys", "positions", "sizes", "values")

    def __init__(self) -> None:
        self.index: list[int] = []
        self.positions: list[int] = []
        self.keys: Sequence[bytes | None] = []
        self.values: Sequence[bytes | None] = []
        self.sizes: list[int] = []


def split_keyed_run(
    keys: Sequence[bytes | None],
    values: Sequence[bytes | None],
    sizes: list[int],
    num_partitions: int,
    positions: list[int] | None = None,
) -> dict[int, KeyedRun]:
    """Group a run of keyed records by default partition (-1: null key, for the sticky
    partition), keeping run order in each group. The bulk path's per-record work in one
    call (compiled: no interpreted step per record)."""
    groups: dict[int, KeyedRun] = {}
    c_split_keyed = _C_SPLIT_KEYED
    if c_split_keyed is not None:
        slot = -1
        for entry in c_split_keyed(keys, values, sizes, num_partitions, positions):
            if entry is not None:
                group = KeyedRun()
                if positions is None:
                    group.index = entry[0]
                else:
                    group.positions = entry[0]
                group.keys, group.values, group.sizes = entry[1], entry[2], entry[3]
                groups[slot] = group
            slot += 1
        return groups
    # Groups by partition + 1 in a list (a dict lookup per record cost more than the rest);
    # the dict returned is built once at the end, in partition order.
    by_partition: list[_Lists | None] = [None] * (num_partitions + 1)
    for i in range(len(keys)):
        key = keys[i]
        if key is None:
            slot = 0
        else:
            # The Python reference, like the rest of this loop (which runs only without the
            # kernel, whose split_keyed hashes with its own murmur2).
            h = _murmur2_py(key)
            slot = (h & 0x7FFFFFFF) % num_partitions + 1
        lists = by_partition[slot]
        if lists is None:
            lists = by_partition[slot] = _Lists()
        lists.where.append(i if positions is None else positions[i])
        lists.keys.append(key)
        lists.values.append(values[i])
        lists.sizes.append(sizes[i])
    for slot in range(num_partitions + 1):
        found = by_partition[slot]
        if found is not None:
            group = KeyedRun()
            if positions is None:
                group.index = found.where
            else:
                group.positions = found.where
            group.keys, group.values, group.sizes = found.keys, found.values, found.sizes
            groups[slot - 1] = group
    return groups


class _Lists:
    """One partition's records while :func:`split_keyed_run` groups them."""

    __slots__ = ("keys", "sizes", "values", "where")

    def __init__(self) -> None:
        self.where: list[int] = []
        self.keys: list[bytes | None] = []
        self.values: list[bytes | None] = []
        self.sizes: list[int] = []


def run_stretches(entries: list[Any], positions: list[int]) -> tuple[list[int], list[Any]]:
    """A decided batch's entries sorted out in one pass: the bounds of each stretch of one
    run's entries (``entries[start:stop]`` the same object, ``positions`` >= 0 there) as
    ``[start0, stop0, start1, stop1, ...]``, and the other entries (``positions`` -1: a
    future per record), in batch order. A run's records are placed in a batch as one
    stretch per ``place_run`` call, so a batch of 1,000 records from a few runs is a few
    stretches, not 1,000 steps."""
    bounds: list[int] = []
    others: list[Any] = []
    n = len(entries)
    j = 0
    while j < n:
        if positions[j] < 0:
            others.append(entries[j])
            j += 1
            continue
        run = entries[j]
        start = j
        j += 1
        while j < n and positions[j] >= 0 and entries[j] is run:
            j += 1
        bounds.append(start)
        bounds.append(j)
    return bounds, others
