"""The transaction state machine and its drain rules, against a real Accumulator and
FakeKafka's transaction coordinator (in memory, on virtual time): illegal call sequences,
partitions added before their data, abortable vs fatal errors, the epoch bump after a
sequence hole, the ``transaction()`` context."""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator, Callable, Coroutine
from types import MappingProxyType
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
)
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import (
    IllegalStateError,
    ProducerFencedError,
    TopicAuthorizationFailedError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.engine import ProducerEngine
from aiokafka_ng.producer.future import DeliveryFuture
from aiokafka_ng.producer.signals import Signals
from aiokafka_ng.producer.transactions import (
    _TRANSITIONS,
    ConsumerGroupMetadata,
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionManager,
    TransactionNotStartedError,
    TransactionState,
)
from aiokafka_ng.producer.txn_coordinator import TxnCoordinatorClient
from aiokafka_ng.protocol.records import iter_batches
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio
S = TransactionState

INIT_PRODUCER_ID, END_TXN = 22, 26
#: An internal topic: Kafka refuses it in a transaction (AddPartitionsToTxn v3 and below
#: answer TOPIC_AUTHORIZATION_FAILED), an abortable error.
INTERNAL = "__consumer_offsets"
#: Requests the cluster itself sends.
HOUSEKEEPING = frozenset({"ApiVersions", "Metadata", "FindCoordinator"})


def name(call: Received) -> str:
    """A received request's type without the ``Request`` suffix (``"EndTxn"``)."""
    return type(call.request).__name__.removesuffix("Request")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


class Setup:
    """A TransactionManager over a transactional engine and a real cluster on FakeKafka; the
    setup hears the engine's signals (counting ``wake_all``, routing the transaction's to
    the manager as the producer does) and is its sender: the engine's metadata is set by
    hand and drained batches are completed here, so only the coordinator requests reach the
    fake. ``spawn``: where the manager starts a background abort (None: nowhere)."""

    def __init__(
        self,
        kafka: FakeKafka,
        cluster: Cluster,
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], object] | None = None,
    ) -> None:
        self.kafka = kafka
        self.cluster = cluster
        self.now = 1000.0
        config = ProducerConfig(
            bootstrap_servers="127.0.0.1:9092",
            transactional_id="txn-1",
            batch_size=1000,
            linger_ms=0,
            delivery_timeout_ms=60000,
            request_timeout_ms=1000,
            retry_backoff_ms=1,
            retry_backoff_max_ms=5,
        )
        self.engine = ProducerEngine(
            config,
            signals=Signals(
                wake_all=self.wake_all,
                partitions_wanted=lambda: self.manager.wake(),
                fenced=lambda exc: self.manager.fail_fatal(exc),
                sequence_hole=lambda: self.manager.sequence_hole(),
            ),
            clock=lambda: self.now,
        )
        self.acc = self.engine.acc
        self.manager = TransactionManager(
            self.engine,
            transaction_timeout_ms=60000,
            request_timeout_ms=1000,
            max_block_ms=2000,
            cluster=lambda: self.cluster,
            spawn=spawn,
        )
        parts = {p: PartitionMetadata(partition=p, leader=1) for p in range(2)}
        self.engine.update_metadata(
            ClusterMetadata(
                brokers=MappingProxyType({1: BrokerMetadata(1, "127.0.0.1", 1)}),
                topics=MappingProxyType(
                    {
                        name: TopicMetadata(name, partitions=MappingProxyType(parts))
                        for name in ("t", INTERNAL)
                    }
                ),
            )
        )
        self.wakes = 0

    def names(self) -> list[str]:
        """The transaction requests received, in order (the cluster's own left out)."""
        return [name(x) for x in self.kafka.received() if name(x) not in HOUSEKEEPING]

    def last(self) -> Any:
        """The last transaction request received."""
        return [x.request for x in self.kafka.received() if name(x) not in HOUSEKEEPING][-1]

    def wake_all(self) -> None:
        self.wakes += 1

    def send(self, value: bytes, partition: int = 0, topic: str = "t") -> DeliveryFuture:
        self.manager.check_send()
        fut = DeliveryFuture(topic, 0)
        self.acc.append(topic, partition, None, value, None, 0, len(value) + 10, fut)
        self.manager.track(fut)
        return fut

    def drain(self) -> list[Any]:
        batches, _ = self.engine.drain(1, self.now)
        return batches

    def complete(self, batches: list[Any]) -> None:
        for b in batches:
            self.acc.complete(b, 0, -1)

    async def flush(self) -> None:
        # What Producer.flush does, with a "sender" that answers every drained batch.
        self.engine.begin_flush()
        try:
            for _ in range(100):
                self.complete(self.drain())
                if not self.acc.incomplete():
                    return
                await anyio.sleep(0.001)
            raise AssertionError("flush did not finish")
        finally:
            self.engine.end_flush()


@pytest.fixture
async def s() -> AsyncIterator[Setup]:
    """A 3-node transactions-v1 FakeKafka (topic ``t``, 2 partitions) and the setup on it."""
    async with FakeKafka(brokers=3, tcp=False, transaction_version=1) as kafka:
        kafka.create_topic("t", partitions=2)
        kafka.create_topic("in", partitions=2)
        async with Cluster(ProducerConfig(**kafka.client_config()).cluster_config()) as cluster:
            await cluster.wait_ready()
            yield Setup(kafka, cluster)


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
    engine = ProducerEngine(
        ProducerConfig(bootstrap_servers="127.0.0.1:9092", transactional_id="x")
    )
    m = TransactionManager(
        engine, transaction_timeout_ms=1, request_timeout_ms=1, max_block_ms=1, cluster=lambda: None
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


async def test_illegal_call_sequences_raise_named_errors(s: Setup) -> None:
    m = s.manager
    with pytest.raises(IllegalTransactionStateError, match="init_transactions"):
        m.begin()  # before init
    await m.init()
    assert state(m) is S.READY and m.idem.producer_id >= 0 and m.idem.epoch == 0
    await m.init()  # again: a no-op (start() calls it implicitly)
    assert s.names() == ["InitProducerId"]
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


async def test_partition_is_added_before_its_first_batch_drains(s: Setup) -> None:
    m = s.manager
    await m.init()
    m.begin()
    fut = s.send(b"a", partition=1)
    assert s.drain() == []  # held back: not in the transaction yet
    assert m.pending_partitions == {("t", 1)}
    wakes = s.wakes
    await run_adds(s)
    assert m.partitions == {("t", 1)} and not m.pending_partitions
    assert s.wakes > wakes  # senders woken once the partition joined
    assert s.names() == ["InitProducerId", "AddPartitionsToTxn"]
    batches = s.drain()
    assert len(batches) == 1
    (rb,) = list(iter_batches(batches[0].data))
    assert rb.is_transactional and (rb.producer_id, rb.producer_epoch, rb.base_sequence) == (
        m.idem.producer_id,
        0,
        0,
    )
    s.complete(batches)
    await m.commit(s.flush)
    assert fut.done() and fut.exception() is None
    assert s.names()[-1] == "EndTxn" and s.last().committed is True
    assert state(m) is S.READY and m.partitions == set()
    # The next transaction adds the partition again.
    m.begin()
    s.send(b"b", partition=1)
    assert s.drain() == [] and m.pending_partitions == {("t", 1)}


async def test_end_txn_is_skipped_when_nothing_joined_the_transaction(s: Setup) -> None:
    await s.manager.init()
    s.manager.begin()
    await s.manager.commit(s.flush)
    s.manager.begin()
    await s.manager.abort()
    assert s.names() == ["InitProducerId"]
    assert state(s.manager) is S.READY


async def test_send_offsets_adds_the_group_once_then_commits_offsets(s: Setup) -> None:
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
    assert s.names() == [
        "InitProducerId",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "TxnOffsetCommit",
        "AddOffsetsToTxn",
        "TxnOffsetCommit",
        "EndTxn",
    ]
    sent = [x.request for x in s.kafka.received() if name(x) not in HOUSEKEEPING]
    assert sent[4].group_id == "other-group"
    first, second = sent[2], sent[3]
    assert (first.generation_id_or_member_epoch, first.member_id) == (4, "member")
    p = second.topics[0].partitions[0]
    assert (p.committed_offset, p.committed_metadata, p.committed_leader_epoch) == (11, "m", 2)


async def test_abortable_error_then_abort_leaves_the_producer_usable(s: Setup) -> None:
    m = s.manager
    await m.init()
    m.begin()
    fut = s.send(b"a", topic=INTERNAL)  # refused: TOPIC_AUTHORIZATION_FAILED
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
    m.begin()
    fut2 = s.send(b"c")  # a topic the coordinator takes
    s.drain()
    await run_adds(s)
    s.complete(s.drain())
    await m.commit(s.flush)
    assert fut2.exception() is None and m.transactions == 1 and m.aborts == 1


async def test_fenced_is_fatal_for_every_later_call(s: Setup) -> None:
    m = s.manager
    await m.init()
    # Another producer with our transactional id starts: the coordinator bumps the epoch.
    rival = TxnCoordinatorClient(
        s.cluster,
        "txn-1",
        transaction_timeout_ms=60000,
        retry_backoff=ExponentialBackoff(1, 5),
        request_timeout_s=1.0,
        max_block_s=2.0,
    )
    await rival.init_producer_id()
    m.begin()
    fut = s.send(b"a")
    s.drain()
    await run_adds(s)  # AddPartitionsToTxn at the old epoch: fenced
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


async def test_produce_fenced_from_the_sender_is_fatal(s: Setup) -> None:
    await s.manager.init()
    s.manager.begin()
    s.manager.idem.request_reset(90)  # what the sender reports for PRODUCER_FENCED
    assert state(s.manager) is S.FATAL_ERROR
    with pytest.raises(ProducerFencedError):
        await s.manager.commit(s.flush)


async def test_failed_record_makes_commit_fail_and_abort_required(s: Setup) -> None:
    m = s.manager
    await m.init()
    pid = m.idem.producer_id
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
    names = s.names()
    assert names[-2:] == ["EndTxn", "InitProducerId"]
    bump = s.last()
    assert (bump.producer_id, bump.producer_epoch) == (pid, 0)
    assert state(m) is S.READY


async def test_bump_falls_back_to_plain_init_when_refused(s: Setup) -> None:
    m = s.manager
    await m.init()
    pid = m.idem.producer_id
    m.begin()
    s.send(b"a")
    s.drain()
    await run_adds(s)
    (batch,) = s.drain()
    assert batch.base_sequence == 0
    m.idem.request_reset(45)  # OUT_OF_ORDER_SEQUENCE_NUMBER: abortable
    assert state(m) is S.ABORTABLE_ERROR
    s.acc.fail(batch, TransactionAbortedError("x"))
    # The KIP-360 bump is refused (what Tansu answers: UNKNOWN_SERVER_ERROR).
    s.kafka.inject(INIT_PRODUCER_ID, -1)
    await m.abort()
    inits = [
        (x.request.producer_id, x.request.producer_epoch)
        for x in s.kafka.received(INIT_PRODUCER_ID)
    ]
    assert inits == [(-1, -1), (pid, 0), (-1, -1)]
    # The plain InitProducerId: the coordinator bumps the epoch of the id it knows.
    assert (m.idem.producer_id, m.idem.epoch) == (pid, 1) and state(m) is S.READY
    m.begin()
    s.send(b"b")
    s.drain()
    await run_adds(s)
    (batch,) = s.drain()
    assert batch.base_sequence == 0  # sequences restart with the new epoch


async def test_abort_fails_queued_records_and_sends_end_txn_abort(s: Setup) -> None:
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
    assert s.last().committed is False and state(m) is S.READY


async def test_commit_resumes_after_end_txn_timed_out(s: Setup) -> None:
    m = s.manager
    await m.init()
    m.begin()
    await m.send_offsets({("in", 0): 1}, "g")
    s.kafka.inject(END_TXN, 51, times=None)  # CONCURRENT_TRANSACTIONS, until cleared
    with pytest.raises(Exception, match="max_block_ms"):
        await m.commit(s.flush)
    assert state(m) is S.COMMITTING
    s.kafka.clear_faults()
    await m.commit(s.flush)
    assert state(m) is S.READY
    assert s.kafka.committed("g") == {("in", 0): 1}  # the transaction's offsets are in


async def test_transaction_context_commits_or_aborts(s: Setup) -> None:
    m = s.manager
    await m.init()
    async with m.context(s.flush):
        await m.send_offsets({("in", 0): 1}, "g")
    assert s.last().committed is True
    with pytest.raises(RuntimeError, match="boom"):
        async with m.context(s.flush):
            await m.send_offsets({("in", 0): 2}, "g")
            raise RuntimeError("boom")
    assert s.last().committed is False
    # Cancelled mid-transaction: no I/O in the cancelled task; the transaction can no
    # longer commit and an abort (here by hand: no producer task group) makes it usable.
    with anyio.move_on_after(0.05) as scope:
        async with m.context(s.flush):
            await m.send_offsets({("in", 0): 3}, "g")
            await anyio.sleep_forever()
    assert scope.cancelled_caught
    assert state(m) is S.ABORTABLE_ERROR
    assert isinstance(m.last_error, TransactionAbortedError)
    assert s.names().count("EndTxn") == 2
    await m.abort()
    assert s.last().committed is False and state(m) is S.READY


async def test_cancelled_transaction_is_aborted_by_a_background_task(s: Setup) -> None:
    async with anyio.create_task_group() as tg:
        s = Setup(s.kafka, s.cluster, spawn=tg.start_soon)
        m = s.manager
        await m.init()
        with anyio.move_on_after(0.05):
            async with m.context(s.flush):
                await m.send_offsets({("in", 0): 3}, "g")
                await anyio.sleep_forever()
        # The next transaction waits for the background abort, then begins.
        async with m.context(s.flush):
            assert s.last().committed is False
            await m.send_offsets({("in", 0): 4}, "g")
    assert s.last().committed is True and state(m) is S.READY
    assert m.aborts == 1 and m.transactions == 1


async def test_invalid_epoch_on_produce_is_abortable_and_the_abort_decides(s: Setup) -> None:
    """KIP-588: INVALID_PRODUCER_EPOCH from Produce may just mean the coordinator bumped the
    epoch after a transaction timeout; only the coordinator's answer to the abort is final."""
    m = s.manager
    await m.init()
    for really_fenced in (False, True):
        if really_fenced:
            s.kafka.inject(END_TXN, 47)  # INVALID_PRODUCER_EPOCH
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
            assert s.names()[-2:] == ["EndTxn", "InitProducerId"]  # epoch bumped


async def test_cancelled_during_end_txn_commit_stays_committing(s: Setup) -> None:
    """EndTxn(commit) may already have reached the coordinator: the cancelled commit must
    not turn into an abort; calling commit again finishes it."""
    m = s.manager
    await m.init()
    # The coordinator holds its EndTxn answers past the cancellation below.
    s.kafka.delay(s.kafka.coordinator_for("txn-1"), 500, api_key=END_TXN)
    with anyio.move_on_after(0.05):
        async with m.context(s.flush):
            await m.send_offsets({("in", 0): 1}, "g")
    assert state(m) is S.COMMITTING
    s.kafka.clear_faults()
    await m.commit(s.flush)
    assert state(m) is S.READY
    ends = [x.request.committed for x in s.kafka.received(END_TXN)]
    assert len(ends) == 2 and all(ends)  # the cancelled one, then the one that finished
