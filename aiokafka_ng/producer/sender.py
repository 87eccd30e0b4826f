"""One sender task per broker: the I/O driver of the producer engine for that broker.

Theory of operation
-------------------
A :class:`NodeSender` loops: get the node's connection (the pool alone paces reconnects),
drain ready batches (:meth:`ProducerEngine.drain`), send them as one Produce request, and sleep
until woken (a batch became ready, a partition was unmuted, a response freed a slot) or the
next linger deadline. It keeps at most ``max_in_flight`` requests outstanding -- the
connection's semaphore has exactly that many permits, so draining never commits batches to a
request that would then sit waiting for a permit while newer records could have joined it.

Write order matters for idempotent sequences, and task start order is not guaranteed (trio
deliberately shuffles it), so the sender writes each request itself with
``Connection.submit`` (returns once the frame is on the wire): up to ``max_in_flight``
requests pipeline, in drain order on the wire, and the outcomes of one partition apply in
send order (as the Java client promises) without a task per request. The answers are
applied

* on asyncio, by a callback the connection calls when it settles the request
  (``PendingResponse.on_settled``, an :class:`_Answer`): from whatever reads the connection
  (on plain TCP the transport's own callback, else its reader task) as the answer arrives,
  so in wire order, which a connection's answers keep; a connection that dies
  (I/O error, request timeout, close) settles everything it still holds at once, oldest
  first, before the pool can hand out its successor, so the requests of one sender also
  settle in write order across reconnects. No task wakes for an answer: the lone record's
  answer completes its future in the reader's own turn (two loop turns fewer per request
  than a task awaiting the answers). A callback that raises must not kill the reader: the
  request's bookkeeping still ends, and the exception goes to the task group's supervisor
  as the crash of a task would (``_Answer.__call__``);
* on trio (no loop timers to bound a callback's wait), by one more task per node
  (``_settle_answers``) that awaits the queued answers in write order.

When the sender stops (the producer closes), requests still unanswered end without being
settled, on both paths (their batches are the closing producer's to fail): a callback that
comes later does nothing.

Nothing runs when nothing is due: with nothing to drain the loop waits on its event alone,
with a lingering batch until that deadline (on asyncio a loop timer that sets the event, not
a cancel scope whose expiry throws into the wait), and a request's end wakes it only if it
was waiting for an in-flight slot.

The sender decides nothing about batches. Every batch of a request leaves the "in flight"
state exactly once, on every path: the answer (or the request's failure) goes to
:meth:`ProducerEngine.settle`, which turns it into outcomes by the pure functions of
:mod:`aiokafka_ng.producer.settle` (complete, retry at the head after the backoff, split,
reset the producer id, fail) and carries them out in order; a request's end is told to the
engine too (:meth:`ProducerEngine.request_ended`: the producer id's owner waits for an empty
flight). A re-queued batch is unmuted *after* it is queued, then this node is woken
(Sarama #3644/#3689: the accumulator's ``requeue``).
"""

from __future__ import annotations

import asyncio
import logging
from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING

import anyio
import anyio.abc

from aiokafka_ng.errors import KafkaError, UnsupportedVersionError
from aiokafka_ng.net.events import event_factory
from aiokafka_ng.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
)

if TYPE_CHECKING:
    from aiokafka_ng.cluster import ClusterClient, Link, Pending, Supervisor
    from aiokafka_ng.producer.batch import ProducerBatch
    from aiokafka_ng.producer.engine import ProducerEngine

__all__ = ["NodeSender"]

log = logging.getLogger(__name__)

#: Produce v3 is the first that carries v2 record batches. The newest is the engine's to
#: say: v11, or v12 in a transaction of transactions v2 (``max_produce_version``); v13
#: names topics by id, which the producer does not track.
_MIN_PRODUCE_VERSION = 3


class NodeSender:
    """Drains and sends for one broker; runs until cancelled. The I/O around the engine:
    connection, submit, await, hand the answer to the engine."""

    def __init__(
        self,
        node_id: int,
        *,
        engine: ProducerEngine,
        cluster: ClusterClient,
        task_group: anyio.abc.TaskGroup | Supervisor,
        acks: int,
        request_timeout_ms: int,
        max_in_flight: int,
        transactional_id: str | None = None,
    ) -> None:
        self.node_id = node_id
        self._engine = engine
        self._cluster = cluster
        self._tg = task_group
        self._acks = acks
        self._timeout_ms = request_timeout_ms
        self._max_in_flight = max_in_flight
        # Transactional batches must name their transaction in the request (the broker
        # checks it against AddPartitionsToTxn and writes the markers accordingly).
        self._transactional_id = transactional_id
        self._event = anyio.Event()
        #: Produce requests written and not ended yet (at most ``max_in_flight``).
        self.requests_in_flight = 0
        self.requests = 0
        #: the requests written and not settled yet, in wire order (see _settle_answers;
        #: trio only)
        self._answers: deque[tuple[Pending[ProduceResponse | None], list[ProducerBatch], float]]
        self._answers = deque()
        #: the asyncio path's callbacks not called yet, in write order (see _Answer)
        self._unanswered: deque[_Answer] = deque()
        #: set when an answer is queued for _settle_answers
        self._answer_queued = anyio.Event()
        #: True while the loop waits with nothing due by time (see wake_at), and the loop
        #: timer wake_at armed then (asyncio only)
        self._idle = False
        self._timer: asyncio.TimerHandle | None = None
        #: the running backend's Event class (set by run(), which on trio also starts
        #: _settle_answers)
        self._new_event: Callable[[], anyio.Event] = anyio.Event

    def wake(self) -> None:
        self._event.set()

    def wake_at(self, at: float) -> None:
        """Something becomes ready at ``at`` (the accumulator's clock) and not before: a
        loop waiting with nothing due by time sleeps until then instead of looking now (on
        asyncio, a loop timer that sets the event); otherwise, as :meth:`wake`."""
        loop = self._engine.loop
        if not self._idle or loop is None:
            self._event.set()
            return
        timer = self._timer
        if timer is not None:
            if timer.when() <= at:
                return
            timer.cancel()
        self._timer = loop.call_at(at, self._event.set)

    async def run(self) -> None:
        self._new_event = event_factory()  # see net/events.py
        if self._engine.loop is None:
            self._tg.start_soon(self._settle_answers)
        try:
            await self._loop()
        finally:
            # Stopped (the producer is closing): what is unanswered ends unsettled.
            unanswered = self._unanswered
            while unanswered:
                unanswered.popleft().live = False
                self._request_done()

    async def _loop(self) -> None:
        engine = self._engine
        clock = engine.clock
        new_event = self._new_event
        while True:
            # A set event is replaced *before* looking at the accumulator, so a wake() that
            # happens after the look is never lost. (An unset one is kept: creating anyio
            # Events is not free and this loop runs once per request.)
            event = self._event
            if event.is_set():
                event = self._event = new_event()
            timeout: float | None = None
            if self.requests_in_flight < self._max_in_flight:
                now = clock()
                at = engine.next_deadline(self.node_id, now)
                if at is not None and at <= now:
                    try:
                        conn = await self._cluster.connection(self.node_id)
                    except KafkaError as exc:
                        # DEBUG: the pool logs a broker going away (WARNING) and coming
                        # back (INFO) once each; this repeats at every reconnect.
                        log.debug("producer: node %s unreachable: %s", self.node_id, exc)
                        await self._unreachable()
                        continue
                    now = clock()
                    batches, next_at = engine.drain(self.node_id, now)
                    if batches:
                        await self._send(conn, batches)
                        continue
                    # Ready but held back (idempotence ordering, no producer id yet): only
                    # an outcome or a reset can change that, and both wake us. Batches of
                    # other partitions may still be lingering: their deadline bounds the wait.
                    if next_at is not None:
                        timeout = max(0.0, next_at - now)
                elif at is not None:
                    timeout = at - now
            if timeout is None:
                # Nothing due by time: no cancel scope (entering and leaving one costs more
                # than the rest of an idle look); wake_at may arm a timer meanwhile.
                self._idle = True
                try:
                    await event.wait()
                finally:
                    self._idle = False
                    if self._timer is not None:
                        self._timer.cancel()
                        self._timer = None
            elif (loop := engine.loop) is not None:
                # asyncio: a timer that sets the event (a wake-up like any other: the loop
                # looks again) costs far less than a cancel scope's expiry.
                timer = loop.call_later(timeout, event.set)
                try:
                    await event.wait()
                finally:
                    timer.cancel()
            else:
                with anyio.move_on_after(timeout):
                    await event.wait()

    async def _unreachable(self) -> None:
        """The node's connection failed: ask for metadata (its partitions' leaders may have
        moved), and look again when the next connect may go. That time is the pool's: it
        dials the node at the reconnect backoff's times (KIP-144), and the next
        ``connection()`` waits for that dial. (A pause of our own on top made the producer
        dial at the retry backoff's slower rhythm: 100, 200, 400 ms... against a reconnect
        backoff of 10, 20, 40 ms...; tests/producer/test_reconnect_pacing.py.)

        A node the cluster cannot dial (one the metadata no longer names) failed without a
        dial: the refresh that moves its partitions elsewhere is what to wait for, and the
        refresher paces those."""
        cluster = self._cluster
        topics = self._engine.topic_names()
        if cluster.can_dial(self.node_id):
            cluster.request_update(topics)
            return
        try:
            await cluster.refresh(topics)
        except KafkaError as exc:
            # The metadata's own failure: the next connection() raises again and brings
            # us back here, to the next paced refresh.
            log.debug("producer: metadata refresh failed: %s", exc)

    async def _send(self, conn: Link, batches: list[ProducerBatch]) -> None:
        engine = self._engine
        try:
            version = min(conn.version_for(ProduceRequest), engine.max_produce_version)
        except UnsupportedVersionError as exc:
            engine.fail_unsent(batches, exc)
            return
        if version < _MIN_PRODUCE_VERSION:
            engine.fail_unsent(
                batches,
                UnsupportedVersionError(
                    f"broker {self.node_id} only supports Produce v{version}; v3+ is required"
                ),
            )
            return
        by_topic: dict[str, list[PartitionProduceData]] = {}
        for b in batches:
            by_topic.setdefault(b.topic, []).append(PartitionProduceData(b.partition, b.data))
        request = ProduceRequest(
            transactional_id=self._transactional_id,
            acks=self._acks,
            timeout_ms=self._timeout_ms,
            topic_data=[
                TopicProduceData(name=name, partition_data=parts)
                for name, parts in by_topic.items()
            ],
        )
        self.requests_in_flight += 1
        self.requests += 1
        started = engine.clock()
        try:
            # Written from this task, in drain order (see the module docstring); the
            # answer is applied by its callback (asyncio) or by _settle_answers (trio), so
            # requests pipeline.
            pending = await conn.submit(
                request,
                version=version,
                timeout=self._timeout_ms / 1000 + 1,
                expect_response=self._acks != 0,
            )
        except KafkaError as exc:
            engine.settle(batches, None, exc)
            self._request_done()
            return
        except BaseException:
            self._request_done()
            raise
        if engine.loop is not None:
            answer = _Answer(self, batches, started)
            self._unanswered.append(answer)
            pending.on_settled(answer)
        else:
            self._answers.append((pending, batches, started))
            self._answer_queued.set()

    async def _settle_answers(self) -> None:
        """Until cancelled: await the queued answers in wire order and apply each, so the
        outcomes of one partition apply in send order. A request whose connection died
        fails at once (its pending answer raises), so one in the queue's head never holds
        the others back longer than its own request timeout, as before."""
        answers = self._answers
        try:
            while True:
                if not answers:
                    # Replaced before waiting, with no await in between: a request queued
                    # after this look sets the new event.
                    self._answer_queued = queued = self._new_event()
                    await queued.wait()
                    continue
                pending, batches, started = answers[0]
                try:
                    await self._await_response(pending, batches, started)
                finally:
                    answers.popleft()
                    self._request_done()
        finally:
            # Cancelled (the producer is closing): what is still queued ends unanswered.
            while answers:
                answers.popleft()
                self._request_done()

    async def _await_response(
        self,
        pending: Pending[ProduceResponse | None],
        batches: list[ProducerBatch],
        started: float,
    ) -> None:
        try:
            response = await pending.wait()
        except KafkaError as exc:
            self._engine.settle(batches, None, exc)
        else:
            # None with acks=0: nothing to wait for; written, offsets unknown.
            self._engine.settle(batches, response, started=started)

    def _request_done(self) -> None:
        # Only a loop that waits for an in-flight slot needs this wake-up: what else a
        # request's end changes (a partition unmuted, a batch re-queued, an idempotence
        # slot freed) wakes the node through the engine's signals. A lone record's request
        # thus ends without another trip round the loop.
        if self.requests_in_flight >= self._max_in_flight:
            self.wake()
        self.requests_in_flight -= 1
        self._engine.request_ended()


class _Answer:
    """The asyncio path's callback for one request (``Pending.on_settled``): hands the
    answer or the failure to the engine, then ends the request. Called once, by the
    connection, in wire order (see the module docstring)."""

    __slots__ = ("batches", "live", "sender", "started")

    def __init__(self, sender: NodeSender, batches: list[ProducerBatch], started: float) -> None:
        self.sender = sender
        self.batches = batches
        self.started = started
        #: False once the sender stopped: the request ended unsettled (NodeSender.run)
        self.live = True

    def __call__(self, response: ProduceResponse | None, error: KafkaError | None) -> None:
        if not self.live:
            return
        self.live = False
        sender = self.sender
        unanswered = sender._unanswered
        if unanswered[0] is self:
            unanswered.popleft()
        else:  # not expected (answers settle in write order); kept exact all the same
            unanswered.remove(self)
        try:
            if error is not None:
                sender._engine.settle(self.batches, None, error)
            else:
                # None with acks=0: nothing to wait for; written, offsets unknown.
                sender._engine.settle(self.batches, response, started=self.started)
        except Exception as exc:
            # Runs in the connection's reader, which must go on reading: the failure goes
            # where a crashed task's would (the producer's supervisor fails the producer).
            sender._tg.start_soon(_reraise, exc)
        finally:
            sender._request_done()


async def _reraise(exc: Exception) -> None:
    raise exc
