"""The Kafka wire's fixed-width formats and the :class:`Writer` that appends primitives.

Split from :mod:`aiokafka_ng.protocol.primitives` (which re-exports :class:`Writer` and reads
with the same formats): the generated messages' ``_write`` methods append through it.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable, Sequence
from typing import Any
from uuid import UUID

__all__ = ["BOOL", "F64", "FIXED_FORMATS", "I8", "I16", "I32", "I64", "U16", "U32", "Writer"]

I8 = struct.Struct(">b")
I16 = struct.Struct(">h")
U16 = struct.Struct(">H")
I32 = struct.Struct(">i")
U32 = struct.Struct(">I")
I64 = struct.Struct(">q")
F64 = struct.Struct(">d")
BOOL = struct.Struct(">?")

FIXED_FORMATS = {
    "bool": "?",
    "int8": "b",
    "int16": "h",
    "uint16": "H",
    "int32": "i",
    "uint32": "I",
    "int64": "q",
    "float64": "d",
}


class Writer:
    """Appends Kafka primitives to ``buf``."""

    __slots__ = ("buf",)

    def __init__(self) -> None:
        self.buf = bytearray()

    def getvalue(self) -> bytes:
        return bytes(self.buf)

    def int8(self, v: int) -> None:
        self.buf += I8.pack(v)

    def int16(self, v: int) -> None:
        self.buf += I16.pack(v)

    def uint16(self, v: int) -> None:
        self.buf += U16.pack(v)

    def int32(self, v: int) -> None:
        self.buf += I32.pack(v)

    def uint32(self, v: int) -> None:
        self.buf += U32.pack(v)

    def int64(self, v: int) -> None:
        self.buf += I64.pack(v)

    def float64(self, v: float) -> None:
        self.buf += F64.pack(v)

    def boolean(self, v: bool) -> None:
        self.buf.append(1 if v else 0)

    def uvarint(self, v: int) -> None:
        if v < 0:
            raise ValueError(f"unsigned varint cannot encode {v}")
        buf = self.buf
        while v > 0x7F:
            buf.append((v & 0x7F) | 0x80)
            v >>= 7
        buf.append(v)

    def varint(self, v: int) -> None:
        if not -(1 << 31) <= v < (1 << 31):
            raise ValueError(f"varint out of range: {v}")
        self.uvarint(((v << 1) ^ (v >> 31)) & 0xFFFFFFFF)

    def varlong(self, v: int) -> None:
        if not -(1 << 63) <= v < (1 << 63):
            raise ValueError(f"varlong out of range: {v}")
        self.uvarint(((v << 1) ^ (v >> 63)) & 0xFFFFFFFFFFFFFFFF)

    def uuid(self, v: UUID) -> None:
        self.buf += v.bytes

    def raw(self, data: bytes | bytearray | memoryview) -> None:
        self.buf += data

    def string(self, s: str) -> None:
        data = s.encode()
        if len(data) > 0x7FFF:
            raise ValueError(f"string of {len(data)} bytes exceeds the int16 length prefix")
        self.buf += I16.pack(len(data))
        self.buf += data

    def nullable_string(self, s: str | None) -> None:
        if s is None:
            self.buf += b"\xff\xff"
        else:
            self.string(s)

    def compact_string(self, s: str) -> None:
        data = s.encode()
        self.uvarint(len(data) + 1)
        self.buf += data

    def compact_nullable_string(self, s: str | None) -> None:
        if s is None:
            self.buf.append(0)
        else:
            self.compact_string(s)

    def bytes_(self, b: bytes) -> None:
        self.buf += I32.pack(len(b))
        self.buf += b

    def nullable_bytes(self, b: bytes | None) -> None:
        if b is None:
            self.buf += b"\xff\xff\xff\xff"
        else:
            self.bytes_(b)

    def compact_bytes(self, b: bytes) -> None:
        self.uvarint(len(b) + 1)
        self.buf += b

    def compact_nullable_bytes(self, b: bytes | None) -> None:
        if b is None:
            self.buf.append(0)
        else:
            self.compact_bytes(b)

    def array_len(self, n: int) -> None:
        self.buf += I32.pack(n)

    def compact_array_len(self, n: int) -> None:
        self.uvarint(n + 1)

    def fixed_array(self, kind: str, items: Sequence[Any]) -> None:
        self.buf += struct.pack(f">{len(items)}{FIXED_FORMATS[kind]}", *items)

    def tagged_fields(
        self, known: Iterable[tuple[int, bytes]], unknown: dict[int, bytes] | None
    ) -> None:
        """Write a tagged-field section: known fields plus preserved unknown ones, by tag."""
        fields = list(known)
        if unknown:
            fields.extend(unknown.items())
            fields.sort(key=lambda kv: kv[0])
        self.uvarint(len(fields))
        for tag, data in fields:
            self.uvarint(tag)
            self.uvarint(len(data))
            self.buf += data

    def unknown_tags(self, unknown: dict[int, bytes]) -> None:
        """Tagged-field section of a struct with no known tagged fields in this version."""
        if unknown:
            self.tagged_fields((), unknown)
        else:
            self.buf.append(0)
