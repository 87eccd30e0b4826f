"""Interop with aiokafka's record code (C extension and pure Python), every codec.

Batches we build are read by aiokafka; batches aiokafka builds (v2, and legacy v0/v1 message
sets) are read here, field for field and byte for byte.
"""

from __future__ import annotations

import struct
from typing import Any

import cramjam
import pytest
from aiokafka.codec import snappy_decode, snappy_encode
from aiokafka.record import default_records as ak
from aiokafka.record import legacy_records as ak_legacy
from aiokafka.record.memory_records import MemoryRecords
from crc32c import crc32c

from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.records import (
    BATCH_OVERHEAD,
    RecordBatch,
    RecordBatchBuilder,
    iter_batches,
    set_producer_state,
)

CODECS = list(Compression)
AK_BATCH_CLASSES = {"c": ak.DefaultRecordBatch, "py": ak._DefaultRecordBatchPy}

RECORDS: list[tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]] = [
    (1_700_000_000_000, b"key-0", b"value-0" * 20, []),
    (1_700_000_000_005, None, b"no key", [("trace", b"\x00\x01"), ("empty", b"")]),
    (1_699_999_999_000, b"tombstone", None, [("null", None)]),
    (1_700_000_000_010, b"", b"", [("\u00e9t\u00e9", b"unicode header key")]),
    *[(1_700_000_001_000 + i, b"k%d" % i, bytes([i % 256]) * (i * 37), []) for i in range(150)],
]


def _ours(codec: Compression, **kw: Any) -> bytes:
    builder = RecordBatchBuilder(codec, max_size=1 << 20, **kw)
    for ts, key, value, headers in RECORDS:
        builder.append(ts, key, value, headers)
    return builder.build()


def _theirs(codec: Compression, pid: int = -1, epoch: int = -1, seq: int = -1) -> bytes:
    builder = ak.DefaultRecordBatchBuilder(2, int(codec), 0, pid, epoch, seq, 1 << 20)
    for offset, (ts, key, value, headers) in enumerate(RECORDS):
        assert builder.append(offset, ts, key, value, headers) is not None
    return bytes(builder.build())


def _ak_records(batch: Any) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    return [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch]


def _expected(base_offset: int = 0) -> list[tuple[int, int, bytes | None, bytes | None, list[Any]]]:
    return [(base_offset + i, ts, k, v, h) for i, (ts, k, v, h) in enumerate(RECORDS)]


def _only(buf: bytes) -> RecordBatch:
    (batch,) = list(iter_batches(buf))
    return batch


@pytest.mark.parametrize("impl", sorted(AK_BATCH_CLASSES))
@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_aiokafka_reads_ours(codec: Compression, impl: str) -> None:
    data = _ours(codec, base_offset=42, producer_id=77, producer_epoch=3, base_sequence=9)
    batch = AK_BATCH_CLASSES[impl](data)
    assert batch.validate_crc()
    assert batch.compression_type == codec
    assert (batch.base_offset, batch.last_offset_delta) == (42, len(RECORDS) - 1)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (77, 3, 9)
    assert batch.first_timestamp == RECORDS[0][0]
    assert batch.max_timestamp == max(r[0] for r in RECORDS)
    assert _ak_records(batch) == _expected(42)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_we_read_aiokafka(codec: Compression) -> None:
    data = _theirs(codec, pid=5, epoch=6, seq=7)
    batch = _only(data)
    assert batch.compression == codec
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (5, 6, 7)
    assert batch.record_count == len(RECORDS)
    assert batch.size_in_bytes == len(data)
    got = [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records()]
    assert got == _expected()


def test_uncompressed_bytes_identical_to_aiokafka() -> None:
    assert _ours(Compression.NONE) == _theirs(Compression.NONE)


def test_multiple_batches_through_memory_records() -> None:
    ours = b"".join(_ours(c, base_offset=i * 1000) for i, c in enumerate(CODECS))
    records = MemoryRecords(ours)
    seen = []
    while (batch := records.next_batch()) is not None:
        assert batch.validate_crc()
        seen.append(_ak_records(batch)[-1][0])
    assert seen == [i * 1000 + len(RECORDS) - 1 for i in range(len(CODECS))]
    theirs = b"".join(_theirs(c) for c in CODECS)
    assert [len(b.records()) for b in iter_batches(theirs)] == [len(RECORDS)] * len(CODECS)


def test_snappy_formats() -> None:
    # aiokafka writes xerial framing, as the Java client does, and so do we.
    theirs = _theirs(Compression.SNAPPY)
    assert theirs[BATCH_OVERHEAD : BATCH_OVERHEAD + 8] == b"\x82SNAPPY\x00"
    ours = _ours(Compression.SNAPPY)
    assert ours[BATCH_OVERHEAD : BATCH_OVERHEAD + 8] == b"\x82SNAPPY\x00"
    plain = _ours(Compression.NONE)[BATCH_OVERHEAD:]
    assert snappy_decode(ours[BATCH_OVERHEAD:]) == plain
    # Records as one raw snappy block (as librdkafka writes them) read here and in aiokafka.
    raw = _recompress(_ours(Compression.NONE), bytes(cramjam.snappy.compress_raw(plain)))
    assert len(_only(raw).records()) == len(RECORDS)
    assert len(list(ak.DefaultRecordBatch(raw))) == len(RECORDS)
    # aiokafka's xerial writer with a block size other than ours.
    xerial = _recompress(_ours(Compression.NONE), snappy_encode(plain, xerial_blocksize=1000))
    assert len(_only(xerial).records()) == len(RECORDS)


def _recompress(batch: bytes, records_blob: bytes) -> bytes:
    """Replace an uncompressed batch's records by a snappy ``records_blob``; fix the header."""
    buf = bytearray(batch[:BATCH_OVERHEAD] + records_blob)
    struct.pack_into(">i", buf, 8, len(buf) - 12)
    (attributes,) = struct.unpack_from(">h", buf, 21)
    struct.pack_into(">h", buf, 21, attributes | Compression.SNAPPY)
    struct.pack_into(">I", buf, 17, crc32c(bytes(buf[21:])))
    return bytes(buf)


@pytest.mark.parametrize("codec", CODECS, ids=lambda c: c.name)
def test_set_producer_state_verified_by_aiokafka(codec: Compression) -> None:
    data = set_producer_state(_ours(codec), 1 << 40, 32000, 2_000_000_000, is_transactional=True)
    batch = ak.DefaultRecordBatch(data)
    assert batch.validate_crc()
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (
        1 << 40,
        32000,
        2_000_000_000,
    )
    assert batch.is_transactional
    assert _ak_records(batch) == _expected()


@pytest.mark.parametrize(
    ("magic", "codec"),
    # v0 lz4 had a broken frame checksum (KAFKA-3160); nothing writes it, so nothing to read.
    [(0, c) for c in CODECS[:3]] + [(1, c) for c in CODECS[:4]],
    ids=lambda v: str(getattr(v, "name", v)),
)
def test_we_read_legacy_message_sets(magic: int, codec: Compression) -> None:
    legacy = [(1_600_000_000_000 + i, b"k%d" % i if i % 3 else None, b"v" * i) for i in range(20)]
    builder = ak_legacy.LegacyRecordBatchBuilder(magic, int(codec), 1 << 20)
    for offset, (ts, key, value) in enumerate(legacy):
        assert builder.append(offset, ts, key, value) is not None
    data = bytearray(builder.build())
    base = 500
    if codec != Compression.NONE:
        # A broker stores the wrapper at the offset of the last inner message (v1) or
        # rewrites the inner offsets (v0); emulate what a fetch returns.
        struct.pack_into(">q", data, 0, base + len(legacy) - 1)
        if magic == 0:
            data = bytearray(_legacy_rebase_v0(bytes(data), codec, base))
    else:
        pos = 0
        for i in range(len(legacy)):
            struct.pack_into(">q", data, pos, base + i)
            pos += 12 + struct.unpack_from(">i", data, pos + 8)[0]
    batches = list(iter_batches(bytes(data)))
    records = [r for b in batches for r in b.records()]
    assert [r.offset for r in records] == list(range(base, base + len(legacy)))
    assert [(r.key, r.value) for r in records] == [(k, v) for _, k, v in legacy]
    expected_ts = [ts if magic == 1 else -1 for ts, _, _ in legacy]
    assert [r.timestamp for r in records] == expected_ts
    assert batches[-1].next_offset == base + len(legacy)
    assert all(b.magic == magic and not b.is_transactional for b in batches)


def _legacy_rebase_v0(data: bytes, codec: Compression, base: int) -> bytes:
    """v0 inner messages carry absolute offsets: rebuild the wrapper with shifted ones."""
    inner = MemoryRecords(data).next_batch()
    builder = ak_legacy.LegacyRecordBatchBuilder(0, int(codec), 1 << 20)
    for r in inner:
        builder.append(base + r.offset, r.timestamp, r.key, r.value)
    out = bytearray(builder.build())
    struct.pack_into(">q", out, 0, base + 19)
    return bytes(out)
