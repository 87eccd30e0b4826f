"""Requests of a transactional producer to its transaction coordinator (and to the group
coordinator for TxnOffsetCommit).

Theory of operation
-------------------
Every call runs in the caller's task and follows one loop (:meth:`TxnCoordinatorClient._call`
hands the request to :meth:`Cluster.call <aiokafka_ng.cluster.Cluster.call>` on the
coordinator route): find the coordinator through the cluster's cached FindCoordinator
(``key_type=1`` for the transactional id, ``0`` for a consumer group), send the request,
read the error code(s), then

* success: return the response;
* NOT_COORDINATOR / COORDINATOR_NOT_AVAILABLE, or a connection failure / timeout (the
  coordinator may have moved or died): forget the cached coordinator, back off, find it again;
* CONCURRENT_TRANSACTIONS (the previous transaction's markers are still being written --
  common right after a commit, and after a fault heals): send again after 20 ms, without
  growing the backoff's count (``Retry.steady``): the coordinator is up and answers, and
  the error clears as soon as the markers are written, so a longer pause would only add
  idle time after that (see ``_RETRY_POLICY`` for the measurements and the Java client's
  pacing);
* COORDINATOR_LOAD_IN_PROGRESS / UNKNOWN_TOPIC_OR_PARTITION / REQUEST_TIMED_OUT: back off
  and send again;
* anything else: raise the broker's error. INVALID_PRODUCER_EPOCH on a transactional request
  means another producer with our transactional id took over, so it is raised as
  :class:`~aiokafka_ng.errors.ProducerFencedError` (as the Java client does).

Pauses come from the shared :class:`~aiokafka_ng.net.backoff.ExponentialBackoff`, growing
with the failures counted (CONCURRENT_TRANSACTIONS is not counted). When one answer carries
several retriable codes, a coordinator that moved decides, then any code that grows the
pause, CONCURRENT_TRANSACTIONS last. The whole call is bounded by ``max_block_ms`` (Java
bounds ``initTransactions``/``commitTransaction`` the same way) and then raises
:class:`~aiokafka_ng.errors.KafkaTimeoutError` naming the last error. Retrying is safe for
every request here: the coordinator treats a repeated AddPartitions/AddOffsets as a no-op
and a repeated EndTxn of the same kind as success.

Versions: AddPartitionsToTxn stops at v3 (v4+ is the broker-to-broker batched form; one
request still carries all our new partitions), EndTxn at v4 and TxnOffsetCommit at v4, or
v5 of both in a transaction of KIP-890's transactions v2 (the epoch moves at every EndTxn;
see transactions.py), InitProducerId at v5. Tansu rejects InitProducerId v0-v2, Kafka needs
v3+ to bump an epoch (KIP-360); older versions are still used against older brokers.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from aiokafka_ng.cluster.client import ClusterClient
from aiokafka_ng.cluster.retry import Coordinator, Final, Retry, RetryState
from aiokafka_ng.errors import (
    ConcurrentTransactionsError,
    KafkaError,
    ProducerFencedError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import error_for_code
from aiokafka_ng.protocol.messages.add_offsets_to_txn import AddOffsetsToTxnRequest
from aiokafka_ng.protocol.messages.add_partitions_to_txn import (
    AddPartitionsToTxnRequest,
    AddPartitionsToTxnResponse,
    AddPartitionsToTxnTopic,
)
from aiokafka_ng.protocol.messages.end_txn import EndTxnRequest
from aiokafka_ng.protocol.messages.init_producer_id import InitProducerIdRequest
from aiokafka_ng.protocol.messages.txn_offset_commit import (
    TxnOffsetCommitRequest,
    TxnOffsetCommitRequestPartition,
    TxnOffsetCommitRequestTopic,
)
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

__all__ = [
    "ConsumerGroupMetadata",
    "CoordinatorCluster",
    "TxnCoordinatorClient",
    "complete_prepared",
    "group_metadata",
    "parse_offsets",
]

_UNKNOWN_TOPIC_OR_PARTITION = 3
_REQUEST_TIMED_OUT = 7
_COORDINATOR_LOAD_IN_PROGRESS = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_INVALID_PRODUCER_EPOCH = 47
_CONCURRENT_TRANSACTIONS = 51
_OPERATION_NOT_ATTEMPTED = 55

_REFIND = frozenset({_COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR})
_STEADY = frozenset({_CONCURRENT_TRANSACTIONS})
_RETRY = frozenset(
    {
        _COORDINATOR_LOAD_IN_PROGRESS,
        _CONCURRENT_TRANSACTIONS,
        _UNKNOWN_TOPIC_OR_PARTITION,
        _REQUEST_TIMED_OUT,
    }
)
#: CONCURRENT_TRANSACTIONS is retried after 20 ms (or the backoff's first step if shorter),
#: never a grown pause. The markers it waits for take a few tens of milliseconds on a
#: healthy cluster, and every transaction that follows a commit at once meets them (its
#: first request to a coordinator comes a few ms after the EndTxn): retried at
#: retry_backoff_ms (100), bench/bench_txn.py's one-record cycle on a 3-node Kafka 4.4 ran
#: 8.0 transactions/s, p50 125 ms; at 20 ms, 22.3/s, p50 37 ms (aiokafka 18.3/s). The Java
#: producer (4.0) re-sends a transactional request answered with a retriable error after a
#: flat retry.backoff.ms (the Sender sleeps it; KIP-580 is not applied to these), and after
#: 20 ms for an AddPartitionsToTxn answered CONCURRENT_TRANSACTIONS while the transaction
#: holds no partition yet (TransactionManager's ADD_PARTITIONS_RETRY_BACKOFF_MS);
#: librdkafka retries AddPartitionsToTxn after 20 ms on every CONCURRENT_TRANSACTIONS.
#: Growing the pause made a commit after a healed fault wait up to retry_backoff_max_ms once
#: the markers were written. Codes that say the coordinator is down, loading or moving keep
#: the growing backoff.
_RETRY_POLICY = Retry(steady=(ConcurrentTransactionsError,), steady_ms=20)

#: Highest versions we speak (see the module docstring).
MAX_INIT_PRODUCER_ID = 5
MAX_ADD_PARTITIONS = 3
MAX_ADD_OFFSETS = 4
MAX_TXN_OFFSET_COMMIT = 4  # 5 in a transaction of transactions v2
MAX_END_TXN = 4  # 5 in a transaction of transactions v2

TRANSACTION_KEY = 1
GROUP_KEY = 0

M = TypeVar("M", bound=ApiMessage)


#: The name the transaction manager knows the cluster by: the producer's
#: :class:`~aiokafka_ng.cluster.Cluster`, through the protocol its parts take.
CoordinatorCluster = ClusterClient


@dataclass(frozen=True, slots=True)
class ConsumerGroupMetadata:
    """The consumer group whose offsets a transaction commits (KIP-447).

    With ``generation_id``/``member_id`` from the consumer, the group coordinator rejects the
    commit of a member that was fenced by a rebalance; with only ``group_id`` (generation -1)
    it does not check membership.
    """

    group_id: str
    generation_id: int = -1
    member_id: str = ""
    group_instance_id: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedTransaction:
    """A transaction that ``prepare_transaction()`` flushed and left open, for a process
    that holds these values to commit or abort (``Producer.complete_transaction``).

    Plain values: it pickles and fits a Spark commit message. ``producer_id`` -1: nothing
    was added to the transaction, so there is nothing to end.
    """

    transactional_id: str
    producer_id: int
    epoch: int
    #: transactions v2 (KIP-890): the coordinator expects EndTxn v5 for it
    v2: bool = False


class TxnCoordinatorClient:
    """The transactional requests, each retried as the module docstring says."""

    def __init__(
        self,
        cluster: CoordinatorCluster,
        transactional_id: str,
        *,
        transaction_timeout_ms: int,
        retry_backoff: ExponentialBackoff,
        request_timeout_s: float,
        max_block_s: float,
    ) -> None:
        self.cluster = cluster
        self.transactional_id = transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.backoff = retry_backoff
        self.request_timeout_s = request_timeout_s
        self.max_block_s = max_block_s
        #: requests answered, by API name (for tests and statistics)
        self.requests: dict[str, int] = {}
        #: retries after a retriable error code, by code
        self.retried_codes: dict[int, int] = {}

    # ------------------------------------------------------------------ the requests

    async def init_producer_id(self, producer_id: int = -1, epoch: int = -1) -> tuple[int, int]:
        """InitProducerId for our transactional id: (producer id, epoch). With the current
        id/epoch (v3+) the coordinator bumps the epoch of *this* producer (KIP-360); with
        -1/-1 it fences any other producer using the id and aborts its open transaction."""

        # The current id/epoch ask for a bump of *this* producer (v3+); below v3 the
        # encoder leaves both fields out, so older brokers see the plain request.
        bump = producer_id >= 0
        resp = await self._call(
            "InitProducerId",
            InitProducerIdRequest(
                transactional_id=self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                producer_id=producer_id if bump else -1,
                producer_epoch=epoch if bump else -1,
            ),
            MAX_INIT_PRODUCER_ID,
            lambda r: [(r.error_code, None)],
        )
        return resp.producer_id, resp.producer_epoch

    async def add_partitions(
        self, producer_id: int, epoch: int, partitions: Collection[tuple[str, int]]
    ) -> None:
        """Add ``partitions`` to the open transaction, all in one request."""
        by_topic: dict[str, list[int]] = {}
        for topic, partition in sorted(partitions):
            by_topic.setdefault(topic, []).append(partition)
        topics = [AddPartitionsToTxnTopic(name=t, partitions=ps) for t, ps in by_topic.items()]

        request = AddPartitionsToTxnRequest(
            v3_and_below_transactional_id=self.transactional_id,
            v3_and_below_producer_id=producer_id,
            v3_and_below_producer_epoch=epoch,
            v3_and_below_topics=topics,
        )

        def codes(resp: AddPartitionsToTxnResponse) -> list[tuple[int, str | None]]:
            # OPERATION_NOT_ATTEMPTED only says another partition failed: the failing one
            # decides what happens to the whole request.
            return [
                (p.partition_error_code, f"{t.name}-{p.partition_index}")
                for t in resp.results_by_topic_v3_and_below
                for p in t.results_by_partition
                if p.partition_error_code != _OPERATION_NOT_ATTEMPTED
            ]

        await self._call("AddPartitionsToTxn", request, MAX_ADD_PARTITIONS, codes)

    async def add_offsets(self, producer_id: int, epoch: int, group_id: str) -> None:
        """Tell the transaction coordinator that this transaction commits ``group_id``'s
        offsets (it then writes the markers to that group's offsets partition too)."""
        await self._call(
            "AddOffsetsToTxn",
            AddOffsetsToTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                group_id=group_id,
            ),
            MAX_ADD_OFFSETS,
            lambda r: [(r.error_code, None)],
        )

    async def txn_offset_commit(
        self,
        producer_id: int,
        epoch: int,
        group: ConsumerGroupMetadata,
        offsets: Mapping[tuple[str, int], tuple[int, str | None, int]],
        *,
        v2: bool = False,
    ) -> None:
        """Commit ``offsets`` ({(topic, partition): (offset, metadata, leader_epoch)}) as part
        of the transaction, at the *group* coordinator. ``v2``: transactions v2, where v5
        adds the group to the transaction itself (no AddOffsetsToTxn)."""
        by_topic: dict[str, list[TxnOffsetCommitRequestPartition]] = {}
        for (topic, partition), (offset, metadata, leader_epoch) in sorted(offsets.items()):
            by_topic.setdefault(topic, []).append(
                TxnOffsetCommitRequestPartition(
                    partition_index=partition,
                    committed_offset=offset,
                    committed_leader_epoch=leader_epoch,
                    committed_metadata=metadata,
                )
            )
        topics = [TxnOffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()]

        request = TxnOffsetCommitRequest(
            transactional_id=self.transactional_id,
            group_id=group.group_id,
            producer_id=producer_id,
            producer_epoch=epoch,
            generation_id_or_member_epoch=group.generation_id,
            member_id=group.member_id,
            group_instance_id=group.group_instance_id,
            topics=topics,
        )
        await self._call(
            "TxnOffsetCommit",
            request,
            MAX_TXN_OFFSET_COMMIT + v2,
            lambda r: [
                (p.error_code, f"{t.name}-{p.partition_index}")
                for t in r.topics
                for p in t.partitions
            ],
            key=group.group_id,
            key_type=GROUP_KEY,
        )

    async def end_txn(
        self, producer_id: int, epoch: int, *, commit: bool, v2: bool = False
    ) -> tuple[int, int] | None:
        """Commit or abort the open transaction (the coordinator writes the markers). With
        ``v2`` (transactions v2, EndTxn v5) the coordinator bumps the epoch and answers the
        producer id and epoch the next transaction must use; None before v5."""
        resp = await self._call(
            "EndTxn",
            EndTxnRequest(
                transactional_id=self.transactional_id,
                producer_id=producer_id,
                producer_epoch=epoch,
                committed=commit,
            ),
            MAX_END_TXN + v2,
            lambda r: [(r.error_code, None)],
        )
        if resp.producer_id < 0:  # not v5: the epoch stays
            return None
        return resp.producer_id, resp.producer_epoch

    # ------------------------------------------------------------------ the loop

    async def _call(
        self,
        what: str,
        request: ApiRequest[M],
        max_version: int,
        codes: Callable[[M], list[tuple[int, str | None]]],
        *,
        key: str | None = None,
        key_type: int = TRANSACTION_KEY,
    ) -> M:
        key = self.transactional_id if key is None else key

        def check(response: M) -> M:
            self.requests[what] = self.requests.get(what, 0) + 1
            errors = [(c, where) for c, where in codes(response) if c]
            if not errors:
                return response
            fatal = [(c, w) for c, w in errors if c not in _REFIND and c not in _RETRY]
            if fatal:
                # Final even where Kafka calls the code retriable: only the codes above are.
                raise Final(self._error(what, *fatal[0]))
            for c, _ in errors:
                self.retried_codes[c] = self.retried_codes.get(c, 0) + 1
            # A coordinator that moved wins: the driver forgets it and looks it up again.
            # Then a code that grows the backoff: the slowest condition paces the retry.
            code, where = min(errors, key=lambda e: (e[0] not in _REFIND, e[0] in _STEADY))
            raise error_for_code(code)(f"{what}{f' ({where})' if where else ''}")

        # The driver retries retriable failures (a lost connection or NOT_COORDINATOR also
        # forget the coordinator) until max_block_ms.
        return await self.cluster.call(
            request,
            Coordinator(key, key_type),
            check=check,
            max_version=max_version,
            request_timeout=self.request_timeout_s,
            retry=_RETRY_POLICY,
            state=RetryState(self.backoff, timeout=self.max_block_s),
            what=f"{what} for transactional id {self.transactional_id!r}",
            limit=f"max_block_ms ({self.max_block_s * 1000:g} ms)",
        )

    def _error(self, what: str, code: int, where: str | None) -> KafkaError:
        err = error_for_code(code)
        place = f" ({where})" if where else ""
        if code == _INVALID_PRODUCER_EPOCH or err is ProducerFencedError:
            return ProducerFencedError(
                f"{what}{place}: producer fenced -- another producer with transactional id "
                f"{self.transactional_id!r} has started (error {err.__name__})"
            )
        return err(f"{what}{place} failed: {err.__name__}")


async def complete_prepared(
    cluster: CoordinatorCluster,
    prepared: PreparedTransaction,
    *,
    commit: bool,
    transaction_timeout_ms: int,
    retry_backoff: ExponentialBackoff,
    request_timeout_s: float,
    max_block_s: float,
) -> None:
    """Commit (or abort) ``prepared`` with EndTxn under its own transactional id, producer
    id and epoch, from any producer's cluster (``Producer.complete_transaction``, which
    skips a transaction nothing was added to: ``producer_id < 0``)."""
    client = TxnCoordinatorClient(
        cluster,
        prepared.transactional_id,
        transaction_timeout_ms=transaction_timeout_ms,
        retry_backoff=retry_backoff,
        request_timeout_s=request_timeout_s,
        max_block_s=max_block_s,
    )
    await client.end_txn(prepared.producer_id, prepared.epoch, commit=commit, v2=prepared.v2)


def group_metadata(group: ConsumerGroupMetadata | str | Any) -> ConsumerGroupMetadata:
    """A :class:`ConsumerGroupMetadata` from a group id, itself, an object with a
    ``group_metadata()`` method (a consumer), or one with the same attributes."""
    if isinstance(group, ConsumerGroupMetadata):
        return group
    if isinstance(group, str):
        return ConsumerGroupMetadata(group)
    getter = getattr(group, "group_metadata", None)
    if callable(getter):
        return group_metadata(getter())
    group_id = getattr(group, "group_id", None)
    if isinstance(group_id, str):
        return ConsumerGroupMetadata(
            group_id,
            int(getattr(group, "generation_id", -1)),
            str(getattr(group, "member_id", "")),
            getattr(group, "group_instance_id", None),
        )
    raise TypeError(
        "group must be a group id (str), a ConsumerGroupMetadata or a consumer's "
        f"group_metadata() (got {type(group).__name__})"
    )


def parse_offsets(
    offsets: Mapping[Any, Any],
) -> dict[tuple[str, int], tuple[int, str | None, int]]:
    out: dict[tuple[str, int], tuple[int, str | None, int]] = {}
    for tp, value in offsets.items():
        topic, partition = tp
        if isinstance(value, int):
            out[(topic, partition)] = (value, "", -1)
        else:
            # OffsetAndMetadata(offset, metadata, leader_epoch) or anything shaped like it
            out[(topic, partition)] = (
                int(value.offset),
                getattr(value, "metadata", ""),
                int(getattr(value, "leader_epoch", -1)),
            )
    if not out:
        raise ValueError("send_offsets_to_transaction() needs at least one offset")
    return out
