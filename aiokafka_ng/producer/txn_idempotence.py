"""How a transactional producer drains: :class:`TransactionalIdempotence`, the producer's
idempotence state when a ``transactional_id`` is set -- sequences as usual, plus the
transaction's rules for what may be drained and how a batch is stamped.

*Partitions join before data.* A transactional producer must add a partition to the
transaction (AddPartitionsToTxn) before its first batch for that partition is written,
otherwise the broker rejects the batch. :class:`TransactionalIdempotence` refuses to drain
a partition that is not in the transaction yet, queues it (``pending_partitions``) and signals
``partitions_wanted``: the manager's background task (:meth:`TransactionManager.run`) adds
every queued partition in one request and then wakes the senders. So ``send()`` still never
waits for the coordinator.

While the transaction is aborting or failed (``drain_error``, set by the manager), queued
batches fail as soon as the drain meets them (*Errors* in ``transactions.py``); under
transactions v2 Produce v12 adds a partition to the transaction by itself, so it drains at
once. A broker that fences the producer, or a sequence hole, is signalled (``fenced``,
``sequence_hole``): the manager's state machine decides what follows.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokafka_ng.errors import KafkaError, ProducerFencedError
from aiokafka_ng.producer.idempotence import IdempotenceState

if TYPE_CHECKING:
    from aiokafka_ng.producer.batch import PartitionQueue, ProducerBatch
    from aiokafka_ng.producer.signals import Signals

__all__ = ["TransactionalIdempotence"]

#: PRODUCER_FENCED on Produce is final. INVALID_PRODUCER_EPOCH on Produce is not (KIP-588):
#: the coordinator also bumps the epoch when a transaction times out, so it is abortable;
#: if we really were fenced, the abort's EndTxn says so (and that is fatal).
_PRODUCER_FENCED = 90


class TransactionalIdempotence(IdempotenceState):
    """Idempotence state of a transactional producer: sequences as usual, plus the
    transaction's drain state and rules (see the module docstring). The engine builds it;
    the transaction manager reads and moves its drain state (``partitions``,
    ``pending_partitions``, ``drain_error``, ``v2``)."""

    __slots__ = (
        "_signals",
        "drain_error",
        "partitions",
        "pending_partitions",
        "transactional_id",
        "v2",
    )

    #: Stamped batches carry the transactional flag (the broker keeps such records from
    #: read_committed consumers until the transaction's marker): ``IdempotenceState.stamp``.
    transactional = True

    def __init__(self, transactional_id: str, signals: Signals) -> None:
        super().__init__()
        self.transactional_id = transactional_id
        self._signals = signals
        #: partitions added to the open transaction / waiting to be added
        self.partitions: set[tuple[str, int]] = set()
        self.pending_partitions: set[tuple[str, int]] = set()
        #: the error queued batches fail with (aborting, abortable or fatal), else None:
        #: the accumulator's drain fails them when it meets them
        self.drain_error: KafkaError | None = None
        #: Transactions v2 for the open transaction (decided at begin, transactions.py).
        self.v2 = False

    def may_drain(self, pq: PartitionQueue, batch: ProducerBatch, node: int) -> bool:
        if self.drain_error is not None:
            # Aborting or failed: what is queued will never be part of a committed
            # transaction; the drain fails it now, so flush()/abort() need not wait for it.
            return False
        key = (pq.topic, pq.partition)
        if key not in self.partitions:
            if self.v2:  # Produce v12 adds it to the transaction
                self.partitions.add(key)
                return super().may_drain(pq, batch, node)
            if key not in self.pending_partitions:
                self.pending_partitions.add(key)
                self._signals.partitions_wanted()
            return False
        return super().may_drain(pq, batch, node)

    @property
    def max_produce_version(self) -> int:  # type: ignore[override]
        return 12 if self.v2 else 11

    def request_reset(self, code: int | None = None) -> None:
        # A transactional producer never swaps its producer id behind the user's back:
        # the broker lost or rejected our sequence state, so this transaction cannot commit.
        # Fenced: nothing can be done. Otherwise the epoch is bumped after the abort.
        if code == _PRODUCER_FENCED:
            self._signals.fenced(
                ProducerFencedError(
                    f"producer fenced: another producer with transactional id "
                    f"{self.transactional_id!r} has started"
                )
            )
            return
        self.resets += 1
        self._signals.sequence_hole()
