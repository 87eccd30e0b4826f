"""Reader/Writer primitives: round trips, known encodings, and rejection of bad input."""

from __future__ import annotations

import time
import uuid

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.primitives import Reader, Writer
from tests.protocol.strategies import scaled

_S = settings(max_examples=scaled(100), deadline=None)


def _w() -> Writer:
    return Writer()


@pytest.mark.parametrize(
    ("value", "encoded"),
    [
        (0, b"\x00"),
        (1, b"\x01"),
        (127, b"\x7f"),
        (128, b"\x80\x01"),
        (300, b"\xac\x02"),
        (2**32 - 1, b"\xff\xff\xff\xff\x0f"),
    ],
)
def test_uvarint_known(value: int, encoded: bytes) -> None:
    w = _w()
    w.uvarint(value)
    assert w.getvalue() == encoded
    assert Reader(encoded).uvarint() == value


@pytest.mark.parametrize(
    ("value", "encoded"),
    [(0, b"\x00"), (-1, b"\x01"), (1, b"\x02"), (-2, b"\x03"), (63, b"\x7e"), (-64, b"\x7f")],
)
def test_zigzag_varint_known(value: int, encoded: bytes) -> None:
    w = _w()
    w.varint(value)
    assert w.getvalue() == encoded
    assert Reader(encoded).varint() == value
    w = _w()
    w.varlong(value)
    assert w.getvalue() == encoded
    assert Reader(encoded).varlong() == value


@given(st.integers(-(2**31), 2**31 - 1), st.integers(-(2**63), 2**63 - 1))
@_S
def test_varint_varlong_round_trip(i: int, q: int) -> None:
    w = _w()
    w.varint(i)
    w.varlong(q)
    r = Reader(w.getvalue())
    assert (r.varint(), r.varlong()) == (i, q)
    assert r.remaining() == 0


def test_varint_range_and_length_limits() -> None:
    with pytest.raises(ValueError):
        _w().varint(2**31)
    with pytest.raises(ValueError):
        _w().varlong(-(2**63) - 1)
    with pytest.raises(ValueError):
        _w().uvarint(-1)
    with pytest.raises(ProtocolError, match="too long"):
        Reader(b"\x80\x80\x80\x80\x80\x01").uvarint()
    with pytest.raises(ProtocolError, match="truncated"):
        Reader(b"\x80\x80").uvarint()
    assert Reader(b"\xff" * 9 + b"\x01").uvarlong() == 2**64 - 1


@given(
    st.integers(-(2**7), 2**7 - 1),
    st.integers(-(2**15), 2**15 - 1),
    st.integers(0, 2**16 - 1),
    st.integers(-(2**31), 2**31 - 1),
    st.integers(0, 2**32 - 1),
    st.integers(-(2**63), 2**63 - 1),
    st.floats(allow_nan=False),
    st.booleans(),
    st.uuids(),
)
@_S
def test_fixed_round_trip(
    b: int, h: int, uh: int, i: int, ui: int, q: int, d: float, flag: bool, u: uuid.UUID
) -> None:
    w = _w()
    w.int8(b)
    w.int16(h)
    w.uint16(uh)
    w.int32(i)
    w.uint32(ui)
    w.int64(q)
    w.float64(d)
    w.boolean(flag)
    w.uuid(u)
    data = w.getvalue()
    assert len(data) == 1 + 2 + 2 + 4 + 4 + 8 + 8 + 1 + 16
    r = Reader(data)
    got = (r.int8(), r.int16(), r.uint16(), r.int32(), r.uint32(), r.int64(), r.float64())
    assert got == (b, h, uh, i, ui, q, d)
    assert r.boolean() is flag and r.uuid() == u
    with pytest.raises(ProtocolError):
        r.int8()


def test_big_endian_layout() -> None:
    w = _w()
    w.int16(-2)
    w.int32(0x01020304)
    w.int64(1)
    assert w.getvalue() == b"\xff\xfe\x01\x02\x03\x04" + b"\x00" * 7 + b"\x01"


@given(st.text(max_size=50), st.none() | st.text(max_size=50), st.binary(max_size=50))
@_S
def test_strings_and_bytes_round_trip(s: str, ns: str | None, b: bytes) -> None:
    w = _w()
    w.string(s)
    w.nullable_string(ns)
    w.compact_string(s)
    w.compact_nullable_string(ns)
    w.bytes_(b)
    w.nullable_bytes(None)
    w.compact_bytes(b)
    w.compact_nullable_bytes(None)
    r = Reader(bytearray(w.getvalue()))
    assert r.string() == s and r.nullable_string() == ns
    assert r.compact_string() == s and r.compact_nullable_string() == ns
    assert r.bytes_() == b and r.nullable_bytes() is None
    assert r.compact_bytes() == b and r.compact_nullable_bytes() is None
    assert r.remaining() == 0


def test_string_encodings() -> None:
    w = _w()
    w.string("hé")
    w.nullable_string(None)
    w.compact_string("")
    w.compact_nullable_string(None)
    assert w.getvalue() == b"\x00\x03h\xc3\xa9" + b"\xff\xff" + b"\x01" + b"\x00"
    with pytest.raises(ValueError):
        _w().string("x" * 40000)


@pytest.mark.parametrize(
    ("method", "data"),
    [
        ("string", b"\xff\xff"),  # null where not nullable
        ("string", b"\xff\xfe"),  # -2
        ("string", b"\x00\x05abc"),  # short
        ("string", b"\x00\x02\xc3\x28"),  # invalid utf-8
        ("nullable_string", b"\x80\x00"),
        ("compact_string", b"\x00"),  # compact null
        ("compact_string", b"\x05ab"),
        ("compact_nullable_string", b"\x02\xff"),  # invalid utf-8
        ("bytes_", b"\xff\xff\xff\xff"),
        ("nullable_bytes", b"\xff\xff\xff\xfe"),
        ("nullable_bytes", b"\x7f\xff\xff\xff"),  # 2 GiB claimed, nothing there
        ("compact_bytes", b"\xff\xff\xff\xff\x0f"),
        ("compact_nullable_bytes", b"\x10"),
        ("array_len", b"\xff\xff\xff\xff"),
        ("nullable_array_len", b"\xff\xff\xff\xfe"),
        ("nullable_array_len", b"\x7f\xff\xff\xff" + b"\x00" * 10),
        ("compact_array_len", b"\x00"),
        ("compact_nullable_array_len", b"\xff\xff\xff\xff\x07"),
        ("tag_count", b"\x64"),
        ("uuid", b"\x00" * 15),
        ("int64", b"\x00" * 7),
        ("float64", b""),
        ("varint", b"\xff\xff\xff\xff\x1f"),  # > 32 bits
    ],
)
def test_reader_rejects(method: str, data: bytes) -> None:
    r = Reader(data)
    with pytest.raises(ProtocolError):
        getattr(r, method)()


def test_null_lengths_accepted_where_nullable() -> None:
    assert Reader(b"\xff\xff\xff\xff").nullable_array_len() == -1
    assert Reader(b"\x00").compact_nullable_array_len() == -1
    assert Reader(b"\x03" + b"abc").compact_array_len() == 2


def test_huge_counts_fail_fast() -> None:
    start = time.perf_counter()
    for data in (b"\x7f\xff\xff\xff" + b"\x01" * 10, b"\xff\xff\xff\xff\x07" + b"\x01" * 10):
        r = Reader(data)
        with pytest.raises(ProtocolError, match="exceeds"):
            r.array_len() if data[0] == 0x7F else r.compact_array_len()
    assert time.perf_counter() - start < 0.5


def test_fixed_array_and_tags() -> None:
    w = _w()
    w.array_len(3)
    w.fixed_array("int32", [1, -1, 7])
    w.tagged_fields([(5, b"a")], {1: b"zz", 9: b""})
    w.unknown_tags({})
    r = Reader(w.getvalue())
    assert r.fixed_array("int32", r.array_len()) == [1, -1, 7]
    seen = {}
    for _ in range(r.tag_count()):
        tag, sub = r.tagged_field()
        seen[tag] = sub.rest()
    assert seen == {1: b"zz", 5: b"a", 9: b""}
    # Sections are sorted by tag on the wire.
    assert w.getvalue()[16:] == b"\x03\x01\x02zz\x05\x01a\x09\x00\x00"
    out: dict[int, bytes] = {}
    r.unknown_tags(out)
    assert out == {} and r.remaining() == 0


def test_tagged_field_payload_is_bounded() -> None:
    r = Reader(b"\x01\x05\x02ab")  # claims 5 bytes, 3 left
    with pytest.raises(ProtocolError):
        r.tagged_field()
    r = Reader(b"\x01\x02ab" + b"zz")
    tag, sub = r.tagged_field()
    assert tag == 1 and sub.rest() == b"ab" and r.raw(2) == b"zz"


def test_reader_accepts_non_byte_memoryviews() -> None:
    import array

    arr = array.array("I", [0x01020304])
    r = Reader(memoryview(arr))
    assert r.remaining() == 4
    assert r.raw(4) == arr.tobytes()
