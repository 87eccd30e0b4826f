"""aiokafka's ``create_batch()``/``send_batch(batch, topic, partition=...)`` for the compat
producer.

aiokafka's BatchBuilder encodes a record batch in the client; here a :class:`BatchBuilder`
keeps its records (serialized at ``append``, as aiokafka does, to size the batch) and
``send_batch`` hands them to the native bulk path as :class:`ProducerRecord` items, each
with the one partition given, so they land on it in append order. The producer's
serializers run again on the original key and value when the batch is sent: the native
path always serializes, and the bytes made at ``append`` only size the batch.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence
from typing import Any, NamedTuple

from aiokafka_ng.producer import DeliveryFuture, ProducerRecord, RecordMetadata

__all__ = ["BatchBuilder", "BatchFuture", "BatchRecordMetadata"]

# A v2 batch's header, and a bound on one record's framing besides key, value and headers
# (length, attributes, timestamp and offset deltas, key/value lengths, header count as
# varints): ``size()`` is this estimate of the uncompressed batch, not an encoding.
_BATCH_HEADER = 61
_RECORD_FRAMING = 21
_HEADER_FRAMING = 10


class BatchRecordMetadata(NamedTuple):
    """What :meth:`BatchBuilder.append` returns (aiokafka's fields): the record's offset
    within the batch, no crc (v2 batches have one per batch), its size and timestamp."""

    offset: int
    crc: int | None
    size: int
    timestamp: int


class BatchBuilder:
    """aiokafka's BatchBuilder: fill with :meth:`append`, submit with
    ``producer.send_batch(batch, topic, partition=p)``."""

    def __init__(
        self,
        batch_size: int,
        key_serializer: Callable[[Any], Any] | None,
        value_serializer: Callable[[Any], Any] | None,
    ) -> None:
        self._batch_size = batch_size
        self._key_ser = key_serializer
        self._value_ser = value_serializer
        self._records: list[ProducerRecord] = []
        self._size = _BATCH_HEADER
        self._closed = False

    def append(
        self,
        *,
        timestamp: int | None,
        key: Any,
        value: Any,
        headers: Sequence[tuple[str, bytes | None]] = (),
    ) -> BatchRecordMetadata | None:
        """Add a record (``timestamp`` in ms since the epoch, None for now). Returns its
        metadata, or None when the batch is closed or the record would pass the
        producer's batch size (the batch is then closed; its first record always fits)."""
        if self._closed:
            return None
        k = key if self._key_ser is None else self._key_ser(key)
        v = value if self._value_ser is None else self._value_ser(value)
        hdrs = list(headers or ())
        size = _RECORD_FRAMING + (len(k) if k is not None else 0)
        size += len(v) if v is not None else 0
        for hk, hv in hdrs:
            size += _HEADER_FRAMING + len(hk.encode()) + (len(hv) if hv is not None else 0)
        if self._records and self._size + size > self._batch_size:
            self.close()
            return None
        if timestamp is None:
            timestamp = time.time_ns() // 1_000_000
        offset = len(self._records)
        self._records.append(ProducerRecord(value, key, None, timestamp, hdrs or None))
        self._size += size
        return BatchRecordMetadata(offset, None, size, timestamp)

    def close(self) -> None:
        """Refuse further appends (``send_batch`` closes the batch too)."""
        self._closed = True

    def closed(self) -> bool:
        return self._closed

    def size(self) -> int:
        """The batch's size in bytes (an estimate of its uncompressed encoding)."""
        return self._size

    def record_count(self) -> int:
        return len(self._records)

    def _take(self, partition: int) -> list[ProducerRecord]:
        self.close()
        return [
            ProducerRecord(r.value, r.key, partition, r.timestamp_ms, r.headers)
            for r in self._records
        ]


class BatchFuture:
    """What aiokafka's ``send_batch`` returns: awaited, the batch's ``RecordMetadata``
    (its first record's: topic, partition, base offset, timestamp), or the first error."""

    def __init__(self, futures: list[DeliveryFuture]) -> None:
        self._futures = futures

    def done(self) -> bool:
        return all(f.done() for f in self._futures)

    async def _wait(self) -> RecordMetadata:
        first: RecordMetadata | None = None
        for fut in self._futures:
            meta = await fut
            if first is None:
                first = meta
        if first is None:
            raise ValueError("send_batch: the batch holds no records")
        return first

    def __await__(self) -> Generator[Any, None, RecordMetadata]:
        return self._wait().__await__()
