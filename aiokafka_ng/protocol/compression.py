"""Record batch compression codecs (pure; every codec comes from ``cramjam``).

Theory of operation
-------------------
A record batch carries its codec in the low three bits of its attributes; the records that
follow the batch header are compressed as one blob.  Wire formats, chosen to match the Java
client so that every broker and consumer can read what we write:

* gzip / zstd: the standard formats (gzip level 6 and zstd level 3 are Kafka's defaults).
* lz4: the LZ4 *frame* format (KIP-57) with independent 64 KiB blocks.  Kafka's Java reader
  rejects linked blocks, so the frame is written with ``block_linked=False``.  The default
  level is lz4's fast mode, which is what Java uses for its default level.

Levels (KIP-390) are Kafka's, per codec, in the ranges Kafka's ``CompressionType`` validates
(:data:`LEVELS`): gzip 1..9 (and -1, zlib's default), lz4 1..17, zstd -131072..22; snappy
has none.  Kafka's quirk is kept: lz4's default level 9 is the *fast* compressor (Java's
``Lz4BlockOutputStream`` picks lz4-java's fast compressor for exactly the default level and
LZ4 HC for every other), so 8 or 10 compress harder than the default 9.
* snappy: written in the xerial framing of the Java client (``\\x82SNAPPY\\x00``, version 1,
  compatible version 1, then ``[int32 length][raw snappy block]`` chunks of 32 KiB input);
  read in both xerial and raw-block form (librdkafka and some old clients write raw blocks).

Decompression is the consumer's exposure to hostile or corrupt input, so it is bounded:

* Any failure raises :class:`DecompressionError` (a ``ProtocolError``), never a cramjam or
  other exception.
* Output size is capped by ``max_size``.  For snappy the decompressed length is declared up
  front (a varint preamble per raw block) and is checked *before* anything is allocated.
  For gzip, lz4 and zstd the output goes into a fixed-size buffer with ``decompress_into``,
  which fails as soon as the buffer is full; the buffer starts small and grows eightfold per
  retry up to ``max_size``, so memory is bounded by ``max_size`` and the work wasted on
  retries by a constant factor.  A bomb costs at most ``max_size`` bytes and the time to
  produce them, then raises :class:`DecompressionLimitError`.
* Not bounded: the *input* (it is already in memory), and the CPU time to decompress up to
  ``max_size`` bytes.
"""

from __future__ import annotations

import struct
from enum import IntEnum

import cramjam

from aiokafka_ng.protocol.errors import ProtocolError

__all__ = [
    "DEFAULT_MAX_DECOMPRESSED_SIZE",
    "LEVELS",
    "Compression",
    "DecompressionError",
    "DecompressionLimitError",
    "compress",
    "decompress",
    "level_problem",
]

Buffer = bytes | bytearray | memoryview

#: Default cap on the decompressed size of one record batch (or legacy wrapper message).
DEFAULT_MAX_DECOMPRESSED_SIZE = 64 * 1024 * 1024


class DecompressionError(ProtocolError):
    """Compressed record data that does not decompress."""


class DecompressionLimitError(DecompressionError):
    """Compressed record data that would decompress to more than the allowed size."""


class Compression(IntEnum):
    """Codec ids as stored in the low three bits of the batch attributes."""

    NONE = 0
    GZIP = 1
    SNAPPY = 2
    LZ4 = 3
    ZSTD = 4

    @classmethod
    def parse(cls, value: str | int | None) -> Compression:
        """Accept a codec name (``"lz4"``, case-insensitive), an id, a member or None (NONE)."""
        if value is None:
            return cls.NONE
        if isinstance(value, str):
            try:
                return cls[value.strip().upper()]
            except KeyError:
                names = ", ".join(m.name.lower() for m in cls)
                raise ValueError(
                    f"unknown compression {value!r}; expected one of {names}"
                ) from None
        return cls(value)


_GZIP_LEVEL = 6
_ZSTD_LEVEL = 3
#: Kafka's default lz4 level, which means the fast compressor (module docstring).
_LZ4_DEFAULT_LEVEL = 9
#: cramjam's level for LZ4's fast mode (the frame API's levels below 3 are all fast).
_LZ4_FAST = 1

#: The levels Kafka (``CompressionType.levelValidator``, 4.x) accepts per codec, as
#: inclusive ranges; gzip also takes -1 (zlib's default).  Snappy and none have no level.
LEVELS: dict[Compression, tuple[int, int]] = {
    Compression.GZIP: (1, 9),
    Compression.LZ4: (1, 17),
    Compression.ZSTD: (-131072, 22),
}


def level_problem(codec: Compression, level: int) -> str | None:
    """What is wrong with ``level`` for ``codec`` (Kafka's validation), or None."""
    bounds = LEVELS.get(codec)
    if bounds is None:
        return f"compression {codec.name.lower()!r} has no levels"
    lo, hi = bounds
    if lo <= level <= hi or (codec == Compression.GZIP and level == -1):
        return None
    extra = " or -1" if codec == Compression.GZIP else ""
    return f"{codec.name.lower()} levels are {lo}..{hi}{extra}, not {level}"


_XERIAL_HEADER = b"\x82SNAPPY\x00" + struct.pack(">ii", 1, 1)
_XERIAL_MAGIC = _XERIAL_HEADER[:8]
_XERIAL_BLOCK = 32 * 1024
_INT32 = struct.Struct(">i")

# First guess for the output buffer, relative to the input; see the module docstring.
_MIN_GUESS = 64 * 1024
_GROWTH = 8


def compress(codec: Compression, data: Buffer, *, level: int | None = None) -> bytes:
    """Compress ``data`` in Kafka's wire format for ``codec`` (NONE returns it unchanged).

    ``level`` is Kafka's level for the codec (see :data:`LEVELS`; None: Kafka's default);
    snappy ignores it. The caller validates it (:func:`level_problem`)."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.LZ4:
        compressor = cramjam.lz4.Compressor(
            level=_LZ4_FAST if level is None or level == _LZ4_DEFAULT_LEVEL else level,
            content_checksum=False,
            block_linked=False,
        )
        # The streaming compressor (the only cramjam lz4 API that writes independent blocks)
        # takes nothing but bytes.
        compressor.compress(data if isinstance(data, bytes) else bytes(data))
        return bytes(compressor.finish())
    if codec == Compression.SNAPPY:
        return _snappy_xerial_encode(data)
    if codec == Compression.ZSTD:
        return bytes(cramjam.zstd.compress(data, level=_ZSTD_LEVEL if level is None else level))
    if codec == Compression.GZIP:
        # -1 is zlib's "default" (6), which cramjam's unsigned level cannot take.
        gzip_level = _GZIP_LEVEL if level is None or level == -1 else level
        return bytes(cramjam.gzip.compress(data, level=gzip_level))
    raise ValueError(f"unknown compression codec {codec!r}")


def decompress(
    codec: Compression | int, data: Buffer, *, max_size: int = DEFAULT_MAX_DECOMPRESSED_SIZE
) -> bytes:
    """Decompress ``data``; raise :class:`DecompressionError` on bad input or > ``max_size``."""
    if codec == Compression.NONE:
        return bytes(data)
    if codec == Compression.SNAPPY:
        return _snappy_decode(data, max_size)
    if codec == Compression.LZ4:
        return _bounded(cramjam.lz4, data, max_size)
    if codec == Compression.ZSTD:
        return _bounded(cramjam.zstd, data, max_size)
    if codec == Compression.GZIP:
        return _bounded(cramjam.gzip, data, max_size)
    raise DecompressionError(f"unknown compression codec {codec}")


def _bounded(module: object, data: Buffer, max_size: int) -> bytes:
    """Decompress with ``module.decompress_into`` into buffers that never exceed ``max_size``."""
    decompress_into = getattr(module, "decompress_into")  # noqa: B009 - cramjam is untyped
    cap = min(max_size, max(_MIN_GUESS, len(data) * _GROWTH))
    while True:
        out = bytearray(cap)
        try:
            n = int(decompress_into(data, out))
        except Exception as exc:  # cramjam raises its own types; hide them all
            # A full buffer and corrupt input look alike to cramjam; a bigger buffer tells
            # them apart, until the cap is reached.
            if cap < max_size and "whole buffer" in str(exc):
                cap = min(max_size, cap * _GROWTH)
                continue
            if "whole buffer" in str(exc):
                raise DecompressionLimitError(
                    f"decompressed data exceeds the limit of {max_size} bytes"
                ) from exc
            raise DecompressionError(f"corrupt compressed data: {exc}") from exc
        if n < 0 or n > cap:  # pragma: no cover - defensive against a misbehaving codec
            raise DecompressionError("codec reported an impossible output size")
        del out[n:]
        return bytes(out)


def _snappy_xerial_encode(data: Buffer) -> bytes:
    view = memoryview(data)
    parts = [_XERIAL_HEADER]
    for start in range(0, len(view), _XERIAL_BLOCK):
        block = bytes(cramjam.snappy.compress_raw(view[start : start + _XERIAL_BLOCK]))
        parts.append(_INT32.pack(len(block)))
        parts.append(block)
    return b"".join(parts)


def _snappy_raw_block(block: Buffer, budget: int) -> bytes:
    """One raw snappy block, its declared length checked against ``budget`` first."""
    try:
        length = int(cramjam.snappy.decompress_raw_len(block))
    except Exception as exc:
        raise DecompressionError(f"corrupt snappy block: {exc}") from exc
    if length > budget:
        raise DecompressionLimitError("decompressed snappy data exceeds the size limit")
    out = bytearray(length)
    try:
        n = int(cramjam.snappy.decompress_raw_into(block, out))
    except Exception as exc:
        raise DecompressionError(f"corrupt snappy block: {exc}") from exc
    if n != length:
        raise DecompressionError("snappy block shorter than its declared length")
    return bytes(out)


def _snappy_decode(data: Buffer, max_size: int) -> bytes:
    raw = bytes(data)
    if not raw.startswith(_XERIAL_MAGIC):
        return _snappy_raw_block(raw, max_size)
    if len(raw) < len(_XERIAL_HEADER):
        raise DecompressionError("truncated xerial snappy header")
    pos = len(_XERIAL_HEADER)
    end = len(raw)
    parts: list[bytes] = []
    budget = max_size
    while pos < end:
        if pos + 4 > end:
            raise DecompressionError("truncated xerial snappy chunk length")
        (size,) = _INT32.unpack_from(raw, pos)
        pos += 4
        if size < 0 or pos + size > end:
            raise DecompressionError("xerial snappy chunk overruns its data")
        block = _snappy_raw_block(raw[pos : pos + size], budget)
        budget -= len(block)
        parts.append(block)
        pos += size
    return b"".join(parts)
