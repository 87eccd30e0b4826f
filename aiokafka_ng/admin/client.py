"""``AdminClient``: topics, configs, offsets, groups, ACLs and more, as coroutines.

The operations live in mixins by area (``_topics``, ``_configs``, ``_partitions``,
``_groups``, ``_acls``, ``_scram``, ``_quotas``, ``cluster_admin`` for reassignments and
the quorum, ``txn_admin`` for fencing and aborts, ``tokens`` for delegation tokens,
``features`` for features and all-types group listing, ``replica_dirs`` for JBOD moves,
``share_groups`` for KIP-932 share groups, and ``offset_reset`` for lag and offset resets);
routing and the retry driver in ``_core``.
This module holds the config and the lifecycle -- ``start()``/``close(timeout)``/``async
with``, ``status()``, ``statistics()`` -- which is the client's
:class:`~aiokafka_ng.cluster.ClientRuntime`, the same for every client: the
:class:`Cluster` is entered and left in a task of its own, so the client may be opened in
one task and closed in another. An admin client has no background tasks of its own but
the KIP-714 metrics push (``enable_metrics_push``, off by default as in Java), which the
runtime runs as for the other clients; ``close()`` sends its terminating push.
"""

from __future__ import annotations

import dataclasses
import uuid
from collections.abc import Mapping
from contextlib import AsyncExitStack
from types import TracebackType
from typing import TYPE_CHECKING, Any, Self, Unpack, cast

from aiokafka_ng.admin._acls import AclOps
from aiokafka_ng.admin._configs import ConfigOps
from aiokafka_ng.admin._groups import GroupOps
from aiokafka_ng.admin._partitions import PartitionOps
from aiokafka_ng.admin._quotas import QuotaOps
from aiokafka_ng.admin._scram import ScramOps
from aiokafka_ng.admin._topics import TopicOps
from aiokafka_ng.admin.cluster_admin import ClusterAdminOps
from aiokafka_ng.admin.config import AdminConfig
from aiokafka_ng.admin.features import FeatureOps
from aiokafka_ng.admin.offset_reset import OffsetToolOps
from aiokafka_ng.admin.replica_dirs import ReplicaDirOps
from aiokafka_ng.admin.share_groups import ShareGroupOps
from aiokafka_ng.admin.tokens import TokenOps
from aiokafka_ng.admin.txn_admin import TxnAdminOps
from aiokafka_ng.cluster import (
    ClientRuntime,
    ClientState,
    ClientStatistics,
    ClientStatus,
    Cluster,
    describe_servers,
)
from aiokafka_ng.cluster.telemetry import (
    MetricKind,
    TelemetryEngine,
    connection_table,
    table_collector,
)
from aiokafka_ng.errors import IllegalStateError
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.latency import LatencyRecorder

if TYPE_CHECKING:
    from aiokafka_ng._settings import AdminSettings

__all__ = ["TELEMETRY_METRICS", "TELEMETRY_NODE_METRICS", "AdminClient", "AdminStatistics"]


@dataclasses.dataclass(frozen=True, slots=True)
class AdminStatistics(ClientStatistics):
    """The admin client's ``statistics()`` snapshot: the part every client's has (state,
    client id, the cluster's counters) and the round trips of its operations' requests."""

    #: By broker node id: ``{"count", "avg", "max"}`` (ms) of the requests the operations
    #: sent there and got an answer to (over the client's life).
    request_latency_ms_by_node: dict[int, dict[str, float]] = dataclasses.field(
        default_factory=dict
    )


_GAUGE = MetricKind.GAUGE

#: KIP-714's names (after ``org.apache.kafka.``) of what the admin client pushes: what Java's
#: admin client pushes (Kafka 4.4, seen by tests/kafka/test_kafka_telemetry.py's receiver)
#: and our statistics measure alike -- its connections (group ``admin-client-metrics``)...
TELEMETRY_METRICS = connection_table("admin.client")
#: ... and the request latency by broker (``admin-client-node-metrics``, attribute
#: ``node_id``). Ours is over the client's life, Java's over its last two 30 s windows.
TELEMETRY_NODE_METRICS = {
    "request_latency_ms_by_node.avg": ("admin.client.node.request.latency.avg", _GAUGE),
    "request_latency_ms_by_node.max": ("admin.client.node.request.latency.max", _GAUGE),
}


class AdminClient(
    OffsetToolOps,
    TxnAdminOps,
    ReplicaDirOps,
    ShareGroupOps,
    TopicOps,
    ConfigOps,
    PartitionOps,
    GroupOps,
    AclOps,
    ScramOps,
    QuotaOps,
    ClusterAdminOps,
    TokenOps,
    FeatureOps,
):
    """Kafka admin client; use as ``async with AdminClient(bootstrap_servers=...) as admin``.

    Keyword arguments are :class:`AdminConfig` fields (``ConfigError`` names every bad
    one). Every operation takes ``timeout_ms`` bounding it as a whole, retries included
    (default ``default_api_timeout_ms``). Operations on several items return
    :class:`~aiokafka_ng.admin.results.ItemResults`; the others return their result or
    raise. A broker that lacks an operation's API raises ``UnsupportedVersionError``
    naming the operation.
    """

    def __init__(self, **config: Unpack[AdminSettings]) -> None:
        # The validators take more than the fields' types (the TypedDict's).
        self._config = AdminConfig(**cast("dict[str, Any]", config))
        self._backoff = ExponentialBackoff.retry(
            self._config.retry_backoff_ms, self._config.retry_backoff_max_ms
        )
        self._runtime = ClientRuntime(
            "admin",
            client_id=self._config.client_id,
            bootstrap_servers=self._config.bootstrap_servers,
            started_twice="this AdminClient is {state}; start() runs once",
        )
        self._next_any = 0
        self._request_latency: dict[int, LatencyRecorder] = {}

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> AdminClient:
        """Build from Kafka-style properties (``{"bootstrap.servers": "h:9092"}``)."""
        config: AdminConfig = AdminConfig.from_properties(properties)
        return cls(**config.model_dump(exclude_unset=True))

    @property
    def config(self) -> AdminConfig:
        return self._config

    async def start(self) -> None:
        """Open the cluster (``async with`` does this). The client does not wait for a
        broker (see :meth:`wait_ready`). Once only: ``IllegalStateError`` on a started or
        closed client. ``start()`` and ``close()`` may run in different tasks."""
        self._runtime.check_new()
        # Admin calls must not create topics as a side effect of looking up leaders.
        cluster_config = dataclasses.replace(
            self._config.cluster_config(), allow_auto_topic_creation=False, role="admin"
        )
        await self._runtime.start(Cluster(cluster_config), self._open)

    async def _open(self, cluster: Cluster, stack: AsyncExitStack) -> None:
        """Start the metrics push, if on (run in the runtime's host task)."""
        cfg = self._config
        if cfg.enable_metrics_push:
            # No resource attributes: Java's admin client names none (the broker adds the
            # client id, software and address).
            engine = TelemetryEngine(
                table_collector(self.statistics, TELEMETRY_METRICS, per_node=TELEMETRY_NODE_METRICS)
            )
            self._runtime.push_metrics(engine, request_timeout=cfg.request_timeout_ms / 1000)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self, timeout: float | None = None) -> None:  # noqa: ASYNC109 (public API)
        """Close every connection; idempotent. May run in another task than ``start()``.

        An admin client holds no queued work to finish: operations still running in other
        tasks fail with a connection error. With ``enable_metrics_push`` and a broker
        subscribed to its metrics, the terminating push (KIP-714) is sent first, within
        ``timeout`` seconds (None: ``request_timeout_ms``; 0: none is sent); otherwise the
        client closes at once. Closing a client that was never started just marks it
        closed."""
        runtime = self._runtime
        if not runtime.begin_close():
            return
        try:
            limit = self._config.request_timeout_ms / 1000 if timeout is None else timeout
            await runtime.stop_metrics(max(0.0, limit))
        finally:
            await runtime.finish_close()

    async def client_instance_id(self, timeout: float = 0.0) -> uuid.UUID | None:  # noqa: ASYNC109
        """The id the brokers gave this client for its metrics (KIP-714; Java's
        ``Admin.clientInstanceId``), waiting up to ``timeout`` seconds for the first
        telemetry subscription; None if there is none yet (or the brokers have no telemetry
        plugin). ``IllegalStateError`` when ``enable_metrics_push`` is off or the client is
        not started."""
        return await self._runtime.client_instance_id(timeout)

    async def wait_ready(self, timeout: float | None = None) -> None:  # noqa: ASYNC109
        """Wait until a broker answered (the client opens without the cluster). For
        scripts that want to fail fast: ``KafkaTimeoutError`` naming the bootstrap servers."""
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise IllegalStateError("this AdminClient is not open")
        await cluster.wait_ready(timeout)

    def status(self) -> ClientStatus:
        """Health at a glance, without waiting (see :class:`ClientStatus`): ready only
        while running and connected."""
        return self._runtime.status()

    def statistics(self) -> AdminStatistics:
        """Counters for monitoring and tests, in any state (never blocks): the common part
        (state, client id, the cluster's counters; None before ``start()``) and the request
        latency by broker."""
        return self._runtime.statistics(
            AdminStatistics,
            request_latency_ms_by_node={
                node: rec.snapshot() for node, rec in self._request_latency.items()
            },
        )

    def __repr__(self) -> str:
        state = "open" if self._runtime.state is ClientState.RUNNING else "closed"
        return f"<AdminClient {describe_servers(self._config.bootstrap_addresses)} {state}>"
