"""What one :class:`~aiokafka_ng.producer.producer.Producer` is made of, made from its config.

:func:`build_parts` makes the parts (``Producer.__init__``), each by its constructor, each
whole when its constructor returns:

* the engine (:class:`~aiokafka_ng.producer.engine.ProducerEngine`: the memory pool, the
  accumulator, the idempotence state), first;
* the producer id's owner -- the transaction manager when transactional, a
  :class:`~aiokafka_ng.producer.producer_id.ProducerIdOwner` when only idempotent -- which
  takes the engine;
* the senders (:class:`~aiokafka_ng.producer.senders.Senders`, the I/O side), which take the
  engine and the producer's runtime (they make a sender per broker once it has a task group
  and a cluster);
* the expiry timer (:class:`~aiokafka_ng.producer.expiry.ExpiryTimer`) and what ``send()``
  reads (:class:`~aiokafka_ng.producer.intake.Intake`).

The engine talks to the parts made after it through the
:class:`~aiokafka_ng.producer.signals.Signals` it is built with: small functions below that
call the part each signal is for. They close over names bound further down in the same call,
so every signal reaches a part that exists by the time the engine can emit it (the engine
emits nothing while it is being built), and nothing is set on a part after its constructor.
This is the one place that says which part hears which signal.

:func:`start_tasks` starts the parts' background tasks other than the per-node senders (the
expiry timer, the producer id's owner) in the producer's task group (``Producer.start``).
"""

from __future__ import annotations

import dataclasses
import logging
from collections.abc import Callable

import anyio

from aiokafka_ng.cluster import ClientRuntime, Cluster, Supervisor
from aiokafka_ng.cluster.metadata import BrokerMetadata
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer.engine import CODECS, ProducerEngine
from aiokafka_ng.producer.expiry import ExpiryTimer
from aiokafka_ng.producer.intake import Intake
from aiokafka_ng.producer.producer_id import ProducerIdOwner, idempotent_ask
from aiokafka_ng.producer.senders import Senders
from aiokafka_ng.producer.signals import Signals
from aiokafka_ng.producer.transactions import TransactionManager

__all__ = ["CODECS", "Parts", "build_parts", "start_tasks"]


@dataclasses.dataclass(frozen=True, slots=True)
class Parts:
    """One producer's parts (its attributes too: ``send()`` reads them there)."""

    engine: ProducerEngine
    txn: TransactionManager | None
    #: The producer id's one owner (the transaction manager's when transactional).
    ids: ProducerIdOwner | None
    expiry: ExpiryTimer
    senders: Senders
    intake: Intake


def build_parts(
    config: ProducerConfig,
    runtime: ClientRuntime,
    why_stopped: Callable[[], KafkaError],
    log: logging.Logger,
) -> Parts:
    """The parts of a producer with ``config`` running in ``runtime``; ``why_stopped`` is the
    error ``send()`` raises when the producer is not running (see intake.py)."""

    # The engine's signals, routed to the parts made below (see the module docstring).
    def wake_node(node: int) -> None:
        senders.wake_node(node)

    def node_due(node: int, at: float) -> None:
        senders.node_due(node, at)

    def wake_all() -> None:
        senders.wake_all()

    def need_metadata(topic: str) -> None:
        senders.need_metadata(topic)

    def leader_moved(
        topic: str, partition: int, leader: int, epoch: int, endpoint: BrokerMetadata | None
    ) -> None:
        senders.leader_moved(topic, partition, leader, epoch, endpoint)

    def wake_expiry() -> None:
        expiry.wake()

    def producer_id_wanted() -> None:
        if ids is not None:
            ids.renewal_requested()

    def partitions_wanted() -> None:
        if txn is not None:
            txn.wake()

    def fenced(exc: KafkaError) -> None:
        if txn is not None:
            txn.fail_fatal(exc)

    def sequence_hole() -> None:
        if txn is not None:
            txn.sequence_hole()

    engine = ProducerEngine(
        config,
        signals=Signals(
            wake_node=wake_node,
            node_due=node_due,
            wake_all=wake_all,
            need_metadata=need_metadata,
            leader_moved=leader_moved,
            wake_expiry=wake_expiry,
            producer_id_wanted=producer_id_wanted,
            partitions_wanted=partitions_wanted,
            fenced=fenced,
            sequence_hole=sequence_hole,
        ),
        # The event loop's clock, which linger, retry and delivery timers sleep on: the same
        # as time.monotonic on asyncio, and virtual under trio's MockClock (tests).
        clock=anyio.current_time,
    )
    txn: TransactionManager | None = None
    ids: ProducerIdOwner | None = None
    if config.transactional_id is not None:
        # Transactions own the producer id (init, epoch bumps after aborts).
        txn = TransactionManager(
            engine,
            transaction_timeout_ms=config.transaction_timeout_ms,
            request_timeout_ms=config.request_timeout_ms,
            max_block_ms=config.max_block_ms,
            cluster=lambda: runtime.cluster,
            # A transaction whose task was cancelled is aborted by a task of ours.
            spawn=lambda fn: runtime.tasks.start_soon(fn),
            transaction_version=lambda: _transaction_version(runtime),
        )
        ids = txn.ids
    elif config.enable_idempotence:
        ids = ProducerIdOwner(engine, label="producer", log=log)
    senders = Senders(engine, config, runtime)
    expiry = ExpiryTimer()
    # What send() and the bulk path (bulk.py) read: see intake.py.
    intake = Intake(
        engine=engine,
        txn=txn,
        key_serializer=config.key_serializer,
        value_serializer=config.value_serializer,
        max_request_size=config.max_request_size,
        buffer_memory=config.buffer_memory,
        max_block_ms=config.max_block_ms,
        why_stopped=why_stopped,
    )
    return Parts(engine, txn, ids, expiry, senders, intake)


def _transaction_version(runtime: ClientRuntime) -> int:
    cluster = runtime.cluster
    return 0 if cluster is None else cluster.feature_level("transaction.version")


def start_tasks(
    parts: Parts,
    cluster: Cluster,
    tasks: Supervisor,
    on_cluster_error: Callable[[KafkaError], None],
) -> None:
    """Start the expiry timer and the producer id's owner (if any) in ``tasks``. A
    transactional producer's ``init()`` is the caller's to await."""
    tasks.start_soon(parts.expiry.run, parts.engine)
    if parts.txn is not None:
        tasks.start_soon(parts.txn.run)
    elif parts.ids is not None:
        tasks.start_soon(
            parts.ids.run,
            idempotent_ask(cluster),
            parts.engine.retry_backoff,
            on_cluster_error,  # an authentication failure fails what waits
        )
