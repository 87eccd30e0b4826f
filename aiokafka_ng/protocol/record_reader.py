"""Reading Kafka record batches (magic v2) and legacy message sets (magic 0 and 1).

Theory of operation
-------------------
:func:`iter_batches` walks a buffer of concatenated batches (a fetch response's ``records``)
using the length field every magic shares at the same offset, and stops quietly at a
truncated trailing batch: brokers cut fetch responses at a byte limit, not at a batch
boundary.  Header fields are decoded eagerly, records lazily: :meth:`RecordBatch.records`
gives protocol-level :class:`Record` objects, :meth:`RecordBatch.consumer_records` gives the
:class:`ConsumerRecord` objects the consumer hands to the application, built by the same
loop in one step (no intermediate object per record, and one shared empty tuple for records
without headers: fewer allocations means fewer cyclic-GC passes, which a profile of
``getmany`` showed costing a fifth of its time).

Every malformed input raises :class:`~aiokafka_ng.protocol.errors.ProtocolError` (a CRC
mismatch raises :class:`CorruptRecordError`): the parser checks every declared length
against the bytes actually present, and the ``IndexError`` a truncated field triggers is
converted to ``ProtocolError`` in one place (:meth:`RecordBatch._decode`).  Loops over
declared counts consume input on every turn, so allocation is bounded by the input size and,
for compressed batches, by ``max_decompressed_size`` (see ``compression.py``).

Legacy message sets (magic 0/1, including compressed wrapper messages) are read, never
written, so that very old topics stay consumable; each message is presented as a batch.

This module is compiled with mypyc when a C compiler is available (see ``setup.py`` and
``docs/internals.md``): the record classes are written as plain classes with ``__slots__``
and an explicit ``__init__`` rather than dataclasses, because mypyc turns those into native
classes whose construction from compiled code is a C call, while a dataclass keeps an
interpreted ``__init__``.  The same source is the pure-Python twin.

Varints in records are zigzag encoded (``0 -> 0, -1 -> 1, 1 -> 2 ...``), as in protobuf.
"""

from __future__ import annotations

import struct
import zlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from enum import IntEnum
from typing import Any, Final, Generic, NamedTuple, TypeVar

from crc32c import crc32c

from aiokafka_ng.protocol import speedups
from aiokafka_ng.protocol.compression import (
    DEFAULT_MAX_DECOMPRESSED_SIZE,
    Compression,
    decompress,
)
from aiokafka_ng.protocol.errors import ProtocolError

__all__ = [
    "BATCH_OVERHEAD",
    "CREATE_TIME",
    "LOG_APPEND_TIME",
    "ConsumerRecord",
    "ControlRecord",
    "ControlRecordType",
    "CorruptRecordError",
    "Record",
    "RecordBatch",
    "TopicPartition",
    "iter_batches",
    "parse_control_record",
]

Buffer = bytes | bytearray | memoryview
K = TypeVar("K")
V = TypeVar("V")

CREATE_TIME: Final = 0
LOG_APPEND_TIME: Final = 1


class CorruptRecordError(ProtocolError):
    """A record batch whose CRC does not match its contents."""


class ControlRecordType(IntEnum):
    ABORT = 0
    COMMIT = 1


# baseOffset batchLength partitionLeaderEpoch magic crc attributes lastOffsetDelta
# baseTimestamp maxTimestamp producerId producerEpoch baseSequence recordsCount
_HEADER: Final = struct.Struct(">qiibIhiqqqhii")
BATCH_OVERHEAD: Final = _HEADER.size  # 61: a batch's size without its records
_LENGTH_OFFSET: Final = 8
_MAGIC_OFFSET: Final = 16
_CRC_OFFSET: Final = 17
_ATTRIBUTES_OFFSET: Final = 21  # the CRC covers from here to the end
_LOG_OVERHEAD: Final = 12  # baseOffset + batchLength: the bytes batchLength does not count

_CODEC_MASK: Final = 0x07
_TIMESTAMP_TYPE_MASK: Final = 0x08
_TRANSACTIONAL_MASK: Final = 0x10
_CONTROL_MASK: Final = 0x20
_DELETE_HORIZON_MASK: Final = 0x40


# --------------------------------------------------------------------------- varints

# Zigzag decoding of single-byte varints (the common case when reading).
_UNZZ: Final[tuple[int, ...]] = tuple((z >> 1) ^ -(z & 1) for z in range(128))


def _read_varint(data: bytes, pos: int) -> tuple[int, int]:
    """Decode a zigzag varint of up to 10 bytes at ``pos``; return (value, new pos).

    The value is a 64-bit integer (Kafka's varlong): a tenth byte above 1 would carry bits
    past the 64th, and is rejected. So every decoded length, delta and count fits int64,
    which the compiled twins (mypyc and the C kernel) rely on."""
    result = 0
    shift = 0
    while True:
        b = data[pos]
        pos += 1
        result |= (b & 0x7F) << shift
        if b < 0x80:
            if shift == 63 and b > 1:
                raise ProtocolError("varint beyond 64 bits")
            return (result >> 1) ^ -(result & 1), pos
        shift += 7
        if shift > 63:
            raise ProtocolError("varint longer than 10 bytes")


# --------------------------------------------------------------------------- reading


class Record:
    """One record of a batch as the protocol layer sees it (offset and timestamp absolute;
    ``headers`` a tuple of ``(key, value)`` pairs, the shared :data:`NO_HEADERS` when empty)."""

    __slots__ = ("headers", "key", "offset", "timestamp", "value")

    def __init__(
        self,
        offset: int,
        timestamp: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        self.offset = offset
        self.timestamp = timestamp
        self.key = key
        self.value = value
        self.headers = headers

    def _fields(self) -> tuple[int, int, bytes | None, bytes | None, Sequence[Any]]:
        return (self.offset, self.timestamp, self.key, self.value, self.headers)

    def __eq__(self, other: object) -> bool:
        return type(other) is Record and self._fields() == other._fields()

    def __repr__(self) -> str:
        o, t, k, v, h = self._fields()
        return f"Record(offset={o!r}, timestamp={t!r}, key={k!r}, value={v!r}, headers={h!r})"

    def __reduce__(self) -> tuple[type[Record], tuple[Any, ...]]:
        return (Record, self._fields())


class TopicPartition(NamedTuple):
    """A partition of a topic. Hashable and ordered (topic, then partition)."""

    topic: str
    partition: int


#: The headers of every consumer record that has none (immutable, so it can be shared).
NO_HEADERS: Final[tuple[tuple[str, bytes | None], ...]] = ()

_CONSUMER_FIELDS = (
    "topic", "partition", "offset", "timestamp", "timestamp_type", "key", "value", "checksum",
    "serialized_key_size", "serialized_value_size", "headers", "leader_epoch",
)  # fmt: skip

# GC tracking of consumer records (the C kernel's ``track``/``untrack``, None without it).
# The cyclic GC is triggered by allocations of tracked objects, and a fetch decodes thousands
# of records at once: they outlive the young collections that run meanwhile and fill the old
# generations, whose full collections (every object of the process: ~10 ms here) took 25-45%
# of ``getmany``. A record as decoded holds only ints, str, bytes/None and tuples of those,
# so no reference cycle can pass through it: the decoder untracks it at once, as CPython
# untracks its own tuples and dicts of atomic values. Every public attribute is a property
# whose setter tracks the record again unless the new value is of an atomic type, so a
# record that could be part of a cycle is always visible to the GC.
_KERNEL = speedups.kernel(__name__)
_C_TRACK = _KERNEL.track
_C_UNTRACK = _KERNEL.untrack
_ATOMIC: Final = frozenset({type(None), bool, int, float, str, bytes})


class ConsumerRecord(Generic[K, V]):
    """One record as handed to the application.

    ``timestamp_type`` is 0 (create time) or 1 (log append time). ``key``/``value`` are what
    the deserializers returned (raw bytes by default); the ``serialized_*_size`` fields are
    the sizes on the wire, -1 for null. ``headers`` is a tuple of ``(key, value)`` pairs.
    ``checksum`` is always None (v2 batches carry one CRC per batch, not per record) and is
    kept for aiokafka compatibility.

    Records compare equal field by field, print like a dataclass, pickle and copy. It is a
    plain class rather than a dataclass because the consumer makes records in bulk: compiled
    (see ``docs/internals.md``) it is a native class built in one C call. Defined here, in
    the protocol layer, so the batch decoder can build it directly; the public name is
    ``aiokafka_ng.consumer.ConsumerRecord``. The fields are properties over slots so that
    assigning one can put the record back under the GC's watch (see ``_C_TRACK`` above).
    """

    __slots__ = tuple("_" + name for name in _CONSUMER_FIELDS)

    def __init__(
        self,
        topic: str,
        partition: int,
        offset: int,
        timestamp: int,
        timestamp_type: int,
        key: K,
        value: V,
        checksum: int | None,
        serialized_key_size: int,
        serialized_value_size: int,
        headers: Sequence[tuple[str, bytes | None]],
        leader_epoch: int = -1,
    ) -> None:
        self._topic = topic
        self._partition = partition
        self._offset = offset
        self._timestamp = timestamp
        self._timestamp_type = timestamp_type
        self._key = key
        self._value = value
        self._checksum = checksum
        self._serialized_key_size = serialized_key_size
        self._serialized_value_size = serialized_value_size
        self._headers = headers
        self._leader_epoch = leader_epoch

    def _assigned(self, value: object) -> None:
        """After a field was set: a value that may hold references makes the record
        tracked again (it was untracked if the decoder made it)."""
        track = _C_TRACK
        if track is not None and value.__class__ not in _ATOMIC:
            track(self)

    @property
    def topic(self) -> str:
        return self._topic

    @topic.setter
    def topic(self, value: str) -> None:
        self._topic = value
        self._assigned(value)

    @property
    def partition(self) -> int:
        return self._partition

    @partition.setter
    def partition(self, value: int) -> None:
        self._partition = value
        self._assigned(value)

    @property
    def offset(self) -> int:
        return self._offset

    @offset.setter
    def offset(self, value: int) -> None:
        self._offset = value
        self._assigned(value)

    @property
    def timestamp(self) -> int:
        return self._timestamp

    @timestamp.setter
    def timestamp(self, value: int) -> None:
        self._timestamp = value
        self._assigned(value)

    @property
    def timestamp_type(self) -> int:
        return self._timestamp_type

    @timestamp_type.setter
    def timestamp_type(self, value: int) -> None:
        self._timestamp_type = value
        self._assigned(value)

    @property
    def key(self) -> K:
        return self._key

    @key.setter
    def key(self, value: K) -> None:
        self._key = value
        self._assigned(value)

    @property
    def value(self) -> V:
        return self._value

    @value.setter
    def value(self, value: V) -> None:
        self._value = value
        self._assigned(value)

    @property
    def checksum(self) -> int | None:
        return self._checksum

    @checksum.setter
    def checksum(self, value: int | None) -> None:
        self._checksum = value
        self._assigned(value)

    @property
    def serialized_key_size(self) -> int:
        return self._serialized_key_size

    @serialized_key_size.setter
    def serialized_key_size(self, value: int) -> None:
        self._serialized_key_size = value
        self._assigned(value)

    @property
    def serialized_value_size(self) -> int:
        return self._serialized_value_size

    @serialized_value_size.setter
    def serialized_value_size(self, value: int) -> None:
        self._serialized_value_size = value
        self._assigned(value)

    @property
    def headers(self) -> Sequence[tuple[str, bytes | None]]:
        return self._headers

    @headers.setter
    def headers(self, value: Sequence[tuple[str, bytes | None]]) -> None:
        self._headers = value
        self._assigned(value)

    @property
    def leader_epoch(self) -> int:
        return self._leader_epoch

    @leader_epoch.setter
    def leader_epoch(self, value: int) -> None:
        self._leader_epoch = value
        self._assigned(value)

    def _fields(self) -> tuple[Any, ...]:
        return (
            self._topic, self._partition, self._offset, self._timestamp, self._timestamp_type,
            self._key, self._value, self._checksum, self._serialized_key_size,
            self._serialized_value_size, self._headers, self._leader_epoch,
        )  # fmt: skip

    def __eq__(self, other: object) -> bool:
        return type(other) is ConsumerRecord and self._fields() == other._fields()

    def __repr__(self) -> str:
        parts = ", ".join(
            f"{n}={v!r}" for n, v in zip(_CONSUMER_FIELDS, self._fields(), strict=True)
        )
        return f"ConsumerRecord({parts})"

    def __reduce__(self) -> tuple[type[ConsumerRecord[Any, Any]], tuple[Any, ...]]:
        return (ConsumerRecord, self._fields())

    @property
    def topic_partition(self) -> TopicPartition:
        return TopicPartition(self._topic, self._partition)


if _C_UNTRACK is None:
    # Without the kernel (the pure build: interpreted, see ``aiokafka_ng._native``) records
    # are never untracked, and a property read costs ~30 ns more than a slot's: each field
    # is its slot (whose setter then has nothing to re-track).
    for _name in _CONSUMER_FIELDS:
        setattr(ConsumerRecord, _name, getattr(ConsumerRecord, "_" + _name))


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
        out: list[Record] = self._decode(None, -1, max_decompressed_size)
        return out

    def consumer_records(
        self,
        topic: str,
        partition: int,
        *,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> list[ConsumerRecord[bytes | None, bytes | None]]:
        """Decode the records straight into :class:`ConsumerRecord` objects (raw key and
        value, ``leader_epoch`` from the batch); raise ProtocolError on malformed data."""
        if self.magic < 2:
            ts_type = self.timestamp_type
            return [
                ConsumerRecord(
                    topic,
                    partition,
                    r.offset,
                    r.timestamp,
                    ts_type,
                    r.key,
                    r.value,
                    None,
                    -1 if r.key is None else len(r.key),
                    -1 if r.value is None else len(r.value),
                    r.headers,
                    -1,
                )
                for r in _legacy_records(self, max_decompressed_size)
            ]
        out: list[ConsumerRecord[bytes | None, bytes | None]] = self._decode(
            topic, partition, max_decompressed_size
        )
        return out

    def _records_region(self, max_size: int) -> tuple[bytes, int, int]:
        """``(data, start, end)``: the records region, decompressed when the batch is."""
        codec = self.attributes & _CODEC_MASK
        if not codec:
            return self._buf, self._start, self._end
        if codec > Compression.ZSTD:
            raise ProtocolError(f"unknown compression codec {codec}")
        data = decompress(codec, memoryview(self._buf)[self._start : self._end], max_size=max_size)
        return data, 0, len(data)

    def _decode(self, topic: str | None, partition: int, max_size: int) -> list[Any]:
        data, start, end = self._records_region(max_size)
        log_append = bool(self.attributes & _TIMESTAMP_TYPE_MASK)
        try:
            return _parse_records(
                data, start, end, self.record_count, self.base_offset, self.base_timestamp,
                self.max_timestamp if log_append else -1, log_append, topic, partition,
                self.partition_leader_epoch,
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
    log_append_ts: int, log_append: bool, topic: str | None, partition: int, epoch: int,
) -> list[Any]:  # fmt: skip
    """The records of one batch's (decompressed) records region: :class:`Record` objects
    when ``topic`` is None, else :class:`ConsumerRecord` objects of that topic-partition."""
    # Hot loop: every varint takes the one-byte fast path through _UNZZ when it can.  Each
    # record's declared length is checked against the batch end first; reading inside a
    # record can then only stray as far as the end of ``data`` (IndexError, converted by the
    # caller) and the final position check catches any disagreement with the length.
    # Locals, not module globals, in the loop: faster in CPython, and mypyc compiles a
    # global read to a dict lookup.  No ``append = out.append`` alias either: mypyc turns
    # ``out.append(x)`` into PyList_Append but calls an alias like any Python object.
    unzz = _UNZZ
    no_headers = NO_HEADERS
    untrack = _C_UNTRACK
    out: list[Any] = []
    ts_type = LOG_APPEND_TIME if log_append else CREATE_TIME
    if count < 0:
        raise ProtocolError(f"negative record count {count}")
    for _i in range(count):  # named: mypyc boxes a loop variable called "_"
        z = data[pos]
        if z < 0x80:
            length = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            length = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            length, pos = _read_varint(data, pos)
        rec_end = pos + length
        if length < 6 or rec_end > end:
            raise ProtocolError(f"bad record length {length}")
        # attributes (ignored), timestampDelta, offsetDelta: one byte each in the common case
        z = data[pos + 1]
        if z < 0x80:
            ts_delta = unzz[z]
            pos += 2
        else:
            ts_delta, pos = _read_varint(data, pos + 1)
        z = data[pos]
        if z < 0x80:
            off_delta = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            off_delta = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            off_delta, pos = _read_varint(data, pos)
        z = data[pos]
        if z < 0x80:
            key_len = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            key_len = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            key_len, pos = _read_varint(data, pos)
        if key_len >= 0:
            # Checked before slicing: mypyc slices with int64 indices, so a length beyond
            # them would raise ValueError compiled where the interpreter clips the slice.
            if key_len > rec_end - pos:
                raise ProtocolError(f"bad key length {key_len}")
            key: bytes | None = data[pos : pos + key_len]
            pos += key_len
        elif key_len == -1:
            key = None
        else:
            raise ProtocolError(f"bad key length {key_len}")
        z = data[pos]
        if z < 0x80:
            value_len = unzz[z]
            pos += 1
        elif data[pos + 1] < 0x80:
            z = (z & 0x7F) | (data[pos + 1] << 7)
            value_len = (z >> 1) ^ -(z & 1)
            pos += 2
        else:
            value_len, pos = _read_varint(data, pos)
        if value_len >= 0:
            if value_len > rec_end - pos:
                raise ProtocolError(f"bad value length {value_len}")
            value: bytes | None = data[pos : pos + value_len]
            pos += value_len
        elif value_len == -1:
            value = None
        else:
            raise ProtocolError(f"bad value length {value_len}")
        headers = no_headers
        if data[pos] == 0:
            pos += 1
        else:
            headers, pos = _parse_headers(data, pos, rec_end)
        if pos != rec_end:
            raise ProtocolError("record length disagrees with its contents")
        timestamp = log_append_ts if log_append else base_ts + ts_delta
        if topic is None:
            out.append(Record(base_offset + off_delta, timestamp, key, value, headers))
        else:
            rec = ConsumerRecord(
                topic,
                partition,
                base_offset + off_delta,
                timestamp,
                ts_type,
                key,
                value,
                None,
                key_len,
                value_len,
                headers,
                epoch,
            )
            if untrack is not None:
                untrack(rec)  # at once: see _C_TRACK
            out.append(rec)
    if pos != end:
        raise ProtocolError("record batch has bytes after its last record")
    return out


def _parse_headers(
    data: bytes, pos: int, rec_end: int
) -> tuple[tuple[tuple[str, bytes | None], ...], int]:
    count, pos = _read_varint(data, pos)
    if count < 0 or count > rec_end - pos:  # each header takes at least two bytes
        raise ProtocolError(f"bad header count {count}")
    headers: list[tuple[str, bytes | None]] = []
    for _i in range(count):
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
    return tuple(headers), pos


_V0_MIN: Final = 14  # crc, magic, attributes, key length, value length
_V1_MIN: Final = 22  # ... plus the timestamp


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

_LEGACY_V0: Final = struct.Struct(">qiIbb")  # offset, size, crc, magic, attributes
_LEGACY_TS: Final = struct.Struct(">q")
_INT32: Final = struct.Struct(">i")


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
            return [Record(batch.base_offset, batch.base_timestamp, key, value, NO_HEADERS)]
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
