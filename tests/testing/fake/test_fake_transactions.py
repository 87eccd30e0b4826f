"""The fake's transaction coordinator, driven with request objects against its logs (no I/O).

Each test pins one of Kafka 4's rules (``TransactionCoordinator.scala``, KIP-98, KIP-360,
KIP-447, KIP-890): what the coordinator answers, and what it leaves in the partition logs
(markers, the last stable offset, the aborted index). Time is a hand-moved clock.
"""

from __future__ import annotations

import pytest

from aiokafka_ng.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aiokafka_ng.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTransaction,
)
from aiokafka_ng.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
)
from aiokafka_ng.protocol.messages.describe_transactions import (
    TransactionState as Described,
)
from aiokafka_ng.protocol.messages.end_txn import EndTxnRequest, EndTxnResponse
from aiokafka_ng.protocol.messages.init_producer_id import (
    InitProducerIdRequest,
    InitProducerIdResponse,
)
from aiokafka_ng.protocol.messages.list_transactions import (
    ListTransactionsRequest,
    ListTransactionsResponse,
)
from aiokafka_ng.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
)
from aiokafka_ng.protocol.record_reader import parse_control_record
from aiokafka_ng.protocol.records import RecordBatchBuilder, iter_batches
from aiokafka_ng.testing.fake import _codes as E
from aiokafka_ng.testing.fake._cluster import Broker, FakeCluster
from aiokafka_ng.testing.fake._log import PartitionLog
from aiokafka_ng.testing.fake._transactions import TransactionCoordinator

pytestmark = pytest.mark.anyio

TID = "orders-tx"
TOPIC = "t"
OPERATION_NOT_ATTEMPTED = E.code("OPERATION_NOT_ATTEMPTED")
TRANSACTION_ABORTABLE = E.code("TRANSACTION_ABORTABLE")
TRANSACTIONAL_ID_NOT_FOUND = E.code("TRANSACTIONAL_ID_NOT_FOUND")
NOT_ENOUGH_REPLICAS = E.code("NOT_ENOUGH_REPLICAS")


class Clock:
    """Seconds, moved by hand: timeouts fire exactly when a test says."""

    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


class Setup:
    """A 3-node cluster with topic ``t`` (2 partitions, one replica each, so a node's death
    leaves its partition without a leader), KIP-890 verification on in every log, and a
    coordinator on a hand-moved clock."""

    def __init__(self, *, transaction_version: int = 2) -> None:
        self.cluster = FakeCluster([Broker(n, "127.0.0.1", 9090 + n) for n in (1, 2, 3)])
        self.cluster.create_topic(TOPIC, 2, 1)
        for p in self.cluster.topics[TOPIC].partitions:
            p.log.txn_verified = set()
        self.clock = Clock()
        self.coordinator = TransactionCoordinator(
            self.cluster, clock=self.clock, transaction_version=transaction_version
        )
        self.node = self.cluster.coordinator(TID, transaction=True)

    def log(self, partition: int) -> PartitionLog:
        p = self.cluster.partition(TOPIC, partition)
        assert p is not None
        return p.log

    async def init(
        self, *, version: int = 5, timeout_ms: int = 60_000, pid: int = -1, epoch: int = -1,
        tid: str | None = TID, node: int | None = None,
    ) -> InitProducerIdResponse:  # fmt: skip
        req = InitProducerIdRequest(
            transactional_id=tid, transaction_timeout_ms=timeout_ms, producer_id=pid,
            producer_epoch=epoch,
        )  # fmt: skip
        resp = await self.coordinator.handle(self.node if node is None else node, version, req)
        assert isinstance(resp, InitProducerIdResponse)
        return resp

    async def add(
        self, pid: int, epoch: int, *partitions: int, version: int = 3, topic: str = TOPIC
    ) -> dict[tuple[str, int], int]:
        req = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=TID,
            v3_and_below_producer_id=pid,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=[AddPartitionsToTxnTopic(name=topic, partitions=list(partitions))],
        )
        resp = await self.coordinator.handle(self.node, version, req)
        assert isinstance(resp, AddPartitionsToTxnResponse)
        return {
            (t.name, r.partition_index): r.partition_error_code
            for t in resp.results_by_topic_v3_and_below
            for r in t.results_by_partition
        }

    async def end(self, pid: int, epoch: int, *, commit: bool, version: int = 4) -> EndTxnResponse:
        req = EndTxnRequest(
            transactional_id=TID, producer_id=pid, producer_epoch=epoch, committed=commit
        )
        resp = await self.coordinator.handle(self.node, version, req)
        assert isinstance(resp, EndTxnResponse)
        return resp

    async def add_offsets(self, pid: int, epoch: int, group: str, *, version: int = 3) -> int:
        req = AddOffsetsToTxnRequest(
            transactional_id=TID, producer_id=pid, producer_epoch=epoch, group_id=group
        )
        resp = await self.coordinator.handle(self.node, version, req)
        assert isinstance(resp, AddOffsetsToTxnResponse)
        return resp.error_code

    async def commit_offsets(
        self, pid: int, epoch: int, group: str, offsets: dict[int, int], *, version: int = 3
    ) -> dict[int, int]:
        req = TxnOffsetCommitRequest(
            transactional_id=TID, group_id=group, producer_id=pid, producer_epoch=epoch,
            topics=[
                TxnOffsetCommitRequestTopic(
                    name=TOPIC,
                    partitions=[
                        TxnOffsetCommitRequestPartition(
                            partition_index=p, committed_offset=o, committed_metadata="m"
                        )
                        for p, o in offsets.items()
                    ],
                )
            ],
        )  # fmt: skip
        group_node = self.cluster.coordinator(group)
        resp = await self.coordinator.handle(group_node, version, req)
        assert isinstance(resp, TxnOffsetCommitResponse)
        return {p.partition_index: p.error_code for t in resp.topics for p in t.partitions}

    async def describe(self, tid: str = TID, *, node: int | None = None) -> Described:
        req = DescribeTransactionsRequest(transactional_ids=[tid])
        resp = await self.coordinator.handle(self.node if node is None else node, 0, req)
        assert isinstance(resp, DescribeTransactionsResponse)
        (state,) = resp.transaction_states
        return state


def batch(pid: int, epoch: int, seq: int, n: int = 1, *, txn: bool = True) -> bytes:
    b = RecordBatchBuilder(
        producer_id=pid, producer_epoch=epoch, base_sequence=seq, is_transactional=txn
    )
    for i in range(n):
        b.append(1000 + i, b"k", b"v%d" % i, ())
    return b.build()


def write(log: PartitionLog, data: bytes) -> tuple[int, int]:
    done = log.append(data, now_ms=5000, leader_epoch=0)
    return done.error_code, done.base_offset


def markers(log: PartitionLog) -> list[tuple[int, int, str]]:
    """(offset, producer epoch, COMMIT|ABORT) of every control batch in the log."""
    out = []
    for info in log.batches:
        if info.control:
            (stored,) = iter_batches(info.data)
            (record,) = stored.records()
            kind = "COMMIT" if parse_control_record(record.key).is_commit else "ABORT"
            out.append((info.base_offset, info.producer_epoch, kind))
    return out


# ---- InitProducerId -----------------------------------------------------------------------


async def test_an_idempotent_producer_gets_a_fresh_id_at_epoch_0_on_any_node() -> None:
    s = Setup()
    first = await s.init(tid=None, node=1)
    second = await s.init(tid=None, node=2, pid=first.producer_id, epoch=0)
    assert (first.error_code, first.producer_epoch) == (E.NONE, 0)
    assert (second.error_code, second.producer_epoch) == (E.NONE, 0)
    assert second.producer_id != first.producer_id


async def test_a_transactional_id_keeps_its_producer_id_and_each_init_bumps_the_epoch() -> None:
    s = Setup()
    first = await s.init()
    second = await s.init()
    assert (first.error_code, first.producer_epoch) == (E.NONE, 0)
    assert (second.error_code, second.producer_id, second.producer_epoch) == (
        E.NONE, first.producer_id, 1,
    )  # fmt: skip


async def test_init_is_refused_off_the_coordinator_and_beyond_the_maximum_timeout() -> None:
    s = Setup()
    other = next(n for n in (1, 2, 3) if n != s.node)
    assert (await s.init(node=other)).error_code == E.NOT_COORDINATOR
    assert (await s.init(timeout_ms=900_001)).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert (await s.init(timeout_ms=0)).error_code == E.INVALID_TRANSACTION_TIMEOUT
    assert (await s.init(tid="")).error_code == E.INVALID_REQUEST
    two_phase = InitProducerIdRequest(
        transactional_id=TID, transaction_timeout_ms=1000, enable2_pc=True
    )  # KIP-939 needs transaction.two.phase.commit.enable, off by default
    refused = await s.coordinator.handle(s.node, 6, two_phase)
    assert isinstance(refused, InitProducerIdResponse)
    assert refused.error_code == E.code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
    assert (await s.init(timeout_ms=900_000)).error_code == E.NONE


async def test_kip360_the_current_epoch_bumps_a_retry_repeats_and_a_stale_one_is_fenced() -> None:
    s = Setup()
    r0 = await s.init()
    pid = r0.producer_id
    r1 = await s.init(pid=pid, epoch=0)
    assert (r1.error_code, r1.producer_id, r1.producer_epoch) == (E.NONE, pid, 1)
    # The producer lost the answer and retries with the epoch it had: same epoch again.
    again = await s.init(pid=pid, epoch=0)
    assert (again.error_code, again.producer_epoch) == (E.NONE, 1)
    await s.init()  # another producer takes over: epoch 2, the previous epoch forgotten
    assert (await s.init(pid=pid, epoch=0)).error_code == E.PRODUCER_FENCED
    assert (await s.init(pid=pid, epoch=0, version=3)).error_code == E.INVALID_PRODUCER_EPOCH
    assert (await s.init(pid=pid + 99, epoch=2)).error_code == E.PRODUCER_FENCED


async def test_an_exhausted_epoch_gets_a_new_producer_id_at_epoch_0() -> None:
    s = Setup()
    first = await s.init()
    last = first
    for _ in range(32766):
        last = await s.init()
    assert (last.producer_id, last.producer_epoch) == (first.producer_id, 32766)
    rotated = await s.init(pid=first.producer_id, epoch=32766)
    assert rotated.error_code == E.NONE
    assert rotated.producer_id != first.producer_id and rotated.producer_epoch == 0
    # The producer lost that answer and retries: the same new id, not a fence.
    retry = await s.init(pid=first.producer_id, epoch=32766)
    assert (retry.error_code, retry.producer_id, retry.producer_epoch) == (
        E.NONE, rotated.producer_id, 0,
    )  # fmt: skip
    # Without a KIP-360 identity an exhausted epoch also moves to a new id.
    for _ in range(32766):
        last = await s.init()
    assert (last.producer_id, last.producer_epoch) == (rotated.producer_id, 32766)
    # A version 2 EndTxn at the last epoch hands over the next id with its answer.
    await s.add(rotated.producer_id, 32766, 0)
    ended = await s.end(rotated.producer_id, 32766, commit=True, version=5)
    assert ended.error_code == E.NONE
    assert ended.producer_id not in (first.producer_id, rotated.producer_id)
    assert ended.producer_epoch == 0
    assert markers(s.log(0)) == [(0, 32767, "COMMIT")]  # the marker fences the old id
    again = await s.end(rotated.producer_id, 32766, commit=True, version=5)
    assert (again.error_code, again.producer_id, again.producer_epoch) == (
        E.NONE, ended.producer_id, 0,
    )  # fmt: skip


# ---- commit and abort ---------------------------------------------------------------------


async def test_commit_writes_markers_and_the_last_stable_offset_reaches_the_high_watermark() -> (
    None
):
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert await s.add(pid, epoch, 0, 1) == {(TOPIC, 0): E.NONE, (TOPIC, 1): E.NONE}
    assert write(s.log(0), batch(pid, epoch, 0, 3)) == (E.NONE, 0)
    assert write(s.log(1), batch(pid, epoch, 0, 2)) == (E.NONE, 0)
    assert (s.log(0).last_stable_offset, s.log(0).high_watermark) == (0, 3)
    assert (await s.describe()).transaction_state == "Ongoing"

    resp = await s.end(pid, epoch, commit=True)
    assert resp.error_code == E.NONE
    assert markers(s.log(0)) == [(3, epoch, "COMMIT")]
    assert markers(s.log(1)) == [(2, epoch, "COMMIT")]
    for p in (0, 1):
        assert s.log(p).last_stable_offset == s.log(p).high_watermark
        assert s.log(p).aborted == []
    described = await s.describe()
    assert (described.transaction_state, described.topics) == ("CompleteCommit", [])


async def test_abort_indexes_the_aborted_range_for_read_committed_fetches() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    # An idempotent producer's records come first.
    assert write(s.log(0), batch(7, 0, 0, 2, txn=False)) == (E.NONE, 0)
    await s.add(pid, epoch, 0)
    assert write(s.log(0), batch(pid, epoch, 0, 3)) == (E.NONE, 2)
    assert (await s.end(pid, epoch, commit=False)).error_code == E.NONE
    assert markers(s.log(0)) == [(5, epoch, "ABORT")]
    assert s.log(0).aborted == [(pid, 2, 5)]
    assert s.log(0).last_stable_offset == s.log(0).high_watermark == 6
    assert markers(s.log(1)) == []  # never added: no marker


async def test_a_transactional_write_to_a_partition_not_added_is_refused() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    await s.add(pid, epoch, 0)
    assert write(s.log(1), batch(pid, epoch, 0))[0] == E.INVALID_TXN_STATE
    assert write(s.log(0), batch(pid, epoch, 0))[0] == E.NONE
    await s.end(pid, epoch, commit=True)
    # The marker closed the partition for this producer: the next transaction adds it again.
    assert write(s.log(0), batch(pid, epoch, 1))[0] == E.INVALID_TXN_STATE
    await s.add(pid, epoch, 0)
    assert write(s.log(0), batch(pid, epoch, 1))[0] == E.NONE


async def test_add_partitions_fails_whole_on_an_unknown_partition_and_checks_the_producer() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert await s.add(pid, epoch, 0, 7) == {
        (TOPIC, 0): OPERATION_NOT_ATTEMPTED, (TOPIC, 7): E.UNKNOWN_TOPIC_OR_PARTITION,
    }  # fmt: skip
    assert (await s.describe()).transaction_state == "Empty"  # nothing was added
    assert await s.add(pid + 1, epoch, 0) == {(TOPIC, 0): E.INVALID_PRODUCER_ID_MAPPING}
    assert await s.add(pid, epoch + 1, 0) == {(TOPIC, 0): E.PRODUCER_FENCED}
    assert await s.add(pid, epoch + 1, 0, version=1) == {(TOPIC, 0): E.INVALID_PRODUCER_EPOCH}
    assert await s.add(pid, epoch, 0, topic="__consumer_offsets") == {
        ("__consumer_offsets", 0): E.code("TOPIC_AUTHORIZATION_FAILED")
    }


async def test_end_txn_with_nothing_added_follows_the_client_transaction_version() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    # Version 1 (EndTxn v4): nothing to end after InitProducerId.
    assert (await s.end(pid, epoch, commit=True)).error_code == E.INVALID_TXN_STATE
    assert (await s.end(pid, epoch, commit=False)).error_code == E.INVALID_TXN_STATE
    # Version 2 (EndTxn v5): a commit of nothing is refused, an abort of nothing bumps.
    assert (await s.end(pid, epoch, commit=True, version=5)).error_code == E.INVALID_TXN_STATE
    aborted = await s.end(pid, epoch, commit=False, version=5)
    assert (aborted.error_code, aborted.producer_id, aborted.producer_epoch) == (
        E.NONE, pid, epoch + 1,
    )  # fmt: skip
    # Version 1 again after a completed commit: a repeated commit is a retry, no error.
    await s.add(pid, epoch + 1, 0)
    assert (await s.end(pid, epoch + 1, commit=True)).error_code == E.NONE
    assert (await s.end(pid, epoch + 1, commit=True)).error_code == E.NONE
    assert (await s.end(pid, epoch + 1, commit=False)).error_code == E.INVALID_TXN_STATE


async def test_transaction_version_2_bumps_the_epoch_at_every_end_and_answers_retries() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    await s.add(pid, epoch, 0)
    assert write(s.log(0), batch(pid, epoch, 0, 2)) == (E.NONE, 0)
    done = await s.end(pid, epoch, commit=True, version=5)
    assert (done.error_code, done.producer_id, done.producer_epoch) == (E.NONE, pid, epoch + 1)
    # The marker carries the new epoch, so the partition expects sequence 0 from it.
    assert markers(s.log(0)) == [(2, epoch + 1, "COMMIT")]
    retry = await s.end(pid, epoch, commit=True, version=5)
    assert (retry.error_code, retry.producer_epoch) == (E.NONE, epoch + 1)
    assert (await s.end(pid, epoch, commit=False, version=5)).error_code == E.INVALID_TXN_STATE
    assert len(markers(s.log(0))) == 1  # a retry writes nothing
    # The old epoch is fenced on the log; the new one starts at sequence 0.
    await s.add(pid, epoch + 1, 0)
    assert write(s.log(0), batch(pid, epoch, 2))[0] == E.INVALID_PRODUCER_EPOCH
    assert write(s.log(0), batch(pid, epoch + 1, 0)) == (E.NONE, 3)


async def test_a_version_2_abort_is_indexed_though_its_marker_has_the_next_epoch() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert s.coordinator.verify_produce(TID, pid, epoch, TOPIC, 1, produce_version=12) == E.NONE
    assert write(s.log(1), batch(pid, epoch, 0, 4)) == (E.NONE, 0)
    done = await s.end(pid, epoch, commit=False, version=5)
    assert (done.error_code, done.producer_epoch) == (E.NONE, epoch + 1)
    assert markers(s.log(1)) == [(4, epoch + 1, "ABORT")]
    assert s.log(1).aborted == [(pid, 0, 4)]
    assert s.log(1).last_stable_offset == s.log(1).high_watermark == 5


# ---- fencing and timeouts -----------------------------------------------------------------


@pytest.mark.parametrize(("tv", "epochs_used"), [(1, 1), (2, 2)])
async def test_a_second_init_aborts_the_ongoing_transaction_and_fences_the_first_producer(
    tv: int, epochs_used: int
) -> None:
    s = Setup(transaction_version=tv)
    old = await s.init()
    pid, epoch = old.producer_id, old.producer_epoch
    await s.add(pid, epoch, 0)
    assert write(s.log(0), batch(pid, epoch, 0, 2)) == (E.NONE, 0)

    # Kafka aborts first and answers CONCURRENT_TRANSACTIONS; the client retries.
    assert (await s.init()).error_code == E.CONCURRENT_TRANSACTIONS
    fence_epoch = epoch + epochs_used  # version 2 bumps once more for the abort itself
    assert markers(s.log(0)) == [(2, fence_epoch, "ABORT")]
    assert s.log(0).aborted == [(pid, 0, 2)]
    new = await s.init()
    assert (new.error_code, new.producer_id, new.producer_epoch) == (
        E.NONE, pid, fence_epoch + 1,
    )  # fmt: skip

    # The first producer is fenced everywhere: coordinator and log.
    assert await s.add(pid, epoch, 0) == {(TOPIC, 0): E.PRODUCER_FENCED}
    assert (await s.end(pid, epoch, commit=True)).error_code == E.PRODUCER_FENCED
    assert (await s.end(pid, epoch, commit=True, version=1)).error_code == (
        E.INVALID_PRODUCER_EPOCH
    )
    assert write(s.log(0), batch(pid, epoch, 2))[0] == E.INVALID_PRODUCER_EPOCH


async def test_an_ongoing_transaction_past_its_timeout_is_aborted_at_a_bumped_epoch() -> None:
    s = Setup()
    r = await s.init(timeout_ms=10_000)
    pid, epoch = r.producer_id, r.producer_epoch
    await s.add(pid, epoch, 0)
    assert write(s.log(0), batch(pid, epoch, 0)) == (E.NONE, 0)

    s.clock.now += 10.0  # exactly the timeout: not yet past it
    assert (await s.describe()).transaction_state == "Ongoing"
    s.clock.now += 0.01
    described = await s.describe()
    assert (described.transaction_state, described.producer_epoch) == ("CompleteAbort", epoch + 2)
    assert s.log(0).aborted == [(pid, 0, 1)]
    assert s.log(0).last_stable_offset == s.log(0).high_watermark
    assert (await s.end(pid, epoch, commit=True)).error_code == E.PRODUCER_FENCED


# ---- offsets in a transaction -------------------------------------------------------------


@pytest.mark.parametrize("commit", [True, False])
async def test_transactional_offsets_are_pending_until_the_commit(commit: bool) -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert await s.add_offsets(pid, epoch, "g") == E.NONE
    assert await s.commit_offsets(pid, epoch, "g", {0: 42, 1: 7}) == {0: E.NONE, 1: E.NONE}
    assert "g" not in s.cluster.offsets
    assert s.coordinator.pending_offsets("g") == {(TOPIC, 0), (TOPIC, 1)}
    assert s.coordinator.pending_offsets("other") == set()

    assert (await s.end(pid, epoch, commit=commit)).error_code == E.NONE
    assert s.coordinator.pending_offsets("g") == set()
    if commit:
        assert s.cluster.offsets["g"] == {(TOPIC, 0): (42, -1, "m"), (TOPIC, 1): (7, -1, "m")}
    else:
        assert "g" not in s.cluster.offsets


async def test_offsets_of_a_group_not_added_are_refused_unless_version_2_adds_it() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    assert await s.commit_offsets(pid, epoch, "g", {0: 1}, version=4) == {0: E.INVALID_TXN_STATE}
    assert await s.commit_offsets(pid, epoch + 1, "g", {0: 1}, version=5) == {
        0: E.INVALID_PRODUCER_EPOCH
    }
    # TxnOffsetCommit v5 on a version 2 cluster adds the group's offsets partition itself.
    assert await s.commit_offsets(pid, epoch, "g", {0: 1, 9: 1}, version=5) == {
        0: E.NONE, 9: E.UNKNOWN_TOPIC_OR_PARTITION,
    }  # fmt: skip
    topics = (await s.describe()).topics
    assert [t.topic for t in topics] == ["__consumer_offsets"]
    done = await s.end(pid, epoch, commit=True, version=5)
    assert done.error_code == E.NONE
    assert s.cluster.offsets["g"] == {(TOPIC, 0): (1, -1, "m")}


# ---- markers that wait --------------------------------------------------------------------


async def test_while_markers_are_held_the_producer_gets_concurrent_transactions() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    await s.add(pid, epoch, 0)
    write(s.log(0), batch(pid, epoch, 0))
    s.coordinator.hold_markers = True
    assert (await s.end(pid, epoch, commit=True)).error_code == E.NONE
    assert (await s.describe()).transaction_state == "PrepareCommit"
    assert s.log(0).last_stable_offset == 0  # not committed until the marker is written
    assert await s.add(pid, epoch, 1) == {(TOPIC, 1): E.CONCURRENT_TRANSACTIONS}
    assert (await s.init(pid=pid, epoch=epoch)).error_code == E.CONCURRENT_TRANSACTIONS
    assert (await s.end(pid, epoch, commit=True)).error_code == E.CONCURRENT_TRANSACTIONS
    s.coordinator.hold_markers = False
    s.coordinator.catch_up()
    assert markers(s.log(0)) == [(1, epoch, "COMMIT")]
    assert await s.add(pid, epoch, 1) == {(TOPIC, 1): E.NONE}


async def test_a_marker_waits_for_its_partition_to_have_a_leader_again() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    await s.add(pid, epoch, 0, 1)
    write(s.log(0), batch(pid, epoch, 0))
    write(s.log(1), batch(pid, epoch, 0))
    # One replica per partition: a partition led by a node other than the coordinator's
    # has no leader while that node is down.
    dark = next(p for p in s.cluster.topics[TOPIC].partitions if p.leader != s.node)
    node = dark.leader
    s.cluster.kill(node)
    assert dark.leader == -1 and s.cluster.coordinator(TID, transaction=True) == s.node
    assert (await s.end(pid, epoch, commit=True)).error_code == E.NONE
    assert markers(s.log(1 - dark.index)) == [(1, epoch, "COMMIT")]
    assert markers(s.log(dark.index)) == []
    assert (await s.describe()).transaction_state == "PrepareCommit"
    assert await s.add(pid, epoch, 1 - dark.index) == {
        (TOPIC, 1 - dark.index): E.CONCURRENT_TRANSACTIONS
    }
    s.cluster.restart(node)
    assert (await s.describe()).transaction_state == "CompleteCommit"
    assert markers(s.log(dark.index)) == [(1, epoch, "COMMIT")]


# ---- the produce path (KIP-890) -----------------------------------------------------------


async def test_produce_v12_adds_its_partition_and_older_produce_must_have_added_it() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    verify = s.coordinator.verify_produce
    # Kafka 4.4 answers a partition not added with TRANSACTION_ABORTABLE from Produce v11 on
    # (KIP-890 part 2), INVALID_TXN_STATE before (measured by the differential tests).
    assert verify(TID, pid, epoch, TOPIC, 1, produce_version=11) == TRANSACTION_ABORTABLE
    assert verify(TID, pid, epoch, TOPIC, 1, produce_version=10) == E.INVALID_TXN_STATE
    assert verify(TID, pid, epoch + 1, TOPIC, 1, produce_version=12) == E.INVALID_PRODUCER_EPOCH
    assert verify(TID, pid, epoch, TOPIC, 1, produce_version=12) == E.NONE
    assert write(s.log(1), batch(pid, epoch, 0)) == (E.NONE, 0)
    described = await s.describe()
    assert [(t.topic, t.partitions) for t in described.topics] == [(TOPIC, [1])]
    s.coordinator.hold_markers = True
    await s.end(pid, epoch, commit=True, version=5)
    # A produce while the commit completes is told to retry, as Kafka's leader does.
    assert verify(TID, pid, epoch + 1, TOPIC, 0, produce_version=12) == NOT_ENOUGH_REPLICAS


async def test_produce_on_a_version_1_cluster_only_verifies() -> None:
    s = Setup(transaction_version=1)
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    verify = s.coordinator.verify_produce
    assert verify(TID, pid, epoch, TOPIC, 0, produce_version=12) == TRANSACTION_ABORTABLE
    await s.add(pid, epoch, 0)
    assert verify(TID, pid, epoch, TOPIC, 0, produce_version=11) == E.NONE


async def test_add_partitions_v4_batches_transactions_and_verifies_without_adding() -> None:
    s = Setup()
    r = await s.init()
    pid, epoch = r.producer_id, r.producer_epoch
    await s.add(pid, epoch, 0)
    req = AddPartitionsToTxnRequest(
        transactions=[
            AddPartitionsToTxnTransaction(
                transactional_id=TID, producer_id=pid, producer_epoch=epoch, verify_only=True,
                topics=[AddPartitionsToTxnTopic(name=TOPIC, partitions=[0, 1])],
            ),
            AddPartitionsToTxnTransaction(
                transactional_id="unknown", producer_id=1, producer_epoch=0, verify_only=False,
                topics=[AddPartitionsToTxnTopic(name=TOPIC, partitions=[0])],
            ),
        ]
    )  # fmt: skip
    resp = await s.coordinator.handle(s.node, 4, req)
    assert isinstance(resp, AddPartitionsToTxnResponse)
    got = {
        (t.transactional_id, r.partition_index): r.partition_error_code
        for t in resp.results_by_transaction
        for tr in t.topic_results
        for r in tr.results_by_partition
    }
    unknown_error = (
        E.INVALID_PRODUCER_ID_MAPPING
        if s.cluster.coordinator("unknown", transaction=True) == s.node
        else E.NOT_COORDINATOR
    )
    assert got == {
        (TID, 0): E.NONE, (TID, 1): TRANSACTION_ABORTABLE, ("unknown", 0): unknown_error,
    }  # fmt: skip
    assert [t.partitions for t in (await s.describe()).topics] == [[0]]  # nothing added


# ---- DescribeTransactions / ListTransactions ----------------------------------------------


async def test_describe_and_list_show_what_this_node_coordinates() -> None:
    s = Setup()
    other = next(n for n in (1, 2, 3) if n != s.node)
    assert (await s.describe()).error_code == TRANSACTIONAL_ID_NOT_FOUND
    r = await s.init(timeout_ms=30_000)
    await s.add(r.producer_id, r.producer_epoch, 1, 0)
    described = await s.describe()
    assert (described.error_code, described.producer_id, described.transaction_timeout_ms) == (
        E.NONE, r.producer_id, 30_000,
    )  # fmt: skip
    assert described.transaction_start_time_ms == 1_000_000  # the clock's 1000 s
    assert [(t.topic, t.partitions) for t in described.topics] == [(TOPIC, [0, 1])]
    assert (await s.describe(node=other)).error_code == E.NOT_COORDINATOR

    async def listed(
        req: ListTransactionsRequest, node: int = s.node, version: int = 2
    ) -> tuple[list[str], list[str]]:
        resp = await s.coordinator.handle(node, version, req)
        assert isinstance(resp, ListTransactionsResponse)
        return [t.transactional_id for t in resp.transaction_states], resp.unknown_state_filters

    List = ListTransactionsRequest
    assert await listed(List()) == ([TID], [])
    assert await listed(List(), node=other) == ([], [])
    assert await listed(List(state_filters=["Ongoing", "Nope"])) == ([TID], ["Nope"])
    assert await listed(List(state_filters=["Empty"])) == ([], [])
    assert await listed(List(producer_id_filters=[r.producer_id + 1])) == ([], [])
    assert await listed(List(transactional_id_pattern="orders-.*")) == ([TID], [])
    assert await listed(List(transactional_id_pattern="orders")) == ([], [])
    assert await listed(List(duration_filter=5_000)) == ([], [])
    s.clock.now += 5.01
    assert await listed(List(duration_filter=5_000)) == ([TID], [])
    assert await listed(List(duration_filter=60_000), version=0) == ([TID], [])
    bad = await s.coordinator.handle(
        s.node, 2, ListTransactionsRequest(transactional_id_pattern="(ab")
    )
    assert isinstance(bad, ListTransactionsResponse)
    assert bad.error_code == E.code("INVALID_REGULAR_EXPRESSION")
