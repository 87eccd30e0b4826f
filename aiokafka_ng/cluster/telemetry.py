"""KIP-714 client metrics push: ask the broker what to send, send it on its schedule.

Theory of operation
-------------------
A broker with a client-telemetry plugin advertises GetTelemetrySubscriptions (API 71) and
PushTelemetry (API 72); without one it advertises neither, and a client sends nothing. The
protocol is a loop of two requests, which :class:`TelemetryEngine` (synchronous, no I/O)
decides and :class:`TelemetryPusher` (one supervised task) carries out:

1. **Subscribe.** GetTelemetrySubscriptions with our client instance id (zero the first
   time: the broker assigns one). The answer names the metrics wanted (prefixes of metric
   names; ``"*"`` alone: all; none: nothing), the push interval, the accepted compression
   types in the broker's order of preference, the payload limit and the temporality.
2. **Push** every interval -- the first one after a random 0.5-1.5 of it (KIP-714's jitter,
   so that clients started together do not push together) -- a ``MetricsData`` of the
   selected metrics (:mod:`aiokafka_ng.protocol.otlp`), compressed with the broker's first
   accepted codec, cut to ``telemetry_max_bytes``.
3. **Errors** (as Java's ``ClientTelemetryUtils.maybeFetchErrorIntervalMs``):
   UNKNOWN_SUBSCRIPTION_ID (the subscription changed) and UNSUPPORTED_COMPRESSION_TYPE
   re-subscribe at once; TELEMETRY_TOO_LARGE and THROTTLING_QUOTA_EXCEEDED re-subscribe
   after the interval; INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION and anything
   unknown disable telemetry for the client's life. A request that could not be made (no
   connection, timeout, a broker without the API) is retried after the interval (five
   minutes before a subscription is known): another broker may answer.
4. **Close.** The client's ``close()`` sends one last push flagged ``terminating`` (if a
   subscription is known and pushing is on), so the broker can drop the client instance.

Nothing is periodic: the task sleeps until the engine's next deadline, so an idle client
with no subscription sends one request per push interval (five minutes by default) and
does nothing in between; a client whose brokers lack the API sleeps.

*Metrics.* The source is the client's ``statistics()`` snapshot, flattened by
:func:`aiokafka_ng.observability.samples`; a :class:`MetricTable` given by the client maps
sample names to KIP-714's names, which follow Java's ``ClientTelemetryReporter``: the
domain ``org.apache.kafka``, the Java metric group with ``-metrics`` dropped and ``-`` as
``.``, then the metric name (``producer-metrics``/``record-send-total`` ->
``org.apache.kafka.producer.record.send.total``); a per-broker metric (Java's
``<client>-node-metrics``, ``admin-client-node-metrics``/``request-latency-avg`` ->
``org.apache.kafka.admin.client.node.request.latency.avg``) is one point per broker with
Java's ``node_id`` attribute. Only statistics that mean what Java's metric of that name
means are mapped. Totals are OTLP sums (monotonic) and levels gauges, as Java's collector
types them; with delta temporality a sum carries what changed since the last push and that
push's time as its start.
"""

from __future__ import annotations

import enum
import logging
import random
import time
import uuid
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from aiokafka_ng.cluster.retry import ONCE, Node, unchecked
from aiokafka_ng.errors import (
    KafkaConnectionError,
    KafkaError,
    KafkaTimeoutError,
    UnsupportedVersionError,
)
from aiokafka_ng.observability import samples
from aiokafka_ng.protocol.compression import Compression, compress
from aiokafka_ng.protocol.messages.get_telemetry_subscriptions import (
    GetTelemetrySubscriptionsRequest,
    GetTelemetrySubscriptionsResponse,
)
from aiokafka_ng.protocol.messages.push_telemetry import (
    PushTelemetryRequest,
    PushTelemetryResponse,
)
from aiokafka_ng.protocol.otlp import MetricKind, MetricPoint, Temporality, encode_metrics_data

if TYPE_CHECKING:
    from aiokafka_ng.cluster.client import ClusterClient
    from aiokafka_ng.protocol.primitives import ApiMessage, ApiRequest

R = TypeVar("R", bound="ApiMessage")

__all__ = [
    "DEFAULT_PUSH_INTERVAL_MS",
    "DOMAIN",
    "MetricKind",
    "MetricTable",
    "Subscription",
    "TelemetryEngine",
    "TelemetryPusher",
    "TelemetryState",
    "connection_table",
    "metadata_age",
    "table_collector",
]

log = logging.getLogger(__name__)

#: Java's ``ClientTelemetryReporter.DEFAULT_PUSH_INTERVAL_MS``: the wait after a failed
#: request, and the interval when the broker gives none.
DEFAULT_PUSH_INTERVAL_MS = 5 * 60 * 1000
#: KIP-714's metric name domain (Java's ``ClientTelemetryProvider.DOMAIN``).
DOMAIN = "org.apache.kafka"
#: KIP-714: the first push comes after a random 0.5-1.5 of the interval.
_JITTER = (0.5, 1.5)
_ZERO = uuid.UUID(int=0)

_NONE, _INVALID_REQUEST, _INVALID_RECORD, _UNSUPPORTED_VERSION = 0, 42, 87, 35
_UNKNOWN_SUBSCRIPTION_ID, _UNSUPPORTED_COMPRESSION_TYPE = 117, 76
_TELEMETRY_TOO_LARGE, _THROTTLING_QUOTA_EXCEEDED = 118, 89

#: A sample name -> (KIP-714 name without the domain, OTLP kind). Keyed samples (by node
#: id, say) are summed into one point.
MetricTable = Mapping[str, tuple[str, MetricKind]]
#: What a client's ``collect()`` gives: (full name, kind, value, attributes) per metric.
Collected = list[tuple[str, MetricKind, int | float, tuple[tuple[str, str], ...]]]


class TelemetryState(enum.Enum):
    SUBSCRIPTION_NEEDED = "subscription_needed"
    PUSH_NEEDED = "push_needed"
    DISABLED = "disabled"  # an error retrying cannot mend, or closed


@dataclass(frozen=True, slots=True)
class Subscription:
    """What the broker asked for (GetTelemetrySubscriptions' answer)."""

    client_instance_id: uuid.UUID
    subscription_id: int
    push_interval_ms: int
    compression: Compression  # the broker's first accepted codec we have (NONE if none)
    max_bytes: int  # 0: no limit given
    delta: bool
    requested: tuple[str, ...]  # name prefixes; ("*",) all; () none

    def wants(self, name: str) -> bool:
        if self.requested == ("*",):
            return True
        return any(name.startswith(prefix) for prefix in self.requested)


def _first_codec(accepted: list[int]) -> Compression:
    for code in accepted:
        try:
            return Compression(code)
        except ValueError:
            continue  # a codec newer than ours: the next one the broker takes
    return Compression.NONE


class TelemetryEngine:
    """The KIP-714 state machine: which request is due when, what it carries, and what an
    answer changes. No I/O; times are ``now`` (monotonic seconds) and ``wall_ns`` (the
    epoch, for the data points) passed in. ``collect()`` returns the client's metrics as
    ``(name, kind, value, attributes)``, names with the domain."""

    def __init__(
        self,
        collect: Callable[[], Collected],
        *,
        resource: tuple[tuple[str, str], ...] = (),
        scope: tuple[str, str] | None = None,
        rng: random.Random | None = None,
        start_wall_ns: int | None = None,
    ) -> None:
        self._collect = collect
        self._resource = resource
        self._scope = scope
        self._rng = rng or random.Random()
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self.subscription: Subscription | None = None
        #: When the next request is due (monotonic seconds); 0: at once.
        self.due = 0.0
        self._start_ns = time.time_ns() if start_wall_ns is None else start_wall_ns
        # Delta temporality: a sum's value and time at the last push, by (name, attributes).
        self._last: dict[tuple[str, tuple[tuple[str, str], ...]], tuple[int | float, int]] = {}
        self.pushes = 0  # pushes answered without error
        self.truncated_pushes = 0  # pushes cut to telemetry_max_bytes

    def __repr__(self) -> str:
        return f"<TelemetryEngine {self.state.value} due={self.due:.3f}>"

    # ------------------------------------------------------------------ requests

    def subscription_request(self) -> GetTelemetrySubscriptionsRequest:
        sub = self.subscription
        return GetTelemetrySubscriptionsRequest(
            client_instance_id=_ZERO if sub is None else sub.client_instance_id
        )

    def push_request(self, *, wall_ns: int, terminating: bool = False) -> PushTelemetryRequest:
        """The push of the metrics the subscription selects, as of ``wall_ns``."""
        sub = self.subscription
        assert sub is not None
        points = self._points(sub, wall_ns)
        payload = self._encode(sub, points)
        return PushTelemetryRequest(
            client_instance_id=sub.client_instance_id,
            subscription_id=sub.subscription_id,
            terminating=terminating,
            compression_type=int(sub.compression),
            metrics=payload,
        )

    def _points(self, sub: Subscription, wall_ns: int) -> list[MetricPoint]:
        out: list[MetricPoint] = []
        for name, kind, value, attributes in self._collect():
            if not sub.wants(name):
                continue
            if kind is MetricKind.GAUGE:
                out.append(MetricPoint(name, kind, value, wall_ns, attributes))
                continue
            if not sub.delta:
                out.append(MetricPoint(name, kind, value, wall_ns, attributes, self._start_ns))
                continue
            key = (name, attributes)
            last_value, last_ns = self._last.get(key, (0, self._start_ns))
            self._last[key] = (value, wall_ns)
            out.append(
                MetricPoint(
                    name,
                    kind,
                    value - last_value,
                    wall_ns,
                    attributes,
                    last_ns,
                    Temporality.DELTA,
                )
            )
        return out

    def _encode(self, sub: Subscription, points: list[MetricPoint]) -> bytes:
        def encoded(n: int) -> bytes:
            data = encode_metrics_data(points[:n], resource=self._resource, scope=self._scope)
            return data if sub.compression is Compression.NONE else compress(sub.compression, data)

        payload = encoded(len(points))
        if not sub.max_bytes or len(payload) <= sub.max_bytes:
            return payload
        # Over the broker's limit: the most metrics that fit, found by halving then growing
        # back (the size grows with the count, compressed or not, near enough).
        lo, hi = 0, len(points)
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if len(encoded(mid)) <= sub.max_bytes:
                lo = mid
            else:
                hi = mid - 1
        self.truncated_pushes += 1
        log.warning(
            "client telemetry: %d metrics are over the broker's %d bytes; pushing the first %d",
            len(points),
            sub.max_bytes,
            lo,
        )
        return encoded(lo)

    # ------------------------------------------------------------------ answers

    def on_subscription(self, response: GetTelemetrySubscriptionsResponse, now: float) -> None:
        old = self.subscription
        interval_ms = old.push_interval_ms if old is not None else -1
        if self._error(response.error_code, interval_ms, now):
            return
        if response.client_instance_id == _ZERO:
            # Java's validateClientInstanceId throws; a broker that answers so is broken.
            self._disable("the broker assigned no client instance id")
            return
        interval = response.push_interval_ms
        if interval <= 0:
            interval = DEFAULT_PUSH_INTERVAL_MS
        sub = Subscription(
            client_instance_id=response.client_instance_id,
            subscription_id=response.subscription_id,
            push_interval_ms=interval,
            compression=_first_codec(response.accepted_compression_types),
            max_bytes=max(0, response.telemetry_max_bytes),
            delta=response.delta_temporality,
            requested=tuple(response.requested_metrics),
        )
        if old is not None and old.delta != sub.delta:
            self._last.clear()  # deltas restart from the new subscription
        self.subscription = sub
        if not sub.requested:
            # Nothing wanted: ask again after the interval (a subscription may come).
            self.state = TelemetryState.SUBSCRIPTION_NEEDED
            self.due = now + interval / 1000
            return
        # The delta ledger is kept across a re-subscription with the same temporality (Java
        # resets it only when that changes): what was pushed is not pushed again.
        self.state = TelemetryState.PUSH_NEEDED
        self.due = now + interval / 1000 * self._rng.uniform(*_JITTER)
        log.debug("client telemetry subscription %s", sub)

    def on_push(self, response: PushTelemetryResponse, now: float) -> None:
        sub = self.subscription
        assert sub is not None
        if self._error(response.error_code, sub.push_interval_ms, now):
            return
        self.pushes += 1
        self.due = now + sub.push_interval_ms / 1000

    def on_failure(self, exc: BaseException, now: float) -> None:
        """The request was not answered (no connection, timeout, the broker lacks the API):
        try again after the interval (Java waits its default interval)."""
        log.debug("client telemetry request failed: %r", exc)
        sub = self.subscription
        interval_ms = sub.push_interval_ms if sub is not None else DEFAULT_PUSH_INTERVAL_MS
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self.due = now + interval_ms / 1000

    def close(self) -> bool:
        """Stop; True when a terminating push is due (a subscription is being pushed)."""
        pushing = self.state is TelemetryState.PUSH_NEEDED and self.subscription is not None
        self.state = TelemetryState.DISABLED
        return pushing

    def _error(self, code: int, interval_ms: int, now: float) -> bool:
        if code == _NONE:
            return False
        if code in (_UNKNOWN_SUBSCRIPTION_ID, _UNSUPPORTED_COMPRESSION_TYPE):
            wait_ms = 0
        elif code in (_TELEMETRY_TOO_LARGE, _THROTTLING_QUOTA_EXCEEDED):
            wait_ms = interval_ms if interval_ms > 0 else DEFAULT_PUSH_INTERVAL_MS
        else:  # INVALID_REQUEST, INVALID_RECORD, UNSUPPORTED_VERSION, anything unknown
            self._disable(f"the broker answered error code {code}")
            return True
        log.debug("client telemetry: error code %d, subscribing again in %d ms", code, wait_ms)
        self.state = TelemetryState.SUBSCRIPTION_NEEDED
        self.due = now + wait_ms / 1000
        return True

    def _disable(self, why: str) -> None:
        log.info("client telemetry disabled: %s", why)
        self.state = TelemetryState.DISABLED
        self.due = float("inf")


def table_collector(
    statistics: Callable[[], Any],
    table: MetricTable,
    *,
    derived: Callable[[Any], list[tuple[str, MetricKind, int | float]]] | None = None,
    per_node: MetricTable | None = None,
) -> Callable[[], Collected]:
    """A ``collect`` for :class:`TelemetryEngine`: ``statistics()`` flattened, the samples
    ``table`` names renamed (keyed ones summed), plus ``derived(stats)``'s own. The samples
    ``per_node`` names are keyed by broker node id and stay one point per node, with the
    attribute Java's node metrics carry (``node_id``: ``node-<id>``)."""

    def collect() -> Collected:
        stats = statistics()
        totals: dict[str, tuple[MetricKind, int | float]] = {}
        nodes: Collected = []
        for sample in samples(stats):
            node = per_node.get(sample.name) if per_node is not None else None
            entry = node or table.get(sample.name)
            if entry is None:
                continue
            name, kind = entry
            value: int | float = sample.value
            if value == int(value):
                value = int(value)
            key = dict(sample.labels).get("key")
            if node is not None and key is not None:
                nodes.append((f"{DOMAIN}.{name}", kind, value, (("node_id", f"node-{key}"),)))
                continue
            prev = totals.get(name)
            totals[name] = (kind, value if prev is None else prev[1] + value)
        if derived is not None:
            for name, kind, value in derived(stats):
                totals[name] = (kind, value)
        out = [(f"{DOMAIN}.{name}", kind, value, ()) for name, (kind, value) in totals.items()]
        return out + nodes

    return collect


def connection_table(group: str) -> dict[str, tuple[str, MetricKind]]:
    """The connection metrics every client has, in Java's ``<group>-metrics`` (the
    selector's): open connections and connections made."""
    return {
        "cluster.pool.open_connections": (f"{group}.connection.count", MetricKind.GAUGE),
        "cluster.pool.nodes.connects": (f"{group}.connection.creation.total", MetricKind.SUM),
    }


def metadata_age(group: str) -> Callable[[Any], list[tuple[str, MetricKind, int | float]]]:
    """Java's ``metadata-age`` (seconds since the metadata in use was fetched), as a
    ``derived`` for :func:`table_collector`."""

    def derive(stats: Any) -> list[tuple[str, MetricKind, int | float]]:
        cluster = getattr(stats, "cluster", None)
        at = None if cluster is None else cluster.last_refresh_at
        if at is None:
            return []
        return [(f"{group}.metadata.age", MetricKind.GAUGE, anyio.current_time() - at)]

    return derive


class TelemetryPusher:
    """The task that sends what :class:`TelemetryEngine` decides (module docstring).

    Its requests go out on the cluster's one request path (:meth:`Cluster.call
    <aiokafka_ng.cluster.Cluster.call>`, once each: the engine decides what a failure
    means) to one broker, the least loaded when the pusher starts or after its broker
    failed it; it stays with that broker while it answers (KIP-714 asks for the same
    broker while possible). ``timeout`` is each request's bound (the client's
    ``request_timeout_ms``)."""

    def __init__(
        self,
        engine: TelemetryEngine,
        cluster: ClusterClient,
        *,
        timeout: float,
        closing: Callable[[], bool],
    ) -> None:
        self.engine = engine
        self._cluster = cluster
        self._timeout = timeout
        self._closing = closing
        #: The broker pushed to (None: pick the least loaded at the next request).
        self._node: int | None = None
        #: Set once a broker answered a subscription: the client instance id is known.
        self.subscribed = anyio.Event()
        self._stop = anyio.Event()
        self._running: anyio.CancelScope | None = None

    async def run(self) -> None:
        """Until :meth:`close`: sleep to the engine's deadline, send what is due."""
        engine = self.engine
        with anyio.CancelScope() as scope:
            self._running = scope
            while not self._closing() and engine.state is not TelemetryState.DISABLED:
                delay = engine.due - anyio.current_time()
                if delay > 0:
                    with anyio.move_on_after(delay):
                        await self._stop.wait()
                    if self._stop.is_set():
                        return
                    continue
                try:
                    await self._step()
                except Exception:
                    # A bug of ours in building the metrics must not stop the client whose
                    # metrics they are (the supervisor would): telemetry alone stops.
                    log.exception("client telemetry failed; it is off for this client")
                    engine.close()
                    return

    async def _step(self) -> None:
        engine = self.engine
        try:
            if engine.state is TelemetryState.SUBSCRIPTION_NEEDED:
                sub_resp = await self._send(engine.subscription_request())
                engine.on_subscription(sub_resp, anyio.current_time())
                if engine.subscription is not None:
                    self.subscribed.set()
            else:
                push = engine.push_request(wall_ns=time.time_ns())
                push_resp = await self._send(push)
                engine.on_push(push_resp, anyio.current_time())
        except (KafkaError, OSError) as exc:
            if isinstance(exc, UnsupportedVersionError | KafkaTimeoutError | KafkaConnectionError):
                self._node = None  # another broker may have the API, or answer in time
            engine.on_failure(exc, anyio.current_time())

    async def _send(self, request: ApiRequest[R]) -> R:
        """``request`` once to the pusher's broker, its answer unchecked (the engine reads
        the error codes)."""
        node = self._node
        if node is None:
            node, _ = await self._cluster.least_loaded_connection()
            # A bootstrap address (a negative pseudo id) is not kept: once the brokers are
            # known its connection becomes one broker's (or closes), and the id goes.
            self._node = node if node >= 0 else None
        return await self._cluster.call(
            request,
            Node(node),
            retry=ONCE,
            check=unchecked,
            request_timeout=self._timeout,
            what="client telemetry",
        )

    async def close(self, timeout: float) -> None:  # noqa: ASYNC109 (the close's budget)
        """Stop the task and send the terminating push, within ``timeout`` seconds."""
        self._stop.set()
        if self._running is not None:
            self._running.cancel()  # a request in flight is abandoned for the last push
        if not self.engine.close():
            return
        with anyio.move_on_after(min(timeout, self._timeout)):
            try:
                push = self.engine.push_request(wall_ns=time.time_ns(), terminating=True)
                await self._send(push)
            except (KafkaError, OSError) as exc:
                log.debug("client telemetry: the terminating push failed: %r", exc)
