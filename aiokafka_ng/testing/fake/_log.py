"""One partition's log in the fake cluster: batches, offsets, producer state, transactions.

Theory of operation
-------------------
A :class:`PartitionLog` stores record batches as the client sent them, with two header
fields rewritten: the base offset (assigned here) and the partition leader epoch. Neither is
covered by the batch CRC, so the records are never re-encoded; a topic with
``message.timestamp.type=LogAppendTime`` also gets its timestamp type and max timestamp set
and the CRC recomputed, as Kafka does.

Live followers replicate at once: an append is below the high watermark as soon as it is
written, unless an in-sync follower has crashed unnoticed (``hw_limit``: the server sets it
from the crash until the cluster fences that follower, and ``acks=all`` produces wait for
it). A leader move keeps the log, as a clean election from the ISR does.

Leader epochs (KIP-101, KIP-320): every batch carries the epoch of the leader that wrote it,
and ``epochs`` is Kafka's leader epoch cache -- (epoch, start offset) in increasing order,
an entry added when a leader takes over (:meth:`PartitionLog.assign_epoch`, at the log end)
or an append brings a newer epoch. :meth:`PartitionLog.end_offset_for` answers
OffsetForLeaderEpoch from it as ``LeaderEpochFileCache.endOffsetFor`` does, and
:meth:`PartitionLog.truncate` cuts the log (and the cache) as a replica that becomes
leader in an unclean election has it.

Idempotent producers follow Kafka's ``ProducerStateManager`` / ``ProducerAppendInfo`` rules
(KIP-98, KIP-360), checked per partition in this order:

1. an epoch below the one the partition knows: ``INVALID_PRODUCER_EPOCH`` (KIP-588);
2. a batch equal (first and last sequence) to one of the last five the producer wrote at
   this epoch: a duplicate, answered with the original batch's offsets and no error;
3. a producer the partition has no state for may start at any sequence (Kafka 4 accepts
   it, as measured against Kafka 4.4: ``UNKNOWN_PRODUCER_ID`` is not answered here); a known
   producer at a new epoch must start at 0, else ``OUT_OF_ORDER_SEQUENCE_NUMBER``;
4. at the same epoch the first sequence must follow the last one written (wrapping from
   2**31-1 to 0): otherwise ``OUT_OF_ORDER_SEQUENCE_NUMBER``.

Transactions: a transactional batch opens the producer's transaction on this partition at
its base offset; a marker (:meth:`PartitionLog.write_marker`) closes it. The last stable
offset is the lowest first offset of an open transaction, else the high watermark. Aborted
transactions are indexed (producer id, first offset, marker offset) for read_committed
fetches, which Kafka answers with the aborted ranges and lets the client skip them.
"""

from __future__ import annotations

import bisect
import struct
from collections import deque
from dataclasses import dataclass, field

from crc32c import crc32c

from aiokafka_ng.protocol.record_reader import CorruptRecordError, iter_batches
from aiokafka_ng.protocol.records import RecordBatchBuilder, control_record_key
from aiokafka_ng.testing.fake._codes import (
    CORRUPT_MESSAGE,
    INVALID_PRODUCER_EPOCH,
    INVALID_RECORD,
    INVALID_TXN_STATE,
    MESSAGE_TOO_LARGE,
    OUT_OF_ORDER_SEQUENCE_NUMBER,
)

__all__ = ["Appended", "BatchInfo", "PartitionLog", "ProducerEntry", "in_sequence"]

#: Batches remembered per producer and partition for duplicate detection (Kafka's
#: ``ProducerStateEntry.NUM_BATCHES_TO_RETAIN``): why max.in.flight is at most 5.
REMEMBERED_BATCHES = 5
INT32_MAX = 2**31 - 1
NO_SEQUENCE = -1

_Q = struct.Struct(">q")
_I = struct.Struct(">i")
_H = struct.Struct(">h")
_BASE_OFFSET_AT = 0
_LEADER_EPOCH_AT = 12
_CRC_AT = 17
_ATTRIBUTES_AT = 21
_MAX_TIMESTAMP_AT = 35
_LOG_APPEND_TIME_BIT = 0x08


def in_sequence(last_seq: int, next_seq: int) -> bool:
    """Kafka's rule: the next sequence follows the last one, wrapping at 2**31-1."""
    return next_seq == last_seq + 1 or (next_seq == 0 and last_seq == INT32_MAX)


@dataclass(slots=True)
class BatchInfo:
    """What the log keeps of a stored batch besides its bytes."""

    base_offset: int
    last_offset: int
    max_timestamp: int
    producer_id: int
    producer_epoch: int
    first_seq: int
    last_seq: int
    transactional: bool
    control: bool
    data: bytes


@dataclass(slots=True)
class ProducerEntry:
    """One producer's state on one partition."""

    epoch: int
    #: The last REMEMBERED_BATCHES batches at ``epoch``: (first seq, last seq, base, last offset).
    batches: deque[tuple[int, int, int, int]] = field(
        default_factory=lambda: deque(maxlen=REMEMBERED_BATCHES)
    )
    #: First offset of the producer's open transaction here, None when there is none.
    txn_first_offset: int | None = None
    coordinator_epoch: int = -1

    @property
    def last_seq(self) -> int:
        return self.batches[-1][1] if self.batches else NO_SEQUENCE


@dataclass(slots=True, frozen=True)
class Appended:
    """The outcome of one append: an error code, or the offsets of the (possibly duplicate)
    batch."""

    error_code: int = 0
    base_offset: int = -1
    log_append_time: int = -1
    message: str | None = None
    duplicate: bool = False


class PartitionLog:
    """The log of one partition. Synchronous, no I/O; time comes in as arguments."""

    def __init__(self, *, max_message_bytes: int = 1048588, log_append_time: bool = False):
        self.batches: list[BatchInfo] = []
        self._last_offsets: list[int] = []  # last offset of each batch, for bisect
        self.log_start_offset = 0
        self.log_end_offset = 0
        self.max_message_bytes = max_message_bytes
        self.log_append_time = log_append_time
        self.producers: dict[int, ProducerEntry] = {}
        #: (producer id, first offset, marker offset) of every aborted transaction.
        self.aborted: list[tuple[int, int, int]] = []
        #: Producer ids allowed to write transactional batches here (KIP-890 verification:
        #: the partition was added to the producer's transaction). None: no verification.
        self.txn_verified: set[int] | None = None
        #: Where the high watermark stops while an in-sync follower has crashed and the
        #: cluster has not noticed yet (it cannot fetch, so nothing past this is committed);
        #: None: followers are in sync and the high watermark is the log end.
        self.hw_limit: int | None = None
        #: The leader epoch cache: (epoch, start offset), epochs and offsets increasing.
        self.epochs: list[tuple[int, int]] = []

    # ---- leader epochs ------------------------------------------------------------------

    def assign_epoch(self, epoch: int, start_offset: int) -> None:
        """``epoch`` starts at ``start_offset``, as Kafka's ``LeaderEpochFileCache.assign``:
        nothing changes for the latest epoch at or after its start; otherwise entries that
        are not below the new one (in epoch and start offset) go first -- so an epoch whose
        leader wrote nothing is forgotten once the next one starts at the same offset."""
        if epoch < 0:
            return
        if self.epochs and self.epochs[-1][0] == epoch and start_offset >= self.epochs[-1][1]:
            return
        while self.epochs and (self.epochs[-1][0] >= epoch or self.epochs[-1][1] >= start_offset):
            self.epochs.pop()
        self.epochs.append((epoch, start_offset))

    def end_offset_for(self, epoch: int) -> tuple[int, int]:
        """(epoch, end offset) for OffsetForLeaderEpoch, as Kafka's
        ``LeaderEpochFileCache.endOffsetFor``: the latest epoch ends at the log end; an
        older one at the start of the first epoch above it, answered with the largest known
        epoch <= the one asked (or the one asked, when it is below every known epoch);
        (-1, -1) for an epoch above all known ones or for -1."""
        if epoch < 0 or not self.epochs:
            return -1, -1
        if epoch == self.epochs[-1][0]:
            return epoch, self.log_end_offset
        i = bisect.bisect_right([e for e, _ in self.epochs], epoch)  # first entry above
        if i == len(self.epochs):
            return -1, -1
        higher_start = self.epochs[i][1]
        return (self.epochs[i - 1][0] if i > 0 else epoch), higher_start

    def truncate(self, offset: int) -> None:
        """Remove everything from ``offset`` (a batch boundary) on: the batches, the epoch
        cache entries starting there or later, the producer state and aborted transactions
        they held -- what a replica's log no longer has after it is truncated."""
        i = self.first_batch_index(offset)
        if i < len(self.batches) and self.batches[i].base_offset != offset:
            raise ValueError(f"offset {offset} is inside a batch; truncate at a batch boundary")
        if offset > self.log_end_offset:
            raise ValueError(f"offset {offset} is past the log end {self.log_end_offset}")
        del self.batches[i:]
        del self._last_offsets[i:]
        self.log_end_offset = offset
        self.log_start_offset = min(self.log_start_offset, offset)
        # Kafka's truncateFromEnd: entries starting at or past the cut go.
        self.epochs = [(e, start) for e, start in self.epochs if start < offset]
        self.aborted = [a for a in self.aborted if a[2] < offset]
        for pid, entry in list(self.producers.items()):
            kept = [b for b in entry.batches if b[2] < offset]
            entry.batches.clear()
            entry.batches.extend(kept)
            if entry.txn_first_offset is not None and entry.txn_first_offset >= offset:
                entry.txn_first_offset = None
            if not kept and entry.txn_first_offset is None:
                del self.producers[pid]

    # ---- reading state ----------------------------------------------------------------

    @property
    def high_watermark(self) -> int:
        if self.hw_limit is not None:
            return min(self.hw_limit, self.log_end_offset)
        return self.log_end_offset

    @property
    def last_stable_offset(self) -> int:
        open_txns = [
            e.txn_first_offset for e in self.producers.values() if e.txn_first_offset is not None
        ]
        return min(open_txns) if open_txns else self.high_watermark

    def __len__(self) -> int:
        return len(self.batches)

    # ---- appending ----------------------------------------------------------------------

    def append(self, records: bytes, *, now_ms: int, leader_epoch: int) -> Appended:
        """Validate and append one produce request's records for this partition."""
        if len(records) > self.max_message_bytes:
            return Appended(MESSAGE_TOO_LARGE, message="the batch is larger than max.message.bytes")
        try:
            parsed = list(iter_batches(records, verify_crc=True))
        except CorruptRecordError:
            return Appended(CORRUPT_MESSAGE, message="record batch CRC mismatch")
        except Exception as exc:  # a batch no reader accepts: Kafka's InvalidRecordException
            return Appended(INVALID_RECORD, message=f"invalid record batch: {exc}")
        if len(parsed) != 1 or parsed[0].size_in_bytes != len(records):
            return Appended(
                INVALID_RECORD,
                message="Produce requests must contain exactly one record batch per partition",
            )
        batch = parsed[0]
        if batch.magic != 2:
            return Appended(INVALID_RECORD, message="Produce v3+ batches must have magic 2")
        if batch.is_control:
            return Appended(INVALID_RECORD, message="clients may not write control batches")
        count = batch.last_offset_delta + 1
        if batch.record_count != count or count < 1:
            return Appended(INVALID_RECORD, message="record count and last offset delta differ")
        pid, epoch, first_seq = batch.producer_id, batch.producer_epoch, batch.base_sequence
        last_seq = NO_SEQUENCE
        entry: ProducerEntry | None = None
        if pid >= 0:
            last_seq = (first_seq + count - 1) % (INT32_MAX + 1) if first_seq >= 0 else first_seq
            verdict = self._check_producer(pid, epoch, first_seq, last_seq)
            if verdict is not None:
                return verdict
            verified = self.txn_verified
            if batch.is_transactional and verified is not None and pid not in verified:
                return Appended(
                    INVALID_TXN_STATE, message="the partition was not added to the transaction"
                )
            entry = self.producers.get(pid)
        elif batch.is_transactional:
            return Appended(INVALID_RECORD, message="a transactional batch needs a producer id")
        base = self.log_end_offset
        self.assign_epoch(leader_epoch, base)
        data = bytearray(records)
        _Q.pack_into(data, _BASE_OFFSET_AT, base)
        _I.pack_into(data, _LEADER_EPOCH_AT, leader_epoch)
        max_ts = batch.max_timestamp
        append_time = -1
        if self.log_append_time:
            append_time = max_ts = now_ms
            attributes = batch.attributes | _LOG_APPEND_TIME_BIT
            _H.pack_into(data, _ATTRIBUTES_AT, attributes)
            _Q.pack_into(data, _MAX_TIMESTAMP_AT, now_ms)
            _I.pack_into(data, _CRC_AT, 0)
            struct.pack_into(">I", data, _CRC_AT, crc32c(memoryview(data)[_ATTRIBUTES_AT:]))
        last = base + count - 1
        self._store(
            BatchInfo(
                base, last, max_ts, pid, epoch, first_seq, last_seq,
                batch.is_transactional, False, bytes(data),
            )
        )  # fmt: skip
        if pid >= 0:
            if entry is None or entry.epoch != epoch:
                keep_txn = entry.txn_first_offset if entry is not None else None
                entry = ProducerEntry(epoch, txn_first_offset=keep_txn)
                self.producers[pid] = entry
            entry.batches.append((first_seq, last_seq, base, last))
            if batch.is_transactional and entry.txn_first_offset is None:
                entry.txn_first_offset = base
        return Appended(0, base, append_time)

    def _check_producer(
        self, pid: int, epoch: int, first_seq: int, last_seq: int
    ) -> Appended | None:
        entry = self.producers.get(pid)
        if entry is not None and epoch < entry.epoch:
            return Appended(
                INVALID_PRODUCER_EPOCH,
                message=f"epoch {epoch} is older than the current epoch {entry.epoch}",
            )
        if entry is not None and epoch == entry.epoch:
            for b_first, b_last, b_base, _b_end in entry.batches:
                if b_first == first_seq and b_last == last_seq:
                    return Appended(0, b_base, -1, duplicate=True)
        if entry is None:
            # A producer the partition has no state for (new, or its batches were deleted):
            # Kafka 4 accepts whatever sequence it starts at (tests/kafka/test_fake_differential).
            return None
        if epoch != entry.epoch:
            if first_seq != 0:
                return Appended(
                    OUT_OF_ORDER_SEQUENCE_NUMBER,
                    message=f"invalid sequence {first_seq} for a new epoch {epoch}",
                )
            return None
        if not in_sequence(entry.last_seq, first_seq):
            return Appended(
                OUT_OF_ORDER_SEQUENCE_NUMBER,
                message=f"out of order sequence {first_seq}, expected {entry.last_seq + 1}",
            )
        return None

    def _store(self, info: BatchInfo) -> None:
        self.batches.append(info)
        self._last_offsets.append(info.last_offset)
        self.log_end_offset = info.last_offset + 1

    def write_marker(
        self, pid: int, epoch: int, *, commit: bool, coordinator_epoch: int, now_ms: int,
        leader_epoch: int,
    ) -> int:  # fmt: skip
        """End ``pid``'s open transaction here with a COMMIT or ABORT control batch.

        Returns the marker's offset. A marker for a producer with no open transaction on
        this partition is still written (Kafka writes markers to every partition the
        coordinator knows of)."""
        builder = RecordBatchBuilder(
            producer_id=pid,
            producer_epoch=epoch,
            base_sequence=NO_SEQUENCE,
            is_transactional=True,
            is_control=True,
            max_size=1 << 20,
        )
        value = struct.pack(">hi", 0, coordinator_epoch)
        builder.append(now_ms, control_record_key(1 if commit else 0), value, ())
        data = bytearray(builder.build())
        base = self.log_end_offset
        self.assign_epoch(leader_epoch, base)
        _Q.pack_into(data, _BASE_OFFSET_AT, base)
        _I.pack_into(data, _LEADER_EPOCH_AT, leader_epoch)
        self._store(
            BatchInfo(base, base, now_ms, pid, epoch, NO_SEQUENCE, NO_SEQUENCE, True, True,
                      bytes(data))
        )  # fmt: skip
        entry = self.producers.get(pid)
        if entry is None or epoch > entry.epoch:
            # A marker at a bumped epoch (fencing, a timeout, every end of a KIP-890
            # transaction) still ends the open transaction: keep where it began.
            began = entry.txn_first_offset if entry is not None else None
            entry = ProducerEntry(epoch, txn_first_offset=began)
            self.producers[pid] = entry
        if entry.txn_first_offset is not None and not commit:
            self.aborted.append((pid, entry.txn_first_offset, base))
        entry.txn_first_offset = None
        entry.coordinator_epoch = coordinator_epoch
        if self.txn_verified is not None:
            self.txn_verified.discard(pid)
        return base

    # ---- reading ------------------------------------------------------------------------

    def first_batch_index(self, offset: int) -> int:
        """Index of the batch holding ``offset`` (or the first after it)."""
        return bisect.bisect_left(self._last_offsets, offset)

    def read(self, offset: int, max_bytes: int, upto: int, *, min_one: bool) -> list[bytes]:
        """Whole batches from the one holding ``offset``, below ``upto``, within ``max_bytes``
        (the first batch even if larger, when ``min_one``: KIP-74)."""
        out: list[bytes] = []
        size = 0
        for info in self.batches[self.first_batch_index(offset) :]:
            if info.base_offset >= upto:
                break
            if size + len(info.data) > max_bytes and (out or not min_one):
                break
            out.append(info.data)
            size += len(info.data)
        return out

    def aborted_between(self, start: int, end: int) -> list[tuple[int, int]]:
        """(producer id, first offset) of aborted transactions overlapping [start, end)."""
        return [
            (pid, first) for pid, first, marker in self.aborted if first < end and marker >= start
        ]

    def offset_for_timestamp(self, timestamp: int) -> tuple[int, int] | None:
        """(offset, timestamp) of the first record at or after ``timestamp`` (by batch max
        timestamp, then record timestamps), None when there is none."""
        for info in self.batches[self.first_batch_index(self.log_start_offset) :]:
            if info.control or info.max_timestamp < timestamp:
                continue
            for batch in iter_batches(info.data, verify_crc=False):
                for record in batch.records():
                    if record.timestamp >= timestamp and record.offset >= self.log_start_offset:
                        return record.offset, record.timestamp
        return None

    def max_timestamp(self) -> tuple[int, int] | None:
        """(offset, timestamp) of the record with the largest timestamp (ListOffsets -3).

        Records below the log start still count while their batch is kept: Kafka reads the
        segment's time index and deletes only whole segments (measured on Kafka 4.4)."""
        best: tuple[int, int] | None = None
        for info in self.batches:
            if info.control:
                continue
            for batch in iter_batches(info.data, verify_crc=False):
                for record in batch.records():
                    if best is None or record.timestamp > best[1]:
                        best = (record.offset, record.timestamp)
        return best

    def delete_records(self, before: int) -> None:
        """Move the log start offset up to ``before`` (DeleteRecords, retention)."""
        self.log_start_offset = max(self.log_start_offset, min(before, self.log_end_offset))
        # The batches stay, as records stay in a Kafka segment until the whole segment goes
        # (the fake has one segment); reads start at the log start offset.
        first = self.first_batch_index(self.log_start_offset)
        live = {b.producer_id for b in self.batches[first:] if b.producer_id >= 0}
        for pid in [
            p for p, e in self.producers.items() if p not in live and e.txn_first_offset is None
        ]:
            del self.producers[pid]
