"""Kafka's producer-epoch rules in the cluster simulator, mapped onto what Tansu accepts.

Why this exists
---------------
An idempotent producer that gets OUT_OF_ORDER_SEQUENCE_NUMBER for a batch it cannot explain
(librdkafka and the Java client do this, KIP-360) bumps its epoch *itself*: it sends the
next batches with ``epoch + 1`` and sequences restarting at 0, without asking the broker.
Kafka accepts that: per partition, a batch with a newer epoch than the partition has seen is
appended when its sequence is 0 (OUT_OF_ORDER_SEQUENCE_NUMBER otherwise), and after it a
batch with the older epoch gets INVALID_PRODUCER_EPOCH. Tansu 0.6.0 answers the bumped epoch
with PRODUCER_FENCED, and refuses the bump through InitProducerId as well, so through the
simulator a correct client failed where a real cluster would have let it recover.

Theory of operation
-------------------
* InitProducerId answers are watched: ``granted[pid]`` is the newest epoch the broker itself
  handed out for a producer id (transactions bump epochs that way; those pass untouched).
* A Produce batch whose epoch is newer than the broker granted is a client-side bump. Before
  the request is planned, :meth:`ProducerEpochs.prepare` asks the real broker, on a
  connection of its own, for a fresh producer id for that ``(pid, epoch)``; all partitions of
  that bumped epoch share it. Tansu starts the fresh id at sequence 0, as Kafka restarts the
  bumped epoch.
* :meth:`ProducerEpochs.admit` runs for each partition about to be forwarded: it applies
  Kafka's per-partition epoch checks (older epoch than written: INVALID_PRODUCER_EPOCH; newer
  epoch with a sequence other than 0: OUT_OF_ORDER_SEQUENCE_NUMBER), records the epoch as
  written, and rewrites the batch headers of a bumped epoch to the fresh id (new CRC).
  Produce answers carry no producer id, so nothing needs translating back.
"""

from __future__ import annotations

import struct
from collections.abc import Iterator

import anyio
from anyio.streams.buffered import BufferedByteReceiveStream
from crc32c import crc32c

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import decode_request, decode_response, encode_request
from aiokafka_ng.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokafka_ng.protocol.messages.produce import ProduceRequest

__all__ = ["INVALID_PRODUCER_EPOCH", "OUT_OF_ORDER_SEQUENCE", "ProducerEpochs"]

INVALID_PRODUCER_EPOCH = 47
OUT_OF_ORDER_SEQUENCE = 45
_INIT_VERSION = 4  # Tansu 0.6.0 fails InitProducerId v0-v2
# Record batch v2 header: the fields this module reads and writes.
_LENGTH = struct.Struct(">i")  # at 8: bytes after this field
_MAGIC_AT, _CRC_AT, _ATTRIBUTES_AT = 16, 17, 21
_PRODUCER = struct.Struct(">qhi")  # at 43: producer id, epoch, base sequence
_PRODUCER_AT = 43
_CRC = struct.Struct(">I")
_HEADER_SIZE = 61

TP = tuple[str, int]


def _batches(records: bytes) -> Iterator[tuple[int, int]]:
    """(start, end) of each complete v2 batch in ``records``."""
    pos = 0
    while pos + _HEADER_SIZE <= len(records):
        (length,) = _LENGTH.unpack_from(records, pos + 8)
        end = pos + 12 + length
        if length < _HEADER_SIZE - 12 or end > len(records) or records[pos + _MAGIC_AT] != 2:
            return
        yield pos, end
        pos = end


class ProducerEpochs:
    """Producer-epoch state of one simulated cluster (see the module docstring)."""

    def __init__(self, upstream: tuple[str, int]) -> None:
        self._upstream = upstream
        self.granted: dict[int, int] = {}  # pid -> newest epoch the broker handed out
        self._fresh: dict[tuple[int, int], tuple[int, int]] = {}  # bumped -> broker's id
        self._written: dict[tuple[int, str, int], int] = {}  # (pid, tp) -> epoch written
        self._used: set[tuple[int, int]] = set()  # bumped epochs with a batch forwarded
        self._lock = anyio.Lock()
        #: client-side epoch bumps that had a batch forwarded under a fresh producer id
        self.bumps = 0
        #: partitions answered by the epoch rules (INVALID_PRODUCER_EPOCH, OUT_OF_ORDER)
        self.rejected = 0

    def learn_init(self, response: InitProducerIdResponse) -> None:
        """The broker granted ``(producer_id, producer_epoch)``."""
        if response.error_code == 0 and response.producer_id >= 0:
            pid, epoch = response.producer_id, response.producer_epoch
            self.granted[pid] = max(epoch, self.granted.get(pid, epoch))

    def _bumped(self, pid: int, epoch: int) -> bool:
        granted = self.granted.get(pid)
        if granted is None:  # a producer id from before the simulator: its first epoch is
            self.granted[pid] = granted = epoch  # the one the broker knows
        return epoch > granted

    async def prepare_frame(self, frame: bytes) -> ProduceRequest | None:
        """Decode a Produce frame (size prefix included) and :meth:`prepare` it; None if it
        does not decode or no fresh id could be had (then the broker judges it as it came)."""
        try:
            request = decode_request(memoryview(frame)[4:])[1]
            if not isinstance(request, ProduceRequest):
                return None
            await self.prepare(request)
        except (ProtocolError, OSError, TimeoutError, RuntimeError):
            return None
        return request

    async def prepare(self, request: ProduceRequest) -> None:
        """Obtain a fresh producer id for every client-bumped epoch in ``request``."""
        for topic in request.topic_data:
            for part in topic.partition_data:
                records = part.records or b""
                for start, _ in _batches(records):
                    pid, epoch, _seq = _PRODUCER.unpack_from(records, start + _PRODUCER_AT)
                    if pid >= 0 and self._bumped(pid, epoch) and (pid, epoch) not in self._fresh:
                        await self._allocate(pid, epoch)

    async def _allocate(self, pid: int, epoch: int) -> None:
        async with self._lock:
            if (pid, epoch) in self._fresh:
                return  # another connection got it while this one waited
            init = InitProducerIdRequest(
                transactional_id=None, transaction_timeout_ms=60_000, producer_id=-1
            )
            with anyio.fail_after(10):
                async with await anyio.connect_tcp(*self._upstream) as stream:
                    await stream.send(encode_request(init, _INIT_VERSION, 1, "simulator"))
                    rx = BufferedByteReceiveStream(stream)
                    (size,) = _LENGTH.unpack(await rx.receive_exactly(4))
                    payload = await rx.receive_exactly(size)
            _, answer = decode_response(InitProducerIdResponse, _INIT_VERSION, payload)
            if answer.error_code != 0:
                raise RuntimeError(f"InitProducerId for a bumped epoch: {answer.error_code}")
            self.granted[answer.producer_id] = answer.producer_epoch
            self._fresh[(pid, epoch)] = (answer.producer_id, answer.producer_epoch)

    def admit(self, tp: TP, records: bytes) -> int | bytes | None:
        """Kafka's epoch checks for one partition about to be forwarded.

        Returns an error code (the partition is answered with it, not forwarded), the
        records rewritten onto a fresh producer id, or None (forward unchanged).
        """
        spans = list(_batches(records))
        for start, _ in spans:
            pid, epoch, seq = _PRODUCER.unpack_from(records, start + _PRODUCER_AT)
            if pid < 0:
                continue
            written = self._written.get((pid, *tp))
            if written is not None and epoch < written:
                self.rejected += 1
                return INVALID_PRODUCER_EPOCH
            if written is not None and epoch > written and seq != 0:
                self.rejected += 1
                return OUT_OF_ORDER_SEQUENCE
        out: bytearray | None = None
        for start, end in spans:
            pid, epoch, seq = _PRODUCER.unpack_from(records, start + _PRODUCER_AT)
            if pid < 0:
                continue
            key = (pid, *tp)
            self._written[key] = max(epoch, self._written.get(key, epoch))
            target = self._fresh.get((pid, epoch))
            if target is None:
                continue
            if (pid, epoch) not in self._used:
                self._used.add((pid, epoch))
                self.bumps += 1
            if out is None:
                out = bytearray(records)
            _PRODUCER.pack_into(out, start + _PRODUCER_AT, target[0], target[1], seq)
            crc = crc32c(memoryview(out)[start + _ATTRIBUTES_AT : end])
            _CRC.pack_into(out, start + _CRC_AT, crc)
        return None if out is None else bytes(out)
