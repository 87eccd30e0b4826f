"""The producer's senders, one per broker, and the wake-up channel that drives them.

Theory of operation
-------------------
:class:`Senders` is the producer's :class:`~aiokafka_ng.producer.wakeups.Wakeups`: the
accumulator, the memory pool, the senders and the producer-id owner all signal through it,
and it turns each event into the one thing that follows from it:

* ``batch_ready(node)`` wakes ``node``'s :class:`~aiokafka_ng.producer.sender.NodeSender`,
  making it (and starting its task) the first time that node has something: the producer
  has a sender only for brokers that lead a partition it writes to. It also counts towards
  ``send()``'s yield (below).
* ``batch_due(node, at)`` (a new head batch lingering until ``at``) lets an idle sender sleep
  until ``at`` without a look now (``NodeSender.wake_at``): a lone record costs its sender
  one trip round its loop, not two.
* ``memory_wanted`` and ``wake_all`` wake every sender; ``metadata_needed`` asks the cluster
  for a topic's metadata; ``request_ended`` tells the producer-id owner, which waits for
  nothing to be in flight before it replaces the id; ``expiry_needed`` wakes the expiry
  timer (:mod:`aiokafka_ng.producer.expiry`).

Senders are made only between :meth:`Senders.attach` (the producer's cluster and task group
exist) and :meth:`Senders.detach` (the producer closed); a wake-up outside that window starts
no sender -- the accumulator keeps the batch, and the next wake-up after ``attach``
finds it.

Yielding. ``send()`` does not await anything in its common case, so a tight ``send()`` loop
would never let the senders run. It yields (``yield_due``) after every
``_WAKES_PER_YIELD`` batch wake-ups rather than after each: a request carries at most one
batch per partition, so letting a few batches become ready first lets one request carry
several (measured: ~2x fewer requests and ~25-45% less CPU per record). The sender's event
is set at once regardless, so nothing waits longer than the caller's next await.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from aiokafka_ng.producer.sender import NodeSender

if TYPE_CHECKING:
    from aiokafka_ng.cluster import ClusterClient, Supervisor
    from aiokafka_ng.config import ProducerConfig
    from aiokafka_ng.producer.accumulator import Accumulator
    from aiokafka_ng.producer.expiry import ExpiryTimer
    from aiokafka_ng.producer.producer_id import ProducerIdOwner

__all__ = ["Senders"]

#: How many batch wake-ups send() lets pass before it yields to the senders (see above).
_WAKES_PER_YIELD = 4


class Senders:
    """The per-node senders and the producer's wake-up channel (see the module docstring).

    ``by_node`` holds every sender made (kept after close, for statistics); ``send()`` reads
    and clears ``yield_due``."""

    def __init__(
        self,
        config: ProducerConfig,
        ids: ProducerIdOwner | None,
        expiry: ExpiryTimer | None = None,
    ) -> None:
        """``config``: the senders' settings; ``ids``: the producer id's owner, told when a
        request ends (None without idempotence); ``expiry``: the expiry timer, woken when
        it has something to expire again (None: nobody expires, as in tests of parts)."""
        self.by_node: dict[int, NodeSender] = {}
        self.yield_due = False
        self._wakes = 0
        self._config = config
        self._ids = ids
        self._expiry = expiry
        self._cluster: ClusterClient | None = None
        self._acc: Accumulator | None = None
        self._tasks: Supervisor | None = None

    def __repr__(self) -> str:
        return f"<Senders nodes={sorted(self.by_node)}>"

    def attach(self, cluster: ClusterClient, accumulator: Accumulator, tasks: Supervisor) -> None:
        """The producer started: senders may be made from now on, in ``tasks``."""
        self._cluster = cluster
        self._acc = accumulator
        self._tasks = tasks

    def detach(self) -> None:
        """The producer closed: no sender is made any more (their tasks are being
        cancelled with the producer's task group)."""
        self._tasks = None

    # ------------------------------------------------------------------ Wakeups

    def batch_ready(self, node: int) -> None:
        sender = self._sender(node)
        if sender is not None:
            sender.wake()

    def batch_due(self, node: int, at: float) -> None:
        sender = self._sender(node)
        if sender is not None:
            sender.wake_at(at)

    def _sender(self, node: int) -> NodeSender | None:
        """``node``'s sender (made now if need be), counting a batch wake-up towards
        ``send()``'s yield."""
        self._wakes += 1
        if self._wakes >= _WAKES_PER_YIELD:
            self._wakes = 0
            self.yield_due = True
        sender = self.by_node.get(node)
        if sender is None:
            sender = self._start(node)
        return sender

    def metadata_needed(self, topic: str) -> None:
        if self._cluster is not None:
            self._cluster.request_update([topic])

    def memory_wanted(self) -> None:
        self.wake_all()  # every batch is ready while someone waits for memory

    def expiry_needed(self) -> None:
        if self._expiry is not None:
            self._expiry.wake()

    def request_ended(self) -> None:
        if self._ids is not None:
            self._ids.on_idle()

    def wake_all(self) -> None:
        for sender in self.by_node.values():
            sender.wake()

    # ------------------------------------------------------------------ internals

    def _start(self, node: int) -> NodeSender | None:
        """``node``'s sender, made and started now; None before attach or after detach."""
        tasks, cluster, acc = self._tasks, self._cluster, self._acc
        if tasks is None or cluster is None or acc is None:
            return None
        cfg = self._config
        sender = self.by_node[node] = NodeSender(
            node,
            cluster=cluster,
            accumulator=acc,
            task_group=tasks,
            wakeups=self,
            acks=cfg.acks,
            request_timeout_ms=cfg.request_timeout_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            retries=cfg.retries,
            transactional_id=cfg.transactional_id,
        )
        tasks.start_soon(sender.run)
        return sender
