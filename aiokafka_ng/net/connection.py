"""One Kafka broker connection: TLS, SASL, version negotiation and pipelined requests.

Theory of operation
===================

Setup. ``Connection.run`` (for ``tg.start``) and :func:`connect` (standalone) open the
TCP/TLS stream within ``connect_timeout_s``, then handshake with plain request/response
round trips before any caller can send: ApiVersions in the newest version we know (a broker
that does not know that version answers UNSUPPORTED_VERSION in the v0 format together with
its own range, so we decode that as v0 and retry once in a version it supports), then, when
SASL is configured, SaslHandshake v1 + SaslAuthenticate (KIP-152); those exchanges live in
``_handshake.py``. Only then does the owner get the connection and the reader task start.

In-flight permits. A semaphore of exactly ``max_in_flight`` permits bounds the requests on
the wire. ``send()`` takes a permit BEFORE writing; from the moment its request is
registered the permit belongs to that in-flight entry, not to the calling task, and it is
released exactly once when the entry is settled: by its response, or by the connection
dying. A caller cancelled while waiting for its response releases nothing: its request is
still on the wire and still occupies a slot in the broker's queue, so the reader releases
the permit when the response arrives and discards the response. Requests that expect no
response (Produce acks=0) take no permit: nothing would ever give it back. The permits and
the write lock are taken without a trip through the event loop when free (anyio's
``fast_acquire``): each such trip delayed every request by a loop turn -- 208 -> 132 us from
``submit()`` to the frame written, measured at 40k msg/s -- while a free permit needs none
(the write itself is still a cancellation point).

Correlation. Under one write lock a request gets the next correlation id, is appended to the
in-flight deque and its frame is written, so deque order is wire order. Kafka answers a
connection's requests in order, so every response must carry the correlation id of the
OLDEST entry. Anything else (an out-of-order or unknown id, a response while nothing is in
flight) means we can no longer tell which response belongs to which request.
One exception: a request sent with ``expect_response=False`` (Produce acks=0) gets no
answer from Kafka, but Tansu answers it anyway; such an answer, recognised by its id, is
dropped rather than taken for a mismatch.

Poisoning. ``_poison()`` is synchronous and idempotent: it marks the connection closed,
settles every in-flight entry with its own retriable error instance (so each caller sees
the failure exactly once), which releases their permits, and cancels the reader, whose
``finally`` closes the socket. Causes: a correlation mismatch, an undecodable frame, an I/O
error, a write that could not finish (a partial frame corrupts the stream), a request
timeout (its late response could be taken for the next request's), and ``aclose()``.
Writes are shielded from cancellation and bounded by the request's deadline instead, so a
frame is either written whole or the connection is poisoned; a caller cancelled mid-write
gets its cancellation at its next checkpoint, with its request already in flight.

Re-authentication (KIP-368). A broker with ``connections.max.reauth.ms`` (or a credential
that expires, e.g. an OAUTHBEARER token) gives each SASL session a lifetime in its
SaslAuthenticate answer and closes a connection used after it. Like the Java client we
re-authenticate at 85-95% of that lifetime (the random spread keeps a client's connections
from all doing it at once), lazily: the first ``submit()`` after that moment runs it before
its own request. The token is fetched first; then, under the write lock so no other frame
can get between them, SaslHandshake and SaslAuthenticate go out as ordinary in-flight entries
(without permits: a permit-holding task may be queued on the write lock). Requests already
on the wire are not disturbed: the broker answers them in order before reading the
handshake. A failed re-authentication closes the connection (the broker would) and its
error reaches the caller that triggered it; everyone else sees a retriable closed
connection.

Timeouts. ``send(timeout=...)`` (default ``request_timeout_s``) is one deadline for the whole
call: waiting for a permit, for the write lock, writing, and the response. Running out
before the frame is written raises RequestTimeoutError and leaves the connection alone
(nothing reached the wire); running out afterwards also closes the connection.
"""

from __future__ import annotations

import enum
import logging
import random
import ssl
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Generic, Literal, TypeVar, overload

import anyio
import anyio.abc

from aiokafka_ng.errors import (
    CorrelationIdMismatchError,
    KafkaConnectionError,
    KafkaError,
    RequestTimeoutError,
)
from aiokafka_ng.net import _handshake
from aiokafka_ng.net._errors import IO_ERRORS, connection_error, describe, translate_io_errors
from aiokafka_ng.net.sasl import SaslConfig
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameReader,
    decode_response,
    encode_request,
    peek_correlation_id,
)
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
T_co = TypeVar("T_co", covariant=True)

_UNANSWERED_IDS = 1024  # acks=0 correlation ids remembered per connection

_READ_CHUNK = 256 * 1024
_MAX_CORRELATION_ID = 2**31 - 1


@dataclass(frozen=True, slots=True)
class ConnectionConfig:
    """Per-connection settings (the ``net`` slice of the client configuration)."""

    client_id: str | None = "aiokafka-ng"
    # max.in.flight.requests.per.connection: the exact number of semaphore permits.
    max_in_flight: int = 5
    request_timeout_s: float = 30.0
    connect_timeout_s: float = 10.0
    ssl_context: ssl.SSLContext | None = None
    sasl: SaslConfig | None = None
    # What one answer may make us allocate. A larger frame is refused at its size prefix,
    # before a byte of it is buffered; the clients derive it from their own size settings
    # (ClientConfig.max_response_bytes). decode_limits bounds the structs one frame may
    # decode to (a frame-sized answer of small structs costs 15-40x its size in objects).
    max_response_bytes: int = DEFAULT_MAX_FRAME_SIZE
    decode_limits: DecodeLimits = DEFAULT_LIMITS

    def __post_init__(self) -> None:
        if self.max_in_flight < 1:
            raise ValueError("max_in_flight must be >= 1")
        if self.max_response_bytes < 1024:
            raise ValueError("max_response_bytes must be >= 1024")
        if self.request_timeout_s <= 0 or self.connect_timeout_s <= 0:
            raise ValueError("timeouts must be > 0")


@dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A snapshot of one connection's counters."""

    in_flight: int  # requests on the wire whose response has not arrived
    max_in_flight: int  # configured permits
    max_in_flight_seen: int
    permits_available: int
    tasks_waiting: int  # send() calls waiting for a permit
    submitting: int  # submit() calls entered and not yet on the wire (or failed)
    requests_sent: int
    responses_received: int
    responses_discarded: int  # arrived after their caller had been cancelled
    bytes_sent: int
    bytes_received: int


class ConnectionState(enum.Enum):
    CONNECTING = "connecting"
    READY = "ready"
    CLOSED = "closed"


@dataclass(slots=True, eq=False)
class _InFlight(Generic[T_co]):
    """One request on the wire; it owns one permit until settled."""

    api_name: str
    response_type: type[T_co]
    version: int
    correlation_id: int = -1  # -1 until registered (then the permit is the entry's)
    done: anyio.Event = field(default_factory=anyio.Event)
    response: T_co = field(init=False)  # set when settled without error
    error: KafkaError | None = None
    abandoned: bool = False  # the caller stopped waiting; the response is discarded
    limits: DecodeLimits | None = None  # None: the connection's decode_limits
    holds_permit: bool = True  # False for re-authentication's requests (module docstring)


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
        self._where = f"{host}:{port}"
        self._state = ConnectionState.CONNECTING
        self._close_reason = ""
        self._frames = FrameReader(config.max_response_bytes)
        self._permits = anyio.Semaphore(
            config.max_in_flight, max_value=config.max_in_flight, fast_acquire=True
        )
        self._write_lock = anyio.Lock(fast_acquire=True)
        self._in_flight: deque[_InFlight[ApiMessage]] = deque()
        # Correlation ids of requests sent without expecting a response (Produce acks=0).
        # Kafka never answers them; Tansu does. An answer to one of these ids is dropped
        # instead of poisoning the connection; ids older than the oldest answered request
        # are forgotten (answers come in order), and the deque is bounded for brokers that,
        # like Kafka, never answer.
        self._unanswered: deque[int] = deque(maxlen=_UNANSWERED_IDS)
        self._next_correlation_id = 0
        self._reader_scope = anyio.CancelScope()
        self._reader_running = False
        self._reader_done = anyio.Event()
        self._stream_closed = False
        self._closed = anyio.Event()
        self._max_in_flight_seen = 0
        self._submitting = 0
        self._requests_sent = 0
        self._responses_received = 0
        self._responses_discarded = 0
        self._bytes_sent = 0
        self._bytes_received = 0
        # anyio clock time at which the SASL session should be renewed (None: never/now busy)
        self._reauth_at: float | None = None

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
    async def _open(cls, host: str, port: int, config: ConnectionConfig) -> Connection:
        with translate_io_errors(f"connecting to {host}:{port}"):
            with anyio.fail_after(config.connect_timeout_s):
                stream: anyio.abc.ByteStream
                if config.ssl_context is None:
                    stream = await anyio.connect_tcp(host, port)
                else:
                    stream = await anyio.connect_tcp(
                        host,
                        port,
                        ssl_context=config.ssl_context,
                        tls_hostname=host,
                        # Brokers may close without a TLS close_notify; treat that as EOF.
                        tls_standard_compatible=False,
                    )
        conn = cls(host, port, config, stream)
        try:
            await conn._handshake()
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
            with self._reader_scope:
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
    ) -> None:
        """Close the connection now; every pending request fails once with ``error_type``."""
        if self._state is ConnectionState.CLOSED:
            return
        self._state = ConnectionState.CLOSED
        self._close_reason = reason
        level = logging.WARNING if error_type is not KafkaConnectionError else logging.DEBUG
        _log.log(level, "closing connection to %s: %s", self._where, reason)
        while self._in_flight:
            entry = self._in_flight.popleft()
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
        entry: _InFlight[ApiMessage],
        *,
        response: ApiMessage | None = None,
        error: KafkaError | None = None,
    ) -> None:
        if response is not None:
            entry.response = response
        entry.error = error
        if entry.abandoned and error is None:
            self._responses_discarded += 1
        if entry.holds_permit:
            self._permits.release()
        entry.done.set()

    # -- handshake ---------------------------------------------------------------------------

    async def _handshake(self) -> None:
        try:
            versions = await _handshake.negotiate_api_versions(self._roundtrip, self._where)
            self.api_versions = versions.api_versions
            self.features = versions.features
            self.features_epoch = versions.features_epoch
            if self._config.sasl is not None:
                mechanism = await self._config.sasl.create_mechanism(self.host)
                lifetime_ms = await _handshake.authenticate(
                    self._setup_exchange,
                    mechanism,
                    self.api_versions,
                    self._where,
                    tls=self._config.ssl_context is not None,
                )
                self._schedule_reauth(lifetime_ms)
        except ProtocolError as exc:
            raise KafkaConnectionError(
                f"{self._where}: undecodable response during connection setup: {exc}"
            ) from _detached(exc)

    async def _roundtrip(self, request: ApiMessage, version: int) -> bytes:
        """Setup-time request/response, before the reader exists; returns the raw frame."""
        correlation_id = self._take_correlation_id()
        frame = encode_request(request, version, correlation_id, self._config.client_id)
        name = _handshake.api_name(type(request))
        with translate_io_errors(f"{self._where}: {name} during connection setup"):
            with anyio.fail_after(self._config.request_timeout_s):
                await self._stream.send(frame)
                self._count_sent(frame)
                reply = await self._read_frame()
        if (got := peek_correlation_id(reply)) != correlation_id:
            raise CorrelationIdMismatchError(
                f"{self._where}: {name} response has correlation id {got}, not {correlation_id}"
            )
        self._responses_received += 1
        return reply

    async def _setup_exchange(self, request: ApiRequest[R], version: int) -> R:
        frame = await self._roundtrip(request, version)
        return decode_response(request.RESPONSE_TYPE, version, frame)[1]

    def _schedule_reauth(self, lifetime_ms: int) -> None:
        if lifetime_ms > 0:
            # Java's SaslClientAuthenticator: 85% of the lifetime plus up to 10% jitter.
            share = 0.85 + 0.10 * random.random()
            self._reauth_at = anyio.current_time() + lifetime_ms / 1000 * share

    async def _reauthenticate(self) -> None:
        """KIP-368 re-authentication on this live connection (see the module docstring)."""
        sasl = self._config.sasl
        assert sasl is not None  # only scheduled after a SASL login
        self._reauth_at = None  # this task does it; others go on meanwhile
        try:
            mechanism = await sasl.create_mechanism(self.host)
        except Exception as exc:
            self._poison(f"re-authentication failed: {exc}", cause=exc)
            raise
        except BaseException:  # cancelled while getting the token: the next caller retries
            self._reauth_at = anyio.current_time()
            raise
        try:
            # Shielded: an exchange cut in half leaves the broker mid-authentication.
            with anyio.CancelScope(shield=True), anyio.fail_after(self._config.request_timeout_s):
                async with self._write_lock:
                    lifetime_ms = await _handshake.authenticate(
                        self._locked_exchange,
                        mechanism,
                        self.api_versions,
                        self._where,
                        tls=self._config.ssl_context is not None,
                    )
        except TimeoutError as exc:
            self._poison("re-authentication timed out", cause=exc)
            raise RequestTimeoutError(f"{self._where}: re-authentication timed out") from None
        except Exception as exc:
            self._poison(f"re-authentication failed: {exc}", cause=exc)
            raise
        _log.debug("re-authenticated to %s", self._where)
        self._schedule_reauth(lifetime_ms)

    async def _locked_exchange(self, request: ApiRequest[R], version: int) -> R:
        """One request as an in-flight entry without a permit; the caller holds the write
        lock. Returns the decoded response."""
        self._raise_if_closed()
        entry = _InFlight(
            _handshake.api_name(type(request)),
            request.RESPONSE_TYPE,
            version,
            holds_permit=False,
        )
        entry.correlation_id = self._take_correlation_id()
        frame = encode_request(request, version, entry.correlation_id, self._config.client_id)
        self._in_flight.append(entry)
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
        deadline = anyio.current_time() + limit
        self._raise_if_closed()
        if self._reauth_at is not None and anyio.current_time() >= self._reauth_at:
            await self._reauthenticate()
        if not expect_response:
            await self._write(request, version, deadline, None)
            return _NO_RESPONSE

        acquired = False
        with anyio.move_on_at(deadline):
            await self._permits.acquire()
            acquired = True
        if not acquired:
            raise RequestTimeoutError(
                f"{self._where}: no in-flight slot within {limit:g}s "
                f"({self._config.max_in_flight} requests outstanding)"
            )
        entry = _InFlight(
            _handshake.api_name(request_type),
            request.RESPONSE_TYPE,
            version,
            limits=limits,
        )
        try:
            await self._write(request, version, deadline, entry)
        except BaseException:
            if entry.correlation_id >= 0:
                # Registered, then cancelled mid-write: the request is (or will be
                # poisoned) on the wire; nobody waits for its response.
                entry.abandoned = True
            raise
        finally:
            if entry.correlation_id < 0:  # never registered: the permit is still ours
                self._permits.release()
        return PendingResponse(self, entry, deadline, limit)

    def _raise_if_closed(self) -> None:
        if self._state is ConnectionState.CLOSED:
            raise KafkaConnectionError(f"{self._where}: connection closed ({self._close_reason})")

    def _take_correlation_id(self) -> int:
        correlation_id = self._next_correlation_id
        self._next_correlation_id = (
            0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        )
        return correlation_id

    async def _write(
        self,
        request: ApiMessage,
        version: int,
        deadline: float,
        entry: _InFlight[ApiMessage] | None,
    ) -> None:
        acquired = False
        with anyio.move_on_at(deadline):
            await self._write_lock.acquire()
            acquired = True
        if not acquired:
            raise RequestTimeoutError(f"{self._where}: could not write within the timeout")
        try:
            self._raise_if_closed()
            correlation_id = self._take_correlation_id()
            frame = encode_request(request, version, correlation_id, self._config.client_id)
            if entry is not None:
                # From here on the permit belongs to the entry (see module docstring).
                entry.correlation_id = correlation_id
                self._in_flight.append(entry)
                self._max_in_flight_seen = max(self._max_in_flight_seen, len(self._in_flight))
            else:
                self._unanswered.append(correlation_id)
            await self._write_frame(frame, deadline)
        finally:
            self._write_lock.release()

    async def _write_frame(self, frame: bytes, deadline: float) -> None:
        written = False
        with anyio.CancelScope(shield=True):
            with anyio.move_on_at(deadline):
                try:
                    await self._stream.send(frame)
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

    async def _read_frame(self) -> bytes:
        while (frame := self._frames.next_frame()) is None:
            data = await self._stream.receive(_READ_CHUNK)
            self._bytes_received += len(data)
            self._frames.feed(data)
        return frame

    async def _read_loop(self) -> None:
        try:
            while self._state is not ConnectionState.CLOSED:
                self._dispatch(await self._read_frame())
        except IO_ERRORS as exc:
            self._poison(describe(exc), cause=exc)
        except ProtocolError as exc:
            # Garbage or an answer over the limits: worth a warning (a broken or hostile
            # broker), unlike an ordinary disconnect. Pending requests fail retriably.
            # (Logged as text: a log handler keeping the record must not keep the error,
            # whose traceback holds the answer's bytes.)
            _log.warning("undecodable frame from %s: %s", self._where, str(exc))
            self._poison(f"undecodable frame from the broker: {exc}", cause=_detached(exc))

    def _dispatch(self, frame: bytes) -> None:
        correlation_id = peek_correlation_id(frame)
        unanswered = self._unanswered
        if unanswered:
            oldest = self._in_flight[0].correlation_id if self._in_flight else None
            # Ids we expected no answer for, sent before the oldest awaited request, can
            # no longer be answered (in-order responses): forget them.
            while (
                unanswered
                and unanswered[0] != correlation_id
                and (oldest is not None and unanswered[0] < oldest)
            ):
                unanswered.popleft()
            if unanswered and unanswered[0] == correlation_id:
                unanswered.popleft()
                self._responses_discarded += 1
                return
        if not self._in_flight:
            self._poison(
                f"unsolicited response with correlation id {correlation_id}",
                error_type=CorrelationIdMismatchError,
            )
            return
        entry = self._in_flight[0]
        if correlation_id != entry.correlation_id:
            self._poison(
                f"response correlation id {correlation_id} does not match the oldest "
                f"in-flight request ({entry.correlation_id})",
                error_type=CorrelationIdMismatchError,
            )
            return
        # Decode before popping: a ProtocolError poisons with this entry still pending.
        _, response = decode_response(
            entry.response_type, entry.version, frame, entry.limits or self._config.decode_limits
        )
        self._in_flight.popleft()
        self._responses_received += 1
        self._settle(entry, response=response)

    # -- introspection -----------------------------------------------------------------------

    def statistics(self) -> ConnectionStatistics:
        return ConnectionStatistics(
            in_flight=len(self._in_flight),
            max_in_flight=self._config.max_in_flight,
            max_in_flight_seen=self._max_in_flight_seen,
            permits_available=self._permits.value,
            tasks_waiting=self._permits.statistics().tasks_waiting,
            submitting=self._submitting,
            requests_sent=self._requests_sent,
            responses_received=self._responses_received,
            responses_discarded=self._responses_discarded,
            bytes_sent=self._bytes_sent,
            bytes_received=self._bytes_received,
        )

    def __repr__(self) -> str:
        return (
            f"<Connection {self._where} {self._state.value} "
            f"in_flight={len(self._in_flight)}/{self._config.max_in_flight}>"
        )


def _detached(exc: ProtocolError) -> ProtocolError:
    """A copy of ``exc`` without traceback or chain, for callers' errors to point to.

    The original's traceback holds the decoder's frames and through them the answer's bytes
    (up to ``max_response_bytes``): a retry loop keeping its last error would keep a
    hostile 90 MB answer alive across the next attempts (with the log record that kept the
    error too, tests/net/test_hostile_broker.py peaked at +474..605 MB; now ~110-175 MB,
    the frame being received and joined)."""
    return type(exc)(str(exc))


class PendingResponse(Generic[T_co]):
    """A request already written to its connection; :meth:`wait` returns its response."""

    __slots__ = ("_conn", "_deadline", "_entry", "_limit")

    def __init__(
        self, conn: Connection, entry: _InFlight[T_co], deadline: float, limit: float
    ) -> None:
        self._conn = conn
        self._entry = entry
        self._deadline = deadline
        self._limit = limit

    async def wait(self) -> T_co:
        """The decoded response (``None`` for a request that expects none).

        A caller cancelled here leaves the request on the wire with its permit: the reader
        releases it and discards the response when it arrives (see the module docstring).
        """
        entry = self._entry
        try:
            with anyio.move_on_at(self._deadline):
                await entry.done.wait()
        finally:
            if not entry.done.is_set():
                entry.abandoned = True
        if not entry.done.is_set():
            self._conn._poison(
                f"{entry.api_name} (correlation id {entry.correlation_id}) "
                f"timed out after {self._limit:g}s",
            )
            raise RequestTimeoutError(
                f"{self._conn._where}: {entry.api_name} (correlation id "
                f"{entry.correlation_id}) got no response within {self._limit:g}s; "
                "connection closed"
            )
        if entry.error is not None:
            raise entry.error
        return entry.response


class _NoResponse(PendingResponse[None]):
    """What ``submit(expect_response=False)`` returns: nothing to wait for (acks=0)."""

    __slots__ = ()

    def __init__(self) -> None:
        pass

    async def wait(self) -> None:
        return None


_NO_RESPONSE = _NoResponse()


@asynccontextmanager
async def connect(
    host: str, port: int, config: ConnectionConfig | None = None
) -> AsyncIterator[Connection]:
    """A connection whose reader runs in a task group private to this context manager."""
    conn = await Connection._open(host, port, config or ConnectionConfig())
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
