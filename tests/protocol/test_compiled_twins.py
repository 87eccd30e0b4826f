"""The compiled hot modules against their pure-Python twins, side by side in one process.

``setup.py`` compiles ``aiokafka_ng._native.COMPILED_MODULES`` with mypyc; the normal import
gets the compiled module, :func:`~aiokafka_ng._native.load_pure_twin` executes the same
``.py`` file as a separate module. Both are fed the same hypothesis-generated input - every
codec, headers, control and transactional batches, legacy magic 0/1 messages, and the fuzz
tests' mutations of all of these - and must agree byte for byte (encodings), value for value
(decoded records, partitions, consumer records) and error for error (the same
``ProtocolError`` class and message). On a pure-Python install both sides are the ``.py``
file and the comparison is trivially true; ``test_compiled_where_a_compiler_exists`` makes
sure that a machine able to compile did.
"""

from __future__ import annotations

import ast
import importlib
import itertools
import random
import re
import shutil
import struct
import sysconfig
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import aiokafka_ng
from aiokafka_ng import _native
from aiokafka_ng.consumer import buffer as buffer_compiled
from aiokafka_ng.consumer.models import TopicPartition
from aiokafka_ng.consumer.state import PartitionState
from aiokafka_ng.producer import partitioner as partitioner_compiled
from aiokafka_ng.producer import runs as runs_compiled
from aiokafka_ng.protocol import record_reader as reader_compiled
from aiokafka_ng.protocol import records as records_compiled
from aiokafka_ng.protocol import speedups
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.errors import ProtocolError
from tests.consumer.test_buffer_property import build_log, steps
from tests.fuzz.fuzz_budget import budget, mutate
from tests.fuzz.test_fuzz_records import _batch, _legacy

records_pure = _native.load_pure_twin("aiokafka_ng.protocol.records")
reader_pure = _native.load_pure_twin("aiokafka_ng.protocol.record_reader")
partitioner_pure = _native.load_pure_twin("aiokafka_ng.producer.partitioner")
runs_pure = _native.load_pure_twin("aiokafka_ng.producer.runs")
buffer_pure = _native.load_pure_twin("aiokafka_ng.consumer.buffer")

ROOT = Path(__file__).resolve().parents[2]
_SETTINGS = settings(
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
_BYTES = st.one_of(st.none(), st.binary(max_size=300))
_HEADERS = st.lists(st.tuples(st.text(max_size=8), _BYTES), max_size=3)
_RECORDS = st.lists(
    st.tuples(st.integers(-(2**40), 2**41), _BYTES, _BYTES, _HEADERS), min_size=1, max_size=12
)
# gzip and zstd frames are deterministic here, but compare decoded records for every codec
# and bytes only where the codec's output does not depend on the library's mood.
_CODECS = list(Compression)


def test_twins_are_distinct_modules() -> None:
    assert records_pure is not records_compiled
    assert records_pure.__file__ is not None and records_pure.__file__.endswith(".py")
    assert records_pure.RecordBatchBuilder is not records_compiled.RecordBatchBuilder
    assert reader_pure.ConsumerRecord is not reader_compiled.ConsumerRecord


def test_compiled_where_a_compiler_exists() -> None:
    """A machine with a C compiler and Python's headers installs the compiled build (a
    silent fall-back to pure Python would make every comparison here trivially true)."""
    headers = Path(sysconfig.get_paths()["include"], "Python.h").exists()
    compiler = shutil.which("cc") or shutil.which("gcc")
    if _native.pure_python_requested() or not (headers and compiler):
        assert not aiokafka_ng.__compiled__ or not _native.pure_python_requested()
        return
    assert aiokafka_ng.__compiled__, _native.compiled_modules()


def test_setup_py_compiles_exactly_the_listed_modules() -> None:
    tree = ast.parse((ROOT / "setup.py").read_text())
    listed = next(
        ast.literal_eval(node.value)
        for node in tree.body
        if isinstance(node, ast.Assign)
        and any(isinstance(t, ast.Name) and t.id == "COMPILED_MODULES" for t in node.targets)
    )
    assert tuple(listed) == _native.COMPILED_MODULES


# --------------------------------------------------------------------------- writing


def _build(mod: ModuleType, codec: Compression, records: list[Any], **kw: Any) -> bytes:
    builder = mod.RecordBatchBuilder(codec, max_size=1 << 20, **kw)
    for ts, key, value, headers in records:
        assert builder.append(ts, key, value, headers) is not None
    return bytes(builder.build())


def _outcome(fn: Callable[[], Any]) -> Any:
    """The value, or the error as (class name, message): the twins must agree on both."""
    try:
        return ("ok", fn())
    except (ProtocolError, ValueError, TypeError, OverflowError, RuntimeError) as exc:
        return ("error", type(exc).__name__, str(exc))


@settings(_SETTINGS, max_examples=budget(150, 5000))
@given(
    codec=st.sampled_from(_CODECS),
    records=_RECORDS,
    base_offset=st.integers(0, 2**40),
    producer=st.tuples(st.integers(-1, 2**40), st.integers(-1, 2**15 - 1)),
    flags=st.tuples(st.booleans(), st.sampled_from([0, 1])),
)
def test_builders_write_identical_bytes(
    codec: Compression,
    records: list[Any],
    base_offset: int,
    producer: tuple[int, int],
    flags: tuple[bool, int],
) -> None:
    kw = {
        "base_offset": base_offset,
        "producer_id": producer[0],
        "producer_epoch": producer[1],
        "is_transactional": flags[0],
        "timestamp_type": flags[1],
    }
    ours = _outcome(lambda: _build(records_compiled, codec, records, **kw))
    pure = _outcome(lambda: _build(records_pure, codec, records, **kw))
    if codec in (Compression.NONE, Compression.LZ4, Compression.SNAPPY) or ours[0] == "error":
        assert ours == pure
    else:
        assert ours[0] == pure[0] == "ok"
    if ours[0] == "ok":
        assert _decode(reader_pure, ours[1], True) == _decode(reader_compiled, pure[1], True)
        for data in (ours[1], pure[1]):
            assert records_compiled.set_producer_state(
                data, 7, 3, 11, is_transactional=True
            ) == records_pure.set_producer_state(data, 7, 3, 11, is_transactional=True)


@settings(_SETTINGS, max_examples=budget(100, 3000))
@given(
    keys=st.one_of(st.none(), st.lists(_BYTES, min_size=40, max_size=40)),
    values=st.lists(_BYTES, min_size=40, max_size=40),
    start=st.integers(0, 40),
    stop=st.integers(0, 40),
    max_size=st.integers(61, 4000),
    ts=st.integers(0, 2**41),
    first=st.booleans(),
    headers=_HEADERS,
)
def test_append_run_identical(
    keys: list[bytes | None] | None,
    values: list[bytes | None],
    start: int,
    stop: int,
    max_size: int,
    ts: int,
    first: bool,
    headers: list[tuple[str, bytes | None]],
) -> None:
    # headers: the constant header set of a run (empty: none), e.g. a bulk call's trace
    # context.
    def run(mod: ModuleType) -> tuple[int, int, bytes | None]:
        builder = mod.RecordBatchBuilder(max_size=max_size)
        if first:
            builder.append(ts - 5, b"k", b"v", [("h", b"x")])
        stopped = builder.append_run(ts, keys, values, start, stop, headers)
        data = builder.build() if builder.record_count else None
        return stopped, builder.record_count, data

    assert run(records_compiled) == run(records_pure)


@given(
    key_len=st.one_of(st.none(), st.integers(0, 1 << 20)),
    value_len=st.one_of(st.none(), st.integers(0, 1 << 20)),
    headers=_HEADERS,
)
def test_size_estimates_identical(
    key_len: int | None, value_len: int | None, headers: list[Any]
) -> None:
    assert records_compiled.estimate_record_size(
        key_len, value_len, headers
    ) == records_pure.estimate_record_size(key_len, value_len, headers)


# --------------------------------------------------------------------------- reading


def _consumer_fields(r: Any) -> tuple[Any, ...]:
    return (
        type(r).__name__, r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key,
        r.value, r.checksum, r.serialized_key_size, r.serialized_value_size, r.headers,
        r.leader_epoch,
    )  # fmt: skip


def _decode(mod: ModuleType, buf: bytes, verify_crc: bool) -> Any:
    """Everything the reader says about ``buf``, as plain values (or where it failed)."""
    out: list[Any] = []
    try:
        for batch in mod.iter_batches(buf, verify_crc=verify_crc):
            header = (
                batch.base_offset, batch.batch_length, batch.partition_leader_epoch,
                batch.magic, batch.crc, batch.attributes, batch.last_offset_delta,
                batch.base_timestamp, batch.max_timestamp, batch.producer_id,
                batch.producer_epoch, batch.base_sequence, batch.record_count,
                batch.next_offset, batch.is_control, batch.is_transactional,
                batch.timestamp_type,
            )  # fmt: skip
            out.append(header)
            out.append(
                [(r.offset, r.timestamp, r.key, r.value, list(r.headers)) for r in batch.records()]
            )
            out.append([_consumer_fields(r) for r in batch.consumer_records("t", 3)])
            marker = batch.control_record()
            out.append(None if marker is None else (marker.version, marker.type))
    except ProtocolError as exc:
        out.append(("error", type(exc).__name__, str(exc)))
    return out


def _blob(data: st.DataObject) -> bytes:
    parts = data.draw(st.lists(st.sampled_from(["v2", "v2", "legacy"]), min_size=1, max_size=3))
    return b"".join(_batch(data) if p == "v2" else _legacy(data) for p in parts)


@settings(_SETTINGS, max_examples=budget(150, 5000))
@given(st.data())
def test_readers_agree_on_valid_batches(data: st.DataObject) -> None:
    buf = _blob(data)
    ours = _decode(reader_compiled, buf, True)
    assert ours == _decode(reader_pure, buf, True)
    assert not (ours and isinstance(ours[-1], tuple) and ours[-1][:1] == ("error",))


@settings(_SETTINGS, max_examples=budget(300, 12_000))
@given(st.data(), st.booleans())
def test_readers_agree_on_mutated_batches(data: st.DataObject, verify_crc: bool) -> None:
    buf = bytes(mutate(data, bytearray(_blob(data))))
    assert _decode(reader_compiled, buf, verify_crc) == _decode(reader_pure, buf, verify_crc)


@settings(_SETTINGS, max_examples=budget(150, 5000))
@given(st.binary(max_size=300), st.booleans())
def test_readers_agree_on_random_bytes(buf: bytes, verify_crc: bool) -> None:
    assert _decode(reader_compiled, buf, verify_crc) == _decode(reader_pure, buf, verify_crc)


def test_readers_agree_on_compressed_legacy_wrappers() -> None:
    # A gzip wrapper (magic 1) around two inner messages with relative offsets.
    import zlib

    def message(offset: int, magic: int, attributes: int, key: bytes | None, value: bytes) -> bytes:
        body = struct.pack(">bb", magic, attributes)
        if magic == 1:
            body += struct.pack(">q", 1_700_000_000_000)
        body += struct.pack(">i", -1) if key is None else struct.pack(">i", len(key)) + key
        body += struct.pack(">i", len(value)) + value
        msg = struct.pack(">I", zlib.crc32(body)) + body
        return struct.pack(">qi", offset, len(msg)) + msg

    inner = message(0, 1, 0, b"a", b"one") + message(1, 1, 0, None, b"two")
    compressor = zlib.compressobj(wbits=31)
    wrapped = compressor.compress(inner) + compressor.flush()
    buf = message(41, 1, 1, None, wrapped)
    ours = _decode(reader_compiled, buf, True)
    assert ours == _decode(reader_pure, buf, True)
    assert [r[0] for r in ours[1]] == [40, 41]


# --------------------------------------------------------------------------- partitioner


@given(st.binary(max_size=600), st.integers(1, 10_000))
def test_murmur2_identical(key: bytes, partitions: int) -> None:
    # The compiled build's murmur2 is the C kernel's, the pure twin's its Python reference.
    assert partitioner_compiled.murmur2(key) == partitioner_pure.murmur2(key)
    assert partitioner_compiled._murmur2_py(key) == partitioner_pure.murmur2(key)
    assert partitioner_compiled.default_partition(
        key, partitions
    ) == partitioner_pure.default_partition(key, partitions)


@given(
    st.lists(st.tuples(st.one_of(st.none(), st.binary(max_size=40)), _BYTES), max_size=60),
    st.integers(1, 64),
)
def test_split_keyed_run_identical(records: list[tuple[bytes | None, Any]], n: int) -> None:
    keys = [k for k, _ in records]
    values = [v for _, v in records]
    sizes = [i * 7 for i in range(len(records))]
    # The reference: each key's default partition (-1 for a null key), run order kept.
    expected: dict[int, list[int]] = {}
    for i, key in enumerate(keys):
        p = -1 if key is None else partitioner_pure.default_partition(key, n)
        expected.setdefault(p, []).append(i)
    positions = [1000 + 3 * i for i in range(len(records))]
    for mod in (runs_compiled, runs_pure):
        groups = mod.split_keyed_run(keys, values, sizes, n)
        assert {p: g.index for p, g in groups.items()} == expected
        for g in groups.values():
            assert g.keys == [keys[i] for i in g.index]
            assert g.values == [values[i] for i in g.index]
            assert g.sizes == [sizes[i] for i in g.index]
            assert g.positions == []  # not asked for
        with_positions = mod.split_keyed_run(keys, values, sizes, n, positions)
        assert with_positions.keys() == expected.keys()
        for p, g in with_positions.items():
            # Positions instead of indexes: the same records, by their places in the run.
            assert g.positions == [positions[i] for i in expected[p]]
            assert g.index == []
            assert g.keys == [keys[i] for i in expected[p]]
            assert g.values == [values[i] for i in expected[p]]


_ITEM = st.one_of(
    st.none(), st.binary(max_size=30), st.binary(max_size=5).map(bytearray), st.integers()
)


@given(st.lists(st.tuples(_ITEM, _ITEM), max_size=30), st.booleans(), st.integers(0, 300))
def test_record_sizes_identical(records: list[tuple[Any, Any]], keyed: bool, overhead: int) -> None:
    values = [v for v, _ in records]
    keys = [k for _, k in records] if keyed else None
    items = values + (keys or [])
    if all(x is None or isinstance(x, bytes) for x in items):
        expected: list[int] | None = [
            overhead + len(v or b"") + (len(keys[i] or b"") if keys is not None else 0)
            for i, v in enumerate(values)
        ]
    else:
        expected = None  # something to convert or refuse first
    for mod in (runs_compiled, runs_pure):
        assert mod.record_sizes(values, keys, overhead) == expected


def test_murmur2_known_values() -> None:
    # Values of org.apache.kafka.common.utils.Utils.murmur2 (Java client's partitioner test).
    for mod in (partitioner_compiled, partitioner_pure):
        for fn in (mod.murmur2, mod._murmur2_py):
            assert fn(b"21") == -973932308
            assert fn(b"foobar") == -790332482
            assert fn(b"a-little-bit-long-string") == -985981536
            assert fn(b"") == 275646681


def test_the_builds_are_compiled_with_the_kernel_or_pure_without_it() -> None:
    """The one switch (``aiokafka_ng._native``): the mypyc modules and the C kernel come
    together or not at all, so the modules' Python code only ever runs interpreted where
    it has a C twin -- and a pure twin binds no kernel at all."""
    assert aiokafka_ng.__compiled__ is speedups.AVAILABLE
    assert all(_native.compiled_modules().values()) or not any(_native.compiled_modules().values())
    for twin in (records_pure, reader_pure, partitioner_pure, runs_pure):
        assert [v for k, v in vars(twin).items() if k.startswith("_C_") and v is not None] == []
    assert partitioner_pure.murmur2 is partitioner_pure._murmur2_py
    assert partitioner_compiled.murmur2 is (
        speedups.KERNEL.murmur2 if speedups.AVAILABLE else partitioner_compiled._murmur2_py
    )


@given(st.integers(0, 2**32), st.lists(st.integers(0, 50), max_size=6), st.integers(1, 50))
def test_sticky_choices_identical(seed: int, available: list[int], partitions: int) -> None:
    ours = partitioner_compiled.StickyPartitioner(random.Random(seed))
    pure = partitioner_pure.StickyPartitioner(random.Random(seed))
    current = 0
    for _ in range(20):
        a = ours.pick(current, partitions, available)
        assert a == pure.pick(current, partitions, available)
        current = a


@given(
    st.integers(0, 2**32),
    st.lists(st.integers(0, 11), max_size=8),
    st.sampled_from(["a", "b", "z"]),
    st.integers(0, 11),
)
def test_rack_aware_sticky_choices_identical(
    seed: int, available: list[int], rack: str, current: int
) -> None:
    # KIP-1123: leaders' racks by partition (None: a leader without a rack).
    racks = ["a", "b", None, "a", "c", "b", None, "a", "b", "c", "a", "b"]
    ours = partitioner_compiled.StickyPartitioner(random.Random(seed), rack=rack)
    pure = partitioner_pure.StickyPartitioner(random.Random(seed), rack=rack)
    for _ in range(10):
        a = ours.pick(current, 12, available, racks.__getitem__)
        assert a == pure.pick(current, 12, available, racks.__getitem__)
        current = a


@given(
    codec=st.sampled_from([Compression.GZIP, Compression.LZ4, Compression.ZSTD]),
    level=st.integers(-2, 23),
    records=_RECORDS,
)
def test_builders_compress_at_the_same_level(
    codec: Compression, level: int, records: list[Any]
) -> None:
    # KIP-390: the level reaches the codec the same way in both (gzip and lz4 are
    # deterministic; zstd too at one level within one process).
    if not records or (codec == Compression.GZIP and level in (-2, 0, 10, 11)):
        return
    if codec == Compression.LZ4 and level < 1:
        return
    ours = _outcome(lambda: _build(records_compiled, codec, records, compression_level=level))
    pure = _outcome(lambda: _build(records_pure, codec, records, compression_level=level))
    assert ours == pure


# --------------------------------------------------------------------------- consumer records


def _drain(mod: ModuleType, plan: Any, read_committed: bool, start: int, chunks: list[int],
           de: Callable[[bytes | None], Any] | None) -> Any:  # fmt: skip
    blob, aborted, _, _ = build_log(plan)
    batches = list(records_compiled.iter_batches(blob))
    state = PartitionState(TopicPartition("t", 3), needs_committed=False)
    state.seek(start)
    listed = [a for a, marker in aborted if marker >= start]
    kept = [b for b in batches if b.next_offset > start]
    # The second half comes as an answer fetched ahead, appended after the first turn.
    half = len(kept) // 2
    released: list[int] = []
    buf = mod.BufferedFetch(
        state, kept[:half], len(blob), listed if read_committed else None, released.append
    )
    ahead = kept[half:]
    out: list[Any] = []
    seen: list[Any] = []
    turn = 0
    try:
        while (ahead or not buf.exhausted) and turn < 1000:
            if turn == 1 or (ahead and buf.exhausted):
                buf.append(ahead, 0, listed if read_committed else None)
                ahead = []
                seen.append(("appended", buf.end_offset))
            n = chunks[turn % len(chunks)]
            if n == 1:
                one = buf.take_one(None, de)
                if one is not None:
                    out.append(one)
            elif n == 7:  # whole batches (the Spark source's columnar path)
                taken, position = buf.take_batches(3)
                seen.append(("batches", [b.base_offset for b in taken], position))
            else:
                buf.take_into(out, n, None, de)
            seen.append(state.position)
            turn += 1
    except Exception as exc:
        seen.append((type(exc).__name__, str(exc), state.position))
    seen.append(("released", released, buf.size))
    return seen, [
        (r.topic, r.partition, r.offset, r.timestamp, r.timestamp_type, r.key, r.value,
         r.checksum, r.serialized_key_size, r.serialized_value_size, list(r.headers),
         r.leader_epoch)
        for r in out
    ]  # fmt: skip


def _picky(value: bytes | None) -> Any:
    if value is not None and value.endswith(b":2") and value.startswith(b"1"):
        raise ValueError(f"refused {value!r}")
    return value


@settings(_SETTINGS, max_examples=budget(150, 3000))
@given(
    plan=steps,
    read_committed=st.booleans(),
    start_fraction=st.floats(0, 1),
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=5),
    de=st.sampled_from([None, _picky]),
)
def test_buffered_fetch_twins_hand_out_the_same_records(
    plan: Any,
    read_committed: bool,
    start_fraction: float,
    chunks: list[int],
    de: Callable[[bytes | None], Any] | None,
) -> None:
    blob, _, _, _ = build_log(plan)
    batches = list(records_compiled.iter_batches(blob))
    start = int((batches[-1].next_offset if batches else 0) * start_fraction)
    ours = _drain(buffer_compiled, plan, read_committed, start, chunks, de)
    assert ours == _drain(buffer_pure, plan, read_committed, start, chunks, de)


@pytest.mark.parametrize("mod", [reader_compiled, reader_pure], ids=["installed", "pure"])
def test_each_twin_rejects_an_overlong_varint(mod: ModuleType) -> None:
    builder = records_compiled.RecordBatchBuilder()
    builder.append(1, b"k", b"v")
    good = bytearray(builder.build())
    # The record's length varint is the first byte of the records region: make it 11
    # continuation bytes long (and skip the CRC).
    bad = bytes(good[:61]) + b"\xff" * 11 + bytes(good[62:])
    bad = bad[:8] + struct.pack(">i", len(bad) - 12) + bad[12:]
    result = _decode(mod, bad, False)
    assert result[-1][0] == "error" and "ProtocolError" in result[-1][1]


@pytest.mark.parametrize("mod", [reader_compiled, reader_pure], ids=["installed", "pure"])
def test_record_classes_behave_like_the_dataclasses_they_replaced(mod: ModuleType) -> None:
    import copy
    import pickle

    rec = mod.ConsumerRecord("t", 3, 7, 1000, 0, b"k", b"v", None, 1, 1, (("h", b"x"),), 5)
    assert mod.ConsumerRecord[bytes, bytes] is not None  # generic, as before
    assert rec == mod.ConsumerRecord("t", 3, 7, 1000, 0, b"k", b"v", None, 1, 1, (("h", b"x"),), 5)
    assert rec != mod.ConsumerRecord("t", 3, 8, 1000, 0, b"k", b"v", None, 1, 1, (), 5)
    assert repr(rec) == (
        "ConsumerRecord(topic='t', partition=3, offset=7, timestamp=1000, timestamp_type=0, "
        "key=b'k', value=b'v', checksum=None, serialized_key_size=1, serialized_value_size=1, "
        "headers=(('h', b'x'),), leader_epoch=5)"
    )
    if mod is reader_compiled:  # the pure twin's module name is not importable by pickle
        assert pickle.loads(pickle.dumps(rec)) == rec
    assert copy.copy(rec) == rec and copy.copy(rec) is not rec
    assert rec.topic_partition == ("t", 3)
    rec.value = "decoded"  # deserializers replace key/value in place
    assert rec.value == "decoded"
    r = mod.Record(1, 2, None, b"v", ())
    assert r == mod.Record(1, 2, None, b"v", ()) and r != mod.Record(1, 2, b"", b"v", ())
    assert repr(r) == "Record(offset=1, timestamp=2, key=None, value=b'v', headers=())"
    assert copy.copy(r) == r


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 5)), max_size=20))
def test_run_stretches_identical(layout: list[tuple[int, int]]) -> None:
    # A batch's entries as place_run and send() leave them: stretches of one run object
    # (positions >= 0) and single-record futures (-1). Object 0 stands for a future per
    # record, 1-3 for runs; two stretches of one run may touch (two place_run calls).
    runs = [object() for _ in range(4)]
    entries: list[object] = []
    positions: list[int] = []
    expected_bounds: list[int] = []
    expected_others: list[object] = []
    for which, length in layout:
        if which == 0:
            for _ in range(length):
                fut = object()
                entries.append(fut)
                positions.append(-1)
                expected_others.append(fut)
            continue
        start = len(entries)
        if expected_bounds and expected_bounds[-1] == start and entries[start - 1] is runs[which]:
            expected_bounds[-1] = start + length  # the same run goes on: one stretch
        else:
            expected_bounds += [start, start + length]
        entries += [runs[which]] * length
        positions += range(100 + start, 100 + start + length)
    for mod in (runs_compiled, runs_pure):
        bounds, others = mod.run_stretches(entries, positions)
        assert bounds == expected_bounds
        assert len(others) == len(expected_others)
        assert all(a is b for a, b in zip(others, expected_others, strict=True))


def test_the_table_of_kernel_functions_is_complete() -> None:
    """``docs/internals.md``'s table of what runs where names every function of the C
    kernel, its Python references exist, and so does every test it names."""
    text = (ROOT / "docs" / "internals.md").read_text()
    lines = text[text.index("| function | C kernel") :].splitlines()
    rows = [cells.split(" | ") for cells in itertools.takewhile(bool, lines[2:])]
    assert rows and all(len(row) == 5 for row in rows)
    in_c = {name for row in rows for name in re.findall(r"`(\w+)`", row[1])}
    assert set(speedups.Kernel.__slots__) <= in_c
    modules = {
        "records": records_compiled,
        "runs": runs_compiled,
        "partitioner": partitioner_compiled,
    }
    for row in rows:
        for module, attr in re.findall(r"`(\w+)\.(?!py`)(\w+)`", row[3]):
            if module in modules:
                assert hasattr(modules[module], attr), (module, attr)
    named = re.findall(r"(test_\w+\.py)(?:::(test_\w+?)(\*?))?`", " ".join(row[4] for row in rows))
    assert len(named) >= 20
    for file, test, star in named:
        (path,) = (ROOT / "tests").rglob(file)
        if test:
            source = path.read_text()
            assert f"def {test}{'' if star else '('}" in source, (file, test)


def test_the_c_send_path_names_the_python_functions_it_mirrors() -> None:
    # producer/_send.c (send()'s fast path) mirrors the engine's placement rule for one
    # record; its "Mirrors:" lines name those functions. Each must resolve -- a renamed or
    # removed twin fails here -- and name send_fast back, so neither side changes alone.
    # tests/producer/test_send_fast.py compares what the two paths do.
    source = (ROOT / "aiokafka_ng" / "producer" / "_send.c").read_text()
    named = re.findall(r"^ \* Mirrors: ([\w.]+)$", source, re.MULTILINE)
    assert "aiokafka_ng.producer.accumulator.Accumulator.place" in named, named
    for dotted in named:
        module_name, owner, function = dotted.rsplit(".", 2)
        module = importlib.import_module(module_name)
        mirrored = getattr(getattr(module, owner), function)
        assert "send_fast" in (mirrored.__doc__ or ""), dotted
