"""The C kernel (``aiokafka_ng/protocol/_speedups.c``) against its Python twins.

``records.py`` and ``runs.py`` call the kernel where it is built and run their own loops
where it is not; ``_native.load_pure_twin`` loads those modules with the kernel switched
off, so each test here runs the same input through both and compares bytes, results and
errors. ``BinaryColumn`` (an Arrow binary array's buffers read in place) is held to pyarrow's
own view of the same array. On a machine without a C compiler the kernel is absent and these
tests fail (``test_kernel_is_built_where_a_compiler_exists`` says why), as the compiled
twins' tests do.
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng import _native
from aiokafka_ng.producer import runs as runs_c
from aiokafka_ng.protocol import _speedups, speedups
from aiokafka_ng.protocol import records as records_c
from aiokafka_ng.protocol.records import BATCH_OVERHEAD, iter_batches
from tests import sanitizer
from tests.protocol.arrow_columns import arrow_array, column

records_py = _native.load_pure_twin("aiokafka_ng.protocol.records")
runs_py = _native.load_pure_twin("aiokafka_ng.producer.runs")
partitioner_py = _native.load_pure_twin("aiokafka_ng.producer.partitioner")

ROOT = Path(__file__).resolve().parents[2]
_SETTINGS = settings(
    deadline=None, database=None, suppress_health_check=[HealthCheck.too_slow], max_examples=200
)
_ITEM = st.one_of(st.none(), st.binary(max_size=200))
_ITEMS = st.lists(_ITEM, max_size=50)


def test_kernel_is_built_and_the_twins_run_without_it() -> None:
    assert speedups.AVAILABLE and records_c._C_APPEND_RUN is _speedups.append_run
    assert records_py._C_APPEND_RUN is None and records_py._C_APPEND_RECORD is None
    assert runs_py._C_SPLIT_KEYED is None and runs_py._C_RECORD_SIZES is None


def test_setup_py_builds_the_named_extension() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text())
    name, sources = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "C_EXTENSION" for t in node.targets)
    )
    assert name == _native.C_EXTENSION
    assert all((ROOT / source).is_file() for source in sources) and len(sources) == 4
    assert tuple(sources) == sanitizer.SOURCES  # the sanitized build compiles the same files


def test_pure_python_env_switches_the_kernel_off() -> None:
    code = (
        "import aiokafka_ng\n"
        "from aiokafka_ng.protocol import speedups, records\n"
        "from aiokafka_ng import _native\n"
        "print(speedups.AVAILABLE, records._C_APPEND_RUN, aiokafka_ng.__compiled__,"
        " _native.compiled_modules()[_native.C_EXTENSION])\n"
    )
    env = {**os.environ, "AIOKAFKA_NG_PURE_PYTHON": "1"}
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True
    )
    assert out.stdout.split() == ["False", "None", "False", "False"]


# ------------------------------------------------------------------------- BinaryColumn


@_SETTINGS
@given(items=_ITEMS, large=st.booleans(), pad=st.integers(0, 5))
def test_column_reads_what_arrow_holds(items: list[bytes | None], large: bool, pad: int) -> None:
    col = column(items, large=large, pad=pad)
    assert len(col) == len(items)
    assert list(col) == items == [col[i] for i in range(len(items))]
    assert col.nbytes() == sum(len(x or b"") for x in items)
    assert col.null_count() == items.count(None)
    if items:
        assert col[-1] == items[-1]
    for lo, hi in ((0, len(items)), (1, len(items) - 1), (len(items) // 2, len(items))):
        view = col[lo:hi]
        assert list(view) == items[lo:hi] and len(view) == len(items[lo:hi])
    picks = [i for i in range(len(items)) if i % 3 != 1][::-1]
    taken = col.take(picks)
    assert list(taken) == [items[i] for i in picks]
    assert list(taken[1:]) == [items[i] for i in picks][1:]


def test_column_refuses_bad_indexes_and_steps() -> None:
    col = column([b"a", None, b"bc"])
    with pytest.raises(IndexError):
        col[3]
    with pytest.raises(IndexError):
        col.take([0, 3])
    with pytest.raises(ValueError, match="no step"):
        col[::2]
    assert repr(col) == "BinaryColumn(3 items)"


def _offsets(*values: int) -> bytes:
    return b"".join(v.to_bytes(4, "little", signed=True) for v in values)


@pytest.mark.parametrize(
    ("offsets", "data", "validity", "offset", "length", "message"),
    [
        (_offsets(0, 5, 3), b"abcde", None, 0, -1, "offsets decrease"),
        (_offsets(0, 2, 9), b"abcde", None, 0, -1, "outside the data"),
        (_offsets(-1, 2), b"abcde", None, 0, -1, "outside the data"),
        (_offsets(0, 2), b"abcde", None, 2, -1, "outside"),
        (_offsets(0, 2), b"abcde", None, 0, 2, "need 3 offsets"),
        (_offsets(0, 1, 2, 3, 4, 5, 5, 5, 5, 5), b"abcde", b"\xff", 0, -1, "bitmap too short"),
        (b"", b"", None, 0, -1, "outside 0 offsets"),
    ],
)
def test_column_checks_its_buffers_once(
    offsets: bytes, data: bytes, validity: bytes | None, offset: int, length: int, message: str
) -> None:
    # Malformed buffers are refused when the column is made, so nothing read later can
    # stray outside them.
    with pytest.raises(ValueError, match=message):
        _speedups.BinaryColumn(offsets, data, validity, offset, length)


def test_column_keeps_its_buffers_alive() -> None:
    arr = arrow_array([b"x" * 50, None, b"y"])
    validity, offsets, data = arr.buffers()
    col = _speedups.BinaryColumn(offsets, data, validity, 0, 3)
    del arr, validity, offsets, data
    assert list(col[0:3]) == [b"x" * 50, None, b"y"]


# ----------------------------------------------------------------------- record batches


def _run(
    mod: Any,
    keys: Any,
    values: Any,
    start: int,
    stop: int,
    max_size: int,
    headers: list[tuple[str, bytes | None]] | None = None,
    first: bool = True,
) -> Any:
    builder = mod.RecordBatchBuilder(max_size=max_size)
    if first:
        builder.append(1_000, b"first", b"record", [("h", b"v")])
    if headers is None:
        stopped = builder.append_run(1_007, keys, values, start, stop)
    else:
        stopped = builder.append_run(1_007, keys, values, start, stop, headers)
    data = builder.build() if builder.record_count else None
    return stopped, builder.record_count, builder.is_full, data


# A run's constant header set: none, empty, a trace context, and odd ones (a null value,
# a long value whose lengths take two varint bytes, a non-ASCII key).
_RUN_HEADERS = st.one_of(
    st.none(),
    st.just([]),
    st.just([("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]),
    st.lists(
        st.tuples(st.text(max_size=10), st.one_of(st.none(), st.binary(max_size=200))),
        max_size=4,
    ),
)


@_SETTINGS
@given(
    rows=st.lists(st.tuples(_ITEM, _ITEM), min_size=1, max_size=60),
    keyed=st.booleans(),
    form=st.sampled_from(["list", "column", "mixed"]),
    bounds=st.tuples(st.integers(0, 60), st.integers(0, 60)),
    max_size=st.integers(BATCH_OVERHEAD, 5000),
    headers=_RUN_HEADERS,
    first=st.booleans(),
)
def test_append_run_writes_what_the_python_loop_writes(
    rows: list[tuple[bytes | None, bytes | None]],
    keyed: bool,
    form: str,
    bounds: tuple[int, int],
    max_size: int,
    headers: list[tuple[str, bytes | None]] | None,
    first: bool,
) -> None:
    keys = [k for k, _ in rows] if keyed else None
    values = [v for _, v in rows]
    start, stop = min(bounds[0], len(rows)), min(bounds[1], len(rows))
    expected = _run(records_py, keys, values, start, stop, max_size, headers, first)
    c_values = values if form == "list" else column(values, pad=2)
    c_keys = keys if keys is None or form != "column" else column(keys, large=True)
    assert _run(records_c, c_keys, c_values, start, stop, max_size, headers, first) == expected


def test_a_runs_headers_are_on_every_record_it_wrote() -> None:
    headers = [("traceparent", b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01")]
    values: list[bytes | None] = [b"v%d" % i for i in range(40)]
    stopped, count, full, data = _run(records_c, None, column(values), 0, 40, 1000, headers)
    assert full and 1 < stopped < 40 and count == stopped + 1
    (batch,) = iter_batches(data)
    got = [(r.value, list(r.headers)) for r in batch.records()]
    assert got == [(b"record", [("h", b"v")])] + [(v, headers) for v in values[:stopped]]


def test_append_run_checks_its_header_bytes() -> None:
    buf = bytearray(BATCH_OVERHEAD)
    for bad in ("\x00", b"", None):
        with pytest.raises(TypeError, match="headers_enc must be non-empty bytes"):
            _speedups.append_run(buf, 1 << 20, b"\x00", 1, None, [b"v"], 0, 1, bad)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="takes 9 arguments"):
        _speedups.append_run(buf, 1 << 20, b"\x00", 1, None, [b"v"], 0, 1)  # type: ignore[call-arg]
    assert bytes(buf) == bytes(BATCH_OVERHEAD)


@_SETTINGS
@given(
    rows=st.lists(
        st.tuples(st.one_of(st.none(), st.binary(max_size=20)), _ITEM, st.integers(0, 2**33)),
        min_size=1,
        max_size=30,
    ),
    max_size=st.integers(BATCH_OVERHEAD, 3000),
)
def test_append_record_writes_what_python_writes(
    rows: list[tuple[bytes | None, bytes | None, int]], max_size: int
) -> None:
    def build(mod: Any) -> tuple[list[int | None], bytes]:
        builder = mod.RecordBatchBuilder(max_size=max_size)
        deltas = [builder.append(ts, k, v) for k, v, ts in rows]
        return deltas, builder.build()

    assert build(records_c) == build(records_py)


def test_the_kernel_refuses_what_is_not_bytes_and_writes_nothing() -> None:
    builder = records_c.RecordBatchBuilder(max_size=10_000)
    builder.append(0, b"k", b"v")
    before = bytes(builder._buf)
    with pytest.raises(TypeError, match="value must be bytes or None, not str"):
        builder.append_run(0, None, [b"ok", "text"], 0, 2)  # type: ignore[list-item]
    with pytest.raises(TypeError):
        builder.append(0, None, "text")  # type: ignore[arg-type]
    assert bytes(builder._buf) == before and builder.record_count == 1
    with pytest.raises(TypeError, match="list or a BinaryColumn"):
        builder.append_run(0, None, (b"a", b"b"), 0, 2)
    # A batch whose buffer is exported cannot grow: an error, not a write past its end.
    view = memoryview(builder._buf)
    with pytest.raises(BufferError):
        builder.append_run(0, None, [b"x" * 100], 0, 1)
    view.release()
    assert bytes(builder._buf) == before


def test_a_run_past_the_varint_table_and_its_offsets() -> None:
    # 20,000 records: offset deltas past the Python twin's table of 16,384 encodings, and
    # values long enough that lengths take three varint bytes.
    values: list[bytes | None] = [b"v" * (i % 300) for i in range(20_000)]
    values[5] = b"w" * 20_000
    expected = _run(records_py, None, values, 0, 20_000, 1 << 24)
    assert _run(records_c, None, column(values, large=True), 0, 20_000, 1 << 24) == expected
    (batch,) = iter_batches(expected[3])
    assert [r.value for r in batch.records()] == [b"record", *values]


# ----------------------------------------------------------------------------- runs


@_SETTINGS
@given(
    rows=st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=30)), _ITEM), max_size=60),
    partitions=st.integers(1, 40),
    with_positions=st.booleans(),
    form=st.sampled_from(["list", "column"]),
)
def test_split_keyed_run_groups_as_the_python_loop_does(
    rows: list[tuple[bytes | None, bytes | None]],
    partitions: int,
    with_positions: bool,
    form: str,
) -> None:
    keys = [k for k, _ in rows]
    values = [v for _, v in rows]
    sizes = [100 + i for i in range(len(rows))]
    positions = [7 * i for i in range(len(rows))] if with_positions else None
    expected = runs_py.split_keyed_run(keys, values, sizes, partitions, positions)
    c_keys, c_values = (keys, values) if form == "list" else (column(keys), column(values))
    got = runs_c.split_keyed_run(c_keys, c_values, sizes, partitions, positions)
    assert list(got) == list(expected)  # partitions, in the same order
    for p, group in got.items():
        ref = expected[p]
        assert (group.index, group.positions, group.sizes) == (ref.index, ref.positions, ref.sizes)
        assert (list(group.keys), list(group.values)) == (ref.keys, ref.values)


@_SETTINGS
@given(rows=st.lists(st.tuples(_ITEM, _ITEM), max_size=40), keyed=st.booleans())
def test_record_sizes_of_a_column_as_of_a_list(
    rows: list[tuple[bytes | None, bytes | None]], keyed: bool
) -> None:
    values = [v for v, _ in rows]
    keys = [k for _, k in rows] if keyed else None
    expected = runs_py.record_sizes(values, keys, 70)
    assert runs_c.record_sizes(column(values), None if keys is None else column(keys), 70) == (
        expected
    )


@given(st.binary(max_size=300))
def test_murmur2_as_the_java_client_computes_it(key: bytes) -> None:
    assert _speedups.murmur2(key) == partitioner_py.murmur2(key)


def test_murmur2_known_answers() -> None:
    # Kafka's UtilsTest.
    assert [_speedups.murmur2(k) for k in (b"21", b"foobar", b"abc")] == [
        -973932308,
        -790332482,
        479470107,
    ]


def test_a_column_from_a_spark_string_cast_reads_its_utf8_bytes() -> None:
    arr = pa.array(["é", None, "ab"]).cast(pa.binary())
    validity, offsets, data = arr.buffers()
    col = _speedups.BinaryColumn(offsets, data, validity, arr.offset, len(arr))
    assert list(col) == ["é".encode(), None, b"ab"]


def test_a_mypyc_failure_falls_back_to_pure_python(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # mypyc ends a run that finds a type error with SystemExit, not an Exception: the build
    # must still fall back to the pure-Python package (no extension at all), not fail.
    import types

    tree = ast.parse((ROOT / "setup.py").read_text())
    tree.body = [n for n in tree.body if not (isinstance(n, ast.Expr) and "setup" in ast.dump(n))]
    namespace: dict[str, Any] = {"__file__": str(ROOT / "setup.py")}
    exec(compile(tree, "setup.py", "exec"), namespace)
    fake = types.ModuleType("mypyc.build")

    def mypycify(*args: Any, **kwargs: Any) -> Any:
        raise SystemExit(1)

    fake.mypycify = mypycify  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "mypyc.build", fake)
    monkeypatch.delenv("AIOKAFKA_NG_PURE_PYTHON", raising=False)
    assert namespace["_mypyc_extensions"]() is None  # build_ext then builds nothing
    assert "pure-Python build" in capsys.readouterr().err
    # ... and the reason goes into the package, for build_info() at run time.
    assert "mypyc could not compile the hot modules (SystemExit(1))" in namespace["_pure_reason"]
