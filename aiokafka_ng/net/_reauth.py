"""SASL re-authentication on a live connection (KIP-368).

A broker with ``connections.max.reauth.ms`` (or a credential that expires, e.g. an
OAUTHBEARER token) gives each SASL session a lifetime in its SaslAuthenticate answer and
closes a connection used after it. Like the Java client we re-authenticate at 85-95% of that
lifetime (the random spread keeps a client's connections from all doing it at once),
lazily: the first ``submit()`` after that moment runs it before its own request. The token
is fetched first; then, under the write lock so no other frame can get between them,
SaslHandshake and SaslAuthenticate go out as ordinary in-flight entries (without permits: a
permit-holding task may be queued on the write lock). Requests already on the wire are not
disturbed: the broker answers them in order before reading the handshake. A failed
re-authentication closes the connection (the broker would) and its error reaches the caller
that triggered it; everyone else sees a retriable closed connection.
"""

from __future__ import annotations

import random
from collections.abc import Mapping
from typing import Protocol

import anyio

from aiokafka_ng.errors import RequestTimeoutError
from aiokafka_ng.net import _handshake
from aiokafka_ng.net._connection_types import ConnectionConfig

__all__ = ["Reauthentication"]


class Poison(Protocol):
    """Closes the connection: every pending request fails once (Connection._poison)."""

    def __call__(self, reason: str, *, cause: BaseException | None = ...) -> None: ...


class Reauthentication:
    """When one connection's SASL session is to be renewed, and the renewal itself."""

    __slots__ = ("_at", "_config", "_host", "_where")

    def __init__(self, host: str, where: str, config: ConnectionConfig) -> None:
        self._host = host
        self._where = where
        self._config = config
        # anyio clock time at which the session should be renewed (None: never/now busy)
        self._at: float | None = None

    def schedule(self, lifetime_ms: int) -> None:
        """After a login whose session lasts ``lifetime_ms`` (0: forever)."""
        if lifetime_ms > 0:
            # Java's SaslClientAuthenticator: 85% of the lifetime plus up to 10% jitter.
            share = 0.85 + 0.10 * random.random()
            self._at = anyio.current_time() + lifetime_ms / 1000 * share

    def due(self) -> bool:
        return self._at is not None and anyio.current_time() >= self._at

    async def run(
        self,
        exchange: _handshake.Exchange,
        api_versions: Mapping[int, tuple[int, int]],
        write_lock: anyio.Lock,
        poison: Poison,
    ) -> None:
        """Renew the session over ``exchange`` (one in-flight request without a permit,
        the write lock held); ``poison`` closes the connection when it fails."""
        where = self._where
        sasl = self._config.sasl
        assert sasl is not None  # only scheduled after a SASL login
        self._at = None  # this task does it; others go on meanwhile
        try:
            mechanism = await sasl.create_mechanism(self._host)
        except Exception as exc:
            poison(f"re-authentication failed: {exc}", cause=exc)
            raise
        except BaseException:  # cancelled while getting the token: the next caller retries
            self._at = anyio.current_time()
            raise
        try:
            # Shielded: an exchange cut in half leaves the broker mid-authentication.
            with anyio.CancelScope(shield=True), anyio.fail_after(self._config.request_timeout_s):
                async with write_lock:
                    lifetime_ms = await _handshake.authenticate(
                        exchange,
                        mechanism,
                        api_versions,
                        where,
                        tls=self._config.ssl_context is not None,
                    )
        except TimeoutError as exc:
            poison("re-authentication timed out", cause=exc)
            raise RequestTimeoutError(f"{where}: re-authentication timed out") from None
        except Exception as exc:
            poison(f"re-authentication failed: {exc}", cause=exc)
            raise
        self.schedule(lifetime_ms)
