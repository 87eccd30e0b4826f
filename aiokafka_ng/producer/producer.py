"""The public :class:`Producer`.

``send()`` validates and serializes the record, reserves memory through the engine, hands
the record to it (``ProducerEngine.add``) and returns a
:class:`~aiokafka_ng.producer.future.DeliveryFuture`. It never waits for metadata; it waits
only for memory (``max_block_ms``).

A producer is an engine and its drivers (DESIGN.md, "The shape we are moving to"), all made
from the config by their constructors in :mod:`aiokafka_ng.producer.parts`:

* the :class:`~aiokafka_ng.producer.engine.ProducerEngine` -- the memory pool, the
  accumulator and the idempotence state, synchronous and without I/O; it applies every
  answer and says what it needs through the callables (``Signals``) it was built with;
* the I/O drivers, tasks in the producer's task group: one
  :class:`~aiokafka_ng.producer.sender.NodeSender` per broker that leads a partition we
  write to (made by :class:`~aiokafka_ng.producer.senders.Senders` at its first ready
  batch), the expiry timer, and the producer id's owner
  (:class:`~aiokafka_ng.producer.producer_id.ProducerIdOwner`, or the transaction manager),
  which take the engine in their constructors.

The cluster's metadata reaches the engine through the producer's listener (``_on_metadata``),
which turns a bug there into the producer's failure rather than the cluster task's.

The lifecycle (NEW, RUNNING, CLOSING, CLOSED), the task group and the cluster in a task of
their own (so ``start()`` and ``close()`` may run in different tasks, as web frameworks'
startup and shutdown hooks do), the supervision of the background tasks and ``status()``
are the producer's :class:`~aiokafka_ng.cluster.ClientRuntime`, the same for every client.
What is the producer's own: a failed background task fails every pending record with an
``IllegalStateError`` caused by it (``_stopped``), and the errors of calls that need a
running producer (``_not_running``).

``close()`` waits for what was sent at most ``close_timeout_ms`` (or its ``timeout``), then
fails what is left with :class:`~aiokafka_ng.errors.ClosedBeforeDeliveryError`: a broker
outage must not hold an application's shutdown for ``delivery_timeout_ms``.
"""

from __future__ import annotations

import dataclasses
import functools
import logging
import uuid
from collections.abc import Iterable, Mapping
from contextlib import AbstractAsyncContextManager, AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Unpack, cast

import anyio
import anyio.lowlevel

from aiokafka_ng.cluster import ClientRuntime, ClientState, ClientStatus, Cluster
from aiokafka_ng.cluster.telemetry import TelemetryEngine, metadata_age, table_collector
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import (
    ClosedBeforeDeliveryError,
    IllegalStateError,
    KafkaError,
    KafkaTimeoutError,
    ProducerClosedError,
    SaslAuthenticationFailedError,
    SendTimeoutError,
)
from aiokafka_ng.net.clock import loop_clock, running_asyncio_loop
from aiokafka_ng.producer.bulk import send_batch, send_many
from aiokafka_ng.producer.future import (
    BatchDelivery,
    DeliveryFuture,
    RecordMetadata,
    callbacks_run,
)
from aiokafka_ng.producer.intake import (
    RECORD_OVERHEAD,
    ProducerRecord,
    as_bytes,
    bind_send_fast,
    check_headers,
)
from aiokafka_ng.producer.parts import build_parts, start_tasks
from aiokafka_ng.producer.statistics import TELEMETRY_METRICS, ProducerStatistics, collect
from aiokafka_ng.producer.transactions import TransactionManager
from aiokafka_ng.producer.txn_coordinator import PreparedTransaction, complete_prepared
from aiokafka_ng.protocol import speedups

if TYPE_CHECKING:
    from aiokafka_ng._settings import ProducerSettings
    from aiokafka_ng.tracing import ProducerTracing

__all__ = ["Producer", "ProducerRecord", "ProducerStatistics"]

log = logging.getLogger(__name__)
#: send()'s common case in C (``intake.bind_send_fast``), or None: the Python path alone.
_C_SEND_FAST = bind_send_fast(speedups.kernel(__name__))


class Producer:
    """An asyncio/trio Kafka producer.

    ::

        async with Producer(bootstrap_servers="127.0.0.1:9092", linger_ms=5) as producer:
            fut = await producer.send("events", b"value", key=b"k", headers=[("h", b"v")])
            meta = await fut                    # RecordMetadata(topic, partition, offset, ...)
            meta = await producer.send_and_wait("events", b"value")
            await producer.flush()

    Settings are :class:`~aiokafka_ng.config.ProducerConfig` fields as keywords (or a
    ``ProducerConfig``, or :meth:`from_properties` with Kafka's dotted names); defaults are
    the Java client's: acks=all, idempotence on, linger 5 ms, 16 KiB batches, 32 MiB buffer.
    ``start()`` and ``close()`` may run in different tasks (``async with`` does both).
    """

    def __init__(
        self, config: ProducerConfig | None = None, **kwargs: Unpack[ProducerSettings]
    ) -> None:
        if config is None:
            # The validators take more than the fields' types (the TypedDict's).
            config = ProducerConfig(**cast("dict[str, Any]", kwargs))
        elif kwargs:
            raise TypeError("pass either a ProducerConfig or keyword settings, not both")
        self.config = config
        self._runtime = ClientRuntime(
            "producer",
            client_id=config.client_id,
            bootstrap_servers=config.bootstrap_servers,
            started_twice="producer is {state}; start() runs once",
            on_failure=self._crashed,
        )
        parts = build_parts(config, self._runtime, why_stopped=self._not_running, log=log)
        self._engine = parts.engine  # records, batches, memory, sequences: no I/O
        self._txn = parts.txn
        self._senders = parts.senders  # the I/O side: a sender per broker
        self._intake = parts.intake  # what send() and the bulk path read
        self._parts = parts
        #: Spans and trace headers (aiokafka_ng.tracing), or None: then a check per send.
        self._tracing = _tracing(config, self)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Producer:
        """A producer from Kafka-style properties (``{"linger.ms": "5", ...}``)."""
        return cls(ProducerConfig.from_properties(properties))

    def __repr__(self) -> str:
        state = self._runtime.state.value
        return f"<Producer {state} senders={sorted(self._senders.by_node)}>"

    # ------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Connect (bootstrap) and start the background tasks."""
        cfg = self.config
        config = cfg.cluster_config(max_in_flight=cfg.max_in_flight_requests_per_connection)
        cluster = Cluster(dataclasses.replace(config, role="producer"))
        await self._runtime.start(cluster, self._open)
        self._intake.running = True
        # Under asyncio, delivery futures are asyncio futures of this loop (see future.py).
        self._intake.loop = loop = running_asyncio_loop()
        # The same clock as anyio.current_time() (what the engine was built with), read
        # without a backend lookup per call: the engine reads it several times per request.
        self._engine.started(loop_clock(), loop)
        self._engine.update_metadata(cluster.metadata)
        start_tasks(self._parts, cluster, self._runtime.tasks, self._on_cluster_error)
        if self._txn is not None:
            try:
                await self._txn.init()  # fences older producers with our transactional id
            except BaseException:
                await self.close(timeout=0)
                raise

    async def _open(self, cluster: Cluster, stack: AsyncExitStack) -> None:
        """Listen to the entered cluster (run in the runtime's host task)."""
        stack.callback(cluster.add_listener(self._on_metadata))
        stack.callback(cluster.add_error_listener(self._on_cluster_error))
        cfg = self.config
        if cfg.enable_metrics_push:
            tid = cfg.transactional_id
            engine = TelemetryEngine(
                table_collector(
                    self.statistics, TELEMETRY_METRICS, derived=metadata_age("producer")
                ),
                # Java's ClientTelemetryProvider: the producer's resource names its
                # transactional id (the broker adds client id, software and address).
                resource=(("transactional_id", tid),) if tid else (),
            )
            self._runtime.push_metrics(engine, request_timeout=cfg.request_timeout_ms / 1000)

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until a broker answered. ``start()`` does not wait for the cluster (records
        queue within ``buffer_memory``); apps that want to fail fast call this:
        ``KafkaTimeoutError`` naming the bootstrap servers after ``timeout`` seconds."""
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise self._not_running()
        await cluster.wait_ready(timeout)

    def status(self) -> ClientStatus:
        """Health at a glance, without waiting (see :class:`ClientStatus`): ready only
        while running, connected and no background task has failed."""
        return self._runtime.status()

    async def __aenter__(self) -> Producer:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (public API)
        """Deliver what was sent (at most ``timeout`` seconds; default ``close_timeout_ms``,
        ``math.inf`` waits for ever), fail what is left, stop.

        Records still undelivered when the deadline passes fail with
        :class:`~aiokafka_ng.errors.ClosedBeforeDeliveryError`. May run in another task than
        ``start()``.
        """
        runtime = self._runtime
        if not runtime.begin_close():
            return
        self._intake.running = False
        engine = self._engine
        if timeout is None:
            timeout = self.config.close_timeout_ms / 1000
        try:
            deadline = anyio.current_time() + timeout
            if self._txn is not None and self._txn.in_transaction:
                # Records of an open transaction must not be committed by accident; the
                # broker would abort it after transaction_timeout_ms anyway. The abort counts
                # against close's timeout, as in the Java client (a fenced producer's EndTxn
                # may never be answered).
                await self._txn.abort_quietly(timeout)
            engine.begin_close()
            with anyio.move_on_after(max(0.0, deadline - anyio.current_time())):
                for fut in engine.incomplete():
                    await fut.wait_done()
                await callbacks_run(self._intake.loop)
            # KIP-714's terminating push, with the final counts, in what close has left.
            await runtime.stop_metrics(max(0.0, deadline - anyio.current_time()))
        finally:
            # The senders stop before what is left fails: none may settle a batch after.
            runtime.cancel_tasks()
            failed_before = engine.records_failed
            engine.abort_all(
                ClosedBeforeDeliveryError(
                    f"the producer closed before the record was delivered "
                    f"(waited {timeout:g} s; close_timeout_ms={self.config.close_timeout_ms})"
                ),
                in_flight=True,
            )
            if engine.records_failed > failed_before:
                log.warning(
                    "producer %s: closed with %d record(s) undelivered after %g s "
                    "(close_timeout_ms); they fail with ClosedBeforeDeliveryError",
                    self.config.client_id, engine.records_failed - failed_before, timeout,
                )  # fmt: skip
            self._senders.close()
            # The host leaves the task group and the cluster in its own task.
            await runtime.finish_close()

    # ------------------------------------------------------------------ sending

    async def send(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
    ) -> DeliveryFuture:
        """Queue one record; return its delivery future (await it for RecordMetadata).

        Waits only when the buffer is full, at most ``max_block_ms``, then raises
        ``BufferExhaustedError``. A record too large for ``max_request_size`` or
        ``buffer_memory`` gets a future failed with ``MessageSizeTooLargeError``.
        """
        tracing = self._tracing
        if tracing is not None and headers.__class__ is not tracing.carrier:
            # A span, its context put in the headers; the traced record comes back here.
            traced = await tracing.send(topic, value, key, partition, timestamp_ms, headers)
            return cast(DeliveryFuture, traced)
        # The hot path: the common case in one C call (None: not taken, nothing done),
        # else every check here is cheap and the common case calls only the builder.
        intake = self._intake
        c_send = _C_SEND_FAST
        if c_send is not None:
            fast = c_send(intake, topic, value, key, partition, timestamp_ms, headers)
            if fast is not None:
                if self._senders.yield_due:
                    self._senders.yield_due = False
                    await anyio.lowlevel.checkpoint()
                return cast(DeliveryFuture, fast)
        if not intake.running:
            raise intake.stopped()
        if intake.key_ser is not None:
            key = intake.key_ser(key)
        if intake.value_ser is not None:
            value = intake.value_ser(value)
        size = RECORD_OVERHEAD
        if value is not None:
            if value.__class__ is not bytes:
                value = as_bytes(value, "value")
            size += len(value)
        if key is not None:
            if key.__class__ is not bytes:
                key = as_bytes(key, "key")
            size += len(key)
        hdrs: list[tuple[str, bytes | None]] | None = None
        if headers:
            hdrs = check_headers(headers)
            for hkey, hvalue in hdrs:
                size += len(hkey) + (len(hvalue) if hvalue is not None else 0) + 10
        partition, timestamp_ms = intake.admit(topic, partition, timestamp_ms)
        txn = intake.txn
        fut = DeliveryFuture(topic, timestamp_ms, intake.loop)
        engine = intake.engine
        if size > intake.max_record:
            engine.refuse(fut, intake.too_large(size))
            return fut
        size += engine.waiting_charge(topic)
        if not engine.try_reserve(size):
            await engine.reserve(size, intake.max_block_s)
            if not intake.running:
                engine.release(size)
                raise intake.stopped()
        engine.add(topic, partition, key, value, hdrs, timestamp_ms, size, fut)
        if txn is not None:
            txn.track(fut)
        if self._senders.yield_due:
            # Batches became ready: let the senders run before queueing more, so a tight
            # send() loop cannot starve the network (senders.py, Yielding).
            self._senders.yield_due = False
            await anyio.lowlevel.checkpoint()
        return fut

    async def send_and_wait(
        self,
        topic: str,
        value: Any = None,
        key: Any = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
        headers: Iterable[tuple[str, bytes | None]] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109 (public API)
    ) -> RecordMetadata:
        """``send()`` and wait for the outcome.

        ``timeout`` (seconds) bounds the whole call, a wait for buffer memory included:
        :class:`~aiokafka_ng.errors.SendTimeoutError` when it passes. The record is not
        taken back: once queued it may still be delivered (until ``delivery_timeout_ms``).
        Without ``timeout`` the call ends at ``delivery_timeout_ms`` at the latest.
        """
        if timeout is None:
            fut = await self.send(topic, value, key, partition, timestamp_ms, headers)
            return await fut
        queued: DeliveryFuture | None = None
        with anyio.move_on_after(timeout):
            queued = await self.send(topic, value, key, partition, timestamp_ms, headers)
            # wait_done, not awaiting the future: a timeout must not cancel the future
            # (asyncio would), which others may hold through callbacks.
            await queued.wait_done()
        if queued is None:
            raise SendTimeoutError(
                f"send_and_wait to {topic!r}: no buffer memory within {timeout:g} s; "
                "the record was not queued"
            )
        if not queued.done():
            raise SendTimeoutError(
                f"send_and_wait to {topic!r}: not acknowledged within {timeout:g} s; "
                + self._engine.waiting_reason(topic)
            )
        return queued.result()

    async def send_batch(
        self,
        topic: str,
        records: Iterable[Any],
        *,
        keys: Iterable[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> list[DeliveryFuture]:
        """Send many records to ``topic`` at once; returns one future per record, in order.

        ``records`` are values (with ``keys``, an equally long iterable, or null keys), or
        :class:`ProducerRecord` items. Values -- and ProducerRecords without headers,
        partition or timestamp of their own -- take the bulk path: validated together,
        memory reserved per chunk, appended to each partition's batch in runs rather than
        one ``send()`` per record. ``partition`` and ``timestamp_ms`` apply to the whole
        run. Semantics are ``send()``'s record by record (no wait for metadata, ordered per
        partition, an oversize record fails alone); if ``max_block_ms`` passes while
        waiting for memory, the records not yet queued fail with ``BufferExhaustedError``.
        Cancelled, the records already queued are still delivered and the rest are not
        sent (see ``aiokafka_ng.producer.bulk``, Cancellation).
        """
        intake, send = self._intake, self.send
        if self._tracing is None:
            return await send_batch(intake, send, topic, records, keys, partition, timestamp_ms)
        # One span for the call; its context is the headers of every record of the run.
        return await self._tracing.bulk(
            topic,
            lambda headers: send_batch(
                intake, send, topic, records, keys, partition, timestamp_ms, headers
            ),
        )

    async def send_many(
        self,
        topic: str,
        values: Iterable[Any],
        *,
        keys: Iterable[Any] | None = None,
        partition: int | None = None,
        timestamp_ms: int | None = None,
    ) -> BatchDelivery:
        """``send_batch`` of plain values with one :class:`BatchDelivery` for the whole run
        instead of a future per record: the fastest way to send many records.

        Same path, checks and semantics as ``send_batch`` (no wait for metadata, ordered
        per partition, memory-bounded, an oversize record fails alone). The result is done
        when every record is decided; awaited it gives the records' ``RecordMetadata`` in
        order (built when read) or raises the first error; ``errors()`` and
        ``metadata(i)`` tell each record's own outcome.

        What is sent is what ``values`` and ``keys`` hold when this returns: the records
        are encoded by then, or copied (a run waiting for its topic's metadata), so the
        caller may change or reuse its lists and buffers once it has returned. Items are
        ``bytes`` or ``None`` (a ``bytearray`` or ``memoryview`` item is copied);
        ``values`` and ``keys`` may also be a ``BinaryColumn`` (the C kernel's view of
        an Arrow binary array), whose data buffer is read until this returns.

        Cancelled, the records already queued are still delivered (in a transaction, they
        are part of it) and the rest are not sent; ``flush()`` and a commit do not wait
        for them.
        """
        intake = self._intake
        if self._tracing is None:
            return await send_many(intake, topic, values, keys, partition, timestamp_ms)
        return await self._tracing.bulk(
            topic,
            lambda headers: send_many(
                intake, topic, values, keys, partition, timestamp_ms, headers
            ),
        )

    async def flush(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (public API)
        """Send everything queued now and wait for its outcome (not raising delivery
        errors). Raises ``KafkaTimeoutError`` if ``timeout`` seconds pass first."""
        if self._runtime.state is not ClientState.RUNNING:
            raise self._not_running()
        engine = self._engine
        engine.begin_flush()
        try:
            done = False
            with anyio.move_on_after(timeout):
                for fut in engine.incomplete():
                    await fut.wait_done()
                await callbacks_run(self._intake.loop)
                done = True
            if not done:
                raise KafkaTimeoutError(f"flush did not complete within {timeout}s")
        finally:
            self._engine.end_flush()

    # ------------------------------------------------------------------ transactions

    async def init_transactions(self) -> None:
        """Get the producer id of ``transactional_id``, fencing older producers with that id
        (their open transaction is aborted). ``start()`` already does it: then a no-op."""
        await self._transactions().init()

    def begin_transaction(self) -> None:
        """Open a transaction (transactional producers only)."""
        self._transactions().begin()

    async def commit_transaction(self) -> None:
        """Flush, check every record of the transaction was delivered, commit it."""
        await self._transactions().commit(self.flush)

    async def abort_transaction(self) -> None:
        """Abort the open transaction: queued records fail, the rest is discarded."""
        await self._transactions().abort()

    async def send_offsets_to_transaction(
        self, offsets: Mapping[Any, Any], group_metadata_or_id: Any
    ) -> None:
        """Commit consumer offsets ({(topic, partition): offset | OffsetAndMetadata}) with
        the transaction; ``group_metadata_or_id`` is a group id, a ``ConsumerGroupMetadata``
        or a consumer (its ``group_metadata()``)."""
        await self._transactions().send_offsets(offsets, group_metadata_or_id)

    async def prepare_transaction(self) -> PreparedTransaction:
        """Flush and check the open transaction as ``commit_transaction()`` does, but leave
        it open: the answer lets another process (or this one) commit or abort it with
        :meth:`complete_transaction`. The producer can then only be closed (closing does
        not abort it). Until completed, the transaction holds back read_committed readers
        of its partitions; it is aborted if a producer with the same transactional id
        starts, or after ``transaction_timeout_ms``. For writers whose commit decision is
        made elsewhere (a Spark driver commits the tasks' transactions)."""
        return await self._transactions().prepare(self.flush)

    async def complete_transaction(
        self, prepared: PreparedTransaction, *, commit: bool = True
    ) -> None:
        """Commit (or abort) a transaction left open by ``prepare_transaction()`` of any
        producer: EndTxn with its transactional id, producer id and epoch, retried as the
        producer's own commit is (bounded by ``max_block_ms``). Any started producer may
        call it, transactional or not. Raises
        :class:`~aiokafka_ng.errors.ProducerFencedError` when the transaction is no longer
        the open one of its transactional id (a newer producer started and aborted it, or
        it timed out): then it was not committed."""
        if prepared.producer_id < 0:
            return  # nothing was added to it: nothing to end
        cluster = self._runtime.cluster
        if cluster is None:
            raise IllegalStateError("the producer is not started")
        cfg = self.config
        await complete_prepared(
            cluster,
            prepared,
            commit=commit,
            transaction_timeout_ms=cfg.transaction_timeout_ms,
            retry_backoff=self._engine.retry_backoff,
            request_timeout_s=cfg.request_timeout_ms / 1000,
            max_block_s=cfg.max_block_ms / 1000,
        )

    def transaction(self) -> AbstractAsyncContextManager[None]:
        """``async with producer.transaction():`` -- commit on success, abort on error."""
        return self._transactions().context(self.flush)

    def _transactions(self) -> TransactionManager:
        if self._txn is None:
            raise IllegalStateError("not a transactional producer (set transactional_id)")
        if self._runtime.state is not ClientState.RUNNING:
            raise self._not_running()
        return self._txn

    # ------------------------------------------------------------------ metadata

    async def partitions_for(self, topic: str) -> set[int]:
        """The partition ids of ``topic`` (waits for its metadata, up to max_block_ms)."""
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise self._not_running()
        self._intake.check_topic(topic)
        found = await cluster.wait_for_topics([topic], timeout=self._intake.max_block_s)
        return set(found[topic].partitions)

    async def client_instance_id(self, timeout: float = 0.0) -> uuid.UUID | None:  # noqa: ASYNC109
        """The id the brokers assigned this producer for its metrics (KIP-714; Java's
        ``clientInstanceId``): operators find its pushed metrics under it. Waits up to
        ``timeout`` seconds for the first telemetry subscription; None if there is none yet
        (or the brokers have no telemetry plugin). ``IllegalStateError`` when
        ``enable_metrics_push`` is off or the producer is not started."""
        return await self._runtime.client_instance_id(timeout)

    def statistics(self) -> ProducerStatistics:
        """Counters for monitoring and tests, in any state (never blocks). Also a read-only
        mapping with the keys of the dict it returned before (``stats["records_sent"]``)."""
        return collect(self._parts, self._runtime)

    # ------------------------------------------------------------------ internals

    def _not_running(self) -> KafkaError:
        """What a call that needs a running producer raises now."""
        runtime = self._runtime
        if runtime.state is ClientState.NEW:
            return IllegalStateError("the producer is not started; call start() or use async with")
        if runtime.failure is not None and runtime.state is ClientState.RUNNING:
            return _stopped(runtime.failure)
        return ProducerClosedError("the producer is closed")

    def _crashed(self, exc: Exception) -> None:
        """A background task raised (the runtime's ``on_failure``, called once): stop
        sending, fail every pending record, refuse new ones; ``close()`` then cleans up
        without raising."""
        self._intake.running = False
        # The other tasks stay until close(), which stops them; every call meanwhile raises
        # the failure (see _not_running).
        self._engine.abort_all(_stopped(exc), in_flight=True)

    def _on_cluster_error(self, exc: KafkaError) -> None:
        # As Java's Sender on an authentication failure: what waits for metadata (or for a
        # producer id: ProducerIdOwner.run) fails with it now, not at delivery_timeout_ms.
        # Later sends try again (credentials may be fixed, a token refreshed).
        if isinstance(exc, SaslAuthenticationFailedError):
            self._engine.abort_all(exc)

    def _on_metadata(self, snapshot: Any) -> None:
        try:
            self._engine.update_metadata(snapshot)
        except Exception as exc:  # a bug of ours, run in the cluster's task: fail loudly here
            self._runtime.fail(exc)


def _tracing(config: ProducerConfig, producer: Producer) -> ProducerTracing | None:
    if config.tracer_provider is None:
        return None
    from aiokafka_ng.tracing import ProducerTracing  # needs the tracing extra

    # Producer.send itself, not an override: a subclass's send runs once per record.
    return ProducerTracing(config, functools.partial(Producer.send, producer))


def _stopped(failure: Exception) -> IllegalStateError:
    """The error of every call (and every pending record) after ``failure`` stopped a
    background task."""
    err = IllegalStateError(
        f"the producer stopped: a background task failed ({failure!r}); close it"
    )
    err.__cause__ = failure
    return err
