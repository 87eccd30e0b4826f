"""Produce requests and answers of the common shape, encoded and decoded without the
generic machinery.

Why: a producer sending one record at a time encodes one Produce request and decodes one
answer per record, and the generated code's generality (a ``Writer`` and a ``Reader``
object, a method call per field, a struct budget, the header as a message of its own) cost
about 130k instructions of the ~600k such a record cost in all (callgrind,
``bench/bench_idle.py``). These two functions do the same for the shape a producer sends
and a broker answers almost always -- a flexible version with topic names (v9-v12), no
tagged fields, no per-record errors, no error message, no node endpoints -- in a few
``struct`` calls.

They are shortcuts, not a second codec: each returns None for anything it does not take
exactly as the generic code would -- a shape outside the above, a value the generic code
would refuse (out of range, not encodable, over a :class:`DecodeLimits`), malformed or short
bytes -- and the caller (``framing``) then runs the generic code, which produces the frame or
the message or raises what it always raises. So the bytes written and the messages read are
the generic code's by construction, and a failure is the generic code's own
(``tests/protocol/test_produce_codec.py`` compares the two on many shapes and versions, and
on every truncation and corruption of answers).
"""

from __future__ import annotations

import struct

from aiokafka_ng.protocol.limits import DecodeLimits
from aiokafka_ng.protocol.messages.produce import (
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)

__all__ = ["decode_produce_response", "encode_produce_request"]

#: size prefix placeholder, api key, api version, correlation id (request header v2)
_HEAD = struct.Struct(">ihhi")
_SIZE = struct.Struct(">i")
_I16 = struct.Struct(">h")
_I32 = struct.Struct(">i")
_ACKS_TIMEOUT = struct.Struct(">hi")
#: index, error code, base offset, log append time, log start offset
_PARTITION = struct.Struct(">ihqqq")
#: a partition answer's empty record errors (1), null error message (0), no tags (0)
_PARTITION_TAIL = b"\x01\x00\x00"
_MIN_VERSION = 9  # flexible
_MAX_VERSION = 12  # v13 names topics by id
_TOPICS_FIELD = "ProduceResponse.responses"
_PARTITIONS_FIELD = "TopicProduceResponse.partition_responses"


def _uvarint(buf: bytearray, v: int) -> None:
    while v > 0x7F:
        buf.append((v & 0x7F) | 0x80)
        v >>= 7
    buf.append(v)


def encode_produce_request(
    request: ProduceRequest, version: int, correlation_id: int, client_id: str | None
) -> bytes | None:
    """The whole frame (size prefix included) ``framing.encode_request`` makes for
    ``request``, or None: not the common shape (module docstring)."""
    if (
        request.__class__ is not ProduceRequest
        or not _MIN_VERSION <= version <= _MAX_VERSION
        or request.unknown_tagged_fields
    ):
        return None
    try:
        buf = bytearray(_HEAD.pack(0, 0, version, correlation_id))
        if client_id is None:
            buf += b"\xff\xff"
        else:
            data = client_id.encode()
            if len(data) > 0x7FFF:
                return None
            buf += _I16.pack(len(data))
            buf += data
        buf.append(0)  # the header's tags
        txn = request.transactional_id
        if txn is None:
            buf.append(0)
        else:
            data = txn.encode()
            _uvarint(buf, len(data) + 1)
            buf += data
        buf += _ACKS_TIMEOUT.pack(request.acks, request.timeout_ms)
        topics = request.topic_data
        _uvarint(buf, len(topics) + 1)
        for topic in topics:
            if topic.__class__ is not TopicProduceData or topic.unknown_tagged_fields:
                return None
            data = topic.name.encode()
            _uvarint(buf, len(data) + 1)
            buf += data
            partitions = topic.partition_data
            _uvarint(buf, len(partitions) + 1)
            for p in partitions:
                records = p.records
                if (
                    p.__class__ is not PartitionProduceData
                    or p.unknown_tagged_fields
                    or (records is not None and records.__class__ is not bytes)
                ):
                    return None
                buf += _I32.pack(p.index)
                if records is None:
                    buf.append(0)
                else:
                    _uvarint(buf, len(records) + 1)
                    buf += records
                buf.append(0)  # the partition's tags
            buf.append(0)  # the topic's tags
        buf.append(0)  # the request's tags
    except (struct.error, TypeError, AttributeError, OverflowError, UnicodeEncodeError):
        return None  # what the generic encoder refuses, it refuses in its own words
    _SIZE.pack_into(buf, 0, len(buf) - 4)
    return bytes(buf)


def decode_produce_response(
    frame: bytes, version: int, limits: DecodeLimits
) -> tuple[int, ProduceResponse] | None:
    """What ``framing.decode_response(ProduceResponse, version, frame, limits)`` returns,
    or None: not the common shape, or not an answer the generic decoder would return as is
    (module docstring)."""
    if not _MIN_VERSION <= version <= _MAX_VERSION or frame.__class__ is not bytes:
        return None
    try:
        # Response header v1: correlation id, no tags.
        correlation_id = _I32.unpack_from(frame, 0)[0]
        if frame[4] != 0:
            return None
        n_topics = frame[5] - 1  # one-byte count; 0 would be a null array
        if not 0 <= n_topics < 0x7F:
            return None
        pos = 6
        structs = n_topics
        per_field = limits.per_field
        if per_field:
            if n_topics > per_field.get(_TOPICS_FIELD, n_topics):
                return None
            partition_limit = per_field.get(_PARTITIONS_FIELD)
        else:
            partition_limit = None
        end = len(frame)
        responses = []
        for _ in range(n_topics):
            size = frame[pos] - 1
            if not 0 <= size < 0x7F or pos + 1 + size > end:
                return None
            name = str(frame[pos + 1 : pos + 1 + size], "utf-8")
            pos += 1 + size
            n_partitions = frame[pos] - 1
            if not 0 <= n_partitions < 0x7F:
                return None
            if partition_limit is not None and n_partitions > partition_limit:
                return None
            structs += n_partitions
            pos += 1
            partitions = []
            for _ in range(n_partitions):
                index, code, base_offset, append_time, start_offset = _PARTITION.unpack_from(
                    frame, pos
                )
                pos += 30  # _PARTITION.size
                if frame[pos : pos + 3] != _PARTITION_TAIL:
                    return None
                pos += 3
                partitions.append(
                    PartitionProduceResponse(
                        index=index,
                        error_code=code,
                        base_offset=base_offset,
                        log_append_time_ms=append_time,
                        log_start_offset=start_offset,
                    )
                )
            if frame[pos] != 0:  # the topic's tags
                return None
            pos += 1
            responses.append(TopicProduceResponse(name=name, partition_responses=partitions))
        throttle_time_ms = _I32.unpack_from(frame, pos)[0]
        if frame[pos + 4] != 0:  # the answer's tags (node endpoints among them)
            return None
    except (struct.error, IndexError, UnicodeDecodeError):
        return None
    if structs > limits.max_structs:
        return None
    return correlation_id, ProduceResponse(responses=responses, throttle_time_ms=throttle_time_ms)
