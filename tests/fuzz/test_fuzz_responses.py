"""Every response decoder, every version, fed hostile frames: only ProtocolError escapes.

Inputs are whole response frames (header + body, as a connection hands them to
``decode_response``): valid encodings of hypothesis-generated responses, mutated (bytes
set, inserted, deleted, truncated, 32-bit lengths planted), plus purely random bytes.
Each example decodes eight inputs: four frames (three mutations of one valid frame and a
random body) and each body alone (``cls.decode``). Budget: 4 examples per response type in
CI (~2.3k inputs), 200 under the fuzz profile (> 110k inputs over the ~70 response types).
"""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import decode_response, encode_response
from aiokafka_ng.protocol.messages import RESPONSE_TYPES
from aiokafka_ng.protocol.primitives import Message
from tests.fuzz.fuzz_budget import INPUTS, budget, mutate
from tests.protocol.strategies import message_values, versions

RESPONSES: list[type[Message]] = [cls for _, cls in sorted(RESPONSE_TYPES.items())]
_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _try(decode: Any, *args: Any) -> bool:
    """True if decoded, False on ProtocolError; any other exception fails the test."""
    try:
        decode(*args)
    except ProtocolError:
        return False
    return True


@pytest.mark.parametrize("cls", RESPONSES, ids=[c.__name__ for c in RESPONSES])
def test_mutated_response_frames(cls: type[Message]) -> None:
    @settings(_SETTINGS, max_examples=budget(4, 200))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(versions(cls)), label="version")
        response: Any = data.draw(message_values(cls, version), label="response")
        valid = encode_response(response, version, 7)[4:]
        # Generating a response costs far more than decoding one: mutate each three ways,
        # plus a random body behind its correlation id.
        frames = [mutate(data, bytearray(valid)) for _ in range(3)]
        frames.append(bytearray(valid[:4]) + data.draw(st.binary(max_size=96), label="random"))
        for frame in frames:
            _try(decode_response, cls, version, bytes(frame))
            _try(cls.decode, bytes(frame[4:]), version)
        INPUTS["responses"] += 2 * len(frames)

    check()


def test_every_response_type_is_fuzzed() -> None:
    """The list above covers every API the codec knows (a new API cannot slip past)."""
    assert len(RESPONSES) == len(RESPONSE_TYPES) >= 70
