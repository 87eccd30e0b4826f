"""The metadata refresher: bootstrap, the metadata cache, its refresh loop and its waiters.

Theory of operation
-------------------
*The refresher* is the one task (owned by the :class:`~aiokafka_ng.cluster.Cluster`'s task
group) that sends Metadata requests for the cache; everything else asks it for work and
waits for the result.

*Bootstrap.* :meth:`MetadataRefresher.bootstrap` tries the bootstrap servers in order
(pseudo node ids -1, -2, ...), a Metadata request on the first one that answers; between
full rounds it sleeps the retry backoff (the retry driver, :mod:`.retry`), until
``bootstrap_timeout_ms``. Afterwards the bootstrap connection is re-labelled with the
broker id it turned out to be (or closed), so no socket is doubled.
With ``wait_for_bootstrap=False`` (the clients' choice: an app must start while its
cluster is briefly down, as Java and librdkafka clients do) the cluster starts at once
and the refresher does the bootstrap as its first, urgent refresh, retried under the
backoff; ``wait_ready()`` waits for the first answer and ``status()`` tells without waiting.

*Coalescing.* Requests for fresh metadata only set flags and wake the refresher:
``request_update()`` (someone saw an ``invalid_metadata`` error), a new topic to track
(``wait_for_topics``), ``refresh()``. The refresher sends one Metadata request for *all*
tracked topics at a time; anything asked while it is in flight is served by the next one.
So fifty concurrent ``wait_for_topics`` calls cost one request, and a burst of errors from a
hundred partitions costs one refresh. Request ``n`` is the ``n``-th started;
``refresh()`` waits for a successful one numbered after those already started when it was
called, so the data it returns was asked for after the call.

*Pacing.* One :class:`ExponentialBackoff` (``retry_backoff_ms``/``retry_backoff_max_ms``):

* after a failed request (connection, timeout) the next waits ``backoff(failures)``;
* ``request_update()`` and retries for tracked topics that are still unusable (topic error,
  zero partitions, a partition without leader) are spaced ``backoff(rounds)`` after the
  previous request, ``rounds`` counting consecutive refreshes that left something unusable;
* a topic never asked for before and ``refresh()`` go out at once (unless requests are
  failing), so a newcomer does not inherit another topic's backoff;
* with nothing to do, the metadata is refreshed every ``metadata_max_age_ms``.

*Re-bootstrap* (KIP-899, KIP-1102; Java's ``metadata.recovery.strategy=rebootstrap``, its
default since 4.0). Once bootstrapped, the refresher asks only brokers of the last answer.
If all of them are gone for good -- the cluster was replaced, moved to new addresses behind
the same DNS name or load balancer -- that list never heals by itself. So when Metadata
requests have failed for ``metadata_recovery_rebootstrap_trigger_ms`` without one success,
the cache is dropped and the refresher starts over from ``bootstrap_servers`` (re-resolving
their names when it connects). The next answer is installed as a fresh start, not merged:
a new cluster's leader epochs may be lower than the old one's, and merging would keep the
stale leaders (the epoch rule of KIP-320). Tracked topics stay tracked; their waiters wait
for the new answer.

A broker can also say so itself (KIP-1102): a Metadata answer (v13+) whose top-level error is
REBOOTSTRAP_REQUIRED goes back to ``bootstrap_servers`` at once, without waiting for the
trigger time (as Java's ``NetworkClient`` does). With the strategy "none" the answer is a
failed refresh, retried under the backoff. Kafka 4.4 itself sends the code in ApiVersions
v5 answers (KIP-1242), when a connection meant for node N of cluster C reached another
broker: the pool reports it (:meth:`rebootstrap_required`) and the same happens.

*Per-topic waiters.* Each topic has its own :class:`anyio.Event`, set whenever a snapshot
brings news of that topic. A caller of ``wait_for_topics(["a"])`` wakes when "a" becomes
usable in *any* response, however long topic "b" keeps failing next to it in the same
requests. Topic errors that retrying cannot fix (authorization, invalid name) are raised to
that topic's waiters only.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import replace
from types import MappingProxyType

import anyio

from aiokafka_ng.cluster.config import ClusterConfig, describe_servers
from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    TopicMetadata,
    parse_metadata_response,
)
from aiokafka_ng.cluster.pool import ConnectionPool
from aiokafka_ng.cluster.retry import RetryState, retrying, timeout_scope
from aiokafka_ng.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    RebootstrapRequiredError,
    UnknownTopicOrPartitionError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.limits import DecodeLimits
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic

__all__ = ["MetadataRefresher"]

log = logging.getLogger(__name__)

#: How long UNKNOWN_TOPIC_OR_PARTITION must have been the answer for a topic before it is said
#: not to exist: Kafka answers it to the Metadata request that auto-creates a topic, while
#: the controller creates it (KRaft's AutoTopicCreationManager), for well under a second.
MISSING_AFTER_S = 2.0


class MetadataRefresher:
    """The metadata cache of one cluster and the task that refreshes it; see the module
    docstring. The :class:`~aiokafka_ng.cluster.Cluster` runs :meth:`run` in its task
    group and forwards its metadata methods here."""

    def __init__(
        self, config: ClusterConfig, pool: ConnectionPool, retry: ExponentialBackoff
    ) -> None:
        self._config = config
        self._pool = pool
        self._retry = retry
        self._bootstrap_ids = [-(i + 1) for i in range(len(config.bootstrap_servers))]
        self._metadata = ClusterMetadata()
        self._listeners: list[Callable[[ClusterMetadata], None]] = []
        self._error_listeners: list[Callable[[KafkaError], None]] = []
        # Refresher state (see "Coalescing" and "Pacing" above).
        self._tracked: set[str] = set()
        self._new_topics: set[str] = set()
        self._update_needed = False
        self._urgent = False
        self._wakeup = anyio.Event()
        self._started_seq = 0
        self._ok_seq = 0
        self._attempt_done = anyio.Event()
        # Consecutive failed metadata requests and when the next may go (the refresher
        # schedules by it rather than sleeping inline).
        self._pacing = RetryState(self._retry)
        # Consecutive answered rounds that left a tracked topic unusable: the same backoff
        # spaces the next one (see "Pacing" above).
        self._stale = RetryState(self._retry)
        self._retry_at = 0.0
        self._last_ok_at: float | None = None
        self._failing_since: float | None = None  # first failure since the last success
        self._fresh_start = False  # re-bootstrapped: install the next answer, do not merge
        self._told_to_rebootstrap = False  # a broker answered REBOOTSTRAP_REQUIRED (KIP-1102)
        self._fatal: KafkaError | None = None  # non-retriable failure of request _fatal_seq
        self._fatal_seq = 0
        self._topic_events: dict[str, anyio.Event] = {}
        self._answered: dict[str, int] = {}  # topic -> number of the last request answering it
        self._last_error: KafkaError | None = None
        #: Topics answered UNKNOWN_TOPIC_OR_PARTITION, since when (-1 once said): said once
        #: per topic, not per round, until it exists.
        self._unknown_since: dict[str, float] = {}
        self.requests = 0  # Metadata requests sent by the refresher and bootstrap
        self.failures = 0  # refresh attempts that failed (no connection, error, timeout)
        self.rebootstraps = 0  # times it went back to bootstrap_servers (KIP-1102)

    # ------------------------------------------------------------------ the cache

    @property
    def metadata(self) -> ClusterMetadata:
        """The current snapshot (immutable; a refresh replaces it)."""
        return self._metadata

    @property
    def tracked_topics(self) -> tuple[str, ...]:
        return tuple(sorted(self._tracked))

    @property
    def last_ok_at(self) -> float | None:
        """``anyio.current_time()`` of the last successful refresh."""
        return self._last_ok_at

    @property
    def ready(self) -> bool:
        """True once a broker answered a metadata request (bootstrap done)."""
        return self._ok_seq > 0

    def _say_if_missing(self, name: str, topic: TopicMetadata, now: float) -> None:
        """A topic the brokers say does not exist (auto-creation off or not allowed) is a
        WARNING once, as the Java client's "Error while fetching metadata ... {t=UNKNOWN_TOPIC_
        OR_PARTITION}" (which it logs every round): a consumer of a misspelled topic reads
        nothing and raises nothing. Only once that has been the answer for
        ``MISSING_AFTER_S``: Kafka answers it for a moment to a request that auto-creates the
        topic. A producer says it itself, with the records that wait and until when (the
        accumulator), so here it is DEBUG."""
        if topic.error is not UnknownTopicOrPartitionError:
            self._unknown_since.pop(name, None)
            return
        since = self._unknown_since.setdefault(name, now)
        if since < 0 or now - since < MISSING_AFTER_S:
            return
        self._unknown_since[name] = -1.0  # said
        config = self._config
        log.log(
            logging.DEBUG if config.role == "producer" else logging.WARNING,
            "%s %s: topic %r does not exist: the brokers answer UNKNOWN_TOPIC_OR_PARTITION "
            "(auto-creation is off or not allowed); waiting for it",
            config.role, config.client_id, name,
        )  # fmt: skip

    @property
    def last_error(self) -> KafkaError | None:
        """The error of the last failed metadata request, None after a success."""
        return self._last_error

    @property
    def bootstrap_summary(self) -> str:
        """The bootstrap servers for a message: the first few and how many more."""
        return describe_servers(self._config.bootstrap_servers)

    def add_listener(self, callback: Callable[[ClusterMetadata], None]) -> Callable[[], None]:
        self._listeners.append(callback)

        def remove() -> None:
            if callback in self._listeners:
                self._listeners.remove(callback)

        return remove

    def add_error_listener(self, callback: Callable[[KafkaError], None]) -> Callable[[], None]:
        self._error_listeners.append(callback)

        def remove() -> None:
            if callback in self._error_listeners:
                self._error_listeners.remove(callback)

        return remove

    def broker_candidates(self) -> list[int]:
        """The brokers to ask: those of the last answer, else the bootstrap servers."""
        brokers = list(self._metadata.brokers)
        if not brokers:
            return self._bootstrap_ids
        return brokers

    def topic_event(self, name: str) -> anyio.Event:
        """The event set when a snapshot next brings news of topic ``name``."""
        event = self._topic_events.get(name)
        if event is None:
            event = self._topic_events[name] = anyio.Event()
        return event

    # ------------------------------------------------------------------ asking for work

    def request_update(self, topics: Iterable[str] = ()) -> None:
        self._track(topics)
        self._update_needed = True
        self._wakeup.set()

    def forget_topics(self, topics: Iterable[str]) -> None:
        names = set(topics)
        self._tracked -= names
        self._new_topics -= names
        for name in names:
            self._answered.pop(name, None)
        self._install(self._metadata.without_topics(names), names)

    async def refresh(
        self,
        topics: Iterable[str] | None = None,
        *,
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> ClusterMetadata:
        self._track(topics or ())
        target = self._started_seq + 1
        self._urgent = True
        self._update_needed = True
        self._wakeup.set()
        with timeout_scope(timeout, lambda: "metadata refresh"):
            while self._ok_seq < target:
                if self._fatal is not None and self._fatal_seq >= target:
                    raise self._fatal
                await self._attempt_done.wait()
        return self._metadata

    async def wait_for_topics(
        self,
        topics: Iterable[str],
        timeout: float | None = None,  # noqa: ASYNC109
    ) -> dict[str, TopicMetadata]:
        names = list(dict.fromkeys(topics))
        # A topic not tracked until now is judged on an answer to a request made for it,
        # not on a cached entry (an authorization error may since have been fixed).
        stale = {n for n in self._track(names) if not self._ready(n)}
        asked_after = self._started_seq  # requests numbered above this were sent after now
        result: dict[str, TopicMetadata] = {}

        def describe() -> str:
            missing = [n for n in names if n not in result]
            details = []
            for n in missing:
                t = self._metadata.topics.get(n)
                err = "no response yet" if t is None else (t.error or "0 partitions")
                details.append(f"{n!r} ({getattr(err, '__name__', err)})")
            return "topics not available: " + ", ".join(details)

        with timeout_scope(timeout, describe):
            for name in names:
                while True:
                    t = self._metadata.topics.get(name)
                    if name in stale and self._answered.get(name, 0) > asked_after:
                        stale.discard(name)
                    if t is not None and name not in stale:
                        if t.ready:
                            result[name] = t
                            break
                        if t.fatal:
                            assert t.error is not None
                            raise t.error(f"topic {name!r}")
                    if self._fatal is not None and self._fatal_seq > asked_after:
                        raise self._fatal
                    await self.topic_event(name).wait()
        return result

    def update_leader(
        self,
        topic: str,
        partition: int,
        leader_id: int,
        leader_epoch: int,
        broker: BrokerMetadata | None = None,
    ) -> None:
        snapshot = self._metadata
        if broker is not None:
            snapshot = snapshot.with_brokers([broker])
        updated = snapshot.with_leader(topic, partition, leader_id, leader_epoch)
        if updated is None and snapshot is self._metadata:
            return
        self._install(updated or snapshot, {topic})
        if leader_id not in self._metadata.brokers:
            self.request_update()

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        with anyio.move_on_after(timeout) as scope:
            while not self.ready:
                if self._fatal is not None:
                    raise self._fatal
                await self._attempt_done.wait()
        if scope.cancelled_caught and not self.ready:
            raise KafkaTimeoutError(
                f"no broker of {self.bootstrap_summary} answered within {timeout}s"
                + (f" (last error: {self._last_error})" if self._last_error else "")
            )

    def _track(self, topics: Iterable[str]) -> list[str]:
        """Track ``topics``; wake the refresher for new ones. Returns the new ones."""
        new = [name for name in topics if name not in self._tracked]
        self._tracked.update(new)
        self._new_topics.update(new)
        if self._new_topics:
            self._wakeup.set()
        return new

    def _ready(self, name: str) -> bool:
        t = self._metadata.topics.get(name)
        return t is not None and t.ready

    def _install(self, snapshot: ClusterMetadata, topics: Iterable[str]) -> None:
        """Make ``snapshot`` current; wake the waiters of ``topics``; tell the listeners."""
        old, self._metadata = self._metadata, snapshot
        for node_id, broker in snapshot.brokers.items():
            self._pool.set_address(node_id, broker.host, broker.port)
        for node_id in old.brokers.keys() - snapshot.brokers.keys():
            self._pool.retire(node_id)  # left the cluster: close once idle
        for name in topics:
            event = self._topic_events.pop(name, None)
            if event is not None:
                event.set()
        for callback in list(self._listeners):
            try:
                callback(snapshot)
            except Exception:
                log.exception("metadata listener %r failed", callback)

    # ------------------------------------------------------------------ the refresher

    def defer_bootstrap(self) -> None:
        """``wait_for_bootstrap=False``: the refresher's first request is the bootstrap."""
        self._set_bootstrap_addresses()
        self._urgent = True

    def _set_bootstrap_addresses(self) -> None:
        servers = self._config.bootstrap_servers
        for node_id, (host, port) in zip(self._bootstrap_ids, servers, strict=True):
            self._pool.set_address(node_id, host, port)

    async def bootstrap(self) -> None:
        """Bootstrap now (``wait_for_bootstrap=True``); see "Bootstrap" above."""
        self._set_bootstrap_addresses()

        async def round_() -> None:
            # Every bootstrap server once, in order; the last failure if none answered.
            last: KafkaError | None = None
            for node_id in self._bootstrap_ids:
                try:
                    await self._refresh_from(node_id, sorted(self._tracked))
                    return
                except KafkaError as exc:
                    if not _retriable(exc):
                        raise
                    last = exc
                    log.info("bootstrap server %s failed: %s", self._pool.address(node_id), exc)
            raise last or KafkaConnectionError("no bootstrap server")

        state = RetryState(self._retry, timeout=self._config.bootstrap_timeout_ms / 1000)
        try:
            await retrying(round_, state, what="bootstrap")
        except KafkaTimeoutError as exc:
            last = exc.__cause__
            raise KafkaConnectionError(
                f"unable to bootstrap from {self.bootstrap_summary}: {last}"
            ) from last

    async def run(self) -> None:
        """The refresher task: one Metadata request whenever one is due, forever."""
        while True:
            await self._wait_until_due()
            topics = sorted(self._tracked)
            self._new_topics.clear()
            self._urgent = False
            self._update_needed = False
            node_id = None
            try:
                node_id = self._pool.least_loaded(self.broker_candidates())
                if node_id is None:
                    raise KafkaConnectionError("no broker address known")
                await self._refresh_from(node_id, topics)
            except KafkaError as exc:
                self._maybe_rebootstrap()
                if not self.ready and self._pacing.failures in (1, 10, 100, 1000):
                    # Not bootstrapped yet: say so now and then, not at every retry.
                    log.warning(
                        "no answer from bootstrap servers %s yet (%d attempts): %s",
                        self.bootstrap_summary, self._pacing.failures, exc,
                    )  # fmt: skip
                else:
                    log.debug("metadata refresh via node %s failed: %r", node_id, exc)

    def rebootstrap_required(self) -> None:
        """A broker the metadata named answered a connect with REBOOTSTRAP_REQUIRED
        (KIP-1242: it is not that node of that cluster): go back to the bootstrap servers
        now, as a Metadata answer carrying the code would (with the strategy "none", the
        refresh is only asked for, as Java only disconnects)."""
        self._told_to_rebootstrap = True
        self._maybe_rebootstrap()
        self._update_needed = True
        self._wakeup.set()

    def _maybe_rebootstrap(self) -> None:
        """After a failed refresh: go back to the bootstrap servers if a broker said so
        (REBOOTSTRAP_REQUIRED) or the brokers of the last answer have failed for the trigger
        time (module docstring, "Re-bootstrap")."""
        now = anyio.current_time()
        if self._failing_since is None:
            self._failing_since = now
        told, self._told_to_rebootstrap = self._told_to_rebootstrap, False
        config = self._config
        if config.metadata_recovery_strategy != "rebootstrap":
            if told:
                log.info(
                    "%s %s: a broker answered REBOOTSTRAP_REQUIRED; retrying the known "
                    "brokers (metadata_recovery_strategy=none)",
                    config.role, config.client_id,
                )  # fmt: skip
            return
        if not self._metadata.brokers:  # still (or again) asking the bootstrap servers
            return
        waited = now - self._failing_since
        if not told and waited < config.metadata_recovery_rebootstrap_trigger_ms / 1000:
            return
        self.rebootstraps += 1
        if told:
            log.warning(
                "%s %s: the broker answered REBOOTSTRAP_REQUIRED (KIP-1102); re-bootstrapping "
                "from %s (metadata_recovery_strategy=rebootstrap)",
                config.role, config.client_id, self.bootstrap_summary,
            )  # fmt: skip
        else:
            log.warning(
                "%s %s: no broker of the last metadata answered for %.0f s (%s); "
                "re-bootstrapping from %s (metadata_recovery_strategy=rebootstrap)",
                config.role, config.client_id, waited, self._last_error, self.bootstrap_summary,
            )  # fmt: skip
        self._failing_since = now
        self._fresh_start = True
        # Only the brokers go: the topics stay (their leaders answer the next request), so
        # nothing that waits on the cache sees it empty in between.
        self._metadata = replace(self._metadata, brokers=MappingProxyType({}))
        self._set_bootstrap_addresses()
        self._pacing.succeeded()  # a first try at the bootstrap servers goes out at once
        self._retry_at = now

    async def _wait_until_due(self) -> None:
        while True:
            self._wakeup = anyio.Event()
            now = anyio.current_time()
            if self._pacing.failures:
                due = self._retry_at
            elif self._new_topics or self._urgent:
                due = now
            elif self._update_needed:
                due = self._retry_at
            else:
                last = now if self._last_ok_at is None else self._last_ok_at
                due = last + self._config.metadata_max_age_ms / 1000
            if due <= now:
                return
            with anyio.move_on_after(due - now):
                await self._wakeup.wait()

    async def _refresh_from(self, node_id: int, topics: list[str]) -> None:
        """One Metadata request to ``node_id``; installs the result or records the failure."""
        self._started_seq += 1
        seq = self._started_seq
        try:
            conn = await self._pool.get(node_id)
            version = conn.version_for(MetadataRequest)
            request = MetadataRequest(
                topics=[MetadataRequestTopic(name=t) for t in topics],
                allow_auto_topic_creation=self._config.allow_auto_topic_creation,
            )
            self.requests += 1
            response = await conn.send(
                request,
                version=version,
                limits=_answer_limits(self._config.connection.decode_limits, len(topics)),
            )
            try:
                update = parse_metadata_response(response)
            except ProtocolError as exc:
                # Decoded, but not a sane answer (a partition index past the limits): the
                # broker is broken or hostile, so its connection goes like a garbled one's.
                await conn.aclose()
                where = self._pool.address(node_id) or ("node", node_id)
                raise type(exc)(f"{where[0]}:{where[1]}: Metadata answer: {exc}") from None
        except KafkaError as exc:
            self._last_error = exc
            self.failures += 1
            self._pacing.failed(exc)
            self._retry_at = self._pacing.retry_at
            self._update_needed = True
            if isinstance(exc, RebootstrapRequiredError):
                self._told_to_rebootstrap = True
            self._fatal = None if _retriable(exc) else exc
            self._fatal_seq = seq
            self._finish_attempt(all_topics=self._fatal is not None)
            if self._fatal is not None:
                for callback in list(self._error_listeners):
                    callback(exc)
            raise
        now = anyio.current_time()
        self._pacing.succeeded()
        self._failing_since = None
        self._told_to_rebootstrap = False  # a signal from a bootstrap server: answered since
        self._fatal = None
        self._last_error = None
        self._last_ok_at = now
        self._ok_seq = seq
        if len(update.topics) > len(topics) or not update.topics.keys() <= set(topics):
            # Kafka answers only the topics asked for. Whatever else a broken or hostile
            # broker adds stays out of the cache, which would otherwise grow by a whole
            # answer's worth of topics (up to the decode limits) on every refresh.
            asked = set(topics)
            kept = {n: t for n, t in update.topics.items() if n in asked}
            # Tansu answers a request for no topics with all of them: routine there, so only
            # an answer that adds to a non-empty list is worth a warning.
            log.log(
                logging.WARNING if topics else logging.DEBUG,
                "metadata answer from node %s named %d topic(s) not asked for; ignored",
                node_id, len(update.topics) - len(kept),
            )  # fmt: skip
            update = replace(update, topics=MappingProxyType(kept))
        for name, topic in update.topics.items():
            self._answered[name] = seq
            self._say_if_missing(name, topic, now)
        base = self._metadata
        if self._fresh_start:  # re-bootstrapped: the answer replaces what was known
            self._fresh_start = False
            base = ClusterMetadata(generation=base.generation)
        self._install(base.merge(update), update.topics)
        self._after_refresh(topics)
        # Any two refreshes are a backoff apart at least: the first step of the curve
        # after a round that left nothing unusable.
        stale = self._stale
        self._retry_at = stale.retry_at if stale.failures else now + self._retry.backoff_s(1)
        self._finish_attempt(all_topics=False)

    def _after_refresh(self, requested: list[str]) -> None:
        # Topics we cannot do anything about stop being tracked (their waiters have been
        # woken and raise); anything else still unusable is retried with growing backoff.
        snapshot = self._metadata
        for name in requested:
            t = snapshot.topics.get(name)
            if t is not None and t.fatal:
                self._tracked.discard(name)
        incomplete = any(
            (t := snapshot.topics.get(n)) is None or not t.complete for n in self._tracked
        )
        if incomplete:
            self._stale.failed()
            self._update_needed = True
        else:
            self._stale.succeeded()
        # After bootstrap the broker list is known: keep a bootstrap connection as the
        # connection of the broker at that address, drop the others.
        for boot_id in self._bootstrap_ids:
            if self._pool.has_address(boot_id) and snapshot.brokers:
                addr = self._pool.address(boot_id)
                match = [n for n, b in snapshot.brokers.items() if (b.host, b.port) == addr]
                if not match or not self._pool.adopt(boot_id, match[0]):
                    self._pool.retire(boot_id)

    def _finish_attempt(self, *, all_topics: bool) -> None:
        event, self._attempt_done = self._attempt_done, anyio.Event()
        event.set()
        if all_topics:  # a fatal failure concerns every waiter
            for name in list(self._topic_events):
                self._topic_events.pop(name).set()


def _retriable(exc: KafkaError) -> bool:
    """Whether a failed Metadata request is tried again: REBOOTSTRAP_REQUIRED is not
    retriable as an error (the same request to the same broker gets the same answer), but
    the refresher acts on it and asks again, elsewhere."""
    return exc.retriable or isinstance(exc, RebootstrapRequiredError)


def _answer_limits(base: DecodeLimits, asked: int) -> DecodeLimits | None:
    """The decode limits of a Metadata answer for ``asked`` topics: no more topics than
    asked (Kafka answers exactly those), so a hostile answer costs at most ``asked`` times
    the per-topic partition limit instead of the whole per-answer struct budget. An empty
    list keeps the connection's limits (it means "all topics" to Metadata v0)."""
    if not asked:
        return None
    return replace(base, per_field={**base.per_field, "MetadataResponse.topics": asked})
