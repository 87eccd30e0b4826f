"""JSON Schema subjects as typed Spark columns (``valueFormat=json_schema``).

The planning, the framing and the FAILFAST/PERMISSIVE rules are those of
:mod:`aiokafka_ng.spark._registry`; this module maps the JSON Schema to a Spark type and
converts one record each way.

The type. A JSON Schema is a validation rule, not a type, so only the shapes with one Spark
type are taken (what pydantic and hand-written record schemas use): an ``object`` with
``properties`` is a struct (a property is nullable unless it is ``required`` and does not
allow ``null``), an ``object`` with only ``additionalProperties`` a map with string keys, an
``array`` an array of its ``items``, ``string`` a string (``format`` ``date`` a date,
``date-time`` a timestamp), ``integer`` a long, ``number`` a double, ``boolean`` a boolean,
an ``enum`` of strings a string. ``["T", "null"]``, and ``anyOf``/``oneOf`` of one schema
and ``{"type": "null"}`` (pydantic's ``Optional``), are a nullable ``T``; ``$ref`` to the
schema's own ``$defs``/``definitions`` is followed. Anything else (free-form objects, unions
of two types, recursive definitions, references to other subjects) is refused at planning,
naming the field.

Reading. The body is parsed as JSON (not validated: as Spark's ``from_json``, the column's
type is the check) and each value converted to its column's type: a property the type lacks
is dropped, one the record lacks is null, a value of the wrong JSON type fails the record.
Writing. A row becomes the JSON value (dates and timestamps in ISO 8601; a null property
left out unless the schema requires it) and is validated against the schema by
:class:`~aiokafka_ng.schema_registry.JsonSerializer` before it is framed.
"""

from __future__ import annotations

import datetime
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BooleanType,
    DataType,
    DateType,
    DoubleType,
    LongType,
    MapType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiokafka_ng.spark._options import SparkOptionError

if TYPE_CHECKING:
    from aiokafka_ng.schema_registry import Schema, SchemaRegistryClient

__all__ = [
    "json_encoder",
    "json_schema_to_spark",
    "json_to_spark_value",
    "spark_to_json_value",
]

_SCALARS: dict[str, DataType] = {
    "integer": LongType(),
    "number": DoubleType(),
    "boolean": BooleanType(),
}


def _resolve(schema: Any, root: Mapping[str, Any], path: str, seen: tuple[str, ...]) -> Any:
    """``schema`` with its local ``$ref`` followed (and ``seen`` grown, against cycles)."""
    while isinstance(schema, Mapping) and "$ref" in schema:
        ref = str(schema["$ref"])
        if ref in seen:
            raise SparkOptionError(f"field {path!r}: recursive definition {ref!r} is not supported")
        seen = (*seen, ref)
        for prefix in ("#/$defs/", "#/definitions/"):
            if ref.startswith(prefix):
                found = root.get(prefix[2:-1], {}).get(ref.removeprefix(prefix))
                if found is not None:
                    schema = found
                    break
        else:
            raise SparkOptionError(
                f"field {path!r}: $ref {ref!r} is not a definition of this schema"
            )
    return schema, seen


def _branches(schema: Mapping[str, Any]) -> tuple[list[Any], bool] | None:
    """The non-null alternatives of ``schema`` and whether it allows null; None when it is
    not a union (no ``anyOf``/``oneOf``/type list)."""
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = list(schema[key])
            rest = [o for o in options if o != {"type": "null"}]
            return rest, len(rest) < len(options)
    kind = schema.get("type")
    if isinstance(kind, list):
        rest = [t for t in kind if t != "null"]
        return [{**schema, "type": t} for t in rest], len(rest) < len(kind)
    return None


def _to_spark(
    schema: Any, root: Mapping[str, Any], path: str, seen: tuple[str, ...]
) -> tuple[DataType, bool]:
    """(type, allows null)"""
    schema, seen = _resolve(schema, root, path, seen)
    if not isinstance(schema, Mapping):
        raise SparkOptionError(f"field {path!r}: schema {schema!r} has no Spark type")
    union = _branches(schema)
    if union is not None:
        rest, nullable = union
        if len(rest) != 1:
            raise SparkOptionError(
                f"field {path!r} allows {len(rest)} different types: not supported"
            )
        t, inner_nullable = _to_spark(rest[0], root, path, seen)
        return t, nullable or inner_nullable
    kind = schema.get("type")
    if kind is None and ("enum" in schema or "const" in schema):
        values = schema.get("enum", [schema.get("const")])
        if all(isinstance(v, str) for v in values):
            return StringType(), False
        raise SparkOptionError(f"field {path!r}: an enum of non-strings is not supported")
    if kind == "string":
        fmt = schema.get("format")
        if fmt == "date":
            return DateType(), False
        if fmt == "date-time":
            return TimestampType(), False
        return StringType(), False
    if kind in _SCALARS:
        return _SCALARS[kind], False
    if kind == "array":
        items = schema.get("items")
        if not isinstance(items, Mapping):
            raise SparkOptionError(f"field {path!r}: an array needs one 'items' schema")
        t, nullable = _to_spark(items, root, f"{path}[]", seen)
        return ArrayType(t, nullable), False
    if kind == "object":
        properties = schema.get("properties")
        if properties:
            required = set(schema.get("required", ()))
            fields = []
            for name, sub in properties.items():
                t, nullable = _to_spark(sub, root, f"{path}.{name}", seen)
                fields.append(StructField(name, t, nullable or name not in required))
            return StructType(fields), False
        extra = schema.get("additionalProperties")
        if isinstance(extra, Mapping) and extra:
            t, nullable = _to_spark(extra, root, f"{path}{{}}", seen)
            return MapType(StringType(), t, nullable), False
        raise SparkOptionError(
            f"field {path!r}: an object with neither 'properties' nor an "
            "'additionalProperties' schema has no Spark type"
        )
    raise SparkOptionError(f"field {path!r}: JSON type {kind!r} has no Spark type")


def json_schema_to_spark(schema: Mapping[str, Any], path: str) -> DataType:
    """The Spark type of a JSON Schema (JSON-decoded; see the module docstring);
    :class:`SparkOptionError` names the field that has none."""
    return _to_spark(schema, schema, path, ())[0]


# ---------------------------------------------------------------------------- records


def json_to_spark_value(value: Any, spark_type: DataType) -> Any:
    """A parsed JSON value as the Python value Arrow takes for ``spark_type``; ValueError
    or TypeError when it does not fit."""
    if value is None:
        return None
    if isinstance(spark_type, StructType):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        return {f.name: json_to_spark_value(value.get(f.name), f.dataType) for f in spark_type}
    if isinstance(spark_type, ArrayType):
        if not isinstance(value, list):
            raise TypeError(f"expected an array, got {type(value).__name__}")
        return [json_to_spark_value(v, spark_type.elementType) for v in value]
    if isinstance(spark_type, MapType):
        if not isinstance(value, dict):
            raise TypeError(f"expected an object, got {type(value).__name__}")
        return {k: json_to_spark_value(v, spark_type.valueType) for k, v in value.items()}
    if isinstance(spark_type, DateType):
        return datetime.date.fromisoformat(value)
    if isinstance(spark_type, TimestampType):
        at = datetime.datetime.fromisoformat(value)
        return at if at.tzinfo is not None else at.replace(tzinfo=datetime.UTC)
    expected = _PYTHON_TYPES[type(spark_type)]
    # bool is an int to isinstance, not to JSON.
    fits = isinstance(value, expected) and (expected is bool or not isinstance(value, bool))
    if not fits:
        raise TypeError(f"expected {spark_type.simpleString()}, got {value!r}")
    return float(value) if isinstance(spark_type, DoubleType) else value


_PYTHON_TYPES: dict[type[DataType], type | tuple[type, ...]] = {
    LongType: int,
    DoubleType: (int, float),
    BooleanType: bool,
    StringType: str,
}


def spark_to_json_value(value: Any, schema: Any, root: Mapping[str, Any]) -> Any:
    """A Spark row's value (as Arrow gives it) as the JSON value ``schema`` describes."""
    if value is None:
        return None
    schema, _ = _resolve(schema, root, "", ())
    union = _branches(schema) if isinstance(schema, Mapping) else None
    if union is not None and len(union[0]) == 1:
        schema, _ = _resolve(union[0][0], root, "", ())
    if not isinstance(schema, Mapping):  # true, or no schema: nothing more to follow
        schema = {}
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    if isinstance(value, datetime.date):
        return value.isoformat()
    if isinstance(value, dict):
        properties = schema.get("properties") or {}
        required = set(schema.get("required", ()))
        extra = schema.get("additionalProperties", {})
        out = {}
        for k, v in value.items():
            if v is None and k not in required:
                continue  # left out: an optional property need not allow null
            out[k] = spark_to_json_value(v, properties.get(k, extra), root)
        return out
    if isinstance(value, list):
        if schema.get("type") == "object":
            # Arrow gives a map as (key, value) pairs ([] when empty: the schema tells).
            extra = schema.get("additionalProperties", {})
            return {k: spark_to_json_value(v, extra, root) for k, v in value}
        items = schema.get("items", {})
        return [spark_to_json_value(v, items, root) for v in value]
    return value


async def json_encoder(
    client: SchemaRegistryClient, schema: Schema, subject: str, is_key: bool
) -> Callable[[Any], Any]:
    """One row's value to framed JSON, validated against ``schema`` (registered under
    ``subject``) first."""
    import json

    from aiokafka_ng.schema_registry import JsonSerializer

    serializer = JsonSerializer(
        client,
        schema,
        topic="",
        is_key=is_key,
        subject_name_strategy=lambda _topic, _is_key, _name: subject,
        auto_register=False,
    )
    await serializer.prepare()
    root = json.loads(schema.schema_str)

    def encode(value: Any) -> Any:
        return serializer(None if value is None else spark_to_json_value(value, root, root))

    return encode
