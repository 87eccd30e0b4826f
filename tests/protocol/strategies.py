"""Hypothesis strategies for generated Kafka messages, built from their ``_SCHEMA`` metadata.

A value built for version ``v`` only sets fields present in ``v`` (others keep their
defaults, since encoding drops them), uses ``None`` only where the field is nullable in ``v``,
and adds unknown tagged fields only in flexible versions, with tags that no schema uses.
"""

from __future__ import annotations

import os
import uuid
from typing import Any

from hypothesis import strategies as st

from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolSubscription,
)
from aiokafka_ng.protocol.messages.headers import RequestHeader, ResponseHeader
from aiokafka_ng.protocol.primitives import FieldSpec, Message, Struct

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"


def scaled(n: int) -> int:
    """Example budget: ``n`` normally, 50x under the ``fuzz`` profile."""
    return n * 50 if FUZZ else n


API_CLASSES: list[type[Message]] = [
    *REQUEST_TYPES.values(),
    *RESPONSE_TYPES.values(),
]
ALL_MESSAGE_CLASSES: list[type[Message]] = [
    *API_CLASSES,
    RequestHeader,
    ResponseHeader,
    ConsumerProtocolSubscription,
    ConsumerProtocolAssignment,
]

_INT_RANGES = {
    "int8": (-(2**7), 2**7 - 1),
    "int16": (-(2**15), 2**15 - 1),
    "uint16": (0, 2**16 - 1),
    "int32": (-(2**31), 2**31 - 1),
    "uint32": (0, 2**32 - 1),
    "int64": (-(2**63), 2**63 - 1),
}
# Unknown tags for round trips: far above any tag a schema assigns.
_UNKNOWN_TAGS = st.integers(min_value=1000, max_value=100_000)


def versions(cls: type[Message]) -> list[int]:
    return list(range(cls.MIN_VERSION, cls.MAX_VERSION + 1))


def _in(r: tuple[int, int] | None, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


def _scalar(kind: str) -> st.SearchStrategy[Any]:
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return st.integers(min_value=lo, max_value=hi)
    if kind == "bool":
        return st.booleans()
    if kind == "float64":
        return st.floats(allow_nan=False)
    if kind == "string":
        return st.text(max_size=8)
    if kind in ("bytes", "records"):
        return st.binary(max_size=16)
    if kind == "uuid":
        return st.uuids()
    raise AssertionError(f"unknown kind {kind}")


def _field(spec: FieldSpec, version: int, flexible: bool) -> st.SearchStrategy[Any]:
    if spec.struct is not None:
        inner = struct_values(spec.struct, version, flexible)
    else:
        inner = _scalar(spec.kind.removeprefix("[]"))
    if spec.kind.startswith("[]"):
        inner = st.lists(inner, max_size=3)
    if _in(spec.nullable, version):
        inner = st.none() | inner
    return inner


_CACHE: dict[tuple[type[Struct], int, bool], st.SearchStrategy[Any]] = {}


def struct_values(cls: type[Struct], version: int, flexible: bool) -> st.SearchStrategy[Any]:
    """Instances of ``cls`` valid for ``version`` (``flexible``: the version is flexible)."""
    key = (cls, version, flexible)
    if key not in _CACHE:
        _CACHE[key] = _build(cls, version, flexible)
    return _CACHE[key]


def _build(cls: type[Struct], version: int, flexible: bool) -> st.SearchStrategy[Any]:
    kwargs = {
        spec.name: _field(spec, version, flexible)
        for spec in cls._SCHEMA
        if _in(spec.versions, version)
    }
    if flexible:
        kwargs["unknown_tagged_fields"] = st.dictionaries(
            _UNKNOWN_TAGS, st.binary(max_size=6), max_size=2
        )
    return st.builds(cls, **kwargs)


def message_values(cls: type[Message], version: int) -> st.SearchStrategy[Any]:
    return struct_values(cls, version, cls.is_flexible(version))


def versioned_messages(cls: type[Message]) -> st.SearchStrategy[tuple[int, Any]]:
    """(version, instance) pairs across every version of ``cls``."""
    return st.sampled_from(versions(cls)).flatmap(
        lambda v: st.tuples(st.just(v), message_values(cls, v))
    )


def sample(cls: type[Struct], version: int, flexible: bool, seed: int = 1) -> Any:
    """A deterministic instance with every present field set to a non-default value."""
    kwargs: dict[str, Any] = {}
    for i, spec in enumerate(cls._SCHEMA):
        if not _in(spec.versions, version):
            continue
        n = seed + i
        if spec.struct is not None:
            one = sample(spec.struct, version, flexible, n)
        else:
            one = _sample_scalar(spec.kind.removeprefix("[]"), n)
        kwargs[spec.name] = [one, one] if spec.kind.startswith("[]") else one
    if flexible:
        kwargs["unknown_tagged_fields"] = {9999: b"\x01\x02"}
    return cls(**kwargs)


def _sample_scalar(kind: str, n: int) -> Any:
    if kind in _INT_RANGES:
        lo, hi = _INT_RANGES[kind]
        return max(lo, min(hi, 1000 + n))
    if kind == "bool":
        return True
    if kind == "float64":
        return 1.5
    if kind == "string":
        return f"s{n}é"
    if kind in ("bytes", "records"):
        return bytes(range(n % 7 + 1))
    if kind == "uuid":
        return uuid.UUID(int=n + 1)
    raise AssertionError(kind)
