"""A pure-Python ``BinaryColumn``: the reference the C type (``_column.c``) is held to.

The package has no interpreted ``BinaryColumn`` to fall back on (without the C kernel the
Spark sink hands ``send_many`` lists), so the contract lives here, written the plain way:
offsets and validity bits copied when the column is made and checked on the copy, the data
buffer held through a memoryview (which, like the C type's held view, keeps a bytearray
from being resized), the same errors in the same order. ``test_binary_column_mutation.py``
runs the same inputs and the same later changes to the caller's buffers through both.
"""

from __future__ import annotations

import operator
from array import array
from typing import Any

_EMPTY = memoryview(b"")


class BinaryColumn:
    __slots__ = ("_data", "_length", "_offs", "_valid", "_vbit")

    def __init__(
        self,
        offsets: Any,
        data: Any,
        validity: Any = None,
        offset: int = 0,
        length: int = -1,
        large: bool = False,
    ) -> None:
        offset = operator.index(offset)
        length = operator.index(length)
        ov = memoryview(offsets).cast("B")
        dv = _EMPTY if data is None else memoryview(data).cast("B")
        vv = None if validity is None else memoryview(validity).cast("B")
        width = 8 if large else 4
        entries = ov.nbytes // width
        if offset < 0 or entries < 1 or offset > entries - 1:
            raise ValueError(f"BinaryColumn: offset {offset} outside {entries} offsets")
        if length < 0:
            length = entries - 1 - offset
        if length > entries - 1 - offset:
            raise ValueError(
                f"BinaryColumn: {length} items need {offset + length + 1} offsets, {entries} given"
            )
        if vv is not None and vv.nbytes < (offset + length + 7) // 8:
            raise ValueError("BinaryColumn: validity bitmap too short")
        offs = array("q" if large else "i")
        offs.frombytes(ov[offset * width : (offset + length + 1) * width])
        vbit = offset & 7
        valid = None
        if vv is not None:
            first = offset >> 3
            valid = bytes(vv[first : first + (vbit + length + 7) // 8])
        ov.release()
        if vv is not None:
            vv.release()
        dlen = dv.nbytes
        if not 0 <= offs[0] <= dlen:
            raise ValueError("BinaryColumn: an offset lies outside the data")
        for j in range(1, length + 1):
            if not offs[j - 1] <= offs[j] <= dlen:
                raise ValueError("BinaryColumn: offsets decrease or lie outside the data")
        self._data = dv
        self._offs = offs
        self._valid = valid
        self._vbit = vbit
        self._length = length

    @classmethod
    def _made(
        cls, data: memoryview, offs: array[int], valid: bytes | None, vbit: int, length: int
    ) -> BinaryColumn:
        col = cls.__new__(cls)
        col._data, col._offs, col._valid, col._vbit = data, offs, valid, vbit
        col._length = length
        return col

    def _null(self, i: int) -> bool:
        if self._valid is None:
            return False
        bit = self._vbit + i
        return not (self._valid[bit >> 3] >> (bit & 7)) & 1

    def _item(self, i: int) -> bytes | None:
        if self._null(i):
            return None
        return bytes(self._data[self._offs[i] : self._offs[i + 1]])

    def __len__(self) -> int:
        return self._length

    def __getitem__(self, key: Any) -> Any:
        if isinstance(key, slice):
            start, stop, step = key.indices(self._length)
            if step != 1:
                raise ValueError("BinaryColumn slices take no step")
            n = max(0, stop - start)
            # A view: the same data, its own slice of the (already private) offsets.
            offs = self._offs[start : start + n + 1]
            return self._made(self._data, offs, self._valid, self._vbit + start, n)
        i = operator.index(key)
        if i < 0:
            i += self._length
        if not 0 <= i < self._length:
            raise IndexError("BinaryColumn index out of range")
        return self._item(i)

    def take(self, indexes: Any) -> BinaryColumn:
        if not isinstance(indexes, list):
            raise TypeError("take() wants a list of indexes")
        idx = []
        for k in indexes:
            i = operator.index(k)
            if not 0 <= i < self._length:
                raise IndexError("BinaryColumn index out of range")
            idx.append(i)
        return self._packed([self._item(i) for i in idx])

    def copy(self) -> BinaryColumn:
        return self._packed([self._item(i) for i in range(self._length)])

    def _packed(self, items: list[bytes | None]) -> BinaryColumn:
        offs = array("q", [0])
        bits = bytearray((len(items) + 7) // 8)
        for k, item in enumerate(items):
            if item is not None:
                bits[k >> 3] |= 1 << (k & 7)
            offs.append(offs[-1] + len(item or b""))
        valid = None if None not in items and self._valid is None else bytes(bits)
        data = memoryview(b"".join(x or b"" for x in items))
        return self._made(data, offs, valid, 0, len(items))

    def nbytes(self) -> int:
        return self._offs[self._length] - self._offs[0]

    def null_count(self) -> int:
        return sum(self._null(i) for i in range(self._length))

    def __repr__(self) -> str:
        return f"BinaryColumn({self._length} items)"
