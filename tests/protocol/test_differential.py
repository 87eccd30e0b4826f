"""Differential tests against aiokafka's hand-written protocol classes (an independent codec).

Values are generated for our classes, converted positionally into aiokafka's tuple form
(aiokafka's ``Schema`` lists the wire fields in order, which is all we rely on), and then:
requests must encode to identical bytes; responses encoded by aiokafka must decode here to
the original value. aiokafka only implements non-flexible versions of these APIs.
"""

from __future__ import annotations

import importlib
from typing import Any

import pytest
from aiokafka.protocol.types import Array, Schema
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokafka_ng.protocol.messages.create_topics import CreateTopicsRequest, CreateTopicsResponse
from aiokafka_ng.protocol.messages.fetch import FetchRequest, FetchResponse
from aiokafka_ng.protocol.messages.list_offsets import ListOffsetsRequest, ListOffsetsResponse
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataResponse
from aiokafka_ng.protocol.messages.produce import ProduceRequest, ProduceResponse
from aiokafka_ng.protocol.primitives import FieldSpec, Message, Struct
from tests.protocol.strategies import message_values, scaled

# (our class, aiokafka module, aiokafka class-name prefix)
PAIRS: list[tuple[type[Message], str, str]] = [
    (ApiVersionsRequest, "admin", "ApiVersionRequest"),
    (ApiVersionsResponse, "admin", "ApiVersionResponse"),
    (MetadataRequest, "metadata", "MetadataRequest"),
    (MetadataResponse, "metadata", "MetadataResponse"),
    (ProduceRequest, "produce", "ProduceRequest"),
    (ProduceResponse, "produce", "ProduceResponse"),
    (FetchRequest, "fetch", "FetchRequest"),
    (FetchResponse, "fetch", "FetchResponse"),
    (CreateTopicsRequest, "admin", "CreateTopicsRequest"),
    (CreateTopicsResponse, "admin", "CreateTopicsResponse"),
    (ListOffsetsRequest, "offset", "OffsetRequest"),
    (ListOffsetsResponse, "offset", "OffsetResponse"),
]


def _aiokafka_versions(module: str, prefix: str) -> dict[int, Any]:
    mod = importlib.import_module(f"aiokafka.protocol.{module}")
    out = {}
    v = 0
    while hasattr(mod, f"{prefix}_v{v}"):
        out[v] = getattr(mod, f"{prefix}_v{v}")
        v += 1
    return out


CASES = [
    (ours, version, ak)
    for ours, module, prefix in PAIRS
    for version, ak in _aiokafka_versions(module, prefix).items()
    if version >= ours.MIN_VERSION
    # aiokafka declares OffsetRequest v4/v5 current_leader_epoch as Int64 (the schema says
    # int32); it never sends those versions ("Not yet supported" there), so skip them.
    and not (ours is ListOffsetsRequest and version >= 4)
]


def _present(spec: FieldSpec, v: int) -> bool:
    tagged = spec.tagged_versions is not None and spec.tagged_versions[0] <= v
    return spec.versions[0] <= v <= spec.versions[1] and not tagged


def to_aiokafka(obj: Struct, version: int, schema: Schema) -> tuple[Any, ...]:
    specs = [s for s in type(obj)._SCHEMA if _present(s, version)]
    assert len(specs) == len(schema.fields), (type(obj).__name__, schema.names)
    return tuple(
        _conv(getattr(obj, s.name), s, ak, version)
        for s, ak in zip(specs, schema.fields, strict=True)
    )


def _conv(value: Any, spec: FieldSpec, ak: Any, version: int) -> Any:
    if isinstance(ak, Array):
        if value is None:
            return None
        if spec.struct is not None and isinstance(ak.array_of, Schema):
            return [to_aiokafka(e, version, ak.array_of) for e in value]
        if spec.struct is not None:
            # A struct with one field is the same on the wire as that field (aiokafka
            # declares e.g. Metadata v0 topics as an array of strings).
            return [_single(e, version) for e in value]
        return list(value)
    if isinstance(ak, Schema):
        return to_aiokafka(value, version, ak)
    return value


def _single(obj: Struct, version: int) -> Any:
    (spec,) = [s for s in type(obj)._SCHEMA if _present(s, version)]
    return getattr(obj, spec.name)


def test_cases_cover_expected_versions() -> None:
    covered = {(ours.__name__, v) for ours, v, _ in CASES}
    assert ("ProduceRequest", 8) in covered and ("FetchResponse", 11) in covered
    assert ("MetadataRequest", 5) in covered and ("ApiVersionsRequest", 2) in covered
    assert len(CASES) >= 50


@pytest.mark.parametrize(
    ("ours", "version", "ak"), CASES, ids=[f"{o.__name__}-v{v}" for o, v, _ in CASES]
)
def test_matches_aiokafka(ours: type[Message], version: int, ak: Any) -> None:
    assert version == ak.API_VERSION and ak.API_KEY == ours.API_KEY  # type: ignore[attr-defined]

    @settings(
        max_examples=scaled(25),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )
    @given(message_values(ours, version))
    def check(msg: Any) -> None:
        theirs = ak(*to_aiokafka(msg, version, ak.SCHEMA))
        if ours.__name__.endswith("Request"):
            assert msg.encode(version) == theirs.encode()
        else:
            assert ours.decode(theirs.encode(), version) == msg
            assert ak.decode(msg.encode(version)).encode() == theirs.encode()

    check()


def test_fixed_example_produce_v3() -> None:
    from aiokafka.protocol.produce import ProduceRequest_v3

    theirs = ProduceRequest_v3("txn", -1, 30000, [("topic", [(0, b"batch")])])
    ours = ProduceRequest.decode(theirs.encode(), 3)
    assert ours.transactional_id == "txn" and ours.acks == -1 and ours.timeout_ms == 30000
    assert ours.topic_data[0].partition_data[0].records == b"batch"
    assert ours.encode(3) == theirs.encode()


@given(st.integers(0, 2))
@settings(max_examples=3, deadline=None)
def test_api_versions_response_from_aiokafka(version: int) -> None:
    mod = importlib.import_module("aiokafka.protocol.admin")
    ak = getattr(mod, f"ApiVersionResponse_v{version}")
    args: list[Any] = [0, [(0, 0, 8), (3, 0, 5)]]
    if version >= 1:
        args.append(100)
    resp = ApiVersionsResponse.decode(ak(*args).encode(), version)
    assert [(k.api_key, k.min_version, k.max_version) for k in resp.api_keys] == args[1]
    assert resp.throttle_time_ms == (100 if version >= 1 else 0)
