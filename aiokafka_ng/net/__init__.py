"""Network layer: one broker connection (TLS, SASL, versions, pipelining) and backoff.

Built on anyio, so it runs on asyncio and trio. Everything here raises
:mod:`aiokafka_ng.errors` types; anyio/OS/TLS errors are translated at one boundary
(:mod:`aiokafka_ng.net._errors`).
"""

from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.connection import (
    Connection,
    ConnectionConfig,
    ConnectionState,
    ConnectionStatistics,
    PendingResponse,
    connect,
)
from aiokafka_ng.net.sasl import SaslConfig

__all__ = [
    "Connection",
    "ConnectionConfig",
    "ConnectionState",
    "ConnectionStatistics",
    "ExponentialBackoff",
    "PendingResponse",
    "SaslConfig",
    "connect",
]
