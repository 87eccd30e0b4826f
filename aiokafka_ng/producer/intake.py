"""Where records enter the producer: the checks and the state ``send()`` and the bulk path share.

``Producer.send()`` takes one record, ``send_batch``/``send_many`` (``bulk.py``) a run of
them; both validate the same way (types, topic names, partition, timestamp, the size a
request and the buffer can hold) and read the same parts (the accumulator, the memory pool,
the transaction, the serializers). Those live here, in one :class:`Intake` the producer
builds and owns, so the bulk path needs nothing private of :class:`Producer` and the two
modules do not import each other. ``send()`` reads the intake's fields directly: it is the
per-record hot path, and a field read costs what reading the producer's own did.

``send()``'s common case (bytes or None key and value, no headers, serializer or
transaction, metadata known) runs as one C call when the C kernel is built:
:func:`bind_send_fast` hands ``_send.c`` these classes once, and ``send()`` calls the
result first; it returns None -- having done nothing -- for every other case, which the
Python path below it then takes (the reference twin: ``tests/producer/test_send_fast.py``).
"""

from __future__ import annotations

import asyncio
import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from time import time_ns
from typing import TYPE_CHECKING, Any

from aiokafka_ng.errors import InvalidTopicError, KafkaError, MessageSizeTooLargeError
from aiokafka_ng.protocol import speedups
from aiokafka_ng.protocol.records import BATCH_OVERHEAD

if TYPE_CHECKING:
    from aiokafka_ng.producer.engine import ProducerEngine
    from aiokafka_ng.producer.transactions import TransactionManager

_log = logging.getLogger(__name__)

__all__ = [
    "RECORD_OVERHEAD",
    "Intake",
    "ProducerRecord",
    "as_bytes",
    "bad_partition",
    "bad_timestamp",
    "check_headers",
]

#: Per-record bytes charged to the memory pool on top of key/value/headers, so that
#: buffer_memory bounds the process's real memory, not just the payload bytes. Measured with
#: tracemalloc (CPython 3.11): a record in a batch costs its framing (~10-20 B), its
#: DeliveryFuture (96 B), its offset-delta int (32 B above 256) and a list slot (8 B). (A
#: record waiting for its topic's metadata costs more: ``ProducerEngine.waiting_charge``.)
RECORD_OVERHEAD = 192

_TOPIC_RE = re.compile(r"[A-Za-z0-9._-]{1,249}")


@dataclass(slots=True)
class ProducerRecord:
    """One record for :meth:`Producer.send_batch` (plain values are accepted too)."""

    value: Any = None
    key: Any = None
    partition: int | None = None
    timestamp_ms: int | None = None
    headers: list[tuple[str, bytes | None]] | None = None


def bad_partition(partition: Any) -> TypeError:
    return TypeError(f"partition must be a non-negative int or None (got {partition!r})")


def bad_timestamp(timestamp_ms: Any) -> Exception:
    if timestamp_ms.__class__ is not int:
        return TypeError(f"timestamp_ms must be an int or None (got {timestamp_ms!r})")
    # As the Java client: a negative timestamp is never "now"; None is.
    return ValueError(f"timestamp_ms must be >= 0, or None for now (got {timestamp_ms})")


def as_bytes(obj: Any, name: str) -> bytes:
    if isinstance(obj, bytes):
        return obj
    if isinstance(obj, bytearray | memoryview):
        return bytes(obj)
    raise TypeError(
        f"{name} must be bytes or None (got {type(obj).__name__}); "
        f"configure {name}_serializer to send other types"
    )


def check_headers(headers: Any) -> list[tuple[str, bytes | None]]:
    out: list[tuple[str, bytes | None]] = []
    try:
        for hkey, hvalue in headers:
            if not isinstance(hkey, str):
                raise TypeError
            out.append((hkey, None if hvalue is None else as_bytes(hvalue, "headers")))
    except (TypeError, ValueError):
        raise TypeError("headers must be a sequence of (str, bytes | None) pairs") from None
    return out


class Intake:
    """What taking records in reads. Built once by the producer; the producer sets
    ``running`` (start, close, a failed background task) and ``loop`` (start); ``send()``
    keeps ``last_ts``; ``check_topic`` adds to ``valid_topics``. Nothing else changes."""

    __slots__ = (
        "_buffer_memory",
        "_max_request_size",
        "_why_stopped",
        "engine",
        "key_ser",
        "last_ts",
        "loop",
        "max_block_s",
        "max_record",
        "running",
        "txn",
        "valid_topics",
        "value_ser",
    )

    def __init__(
        self,
        *,
        engine: ProducerEngine,
        txn: TransactionManager | None,
        key_serializer: Callable[[Any], Any] | None,
        value_serializer: Callable[[Any], Any] | None,
        max_request_size: int,
        buffer_memory: int,
        max_block_ms: int,
        why_stopped: Callable[[], KafkaError],
    ) -> None:
        #: The way records go in (memory, placement); the C fast path reads its slots.
        self.engine = engine
        self.txn = txn
        self.key_ser = key_serializer
        self.value_ser = value_serializer
        self.max_block_s = max_block_ms / 1000
        # The record estimate plus a batch header must fit a request and the buffer.
        self.max_record = min(max_request_size, buffer_memory) - BATCH_OVERHEAD
        self._max_request_size = max_request_size
        self._buffer_memory = buffer_memory
        self._why_stopped = why_stopped
        self.running = False
        self.loop: asyncio.AbstractEventLoop | None = None
        self.valid_topics: set[str] = set()
        #: The last timestamp send() stamped (see send(): one int object per millisecond).
        self.last_ts = 0

    def stopped(self) -> KafkaError:
        """The error for a call made while the producer does not run (not started, closed,
        or stopped by a failed background task): the producer's to say which."""
        return self._why_stopped()

    def check_topic(self, topic: Any) -> None:
        """Refuse a topic name Kafka would refuse; remember the good ones (so the hot path
        checks each name once)."""
        if not isinstance(topic, str):
            raise TypeError(f"topic must be a str (got {type(topic).__name__})")
        if not _TOPIC_RE.fullmatch(topic) or topic in (".", ".."):
            raise InvalidTopicError(
                f"invalid topic name {topic!r}: 1-249 characters of [a-zA-Z0-9._-], not '.' or '..'"
            )
        self.valid_topics.add(topic)

    def admit(self, topic: Any, partition: Any, timestamp_ms: Any) -> tuple[int, int]:
        """The checks every record passes once its key and value are bytes -- ``send()``'s
        and the bulk path's, in this order: the topic's name, the partition, the
        timestamp, the transaction's state. Returns the partition (-1: the partitioner's
        choice) and the timestamp (None: now)."""
        if topic not in self.valid_topics:
            self.check_topic(topic)
        if partition is None:
            partition = -1
        elif partition.__class__ is not int or partition < 0:
            raise bad_partition(partition)
        if timestamp_ms is None:
            timestamp_ms = time_ns() // 1_000_000
            # Share one int object per millisecond: every future keeps its timestamp, and a
            # fresh 36-byte int per record is memory buffer_memory would not see.
            if timestamp_ms == self.last_ts:
                timestamp_ms = self.last_ts
            else:
                self.last_ts = timestamp_ms
        elif timestamp_ms.__class__ is not int or timestamp_ms < 0:
            raise bad_timestamp(timestamp_ms)
        if self.txn is not None:
            self.txn.check_send()
        return partition, timestamp_ms

    def too_large(self, size: int) -> MessageSizeTooLargeError:
        return MessageSizeTooLargeError(
            f"record of ~{size} bytes exceeds max_request_size "
            f"({self._max_request_size}) or buffer_memory ({self._buffer_memory})"
        )


def bind_send_fast(kernel: speedups.Kernel) -> speedups.SendFast | None:
    """``kernel``'s ``send_fast``, given this package's classes; None without the kernel
    or when it refuses their layout (then ``send()`` runs in Python alone)."""
    setup = kernel.send_fast_setup
    if setup is None or kernel.send_fast is None:
        return None
    # Imported here: the accumulator's modules are not needed to import the intake's checks.
    from aiokafka_ng.producer.batch import PartitionQueue, ProducerBatch, TopicQueue
    from aiokafka_ng.producer.engine import ProducerEngine
    from aiokafka_ng.producer.future import PENDING, DeliveryFuture
    from aiokafka_ng.producer.memory import MemoryPool

    try:
        setup(
            Intake, ProducerEngine, TopicQueue, PartitionQueue, ProducerBatch, DeliveryFuture,
            MemoryPool, RECORD_OVERHEAD, PENDING,
        )  # fmt: skip
    except TypeError as exc:  # a class changed shape: the C side would misread it
        _log.warning("aiokafka_ng: send() runs without its C fast path (%s)", exc)
        return None
    return kernel.send_fast
