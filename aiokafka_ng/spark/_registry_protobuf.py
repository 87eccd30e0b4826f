"""Protobuf subjects as typed Spark columns (``valueFormat=protobuf``).

The planning, the framing and the FAILFAST/PERMISSIVE rules are those of
:mod:`aiokafka_ng.spark._registry`; this module maps a message descriptor to a Spark type
and converts one message each way. No generated class is needed: the message classes are
built from the registered file descriptors (and the files they import, registered as
references) by :class:`~aiokafka_ng.schema_registry.ProtobufDeserializer`, which is why
only schemas registered as file descriptors (this package's and confluent-kafka's Python
serializers) are taken, not ``.proto`` text.

The type, as Spark's ``from_protobuf`` maps it where it can: a message is a struct, a
``repeated`` field an array, a ``map<K, V>`` a map, an enum its value's name (a string),
``google.protobuf.Timestamp`` a timestamp; ``int32``/``sint32``/``sfixed32`` an int,
``int64``/``sint64``/``sfixed64`` and ``uint32``/``fixed32`` a long, ``uint64``/``fixed64`` a
``decimal(20,0)`` (every value fits, unlike a long), ``float``/``double``, ``bool``,
``string``, ``bytes`` theirs. A field is nullable when it has presence (a message field,
``optional``, a member of a ``oneof``): an unset one reads as null; a proto3 scalar without
presence reads as its default. Recursive messages are refused at planning.

Which message: ``valueMessageName`` (``keyMessageName``), a full name, or the file's first
message. Records of another message of the file (their message indexes say which) are read
field by field by name, like records of an older version of the schema.
"""

from __future__ import annotations

import datetime
import decimal
import struct
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    DataType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiokafka_ng.spark._options import SparkOptionError

if TYPE_CHECKING:
    from google.protobuf.message import Message

    from aiokafka_ng.schema_registry import ProtobufDeserializer

__all__ = ["message_to_spark", "message_to_value", "protobuf_encoder", "value_to_message"]

_TIMESTAMP = "google.protobuf.Timestamp"
# FieldDescriptor.TYPE_* numbers (descriptor.proto's FieldDescriptorProto.Type).
_TYPE_DOUBLE, _TYPE_FLOAT, _TYPE_INT64, _TYPE_UINT64, _TYPE_INT32 = 1, 2, 3, 4, 5
_TYPE_FIXED64, _TYPE_FIXED32, _TYPE_BOOL, _TYPE_STRING, _TYPE_GROUP = 6, 7, 8, 9, 10
_TYPE_MESSAGE, _TYPE_BYTES, _TYPE_UINT32, _TYPE_ENUM = 11, 12, 13, 14
_TYPE_SFIXED32, _TYPE_SFIXED64, _TYPE_SINT32, _TYPE_SINT64 = 15, 16, 17, 18
_UNSIGNED64 = DecimalType(20, 0)
_SCALARS: dict[int, DataType] = {
    _TYPE_DOUBLE: DoubleType(),
    _TYPE_FLOAT: FloatType(),
    _TYPE_INT64: LongType(),
    _TYPE_SINT64: LongType(),
    _TYPE_SFIXED64: LongType(),
    _TYPE_UINT64: _UNSIGNED64,
    _TYPE_FIXED64: _UNSIGNED64,
    _TYPE_INT32: IntegerType(),
    _TYPE_SINT32: IntegerType(),
    _TYPE_SFIXED32: IntegerType(),
    _TYPE_UINT32: LongType(),
    _TYPE_FIXED32: LongType(),
    _TYPE_BOOL: BooleanType(),
    _TYPE_STRING: StringType(),
    _TYPE_BYTES: BinaryType(),
    _TYPE_ENUM: StringType(),
}


def _is_map(field: Any) -> bool:
    return bool(
        field.type == _TYPE_MESSAGE
        and field.is_repeated
        and field.message_type.GetOptions().map_entry
    )


def _field_type(field: Any, path: str, stack: tuple[str, ...]) -> DataType:
    """The type of one value of ``field`` (an element, for a repeated one)."""
    if field.type == _TYPE_MESSAGE:
        return _message_type(field.message_type, path, stack)
    if field.type == _TYPE_GROUP:
        raise SparkOptionError(f"field {path!r}: proto2 groups are not supported")
    return _SCALARS[field.type]


def _message_type(descriptor: Any, path: str, stack: tuple[str, ...]) -> DataType:
    if descriptor.full_name == _TIMESTAMP:
        return TimestampType()
    if descriptor.full_name in stack:
        raise SparkOptionError(
            f"field {path!r}: recursive message {descriptor.full_name!r} is not supported"
        )
    inner = (*stack, descriptor.full_name)
    fields = []
    for field in descriptor.fields:
        where = f"{path}.{field.name}"
        if _is_map(field):
            key = field.message_type.fields_by_name["key"]
            value = field.message_type.fields_by_name["value"]
            t: DataType = MapType(
                _field_type(key, where, inner),
                _field_type(value, where + "{}", inner),
                value.type == _TYPE_MESSAGE,
            )
            nullable = False
        elif field.is_repeated:
            t = ArrayType(_field_type(field, where + "[]", inner), False)
            nullable = False
        else:
            t = _field_type(field, where, inner)
            nullable = bool(field.has_presence)
        fields.append(StructField(field.name, t, nullable))
    return StructType(fields)


def message_to_spark(descriptor: Any, path: str) -> DataType:
    """The Spark type of a message (its descriptor; see the module docstring);
    :class:`SparkOptionError` names the field that has none."""
    return _message_type(descriptor, path, ())


# ---------------------------------------------------------------------------- records


def _scalar_out(field: Any, value: Any) -> Any:
    if field.type == _TYPE_MESSAGE:
        return message_to_value(value, None)
    if field.type == _TYPE_ENUM:
        known = field.enum_type.values_by_number.get(value)
        return known.name if known is not None else str(value)
    if field.type in (_TYPE_UINT64, _TYPE_FIXED64):
        return decimal.Decimal(value)
    return value


def message_to_value(message: Any, spark_type: StructType | None) -> Any:
    """``message`` as the Python value Arrow takes for ``spark_type`` (None: every field of
    the message), by field name: what the message lacks is null."""
    descriptor = message.DESCRIPTOR
    if descriptor.full_name == _TIMESTAMP:
        return message.ToDatetime(tzinfo=datetime.UTC)
    names = [f.name for f in descriptor.fields] if spark_type is None else spark_type.names
    out: dict[str, Any] = {}
    for name in names:
        field = descriptor.fields_by_name.get(name)
        if field is None:
            out[name] = None
            continue
        value = getattr(message, name)
        if _is_map(field):
            inner = field.message_type.fields_by_name["value"]
            out[name] = {k: _scalar_out(inner, v) for k, v in value.items()}
        elif field.is_repeated:
            out[name] = [_scalar_out(field, v) for v in value]
        elif field.has_presence and not message.HasField(name):
            out[name] = None
        else:
            out[name] = _scalar_out(field, value)
    return out


def _scalar_in(field: Any, value: Any) -> Any:
    if field.type == _TYPE_ENUM:
        known = field.enum_type.values_by_name.get(value)
        if known is None:
            raise ValueError(f"field {field.name!r}: {value!r} is not a value of its enum")
        return known.number
    if field.type in (_TYPE_UINT64, _TYPE_FIXED64):
        return int(value)
    return value


def _fill(target: Any, value: Any) -> None:
    """Set ``target`` (a message, or a Timestamp) from a row's struct value."""
    if target.DESCRIPTOR.full_name == _TIMESTAMP:
        target.FromDatetime(value)
        return
    for name, v in value.items():
        if v is None:
            continue  # unset: null, or the default of a field without presence
        field = target.DESCRIPTOR.fields_by_name.get(name)
        if field is None:
            raise ValueError(f"message {target.DESCRIPTOR.full_name} has no field {name!r}")
        current = getattr(target, name)
        if _is_map(field):
            inner = field.message_type.fields_by_name["value"]
            pairs = v.items() if isinstance(v, dict) else v  # Arrow gives (key, value) pairs
            for k, item in pairs:
                if inner.type == _TYPE_MESSAGE:
                    _fill(current[k], item)
                else:
                    current[k] = _scalar_in(inner, item)
        elif field.is_repeated:
            for item in v:
                if field.type == _TYPE_MESSAGE:
                    _fill(current.add(), item)
                else:
                    current.append(_scalar_in(field, item))
        elif field.type == _TYPE_MESSAGE:
            current.SetInParent()
            _fill(current, v)
        else:
            setattr(target, name, _scalar_in(field, v))


def value_to_message(cls: type[Message], value: Any) -> Message:
    """A row's struct value as a message of ``cls``; ValueError or TypeError when a value
    does not fit its field."""
    message = cls()
    _fill(message, value)
    return message


async def protobuf_encoder(
    reader: ProtobufDeserializer, schema_id: int, message_name: str | None
) -> Callable[[Any], Any]:
    """One row's value to framed Protobuf bytes: the message ``message_name`` of schema
    ``schema_id`` (``reader`` builds its class), framed with its message indexes."""
    from aiokafka_ng.schema_registry import (
        MAGIC_BYTE,
        SerializationError,
        encode_message_indexes,
    )

    await reader.load(schema_id)
    cls, indexes = reader.find_message(schema_id, message_name)
    header = struct.pack(">BI", MAGIC_BYTE, schema_id) + encode_message_indexes(indexes)

    def encode(value: Any) -> Any:
        if value is None:
            return None
        try:
            return header + value_to_message(cls, value).SerializeToString()
        except (ValueError, TypeError) as exc:
            raise SerializationError(
                f"value does not fit {cls.DESCRIPTOR.full_name}: {exc}"
            ) from exc

    return encode
