"""The struct budget of DecodeLimits counts exactly the struct elements of an answer, in
every response type and version (tagged fields and nesting included): an answer decodes
under a budget of its own count and fails with ResponseLimitError naming a field under one
less. Budget: 3 examples per response type in CI, 100 under the fuzz profile."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.framing import decode_response, encode_response
from aiokafka_ng.protocol.limits import DecodeLimits, ResponseLimitError
from aiokafka_ng.protocol.messages import RESPONSE_TYPES
from aiokafka_ng.protocol.primitives import Message, Struct
from tests.fuzz.fuzz_budget import INPUTS, budget
from tests.protocol.strategies import message_values, versions

RESPONSES: list[type[Message]] = [cls for _, cls in sorted(RESPONSE_TYPES.items())]
_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def struct_elements(value: Any) -> int:
    """Struct elements in the arrays of a decoded message, at every nesting level."""
    if isinstance(value, list):
        inner = sum(struct_elements(v) for v in value)
        return inner + sum(1 for v in value if isinstance(v, Struct))
    if isinstance(value, Struct) and dataclasses.is_dataclass(value):
        return sum(struct_elements(getattr(value, f.name)) for f in dataclasses.fields(value))
    return 0


@pytest.mark.parametrize("cls", RESPONSES, ids=[c.__name__ for c in RESPONSES])
def test_the_struct_budget_is_exact(cls: type[Message]) -> None:
    @settings(_SETTINGS, max_examples=budget(3, 100))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(versions(cls)), label="version")
        response: Any = data.draw(message_values(cls, version), label="response")
        frame = encode_response(response, version, 7)[4:]
        # What the wire carries in this version (fields absent from it are not sent).
        _, decoded = decode_response(cls, version, frame)
        count = struct_elements(decoded)
        _, again = decode_response(cls, version, frame, DecodeLimits(max_structs=count))
        assert again == decoded
        if count:
            with pytest.raises(ResponseLimitError, match=r"\w+\.\w+ has \d+ elements"):
                decode_response(cls, version, frame, DecodeLimits(max_structs=count - 1))
        INPUTS["limits"] += 2

    check()
