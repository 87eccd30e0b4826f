"""The fake's partition log and Kafka's idempotent-producer rules, on the log alone (no I/O).

What these rules answer on Apache Kafka itself is compared request by request in
``tests/kafka/test_fake_differential.py``; here each rule is pinned on its own.
"""

from __future__ import annotations

import pytest

from aiokafka_ng.protocol.records import RecordBatchBuilder, iter_batches
from aiokafka_ng.testing.fake import _codes as E
from aiokafka_ng.testing.fake._log import INT32_MAX, REMEMBERED_BATCHES, PartitionLog, in_sequence

PID = 4000


def batch(
    n: int = 1, *, pid: int = -1, epoch: int = -1, seq: int = -1, txn: bool = False, ts: int = 1000
) -> bytes:
    b = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
    )
    for i in range(n):
        b.append(ts + i, b"k%d" % i, b"v%d" % i, ())
    return b.build()


def append(log: PartitionLog, data: bytes) -> tuple[int, int]:
    done = log.append(data, now_ms=5000, leader_epoch=3)
    return done.error_code, done.base_offset


def test_offsets_are_assigned_in_order_and_the_stored_batch_says_so() -> None:
    log = PartitionLog()
    assert append(log, batch(3)) == (E.NONE, 0)
    assert append(log, batch(2)) == (E.NONE, 3)
    assert log.high_watermark == log.last_stable_offset == 5
    stored = list(iter_batches(b"".join(log.read(0, 1 << 20, 5, min_one=True))))
    assert [(b.base_offset, b.partition_leader_epoch) for b in stored] == [(0, 3), (3, 3)]
    assert [r.offset for b in stored for r in b.records()] == [0, 1, 2, 3, 4]


def test_a_corrupt_or_oversized_batch_is_refused_and_nothing_is_stored() -> None:
    log = PartitionLog(max_message_bytes=200)
    bad = bytearray(batch(1))
    bad[-1] ^= 0xFF
    assert append(log, bytes(bad))[0] == E.CORRUPT_MESSAGE
    assert append(log, batch(20))[0] == E.MESSAGE_TOO_LARGE
    assert append(log, batch(1) + batch(1))[0] == E.INVALID_RECORD
    assert log.high_watermark == 0 and len(log) == 0


def test_sequences_must_follow_each_other() -> None:
    log = PartitionLog()
    assert append(log, batch(2, pid=PID, epoch=0, seq=0)) == (E.NONE, 0)
    assert append(log, batch(1, pid=PID, epoch=0, seq=2)) == (E.NONE, 2)
    assert append(log, batch(1, pid=PID, epoch=0, seq=5))[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.high_watermark == 3


def test_a_duplicate_of_one_of_the_last_five_batches_gets_its_original_offsets() -> None:
    log = PartitionLog()
    for i in range(REMEMBERED_BATCHES + 1):
        assert append(log, batch(1, pid=PID, epoch=0, seq=i)) == (E.NONE, i)
    # seq 1..5 are remembered: a retry of any of them is acknowledged with its offset.
    assert append(log, batch(1, pid=PID, epoch=0, seq=3)) == (E.NONE, 3)
    assert log.append(batch(1, pid=PID, epoch=0, seq=5), now_ms=0, leader_epoch=0).duplicate
    # seq 0 has been forgotten: no longer a duplicate, and out of order.
    assert append(log, batch(1, pid=PID, epoch=0, seq=0))[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert log.high_watermark == REMEMBERED_BATCHES + 1


def test_an_unknown_producer_may_start_at_any_sequence_then_must_follow_it() -> None:
    # Kafka 4.4 answers so (tests/kafka/test_fake_differential.py found it).
    log = PartitionLog()
    assert append(log, batch(1, pid=PID, epoch=0, seq=7)) == (E.NONE, 0)
    assert append(log, batch(1, pid=PID, epoch=0, seq=0))[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(1, pid=PID, epoch=0, seq=8)) == (E.NONE, 1)


def test_a_new_epoch_restarts_at_zero_and_fences_the_old_one() -> None:
    log = PartitionLog()
    assert append(log, batch(1, pid=PID, epoch=0, seq=0))[0] == E.NONE
    assert append(log, batch(1, pid=PID, epoch=1, seq=1))[0] == E.OUT_OF_ORDER_SEQUENCE_NUMBER
    assert append(log, batch(1, pid=PID, epoch=1, seq=0)) == (E.NONE, 1)
    assert append(log, batch(1, pid=PID, epoch=0, seq=1))[0] == E.INVALID_PRODUCER_EPOCH


def test_sequence_numbers_wrap_after_int32_max() -> None:
    assert in_sequence(INT32_MAX, 0)
    assert not in_sequence(INT32_MAX - 1, 0)
    log = PartitionLog()
    log.append(batch(1, pid=PID, epoch=0, seq=0), now_ms=0, leader_epoch=0)
    log.producers[PID].batches.append((INT32_MAX - 1, INT32_MAX - 1, 0, 0))
    assert append(log, batch(2, pid=PID, epoch=0, seq=INT32_MAX))[0] == E.NONE
    assert append(log, batch(1, pid=PID, epoch=0, seq=1))[0] == E.NONE


def test_transactions_hold_back_the_last_stable_offset_and_aborts_are_indexed() -> None:
    log = PartitionLog()
    append(log, batch(1))
    assert append(log, batch(2, pid=PID, epoch=0, seq=0, txn=True)) == (E.NONE, 1)
    assert (log.high_watermark, log.last_stable_offset) == (3, 1)
    marker = log.write_marker(PID, 0, commit=False, coordinator_epoch=0, now_ms=0, leader_epoch=0)
    assert marker == 3
    assert (log.high_watermark, log.last_stable_offset) == (4, 4)
    assert log.aborted == [(PID, 1, 3)]
    assert log.aborted_between(0, 2) == [(PID, 1)]
    assert log.aborted_between(4, 10) == []


def test_log_append_time_replaces_the_timestamps() -> None:
    log = PartitionLog(log_append_time=True)
    done = log.append(batch(2, ts=10), now_ms=777, leader_epoch=0)
    assert (done.error_code, done.log_append_time) == (E.NONE, 777)
    (stored,) = iter_batches(log.batches[0].data)  # the CRC still verifies
    assert [r.timestamp for r in stored.records()] == [777, 777]


@pytest.mark.parametrize("timestamp, expected", [(0, (0, 1000)), (1001, (1, 1001)), (9999, None)])
def test_offset_for_timestamp(timestamp: int, expected: tuple[int, int] | None) -> None:
    log = PartitionLog()
    append(log, batch(3, ts=1000))
    assert log.offset_for_timestamp(timestamp) == expected
    assert log.max_timestamp() == (2, 1002)


def test_delete_records_moves_the_start_and_forgets_producers_with_no_batch_left() -> None:
    log = PartitionLog()
    append(log, batch(2, pid=PID, epoch=0, seq=0, ts=50))  # offsets 0-1
    append(log, batch(3, ts=10))  # offsets 2-4
    log.delete_records(3)
    assert log.log_start_offset == 3
    assert PID not in log.producers
    # Kafka 4.4: a time lookup answers no offset below the start; the largest timestamp still
    # counts records below it while their segment (here: batch) is kept.
    assert log.offset_for_timestamp(0) == (3, 11)
    assert log.max_timestamp() == (1, 51)


def epoch_append(log: PartitionLog, epoch: int, n: int = 1) -> int:
    done = log.append(batch(n), now_ms=5000, leader_epoch=epoch)
    assert done.error_code == E.NONE
    return done.base_offset


def test_the_leader_epoch_cache_answers_as_kafkas_end_offset_for() -> None:
    """LeaderEpochFileCache.endOffsetFor: the latest epoch ends at the log end; an older
    one where the next known epoch starts, named by the largest known epoch <= it."""
    log = PartitionLog()
    log.assign_epoch(1, 0)  # a leader in epoch 1 from offset 0
    epoch_append(log, 1, 3)  # 0..2
    log.assign_epoch(2, 3)  # a leader that writes nothing...
    log.assign_epoch(3, 3)  # ...is forgotten when the next epoch starts at the same offset
    epoch_append(log, 3, 2)  # 3..4
    assert log.epochs == [(1, 0), (3, 3)]
    assert log.end_offset_for(3) == (3, 5)
    assert log.end_offset_for(1) == (1, 3)
    assert log.end_offset_for(2) == (1, 3)  # unknown: the largest epoch below it
    assert log.end_offset_for(0) == (0, 0)  # below every epoch: the first one's start
    assert log.end_offset_for(4) == (-1, -1)  # above every epoch
    assert log.end_offset_for(-1) == (-1, -1)
    # An append in a newer epoch starts that epoch at its base offset.
    assert epoch_append(log, 5) == 5
    assert log.epochs[-1] == (5, 5) and log.end_offset_for(3) == (3, 5)


def test_truncation_cuts_the_log_the_epoch_cache_and_the_producer_state() -> None:
    log = PartitionLog()
    log.assign_epoch(0, 0)
    assert append(log, batch(2, pid=PID, epoch=0, seq=0)) == (E.NONE, 0)  # 0..1, epoch 3
    log.assign_epoch(4, 2)
    assert log.append(batch(3, pid=PID, epoch=0, seq=2), now_ms=1, leader_epoch=4).base_offset == 2
    with pytest.raises(ValueError, match="batch boundary"):
        log.truncate(3)
    log.truncate(2)
    assert log.log_end_offset == log.high_watermark == 2
    assert log.epochs == [(3, 0)]  # epoch 0 started where epoch 3 did: replaced
    assert [r.offset for b in iter_batches(b"".join(log.read(0, 1 << 20, 9, min_one=True)))
            for r in b.records()] == [0, 1]  # fmt: skip
    # The producer's last batch on the log is the one at seq 0-1: seq 2 follows it again.
    assert append(log, batch(1, pid=PID, epoch=0, seq=2)) == (E.NONE, 2)
