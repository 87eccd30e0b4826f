"""Protobuf serializer and deserializer in the Confluent wire format, message indexes included.

Theory of operation
-------------------
The frame. After the 5-byte header (magic byte, schema id) a Protobuf payload carries the
*message indexes*: which message of the registered ``.proto`` file the body is, as the path
of indexes from the file's top-level messages down through nested ones (``[1]`` is the
file's second message, ``[0, 2]`` the third message nested in its first). They are written
as a count then the indexes, each a zig-zag varint; the commonest path, ``[0]``, is written
as the single byte ``0`` (a count of zero). Then the message's own encoding.

The schema. A generated message class carries its file's descriptor; the serializer
registers that file as confluent-kafka's Python serializer does: the serialized
``FileDescriptorProto``, base64-encoded, schema type ``PROTOBUF`` (Confluent's registry and
Apicurio accept it). The files it imports are registered first, each under a subject named
by ``reference_subject_name_strategy`` (default: the file's name, ``shop/common.proto``),
and referenced by that name; the well-known types (``google/protobuf/...``,
``google/type/...``, ``confluent/...``) are known to the registries and are skipped. Same
text, same subject, same references: the registry answers the same id to both clients, so
the bytes match confluent-kafka's byte for byte.

The record name the record strategies use is the message's full name (``shop.Order``).
Registry work is done up front (``await prepare()`` / ``create``), as for Avro; each call
then encodes with no I/O.

The deserializer decodes into the message class it is given and needs no registry: the
message indexes say which message of the writer's file the body is, and the application
says which class it reads it as (as with confluent-kafka's ``ProtobufDeserializer``).
Without a class it builds one from the writer's registered file (and the files it
references) in a descriptor pool of its own, one per schema id, and picks the message the
indexes name.
"""

from __future__ import annotations

import base64
import importlib
from collections.abc import Callable
from typing import Any, Final

from google.protobuf import descriptor_pool as default_pool
from google.protobuf.descriptor_pb2 import FileDescriptorProto
from google.protobuf.descriptor_pool import DescriptorPool
from google.protobuf.message import DecodeError, Message
from google.protobuf.message_factory import GetMessageClass

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

__all__ = [
    "ProtobufDeserializer",
    "ProtobufSerializer",
    "decode_message_indexes",
    "encode_message_indexes",
    "message_indexes_of",
]

# The runtime's descriptors are of the pure-Python classes or upb's, by implementation;
# only attributes both have are read.
Descriptor = Any
FileDescriptor = Any

#: ``file name -> subject`` for an imported ``.proto`` file.
ReferenceSubjectNameStrategy = Callable[[str], str]

_BUILTIN_PREFIXES: Final = ("google/protobuf/", "google/type/", "confluent/")
# A count beyond this is not a message path but corrupt bytes (Confluent's bound as well).
_MAX_INDEXES: Final = 100_000


def _zigzag_varint(value: int, out: bytearray) -> None:
    n = (value << 1) ^ (value >> 63)
    n &= (1 << 64) - 1
    while n >= 0x80:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def encode_message_indexes(indexes: list[int] | tuple[int, ...]) -> bytes:
    """The message indexes as the frame carries them: ``[0]`` is ``b"\\x00"``, else the
    count then each index, zig-zag varints."""
    if not indexes:
        raise ValueError("a message path has at least one index")
    if list(indexes) == [0]:
        return b"\x00"
    out = bytearray()
    _zigzag_varint(len(indexes), out)
    for index in indexes:
        _zigzag_varint(index, out)
    return bytes(out)


def _read_zigzag(data: bytes | bytearray | memoryview, pos: int) -> tuple[int, int]:
    shift = 0
    n = 0
    while True:
        if pos >= len(data):
            raise SerializationError("the message indexes end before their last varint does")
        byte = data[pos]
        pos += 1
        n |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return (n >> 1) ^ -(n & 1), pos
        shift += 7
        if shift >= 64:
            raise SerializationError("a message index varint is longer than 10 bytes")


def decode_message_indexes(
    data: bytes | bytearray | memoryview, offset: int = 0
) -> tuple[list[int], int]:
    """The message indexes at ``offset`` of ``data``, and the offset of what follows."""
    count, pos = _read_zigzag(data, offset)
    if count == 0:
        return [0], pos
    if count < 0 or count > _MAX_INDEXES:
        raise SerializationError(f"invalid message index count {count}")
    indexes = []
    for _ in range(count):
        index, pos = _read_zigzag(data, pos)
        indexes.append(index)
    return indexes, pos


def message_indexes_of(data: bytes | bytearray | memoryview) -> list[int]:
    """The message indexes of a framed Protobuf payload (after its 5-byte header)."""
    schema_id_of(data)  # checks the header
    return decode_message_indexes(data, HEADER_SIZE)[0]


def _index_path(descriptor: Descriptor) -> list[int]:
    """Where ``descriptor`` sits in its file: top-level index, then nested ones, in the
    order the file declares them (read from the file's own descriptor proto, whose order is
    the declaration order whichever runtime implementation built the descriptors)."""
    file = FileDescriptorProto.FromString(descriptor.file.serialized_pb)
    path = _index_path_in(file, descriptor.full_name)
    if path is None:  # pragma: no cover (a message is always in its own file)
        raise SerializationError(f"{descriptor.full_name} is not in {file.name}")
    return path


def _index_path_in(file: FileDescriptorProto, full_name: str) -> list[int] | None:
    """The path of message ``full_name`` in a file given as its descriptor proto."""
    prefix = f"{file.package}." if file.package else ""

    def search(messages: Any, scope: str) -> list[int] | None:
        for i, message in enumerate(messages):
            name = scope + message.name
            if name == full_name:
                return [i]
            inner = search(message.nested_type, name + ".")
            if inner is not None:
                return [i, *inner]
        return None

    return search(file.message_type, prefix)


def _schema_text(file: FileDescriptor) -> str:
    return base64.standard_b64encode(file.serialized_pb).decode("ascii")


def _is_builtin(name: str) -> bool:
    return name.startswith(_BUILTIN_PREFIXES)


class ProtobufSerializer(PreparedWriter):
    """Generated Protobuf messages to Confluent-framed bytes (message indexes included).

    Usage::

        serializer = await ProtobufSerializer.create(client, order_pb2.Order, topic="orders")
        async with Producer(..., value_serializer=serializer) as producer:
            await producer.send("orders", order_pb2.Order(id=1, item="tea"))

    Args:
        client: the registry client.
        message_type: the generated message class the records are.
        topic: the topic the records go to (the topic strategies name the subject by it).
        is_key: serializes keys (subject ``<topic>-key`` by default) instead of values.
        subject_name_strategy: ``(topic, is_key, record_name) -> subject``; the record
            name is the message's full name. Default :func:`topic_name_strategy`.
        auto_register: register the schema and the files it imports; else they must be
            registered already.
        use_latest_version: write with the subject's latest registered schema (not with
            ``auto_register``); the message indexes are then found in that schema by the
            message's full name when it is a descriptor, else taken from the class.
        normalize: ask the registry to normalize the schemas when registering or looking up.
        reference_subject_name_strategy: ``file name -> subject`` for imported files;
            default: the file name.
        skip_known_types: do not register the well-known types' files as references.
    """

    def __init__(
        self,
        client: SchemaRegistryClient,
        message_type: type[Message],
        *,
        topic: str,
        is_key: bool = False,
        subject_name_strategy: SubjectNameStrategy = topic_name_strategy,
        auto_register: bool = True,
        use_latest_version: bool = False,
        normalize: bool = False,
        reference_subject_name_strategy: ReferenceSubjectNameStrategy | None = None,
        skip_known_types: bool = True,
    ) -> None:
        check_modes(
            has_schema=True, auto_register=auto_register, use_latest_version=use_latest_version
        )
        self._client = client
        self.message_type: Final = message_type
        self.topic: Final = topic
        self.is_key: Final = is_key
        self._strategy = subject_name_strategy
        self._auto_register = auto_register
        self._use_latest = use_latest_version
        self._normalize = normalize
        self._ref_subject = reference_subject_name_strategy or (lambda name: name)
        self._skip_known = skip_known_types
        self._subject: str | None = None
        self._schema_id: int | None = None
        self._header = b""

    @classmethod
    async def create(
        cls, client: SchemaRegistryClient, message_type: type[Message], **kwargs: Any
    ) -> ProtobufSerializer:
        """A prepared serializer: ``ProtobufSerializer(...)`` then ``await prepare()``."""
        serializer = cls(client, message_type, **kwargs)
        await serializer.prepare()
        return serializer

    def __repr__(self) -> str:
        name = self.message_type.DESCRIPTOR.full_name
        return f"<ProtobufSerializer {name} {self._describe(self.topic, self.is_key)}>"

    async def _references(self, file: FileDescriptor) -> tuple[SchemaReference, ...]:
        """Register (or look up) the files ``file`` imports, depth first; their references."""
        refs = []
        for dependency in file.dependencies:
            if self._skip_known and _is_builtin(dependency.name):
                continue
            schema = Schema(
                _schema_text(dependency), "PROTOBUF", await self._references(dependency)
            )
            subject = self._ref_subject(dependency.name)
            if self._auto_register:
                await self._client.register(subject, schema, normalize=self._normalize)
            registered = await self._client.lookup(subject, schema, normalize=self._normalize)
            refs.append(SchemaReference(dependency.name, subject, registered.version))
        return tuple(refs)

    async def prepare(self) -> int:
        """Resolve the schema id (register, look up, or the latest version: see
        :class:`~aiokafka_ng.schema_registry.AvroSerializer`); returns it."""
        descriptor = self.message_type.DESCRIPTOR
        subject = self._strategy(self.topic, self.is_key, descriptor.full_name)
        schema = None
        if not self._use_latest:
            refs = await self._references(descriptor.file)
            schema = Schema(_schema_text(descriptor.file), "PROTOBUF", refs)
        writer = await resolve_writer(
            self._client,
            subject,
            schema,
            auto_register=self._auto_register,
            use_latest_version=self._use_latest,
            normalize=self._normalize,
        )
        if writer.schema.schema_type != "PROTOBUF":
            raise SerializationError(
                f"subject {subject!r} holds a {writer.schema.schema_type} schema, not PROTOBUF"
            )
        indexes = _index_path(descriptor)
        if self._use_latest:
            indexes = self._indexes_in_latest(writer.schema, descriptor, subject) or indexes
        self._subject = subject
        self._schema_id = writer.schema_id
        self._header = frame_header(writer.schema_id) + encode_message_indexes(indexes)
        return writer.schema_id

    @staticmethod
    def _indexes_in_latest(
        schema: Schema, descriptor: Descriptor, subject: str
    ) -> list[int] | None:
        try:
            file = FileDescriptorProto.FromString(base64.standard_b64decode(schema.schema_str))
        except (ValueError, DecodeError):
            return None  # .proto text (a Java client registered it): the class's own path
        path = _index_path_in(file, descriptor.full_name)
        if path is None:
            raise SerializationError(
                f"the latest schema of subject {subject!r} has no message {descriptor.full_name!r}"
            )
        return path

    def __call__(self, message: Message | None) -> bytes | None:
        """``message`` as framed bytes; None stays None (a tombstone)."""
        if message is None:
            return None
        if self._schema_id is None:
            raise RuntimeError("the serializer is not prepared: await its prepare() first")
        if not isinstance(message, self.message_type):
            raise SerializationError(
                f"subject {self._subject!r} takes {self.message_type.DESCRIPTOR.full_name} "
                f"messages, got {type(message).__name__}"
            )
        return self._header + message.SerializeToString()


class ProtobufDeserializer:
    """Confluent-framed Protobuf bytes to messages.

    With ``message_type`` (a generated class) every payload is decoded as that class and no
    registry is needed. Without one, the writer's schema is fetched by id (through
    ``client``) and the message the indexes name is decoded as a class built from it: then,
    as Avro's deserializer, ``await deserialize(data)`` fetches unknown ids and calling the
    deserializer decodes ids already loaded (:meth:`load`, :meth:`prepare`), raising
    :class:`UnknownSchemaIdError` otherwise. Only schemas registered as file descriptors
    (what this package and confluent-kafka's Python serializer register) can be built so;
    ``.proto`` text (what Java clients register) needs ``message_type``.

    Args:
        message_type: the generated message class to decode into.
        client: the registry client, to read without a generated class.
    """

    def __init__(
        self,
        message_type: type[Message] | None = None,
        *,
        client: SchemaRegistryClient | None = None,
    ) -> None:
        if message_type is None and client is None:
            raise ValueError("give a message_type, or the registry client to read schemas from")
        self.message_type: Final = message_type
        self._client = client
        self._files: dict[int, tuple[FileDescriptorProto, DescriptorPool]] = {}
        self._classes: dict[tuple[int, tuple[int, ...]], type[Message]] = {}

    def __repr__(self) -> str:
        if self.message_type is not None:
            return f"<ProtobufDeserializer {self.message_type.DESCRIPTOR.full_name}>"
        return f"<ProtobufDeserializer {len(self._files)} schema ids loaded>"

    @property
    def loaded_ids(self) -> frozenset[int]:
        """The schema ids the synchronous form decodes without a generated class."""
        return frozenset(self._files)

    async def load(self, schema_id: int) -> None:
        """Fetch the writer schema of ``schema_id`` and the files it references; build them."""
        if self._client is None or schema_id in self._files:
            return
        client = self._client
        pool = DescriptorPool()
        added: set[str] = set()

        async def add(name: str, schema: Schema) -> FileDescriptorProto:
            for ref in schema.references:
                if ref.name not in added:
                    registered = await client.get_version(ref.subject, ref.version)
                    await add(ref.name, registered.schema)
            file = _descriptor_proto(schema, f"schema id {schema_id} ({name})")
            try:
                for dependency in file.dependency:
                    if dependency not in added and _is_builtin(dependency):
                        pool.Add(_well_known(dependency))
                        added.add(dependency)
                pool.Add(file)
            except (TypeError, KeyError, ValueError) as exc:  # a file it needs is missing
                raise SerializationError(
                    f"cannot build the file of schema id {schema_id} ({name}): {exc}"
                ) from exc
            added.add(name)
            return file

        schema = await client.get_schema(schema_id)
        if schema.schema_type != "PROTOBUF":
            raise SerializationError(f"schema id {schema_id} is {schema.schema_type}, not PROTOBUF")
        self._files[schema_id] = (await add(f"schema id {schema_id}", schema), pool)

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

    async def deserialize(self, data: bytes | None) -> Message | None:
        """Decode ``data``, fetching its writer schema first when it is needed and unknown."""
        if data is not None and self.message_type is None:
            await self.load(schema_id_of(data))
        return self(data)

    def __call__(self, data: bytes | None) -> Message | None:
        """Decode ``data``; :class:`SerializationError` if it is not a framed message."""
        if data is None:
            return None
        schema_id = schema_id_of(data)
        indexes, start = decode_message_indexes(data, HEADER_SIZE)
        cls = self.message_type or self._class_of(schema_id, tuple(indexes))
        try:
            return cls.FromString(bytes(data[start:]))
        except DecodeError as exc:
            raise SerializationError(
                f"cannot decode a payload of schema id {schema_id} as "
                f"{cls.DESCRIPTOR.full_name}: {exc}"
            ) from exc

    def find_message(
        self, schema_id: int, name: str | None = None
    ) -> tuple[type[Message], tuple[int, ...]]:
        """The class this deserializer builds for message ``name`` (a full name; None: the
        file's first message) of the loaded schema ``schema_id``, and the message indexes
        that name it in a frame: for code that reads or writes messages of a registered
        schema without a generated class (Spark's typed columns). Raises
        :class:`UnknownSchemaIdError` before :meth:`load`, :class:`SerializationError` when
        the file has no such message."""
        loaded = self._files.get(schema_id)
        if loaded is None:
            raise UnknownSchemaIdError(schema_id)
        path = [0] if name is None else _index_path_in(loaded[0], name)
        if path is None or (name is None and not loaded[0].message_type):
            raise SerializationError(f"schema id {schema_id} has no message {name!r}")
        return self._class_of(schema_id, tuple(path)), tuple(path)

    def _class_of(self, schema_id: int, indexes: tuple[int, ...]) -> type[Message]:
        cls = self._classes.get((schema_id, indexes))
        if cls is not None:
            return cls
        loaded = self._files.get(schema_id)
        if loaded is None:
            raise UnknownSchemaIdError(schema_id)
        file, pool = loaded
        name = _message_name_at(file, indexes)
        if name is None:
            raise SerializationError(
                f"schema id {schema_id} has no message at indexes {list(indexes)}"
            )
        cls = GetMessageClass(pool.FindMessageTypeByName(name))
        self._classes[(schema_id, indexes)] = cls
        return cls


def _descriptor_proto(schema: Schema, what: str) -> FileDescriptorProto:
    try:
        return FileDescriptorProto.FromString(base64.b64decode(schema.schema_str, validate=True))
    except (ValueError, DecodeError) as exc:
        raise SerializationError(
            f"{what} is not a file descriptor (.proto text, as Java clients register): "
            "read it with a generated message_type"
        ) from exc


def _well_known(name: str) -> FileDescriptorProto:
    """A well-known type's file (``google/protobuf/timestamp.proto``), from the runtime."""
    module = name.removesuffix(".proto").replace("/", ".") + "_pb2"
    try:
        importlib.import_module(module)
        found = default_pool.Default().FindFileByName(name)
    except (ImportError, KeyError) as exc:
        raise SerializationError(f"the protobuf runtime does not know {name}") from exc
    return FileDescriptorProto.FromString(found.serialized_pb)


def _message_name_at(file: FileDescriptorProto, indexes: tuple[int, ...]) -> str | None:
    """The full name of the message at ``indexes`` in ``file``."""
    scope = file.package
    messages: Any = file.message_type
    for index in indexes:
        if not 0 <= index < len(messages):
            return None
        message = messages[index]
        scope = f"{scope}.{message.name}" if scope else message.name
        messages = message.nested_type
    return scope
