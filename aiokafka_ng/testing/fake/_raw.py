"""Raw frames: an answer a script writes byte for byte (:class:`RawFrames`).

A script's ``bytes`` answer is a response *body*: the fake frames it with the request's
correlation id, so it can only be wrong inside the body. Connection tests need answers
that are wrong in the framing itself -- a negative or 2 GiB size prefix, a frame too short
for a header, another request's correlation id, two answers to one request -- which only
a fake can send and no Kafka model would. A script returns ``RawFrames(...)`` for those:
its parts go to the connection exactly as given, nothing added, as the answer to the
request the script got (it counts as answered in :meth:`FakeKafka.in_flight`).

Parts are written in pieces of at most :data:`PIECE` bytes, sliced from memoryviews: a
test can answer with a 90 MB frame made once and shared by every request, and the fake
copies no more than one piece of it at a time.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import ClassVar

__all__ = ["PIECE", "RawFrames"]

#: The largest write the fake makes of a raw answer.
PIECE = 1 << 20


class RawFrames:
    """Bytes written to the connection as they are: ``RawFrames(b"\\xff\\xff\\xff\\xf0")``
    (a negative size), ``RawFrames(frame, frame)`` (one answer, twice), or a big template
    with its correlation id spliced in: ``RawFrames(t[:4], cid, memoryview(t)[8:])``."""

    __slots__ = ("parts",)
    PIECE: ClassVar[int] = PIECE

    def __init__(self, *parts: bytes | bytearray | memoryview) -> None:
        self.parts = parts

    def __repr__(self) -> str:
        return f"<RawFrames {len(self)} bytes>"

    def __len__(self) -> int:
        return sum(len(memoryview(p)) for p in self.parts)

    def pieces(self) -> Iterator[bytes]:
        """The bytes to write, in order, each at most :data:`PIECE` long."""
        for part in self.parts:
            view = memoryview(part).cast("B")
            for start in range(0, len(view), PIECE):
                yield bytes(view[start : start + PIECE])
