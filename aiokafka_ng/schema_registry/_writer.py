"""How every serializer (Avro, JSON Schema, Protobuf) picks the schema it writes with.

One rule for the three formats, as confluent-kafka's serializers have it: with
``auto_register`` the schema is registered under the subject (the registry answers the id
it already has when the schema is there); without it the schema must be registered already
and is looked up; with ``use_latest_version`` the subject's newest version is written with,
whatever schema the application holds. The last two exclude each other.
"""

from __future__ import annotations

from dataclasses import dataclass

from aiokafka_ng.schema_registry._client import SchemaRegistryClient
from aiokafka_ng.schema_registry._types import Schema

__all__ = ["PreparedWriter", "WriterSchema", "check_modes", "resolve_writer"]


@dataclass(frozen=True, slots=True)
class WriterSchema:
    """The schema a serializer writes with, and its id."""

    schema_id: int
    schema: Schema


class PreparedWriter:
    """What the three serializers share once prepared: the subject their schema is under and
    the id every payload carries (both None until ``prepare()``)."""

    _subject: str | None = None
    _schema_id: int | None = None

    @property
    def schema_id(self) -> int:
        """The id every payload carries (after :meth:`prepare`)."""
        if self._schema_id is None:
            raise RuntimeError("the serializer is not prepared: await its prepare() first")
        return self._schema_id

    @property
    def subject(self) -> str:
        """The subject the schema is registered under (after :meth:`prepare`)."""
        if self._subject is None:
            raise RuntimeError("the serializer is not prepared: await its prepare() first")
        return self._subject

    def _describe(self, topic: str, is_key: bool) -> str:
        """The repr's common part: role, topic, subject and id (or "not prepared")."""
        state = f"id={self._schema_id}" if self._schema_id is not None else "not prepared"
        role = "key" if is_key else "value"
        return f"{role} topic={topic!r} subject={self._subject!r} {state}"


def check_modes(*, has_schema: bool, auto_register: bool, use_latest_version: bool) -> None:
    """Refuse the combinations that have no meaning, at construction."""
    if use_latest_version and auto_register:
        raise ValueError(
            "use_latest_version writes with a registered schema: pass auto_register=False with it"
        )
    if not has_schema and not use_latest_version:
        raise ValueError("a schema is needed unless use_latest_version=True")


async def resolve_writer(
    client: SchemaRegistryClient,
    subject: str,
    schema: Schema | None,
    *,
    auto_register: bool,
    use_latest_version: bool,
    normalize: bool,
) -> WriterSchema:
    """Register, look up, or take the latest version of ``subject`` (see the module).

    Raises :class:`IncompatibleSchemaError` (naming the subject) when the subject's rule
    refuses the schema, :class:`SubjectNotFoundError` or :class:`SchemaNotFoundError` when
    it must be registered already and is not.
    """
    if use_latest_version:
        latest = await client.get_latest_version(subject)
        return WriterSchema(latest.schema_id, latest.schema)
    assert schema is not None  # check_modes saw to it
    if auto_register:
        return WriterSchema(await client.register(subject, schema, normalize=normalize), schema)
    registered = await client.lookup(subject, schema, normalize=normalize)
    return WriterSchema(registered.schema_id, schema)
