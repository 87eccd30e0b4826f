"""What the producer's engine tells the world: :class:`Signals`, the callables it is built with.

The engine (:mod:`aiokafka_ng.producer.engine`: the accumulator, the memory pool and the
idempotence state) does no I/O and starts nothing. When it needs something of the I/O side
-- a node's sender to look again, a topic's metadata, the expiry timer to rearm, a new
producer id -- it calls one of these callables, which the producer gave it when it built it
(``parts.build_parts``). This module imports nothing of the producer's, so every part of the
engine can name them without an import circle.

Every callable is called synchronously, on hot paths too (a batch filling up is one
``wake_node``): what it does is cheap and never blocks -- set an event, a flag, start a task.
Each defaults to doing nothing, so an engine built alone (tests, tools) needs none.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from aiokafka_ng.cluster.metadata import BrokerMetadata
    from aiokafka_ng.errors import KafkaError

__all__ = ["QUIET", "Signals"]


def _nothing(*args: object) -> None:
    pass


@dataclass(frozen=True, slots=True)
class Signals:
    """The engine's calls to the outside world, one per event (see the module docstring)."""

    #: ``wake_node(node)``: ``node``'s drain may take something now, or its next deadline
    #: moved (a batch closed or became a partition's head, a partition was unmuted or
    #: re-queued, a leader moved to it).
    wake_node: Callable[[int], None] = _nothing
    #: ``node_due(node, at)``: a partition of ``node`` has a new head batch that becomes
    #: ready by lingering at ``at`` (the engine's clock) and not before, unless something
    #: else happens (which signals on its own): a sender with nothing else to do may sleep
    #: until then without looking now.
    node_due: Callable[[int, float], None] = _nothing
    #: ``wake_all()``: what every node may drain changed (a ``send()`` waits for memory, a
    #: producer id was applied, a transaction's partitions were added, it ends, a flush or
    #: close began).
    wake_all: Callable[[], None] = _nothing
    #: ``need_metadata(topic)``: records wait for ``topic``'s metadata (once per wait), or
    #: an answer said its metadata is stale.
    need_metadata: Callable[[str], None] = _nothing
    #: ``leader_moved(topic, partition, leader, epoch, endpoint)``: a Produce answer named a
    #: partition's new leader (KIP-951).
    leader_moved: Callable[[str, int, int, int, BrokerMetadata | None], None] = _nothing
    #: ``wake_expiry()``: something with a deadline entered while the expiry timer had
    #: nothing to expire, or one due before the deadline it sleeps for.
    wake_expiry: Callable[[], None] = _nothing
    #: ``producer_id_wanted()``: the idempotence state stopped draining and wants a new
    #: producer id (a sequence gap, lost producer state, a batch that failed holding a
    #: sequence): the producer id's owner acts once nothing is in flight.
    producer_id_wanted: Callable[[], None] = _nothing
    #: Transactional producers only: ``partitions_wanted()`` -- the drain queued partitions
    #: that must join the transaction before their batches go; ``fenced(exc)`` -- the broker
    #: fenced the producer (fatal); ``sequence_hole()`` -- a batch holding a sequence will
    #: not be written (the transaction must abort, the epoch be bumped).
    partitions_wanted: Callable[[], None] = _nothing
    fenced: Callable[[KafkaError], None] = _nothing
    sequence_hole: Callable[[], None] = _nothing


#: An engine that tells nobody anything: the default of one built alone.
QUIET = Signals()
