"""Hand-made v2 record batches whose records region says what a test wants (CRC valid).

The builder never writes a malformed record, and a broker validates what it stores: the
records here (lengths and deltas at and past the int64 range, offsets at 2**63-1) are made
byte by byte so that the decoders, compiled and pure, and the consumer can be fed them.
"""

from __future__ import annotations

import struct

from crc32c import crc32c

from aiokafka_ng.protocol.records import BATCH_OVERHEAD, RecordBatchBuilder

INT64_MAX = 2**63 - 1


def uvarint(z: int) -> bytes:
    """``z`` (>= 0, any size) as a base-128 varint, no zigzag: any bit pattern."""
    out = bytearray()
    while True:
        b = z & 0x7F
        z >>= 7
        if not z:
            out.append(b)
            return bytes(out)
        out.append(b | 0x80)


def varint(v: int) -> bytes:
    """``v`` zigzag encoded (any size: past int64 it is the varint of 2*|v| - (v < 0))."""
    return uvarint(2 * v if v >= 0 else -2 * v - 1)


def record(
    key: bytes | None = None,
    value: bytes | None = b"v",
    *,
    ts_delta: int = 0,
    offset_delta: int = 0,
    key_len: int | None = None,
    value_len: int | None = None,
    headers: bytes = b"\x00",
    length: int | None = None,
) -> bytes:
    """One record, its length prefix included; ``key_len``/``value_len``/``length``
    override the declared lengths (the bytes written stay the same), ``headers`` is raw."""
    body = b"\x00" + varint(ts_delta) + varint(offset_delta)
    for data, declared in ((key, key_len), (value, value_len)):
        n = declared if declared is not None else (-1 if data is None else len(data))
        body += varint(n) + (data or b"")
    body += headers
    return varint(len(body) if length is None else length) + body


def batch(
    base_offset: int,
    region: bytes,
    count: int,
    *,
    last_offset_delta: int | None = None,
    base_timestamp: int = 1000,
) -> bytes:
    """A batch whose records region is ``region`` and record count ``count``, CRC valid."""
    b = RecordBatchBuilder(max_size=1 << 20, base_offset=0)
    b.append(0, None, b"x")
    head = bytearray(b.build()[:BATCH_OVERHEAD])
    delta = max(count - 1, 0) if last_offset_delta is None else last_offset_delta
    struct.pack_into(">q", head, 0, base_offset)
    struct.pack_into(">i", head, 23, delta)
    struct.pack_into(">qq", head, 27, base_timestamp, base_timestamp)
    struct.pack_into(">i", head, 57, count)
    out = head + region
    struct.pack_into(">i", out, 8, len(out) - 12)
    struct.pack_into(">I", out, 17, crc32c(bytes(out[21:])))
    return bytes(out)


def good(base_offset: int, values: list[bytes]) -> bytes:
    """A well-formed batch of ``values`` (null keys) made by the builder."""
    b = RecordBatchBuilder(max_size=1 << 20, base_offset=base_offset)
    for v in values:
        b.append(1000 + base_offset, None, v)
    return b.build()


# Records past the int64 range, each valid but for that (batch base offset 0).
HUGE = 2**63
OVERFLOW_RECORDS: dict[str, bytes] = {
    "key length 2**63-1": record(b"k", key_len=INT64_MAX),
    "value length 2**63-1": record(value=b"v", value_len=INT64_MAX),
    "key length -2**63": record(b"k", key_len=-HUGE),
    "value length 2**62": record(value=b"v", value_len=2**62),
    "record length 2**63-1": uvarint(2 * INT64_MAX) + bytes(12),
    "record length -2**63": uvarint(2 * INT64_MAX + 1) + bytes(12),
    "record length past 64 bits": uvarint(2**64) + bytes(12),
    "length varint of 11 bytes": b"\x80" * 10 + b"\x01" + bytes(12),
    "timestamp delta 2**63-1": record(ts_delta=INT64_MAX),
    "timestamp delta -2**63": record(ts_delta=-HUGE),
    "timestamp delta past 64 bits": record(ts_delta=2**64),
    "offset delta 2**63-1": record(offset_delta=INT64_MAX),
    "offset delta -2**63": record(offset_delta=-HUGE),
    "header count 2**63-1": record(headers=varint(INT64_MAX)),
    "header count -2**63": record(headers=varint(-HUGE)),
    "header key length 2**63-1": record(headers=varint(1) + varint(INT64_MAX) + b"k"),
    "header value length 2**63-1": record(
        headers=varint(1) + varint(1) + b"k" + varint(INT64_MAX) + b"v"
    ),
    "header value length -2**63": record(headers=varint(1) + varint(1) + b"k" + varint(-HUGE)),
}
