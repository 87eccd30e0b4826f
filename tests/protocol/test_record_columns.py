"""``RecordColumns`` (records into column buffers) against the reference decoder
(``RecordBatch.consumer_records``) and against its own pure-Python twin.

Fed the same hypothesis-generated batches as the compiled-twin tests (every codec, headers,
control and transactional batches, legacy magic 0/1), their fuzz mutations and random
bytes: the columns must hold exactly the records the reference decoder returns for the
offset window, and a malformed batch must fail with the reference's ``ProtocolError``
message. The compiled and pure modules must agree on everything, errors included.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng import _native
from aiokafka_ng.protocol import record_columns as columns_compiled
from aiokafka_ng.protocol import record_reader as reader
from aiokafka_ng.protocol.errors import ProtocolError
from tests.fuzz.fuzz_budget import budget, mutate
from tests.protocol.test_compiled_twins import _blob

columns_pure = _native.load_pure_twin("aiokafka_ng.protocol.record_columns")

_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_WINDOW = st.tuples(st.integers(-1, 2**41), st.integers(0, 2**42))


def _snapshot(cols: Any) -> tuple[Any, ...]:
    """The records the columns hold, per record (the runs expanded)."""
    return (
        cols.count, cols.offsets(), cols.timestamps(), cols.timestamp_types(), bytes(cols.keys),
        cols.key_ends(), bytes(cols.key_valid), cols.key_nulls, bytes(cols.values),
        cols.value_ends(), bytes(cols.value_valid), cols.value_nulls, cols.headers,
    )  # fmt: skip


def _raw(cols: Any) -> tuple[Any, ...]:
    """Every field as stored: the compiled and pure twins must agree on it exactly."""
    return (
        cols.count, cols.offset_runs, cols.next_offset, cols.batch_runs, list(cols.ts_deltas),
        bytes(cols.keys), list(cols.key_offsets), bytes(cols.key_valid), cols.key_nulls,
        bytes(cols.values), list(cols.value_offsets), bytes(cols.value_valid), cols.value_nulls,
        cols.headers,
    )  # fmt: skip


def _columns(
    mod: ModuleType,
    buf: bytes,
    low: int,
    high: int,
    view: Any = _snapshot,
    with_headers: bool = True,
) -> Any:
    cols = mod.RecordColumns(with_headers=with_headers)
    try:
        for batch in reader.iter_batches(buf, verify_crc=False):
            if not batch.is_control:
                cols.add_batch(batch, low, high)
    except ProtocolError as exc:
        return ("error", str(exc), view(cols))
    return ("ok", view(cols))


def _expected(buf: bytes, low: int, high: int) -> Any:
    """The same columns built from the reference decoder's records."""
    cols = columns_pure.RecordColumns(with_headers=True)
    try:
        for batch in reader.iter_batches(buf, verify_crc=False):
            if batch.is_control:
                continue
            for r in batch.consumer_records("t", 0):
                if low <= r.offset < high:
                    cols._append(r.offset, r.timestamp, r.timestamp_type, r.key, r.value, r.headers)
    except ProtocolError as exc:
        return ("error", str(exc))
    return ("ok", _snapshot(cols))


def _check(buf: bytes, low: int, high: int) -> None:
    # Headers kept: the compiled loop; not kept: the C kernel's decoder where it is built
    # (it hands anything not plainly well formed back to the loop). The pure twin runs its
    # own loop both ways.
    for keep in (True, False):
        assert _columns(columns_compiled, buf, low, high, _raw, keep) == _columns(
            columns_pure, buf, low, high, _raw, keep
        )
    ours = _columns(columns_compiled, buf, low, high)
    expected = _expected(buf, low, high)
    if expected[0] == "ok":
        assert ours == expected
    else:
        assert ours[:2] == expected  # the same error (what was added before it may differ)


@settings(_SETTINGS, max_examples=budget(150, 5000))
@given(st.data(), _WINDOW)
def test_columns_hold_the_reference_records(data: st.DataObject, window: tuple[int, int]) -> None:
    _check(_blob(data), *window)


@settings(_SETTINGS, max_examples=budget(150, 5000))
@given(st.data())
def test_whole_window_keeps_every_record(data: st.DataObject) -> None:
    buf = _blob(data)
    expected = _expected(buf, 0, 2**63)
    assert _columns(columns_compiled, buf, 0, 2**63) == expected
    if expected[0] == "ok":
        n = expected[1][0]
        assert len(expected[1][1]) == n  # one offset per record


@settings(_SETTINGS, max_examples=budget(300, 12_000))
@given(st.data(), _WINDOW)
def test_columns_fail_like_the_reference_on_mutated_batches(
    data: st.DataObject, window: tuple[int, int]
) -> None:
    _check(bytes(mutate(data, bytearray(_blob(data)))), *window)


@settings(_SETTINGS, max_examples=budget(150, 5000))
@given(st.binary(max_size=300), _WINDOW)
def test_columns_on_random_bytes(buf: bytes, window: tuple[int, int]) -> None:
    _check(buf, *window)


def test_nulls_and_layout() -> None:
    from aiokafka_ng.protocol.records import RecordBatchBuilder

    b = RecordBatchBuilder(base_offset=10, max_size=1 << 20)
    b.append(1000, None, b"aa", [("h", None)])
    b.append(1001, b"k", None)
    b.append(1002, b"", b"ccc")
    (batch,) = reader.iter_batches(b.build())
    cols = columns_compiled.RecordColumns()
    cols.add_batch(batch, 11, 13)
    assert (cols.count, cols.offsets(), cols.timestamps()) == (2, [11, 12], [1001, 1002])
    runs = (cols.offset_runs, cols.batch_runs, list(cols.ts_deltas))
    assert runs == ([0, 11], [0, 1000, 0], [1, 2])
    assert (bytes(cols.keys), cols.key_ends(), bytes(cols.key_valid)) == (
        b"k",
        [1, 1],
        b"\x01\x01",
    )
    assert (bytes(cols.values), cols.value_ends(), bytes(cols.value_valid)) == (
        b"ccc",
        [0, 3],
        b"\x00\x01",
    )
    assert (cols.key_nulls, cols.value_nulls, cols.headers) == (0, 1, [])  # no headers kept


def test_the_c_decoder_takes_well_formed_batches(monkeypatch: Any) -> None:
    # Well-formed batches, headers included (checked and skipped), are decoded by the C
    # kernel, not handed back to the loop; what it stores is what the loop stores.
    from aiokafka_ng.protocol.records import RecordBatchBuilder

    real = columns_compiled._C_DECODE_COLUMNS
    assert real is not None and columns_pure._C_DECODE_COLUMNS is None
    taken: list[bool] = []

    def spy(*args: Any) -> Any:
        result = real(*args)
        taken.append(result is not None)
        return result

    monkeypatch.setattr(columns_compiled, "_C_DECODE_COLUMNS", spy)
    blobs = []
    for base, n in ((0, 300), (300, 5), (900, 40)):
        b = RecordBatchBuilder(base_offset=base, max_size=1 << 22)
        for i in range(n):
            key = None if i % 7 == 0 else b"k%d" % i
            value = None if i % 5 == 0 else b"v" * (i * 61 % 400)
            headers = [("h\u00e9", b"x"), ("n", None)] if i % 3 == 0 else ()
            b.append(10_000 + i * 300, key, value, headers)
        blobs.append(b.build())
    buf = b"".join(blobs)
    for window in ((0, 2**63), (150, 302), (-(2**70), 2**70), (2**70, 2**71), (5, 5)):
        assert _columns(columns_compiled, buf, *window, _raw, False) == _columns(
            columns_pure, buf, *window, _raw, False
        )
    assert taken and all(taken)


def test_a_count_the_bytes_cannot_hold_fails_like_the_reference() -> None:
    # A batch header claiming 2**31 - 1 records: the reference's error, nothing allocated
    # for the claim (the C decoder hands such a batch back to the loop).
    import struct

    from aiokafka_ng.protocol.records import RecordBatchBuilder

    b = RecordBatchBuilder(max_size=1 << 20)
    b.append(0, b"k", b"v")
    buf = bytearray(b.build())
    struct.pack_into(">i", buf, 57, 2**31 - 1)  # recordCount (CRC not checked here)
    for keep in (True, False):
        ours = _columns(columns_compiled, bytes(buf), 0, 10, _raw, keep)
        assert ours == _columns(columns_pure, bytes(buf), 0, 10, _raw, keep)
        assert ours[0] == "error" and "malformed record" in ours[1]
