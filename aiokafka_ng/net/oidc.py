"""OIDC token endpoints: the built-in OAUTHBEARER token providers.

``ClientCredentialsTokenProvider(url, client_id, client_secret, scope=...)`` POSTs
``grant_type=client_credentials`` to the token endpoint (RFC 6749 section 4.4, KIP-768) with
the client id and secret in HTTP Basic authentication, form-encoded first as RFC 6749
section 2.3.1 says (Java's ``sasl.oauthbearer.header.urlencode`` does the same when
enabled; IdPs accept both for plain ASCII ids). With ``client_assertion`` instead of a
secret (KIP-1258, ``private_key_jwt``) the client authenticates with a signed JWT in the
form: ``client_assertion_type=urn:ietf:params:oauth:client-assertion-type:jwt-bearer``,
``client_assertion``, ``grant_type=client_credentials``, ``client_id`` when given, and
``scope``, and no Authorization header (RFC 7523 section 2.2, as Java's
``ClientAssertionRequestFormatter`` sends it).

``JwtBearerTokenProvider(url, assertion, scope=...)`` is the jwt-bearer grant (KIP-1139,
RFC 7523 section 2.1): ``grant_type=urn:ietf:params:oauth:grant-type:jwt-bearer``, the
signed ``assertion`` and ``scope``, no client authentication (Java's
``JwtBearerRequestFormatter``). Assertions come from a callable, made fresh for every
request: :class:`~aiokafka_ng.net.assertion.JwtAssertion` signs them with the user's key.

For every grant the answer's ``access_token`` is the bearer token; its expiry comes from the
JWT's ``exp`` claim, else from ``expires_in``.

Caching. One token is shared by every connection using the provider and handed out until
~80% of its lifetime (plus jitter), then fetched again; concurrent callers wait for the one
fetch in progress rather than each asking the IdP (no storm when a client opens connections
to every broker at once).

Failures. The IdP refusing the client (HTTP 400/401/403: wrong secret, disabled client,
bad scope) is final: one request, then a non-retriable SaslAuthenticationFailedError with
the IdP's ``error``/``error_description``. Transport errors, HTTP 5xx and 429 are retried
with the shared :class:`~aiokafka_ng.net.backoff.ExponentialBackoff` (Java's
``sasl.login.retry.backoff.ms``/``.max.ms`` defaults, 100 ms to 10 s) until the waits would
pass ``retry_backoff_max_ms`` in total; then a retriable KafkaConnectionError.

HTTP is the standard library's urllib in a worker thread (no new dependency), without the
environment's proxy settings (the Java client ignores them too), answers capped at 1 MiB.
The client secret and the assertions are never in a repr, log line or error.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import ssl
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from typing import Any

import anyio
import anyio.to_thread

from aiokafka_ng.errors import KafkaConnectionError, SaslAuthenticationFailedError
from aiokafka_ng.net.backoff import ExponentialBackoff, RetryState, TryAgain, retry_attempts
from aiokafka_ng.net.oauth import OAuthBearerToken, TokenCache, jwt_claims

__all__ = ["ClientCredentialsTokenProvider", "JwtBearerTokenProvider"]

JWT_BEARER_GRANT = "urn:ietf:params:oauth:grant-type:jwt-bearer"
CLIENT_ASSERTION_TYPE = "urn:ietf:params:oauth:client-assertion-type:jwt-bearer"

_log = logging.getLogger(__name__)
_MAX_ANSWER = 1024 * 1024
_FINAL_STATUSES = frozenset({400, 401, 403})


class _TokenEndpointProvider:
    """What every grant shares: the cached token, the request with its retries, the answer.
    A grant says what it sends (:meth:`_request`) and who asks (:meth:`_who`)."""

    def __init__(
        self,
        token_endpoint_url: str,
        *,
        scope: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 10000,
        rng: random.Random | None = None,
    ) -> None:
        scheme = urllib.parse.urlsplit(token_endpoint_url).scheme
        if scheme not in ("http", "https"):
            raise ValueError("the token endpoint URL must be http:// or https://")
        self.token_endpoint_url = token_endpoint_url
        self.scope = scope
        self._timeout_s = timeout_s
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._retry_budget_ms = retry_backoff_max_ms
        self._rng = rng or random.Random()
        handlers: list[urllib.request.BaseHandler] = [urllib.request.ProxyHandler({})]
        if ssl_context is not None:
            handlers.append(urllib.request.HTTPSHandler(context=ssl_context))
        self._opener = urllib.request.build_opener(*handlers)
        self._cache = TokenCache(self._rng)
        #: HTTP requests made (successful or not); for tests and diagnostics.
        self.requests = 0

    def _request(self) -> tuple[dict[str, str], dict[str, str]]:
        """The form and the extra headers of one token request (worker thread)."""
        raise NotImplementedError

    def _who(self) -> str:
        raise NotImplementedError

    async def __call__(self) -> OAuthBearerToken:
        return await self._cache.get(self._fetch)

    def invalidate(self) -> None:
        """Drop the cached token: the next call fetches a new one."""
        self._cache.invalidate()

    async def _fetch(self) -> OAuthBearerToken:
        async def attempt() -> OAuthBearerToken:
            try:
                status, body = await anyio.to_thread.run_sync(self._post, abandon_on_cancel=True)
            except (OSError, urllib.error.URLError) as exc:
                raise TryAgain(f"{type(exc).__name__}: {_reason(exc)}") from exc
            if status == 200:
                return self._parse(body)
            if status in _FINAL_STATUSES:
                raise SaslAuthenticationFailedError(
                    f"token endpoint {self.token_endpoint_url} refused "
                    f"{self._who()}: HTTP {status} {_oauth_error(body)}"
                )
            raise TryAgain(f"HTTP {status} {_oauth_error(body)}")

        def log_retry(error: TryAgain, pause_s: float) -> None:
            _log.warning(
                "token endpoint %s: %s; retrying in %.0f ms",
                self.token_endpoint_url,
                error.problem,
                pause_s * 1000,
            )

        retry = RetryState(self._backoff)
        try:
            return await retry_attempts(
                attempt, retry, max_wait_s=self._retry_budget_ms / 1000, on_retry=log_retry
            )
        except TryAgain as exc:
            raise KafkaConnectionError(
                f"token endpoint {self.token_endpoint_url}: no token after "
                f"{retry.failures} attempts ({exc.problem})"
            ) from None

    def _post(self) -> tuple[int, bytes]:
        """One token request (runs in a worker thread)."""
        self.requests += 1
        try:
            form, headers = self._request()
        except (OSError, ValueError) as exc:
            # An assertion that cannot be made (its key or file unreadable) is final: no
            # retry makes the file appear. The message names files, never their content.
            raise SaslAuthenticationFailedError(
                f"token endpoint {self.token_endpoint_url}: no assertion for {self._who()} "
                f"({type(exc).__name__}: {str(exc)[:300]})"
            ) from None
        if self.scope and self.scope.strip():
            form["scope"] = self.scope.strip()
        request = urllib.request.Request(
            self.token_endpoint_url,
            data=urllib.parse.urlencode(form).encode(),
            headers={
                **headers,
                "Content-Type": "application/x-www-form-urlencoded",
                "Accept": "application/json",
                "Cache-Control": "no-cache",
            },
            method="POST",
        )
        try:
            with self._opener.open(request, timeout=self._timeout_s) as answer:
                return int(answer.status), answer.read(_MAX_ANSWER)
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), exc.read(_MAX_ANSWER)

    def _parse(self, body: bytes) -> OAuthBearerToken:
        where = f"token endpoint {self.token_endpoint_url}"
        try:
            answer = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise SaslAuthenticationFailedError(f"{where}: the answer is not JSON") from None
        value = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(value, str) or not value:
            raise SaslAuthenticationFailedError(f"{where}: the answer has no access_token")
        exp = (jwt_claims(value) or {}).get("exp")
        expires_in = answer.get("expires_in")
        if isinstance(exp, int | float):
            expires_at = float(exp)
        elif isinstance(expires_in, int | float | str) and str(expires_in).isdigit():
            expires_at = time.time() + float(expires_in)
        else:
            raise SaslAuthenticationFailedError(
                f"{where}: the token has no exp claim and the answer no expires_in"
            )
        return OAuthBearerToken(value, expires_at)


class ClientCredentialsTokenProvider(_TokenEndpointProvider):
    """OAUTHBEARER tokens from an OIDC token endpoint (client credentials grant), the client
    authenticated by its secret (HTTP Basic) or by a signed assertion (KIP-1258)."""

    def __init__(
        self,
        token_endpoint_url: str,
        client_id: str | None,
        client_secret: str | None = None,
        *,
        client_assertion: Callable[[], str] | None = None,
        scope: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 10000,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            token_endpoint_url,
            scope=scope,
            ssl_context=ssl_context,
            timeout_s=timeout_s,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            rng=rng,
        )
        if client_assertion is not None:
            if client_secret:
                raise ValueError("a client secret or a client assertion, not both")
        elif not client_id or not client_secret:
            raise ValueError("client id and client secret (or a client assertion) are required")
        self.client_id = client_id
        self._secret = client_secret
        self._assertion = client_assertion

    def __repr__(self) -> str:
        how = ", client_assertion=..." if self._assertion is not None else ""
        return (
            f"ClientCredentialsTokenProvider({self.token_endpoint_url!r}, "
            f"client_id={self.client_id!r}{how}, scope={self.scope!r})"
        )

    def _who(self) -> str:
        return f"client {self.client_id!r}" if self.client_id else "the client assertion"

    def _request(self) -> tuple[dict[str, str], dict[str, str]]:
        if self._assertion is not None:
            form = {
                "client_assertion_type": CLIENT_ASSERTION_TYPE,
                "client_assertion": self._assertion(),
                "grant_type": "client_credentials",
            }
            if self.client_id:
                form["client_id"] = self.client_id
            return form, {}
        quote = urllib.parse.quote_plus
        secret = self._secret or ""
        basic = base64.b64encode(f"{quote(self.client_id or '')}:{quote(secret)}".encode())
        return {"grant_type": "client_credentials"}, {"Authorization": "Basic " + basic.decode()}


class JwtBearerTokenProvider(_TokenEndpointProvider):
    """OAUTHBEARER tokens from an OIDC token endpoint for a signed assertion (the jwt-bearer
    grant, KIP-1139): ``assertion()`` makes a fresh one per request."""

    def __init__(
        self,
        token_endpoint_url: str,
        assertion: Callable[[], str],
        *,
        scope: str | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 10000,
        rng: random.Random | None = None,
    ) -> None:
        super().__init__(
            token_endpoint_url,
            scope=scope,
            ssl_context=ssl_context,
            timeout_s=timeout_s,
            retry_backoff_ms=retry_backoff_ms,
            retry_backoff_max_ms=retry_backoff_max_ms,
            rng=rng,
        )
        self._assertion = assertion

    def __repr__(self) -> str:
        return f"JwtBearerTokenProvider({self.token_endpoint_url!r}, scope={self.scope!r})"

    def _who(self) -> str:
        return "the jwt-bearer assertion"

    def _request(self) -> tuple[dict[str, str], dict[str, str]]:
        return {"grant_type": JWT_BEARER_GRANT, "assertion": self._assertion()}, {}


def _reason(exc: BaseException) -> str:
    reason = getattr(exc, "reason", None)
    return str(reason if reason is not None else exc)[:200]


def _oauth_error(body: bytes) -> str:
    """RFC 6749 section 5.2 ``error`` and ``error_description``, bounded; never the body
    otherwise (it could hold anything)."""
    try:
        answer: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return "(no OAuth error in the answer)"
    if not isinstance(answer, dict):
        return "(no OAuth error in the answer)"
    error = str(answer.get("error", ""))[:100]
    description = str(answer.get("error_description", ""))[:300]
    return f"{error}: {description}" if description else error or "(no OAuth error)"
