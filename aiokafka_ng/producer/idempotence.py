"""Idempotent producer state: producer id/epoch and per-partition sequences (KIP-98, KIP-360).

Theory of operation
-------------------
The broker remembers, per producer id and partition, the last five batches' sequence ranges.
A batch whose first sequence is not "last written + 1" is OUT_OF_ORDER_SEQUENCE_NUMBER; a
re-sent batch it already has is DUPLICATE_SEQUENCE_NUMBER (we count it delivered). So:

* A batch gets its sequence at its first drain (``stamp``) and keeps it on every retry; the
  header is patched in place (``set_producer_state``), records are not re-encoded.
* Per partition, ``PartitionQueue.unresolved`` lists the batches holding unresolved sequences,
  in sequence order (on the wire, or re-queued for retry). At most five new batches.
* A retried batch drains only when it is the lowest unresolved sequence of its partition;
  newer ones wait behind it (the Java client's rule: recovery drops to one in flight).
* A partition's first batch under a producer id goes alone: a broker takes any first
  sequence from a producer it has no state for, so a later batch could be written ahead of a
  failed first one, which would then fit nowhere (see ``may_drain``).
* A new batch drains to a broker only while every unresolved batch of its partition went to
  that same broker. One connection answers in order, so a failed batch is back at the head
  of its queue before any later one succeeds, and its retry reaches the broker within the
  five batches the broker remembers (a duplicate, answered with its offsets). After a leader
  move the old leader's answer can come much later (a paused broker: request_timeout_ms);
  new batches sent meanwhile to the new leader, accepted in sequence because the old leader
  had replicated the first one, pushed it out of those five, and its retry was refused with
  OUT_OF_ORDER_SEQUENCE_NUMBER until it failed (the likeliest cause of "seq 0, broker at
  307", seen on Kafka under load).
* OUT_OF_ORDER_SEQUENCE_NUMBER for a batch that is *not* the next expected sequence means an
  earlier one failed or is still in flight: just retry. For the next expected one it is a
  real gap; UNKNOWN_PRODUCER_ID means the broker lost our state (restart, retention). Both,
  and any batch that fails for good while holding a sequence (a hole nobody will fill), call
  :meth:`IdempotenceState.request_reset`.
* Reset (KIP-360's epoch bump, done the portable way): draining stops, the state calls the
  ``on_reset`` it was built with (the engine's ``producer_id_wanted`` signal), and once
  nothing is in flight the producer id's owner (``producer_id.py``) asks InitProducerId (v3+; Tansu
  rejects v0-2) for a *new* producer id. Every partition restarts at sequence 0 and queued
  retries are re-stamped. We take a new id rather than bumping the epoch locally because a
  broker that did not see the bump fences a locally bumped epoch (Tansu answers
  PRODUCER_FENCED). The producer never stops silently: records keep flowing after the reset.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from aiokafka_ng.protocol.records import set_producer_state

if TYPE_CHECKING:
    from aiokafka_ng.producer.batch import PartitionQueue, ProducerBatch

__all__ = ["MAX_IN_FLIGHT_PER_PARTITION", "IdempotenceState"]

#: Brokers keep the state of the last five batches per producer and partition.
MAX_IN_FLIGHT_PER_PARTITION = 5
_SEQ_MOD = 2**31


class IdempotenceState:
    """Producer id/epoch plus the drain rules that keep sequences gapless."""

    __slots__ = ("epoch", "on_reset", "producer_id", "ready", "resets")

    #: Whether stamped batches carry the transactional flag (the transactional subclass).
    transactional = False
    #: The error queued batches fail with when the drain meets them (only a transaction
    #: sets one: ``txn_idempotence``).
    drain_error: BaseException | None = None

    def __init__(self, on_reset: Callable[[], None] = lambda: None) -> None:
        """``on_reset``: called when a reset is requested (the engine passes its
        ``producer_id_wanted`` signal)."""
        self.producer_id = -1
        self.epoch = -1
        #: False until InitProducerId answered, and again while a reset is pending.
        self.ready = False
        self.resets = 0
        self.on_reset = on_reset

    def set_producer(self, producer_id: int, epoch: int) -> None:
        self.producer_id = producer_id
        self.epoch = epoch
        self.ready = True

    def request_reset(self, code: int | None = None) -> None:
        """Stop draining; the producer gets a new producer id once nothing is in flight.

        ``code`` is the broker error that asked for it (None: a batch holding a sequence
        failed for good); subclasses (transactions) decide differently by it."""
        if self.ready:
            self.ready = False
            self.resets += 1
            self.on_reset()

    # ------------------------------------------------------------------ drain rules

    #: The newest Produce version this producer may send: v12 changes nothing for a producer
    #: outside transactions, but inside one it adds the partition to the transaction
    #: implicitly (KIP-890's transactions v2), so only a v2 transaction may use it.
    max_produce_version = 11

    def may_drain(self, pq: PartitionQueue, batch: ProducerBatch, node: int) -> bool:
        if batch.base_sequence >= 0:
            # A retry: only the lowest unresolved sequence may go (ordered recovery).
            return bool(pq.unresolved) and pq.unresolved[0] is batch
        if len(pq.unresolved) >= MAX_IN_FLIGHT_PER_PARTITION:
            return False
        if pq.unresolved and pq.acked_producer_id != self.producer_id:
            # The partition has not written a batch of this producer id yet: one at a time
            # until it has. A broker takes any first sequence from a producer it has no
            # state for (Kafka 4.4), so if the first batch failed and the next one got in,
            # the first could only be written behind it, under a new producer id (stop 47's
            # expired records; the simulation explorer saw 19 such reorders in 20,000
            # schedules before this rule). Once one batch of the id is written, a broker
            # refuses anything but the next sequence, and pipelining is safe.
            return False
        # Not past batches still unresolved at another broker (a leader move).
        return all(b.node == node for b in pq.unresolved)

    def stamp(self, pq: PartitionQueue, batch: ProducerBatch) -> bytes:
        """Give a batch its sequence at first drain (kept on retry); return its bytes."""
        data = batch.data
        assert data is not None
        if batch.base_sequence < 0:
            seq = pq.next_sequence
            batch.base_sequence = seq
            pq.next_sequence = (seq + len(batch.futures)) % _SEQ_MOD
            pq.unresolved.append(batch)
            data = batch.data = set_producer_state(
                data, self.producer_id, self.epoch, seq, is_transactional=self.transactional
            )
        return data

    # ------------------------------------------------------------------ outcomes

    def is_next(self, pq: PartitionQueue, batch: ProducerBatch) -> bool:
        """True when ``batch`` is the next sequence the broker should expect."""
        return batch.base_sequence == (pq.last_acked + 1) % _SEQ_MOD

    def gap_at(self, pq: PartitionQueue, batch: ProducerBatch) -> bool:
        """OUT_OF_ORDER_SEQUENCE_NUMBER on ``batch`` is a gap no retry fills: ``batch`` is
        the next expected sequence, or no earlier sequence of its partition is unresolved
        (it is the first in flight), so nothing ahead of it can still make it fit. The
        second case: a broker takes any first sequence from a producer it has no state for,
        so when this batch's first attempt failed (a leader not yet elected on a new topic,
        say) and a later one of ours got in, the partition is past this batch for good.
        Otherwise an earlier batch is still on its way and this one is retried behind it."""
        return self.is_next(pq, batch) or (bool(pq.unresolved) and pq.unresolved[0] is batch)

    def acked(self, pq: PartitionQueue, batch: ProducerBatch) -> None:
        if batch.base_sequence < 0:
            return
        try:
            pq.unresolved.remove(batch)
        except ValueError:
            return  # a reset happened meanwhile; the old sequence no longer matters
        pq.last_acked = (batch.base_sequence + len(batch.futures) - 1) % _SEQ_MOD
        pq.acked_producer_id = self.producer_id

    def failed(self, pq: PartitionQueue, batch: ProducerBatch) -> None:
        """A batch holding a sequence will never be written: the sequence has a hole."""
        if batch.base_sequence < 0:
            return
        try:
            pq.unresolved.remove(batch)
        except ValueError:
            return
        self.request_reset()
