"""Schema Registry values in the Spark source and sink: Avro, JSON Schema and Protobuf in
the Confluent wire format.

What Spark's ``from_avro``/``to_avro`` (and ``from_protobuf``) with a registry do, as
options of the data source: ``valueFormat=avro``, ``json_schema`` or ``protobuf`` (or
``keyFormat``) with ``schema.registry.url`` makes the ``value`` (``key``) column a typed
column, decoded from / encoded to registry-framed records (magic byte 0, the 4-byte schema
id, then the body: Avro; JSON; Protobuf's message indexes and message), byte-compatible
with confluent-kafka's serializers and this package's :mod:`aiokafka_ng.schema_registry`.
This module plans every format and does Avro's records; JSON Schema's type mapping and
records are in :mod:`._registry_json`, Protobuf's in :mod:`._registry_protobuf`.

Theory of operation
-------------------
*Planning (driver).* The subject (``valueSubject``, default ``<topic>-value``: the topic
name strategy, so one topic is needed to derive it) and its version
(``valueSchemaVersion``, default the latest) are looked up once. That schema types the
column (:func:`avro_to_spark`, Spark's own mapping: records are structs, enums strings,
``[null, T]`` a nullable ``T``, logical dates, timestamps and decimals their Spark types)
and travels to the executors in the plan, so a task needs the registry only for writer
schemas it has not seen.

*Reading (task).* Each Arrow batch's binary column is decoded record by record: the writer
schema by the frame's id (fetched once per task), resolved to the planned schema (Avro
schema resolution: a field added with a default is filled in, a removed one dropped), so
records written under older versions of a BACKWARD-compatible subject read as the new
type. A payload that is not framed Avro or does not decode fails the task naming its
partition and offset (``mode=FAILFAST``, the default), or is null (``PERMISSIVE``), as
``from_avro``'s ``mode`` option.

*Writing (task).* The column's rows are encoded with the planned schema and framed with its
id; a row the schema refuses fails the task naming the row. Planning checks the column's
Spark type against the schema first, so a mismatched DataFrame fails before any task runs.

Not supported (refused at planning, naming the field): unions of two or more non-null
types, recursive records; a subject whose schema is not of the format asked for.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import anyio
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    BooleanType,
    ByteType,
    DataType,
    DateType,
    DecimalType,
    DoubleType,
    FloatType,
    IntegerType,
    LongType,
    MapType,
    ShortType,
    StringType,
    StructField,
    StructType,
    TimestampNTZType,
    TimestampType,
)

from aiokafka_ng.spark._options import SparkOptionError, option_value

if TYPE_CHECKING:
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]

    from aiokafka_ng.schema_registry import Schema, SchemaReference, SchemaRegistryClient

__all__ = [
    "REGISTRY_OPTIONS",
    "ValueFormat",
    "avro_to_spark",
    "decode_column",
    "encoder",
    "plan_formats",
]

#: The source's and sink's registry options (ours: Spark's Kafka connector has none).
REGISTRY_OPTIONS = frozenset(
    {
        "keyFormat",
        "valueFormat",
        "keySubject",
        "valueSubject",
        "keySchemaVersion",
        "valueSchemaVersion",
        "keyMessageName",
        "valueMessageName",
        "schema.registry.url",
        "schema.registry.basic.auth.user.info",
        "schema.registry.bearer.auth.token",
        "mode",
    }
)
_FORMATS = ("binary", "avro", "json_schema", "protobuf")
#: The registry's schema type of each typed format.
_SCHEMA_TYPES = {"avro": "AVRO", "json_schema": "JSON", "protobuf": "PROTOBUF"}
_MODES = ("FAILFAST", "PERMISSIVE")
_PRIMITIVES: dict[str, DataType] = {
    "boolean": BooleanType(),
    "int": IntegerType(),
    "long": LongType(),
    "float": FloatType(),
    "double": DoubleType(),
    "bytes": BinaryType(),
    "string": StringType(),
}


@dataclass(frozen=True)
class ValueFormat:
    """A registry-framed ``key`` or ``value`` column, planned on the driver."""

    column: str  # "key" or "value"
    kind: str  # "avro", "json_schema" or "protobuf"
    url: str
    subject: str
    version: int
    schema_id: int
    schema: Schema
    spark_type: DataType
    permissive: bool
    uuids: bool  # the schema has uuid strings, which fastavro decodes to UUID objects
    message: str | None = None  # protobuf: the message's full name (None: the first)
    #: (user, password) or a bearer token; kept out of repr (pickled to the executors)
    credentials: tuple[str, str] | str | None = field(default=None, repr=False)

    def client(self) -> SchemaRegistryClient:
        return _client(self.url, self.credentials)


def _client(url: str, credentials: tuple[str, str] | str | None) -> SchemaRegistryClient:
    from aiokafka_ng.schema_registry import SchemaRegistryClient

    if isinstance(credentials, str):
        token = credentials

        async def bearer() -> str:
            return token

        return SchemaRegistryClient(url, bearer_token=bearer)
    return SchemaRegistryClient(url, basic_auth=credentials)


# ---------------------------------------------------------------------------- planning


def plan_formats(
    options: Mapping[str, str], topics: list[str], *, writing: bool
) -> tuple[ValueFormat, ...]:
    """The registry-framed columns the options ask for (none by default), each with its
    schema looked up now; ``topics`` are those the query reads or writes (for the default
    subject). Raises :class:`SparkOptionError` naming the bad option."""
    wanted = []
    for column in ("key", "value"):
        name = f"{column}Format"
        fmt = (option_value(options, name) or "binary").strip().lower()
        if fmt not in _FORMATS:
            raise SparkOptionError(f"option '{name}' must be one of {_FORMATS}, not {fmt!r}")
        if fmt != "binary":
            wanted.append((column, fmt))
    mode = (option_value(options, "mode") or "FAILFAST").strip().upper()
    if mode not in _MODES:
        raise SparkOptionError(f"option 'mode' must be FAILFAST or PERMISSIVE, not {mode!r}")
    if not wanted:
        return ()
    url = (option_value(options, "schema.registry.url") or "").strip()
    if not url:
        column, kind = wanted[0]
        raise SparkOptionError(
            f"option 'schema.registry.url' is required with {column}Format={kind}"
        )
    credentials = _credentials(options)
    return tuple(
        anyio.run(_lookup, column, kind, options, topics, url, credentials, mode == "PERMISSIVE")
        for column, kind in wanted
    )


def _credentials(options: Mapping[str, str]) -> tuple[str, str] | str | None:
    user_info = option_value(options, "schema.registry.basic.auth.user.info")
    token = option_value(options, "schema.registry.bearer.auth.token")
    if user_info and token:
        raise SparkOptionError(
            "give 'schema.registry.basic.auth.user.info' or 'schema.registry.bearer.auth.token',"
            " not both"
        )
    if user_info:
        user, sep, password = user_info.partition(":")
        if not sep:
            raise SparkOptionError("'schema.registry.basic.auth.user.info' must be user:password")
        return (user, password)
    return token or None


async def _lookup(
    column: str,
    kind: str,
    options: Mapping[str, str],
    topics: list[str],
    url: str,
    credentials: tuple[str, str] | str | None,
    permissive: bool,
) -> ValueFormat:
    from aiokafka_ng.schema_registry import SchemaRegistryError

    subject = (option_value(options, f"{column}Subject") or "").strip()
    if not subject:
        if len(topics) != 1:
            raise SparkOptionError(
                f"option '{column}Subject' is required with {column}Format={kind} when the "
                "query does not name exactly one topic (the default subject is "
                f"'<topic>-{column}')"
            )
        subject = f"{topics[0]}-{column}"
    raw_version = (option_value(options, f"{column}SchemaVersion") or "latest").strip()
    if raw_version != "latest" and not (raw_version.isdigit() and int(raw_version) > 0):
        raise SparkOptionError(
            f"option '{column}SchemaVersion' must be 'latest' or a version number, "
            f"not {raw_version!r}"
        )
    message = (option_value(options, f"{column}MessageName") or "").strip() or None
    named: dict[str, Any] = {}  # the named types the schema's references define
    spark_type: DataType | None = None
    try:
        async with _client(url, credentials) as client:
            if raw_version == "latest":
                registered = await client.get_latest_version(subject)
            else:
                registered = await client.get_version(subject, int(raw_version))
            schema = registered.schema
            if schema.schema_type.upper() != _SCHEMA_TYPES[kind]:
                raise SparkOptionError(
                    f"subject {subject!r} holds a {schema.schema_type} schema; "
                    f"{column}Format={kind} reads and writes {_SCHEMA_TYPES[kind]} subjects only"
                )
            if kind == "avro":
                await _define(client, schema.references, named, column)
            elif kind == "protobuf":
                spark_type = await _protobuf_type(client, registered.schema_id, message, column)
    except SchemaRegistryError as exc:
        raise SparkOptionError(
            f"{column}Format={kind}: subject {subject!r} (version {raw_version}) at {url}: {exc}"
        ) from exc
    parsed = None if kind == "protobuf" else json.loads(schema.schema_str)
    if kind == "avro":
        spark_type = avro_to_spark(parsed, column, named)
    elif kind == "json_schema":
        from aiokafka_ng.spark._registry_json import json_schema_to_spark

        if schema.references:
            raise SparkOptionError(
                f"subject {subject!r}: a JSON schema with references to other subjects is "
                f"not supported by {column}Format=json_schema"
            )
        spark_type = json_schema_to_spark(parsed or {}, column)
    assert spark_type is not None
    return ValueFormat(
        column,
        kind,
        url,
        subject,
        registered.version,
        registered.schema_id,
        schema,
        spark_type,
        permissive,
        kind == "avro" and _has_logical(parsed, "uuid"),
        message,
        credentials,
    )


async def _protobuf_type(
    client: SchemaRegistryClient, schema_id: int, message: str | None, column: str
) -> DataType:
    from aiokafka_ng.schema_registry import ProtobufDeserializer
    from aiokafka_ng.spark._registry_protobuf import message_to_spark

    reader = ProtobufDeserializer(client=client)
    await reader.load(schema_id)
    cls, _ = reader.find_message(schema_id, message)
    return message_to_spark(cls.DESCRIPTOR, column)


async def _define(
    client: SchemaRegistryClient,
    references: tuple[SchemaReference, ...],
    named: dict[str, Any],
    column: str,
) -> None:
    """Walk the referenced schemas (depth first, as the registry resolves them) so their
    named types are known when the referring schema names them."""
    for ref in references:
        registered = await client.get_version(ref.subject, ref.version)
        await _define(client, registered.schema.references, named, column)
        avro_to_spark(json.loads(registered.schema.schema_str), f"{column} ({ref.name})", named)


def _has_logical(schema: Any, logical: str) -> bool:
    if isinstance(schema, dict):
        return schema.get("logicalType") == logical or any(
            _has_logical(v, logical) for v in schema.values()
        )
    if isinstance(schema, list):
        return any(_has_logical(v, logical) for v in schema)
    return False


def avro_to_spark(schema: Any, path: str, named: dict[str, Any] | None = None) -> DataType:
    """The Spark type of an Avro schema (JSON-decoded), as Spark's ``SchemaConverters``
    maps it; :class:`SparkOptionError` names the field that has no Spark type."""
    return _to_spark(schema, path, {} if named is None else named, ())[0]


def _to_spark(
    schema: Any, path: str, named: dict[str, Any], stack: tuple[str, ...]
) -> tuple[DataType, bool]:
    """(type, nullable)"""
    if isinstance(schema, str):
        if schema in _PRIMITIVES:
            return _PRIMITIVES[schema], False
        if schema == "null":
            raise SparkOptionError(f"field {path!r} is of type null only: no Spark column")
        if schema in stack:
            raise SparkOptionError(f"field {path!r}: recursive record {schema!r} is not supported")
        if schema not in named:
            raise SparkOptionError(f"field {path!r}: unknown Avro type {schema!r}")
        return _to_spark(named[schema], path, named, stack)
    if isinstance(schema, list):
        branches = [b for b in schema if b != "null"]
        if len(branches) != 1:
            raise SparkOptionError(
                f"field {path!r} is a union of {len(branches)} non-null types "
                f"({', '.join(map(_type_name, branches))}): not supported"
            )
        t, _ = _to_spark(branches[0], path, named, stack)
        return t, len(branches) < len(schema)
    kind = schema["type"]
    logical = schema.get("logicalType")
    if kind in ("record", "error"):
        full = _full_name(schema)
        named[full] = schema
        inner = (*stack, full)
        fields = []
        for f in schema["fields"]:
            t, nullable = _to_spark(f["type"], f"{path}.{f['name']}", named, inner)
            fields.append(StructField(f["name"], t, nullable))
        return StructType(fields), False
    if kind == "enum":
        named[_full_name(schema)] = schema
        return StringType(), False
    if kind == "fixed":
        named[_full_name(schema)] = schema
        if logical == "decimal":
            return _decimal(schema, path), False
        return BinaryType(), False
    if kind == "array":
        t, nullable = _to_spark(schema["items"], f"{path}[]", named, stack)
        return ArrayType(t, nullable), False
    if kind == "map":
        t, nullable = _to_spark(schema["values"], f"{path}{{}}", named, stack)
        return MapType(StringType(), t, nullable), False
    if logical == "decimal" and kind == "bytes":
        return _decimal(schema, path), False
    if logical == "date" and kind == "int":
        return DateType(), False
    if logical in ("timestamp-millis", "timestamp-micros") and kind == "long":
        return TimestampType(), False
    if logical in ("local-timestamp-millis", "local-timestamp-micros") and kind == "long":
        return TimestampNTZType(), False
    if logical in ("time-millis", "time-micros"):
        # Spark keeps these as the int/long; fastavro decodes them to datetime.time.
        raise SparkOptionError(f"field {path!r}: logical type {logical} is not supported")
    return _to_spark(kind, path, named, stack)  # a primitive, its logical type (if any) dropped


def _decimal(schema: Mapping[str, Any], path: str) -> DecimalType:
    precision, scale = int(schema["precision"]), int(schema.get("scale", 0))
    if precision > 38:
        raise SparkOptionError(f"field {path!r}: decimal precision {precision} > 38 (Spark's)")
    return DecimalType(precision, scale)


def _full_name(schema: Mapping[str, Any]) -> str:
    name = str(schema["name"])
    namespace = schema.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


def _type_name(schema: Any) -> str:
    if isinstance(schema, str):
        return schema
    if isinstance(schema, dict):
        return str(schema.get("name", schema.get("type")))
    return "union"


def check_column(fmt: ValueFormat, actual: DataType) -> None:
    """Planning check of the sink: the DataFrame's column ``fmt.column`` fits the schema."""
    problem = _misfit(actual, fmt.spark_type, fmt.column)
    if problem is not None:
        raise SparkOptionError(
            f"column {fmt.column!r} does not fit subject {fmt.subject!r} version "
            f"{fmt.version}: {problem} (the schema's type: {fmt.spark_type.simpleString()})"
        )


_WIDER: dict[type[DataType], tuple[type[DataType], ...]] = {
    IntegerType: (ByteType, ShortType, IntegerType),
    LongType: (ByteType, ShortType, IntegerType, LongType),
    DoubleType: (FloatType, DoubleType),
    TimestampType: (TimestampType, TimestampNTZType),
}


def _misfit(actual: DataType, expected: DataType, path: str) -> str | None:
    if isinstance(expected, StructType):
        if not isinstance(actual, StructType):
            return f"{path} is {actual.simpleString()}, not a struct"
        have = {f.name: f.dataType for f in actual.fields}
        extra = sorted(set(have) - set(expected.names))
        if extra:
            return f"{path} has fields the schema does not: {extra}"
        for f in expected.fields:
            if f.name not in have:
                if f.nullable:
                    continue  # written as null
                return f"{path}.{f.name} is missing"
            problem = _misfit(have[f.name], f.dataType, f"{path}.{f.name}")
            if problem is not None:
                return problem
        return None
    if isinstance(expected, ArrayType):
        if not isinstance(actual, ArrayType):
            return f"{path} is {actual.simpleString()}, not an array"
        return _misfit(actual.elementType, expected.elementType, f"{path}[]")
    if isinstance(expected, MapType):
        if not isinstance(actual, MapType) or not isinstance(actual.keyType, StringType):
            return f"{path} is {actual.simpleString()}, not a map with string keys"
        return _misfit(actual.valueType, expected.valueType, f"{path}{{}}")
    if isinstance(expected, DecimalType):
        ok = isinstance(actual, DecimalType) and actual.scale == expected.scale
        return None if ok else f"{path} is {actual.simpleString()}, not {expected.simpleString()}"
    allowed = _WIDER.get(type(expected), (type(expected),))
    if isinstance(actual, allowed):
        return None
    return f"{path} is {actual.simpleString()}, not {expected.simpleString()}"


# ---------------------------------------------------------------------------- tasks


def _uuids_to_str(value: Any) -> Any:
    """fastavro decodes a uuid string to a UUID; Spark's column is the string."""
    if isinstance(value, dict):
        return {k: _uuids_to_str(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_uuids_to_str(v) for v in value]
    if isinstance(value, uuid.UUID):
        return str(value)
    return value


async def _decode_one(fmt: ValueFormat, decoder: Any, data: bytes) -> Any:
    """One framed record as the Python value Arrow takes for ``fmt.spark_type``."""
    from aiokafka_ng.schema_registry import SerializationError, schema_id_of

    schema_id = schema_id_of(data)
    if fmt.kind == "json_schema":
        from aiokafka_ng.spark._registry_json import json_to_spark_value

        value = decoder(data)  # parsed, not validated: no registry needed
        try:
            return json_to_spark_value(value, fmt.spark_type)
        except (TypeError, ValueError, KeyError) as exc:
            raise SerializationError(f"the JSON does not fit the column's type: {exc}") from exc
    if schema_id not in decoder.loaded_ids:
        await decoder.load(schema_id)
    if fmt.kind == "protobuf":
        from aiokafka_ng.spark._registry_protobuf import message_to_value

        assert isinstance(fmt.spark_type, StructType)
        return message_to_value(decoder(data), fmt.spark_type)
    value = decoder(data)
    return _uuids_to_str(value) if fmt.uuids else value


async def decode_column(
    fmt: ValueFormat, column: pa.Array, where: Callable[[int], str], decoder: Any
) -> pa.Array:
    """``column`` (binary, framed records) as an Arrow column of ``fmt.spark_type``;
    ``decoder`` is the task's (:func:`reader_for`), ``where(i)`` names record ``i``."""
    import pyarrow as pa  # type: ignore[import-untyped,unused-ignore]
    from pyspark.sql.pandas.types import to_arrow_type

    from aiokafka_ng.schema_registry import SchemaRegistryError

    out: list[Any] = []
    for i, data in enumerate(column.to_pylist()):
        if data is None:
            out.append(None)
            continue
        try:
            out.append(await _decode_one(fmt, decoder, data))
        except SchemaRegistryError as exc:
            if fmt.permissive:
                out.append(None)
                continue
            raise SchemaRegistryError(
                f"{fmt.column}Format={fmt.kind}: {where(i)} is not readable as subject "
                f"{fmt.subject!r} version {fmt.version}: {exc} (option mode=PERMISSIVE "
                "reads it as null)"
            ) from exc
    return pa.array(out, type=to_arrow_type(fmt.spark_type, timezone="UTC"))


def reader_for(fmt: ValueFormat, client: SchemaRegistryClient) -> Any:
    """The task's decoder of ``fmt``'s records: the package's deserializer of its format."""
    from aiokafka_ng.schema_registry import (
        AvroDeserializer,
        JsonDeserializer,
        ProtobufDeserializer,
    )

    if fmt.kind == "json_schema":
        return JsonDeserializer(client, validate=False)
    if fmt.kind == "protobuf":
        return ProtobufDeserializer(client=client)
    return AvroDeserializer(client, reader_schema=fmt.schema)


async def encoder(fmt: ValueFormat, client: SchemaRegistryClient) -> Callable[[Any], Any]:
    """The task's encoder of one row's value: framed bytes in ``fmt``'s schema."""
    if fmt.kind == "json_schema":
        from aiokafka_ng.spark._registry_json import json_encoder

        return await json_encoder(client, fmt.schema, fmt.subject, fmt.column == "key")
    if fmt.kind == "protobuf":
        from aiokafka_ng.schema_registry import ProtobufDeserializer
        from aiokafka_ng.spark._registry_protobuf import protobuf_encoder

        reader = ProtobufDeserializer(client=client)
        return await protobuf_encoder(reader, fmt.schema_id, fmt.message)
    from aiokafka_ng.schema_registry import AvroSerializer

    subject = fmt.subject
    serializer = AvroSerializer(
        client,
        fmt.schema,
        topic="",
        is_key=fmt.column == "key",
        subject_name_strategy=lambda _topic, _is_key, _name: subject,
        auto_register=False,
    )
    await serializer.prepare()
    maps = _has_map(fmt.spark_type)

    def encode(value: Any) -> Any:
        return serializer(_maps_to_dicts(value) if maps and value is not None else value)

    return encode


def _has_map(spark_type: DataType) -> bool:
    if isinstance(spark_type, StructType):
        return any(_has_map(f.dataType) for f in spark_type.fields)
    if isinstance(spark_type, ArrayType):
        return _has_map(spark_type.elementType)
    return isinstance(spark_type, MapType)


def _maps_to_dicts(value: Any) -> Any:
    """Arrow gives a map as a list of (key, value) pairs; Avro wants a dict."""
    if isinstance(value, dict):
        return {k: _maps_to_dicts(v) for k, v in value.items()}
    if isinstance(value, list):
        if value and all(isinstance(p, tuple) and len(p) == 2 for p in value):
            return {k: _maps_to_dicts(v) for k, v in value}
        return [_maps_to_dicts(v) for v in value]
    return value
