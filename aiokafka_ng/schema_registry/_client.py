"""SchemaRegistryClient: an async client of the Confluent Schema Registry REST API.

Theory of operation
-------------------
Transport. One :class:`httpx.AsyncClient` (a connection pool) per client, over anyio, so
the client runs on asyncio and trio alike; it is closed by ``async with`` or
:meth:`SchemaRegistryClient.aclose`. TLS is the ``ssl_context`` given (mutual TLS: load the
client certificate into it). Credentials are basic (``basic_auth``, or user info in the
URL, which is then removed from the URL kept) or bearer (a token, or an async callable
asked before every request so that a token provider can refresh it). Neither ever appears in
``repr``, in an error or in a log line: errors name the URL without user info and the path.

Retries. One request path (``_request``): a connection error, a timeout or a 5xx answer is
retried up to ``retries`` times, paced by the package's one backoff policy
(:class:`~aiokafka_ng.net.backoff.ExponentialBackoff`, KIP-580 jitter) through a
:class:`~aiokafka_ng.net.backoff.RetryState`, on the one retry loop of what is not a Kafka
request (:func:`~aiokafka_ng.net.backoff.retry_attempts`); every request here is idempotent on the
registry (registering the same schema twice gives the same id), so retrying a write is
safe. What is left after the last try is :class:`RegistryUnreachableError`. A 4xx is the
registry's answer and is raised at once, as the error its code names.

Caches. What the registry never changes once written is cached without bound (a process
sees a handful of schemas): the schema of an id, the id of a schema registered under a
subject, a subject's numbered versions. ``latest``, subject lists and compatibility
settings change under the client and are always asked. Concurrent misses of one key may
each ask the registry; the answers are the same, so the cache keeps whichever lands last.
"""

from __future__ import annotations

import logging
import ssl
import urllib.parse
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Final, Self

import httpx

from aiokafka_ng.net.backoff import ExponentialBackoff, RetryState, TryAgain, retry_attempts
from aiokafka_ng.net.oauth import OAuthBearerToken
from aiokafka_ng.schema_registry._errors import (
    IncompatibleSchemaError,
    InvalidSchemaError,
    RegistryAuthError,
    RegistryUnreachableError,
    SchemaNotFoundError,
    SchemaRegistryError,
    SubjectNotFoundError,
    VersionNotFoundError,
)
from aiokafka_ng.schema_registry._types import (
    COMPATIBILITY_LEVELS,
    RegisteredSchema,
    Schema,
)

__all__ = ["CompatibilityResult", "SchemaRegistryClient"]

log = logging.getLogger(__name__)

_CONTENT_TYPE: Final = "application/vnd.schemaregistry.v1+json"
_ACCEPT: Final = "application/vnd.schemaregistry.v1+json, application/json"
_RETRIED_STATUSES: Final = frozenset({500, 502, 503, 504})

#: A token, or an async callable giving one: a plain string, or an
#: :class:`~aiokafka_ng.net.oauth.OAuthBearerToken` as the OAUTHBEARER token providers
#: (:mod:`aiokafka_ng.net.oidc`) give, so one provider serves Kafka and the registry.
BearerToken = str | Callable[[], Awaitable[str]] | Callable[[], Awaitable[OAuthBearerToken]]


@dataclass(frozen=True, slots=True)
class CompatibilityResult:
    """The registry's verdict on a schema against a subject's version; true when compatible.

    ``messages`` are the registry's reasons when it gives them (Confluent's ``verbose``).
    """

    is_compatible: bool
    messages: tuple[str, ...] = ()

    def __bool__(self) -> bool:
        return self.is_compatible


def _quote(part: str | int) -> str:
    return urllib.parse.quote(str(part), safe="")


def _split_user_info(url: str) -> tuple[str, tuple[str, str] | None]:
    """``url`` without user info, and the ``(user, password)`` it held, if any."""
    parts = urllib.parse.urlsplit(url)
    if parts.username is None:
        return url.rstrip("/"), None
    host = parts.hostname or ""
    if ":" in host:
        host = f"[{host}]"
    netloc = host + (f":{parts.port}" if parts.port is not None else "")
    clean = urllib.parse.urlunsplit(parts._replace(netloc=netloc)).rstrip("/")
    user = urllib.parse.unquote(parts.username)
    password = urllib.parse.unquote(parts.password or "")
    return clean, (user, password)


class SchemaRegistryClient:
    """An async client of a Confluent-compatible Schema Registry (asyncio and trio).

    Args:
        url: the registry's API root, e.g. ``http://127.0.0.1:8081`` for Confluent's
            registry or ``http://host:8080/apis/ccompat/v7`` for Apicurio's
            Confluent-compatible API. User info in it (``https://user:pw@host``) is used as
            basic auth and removed from the URL kept.
        basic_auth: ``(user, password)`` for HTTP basic auth.
        bearer_token: a bearer token, or an async callable returning one (asked before
            every request, so it can refresh): a string or an
            :class:`~aiokafka_ng.net.oauth.OAuthBearerToken`, so a token provider of
            :mod:`aiokafka_ng.net.oidc` (which caches its token) can be given as it is. Not
            together with basic auth.
        ssl_context: the TLS context for ``https`` URLs (trust store, client certificate);
            default: the system's trust store.
        timeout_s: seconds for one HTTP request (connect, write, read each).
        retries: how many times a connection error, timeout or 5xx answer is retried.
        backoff: the pause between retries (default: ``ExponentialBackoff.retry(100, 2000)``).
        transport: an :class:`httpx.AsyncBaseTransport` to send requests through instead
            of the network (a proxy's, or ``httpx.MockTransport`` in tests).
    """

    def __init__(
        self,
        url: str,
        *,
        basic_auth: tuple[str, str] | None = None,
        bearer_token: BearerToken | None = None,
        ssl_context: ssl.SSLContext | None = None,
        timeout_s: float = 10.0,
        retries: int = 3,
        backoff: ExponentialBackoff | None = None,
        transport: httpx.AsyncBaseTransport | None = None,
    ) -> None:
        clean_url, url_auth = _split_user_info(url)
        if not clean_url.startswith(("http://", "https://")):
            raise ValueError(f"the registry URL must be http:// or https://, got {clean_url!r}")
        if basic_auth is None:
            basic_auth = url_auth
        if basic_auth is not None and bearer_token is not None:
            raise ValueError("give basic auth or a bearer token, not both")
        if retries < 0:
            raise ValueError(f"retries must be >= 0, got {retries}")
        self.url: Final = clean_url
        self._bearer = bearer_token
        self._auth_kind = "basic" if basic_auth else "bearer" if bearer_token else None
        self._retries = retries
        self._backoff = backoff if backoff is not None else ExponentialBackoff.retry(100, 2000)
        self._http = httpx.AsyncClient(
            base_url=clean_url,
            auth=httpx.BasicAuth(*basic_auth) if basic_auth is not None else None,
            verify=ssl_context if ssl_context is not None else True,
            timeout=timeout_s,
            headers={"Accept": _ACCEPT},
            transport=transport,
            follow_redirects=False,
        )
        self._schemas_by_id: dict[int, Schema] = {}
        self._ids: dict[tuple[str, Schema], int] = {}
        self._registered: dict[tuple[str, Schema], RegisteredSchema] = {}
        self._versions: dict[tuple[str, int], RegisteredSchema] = {}

    def __repr__(self) -> str:
        return f"SchemaRegistryClient(url={self.url!r}, auth={self._auth_kind!r})"

    # -- lifecycle ---------------------------------------------------------------------------

    async def aclose(self) -> None:
        """Close the connection pool; the caches stay readable."""
        await self._http.aclose()

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    # -- schemas -----------------------------------------------------------------------------

    async def register(self, subject: str, schema: Schema, *, normalize: bool = False) -> int:
        """Register ``schema`` under ``subject`` (a new version unless it is there already);
        returns its id. Raises :class:`IncompatibleSchemaError` naming the subject when the
        subject's compatibility rule refuses it, :class:`InvalidSchemaError` when the
        registry cannot parse it."""
        key = (subject, schema)
        cached = self._ids.get(key)
        if cached is not None:
            return cached
        body = await self._request(
            "POST",
            f"/subjects/{_quote(subject)}/versions",
            json=schema.to_json(),
            params={"normalize": "true"} if normalize else None,
            what=f"registering a schema under subject {subject!r}",
            subject=subject,
        )
        schema_id = int(body["id"])
        self._ids[key] = schema_id
        self._schemas_by_id.setdefault(schema_id, schema)
        return schema_id

    async def lookup(
        self, subject: str, schema: Schema, *, normalize: bool = False
    ) -> RegisteredSchema:
        """The id and version of ``schema`` under ``subject``, without registering it.

        Raises :class:`SubjectNotFoundError` for an unknown subject and
        :class:`SchemaNotFoundError` when the subject has no such schema.
        """
        key = (subject, schema)
        cached = self._registered.get(key)
        if cached is not None:
            return cached
        body = await self._request(
            "POST",
            f"/subjects/{_quote(subject)}",
            json=schema.to_json(),
            params={"normalize": "true"} if normalize else None,
            what=f"looking up a schema under subject {subject!r}",
            subject=subject,
        )
        registered = self._registered_from(body, subject, fallback=schema)
        self._registered[key] = registered
        self._ids[key] = registered.schema_id
        self._versions[(subject, registered.version)] = registered
        return registered

    async def get_schema(self, schema_id: int) -> Schema:
        """The schema of ``schema_id`` (cached). Raises :class:`SchemaNotFoundError`."""
        cached = self._schemas_by_id.get(schema_id)
        if cached is not None:
            return cached
        body = await self._request(
            "GET", f"/schemas/ids/{int(schema_id)}", what=f"fetching schema id {schema_id}"
        )
        schema = Schema.from_json(body)
        self._schemas_by_id[schema_id] = schema
        return schema

    def cached_schema(self, schema_id: int) -> Schema | None:
        """The schema of ``schema_id`` if this client has seen it already; never asks the
        registry (for synchronous callers: a deserializer running inside the consumer)."""
        return self._schemas_by_id.get(schema_id)

    async def get_schema_versions(self, schema_id: int) -> list[tuple[str, int]]:
        """Every ``(subject, version)`` that has the schema of ``schema_id``."""
        body = await self._request(
            "GET",
            f"/schemas/ids/{int(schema_id)}/versions",
            what=f"listing the versions of schema id {schema_id}",
        )
        return [(str(entry["subject"]), int(entry["version"])) for entry in body]

    # -- subjects and versions -----------------------------------------------------------------

    async def get_subjects(self) -> list[str]:
        """Every subject of the registry."""
        body = await self._request("GET", "/subjects", what="listing subjects")
        return [str(subject) for subject in body]

    async def get_versions(self, subject: str) -> list[int]:
        """The version numbers of ``subject``. Raises :class:`SubjectNotFoundError`."""
        body = await self._request(
            "GET",
            f"/subjects/{_quote(subject)}/versions",
            what=f"listing the versions of subject {subject!r}",
            subject=subject,
        )
        return [int(version) for version in body]

    async def get_version(self, subject: str, version: int) -> RegisteredSchema:
        """Version ``version`` of ``subject`` (cached: a version never changes). Raises
        :class:`SubjectNotFoundError` or :class:`VersionNotFoundError`."""
        cached = self._versions.get((subject, version))
        if cached is not None:
            return cached
        registered = await self._fetch_version(subject, str(int(version)))
        self._versions[(subject, registered.version)] = registered
        return registered

    async def get_latest_version(self, subject: str) -> RegisteredSchema:
        """The newest version of ``subject`` (always asked: it changes)."""
        registered = await self._fetch_version(subject, "latest")
        self._versions[(subject, registered.version)] = registered
        return registered

    async def get_referenced_by(self, subject: str, version: int) -> list[int]:
        """The ids of the schemas that reference version ``version`` of ``subject``."""
        body = await self._request(
            "GET",
            f"/subjects/{_quote(subject)}/versions/{int(version)}/referencedby",
            what=f"listing what references version {version} of subject {subject!r}",
            subject=subject,
        )
        return [int(schema_id) for schema_id in body]

    async def delete_subject(self, subject: str, *, permanent: bool = False) -> list[int]:
        """Delete ``subject`` (soft; then hard with ``permanent=True``); returns the versions
        deleted, and forgets what the caches held for it."""
        body = await self._request(
            "DELETE",
            f"/subjects/{_quote(subject)}",
            params={"permanent": "true"} if permanent else None,
            what=f"deleting subject {subject!r}",
            subject=subject,
        )
        self._ids = {k: v for k, v in self._ids.items() if k[0] != subject}
        self._registered = {k: v for k, v in self._registered.items() if k[0] != subject}
        self._versions = {k: v for k, v in self._versions.items() if k[0] != subject}
        return [int(version) for version in body]

    # -- compatibility -------------------------------------------------------------------------

    async def check_compatibility(
        self, subject: str, schema: Schema, version: int | str = "latest"
    ) -> CompatibilityResult:
        """Whether ``schema`` may follow ``version`` of ``subject`` under its rule (nothing is
        registered). Raises :class:`SubjectNotFoundError` for an unknown subject."""
        body = await self._request(
            "POST",
            f"/compatibility/subjects/{_quote(subject)}/versions/{_quote(version)}",
            json=schema.to_json(),
            params={"verbose": "true"},
            what=f"checking a schema's compatibility with subject {subject!r}",
            subject=subject,
        )
        messages = tuple(str(m) for m in body.get("messages") or ())
        return CompatibilityResult(bool(body["is_compatible"]), messages)

    async def get_compatibility(self, subject: str | None = None) -> str:
        """The compatibility level of ``subject`` (the global one where the subject has none
        of its own), or the global level when ``subject`` is None."""
        path = "/config" if subject is None else f"/config/{_quote(subject)}"
        body = await self._request(
            "GET",
            path,
            params=None if subject is None else {"defaultToGlobal": "true"},
            what="reading the compatibility level"
            + ("" if subject is None else f" of subject {subject!r}"),
            subject=subject,
        )
        return str(body.get("compatibilityLevel") or body.get("compatibility"))

    async def set_compatibility(self, level: str, subject: str | None = None) -> str:
        """Set the compatibility level of ``subject``, or the global one; returns it."""
        level = level.upper()
        if level not in COMPATIBILITY_LEVELS:
            raise ValueError(
                f"unknown compatibility level {level!r}; one of {', '.join(COMPATIBILITY_LEVELS)}"
            )
        path = "/config" if subject is None else f"/config/{_quote(subject)}"
        body = await self._request(
            "PUT",
            path,
            json={"compatibility": level},
            what=f"setting the compatibility level to {level}"
            + ("" if subject is None else f" for subject {subject!r}"),
            subject=subject,
        )
        return str(body.get("compatibility") or body.get("compatibilityLevel"))

    # -- the one request path --------------------------------------------------------------------

    async def _fetch_version(self, subject: str, version: str) -> RegisteredSchema:
        body = await self._request(
            "GET",
            f"/subjects/{_quote(subject)}/versions/{version}",
            what=f"fetching version {version} of subject {subject!r}",
            subject=subject,
        )
        return self._registered_from(body, subject)

    def _registered_from(
        self, body: dict[str, Any], subject: str, fallback: Schema | None = None
    ) -> RegisteredSchema:
        schema = Schema.from_json(body) if "schema" in body else fallback
        if schema is not None and fallback is not None and "schemaType" not in body:
            # A lookup's answer may leave the type out (Apicurio's does, for every type):
            # the schema found is the one asked with, so its type and references are those.
            schema = Schema(schema.schema_str, fallback.schema_type, fallback.references)
        if schema is None:  # pragma: no cover (a registry always sends the schema here)
            raise SchemaRegistryError(f"the registry's answer for {subject!r} has no schema")
        schema_id = int(body["id"])
        self._schemas_by_id.setdefault(schema_id, schema)
        return RegisteredSchema(
            schema_id, str(body.get("subject", subject)), int(body["version"]), schema
        )

    async def _headers(self) -> dict[str, str]:
        headers = {}
        if self._bearer is not None:
            token = self._bearer if isinstance(self._bearer, str) else await self._bearer()
            if isinstance(token, OAuthBearerToken):
                token = token.value
            headers["Authorization"] = f"Bearer {token}"
        return headers

    async def _request(
        self,
        method: str,
        path: str,
        *,
        what: str,
        json: Any = None,
        params: dict[str, str] | None = None,
        subject: str | None = None,
    ) -> Any:
        """Send one request, retried on connection errors, timeouts and 5xx answers; the
        decoded JSON answer, or the error the registry's answer names."""
        headers = await self._headers()
        if json is not None:
            headers["Content-Type"] = _CONTENT_TYPE

        async def attempt() -> Any:
            try:
                response = await self._http.request(
                    method, path, json=json, params=params, headers=headers
                )
            except httpx.TransportError as exc:
                problem = _describe(exc)
                if _cert_refused(exc):  # the same certificate fails every try
                    raise RegistryUnreachableError(
                        f"{what}: the schema registry at {self.url} failed TLS verification: "
                        f"{problem}"
                    ) from exc
                raise TryAgain(problem) from exc
            if response.status_code not in _RETRIED_STATUSES:
                return self._answer(response, what, subject)
            raise TryAgain(f"HTTP {response.status_code}: {_message(response)}")

        def log_retry(error: TryAgain, _pause_s: float) -> None:
            log.debug(
                "schema registry %s %s: %s; retry %d of %d",
                method,
                self.url + path,
                error.problem,
                state.failures,
                self._retries,
            )

        state = RetryState(self._backoff)
        try:
            return await retry_attempts(
                attempt, state, max_retries=self._retries, on_retry=log_retry
            )
        except TryAgain as exc:
            tries = self._retries + 1
            raise RegistryUnreachableError(
                f"{what}: no answer from the schema registry at {self.url} after {tries} "
                f"tr{'y' if tries == 1 else 'ies'}: {exc.problem}"
            ) from exc.__cause__

    def _answer(self, response: httpx.Response, what: str, subject: str | None) -> Any:
        status = response.status_code
        if 200 <= status < 300:
            try:
                return response.json()
            except ValueError as exc:
                raise SchemaRegistryError(
                    f"{what}: the registry's answer is not JSON: {response.text[:200]!r}",
                    status=status,
                ) from exc
        message = _message(response)
        code = _error_code(response)
        kwargs = {"status": status, "error_code": code}
        if status in (401, 403):
            if status == 403:
                refused = "refused the operation"
            elif self._auth_kind is None:
                refused = "asks for credentials and none were given"
            else:
                refused = f"refused the credentials ({self._auth_kind} auth)"
            raise RegistryAuthError(
                f"{what}: the registry at {self.url} {refused} (HTTP {status}): {message}",
                **kwargs,
            )
        if code == 40401 and subject is not None:
            raise SubjectNotFoundError(subject, message, **kwargs)
        if code == 40402:
            raise VersionNotFoundError(f"{what}: {message}", **kwargs)
        if code == 40403:
            raise SchemaNotFoundError(f"{what}: {message}", **kwargs)
        if status == 409:
            raise IncompatibleSchemaError(subject or "?", message, **kwargs)
        if status == 422:
            raise InvalidSchemaError(f"{what}: {message}", **kwargs)
        raise SchemaRegistryError(
            f"{what}: the registry answered HTTP {status}: {message}", **kwargs
        )


def _chain(exc: BaseException) -> list[BaseException]:
    seen: list[BaseException] = []
    current: BaseException | None = exc
    while current is not None and current not in seen:
        seen.append(current)
        current = current.__cause__ or current.__context__
    return seen


def _describe(exc: BaseException) -> str:
    """``Type: message`` of a transport error, with the message of the first error in its
    chain that has one (httpx's own is empty on some backends)."""
    message = next((str(e) for e in _chain(exc) if str(e)), "")
    return f"{type(exc).__name__}: {message}" if message else type(exc).__name__


def _cert_refused(exc: BaseException) -> bool:
    return any(isinstance(e, ssl.SSLCertVerificationError) for e in _chain(exc))


def _decoded(response: httpx.Response) -> Any:
    try:
        return response.json()
    except ValueError:
        return None


def _message(response: httpx.Response) -> str:
    body = _decoded(response)
    if isinstance(body, dict) and body.get("message"):
        return str(body["message"])
    return response.text[:300] or response.reason_phrase


def _error_code(response: httpx.Response) -> int | None:
    body = _decoded(response)
    if isinstance(body, dict) and isinstance(body.get("error_code"), int):
        return int(body["error_code"])
    return None
