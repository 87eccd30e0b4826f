"""JSON Schema serializer and deserializer in the Confluent wire format, pydantic-aware.

Theory of operation
-------------------
The same split as Avro's (see :mod:`aiokafka_ng.schema_registry._avro`): registry work up
front and asynchronous (``await prepare()`` / ``create``), then a synchronous call per
record with no I/O, so the serializer plugs in as the producer's ``value_serializer``.

The schema. A pydantic model class is a schema source: its ``model_json_schema()`` (the
JSON Schema pydantic derives, aliases included) is what is registered, compact JSON, and
its ``title`` (the class name) is the record name the record strategies use, as
confluent-kafka takes a JSON schema's ``title``. A JSON Schema text or dict works the same
way for applications without pydantic models.

The bytes. The body is the value as compact JSON (``separators=(",", ":")``, non-ASCII left
as UTF-8), which is what confluent-kafka's ``JSONSerializer`` writes with the standard
library's ``json``: for the same schema, subject and dict both write the same bytes. A
pydantic model instance is first dumped with ``model_dump(mode="json", by_alias=True)``
(the shape its schema describes). With ``validate`` (the default) the value is checked
against the schema (``jsonschema``) before it is encoded, so a value that breaks the schema
fails in ``send``, naming the subject, and never reaches Kafka.

The deserializer needs the registry only to validate (``validate=True``: the writer schema
of each id is fetched, as Avro's writer schemas are, and the synchronous form decodes only
ids already loaded). Without validation it decodes any id with no registry at all: a
pydantic model given as ``model`` validates the value itself (``model_validate_json``, one
pass in pydantic's core), and the deserializer returns model instances; without one it
returns what ``json.loads`` gives.

References. A schema's references (``$ref`` to the ``name`` of a referenced schema) are
fetched from the registry, depth first, and handed to ``jsonschema`` as a ``referencing``
registry keyed by those names.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from typing import Any, Final

import jsonschema
import jsonschema.exceptions
import jsonschema.validators
import pydantic
import referencing
import referencing.jsonschema

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

__all__ = ["JsonDeserializer", "JsonSerializer"]

JsonSchemaSource = str | Mapping[str, Any] | Schema | type[pydantic.BaseModel]

#: The draft a schema without ``$schema`` is read as: pydantic writes 2020-12 schemas.
_DEFAULT_DRAFT: Final = referencing.jsonschema.DRAFT202012


def _compact(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def _as_schema(source: JsonSchemaSource) -> Schema:
    if isinstance(source, Schema):
        if source.schema_type != "JSON":
            raise SerializationError(f"not a JSON schema: {source.schema_type}")
        return source
    if isinstance(source, str):
        return Schema(source, "JSON")
    if isinstance(source, type) and issubclass(source, pydantic.BaseModel):
        return Schema(_compact(source.model_json_schema()), "JSON")
    return Schema(_compact(dict(source)), "JSON")


def _load(schema: Schema) -> Any:
    try:
        return json.loads(schema.schema_str)
    except ValueError as exc:
        raise SerializationError(f"invalid JSON schema (not JSON): {exc}") from exc


def _title(body: Any) -> str | None:
    if isinstance(body, dict) and isinstance(body.get("title"), str):
        return str(body["title"])
    return None


async def _validator(client: SchemaRegistryClient, schema: Schema) -> Any:
    """A ``jsonschema`` validator for ``schema``, its references fetched from the registry."""
    resources: list[tuple[str, referencing.Resource[Any]]] = []
    loaded: set[tuple[str, int]] = set()

    async def collect(refs: tuple[SchemaReference, ...]) -> None:
        for ref in refs:
            if (ref.subject, ref.version) in loaded:
                continue
            loaded.add((ref.subject, ref.version))
            registered = await client.get_version(ref.subject, ref.version)
            await collect(registered.schema.references)
            contents = _load(registered.schema)
            resource = referencing.Resource.from_contents(
                contents, default_specification=_DEFAULT_DRAFT
            )
            resources.append((ref.name, resource))

    await collect(schema.references)
    return _local_validator(schema, referencing.Registry().with_resources(resources))


def _local_validator(schema: Schema, registry: referencing.Registry[Any] | None = None) -> Any:
    body = _load(schema)
    cls = jsonschema.validators.validator_for(body, default=jsonschema.Draft202012Validator)
    try:
        cls.check_schema(body)
    except jsonschema.exceptions.SchemaError as exc:
        raise SerializationError(f"invalid JSON schema: {exc.message}") from exc
    if registry is None:
        return cls(body)
    return cls(body, registry=registry)


class JsonSerializer(PreparedWriter):
    """Objects (pydantic models or dicts) to Confluent-framed JSON, validated on the way.

    Usage::

        class Order(pydantic.BaseModel):
            id: int
            item: str

        serializer = await JsonSerializer.create(client, Order, topic="orders")
        async with Producer(..., value_serializer=serializer) as producer:
            await producer.send("orders", Order(id=1, item="tea"))

    Args:
        client: the registry client.
        schema: a pydantic model class (its ``model_json_schema()``), a JSON Schema text or
            dict, or a :class:`Schema` of type ``JSON`` with references; optional with
            ``use_latest_version``.
        topic: the topic the records go to (the topic strategies name the subject by it).
        is_key: serializes keys (subject ``<topic>-key`` by default) instead of values.
        subject_name_strategy: ``(topic, is_key, record_name) -> subject``; the record
            name is the schema's ``title``. Default :func:`topic_name_strategy`.
        auto_register: register the schema; else it must be registered already.
        use_latest_version: write with the subject's latest registered schema (validation
            then checks against that one; not with ``auto_register``).
        normalize: ask the registry to normalize the schema when registering or looking up.
        validate: check each value against the schema before encoding (``jsonschema``).
        to_dict: turns an object into what the schema describes, before validation; default
            ``model_dump(mode="json", by_alias=True)`` for pydantic models, the object as
            is otherwise.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        schema: JsonSchemaSource | None = None,
        *,
        topic: str,
        is_key: bool = False,
        subject_name_strategy: SubjectNameStrategy = topic_name_strategy,
        auto_register: bool = True,
        use_latest_version: bool = False,
        normalize: bool = False,
        validate: bool = True,
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
        self._validate = validate
        self._to_dict = to_dict
        self._subject: str | None = None
        self._schema_id: int | None = None
        self._header = b""
        self._validator: Any = None

    @classmethod
    async def create(
        cls, client: SchemaRegistryClient, schema: JsonSchemaSource | None = None, **kwargs: Any
    ) -> JsonSerializer:
        """A prepared serializer: ``JsonSerializer(...)`` then ``await prepare()``."""
        serializer = cls(client, schema, **kwargs)
        await serializer.prepare()
        return serializer

    def __repr__(self) -> str:
        return f"<JsonSerializer {self._describe(self.topic, self.is_key)}>"

    async def prepare(self) -> int:
        """Resolve the schema id (register, look up, or the latest version: see
        :class:`~aiokafka_ng.schema_registry.AvroSerializer`); returns it."""
        name = None
        if self._schema is not None:
            body = _load(self._schema)
            if self._validate and not self._use_latest:
                # Checked before registering: a schema jsonschema refuses is not registered.
                await _validator(self._client, self._schema)
            name = _title(body)
        subject = self._strategy(self.topic, self.is_key, name)
        writer = await resolve_writer(
            self._client,
            subject,
            self._schema,
            auto_register=self._auto_register,
            use_latest_version=self._use_latest,
            normalize=self._normalize,
        )
        if writer.schema.schema_type != "JSON":
            raise SerializationError(
                f"subject {subject!r} holds a {writer.schema.schema_type} schema, not JSON"
            )
        self._validator = await _validator(self._client, writer.schema) if self._validate else None
        self._subject = subject
        self._schema_id = writer.schema_id
        self._header = frame_header(writer.schema_id)
        return writer.schema_id

    def __call__(self, obj: Any) -> bytes | None:
        """``obj`` as framed JSON bytes; None stays None (a tombstone)."""
        if obj is None:
            return None
        if self._schema_id is None:
            raise RuntimeError("the serializer is not prepared: await its prepare() first")
        if self._to_dict is not None:
            value = self._to_dict(obj)
        elif isinstance(obj, pydantic.BaseModel):
            value = obj.model_dump(mode="json", by_alias=True)
        else:
            value = obj
        if self._validator is not None:
            error = jsonschema.exceptions.best_match(self._validator.iter_errors(value))
            if error is not None:
                where = "/".join(str(p) for p in error.absolute_path) or "(the value)"
                raise SerializationError(
                    f"value does not fit the schema of subject {self._subject!r} "
                    f"(id {self._schema_id}) at {where}: {error.message}"
                )
        try:
            body = _compact(value).encode()
        except (TypeError, ValueError) as exc:
            raise SerializationError(
                f"value of subject {self._subject!r} is not JSON-encodable: {exc}"
            ) from exc
        return self._header + body


class JsonDeserializer:
    """Confluent-framed JSON to pydantic models or plain values.

    Args:
        client: the registry client; needed only with ``validate``.
        model: a pydantic model class: each value is validated into one and returned.
        validate: also check each value against its writer schema (fetched by id; the
            synchronous form then decodes only ids loaded, as Avro's does).
        from_dict: turns the decoded value into an object of the application's (instead of
            ``model``).
    """

    def __init__(
        self,
        client: SchemaRegistryClient | None = None,
        *,
        model: type[pydantic.BaseModel] | None = None,
        validate: bool = False,
        from_dict: Callable[[Any], Any] | None = None,
    ) -> None:
        if validate and client is None:
            raise ValueError("validate=True fetches writer schemas: give the registry client")
        if model is not None and from_dict is not None:
            raise ValueError("give model or from_dict, not both")
        self._client = client
        self._model = model
        self._validate = validate
        self._from_dict = from_dict
        self._validators: dict[int, Any] = {}

    def __repr__(self) -> str:
        target = self._model.__name__ if self._model is not None else "values"
        return f"<JsonDeserializer to {target}, validate={self._validate}>"

    @property
    def loaded_ids(self) -> frozenset[int]:
        """The schema ids whose writer schemas are loaded (for validation)."""
        return frozenset(self._validators)

    async def load(self, schema_id: int) -> None:
        """Fetch (through the client's cache) the writer schema of ``schema_id``."""
        if self._client is None or schema_id in self._validators:
            return
        schema = await self._client.get_schema(schema_id)
        if schema.schema_type != "JSON":
            raise SerializationError(f"schema id {schema_id} is {schema.schema_type}, not JSON")
        self._validators[schema_id] = await _validator(self._client, schema)

    async def prepare(self, subject: str) -> list[int]:
        """Load every version ``subject`` has now; returns their schema ids."""
        if self._client is None:
            raise ValueError("prepare() asks the registry: give the registry client")
        ids = []
        for version in await self._client.get_versions(subject):
            registered = await self._client.get_version(subject, version)
            await self.load(registered.schema_id)
            ids.append(registered.schema_id)
        return ids

    async def deserialize(self, data: bytes | None) -> Any:
        """Decode ``data``, fetching its writer schema first if validation needs it."""
        if data is None:
            return None
        schema_id = schema_id_of(data)
        if self._validate:
            await self.load(schema_id)
        return self._decode(data, schema_id)

    def __call__(self, data: bytes | None) -> Any:
        """Decode ``data``; with ``validate``, :class:`UnknownSchemaIdError` for an id that
        is not loaded."""
        if data is None:
            return None
        schema_id = schema_id_of(data)
        if self._validate and schema_id not in self._validators:
            raise UnknownSchemaIdError(schema_id)
        return self._decode(data, schema_id)

    def _decode(self, data: bytes, schema_id: int) -> Any:
        body = data[HEADER_SIZE:]
        if self._model is not None and not self._validate:
            try:
                return self._model.model_validate_json(body)
            except pydantic.ValidationError as exc:
                raise SerializationError(
                    f"a payload of schema id {schema_id} is not a {self._model.__name__}: {exc}"
                ) from exc
        try:
            value = json.loads(body)
        except ValueError as exc:
            raise SerializationError(
                f"a payload of schema id {schema_id} is not JSON: {exc}"
            ) from exc
        if self._validate:
            error = jsonschema.exceptions.best_match(self._validators[schema_id].iter_errors(value))
            if error is not None:
                raise SerializationError(
                    f"a payload of schema id {schema_id} does not fit its schema: {error.message}"
                )
        if self._model is not None:
            try:
                return self._model.model_validate(value)
            except pydantic.ValidationError as exc:
                raise SerializationError(
                    f"a payload of schema id {schema_id} is not a {self._model.__name__}: {exc}"
                ) from exc
        return self._from_dict(value) if self._from_dict is not None else value
