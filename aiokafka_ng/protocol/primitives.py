"""Kafka wire primitives: a position-based Reader, an appending Writer, message base classes.

Theory of operation
-------------------
Every Kafka message body is a flat byte string built from a handful of primitive types
(big-endian fixed-width integers, zigzag/unsigned varints, length-prefixed strings, bytes and
arrays, and in "flexible" versions compact lengths plus a tagged-field section at the end of
each struct). The generated classes in :mod:`aiokafka_ng.protocol.messages` are straight-line
code over the two small classes defined here:

* :class:`Reader` walks a ``memoryview`` with an integer position. Every read checks the
  remaining length *before* allocating anything, so a hostile length or element count fails
  with :class:`ProtocolError` at once instead of allocating gigabytes or looping for ages:
  an element count can never exceed the bytes left, because each element takes >= 1 byte.
  That bounds strings, bytes and scalar arrays by the frame, but not what a frame full of
  small structs costs once decoded: a Metadata partition takes 18 bytes on the wire and
  ~700 bytes as Python objects (its dataclass, lists, then the cluster's snapshot). So
  struct arrays, which the generated code reads with their field's name, are also charged
  against :class:`DecodeLimits`: a budget of struct elements per answer, and limits for
  single fields (partitions of one topic, topics of one Metadata answer). Going over raises
  :class:`~aiokafka_ng.protocol.limits.ResponseLimitError` naming the field, before the
  array is allocated (see :mod:`aiokafka_ng.protocol.limits`).
* :class:`Writer` appends to a ``bytearray`` (:mod:`aiokafka_ng.protocol.writer`, with the
  fixed-width formats both use).

Generated code groups runs of consecutive fixed-width fields into one precompiled
``struct.Struct`` and calls :meth:`Reader.fixed` / appends ``Struct.pack`` output directly;
that keeps the hot paths (Produce encode, Fetch decode) free of per-field dispatch.

:class:`Struct`, :class:`Message`, :class:`ApiMessage` and :class:`ApiRequest` are the
(slot-free) bases of the generated dataclasses. A generated request names its response in its
base, ``FooRequest(ApiRequest[FooResponse])``, so code that sends one is typed by the response
it gets back (``Connection.send(req: ApiRequest[R]) -> R``). The bases own the public
``encode``/``decode`` entry points, which translate low-level failures: decoding raises only
:class:`ProtocolError`, encoding raises ``ValueError`` for values that cannot be represented
(None where not nullable, out-of-range integers, ...).
"""

from __future__ import annotations

import struct
from typing import Any, ClassVar, Generic, NamedTuple, Self, TypeVar
from uuid import UUID

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.limits import (
    DEFAULT_LIMITS,
    DecodeLimits,
    ResponseLimitError,
    StructBudget,
    located,
)
from aiokafka_ng.protocol.writer import (
    F64,
    FIXED_FORMATS,
    I8,
    I16,
    I32,
    I64,
    U16,
    U32,
    Writer,
)

__all__ = [
    "ApiMessage",
    "ApiRequest",
    "FieldSpec",
    "Message",
    "Reader",
    "Struct",
    "Writer",
]

_ZERO_UUID = UUID(int=0)

# Exceptions that low-level decoding can raise on malformed input; translated to ProtocolError.
_DECODE_ERRORS = (struct.error, ValueError, IndexError, OverflowError, UnicodeDecodeError)
# ... and on encode, for values that do not fit the wire type.
_ENCODE_ERRORS = (struct.error, TypeError, AttributeError, OverflowError, UnicodeEncodeError)


class Reader:
    """Reads Kafka primitives from a buffer, advancing ``pos``.

    All methods raise :class:`ProtocolError` on a short buffer, invalid UTF-8, a negative
    length other than the -1/0 null marker, or a null where the caller asked for non-null.
    Fixed-width reads rely on ``unpack_from`` raising on a short buffer (a try block costs
    nothing on the success path), which keeps the hot methods to one call each.
    """

    __slots__ = ("budget", "buf", "pos")

    def __init__(
        self,
        buf: bytes | bytearray | memoryview,
        pos: int = 0,
        limits: DecodeLimits | None = None,
        *,
        budget: StructBudget | None = None,
    ) -> None:
        mv = buf if isinstance(buf, memoryview) else memoryview(buf)
        if mv.format != "B" or mv.ndim != 1:
            mv = mv.cast("B")
        self.buf = mv
        self.pos = pos
        self.budget = budget if budget is not None else StructBudget(limits or DEFAULT_LIMITS)

    def remaining(self) -> int:
        return len(self.buf) - self.pos

    def _short(self, n: int) -> ProtocolError:
        return ProtocolError(f"need {n} bytes at offset {self.pos}, have {self.remaining()}")

    def _need(self, n: int) -> int:
        """Reserve ``n`` bytes; return the start position."""
        pos = self.pos
        if n < 0 or pos + n > len(self.buf):
            raise self._short(n)
        self.pos = pos + n
        return pos

    def fixed(self, s: struct.Struct) -> tuple[Any, ...]:
        """Unpack a run of fixed-width fields described by ``s``."""
        pos = self.pos
        try:
            values = s.unpack_from(self.buf, pos)
        except struct.error:
            raise self._short(s.size) from None
        self.pos = pos + s.size
        return values

    def _one(self, s: struct.Struct) -> Any:
        pos = self.pos
        try:
            v = s.unpack_from(self.buf, pos)[0]
        except struct.error:
            raise self._short(s.size) from None
        self.pos = pos + s.size
        return v

    def int8(self) -> int:
        v: int = self._one(I8)
        return v

    def int16(self) -> int:
        v: int = self._one(I16)
        return v

    def uint16(self) -> int:
        v: int = self._one(U16)
        return v

    def int32(self) -> int:
        v: int = self._one(I32)
        return v

    def uint32(self) -> int:
        v: int = self._one(U32)
        return v

    def int64(self) -> int:
        v: int = self._one(I64)
        return v

    def float64(self) -> float:
        v: float = self._one(F64)
        return v

    def boolean(self) -> bool:
        return self.buf[self._need(1)] != 0

    def uvarint(self, max_bytes: int = 5) -> int:
        """Unsigned LEB128 varint (5 bytes max for 32-bit values, 10 for 64-bit)."""
        buf = self.buf
        pos = self.pos
        end = len(buf)
        # Fast path: lengths, counts and tag sections are almost always one byte.
        if pos < end and buf[pos] < 0x80:
            self.pos = pos + 1
            return buf[pos]
        result = 0
        shift = 0
        for _ in range(max_bytes):
            if pos >= end:
                raise ProtocolError("truncated varint")
            b = buf[pos]
            pos += 1
            result |= (b & 0x7F) << shift
            if not b & 0x80:
                self.pos = pos
                return result
            shift += 7
        raise ProtocolError("varint too long")

    def uvarlong(self) -> int:
        return self.uvarint(10)

    def varint(self) -> int:
        v = self.uvarint(5)
        if v >> 32:
            raise ProtocolError("varint out of range")
        return (v >> 1) ^ -(v & 1)

    def varlong(self) -> int:
        v = self.uvarint(10)
        if v >> 64:
            raise ProtocolError("varlong out of range")
        return (v >> 1) ^ -(v & 1)

    def uuid(self) -> UUID:
        pos = self._need(16)
        return UUID(bytes=bytes(self.buf[pos : pos + 16]))

    def raw(self, n: int) -> bytes:
        pos = self.pos
        end = pos + n
        if n < 0 or end > len(self.buf):
            raise self._short(n)
        self.pos = end
        return bytes(self.buf[pos:end])

    def _text(self, n: int) -> str:
        pos = self._need(n)
        try:
            return str(self.buf[pos : pos + n], "utf-8")
        except UnicodeDecodeError as exc:
            raise ProtocolError(f"invalid UTF-8 in string at offset {pos}") from exc

    # Lengths: -1 means null. Anything below -1 is malformed.

    def _len16(self) -> int:
        n: int = self._one(I16)
        if n < -1:
            raise ProtocolError(f"negative length {n}")
        return n

    def _len32(self) -> int:
        n: int = self._one(I32)
        if n < -1:
            raise ProtocolError(f"negative length {n}")
        return n

    def _ulen(self) -> int:
        n = self.uvarint() - 1
        if n > 0x7FFFFFFF:
            raise ProtocolError(f"compact length {n} out of range")
        return n

    @staticmethod
    def _not_null(n: int) -> int:
        if n < 0:
            raise ProtocolError("null value for a non-nullable field")
        return n

    def string(self) -> str:
        return self._text(self._not_null(self._len16()))

    def nullable_string(self) -> str | None:
        n = self._len16()
        return None if n < 0 else self._text(n)

    def compact_string(self) -> str:
        return self._text(self._not_null(self._ulen()))

    def compact_nullable_string(self) -> str | None:
        n = self._ulen()
        return None if n < 0 else self._text(n)

    def bytes_(self) -> bytes:
        return self.raw(self._not_null(self._len32()))

    def nullable_bytes(self) -> bytes | None:
        n = self._len32()
        return None if n < 0 else self.raw(n)

    def compact_bytes(self) -> bytes:
        return self.raw(self._not_null(self._ulen()))

    def compact_nullable_bytes(self) -> bytes | None:
        n = self._ulen()
        return None if n < 0 else self.raw(n)

    def _count(self, n: int, name: str | None = None) -> int:
        # Every array element takes at least one byte on the wire, so a count larger than
        # what is left is garbage: reject it before anyone allocates or loops over it.
        if n > len(self.buf) - self.pos:
            what = f"{name} count" if name else "array count"
            raise ProtocolError(f"{what} {n} exceeds the {self.remaining()} bytes left")
        if name is not None and n > 0:
            self._charge(n, name)
        return n

    def _charge(self, n: int, name: str) -> None:
        """Charge ``n`` struct elements of field ``name`` to the budget (module docstring)."""
        budget = self.budget
        limit = budget.limits.per_field.get(name)
        if limit is not None and n > limit:
            raise ResponseLimitError(f"{name} has {n} elements, more than the limit of {limit}")
        budget.left -= n
        if budget.left < 0:
            raise ResponseLimitError(
                f"{name} has {n} elements, which takes the answer past "
                f"{budget.limits.max_structs} structs in all"
            )

    # ``name`` is the field ("Class.field") of a struct array: its elements count against
    # the DecodeLimits. Scalar arrays pass none: the bytes-left rule bounds them.

    def array_len(self, name: str | None = None) -> int:
        return self._count(self._not_null(self._len32()), name)

    def nullable_array_len(self, name: str | None = None) -> int:
        return self._count(self._len32(), name)

    def compact_array_len(self, name: str | None = None) -> int:
        return self._count(self._not_null(self._ulen()), name)

    def compact_nullable_array_len(self, name: str | None = None) -> int:
        return self._count(self._ulen(), name)

    def fixed_array(self, kind: str, n: int) -> list[Any]:
        """``n`` fixed-width elements of primitive ``kind`` (``"int32"``, ...)."""
        s = struct.Struct(f">{n}{FIXED_FORMATS[kind]}")
        return list(self.fixed(s))

    # Tagged fields (flexible versions).

    def tag_count(self) -> int:
        return self._count(self.uvarint())

    def tagged_field(self) -> tuple[int, Reader]:
        """Read one tag header; return the tag and a Reader over exactly its payload."""
        tag = self.uvarint()
        size = self.uvarint()
        pos = self._need(size)
        return tag, Reader(self.buf[pos : pos + size], budget=self.budget)

    def rest(self) -> bytes:
        """Everything not read yet (consumes it)."""
        data = bytes(self.buf[self.pos :])
        self.pos = len(self.buf)
        return data

    def unknown_tags(self, into: dict[int, bytes]) -> None:
        """Read a whole tagged-field section, keeping every field as raw bytes."""
        pos = self.pos
        if pos < len(self.buf) and self.buf[pos] == 0:  # empty section: the common case
            self.pos = pos + 1
            return
        for _ in range(self.tag_count()):
            tag = self.uvarint()
            into[tag] = self.raw(self.uvarint())


class FieldSpec(NamedTuple):
    """Schema of one field, emitted by the generator as ``_SCHEMA`` (used by tests/tools).

    ``kind`` is the Kafka type name (``int32``, ``string``, ``records``, ``[]int32``, ...);
    struct-typed fields use ``struct``/``[]struct`` with the class in ``struct``. Version
    bounds are inclusive; ``nullable`` is ``None`` when never nullable.
    """

    name: str
    kind: str
    versions: tuple[int, int]
    nullable: tuple[int, int] | None
    tag: int | None
    tagged_versions: tuple[int, int] | None
    struct: type[Struct] | None
    default: Any


class Struct:
    """Base of every generated struct: ``_write``/``_read`` are generated per class."""

    __slots__ = ()
    _SCHEMA: ClassVar[tuple[FieldSpec, ...]] = ()

    def _write(self, w: Writer, version: int) -> None:
        raise NotImplementedError

    @classmethod
    def _read(cls, r: Reader, version: int) -> Self:
        raise NotImplementedError

    def encode(self, version: int) -> bytes:
        """Serialize for ``version``; ``ValueError`` if a value cannot be represented."""
        w = Writer()
        try:
            self._write(w, version)
        except _ENCODE_ERRORS as exc:
            raise ValueError(f"cannot encode {type(self).__name__} v{version}: {exc}") from exc
        return bytes(w.buf)

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, version: int) -> Self:
        """Parse ``buf`` as ``version``; raises only :class:`ProtocolError` on bad bytes."""
        try:
            return cls._read(Reader(buf), version)
        except (ProtocolError, *_DECODE_ERRORS) as exc:
            raise located(exc, cls.__name__, version) from exc


class Message(Struct):
    """A versioned top-level message (API request/response or a "data" schema)."""

    __slots__ = ()
    MIN_VERSION: ClassVar[int]
    MAX_VERSION: ClassVar[int]
    # Highest version that is not marked unstable in the schema (``latestVersionUnstable``);
    # brokers only advertise unstable versions when explicitly configured to.
    MAX_STABLE_VERSION: ClassVar[int]
    FLEXIBLE_MIN_VERSION: ClassVar[int | None]

    def encode(self, version: int) -> bytes:
        w = Writer()
        self.write_to(w, version)
        return bytes(w.buf)

    def write_to(self, w: Writer, version: int) -> None:
        """Append the body to ``w`` (lets framing build header + body in one buffer)."""
        if not self.MIN_VERSION <= version <= self.MAX_VERSION:
            raise ValueError(
                f"{type(self).__name__} supports versions "
                f"{self.MIN_VERSION}-{self.MAX_VERSION}, not {version}"
            )
        try:
            self._write(w, version)
        except _ENCODE_ERRORS as exc:
            raise ValueError(f"cannot encode {type(self).__name__} v{version}: {exc}") from exc

    @classmethod
    def decode(cls, buf: bytes | bytearray | memoryview, version: int) -> Self:
        return cls.read_from(Reader(buf), version)

    @classmethod
    def read_from(cls, r: Reader, version: int) -> Self:
        """Parse a body from ``r``'s position; raises only :class:`ProtocolError`."""
        if not cls.MIN_VERSION <= version <= cls.MAX_VERSION:
            raise ProtocolError(
                f"{cls.__name__} supports versions {cls.MIN_VERSION}-{cls.MAX_VERSION}, "
                f"not {version}"
            )
        try:
            return cls._read(r, version)
        except (ProtocolError, *_DECODE_ERRORS) as exc:
            raise located(exc, cls.__name__, version) from exc

    @classmethod
    def is_flexible(cls, version: int) -> bool:
        flex = cls.FLEXIBLE_MIN_VERSION
        return flex is not None and version >= flex


class ApiMessage(Message):
    """A request or response of one Kafka API."""

    __slots__ = ()
    API_KEY: ClassVar[int]


R_co = TypeVar("R_co", bound=ApiMessage, covariant=True)  # so any request: ApiRequest[ApiMessage]


class ApiRequest(ApiMessage, Generic[R_co]):
    """A request of one Kafka API, typed by the response it is answered with."""

    __slots__ = ()
    RESPONSE_TYPE: ClassVar[type[R_co]]
