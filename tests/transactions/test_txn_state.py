"""The transaction state machine and its drain rules, against a real Accumulator and a
fake coordinator (no broker): illegal call sequences, partitions added before their data,
abortable vs fatal errors, the epoch bump after a sequence hole, the ``transaction()``
context."""

from __future__ import annotations

import itertools
from types import MappingProxyType
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.errors import (
    IllegalStateError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.accumulator import Accumulator
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.transactions import (
    _TRANSITIONS,
    ConsumerGroupMetadata,
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionManager,
    TransactionNotStartedError,
    TransactionState,
)
from aiokafka_ng.producer.wakeups import Unwired
from aiokafka_ng.protocol.compression import Compression
from aiokafka_ng.protocol.messages.end_txn import EndTxnResponse
from aiokafka_ng.protocol.messages.init_producer_id import InitProducerIdResponse
from aiokafka_ng.protocol.records import iter_batches
from aiokafka_ng.testing.scripted import Handler
from tests.transactions.fakes import add_partitions_answer, ok_handler, txn_cluster

pytestmark = pytest.mark.anyio
S = TransactionState


class Setup(Unwired):
    """A TransactionManager attached to an Accumulator and a scripted cluster; the setup is
    its wake-up channel (counting ``wake_all``)."""

    def __init__(self, handler: Handler | None = None) -> None:
        self.cluster = txn_cluster(handler or ok_handler())
        self.now = 1000.0
        self.manager = TransactionManager(
            "txn-1",
            transaction_timeout_ms=60000,
            retry_backoff=ExponentialBackoff(1, 5),
            request_timeout_ms=1000,
            max_block_ms=2000,
        )
        self.acc = Accumulator(
            pool=MemoryPool(1 << 20),
            batch_size=1000,
            linger_ms=0,
            compression=Compression.NONE,
            max_request_size=1 << 20,
            delivery_timeout_ms=60000,
            retry_backoff=ExponentialBackoff(1, 5, jitter=0),
            guarantee_order=False,
            idempotence=self.manager.idem,
            clock=lambda: self.now,
        )
        parts = {p: PartitionMetadata(partition=p, leader=1) for p in range(2)}
        self.acc.update_metadata(
            ClusterMetadata(
                brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
                topics=MappingProxyType(
                    {"t": TopicMetadata("t", partitions=MappingProxyType(parts))}
                ),
            )
        )
        self.wakes = 0
        self.manager.attach(self.cluster, self.acc, self)  # its wake-up channel

    def wake_all(self) -> None:
        self.wakes += 1

    def send(self, value: bytes, partition: int = 0) -> DeliveryFuture:
        self.manager.check_send()
        fut = DeliveryFuture("t", 0)
        self.acc.append("t", partition, None, value, None, 0, len(value) + 10, fut)
        self.manager.track(fut)
        return fut

    def drain(self) -> list[Any]:
        batches, _ = self.acc.drain(1, self.now)
        return batches

    def complete(self, batches: list[Any]) -> None:
        for b in batches:
            self.acc.complete(b, 0, -1)

    async def flush(self) -> None:
        # What Producer.flush does, with a "sender" that answers every drained batch.
        self.acc.flushing += 1
        try:
            for _ in range(100):
                self.complete(self.drain())
                if not self.acc.incomplete():
                    return
                await anyio.sleep(0.001)
            raise AssertionError("flush did not finish")
        finally:
            self.acc.flushing -= 1


def state(m: TransactionManager) -> TransactionState:
    """The state, read through a call (mypy would narrow ``m.state`` across awaits)."""
    return m.state


async def run_adds(s: Setup) -> None:
    """Let the manager's background task add what the drain asked for."""
    async with anyio.create_task_group() as tg:
        tg.start_soon(s.manager.run)
        for _ in range(50):
            await anyio.sleep(0.001)
            if not s.manager.pending_partitions:
                break
        tg.cancel_scope.cancel()


def test_transition_table_is_closed_and_fatal_is_final() -> None:
    assert set(_TRANSITIONS) == set(TransactionState)
    assert _TRANSITIONS[S.FATAL_ERROR] == frozenset()
    m = TransactionManager(
        "x",
        transaction_timeout_ms=1,
        retry_backoff=ExponentialBackoff(1, 1),
        request_timeout_ms=1,
        max_block_ms=1,
    )
    for old, new in itertools.product(TransactionState, TransactionState):
        if new is S.FATAL_ERROR or old is S.FATAL_ERROR:
            continue
        m.state = old
        if new in _TRANSITIONS[old]:
            m._to(new, "test")
            assert state(m) is new
        else:
            with pytest.raises(IllegalTransactionStateError, match=old.value):
                m._to(new, "test")
            assert state(m) is old


async def test_illegal_call_sequences_raise_named_errors() -> None:
    s = Setup()
    m = s.manager
    with pytest.raises(IllegalTransactionStateError, match="init_transactions"):
        m.begin()  # before init
    await m.init()
    assert state(m) is S.READY and (m.idem.producer_id, m.idem.epoch) == (7, 0)
    await m.init()  # again: a no-op (start() calls it implicitly)
    assert s.cluster.names() == ["InitProducerId"]
    with pytest.raises(IllegalTransactionStateError, match="begin_transaction"):
        await m.commit(s.flush)  # commit without begin
    with pytest.raises(IllegalTransactionStateError):
        await m.abort()  # abort without begin
    with pytest.raises(TransactionNotStartedError):
        s.send(b"x")  # send outside a transaction
    with pytest.raises(TransactionNotStartedError):
        await m.send_offsets({("in", 0): 1}, "g")
    m.begin()
    with pytest.raises(IllegalTransactionStateError, match="already open"):
        m.begin()
    assert issubclass(IllegalTransactionStateError, IllegalStateError)
    assert state(m) is S.IN_TRANSACTION


async def test_partition_is_added_before_its_first_batch_drains() -> None:
    s = Setup()
    m = s.manager
    await m.init()
    m.begin()
    fut = s.send(b"a", partition=1)
    assert s.drain() == []  # held back: not in the transaction yet
    assert m.pending_partitions == {("t", 1)}
    await run_adds(s)
    assert m.partitions == {("t", 1)} and not m.pending_partitions
    assert s.wakes >= 1  # senders woken once the partition joined
    assert s.cluster.names() == ["InitProducerId", "AddPartitionsToTxn"]
    batches = s.drain()
    assert len(batches) == 1
    (rb,) = list(iter_batches(batches[0].data))
    assert rb.is_transactional and (rb.producer_id, rb.producer_epoch, rb.base_sequence) == (
        7,
        0,
        0,
    )
    s.complete(batches)
    await m.commit(s.flush)
    assert fut.done() and fut.exception() is None
    assert s.cluster.names()[-1] == "EndTxn" and s.cluster.sent[-1].request.committed is True
    assert state(m) is S.READY and m.partitions == set()
    # The next transaction adds the partition again.
    m.begin()
    s.send(b"b", partition=1)
    assert s.drain() == [] and m.pending_partitions == {("t", 1)}


async def test_end_txn_is_skipped_when_nothing_joined_the_transaction() -> None:
    s = Setup()
    await s.manager.init()
    s.manager.begin()
    await s.manager.commit(s.flush)
    s.manager.begin()
    await s.manager.abort()
    assert s.cluster.names() == ["InitProducerId"]
    assert state(s.manager) is S.READY


async def test_send_offsets_adds_the_group_once_then_commits_offsets() -> None:
    s = Setup()
    m = s.manager
    await m.init()
    m.begin()

    class OffsetAndMetadata:
        offset = 11
        metadata = "m"
        leader_epoch = 2

    await m.send_offsets({("in", 0): 5}, ConsumerGroupMetadata("g", 4, "member"))
    await m.send_offsets({("in", 1): OffsetAndMetadata()}, "g")
    await m.send_offsets({("in", 1): 3}, "other-group")  # another group joins too
    await m.commit(s.flush)
    assert s.cluster.names() == [
        "InitProducerId",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "TxnOffsetCommit",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "EndTxn",
    ]
    assert s.cluster.sent[4].request.group_id == "other-group"
    first, second = s.cluster.sent[2].request, s.cluster.sent[3].request
    assert (first.generation_id_or_member_epoch, first.member_id) == (4, "member")
    p = second.topics[0].partitions[0]
    assert (p.committed_offset, p.committed_metadata, p.committed_leader_epoch) == (11, "m", 2)


async def test_abortable_error_then_abort_leaves_the_producer_usable() -> None:
    refuse = [True]
    base = ok_handler()

    def handle(node: int, request: Any, version: int) -> Any:
        if type(request).__name__ == "AddPartitionsToTxnRequest" and refuse[0]:
            return add_partitions_answer(request, code=29)  # TOPIC_AUTHORIZATION_FAILED
        return base(node, request, version)

    s = Setup(handle)
    m = s.manager
    await m.init()
    m.begin()
    fut = s.send(b"a")
    s.drain()
    await run_adds(s)
    assert state(m) is S.ABORTABLE_ERROR
    assert isinstance(m.last_error, TopicAuthorizationFailedError)
    assert s.drain() == []  # queued batches fail at once
    assert isinstance(fut.exception(), TopicAuthorizationFailedError)
    with pytest.raises(IllegalTransactionStateError, match="abort_transaction") as info:
        await m.commit(s.flush)
    assert isinstance(info.value.__cause__, TopicAuthorizationFailedError)
    with pytest.raises(IllegalTransactionStateError):
        s.send(b"b")
    await m.abort()
    assert state(m) is S.READY
    refuse[0] = False
    m.begin()
    fut2 = s.send(b"c")
    s.drain()
    await run_adds(s)
    s.complete(s.drain())
    await m.commit(s.flush)
    assert fut2.exception() is None and m.transactions == 1 and m.aborts == 1


async def test_fenced_is_fatal_for_every_later_call() -> None:
    base = ok_handler()

    def handle(node: int, request: Any, version: int) -> Any:
        if type(request).__name__ == "AddPartitionsToTxnRequest":
            return add_partitions_answer(request, code=47)  # INVALID_PRODUCER_EPOCH
        return base(node, request, version)

    s = Setup(handle)
    m = s.manager
    await m.init()
    m.begin()
    fut = s.send(b"a")
    s.drain()
    await run_adds(s)
    assert state(m) is S.FATAL_ERROR
    s.drain()
    assert isinstance(fut.exception(), ProducerFencedError)
    with pytest.raises(ProducerFencedError):
        await m.commit(s.flush)
    with pytest.raises(ProducerFencedError):
        await m.abort()
    with pytest.raises(ProducerFencedError):
        await m.send_offsets({("i", 0): 1}, "g")
    with pytest.raises(ProducerFencedError):
        s.send(b"b")
    with pytest.raises(ProducerFencedError):
        m.begin()


async def test_produce_fenced_from_the_sender_is_fatal() -> None:
    s = Setup()
    await s.manager.init()
    s.manager.begin()
    s.manager.idem.request_reset(90)  # what the sender reports for PRODUCER_FENCED
    assert state(s.manager) is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        await s.manager.commit(s.flush)


async def test_failed_record_makes_commit_fail_and_abort_required() -> None:
    s = Setup()
    m = s.manager
    await m.init()
    m.begin()
    s.send(b"a")
    s.drain()
    await run_adds(s)
    (batch,) = s.drain()
    s.acc.fail(batch, TopicAuthorizationFailedError("no"))  # holds a sequence: a hole
    assert state(m) is S.ABORTABLE_ERROR
    with pytest.raises(IllegalTransactionStateError):
        await m.commit(s.flush)
    await m.abort()
    # The hole forced an epoch bump: KIP-360 form with the current id/epoch.
    names = s.cluster.names()
    assert names[-2:] == ["EndTxn", "InitProducerId"]
    bump = s.cluster.sent[-1].request
    assert (bump.producer_id, bump.producer_epoch) == (7, 0)
    assert state(m) is S.READY


async def test_bump_falls_back_to_plain_init_when_refused() -> None:
    inits: list[tuple[int, int]] = []

    def handle(node: int, request: Any, version: int) -> Any:
        if type(request).__name__ == "InitProducerIdRequest":
            inits.append((request.producer_id, request.producer_epoch))
            if request.producer_id >= 0:
                return InitProducerIdResponse(error_code=-1)  # what Tansu answers
            return InitProducerIdResponse(producer_id=7, producer_epoch=len(inits) - 1)
        return ok_handler()(node, request, version)

    s = Setup(handle)
    m = s.manager
    await m.init()
    m.begin()
    s.send(b"a")
    s.drain()
    await run_adds(s)
    (batch,) = s.drain()
    assert batch.base_sequence == 0
    m.idem.request_reset(45)  # OUT_OF_ORDER_SEQUENCE_NUMBER: abortable
    assert state(m) is S.ABORTABLE_ERROR
    s.acc.fail(batch, TransactionAbortedError("x"))
    await m.abort()
    assert inits == [(-1, -1), (7, 0), (-1, -1)]
    assert (m.idem.producer_id, m.idem.epoch) == (7, 2) and state(m) is S.READY
    m.begin()
    s.send(b"b")
    s.drain()
    await run_adds(s)
    (batch,) = s.drain()
    assert batch.base_sequence == 0  # sequences restart with the new epoch


async def test_abort_fails_queued_records_and_sends_end_txn_abort() -> None:
    s = Setup()
    m = s.manager
    await m.init()
    m.begin()
    s.send(b"a", partition=0)
    s.drain()
    await run_adds(s)
    sent = s.drain()  # in flight
    queued = s.send(b"b", partition=0)
    with anyio.fail_after(5):
        async with anyio.create_task_group() as tg:
            tg.start_soon(m.abort)
            await anyio.sleep(0.01)
            assert state(m) is S.ABORTING  # waits for the in-flight batch
            assert isinstance(queued.exception(), TransactionAbortedError)
            s.complete(sent)
    assert s.cluster.sent[-1].request.committed is False and state(m) is S.READY


async def test_commit_resumes_after_end_txn_timed_out() -> None:
    answers = [EndTxnResponse(error_code=51)] * 1000

    def handle(node: int, request: Any, version: int) -> Any:
        if type(request).__name__ == "EndTxnRequest":
            return answers.pop(0) if answers else EndTxnResponse()
        return ok_handler()(node, request, version)

    s = Setup(handle)
    m = s.manager
    await m.init()
    m.begin()
    await m.send_offsets({("in", 0): 1}, "g")
    with pytest.raises(Exception, match="max_block_ms"):
        await m.commit(s.flush)
    assert state(m) is S.COMMITTING
    answers.clear()
    await m.commit(s.flush)
    assert state(m) is S.READY


async def test_transaction_context_commits_or_aborts() -> None:
    s = Setup()
    m = s.manager
    await m.init()
    async with m.context(s.flush):
        await m.send_offsets({("in", 0): 1}, "g")
    assert s.cluster.sent[-1].request.committed is True
    with pytest.raises(RuntimeError, match="boom"):
        async with m.context(s.flush):
            await m.send_offsets({("in", 0): 2}, "g")
            raise RuntimeError("boom")
    assert s.cluster.sent[-1].request.committed is False
    # Cancelled mid-transaction: no I/O in the cancelled task; the transaction can no
    # longer commit and an abort (here by hand: no producer task group) makes it usable.
    with anyio.move_on_after(0.05) as scope:
        async with m.context(s.flush):
            await m.send_offsets({("in", 0): 3}, "g")
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert state(m) is S.ABORTABLE_ERROR
    assert isinstance(m.last_error, TransactionAbortedError)
    assert [type(r).__name__ for r in s.cluster.requests()].count("EndTxnRequest") == 2
    await m.abort()
    assert s.cluster.sent[-1].request.committed is False and state(m) is S.READY


async def test_cancelled_transaction_is_aborted_by_a_background_task() -> None:
    s = Setup()
    m = s.manager
    async with anyio.create_task_group() as tg:
        m.attach(s.cluster, s.acc, Unwired(), spawn=tg.start_soon)
        await m.init()
        with anyio.move_on_after(0.05):
            async with m.context(s.flush):
                await m.send_offsets({("in", 0): 3}, "g")
                await anyio.sleep_forever()
        # The next transaction waits for the background abort, then begins.
        async with m.context(s.flush):
            assert s.cluster.sent[-1].request.committed is False
            await m.send_offsets({("in", 0): 4}, "g")
    assert s.cluster.sent[-1].request.committed is True and state(m) is S.READY
    assert m.aborts == 1 and m.transactions == 1


async def test_invalid_epoch_on_produce_is_abortable_and_the_abort_decides() -> None:
    """KIP-588: INVALID_PRODUCER_EPOCH from Produce may just mean the coordinator bumped the
    epoch after a transaction timeout; only the coordinator's answer to the abort is final."""
    fenced = [False]

    def handle(node: int, request: Any, version: int) -> Any:
        if type(request).__name__ == "EndTxnRequest" and fenced[0]:
            return EndTxnResponse(error_code=47)
        return ok_handler()(node, request, version)

    s = Setup(handle)
    m = s.manager
    await m.init()
    for really_fenced in (False, True):
        fenced[0] = really_fenced
        m.begin()
        await m.send_offsets({("in", 0): 1}, "g")
        m.idem.request_reset(47)
        assert state(m) is S.ABORTABLE_ERROR
        if really_fenced:
            with pytest.raises(ProducerFencedError):
                await m.abort()
            assert state(m) is S.FATAL_ERROR
        else:
            await m.abort()
            assert state(m) is S.READY
            assert s.cluster.names()[-2:] == ["EndTxn", "InitProducerId"]  # epoch bumped


async def test_cancelled_during_end_txn_commit_stays_committing() -> None:
    """EndTxn(commit) may already have reached the coordinator: the cancelled commit must
    not turn into an abort; calling commit again finishes it."""
    hold = [True]

    async def slow_end(request: Any) -> Any:
        if hold[0]:
            await anyio.sleep_forever()
        return EndTxnResponse()

    def handle(node: int, request: Any, version: int) -> Any:
        if type(request).__name__ == "EndTxnRequest":
            return slow_end(request)
        return ok_handler()(node, request, version)

    s = Setup(handle)
    m = s.manager
    await m.init()
    with anyio.move_on_after(0.05):
        async with m.context(s.flush):
            await m.send_offsets({("in", 0): 1}, "g")
    assert state(m) is S.COMMITTING
    hold[0] = False
    await m.commit(s.flush)
    assert state(m) is S.READY
    assert all(r.committed for r in s.cluster.requests() if type(r).__name__ == "EndTxnRequest")
