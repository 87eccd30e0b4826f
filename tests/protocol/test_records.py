"""RecordBatch v2: golden bytes, round trips, limits, producer state, garbage input."""

from __future__ import annotations

import os
import struct
from collections.abc import Sequence

import pytest
from crc32c import crc32c
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.records import (
    BATCH_OVERHEAD,
    LOG_APPEND_TIME,
    ControlRecord,
    ControlRecordType,
    CorruptRecordError,
    Record,
    RecordBatch,
    RecordBatchBuilder,
    control_record_key,
    estimate_record_size,
    iter_batches,
    parse_control_record,
    set_producer_state,
)

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
_SETTINGS = settings(
    max_examples=5000 if FUZZ else 200,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_FEW = settings(_SETTINGS, max_examples=1000 if FUZZ else 40)

RecordTuple = tuple[int, bytes | None, bytes | None, list[tuple[str, bytes | None]]]


def _encodable(records: list[RecordTuple]) -> bool:
    """Every timestamp's delta from the batch's first fits the format's int64 varlong (the
    builder refuses the rest with ValueError: -1 then 2**63 - 1 in one batch, say)."""
    return all(-(2**63) <= r[0] - records[0][0] < 2**63 for r in records)


records_st = st.lists(
    st.tuples(
        st.one_of(
            st.integers(0, 2**41), st.integers(-(2**63), 2**63 - 1).filter(lambda t: t >= -1)
        ),
        st.none() | st.binary(max_size=200),
        st.none() | st.binary(max_size=5000),
        st.lists(st.tuples(st.text(max_size=20), st.none() | st.binary(max_size=50)), max_size=3),
    ),
    min_size=1,
    max_size=30,
).filter(_encodable)


def _build(
    records: Sequence[RecordTuple], codec: Compression = Compression.NONE, **kw: int
) -> bytes:
    builder = RecordBatchBuilder(codec, max_size=1 << 30, **kw)  # type: ignore[arg-type]
    for i, (ts, key, value, headers) in enumerate(records):
        assert builder.append(ts, key, value, headers) == i
    return builder.build()


def _only(buf: bytes, **kw: bool) -> RecordBatch:
    batches = list(iter_batches(buf, **kw))
    assert len(batches) == 1
    return batches[0]


def test_crc32c_known_answer() -> None:
    assert crc32c(b"123456789") == 0xE3069283


def test_golden_bytes() -> None:
    builder = RecordBatchBuilder(
        base_offset=5, producer_id=7, producer_epoch=1, base_sequence=3, is_transactional=True
    )
    assert builder.append(1000, b"k", b"v") == 0
    assert builder.append(1002, None, b"", [("h", b"x")]) == 1
    data = builder.build()
    # Record 0: attributes 0, timestampDelta 0, offsetDelta 0, key len 1 (zigzag 2), "k",
    # value len 1, "v", 0 headers.  Body 8 bytes, so the length prefix is zigzag(8) = 0x10.
    rec0 = bytes.fromhex("1000000002 6b02 7600")
    # Record 1: tsDelta 2 (zz 4), offsetDelta 1 (zz 2), null key (-1 -> 1), empty value (0),
    # 1 header (zz 2): key len 1 "h", value len 1 "x".  Body 10 bytes -> 0x14.
    rec1 = bytes.fromhex("1400040201000202 6802 78")
    crc = crc32c(data[21:])
    header = (
        bytes.fromhex(
            "0000000000000005"  # baseOffset 5
            "00000045"  # batchLength: 61 - 12 + 9 + 11 = 69
            "ffffffff"  # partitionLeaderEpoch -1
            "02"  # magic
        )
        + struct.pack(">I", crc)
        + bytes.fromhex(
            "0010"  # attributes: transactional, no compression, create time
            "00000001"  # lastOffsetDelta
            "00000000000003e8"  # baseTimestamp 1000
            "00000000000003ea"  # maxTimestamp 1002
            "0000000000000007"  # producerId
            "0001"  # producerEpoch
            "00000003"  # baseSequence
            "00000002"  # records count
        )
    )
    assert data == header + rec0 + rec1
    assert crc == 0x72096095  # pinned: a regression in the covered range changes it
    batch = _only(data)
    assert batch.records() == [
        Record(5, 1000, b"k", b"v", ()),
        Record(6, 1002, None, b"", (("h", b"x"),)),
    ]
    assert (batch.base_offset, batch.last_offset_delta, batch.next_offset) == (5, 1, 7)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (7, 1, 3)
    assert batch.is_transactional and not batch.is_control
    assert batch.record_count == 2 and batch.size_in_bytes == len(data) == 81
    assert batch.crc == crc and batch.magic == 2 and batch.partition_leader_epoch == -1


@pytest.mark.parametrize("codec", list(Compression), ids=lambda c: c.name)
@_FEW
@given(records=records_st)
def test_round_trip(codec: Compression, records: list[RecordTuple]) -> None:
    data = _build(records, codec, base_offset=100)
    batch = _only(data)
    assert batch.compression == codec
    got = batch.records()
    assert [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in got] == [
        (100 + i, ts, key, value, headers) for i, (ts, key, value, headers) in enumerate(records)
    ]
    assert batch.base_timestamp == records[0][0]
    assert batch.max_timestamp == max(r[0] for r in records)
    assert batch.last_offset_delta == len(records) - 1 == batch.record_count - 1


def test_large_fields_and_many_records() -> None:
    # Offset deltas, lengths and timestamp deltas beyond the precomputed varint table.
    big_headers = [("h" * 5000, b"x" * 5000), *[("a", None)] * 4100]
    n = 17_000  # offset deltas past the table's 16384 entries
    records: list[RecordTuple] = [
        (
            10**12 + i * 1000 - (i % 7) * 10**9,
            b"k" * (i % 5000) if i < 6000 else None,
            b"v" * (20_000 if i % 4000 == 0 else 9),
            [],
        )
        for i in range(n)
    ]
    records[3000] = (0, None, None, big_headers)
    batch = _only(_build(records))
    got = batch.records()
    assert len(got) == n
    assert got[-1].offset == n - 1 and got[4999].key == b"k" * 4999
    assert [r.timestamp for r in got] == [r[0] for r in records]
    assert [r.value for r in got] == [r[2] for r in records]
    assert list(got[3000].headers) == big_headers
    # The bulk path writes such a batch exactly as record-by-record appends do.
    values = [r[2] for r in records]
    one = RecordBatchBuilder(max_size=1 << 30)
    for v in values:
        one.append(7, None, v)
    run = RecordBatchBuilder(max_size=1 << 30)
    assert run.append_run(7, None, values, 0, n) == n
    assert run.build() == one.build()


def test_builder_limits() -> None:
    builder = RecordBatchBuilder(max_size=1000)
    assert builder.append(1, b"k", b"x" * 5000) == 0  # the first record always fits
    assert builder.append(1, b"k", b"x") is None
    assert builder.is_full
    assert builder.estimated_size == len(builder.build()) > 5000

    builder = RecordBatchBuilder(max_size=1000)
    n = 0
    while builder.append(1, b"key", b"y" * 50) is not None:
        assert not builder.is_full
        n += 1
        assert builder.estimated_size == builder.uncompressed_size <= 1000
    assert builder.is_full
    size = builder.estimated_size
    assert n == builder.record_count and size + 58 > 1000
    assert len(builder.build()) == size
    assert builder.closed
    with pytest.raises(RuntimeError):
        builder.append(1, None, None)
    assert builder.build() is builder.build()  # idempotent
    with pytest.raises(ValueError):
        RecordBatchBuilder().build()


def test_compressed_estimate_and_ratio() -> None:
    builder = RecordBatchBuilder(Compression.LZ4, max_size=2000, compression_ratio_estimate=0.5)
    while builder.append(1, None, b"z" * 100) is not None:
        pass
    # With ratio 0.5 the uncompressed records may reach twice the budget.
    assert 3500 < builder.uncompressed_size <= 2 * (2000 - BATCH_OVERHEAD) + BATCH_OVERHEAD
    data = builder.build()
    assert builder.estimated_size == len(data) < 2000
    assert builder.compressed_size == len(data) - BATCH_OVERHEAD
    assert 0 < builder.compression_ratio < 0.1  # 100 identical bytes per record
    with pytest.raises(ValueError):
        RecordBatchBuilder(Compression.LZ4, compression_ratio_estimate=0)
    assert len(_only(data).records()) == builder.record_count


@_SETTINGS
@given(
    key_len=st.none() | st.integers(0, 70_000),
    value_len=st.none() | st.integers(0, 70_000),
    headers=st.lists(st.tuples(st.text(max_size=10), st.none() | st.binary(max_size=300))),
    ts=st.integers(-(2**62), 2**62),
    delta=st.sampled_from([0, 1, 63, 64, 4095, 4096, 8192]),
)
def test_estimate_is_an_upper_bound(
    key_len: int | None,
    value_len: int | None,
    headers: list[tuple[str, bytes | None]],
    ts: int,
    delta: int,
) -> None:
    builder = RecordBatchBuilder(max_size=1 << 30)
    for _ in range(delta):
        builder.append(0, None, None)
    before = builder.uncompressed_size
    key = None if key_len is None else b"k" * key_len
    value = None if value_len is None else b"v" * value_len
    builder.append(ts, key, value, headers)
    actual = builder.uncompressed_size - before
    bound = estimate_record_size(key_len, value_len, headers)
    assert actual <= bound <= actual + 14


def test_multiple_batches_and_truncated_tail() -> None:
    batches = [
        _build([(i, b"k%d" % i, b"v" * i, [])] * 3, codec, base_offset=i * 3)
        for i, codec in enumerate(Compression)
    ]
    buf = b"".join(batches)
    got = list(iter_batches(buf))
    assert [b.base_offset for b in got] == [0, 3, 6, 9, 12]
    assert [b.next_offset for b in got] == [3, 6, 9, 12, 15]
    assert [len(b.records()) for b in got] == [3] * 5
    assert [b.size_in_bytes for b in got] == [len(b) for b in batches]
    # Every cut inside the last batch drops it, and only it.
    head = len(buf) - len(batches[-1])
    for cut in range(head, len(buf)):
        assert [b.base_offset for b in iter_batches(buf[:cut])] == [0, 3, 6, 9]
    assert list(iter_batches(b"")) == []
    assert [b.base_offset for b in iter_batches(memoryview(buf)[: head + 5])] == [0, 3, 6, 9]
    assert [b.base_offset for b in iter_batches(bytearray(buf))] == [0, 3, 6, 9, 12]


def test_control_batch() -> None:
    builder = RecordBatchBuilder(is_control=True, is_transactional=True, producer_id=9)
    builder.append(5, control_record_key(ControlRecordType.COMMIT), b"\x00\x00\x00\x00\x00\x07")
    batch = _only(builder.build())
    assert batch.is_control and batch.is_transactional
    marker = batch.control_record()
    assert marker == ControlRecord(0, ControlRecordType.COMMIT) and marker.is_commit
    abort = parse_control_record(control_record_key(ControlRecordType.ABORT))
    assert abort.is_abort and not abort.is_commit
    assert _only(_build([(1, b"k", b"v", [])])).control_record() is None
    with pytest.raises(ProtocolError):
        parse_control_record(b"\x00")
    with pytest.raises(ProtocolError):
        parse_control_record(None)


def test_log_append_time() -> None:
    builder = RecordBatchBuilder(timestamp_type=LOG_APPEND_TIME)
    builder.append(10, None, b"a")
    builder.append(30, None, b"b")
    builder.append(20, None, b"c")
    batch = _only(builder.build())
    assert batch.timestamp_type == LOG_APPEND_TIME
    assert [r.timestamp for r in batch.records()] == [30, 30, 30]  # maxTimestamp for all


def test_set_producer_state() -> None:
    data = _build([(1, b"k", b"v", [])] * 4, Compression.GZIP)
    patched = set_producer_state(data, 12345, 6, 789)
    batch = _only(patched)
    assert (batch.producer_id, batch.producer_epoch, batch.base_sequence) == (12345, 6, 789)
    assert not batch.is_transactional
    assert patched[BATCH_OVERHEAD:] == data[BATCH_OVERHEAD:]  # records untouched
    assert len(batch.records()) == 4

    buf = bytearray(data)
    out = set_producer_state(buf, 1, 2, 3, is_transactional=True)
    assert bytes(buf) == out  # updated in place too
    batch = _only(out)
    assert batch.is_transactional and batch.compression == Compression.GZIP
    assert not _only(set_producer_state(out, 1, 2, 3, is_transactional=False)).is_transactional
    with pytest.raises(ValueError):
        set_producer_state(b"\x00" * 70, 1, 2, 3)


def test_crc_mismatch() -> None:
    data = bytearray(_build([(1, b"k", b"value", [])]))
    data[-2] ^= 0x01  # inside the value
    with pytest.raises(CorruptRecordError):
        list(iter_batches(bytes(data)))
    assert _only(bytes(data), verify_crc=False).records()[0].value == b"valud"
    data[12] ^= 0xFF  # partitionLeaderEpoch is outside the CRC
    data[-2] ^= 0x01
    assert _only(bytes(data)).partition_leader_epoch != -1


def test_malformed_headers_raise_protocol_error() -> None:
    base = bytearray(_build([(1, b"k", b"v", [])]))
    for pos, byte in [(16, 7), (8, 0)]:  # unknown magic; length below the v2 minimum
        bad = bytearray(base)
        bad[pos : pos + 1] = bytes([byte])
        if pos == 8:
            bad[8:12] = struct.pack(">i", 10)
        with pytest.raises(ProtocolError):
            list(iter_batches(bytes(bad), verify_crc=False))
    bad = bytearray(base)
    bad[22] |= 0x07  # codec 7
    with pytest.raises(ProtocolError):
        _only(bytes(bad), verify_crc=False).records()
    bad = bytearray(base)
    bad[57:61] = struct.pack(">i", 2)  # count says 2, one record present
    with pytest.raises(ProtocolError):
        _only(bytes(bad), verify_crc=False).records()
    bad[57:61] = struct.pack(">i", -1)
    with pytest.raises(ProtocolError):
        _only(bytes(bad), verify_crc=False).records()


def _parse_all(buf: bytes, verify_crc: bool) -> None:
    for batch in iter_batches(buf, verify_crc=verify_crc):
        for record in batch.records(max_decompressed_size=1 << 20):
            assert isinstance(record.offset, int)
        batch.control_record() if batch.is_control else None


_valid = st.lists(records_st, min_size=1, max_size=3).flatmap(
    lambda groups: st.tuples(
        st.just(groups), st.lists(st.sampled_from(list(Compression)), min_size=3, max_size=3)
    )
)


@_SETTINGS
@given(blob=st.binary(max_size=400), verify=st.booleans(), magic=st.sampled_from([0, 1, 2]))
def test_random_bytes_raise_only_protocol_error(blob: bytes, verify: bool, magic: int) -> None:
    # Half the time make the header plausible so the record parser itself sees garbage.
    if len(blob) > 17 and blob[0] & 1:
        blob = (
            blob[:8] + struct.pack(">i", len(blob) - 12) + blob[12:16] + bytes([magic]) + blob[17:]
        )
    try:
        _parse_all(blob, verify)
    except ProtocolError:
        pass


@_SETTINGS
@given(
    valid=_valid,
    flips=st.lists(st.tuples(st.integers(0, 1 << 20), st.integers(0, 7)), max_size=4),
    cut=st.integers(0, 1 << 20),
    verify=st.booleans(),
)
def test_corrupted_batches_raise_only_protocol_error(
    valid: tuple[list[list[RecordTuple]], list[Compression]],
    flips: list[tuple[int, int]],
    cut: int,
    verify: bool,
) -> None:
    groups, codecs = valid
    buf = bytearray(b"".join(_build(g, c) for g, c in zip(groups, codecs, strict=False)))
    for pos, bit in flips:
        buf[pos % len(buf)] ^= 1 << bit
    for blob in (bytes(buf), bytes(buf[: cut % (len(buf) + 1)])):
        try:
            _parse_all(blob, verify)
        except ProtocolError:
            pass
