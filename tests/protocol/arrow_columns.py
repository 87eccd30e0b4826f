"""``BinaryColumn`` objects made the way the Spark sink makes them: from a pyarrow array's
buffers (optionally a slice of a larger array, so the offsets and validity bitmap do not
start at 0)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from aiokafka_ng.protocol import speedups


def arrow_array(items: list[bytes | None], *, large: bool = False, pad: int = 0) -> Any:
    """``items`` as a (large_)binary array; with ``pad``, a slice of a larger array that has
    ``pad`` other items before them and after them."""
    filler: list[bytes | None] = [b"pad%d" % i if i % 3 else None for i in range(pad)]
    arr = pa.array(filler + items + filler, pa.large_binary() if large else pa.binary())
    return arr.slice(pad, len(items))


def column(items: list[bytes | None], *, large: bool = False, pad: int = 0) -> Any:
    """A ``BinaryColumn`` over :func:`arrow_array`'s buffers (offsets and bitmap copied, the
    data read in place)."""
    assert speedups.BinaryColumn is not None, "the C kernel is not built"
    arr = arrow_array(items, large=large, pad=pad)
    validity, offsets, data = arr.buffers()
    return speedups.BinaryColumn(offsets, data, validity, arr.offset, len(arr), large)
