"""Partitioners: Java-compatible murmur2 for keys, KIP-794 uniform sticky for null keys.

Choice order (as in the Java client): an explicit partition, else a custom partitioner,
else ``(murmur2(key) & 0x7fffffff) % num_partitions`` over *all* partitions for a key, else
the topic's sticky partition for a null key.

Sticky (KIP-794, "uniform sticky"): all null-key records of a topic go to one partition
until its batch is full (about ``batch_size`` bytes went there); then the next partition is
drawn uniformly at random among the partitions with a known leader (never the same one twice
in a row when there is a choice). This fills whole batches instead of spreading tiny batches
over every partition. Switching on a full batch, rather than when a batch is *created*
(KIP-480, which a linger-drained batch also triggers), gives every partition the same share
of bytes however fast its broker drains it.

Rack-aware (KIP-1123, ``partitioner_rack_aware`` with ``client_rack``): the draw is among the
available partitions whose leader is in the client's rack when there is one, else among all
available partitions, as Java's ``BuiltInPartitioner`` draws (keyed records are not
affected: their partition is the key's).
"""

from __future__ import annotations

import random
import struct
from collections.abc import Callable, Sequence
from typing import Final

from aiokafka_ng.protocol import speedups

__all__ = ["CustomPartitioner", "StickyPartitioner", "default_partition", "murmur2"]

#: aiokafka's signature: ``(key_bytes, all_partitions, available_partitions) -> partition``.
CustomPartitioner = Callable[[bytes | None, list[int], list[int]], int]

_M: Final = 0x5BD1E995
_MASK: Final = 0xFFFFFFFF


#: Little-endian uint32 word unpackers for keys up to 255 bytes (longer ones build their own).
_WORDS = [struct.Struct(f"<{n}I") for n in range(64)]


def _murmur2_py(data: bytes) -> int:
    """murmur2 in Python: one ``struct`` unpack for all words, 64-bit products masked."""
    length = len(data)
    h = (0x9747B28C ^ length) & _MASK
    nw = length >> 2
    if nw:
        # All 4-byte words in one unpack; per word the mix is folded into two lines (the
        # masks are where Java's int overflow would wrap).
        words = _WORDS[nw].unpack_from(data) if nw < 64 else struct.unpack_from(f"<{nw}I", data)
        for k in words:
            k = (k * _M) & _MASK
            k ^= k >> 24
            h = ((h * _M) ^ ((k * _M) & _MASK)) & _MASK
    rest = length & 3
    if rest:
        n4 = nw << 2
        # Java's switch falls through: 3 -> 2 -> 1, then multiplies.
        if rest == 3:
            h ^= data[n4 + 2] << 16
        if rest >= 2:
            h ^= data[n4 + 1] << 8
        h ^= data[n4]
        h = (h * _M) & _MASK
    h ^= h >> 13
    h = (h * _M) & _MASK
    h ^= h >> 15
    return h - 0x100000000 if h & 0x80000000 else h


#: Kafka's murmur2 (``org.apache.kafka.common.utils.Utils.murmur2``) as a signed int32: the
#: C kernel's where it is built (``_speedups.c``; the compiled build always has it: called
#: from interpreted code, 52 ns for an 8-byte key and 167 for 64 bytes, against 51 and 197
#: for the mypyc-compiled ``i64`` formulation it replaced), else :func:`_murmur2_py`, its one
#: Python reference (``test_speedups.py`` holds the two together and to the Java client's
#: values).
_C_MURMUR2 = speedups.kernel(__name__).murmur2
murmur2: Callable[[bytes], int] = _C_MURMUR2 if _C_MURMUR2 is not None else _murmur2_py


def default_partition(key: bytes, num_partitions: int) -> int:
    """The Java default for a non-null key: ``(murmur2(key) & 0x7fffffff) % num_partitions``."""
    return (murmur2(key) & 0x7FFFFFFF) % num_partitions


class StickyPartitioner:
    """KIP-794 uniform sticky choice for null keys: the accumulator keeps one sticky
    partition per topic and calls :meth:`pick` when that partition's batch is full.
    ``rack``: the client's rack when rack-aware (KIP-1123), else None."""

    __slots__ = ("_rng", "rack")

    def __init__(self, rng: random.Random | None = None, *, rack: str | None = None) -> None:
        # Seeded from the global generator: random.seed() in a test replays the choices.
        self._rng = rng or random.Random(random.getrandbits(64))
        self.rack = rack

    def pick(
        self,
        current: int,
        num_partitions: int,
        available: Sequence[int],
        leader_rack: Callable[[int], str | None] | None = None,
    ) -> int:
        """A uniformly random partition among ``available`` (all if none), not ``current``
        when there is a choice. Rack-aware, with ``leader_rack`` (partition -> its leader's
        rack): among the available partitions led in :attr:`rack`, if any."""
        choices = available if available else range(num_partitions)
        if self.rack is not None and leader_rack is not None and available:
            near = [p for p in available if leader_rack(p) == self.rack]
            if near:
                choices = near
        if len(choices) == 1:
            return choices[0]
        p = choices[self._rng.randrange(len(choices))]
        if p == current:
            # One redraw among the others keeps the choice uniform (1/n + 1/n * 1/(n-1)
            # = 1/(n-1)) and, unlike a retry loop, ends even when every entry is current.
            others = [c for c in choices if c != current]
            if others:
                p = others[self._rng.randrange(len(others))]
        return p
