"""Compression codecs: wire formats, round trips, size limits, garbage input."""

from __future__ import annotations

import os
import struct

import cramjam
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.compression import (
    Compression,
    DecompressionError,
    DecompressionLimitError,
    compress,
    decompress,
    level_problem,
)
from aiokafka_ng.protocol.errors import ProtocolError

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
_SETTINGS = settings(
    max_examples=5000 if FUZZ else 200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
CODECS = [c for c in Compression if c != Compression.NONE]
PAYLOADS = [
    b"",
    b"x",
    b"hello kafka " * 1000,
    os.urandom(70_000),  # incompressible and more than two xerial chunks
    bytes(range(256)) * 4096,  # 1 MiB, highly compressible: exercises buffer growth
]


def test_parse() -> None:
    assert Compression.parse("lz4") is Compression.LZ4
    assert Compression.parse(" ZSTD ") is Compression.ZSTD
    assert Compression.parse("none") is Compression.NONE
    assert Compression.parse(None) is Compression.NONE
    assert Compression.parse(1) is Compression.GZIP
    assert Compression.parse(Compression.SNAPPY) is Compression.SNAPPY
    assert [int(c) for c in Compression] == [0, 1, 2, 3, 4]
    with pytest.raises(ValueError, match="unknown compression"):
        Compression.parse("brotli")
    with pytest.raises(ValueError):
        Compression.parse(7)


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
@pytest.mark.parametrize("payload", PAYLOADS, ids=lambda p: f"{len(p)}B")
def test_round_trip(codec: Compression, payload: bytes) -> None:
    packed = compress(codec, payload)
    assert decompress(codec, packed) == payload
    assert decompress(codec, memoryview(packed)) == payload
    assert decompress(codec, bytearray(packed), max_size=len(payload)) == payload


def test_formats() -> None:
    data = b"abc" * 50_000
    assert compress(Compression.GZIP, data)[:2] == b"\x1f\x8b"
    assert compress(Compression.ZSTD, data)[:4] == b"\x28\xb5\x2f\xfd"
    lz4 = compress(Compression.LZ4, data)
    assert lz4[:4] == b"\x04\x22\x4d\x18"  # LZ4 frame magic
    assert lz4[4] & 0x20, "blocks must be independent: Kafka's Java reader rejects linked ones"
    assert lz4[5] >> 4 & 7 == 4, "64 KiB blocks, as the Java client writes"


def test_snappy_is_written_xerial_framed() -> None:
    data = os.urandom(80_000)
    packed = compress(Compression.SNAPPY, data)
    assert packed[:16] == b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    # Chunks of at most 32 KiB input, each [int32 length][raw snappy block].
    pos, chunks = 16, []
    while pos < len(packed):
        (size,) = struct.unpack_from(">i", packed, pos)
        chunks.append(bytes(cramjam.snappy.decompress_raw(packed[pos + 4 : pos + 4 + size])))
        pos += 4 + size
    assert pos == len(packed)
    assert [len(c) for c in chunks] == [32768, 32768, 80_000 - 65536]
    assert b"".join(chunks) == data


def test_snappy_reads_raw_blocks() -> None:
    data = b"raw snappy " * 999
    assert decompress(Compression.SNAPPY, bytes(cramjam.snappy.compress_raw(data))) == data


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_decompression_bomb_is_bounded(codec: Compression) -> None:
    data = bytes(4 * 1024 * 1024)
    packed = compress(codec, data)
    assert decompress(codec, packed, max_size=len(data)) == data
    with pytest.raises(DecompressionLimitError):
        decompress(codec, packed, max_size=len(data) - 1)
    with pytest.raises(DecompressionLimitError):
        decompress(codec, packed, max_size=100_000)


def test_snappy_declared_length_checked_before_allocating() -> None:
    # A raw block claiming 2 GiB (varint preamble) with no data behind it.
    claim = b"\x80\x80\x80\x80\x08"
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, claim + b"\x00" * 10, max_size=1 << 20)
    xerial = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
    block = bytes(cramjam.snappy.compress_raw(bytes(600_000)))
    bomb = xerial + (struct.pack(">i", len(block)) + block) * 4
    with pytest.raises(DecompressionLimitError):
        decompress(Compression.SNAPPY, bomb, max_size=2_000_000)
    assert len(decompress(Compression.SNAPPY, bomb, max_size=2_400_000)) == 2_400_000


@pytest.mark.parametrize(
    "blob",
    [
        b"\x82SNAPPY\x00\x00\x00",  # truncated xerial header
        b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1) + b"\x00\x00",  # truncated chunk length
        b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, 50) + b"abc",  # chunk overruns
        b"\x82SNAPPY\x00" + struct.pack(">iii", 1, 1, -5),
    ],
)
def test_bad_xerial_framing(blob: bytes) -> None:
    with pytest.raises(DecompressionError):
        decompress(Compression.SNAPPY, blob)


def test_unknown_codec() -> None:
    with pytest.raises(DecompressionError):
        decompress(6, b"abc")
    assert issubclass(DecompressionError, ProtocolError)


@_SETTINGS
@given(codec=st.sampled_from(CODECS), blob=st.binary(max_size=300))
def test_garbage_raises_only_protocol_error(codec: Compression, blob: bytes) -> None:
    try:
        out = decompress(codec, blob, max_size=1 << 16)
    except ProtocolError:
        return
    assert len(out) <= 1 << 16


@_SETTINGS
@given(
    codec=st.sampled_from(CODECS),
    payload=st.binary(max_size=2000),
    flips=st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 7)), min_size=1, max_size=4),
    cut=st.integers(0, 10_000),
)
def test_corrupted_raises_only_protocol_error(
    codec: Compression, payload: bytes, flips: list[tuple[int, int]], cut: int
) -> None:
    packed = bytearray(compress(codec, payload * 3))
    for pos, bit in flips:
        packed[pos % len(packed)] ^= 1 << bit
    for blob in (bytes(packed), bytes(packed[: cut % (len(packed) + 1)])):
        try:
            out = decompress(codec, blob, max_size=1 << 16)
        except ProtocolError:
            continue
        assert len(out) <= 1 << 16


# KIP-390 levels: (codec, the ends of Kafka's range, a low and a high level to compare).
_LEVELLED = [
    (Compression.GZIP, -1, 9, 1, 9),
    (Compression.LZ4, 1, 17, 1, 17),
    (Compression.ZSTD, -131072, 22, 1, 19),
]
_TEXT = b" ".join(
    b"record-%d key=user-%d amount=%d.%02d" % (i, i % 97, i * 7, i % 100) for i in range(3000)
)


@pytest.mark.parametrize(("codec", "lo", "hi", "_low", "_high"), _LEVELLED)
def test_every_kafka_level_round_trips(
    codec: Compression, lo: int, hi: int, _low: int, _high: int
) -> None:
    for level in (lo, lo + 1, hi - 1, hi):
        assert decompress(codec, compress(codec, _TEXT, level=level)) == _TEXT


@pytest.mark.parametrize(("codec", "_lo", "_hi", "low", "high"), _LEVELLED)
def test_a_higher_level_compresses_smaller(
    codec: Compression, _lo: int, _hi: int, low: int, high: int
) -> None:
    assert len(compress(codec, _TEXT, level=high)) < len(compress(codec, _TEXT, level=low))


def test_kafka_default_levels() -> None:
    # None is Kafka's default: gzip -1 (zlib's 6), lz4 9 -- its *fast* compressor, as Java's
    # Lz4BlockOutputStream picks for exactly the default level --, zstd 3.
    assert compress(Compression.GZIP, _TEXT) == compress(Compression.GZIP, _TEXT, level=-1)
    assert compress(Compression.GZIP, _TEXT) == compress(Compression.GZIP, _TEXT, level=6)
    assert compress(Compression.ZSTD, _TEXT) == compress(Compression.ZSTD, _TEXT, level=3)
    fast = compress(Compression.LZ4, _TEXT, level=9)
    assert fast == compress(Compression.LZ4, _TEXT)
    assert len(compress(Compression.LZ4, _TEXT, level=8)) < len(fast)  # HC, as in Java


def test_level_problem_is_kafkas_range() -> None:
    ok = {
        Compression.GZIP: [-1, 1, 9],
        Compression.LZ4: [1, 17],
        Compression.ZSTD: [-131072, 0, 22],
    }
    bad = {
        Compression.GZIP: [-2, 0, 10],
        Compression.LZ4: [0, 18, -1],
        Compression.ZSTD: [-131073, 23],
        Compression.SNAPPY: [1],
        Compression.NONE: [0],
    }
    for codec, levels in ok.items():
        assert all(level_problem(codec, level) is None for level in levels), codec
    for codec, levels in bad.items():
        for level in levels:
            problem = level_problem(codec, level)
            assert problem is not None and codec.name.lower() in problem, (codec, level)
