"""The producer's wake-up channel: how its parts tell the one that runs the senders.

The accumulator, the memory pool, the senders and the producer-id owner each notice moments
when some sender must look at the accumulator again, or the cluster must be asked for
metadata. They signal them through one object, a :class:`Wakeups`, with one method per
event, instead of a callable each; the producer's implementation
(:class:`~aiokafka_ng.producer.senders.Senders`) is where the per-node senders are made,
where ``send()`` learns it should yield, and where metadata is requested. This module
imports nothing of the producer's, so every part can name the channel without an import
circle.

Every method is called synchronously, on hot paths too (a batch filling up is one
``batch_ready``): an implementation does only cheap, non-blocking work -- set an event, a
flag, start a task.
"""

from __future__ import annotations

from typing import Protocol

__all__ = ["UNWIRED", "Unwired", "Wakeups"]


class Wakeups(Protocol):
    """The events the producer's parts signal (see the module docstring)."""

    def batch_ready(self, node: int) -> None:
        """``node``'s drain may take something now, or its next deadline moved: a batch
        was closed or became a partition's head, a partition was unmuted or re-queued, a
        leader moved to it (the accumulator)."""

    def batch_due(self, node: int, at: float) -> None:
        """A partition of ``node`` has a new head batch that becomes ready by lingering at
        ``at`` (the accumulator's clock) and not before, unless something else happens
        (which signals on its own): a sender with nothing else to do may sleep until
        then without looking now (the accumulator)."""

    def metadata_needed(self, topic: str) -> None:
        """A record waits for ``topic``'s metadata (the accumulator, once per wait)."""

    def memory_wanted(self) -> None:
        """A ``send()`` waits for buffer memory: every batch is ready now, so every sender
        should drain (the memory pool, once per waiter)."""

    def expiry_needed(self) -> None:
        """A record or batch entered while the expiry timer had nothing to expire and
        waits (the accumulator, once per such period): it must sleep until the new
        delivery deadline."""

    def request_ended(self) -> None:
        """A sender's Produce request ended, answered or not: no batch may be in flight
        any more (the senders, once per request)."""

    def wake_all(self) -> None:
        """What every node may drain changed: a producer id was applied, a transaction's
        partitions were added, it commits or aborts, a flush or close began."""


class Unwired:
    """A channel that nobody listens to: the default of parts built on their own (tests,
    tools). Subclass it to hear some events."""

    __slots__ = ()

    def batch_ready(self, node: int) -> None:
        pass

    def batch_due(self, node: int, at: float) -> None:
        self.batch_ready(node)  # a listener of batch_ready hears this too

    def metadata_needed(self, topic: str) -> None:
        pass

    def memory_wanted(self) -> None:
        pass

    def expiry_needed(self) -> None:
        pass

    def request_ended(self) -> None:
        pass

    def wake_all(self) -> None:
        pass


#: The shared default (it holds no state).
UNWIRED = Unwired()
