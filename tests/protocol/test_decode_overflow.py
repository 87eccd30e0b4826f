"""The decode side's compiled entry points against their pure twins at the int64 edges.

Issue 34: a CRC-valid batch with a key length >= 2**63 made the mypyc reader raise
``ValueError('int too large to convert to i64')`` (it slices with int64 indices) where the
pure reader raised ProtocolError, and the consumer then lost the good records before it.
Here every decoder -- ``record_reader`` (records, consumer_records), ``RecordColumns`` with
headers (the compiled loop) and without (the C kernel's ``decode_columns``), and the C
``record_sizes`` -- is fed varints at and past the int64 range (lengths, deltas, header
counts, timestamps), offsets at 2**63-1, huge record counts, buffers passed twice (aliases)
and mutations of all of these; compiled and pure must give the same records or the same
error, and the only error a decoder may raise is ProtocolError.
"""

from __future__ import annotations

from array import array
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.producer import runs as runs_compiled
from aiokafka_ng.protocol import record_columns as columns_compiled
from aiokafka_ng.protocol import record_reader as reader_compiled
from aiokafka_ng.protocol import speedups
from tests.fuzz.fuzz_budget import INPUTS, budget, mutate
from tests.protocol.malformed import HUGE, INT64_MAX, OVERFLOW_RECORDS, batch, record, varint
from tests.protocol.test_compiled_twins import _decode, reader_pure, runs_pure
from tests.protocol.test_record_columns import _columns, _raw, columns_pure

_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_WINDOWS = ((0, 2**70), (-(2**70), 2**70), (INT64_MAX - 1, 2**64), (0, 1), (5, 5))


def _agree(buf: bytes) -> Any:
    """Every decoder of ``buf``, compiled against pure (CRC checked and not); the outcome."""
    INPUTS["int64-edge batches"] += 1
    for verify in (True, False):
        ours = _decode(reader_compiled, buf, verify)
        assert ours == _decode(reader_pure, buf, verify)
    for low, high in _WINDOWS:
        for keep in (True, False):
            assert _columns(columns_compiled, buf, low, high, _raw, keep) == _columns(
                columns_pure, buf, low, high, _raw, keep
            )
    return ours


@pytest.mark.parametrize("case", sorted(OVERFLOW_RECORDS))
@pytest.mark.parametrize("base", [0, INT64_MAX - 1, INT64_MAX])
@pytest.mark.parametrize("before", [0, 2])
def test_int64_edges_decode_alike(case: str, base: int, before: int) -> None:
    # ``before`` good records first: what they decoded to must not change the error.
    region = b"".join(record(b"k%d" % i, offset_delta=i) for i in range(before))
    bad = OVERFLOW_RECORDS[case]
    buf = batch(base, region + bad, before + 1)
    _agree(buf)


def test_the_issue_34_batch_is_a_protocol_error() -> None:
    # The batch of the report: a key length of 2**63-1 (no ValueError, compiled or pure).
    buf = batch(5, record(b"k", key_len=INT64_MAX), 1)
    out = _agree(buf)
    assert out[-1] == ("error", "ProtocolError", f"bad key length {INT64_MAX}")


@pytest.mark.parametrize("base", [INT64_MAX - 2, INT64_MAX - 1, INT64_MAX])
def test_offsets_up_to_int64_max(base: int) -> None:
    # Records whose offsets reach 2**63-1 (the C decoder's next offset would be 2**63: it
    # hands the batch to the Python loop), and past it (Python ints, alike in both twins).
    n = 3
    region = b"".join(record(b"k", offset_delta=i) for i in range(n))
    out = _agree(batch(base, region, n))
    offsets = [r[0] for r in out[1]]
    assert offsets == [base + i for i in range(n)]


@pytest.mark.parametrize("count", [2**31 - 1, -1, -(2**31), 2, 1000])
def test_counts_the_bytes_cannot_hold(count: int) -> None:
    region = record(b"a") + record(b"b")
    out = _agree(batch(0, region, count))
    failed = isinstance(out[-1], tuple) and out[-1][0] == "error"
    assert failed == (count != 2)


def test_timestamp_extremes_decode_alike() -> None:
    # A base timestamp at either end of int64 plus a delta at either end.
    for base_ts in (INT64_MAX, -HUGE):
        for delta in (INT64_MAX, -HUGE, 1, -1):
            _agree(batch(0, record(ts_delta=delta), 1, base_timestamp=base_ts))


# --------------------------------------------------------------------------- aliasing


def _aliased(mod: Any, buf: bytes, alias: tuple[str, str]) -> Any:
    cols = mod.RecordColumns()
    setattr(cols, alias[1], getattr(cols, alias[0]))
    try:
        for b in reader_compiled.iter_batches(buf):
            cols.add_batch(b, 0, 2**63)
    except Exception as exc:  # compared, whatever it is
        return ("error", type(exc).__name__, str(exc), _raw(cols))
    return ("ok", _raw(cols))


@pytest.mark.parametrize(
    "alias",
    [
        ("keys", "values"),
        ("key_valid", "value_valid"),
        ("keys", "key_valid"),
        ("values", "key_valid"),
        ("key_offsets", "value_offsets"),
    ],
)
def test_one_buffer_passed_twice(alias: tuple[str, str]) -> None:
    # Issue 34 finding 3: keys and values one bytearray -- growing one for the other moved
    # the memory the first write pointer pointed into (ASan: heap-use-after-free). The C
    # decoder now hands such buffers to the Python loop: compiled == pure, byte for byte.
    region = b"".join(record(b"key%d" % i, b"value%d" % i * 40, offset_delta=i) for i in range(50))
    buf = batch(0, region, 50) * 2
    assert _aliased(columns_compiled, buf, alias) == _aliased(columns_pure, buf, alias)


def test_the_input_as_an_output_buffer() -> None:
    # decode_columns given the batch bytes as its own key buffer (a bytearray) or an
    # exported key buffer: it declines (None), writing nothing; the Python loop decides.
    decode = speedups.KERNEL.decode_columns
    assert decode is not None  # the C kernel is built wherever a compiler is (as in CI)
    region = record(b"k", b"v")
    keys = bytearray(region)
    buffers = (
        keys, bytearray(), bytearray(), bytearray(),
        array("i", [0]), array("i", [0]), array("q"),
    )  # fmt: skip
    args = (0, len(region), 1, 0, False, 0, 10, 0, -1, [])
    assert decode(keys, *args, buffers) is None
    assert bytes(keys) == region
    held = memoryview(buffers[1])
    assert decode(bytes(region), *args, (bytearray(), *buffers[1:])) is None
    held.release()
    fresh = (bytearray(), bytearray(), bytearray(), bytearray(), *buffers[4:])
    assert decode(bytes(region), *args, fresh) == (1, 1, 0, 0)


def test_exported_buffer_fails_alike() -> None:
    # A view held on the key buffer: resizing it raises BufferError, compiled or pure.
    buf = batch(0, record(b"k", b"v"), 1)
    outcomes = []
    for mod in (columns_compiled, columns_pure):
        cols = mod.RecordColumns()
        view = memoryview(cols.keys)
        with pytest.raises(BufferError):
            for b in reader_compiled.iter_batches(buf):
                cols.add_batch(b, 0, 10)
        view.release()
        outcomes.append(_raw(cols))
    assert outcomes[0] == outcomes[1]


# --------------------------------------------------------------------------- record_sizes


@pytest.mark.parametrize(
    "overhead", [INT64_MAX, INT64_MAX - 3, -HUGE, HUGE, 2**64, -(2**70), 1.5, True, 0]
)
def test_record_sizes_at_int64_edges(overhead: Any) -> None:
    # Issue 34 finding 6: overhead + len overflowed int64 in C (signed overflow, UB).
    # The C function itself (mypyc's runs.record_sizes refuses a non-int before calling it).
    c_sizes = speedups.KERNEL.record_sizes
    assert c_sizes is not None
    values = [b"abcd", None, b"", b"x" * 10]
    keys = [None, b"kk", b"k", b""]
    for ks in (None, keys):
        expected = runs_pure.record_sizes(values, ks, overhead)
        got = c_sizes(values, ks, overhead)
        assert got == expected and [type(x) for x in got] == [type(x) for x in expected]
        if isinstance(overhead, int):
            assert runs_compiled.record_sizes(values, ks, overhead) == expected


def test_record_sizes_with_an_overhead_that_does_not_add() -> None:
    for values, keys in (([b"a"], None), ([None], None), ([b"a"], [b"b"]), ([b"a"], [1])):
        outcomes = []
        for fn in (speedups.KERNEL.record_sizes, runs_pure.record_sizes):
            assert fn is not None
            try:
                outcomes.append(("ok", fn(values, keys, "x")))
            except TypeError as exc:
                outcomes.append(("error", type(exc)))
        assert outcomes[0] == outcomes[1]


# --------------------------------------------------------------------------- fuzz

_EDGE = st.sampled_from([0, 1, -1, 6, 2**31, INT64_MAX, -HUGE, HUGE, 2**64, -(2**64)])
_FIELD = st.one_of(_EDGE, st.integers(-3, 40))


@st.composite
def _edge_records(draw: st.DrawFn) -> tuple[bytes, int]:
    """Records whose declared numbers are drawn from the int64 edges, or plain; and how
    many there are."""
    parts = []
    for _ in range(draw(st.integers(1, 4))):
        if draw(st.booleans()):
            parts.append(record(b"k", b"v" * draw(st.integers(0, 5))))
            continue
        one_header = varint(1) + varint(1) + b"h" + varint(draw(_FIELD))
        headers = draw(st.sampled_from([b"\x00", one_header, varint(draw(_FIELD))]))
        maybe = st.one_of(st.none(), _FIELD)
        parts.append(
            record(
                draw(st.one_of(st.none(), st.binary(max_size=4))),
                draw(st.one_of(st.none(), st.binary(max_size=4))),
                ts_delta=draw(_FIELD),
                offset_delta=draw(_FIELD),
                key_len=draw(maybe),
                value_len=draw(maybe),
                headers=headers,
                length=draw(maybe),
            )
        )
    return b"".join(parts), len(parts)


@settings(_SETTINGS, max_examples=budget(200, 20_000))
@given(
    _edge_records(),
    st.sampled_from([0, 5, INT64_MAX - 3, INT64_MAX]),
    st.one_of(st.none(), st.sampled_from([-1, 0, 1, 2**31 - 1])),
    st.data(),
)
def test_edge_batches_decode_alike(
    records: tuple[bytes, int], base: int, count: int | None, data: st.DataObject
) -> None:
    region, n = records
    buf = batch(base, region, n if count is None else count)
    _agree(buf)
    if data.draw(st.booleans(), label="mutate"):
        _agree(bytes(mutate(data, bytearray(buf))))
