"""Partitioners: Java known answers for murmur2, KIP-794 sticky behaviour."""

from __future__ import annotations

import random

from aiokafka.partitioner import murmur2 as aiokafka_murmur2
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka_ng.producer.partitioner import StickyPartitioner, default_partition, murmur2


def test_murmur2_java_known_answers() -> None:
    # org.apache.kafka.common.utils.UtilsTest#testMurmur2
    assert murmur2(b"21") == -973932308
    assert murmur2(b"foobar") == -790332482
    assert murmur2(b"a-little-bit-long-string") == -985981536
    assert murmur2(b"a-little-bit-longer-string") == -1486304829
    assert murmur2(b"lkjh234lh9fiuh90y23oiuhsafujhadof229phr9h19h89h8") == -58897971
    assert murmur2(b"abc") == 479470107


def test_default_partition_is_positive_modulo() -> None:
    # -973932308 & 0x7fffffff = 1173551340; % 6 == 0
    assert default_partition(b"21", 6) == (1173551340 % 6)
    assert default_partition(b"foobar", 4) == ((-790332482 & 0x7FFFFFFF) % 4)


@settings(max_examples=200)
@given(st.binary(max_size=300))  # past 255 bytes too (the unpacker cache ends there)
def test_murmur2_matches_aiokafka(data: bytes) -> None:
    # aiokafka's implementation returns the unsigned 32-bit value.
    assert murmur2(data) & 0xFFFFFFFF == aiokafka_murmur2(data)


def test_pick_never_repeats_when_there_is_a_choice() -> None:
    sp = StickyPartitioner(rng=random.Random(7))
    current = 2
    for _ in range(200):
        nxt = sp.pick(current, 6, [0, 1, 2, 3, 4, 5])
        assert nxt != current
        current = nxt


def test_pick_only_available_partitions_and_uniform() -> None:
    sp = StickyPartitioner(rng=random.Random(1))
    counts: dict[int, int] = {}
    for _ in range(3000):
        p = sp.pick(-1, 6, [1, 3, 5])
        counts[p] = counts.get(p, 0) + 1
    assert set(counts) == {1, 3, 5}
    assert min(counts.values()) > 800  # roughly uniform


def test_pick_single_or_no_available_partition() -> None:
    sp = StickyPartitioner()
    assert {sp.pick(0, 1, [0]) for _ in range(10)} == {0}
    assert {sp.pick(-1, 3, []) for _ in range(300)} == {0, 1, 2}  # no leader known: any


def test_pick_ends_when_every_choice_is_current() -> None:
    # A retry loop never ended here (hypothesis found it); one redraw does.
    sp = StickyPartitioner(rng=random.Random(3))
    assert sp.pick(5, 6, [5, 5]) == 5


def test_pick_away_from_current_is_uniform() -> None:
    sp = StickyPartitioner(rng=random.Random(11))
    counts = {0: 0, 1: 0, 2: 0, 3: 0}
    for _ in range(4000):
        counts[sp.pick(0, 4, [0, 1, 2, 3])] += 1
    assert counts[0] == 0
    assert min(counts[p] for p in (1, 2, 3)) > 1150  # ~1333 each


def test_rack_aware_pick_stays_in_the_clients_rack() -> None:
    # KIP-1123: leaders 0->a, 1->b, 2->a, 3->c, 4->b, 5->a; the client is in rack b.
    leaders = "abacba"
    sp = StickyPartitioner(rng=random.Random(5), rack="b")
    picks = {sp.pick(-1, 6, range(6), lambda p: leaders[p]) for _ in range(300)}
    assert picks == {1, 4}
    # Away from the current one when the rack has a choice.
    assert {sp.pick(1, 6, range(6), lambda p: leaders[p]) for _ in range(50)} == {4}


def test_rack_aware_pick_falls_back_to_every_available_partition() -> None:
    sp = StickyPartitioner(rng=random.Random(9), rack="z")  # no leader in rack z
    picks = {sp.pick(-1, 6, [0, 2, 3], lambda p: "abacba"[p]) for _ in range(300)}
    assert picks == {0, 2, 3}
    # A leader without a rack is in no rack, and no rack-aware draw without racks to read.
    assert {sp.pick(-1, 3, [0, 1, 2], lambda p: None) for _ in range(300)} == {0, 1, 2}
    assert {sp.pick(-1, 3, [0, 1, 2]) for _ in range(300)} == {0, 1, 2}


def test_without_a_rack_the_leaders_racks_do_not_matter() -> None:
    sp = StickyPartitioner(rng=random.Random(4))
    assert {sp.pick(-1, 6, range(6), lambda p: "abacba"[p]) for _ in range(300)} == set(range(6))
