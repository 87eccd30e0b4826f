"""The errors of :mod:`aiokafka_ng.schema_registry`: one small tree under
:class:`SchemaRegistryError`, each naming what failed (subject, id, version) and the
registry's own message. None of them carries a credential: URLs are shown without user
info, and no header is ever quoted."""

from __future__ import annotations

from aiokafka_ng.errors import KafkaError

__all__ = [
    "IncompatibleSchemaError",
    "InvalidSchemaError",
    "RegistryAuthError",
    "RegistryUnreachableError",
    "SchemaNotFoundError",
    "SchemaRegistryError",
    "SubjectNotFoundError",
    "UnknownSchemaIdError",
    "VersionNotFoundError",
]


class SchemaRegistryError(KafkaError):
    """The registry refused a request or could not be asked.

    ``status`` is the HTTP status (None when no answer came) and ``error_code`` the
    registry's own code (``40401`` and so on; None when it sent none).
    """

    message = "The schema registry refused the request."

    def __init__(
        self, message: str, *, status: int | None = None, error_code: int | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.error_code = error_code


class SubjectNotFoundError(SchemaRegistryError):
    """The subject does not exist (error code 40401)."""

    def __init__(self, subject: str, message: str, **kwargs: int | None) -> None:
        super().__init__(f"subject {subject!r} not found: {message}", **kwargs)
        self.subject = subject


class SchemaNotFoundError(SchemaRegistryError):
    """No such schema: an unknown id, or a schema not registered under the subject
    (error code 40403)."""


class VersionNotFoundError(SchemaNotFoundError):
    """The subject has no such version (error code 40402)."""


class IncompatibleSchemaError(SchemaRegistryError):
    """The schema breaks the subject's compatibility rule (HTTP 409): ``subject`` and the
    registry's ``reason`` say which and why."""

    def __init__(self, subject: str, reason: str, **kwargs: int | None) -> None:
        super().__init__(
            f"schema incompatible with subject {subject!r} (its compatibility rule): {reason}",
            **kwargs,
        )
        self.subject = subject
        self.reason = reason


class InvalidSchemaError(SchemaRegistryError):
    """The registry could not parse the schema, or a reference is wrong (HTTP 422)."""


class RegistryAuthError(SchemaRegistryError):
    """The registry refused the credentials (HTTP 401) or the operation (HTTP 403)."""


class RegistryUnreachableError(SchemaRegistryError):
    """No answer after every retry: connection refused, TLS failure, timeout, or a 5xx."""

    retriable = True


class UnknownSchemaIdError(SchemaRegistryError):
    """A synchronous deserializer met a schema id it has not loaded yet.

    ``schema_id`` is that id: ``await deserializer.load(schema_id)`` (or the async
    ``deserialize``) fetches it, after which the record decodes.
    """

    def __init__(self, schema_id: int) -> None:
        super().__init__(
            f"schema id {schema_id} is not loaded yet: await the deserializer's "
            f"load({schema_id}) or deserialize() first"
        )
        self.schema_id = schema_id
