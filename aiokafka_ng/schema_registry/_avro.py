"""Avro serializer and deserializer in the Confluent wire format (fastavro).

Theory of operation
-------------------
Why prepare first. The producer's ``key_serializer``/``value_serializer`` and the consumer's
``key_deserializer``/``value_deserializer`` are plain synchronous callables, called once per
record on the event loop; a registry request is async. So each side does its registry work
up front, asynchronously, and runs synchronously per record afterwards:

- :class:`AvroSerializer` resolves its schema id once, in ``await prepare()`` (or
  ``await AvroSerializer.create(...)``): it registers the schema (``auto_register=True``),
  looks it up (``auto_register=False``: it must be registered already), or takes the
  subject's latest version (``use_latest_version=True``). A schema the subject's
  compatibility rule refuses fails there, with :class:`IncompatibleSchemaError` naming the
  subject, before anything is sent. Each call then only encodes: 5 header bytes and the Avro
  body, no I/O. One serializer serves one subject: the subject follows from the topic (the
  default strategy), so a producer sending to several topics uses one serializer per topic
  (``value=serializer(obj)`` in ``send``) rather than its ``value_serializer`` setting.
- :class:`AvroDeserializer` meets schema ids it cannot know in advance (any version a
  producer registered). ``await deserialize(data)`` fetches an unknown id's schema through
  the client's cache and is the general form, for records taken from the consumer as bytes.
  Calling the deserializer (the synchronous form, for the consumer's ``value_deserializer``)
  decodes ids already loaded -- by ``await prepare(subject)``, which loads every version the
  subject has, by ``await load(schema_id)``, or by an earlier ``deserialize`` -- and raises
  :class:`UnknownSchemaIdError` naming the id otherwise. Inside the consumer that error
  arrives as ``RecordDeserializationError`` with the position left *at* the record: ``await
  deserializer.load(exc.__cause__.schema_id)`` and fetching again decodes it.

Schemas with references are resolved through the registry (each referenced subject version,
depth first) and expanded into one self-contained schema, which is what fastavro encodes and
decodes with. A reader schema given to the deserializer makes Avro schema resolution apply:
records written with an older (or newer) compatible writer schema are read as the reader
schema says, defaults filled in.
"""

from __future__ import annotations

import io
import json
from collections.abc import Callable, Mapping
from typing import Any, Final

import fastavro
from fastavro.read import SchemaResolutionError
from fastavro.schema import SchemaParseException

from aiokafka_ng.schema_registry._client import SchemaRegistryClient
from aiokafka_ng.schema_registry._errors import UnknownSchemaIdError
from aiokafka_ng.schema_registry._types import Schema, SchemaReference
from aiokafka_ng.schema_registry._wire import (
    HEADER_SIZE,
    SerializationError,
    SubjectNameStrategy,
    frame_header,
    schema_id_of,
    topic_name_strategy,
)
from aiokafka_ng.schema_registry._writer import PreparedWriter, check_modes, resolve_writer

__all__ = ["AvroDeserializer", "AvroSerializer"]

SchemaSource = str | Mapping[str, Any] | Schema
_NAMED_TYPES: Final = ("record", "enum", "fixed", "error")


def _as_schema(source: SchemaSource) -> Schema:
    if isinstance(source, Schema):
        return source
    if isinstance(source, str):
        return Schema(source)
    return Schema(json.dumps(source, separators=(",", ":")))


def _full_name(parsed: Any) -> str | None:
    if isinstance(parsed, dict) and parsed.get("type") in _NAMED_TYPES:
        return str(parsed["name"])  # parse_schema makes it the full name
    return None


def _declared_name(schema: Schema) -> str | None:
    """The full name a schema's JSON declares for its top type, without parsing the rest
    (its references may not be loaded)."""
    try:
        body = json.loads(schema.schema_str)
    except ValueError:
        return None
    if not isinstance(body, dict) or body.get("type") not in _NAMED_TYPES:
        return None
    name = str(body.get("name", ""))
    namespace = body.get("namespace")
    return name if "." in name or not namespace else f"{namespace}.{name}"


async def _parse(client: SchemaRegistryClient, schema: Schema) -> Any:
    """``schema`` parsed by fastavro, its references fetched and expanded into it."""
    named: dict[str, Any] = {}
    loaded: set[tuple[str, int]] = set()

    async def define(refs: tuple[SchemaReference, ...]) -> None:
        for ref in refs:
            if (ref.subject, ref.version) in loaded:
                continue
            loaded.add((ref.subject, ref.version))
            registered = await client.get_version(ref.subject, ref.version)
            await define(registered.schema.references)
            fastavro.parse_schema(json.loads(registered.schema.schema_str), named_schemas=named)

    await define(schema.references)
    return _parse_local(schema, named)


def _parse_local(schema: Schema, named: dict[str, Any] | None = None) -> Any:
    if schema.schema_type != "AVRO":
        raise SerializationError(f"not an Avro schema: {schema.schema_type}")
    try:
        return fastavro.parse_schema(
            json.loads(schema.schema_str), named_schemas=named, expand=bool(named)
        )
    except (SchemaParseException, ValueError, TypeError, KeyError) as exc:
        raise SerializationError(f"invalid Avro schema: {exc}") from exc


class AvroSerializer(PreparedWriter):
    """Objects to Confluent-framed Avro bytes, with the schema id resolved up front.

    Usage::

        serializer = await AvroSerializer.create(client, schema, topic="orders")
        async with Producer(..., value_serializer=serializer) as producer:
            await producer.send("orders", value={"id": 1, "total": 9.5})

    Args:
        client: the registry client.
        schema: the writer schema (Avro JSON text, a dict, or a :class:`Schema` with
            references); optional with ``use_latest_version``.
        topic: the topic the records go to (the topic strategies name the subject by it).
        is_key: serializes keys (subject ``<topic>-key`` by default) instead of values.
        subject_name_strategy: ``(topic, is_key, record_name) -> subject``; default
            :func:`topic_name_strategy`.
        auto_register: register the schema (a new version if the subject's rule allows);
            else it must be registered already under the subject.
        use_latest_version: write with the subject's latest registered schema instead of
            ``schema`` (not with ``auto_register``).
        normalize: ask the registry to normalize the schema when registering or looking up.
        to_dict: turns an object into what the schema describes (dict), before encoding.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        schema: SchemaSource | None = None,
        *,
        topic: str,
        is_key: bool = False,
        subject_name_strategy: SubjectNameStrategy = topic_name_strategy,
        auto_register: bool = True,
        use_latest_version: bool = False,
        normalize: bool = False,
        to_dict: Callable[[Any], Any] | None = None,
    ) -> None:
        check_modes(
            has_schema=schema is not None,
            auto_register=auto_register,
            use_latest_version=use_latest_version,
        )
        self._client = client
        self._schema = None if schema is None else _as_schema(schema)
        self.topic: Final = topic
        self.is_key: Final = is_key
        self._strategy = subject_name_strategy
        self._auto_register = auto_register
        self._use_latest = use_latest_version
        self._normalize = normalize
        self._to_dict = to_dict
        self._subject: str | None = None
        self._schema_id: int | None = None
        self._header = b""
        self._parsed: Any = None

    @classmethod
    async def create(
        cls, client: SchemaRegistryClient, schema: SchemaSource | None = None, **kwargs: Any
    ) -> AvroSerializer:
        """A prepared serializer: ``AvroSerializer(...)`` then ``await prepare()``."""
        serializer = cls(client, schema, **kwargs)
        await serializer.prepare()
        return serializer

    def __repr__(self) -> str:
        return f"<AvroSerializer {self._describe(self.topic, self.is_key)}>"

    async def prepare(self) -> int:
        """Resolve the schema id: register, look up, or take the latest version (see the
        class); returns it. Raises :class:`IncompatibleSchemaError` (naming the subject)
        when the subject's rule refuses the schema, :class:`SubjectNotFoundError` or
        :class:`SchemaNotFoundError` when it must be registered and is not."""
        client = self._client
        if self._use_latest:
            name = None if self._schema is None else _declared_name(self._schema)
        else:
            assert self._schema is not None
            # Parsed first: a schema fastavro refuses is not registered.
            name = _full_name(await _parse(client, self._schema))
        subject = self._strategy(self.topic, self.is_key, name)
        writer = await resolve_writer(
            client,
            subject,
            self._schema,
            auto_register=self._auto_register,
            use_latest_version=self._use_latest,
            normalize=self._normalize,
        )
        parsed = await _parse(client, writer.schema)
        schema_id = writer.schema_id
        self._parsed = parsed
        self._subject = subject
        self._schema_id = schema_id
        self._header = frame_header(schema_id)
        return schema_id

    def __call__(self, obj: Any) -> bytes | None:
        """``obj`` as framed Avro bytes; None stays None (a tombstone)."""
        if obj is None:
            return None
        if self._parsed is None:
            raise RuntimeError("the serializer is not prepared: await its prepare() first")
        record = self._to_dict(obj) if self._to_dict is not None else obj
        out = io.BytesIO()
        out.write(self._header)
        try:
            fastavro.schemaless_writer(out, self._parsed, record)
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise SerializationError(
                f"value does not fit the schema of subject {self._subject!r} "
                f"(id {self._schema_id}): {exc!r}"
            ) from exc
        return out.getvalue()


class AvroDeserializer:
    """Confluent-framed Avro bytes to objects; writer schemas resolved by id.

    ``await deserialize(data)`` fetches unknown ids; calling the deserializer (the
    consumer's ``value_deserializer``) decodes ids already loaded (see the module docstring).

    Args:
        client: the registry client.
        reader_schema: the schema to read as (Avro schema resolution: fields added with
            defaults are filled in, removed ones dropped); default: each record's writer
            schema.
        from_dict: turns the decoded value into an object of the application's.
        return_record_name: decode a union of records as ``(name, value)``.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        *,
        reader_schema: SchemaSource | None = None,
        from_dict: Callable[[Any], Any] | None = None,
        return_record_name: bool = False,
    ) -> None:
        self._client = client
        self._reader_source = None if reader_schema is None else _as_schema(reader_schema)
        self._reader: Any = None
        if self._reader_source is not None and not self._reader_source.references:
            self._reader = _parse_local(self._reader_source)
        self._from_dict = from_dict
        self._record_name = return_record_name
        self._writers: dict[int, Any] = {}

    def __repr__(self) -> str:
        return f"<AvroDeserializer {len(self._writers)} schema ids loaded>"

    @property
    def loaded_ids(self) -> frozenset[int]:
        """The schema ids the synchronous form decodes without the registry."""
        return frozenset(self._writers)

    async def load(self, schema_id: int) -> None:
        """Fetch (through the client's cache) and parse the writer schema of ``schema_id``."""
        if self._reader is None and self._reader_source is not None:
            self._reader = await _parse(self._client, self._reader_source)
        if schema_id not in self._writers:
            schema = await self._client.get_schema(schema_id)
            self._writers[schema_id] = await _parse(self._client, schema)

    async def prepare(self, subject: str) -> list[int]:
        """Load every version ``subject`` has now; returns their schema ids."""
        ids = []
        for version in await self._client.get_versions(subject):
            registered = await self._client.get_version(subject, version)
            await self.load(registered.schema_id)
            ids.append(registered.schema_id)
        return ids

    async def deserialize(self, data: bytes | None) -> Any:
        """Decode ``data``, fetching its writer schema first if it is not loaded."""
        if data is None:
            return None
        schema_id = schema_id_of(data)
        if schema_id not in self._writers or (
            self._reader is None and self._reader_source is not None
        ):
            await self.load(schema_id)
        return self._decode(data, schema_id)

    def __call__(self, data: bytes | None) -> Any:
        """Decode ``data`` whose schema id is loaded; :class:`UnknownSchemaIdError` if not."""
        if data is None:
            return None
        schema_id = schema_id_of(data)
        if schema_id not in self._writers or (
            self._reader is None and self._reader_source is not None
        ):
            raise UnknownSchemaIdError(schema_id)
        return self._decode(data, schema_id)

    def _decode(self, data: bytes, schema_id: int) -> Any:
        body = io.BytesIO(memoryview(data)[HEADER_SIZE:])
        try:
            value = fastavro.schemaless_reader(
                body,
                self._writers[schema_id],
                self._reader,
                return_record_name=self._record_name,
            )
        except (SchemaResolutionError, ValueError, TypeError, KeyError, EOFError) as exc:
            raise SerializationError(
                f"cannot decode a payload of schema id {schema_id}: {exc!r}"
            ) from exc
        return self._from_dict(value) if self._from_dict is not None else value
