"""Connection setup exchanges: ApiVersions negotiation and SASL authentication (KIP-152).

These run before a connection is handed out, as plain request/response round trips (the
``roundtrip`` callable writes one request and returns its raw response frame). They are kept
apart from :mod:`aiokafka_ng.net.connection` so that module is only about pipelining.
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aiokafka_ng.errors import UnsupportedVersionError
from aiokafka_ng.net.sasl import SaslMechanism
from aiokafka_ng.protocol.errors import ProtocolError, error_for_code
from aiokafka_ng.protocol.framing import decode_response
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokafka_ng.protocol.messages.sasl_authenticate import (
    SaslAuthenticateRequest,
    SaslAuthenticateResponse,
)
from aiokafka_ng.protocol.messages.sasl_handshake import (
    SaslHandshakeRequest,
    SaslHandshakeResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

RoundTrip = Callable[[ApiMessage, int], Awaitable[bytes]]
R = TypeVar("R", bound=ApiMessage)


class Exchange(Protocol):
    """One request out, its decoded response back."""

    async def __call__(self, request: ApiRequest[R], version: int, /) -> R: ...


_UNSUPPORTED_VERSION = 35

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


def api_name(request_type: type[ApiMessage]) -> str:
    return request_type.__name__.removesuffix("Request")


def common_version(
    request_type: type[ApiMessage], api_versions: Mapping[int, tuple[int, int]], where: str
) -> int:
    """Highest version of ``request_type`` that we and the broker both support."""
    name = api_name(request_type)
    theirs = api_versions.get(request_type.API_KEY)
    if theirs is None:
        raise UnsupportedVersionError(
            f"broker {where} does not support {name} (API key {request_type.API_KEY})"
        )
    low = max(request_type.MIN_VERSION, theirs[0])
    # Unstable versions (latestVersionUnstable) may still change; never pick them.
    high = min(request_type.MAX_STABLE_VERSION, theirs[1])
    if low > high:
        raise UnsupportedVersionError(
            f"no common version of {name}: client supports "
            f"v{request_type.MIN_VERSION}-v{request_type.MAX_STABLE_VERSION}, "
            f"broker {where} v{theirs[0]}-v{theirs[1]}"
        )
    return high


def check_version(
    request_type: type[ApiMessage],
    version: int,
    api_versions: Mapping[int, tuple[int, int]],
    where: str,
) -> int:
    """``version`` if both sides support it, else UnsupportedVersionError naming the API."""
    theirs = api_versions.get(request_type.API_KEY, (0, -1))
    if (
        not max(request_type.MIN_VERSION, theirs[0])
        <= version
        <= min(request_type.MAX_VERSION, theirs[1])
    ):
        raise UnsupportedVersionError(
            f"{api_name(request_type)} v{version} is not supported by both the client "
            f"(v{request_type.MIN_VERSION}-v{request_type.MAX_VERSION}) and broker "
            f"{where} (v{theirs[0]}-v{theirs[1]})"
        )
    return version


def _software_version() -> str:
    # Read from the already imported package root rather than importing it: the root may
    # import the client layers, and an import edge from net up to it would break layering.
    root = sys.modules.get("aiokafka_ng")
    return str(getattr(root, "__version__", "unknown"))


@dataclass(frozen=True, slots=True)
class BrokerVersions:
    """What a broker's ApiVersions answer says: its range per API key, and the cluster's
    finalized feature levels (KIP-584; e.g. ``transaction.version``) with their epoch
    (-1 when the broker sent none: before v3, or a broker without features)."""

    api_versions: dict[int, tuple[int, int]]
    features: dict[str, int]
    features_epoch: int = -1


async def negotiate_api_versions(roundtrip: RoundTrip, where: str) -> BrokerVersions:
    """ApiVersions in our newest version, falling back once as the broker tells us."""
    version = ApiVersionsRequest.MAX_STABLE_VERSION
    for attempt in range(2):
        request = ApiVersionsRequest(
            # v3+: the broker validates these against [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
            client_software_name="aiokafka-ng",
            client_software_version=_software_version(),
        )
        frame = await roundtrip(request, version)
        try:
            _, response = decode_response(ApiVersionsResponse, version, frame)
            fallback = response.error_code == _UNSUPPORTED_VERSION
        except ProtocolError:
            if version == 0:
                raise
            fallback = True
        if fallback and version > 0:
            # A broker that does not know our ApiVersions version answers in the v0 format
            # with error 35 and its own range (ApiVersions response headers are always v0,
            # so only the body differs); Java's ApiVersionsResponse.parse falls back the
            # same way. A v0 body can happen to parse as a newer version, so error 35 is
            # always re-read as v0.
            _, response = decode_response(ApiVersionsResponse, 0, frame)
        if response.error_code == _UNSUPPORTED_VERSION and attempt == 0 and version > 0:
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            # Retry in the newest version the broker named, or v0 if it named none.
            version = max(0, min(theirs.get(ApiVersionsRequest.API_KEY, 0), version - 1))
            continue
        if response.error_code:
            raise error_for_code(response.error_code)(f"{where}: ApiVersions v{version} failed")
        return BrokerVersions(
            {k.api_key: (k.min_version, k.max_version) for k in response.api_keys},
            {f.name: f.max_version_level for f in response.finalized_features},
            response.finalized_features_epoch,
        )
    raise AssertionError("unreachable: the second attempt returns or raises")


async def authenticate(
    exchange: Exchange,
    mechanism: SaslMechanism,
    api_versions: Mapping[int, tuple[int, int]],
    where: str,
    *,
    tls: bool,
) -> int:
    """SaslHandshake v1 + SaslAuthenticate rounds until ``mechanism`` is complete.

    ``exchange`` sends one request and returns its decoded response. Used for the first
    authentication and for re-authentication (KIP-368) alike. ``tls``: whether the
    connection is encrypted; PLAIN without it logs a warning, once per listener (PLAIN's one
    message is the password itself). Returns the broker's ``session_lifetime_ms`` (0: the
    session does not expire; SaslAuthenticate v0 has no such field)."""
    handshake_version = common_version(SaslHandshakeRequest, api_versions, where)
    if handshake_version < 1:
        # v0 sends raw SASL tokens outside Kafka framing (before KIP-152); not supported.
        raise UnsupportedVersionError(
            f"{where}: SASL needs SaslHandshake v1 (KIP-152); the broker offers only v0"
        )
    handshake: SaslHandshakeResponse = await exchange(
        SaslHandshakeRequest(mechanism=mechanism.name), handshake_version
    )
    if handshake.error_code:
        raise error_for_code(handshake.error_code)(
            f"{where}: SASL mechanism {mechanism.name} refused; "
            f"the broker enables {', '.join(handshake.mechanisms) or 'none'}"
        )
    version = common_version(SaslAuthenticateRequest, api_versions, where)
    if mechanism.name == "PLAIN" and not tls:
        _warn_plain_in_clear(where)
    token: bytes | None = mechanism.start()
    lifetime_ms = 0
    while token is not None:
        response: SaslAuthenticateResponse = await exchange(
            SaslAuthenticateRequest(auth_bytes=token), version
        )
        if response.error_code:
            # Typically SASL_AUTHENTICATION_FAILED (58): not retriable, so the caller
            # gives up at once instead of hammering the broker. OAUTHBEARER's error JSON
            # (RFC 7628 3.2.2: status, scope, openid-configuration) came in the round before.
            server_error = getattr(mechanism, "server_error", None)
            said = f" (server said {server_error})" if server_error else ""
            raise error_for_code(response.error_code)(
                f"{where}: SASL {mechanism.name} authentication failed: "
                f"{response.error_message or 'no reason given'}{said}"
            )
        lifetime_ms = max(0, response.session_lifetime_ms)
        token = mechanism.step(response.auth_bytes)
    return lifetime_ms
