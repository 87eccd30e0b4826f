"""Record batches decoded into column buffers, with no Python object per record.

:class:`RecordColumns` collects the records of one partition, column by column: offsets,
timestamps and timestamp types as lists of ints, keys and values as one byte buffer each
plus the end position of every entry and a validity byte per record (0 for a null key or
value). That is the layout of an Arrow binary column (data + offsets + validity), so a
consumer of these columns (the Spark source) builds Arrow arrays from whole buffers instead
of from one ``bytes`` object per key and value. Headers, rare and variable, are kept as the
tuples :class:`ConsumerRecord` uses, and only when asked for.

The record format and its checks are those of :mod:`record_reader` (the reference decoder):
the same errors for the same malformed input, which the differential tests check on
generated batches. This module is compiled with mypyc where a C compiler exists; the
``.py`` file stays the reference and runs everywhere.
"""

from __future__ import annotations

from collections.abc import Sequence

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


class RecordColumns:
    """The records added so far, as column buffers (see the module docstring)."""

    def __init__(self, with_headers: bool = False) -> None:
        self.with_headers = with_headers
        self.count = 0
        self.offsets: list[int] = []
        self.timestamps: list[int] = []
        self.timestamp_types: list[int] = []
        self.keys = bytearray()
        self.key_ends: list[int] = []
        self.key_valid = bytearray()
        self.key_nulls = 0
        self.values = bytearray()
        self.value_ends: list[int] = []
        self.value_valid = bytearray()
        self.value_nulls = 0
        self.headers: list[tuple[tuple[str, bytes | None], ...]] = []

    @property
    def data_bytes(self) -> int:
        return len(self.keys) + len(self.values)

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
        self.offsets.append(offset)
        self.timestamps.append(timestamp)
        self.timestamp_types.append(ts_type)
        if key is None:
            self.key_valid.append(0)
            self.key_nulls += 1
        else:
            self.keys += key
            self.key_valid.append(1)
        self.key_ends.append(len(self.keys))
        if value is None:
            self.value_valid.append(0)
            self.value_nulls += 1
        else:
            self.values += value
            self.value_valid.append(1)
        self.value_ends.append(len(self.values))
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
        log_append = bool(batch.attributes & _TIMESTAMP_TYPE_MASK)
        ts_type = LOG_APPEND_TIME if log_append else CREATE_TIME
        base_ts = batch.base_timestamp
        fixed_ts = batch.max_timestamp
        with_headers = self.with_headers
        offsets = self.offsets
        timestamps = self.timestamps
        ts_types = self.timestamp_types
        keys = self.keys
        key_ends = self.key_ends
        key_valid = self.key_valid
        values = self.values
        value_ends = self.value_ends
        value_valid = self.value_valid
        headers_out = self.headers
        added = 0
        key_nulls = 0
        value_nulls = 0
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
            offsets.append(offset)
            timestamps.append(fixed_ts if log_append else base_ts + ts_delta)
            ts_types.append(ts_type)
            if key_len >= 0:
                keys += data[key_at : key_at + key_len]
                key_valid.append(1)
            else:
                key_valid.append(0)
                key_nulls += 1
            key_ends.append(len(keys))
            if value_len >= 0:
                values += data[value_at : value_at + value_len]
                value_valid.append(1)
            else:
                value_valid.append(0)
                value_nulls += 1
            value_ends.append(len(values))
            if with_headers:
                headers_out.append(headers)
            added += 1
        if pos != end:
            raise ProtocolError("record batch has bytes after its last record")
        self.count += added
        self.key_nulls += key_nulls
        self.value_nulls += value_nulls
