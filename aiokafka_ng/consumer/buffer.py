"""Buffered fetch data of one partition, decoded lazily as the application drains it.

A :class:`BufferedFetch` holds the record batches a fetch response brought for one partition
(raw, as received) and hands them out in chunks, one decoded batch at a time, so at most one
batch per partition exists as Python objects. It skips what the application must not see:
batches before the position, control batches (transaction markers) and, for
``read_committed``, batches of aborted transactions, using the response's aborted-transaction
list the way the Java client does: a producer id joins the "aborted" set when the fetch
reaches its first aborted offset and leaves it at that producer's ABORT marker.

*Fetched ahead* (see the fetcher's theory of operation): the answer of the next fetch of a
partition may come while its buffer is still being read. :meth:`BufferedFetch.append`
queues it as a *segment* behind the batches being read; each segment keeps its own
aborted-transaction list, and the set of aborted producer ids starts afresh with it, as
each fetch answer is read on its own (the broker lists in every answer the aborted
transactions overlapping its range, those begun before it included). A segment's bytes are
handed back to the budget (``on_release``) when the next segment starts being read: one
answer's batches share one buffer, so the memory is held until its last batch is done.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import Any, NamedTuple

from aiokafka_ng.consumer.errors import RecordDeserializationError
from aiokafka_ng.consumer.models import ConsumerRecord
from aiokafka_ng.consumer.state import PartitionState
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.messages.fetch import AbortedTransaction
from aiokafka_ng.protocol.records import RecordBatch

__all__ = ["BufferedFetch", "batch_error"]


class _Segment(NamedTuple):
    """One fetch answer queued behind the batches being read."""

    batches: list[RecordBatch]
    size: int
    aborted: list[AbortedTransaction] | None


class BufferedFetch:
    """The unconsumed part of one partition's fetch response (raw batches, decoded lazily)."""

    __slots__ = (
        "_aborted",
        "_aborted_pids",
        "_batches",
        "_index",
        "_on_release",
        "_records",
        "_segment_size",
        "_segments",
        "current",
        "end_epoch",
        "end_offset",
        "epoch",
        "hold",
        "size",
        "state",
    )

    def __init__(
        self,
        state: PartitionState,
        batches: list[RecordBatch],
        size: int,
        aborted: list[AbortedTransaction] | None,
        on_release: Callable[[int], None] | None = None,
    ) -> None:
        self.state = state
        self.epoch = state.epoch
        self.size = size  # bytes held: the segment being read and those queued behind it
        self._batches: deque[RecordBatch] = deque(batches)
        self._segment_size = size
        self._segments: deque[_Segment] = deque()  # answers fetched ahead, in order
        self._on_release = on_release
        # The decoded current batch, as the records the application gets (raw key/value).
        self._records: list[ConsumerRecord[Any, Any]] = []
        self._index = 0  # next record of _records to hand out
        # read_committed: aborted transactions ordered by first offset (None = read all).
        self._aborted: deque[AbortedTransaction] | None = _ordered(aborted)
        self._aborted_pids: set[int] = set()
        self.current: RecordBatch | None = None  # the batch the last record came from
        # Where the next fetch of the partition starts (the end of what is buffered), and
        # the leader epoch of the batch before it (KIP-320's last fetched epoch).
        self.end_offset = state.position or 0
        self.end_epoch = state.leader_epoch
        self._extend_end(batches)
        # Set when an answer fetched ahead must not be acted on while records before it
        # are still buffered (an error, a diverging epoch, nothing kept): the partition is
        # fetched again only once this buffer is drained, from the application's position.
        self.hold = False

    @property
    def exhausted(self) -> bool:
        return self._index >= len(self._records) and not self._batches and not self._segments

    @property
    def ahead(self) -> int:
        """Answers queued behind the batches being read (fetched ahead)."""
        return len(self._segments)

    def append(
        self, batches: list[RecordBatch], size: int, aborted: list[AbortedTransaction] | None
    ) -> None:
        """Queue the answer of a fetch that started at ``end_offset`` (fetched ahead)."""
        self._segments.append(_Segment(batches, size, aborted))
        self.size += size
        self._extend_end(batches)

    def _extend_end(self, batches: list[RecordBatch]) -> None:
        if batches:
            last = batches[-1]
            self.end_offset = max(self.end_offset, last.next_offset)
            self.end_epoch = last.partition_leader_epoch

    def _next_segment(self) -> bool:
        """Start reading the next queued answer; the one read so far is released."""
        if not self._segments:
            return False
        segment = self._segments.popleft()
        done = self._segment_size
        self._batches = deque(segment.batches)
        self._segment_size = segment.size
        self._aborted = _ordered(segment.aborted)
        self._aborted_pids = set()
        self.size -= done
        if done and self._on_release is not None:
            self._on_release(done)
        return True

    def chunk(self, n: int) -> tuple[list[ConsumerRecord[Any, Any]], RecordBatch, bool] | None:
        """Up to ``n`` records at or after the position, all from one batch.

        Returns ``(records, batch, ends_batch)`` or None when nothing is left. When
        ``ends_batch`` the caller moves the position to the batch's ``next_offset``
        (compaction leaves gaps); otherwise just past the last record returned.
        """
        state = self.state
        while self._index >= len(self._records):
            batch = self._next_batch()
            if batch is None:
                return None
            tp = state.tp
            try:
                records: list[ConsumerRecord[Any, Any]] = batch.consumer_records(
                    tp.topic, tp.partition
                )
            except ProtocolError as exc:
                # The position stays at this batch; the caller keeps what came before.
                raise batch_error(exc, tp.topic, tp.partition, batch.base_offset) from exc
            position = state.position or 0
            if records and records[0].offset < position:
                records = [r for r in records if r.offset >= position]
            if not records:
                state.position = max(position, batch.next_offset)
                continue
            self._records = records
            self._index = 0
            self.current = batch
        batch = self.current
        assert batch is not None
        start = self._index
        end = min(start + n, len(self._records))
        self._index = end
        ends = end == len(self._records)
        if ends and not self._batches and not self._segments:
            self._drained()
        return self._records[start:end], batch, ends

    def take_batches(self, max_records: int) -> tuple[list[RecordBatch], int]:
        """Whole batches for a caller that decodes them itself (the Spark source's columnar
        reader): at least one, until about ``max_records`` records; control and aborted
        batches skipped as for records. Returns ``(batches, position)``: records of the
        first batch before ``position`` were already handed out (or were before the seek)
        and are not the caller's. The position moves past the last batch."""
        state = self.state
        position = state.position or 0
        out: list[RecordBatch] = []
        if self._index < len(self._records):
            # A batch partly handed out as records: the rest of it, whole.
            batch = self.current
            assert batch is not None
            self._records = []
            self._index = 0
            out.append(batch)
            max_records -= batch.record_count
            state.position = batch.next_offset
            state.leader_epoch = batch.partition_leader_epoch
        while max_records > 0:
            nxt = self._next_batch()
            if nxt is None:
                break
            out.append(nxt)
            max_records -= max(nxt.record_count, 1)
            state.position = nxt.next_offset
            state.leader_epoch = nxt.partition_leader_epoch
        if not self._batches and not self._segments:
            self._drained()
        return out, position

    def _next_batch(self) -> RecordBatch | None:
        """The next batch with records for the application; skips control/aborted/old ones."""
        state = self.state
        while self._batches or self._next_segment():
            batch = self._batches.popleft()
            position = state.position or 0
            if batch.next_offset <= position:
                continue
            if self._aborted is not None:
                while self._aborted and self._aborted[0].first_offset <= batch.last_offset:
                    self._aborted_pids.add(self._aborted.popleft().producer_id)
                if batch.is_control:
                    try:
                        marker = batch.control_record()
                    except ProtocolError as exc:
                        tp = state.tp
                        raise batch_error(exc, tp.topic, tp.partition, batch.base_offset) from exc
                    if marker is not None and marker.is_abort:
                        self._aborted_pids.discard(batch.producer_id)
                    state.position = batch.next_offset
                    state.leader_epoch = batch.partition_leader_epoch
                    continue
                if batch.is_transactional and batch.producer_id in self._aborted_pids:
                    state.position = batch.next_offset
                    state.leader_epoch = batch.partition_leader_epoch
                    continue
            elif batch.is_control:
                # A skipped batch moves the position, so its epoch is the position's
                # (KIP-320 checks where that epoch ends; an older one could end before).
                state.position = batch.next_offset
                state.leader_epoch = batch.partition_leader_epoch
                continue
            return batch
        self._drained()  # nothing left (what remained were skipped batches)
        return None

    def take_one(
        self,
        key_de: Callable[[bytes | None], Any] | None,
        value_de: Callable[[bytes | None], Any] | None,
    ) -> ConsumerRecord[Any, Any] | None:
        """The next record, or None; a fast path for the common case of take_into(1)."""
        index = self._index
        records = self._records
        batch = self.current
        if index >= len(records) or batch is None or key_de is not None or value_de is not None:
            out: list[ConsumerRecord[Any, Any]] = []
            self.take_into(out, 1, key_de, value_de)
            return out[0] if out else None
        r = records[index]
        self._index = index + 1
        state = self.state
        if index == 0:
            # The batch's first record: from here on the position is in its epoch. Only
            # this buffer moves the position while it lives (anything else drops it), so
            # the epoch is written once a batch, not once a record.
            state.leader_epoch = batch.partition_leader_epoch
        if index + 1 == len(records):
            state.position = batch.next_offset
            if not self._batches and not self._segments:
                self._drained()
        else:
            state.position = r.offset + 1
        return r

    def _drained(self) -> None:
        """The last record went out: every byte held goes back to the budget now (the
        owner drops the empty buffer when it next looks)."""
        size, self.size, self._segment_size = self.size, 0, 0
        if size and self._on_release is not None:
            self._on_release(size)

    def take_into(
        self,
        out: list[ConsumerRecord[Any, Any]],
        n: int,
        key_de: Callable[[bytes | None], Any] | None,
        value_de: Callable[[bytes | None], Any] | None,
    ) -> None:
        """Append up to ``n`` records to ``out``; advance the position.

        Raises RecordDeserializationError (position left at the bad record) or the
        decoding error of a malformed batch.
        """
        # Hot path: the batch was decoded straight into ConsumerRecords, so without
        # deserializers a chunk is one list slice and the position moves once per chunk.
        # Deserializers replace key/value in place: a record is handed out once, and on a
        # failure the caller drops this buffer, so no raw record is seen again.
        state = self.state
        while n > 0:
            chunk = self.chunk(n)
            if chunk is None:
                return
            records, batch, ends = chunk
            if key_de is None and value_de is None:
                out.extend(records)
            else:
                for r in records:
                    try:
                        key = key_de(r.key) if key_de is not None else r.key
                        value = value_de(r.value) if value_de is not None else r.value
                    except Exception as exc:
                        # The position stays at the bad record (the caller drops the
                        # buffer; the record is fetched again if the user retries).
                        state.position = r.offset
                        raise RecordDeserializationError(
                            f"cannot deserialize {r.topic}-{r.partition}@{r.offset}: {exc!r}",
                            r.topic,
                            r.partition,
                            r.offset,
                        ) from exc
                    r.key = key
                    r.value = value
                    out.append(r)
                    state.position = r.offset + 1
            n -= len(records)
            state.position = batch.next_offset if ends else records[-1].offset + 1
            state.leader_epoch = batch.partition_leader_epoch


def _ordered(aborted: list[AbortedTransaction] | None) -> deque[AbortedTransaction] | None:
    """read_committed: aborted transactions by first offset (None: read everything)."""
    return None if aborted is None else deque(sorted(aborted, key=lambda a: a.first_offset))


def batch_error(exc: ProtocolError, topic: str, partition: int, offset: int) -> ProtocolError:
    """``exc`` (a batch's decoding error, CorruptRecordError included) again, of its class,
    naming the partition and the batch's offset: where the application has to ``seek`` past."""
    return type(exc)(f"record batch of {topic}-{partition} at offset {offset}: {exc}")
