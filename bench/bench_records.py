"""Record batch encode/decode throughput: aiokafka_ng vs aiokafka (C extension and pure Python).

Workload: 100k records, 100-byte values, ~8-byte keys, no headers, 16 KiB batches.
Run: ``cd /work/main && PYTHONPATH=. python bench/bench_records.py [--records N] [--repeat R]``
Prints records/s (best of ``--repeat`` runs) for building and reading, uncompressed and lz4.

Reading is measured twice: with each batch's CRC checked -- what both consumers do by
default (our fetcher always; aiokafka's with ``check_crcs=True``, its default, calls
``validate_crc()`` on every batch) -- and without (the decoder alone). aiokafka's C reader
checks no CRC unless asked, so comparing our CRC-checked read with its bare one would
measure different work.
"""

from __future__ import annotations

import argparse
import os
import time
from collections.abc import Callable
from typing import Any

from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.records import RecordBatchBuilder, iter_batches

BATCH_SIZE = 16384
TS = 1_700_000_000_000


def make_workload(n: int) -> list[tuple[bytes, bytes]]:
    values = [os.urandom(50).hex().encode() for _ in range(1000)]  # 100 bytes, ~2x compressible
    return [(b"key-%d" % (i % 1000), values[i % 1000]) for i in range(n)]


def build_ours(records: list[tuple[bytes, bytes]], codec: int) -> list[bytes]:
    out = []
    builder = RecordBatchBuilder(codec, max_size=BATCH_SIZE)
    append = builder.append
    for key, value in records:
        if append(TS, key, value) is None:
            out.append(builder.build())
            builder = RecordBatchBuilder(codec, max_size=BATCH_SIZE)
            append = builder.append
            append(TS, key, value)
    out.append(builder.build())
    return out


def read_ours(data: bytes, crc: bool) -> int:
    n = 0
    for batch in iter_batches(data, verify_crc=crc):
        for record in batch.records():
            n += record.value is not None
    return n


def build_aiokafka(cls: Any, records: list[tuple[bytes, bytes]], codec: int) -> list[bytes]:
    def new() -> Any:
        return cls(2, codec, 0, -1, -1, -1, BATCH_SIZE)

    out = []
    builder = new()
    offset = 0
    for key, value in records:
        if builder.append(offset, TS, key, value, []) is None:
            out.append(bytes(builder.build()))
            builder = new()
            offset = 0
            builder.append(offset, TS, key, value, [])
        offset += 1
    out.append(bytes(builder.build()))
    return out


def read_aiokafka(memory_records_cls: Any, data: bytes, crc: bool) -> int:
    n = 0
    records = memory_records_cls(data)
    while True:
        batch = records.next_batch()
        if batch is None:
            return n
        if crc and not batch.validate_crc():
            raise ValueError("CRC mismatch")
        for record in batch:
            n += record.value is not None


def read_aiokafka_py(batch_cls: Any, data: bytes, crc: bool) -> int:
    # aiokafka's pure-Python MemoryRecords still hands out C batches, so split by hand.
    n = 0
    pos = 0
    while pos < len(data):
        end = pos + 12 + int.from_bytes(data[pos + 8 : pos + 12], "big")
        batch = batch_cls(data[pos:end])
        if crc and not batch.validate_crc():
            raise ValueError("CRC mismatch")
        for record in batch:
            n += record.value is not None
        pos = end
    return n


def best(fn: Callable[[], object], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    n, repeat = args.records, args.repeat

    from aiokafka.record import default_records as ak
    from aiokafka.record import memory_records as akm

    impls: dict[str, tuple[Callable[..., list[bytes]], Callable[[bytes, bool], int]]] = {
        "aiokafka_ng": (build_ours, read_ours),
        "aiokafka (C ext)": (
            lambda r, c: build_aiokafka(ak.DefaultRecordBatchBuilder, r, c),
            lambda d, crc: read_aiokafka(akm.MemoryRecords, d, crc),
        ),
        "aiokafka (pure py)": (
            lambda r, c: build_aiokafka(ak._DefaultRecordBatchBuilderPy, r, c),
            lambda d, crc: read_aiokafka_py(ak._DefaultRecordBatchPy, d, crc),
        ),
    }
    records = make_workload(n)
    print(f"{n} records, 100-byte values, {BATCH_SIZE}-byte batches, best of {repeat}")
    print(
        f"{'implementation':<20} {'codec':<6} {'build rec/s':>14} {'read+CRC rec/s':>15}"
        f" {'read rec/s':>14} {'bytes':>10}"
    )
    results: dict[tuple[str, str], tuple[float, float, float]] = {}
    for codec in (Compression.NONE, Compression.LZ4):
        for name, (build, read) in impls.items():
            batches = build(records, codec)
            data = b"".join(batches)
            assert read(data, True) == n, name
            t_build = best(lambda b=build, c=codec: b(records, c), repeat)  # type: ignore[misc]
            t_crc = best(lambda r=read, d=data: r(d, True), repeat)  # type: ignore[misc]
            t_read = best(lambda r=read, d=data: r(d, False), repeat)  # type: ignore[misc]
            results[(name, codec.name)] = (n / t_build, n / t_crc, n / t_read)
            print(
                f"{name:<20} {codec.name.lower():<6} {n / t_build:>14,.0f} {n / t_crc:>15,.0f}"
                f" {n / t_read:>14,.0f} {len(data):>10,}"
            )
    print()
    for name in ("NONE", "LZ4"):
        ours = results[("aiokafka_ng", name)]
        for other in ("aiokafka (C ext)", "aiokafka (pure py)"):
            theirs = results[(other, name)]
            print(
                f"{name.lower():<5} aiokafka_ng / {other}: build x{ours[0] / theirs[0]:.2f},"
                f" read with CRC check x{ours[1] / theirs[1]:.2f},"
                f" read without x{ours[2] / theirs[2]:.2f}"
            )


if __name__ == "__main__":
    main()
