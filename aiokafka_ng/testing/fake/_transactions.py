"""The fake cluster's transaction coordinator: producer ids, transactions and their markers.

Theory of operation
-------------------
One :class:`TransactionCoordinator` holds the state of every transactional id of the fake
cluster, as Kafka's ``__transaction_state`` does: whichever node is the id's coordinator
(:meth:`FakeCluster.coordinator` with ``transaction=True``) answers for it, and a request
for it reaching another node gets ``NOT_COORDINATOR``. The state machine is Kafka 4.x's
``TransactionMetadata`` (KIP-98), with the same states and names::

    Empty, Complete* --add--> Ongoing --EndTxn--> PrepareCommit|PrepareAbort --markers--> Complete*
    Empty, Complete* --InitProducerId--> Empty (epoch + 1)
    Ongoing --InitProducerId, timeout--> PrepareAbort (epoch + 1: the producer is fenced)

What a client can observe follows Kafka, request by request:

* **InitProducerId** without a transactional id hands out a fresh producer id at epoch 0.
  With one: a new id gets a producer id at epoch 0, a known one the same id at epoch + 1;
  a request carrying the producer's current id and epoch (KIP-360) bumps it, one carrying
  the previous epoch is a retry and gets the same epoch again, anything else is fenced
  (``PRODUCER_FENCED``, ``INVALID_PRODUCER_EPOCH`` before v4). At epoch 32766 the id is
  exhausted and a new producer id starts at epoch 0 (Kafka keeps 32767 for fencing). An
  ongoing transaction is first aborted with the epoch bumped (the old producer is fenced),
  and the request is answered ``CONCURRENT_TRANSACTIONS`` as Kafka does, so the client
  retries and gets the epoch after that.
* **Transaction version 2** (KIP-890 part 2, the default of a Kafka 4 cluster,
  ``transaction_version=2``): ``EndTxn`` v5+ bumps the epoch with every commit or abort
  and answers the new one; a retry of a completed ``EndTxn`` (the epoch one below) is
  answered without a second completion; an abort with nothing added bumps the epoch. A
  transactional ``Produce`` v12+ adds its partition to the transaction itself and
  ``TxnOffsetCommit`` v5+ adds the group's offsets partition
  (:meth:`TransactionCoordinator.verify_produce`). Aborts the coordinator starts itself
  (fencing, timeout) bump once more with version 2, as Kafka's do.
* **Transaction version 1** (``EndTxn`` v0-v4, ``Produce`` up to v11): epochs change only
  through ``InitProducerId`` and fencing; every partition and every group must be added
  (``AddPartitionsToTxn``, ``AddOffsetsToTxn``) before it is written to; a write to a
  partition that was not added is refused ``INVALID_TXN_STATE`` (KIP-890 part 1, on by
  default in Kafka 4). ``EndTxn`` on a transaction with nothing added answers
  ``INVALID_TXN_STATE`` after ``InitProducerId``, and no error when the previous
  transaction ended the same way (Kafka's idempotent retry rule).
* **Markers.** ``EndTxn`` answers as soon as the transaction is PrepareCommit or
  PrepareAbort; the COMMIT or ABORT control batches are then written to every partition
  in the transaction with a live leader, at once (no background task: the fake writes
  them synchronously). A partition without a leader keeps the transaction in its Prepare
  state, answering ``CONCURRENT_TRANSACTIONS`` to the producer's next calls, until a
  request finds a leader again, as Kafka's marker sender waits and retries. Tests can also
  hold every marker back with :attr:`TransactionCoordinator.hold_markers`. Offsets of a
  ``TxnOffsetCommit`` stay pending in the transaction (:meth:`pending_offsets`, what
  ``OffsetFetch`` with ``require_stable`` answers ``UNSTABLE_OFFSET_COMMIT`` for, KIP-447)
  and reach :attr:`FakeCluster.offsets` when the commit completes; an abort drops them.
* **Timeouts.** An Ongoing transaction older than its ``transaction.timeout.ms`` is
  aborted by the coordinator with the epoch bumped. Kafka checks every 10 s; the fake
  checks on every request it handles (and whenever :meth:`catch_up` is called) against
  its clock, ``anyio.current_time`` unless another is given, so virtual time drives it.

Not modelled: transactional id expiration (``transactional.id.expiration.ms``), ACLs, the
coordinator epoch (markers carry 0), coordinator load/unload (state is never lost), KIP-939
two-phase commit (``InitProducerId`` v6 with ``enable2Pc`` is refused
``TRANSACTIONAL_ID_AUTHORIZATION_FAILED``, as a broker without 2PC enabled answers).
"""

from __future__ import annotations

import enum
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import ClassVar

import anyio

from aiokafka_ng.protocol.messages.add_offsets_to_txn import (
    AddOffsetsToTxnRequest,
    AddOffsetsToTxnResponse,
)
from aiokafka_ng.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnPartitionResult,
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnResult,
    AddPartitionsToTxnTopic,
    AddPartitionsToTxnTopicResult,
)
from aiokafka_ng.protocol.messages.describe_transactions import (
    DescribeTransactionsRequest,
    DescribeTransactionsResponse,
    TopicData,
)
from aiokafka_ng.protocol.messages.describe_transactions import (
    TransactionState as DescribedTransaction,
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
from aiokafka_ng.protocol.messages.list_transactions import (
    TransactionState as ListedTransaction,
)
from aiokafka_ng.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestTopic,
    TxnOffsetCommitResponse,
    TxnOffsetCommitResponsePartition,
    TxnOffsetCommitResponseTopic,
)
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing.fake._cluster import (
    OFFSETS_PARTITIONS,
    FakeCluster,
    coordinator_partition,
)
from aiokafka_ng.testing.fake._codes import (
    CONCURRENT_TRANSACTIONS,
    COORDINATOR_NOT_AVAILABLE,
    INVALID_GROUP_ID,
    INVALID_PRODUCER_EPOCH,
    INVALID_PRODUCER_ID_MAPPING,
    INVALID_REQUEST,
    INVALID_TRANSACTION_TIMEOUT,
    INVALID_TXN_STATE,
    NONE,
    NOT_COORDINATOR,
    PRODUCER_FENCED,
    UNKNOWN_TOPIC_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    code,
)

__all__ = ["GroupCommitValidator", "TransactionCoordinator", "TxnState"]

NO_PRODUCER_ID = -1
NO_PRODUCER_EPOCH = -1
#: Short.MaxValue: the coordinator's last fencing bump; clients stop one below (KIP-360).
MAX_EPOCH = 32767
#: Kafka's ``transaction.max.timeout.ms`` default.
MAX_TIMEOUT_MS = 900_000
#: Kafka's ``offset.metadata.max.bytes`` default.
MAX_OFFSET_METADATA = 4096
OFFSETS_TOPIC = "__consumer_offsets"
#: Kafka's ``Topic.isInternal``: clients may not add these to a transaction (v0-v3).
INTERNAL_TOPICS = frozenset({OFFSETS_TOPIC, "__transaction_state", "__share_group_state"})

OPERATION_NOT_ATTEMPTED = code("OPERATION_NOT_ATTEMPTED")
TOPIC_AUTHORIZATION_FAILED = code("TOPIC_AUTHORIZATION_FAILED")
TRANSACTION_ABORTABLE = code("TRANSACTION_ABORTABLE")
TRANSACTIONAL_ID_NOT_FOUND = code("TRANSACTIONAL_ID_NOT_FOUND")
TRANSACTIONAL_ID_AUTHORIZATION_FAILED = code("TRANSACTIONAL_ID_AUTHORIZATION_FAILED")
NOT_ENOUGH_REPLICAS = code("NOT_ENOUGH_REPLICAS")
COORDINATOR_LOAD_IN_PROGRESS = code("COORDINATOR_LOAD_IN_PROGRESS")
OFFSET_METADATA_TOO_LARGE = code("OFFSET_METADATA_TOO_LARGE")
INVALID_REGULAR_EXPRESSION = code("INVALID_REGULAR_EXPRESSION")

TopicPartition = tuple[str, int]
#: ``(group id, member id, group instance id, generation id or member epoch) -> error code``:
#: the group coordinator's member check of a ``TxnOffsetCommit`` (ILLEGAL_GENERATION, ...).
GroupCommitValidator = Callable[[str, str, str | None, int], int]


def epoch_exhausted(epoch: int) -> bool:
    """Kafka's ``TransactionMetadata.isEpochExhausted``: the producer id must be replaced."""
    return epoch >= MAX_EPOCH - 1


class TxnState(enum.Enum):
    """Kafka's transaction states; the values are the names DescribeTransactions shows."""

    EMPTY = "Empty"
    ONGOING = "Ongoing"
    PREPARE_COMMIT = "PrepareCommit"
    PREPARE_ABORT = "PrepareAbort"
    COMPLETE_COMMIT = "CompleteCommit"
    COMPLETE_ABORT = "CompleteAbort"
    DEAD = "Dead"
    PREPARE_EPOCH_FENCE = "PrepareEpochFence"


_PREPARED = frozenset({TxnState.PREPARE_COMMIT, TxnState.PREPARE_ABORT})
_STATE_NAMES = frozenset(s.value for s in TxnState)


@dataclass(slots=True)
class _Txn:
    """One transactional id's metadata (Kafka's ``TransactionMetadata``)."""

    transactional_id: str
    producer_id: int
    timeout_ms: int
    last_update_ms: int
    producer_epoch: int = NO_PRODUCER_EPOCH
    #: The epoch before the last bump: a retried InitProducerId or EndTxn carries it.
    last_producer_epoch: int = NO_PRODUCER_EPOCH
    previous_producer_id: int = NO_PRODUCER_ID
    #: The producer id that replaces an exhausted one when the completion ends (TV2).
    next_producer_id: int = NO_PRODUCER_ID
    state: TxnState = TxnState.EMPTY
    start_ms: int = -1
    #: Data partitions and ``__consumer_offsets`` partitions in the transaction.
    partitions: set[TopicPartition] = field(default_factory=set)
    #: Offsets committed in the transaction: group -> (topic, partition) -> value.
    offsets: dict[str, dict[TopicPartition, tuple[int, int, str | None]]] = field(
        default_factory=dict
    )
    #: The completion under way: commit or abort, whether it bumps the epoch (TV2), the
    #: partitions still waiting for their marker.
    commit: bool = False
    bumps: bool = False
    unmarked: set[TopicPartition] = field(default_factory=set)

    def client_identity(self) -> tuple[int, int]:
        """The producer id and epoch a client continues with once the completion ends."""
        if self.next_producer_id != NO_PRODUCER_ID:
            return self.next_producer_id, 0
        return self.producer_id, self.producer_epoch


class TransactionCoordinator:
    """Answers the transaction APIs for every node of a :class:`FakeCluster`.

    ``clock`` gives seconds (``anyio.current_time`` by default, so virtual clocks drive the
    timeouts); ``transaction_version`` is the cluster's ``transaction.version`` feature
    (the fake's ApiVersions must not offer ``EndTxn`` v5, ``Produce`` v12,
    ``TxnOffsetCommit`` v5 or ``AddPartitionsToTxn`` v5 below 2, as Kafka does not);
    ``validate_group_commit`` is the group coordinator's member check for
    ``TxnOffsetCommit`` (every member is accepted without one). See the module docstring.
    """

    API_KEYS: ClassVar[frozenset[int]] = frozenset({22, 24, 25, 26, 28, 65, 66})

    def __init__(
        self,
        cluster: FakeCluster,
        *,
        clock: Callable[[], float] | None = None,
        wall_clock: Callable[[], float] | None = None,
        transaction_version: int = 2,
        max_timeout_ms: int = MAX_TIMEOUT_MS,
        validate_group_commit: GroupCommitValidator | None = None,
    ) -> None:
        self.cluster = cluster
        self._clock = clock if clock is not None else anyio.current_time
        self._wall_clock = wall_clock if wall_clock is not None else self._clock
        self.transaction_version = transaction_version
        self.max_timeout_ms = max_timeout_ms
        self.validate_group_commit = validate_group_commit
        #: While True, completions stop in PrepareCommit/PrepareAbort and no marker is
        #: written (a slow marker sender); set it back and call :meth:`catch_up`.
        self.hold_markers = False
        self._txns: dict[str, _Txn] = {}

    def __repr__(self) -> str:
        states: dict[str, int] = {}
        for txn in self._txns.values():
            states[txn.state.value] = states.get(txn.state.value, 0) + 1
        return f"<TransactionCoordinator transactional ids={len(self._txns)} states={states}>"

    # ---- public seams ----------------------------------------------------------------------

    async def handle(self, node_id: int, version: int, request: ApiMessage) -> ApiMessage:
        """Answer one transaction API request that reached ``node_id``."""
        now = self._now_ms()
        self.catch_up(now)
        if isinstance(request, InitProducerIdRequest):
            return self._init_producer_id(node_id, version, request, now)
        if isinstance(request, AddPartitionsToTxnRequest):
            return self._add_partitions(node_id, version, request, now)
        if isinstance(request, AddOffsetsToTxnRequest):
            return self._add_offsets(node_id, version, request, now)
        if isinstance(request, EndTxnRequest):
            return self._end_txn(node_id, version, request, now)
        if isinstance(request, TxnOffsetCommitRequest):
            return self._txn_offset_commit(node_id, version, request, now)
        if isinstance(request, DescribeTransactionsRequest):
            return self._describe(node_id, request, now)
        if isinstance(request, ListTransactionsRequest):
            return self._list(node_id, version, request, now)
        raise TypeError(f"not a transaction API request: {type(request).__name__}")

    def catch_up(self, now_ms: int | None = None) -> None:
        """Do what Kafka's coordinator would have done in the background by ``now_ms``:
        abort Ongoing transactions past their timeout, write markers that were waiting."""
        now = self._now_ms() if now_ms is None else now_ms
        for txn in list(self._txns.values()):
            if self.cluster.coordinator(txn.transactional_id, transaction=True) < 0:
                continue  # no coordinator is running for it
            if txn.state is TxnState.ONGOING and txn.start_ms + txn.timeout_ms < now:
                self._fence_and_abort(txn, now)
            elif txn.state in _PREPARED:
                self._try_complete(txn, now)

    def verify_produce(
        self,
        transactional_id: str,
        producer_id: int,
        producer_epoch: int,
        topic: str,
        partition: int,
        *,
        produce_version: int,
    ) -> int:
        """The error a transactional Produce to ``topic``/``partition`` gets before its
        append (0: append it), as Kafka 4's partition leader asks the coordinator (KIP-890).

        A producer with an open transaction on the partition at this epoch passes at once.
        Otherwise ``Produce`` v12+ on a transaction version 2 cluster adds the partition to
        the transaction; older requests only verify it was added (``INVALID_TXN_STATE``
        when not). Coordinator errors come back as Kafka's leader turns them: fenced as
        ``INVALID_PRODUCER_EPOCH``, the retriable ones as ``NOT_ENOUGH_REPLICAS``. On
        success the producer joins the log's ``txn_verified`` set (when the log has one)."""
        now = self._now_ms()
        self.catch_up(now)
        part = self.cluster.partition(topic, partition)
        if part is None:
            return NONE  # the Produce handler answers an unknown partition itself
        entry = part.log.producers.get(producer_id)
        if (
            entry is not None
            and entry.txn_first_offset is not None
            and entry.epoch == producer_epoch
        ):
            return NONE
        tp = (topic, partition)
        if self.transaction_version >= 2 and produce_version >= 12:
            error = self._add(None, transactional_id, producer_id, producer_epoch, {tp}, now)
        else:
            error = self._verify(None, transactional_id, producer_id, producer_epoch, [tp])[tp]
            if error == TRANSACTION_ABORTABLE and produce_version < 11:
                error = INVALID_TXN_STATE  # what clients before KIP-890 part 2 expect
        if error == PRODUCER_FENCED:
            error = INVALID_PRODUCER_EPOCH
        elif error in (
            CONCURRENT_TRANSACTIONS, COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR,
            COORDINATOR_LOAD_IN_PROGRESS,
        ):  # fmt: skip
            # Kafka's ReplicaManager: old clients would not retry these on a Produce;
            # NOT_ENOUGH_REPLICAS makes every client retry without a metadata refresh.
            error = NOT_ENOUGH_REPLICAS
        if error == NONE and part.log.txn_verified is not None:
            part.log.txn_verified.add(producer_id)
        return error

    def pending_offsets(self, group_id: str) -> set[TopicPartition]:
        """Partitions of ``group_id`` with a transactional offset commit not yet completed.

        ``OffsetFetch`` with ``require_stable`` answers ``UNSTABLE_OFFSET_COMMIT`` for
        these (KIP-447); without it, it answers the last committed offset."""
        pending: set[TopicPartition] = set()
        for txn in self._txns.values():
            pending.update(txn.offsets.get(group_id, ()))
        return pending

    # ---- InitProducerId --------------------------------------------------------------------

    def _init_producer_id(
        self, node_id: int, version: int, req: InitProducerIdRequest, now: int
    ) -> InitProducerIdResponse:
        def fail(error: int) -> InitProducerIdResponse:
            if error == PRODUCER_FENCED and version < 4:
                error = INVALID_PRODUCER_EPOCH  # clients before v4 know only this one
            return InitProducerIdResponse(
                error_code=error, producer_id=NO_PRODUCER_ID, producer_epoch=NO_PRODUCER_EPOCH
            )

        pid, epoch = req.producer_id, req.producer_epoch
        if (pid == NO_PRODUCER_ID) != (epoch == NO_PRODUCER_EPOCH):
            return fail(INVALID_REQUEST)
        expected = None if pid == NO_PRODUCER_ID else (pid, epoch)
        tid = req.transactional_id
        if tid is None:
            # An idempotent producer: a fresh id every time, whatever it had (KIP-360 too).
            return InitProducerIdResponse(
                producer_id=self.cluster.allocate_producer_id(), producer_epoch=0
            )
        if not tid:
            return fail(INVALID_REQUEST)
        if req.enable2_pc:
            return fail(TRANSACTIONAL_ID_AUTHORIZATION_FAILED)
        if not 0 < req.transaction_timeout_ms <= self.max_timeout_ms:
            return fail(INVALID_TRANSACTION_TIMEOUT)
        if not self._is_coordinator(node_id, tid):
            return fail(NOT_COORDINATOR)
        txn = self._txns.get(tid)
        if txn is None:
            txn = _Txn(tid, self.cluster.allocate_producer_id(), req.transaction_timeout_ms, now)
            self._txns[tid] = txn
        error = self._init_transition(txn, req.transaction_timeout_ms, expected, now)
        if error != NONE:
            return fail(error)
        return InitProducerIdResponse(
            producer_id=txn.producer_id, producer_epoch=txn.producer_epoch
        )

    def _init_transition(
        self, txn: _Txn, timeout_ms: int, expected: tuple[int, int] | None, now: int
    ) -> int:
        if expected is not None and not (
            # Kafka's isValidProducerId: a just-created id, the current id, or a retry of
            # the bump that replaced an exhausted id.
            txn.producer_epoch == NO_PRODUCER_EPOCH
            or expected[0] == txn.producer_id
            or (expected[0] == txn.previous_producer_id and epoch_exhausted(expected[1]))
        ):
            return PRODUCER_FENCED
        if txn.state in _PREPARED:
            return CONCURRENT_TRANSACTIONS
        if txn.state is TxnState.ONGOING:
            # Abort the old producer's transaction at a bumped epoch, so its late writes
            # and its EndTxn are fenced; this epoch is never handed out. The client retries
            # on CONCURRENT_TRANSACTIONS and gets the epoch after it.
            self._fence_and_abort(txn, now)
            return CONCURRENT_TRANSACTIONS
        if epoch_exhausted(txn.producer_epoch) and (
            expected is None or expected[1] == txn.producer_epoch
        ):
            txn.last_producer_epoch = (
                txn.producer_epoch if expected is not None else NO_PRODUCER_EPOCH
            )
            txn.previous_producer_id = txn.producer_id
            txn.producer_id = self.cluster.allocate_producer_id()
            txn.producer_epoch = 0
        else:
            if expected is None:
                txn.last_producer_epoch = NO_PRODUCER_EPOCH
                txn.producer_epoch += 1
            elif txn.producer_epoch == NO_PRODUCER_EPOCH or expected[1] == txn.producer_epoch:
                txn.last_producer_epoch = txn.producer_epoch
                txn.producer_epoch += 1
            elif expected[1] != txn.last_producer_epoch:
                return PRODUCER_FENCED
            # else: a retry of the bump whose answer the producer lost: same epoch again.
            txn.previous_producer_id = txn.producer_id
        txn.state = TxnState.EMPTY
        txn.timeout_ms = timeout_ms
        txn.partitions.clear()
        txn.offsets.clear()
        txn.start_ms = -1
        txn.last_update_ms = now
        return NONE

    # ---- adding partitions and groups ------------------------------------------------------

    def _add_partitions(
        self, node_id: int, version: int, req: AddPartitionsToTxnRequest, now: int
    ) -> AddPartitionsToTxnResponse:
        if version < 4:
            results = self._add_partitions_for(
                node_id, version, req.v3_and_below_transactional_id, req.v3_and_below_producer_id,
                req.v3_and_below_producer_epoch, req.v3_and_below_topics, False, now,
            )  # fmt: skip
            return AddPartitionsToTxnResponse(results_by_topic_v3_and_below=results)
        # v4+ batches transactions; brokers send it (KIP-890) and Kafka accepts it from
        # any client when no authorizer is configured, as here.
        return AddPartitionsToTxnResponse(
            results_by_transaction=[
                AddPartitionsToTxnResult(
                    transactional_id=t.transactional_id,
                    topic_results=self._add_partitions_for(
                        node_id,
                        version,
                        t.transactional_id,
                        t.producer_id,
                        t.producer_epoch,
                        t.topics,
                        t.verify_only,
                        now,
                    ),
                )
                for t in req.transactions
            ]
        )

    def _add_partitions_for(
        self, node_id: int, version: int, tid: str, pid: int, epoch: int,
        topics: list[AddPartitionsToTxnTopic], verify_only: bool, now: int,
    ) -> list[AddPartitionsToTxnTopicResult]:  # fmt: skip
        wanted = list(dict.fromkeys((t.name, p) for t in topics for p in t.partitions))
        refused: dict[TopicPartition, int] = {}
        for topic, index in wanted:
            if version < 4 and topic in INTERNAL_TOPICS:
                refused[(topic, index)] = TOPIC_AUTHORIZATION_FAILED
            elif not self._known_partition(topic, index):
                refused[(topic, index)] = UNKNOWN_TOPIC_OR_PARTITION
        errors: dict[TopicPartition, int]
        if refused:
            # One bad partition fails the whole request; the others were not attempted.
            errors = {tp: refused.get(tp, OPERATION_NOT_ATTEMPTED) for tp in wanted}
        elif verify_only:
            errors = self._verify(node_id, tid, pid, epoch, wanted)
        else:
            error = self._add(node_id, tid, pid, epoch, set(wanted), now)
            if error == PRODUCER_FENCED and version < 2:
                error = INVALID_PRODUCER_EPOCH
            errors = dict.fromkeys(wanted, error)
        by_topic: dict[str, list[AddPartitionsToTxnPartitionResult]] = {}
        for (topic, index), error in errors.items():
            by_topic.setdefault(topic, []).append(
                AddPartitionsToTxnPartitionResult(partition_index=index, partition_error_code=error)
            )
        return [
            AddPartitionsToTxnTopicResult(name=name, results_by_partition=results)
            for name, results in by_topic.items()
        ]

    def _add_offsets(
        self, node_id: int, version: int, req: AddOffsetsToTxnRequest, now: int
    ) -> AddOffsetsToTxnResponse:
        tp = (OFFSETS_TOPIC, coordinator_partition(req.group_id, OFFSETS_PARTITIONS))
        error = self._add(
            node_id, req.transactional_id, req.producer_id, req.producer_epoch, {tp}, now
        )
        if error == PRODUCER_FENCED and version < 2:
            error = INVALID_PRODUCER_EPOCH
        return AddOffsetsToTxnResponse(error_code=error)

    def _add(
        self, node_id: int | None, tid: str, pid: int, epoch: int, tps: set[TopicPartition],
        now: int,
    ) -> int:  # fmt: skip
        """Kafka's ``handleAddPartitionsToTransaction``. ``node_id`` None: asked by another
        broker (a partition leader or the group coordinator), which finds the coordinator
        itself."""
        error = self._locate(node_id, tid)
        if error != NONE:
            return error
        txn = self._txns.get(tid)
        if txn is None or txn.producer_id != pid:
            return INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return PRODUCER_FENCED
        if txn.state in _PREPARED:
            return CONCURRENT_TRANSACTIONS
        if txn.state is not TxnState.ONGOING:
            txn.start_ms = now  # a new transaction starts with its first partition
        txn.state = TxnState.ONGOING
        txn.partitions |= tps
        txn.last_update_ms = now
        for topic, index in tps:
            part = self.cluster.partition(topic, index)
            if part is not None and part.log.txn_verified is not None:
                part.log.txn_verified.add(pid)
        return NONE

    def _verify(
        self, node_id: int | None, tid: str, pid: int, epoch: int, tps: Iterable[TopicPartition]
    ) -> dict[TopicPartition, int]:
        """Kafka's ``handleVerifyPartitionsInTransaction`` (AddPartitionsToTxn verifyOnly)."""
        wanted = list(tps)
        error = INVALID_REQUEST if not tid else self._locate(node_id, tid)
        txn = self._txns.get(tid)
        if error == NONE:
            if txn is None or txn.producer_id != pid:
                error = INVALID_PRODUCER_ID_MAPPING
            elif txn.producer_epoch != epoch:
                error = PRODUCER_FENCED
            elif txn.state in _PREPARED:
                error = CONCURRENT_TRANSACTIONS
        if error != NONE or txn is None:
            return dict.fromkeys(wanted, error)
        return {tp: NONE if tp in txn.partitions else TRANSACTION_ABORTABLE for tp in wanted}

    # ---- EndTxn ------------------------------------------------------------------------------

    def _end_txn(self, node_id: int, version: int, req: EndTxnRequest, now: int) -> EndTxnResponse:
        bumps = version >= 5  # the client's transaction version, from the request (KIP-890)
        tid, pid, epoch, commit = (
            req.transactional_id, req.producer_id, req.producer_epoch, req.committed,
        )  # fmt: skip
        error = INVALID_REQUEST if not tid else self._locate(node_id, tid)
        txn = self._txns.get(tid)
        if error == NONE and txn is None:
            error = INVALID_PRODUCER_ID_MAPPING
        if error == NONE and txn is not None:
            if bumps:
                error = self._end_txn_v2(txn, pid, epoch, commit, now)
            else:
                error = self._end_txn_v1(txn, pid, epoch, commit, now)
        if error == PRODUCER_FENCED and version < 2:
            error = INVALID_PRODUCER_EPOCH
        if error != NONE or txn is None or not bumps:
            return EndTxnResponse(error_code=error)
        new_pid, new_epoch = txn.client_identity()
        return EndTxnResponse(producer_id=new_pid, producer_epoch=new_epoch)

    def _end_txn_v1(self, txn: _Txn, pid: int, epoch: int, commit: bool, now: int) -> int:
        if txn.producer_id != pid:
            return INVALID_PRODUCER_ID_MAPPING
        if txn.producer_epoch != epoch:
            return PRODUCER_FENCED
        state = txn.state
        if state is TxnState.ONGOING:
            self._prepare_end(txn, commit=commit, bumps=False, now=now)
            return NONE
        if state is (TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT):
            return NONE  # a retry of the EndTxn that completed it
        if state is (TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT):
            return CONCURRENT_TRANSACTIONS
        return INVALID_TXN_STATE  # Empty, or the other outcome

    def _end_txn_v2(self, txn: _Txn, pid: int, epoch: int, commit: bool, now: int) -> int:
        # With epoch bumps, "same state, same epoch" is the *next* EndTxn; a retry carries
        # the epoch before the bump (or, after an exhausted id was replaced, the old id at
        # MAX-1 while the new id is at 0).
        retry_overflow = (
            txn.previous_producer_id == pid and epoch == MAX_EPOCH - 1 and txn.producer_epoch == 0
        )
        retry_bump = txn.producer_epoch == epoch + 1
        is_retry = retry_bump or retry_overflow
        state = txn.state
        if state in _PREPARED:
            valid = retry_bump
        elif state in (TxnState.COMPLETE_COMMIT, TxnState.COMPLETE_ABORT):
            valid = is_retry or epoch == txn.producer_epoch
        else:
            valid = epoch == txn.producer_epoch
        if txn.producer_id != pid and not retry_overflow:
            return INVALID_PRODUCER_ID_MAPPING
        if not valid:
            return PRODUCER_FENCED
        completed_as_asked = TxnState.COMPLETE_COMMIT if commit else TxnState.COMPLETE_ABORT
        if state is TxnState.ONGOING:
            self._prepare_end(txn, commit=commit, bumps=True, now=now)
            return NONE
        if state in _PREPARED:
            asked = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
            return CONCURRENT_TRANSACTIONS if state is asked else INVALID_TXN_STATE
        if is_retry:
            return NONE if state is completed_as_asked else INVALID_TXN_STATE
        if commit:
            return INVALID_TXN_STATE  # nothing to commit (Empty, or already completed)
        # An abort with nothing added: no marker to write, but the epoch moves on.
        txn.start_ms = now
        self._prepare_end(txn, commit=False, bumps=True, now=now)
        return NONE

    def _fence_and_abort(self, txn: _Txn, now: int) -> None:
        """Kafka's ``prepareFenceProducerEpoch`` then an abort the coordinator starts
        itself (InitProducerId on an Ongoing transaction, or its timeout)."""
        if txn.producer_epoch < MAX_EPOCH:
            txn.producer_epoch += 1
        txn.last_producer_epoch = NO_PRODUCER_EPOCH
        # Not a client's request: the cluster's transaction version decides the bump.
        bumps = self.transaction_version >= 2
        self._prepare_end(txn, commit=False, bumps=bumps, now=now, fencing=True)

    def _prepare_end(
        self, txn: _Txn, *, commit: bool, bumps: bool, now: int, fencing: bool = False
    ) -> None:
        txn.next_producer_id = NO_PRODUCER_ID
        if bumps:
            if not fencing and epoch_exhausted(txn.producer_epoch):
                txn.next_producer_id = self.cluster.allocate_producer_id()
            txn.last_producer_epoch = txn.producer_epoch
            if txn.producer_epoch < MAX_EPOCH:
                txn.producer_epoch += 1
        txn.state = TxnState.PREPARE_COMMIT if commit else TxnState.PREPARE_ABORT
        txn.commit = commit
        txn.bumps = bumps
        txn.unmarked = set(txn.partitions)
        txn.last_update_ms = now
        self._try_complete(txn, now)

    def _try_complete(self, txn: _Txn, now: int) -> None:
        """Write the markers that can be written; complete the transaction when none is
        left (Kafka's marker sender, synchronous here)."""
        if self.hold_markers or txn.state not in _PREPARED:
            return
        for tp in sorted(txn.unmarked):
            part = self.cluster.partition(*tp)
            if part is None:
                # A deleted topic, or the offsets topic the fake keeps as a dict: Kafka
                # drops markers for partitions no longer in the metadata.
                txn.unmarked.discard(tp)
            elif part.leader >= 0:
                part.log.write_marker(
                    txn.producer_id, txn.producer_epoch, commit=txn.commit, coordinator_epoch=0,
                    now_ms=self._wall_ms(now, now), leader_epoch=part.leader_epoch,
                )  # fmt: skip
                txn.unmarked.discard(tp)
        if txn.unmarked:
            return  # a partition has no leader: its marker waits, the transaction too
        if txn.commit:
            for group, offsets in txn.offsets.items():
                self.cluster.offsets.setdefault(group, {}).update(offsets)
        txn.offsets.clear()
        txn.partitions.clear()
        txn.state = TxnState.COMPLETE_COMMIT if txn.commit else TxnState.COMPLETE_ABORT
        if txn.bumps:
            txn.previous_producer_id = txn.producer_id
            if txn.next_producer_id != NO_PRODUCER_ID:
                txn.producer_id, txn.producer_epoch = txn.next_producer_id, 0
            txn.next_producer_id = NO_PRODUCER_ID
        txn.last_update_ms = now

    # ---- TxnOffsetCommit ---------------------------------------------------------------------

    def _txn_offset_commit(
        self, node_id: int, version: int, req: TxnOffsetCommitRequest, now: int
    ) -> TxnOffsetCommitResponse:
        # Unknown topics and partitions get their own error first (Kafka's request handler);
        # the rest share one: the group coordinator, the transaction, the member check.
        resolved: list[tuple[TxnOffsetCommitRequestTopic, str | None, int]] = []
        for topic in req.topics:
            if version >= 6:
                found = self.cluster.topic_by_id(topic.topic_id)
                resolved.append((topic, found.name if found else None, UNKNOWN_TOPIC_ID))
            else:
                resolved.append((topic, topic.name, UNKNOWN_TOPIC_OR_PARTITION))
        valid = any(
            self._known(name, p.partition_index)
            for topic, name, _ in resolved
            for p in topic.partitions
        )
        group_error = self._group_commit_error(node_id, version, req, now) if valid else NONE
        txn = self._txns.get(req.transactional_id)
        topics: list[TxnOffsetCommitResponseTopic] = []
        for topic, name, unknown in resolved:
            out = TxnOffsetCommitResponseTopic(name=topic.name, topic_id=topic.topic_id)
            for p in topic.partitions:
                metadata = p.committed_metadata
                if name is None or not self._known(name, p.partition_index):
                    error = unknown
                elif group_error != NONE or txn is None:
                    error = group_error
                elif metadata is not None and len(metadata) > MAX_OFFSET_METADATA:
                    error = OFFSET_METADATA_TOO_LARGE
                else:
                    error = NONE
                    # Kafka stores a null metadata as "" (OffsetAndMetadata.NO_METADATA).
                    value = (p.committed_offset, p.committed_leader_epoch, metadata or "")
                    txn.offsets.setdefault(req.group_id, {})[(name, p.partition_index)] = value
                out.partitions.append(
                    TxnOffsetCommitResponsePartition(
                        partition_index=p.partition_index, error_code=error
                    )
                )
            topics.append(out)
        return TxnOffsetCommitResponse(topics=topics)

    def _group_commit_error(
        self, node_id: int, version: int, req: TxnOffsetCommitRequest, now: int
    ) -> int:
        if not req.group_id:
            return INVALID_GROUP_ID
        if self.cluster.coordinator(req.group_id) != node_id:
            return NOT_COORDINATOR
        # The group coordinator asks the transaction coordinator about its offsets
        # partition, as a partition leader does for a Produce (KIP-890).
        tp = (OFFSETS_TOPIC, coordinator_partition(req.group_id, OFFSETS_PARTITIONS))
        tid, pid, epoch = req.transactional_id, req.producer_id, req.producer_epoch
        if self.transaction_version >= 2 and version >= 5:
            error = self._add(None, tid, pid, epoch, {tp}, now)
        else:
            error = self._verify(None, tid, pid, epoch, [tp])[tp]
            if error == TRANSACTION_ABORTABLE and version < 5:
                error = INVALID_TXN_STATE  # the offsets were not added (AddOffsetsToTxn)
        if error == PRODUCER_FENCED:
            error = INVALID_PRODUCER_EPOCH
        if error == NONE and self.validate_group_commit is not None:
            error = self.validate_group_commit(
                req.group_id, req.member_id, req.group_instance_id,
                req.generation_id_or_member_epoch,
            )  # fmt: skip
        return error

    # ---- DescribeTransactions / ListTransactions -------------------------------------------

    def _describe(
        self, node_id: int, req: DescribeTransactionsRequest, now: int
    ) -> DescribeTransactionsResponse:
        states: list[DescribedTransaction] = []
        for tid in req.transactional_ids:
            txn = self._txns.get(tid)
            if not tid:
                error = INVALID_REQUEST
            elif not self._is_coordinator(node_id, tid):
                error = NOT_COORDINATOR
            elif txn is None or txn.state is TxnState.DEAD:
                error = TRANSACTIONAL_ID_NOT_FOUND
            else:
                error = NONE
            if error != NONE or txn is None:
                states.append(DescribedTransaction(error_code=error, transactional_id=tid))
                continue
            by_topic: dict[str, list[int]] = {}
            for topic, index in sorted(txn.partitions):
                by_topic.setdefault(topic, []).append(index)
            states.append(
                DescribedTransaction(
                    transactional_id=tid,
                    transaction_state=txn.state.value,
                    transaction_timeout_ms=txn.timeout_ms,
                    transaction_start_time_ms=(
                        -1 if txn.start_ms < 0 else self._wall_ms(txn.start_ms, now)
                    ),
                    producer_id=txn.producer_id,
                    producer_epoch=txn.producer_epoch,
                    topics=[TopicData(topic=t, partitions=ps) for t, ps in by_topic.items()],
                )
            )
        return DescribeTransactionsResponse(transaction_states=states)

    def _list(
        self, node_id: int, version: int, req: ListTransactionsRequest, now: int
    ) -> ListTransactionsResponse:
        unknown = [s for s in req.state_filters if s not in _STATE_NAMES]
        states = {s for s in req.state_filters if s in _STATE_NAMES}
        pids = set(req.producer_id_filters)
        duration = req.duration_filter if version >= 1 else -1
        pattern: re.Pattern[str] | None = None
        if version >= 2 and req.transactional_id_pattern:
            try:
                pattern = re.compile(req.transactional_id_pattern)
            except re.error:
                return ListTransactionsResponse(error_code=INVALID_REGULAR_EXPRESSION)
        listed = [
            ListedTransaction(
                transactional_id=tid, producer_id=txn.producer_id, transaction_state=txn.state.value
            )
            for tid, txn in sorted(self._txns.items())
            if self._is_coordinator(node_id, tid)
            and txn.state is not TxnState.DEAD
            and (not pids or txn.producer_id in pids)
            and (not req.state_filters or txn.state.value in states)
            and (duration < 0 or now - txn.start_ms > duration)
            and (pattern is None or pattern.fullmatch(tid) is not None)
        ]
        return ListTransactionsResponse(unknown_state_filters=unknown, transaction_states=listed)

    # ---- helpers -----------------------------------------------------------------------------

    def _now_ms(self) -> int:
        return int(self._clock() * 1000)

    def _wall_ms(self, ms: int, now: int) -> int:
        """``ms`` on the clock as a wall-clock timestamp (what clients are shown)."""
        return int(self._wall_clock() * 1000) - (now - ms)

    def _is_coordinator(self, node_id: int, tid: str) -> bool:
        return self.cluster.coordinator(tid, transaction=True) == node_id

    def _locate(self, node_id: int | None, tid: str) -> int:
        """The coordinator error for ``tid`` asked at ``node_id`` (None: by a broker)."""
        if not tid:
            return INVALID_REQUEST
        if node_id is None:
            live = self.cluster.coordinator(tid, transaction=True) >= 0
            return NONE if live else COORDINATOR_NOT_AVAILABLE
        return NONE if self._is_coordinator(node_id, tid) else NOT_COORDINATOR

    def _known(self, topic: str | None, index: int) -> bool:
        return topic is not None and self.cluster.partition(topic, index) is not None

    def _known_partition(self, topic: str, index: int) -> bool:
        if topic == OFFSETS_TOPIC:  # internal: the fake keeps its data as a dict
            return 0 <= index < OFFSETS_PARTITIONS
        return self.cluster.partition(topic, index) is not None
