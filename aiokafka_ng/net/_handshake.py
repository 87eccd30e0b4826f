"""Connection setup exchanges, run: ApiVersions negotiation and SASL authentication.

The exchanges themselves are pure steps in :mod:`aiokafka_ng.protocol.handshake`; this
module runs them over an ``exchange`` callable (one request out, its decoded response back,
through the connection's one correlation path) and adds what the protocol layer must not:
logging (the SASL PLAIN in clear text warning) and the package's version. Used before a
connection is handed out, and for re-authentication (KIP-368). Kept apart from
:mod:`aiokafka_ng.net.connection` so that module is only about pipelining.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Mapping
from typing import Protocol, TypeVar

from aiokafka_ng.net._connection_types import ConnectionConfig
from aiokafka_ng.net.sasl import SaslMechanism
from aiokafka_ng.protocol import handshake
from aiokafka_ng.protocol.handshake import (
    BrokerVersions,
    ExpectedNode,
    Steps,
    api_name,
    check_version,
    common_version,
)
from aiokafka_ng.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

__all__ = [
    "BrokerVersions",
    "Exchange",
    "api_name",
    "authenticate",
    "check_version",
    "common_version",
    "negotiate_api_versions",
    "setup",
]

R = TypeVar("R", bound=ApiMessage)
T = TypeVar("T")


class Exchange(Protocol):
    """One request out, its decoded response back."""

    async def __call__(self, request: ApiRequest[R], version: int, /) -> R: ...


_log = logging.getLogger(__name__)

# Listeners ("host:port") already warned about SASL PLAIN in clear text, for the whole
# process: the warning is about a listener's configuration, so it is said once per listener,
# not at every (re)connection or by every client. Bounded by the number of brokers.
_PLAIN_IN_CLEAR_WARNED: set[str] = set()


def _warn_plain_in_clear(where: str) -> None:
    if where in _PLAIN_IN_CLEAR_WARNED:
        return
    _PLAIN_IN_CLEAR_WARNED.add(where)
    # Never the credentials themselves: this line goes to the same logs an attacker may read.
    _log.warning(
        "SASL PLAIN to %s over a plaintext connection: the user name and password are sent "
        "in clear text; use TLS (security_protocol=SASL_SSL) or a SCRAM mechanism",
        where,
    )


def _software_version() -> str:
    # Read from the already imported package root rather than importing it: the root may
    # import the client layers, and an import edge from net up to it would break layering.
    root = sys.modules.get("aiokafka_ng")
    return str(getattr(root, "__version__", "unknown"))


async def _run(steps: Steps[T], exchange: Exchange, *, plain_in_clear: str = "") -> T:
    """Drive ``steps`` over ``exchange``; its return value, or what it raised.

    ``plain_in_clear``: the listener to warn about before the first SaslAuthenticate (whose
    PLAIN message is the password itself), if any."""
    try:
        request, version = next(steps)
        while True:
            if plain_in_clear and isinstance(request, SaslAuthenticateRequest):
                _warn_plain_in_clear(plain_in_clear)
            response = await exchange(request, version)
            request, version = steps.send(response)
    except StopIteration as done:
        result: T = done.value
        return result
    finally:
        steps.close()


async def negotiate_api_versions(
    exchange: Exchange, where: str, expected: ExpectedNode | None = None
) -> BrokerVersions:
    """ApiVersions in our newest version, falling back once as the broker tells us;
    ``expected``: the node the connection is meant for (KIP-1242)."""
    steps = handshake.negotiate_api_versions(where, _software_version(), expected)
    return await _run(steps, exchange)


async def authenticate(
    exchange: Exchange,
    mechanism: SaslMechanism,
    api_versions: Mapping[int, tuple[int, int]],
    where: str,
    *,
    tls: bool,
) -> int:
    """SaslHandshake v1 + SaslAuthenticate rounds until ``mechanism`` is complete.

    ``tls``: whether the connection is encrypted; PLAIN without it logs a warning, once per
    listener (PLAIN's one message is the password itself). Returns the broker's
    ``session_lifetime_ms`` (0: the session does not expire)."""
    steps = handshake.sasl_authenticate(mechanism, api_versions, where)
    plain_in_clear = where if mechanism.name == "PLAIN" and not tls else ""
    return await _run(steps, exchange, plain_in_clear=plain_in_clear)


async def setup(
    exchange: Exchange,
    config: ConnectionConfig,
    host: str,
    where: str,
    expected: ExpectedNode | None = None,
) -> tuple[BrokerVersions, int | None]:
    """A new connection's handshake: ApiVersions, then SASL when ``config`` asks for it.

    Returns the broker's versions and the SASL session's lifetime in ms (None without SASL;
    0: the session does not expire), for re-authentication."""
    versions = await negotiate_api_versions(exchange, where, expected)
    if config.sasl is None:
        return versions, None
    mechanism = await config.sasl.create_mechanism(host)
    tls = config.ssl_context is not None
    lifetime_ms = await authenticate(exchange, mechanism, versions.api_versions, where, tls=tls)
    return versions, lifetime_ms
