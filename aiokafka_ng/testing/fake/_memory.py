"""An in-memory, bidirectional byte stream pair: a client's connection to the fake without
a socket, so that a test on virtual time (trio's ``MockClock``) never waits on the kernel."""

from __future__ import annotations

import math

import anyio
import anyio.abc
from anyio.streams.memory import MemoryObjectReceiveStream, MemoryObjectSendStream

__all__ = ["MemoryByteStream", "stream_pair"]

#: Writes buffered per direction before a writer waits for its reader.
_BUFFERED_WRITES = 1024


class MemoryByteStream(anyio.abc.ByteStream):
    """One end: writes go to the peer's reads. ``receive`` returns what one ``send`` wrote
    (or a part of it); EOF after the peer's ``send_eof`` or ``aclose``."""

    def __init__(
        self, tx: MemoryObjectSendStream[bytes], rx: MemoryObjectReceiveStream[bytes]
    ) -> None:
        self._tx = tx
        self._rx = rx
        self._pending = b""

    async def receive(self, max_bytes: int = 65536) -> bytes:
        if not self._pending:
            try:
                self._pending = await self._rx.receive()
            except anyio.EndOfStream:
                raise
        chunk, self._pending = self._pending[:max_bytes], self._pending[max_bytes:]
        return chunk

    async def send(self, item: bytes) -> None:
        if item:
            await self._tx.send(bytes(item))

    async def send_eof(self) -> None:
        self._tx.close()

    async def aclose(self) -> None:
        self._tx.close()
        self._rx.close()
        await anyio.lowlevel.checkpoint()

    def close_now(self) -> None:
        """Close both directions without a checkpoint (a fault cutting the link)."""
        self._tx.close()
        self._rx.close()


def stream_pair(buffered: float = _BUFFERED_WRITES) -> tuple[MemoryByteStream, MemoryByteStream]:
    """(client end, server end)."""
    size = math.inf if buffered == math.inf else int(buffered)
    a_tx, b_rx = anyio.create_memory_object_stream[bytes](size)
    b_tx, a_rx = anyio.create_memory_object_stream[bytes](size)
    return MemoryByteStream(a_tx, a_rx), MemoryByteStream(b_tx, b_rx)
