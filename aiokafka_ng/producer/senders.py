"""The producer's I/O side: a sender per broker, and the cluster requests the engine asks for.

Theory of operation
-------------------
:class:`Senders` is built with the producer's engine and runtime. The engine's signals that
concern I/O come here (the producer routes them: ``parts.build_parts``), and each turns into
the one thing that follows from it:

* ``wake_node(node)`` wakes ``node``'s :class:`~aiokafka_ng.producer.sender.NodeSender`,
  making it (and starting its task) the first time that node has something: the producer
  has a sender only for brokers that lead a partition it writes to. It also counts towards
  ``send()``'s yield (below).
* ``node_due(node, at)`` (a new head batch lingering until ``at``) lets an idle sender sleep
  until ``at`` without a look now (``NodeSender.wake_at``): a lone record costs its sender
  one trip round its loop, not two.
* ``wake_all`` wakes every sender; ``need_metadata`` asks the cluster for a topic's
  metadata and ``leader_moved`` tells it a partition's new leader (KIP-951).

Senders are made only while the runtime has a task group and a cluster (from ``start()``)
and until :meth:`Senders.close` (the producer closed); a wake-up outside that window starts
no sender -- the engine keeps the batch, and the next wake-up finds it.

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
    from aiokafka_ng.cluster import ClientRuntime
    from aiokafka_ng.cluster.metadata import BrokerMetadata
    from aiokafka_ng.config import ProducerConfig
    from aiokafka_ng.producer.engine import ProducerEngine

__all__ = ["Senders"]

#: How many batch wake-ups send() lets pass before it yields to the senders (see above).
_WAKES_PER_YIELD = 4


class Senders:
    """The per-node senders of one producer (see the module docstring).

    ``by_node`` holds every sender made (kept after close, for statistics); ``send()`` reads
    and clears ``yield_due``."""

    def __init__(
        self, engine: ProducerEngine, config: ProducerConfig, runtime: ClientRuntime
    ) -> None:
        """``engine``: what the senders drain and settle into; ``config``: their settings;
        ``runtime``: where their tasks run and whose cluster they write to, once started."""
        self.by_node: dict[int, NodeSender] = {}
        self.yield_due = False
        self._wakes = 0
        self._engine = engine
        self._config = config
        self._runtime = runtime
        self._closed = False

    def __repr__(self) -> str:
        return f"<Senders nodes={sorted(self.by_node)}>"

    def close(self) -> None:
        """The producer closed: no sender is made any more (their tasks are being
        cancelled with the producer's task group)."""
        self._closed = True

    # ------------------------------------------------------------------ the engine's signals

    def wake_node(self, node: int) -> None:
        sender = self._sender(node)
        if sender is not None:
            sender.wake()

    def node_due(self, node: int, at: float) -> None:
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

    def wake_all(self) -> None:
        for sender in self.by_node.values():
            sender.wake()

    def need_metadata(self, topic: str) -> None:
        cluster = self._runtime.cluster
        if cluster is not None:
            cluster.request_update([topic])

    def leader_moved(
        self, topic: str, partition: int, leader: int, epoch: int, endpoint: BrokerMetadata | None
    ) -> None:
        cluster = self._runtime.cluster
        if cluster is not None:
            cluster.update_leader(topic, partition, leader, epoch, endpoint)

    # ------------------------------------------------------------------ internals

    def _start(self, node: int) -> NodeSender | None:
        """``node``'s sender, made and started now; None before the producer started (no
        task group yet) or after it closed."""
        runtime = self._runtime
        cluster = runtime.cluster
        if self._closed or cluster is None or not runtime.has_tasks:
            return None
        cfg = self._config
        sender = self.by_node[node] = NodeSender(
            node,
            engine=self._engine,
            cluster=cluster,
            task_group=runtime.tasks,
            acks=cfg.acks,
            request_timeout_ms=cfg.request_timeout_ms,
            max_in_flight=cfg.max_in_flight_requests_per_connection,
            transactional_id=cfg.transactional_id,
        )
        runtime.tasks.start_soon(sender.run)
        return sender
