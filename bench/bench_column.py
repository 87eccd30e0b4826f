"""What a ``BinaryColumn`` costs to make, against encoding it (the C kernel, no broker).

Workload: a pyarrow binary (and large_binary) array of ``--records`` 100-byte values,
sliced so its offsets do not start at 0, with and without nulls. Prints the best of
``--repeat`` runs of: making the column from the array's buffers (the offsets and bitmap
are copied and checked: the price of memory safety against buffers changed afterwards),
``copy()`` (what a ``send_many`` chunk waiting for its topic's metadata keeps) and
appending the whole column to 1 MB record batches with ``append_run``.

Run: ``cd /work/main && PYTHONPATH=. python bench/bench_column.py [--records N]``.
Fresh pages dominate the copy and append figures when glibc returns large blocks to the
system between runs; the best of many runs is the steady state.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable
from typing import Any

import pyarrow as pa

from aiokafka_ng.protocol import _speedups


def best_us(fn: Callable[[], Any], repeat: int) -> float:
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times) * 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--records", type=int, default=100_000)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    n = args.records
    for large in (False, True):
        for nulls in (False, True):
            items = [None if nulls and i % 10 == 0 else b"v" * 100 for i in range(n + 6)]
            arr = pa.array(items, pa.large_binary() if large else pa.binary()).slice(3, n)
            validity, offsets, data = arr.buffers()

            def make(
                a: Any = arr, v: Any = validity, o: Any = offsets, d: Any = data, w: bool = large
            ) -> Any:
                return _speedups.BinaryColumn(o, d, v, a.offset, len(a), w)

            col = make()

            def append(c: Any = col) -> None:
                buf = bytearray()
                i = 0
                while i < len(c):
                    buf.clear()
                    i = _speedups.append_run(buf, 1 << 20, b"\x00", 0, None, c, i, len(c))

            print(
                f"{'large_binary' if large else 'binary':12} nulls={nulls!s:5}"
                f"  make {best_us(make, args.repeat):8.1f} us"
                f"  copy() {best_us(col.copy, args.repeat):8.1f} us"
                f"  append_run (all) {best_us(append, args.repeat):8.1f} us"
            )


if __name__ == "__main__":
    main()
