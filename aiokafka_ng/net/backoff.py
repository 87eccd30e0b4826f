"""Exponential backoff with jitter (KIP-580): the only retry timing in aiokafka_ng.

``backoff_ms(n)`` is the pause before the ``n``-th retry after ``n`` consecutive failures::

    min(max_ms, initial_ms * multiplier ** (n - 1)) * U[1 - jitter, 1 + jitter]

Jitter spreads clients that failed together (a broker restart) so they do not come back in
lockstep. When ``max_ms <= initial_ms`` the pause is a constant ``max_ms`` (still jittered),
which is how Kafka treats ``retry.backoff.max.ms`` set below ``retry.backoff.ms``. Java's
``ExponentialBackoff`` caps after applying jitter; we cap before, so the mean of the pause at
the cap is exactly ``max_ms`` and the bounds are symmetric. Callers count failures and reset
the count on success; the policy object itself holds no per-call state, so one instance can
be shared by every partition or node it paces.

:class:`RetryState` is that count for one retried operation (with its deadline and last
error): every retry loop of the package keeps one, from the OIDC token fetch here in
``net`` to the control-plane driver (``cluster.retry``, which re-exports it) and the data
plane's per-node pacing.

:func:`retry_attempts` is the one retry loop for what is not a Kafka request (a token
endpoint, the schema registry's HTTP API: the layers that cannot use ``cluster.retry``'s
driver): an attempt raises :class:`TryAgain` for a failure a later try may fix, and the
loop pauses by a :class:`RetryState` until a budget of retries or of waiting is spent.
"""

from __future__ import annotations

import math
import random
from collections.abc import Awaitable, Callable
from typing import TypeVar

import anyio
import anyio.lowlevel

from aiokafka_ng.errors import KafkaTimeoutError

__all__ = ["ExponentialBackoff", "RetryState", "TryAgain", "retry_attempts"]

T = TypeVar("T")


class ExponentialBackoff:
    """Backoff policy: ``initial_ms * multiplier**(failures-1)`` capped at ``max_ms``, ±jitter."""

    __slots__ = ("_initial_ms", "_jitter", "_max_ms", "_multiplier", "_rng")

    def __init__(
        self,
        initial_ms: float,
        max_ms: float,
        *,
        multiplier: float = 2.0,
        jitter: float = 0.2,
        rng: random.Random | None = None,
    ) -> None:
        if initial_ms < 0 or max_ms < 0:
            raise ValueError("backoff intervals must be >= 0")
        if multiplier < 1:
            raise ValueError("multiplier must be >= 1")
        if not 0 <= jitter < 1:
            raise ValueError("jitter must be in [0, 1)")
        self._initial_ms = float(initial_ms)
        self._max_ms = float(max_ms)
        self._multiplier = float(multiplier)
        self._jitter = float(jitter)
        # A private Random keeps a seeded policy deterministic even when other code draws
        # from the global generator in between; it is seeded from the global one, so a
        # test's random.seed() makes every policy made after it replay (simulation seeds).
        self._rng = rng if rng is not None else random.Random(random.getrandbits(64))

    @classmethod
    def retry(
        cls, retry_backoff_ms: float = 100, retry_backoff_max_ms: float = 1000
    ) -> ExponentialBackoff:
        """Policy for request retries (``retry.backoff.ms`` / ``retry.backoff.max.ms``)."""
        return cls(retry_backoff_ms, retry_backoff_max_ms)

    @classmethod
    def reconnect(
        cls, reconnect_backoff_ms: float = 50, reconnect_backoff_max_ms: float = 1000
    ) -> ExponentialBackoff:
        """Policy for reconnects (``reconnect.backoff[.max].ms``, KIP-144)."""
        return cls(reconnect_backoff_ms, reconnect_backoff_max_ms)

    @property
    def initial_ms(self) -> float:
        return self._initial_ms

    @property
    def max_ms(self) -> float:
        return self._max_ms

    @property
    def jitter(self) -> float:
        return self._jitter

    def base_ms(self, failures: int) -> float:
        """The un-jittered pause after ``failures`` consecutive failures (0 for none)."""
        if failures <= 0:
            return 0.0
        if self._max_ms <= self._initial_ms:
            return self._max_ms
        if self._initial_ms == 0.0 or self._multiplier == 1.0:
            return self._initial_ms
        # Cap the exponent before computing the power so a huge failure count cannot
        # overflow a float: once the curve passes max_ms, further growth changes nothing.
        exp_max = math.log(self._max_ms / self._initial_ms, self._multiplier)
        exponent = min(failures - 1, math.ceil(exp_max))
        return min(self._initial_ms * self._multiplier**exponent, self._max_ms)

    def backoff_ms(self, failures: int, *, at_most_ms: float = math.inf) -> float:
        """Pause in milliseconds before retrying after ``failures`` consecutive failures
        (its un-jittered base no longer than ``at_most_ms``)."""
        base = min(self.base_ms(failures), at_most_ms)
        if base == 0.0 or self._jitter == 0.0:
            return base
        return base * self._rng.uniform(1.0 - self._jitter, 1.0 + self._jitter)

    def backoff_s(self, failures: int, *, at_most_ms: float = math.inf) -> float:
        """Same as :meth:`backoff_ms`, in seconds (what ``anyio.sleep`` takes)."""
        return self.backoff_ms(failures, at_most_ms=at_most_ms) / 1000.0

    def __repr__(self) -> str:
        return (
            f"ExponentialBackoff(initial_ms={self._initial_ms:g}, max_ms={self._max_ms:g}, "
            f"multiplier={self._multiplier:g}, jitter={self._jitter:g})"
        )


class RetryState:
    """Timing of one retried operation: consecutive failures, when the next attempt may go,
    the deadline, and the last error (for the timeout's message).

    Holds no task and no lock: a loop that sleeps calls :meth:`pause`; a loop that
    schedules (a refresher, a fetcher) reads :attr:`retry_at` after :meth:`failed`.
    """

    __slots__ = ("backoff", "deadline", "failures", "last_error", "retry_at", "started")

    def __init__(
        self,
        backoff: ExponentialBackoff,
        *,
        timeout: float | None = None,
        deadline: float | None = None,
    ) -> None:
        self.backoff = backoff
        # Without a deadline the state may be made outside a running event loop (a
        # refresher's or fetcher's __init__); the clock is only read when it matters.
        self.started = 0.0
        if timeout is not None or deadline is not None:
            self.started = anyio.current_time()
        if deadline is None and timeout is not None:
            deadline = self.started + max(timeout, 0.0)
        self.deadline = deadline
        self.failures = 0
        self.retry_at = 0.0
        self.last_error: BaseException | None = None

    def failed(
        self,
        error: BaseException | None = None,
        *,
        now: float | None = None,
        steady_ms: float | None = None,
    ) -> float:
        """Count a failure; returns the pause (seconds) and sets :attr:`retry_at`.

        ``steady_ms``: a failure the peer is expected to clear within moments (a transaction
        coordinator still writing the previous transaction's markers). The pause is the
        policy's first step, or ``steady_ms`` if shorter (jittered alike), whatever the
        count, and the count does not grow: the failure says nothing about a peer in
        trouble, so it neither slows the next retry nor the pace of a later failure that
        does."""
        if error is not None:
            self.last_error = error
        if steady_ms is None:
            self.failures += 1
            pause = self.backoff.backoff_s(self.failures)
        else:
            pause = self.backoff.backoff_s(1, at_most_ms=steady_ms)
        self.retry_at = (anyio.current_time() if now is None else now) + pause
        return pause

    def throttle(self, seconds: float, *, now: float | None = None) -> None:
        """The broker asked for no request before ``seconds`` from now (KIP-219's
        ``throttle_time_ms``): :attr:`retry_at` moves there unless a backoff already runs
        longer. Not a failure: the count, and so the next backoff, stay as they are."""
        until = (anyio.current_time() if now is None else now) + seconds
        self.retry_at = max(self.retry_at, until)

    def succeeded(self) -> None:
        """A success: the next failure starts the backoff from the beginning."""
        self.failures = 0
        self.retry_at = 0.0

    def remaining(self, *, now: float | None = None) -> float:
        """Seconds left before the deadline (``inf`` without one, never negative)."""
        if self.deadline is None:
            return float("inf")
        return max(0.0, self.deadline - (anyio.current_time() if now is None else now))

    async def pause(self, *, limit: float | None = None) -> None:
        """Sleep until :attr:`retry_at`, or for ``limit`` seconds if that ends sooner (the
        caller's cancel scopes bound it too)."""
        delay = self.retry_at - anyio.current_time()
        if limit is not None:
            delay = min(delay, limit)
        if delay > 0:
            await anyio.sleep(delay)
        else:
            await anyio.lowlevel.checkpoint()

    def timeout_error(self, what: str, limit: str | None = None) -> KafkaTimeoutError:
        """``KafkaTimeoutError`` for ``what``, naming the limit and the last error seen."""
        if limit is None:
            total = (self.deadline or self.started) - self.started
            limit = f"{total * 1000:.0f} ms"
        cause = self.last_error
        err = KafkaTimeoutError(
            f"timed out: {what} did not complete within {limit}"
            + (f"; last error: {type(cause).__name__}: {cause}" if cause is not None else "")
        )
        err.__cause__ = cause
        return err


class TryAgain(Exception):
    """Raised by an attempt of :func:`retry_attempts` whose failure a later try may fix (a
    connection refused, a 5xx answer). ``problem`` says what happened, for the log and for
    the error the caller raises once the budget is spent (chain the cause with ``from``)."""

    def __init__(self, problem: str) -> None:
        super().__init__(problem)
        self.problem = problem


async def retry_attempts(
    attempt: Callable[[], Awaitable[T]],
    state: RetryState,
    *,
    max_retries: int | None = None,
    max_wait_s: float | None = None,
    on_retry: Callable[[TryAgain, float], None] | None = None,
) -> T:
    """Run ``attempt`` until it returns its result.

    A :class:`TryAgain` it raises is counted in ``state`` (:meth:`RetryState.failed`) and
    the next attempt waits out the backoff -- unless that would make more than
    ``max_retries`` retries, or more than ``max_wait_s`` seconds of pauses in all (as Java's
    ``sasl.login.retry.backoff.max.ms`` bounds a token fetch's waits, not its requests'
    own time): then that ``TryAgain`` is raised, and ``state.failures`` says how many
    attempts failed. Any other exception ends the loop at once. ``on_retry(error,
    pause_s)`` runs before each pause (a log line)."""
    waited_s = 0.0
    while True:
        try:
            return await attempt()
        except TryAgain as exc:
            pause_s = state.failed(exc)
            if max_retries is not None and state.failures > max_retries:
                raise
            if max_wait_s is not None and waited_s + pause_s > max_wait_s:
                raise
            if on_retry is not None:
                on_retry(exc, pause_s)
            waited_s += pause_s
            await state.pause()
