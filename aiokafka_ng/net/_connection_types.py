"""Plain data of a connection: its settings, a statistics snapshot, its state."""

from __future__ import annotations

import enum
import ssl
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from aiokafka_ng.net.sasl import SaslConfig
from aiokafka_ng.protocol.framing import DEFAULT_MAX_FRAME_SIZE
from aiokafka_ng.protocol.limits import DEFAULT_LIMITS, DecodeLimits

__all__ = ["ConnectionConfig", "ConnectionState", "ConnectionStatistics"]


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
    # An async ``(host, port) -> anyio ByteStream`` opening the byte stream instead of TCP
    # (and TLS): a test's in-process cluster (``FakeKafka.transport``). None: TCP.
    transport: Callable[[str, int], Awaitable[Any]] | None = None

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
