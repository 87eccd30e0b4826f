"""The cluster layer: metadata cache and refresh, connections by node id, request routing,
and the runtime every client stands on (:mod:`.runtime`: lifecycle, tasks, status).

Public to the producer, consumer and admin client (never to users directly)::

    async with Cluster(ClusterConfig(bootstrap_servers=parse_bootstrap_servers("h:9092"))) as c:
        topics = await c.wait_for_topics(["events"])
        # A control request, routed and retried (its type names the response's):
        offsets = await c.call(list_offsets_request, Leader("events", 0), timeout=30)
        committed = await c.call(offset_fetch_request, Coordinator("my-group"), timeout=30)
        # Once to one node, as it is (the data plane's drivers pace their own sends):
        response = await c.request(await c.leader_for("events", 0), some_request)
"""

from aiokafka_ng.cluster.client import ClusterClient, Link, Pending
from aiokafka_ng.cluster.cluster import (
    Cluster,
    ClusterConfig,
    ClusterStatistics,
    describe_servers,
    parse_bootstrap_servers,
)
from aiokafka_ng.cluster.host import TaskHost, enter_task_group
from aiokafka_ng.cluster.metadata import (
    BrokerMetadata,
    ClusterMetadata,
    PartitionMetadata,
    TopicMetadata,
    parse_metadata_response,
)
from aiokafka_ng.cluster.pool import (
    ConnectAttempt,
    ConnectionPool,
    Connector,
    NodeStatistics,
    PoolStatistics,
)
from aiokafka_ng.cluster.retry import (
    ANY,
    CONTROLLER,
    ONCE,
    Coordinator,
    Leader,
    Node,
    Periodic,
    Retry,
    RetryState,
    Route,
    unchecked,
)
from aiokafka_ng.cluster.runtime import (
    ClientRuntime,
    ClientState,
    ClientStatistics,
    ClientStatus,
    Supervisor,
    client_status,
)

__all__ = [
    "ANY",
    "CONTROLLER",
    "ONCE",
    "BrokerMetadata",
    "ClientRuntime",
    "ClientState",
    "ClientStatistics",
    "ClientStatus",
    "Cluster",
    "ClusterClient",
    "ClusterConfig",
    "ClusterMetadata",
    "ClusterStatistics",
    "ConnectAttempt",
    "ConnectionPool",
    "Connector",
    "Coordinator",
    "Leader",
    "Link",
    "Node",
    "NodeStatistics",
    "PartitionMetadata",
    "Pending",
    "Periodic",
    "PoolStatistics",
    "Retry",
    "RetryState",
    "Route",
    "Supervisor",
    "TaskHost",
    "TopicMetadata",
    "client_status",
    "describe_servers",
    "enter_task_group",
    "parse_bootstrap_servers",
    "parse_metadata_response",
    "unchecked",
]
