"""SASL OAUTHBEARER (KIP-255, RFC 7628): bearer tokens, token providers, the client message.

A token provider is what the application gives us: anything that yields a bearer token and
when it expires. Accepted shapes (:func:`obtain_token` normalises them):

- a callable, sync or async, returning an :class:`OAuthBearerToken` or a ``str`` (a JWT's
  ``exp`` claim then gives the expiry, when it has one);
- aiokafka's ``AbstractTokenProvider`` shape: an object with ``async token() -> str`` and,
  optionally, ``extensions() -> dict[str, str]`` (SASL extensions, KIP-342).

Built-in providers, each caching its token and refreshing it at ~80% of its lifetime, as
Java's login refresh does: ``oidc.ClientCredentialsTokenProvider`` (OIDC client
credentials, KIP-768, the client authenticated by a secret or a signed assertion, KIP-1258)
and ``oidc.JwtBearerTokenProvider`` (the jwt-bearer grant, KIP-1139; assertions from
``assertion.JwtAssertion``), ``aws.MskIamTokenProvider`` (AWS MSK IAM) and
``azure.AzureImdsTokenProvider`` (Azure managed identity, for Event Hubs); and
:class:`UnsecuredTokenProvider` here (an unsigned JWS for brokers running Kafka's unsecured
validator: development and tests only).

The token is fetched before each authentication -- the first one and every re-authentication
(KIP-368, driven by the broker's ``session_lifetime_ms``; see ``connection.py``), so a
provider that caches must hand out a fresh token once the cached one is past most of its
lifetime; both built-ins do.

Secrets (the client secret and the token itself) are never in a repr, a log line or an error
message.
"""

from __future__ import annotations

import base64
import inspect
import json
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import anyio

from aiokafka_ng.errors import SaslAuthenticationFailedError

__all__ = [
    "OAuthBearerMechanism",
    "OAuthBearerToken",
    "TokenCache",
    "UnsecuredTokenProvider",
    "jwt_claims",
    "obtain_token",
]

# RFC 7628 section 3.1: key = 1*(ALPHA), value = *(VCHAR / SP / HTAB / CR / LF).
_EXTENSION_KEY = re.compile(r"[A-Za-z]+")
_EXTENSION_VALUE = re.compile(r"[\x21-\x7E \t\r\n]*")
# RFC 6750 b64token: what may follow "Bearer ".
_B64TOKEN = re.compile(r"[A-Za-z0-9\-._~+/]+=*")
_KVSEP = "\x01"


@dataclass(frozen=True, slots=True)
class OAuthBearerToken:
    """A bearer token and when it stops being valid.

    ``expires_at``: seconds since the epoch (``time.time()``), ``None`` when unknown.
    ``extensions``: SASL extensions (KIP-342) to send with this token, merged over the
    configured ones.
    """

    value: str = field(repr=False)
    expires_at: float | None = None
    extensions: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def from_jwt(cls, value: str, extensions: Mapping[str, str] | None = None) -> OAuthBearerToken:
        """The token with its expiry read from its ``exp`` claim (None if it has none)."""
        exp = (jwt_claims(value) or {}).get("exp")
        expires_at = float(exp) if isinstance(exp, int | float) else None
        return cls(value, expires_at, dict(extensions or {}))


def jwt_claims(token: str) -> dict[str, Any] | None:
    """The claims of a JWS compact token, unverified (the broker verifies); None if ``token``
    is not one (an opaque token is legal for OAUTHBEARER)."""
    parts = token.split(".")
    if len(parts) != 3:
        return None
    payload = parts[1] + "=" * (-len(parts[1]) % 4)
    try:
        claims = json.loads(base64.urlsafe_b64decode(payload))
    except (ValueError, UnicodeDecodeError):
        return None
    return claims if isinstance(claims, dict) else None


def _b64url(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).decode().rstrip("=")


async def obtain_token(provider: Any) -> OAuthBearerToken:
    """Ask ``provider`` (any shape in the module docstring) for a token.

    A provider that raises a :class:`~aiokafka_ng.errors.KafkaError` has it passed on as is;
    any other exception, or a result that is not a token, becomes a non-retriable
    :class:`SaslAuthenticationFailedError` naming the provider's type (never the token).
    """
    from aiokafka_ng.errors import KafkaError

    where = type(provider).__name__
    try:
        token_method = getattr(provider, "token", None)
        if callable(token_method):  # aiokafka's AbstractTokenProvider shape
            result = token_method()
            extras_method = getattr(provider, "extensions", None)
            extras = extras_method() if callable(extras_method) else {}
        elif callable(provider):
            result = provider()
            extras = {}
        else:
            raise SaslAuthenticationFailedError(
                f"SASL OAUTHBEARER: token provider {where} is neither callable nor has token()"
            )
        if inspect.isawaitable(result):
            result = await result
        if inspect.isawaitable(extras):
            extras = await extras
    except KafkaError:
        raise
    except Exception as exc:
        # The provider's own message may quote what it was given: keep only its type.
        raise SaslAuthenticationFailedError(
            f"SASL OAUTHBEARER: token provider {where} failed ({type(exc).__name__})"
        ) from exc
    if isinstance(result, str):
        result = OAuthBearerToken.from_jwt(result)
    if not isinstance(result, OAuthBearerToken):
        raise SaslAuthenticationFailedError(
            f"SASL OAUTHBEARER: token provider {where} returned {type(result).__name__}, "
            "not a str or OAuthBearerToken"
        )
    if not isinstance(extras, Mapping):
        raise SaslAuthenticationFailedError(
            f"SASL OAUTHBEARER: {where}.extensions() returned {type(extras).__name__}, not a dict"
        )
    if extras:
        merged = {**extras, **result.extensions}
        result = OAuthBearerToken(result.value, result.expires_at, merged)
    return result


def client_first_message(token: str, extensions: Mapping[str, str], authzid: str = "") -> bytes:
    """RFC 7628 section 3.1 initial client response, with Kafka's extensions (KIP-342):
    ``n,[a=authzid],^Aauth=Bearer TOKEN[^Akey=value...]^A^A``."""
    if not _B64TOKEN.fullmatch(token):
        raise SaslAuthenticationFailedError(
            "SASL OAUTHBEARER: the token is not a valid bearer token (RFC 6750 b64token)"
        )
    parts = [f"auth=Bearer {token}"]
    for key, value in extensions.items():
        # Kafka reserves "auth"; the broker refuses a malformed pair without saying which.
        if not _EXTENSION_KEY.fullmatch(key) or key == "auth":
            raise SaslAuthenticationFailedError(
                f"SASL OAUTHBEARER: extension name {key!r} must be letters only and not 'auth'"
            )
        if not _EXTENSION_VALUE.fullmatch(value):
            raise SaslAuthenticationFailedError(
                f"SASL OAUTHBEARER: extension {key!r} has characters RFC 7628 does not allow"
            )
        parts.append(f"{key}={value}")
    # "," and "=" in the authzid are escaped as in SCRAM (RFC 5801 saslname).
    gs2 = "n,a=" + authzid.replace("=", "=3D").replace(",", "=2C") + "," if authzid else "n,,"
    return (gs2 + _KVSEP + _KVSEP.join(parts) + _KVSEP + _KVSEP).encode()


class OAuthBearerMechanism:
    """Client side of OAUTHBEARER: one message with the token; the server answers empty on
    success. On failure the server first sends an error JSON (RFC 7628 section 3.2.2), to
    which the client must answer ``^A``; the server then fails the exchange. The JSON is kept
    in :attr:`server_error` for the error the connection raises."""

    __slots__ = ("_authzid", "_extensions", "_state", "_token", "server_error")

    def __init__(
        self, token: str, extensions: Mapping[str, str] | None = None, *, authzid: str = ""
    ) -> None:
        self._token = token
        self._extensions = dict(extensions or {})
        self._authzid = authzid
        self._state: Literal["initial", "sent", "failed", "complete"] = "initial"
        self.server_error: str | None = None

    @property
    def name(self) -> str:
        return "OAUTHBEARER"

    @property
    def complete(self) -> bool:
        return self._state == "complete"

    def start(self) -> bytes:
        if self._state != "initial":
            raise RuntimeError("OAUTHBEARER exchange already started")
        message = client_first_message(self._token, self._extensions, self._authzid)
        self._state = "sent"
        return message

    def step(self, challenge: bytes) -> bytes | None:
        if self._state != "sent":
            said = self.server_error or "after the end"
            raise SaslAuthenticationFailedError(f"SASL OAUTHBEARER: unexpected message ({said})")
        if not challenge:
            self._state = "complete"
            return None
        # Bounded: it ends up in an exception message and maybe a log line.
        self.server_error = challenge[:1024].decode("utf-8", "replace")
        self._state = "failed"
        return _KVSEP.encode()


class UnsecuredTokenProvider:
    """An unsigned JWS (``alg: none``) for brokers that run Kafka's
    ``OAuthBearerUnsecuredValidatorCallbackHandler`` -- development and tests only: anyone
    can mint one. Java's ``unsecuredLoginStringClaim_sub`` / ``unsecuredLoginLifetimeSeconds``
    JAAS options map here."""

    __slots__ = ("_claims", "_lifetime_s", "_scope", "_subject")

    def __init__(
        self,
        subject: str,
        *,
        lifetime_s: float = 3600.0,
        scope: str | None = None,
        claims: Mapping[str, Any] | None = None,
    ) -> None:
        if lifetime_s <= 0:
            raise ValueError("lifetime_s must be > 0")
        self._subject = subject
        self._lifetime_s = lifetime_s
        self._scope = scope
        self._claims = dict(claims or {})

    def __call__(self) -> OAuthBearerToken:
        now = time.time()
        claims: dict[str, Any] = {"iat": now, "exp": now + self._lifetime_s, "sub": self._subject}
        if self._scope:
            claims["scope"] = self._scope
        claims.update(self._claims)
        header = _b64url(json.dumps({"alg": "none"}).encode())
        value = f"{header}.{_b64url(json.dumps(claims).encode())}."
        return OAuthBearerToken(value, float(claims["exp"]))

    def __repr__(self) -> str:
        return f"UnsecuredTokenProvider(subject={self._subject!r}, lifetime_s={self._lifetime_s})"


def refresh_time(issued_at: float, expires_at: float, rng: random.Random) -> float:
    """When to refresh a token: 80% of its lifetime plus up to 5% jitter (Java's
    ``sasl.login.refresh.window.factor`` / ``.jitter`` defaults)."""
    return issued_at + (expires_at - issued_at) * (0.8 + 0.05 * rng.random())


class TokenCache:
    """A provider's one token: fetched when there is none or it is due for refresh (at
    :func:`refresh_time` from when it was asked for), one fetch at a time. One lock per
    async library: a provider may serve an asyncio and a trio client at once."""

    def __init__(self, rng: random.Random, clock: Callable[[], float] = time.time) -> None:
        self._rng = rng
        self._clock = clock
        self._token: OAuthBearerToken | None = None
        self._refresh_at = 0.0
        self._locks: dict[str, anyio.Lock] = {}

    async def get(self, fetch: Callable[[], Awaitable[OAuthBearerToken]]) -> OAuthBearerToken:
        """The cached token, or a new one from ``fetch`` when it is missing or due."""
        import sniffio

        lock = self._locks.setdefault(sniffio.current_async_library(), anyio.Lock())
        async with lock:
            if self._token is None or self._clock() >= self._refresh_at:
                issued = self._clock()
                self._token = await fetch()
                expires = self._token.expires_at or issued
                self._refresh_at = refresh_time(issued, expires, self._rng)
            return self._token

    def invalidate(self) -> None:
        """Drop the token: the next :meth:`get` fetches a new one."""
        self._token = None
