"""Group and transaction coordinator lookup (FindCoordinator) with a cache.

Theory of operation
-------------------
The cache maps ``(key_type, key)`` to a node id until someone calls :meth:`invalidate`
(the coordinator route of :meth:`Cluster.call <aiokafka_ng.cluster.Cluster.call>` does,
after the errors :mod:`.retry` lists).

Lookups run in the *caller's* task -- no background task. The first caller for a key becomes
its runner and registers a :class:`_Lookup`; later callers for that key wait on it instead of
sending their own request. If the runner is cancelled (its caller timed out), the waiters
wake, see neither a result nor an error, and one of them becomes the next runner, so one
impatient caller cannot strand the others.

A runner asks for all its keys at once where the broker allows (FindCoordinator v4+,
``coordinator_keys``; KIP-699), one key per request before that. COORDINATOR_LOAD_IN_PROGRESS,
COORDINATOR_NOT_AVAILABLE, NOT_COORDINATOR and connection failures are retried by the
retry driver (:mod:`.retry`) under the retry backoff; any other error is raised to every
waiter of the lookup.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence

import anyio

from aiokafka_ng.cluster.retry import RetryState, retrying
from aiokafka_ng.errors import CoordinatorNotAvailableError, KafkaError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import error_for_code
from aiokafka_ng.protocol.messages.find_coordinator import (
    FindCoordinatorRequest,
    FindCoordinatorResponse,
)

__all__ = ["CoordinatorCache"]

# FindCoordinator errors that mean "ask again later" (the coordinator moved or is loading).
_COORDINATOR_LOAD_IN_PROGRESS = 14
_COORDINATOR_NOT_AVAILABLE = 15
_NOT_COORDINATOR = 16
_RETRY_CODES = frozenset(
    {_COORDINATOR_LOAD_IN_PROGRESS, _COORDINATOR_NOT_AVAILABLE, _NOT_COORDINATOR}
)

#: (key, error_code, error_message, node_id, host, port) -- one answer, any version.
_Answer = tuple[str, int, "str | None", int, str, int]


class _Lookup:
    """One in-progress FindCoordinator for some keys, awaited by other askers."""

    __slots__ = ("done", "error")

    def __init__(self) -> None:
        self.done = anyio.Event()
        self.error: KafkaError | None = None


class CoordinatorCache:
    """Cached coordinator lookups; see the module docstring."""

    def __init__(
        self,
        *,
        ask_any: Callable[[FindCoordinatorRequest], Awaitable[FindCoordinatorResponse]],
        learn_address: Callable[[int, str, int], None],
        retry_backoff: ExponentialBackoff,
    ) -> None:
        """``ask_any(request)``: one FindCoordinator to any broker, its answer unchecked (a
        failure raised as it is: :meth:`lookup`'s loop retries it)."""
        self._ask_any = ask_any
        self._learn_address = learn_address
        self._retry = retry_backoff
        self._cache: dict[tuple[int, str], int] = {}
        self._lookups: dict[tuple[int, str], _Lookup] = {}
        self.requests = 0  # FindCoordinator requests sent

    def cached(self, key: str, key_type: int = 0) -> int | None:
        return self._cache.get((key_type, key))

    def invalidate(self, key: str, key_type: int = 0) -> None:
        self._cache.pop((key_type, key), None)

    async def lookup(self, keys: Sequence[str], key_type: int = 0) -> dict[str, int]:
        """Node id of each key's coordinator, from the cache or FindCoordinator."""
        while True:
            missing = [k for k in keys if (key_type, k) not in self._cache]
            if not missing:
                return {k: self._cache[(key_type, k)] for k in keys}
            mine = [k for k in missing if (key_type, k) not in self._lookups]
            if mine:
                await self._run(mine, key_type)
                continue
            lookup = self._lookups[(key_type, missing[0])]
            await lookup.done.wait()
            if lookup.error is not None:
                raise lookup.error
            # Otherwise resolved, or its runner was cancelled: look again.

    async def _run(self, keys: list[str], key_type: int) -> None:
        lookup = _Lookup()
        for k in keys:
            self._lookups[(key_type, k)] = lookup
        try:
            await self._find(keys, key_type)
        except KafkaError as exc:
            lookup.error = exc
            raise
        finally:
            for k in keys:
                if self._lookups.get((key_type, k)) is lookup:
                    del self._lookups[(key_type, k)]
            lookup.done.set()

    async def _find(self, keys: list[str], key_type: int) -> None:
        pending = list(keys)

        async def attempt() -> None:
            # One FindCoordinator round; keys still unresolved make it fail retriably.
            last: KafkaError | None = None
            for key, code, message, node_id, host, port in await self._ask(pending, key_type):
                if key not in pending:
                    continue
                if code == 0:
                    # The coordinator may be a broker our metadata does not list yet.
                    self._learn_address(node_id, host, port)
                    self._cache[(key_type, key)] = node_id
                    pending.remove(key)
                elif code in _RETRY_CODES:
                    last = error_for_code(code)(message or f"FindCoordinator for {key!r}")
                else:
                    raise error_for_code(code)(message or f"FindCoordinator for {key!r} failed")
            if pending:
                raise last or CoordinatorNotAvailableError(
                    f"FindCoordinator: no answer for {pending}"
                )

        # No deadline of its own: the callers' (``Cluster.coordinators(timeout=...)``, the
        # retry driver of the request that needs the coordinator) bound it.
        await retrying(attempt, RetryState(self._retry), what="FindCoordinator")

    async def _ask(self, keys: list[str], key_type: int) -> list[_Answer]:
        # One request for every version: v4+ carries coordinator_keys, v0-3 the first key
        # alone (the encoder writes each version's own fields), and the answer says which
        # form it took (a list of coordinators, or one at the top level).
        key = keys[0]
        req = FindCoordinatorRequest(key=key, key_type=key_type, coordinator_keys=list(keys))
        self.requests += 1
        resp = await self._ask_any(req)
        if resp.coordinators or not (resp.error_code or resp.host):
            # v4+ (an empty list answers no key: they stay pending and are asked again).
            return [
                (c.key, c.error_code, c.error_message, c.node_id, c.host, c.port)
                for c in resp.coordinators
            ]
        return [(key, resp.error_code, resp.error_message, resp.node_id, resp.host, resp.port)]
