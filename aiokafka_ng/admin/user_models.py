"""Typed inputs and results of the admin client's user operations: client quotas (KIP-546)
and SCRAM credentials (KIP-554). Split from ``models.py`` only to keep each file short; the
same rules hold (slotted, frozen, enum values are the wire's numbers).
"""

from __future__ import annotations

import enum
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = [
    "ClientQuotaAlteration",
    "ClientQuotaEntity",
    "ClientQuotaFilter",
    "ClientQuotaFilterComponent",
    "QuotaMatch",
    "ScramCredentialInfo",
    "ScramMechanism",
    "UserScramCredentialDeletion",
    "UserScramCredentialUpsertion",
    "UserScramCredentialsDescription",
]


# ---------------------------------------------------------------------------- client quotas


class ClientQuotaEntity:
    """Who a quota applies to: entity type -> name, e.g. ``{"user": "alice",
    "client-id": None}`` (None is the type's default entity). Types are ``"user"``,
    ``"client-id"`` and ``"ip"``. Hashable and comparable, so it can key results."""

    __slots__ = ("_items",)

    USER = "user"
    CLIENT_ID = "client-id"
    IP = "ip"

    def __init__(self, entries: Mapping[str, str | None]) -> None:
        if not entries:
            raise ValueError("a client quota entity names at least one entity type")
        self._items: tuple[tuple[str, str | None], ...] = tuple(sorted(entries.items()))

    @property
    def entries(self) -> dict[str, str | None]:
        return dict(self._items)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, ClientQuotaEntity) and self._items == other._items

    def __hash__(self) -> int:
        return hash(self._items)

    def __repr__(self) -> str:
        return f"ClientQuotaEntity({dict(self._items)!r})"


class QuotaMatch(enum.IntEnum):
    """How a filter component matches an entity type (the wire's ``match_type``)."""

    EXACT = 0  # the named entity
    DEFAULT = 1  # the type's default entity
    SPECIFIED = 2  # any entity of the type (not the default)


@dataclass(frozen=True, slots=True)
class ClientQuotaFilterComponent:
    """One entity type of a :class:`ClientQuotaFilter`; build with the class methods."""

    entity_type: str
    match: QuotaMatch
    name: str | None = None

    @classmethod
    def of_entity(cls, entity_type: str, name: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, QuotaMatch.EXACT, name)

    @classmethod
    def of_default_entity(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, QuotaMatch.DEFAULT)

    @classmethod
    def of_entity_type(cls, entity_type: str) -> ClientQuotaFilterComponent:
        return cls(entity_type, QuotaMatch.SPECIFIED)


@dataclass(frozen=True, slots=True)
class ClientQuotaFilter:
    """Which quotas ``describe_client_quotas`` returns: entities matching every component;
    with ``strict`` only entities with no other entity type."""

    components: tuple[ClientQuotaFilterComponent, ...] = ()
    strict: bool = False

    @classmethod
    def all(cls) -> ClientQuotaFilter:
        return cls((), False)

    @classmethod
    def contains(cls, components: Sequence[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), False)

    @classmethod
    def contains_only(cls, components: Sequence[ClientQuotaFilterComponent]) -> ClientQuotaFilter:
        return cls(tuple(components), True)


@dataclass(frozen=True, slots=True)
class ClientQuotaAlteration:
    """Set (a float) or remove (None) quota values of one entity, e.g.
    ``{"producer_byte_rate": 1_048_576.0, "request_percentage": None}``."""

    entity: ClientQuotaEntity
    ops: Mapping[str, float | None]


# ---------------------------------------------------------------------------- SCRAM users


class ScramMechanism(enum.IntEnum):
    """Kafka's numbering of the SCRAM mechanisms on the wire."""

    UNKNOWN = 0
    SCRAM_SHA_256 = 1
    SCRAM_SHA_512 = 2

    @property
    def hash_name(self) -> str:
        """The ``hashlib`` name of the mechanism's hash."""
        if self is ScramMechanism.UNKNOWN:
            raise ValueError("the UNKNOWN SCRAM mechanism has no hash")
        return "sha256" if self is ScramMechanism.SCRAM_SHA_256 else "sha512"


@dataclass(frozen=True, slots=True)
class ScramCredentialInfo:
    """A mechanism a user has a credential for, and its iteration count."""

    mechanism: ScramMechanism
    iterations: int


@dataclass(frozen=True, slots=True)
class UserScramCredentialsDescription:
    """What ``describe_user_scram_credentials`` returns for one user (no secrets: the
    broker never sends them)."""

    user: str
    credential_infos: list[ScramCredentialInfo]


@dataclass(frozen=True, slots=True)
class UserScramCredentialUpsertion:
    """Create or replace ``user``'s credential for ``mechanism``.

    The password never leaves the client: the salted password (RFC 5802 ``Hi``) is
    computed here with ``salt`` (32 random bytes by default) and sent instead. Kafka accepts
    4096 to 16384 iterations. The password is left out of ``repr``.
    """

    user: str
    mechanism: ScramMechanism
    password: str = field(repr=False)
    iterations: int = 4096
    salt: bytes | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class UserScramCredentialDeletion:
    """Delete ``user``'s credential for ``mechanism``."""

    user: str
    mechanism: ScramMechanism
