"""Decoders fed garbage raise only ProtocolError: never another exception, hang or huge allocation.

Four sources of bad input, over every request/response/header/data decoder and version:
every strict prefix of a fully-populated valid encoding (which MUST fail: decoding consumes
every byte of a valid body), deterministic byte mutations of valid encodings (including
planted 0x7fffffff lengths/counts), hypothesis random bytes, and hypothesis-mutated valid
encodings. The deterministic loops alone run well over 10k decodes per CI run;
``HYPOTHESIS_PROFILE=fuzz`` multiplies the hypothesis budgets by 50.
"""

from __future__ import annotations

import random
import time
import tracemalloc
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.primitives import Message
from tests.protocol.strategies import (
    ALL_MESSAGE_CLASSES,
    message_values,
    sample,
    scaled,
    versions,
)

_IDS = [c.__name__ for c in ALL_MESSAGE_CLASSES]
_SETTINGS = settings(
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _decode(cls: type[Message], data: bytes | bytearray, version: int) -> bool:
    """True if decoded, False on ProtocolError; anything else propagates (= test failure)."""
    try:
        cls.decode(data, version)
    except ProtocolError:
        return False
    return True


def _valid(cls: type[Message], version: int) -> bytes:
    data: bytes = sample(cls, version, cls.is_flexible(version)).encode(version)
    return data


def test_decode_count_target() -> None:
    """The deterministic loops below alone exceed 10k decodes."""
    prefixes = sum(min(len(_valid(c, v)), 64) for c in ALL_MESSAGE_CLASSES for v in versions(c))
    assert prefixes > 10_000


@pytest.mark.parametrize("cls", ALL_MESSAGE_CLASSES, ids=_IDS)
def test_every_truncation_fails(cls: type[Message]) -> None:
    for v in versions(cls):
        data = _valid(cls, v)
        assert _decode(cls, data, v)
        # All prefixes for short bodies; 64 spread-out cut points for long ones.
        cuts = (
            range(len(data)) if len(data) <= 64 else random.Random(v).sample(range(len(data)), 64)
        )
        for cut in cuts:
            assert not _decode(cls, data[:cut], v), (v, cut)


@pytest.mark.parametrize("cls", ALL_MESSAGE_CLASSES, ids=_IDS)
def test_byte_mutations(cls: type[Message]) -> None:
    rng = random.Random(cls.__name__)
    start = time.perf_counter()
    for v in versions(cls):
        data = _valid(cls, v)
        if not data:
            continue
        for pos in rng.sample(range(len(data)), min(len(data), 12)):
            for patch in (
                b"\xff",
                b"\x00",
                b"\x80",
                bytes([rng.randrange(256)]),
                b"\x7f\xff\xff\xff",
            ):
                mutated = bytearray(data)
                mutated[pos : pos + len(patch)] = patch
                _decode(cls, mutated, v)
            _decode(cls, data[:pos] + data[pos + 1 :], v)  # deletion
            _decode(cls, data[:pos] + b"\xff\xff" + data[pos:], v)  # insertion
    assert time.perf_counter() - start < 30


@pytest.mark.parametrize("cls", ALL_MESSAGE_CLASSES, ids=_IDS)
def test_random_bytes(cls: type[Message]) -> None:
    @settings(_SETTINGS, max_examples=scaled(30))
    @given(st.sampled_from(versions(cls)), st.binary(max_size=128))
    def check(version: int, data: bytes) -> None:
        _decode(cls, data, version)

    check()


@pytest.mark.parametrize("cls", ALL_MESSAGE_CLASSES, ids=_IDS)
def test_mutated_valid_encodings(cls: type[Message]) -> None:
    @settings(_SETTINGS, max_examples=scaled(15))
    @given(st.data())
    def check(data: st.DataObject) -> None:
        version = data.draw(st.sampled_from(versions(cls)))
        msg: Any = data.draw(message_values(cls, version))
        buf = bytearray(msg.encode(version))
        for _ in range(data.draw(st.integers(1, 4))):
            pos = data.draw(st.integers(0, len(buf)))
            op = data.draw(st.sampled_from(["set", "insert", "delete", "truncate"]))
            if op == "set" and pos < len(buf):
                buf[pos] = data.draw(st.integers(0, 255))
            elif op == "insert":
                buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=5))
            elif op == "delete":
                del buf[pos : pos + data.draw(st.integers(1, 4))]
            else:
                del buf[pos:]
        _decode(cls, buf, version)

    check()


def test_hostile_lengths_do_not_allocate() -> None:
    """Claimed sizes of ~2 GiB / ~4 G elements fail before any large allocation."""
    hostile = [
        b"\x7f\xff\xff\xff" * 16,
        b"\xff\xff\xff\xff\x0f" * 16,
        b"\x00\x00" + b"\x7f\xff\xff\xff" * 16,
        b"\x00" * 8 + b"\xfe\xff\xff\xff\x0f" * 16,
    ]
    tracemalloc.start()
    try:
        start = time.perf_counter()
        for cls in ALL_MESSAGE_CLASSES:
            for v in versions(cls):
                for data in hostile:
                    _decode(cls, data, v)
        elapsed = time.perf_counter() - start
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * 1024 * 1024, peak
    assert elapsed < 30
