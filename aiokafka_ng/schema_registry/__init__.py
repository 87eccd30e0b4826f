"""Typed record values with a Schema Registry, wire-compatible with confluent-kafka.

Install with ``pip install 'aiokafka-ng[schema-registry]'`` (httpx, fastavro, jsonschema,
protobuf).

- :class:`SchemaRegistryClient`: an async client of the Confluent Schema Registry REST API
  (Confluent's registry, or Apicurio's Confluent-compatible API): register, look up by id
  and by schema, subjects and versions, compatibility checks and settings, references;
  cached; basic or bearer auth, TLS; retries on the package's backoff policy.
- :class:`AvroSerializer` / :class:`AvroDeserializer`: Avro (fastavro) in the Confluent
  wire format (magic byte 0, 4-byte big-endian schema id, then the Avro body), for keys and
  values, with the topic, record and topic-record subject name strategies.
- :class:`JsonSerializer` / :class:`JsonDeserializer`: JSON Schema, with pydantic models as
  the schema source and as what the deserializer returns (or plain JSON schemas and dicts),
  values validated before they are sent.
- :class:`ProtobufSerializer` / :class:`ProtobufDeserializer`: generated Protobuf messages,
  with Confluent's message indexes after the header and imported files registered as
  references.

For the same schema, subject and value, each writes the bytes confluent-kafka's serializer
of that format writes, and each reads what those write.

The errors (all :class:`SchemaRegistryError`, a :class:`~aiokafka_ng.errors.KafkaError`)
name the subject, id or version concerned and the registry's message; none carries a
credential.
"""

from aiokafka_ng.schema_registry._avro import AvroDeserializer, AvroSerializer
from aiokafka_ng.schema_registry._client import CompatibilityResult, SchemaRegistryClient
from aiokafka_ng.schema_registry._errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryAuthError,
    RegistryUnreachableError,
    SchemaNotFoundError,
    SchemaRegistryError,
    SubjectNotFoundError,
    UnknownSchemaIdError,
    VersionNotFoundError,
)
from aiokafka_ng.schema_registry._json import JsonDeserializer, JsonSerializer
from aiokafka_ng.schema_registry._protobuf import (
    ProtobufDeserializer,
    ProtobufSerializer,
    decode_message_indexes,
    encode_message_indexes,
    message_indexes_of,
)
from aiokafka_ng.schema_registry._types import (
    COMPATIBILITY_LEVELS,
    RegisteredSchema,
    Schema,
    SchemaReference,
)
from aiokafka_ng.schema_registry._wire import (
    MAGIC_BYTE,
    SerializationError,
    SubjectNameStrategy,
    record_name_strategy,
    schema_id_of,
    topic_name_strategy,
    topic_record_name_strategy,
)

__all__ = [
    "COMPATIBILITY_LEVELS",
    "MAGIC_BYTE",
    "AvroDeserializer",
    "AvroSerializer",
    "CompatibilityResult",
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "JsonDeserializer",
    "JsonSerializer",
    "ProtobufDeserializer",
    "ProtobufSerializer",
    "RegisteredSchema",
    "RegistryAuthError",
    "RegistryUnreachableError",
    "Schema",
    "SchemaNotFoundError",
    "SchemaReference",
    "SchemaRegistryClient",
    "SchemaRegistryError",
    "SerializationError",
    "SubjectNameStrategy",
    "SubjectNotFoundError",
    "UnknownSchemaIdError",
    "VersionNotFoundError",
    "decode_message_indexes",
    "encode_message_indexes",
    "message_indexes_of",
    "record_name_strategy",
    "schema_id_of",
    "topic_name_strategy",
    "topic_record_name_strategy",
]
