"""The record reader fed hostile bytes: only ProtocolError (CorruptRecordError included)
escapes ``iter_batches``, ``RecordBatch.records()`` and ``control_record()``.

Inputs: valid v2 batches from the builder (every codec, keys/values/headers of any shape,
control and transactional batches, several batches concatenated) and legacy v0/v1
messages, then mutated; CRC checking on for some inputs (mutations must fail cleanly) and
off for most (so the mutated bytes reach the record parser and the decompressors).
Budget: 150 examples in CI, 12 000 under the fuzz profile (each decodes 2 inputs).
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.records import RecordBatchBuilder, iter_batches
from tests.fuzz.fuzz_budget import INPUTS, budget, mutate

_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_BYTES = st.one_of(st.none(), st.binary(max_size=40))
_HEADERS = st.lists(st.tuples(st.text(max_size=8), _BYTES), max_size=3)
_RECORDS = st.lists(
    st.tuples(st.integers(0, 2**41), _BYTES, _BYTES, _HEADERS), min_size=1, max_size=8
)


def _batch(data: st.DataObject) -> bytes:
    control = data.draw(st.booleans(), label="control")
    builder = RecordBatchBuilder(
        data.draw(st.sampled_from(list(Compression)), label="codec"),
        max_size=1 << 20,
        base_offset=data.draw(st.integers(0, 2**40)),
        producer_id=data.draw(st.integers(-1, 2**40)),
        base_sequence=data.draw(st.integers(-1, 2**31 - 1)),
        is_transactional=control or data.draw(st.booleans()),
        is_control=control,
    )
    if control:
        kind = data.draw(st.integers(0, 1))
        builder.append(0, struct.pack(">hh", 0, kind), struct.pack(">hi", 0, 1))
    else:
        for ts, key, value, headers in data.draw(_RECORDS, label="records"):
            builder.append(ts, key, value, headers)
    return builder.build()


def _legacy(data: st.DataObject) -> bytes:
    """One uncompressed magic 0 or 1 message (a message set of one)."""
    magic = data.draw(st.integers(0, 1), label="magic")
    key, value = data.draw(_BYTES), data.draw(_BYTES)
    body = struct.pack(">bb", magic, 0)
    if magic == 1:
        body += struct.pack(">q", data.draw(st.integers(0, 2**41)))
    for field in (key, value):
        body += struct.pack(">i", -1) if field is None else struct.pack(">i", len(field)) + field
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", data.draw(st.integers(0, 2**40)), len(message)) + message


def _read_all(buf: bytes, verify_crc: bool) -> int:
    """Decode everything the reader offers; return the record count (ProtocolError: -1)."""
    try:
        count = 0
        for batch in iter_batches(buf, verify_crc=verify_crc):
            count += len(batch.records())
            batch.control_record()
        return count
    except ProtocolError:
        return -1


def test_valid_batches_read_back() -> None:
    """The generator makes real batches: unmutated, every record comes back."""

    @settings(_SETTINGS, max_examples=budget(50, 2000))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        records: Any = data.draw(_RECORDS)
        builder = RecordBatchBuilder(data.draw(st.sampled_from(list(Compression))))
        for ts, key, value, headers in records:
            builder.append(ts, key, value, headers)
        assert _read_all(builder.build(), verify_crc=True) == len(records)
        INPUTS["records"] += 1

    check()


def test_mutated_record_batches() -> None:
    @settings(_SETTINGS, max_examples=budget(150, 12_000))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        parts = data.draw(
            st.lists(st.sampled_from(["v2", "v2", "v2", "legacy"]), min_size=1, max_size=3)
        )
        buf = b"".join(_batch(data) if p == "v2" else _legacy(data) for p in parts)
        mutated = bytes(mutate(data, bytearray(buf)))
        _read_all(mutated, verify_crc=False)
        _read_all(mutated, verify_crc=True)
        INPUTS["records"] += 2

    check()


def test_random_bytes_as_records() -> None:
    @settings(_SETTINGS, max_examples=budget(100, 5000))
    @given(st.binary(max_size=200), st.booleans())
    def check(buf: bytes, verify_crc: bool) -> None:
        _read_all(buf, verify_crc)
        INPUTS["records"] += 1

    check()
