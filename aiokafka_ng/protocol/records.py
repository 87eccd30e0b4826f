"""Kafka record batches (magic v2), plus reading legacy message sets (magic 0 and 1).

Theory of operation
-------------------
Writing.  :class:`RecordBatchBuilder` is the producer's hot path.  It keeps one ``bytearray``
that starts with 61 zero bytes reserved for the batch header; each :meth:`~RecordBatchBuilder
.append` joins the record body in one ``bytes.join`` from pre-encoded pieces (varints below
:data:`_SMALL` are looked up in a table, not computed) and adds it with its length prefix.
No per-record objects survive the call.  :meth:`~RecordBatchBuilder.build` compresses the
records region, writes the header with one ``struct.pack_into`` and fills in the CRC-32C,
which covers everything from ``attributes`` to the end of the batch.

Producer id, epoch and base sequence are assigned when a batch is drained, after it was
built; :func:`set_producer_state` patches those header fields in place and recomputes only
the CRC - the records are not re-encoded (nor re-compressed).

Reading.  :func:`iter_batches` walks a buffer of concatenated batches (a fetch response's
``records``) using the length field every magic shares at the same offset, and stops quietly
at a truncated trailing batch: brokers cut fetch responses at a byte limit, not at a batch
boundary.  Header fields are decoded eagerly, records lazily by :meth:`RecordBatch.records`.
Every malformed input raises :class:`~aiokafka_ng.protocol.errors.ProtocolError` (a CRC
mismatch raises :class:`CorruptRecordError`): the parser checks every declared length
against the bytes actually present, and the ``IndexError`` a truncated field triggers is
converted to ``ProtocolError`` in one place (:meth:`RecordBatch.records`).  Loops over
declared counts consume input on every turn, so allocation is bounded by the input size and,
for compressed batches, by ``max_decompressed_size`` (see ``compression.py``).

Legacy message sets (magic 0/1, including compressed wrapper messages) are read, never
written, so that very old topics stay consumable; each message is presented as a batch.

Varints in records are zigzag encoded (``0 -> 0, -1 -> 1, 1 -> 2 ...``), as in protobuf.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum

from crc32c import crc32c

from aiokafka_ng.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    compress,
    decompress,
)
from aiokafka_ng.protocol.errors import ProtocolError

__all__ = [
    "BATCH_OVERHEAD",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "ControlRecord",
    "ControlRecordType",
    "CorruptRecordError",
    "Record",
    "RecordBatch",
    "RecordBatchBuilder",
    "control_record_key",
    "estimate_record_size",
    "iter_batches",
    "parse_control_record",
    "set_producer_state",
]

Buffer = bytes | bytearray | memoryview
Headers = Sequence[tuple[str, bytes | None]]

CREATE_TIME = 0
LOG_APPEND_TIME = 1


class CorruptRecordError(ProtocolError):
    """A record batch whose CRC does not match its contents."""


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


# baseOffset batchLength partitionLeaderEpoch magic crc attributes lastOffsetDelta
# baseTimestamp maxTimestamp producerId producerEpoch baseSequence recordsCount
_HEADER = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD = _HEADER.size  # 61: a batch's size without its records
_LENGTH_OFFSET = 8
_MAGIC_OFFSET = 16
_CRC_OFFSET = 17
_ATTRIBUTES_OFFSET = 21  # the CRC covers from here to the end
_PRODUCER_OFFSET = 43
_PRODUCER = struct.Struct(">qhi")
_ATTRIBUTES = struct.Struct(">h")
_CRC = struct.Struct(">I")
_LOG_OVERHEAD = 12  # baseOffset + batchLength: the bytes batchLength does not count

_CODEC_MASK = 0x07
_TIMESTAMP_TYPE_MASK = 0x08
_TRANSACTIONAL_MASK = 0x10
_CONTROL_MASK = 0x20
_DELETE_HORIZON_MASK = 0x40


# --------------------------------------------------------------------------- varints


def _zigzag_bytes(value: int) -> bytes:
    """Zigzag varint encoding of a signed 64-bit value."""
    if not -(1 << 63) <= value < (1 << 63):
        raise ValueError(f"{value} does not fit in a varlong")
    z = (value << 1) ^ (value >> 63)
    out = bytearray()
    while z > 0x7F:
        out.append((z & 0x7F) | 0x80)
        z >>= 7
    out.append(z)
    return bytes(out)


# Table of encodings of 0.._SMALL-1: record lengths, offset deltas and small timestamp deltas
# almost always hit it, which saves a Python-level loop per field per record.
_SMALL = 4096
_ZZ: tuple[bytes, ...] = tuple(_zigzag_bytes(i) for i in range(_SMALL))
# Zigzag decoding of single-byte varints (the common case when reading).
_UNZZ: tuple[int, ...] = tuple((z >> 1) ^ -(z & 1) for z in range(128))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint of up to 10 bytes at ``pos``; return (value, new pos)."""
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ProtocolError("varint longer than 10 bytes")


def _varint_size(value: int) -> int:
    return len(_ZZ[value]) if 0 <= value < _SMALL else len(_zigzag_bytes(value))


def _encode_headers(headers: Headers) -> bytes:
    zz, small, slow = _ZZ, _SMALL, _zigzag_bytes
    n = len(headers)
    parts = [zz[n] if n < small else slow(n)]
    for hkey, hvalue in headers:
        kb = hkey.encode("utf-8")
        n = len(kb)
        parts.append(zz[n] if n < small else slow(n))
        parts.append(kb)
        if hvalue is None:
            parts.append(b"\x01")
        else:
            n = len(hvalue)
            parts.append(zz[n] if n < small else slow(n))
            parts.append(hvalue)
    return b"".join(parts)


def estimate_record_size(key_len: int | None, value_len: int | None, headers: Headers = ()) -> int:
    """Upper bound of one record's encoded size inside a v2 batch (excluding the batch header).

    ``key_len``/``value_len`` of None mean a null key/value.  The timestamp and offset deltas
    are counted at their largest varint sizes, so the bound holds wherever the record lands;
    add :data:`BATCH_OVERHEAD` for the size of a batch holding just this record.
    """
    body = 1 + 10 + 5  # attributes, timestampDelta (varlong), offsetDelta (varint)
    body += 1 if key_len is None else _varint_size(key_len) + key_len
    body += 1 if value_len is None else _varint_size(value_len) + value_len
    body += len(_encode_headers(headers)) if headers else 1
    return _varint_size(body) + body


# --------------------------------------------------------------------------- writing


class RecordBatchBuilder:
    """Accumulates records into one v2 record batch; :meth:`build` returns its bytes.

    ``max_size`` bounds the batch's estimated size: :meth:`append` refuses a record that would
    cross it, except the first record, which is always taken (the caller decides what to do
    with a record too large for any batch).  For compressed batches the estimate scales the
    uncompressed size by ``compression_ratio_estimate`` (1.0, the safe default, never lets a
    batch outgrow ``max_size`` unless the codec expands the data).
    """

    __slots__ = (
        "_attributes", "_base_offset", "_base_sequence", "_base_ts", "_buf", "_built",
        "_compression", "_count", "_limit", "_max_size", "_max_ts", "_producer_epoch",
        "_producer_id", "_ratio", "_refused", "_uncompressed_size", "compressed_size",
    )  # fmt: skip

    def __init__(
        self,
        compression: Compression | int = Compression.NONE,
        *,
        max_size: int = 16384,
        base_offset: int = 0,
        producer_id: int = -1,
        producer_epoch: int = -1,
        base_sequence: int = -1,
        is_transactional: bool = False,
        is_control: bool = False,
        timestamp_type: int = CREATE_TIME,
        compression_ratio_estimate: float = 1.0,
    ) -> None:
        self._compression = Compression(compression)
        attributes = int(self._compression)
        if timestamp_type == LOG_APPEND_TIME:
            attributes |= _TIMESTAMP_TYPE_MASK
        elif timestamp_type != CREATE_TIME:
            raise ValueError(f"unknown timestamp type {timestamp_type}")
        if is_transactional:
            attributes |= _TRANSACTIONAL_MASK
        if is_control:
            attributes |= _CONTROL_MASK
        self._attributes = attributes
        self._max_size = max_size
        self._base_offset = base_offset
        self._producer_id = producer_id
        self._producer_epoch = producer_epoch
        self._base_sequence = base_sequence
        if not 0 < compression_ratio_estimate <= 64:
            raise ValueError(f"bad compression ratio estimate {compression_ratio_estimate}")
        self._ratio = 1.0 if self._compression == Compression.NONE else compression_ratio_estimate
        # append() compares the uncompressed length of the buffer against this, so the
        # compression estimate costs nothing per record.
        self._limit = BATCH_OVERHEAD + (max_size - BATCH_OVERHEAD) / self._ratio
        self._buf = bytearray(BATCH_OVERHEAD)
        self._count = 0
        self._base_ts = 0
        self._max_ts = 0
        self._built: bytes | None = None
        self._uncompressed_size = 0
        self._refused = False
        #: Size of the records region after compression; set by :meth:`build`.
        self.compressed_size = -1

    @property
    def record_count(self) -> int:
        return self._count

    @property
    def compression(self) -> Compression:
        return self._compression

    @property
    def max_size(self) -> int:
        return self._max_size

    @property
    def uncompressed_size(self) -> int:
        """Exact size the batch would have without compression."""
        return len(self._buf) if self._built is None else self._uncompressed_size

    @property
    def estimated_size(self) -> int:
        """Running estimate of the built size; exact without compression (or once built)."""
        if self._built is not None:
            return len(self._built)
        return BATCH_OVERHEAD + int((len(self._buf) - BATCH_OVERHEAD) * self._ratio)

    @property
    def compression_ratio(self) -> float:
        """Compressed / uncompressed size of the records once built (feeds the next estimate)."""
        if self._built is None:
            return self._ratio
        return self.compressed_size / max(1, self._uncompressed_size - BATCH_OVERHEAD)

    @property
    def is_full(self) -> bool:
        """True once a record was refused, the size limit is reached, or the batch is built."""
        return self._refused or self._built is not None or len(self._buf) >= self._limit

    @property
    def closed(self) -> bool:
        return self._built is not None

    def append(
        self,
        timestamp_ms: int,
        key: bytes | None,
        value: bytes | None,
        headers: Headers = (),
    ) -> int | None:
        """Append one record; return its offset delta, or None if it does not fit.

        The first record always fits.  Raises RuntimeError once the batch was built.
        """
        if self._built is not None:
            raise RuntimeError("record batch already built")
        zz = _ZZ
        delta = self._count
        if delta:
            ts_delta = timestamp_ms - self._base_ts
            ts_enc = zz[ts_delta] if 0 <= ts_delta < _SMALL else _zigzag_bytes(ts_delta)
            delta_enc = zz[delta] if delta < _SMALL else _zigzag_bytes(delta)
        else:
            ts_enc = delta_enc = b"\x00"
        if key is None:
            key_enc = b"\x01"
            key = b""
        else:
            n = len(key)
            key_enc = zz[n] if n < _SMALL else _zigzag_bytes(n)
        if value is None:
            value_enc = b"\x01"
            value = b""
        else:
            n = len(value)
            value_enc = zz[n] if n < _SMALL else _zigzag_bytes(n)
        body = b"".join(
            (
                b"\x00",  # record attributes: unused
                ts_enc,
                delta_enc,
                key_enc,
                key,
                value_enc,
                value,
                _encode_headers(headers) if headers else b"\x00",
            )
        )
        n = len(body)
        length_enc = zz[n] if n < _SMALL else _zigzag_bytes(n)
        buf = self._buf
        if delta:
            if len(buf) + len(length_enc) + n > self._limit:
                self._refused = True
                return None
            if timestamp_ms > self._max_ts:
                self._max_ts = timestamp_ms
        else:
            # int64 check here, once per batch; later deltas are checked by _zigzag_bytes.
            if not -(1 << 63) <= timestamp_ms < (1 << 63):
                raise ValueError(f"timestamp {timestamp_ms} does not fit in int64")
            self._base_ts = self._max_ts = timestamp_ms
        buf += length_enc
        buf += body
        self._count = delta + 1
        return delta

    def append_run(
        self,
        timestamp_ms: int,
        keys: Sequence[bytes | None] | None,
        values: Sequence[bytes | None],
        start: int,
        stop: int,
    ) -> int:
        """Append ``values[start:stop]`` (with ``keys``, or null keys) as records without
        headers, all at ``timestamp_ms``, until one does not fit. Returns the index of the
        first record not appended (``stop`` if all were). Encodes exactly as :meth:`append`
        would, record by record, without a call per record (the producer's bulk path)."""
        if start >= stop:
            return start
        if self._built is not None:
            raise RuntimeError("record batch already built")
        if not self._count:
            self.append(timestamp_ms, None if keys is None else keys[start], values[start])
            start += 1
        zz = _ZZ
        small = _SMALL
        ts_delta = timestamp_ms - self._base_ts
        ts_enc = zz[ts_delta] if 0 <= ts_delta < small else _zigzag_bytes(ts_delta)
        if timestamp_ms > self._max_ts:
            self._max_ts = timestamp_ms
        buf = self._buf
        limit = self._limit
        delta = self._count
        join = b"".join
        i = start
        while i < stop:
            key = None if keys is None else keys[i]
            value = values[i]
            delta_enc = zz[delta] if delta < small else _zigzag_bytes(delta)
            if key is None:
                key_enc = b"\x01"
                key = b""
            else:
                n = len(key)
                key_enc = zz[n] if n < small else _zigzag_bytes(n)
            if value is None:
                value_enc = b"\x01"
                value = b""
            else:
                n = len(value)
                value_enc = zz[n] if n < small else _zigzag_bytes(n)
            body = join((b"\x00", ts_enc, delta_enc, key_enc, key, value_enc, value, b"\x00"))
            n = len(body)
            length_enc = zz[n] if n < small else _zigzag_bytes(n)
            if len(buf) + len(length_enc) + n > limit:
                self._refused = True
                break
            buf += length_enc
            buf += body
            delta += 1
            i += 1
        self._count = delta
        return i

    def build(self) -> bytes:
        """Close the batch and return its bytes (idempotent)."""
        if self._built is not None:
            return self._built
        if not self._count:
            raise ValueError("cannot build an empty record batch")
        buf = self._buf
        self._uncompressed_size = len(buf)
        if self._compression != Compression.NONE:
            compressed = compress(self._compression, memoryview(buf)[BATCH_OVERHEAD:])
            buf = bytearray(BATCH_OVERHEAD) + compressed
        self.compressed_size = len(buf) - BATCH_OVERHEAD
        count = self._count
        _HEADER.pack_into(
            buf, 0, self._base_offset, len(buf) - _LOG_OVERHEAD,
            -1, 2, 0,  # partitionLeaderEpoch (the broker's), magic, crc (below)
            self._attributes, count - 1, self._base_ts, self._max_ts,
            self._producer_id, self._producer_epoch, self._base_sequence, count,
        )  # fmt: skip
        _CRC.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
        self._built = bytes(buf)
        self._buf = bytearray()  # release the uncompressed copy
        return self._built


def set_producer_state(
    batch: bytes | bytearray,
    producer_id: int,
    producer_epoch: int,
    base_sequence: int,
    *,
    is_transactional: bool | None = None,
) -> bytes:
    """Return ``batch`` with producer id, epoch, base sequence (and optionally the
    transactional flag) replaced and the CRC recomputed.  A ``bytearray`` argument is
    also updated in place.  Records are not re-encoded."""
    buf = batch if isinstance(batch, bytearray) else bytearray(batch)
    if len(buf) < BATCH_OVERHEAD or buf[_MAGIC_OFFSET] != 2:
        raise ValueError("not a v2 record batch")
    _PRODUCER.pack_into(buf, _PRODUCER_OFFSET, producer_id, producer_epoch, base_sequence)
    if is_transactional is not None:
        (attributes,) = _ATTRIBUTES.unpack_from(buf, _ATTRIBUTES_OFFSET)
        if is_transactional:
            attributes |= _TRANSACTIONAL_MASK
        else:
            attributes &= ~_TRANSACTIONAL_MASK
        _ATTRIBUTES.pack_into(buf, _ATTRIBUTES_OFFSET, attributes)
    _CRC.pack_into(buf, _CRC_OFFSET, crc32c(memoryview(buf)[_ATTRIBUTES_OFFSET:]))
    return bytes(buf)


def control_record_key(kind: ControlRecordType | int, version: int = 0) -> bytes:
    """Key of a control record (transaction marker) of the given type."""
    return struct.pack(">hh", version, kind)


# --------------------------------------------------------------------------- reading


@dataclass(slots=True)
class Record:
    offset: int
    timestamp: int
    key: bytes | None
    value: bytes | None
    headers: list[tuple[str, bytes | None]]


@dataclass(slots=True, frozen=True)
class ControlRecord:
    version: int
    type: int  # a ControlRecordType value, or an unknown future type

    @property
    def is_commit(self) -> bool:
        return self.type == ControlRecordType.COMMIT

    @property
    def is_abort(self) -> bool:
        return self.type == ControlRecordType.ABORT


def parse_control_record(key: bytes | None) -> ControlRecord:
    """Parse the key of a record from a control batch: (version int16, type int16)."""
    if key is None or len(key) < 4:
        raise ProtocolError("control record key shorter than 4 bytes")
    version, kind = struct.unpack_from(">hh", key)
    return ControlRecord(version, kind)


@dataclass(slots=True)
class RecordBatch:
    """One batch's header fields; :meth:`records` decodes its records.

    Legacy (magic 0/1) messages are presented as one batch each: ``base_offset`` is the
    message's offset (for a compressed wrapper, the offset of its *last* inner message),
    ``last_offset_delta`` is 0, producer fields are -1 and ``record_count`` is 1, or -1 for
    a compressed wrapper until decoded.  ``next_offset`` is right for every magic.
    """

    base_offset: int
    batch_length: int  # the wire field: size in bytes minus 12
    partition_leader_epoch: int
    magic: int
    crc: int
    attributes: int
    last_offset_delta: int
    base_timestamp: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    base_sequence: int
    record_count: int
    _buf: bytes = field(repr=False, compare=False)
    _start: int = field(repr=False, compare=False)  # first byte of the records region
    _end: int = field(repr=False, compare=False)

    @property
    def compression(self) -> int:
        """Codec id; a :class:`Compression` member when known, else the raw value."""
        return self.attributes & _CODEC_MASK

    @property
    def timestamp_type(self) -> int:
        return LOG_APPEND_TIME if self.attributes & _TIMESTAMP_TYPE_MASK else CREATE_TIME

    @property
    def is_transactional(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _TRANSACTIONAL_MASK)

    @property
    def is_control(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _CONTROL_MASK)

    @property
    def has_delete_horizon(self) -> bool:
        return self.magic >= 2 and bool(self.attributes & _DELETE_HORIZON_MASK)

    @property
    def size_in_bytes(self) -> int:
        return self.batch_length + _LOG_OVERHEAD

    @property
    def next_offset(self) -> int:
        return self.base_offset + self.last_offset_delta + 1

    @property
    def last_offset(self) -> int:
        return self.base_offset + self.last_offset_delta

    def records(
        self, *, max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
    ) -> list[Record]:
        """Decode the records; raise ProtocolError on malformed data."""
        if self.magic < 2:
            return _legacy_records(self, max_decompressed_size)
        codec = self.attributes & _CODEC_MASK
        data = self._buf
        start = self._start
        end = self._end
        if codec:
            if codec > Compression.ZSTD:
                raise ProtocolError(f"unknown compression codec {codec}")
            data = decompress(codec, memoryview(data)[start:end], max_size=max_decompressed_size)
            start = 0
            end = len(data)
        log_append = self.max_timestamp if self.attributes & _TIMESTAMP_TYPE_MASK else None
        try:
            return _parse_records(
                data, start, end, self.record_count, self.base_offset, self.base_timestamp,
                log_append,
            )  # fmt: skip
        except (IndexError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"malformed record in batch at offset {self.base_offset}") from exc

    def control_record(self) -> ControlRecord | None:
        """The transaction marker of a control batch; None for a data batch."""
        if not self.is_control:
            return None
        records = self.records()
        if not records:
            raise ProtocolError("control batch without a control record")
        return parse_control_record(records[0].key)


def _parse_records(
    data: bytes, pos: int, end: int, count: int, base_offset: int, base_ts: int,
    log_append_ts: int | None,
) -> list[Record]:  # fmt: skip
    # Hot loop: every varint takes the one-byte fast path through _UNZZ when it can.  Each
    # record's declared length is checked against the batch end first; reading inside a
    # record can then only stray as far as the end of ``data`` (IndexError, converted by the
    # caller) and the final position check catches any disagreement with the length.
    unzz = _UNZZ
    read = _read_varint
    out: list[Record] = []
    append = out.append
    if count < 0:
        raise ProtocolError(f"negative record count {count}")
    for _ in range(count):
        z = data[pos]
        if z < 0x80:
            length = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            length = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            length, pos = read(data, pos)
        rec_end = pos + length
        if length < 6 or rec_end > end:
            raise ProtocolError(f"bad record length {length}")
        # attributes (ignored), timestampDelta, offsetDelta: one byte each in the common case
        z = data[pos + 1]
        if z < 0x80:
            ts_delta = unzz[z]
            pos += 2
        else:
            ts_delta, pos = read(data, pos + 1)
        z = data[pos]
        if z < 0x80:
            off_delta = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            off_delta = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            off_delta, pos = read(data, pos)
        z = data[pos]
        if z < 0x80:
            n = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            n = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            n, pos = read(data, pos)
        if n >= 0:
            key: bytes | None = data[pos : pos + n]
            pos += n
        elif n == -1:
            key = None
        else:
            raise ProtocolError(f"bad key length {n}")
        z = data[pos]
        if z < 0x80:
            n = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            n = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            n, pos = read(data, pos)
        if n >= 0:
            value: bytes | None = data[pos : pos + n]
            pos += n
        elif n == -1:
            value = None
        else:
            raise ProtocolError(f"bad value length {n}")
        if data[pos] == 0:
            headers: list[tuple[str, bytes | None]] = []
            pos += 1
        else:
            headers, pos = _parse_headers(data, pos, rec_end)
        if pos != rec_end:
            raise ProtocolError("record length disagrees with its contents")
        append(Record(base_offset + off_delta, base_ts + ts_delta, key, value, headers))
    if pos != end:
        raise ProtocolError("record batch has bytes after its last record")
    if log_append_ts is not None:
        for record in out:
            record.timestamp = log_append_ts
    return out


def _parse_headers(
    data: bytes, pos: int, rec_end: int
) -> tuple[list[tuple[str, bytes | None]], int]:
    count, pos = _read_varint(data, pos)
    if count < 0 or count > rec_end - pos:  # each header takes at least two bytes
        raise ProtocolError(f"bad header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _ in range(count):
        n, pos = _read_varint(data, pos)
        if n < 0 or pos + n > rec_end:
            raise ProtocolError(f"bad header key length {n}")
        hkey = data[pos : pos + n].decode("utf-8")
        pos += n
        n, pos = _read_varint(data, pos)
        if n >= 0:
            if pos + n > rec_end:
                raise ProtocolError(f"bad header value length {n}")
            hvalue: bytes | None = data[pos : pos + n]
            pos += n
        elif n == -1:
            hvalue = None
        else:
            raise ProtocolError(f"bad header value length {n}")
        headers.append((hkey, hvalue))
    return headers, pos


_V0_MIN = 14  # crc, magic, attributes, key length, value length
_V1_MIN = 22  # ... plus the timestamp


def iter_batches(buf: Buffer, *, verify_crc: bool = True) -> Iterator[RecordBatch]:
    """Yield the batches in ``buf`` (concatenated batches of any magic).

    A truncated batch at the end is ignored.  With ``verify_crc`` a CRC mismatch raises
    :class:`CorruptRecordError` (CRC-32C for magic 2, CRC-32 for legacy messages).
    """
    data = buf if isinstance(buf, bytes) else bytes(buf)
    n = len(data)
    pos = 0
    unpack_header = _HEADER.unpack_from
    while pos + _MAGIC_OFFSET < n:
        (length,) = struct.unpack_from(">i", data, pos + _LENGTH_OFFSET)
        end = pos + _LOG_OVERHEAD + length
        magic = data[pos + _MAGIC_OFFSET]
        if magic == 2:
            if length < BATCH_OVERHEAD - _LOG_OVERHEAD:
                raise ProtocolError(f"record batch length {length} is too small")
            if end > n:
                return
            header = unpack_header(data, pos)
            if verify_crc and crc32c(memoryview(data)[pos + _ATTRIBUTES_OFFSET : end]) != header[4]:
                raise CorruptRecordError(f"CRC mismatch in record batch at offset {header[0]}")
            args = (*header, data, pos + BATCH_OVERHEAD, end)
            yield RecordBatch(*args)
        elif magic in (0, 1):
            if length < (_V0_MIN if magic == 0 else _V1_MIN):
                raise ProtocolError(f"message length {length} is too small")
            if end > n:
                return
            yield _legacy_batch(data, pos, end, magic, verify_crc)
        else:
            raise ProtocolError(f"unknown record batch magic {magic}")
        pos = end


# --------------------------------------------------------------------------- legacy (v0/v1)

_LEGACY_V0 = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_TS = struct.Struct(">q")
_INT32 = struct.Struct(">i")


def _legacy_batch(data: bytes, pos: int, end: int, magic: int, verify_crc: bool) -> RecordBatch:
    offset, length, crc, _, attributes = _LEGACY_V0.unpack_from(data, pos)
    if verify_crc and zlib.crc32(memoryview(data)[pos + _MAGIC_OFFSET : end]) != crc:
        raise CorruptRecordError(f"CRC mismatch in message at offset {offset}")
    body = pos + 18
    timestamp = -1
    if magic == 1:
        (timestamp,) = _LEGACY_TS.unpack_from(data, body)
        body += 8
    count = -1 if attributes & _CODEC_MASK else 1
    args = (offset, length, -1, magic, crc, attributes & 0xFF, 0, timestamp, timestamp, -1, -1)
    return RecordBatch(*args, -1, count, data, body, end)


def _legacy_bytes(data: bytes, pos: int, end: int) -> tuple[bytes | None, int]:
    (n,) = _INT32.unpack_from(data, pos)
    pos += 4
    if n == -1:
        return None, pos
    if n < 0 or pos + n > end:
        raise ProtocolError(f"bad message field length {n}")
    return data[pos : pos + n], pos + n


def _legacy_records(batch: RecordBatch, max_size: int) -> list[Record]:
    try:
        data, pos, end = batch._buf, batch._start, batch._end
        key, pos = _legacy_bytes(data, pos, end)
        value, pos = _legacy_bytes(data, pos, end)
        if pos != end:
            raise ProtocolError("message length disagrees with its contents")
        codec = batch.attributes & _CODEC_MASK
        if not codec:
            return [Record(batch.base_offset, batch.base_timestamp, key, value, [])]
        if codec > Compression.LZ4 or value is None:
            raise ProtocolError(f"bad legacy wrapper message (codec {codec})")
        inner = decompress(codec, value, max_size=max_size)
        # Nested wrappers are not allowed; CRCs of inner messages are checked like any other.
        inner_batches = list(iter_batches(inner))
        if sum(b.size_in_bytes for b in inner_batches) != len(inner):
            raise ProtocolError("truncated message inside a legacy wrapper")
        records: list[Record] = []
        for b in inner_batches:
            if b.magic > 1 or b.compression:
                raise ProtocolError("bad message inside a legacy wrapper")
            records.extend(_legacy_records(b, max_size))
    except struct.error as exc:
        raise ProtocolError("truncated legacy message") from exc
    if batch.magic == 1 and records:
        # v1 inner offsets are relative; the wrapper carries the absolute offset of the last.
        shift = batch.base_offset - records[-1].offset
        log_append = bool(batch.attributes & _TIMESTAMP_TYPE_MASK)
        for r in records:
            r.offset += shift
            if log_append:
                r.timestamp = batch.base_timestamp
    return records
