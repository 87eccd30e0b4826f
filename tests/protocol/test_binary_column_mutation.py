"""``BinaryColumn`` stays memory-safe whatever the caller does to its buffers afterwards.

A column is made from buffers the caller keeps, and most of them are writable (a bytearray,
an ``array``, ``pa.py_buffer`` over a bytearray, a pyarrow array's own buffers through a
memoryview). Before, the column checked its offsets once and read them in place: an offset
changed afterwards read out of bounds (SIGSEGV in ``col[0]`` and ``append_run``; a negative
offset copied ~100 KB of unrelated heap into a record batch). Now the offsets and validity
bits are the column's own copy and the data buffer's view is held. Each test changes the
caller's buffers after the column was made and checks the C type (``_speedups``) and its
pure-Python reference (``binary_column_twin``) against each other and against the items
as they were: same items, same errors, and record batches encoded from the changed column
byte-identical to those from a list of the items. These tests belong in the sanitizer
(ASan/UBSan) run: an out-of-bounds read shows there even where it does not crash.
"""

from __future__ import annotations

import gc
import mmap
from array import array
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng import _native
from aiokafka_ng.protocol import _speedups
from aiokafka_ng.protocol import records as records_c
from tests.protocol import binary_column_twin

records_py = _native.load_pure_twin("aiokafka_ng.protocol.records")

IMPLS: list[Any] = [_speedups.BinaryColumn, binary_column_twin.BinaryColumn]
_SETTINGS = settings(
    deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], max_examples=150
)


def writable_buffers(
    items: list[bytes | None], *, large: bool = False
) -> tuple[bytearray, bytearray, bytearray]:
    """``items`` as Arrow-layout buffers the caller can change in place: offsets, data and
    a validity bitmap, each a bytearray."""
    offs = array("q" if large else "i", [0])
    bits = bytearray((len(items) + 7) // 8)
    for i, item in enumerate(items):
        if item is not None:
            bits[i >> 3] |= 1 << (i & 7)
        offs.append(offs[-1] + len(item or b""))
    return bytearray(offs.tobytes()), bytearray(b"".join(x or b"" for x in items)), bits


def encode(mod: Any, values: Any) -> bytes:
    """A record batch of ``values`` (no keys) built by ``mod``'s builder."""
    builder = mod.RecordBatchBuilder(max_size=1 << 20)
    assert builder.append_run(1_000, None, values, 0, len(values)) == len(values)
    return bytes(builder.build())


def encodings(col: Any) -> set[bytes]:
    """The batches encoded from ``col`` by the Python loop and, for the C type, by the
    kernel (which takes only lists and the C type): one element when they agree."""
    out = {encode(records_py, col)}
    if col.__class__ is _speedups.BinaryColumn:
        out.add(encode(records_c, col))
    return out


def outcome(fn: Any) -> Any:
    """What ``fn()`` gives, or the type and message of what it raises."""
    try:
        return ("ok", fn())
    except Exception as exc:
        return (type(exc), str(exc))


ITEMS: list[bytes | None] = [b"alpha", None, b"", b"bravo-charlie", None, b"d" * 40]


@pytest.mark.parametrize("impl", IMPLS, ids=["c", "py"])
@pytest.mark.parametrize("large", [False, True])
@pytest.mark.parametrize(
    "change",
    ["negative", "huge", "decreasing", "all-ones", "zeroed"],
)
def test_changed_offsets_change_nothing(impl: Any, large: bool, change: str) -> None:
    offsets, data, validity = writable_buffers(ITEMS, large=large)
    col = impl(offsets, data, validity, 1, len(ITEMS) - 1, large)
    view = col[1:4]
    width = 8 if large else 4
    patch = {
        "negative": (-100_000).to_bytes(width, "little", signed=True),
        "huge": (1 << 30).to_bytes(width, "little", signed=True),
        "decreasing": (3).to_bytes(width, "little", signed=True),
        "all-ones": b"\xff" * width,
        "zeroed": b"\x00" * width,
    }[change]
    for j in range(len(ITEMS) + 1):
        offsets[j * width : (j + 1) * width] = patch
    validity[:] = b"\x00" * len(validity)
    assert list(col) == ITEMS[1:]
    assert list(view) == ITEMS[2:5]
    assert col.nbytes() == sum(len(x or b"") for x in ITEMS[1:])
    assert col.null_count() == ITEMS[1:].count(None)
    assert list(col.take([4, 0, 2])) == [ITEMS[5], ITEMS[1], ITEMS[3]]
    assert list(col.copy()) == ITEMS[1:]
    # What the kernel encodes from the changed column is what the Python loop encodes from
    # a list of the items as they were.
    assert encodings(col) == {encode(records_py, ITEMS[1:])}
    # The offsets and bitmap were copied and their views released: they can be resized.
    offsets.extend(b"\x00" * 64)
    del validity[:]
    assert list(col) == ITEMS[1:]


@pytest.mark.parametrize("impl", IMPLS, ids=["c", "py"])
def test_the_data_buffer_is_held_and_cannot_be_resized(impl: Any) -> None:
    offsets, data, validity = writable_buffers(ITEMS)
    col = impl(offsets, data, validity)
    view = col[2:]
    for resize in (lambda: data.extend(b"x" * 4096), lambda: data.clear(), lambda: data.pop()):
        with pytest.raises(BufferError):
            resize()
    del col
    with pytest.raises(BufferError):  # a slice shares the hold
        data.clear()
    assert list(view) == ITEMS[2:]
    del view
    gc.collect()
    data.clear()  # the last column freed: the buffer is the caller's again
    assert data == bytearray()


@pytest.mark.parametrize("impl", IMPLS, ids=["c", "py"])
def test_changed_data_bytes_show_in_place_and_never_beyond(impl: Any) -> None:
    # The data is read in place: new bytes show in the items (their bounds do not move).
    offsets, data, validity = writable_buffers(ITEMS)
    col = impl(offsets, data, validity)
    taken, copied = col.take([0, 3]), col.copy()
    data[:] = b"Z" * len(data)
    expect = [None if x is None else b"Z" * len(x) for x in ITEMS]
    assert list(col) == expect
    assert encodings(col) == {encode(records_py, expect)}
    assert list(taken) == [ITEMS[0], ITEMS[3]] and list(copied) == ITEMS  # own memory


@pytest.mark.parametrize("impl", IMPLS, ids=["c", "py"])
def test_an_mmap_behind_a_column_cannot_close(impl: Any) -> None:
    offsets, data, _ = writable_buffers([b"abc", b"defg"])
    mm = mmap.mmap(-1, len(data))
    mm[:] = bytes(data)
    col = impl(offsets, mm)
    with pytest.raises(BufferError):
        mm.close()
    with pytest.raises(BufferError):
        mm.resize(1)
    assert list(col) == [b"abc", b"defg"]
    del col
    gc.collect()
    mm.close()


@pytest.mark.parametrize("impl", IMPLS, ids=["c", "py"])
def test_arrow_buffers_written_after_the_column_was_made(impl: Any) -> None:
    # pyarrow exports the buffers of an array it built as writable, and pa.py_buffer over a
    # bytearray shares the bytearray: both are the Spark-sink shape, changed afterwards.
    arr = pa.array(ITEMS * 3, pa.binary()).slice(2, 10)
    validity, offsets, data = arr.buffers()
    col = impl(offsets, data, validity, arr.offset, len(arr))
    expect = arr.to_pylist()
    memoryview(offsets).cast("B")[:] = b"\xff" * offsets.size
    memoryview(validity).cast("B")[:] = b"\x00" * validity.size
    assert list(col) == expect
    raw_offsets, raw_data, raw_valid = writable_buffers(ITEMS)
    col = impl(pa.py_buffer(raw_offsets), pa.py_buffer(raw_data), pa.py_buffer(raw_valid))
    raw_offsets[4:8] = (-50_000).to_bytes(4, "little", signed=True)
    raw_valid[0] = 0
    assert list(col) == ITEMS
    with pytest.raises(BufferError):  # pyarrow's own export of the bytearray holds it
        raw_data.clear()


@pytest.mark.parametrize("impl", IMPLS, ids=["c", "py"])
def test_offsets_at_any_alignment(impl: Any) -> None:
    # The offsets are copied with memcpy: a buffer that does not start on a 4-byte boundary
    # reads as any other (before, C refused it; nothing else needed it aligned).
    offsets, data, _ = writable_buffers([b"ab", b"cde"])
    shifted = bytearray(b"\x00") + offsets
    col = impl(memoryview(shifted)[1:], data)
    assert list(col) == [b"ab", b"cde"]


@pytest.mark.parametrize(
    ("offsets", "data", "validity", "offset", "length"),
    [
        (b"\x00\x00\x00\x00\x05\x00\x00\x00\x03\x00\x00\x00", b"abcde", None, 0, -1),
        (b"\x00\x00\x00\x00\x02\x00\x00\x00\x09\x00\x00\x00", b"abcde", None, 0, -1),
        (b"\xff\xff\xff\xff\x02\x00\x00\x00", b"abcde", None, 0, -1),
        (b"\x00\x00\x00\x00\x02\x00\x00\x00", b"abcde", None, 2, -1),
        (b"\x00\x00\x00\x00\x02\x00\x00\x00", b"abcde", None, -1, -1),
        (b"\x00\x00\x00\x00\x02\x00\x00\x00", b"abcde", None, 0, 2),
        (b"\x00" * 40, b"", b"", 0, -1),
        (b"", b"", None, 0, -1),
        (b"\x00\x00\x00\x00", None, None, 0, -1),
        (b"\x00\x00\x00\x00\x01\x00\x00\x00", None, None, 0, -1),
        (5, b"", None, 0, -1),
        (b"\x00" * 4, "text", None, 0, -1),
        (b"\x00" * 8, b"a", 7, 0, -1),
        (b"\x00" * 8, b"a", None, "0", -1),
    ],
)
def test_construction_errors_as_the_twin(
    offsets: Any, data: Any, validity: Any, offset: Any, length: int
) -> None:
    got = [
        outcome(lambda i=impl: list(i(offsets, data, validity, offset, length))) for impl in IMPLS
    ]
    assert got[0][0] == got[1][0]
    if got[0][0] is ValueError:
        assert got[0] == got[1]  # the same message too


@pytest.mark.parametrize(
    "call",
    [
        lambda c: c[6],
        lambda c: c[-7],
        lambda c: c[1 << 70],
        lambda c: c["0"],
        lambda c: c[::2],
        lambda c: c[::0],
        lambda c: list(c[4:1]),
        lambda c: list(c[-3:]),
        lambda c: c.take((0, 1)),
        lambda c: c.take([0, -1]),
        lambda c: c.take([6]),
        lambda c: c.take(["0"]),
        lambda c: list(c.take([])),
        lambda c: list(c[3:3].copy()),
        lambda c: c[2:5].nbytes(),
        lambda c: c[1:5].null_count(),
        repr,
    ],
)
def test_reads_and_their_errors_as_the_twin(call: Any) -> None:
    got = []
    for impl in IMPLS:
        offsets, data, validity = writable_buffers(ITEMS)
        col = impl(offsets, data, validity)
        offsets[:] = b"\x80" * len(offsets)  # changed after: must not matter
        got.append(outcome(lambda c=col: call(c)))
    assert got[0][0] == got[1][0]
    if got[0][0] == "ok":
        assert got[0] == got[1]


@_SETTINGS
@given(
    items=st.lists(st.one_of(st.none(), st.binary(max_size=60)), max_size=40),
    large=st.booleans(),
    start=st.integers(0, 5),
    noise=st.binary(min_size=1, max_size=64),
    where=st.integers(0, 400),
)
def test_random_changes_to_offsets_and_bitmap(
    items: list[bytes | None], large: bool, start: int, noise: bytes, where: int
) -> None:
    # Any bytes written anywhere in the offsets or the bitmap after the column was made:
    # the C column, its twin and the items as they were agree, and so do the record
    # batches the kernel and the Python loop encode from them.
    start = min(start, len(items))
    offsets, data, validity = writable_buffers(items, large=large)
    cols = [impl(offsets, data, validity, start, -1, large) for impl in IMPLS]
    for buf in (offsets, validity):
        if buf:
            at = where % len(buf)
            buf[at : at + len(noise)] = noise[: len(buf) - at]
    expect = items[start:]
    assert list(cols[0]) == list(cols[1]) == expect
    assert cols[0].null_count() == cols[1].null_count() == expect.count(None)
    if expect:
        batch = encode(records_py, expect)
        assert encodings(cols[0]) == encodings(cols[1]) == {batch}
