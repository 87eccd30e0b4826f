"""Typed record values with a Schema Registry, wire-compatible with confluent-kafka.

Install with ``pip install 'aiokafka-ng[schema-registry]'`` (httpx and fastavro).

- :class:`SchemaRegistryClient`: an async client of the Confluent Schema Registry REST API
  (Confluent's registry, or Apicurio's Confluent-compatible API): register, look up by id
  and by schema, subjects and versions, compatibility checks and settings, references;
  cached; basic or bearer auth, TLS; retries on the package's backoff policy.
- :class:`AvroSerializer` / :class:`AvroDeserializer`: Avro (fastavro) in the Confluent
  wire format (magic byte 0, 4-byte big-endian schema id, then the Avro body), for keys and
  values, with the topic, record and topic-record subject name strategies.

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
    "record_name_strategy",
    "schema_id_of",
    "topic_name_strategy",
    "topic_record_name_strategy",
]
