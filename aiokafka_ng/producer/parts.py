"""What one :class:`~aiokafka_ng.producer.producer.Producer` is made of, made from its config.

:func:`build_parts` makes the parts (``Producer.__init__``): the retry policy, the producer id's
owner (the transaction manager when transactional, a
:class:`~aiokafka_ng.producer.producer_id.ProducerIdOwner` when only idempotent), the expiry
timer (:class:`~aiokafka_ng.producer.expiry.ExpiryTimer`), the wake-up
channel (:class:`~aiokafka_ng.producer.senders.Senders`), the memory pool, the accumulator
and what ``send()`` reads (:class:`~aiokafka_ng.producer.intake.Intake`).
:func:`start_tasks` starts the parts' background tasks other than the per-node senders (the
expiry timer, the producer id's owner) in the producer's task group (``Producer.start``).
The producer keeps the parts as its own attributes: ``send()`` reads them there.
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import anyio

from aiokafka_ng.cluster import Cluster, Supervisor
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.clock import loop_clock
from aiokafka_ng.producer.accumulator import Accumulator
from aiokafka_ng.producer.expiry import ExpiryTimer
from aiokafka_ng.producer.idempotence import IdempotenceState
from aiokafka_ng.producer.intake import Intake
from aiokafka_ng.producer.memory import MemoryPool
from aiokafka_ng.producer.partitioner import StickyPartitioner
from aiokafka_ng.producer.producer_id import ProducerIdOwner, idempotent_ask
from aiokafka_ng.producer.senders import Senders
from aiokafka_ng.producer.transactions import TransactionManager
from aiokafka_ng.protocol.compression import Compression

__all__ = ["CODECS", "Parts", "build_parts", "start_tasks"]

#: ``compression_type`` -> the codec.
CODECS = {
    "none": Compression.NONE,
    "gzip": Compression.GZIP,
    "snappy": Compression.SNAPPY,
    "lz4": Compression.LZ4,
    "zstd": Compression.ZSTD,
}


@dataclasses.dataclass(frozen=True, slots=True)
class Parts:
    """One producer's parts (its attributes too: ``send()`` reads them there)."""

    retry_backoff: ExponentialBackoff
    txn: TransactionManager | None
    idem: IdempotenceState | None
    #: The producer id's one owner (the transaction manager's when transactional).
    ids: ProducerIdOwner | None
    expiry: ExpiryTimer
    senders: Senders
    pool: MemoryPool
    acc: Accumulator
    intake: Intake


def build_parts(
    config: ProducerConfig, why_stopped: Callable[[], KafkaError], log: logging.Logger
) -> Parts:
    """The parts of a producer with ``config``; ``why_stopped`` is the error ``send()``
    raises when the producer is not running (see intake.py)."""
    txn: TransactionManager | None = None
    idem: IdempotenceState | None = None
    ids: ProducerIdOwner | None = None
    # One retry policy (KIP-580) for the batches' retries and the transactions' requests:
    # a policy holds no state between calls (each operation keeps its own RetryState).
    retry_backoff = ExponentialBackoff.retry(config.retry_backoff_ms, config.retry_backoff_max_ms)
    if config.transactional_id is not None:
        # Transactions own the producer id (init, epoch bumps after aborts).
        txn = TransactionManager(
            config.transactional_id,
            transaction_timeout_ms=config.transaction_timeout_ms,
            retry_backoff=retry_backoff,
            request_timeout_ms=config.request_timeout_ms,
            max_block_ms=config.max_block_ms,
        )
        idem = txn.idem
        ids = txn.ids
    elif config.enable_idempotence:
        idem = IdempotenceState()
        ids = ProducerIdOwner(idem, label="producer", log=log)
    # The wake-up channel of the accumulator, the pool, the senders and the producer
    # id's owner; it makes the per-node senders once start() attaches it, and wakes the
    # expiry timer when something to expire enters an empty accumulator.
    expiry = ExpiryTimer()
    senders = Senders(config, ids, expiry)
    pool = MemoryPool(config.buffer_memory, wakeups=senders)
    acc = Accumulator(
        pool=pool,
        batch_size=config.batch_size,
        linger_ms=config.linger_ms,
        compression=CODECS[config.compression_type],
        compression_level=config.compression_level,
        max_request_size=config.max_request_size,
        delivery_timeout_ms=config.delivery_timeout_ms,
        retry_backoff=retry_backoff,
        max_block_ms=config.max_block_ms,
        guarantee_order=config.max_in_flight_requests_per_connection == 1,
        idempotence=idem,
        partitioner=config.partitioner,
        # KIP-1123 as Java: rack-aware only when asked and the client has a rack.
        sticky=StickyPartitioner(
            rack=(config.client_rack or None) if config.partitioner_rack_aware else None
        ),
        wakeups=senders,
        # The event loop's clock, which linger, retry and delivery timers sleep on: the same
        # as time.monotonic on asyncio, and virtual under trio's MockClock (tests).
        clock=anyio.current_time,
    )
    # What send() and the bulk path (bulk.py) read: see intake.py.
    intake = Intake(
        acc=acc,
        pool=pool,
        txn=txn,
        key_serializer=config.key_serializer,
        value_serializer=config.value_serializer,
        max_request_size=config.max_request_size,
        buffer_memory=config.buffer_memory,
        max_block_ms=config.max_block_ms,
        why_stopped=why_stopped,
    )
    return Parts(retry_backoff, txn, idem, ids, expiry, senders, pool, acc, intake)


def start_tasks(
    parts: Parts,
    cluster: Cluster,
    tasks: Supervisor,
    on_cluster_error: Callable[[KafkaError], None],
) -> None:
    """Start the expiry timer, and attach the producer id's owner (if any) to the started
    producer and run it, in ``tasks``. A transactional producer's ``init()`` is the
    caller's to await."""
    # The same clock as anyio.current_time() (what build_parts gave it), read without a
    # backend lookup per call: the accumulator and the senders read it several times per
    # request.
    parts.acc.clock = loop_clock()
    tasks.start_soon(parts.expiry.run, parts.acc)
    if parts.txn is not None:
        # spawn: a transaction whose task was cancelled is aborted by a task of ours.
        parts.txn.attach(
            cluster,
            parts.acc,
            parts.senders,
            spawn=tasks.start_soon,
            transaction_version=lambda: cluster.feature_level("transaction.version"),
        )
        tasks.start_soon(parts.txn.run)
    elif parts.ids is not None:
        parts.ids.attach(parts.acc, parts.senders)
        tasks.start_soon(
            parts.ids.run,
            idempotent_ask(cluster),
            parts.retry_backoff,
            on_cluster_error,  # an authentication failure fails what waits
        )
