"""What the registry stores and answers: a schema (text, type, references), and a schema as
registered under a subject (its id and version). Frozen and hashable: the client's caches
are keyed by them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

__all__ = ["COMPATIBILITY_LEVELS", "RegisteredSchema", "Schema", "SchemaReference"]

#: The compatibility levels a registry accepts (Confluent's names).
COMPATIBILITY_LEVELS = (
    "NONE",
    "BACKWARD",
    "BACKWARD_TRANSITIVE",
    "FORWARD",
    "FORWARD_TRANSITIVE",
    "FULL",
    "FULL_TRANSITIVE",
)

SchemaType = Literal["AVRO", "JSON", "PROTOBUF"]


@dataclass(frozen=True, slots=True)
class SchemaReference:
    """A named type that a schema uses, defined by ``version`` of ``subject``.

    For Avro, ``name`` is the referenced type's full name (``"ex.Address"``).
    """

    name: str
    subject: str
    version: int

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "subject": self.subject, "version": self.version}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> SchemaReference:
        return cls(str(data["name"]), str(data["subject"]), int(data["version"]))


@dataclass(frozen=True, slots=True)
class Schema:
    """A schema's text as the registry keeps it, its type, and the references it uses."""

    schema_str: str
    schema_type: SchemaType = "AVRO"
    references: tuple[SchemaReference, ...] = ()

    def to_json(self) -> dict[str, Any]:
        body: dict[str, Any] = {"schema": self.schema_str}
        # The registry's default is AVRO; Confluent's registry rejects nothing either way,
        # but leaving it out for AVRO matches what other clients send.
        if self.schema_type != "AVRO":
            body["schemaType"] = self.schema_type
        if self.references:
            body["references"] = [ref.to_json() for ref in self.references]
        return body

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Schema:
        kind = str(data.get("schemaType") or "AVRO")
        if kind not in ("AVRO", "JSON", "PROTOBUF"):
            kind = "AVRO"  # pragma: no cover (a registry answers only these three)
        refs = tuple(SchemaReference.from_json(r) for r in data.get("references") or ())
        return cls(str(data["schema"]), kind, refs)  # type: ignore[arg-type]


@dataclass(frozen=True, slots=True)
class RegisteredSchema:
    """``schema`` as registered: ``version`` of ``subject``, with the global ``schema_id``."""

    schema_id: int
    subject: str
    version: int
    schema: Schema
