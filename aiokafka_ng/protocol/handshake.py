"""Connection setup as pure steps: ApiVersions negotiation and SASL (KIP-152, KIP-368).

Theory of operation
-------------------
Each exchange is a generator that yields ``(request, version)`` for the driver to send and
receives the decoded response through ``send()``; its return value (``StopIteration.value``)
is the result. It does no I/O, so a test runs one by feeding responses, and the driver runs
it through the same :class:`~aiokafka_ng.protocol.connection.ClientConnection` as every other
request (one correlation path):

* :func:`negotiate_api_versions` -- ApiVersions in our newest stable version; a broker that
  does not know it answers UNSUPPORTED_VERSION in the v0 format with its own range (read as
  such by :func:`~aiokafka_ng.protocol.connection.decode_api_versions`), and we retry once
  in the newest version it named, or v0. From v5 (KIP-1242) the request names the cluster
  and node the connection is meant for, and a broker that is not that node answers
  REBOOTSTRAP_REQUIRED (raised as such: the caller's metadata is stale).
* :func:`sasl_authenticate` -- SaslHandshake v1 naming the mechanism, then SaslAuthenticate
  rounds carrying the mechanism's messages until it is complete; returns the session
  lifetime the broker gave (0: none), after which the driver re-authenticates (KIP-368).
  Used for the first login and for re-authentication alike.

Version choice (:func:`common_version`, :func:`check_version`) lives here too: it is what
the negotiation's answer is for.
"""

from __future__ import annotations

from collections.abc import Generator, Mapping
from dataclasses import dataclass
from typing import Protocol, TypeVar

from aiokafka_ng.protocol.errors import (
    RebootstrapRequiredError,
    UnsupportedVersionError,
    error_for_code,
)
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

__all__ = [
    "BrokerVersions",
    "ExpectedNode",
    "SaslSteps",
    "Steps",
    "api_name",
    "check_version",
    "common_version",
    "negotiate_api_versions",
    "sasl_authenticate",
]

T = TypeVar("T")
M = TypeVar("M", bound=ApiMessage)

#: One exchange: yields (request, version), is sent each decoded response, returns ``T``.
Steps = Generator[tuple[ApiRequest[ApiMessage], int], ApiMessage, T]

_UNSUPPORTED_VERSION = 35
_REBOOTSTRAP_REQUIRED = 129


class SaslSteps(Protocol):
    """What the exchange needs of a SASL mechanism (``aiokafka_ng.net.sasl`` has them)."""

    @property
    def name(self) -> str: ...

    def start(self) -> bytes: ...

    def step(self, challenge: bytes) -> bytes | None: ...


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


@dataclass(frozen=True, slots=True)
class BrokerVersions:
    """What a broker's ApiVersions answer says: its range per API key, and the cluster's
    finalized feature levels (KIP-584; e.g. ``transaction.version``) with their epoch
    (-1 when the broker sent none: before v3, or a broker without features)."""

    api_versions: dict[int, tuple[int, int]]
    features: dict[str, int]
    features_epoch: int = -1


def _expect(response: ApiMessage, cls: type[M]) -> M:
    if not isinstance(response, cls):  # a driver bug, not the broker's: it decoded the type
        raise TypeError(f"expected a {cls.__name__}, got {type(response).__name__}")
    return response


@dataclass(frozen=True, slots=True)
class ExpectedNode:
    """Which broker a connection is meant to reach (KIP-1242): the cluster id and node id of
    the metadata its address came from. ApiVersions v5 carries them; a broker that is not
    that node of that cluster (the address now belongs to another node or cluster) answers
    REBOOTSTRAP_REQUIRED instead of serving requests meant for someone else."""

    cluster_id: str
    node_id: int


def negotiate_api_versions(
    where: str, software_version: str, expected: ExpectedNode | None = None
) -> Steps[BrokerVersions]:
    """ApiVersions in our newest version, falling back once as the broker tells us.

    ``software_version`` goes to the broker (v3+) with the name ``aiokafka-ng``;
    ``expected`` (v5+), the node the connection is meant for: a broker that is another
    raises :class:`~aiokafka_ng.errors.RebootstrapRequiredError`."""
    version = ApiVersionsRequest.MAX_STABLE_VERSION
    for attempt in range(2):
        request = ApiVersionsRequest(
            # v3+: the broker validates these against [a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?
            client_software_name="aiokafka-ng",
            client_software_version=software_version,
            # v5+ (older versions do not write them): both or neither, as the KIP asks.
            cluster_id=None if expected is None else expected.cluster_id,
            node_id=-1 if expected is None else expected.node_id,
        )
        response = _expect((yield request, version), ApiVersionsResponse)
        if response.error_code == _UNSUPPORTED_VERSION and attempt == 0 and version > 0:
            theirs = {k.api_key: k.max_version for k in response.api_keys}
            # Retry in the newest version the broker named, or v0 if it named none.
            version = max(0, min(theirs.get(ApiVersionsRequest.API_KEY, 0), version - 1))
            continue
        if response.error_code == _REBOOTSTRAP_REQUIRED and expected is not None:
            raise RebootstrapRequiredError(
                f"{where} is not node {expected.node_id} of cluster {expected.cluster_id} "
                "(KIP-1242): the metadata that named this address is stale"
            )
        if response.error_code:
            raise error_for_code(response.error_code)(f"{where}: ApiVersions v{version} failed")
        return BrokerVersions(
            {k.api_key: (k.min_version, k.max_version) for k in response.api_keys},
            {f.name: f.max_version_level for f in response.finalized_features},
            response.finalized_features_epoch,
        )
    raise AssertionError("unreachable: the second attempt returns or raises")


def sasl_authenticate(
    mechanism: SaslSteps, api_versions: Mapping[int, tuple[int, int]], where: str
) -> Steps[int]:
    """SaslHandshake v1 + SaslAuthenticate rounds until ``mechanism`` is complete.

    Returns the broker's ``session_lifetime_ms`` (0: the session does not expire;
    SaslAuthenticate v0 has no such field)."""
    handshake_version = common_version(SaslHandshakeRequest, api_versions, where)
    if handshake_version < 1:
        # v0 sends raw SASL tokens outside Kafka framing (before KIP-152); not supported.
        raise UnsupportedVersionError(
            f"{where}: SASL needs SaslHandshake v1 (KIP-152); the broker offers only v0"
        )
    request = SaslHandshakeRequest(mechanism=mechanism.name)
    handshake = _expect((yield request, handshake_version), SaslHandshakeResponse)
    if handshake.error_code:
        raise error_for_code(handshake.error_code)(
            f"{where}: SASL mechanism {mechanism.name} refused; "
            f"the broker enables {', '.join(handshake.mechanisms) or 'none'}"
        )
    version = common_version(SaslAuthenticateRequest, api_versions, where)
    token: bytes | None = mechanism.start()
    lifetime_ms = 0
    while token is not None:
        auth = SaslAuthenticateRequest(auth_bytes=token)
        response = _expect((yield auth, version), SaslAuthenticateResponse)
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
