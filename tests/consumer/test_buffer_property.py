"""BufferedFetch against a model: random logs of plain, transactional and control batches.

Whatever the starting position and however the application drains (chunk sizes), the
records handed out are exactly the model's: everything at or after the position, minus
control records, minus (with read_committed) the records of aborted transactions; and the
position ends at the log end.
"""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

from aiokafka_ng.consumer.buffer import BufferedFetch
from aiokafka_ng.consumer.models import ConsumerRecord, TopicPartition
from aiokafka_ng.consumer.state import PartitionState
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.messages.fetch import AbortedTransaction
from aiokafka_ng.protocol.record_columns import RecordColumns
from aiokafka_ng.protocol.records import (
    ControlRecordType,
    RecordBatch,
    RecordBatchBuilder,
    control_record_key,
    iter_batches,
)

# One step of the log: (kind, producer id, record count, codec)
#   kind 0: plain batch; 1: transactional batch of pid; 2: commit pid's txn; 3: abort it.
steps = st.lists(
    st.tuples(
        st.integers(0, 3),
        st.integers(1, 3),
        st.integers(1, 4),
        st.sampled_from([Compression.NONE, Compression.LZ4]),
    ),
    max_size=25,
)


def build_log(
    plan: list[tuple[int, int, int, Compression]],
) -> tuple[
    bytes,
    list[tuple[AbortedTransaction, int]],
    list[tuple[int, bytes]],
    list[tuple[int, bytes]],
]:
    """Returns (log, aborted transactions with their marker offsets, model for
    read_uncommitted, model for read_committed)."""
    blob = bytearray()
    offset = 0
    open_txn: dict[int, list[tuple[int, bytes]]] = {}  # pid -> its records so far
    first_offset: dict[int, int] = {}
    aborted: list[AbortedTransaction] = []
    abort_markers: list[int] = []  # offset of each aborted transaction's ABORT marker
    uncommitted: list[tuple[int, bytes]] = []
    committed: list[tuple[int, bytes]] = []

    def data_batch(pid: int, n: int, codec: Compression, txn: bool) -> list[tuple[int, bytes]]:
        nonlocal offset
        b = RecordBatchBuilder(
            compression=codec,
            max_size=1 << 20,
            base_offset=offset,
            producer_id=pid if txn else -1,
            producer_epoch=0 if txn else -1,
            base_sequence=0 if txn else -1,
            is_transactional=txn,
        )
        records = []
        for i in range(n):
            value = b"%d:%d" % (offset + i, pid)
            b.append(1, None, value)
            records.append((offset + i, value))
        blob.extend(b.build())
        offset += n
        return records

    def marker(pid: int, kind: ControlRecordType) -> None:
        nonlocal offset
        b = RecordBatchBuilder(
            base_offset=offset, producer_id=pid, producer_epoch=0, is_transactional=True,
            is_control=True,
        )  # fmt: skip
        b.append(1, control_record_key(kind), struct.pack(">hi", 0, 0))
        blob.extend(b.build())
        offset += 1

    for kind, pid, n, codec in plan:
        if kind == 0:
            records = data_batch(-1, n, codec, txn=False)
            uncommitted.extend(records)
            committed.extend(records)
        elif kind == 1:
            first_offset.setdefault(pid, offset)
            records = data_batch(pid, n, codec, txn=True)
            open_txn.setdefault(pid, []).extend(records)
            uncommitted.extend(records)
        elif pid in open_txn:
            records = open_txn.pop(pid)
            if kind == 2:
                marker(pid, ControlRecordType.COMMIT)
                committed.extend(records)
            else:
                aborted.append(AbortedTransaction(producer_id=pid, first_offset=first_offset[pid]))
                abort_markers.append(offset)
                marker(pid, ControlRecordType.ABORT)
            del first_offset[pid]
    for pid in sorted(open_txn):  # close what is open: read_committed stops at the LSO
        marker(pid, ControlRecordType.COMMIT)
        committed.extend(open_txn[pid])
    committed.sort()
    return bytes(blob), list(zip(aborted, abort_markers, strict=True)), uncommitted, committed


def _fetched(
    plan: list[tuple[int, int, int, Compression]], read_committed: bool, start_fraction: float
) -> tuple[BufferedFetch, int, int, list[tuple[int, bytes]]]:
    """A BufferedFetch of the log from a position at ``start_fraction`` of it, as a fetch
    response brings it; with the start, the log end and the records the model expects."""
    blob, aborted, uncommitted, committed = build_log(plan)
    batches = list(iter_batches(blob))
    end = batches[-1].next_offset if batches else 0
    start = int(end * start_fraction)
    state = PartitionState(TopicPartition("t", 0), needs_committed=False)
    state.seek(start)
    kept = [b for b in batches if b.next_offset > start]
    # A broker lists the aborted transactions that end at or after the fetch offset.
    listed = [a for a, marker_offset in aborted if marker_offset >= start]
    buf = BufferedFetch(state, kept, len(blob), listed if read_committed else None)
    return buf, start, end, committed if read_committed else uncommitted


@settings(max_examples=200, deadline=None)
@given(
    plan=steps,
    read_committed=st.booleans(),
    start_fraction=st.floats(0, 1),
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=5),
)
def test_buffered_fetch_matches_model(
    plan: list[tuple[int, int, int, Compression]],
    read_committed: bool,
    start_fraction: float,
    chunks: list[int],
) -> None:
    buf, start, end, model = _fetched(plan, read_committed, start_fraction)
    state = buf.state
    out: list[ConsumerRecord[bytes | None, bytes | None]] = []
    turn = 0
    while not buf.exhausted:
        buf.take_into(out, chunks[turn % len(chunks)], None, None)
        turn += 1
        assert turn < 10_000
    assert [(r.offset, r.value) for r in out] == [(o, v) for o, v in model if o >= start]
    assert state.position == max(start, end)


@settings(max_examples=200, deadline=None)
@given(
    plan=steps,
    read_committed=st.booleans(),
    start_fraction=st.floats(0, 1),
    chunks=st.lists(st.integers(0, 7), min_size=1, max_size=5),
)
def test_whole_batches_decoded_into_columns_match_model(
    plan: list[tuple[int, int, int, Compression]],
    read_committed: bool,
    start_fraction: float,
    chunks: list[int],
) -> None:
    """take_batches (the Spark source's columnar path), mixed with take_into, hands out the
    same records: whole batches decoded from the returned position by RecordColumns."""
    buf, start, end, model = _fetched(plan, read_committed, start_fraction)
    state = buf.state
    got: list[tuple[int, bytes | None]] = []
    turn = 0
    while not buf.exhausted:
        n = chunks[turn % len(chunks)]
        turn += 1
        assert turn < 10_000
        if n == 0 or turn % 2:  # alternate: whole batches, then a few records
            taken, position = buf.take_batches(max(n, 1) * 3)
            columns = RecordColumns()
            for batch in taken:
                columns.add_batch(batch, position, 2**63)
            got.extend(zip(columns.offsets(), _values(columns), strict=True))
        else:
            out: list[ConsumerRecord[bytes | None, bytes | None]] = []
            buf.take_into(out, n, None, None)
            got.extend((r.offset, r.value) for r in out)
    assert got == [(o, v) for o, v in model if o >= start]
    assert state.position == max(start, end)


def _values(columns: RecordColumns) -> list[bytes | None]:
    out: list[bytes | None] = []
    begin = 0
    for end, valid in zip(columns.value_ends(), columns.value_valid, strict=True):
        out.append(bytes(columns.values[begin:end]) if valid else None)
        begin = end
    return out


@settings(max_examples=200, deadline=None)
@given(
    plan=steps,
    read_committed=st.booleans(),
    start_fraction=st.floats(0, 1),
    cuts=st.lists(st.integers(1, 6), min_size=1, max_size=6),
    chunks=st.lists(st.integers(1, 7), min_size=1, max_size=5),
)
def test_answers_fetched_ahead_read_as_one_log(
    plan: list[tuple[int, int, int, Compression]],
    read_committed: bool,
    start_fraction: float,
    cuts: list[int],
    chunks: list[int],
) -> None:
    """The log arriving as several answers (the fetcher's fetches ahead), each appended
    while the ones before are read, with the aborted transactions a broker lists for each
    answer's range: the same records as one answer, the position at the log end, every
    byte handed back once, and each answer's start where the one before ended."""
    blob, aborted, uncommitted, committed = build_log(plan)
    model = committed if read_committed else uncommitted
    batches = list(iter_batches(blob))
    end = batches[-1].next_offset if batches else 0
    start = int(end * start_fraction)
    kept = [b for b in batches if b.next_offset > start]
    answers: list[list[RecordBatch]] = []
    i = 0
    while i < len(kept) or not answers:
        n = cuts[len(answers) % len(cuts)]
        answers.append(kept[i : i + n])
        i += n

    def listed(answer: list[RecordBatch], fetch_offset: int) -> list[AbortedTransaction] | None:
        # Kafka lists the aborted transactions overlapping [fetch offset, the answer's end).
        if not read_committed:
            return None
        upper = answer[-1].next_offset if answer else fetch_offset
        return [a for a, marker in aborted if marker >= fetch_offset and a.first_offset < upper]

    released: list[int] = []
    state = PartitionState(TopicPartition("t", 0), needs_committed=False)
    state.seek(start)
    sizes = [sum(b.size_in_bytes for b in answer) for answer in answers]
    buf = BufferedFetch(state, answers[0], sizes[0], listed(answers[0], start), released.append)
    out: list[ConsumerRecord[bytes | None, bytes | None]] = []
    turn = 0
    pending = list(zip(answers[1:], sizes[1:], strict=True))
    while pending or not buf.exhausted:
        if pending and (turn % 2 or buf.exhausted):
            answer, size = pending.pop(0)
            fetch_offset = buf.end_offset  # where the fetch ahead starts
            assert not answer or answer[0].base_offset <= fetch_offset < answer[-1].next_offset
            buf.append(answer, size, listed(answer, fetch_offset))
        n = chunks[turn % len(chunks)]
        if n == 1:
            one = buf.take_one(None, None)
            if one is not None:
                out.append(one)
        else:
            buf.take_into(out, n, None, None)
        turn += 1
        assert turn < 10_000
    assert [(r.offset, r.value) for r in out] == [(o, v) for o, v in model if o >= start]
    assert state.position == max(start, end)
    assert buf.end_offset == max(start, end)
    assert sum(released) == sum(sizes) and buf.size == 0
