"""Azure managed identity sign-in: Entra ID tokens from the instance metadata service (IMDS)
for Event Hubs' Kafka endpoint.

One configuration line:
``sasl_oauth_token_provider=AzureImdsTokenProvider("https://NAMESPACE.servicebus.windows.net")``.

The request is IMDS's managed identity token request: ``GET
http://169.254.169.254/metadata/identity/oauth2/token?api-version=2018-02-01&resource=...``
with the header ``Metadata: true`` (IMDS refuses a request without it, which keeps a
server-side request forgery from reading tokens), plus ``client_id=...`` to pick a
user-assigned identity (or ``object_id`` / ``msi_res_id``). The answer's ``access_token`` is
the bearer token and ``expires_on`` (seconds since the epoch, as a string) its expiry.

IMDS answers 404 while an identity is not assigned yet and 429/5xx when busy: those are
retried with backoff (Microsoft's guidance); 400 (no such identity, bad resource) is final.
HTTP is urllib in a worker thread, never through a proxy (the address is link-local). The
token is never in a repr, log line or error.
"""

from __future__ import annotations

import json
import random
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

import anyio
import anyio.to_thread

from aiokafka_ng.errors import KafkaConnectionError, SaslAuthenticationFailedError
from aiokafka_ng.net.backoff import ExponentialBackoff, RetryState, TryAgain, retry_attempts
from aiokafka_ng.net.oauth import OAuthBearerToken, TokenCache

__all__ = ["IMDS_TOKEN_URL", "AzureImdsTokenProvider"]

IMDS_TOKEN_URL = "http://169.254.169.254/metadata/identity/oauth2/token"
API_VERSION = "2018-02-01"
_RETRIED = frozenset({404, 410, 429, 500, 502, 503, 504})
_MAX_ANSWER = 1024 * 1024


class AzureImdsTokenProvider:
    """OAUTHBEARER tokens for ``resource`` from the machine's managed identity (the
    system-assigned one, or the user-assigned one named by ``client_id``, ``object_id`` or
    ``msi_res_id``)."""

    def __init__(
        self,
        resource: str,
        *,
        client_id: str | None = None,
        object_id: str | None = None,
        msi_res_id: str | None = None,
        endpoint: str = IMDS_TOKEN_URL,
        timeout_s: float = 5.0,
        retry_backoff_ms: float = 100,
        retry_backoff_max_ms: float = 10000,
        rng: random.Random | None = None,
    ) -> None:
        if not resource:
            raise ValueError("the resource (e.g. https://NAMESPACE.servicebus.windows.net)")
        ids = [v for v in (client_id, object_id, msi_res_id) if v]
        if len(ids) > 1:
            raise ValueError("at most one of client_id, object_id and msi_res_id")
        self.resource = resource
        self.client_id = client_id
        self.object_id = object_id
        self.msi_res_id = msi_res_id
        self.endpoint = endpoint
        self._timeout_s = timeout_s
        self._backoff = ExponentialBackoff(retry_backoff_ms, retry_backoff_max_ms)
        self._retry_budget_ms = retry_backoff_max_ms
        self._rng = rng or random.Random()
        self._opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
        self._cache = TokenCache(self._rng)
        #: HTTP requests made; for tests and diagnostics.
        self.requests = 0

    def __repr__(self) -> str:
        return f"AzureImdsTokenProvider({self.resource!r}, client_id={self.client_id!r})"

    def url(self) -> str:
        """The token request's URL (the query IMDS reads)."""
        ids = {"client_id": self.client_id, "object_id": self.object_id}
        ids["msi_res_id"] = self.msi_res_id
        query = {"api-version": API_VERSION, "resource": self.resource}
        query.update({name: value for name, value in ids.items() if value})
        return f"{self.endpoint}?{urllib.parse.urlencode(query)}"

    async def __call__(self) -> OAuthBearerToken:
        return await self._cache.get(self._fetch)

    def invalidate(self) -> None:
        """Drop the cached token: the next call asks IMDS again."""
        self._cache.invalidate()

    async def _fetch(self) -> OAuthBearerToken:
        async def attempt() -> OAuthBearerToken:
            try:
                status, body = await anyio.to_thread.run_sync(self._get, abandon_on_cancel=True)
            except (OSError, urllib.error.URLError) as exc:
                status, body = 0, str(getattr(exc, "reason", exc)).encode()[:200]
            if status == 200:
                return self._parse(body)
            problem = f"HTTP {status} {_error(body)}" if status else body.decode()
            if status and status not in _RETRIED:
                raise SaslAuthenticationFailedError(
                    f"Azure IMDS refused a token for {self.resource!r}: {problem}"
                )
            raise TryAgain(problem)

        retry = RetryState(self._backoff)
        try:
            return await retry_attempts(attempt, retry, max_wait_s=self._retry_budget_ms / 1000)
        except TryAgain as exc:
            raise KafkaConnectionError(
                f"Azure IMDS: no token after {retry.failures} attempts ({exc.problem})"
            ) from None

    def _get(self) -> tuple[int, bytes]:
        self.requests += 1
        request = urllib.request.Request(self.url(), headers={"Metadata": "true"}, method="GET")
        try:
            with self._opener.open(request, timeout=self._timeout_s) as answer:
                return int(answer.status), answer.read(_MAX_ANSWER)
        except urllib.error.HTTPError as exc:
            with exc:
                return int(exc.code), exc.read(_MAX_ANSWER)

    def _parse(self, body: bytes) -> OAuthBearerToken:
        try:
            answer: Any = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            raise SaslAuthenticationFailedError("Azure IMDS: the answer is not JSON") from None
        value = answer.get("access_token") if isinstance(answer, dict) else None
        if not isinstance(value, str) or not value:
            raise SaslAuthenticationFailedError("Azure IMDS: the answer has no access_token")
        expires_on = str(answer.get("expires_on", ""))
        expires_in = str(answer.get("expires_in", ""))
        if expires_on.isdigit():
            expires_at = float(expires_on)
        elif expires_in.isdigit():
            expires_at = time.time() + float(expires_in)
        else:
            raise SaslAuthenticationFailedError("Azure IMDS: the answer has no expires_on")
        return OAuthBearerToken(value, expires_at)


def _error(body: bytes) -> str:
    """IMDS's ``error`` / ``error_description``, bounded; never the body otherwise."""
    try:
        answer: Any = json.loads(body)
    except (ValueError, UnicodeDecodeError):
        return ""
    if not isinstance(answer, dict):
        return ""
    error = str(answer.get("error", ""))[:100]
    description = str(answer.get("error_description", ""))[:300]
    return f"{error}: {description}" if description else error
