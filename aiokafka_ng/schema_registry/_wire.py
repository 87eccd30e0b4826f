"""The Confluent wire format and the subject name strategies, common to every format.

A framed payload is the magic byte ``0``, the schema id as 4 bytes big-endian, then the
encoded body (Avro binary here). A subject name strategy maps (topic, key or value, the
record's full name) to the subject a schema is registered under, as Confluent's
``TopicNameStrategy``, ``RecordNameStrategy`` and ``TopicRecordNameStrategy`` do.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from typing import Final

from aiokafka_ng.schema_registry._errors import SchemaRegistryError

__all__ = [
    "MAGIC_BYTE",
    "SerializationError",
    "SubjectNameStrategy",
    "frame_header",
    "record_name_strategy",
    "schema_id_of",
    "topic_name_strategy",
    "topic_record_name_strategy",
]

MAGIC_BYTE: Final = 0
_HEADER: Final = struct.Struct(">bI")
HEADER_SIZE: Final = _HEADER.size  # 5

#: ``(topic, is_key, record_name) -> subject``; ``record_name`` is the full name of the
#: schema's named type (None for a schema that is not a record, enum or fixed).
SubjectNameStrategy = Callable[[str, bool, "str | None"], str]


class SerializationError(SchemaRegistryError):
    """A value does not fit its schema, or bytes are not in the Confluent wire format."""


def frame_header(schema_id: int) -> bytes:
    """The 5 bytes that precede the body of a payload written with ``schema_id``."""
    return _HEADER.pack(MAGIC_BYTE, schema_id)


def schema_id_of(data: bytes | bytearray | memoryview) -> int:
    """The schema id of a framed payload; :class:`SerializationError` if it is not one."""
    if len(data) < HEADER_SIZE:
        raise SerializationError(
            f"{len(data)} bytes are too short for the Confluent wire format (5-byte header)"
        )
    magic, schema_id = _HEADER.unpack_from(data)
    if magic != MAGIC_BYTE:
        raise SerializationError(
            f"unknown magic byte {magic} (the Confluent wire format starts with {MAGIC_BYTE})"
        )
    return int(schema_id)


def topic_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """``<topic>-key`` or ``<topic>-value``: one schema lineage per topic (the default)."""
    return f"{topic}-{'key' if is_key else 'value'}"


def record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """The record's full name: one lineage per type, whatever the topic."""
    if record_name is None:
        raise ValueError("record_name_strategy needs a named schema (record, enum or fixed)")
    return record_name


def topic_record_name_strategy(topic: str, is_key: bool, record_name: str | None) -> str:
    """``<topic>-<record full name>``: several types on one topic, each with its lineage."""
    if record_name is None:
        raise ValueError("topic_record_name_strategy needs a named schema (record, enum or fixed)")
    return f"{topic}-{record_name}"
