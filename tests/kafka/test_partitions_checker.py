"""The partition checker's evidence rules (tests/kafka/partitions.py), without a cluster:
which lost records an unclean election explains. A rule too wide hides a client's loss;
too narrow, it blames a client for Kafka's. The lines are a Kafka 4.4 node's, as logged in
a lone-leader run."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from tests.kafka.partitions import (
    PartitionState,
    Reader,
    Truncation,
    _acked_offset,
    _explained,
    _read_again_after_election,
    _redelivered_by_client,
    _replaced_by_broker,
)

_UNIFIED = "WARN [UnifiedLog partition={tp}, dir=/tmp/x/node-1/data] Truncating {tp} to offset"
LINES = (
    "[{t0}] INFO [ReplicaFetcher replicaId=1, leaderId=2, fetcherId=0] Truncating partition "
    "part-7-1 with TruncationState(offset=0, completed=true) due to local high watermark 0 "
    "(kafka.server.ReplicaFetcherThread)\n"
    + "".join(
        f"[{{{t}}}] {_UNIFIED.format(tp=tp)} {offset} below high watermark {hw} "
        "(org.apache.kafka.storage.internals.log.UnifiedLog)\n"
        for t, tp, offset, hw in (
            ("t1", "part-7-10", 5, 99),
            ("t1", "part-7-1", 30, 363),
            ("t2", "part-7-1", 400, 420),
        )
    )
)


def _stamp(wall: float) -> str:
    return (
        time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(wall)) + f",{int(wall * 1000) % 1000:03d}"
    )


def test_the_old_leaders_truncation_is_read_from_its_log(tmp_path: Path) -> None:
    to_wall = time.time() - time.monotonic()
    start = time.monotonic() - 100  # the fault's start; the lines below follow it
    log = tmp_path / "server.log"
    log.write_text(
        LINES.format(
            t0=_stamp(start + to_wall - 50),
            t1=_stamp(start + to_wall + 20.25),
            t2=_stamp(start + to_wall + 60),
        )
    )
    found = _replaced_by_broker(log, "part-7", 1, start, start + 40)
    assert found is not None
    (offset, high_watermark), at = found
    # part-7-10's line is another partition's; the line at +60 s another fault's.
    assert (offset, high_watermark) == (30, 363)
    assert abs(at - (start + 20.25)) < 0.01
    assert _replaced_by_broker(log, "part-7", 1, start + 40, start + 80) is not None
    assert _replaced_by_broker(log, "part-7", 2, start, start + 80) is None
    assert _replaced_by_broker(tmp_path / "missing.log", "part-7", 1, start, start + 40) is None


def _truncation() -> Truncation:
    t = Truncation(1)
    t.before = PartitionState(leader=1, epoch=0, isr=(1,), end=360)
    t.after = PartitionState(leader=2, epoch=1, isr=(2, 3))
    t.elected_at = 100.0
    t.diverged_at = 30
    t.replaced, t.replaced_at = (30, 363), 110.0
    return t


def test_an_old_leaders_late_acknowledgement_is_kafkas_until_it_truncates() -> None:
    t = _truncation()
    # Before the election, past the divergence: the election replaced it (both rules).
    assert t.explains(1, 200, 99.0)
    # After the election, below the old leader's high watermark, before it truncated: the
    # old leader acknowledged it alone, not yet told of the new epoch (a zombie leader).
    assert t.explains(1, 361, 105.0)
    # The same offset acknowledged after the old leader truncated: nobody's log had it.
    assert not t.explains(1, 361, 111.0)
    # At or past the high watermark the old leader gave up: it never acknowledged that.
    assert not t.explains(1, 363, 105.0)
    # Below the divergence the logs agree: a loss there is not the election's.
    assert not t.explains(1, 29, 99.0)
    # Another partition, or no offset: not explained.
    assert not t.explains(0, 200, 99.0)
    assert not t.explains(1, None, 99.0)


def test_without_the_brokers_word_only_acknowledgements_before_the_election_count() -> None:
    t = _truncation()
    t.replaced = t.replaced_at = None
    assert t.explains(1, 200, 99.0)
    assert not t.explains(1, 200, 105.0)


def test_an_offset_the_producer_was_not_told_is_placed_between_its_neighbours() -> None:
    state: Any = SimpleNamespace(acked_offset={57: 19, 63: 21, 66: 22, 72: 30})
    assert _acked_offset(state, 63) == 21
    assert _acked_offset(state, 60) == 20  # 57 at 19, 63 at 21: 60 was at 20
    assert _acked_offset(state, 69) is None  # 66 at 22, 72 at 30: anywhere between
    assert _acked_offset(state, 54) is None  # no neighbour before it


def test_a_late_loss_was_acknowledged_after_the_election_of_a_truncation_explaining_it() -> None:
    t = _truncation()
    # Another fault on the same partition, elected earlier, whose divergence is past every
    # offset here: it explains none of them, so its election makes none late.
    other = Truncation(1)
    other.elected_at, other.diverged_at = 50.0, 1000
    state: Any = SimpleNamespace(
        windows=[SimpleNamespace(truncations=[other]), SimpleNamespace(truncations=[t])],
        # seq -> partition seq % 3: 1, 4, 7 and 10 on partition 1, 0 on partition 0.
        acked_at={0: 99.0, 1: 99.0, 4: 105.0, 7: 111.0, 10: 99.0},
        acked_offset={0: 200, 1: 200, 4: 361, 7: 361},  # 10: told none, no neighbours
    )
    truncated, late = _explained(state, [0, 1, 4, 7, 10])
    # 1: replaced by the election (acknowledged before it; after the other's election,
    # which does not explain it). 4: the old leader's late acknowledgement. 7: after the
    # old leader truncated. 10: no offset. 0: another partition.
    assert truncated == [1, 4]
    assert late == [4]
    assert _explained(state, [4, 1]) == ([4, 1], [4])  # in the order of the lost


def test_a_duplicate_is_kafkas_when_its_other_copies_were_read_where_the_election_replaced() -> (
    None
):
    t = _truncation()  # partition 1: the old leader truncated [30, 363)
    # seq 4 (partition 1) is at 370 in the log read back: read first at 200 from the old
    # leader (replaced), then again at 370 from the new one.
    assert t.replaces(1, 200) and not t.replaces(1, 363) and not t.replaces(0, 200)
    assert _read_again_after_election(4, [200, 370], (1, 370), [t])
    # Both copies read at the offset the record still has: the loop read it twice.
    assert not _read_again_after_election(4, [370, 370], (1, 370), [t])
    # A copy read at an offset the election did not replace (below the divergence).
    assert not _read_again_after_election(4, [29, 370], (1, 370), [t])
    # Another partition's record (seq 3: partition 0) at offsets partition 1 lost.
    assert not _read_again_after_election(3, [200, 370], (0, 370), [t])
    # Not in the log read back at all: both copies from the replaced range.
    assert _read_again_after_election(4, [200, 250], None, [t])
    # Without the broker's word: from the divergence to the old leader's end (360).
    t.replaced = None
    assert _read_again_after_election(4, [359, 370], (1, 370), [t])
    assert not _read_again_after_election(4, [360, 370], (1, 370), [t])


def test_a_record_read_again_below_a_commit_is_kafkas_when_its_first_offset_was_replaced() -> None:
    t = _truncation()  # partition 1: the old leader truncated [30, 363)
    reader = Reader("ours", "g")
    # seqs 4, 7, 10 are partition 1's, 3 partition 0's.
    reader.delivered(4, 1, 200)  # from the old leader, alone in the ISR
    reader.delivered(7, 1, 29)  # below the divergence: the election kept it
    reader.delivered(3, 0, 200)  # another partition
    reader.commits.update({0: 300, 1: 362})
    # Back at the divergence (30): 4 was written again by the producer, never told the
    # old leader had it; 7 and 3 read again at the offsets they had: the client went back.
    reader.delivered(4, 1, 40)
    reader.delivered(7, 1, 29)
    reader.delivered(3, 0, 200)
    reader.delivered(10, 1, 41)  # a first delivery is never a redelivery
    assert reader.redelivered == [4, 7, 3]
    placed = {4: (1, 40), 7: (1, 29), 3: (0, 200), 10: (1, 41)}  # the log read back
    assert _redelivered_by_client(reader, placed, [t]) == ([7, 3], [4])
    assert _redelivered_by_client(reader, placed, []) == ([4, 7, 3], [])
