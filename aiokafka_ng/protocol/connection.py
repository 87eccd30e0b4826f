"""The client side of one Kafka connection, sans-IO: bytes in, matched responses out.

Theory of operation
===================

:class:`ClientConnection` does no I/O and knows no clock. The driver (``net/connection.py``)
writes what :meth:`~ClientConnection.send_request` returns, hands every chunk it reads to
:meth:`~ClientConnection.receive_data`, and calls :meth:`~ClientConnection.next_event` until
it says :data:`NEED_DATA`. Timeouts, permits, sockets and TLS stay with the driver.

Correlation. ``send_request`` gives each request the next correlation id (wrapping at
2**31 - 1) and appends it to the in-flight queue; the driver
writes frames in the order it asked for them, so queue order is wire order. Kafka answers a
connection's requests in order, so every response must carry the correlation id of the
OLDEST in-flight request. Anything else (an out-of-order or unknown id, a response while
nothing is in flight) means no response can be matched to its request any more.

acks=0. A request sent with :meth:`~ClientConnection.send_oneway` (Produce acks=0) is not
queued: Kafka never answers it. Tansu answers it anyway; such an answer, recognised by its
id, is dropped (counted in ``responses_dropped``) rather than taken for a mismatch. Ids
older than the oldest awaited request are forgotten (answers come in order), and at most
``_UNANSWERED_IDS`` are kept for brokers that, like Kafka, never answer.

Poisoning. A correlation mismatch, a frame whose size prefix is negative or beyond
``max_frame_size`` (refused before a byte of it is buffered), or a frame that does not
decode (including one over its :class:`~aiokafka_ng.protocol.limits.DecodeLimits`) makes
``next_event`` return :class:`Poisoned`, from then on every time: the stream can no longer
be trusted. A response is decoded before its request leaves the queue, so the request a bad
frame was meant for is still pending when the driver calls :meth:`~ClientConnection.close`,
which hands back every request still in flight (oldest first) for the driver to fail.

Handshake. ApiVersions and SASL requests go through the same queue as any other request
(one correlation path). ApiVersions gets one protocol rule of its own: a broker that does
not know our ApiVersions version answers in the v0 format with error 35 and its own range,
so such an answer, or one that does not decode in the version asked, is read as v0 (see
:func:`decode_api_versions`).
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass
from typing import Final, Generic, TypeVar

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    FrameReader,
    decode_response,
    encode_request,
    peek_correlation_id,
)
from aiokafka_ng.protocol.limits import DEFAULT_LIMITS, DecodeLimits
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsResponse
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

__all__ = [
    "NEED_DATA",
    "ClientConnection",
    "InFlightRequest",
    "NeedData",
    "Poisoned",
    "Response",
    "decode_api_versions",
]

C = TypeVar("C")

_UNANSWERED_IDS = 1024  # acks=0 correlation ids remembered per connection
_MAX_CORRELATION_ID = 2**31 - 1
_UNSUPPORTED_VERSION = 35


@dataclass(slots=True, eq=False)
class InFlightRequest(Generic[C]):
    """A request on the wire whose response is awaited; ``context`` is the driver's own."""

    correlation_id: int
    response_type: type[ApiMessage]
    version: int
    limits: DecodeLimits | None  # None: the connection's decode limits
    context: C

    @property
    def api_name(self) -> str:
        return self.response_type.__name__.removesuffix("Response")


@dataclass(slots=True, eq=False)
class Response(Generic[C]):
    """The response to ``request`` (the oldest in-flight request), decoded."""

    request: InFlightRequest[C]
    response: ApiMessage


@dataclass(frozen=True, slots=True)
class Poisoned:
    """The connection can no longer be used; the driver closes it and fails what is pending.

    ``mismatch``: the cause is a correlation id that matched no request (else a frame that
    is malformed or over a limit, whose error is ``cause``: detached from the decoder's
    traceback, which holds the frame's bytes)."""

    reason: str
    mismatch: bool
    cause: ProtocolError | None = None


class NeedData:
    """Nothing more can happen until more bytes are received."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "NEED_DATA"


NEED_DATA: Final = NeedData()


def _detached(exc: ProtocolError) -> ProtocolError:
    """A copy of ``exc`` without traceback or chain, for callers' errors to point to.

    The original's traceback holds the decoder's frames and through them the answer's bytes
    (up to the frame cap): a retry loop keeping its last error would keep a hostile 90 MB
    answer alive across the next attempts (tests/net/test_hostile_broker.py peaked at
    +474..605 MB with the log record that kept the error; ~110-175 MB with the copy)."""
    return type(exc)(str(exc))


def decode_api_versions(frame: bytes, version: int) -> ApiVersionsResponse:
    """An ApiVersions response frame (no size prefix) read as Kafka's clients read it.

    A broker that does not know our ApiVersions version answers in the v0 format with error
    35 and its own range (ApiVersions response headers are always v0, so only the body
    differs); Java's ApiVersionsResponse.parse falls back the same way. A v0 body can happen
    to parse as a newer version, so error 35 is always re-read as v0, and so is a body that
    does not parse in ``version``."""
    try:
        _, response = decode_response(ApiVersionsResponse, version, frame, DEFAULT_LIMITS)
        fallback = response.error_code == _UNSUPPORTED_VERSION
    except ProtocolError:
        if version == 0:
            raise
        fallback = True
    if fallback and version > 0:
        _, response = decode_response(ApiVersionsResponse, 0, frame, DEFAULT_LIMITS)
    return response


class ClientConnection(Generic[C]):
    """Correlation, in-flight queue, acks=0 and poisoning of one connection (see above).

    ``C`` is whatever the driver attaches to each awaited request (``context``); it comes
    back in that request's :class:`Response` and from :meth:`close`."""

    __slots__ = (
        "_client_id",
        "_closed",
        "_decode_limits",
        "_frames",
        "_in_flight",
        "_max_frame_size",
        "_max_in_flight_seen",
        "_next_id",
        "_poisoned",
        "_unanswered",
        "bytes_received",
        "last_correlation_id",
        "responses_dropped",
        "responses_received",
    )

    def __init__(
        self,
        client_id: str | None = "aiokafka-ng",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        decode_limits: DecodeLimits = DEFAULT_LIMITS,
    ) -> None:
        self._client_id = client_id
        self._decode_limits = decode_limits
        self._max_frame_size = max_frame_size
        self._frames = FrameReader(max_frame_size)
        self._in_flight: deque[InFlightRequest[C]] = deque()
        self._unanswered: deque[int] = deque(maxlen=_UNANSWERED_IDS)
        self._next_id = 0
        self._poisoned: Poisoned | None = None
        self._closed = False
        self._max_in_flight_seen = 0
        #: The correlation id the latest :meth:`send_request` gave its request (-1: none).
        self.last_correlation_id = -1
        self.responses_received = 0  # matched to their request and decoded
        self.responses_dropped = 0  # answers to acks=0 requests (Tansu sends them)
        self.bytes_received = 0

    # -- sending -----------------------------------------------------------------------------

    def send_request(
        self,
        request: ApiRequest[ApiMessage],
        version: int,
        context: C,
        *,
        limits: DecodeLimits | None = None,
    ) -> bytes:
        """The frame to write for ``request``, whose response will come back as a
        :class:`Response` carrying ``context``. Frames must be written in call order.

        ``limits`` replaces the connection's decode limits for this response. Raises
        RuntimeError once closed or poisoned."""
        correlation_id = self._take_id()
        frame = encode_request(request, version, correlation_id, self._client_id)
        self.last_correlation_id = correlation_id
        in_flight = self._in_flight
        in_flight.append(
            InFlightRequest(
                correlation_id,
                request.RESPONSE_TYPE,
                version,
                limits,
                context,
            )
        )
        if len(in_flight) > self._max_in_flight_seen:
            self._max_in_flight_seen = len(in_flight)
        return frame

    def send_oneway(self, request: ApiMessage, version: int) -> bytes:
        """The frame for a request Kafka does not answer (Produce with acks=0).

        Its id is remembered only so that an answer to it (Tansu sends one) is dropped."""
        correlation_id = self._take_id()
        frame = encode_request(request, version, correlation_id, self._client_id)
        self.last_correlation_id = correlation_id
        self._unanswered.append(correlation_id)
        return frame

    def _take_id(self) -> int:
        if self._closed or self._poisoned is not None:
            raise RuntimeError("request on a closed connection")
        correlation_id = self._next_id
        self._next_id = 0 if correlation_id == _MAX_CORRELATION_ID else correlation_id + 1
        return correlation_id

    # -- receiving ---------------------------------------------------------------------------

    def receive_data(self, data: bytes) -> None:
        """Bytes read from the socket, in order (an empty chunk is ignored: end of stream is
        the driver's to notice, with its cause)."""
        self.bytes_received += len(data)
        self._frames.feed(data)

    def next_event(self) -> Response[C] | Poisoned | NeedData:
        """The next thing the received bytes say: a response, :data:`NEED_DATA`, or
        :class:`Poisoned` (returned again on every later call)."""
        if self._poisoned is not None:
            return self._poisoned
        while True:
            try:
                frame = self._frames.next_frame()
                if frame is None:
                    return NEED_DATA
                correlation_id = peek_correlation_id(frame)
            except ProtocolError as exc:
                return self._poison(f"undecodable frame from the broker: {exc}", exc)
            if self._unanswered and self._drop_unanswered(correlation_id):
                continue
            if not self._in_flight:
                return self._poison(
                    f"unsolicited response with correlation id {correlation_id}", None
                )
            head = self._in_flight[0]
            if correlation_id != head.correlation_id:
                return self._poison(
                    f"response correlation id {correlation_id} does not match the oldest "
                    f"in-flight request ({head.correlation_id})",
                    None,
                )
            # Decoded before the request leaves the queue: a bad frame poisons with the
            # request it was meant for still pending.
            try:
                if head.response_type is ApiVersionsResponse:
                    response: ApiMessage = decode_api_versions(frame, head.version)
                else:
                    response = decode_response(
                        head.response_type,
                        head.version,
                        frame,
                        head.limits or self._decode_limits,
                    )[1]
            except ProtocolError as exc:
                return self._poison(f"undecodable frame from the broker: {exc}", exc)
            del frame  # the frame may be large; nothing here needs it any more
            self._in_flight.popleft()
            self.responses_received += 1
            return Response(head, response)

    def _drop_unanswered(self, correlation_id: int) -> bool:
        """Whether ``correlation_id`` answers an acks=0 request (then it is dropped)."""
        unanswered = self._unanswered
        oldest = self._in_flight[0].correlation_id if self._in_flight else None
        # Ids we expected no answer for, sent before the oldest awaited request, can no
        # longer be answered (in-order responses): forget them.
        while (
            unanswered
            and unanswered[0] != correlation_id
            and (oldest is not None and unanswered[0] < oldest)
        ):
            unanswered.popleft()
        if unanswered and unanswered[0] == correlation_id:
            unanswered.popleft()
            self.responses_dropped += 1
            return True
        return False

    def _poison(self, reason: str, exc: ProtocolError | None) -> Poisoned:
        self._poisoned = Poisoned(reason, exc is None, None if exc is None else _detached(exc))
        return self._poisoned

    # -- closing and state -------------------------------------------------------------------

    def close(self) -> list[InFlightRequest[C]]:
        """Mark the connection closed and hand back every request still in flight, oldest
        first (each exactly once: a second call returns an empty list)."""
        self._closed = True
        pending = list(self._in_flight)
        self._in_flight.clear()
        self._unanswered.clear()
        # Bytes received and not yet returned (up to a frame cap's worth) are let go now,
        # not when the last reference to the connection goes.
        self._frames = FrameReader(self._max_frame_size)
        return pending

    @property
    def closed(self) -> bool:
        return self._closed or self._poisoned is not None

    @property
    def poisoned(self) -> Poisoned | None:
        return self._poisoned

    @property
    def in_flight(self) -> int:
        """Requests on the wire whose response has not arrived."""
        return len(self._in_flight)

    @property
    def max_in_flight_seen(self) -> int:
        return self._max_in_flight_seen

    def oldest(self) -> InFlightRequest[C] | None:
        """The request the next response must answer (None when nothing is in flight)."""
        return self._in_flight[0] if self._in_flight else None

    def buffered(self) -> int:
        """Bytes received and not yet returned as responses."""
        return self._frames.buffered()

    def __repr__(self) -> str:
        state = "poisoned" if self._poisoned else "closed" if self._closed else "open"
        return f"<ClientConnection {state} in_flight={len(self._in_flight)}>"
