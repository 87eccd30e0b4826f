"""One Kafka broker connection: TLS, SASL, version negotiation and pipelined requests.

Theory of operation
===================

Setup. ``Connection.run`` (for ``tg.start``) and :func:`connect` (standalone) open the
TCP/TLS stream within ``connect_timeout_s`` (``_errors.open_stream``), then run the
handshake's steps (:mod:`aiokafka_ng.protocol.handshake`: ApiVersions, then SASL when
configured; ``_handshake.setup`` sequences them) as plain round trips read by the opening
task. Only then does the owner get the connection and the reader task start. Both read with
``_reading.read_until``: bytes into the ClientConnection, its events acted on. On asyncio's
plain TCP stream the reader task hands that work to the transport instead
(``PlainAsyncioStream.deliver_to``): each chunk read is fed and its answers settled in the
transport's callback (``_received``), with no task woken per answer, and the reader task
only waits for the stream's end (EOF, loss, close), which poisons as before. A settlement
there wakes a task waiting in ``PendingResponse.wait`` or calls the request's
``on_settled`` callback (the producer's senders), in wire order either way.

In-flight permits. A semaphore of exactly ``max_in_flight`` permits bounds the requests on
the wire. ``send()`` takes a permit BEFORE writing; from the moment its request is
registered the permit belongs to that in-flight entry, not to the calling task, and it is
released exactly once when the entry is settled: by its response, or by the connection
dying. A caller cancelled while waiting for its response releases nothing: its request is
still on the wire and still occupies a slot in the broker's queue, so the reader releases
the permit when the response arrives and discards the response. Such an *abandoned* request
keeps its deadline all the same (:meth:`Connection._abandon`): unanswered by then, it times
out as a waited-for request would (below: the connection closes, which settles it and frees
its permit), so a broker that never answers cannot hold the slot, and every later request
queued behind it on this connection, for ever. Nothing else would: its caller's wait, which
enforces the deadline of a request waited for, is gone. On asyncio a loop timer keeps that
deadline (as it does for ``PendingResponse.on_settled``); on trio a task of the reader's
(:meth:`Connection._expire_abandoned`) sleeps until the earliest one. Requests that expect no
response (Produce acks=0) take no permit: nothing would ever give it back. The permits and
the write lock are taken without a trip through the event loop when free (anyio's
``fast_acquire``): each such trip delayed every request by a loop turn -- 208 -> 132 us from
``submit()`` to the frame written, measured at 40k msg/s -- while a free permit needs none
(the write itself is still a cancellation point).

Correlation. The correlation, acks=0 and poisoning rules live in the sans-IO
:class:`~aiokafka_ng.protocol.connection.ClientConnection` (its module docstring says them):
this module writes the frames it returns, feeds it the bytes read and acts on its events. The
write lock makes the order of ``send_request`` calls the order of frames on the wire. The
handshake's exchanges go through that same object, so there is one correlation path.

Poisoning. ``_poison()`` is synchronous and idempotent: it marks the connection closed,
settles every request the ClientConnection still holds in flight with its own retriable
error instance (so each caller sees the failure exactly once), which releases their permits,
and cancels the reader, whose ``finally`` closes the socket. Causes: a ``Poisoned`` event
(correlation mismatch, a frame over the size cap or undecodable), an I/O error, a write that
could not finish (a partial frame corrupts the stream), a request timeout (its late response
could be taken for the next request's), and ``aclose()``. Writes are shielded from
cancellation and bounded by the request's deadline instead, so a frame is either written
whole or the connection is poisoned; a caller cancelled mid-write gets its cancellation at
its next checkpoint, with its request already in flight. (On asyncio's plain TCP stream a
frame the transport takes at once is written without that scope: there is no wait for it to
bound or shield.)

Re-authentication (KIP-368) runs lazily, from the first ``submit()`` after the SASL
session's renewal time, under the write lock; ``_reauth.py`` says how.

Timeouts. ``send(timeout=...)`` (default ``request_timeout_s``) is one deadline for the whole
call: waiting for a permit, for the write lock, writing, and the response. Running out
before the frame is written raises RequestTimeoutError and leaves the connection alone
(nothing reached the wire); running out afterwards also closes the connection -- whether
the caller still waits (it gets the RequestTimeoutError) or has gone (abandoned, above).
"""

from __future__ import annotations

import heapq
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Literal, TypeVar, overload

import anyio
import anyio.abc

from aiokafka_ng.errors import (
    CorrelationIdMismatchError,
    KafkaConnectionError,
    KafkaError,
    RequestTimeoutError,
)
from aiokafka_ng.net import _handshake
from aiokafka_ng.net._connection_types import (
    ConnectionConfig,
    ConnectionState,
    ConnectionStatistics,
)
from aiokafka_ng.net._errors import (
    IO_ERRORS,
    connection_error,
    describe,
    open_stream,
    translate_io_errors,
)
from aiokafka_ng.net._pending import NO_RESPONSE, InFlight, PendingResponse, expire
from aiokafka_ng.net._reading import read_until
from aiokafka_ng.net._reauth import Reauthentication
from aiokafka_ng.net.asyncio_stream import PlainAsyncioStream
from aiokafka_ng.net.clock import loop_clock, running_asyncio_loop
from aiokafka_ng.net.events import event_factory
from aiokafka_ng.protocol.connection import ClientConnection, NeedData, Poisoned, Response
from aiokafka_ng.protocol.handshake import ExpectedNode
from aiokafka_ng.protocol.limits import DEFAULT_LIMITS, DecodeLimits
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

__all__ = [
    "Connection",
    "ConnectionConfig",
    "ConnectionState",
    "ConnectionStatistics",
    "PendingResponse",
    "connect",
]

_log = logging.getLogger(__name__)

R = TypeVar("R", bound=ApiMessage)


class Connection:
    """One socket to one broker; see the module docstring for how requests flow.

    Obtain one with ``await tg.start(Connection.run, host, port, config)`` (the reader task
    then lives in ``tg``) or ``async with connect(host, port, config) as conn``.
    """

    def __init__(
        self, host: str, port: int, config: ConnectionConfig, stream: anyio.abc.ByteStream
    ) -> None:
        self.host = host
        self.port = port
        self.api_versions: dict[int, tuple[int, int]] = {}
        #: The cluster's finalized feature levels as this broker last told (KIP-584), and
        #: their epoch: a higher epoch is newer news, whichever broker sent it.
        self.features: dict[str, int] = {}
        self.features_epoch = -1
        self._config = config
        self._stream = stream
        #: made inside the loop (by _open): its clock, read on every request
        self._clock = loop_clock()
        self._new_event = event_factory()  # one per request: see net/events.py
        #: asyncio's loop, whose timers bound response waits (None on trio: cancel scopes)
        self._loop = running_asyncio_loop()
        self._where = f"{host}:{port}"
        self._state = ConnectionState.CONNECTING
        self._close_reason = ""
        self._proto: ClientConnection[InFlight[ApiMessage]] = ClientConnection(
            config.client_id,
            max_frame_size=config.max_response_bytes,
            decode_limits=config.decode_limits,
        )
        self._permits = anyio.Semaphore(
            config.max_in_flight, max_value=config.max_in_flight, fast_acquire=True
        )
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._reader_scope = anyio.CancelScope()
        self._reader_running = False
        self._reader_done = anyio.Event()
        self._stream_closed = False
        self._closed = anyio.Event()
        self._submitting = 0
        #: trio: abandoned requests by deadline, ``(deadline, correlation id, entry,
        #: limit)``, and the event that wakes their keeper (_expire_abandoned)
        self._abandoned: list[tuple[float, int, InFlight[ApiMessage], float]] = []
        self._abandoned_wake: anyio.Event | None = None
        self._requests_sent = 0
        self._responses_discarded = 0
        self._bytes_sent = 0
        self._reauth = None if config.sasl is None else Reauthentication(host, self._where, config)

    # -- lifecycle ---------------------------------------------------------------------------

    @classmethod
    async def run(
        cls,
        host: str,
        port: int,
        config: ConnectionConfig | None = None,
        *,
        task_status: anyio.abc.TaskStatus[Connection] = anyio.TASK_STATUS_IGNORED,
    ) -> None:
        """Connect, handshake, hand the connection to ``task_status``, then read until closed.

        Setup errors (KafkaConnectionError, SaslAuthenticationFailedError, ...) are raised
        before ``started()``, i.e. from ``tg.start()``. After that the task never raises: a
        dying connection fails its pending requests and the task returns.
        """
        conn = await cls._open(host, port, config or ConnectionConfig())
        await conn._serve(task_status=task_status)

    @classmethod
    async def _open(
        cls, host: str, port: int, config: ConnectionConfig, expected: ExpectedNode | None = None
    ) -> Connection:
        stream = await open_stream(host, port, config)
        conn = cls(host, port, config, stream)
        try:
            await conn._handshake(expected)
        except BaseException:
            conn._poison("connection setup failed")
            await conn._close_stream()
            raise
        conn._state = ConnectionState.READY
        return conn

    async def _serve(
        self, *, task_status: anyio.abc.TaskStatus[Connection] = anyio.TASK_STATUS_IGNORED
    ) -> None:
        self._reader_running = True
        task_status.started(self)
        try:
            with self._reader_scope:  # (_poison cancels it: the reader and the keeper)
                if self._loop is None:
                    async with anyio.create_task_group() as tg:
                        tg.start_soon(self._expire_abandoned)
                        await self._read_loop()
                        tg.cancel_scope.cancel()
                else:
                    await self._read_loop()
        finally:
            self._poison("connection closed")
            await self._close_stream()
            self._reader_running = False
            self._reader_done.set()

    async def aclose(self) -> None:
        """Close the socket, fail pending requests once, and wait for the reader to end.

        Idempotent; safe to call from any task, including while being cancelled.
        """
        self._poison("connection closed by the client")
        with anyio.CancelScope(shield=True):
            await self._close_stream()
            if self._reader_running:
                await self._reader_done.wait()

    async def wait_closed(self) -> None:
        """Return once the connection is closed (for whatever reason) and its socket too."""
        await self._closed.wait()

    @property
    def closed(self) -> bool:
        return self._state is ConnectionState.CLOSED

    @property
    def state(self) -> ConnectionState:
        return self._state

    @property
    def close_reason(self) -> str:
        """Why the connection closed ("" while open)."""
        return self._close_reason

    async def _close_stream(self) -> None:
        if not self._stream_closed:
            self._stream_closed = True
            with anyio.CancelScope(shield=True):
                # Forcefully: a TLS close_notify to a dead or hostile peer could block.
                await anyio.aclose_forcefully(self._stream)
        self._closed.set()

    def _poison(
        self,
        reason: str,
        *,
        cause: BaseException | None = None,
        error_type: type[KafkaError] = KafkaConnectionError,
        timed_out: tuple[InFlight[ApiMessage], KafkaError] | None = None,
    ) -> None:
        """Close the connection now; every pending request fails once with ``error_type``
        (the one ``timed_out`` names with its own error), oldest first."""
        if self._state is ConnectionState.CLOSED:
            return
        self._state = ConnectionState.CLOSED
        self._close_reason = reason
        level = logging.WARNING if error_type is not KafkaConnectionError else logging.DEBUG
        _log.log(level, "closing connection to %s: %s", self._where, reason)
        for request in self._proto.close():
            entry = request.context
            if timed_out is not None and entry is timed_out[0]:
                error = timed_out[1]
            else:
                # One instance per caller: a shared exception would collect every raiser's
                # traceback frames.
                error = error_type(
                    f"{self._where}: {entry.api_name} (correlation id {entry.correlation_id}) "
                    f"failed: {reason}"
                )
                error.__cause__ = cause
            self._settle(entry, error=error)
        self._reader_scope.cancel()

    def _settle(
        self,
        entry: InFlight[ApiMessage],
        *,
        response: ApiMessage | None = None,
        error: KafkaError | None = None,
    ) -> None:
        if response is not None:
            entry.response = response
        entry.error = error
        entry.settled = True
        if entry.abandoned and error is None:
            self._responses_discarded += 1
        if entry.holds_permit:
            self._permits.release()
        entry.done.set()
        timer = entry.timer
        if timer is not None:  # its deadline's timer (on_settled's, or an abandoned one's)
            entry.timer = None
            timer.cancel()
        callback = entry.on_settled
        if callback is not None:
            # PendingResponse.on_settled: acted on here, in wire order, with no task woken.
            entry.on_settled = None
            if error is None:
                callback(response, None)
            else:
                callback(None, error)

    def _on_poisoned(self, event: Poisoned) -> None:
        if event.mismatch:
            self._poison(event.reason, error_type=CorrelationIdMismatchError)
            return
        # Garbage or an answer over the limits: worth a warning (a broken or hostile
        # broker), unlike an ordinary disconnect. Pending requests fail retriably. (Logged
        # as text; the cause is already detached from the decoder's traceback, which holds
        # the answer's bytes.)
        _log.warning("undecodable frame from %s: %s", self._where, str(event.cause))
        self._poison(event.reason, cause=event.cause)

    # -- handshake ---------------------------------------------------------------------------

    async def _handshake(self, expected: ExpectedNode | None) -> None:
        versions, sasl_lifetime_ms = await _handshake.setup(
            self._setup_exchange, self._config, self.host, self._where, expected
        )
        self.api_versions = versions.api_versions
        self.features = versions.features
        self.features_epoch = versions.features_epoch
        if sasl_lifetime_ms is not None:
            assert self._reauth is not None  # made with the same config
            self._reauth.schedule(sasl_lifetime_ms)

    async def _setup_exchange(self, request: ApiRequest[R], version: int) -> R:
        """Setup-time request/response, before the reader exists: this task reads."""
        entry: InFlight[R] = InFlight(_handshake.api_name(type(request)), holds_permit=False)
        proto = self._proto
        # The handshake's answers are held to the default limits, whatever the client's.
        frame = proto.send_request(request, version, entry, limits=DEFAULT_LIMITS)
        entry.correlation_id = proto.last_correlation_id
        with translate_io_errors(f"{self._where}: {entry.api_name} during connection setup"):
            with anyio.fail_after(self._config.request_timeout_s):
                await self._stream.send(frame)
                self._count_sent(frame)
                # A poisoning settles this entry too, with its error.
                await read_until(
                    entry.done.is_set, proto, self._stream, self._settle, self._on_poisoned
                )
        if entry.error is not None:
            raise entry.error
        return entry.response

    async def _locked_exchange(self, request: ApiRequest[R], version: int) -> R:
        """One request as an in-flight entry without a permit; the caller holds the write
        lock. Returns the decoded response (delivered by the reader)."""
        self._raise_if_closed()
        entry: InFlight[R] = InFlight(_handshake.api_name(type(request)), holds_permit=False)
        frame = self._proto.send_request(request, version, entry)
        entry.correlation_id = self._proto.last_correlation_id
        await self._write_frame(frame, anyio.current_time() + self._config.request_timeout_s)
        await entry.done.wait()
        if entry.error is not None:
            raise entry.error
        return entry.response

    def version_for(self, request_type: type[ApiMessage]) -> int:
        """The highest version of ``request_type`` both we and the broker support.

        Raises UnsupportedVersionError naming the API when there is none.
        """
        return _handshake.common_version(request_type, self.api_versions, self._where)

    def check_version(self, request_type: type[ApiMessage], version: int) -> int:
        """``version`` of ``request_type`` if both we and the broker support it (a version
        the schemas still mark unstable included: negotiation never picks those, a caller
        may pin one); UnsupportedVersionError naming the API otherwise."""
        return _handshake.check_version(request_type, version, self.api_versions, self._where)

    # -- requests ----------------------------------------------------------------------------

    @overload
    async def send(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: Literal[True] = True,
        limits: DecodeLimits | None = None,
    ) -> R: ...
    @overload
    async def send(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: bool,
        limits: DecodeLimits | None = None,
    ) -> R | None: ...
    async def send(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a deadline per request, by contract)
        expect_response: bool = True,
        limits: DecodeLimits | None = None,
    ) -> R | None:
        """Send ``request`` and return its decoded response (``None`` without a response).

        Raises KafkaConnectionError (retriable) when the connection is or becomes closed,
        RequestTimeoutError (retriable) when ``timeout`` runs out, UnsupportedVersionError
        when no version is common to client and broker. ``limits`` replaces the
        connection's ``decode_limits`` for this answer (a caller that knows how much it
        asked for can hold the answer to that).
        """
        pending = await self.submit(
            request,
            version=version,
            timeout=timeout,
            expect_response=expect_response,
            limits=limits,
        )
        return await pending.wait()

    @overload
    async def submit(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: Literal[True] = True,
        limits: DecodeLimits | None = None,
    ) -> PendingResponse[R]: ...
    @overload
    async def submit(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109
        expect_response: bool,
        limits: DecodeLimits | None = None,
    ) -> PendingResponse[R | None]: ...
    async def submit(
        self,
        request: ApiRequest[R],
        *,
        version: int | None = None,
        timeout: float | None = None,  # noqa: ASYNC109 (a deadline per request, by contract)
        expect_response: bool = True,
        limits: DecodeLimits | None = None,
    ) -> PendingResponse[R | None]:
        """Write ``request`` and return once it is on the wire; ``await .wait()`` the answer.

        Two calls to ``submit`` made one after the other from one task are written in that
        order, which ``send`` from separate tasks cannot promise (task start order is up to
        the event loop; trio randomises it). The idempotent producer relies on this: its
        sequence numbers must reach the broker in order. ``timeout`` is one deadline for
        both halves. Errors as :meth:`send`.
        """
        # Counted from entry, so an idle closer (the pool) never closes a connection a
        # caller is about to use: waiting for a permit or the write lock is not idle.
        self._submitting += 1
        try:
            return await self._submit(request, version, timeout, expect_response, limits)
        finally:
            self._submitting -= 1

    async def _submit(
        self,
        request: ApiRequest[R],
        version: int | None,
        timeout: float | None,  # noqa: ASYNC109
        expect_response: bool,
        limits: DecodeLimits | None,
    ) -> PendingResponse[R | None]:
        request_type = type(request)
        if version is None:
            version = self.version_for(request_type)
        else:
            _handshake.check_version(request_type, version, self.api_versions, self._where)
        limit = self._config.request_timeout_s if timeout is None else timeout
        deadline = self._clock() + limit
        self._raise_if_closed()
        if self._reauth is not None and self._reauth.due():
            await self._reauth.run(
                self._locked_exchange, self.api_versions, self._write_lock, self._poison
            )
            _log.debug("re-authenticated to %s", self._where)
        if not expect_response:
            await self._write(request, version, deadline, None, None)
            return NO_RESPONSE

        try:
            # A free permit is taken without a cancel scope (the common case: the
            # scope's timer and bookkeeping cost more than the rest of the acquire).
            self._permits.acquire_nowait()
            acquired = True
        except anyio.WouldBlock:
            acquired = False
            with anyio.move_on_at(deadline):
                await self._permits.acquire()
                acquired = True
        if not acquired:
            raise RequestTimeoutError(
                f"{self._where}: no in-flight slot within {limit:g}s "
                f"({self._config.max_in_flight} requests outstanding)"
            )
        entry: InFlight[R] = InFlight(_handshake.api_name(request_type), self._new_event())
        try:
            await self._write(request, version, deadline, entry, limits)
        except BaseException:
            if entry.correlation_id >= 0 and not entry.settled:
                # Registered, then cancelled mid-write: the request is on the wire (the
                # write was shielded); nobody waits for its response.
                entry.abandoned = True
                self._abandon(entry, deadline, limit)
            raise
        finally:
            if entry.correlation_id < 0:  # never registered: the permit is still ours
                self._permits.release()
        return PendingResponse(entry, deadline, limit, self._timed_out, self._abandon, self._loop)

    def _abandon(self, entry: InFlight[ApiMessage], deadline: float, limit: float) -> None:
        """Keep the deadline of a written request nobody waits for any more (see
        "In-flight permits" in the module docstring): unanswered at ``deadline``, it times
        out as a waited-for one would, closing the connection."""
        if deadline <= self._clock():
            # Due already (a caller whose own deadline is the request's, cancelled at it):
            # time out now, before that caller goes on and writes its next request here.
            expire(entry, limit, self._timed_out)
            return
        loop = self._loop
        if loop is not None:
            entry.timer = loop.call_at(deadline, expire, entry, limit, self._timed_out)
            return
        abandoned = self._abandoned
        heapq.heappush(abandoned, (deadline, entry.correlation_id, entry, limit))
        wake = self._abandoned_wake
        if abandoned[0][2] is entry and wake is not None:
            wake.set()  # the keeper sleeps until a later deadline, or none

    async def _expire_abandoned(self) -> None:
        """trio: time out abandoned requests at their deadlines (asyncio arms loop timers
        instead). Runs beside the reader, in its scope, which the poisoning cancels."""
        abandoned = self._abandoned
        while True:
            while abandoned and abandoned[0][2].settled:  # answered (or poisoned) since
                heapq.heappop(abandoned)
            wake = self._abandoned_wake = anyio.Event()
            if not abandoned:
                await wake.wait()
                continue
            deadline, _, entry, limit = abandoned[0]
            with anyio.move_on_at(deadline):
                await wake.wait()  # one with an earlier deadline came meanwhile
                continue
            heapq.heappop(abandoned)
            expire(entry, limit, self._timed_out)

    def _timed_out(self, entry: InFlight[ApiMessage], limit: float) -> KafkaError:
        """A written request got no response in time: close (its late response could be taken
        for the next request's) and return the error its caller raises."""
        what = f"{entry.api_name} (correlation id {entry.correlation_id})"
        error = RequestTimeoutError(
            f"{self._where}: {what} got no response within {limit:g}s; connection closed"
        )
        self._poison(f"{what} timed out after {limit:g}s", timed_out=(entry, error))
        return error

    def _raise_if_closed(self) -> None:
        if self._state is ConnectionState.CLOSED:
            raise KafkaConnectionError(f"{self._where}: connection closed ({self._close_reason})")

    async def _write(
        self,
        request: ApiRequest[ApiMessage],
        version: int,
        deadline: float,
        entry: InFlight[ApiMessage] | None,
        limits: DecodeLimits | None,
    ) -> None:
        try:
            self._write_lock.acquire_nowait()  # free: no cancel scope (see _submit)
            acquired = True
        except anyio.WouldBlock:
            acquired = False
            with anyio.move_on_at(deadline):
                await self._write_lock.acquire()
                acquired = True
        if not acquired:
            raise RequestTimeoutError(f"{self._where}: could not write within the timeout")
        try:
            self._raise_if_closed()
            proto = self._proto
            if entry is None:
                frame = proto.send_oneway(request, version)
            else:
                frame = proto.send_request(request, version, entry, limits=limits)
                # From here on the permit belongs to the entry (see module docstring).
                entry.correlation_id = proto.last_correlation_id
            await self._write_frame(frame, deadline)
        finally:
            self._write_lock.release()

    async def _write_frame(self, frame: bytes, deadline: float) -> None:
        stream = self._stream
        if isinstance(stream, PlainAsyncioStream):
            # The transport takes the bytes at once, or buffers the rest: only a rest needs
            # the wait below, and only a wait needs its scope (most of a lone request's
            # write cost when entered for nothing).
            try:
                if stream.write_nowait(frame):
                    self._count_sent(frame)
                    return
            except IO_ERRORS as exc:
                self._poison(f"write failed: {describe(exc)}", cause=exc)
                raise connection_error(self._where, exc) from exc
            wait = stream.drain()
        else:
            wait = stream.send(frame)
        written = False
        # Shielded from the caller's cancellation (a frame is written whole or the
        # connection is poisoned), bounded by the request's own deadline: one scope.
        with anyio.CancelScope(shield=True, deadline=deadline):
            try:
                await wait
            except IO_ERRORS as exc:
                self._poison(f"write failed: {describe(exc)}", cause=exc)
                raise connection_error(self._where, exc) from exc
            written = True
        if not written:
            self._poison("write timed out; a partial frame may be on the wire")
            raise RequestTimeoutError(f"{self._where}: writing the request timed out")
        self._count_sent(frame)

    def _count_sent(self, frame: bytes) -> None:
        self._requests_sent += 1
        self._bytes_sent += len(frame)

    # -- reader ------------------------------------------------------------------------------

    async def _read_loop(self) -> None:
        try:
            stream = self._stream
            if isinstance(stream, PlainAsyncioStream):
                # Answers are acted on as the transport reads them (_received); this task
                # then only waits for the stream's end, which receive() still raises.
                for chunk in stream.deliver_to(self._received):
                    self._received(chunk)
            await read_until(
                lambda: self._state is ConnectionState.CLOSED,
                self._proto,
                self._stream,
                self._settle,
                self._on_poisoned,
            )
        except IO_ERRORS as exc:
            self._poison(describe(exc), cause=exc)
        except Exception as exc:
            # A bug in acting on an answer (a settlement's callback that raised): close the
            # connection, as _received does on asyncio's plain TCP stream, rather than let
            # it end the reader's task group -- the whole client's on a pool.
            self._reading_failed(exc)

    def _received(self, data: bytes) -> None:
        """Bytes read on asyncio's plain TCP stream, in its transport's callback
        (``PlainAsyncioStream.deliver_to``): what ``read_until`` does with a chunk, without
        a task woken for it. Must not raise: a bug here closes the connection (its requests
        fail) and is logged, as the transport would only say "fatal error"."""
        if self._state is ConnectionState.CLOSED:
            return
        proto = self._proto
        try:
            proto.receive_data(data)
            while not self.closed:  # (a settlement's callback may close it)
                event = proto.next_event()
                if isinstance(event, Response):
                    self._settle(event.request.context, response=event.response)
                elif isinstance(event, NeedData):
                    return
                else:
                    self._on_poisoned(event)
        except Exception as exc:
            self._reading_failed(exc)

    def _reading_failed(self, exc: Exception) -> None:
        """A bug while acting on bytes read: logged, and the connection closed (its
        requests fail)."""
        _log.exception("reading from %s failed", self._where)
        self._poison(f"reading failed: {exc!r}", cause=exc)

    # -- introspection -----------------------------------------------------------------------

    def statistics(self) -> ConnectionStatistics:
        proto = self._proto
        return ConnectionStatistics(
            in_flight=proto.in_flight,
            max_in_flight=self._config.max_in_flight,
            max_in_flight_seen=proto.max_in_flight_seen,
            permits_available=self._permits.value,
            tasks_waiting=self._permits.statistics().tasks_waiting,
            submitting=self._submitting,
            requests_sent=self._requests_sent,
            responses_received=proto.responses_received,
            # Abandoned by their caller, or answers to acks=0 requests (Tansu sends them).
            responses_discarded=self._responses_discarded + proto.responses_dropped,
            bytes_sent=self._bytes_sent,
            bytes_received=proto.bytes_received,
        )

    def __repr__(self) -> str:
        return (
            f"<Connection {self._where} {self._state.value} "
            f"in_flight={self._proto.in_flight}/{self._config.max_in_flight}>"
        )


@asynccontextmanager
async def connect(
    host: str,
    port: int,
    config: ConnectionConfig | None = None,
    *,
    expected: ExpectedNode | None = None,
) -> AsyncIterator[Connection]:
    """A connection whose reader runs in a task group private to this context manager.

    ``expected``: the cluster and node the address was learned for (KIP-1242); a broker
    that is not that node fails the setup with RebootstrapRequiredError."""
    conn = await Connection._open(host, port, config or ConnectionConfig(), expected)
    try:
        async with anyio.create_task_group() as tg:
            await tg.start(conn._serve)
            try:
                yield conn
            finally:
                await conn.aclose()
    except BaseExceptionGroup as group:
        # The reader never raises, so the group only carries the body's exception: unwrap
        # it so `connect` behaves like a plain context manager.
        if len(group.exceptions) == 1:
            exc = group.exceptions[0]
            raise exc from exc.__cause__
        raise
