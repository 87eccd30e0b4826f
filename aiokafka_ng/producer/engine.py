"""The producer engine: every record's state between ``send()`` and its outcome, without I/O.

Theory of operation
-------------------
:class:`ProducerEngine` is the synchronous core of a :class:`~aiokafka_ng.producer.Producer`
(DESIGN.md, "The shape we are moving to"). Built from the producer's config in one
constructor, it owns

* the memory pool (:class:`~aiokafka_ng.producer.memory.MemoryPool`, ``buffer_memory``),
* the accumulator (:class:`~aiokafka_ng.producer.accumulator.Accumulator`: topic queues,
  partition batches, readiness, drain, expiry),
* the idempotence state (:class:`~aiokafka_ng.producer.idempotence.IdempotenceState`, or
  the transactional one of :mod:`~aiokafka_ng.producer.txn_idempotence`; None without
  idempotence),

and applies what happens to a request: :meth:`settle` takes a Produce answer (or the
request's failure), asks the pure rule book (:mod:`aiokafka_ng.producer.settle`) what it means
for each batch and carries the outcomes out in order (:meth:`apply`). It never awaits I/O and
never starts a task: what it needs of the world -- a node's sender to look again, a topic's
metadata, a new producer id -- it says through the :class:`~aiokafka_ng.producer.signals.Signals`
it was built with.

Around it, thin drivers do the I/O: one :class:`~aiokafka_ng.producer.sender.NodeSender` per
broker (connect, :meth:`drain`, submit, await, :meth:`settle`), the expiry timer
(:meth:`~aiokafka_ng.producer.accumulator.Accumulator.expire` at the next deadline), and the
producer id's owner (:mod:`~aiokafka_ng.producer.producer_id`) or the transaction manager,
which take the engine in their constructors and give it a new producer id with
:meth:`new_producer_id` once :meth:`wait_nothing_in_flight` returns.

The engine has two waits, both on its own state and never on I/O: the memory pool's
``reserve`` (``send()`` waiting for buffer memory) and :meth:`wait_nothing_in_flight`.

The engine is the only way in to what it owns: ``send()`` and the bulk path reserve memory
(:attr:`try_reserve`, :meth:`reserve`, :meth:`release`), learn what a record waiting for
its topic's metadata costs (:meth:`waiting_charge`) and hand records over (:attr:`add`,
:meth:`add_run`); flush, close and the transaction manager wait for :meth:`incomplete` and
fail what is left with :meth:`abort_all`; ``statistics()`` reads :meth:`statistics`. No
other module touches the accumulator or the pool (``tests/test_quality.py`` checks).

Tests drive an engine alone (no producer, no connection, a clock of their own): build it
from a :class:`~aiokafka_ng.config.ProducerConfig`, give it metadata, :attr:`add`,
:meth:`drain`, :meth:`settle` a canned answer, read the futures.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.errors import KafkaError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.producer.accumulator import PENDING_OVERHEAD, Accumulator
from aiokafka_ng.producer.delivery import decide
from aiokafka_ng.producer.future import BatchDelivery, Delivery, fail_position
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.partitioner import StickyPartitioner
from aiokafka_ng.producer.settle import (
    Delivered,
    Failed,
    NewLeader,
    Outcome,
    Refresh,
    Requeue,
    ResetProducerId,
    Rules,
    Split,
    error_outcomes,
    response_outcomes,
)
from aiokafka_ng.producer.signals import QUIET, Signals
from aiokafka_ng.producer.txn_idempotence import TransactionalIdempotence
from aiokafka_ng.protocol.compression import Compression

if TYPE_CHECKING:
    from aiokafka_ng.cluster.metadata import ClusterMetadata
    from aiokafka_ng.config import ProducerConfig
    from aiokafka_ng.producer.batch import Headers, ProducerBatch, QueuedRun
    from aiokafka_ng.protocol.messages.produce import ProduceResponse

__all__ = ["CODECS", "ProducerEngine"]

log = logging.getLogger("aiokafka_ng.producer.sender")  # where outcomes were always logged

#: ``compression_type`` -> the codec.
CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


class ProducerEngine:
    """The producer's records, batches, memory and sequences; synchronous, no I/O (see the
    module docstring). A documented seam: tests build one from a config and drive it."""

    __slots__ = (
        "_no_flight",
        "acc",
        "add",
        "clock",
        "idem",
        "loop",
        "pool",
        "retry_backoff",
        "rules",
        "signals",
        "try_reserve",
    )

    def __init__(
        self,
        config: ProducerConfig,
        *,
        signals: Signals = QUIET,
        clock: Callable[[], float] = time.monotonic,
        sticky: StickyPartitioner | None = None,
    ) -> None:
        """``signals``: what the engine tells the world (default: nobody); ``clock``: the
        clock linger, retry and delivery deadlines are read on -- the event loop's in a
        producer (:meth:`started`); ``sticky``: the KIP-794 partition picker (tests seed
        one)."""
        self.signals = signals
        #: One retry policy (KIP-580) for batches, reconnects and the transaction's requests.
        self.retry_backoff = ExponentialBackoff.retry(
            config.retry_backoff_ms, config.retry_backoff_max_ms
        )
        idem: IdempotenceState | None = None
        if config.transactional_id is not None:
            idem = TransactionalIdempotence(config.transactional_id, signals)
        elif config.enable_idempotence:
            idem = IdempotenceState(on_reset=signals.producer_id_wanted)
        self.idem = idem
        self.pool = MemoryPool(config.buffer_memory, signals=signals)
        self.acc = Accumulator(
            pool=self.pool,
            batch_size=config.batch_size,
            linger_ms=config.linger_ms,
            compression=CODECS[config.compression_type],
            compression_level=config.compression_level,
            max_request_size=config.max_request_size,
            delivery_timeout_ms=config.delivery_timeout_ms,
            retry_backoff=self.retry_backoff,
            max_block_ms=config.max_block_ms,
            guarantee_order=config.max_in_flight_requests_per_connection == 1,
            idempotence=idem,
            partitioner=config.partitioner,
            # KIP-1123 as Java: rack-aware only when asked and the client has a rack.
            sticky=sticky
            if sticky is not None
            else StickyPartitioner(
                rack=(config.client_rack or None) if config.partitioner_rack_aware else None
            ),
            signals=signals,
            clock=clock,
        )
        self.clock = clock
        # The two operations send() makes per record are the pool's and the accumulator's
        # own methods, bound here: a method of the engine calling them would be one more
        # Python call per record (measured: 0.3-0.5 us on send()'s Python path in all).
        #: ``try_reserve(size)``: take ``size`` bytes of ``buffer_memory`` if they are free
        #: now and nobody waits for memory, without waiting (``MemoryPool.try_reserve``).
        self.try_reserve: Callable[[int], bool] = self.pool.try_reserve
        #: ``add(topic, partition, key, value, headers, timestamp_ms, size, future)``: add
        #: one record (``size`` bytes reserved): placed in its partition's batch, or queued
        #: for its topic's metadata; never blocks, and a record-specific problem fails its
        #: future, not the call (``Accumulator.append``).
        self.add: Callable[
            [str, int, bytes | None, bytes | None, Headers | None, int, int, Delivery[Any]], None
        ] = self.acc.append
        #: The asyncio loop futures' callbacks go through (None under trio, or not started).
        self.loop: asyncio.AbstractEventLoop | None = None
        #: What settle.py's decisions read besides the answer.
        self.rules = Rules(config.retries, self.acc.delivery_timeout, idem)
        #: Set at the end of a request while :meth:`wait_nothing_in_flight` waits.
        self._no_flight: anyio.Event | None = None

    def __repr__(self) -> str:
        return (
            f"<ProducerEngine topics={len(self.acc.topics)} in_flight={len(self.acc.flight)} "
            f"memory={self.pool.available}/{self.pool.total}>"
        )

    def started(self, clock: Callable[[], float], loop: asyncio.AbstractEventLoop | None) -> None:
        """The producer runs: deadlines are read on ``clock`` (the event loop's, read without
        a backend lookup per call) and, under asyncio, futures' callbacks go through
        ``loop``."""
        self.clock = self.acc.clock = clock
        self.loop = self.acc.loop = loop

    # ------------------------------------------------------------------ the way in

    async def reserve(self, size: int, timeout: float | None) -> None:  # noqa: ASYNC109
        """Wait at most ``timeout`` seconds for ``size`` bytes of ``buffer_memory``
        (``BufferExhaustedError`` then); cancelled, it gives back what it had gathered."""
        await self.pool.reserve(size, timeout)

    def release(self, size: int) -> None:
        """Give back ``size`` bytes reserved for records that were not added after all."""
        self.pool.release(size)

    @property
    def buffer_memory(self) -> int:
        """The whole ``buffer_memory`` budget, in bytes."""
        return self.pool.total

    def waiting_charge(self, topic: str) -> int:
        """What each record of ``topic`` added now costs ``buffer_memory`` on top of its
        size estimate: :data:`~aiokafka_ng.producer.accumulator.PENDING_OVERHEAD` when it
        will wait for the topic's metadata as a queue entry holding its own objects, else 0.
        Makes the topic's entry if it has none (a topic the cluster knows already is then
        placed at once). Looked at before the memory is reserved: should the metadata come
        during a wait for memory, the record is placed and was charged a little more."""
        acc = self.acc
        t = acc.topics.get(topic)
        if t is None:
            t = acc.new_topic(topic)
        # t.placing(), inline: once per record of send()'s Python path.
        return 0 if t.ready and not t.pending else PENDING_OVERHEAD

    def add_run(self, topic: str, chunk: QueuedRun) -> None:
        """Add a chunk of a bulk run (its memory reserved): placed at once when the topic's
        metadata is known and nothing of it waits, else queued as one entry, placed whole
        in its turn."""
        self.acc.append_run(topic, chunk)

    def refuse(self, future: Delivery[Any], exc: BaseException, position: int = -1) -> None:
        """A record that never reached the engine (too large, no memory in time) fails
        alone: its future -- or, for a record of a run's :class:`BatchDelivery`, its
        ``position`` there -- with ``exc``; counted as failed."""
        self.acc.records_failed += 1
        if isinstance(future, BatchDelivery):
            fail_position(future, position, exc)
        decide(future, exc)

    def incomplete(self) -> list[Delivery[Any]]:
        """Futures whose completion means everything added so far is decided (one per
        unfinished batch, every waiting record or run): what flush and close await."""
        return self.acc.incomplete()

    def abort_all(self, exc: BaseException, *, in_flight: bool = False) -> None:
        """Fail everything not in flight with ``exc`` (and what is, with ``in_flight``: no
        answer will be settled any more)."""
        self.acc.abort_all(exc, in_flight=in_flight)

    @property
    def records_failed(self) -> int:
        return self.acc.records_failed

    def waiting_reason(self, topic: str) -> str:
        """What an unacknowledged record of ``topic`` waits for, for a caller who stopped
        waiting."""
        return self.acc.waiting_reason(topic)

    def topic_names(self) -> Iterable[str]:
        """The topics records were added for (for a metadata refresh)."""
        return self.acc.topics.keys()

    def statistics(self) -> dict[str, Any]:
        """The engine's part of ``Producer.statistics()``: counters only, by field name."""
        acc, pool, idem = self.acc, self.pool, self.idem
        return {
            "memory": pool.statistics(),
            "records_sent": acc.records_sent,
            "records_failed": acc.records_failed,
            "batches_sent": acc.batches_sent,
            "buffer_bytes_used": pool.total - pool.available,
            "request_latency_ms": acc.request_latency.snapshot(),
            "in_flight_batches": len(acc.flight),
            "retries": acc.retries,
            "splits": acc.splits,
            "expired_batches": acc.expired_batches,
            "producer_id": None if idem is None else idem.producer_id,
            "producer_id_resets": 0 if idem is None else idem.resets,
        }

    # ------------------------------------------------------------------ the expiry timer's side

    def expire(self, now: float) -> float | None:
        """Fail what outlived its deadline at ``now``; the next deadline (None when nothing
        is held)."""
        acc = self.acc
        acc.expire(now)
        return acc.next_expiry()

    def expiry_sleeps(self, until: float | None) -> None:
        """The expiry timer sleeps until ``until`` (None: until woken by ``wake_expiry``):
        what enters with an earlier deadline, or while it waits to be woken, wakes it."""
        acc = self.acc
        if until is None:
            acc.expiry_armed = False
        else:
            acc.expiry_armed = True
            acc.expiry_at = until

    # ------------------------------------------------------------------ the sender's side

    def update_metadata(self, snapshot: ClusterMetadata) -> None:
        """A metadata snapshot: leaders move, waiting records are placed."""
        self.acc.update_metadata(snapshot)

    def next_deadline(self, node: int, now: float) -> float | None:
        """Earliest time a batch of ``node`` becomes ready by time alone."""
        return self.acc.next_deadline(node, now)

    def drain(self, node: int, now: float) -> tuple[list[ProducerBatch], float | None]:
        """The ready batches of ``node`` for one request (see ``Accumulator.drain``)."""
        return self.acc.drain(node, now)

    @property
    def max_produce_version(self) -> int:
        """The newest Produce version the idempotence state allows (11 without one)."""
        idem = self.idem
        return 11 if idem is None else idem.max_produce_version

    def settle(
        self,
        batches: Sequence[ProducerBatch],
        response: ProduceResponse | None,
        error: KafkaError | None = None,
        *,
        started: float | None = None,
    ) -> None:
        """Settle the ``batches`` of one request: by its ``response`` (None with ``acks=0``:
        written, offsets unknown), or by the ``error`` it failed with as a whole.
        ``started``: when it was written, for the request latency."""
        now = self.clock()
        if error is not None:
            rules = self.rules
            for batch in batches:
                self.apply(error_outcomes(batch, error, None, now, rules), now)
        elif response is None:
            for b in batches:
                self.acc.complete(b, -1, -1)
        else:
            if started is not None:
                self.acc.request_latency.record(now - started)
            self.apply(response_outcomes(response, batches, now, self.rules), now)

    def fail_unsent(self, batches: Iterable[ProducerBatch], exc: BaseException) -> None:
        """Batches drained for a request that could not be made (no Produce version both
        sides speak): they fail for good."""
        for b in batches:
            self.acc.fail(b, exc)

    def request_ended(self) -> None:
        """A request ended, answered or not (the senders, once per request): the only
        moment the flight can shrink to empty with its answers settled."""
        event = self._no_flight
        if event is not None:
            event.set()

    def apply(self, outcomes: Iterable[Outcome], now: float) -> None:
        """Carry out what :mod:`.settle` decided at ``now``, in order."""
        acc = self.acc
        for o in outcomes:
            if isinstance(o, Delivered):
                acc.complete(o.batch, o.base_offset, o.log_append_time, o.log_start_offset)
            elif isinstance(o, Requeue):
                acc.requeue(o.batch, now)
            elif isinstance(o, Failed):
                acc.fail(o.batch, o.exc)
            elif isinstance(o, Split):
                if not acc.split(o.batch):
                    self.apply(o.fallback, now)
            elif isinstance(o, NewLeader):
                self.signals.leader_moved(o.topic, o.partition, o.leader, o.epoch, o.endpoint)
            elif isinstance(o, Refresh):
                self.signals.need_metadata(o.topic)
            elif isinstance(o, ResetProducerId):
                # A real gap, or the broker lost/fenced our producer state (KIP-360).
                log.info("producer: %s on %s; resetting producer id", type(o.exc).__name__, o.batch)
                assert self.idem is not None
                self.idem.request_reset(o.code)

    # ------------------------------------------------------------------ producer id

    async def wait_nothing_in_flight(self) -> None:
        """Return once no batch is in flight: their answers are settled, so their sequences
        no longer matter (looked at again at the end of each request)."""
        flight = self.acc.flight
        while flight:
            self._no_flight = event = anyio.Event()
            try:
                await event.wait()
            finally:
                self._no_flight = None

    def new_producer_id(self, producer_id: int, epoch: int) -> None:
        """Take ``producer_id``/``epoch``: every partition restarts at sequence 0, queued
        retries lose their old sequence (re-stamped at their next drain), drain resumes and
        every sender is woken."""
        idem = self.idem
        assert idem is not None, "a producer id without idempotence"
        self.acc.reset_sequences()
        idem.set_producer(producer_id, epoch)
        self.signals.wake_all()

    # ------------------------------------------------------------------ flush / close

    def begin_flush(self) -> None:
        """Every batch is ready while a flush is under way (nested flushes count)."""
        self.acc.flushing += 1
        self.signals.wake_all()

    def end_flush(self) -> None:
        self.acc.flushing -= 1

    def begin_close(self) -> None:
        """Closing: every batch is ready from now on."""
        self.acc.closing = True
        self.signals.wake_all()
