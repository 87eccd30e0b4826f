"""Record batches decoded into column buffers shaped as Arrow's, no object per record.

:class:`RecordColumns` collects the records of one partition, column by column. Keys and
values are one byte buffer each, their offsets into it (``array("i")``: 0, then the running
end after each record) and a validity byte per record (0 for a null key or value): data +
offsets + validity is the layout of an Arrow binary column, so a consumer of these columns
(the Spark source) builds Arrow arrays from whole buffers without copying or converting
them. Offsets, timestamps and timestamp types are kept as runs where Kafka makes them runs:
``offset_runs`` holds ``(index, offset)`` where the offsets stop being consecutive
(compaction, a window's start), ``batch_runs`` holds ``(index, base timestamp, timestamp
type)`` per record batch, and ``ts_deltas`` (``array("q")``) each record's timestamp minus
its batch's base. The ``offsets()``, ``timestamps()`` ... methods give the per-record lists
(for tests and the legacy path, not for the hot one). Headers, rare and variable, are kept
as the tuples :class:`ConsumerRecord` uses, and only when asked for.

The record format and its checks are those of :mod:`record_reader` (the reference decoder):
the same errors for the same malformed input, which the differential tests check on
generated batches. This module is compiled with mypyc where a C compiler exists; the
``.py`` file stays the reference and runs everywhere. Where the C kernel is built
(``speedups.py``), a batch without headers to keep is decoded by its ``decode_columns``
instead, which hands any batch it does not find well-formed back to the loop here, so that
every error (and every odd but valid encoding) is this loop's.
"""

from __future__ import annotations

from array import array
from collections.abc import Sequence

from aiokafka_ng.protocol import speedups
from aiokafka_ng.protocol.compression import DEFAULT_MAX_DECOMPRESSED_SIZE
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.record_reader import (
    _TIMESTAMP_TYPE_MASK,
    _UNZZ,
    CREATE_TIME,
    LOG_APPEND_TIME,
    NO_HEADERS,
    RecordBatch,
    _parse_headers,
    _read_varint,
)

__all__ = ["RecordColumns"]

#: The C kernel's decoder (or None: then ``RecordColumns._parse`` runs; it is the reference).
_C_DECODE_COLUMNS = speedups.kernel(__name__).decode_columns


class RecordColumns:
    """The records added so far, as column buffers (see the module docstring)."""

    def __init__(self, with_headers: bool = False) -> None:
        self.with_headers = with_headers
        self.count = 0
        self.offset_runs: list[int] = []  # index, offset, index, offset, ...
        self.next_offset = -1  # the offset a record must have to continue the last run
        self.batch_runs: list[int] = []  # index, base timestamp, timestamp type, ...
        self.ts_deltas = array("q")
        self.keys = bytearray()
        self.key_offsets = array("i", [0])  # a null key adds no bytes
        self.key_valid = bytearray()
        self.key_nulls = 0
        self.values = bytearray()
        self.value_offsets = array("i", [0])
        self.value_valid = bytearray()
        self.value_nulls = 0
        self.headers: list[tuple[tuple[str, bytes | None], ...]] = []

    @property
    def data_bytes(self) -> int:
        return len(self.keys) + len(self.values)

    def offsets(self) -> list[int]:
        """Every record's offset (from the runs)."""
        out: list[int] = []
        runs = self.offset_runs
        for j in range(0, len(runs), 2):
            stop = runs[j + 2] if j + 2 < len(runs) else self.count
            out.extend(range(runs[j + 1], runs[j + 1] + stop - runs[j]))
        return out

    def timestamps(self) -> list[int]:
        """Every record's timestamp (its batch's base plus its delta)."""
        return [self._batch_of(i)[0] + d for i, d in enumerate(self.ts_deltas)]

    def timestamp_types(self) -> list[int]:
        return [self._batch_of(i)[1] for i in range(self.count)]

    def key_ends(self) -> list[int]:
        return list(self.key_offsets[1:])

    def value_ends(self) -> list[int]:
        return list(self.value_offsets[1:])

    def _batch_of(self, index: int) -> tuple[int, int]:
        runs = self.batch_runs
        j = 0
        while j + 3 < len(runs) and runs[j + 3] <= index:
            j += 3
        return runs[j + 1], runs[j + 2]

    def add_batch(
        self,
        batch: RecordBatch,
        low: int,
        high: int,
        max_decompressed_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE,
    ) -> None:
        """Append the records of ``batch`` whose offset is in ``[low, high)``.

        Control batches are the caller's to skip. Raises ProtocolError on malformed data.
        """
        if batch.magic < 2:
            # Legacy messages (pre-0.11 brokers or topics): decoded by the reference
            # decoder; they are rare enough that objects per record do not matter.
            ts_type = batch.timestamp_type
            for r in batch.records(max_decompressed_size=max_decompressed_size):
                if low <= r.offset < high:
                    self._append(r.offset, r.timestamp, ts_type, r.key, r.value, r.headers)
            return
        data, start, end = batch._records_region(max_decompressed_size)
        c_decode = _C_DECODE_COLUMNS
        if c_decode is not None and not self.with_headers:
            log_append, base, ts_type = _timestamps(batch)
            buffers = (
                self.keys, self.values, self.key_valid, self.value_valid,
                self.key_offsets, self.value_offsets, self.ts_deltas,
            )  # fmt: skip
            done = c_decode(
                data, start, end, batch.record_count, batch.base_offset, log_append, low, high,
                self.count, self.next_offset, self.offset_runs, buffers,
            )  # fmt: skip
            if done is not None:  # else: not plainly well-formed, the loop below decides
                added, self.next_offset, key_nulls, value_nulls = done
                if added:
                    self.batch_runs += (self.count, base, ts_type)
                self.count += added
                self.key_nulls += key_nulls
                self.value_nulls += value_nulls
                return
        try:
            self._parse(data, start, end, batch, low, high)
        except (IndexError, UnicodeDecodeError) as exc:
            raise ProtocolError(f"malformed record in batch at offset {batch.base_offset}") from exc

    def _append(
        self,
        offset: int,
        timestamp: int,
        ts_type: int,
        key: bytes | None,
        value: bytes | None,
        headers: Sequence[tuple[str, bytes | None]],
    ) -> None:
        index = self.count
        if offset != self.next_offset:
            self.offset_runs += (index, offset)
        self.next_offset = offset + 1
        runs = self.batch_runs
        if not runs or runs[-1] != ts_type:
            runs += (index, timestamp, ts_type)
        self.ts_deltas.append(timestamp - runs[-2])
        if key is None:
            self.key_valid.append(0)
            self.key_nulls += 1
        else:
            self.keys += key
            self.key_valid.append(1)
        self.key_offsets.append(len(self.keys))
        if value is None:
            self.value_valid.append(0)
            self.value_nulls += 1
        else:
            self.values += value
            self.value_valid.append(1)
        self.value_offsets.append(len(self.values))
        if self.with_headers:
            self.headers.append(tuple(headers))
        self.count += 1

    def _parse(
        self, data: bytes, pos: int, end: int, batch: RecordBatch, low: int, high: int
    ) -> None:
        # The loop of record_reader._parse_records, writing into buffers. Locals, not
        # attributes or globals, inside the loop (faster in CPython and under mypyc).
        unzz = _UNZZ
        count = batch.record_count
        if count < 0:
            raise ProtocolError(f"negative record count {count}")
        base_offset = batch.base_offset
        log_append, base, ts_type = _timestamps(batch)
        with_headers = self.with_headers
        ts_deltas = self.ts_deltas
        keys = self.keys
        key_offsets = self.key_offsets
        key_valid = self.key_valid
        values = self.values
        value_offsets = self.value_offsets
        value_valid = self.value_valid
        headers_out = self.headers
        index = self.count  # of the next record added
        next_offset = self.next_offset
        batch_run = False  # this batch's run started (at its first record in the window)
        added = 0
        key_nulls = 0
        value_nulls = 0
        # Running ends and deltas go to lists here and into their arrays once per batch
        # (``fromlist``: in CPython ``array.append`` costs more than ``list.append``);
        # ``finally`` keeps the arrays in step with the byte buffers when a malformed record
        # stops the loop.
        deltas: list[int] = []
        key_ends: list[int] = []
        value_ends: list[int] = []
        key_end = key_offsets[-1]
        value_end = value_offsets[-1]
        try:
            for _i in range(count):
                z = data[pos]
                if z < 0x80:
                    length = unzz[z]
                    pos += 1
                else:
                    length, pos = _read_varint(data, pos)
                rec_end = pos + length
                if length < 6 or rec_end > end:
                    raise ProtocolError(f"bad record length {length}")
                z = data[pos + 1]  # after the attributes byte
                if z < 0x80:
                    ts_delta = unzz[z]
                    pos += 2
                else:
                    ts_delta, pos = _read_varint(data, pos + 1)
                z = data[pos]
                if z < 0x80:
                    off_delta = unzz[z]
                    pos += 1
                else:
                    off_delta, pos = _read_varint(data, pos)
                z = data[pos]
                if z < 0x80:
                    key_len = unzz[z]
                    pos += 1
                else:
                    key_len, pos = _read_varint(data, pos)
                key_at = pos
                if key_len >= 0:
                    # Bounded before it moves ``pos``: as in record_reader, an index beyond
                    # int64 raises ValueError compiled (the interpreter's IndexError).
                    if key_len > rec_end - pos:
                        raise ProtocolError(f"bad key length {key_len}")
                    pos += key_len
                elif key_len != -1:
                    raise ProtocolError(f"bad key length {key_len}")
                z = data[pos]
                if z < 0x80:
                    value_len = unzz[z]
                    pos += 1
                else:
                    value_len, pos = _read_varint(data, pos)
                value_at = pos
                if value_len >= 0:
                    if value_len > rec_end - pos:
                        raise ProtocolError(f"bad value length {value_len}")
                    pos += value_len
                elif value_len != -1:
                    raise ProtocolError(f"bad value length {value_len}")
                headers = NO_HEADERS
                if data[pos] == 0:
                    pos += 1
                else:
                    headers, pos = _parse_headers(data, pos, rec_end)
                if pos != rec_end:
                    raise ProtocolError("record length disagrees with its contents")
                offset = base_offset + off_delta
                if offset < low or offset >= high:
                    continue
                if offset != next_offset:
                    self.offset_runs += (index, offset)
                next_offset = offset + 1
                if not batch_run:
                    # One run per batch: its base and type (deltas are relative to that base).
                    self.batch_runs += (index, base, ts_type)
                    batch_run = True
                deltas.append(0 if log_append else ts_delta)
                if key_len >= 0:
                    keys += data[key_at : key_at + key_len]
                    key_valid.append(1)
                    key_end += key_len
                else:
                    key_valid.append(0)
                    key_nulls += 1
                key_ends.append(key_end)
                if value_len >= 0:
                    values += data[value_at : value_at + value_len]
                    value_valid.append(1)
                    value_end += value_len
                else:
                    value_valid.append(0)
                    value_nulls += 1
                value_ends.append(value_end)
                if with_headers:
                    headers_out.append(headers)
                index += 1
                added += 1
        finally:
            ts_deltas.fromlist(deltas)
            key_offsets.fromlist(key_ends)
            value_offsets.fromlist(value_ends)
        if pos != end:
            raise ProtocolError("record batch has bytes after its last record")
        self.count += added
        self.next_offset = next_offset
        self.key_nulls += key_nulls
        self.value_nulls += value_nulls


def _timestamps(batch: RecordBatch) -> tuple[bool, int, int]:
    """A v2 batch's timestamps as its run keeps them: whether they are the broker's log
    append time, the base its records' deltas are added to (the batch's one log append time,
    else its base timestamp), and the timestamp type."""
    log_append = bool(batch.attributes & _TIMESTAMP_TYPE_MASK)
    if log_append:
        return True, batch.max_timestamp, LOG_APPEND_TIME
    return False, batch.base_timestamp, CREATE_TIME
