"""How a transactional producer drains: :class:`TransactionalIdempotence`, the producer's
idempotence state when a ``transactional_id`` is set -- sequences as usual, plus the
transaction's rules for what may be drained and how a batch is stamped.

*Partitions join before data.* A transactional producer must add a partition to the
transaction (AddPartitionsToTxn) before its first batch for that partition is written,
otherwise the broker rejects the batch. :class:`TransactionalIdempotence` refuses to drain
a partition that is not in the transaction yet and queues it for the manager's background task
(:meth:`TransactionManager.run`), which adds every queued partition in one request and then
wakes the senders. So ``send()`` still never waits for the coordinator.

While the transaction is aborting or failed (``TransactionManager.drain_error``), queued
batches fail at once (*Errors* in ``transactions.py``); under transactions v2 Produce v12
adds a partition to the transaction by itself, so it drains at once.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Protocol

from aiokafka_ng.errors import KafkaError, ProducerFencedError
from aiokafka_ng.producer.idempotence import IdempotenceState

if TYPE_CHECKING:
    from aiokafka_ng.producer.batch import PartitionQueue, ProducerBatch

__all__ = ["Transaction", "TransactionalIdempotence"]


class BatchFailer(Protocol):
    """The accumulator, as far as the drain rules use it."""

    def fail(self, batch: ProducerBatch, exc: BaseException) -> None: ...


class Transaction(Protocol):
    """What the drain rules read and call of the transaction manager
    (``transactions.TransactionManager``, which imports this module: a protocol here keeps
    the two from importing each other)."""

    @property
    def transactional_id(self) -> str: ...
    @property
    def drain_error(self) -> KafkaError | None: ...
    @property
    def accumulator(self) -> BatchFailer | None: ...
    @property
    def partitions(self) -> set[tuple[str, int]]: ...
    @property
    def pending_partitions(self) -> set[tuple[str, int]]: ...
    @property
    def v2(self) -> bool: ...
    def wake(self) -> None: ...
    def fail_fatal(self, exc: KafkaError) -> None: ...
    def sequence_hole(self) -> None: ...


#: PRODUCER_FENCED on Produce is final. INVALID_PRODUCER_EPOCH on Produce is not (KIP-588):
#: the coordinator also bumps the epoch when a transaction times out, so it is abortable;
#: if we really were fenced, the abort's EndTxn says so (and that is fatal).
_PRODUCER_FENCED = 90


class TransactionalIdempotence(IdempotenceState):
    """Idempotence state of a transactional producer: sequences as usual, plus the
    transaction's drain rules (see the module docstring)."""

    __slots__ = ("manager",)

    #: Stamped batches carry the transactional flag (the broker keeps such records from
    #: read_committed consumers until the transaction's marker): ``IdempotenceState.stamp``.
    transactional = True

    def __init__(self, manager: Transaction) -> None:
        super().__init__()
        self.manager = manager

    def may_drain(self, pq: PartitionQueue, batch: ProducerBatch, node: int) -> bool:
        m = self.manager
        if m.drain_error is not None:
            # Aborting or failed: what is queued will never be part of a committed
            # transaction. Fail it now, so flush()/abort() need not wait for it.
            acc = m.accumulator
            if acc is not None:
                exc = m.drain_error
                while pq.batches:
                    acc.fail(pq.batches.popleft(), exc)
            return False
        key = (pq.topic, pq.partition)
        if key not in m.partitions:
            if m.v2:  # Produce v12 adds it to the transaction
                m.partitions.add(key)
                return super().may_drain(pq, batch, node)
            if key not in m.pending_partitions:
                m.pending_partitions.add(key)
                m.wake()
            return False
        return super().may_drain(pq, batch, node)

    @property
    def max_produce_version(self) -> int:  # type: ignore[override]
        return 12 if self.manager.v2 else 11

    def request_reset(self, code: int | None = None) -> None:
        # A transactional producer never swaps its producer id behind the user's back:
        # the broker lost or rejected our sequence state, so this transaction cannot commit.
        # Fenced: nothing can be done. Otherwise the epoch is bumped after the abort.
        if code == _PRODUCER_FENCED:
            self.manager.fail_fatal(
                ProducerFencedError(
                    f"producer fenced: another producer with transactional id "
                    f"{self.manager.transactional_id!r} has started"
                )
            )
            return
        self.resets += 1
        self.manager.sequence_hole()
