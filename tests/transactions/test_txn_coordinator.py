"""The transaction coordinator client against FakeKafka's transaction coordinator, in memory
and on virtual time.

Why FakeKafka: Tansu never answers CONCURRENT_TRANSACTIONS, COORDINATOR_LOAD_IN_PROGRESS or
NOT_COORDINATOR (one node, coordinator always loaded), and answers INVALID_PRODUCER_EPOCH
only in some places; here the coordinator is a model of Kafka's, its errors are injected or
come from a moved coordinator, and the requests are read as the nodes received them
(``FakeKafka.received``). The
cluster is transactions v1 (``transaction.version=1``): partitions and offsets are added
with AddPartitionsToTxn / AddOffsetsToTxn, which is what this client speaks below v5.
"""

from __future__ import annotations

import itertools
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import (
    InvalidTxnStateError,
    KafkaTimeoutError,
    ProducerFencedError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.txn_coordinator import ConsumerGroupMetadata, TxnCoordinatorClient
from aiokafka_ng.protocol.messages.txn_offset_commit import TxnOffsetCommitResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, END_TXN = 22, 24, 25, 26
FIND_COORDINATOR, TXN_OFFSET_COMMIT = 10, 28


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@dataclass
class Setup:
    kafka: FakeKafka
    client: TxnCoordinatorClient

    def lookups(self) -> list[tuple[str, int]]:
        """FindCoordinator lookups written, as (key, key type)."""
        return [
            (key, s.request.key_type)
            for s in self.kafka.received(FIND_COORDINATOR)
            for key in (s.request.coordinator_keys or [s.request.key])
        ]

    def sent(self, api_key: int) -> list[Received]:
        """The requests of ``api_key`` the nodes received, in order."""
        return self.kafka.received(api_key)


@asynccontextmanager
async def coordinator(
    *, max_block_s: float = 5.0, backoff: ExponentialBackoff | None = None
) -> AsyncIterator[Setup]:
    """A 3-node transactions-v1 FakeKafka, our cluster on it, the client for ``txn-1``
    (pacing its retries by ``backoff``: 1 ms to 5 ms unless given)."""
    kafka = FakeKafka(brokers=3, tcp=False, transaction_version=1)
    config = ProducerConfig(**kafka.client_config()).cluster_config()
    async with kafka, Cluster(config) as cluster:
        await cluster.wait_ready()  # the brokers' addresses are known
        client = TxnCoordinatorClient(
            cluster,
            "txn-1",
            transaction_timeout_ms=60000,
            retry_backoff=backoff if backoff is not None else ExponentialBackoff(1, 5),
            request_timeout_s=1.0,
            max_block_s=max_block_s,
        )
        yield Setup(kafka, client)


async def open_transaction(s: Setup) -> tuple[int, int]:
    """InitProducerId, then a partition of topic ``t`` in the transaction."""
    s.kafka.create_topic("t")
    pid, epoch = await s.client.init_producer_id()
    await s.client.add_partitions(pid, epoch, [("t", 0)])
    return pid, epoch


async def test_init_producer_id_carries_the_transactional_id_and_timeout() -> None:
    async with coordinator() as s:
        pid, epoch = await s.client.init_producer_id()
        assert pid >= 0 and epoch == 0
        (sent,) = s.sent(INIT_PRODUCER_ID)
        req = sent.request
        assert (req.transactional_id, req.transaction_timeout_ms) == ("txn-1", 60000)
        assert (req.producer_id, req.producer_epoch) == (-1, -1)
        assert sent.version == 5  # capped at v5 though the codec and the fake know more
        assert sent.node == s.kafka.coordinator_for("txn-1")
        assert s.lookups() == [("txn-1", 1)]  # transaction coordinator: key_type 1


async def test_bump_sends_current_id_and_epoch_on_v3_plus() -> None:
    async with coordinator() as s:
        pid, epoch = await s.client.init_producer_id()
        assert await s.client.init_producer_id(pid, epoch) == (pid, epoch + 1)
        req = s.sent(INIT_PRODUCER_ID)[-1].request
        assert (req.producer_id, req.producer_epoch) == (pid, epoch)


@pytest.mark.parametrize("code", [14, 51])  # COORDINATOR_LOAD_IN_PROGRESS, CONCURRENT_TRANSACTIONS
async def test_busy_coordinator_is_retried_with_backoff(code: int) -> None:
    async with coordinator() as s:
        pid, epoch = await open_transaction(s)
        s.kafka.inject(END_TXN, code, times=3)
        await s.client.end_txn(pid, epoch, commit=True)
        assert len(s.sent(END_TXN)) == 4
        assert s.client.retried_codes == {code: 3}
        assert s.lookups() == [("txn-1", 1)]  # same coordinator: no new lookup


@pytest.mark.parametrize("code", [15, 16])  # COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR
async def test_not_coordinator_finds_the_coordinator_again(code: int) -> None:
    async with coordinator() as s:
        pid, epoch = await s.client.init_producer_id()
        old = s.kafka.coordinator_for("txn-1")
        new = old % 3 + 1
        s.kafka.move_coordinator("txn-1", new)
        s.kafka.inject(ADD_OFFSETS, code, match=old)  # the old node's answer
        await s.client.add_offsets(pid, epoch, "group")
        assert [x.node for x in s.sent(ADD_OFFSETS)] == [old, new]
        assert s.lookups() == [("txn-1", 1), ("txn-1", 1)]


async def test_connection_failure_finds_the_coordinator_again() -> None:
    async with coordinator() as s:
        # Looked up and connected first, so that the cut below falls on InitProducerId, not
        # on FindCoordinator or ApiVersions.
        node = await s.client.cluster.coordinator("txn-1", 1)
        assert node == s.kafka.coordinator_for("txn-1")
        await s.client.cluster.connection(node)
        s.kafka.cut_after(node, 1)
        pid, epoch = await s.client.init_producer_id()
        assert pid >= 0 and epoch == 0
        assert s.kafka.requests(node)[INIT_PRODUCER_ID] == 2  # the cut one, then the answered
        assert s.lookups() == [("txn-1", 1), ("txn-1", 1)]


@pytest.mark.parametrize("code", [47, 90])  # INVALID_PRODUCER_EPOCH, PRODUCER_FENCED
async def test_fencing_is_raised_as_producer_fenced(code: int) -> None:
    async with coordinator() as s:
        pid, epoch = await open_transaction(s)
        s.kafka.inject(END_TXN, code)
        with pytest.raises(ProducerFencedError, match="another producer with transactional id"):
            await s.client.end_txn(pid, epoch, commit=False)
        assert len(s.sent(END_TXN)) == 1  # never retried


async def test_fencing_by_a_newer_producer_is_raised_as_producer_fenced() -> None:
    async with coordinator() as s:
        pid, epoch = await open_transaction(s)
        await s.client.init_producer_id()  # another producer of txn-1: a newer epoch
        with pytest.raises(ProducerFencedError, match="another producer with transactional id"):
            await s.client.end_txn(pid, epoch, commit=True)


async def test_other_errors_are_raised_at_once() -> None:
    async with coordinator() as s:
        s.kafka.inject(INIT_PRODUCER_ID, 48)  # INVALID_TXN_STATE
        with pytest.raises(InvalidTxnStateError):
            await s.client.init_producer_id()
        assert len(s.sent(INIT_PRODUCER_ID)) == 1


async def test_retries_stop_at_max_block() -> None:
    async with coordinator(max_block_s=0.1) as s:
        pid, epoch = await open_transaction(s)
        s.kafka.inject(END_TXN, 51, times=None)
        with pytest.raises(KafkaTimeoutError, match="ConcurrentTransactionsError"):
            await s.client.end_txn(pid, epoch, commit=True)
        assert len(s.sent(END_TXN)) > 3


async def test_add_partitions_batches_all_partitions_in_one_v3_request() -> None:
    async with coordinator() as s:
        s.kafka.create_topic("a", partitions=3)
        s.kafka.create_topic("b")
        pid, epoch = await s.client.init_producer_id()
        await s.client.add_partitions(pid, epoch, [("b", 0), ("a", 2), ("a", 1)])
        (sent,) = s.sent(ADD_PARTITIONS)
        req = sent.request
        assert sent.version == 3  # v4+ is the broker-to-broker form
        assert (req.v3_and_below_transactional_id, req.v3_and_below_producer_id) == ("txn-1", pid)
        assert req.v3_and_below_producer_epoch == epoch
        assert [(t.name, t.partitions) for t in req.v3_and_below_topics] == [
            ("a", [1, 2]),
            ("b", [0]),
        ]


async def test_add_partitions_failure_names_the_partition_not_the_skipped_ones() -> None:
    # a-1 does not exist: Kafka answers UNKNOWN_TOPIC_OR_PARTITION for it and
    # OPERATION_NOT_ATTEMPTED for a-0. The first is retried until max_block, and the error
    # then names a-1 only.
    async with coordinator(max_block_s=1.0) as s:
        s.kafka.create_topic("a")
        pid, epoch = await s.client.init_producer_id()
        with pytest.raises(KafkaTimeoutError, match=r"\(a-1\)") as caught:
            await s.client.add_partitions(pid, epoch, [("a", 0), ("a", 1)])
        assert "a-0" not in str(caught.value)
        assert s.client.retried_codes.keys() == {3}  # 55 is not an error of its own


async def test_txn_offset_commit_goes_to_the_group_coordinator() -> None:
    async with coordinator() as s:
        s.kafka.create_topic("in", partitions=2)
        pid, epoch = await s.client.init_producer_id()
        await s.client.add_offsets(pid, epoch, "grp")
        # The group's coordinator is looked up, then moves: the first TxnOffsetCommit goes
        # to the old one (NOT_COORDINATOR), the next to the one found again.
        old = await s.client.cluster.coordinator("grp", 0)
        assert old == s.kafka.coordinator_for("grp")
        new = old % 3 + 1
        s.kafka.move_coordinator("grp", new)
        meta = ConsumerGroupMetadata("grp", generation_id=3, member_id="m-1", group_instance_id="i")
        await s.client.txn_offset_commit(
            pid, epoch, meta, {("in", 1): (10, "md", 4), ("in", 0): (5, "", -1)}
        )
        sent = s.sent(TXN_OFFSET_COMMIT)
        assert [x.node for x in sent] == [old, new]
        assert s.client.retried_codes == {16: 2}  # NOT_COORDINATOR, counted per partition
        req, version = sent[-1].request, sent[-1].version
        assert version == 4
        assert (
            req.group_id,
            req.generation_id_or_member_epoch,
            req.member_id,
            req.group_instance_id,
        ) == ("grp", 3, "m-1", "i")
        assert (req.producer_id, req.producer_epoch, req.transactional_id) == (pid, epoch, "txn-1")
        parts = [
            (p.partition_index, p.committed_offset, p.committed_metadata, p.committed_leader_epoch)
            for p in req.topics[0].partitions
        ]
        assert parts == [(0, 5, "", -1), (1, 10, "md", 4)]
        # The group key (0) is looked up, and again after NOT_COORDINATOR.
        assert s.lookups() == [("txn-1", 1), ("grp", 0), ("grp", 0)]


# ---------------------------------------------------------------------- pacing of retries

#: The producer's defaults (retry_backoff_ms 100, retry_backoff_max_ms 1000): the first step
#: is 100 ms, +-20% jitter.
FIRST_STEP_MAX = 0.12
#: The pause after CONCURRENT_TRANSACTIONS: 20 ms, +-20% jitter (txn_coordinator._RETRY_POLICY).
STEADY_MIN, STEADY_MAX = 0.016, 0.024


def defaults() -> ExponentialBackoff:
    return ExponentialBackoff.retry(100, 1000)


def gaps(sent: list[Received]) -> list[float]:
    """Virtual seconds between consecutive requests."""
    return [b.at - a.at for a, b in itertools.pairwise(sent)]


async def call(s: Setup, api: int, pid: int, epoch: int) -> None:
    """One call of ``api`` in the transaction ``open_transaction`` opened."""
    if api == INIT_PRODUCER_ID:
        await s.client.init_producer_id()  # -1/-1: fences and aborts the open transaction
    elif api == ADD_PARTITIONS:
        await s.client.add_partitions(pid, epoch, [("u", 0)])
    elif api == ADD_OFFSETS:
        await s.client.add_offsets(pid, epoch, "grp")
    elif api == TXN_OFFSET_COMMIT:
        offsets = {("t", 0): (5, "", -1)}
        await s.client.txn_offset_commit(pid, epoch, ConsumerGroupMetadata("grp"), offsets)
    else:
        await s.client.end_txn(pid, epoch, commit=True)


@pytest.mark.parametrize(
    "api", [INIT_PRODUCER_ID, ADD_PARTITIONS, ADD_OFFSETS, TXN_OFFSET_COMMIT, END_TXN]
)
async def test_concurrent_transactions_is_retried_after_a_short_steady_pause(api: int) -> None:
    # 20 ms after each CONCURRENT_TRANSACTIONS (the Java producer: a flat retry.backoff.ms,
    # 20 ms for AddPartitionsToTxn); a growing backoff (100, 200, 400, 800, 1000, 1000 ms,
    # each -20% at least) would take 2.8 s or more for these six.
    k = 6
    async with coordinator(backoff=defaults()) as s:
        s.kafka.create_topic("u")
        pid, epoch = await open_transaction(s)
        if api == TXN_OFFSET_COMMIT:
            await s.client.add_offsets(pid, epoch, "grp")
        s.kafka.inject(api, 51, times=k)
        start = anyio.current_time()
        await call(s, api, pid, epoch)
        sent = s.sent(api)[-(k + 1) :]
        assert all(STEADY_MIN <= gap <= STEADY_MAX for gap in gaps(sent)), gaps(sent)
        assert anyio.current_time() - start <= (k + 1) * STEADY_MAX
        # InitProducerId -1/-1 aborts the open transaction: the coordinator answers
        # CONCURRENT_TRANSACTIONS once more while it writes the abort's markers.
        assert s.client.retried_codes == {51: k + (api == INIT_PRODUCER_ID)}


@pytest.mark.parametrize("code", [14, 16])  # COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR
async def test_a_coordinator_loading_or_moving_is_retried_with_a_growing_backoff(
    code: int,
) -> None:
    async with coordinator(backoff=defaults()) as s:
        pid, epoch = await open_transaction(s)
        s.kafka.inject(END_TXN, code, times=4)
        await s.client.end_txn(pid, epoch, commit=True)
        paces = gaps(s.sent(END_TXN))
        assert len(paces) == 4
        for n, gap in enumerate(paces):  # 100, 200, 400, 800 ms, +-20%
            assert 0.1 * 2**n * 0.8 <= gap <= 0.1 * 2**n * 1.2, (n, paces)


async def test_concurrent_transactions_does_not_grow_the_backoff_of_other_errors() -> None:
    # Two COORDINATOR_LOAD_IN_PROGRESS, three CONCURRENT_TRANSACTIONS, one more
    # COORDINATOR_LOAD_IN_PROGRESS: the last pause is the third step (the third failure
    # counted), not the sixth.
    async with coordinator(backoff=defaults()) as s:
        pid, epoch = await open_transaction(s)
        s.kafka.inject(END_TXN, 14, times=2)
        s.kafka.inject(END_TXN, 51, times=3)
        s.kafka.inject(END_TXN, 14, times=1)
        await s.client.end_txn(pid, epoch, commit=True)
        paces = gaps(s.sent(END_TXN))
        assert len(paces) == 6
        steps = [0.1, 0.2, 0.02, 0.02, 0.02, 0.4]
        assert all(b * 0.8 <= g <= b * 1.2 for g, b in zip(paces, steps, strict=True)), paces
        assert s.client.retried_codes == {14: 3, 51: 3}


async def test_one_answer_with_several_codes_is_paced_by_the_one_that_grows() -> None:
    # TxnOffsetCommit answers per partition. CONCURRENT_TRANSACTIONS for one partition and
    # COORDINATOR_LOAD_IN_PROGRESS for the other: the loading coordinator paces the retry
    # (100, 200, 400 ms ...), as a first-step retry would only find it loading again.
    async with coordinator(backoff=defaults(), max_block_s=1.0) as s:
        s.kafka.create_topic("in", partitions=2)
        pid, epoch = await s.client.init_producer_id()
        await s.client.add_offsets(pid, epoch, "grp")

        async def mixed(call: Received) -> TxnOffsetCommitResponse:
            answer = await s.kafka.model_answer(call)
            assert isinstance(answer, TxnOffsetCommitResponse)
            for p in answer.topics[0].partitions:
                p.error_code = 51 if p.partition_index == 0 else 14
            return answer

        s.kafka.answer(TXN_OFFSET_COMMIT, mixed)
        offsets = {("in", 0): (1, "", -1), ("in", 1): (1, "", -1)}
        with pytest.raises(KafkaTimeoutError, match="CoordinatorLoadInProgressError"):
            await s.client.txn_offset_commit(pid, epoch, ConsumerGroupMetadata("grp"), offsets)
        paces = gaps(s.sent(TXN_OFFSET_COMMIT))
        assert len(paces) >= 3
        for n, gap in enumerate(paces[:3]):  # 100, 200, 400 ms, +-20%
            assert 0.1 * 2**n * 0.8 <= gap <= 0.1 * 2**n * 1.2, (n, paces)


async def test_a_commit_after_held_markers_goes_within_a_step_of_their_write() -> None:
    # The next transaction's first AddPartitionsToTxn while the coordinator holds the
    # previous transaction's markers (a partition that lost its leader, healed 3 s on):
    # every answer is CONCURRENT_TRANSACTIONS, and the request that succeeds goes at most
    # one first step after the markers are written -- not up to retry_backoff_max_ms.
    async with coordinator(backoff=defaults(), max_block_s=10.0) as s:
        s.kafka.create_topic("u")
        pid, epoch = await open_transaction(s)
        s.kafka.transactions.hold_markers = True
        await s.client.end_txn(pid, epoch, commit=True)
        done = anyio.Event()

        async def next_transaction() -> None:
            await s.client.add_partitions(pid, epoch, [("u", 0)])
            done.set()

        async with anyio.create_task_group() as tg:
            tg.start_soon(next_transaction)
            await anyio.sleep(3.0)  # the scenario's fault: the markers wait 3 virtual seconds
            assert not done.is_set()
            s.kafka.transactions.hold_markers = False
            s.kafka.transactions.catch_up()
            written = anyio.current_time()
            await done.wait()
            assert anyio.current_time() - written <= STEADY_MAX
        adds = s.sent(ADD_PARTITIONS)[1:]  # after open_transaction's own
        assert s.client.retried_codes == {51: len(adds) - 1}
        assert len(adds) >= 3.0 / STEADY_MAX
