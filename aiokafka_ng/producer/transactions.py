"""Transactions (KIP-98): the state machine and everything that moves it.

Theory of operation
-------------------
:class:`TransactionManager` takes the producer's engine in its constructor, holds the
transaction's state (the table of states and moves is ``txn_state.py``) and makes every move.
The transaction's drain state -- the partitions added or waiting to be, the error queued
batches fail with, v2 or not -- is the engine's idempotence state while a transactional id is
set (``txn_idempotence.py``): the drain reads it there, the manager moves it. What the drain
notices comes back as the engine's signals (``partitions_wanted``: :meth:`TransactionManager.wake`;
``fenced``: :meth:`TransactionManager.fail_fatal`; ``sequence_hole``), which the producer
routes here.

*Partitions join before data* (``txn_idempotence.py``): the drain queues the partitions not
in the transaction yet for :meth:`TransactionManager.run`, which adds every queued partition
in one request (AddPartitionsToTxn) and then wakes the senders.

*Errors.* Abortable errors (a record failed, an offset commit was rejected, the broker
lost our sequence state) move the transaction to ``ABORTABLE_ERROR``: commit and send raise
until :meth:`TransactionManager.abort` -- after which the producer is usable again (bumping
the epoch with InitProducerId first when a sequence hole was left, KIP-360). Fatal errors
(PRODUCER_FENCED, INVALID_PRODUCER_EPOCH, TRANSACTIONAL_ID_AUTHORIZATION_FAILED, ...) move it
to ``FATAL_ERROR``; only ``close()`` is left. In both error states and while aborting, queued
batches fail as soon as the sender looks at them, so ``flush()`` never waits for a
transaction that cannot commit.

*Transactions v2* (KIP-890 part 2), used when the cluster's finalized ``transaction.version``
is 2 or more at ``begin_transaction()`` (as the Java client decides): Produce v12 adds a
partition to the transaction by itself and TxnOffsetCommit v5 the group, so neither
AddPartitionsToTxn nor AddOffsetsToTxn is sent and partitions drain at once; EndTxn v5 bumps
the epoch at every commit and abort and answers the producer id and epoch the next
transaction uses (sequences restart at 0), which also closes any sequence hole -- no
InitProducerId bump after an abort. Against an older cluster everything stays as above.

*Commit* flushes (every record of the transaction acknowledged), checks that none failed,
then sends EndTxn(commit). *Abort* fails what is still queued with
:class:`TransactionAbortedError`, waits for what is in flight, then sends EndTxn(abort).
EndTxn is skipped when nothing was added to the transaction (nothing to mark).
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Coroutine, Mapping
from types import TracebackType
from typing import TYPE_CHECKING, Any

import anyio

from aiokafka_ng.cluster.retry import Final, RetryState, retrying
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.producer.producer_id import ProducerIdOwner
from aiokafka_ng.producer.txn_coordinator import (
    ConsumerGroupMetadata,
    CoordinatorCluster,
    PreparedTransaction,
    TxnCoordinatorClient,
    group_metadata,
    parse_offsets,
)
from aiokafka_ng.producer.txn_idempotence import TransactionalIdempotence
from aiokafka_ng.producer.txn_state import (
    FATAL_TYPES,
    HINTS,
    TRANSITIONS,
    IllegalTransactionStateError,
    TransactionAbortedError,
    TransactionNotStartedError,
    TransactionState,
)
from aiokafka_ng.producer.txn_state import TRANSITIONS as _TRANSITIONS  # noqa: F401 (tests)

if TYPE_CHECKING:
    from aiokafka_ng.producer.engine import ProducerEngine
    from aiokafka_ng.producer.future import Delivery

__all__ = [
    "ConsumerGroupMetadata",
    "IllegalTransactionStateError",
    "TransactionAbortedError",
    "TransactionManager",
    "TransactionNotStartedError",
    "TransactionState",
    "TransactionalIdempotence",
]

log = logging.getLogger(__name__)

S = TransactionState


class _TransactionContext:
    """``async with producer.transaction():`` -- commit on a clean exit, abort otherwise."""

    __slots__ = ("_flush", "_manager")

    def __init__(self, manager: TransactionManager, flush: Callable[[], Awaitable[None]]) -> None:
        self._manager = manager
        self._flush = flush

    async def __aenter__(self) -> None:
        await self._manager.wait_background_abort()
        self._manager.begin()

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        m = self._manager
        cancelled = anyio.get_cancelled_exc_class()
        if exc is None:
            try:
                await m.commit(self._flush)
            except cancelled:
                m.abandon()
                raise
            except BaseException:
                await m.abort_quietly()
                raise
            return
        if isinstance(exc, cancelled):
            m.abandon()  # no I/O in a cancelled task: see TransactionManager.abandon
        else:
            await m.abort_quietly()  # then the body's exception propagates


class TransactionManager:
    """The transaction of one producer: state, partitions and coordinator calls."""

    def __init__(
        self,
        engine: ProducerEngine,
        *,
        transaction_timeout_ms: int,
        request_timeout_ms: int,
        max_block_ms: int,
        cluster: Callable[[], CoordinatorCluster | None],
        spawn: Callable[[Callable[[], Coroutine[Any, Any, None]]], object] | None = None,
        transaction_version: Callable[[], int] = lambda: 0,
    ) -> None:
        """``engine``: the producer's, built with a transactional id (its idempotence state
        is this transaction's drain state); ``cluster``: the producer's cluster once started
        (None before: a call then raises); ``spawn``: starts a task in the producer's task
        group (a transaction whose task was cancelled is aborted by a task of ours);
        ``transaction_version``: the cluster's finalized ``transaction.version`` (0 when
        unknown), read at each begin."""
        idem = engine.idem
        assert isinstance(idem, TransactionalIdempotence), "the engine is not transactional"
        self.engine = engine
        self.idem = idem
        self.transactional_id = idem.transactional_id
        self.transaction_timeout_ms = transaction_timeout_ms
        self.retry_backoff = engine.retry_backoff
        self.request_timeout_s = request_timeout_ms / 1000
        self.max_block_s = max_block_ms / 1000
        #: Gets and applies the producer id; this state machine decides when and judges
        #: the errors (the module docstring of ``producer_id``).
        self.ids = ProducerIdOwner(
            engine, label=f"transaction {self.transactional_id}", log=log, level=logging.INFO
        )
        self.state = S.UNINITIALIZED
        self.last_error: KafkaError | None = None
        self._cluster = cluster
        self._client_made: TxnCoordinatorClient | None = None
        self._spawn = spawn
        self._transaction_version = transaction_version
        self._background: anyio.Event | None = None  # set when a background abort ends
        self._event = anyio.Event()
        self._offset_groups: set[str] = set()  # groups added (AddOffsetsToTxn) in this txn
        self._ending = False  # EndTxn(commit) on the wire: its outcome is unknown if cut
        self._bump_needed = False  # a sequence hole: bump the epoch after the abort
        #: The AddPartitionsToTxn call of run() in progress (its cancel scope and an event
        #: set when it has ended), for _abort to end it first: see _stop_adding.
        self._adding: tuple[anyio.CancelScope, anyio.Event] | None = None
        self._futures: list[Delivery[Any]] = []
        self.transactions = 0  # committed
        self.aborts = 0

    def __repr__(self) -> str:
        return (
            f"<TransactionManager {self.transactional_id!r} {self.state.value} "
            f"pid={self.idem.producer_id} epoch={self.idem.epoch}>"
        )

    # The transaction's drain state lives in the engine's idempotence state (the drain
    # reads it there); the state machine moves it.

    @property
    def partitions(self) -> set[tuple[str, int]]:
        """The partitions added to the open transaction."""
        return self.idem.partitions

    @property
    def pending_partitions(self) -> set[tuple[str, int]]:
        """The partitions waiting to be added (queued by the drain)."""
        return self.idem.pending_partitions

    @property
    def drain_error(self) -> KafkaError | None:
        """The error queued batches fail with (aborting, abortable or fatal), else None."""
        return self.idem.drain_error

    @drain_error.setter
    def drain_error(self, exc: KafkaError | None) -> None:
        self.idem.drain_error = exc

    @property
    def v2(self) -> bool:
        """Transactions v2 for the open transaction (decided at begin, module docstring)."""
        return self.idem.v2

    @v2.setter
    def v2(self, value: bool) -> None:
        self.idem.v2 = value

    @property
    def client(self) -> TxnCoordinatorClient | None:
        """The coordinator client, made at the first call after the producer started."""
        if self._client_made is None:
            cluster = self._cluster()
            if cluster is None:
                return None
            self._client_made = TxnCoordinatorClient(
                cluster,
                self.transactional_id,
                transaction_timeout_ms=self.transaction_timeout_ms,
                retry_backoff=self.retry_backoff,
                request_timeout_s=self.request_timeout_s,
                max_block_s=self.max_block_s,
            )
        return self._client_made

    # ------------------------------------------------------------------ state machine

    def _to(self, new: TransactionState, op: str) -> None:
        old = self.state
        if old is S.FATAL_ERROR:
            raise self._fatal_error(op)
        if new not in TRANSITIONS[old]:
            exc = IllegalTransactionStateError(
                f"cannot {op}: transaction of {self.transactional_id!r} is {old.value} "
                f"({HINTS[old]})"
            )
            if old is S.ABORTABLE_ERROR:
                raise exc from self.last_error
            raise exc
        log.debug("transaction %s: %s -> %s (%s)", self.transactional_id, old, new, op)
        self.state = new

    def _fatal_error(self, op: str) -> KafkaError:
        err = self.last_error
        assert err is not None
        # A fresh instance each time: re-raising one object would pile up tracebacks.
        return type(err)(f"cannot {op}: {err}")

    def fail_fatal(self, exc: KafkaError) -> None:
        if self.state is S.FATAL_ERROR:
            return
        log.error("transaction %s: fatal error: %s", self.transactional_id, exc)
        self.state = S.FATAL_ERROR
        self.last_error = exc
        self.drain_error = exc
        self.engine.signals.wake_all()

    def _fail_abortable(self, exc: KafkaError) -> None:
        if self.state in (S.IN_TRANSACTION, S.COMMITTING, S.INITIALIZING):
            log.warning("transaction %s: abortable error: %s", self.transactional_id, exc)
            self.state = S.ABORTABLE_ERROR
            self.last_error = exc
            self.drain_error = exc
            self.engine.signals.wake_all()

    def _failed(self, exc: KafkaError) -> None:
        """Record a coordinator call's error: fatal or abortable by its type."""
        if isinstance(exc, FATAL_TYPES):
            self.fail_fatal(exc)
        else:
            self._fail_abortable(exc)

    def sequence_hole(self) -> None:
        """A batch holding a sequence will never be written, or the broker lost our state."""
        self._bump_needed = True
        if self.state in (S.IN_TRANSACTION, S.COMMITTING):
            self._fail_abortable(
                TransactionAbortedError(
                    "a batch of the transaction failed after it got a sequence number; "
                    "the transaction must be aborted"
                )
            )

    def wake(self) -> None:
        """Partitions wait to be added (the engine's ``partitions_wanted`` signal)."""
        self._event.set()

    def check_send(self) -> None:
        """Raise unless a record may be sent now (called by ``send()``)."""
        if self.state is not S.IN_TRANSACTION:
            if self.state is S.FATAL_ERROR:
                raise self._fatal_error("send")
            if self.state is S.ABORTABLE_ERROR:
                raise IllegalTransactionStateError(
                    f"cannot send: {HINTS[S.ABORTABLE_ERROR]}"
                ) from self.last_error
            raise TransactionNotStartedError(
                f"cannot send: transaction of {self.transactional_id!r} is {self.state.value} "
                f"({HINTS[self.state]})"
            )

    def track(self, future: Delivery[Any]) -> None:
        """Remember a record of the open transaction (commit checks they all succeeded)."""
        self._futures.append(future)

    @property
    def in_transaction(self) -> bool:
        return self.state in (S.IN_TRANSACTION, S.COMMITTING, S.ABORTING, S.ABORTABLE_ERROR)

    # ------------------------------------------------------------------ operations

    def _client(self) -> TxnCoordinatorClient:
        client = self.client
        if client is None:
            raise IllegalTransactionStateError("the producer is not started")
        return client

    async def init(self) -> None:
        """InitProducerId with our transactional id (fences older producers using it)."""
        if self.state is S.READY:
            return  # start() did it already
        client = self._client()
        self._to(S.INITIALIZING, "init_transactions()")
        try:
            # -1/-1 whatever we held: fences any other producer using our transactional id.
            await self.ids.renew(lambda _pid, _epoch: client.init_producer_id())
        except KafkaError as exc:
            if isinstance(exc, FATAL_TYPES):
                self.fail_fatal(exc)
            else:
                self.state = S.UNINITIALIZED  # retriable: may be called again
            raise
        self._to(S.READY, "init_transactions()")

    def begin(self) -> None:
        self._to(S.IN_TRANSACTION, "begin_transaction()")
        self._futures = []
        v2 = self._transaction_version() >= 2
        if v2 != self.v2:
            log.info(
                "transaction %s: transactions v%d (the cluster's transaction.version)",
                self.transactional_id, 2 if v2 else 1,
            )  # fmt: skip
        self.v2 = v2

    def _end_txn_done(self, bumped: tuple[int, int] | None) -> None:
        """After EndTxn: under transactions v2 the coordinator moved the epoch (and maybe
        the producer id); the next transaction writes with those, sequences from 0."""
        if bumped is not None:
            # Transactions v2 move the epoch at every commit: routine, not worth an INFO line.
            self.ids.apply(*bumped, routine=True)
            self._bump_needed = False  # the new epoch also closes any sequence hole

    async def send_offsets(
        self,
        offsets: Mapping[Any, Any],
        group: ConsumerGroupMetadata | str | Any,
    ) -> None:
        """Commit consumer ``offsets`` ({(topic, partition): offset | OffsetAndMetadata})
        as part of the transaction."""
        if self.state is not S.IN_TRANSACTION:
            self.check_send()
        meta = group_metadata(group)
        parsed = parse_offsets(offsets)
        client = self._client()
        idem = self.idem
        try:
            if meta.group_id not in self._offset_groups:
                if not self.v2:  # v2: TxnOffsetCommit v5 adds the group itself
                    await client.add_offsets(idem.producer_id, idem.epoch, meta.group_id)
                self._offset_groups.add(meta.group_id)
            await client.txn_offset_commit(idem.producer_id, idem.epoch, meta, parsed, v2=self.v2)
        except KafkaError as exc:
            self._failed(exc)
            raise

    async def _flush_for_end(self, flush: Callable[[], Awaitable[None]], op: str) -> None:
        """Flush and check every record of the transaction was delivered (COMMITTING)."""
        if self.state is not S.COMMITTING:  # COMMITTING: a timed-out commit, resumed
            self._to(S.COMMITTING, op)
        self.engine.signals.wake_all()
        await flush()
        if self.state is not S.COMMITTING:  # an error arrived while flushing
            self._to(S.COMMITTING, op)  # raises the right error
        for fut in self._futures:
            # The records' outcome, even if a future was cancelled; a run's records that its
            # cancelled send_many never queued are not part of the transaction (bulk.py).
            exc = fut.queued_error()
            if exc is not None:
                err = exc if isinstance(exc, KafkaError) else KafkaError(str(exc))
                self._fail_abortable(err)
                raise IllegalTransactionStateError(
                    f"cannot commit: a record of the transaction was not delivered ({exc!r}); "
                    "call abort_transaction()"
                ) from exc

    async def prepare(self, flush: Callable[[], Awaitable[None]]) -> PreparedTransaction:
        """Flush and check as commit does, then stop short of EndTxn: the transaction stays
        open on the coordinator for whoever holds the answer to commit or abort it
        (``Producer.complete_transaction``), until a producer with the same transactional
        id starts (its InitProducerId aborts it) or ``transaction_timeout_ms`` passes. This
        producer can then only be closed."""
        await self._flush_for_end(flush, "prepare_transaction()")
        idem = self.idem
        pid, epoch = (
            (idem.producer_id, idem.epoch) if self.partitions or self._offset_groups else (-1, -1)
        )
        self._to(S.PREPARED, "prepare_transaction()")
        return PreparedTransaction(self.transactional_id, pid, epoch, self.v2)

    async def commit(self, flush: Callable[[], Awaitable[None]]) -> None:
        """Flush, check every record was delivered, EndTxn(commit)."""
        await self._flush_for_end(flush, "commit_transaction()")
        if self.partitions or self._offset_groups:
            # Left True if we are cancelled while EndTxn is out (see abandon()).
            self._ending = True
            try:
                bumped = await self._client().end_txn(
                    self.idem.producer_id, self.idem.epoch, commit=True, v2=self.v2
                )
            except KafkaError as exc:
                self._ending = False
                if exc.retriable:  # timed out: stay COMMITTING, commit may be called again
                    raise
                self._failed(exc)
                raise
            self._ending = False
            self._end_txn_done(bumped)
        self._completed()
        self.transactions += 1
        self._to(S.READY, "commit_transaction()")

    async def abort(self) -> None:
        """Fail queued records, wait for those in flight, EndTxn(abort); bump the epoch if a
        sequence hole was left."""
        if self._background is not None:
            await self._background.wait()  # abandon() started it: the caller's abort
            if self.state is S.READY:
                return
        await self._abort()

    async def _abort(self) -> None:
        if self.state is not S.ABORTING:
            self._to(S.ABORTING, "abort_transaction()")
        self.drain_error = TransactionAbortedError(
            f"transaction of {self.transactional_id!r} was aborted"
        )
        engine = self.engine
        engine.abort_all(self.drain_error)
        engine.signals.wake_all()
        # In flight: their outcome no longer matters, but they must not be written after
        # the abort marker. Re-queued retries fail at their next drain.
        for fut in engine.incomplete():
            await fut.wait_done()
        await self._stop_adding()
        self.pending_partitions.clear()
        client = self._client()
        idem = self.idem
        if self.partitions or self._offset_groups:
            try:
                bumped = await client.end_txn(
                    idem.producer_id, idem.epoch, commit=False, v2=self.v2
                )
            except KafkaError as exc:
                if isinstance(exc, FATAL_TYPES):
                    self.fail_fatal(exc)
                raise  # otherwise still ABORTING: abort may be called again
            self._end_txn_done(bumped)
        self._completed()
        if self._bump_needed:
            self._to(S.INITIALIZING, "abort_transaction()")
            try:
                await self.ids.renew(self._bump)
            except KafkaError as exc:
                if isinstance(exc, FATAL_TYPES):
                    self.fail_fatal(exc)
                else:
                    self.state = S.ABORTABLE_ERROR  # abort again to retry the bump
                    self.drain_error = self.last_error = exc
                raise
            self._bump_needed = False
        self.drain_error = None
        self.aborts += 1
        self._to(S.READY, "abort_transaction()")

    async def _stop_adding(self) -> None:
        """End run()'s AddPartitionsToTxn call, if one is in progress, before EndTxn.

        Its retries carry the producer id and epoch of the transaction being aborted: left
        running, the next attempt reaches the coordinator after the abort's epoch bump and
        is answered PRODUCER_FENCED, a fatal error (found by the simulation explorer: a
        response cut mid-way, then an abort; tests/simulation/test_explorer.py replays it).
        Java's client never overlaps them: its transaction requests go one at a time. What
        the ended call may have added gets a marker from this EndTxn when other partitions
        were added, else the coordinator aborts it at the epoch bump or the transaction
        timeout."""
        adding = self._adding
        if adding is None:
            return
        scope, ended = adding
        scope.cancel()
        await ended.wait()

    async def _bump(self, producer_id: int, epoch: int) -> tuple[int, int]:
        """A new epoch for our producer id (how :attr:`ids` asks after a sequence hole).
        KIP-360's form names the current id/epoch, so a producer that was fenced meanwhile
        is told so instead of fencing its successor. Tansu answers that form with an
        unknown error (-1); then the plain form (-1/-1), which every broker accepts, bumps
        the epoch just the same."""
        client = self._client()
        try:
            return await client.init_producer_id(producer_id, epoch)
        except KafkaError as exc:
            if isinstance(exc, FATAL_TYPES) or exc.retriable:
                raise
            log.info("transaction %s: epoch bump refused (%s); re-initializing", self, exc)
            return await client.init_producer_id()

    async def abort_quietly(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Abort if a transaction is open, shielded and bounded by ``request_timeout_ms``
        (or ``timeout`` if shorter); errors are logged, not raised (cleanup paths). Skipped
        in a cancelled task."""
        if not self.in_transaction or anyio.current_effective_deadline() == -math.inf:
            return
        bound = self.request_timeout_s if timeout is None else min(timeout, self.request_timeout_s)
        with anyio.CancelScope(shield=True), anyio.move_on_after(bound):
            try:
                await self.abort()
            except KafkaError as exc:
                log.warning("transaction %s: abort failed: %s", self.transactional_id, exc)

    def abandon(self) -> None:
        """The task running the transaction was cancelled.

        No I/O here: when the cancellation also tears the producer down, its connections'
        tasks are cancelled too and a shielded EndTxn could only wait out its retries. So
        the transaction is marked failed (it can never commit) and aborted by a task of the
        producer's own; if the producer is going down as well, that task dies with it and
        the transaction stays open on the broker until the next producer with this
        transactional id starts (its InitProducerId aborts it) or
        ``transaction_timeout_ms`` passes -- exactly what a crash leaves behind.
        """
        if self.state is S.COMMITTING and self._ending:
            # EndTxn(commit) may have reached the coordinator: aborting now could only fail.
            # The state stays COMMITTING; commit_transaction() may be called again.
            return
        if self.state in (S.IN_TRANSACTION, S.COMMITTING):
            self._fail_abortable(
                TransactionAbortedError("the task running the transaction was cancelled")
            )
        if self.state is S.ABORTABLE_ERROR and self._spawn and self._background is None:
            self._background = anyio.Event()
            self._spawn(self._abort_in_background)

    async def _abort_in_background(self) -> None:
        done = self._background
        try:
            await self._abort()
        except KafkaError as exc:
            log.warning("transaction %s: abort failed: %s", self.transactional_id, exc)
        finally:
            self._background = None
            if done is not None:
                done.set()

    async def wait_background_abort(self) -> None:
        if self._background is not None:
            await self._background.wait()

    def _completed(self) -> None:
        self.partitions.clear()
        self.pending_partitions.clear()
        self._offset_groups.clear()
        self._futures = []

    def context(self, flush: Callable[[], Awaitable[None]]) -> _TransactionContext:
        return _TransactionContext(self, flush)

    # ------------------------------------------------------------------ background

    async def run(self) -> None:
        """Add partitions to the transaction as the drain asks for them (batched)."""
        # One RetryState across batches, as one failure count: a success resets it.
        pacing = RetryState(self.retry_backoff)
        while True:
            await self._event.wait()
            self._event = anyio.Event()
            while True:
                scope, ended = anyio.CancelScope(), anyio.Event()
                self._adding = (scope, ended)
                try:
                    with scope:
                        batch = await retrying(self._add_pending, pacing, what="AddPartitionsToTxn")
                except KafkaError as exc:
                    self._failed(exc)
                    break
                finally:
                    self._adding = None
                    ended.set()
                if scope.cancelled_caught or batch is None:
                    break
                self.partitions.update(batch)
                self.pending_partitions.difference_update(batch)
                self.engine.signals.wake_all()

    async def _add_pending(self) -> set[tuple[str, int]] | None:
        """One attempt of :meth:`run`: the partitions pending now, added (and returned);
        None when there is nothing to add or the transaction is no longer open. A retriable
        failure is retried while the transaction lives (timed out: keep trying)."""
        live = (S.IN_TRANSACTION, S.COMMITTING)
        if not (self.pending_partitions and self.state in live):
            return None
        batch = set(self.pending_partitions)
        idem = self.idem
        try:
            await self._client().add_partitions(idem.producer_id, idem.epoch, batch)
        except KafkaError as exc:
            if exc.retriable and self.state in live:
                raise
            raise Final(exc) from None
        return batch
