"""Cluster-level admin operations: partition reassignments (KIP-455), the KRaft metadata
quorum (KIP-595/KIP-836) and its voters (KIP-853), client-metrics resources (KIP-714) and
unregistering a broker (KIP-500).

Reassignments go to the controller, as the Java client sends them (a KRaft cluster names a
broker there, which forwards); the quorum and its voters, the client-metrics listing and
unregistering go to any broker. Each answer is decoded into the typed results below.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiokafka_ng.admin._core import _AdminCore, broker_error, by_topic
from aiokafka_ng.admin.models import TopicPartition
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import add_raft_voter as arv
from aiokafka_ng.protocol.messages import alter_partition_reassignments as apr
from aiokafka_ng.protocol.messages import describe_quorum as dq
from aiokafka_ng.protocol.messages import list_config_resources as lcr
from aiokafka_ng.protocol.messages import list_partition_reassignments as lpr
from aiokafka_ng.protocol.messages import remove_raft_voter as rrv
from aiokafka_ng.protocol.messages import unregister_broker as ub

__all__ = [
    "NewPartitionReassignment",
    "PartitionReassignment",
    "QuorumInfo",
    "QuorumReplicaState",
]

#: The KRaft metadata log DescribeQuorum asks about.
METADATA_TOPIC = "__cluster_metadata"


@dataclass(frozen=True, slots=True)
class PartitionReassignment:
    """An ongoing reassignment: the full replica set, and who is joining / leaving."""

    replicas: list[int]
    adding_replicas: list[int]
    removing_replicas: list[int]


@dataclass(frozen=True, slots=True)
class NewPartitionReassignment:
    """The replica set a partition should move to (first replica preferred leader)."""

    target_replicas: list[int]


@dataclass(frozen=True, slots=True)
class QuorumReplicaState:
    """A voter or observer of the metadata quorum; timestamps are None when unknown."""

    replica_id: int
    log_end_offset: int
    last_fetch_timestamp: int | None
    last_caught_up_timestamp: int | None


@dataclass(frozen=True, slots=True)
class QuorumInfo:
    """``describe_metadata_quorum``: the leader, its epoch and high watermark, the
    voters and observers, and (v2+) the voters' endpoints."""

    leader_id: int
    leader_epoch: int
    high_watermark: int
    voters: list[QuorumReplicaState]
    observers: list[QuorumReplicaState]
    nodes: dict[int, list[tuple[str, str, int]]]  # node id -> (listener, host, port)


def _replica(r: dq.ReplicaState) -> QuorumReplicaState:
    return QuorumReplicaState(
        r.replica_id,
        r.log_end_offset,
        None if r.last_fetch_timestamp < 0 else r.last_fetch_timestamp,
        None if r.last_caught_up_timestamp < 0 else r.last_caught_up_timestamp,
    )


class ClusterAdminOps(_AdminCore):
    """Reassignments, quorum, client-metrics resources of :class:`AdminClient`."""

    async def list_partition_reassignments(
        self, partitions: Iterable[TopicPartition] | None = None, timeout_ms: int | None = None
    ) -> dict[TopicPartition, PartitionReassignment]:
        """Ongoing reassignments (of ``partitions``, or all); finished ones are absent."""
        tps = None if partitions is None else [TopicPartition(*tp) for tp in partitions]

        async def attempt(deadline: float) -> dict[TopicPartition, PartitionReassignment]:
            req = lpr.ListPartitionReassignmentsRequest(
                timeout_ms=self._server_timeout_ms(deadline),
                topics=None
                if tps is None
                else [
                    lpr.ListPartitionReassignmentsTopics(name=t, partition_indexes=ps)
                    for t, ps in by_topic(tps).items()
                ],
            )
            node = await self._controller()
            resp = await self._send("list_partition_reassignments", node, req, deadline)
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err
            return {
                TopicPartition(t.name, p.partition_index): PartitionReassignment(
                    list(p.replicas), list(p.adding_replicas), list(p.removing_replicas)
                )
                for t in resp.topics
                for p in t.partitions
            }

        return await self._run_one("list_partition_reassignments", attempt, timeout_ms)

    async def alter_partition_reassignments(
        self,
        reassignments: Mapping[TopicPartition, NewPartitionReassignment | None],
        timeout_ms: int | None = None,
    ) -> ItemResults[TopicPartition, None]:
        """Start moving partitions to new replica sets; None cancels a partition's ongoing
        reassignment. One outcome per partition (the move itself continues in the cluster:
        watch it with :meth:`list_partition_reassignments`)."""
        wanted = {TopicPartition(*tp): r for tp, r in reassignments.items()}

        async def attempt(
            pending: list[TopicPartition], deadline: float
        ) -> dict[TopicPartition, KafkaError | None]:
            req = apr.AlterPartitionReassignmentsRequest(
                timeout_ms=self._server_timeout_ms(deadline),
                topics=[
                    apr.ReassignableTopic(
                        name=t,
                        partitions=[
                            apr.ReassignablePartition(
                                partition_index=p,
                                replicas=None
                                if (r := wanted[TopicPartition(t, p)]) is None
                                else list(r.target_replicas),
                            )
                            for p in ps
                        ],
                    )
                    for t, ps in by_topic(pending).items()
                ],
            )
            node = await self._controller()
            resp = await self._send("alter_partition_reassignments", node, req, deadline)
            top = broker_error(resp.error_code, resp.error_message)
            if top is not None:
                return dict.fromkeys(pending, top)
            return {
                TopicPartition(t.name, p.partition_index): broker_error(
                    p.error_code, p.error_message
                )
                for t in resp.responses
                for p in t.partitions
            }

        return await self._run("alter_partition_reassignments", wanted, attempt, timeout_ms)

    async def describe_metadata_quorum(self, timeout_ms: int | None = None) -> QuorumInfo:
        """The KRaft metadata quorum: leader, epoch, high watermark, voters, observers."""

        async def attempt(deadline: float) -> QuorumInfo:
            req = dq.DescribeQuorumRequest(
                topics=[
                    dq.DescribeQuorumRequestTopicData(
                        topic_name=METADATA_TOPIC,
                        partitions=[dq.DescribeQuorumRequestPartitionData(partition_index=0)],
                    )
                ]
            )
            node = await self._any_node()
            resp = await self._send("describe_metadata_quorum", node, req, deadline)
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err
            parts = [p for t in resp.topics for p in t.partitions]
            if len(parts) != 1:
                raise KafkaError(
                    f"describe_metadata_quorum: expected one partition, got {len(parts)}"
                )
            (p,) = parts
            err = broker_error(p.error_code, p.error_message)
            if err is not None:
                raise err
            return QuorumInfo(
                p.leader_id,
                p.leader_epoch,
                p.high_watermark,
                [_replica(r) for r in p.current_voters],
                [_replica(r) for r in p.observers],
                {n.node_id: [(x.name, x.host, x.port) for x in n.listeners] for n in resp.nodes},
            )

        return await self._run_one("describe_metadata_quorum", attempt, timeout_ms)

    async def list_client_metrics_resources(self, timeout_ms: int | None = None) -> list[str]:
        """Names of the client-metrics subscriptions (KIP-714) configured in the cluster."""

        async def attempt(deadline: float) -> list[str]:
            node = await self._any_node()
            # Kafka 4.1 renamed the API (key 74) ListConfigResources; its v0, the version
            # negotiated (tools/protocol_caps.py), is ListClientMetricsResources unchanged.
            resp = await self._send(
                "list_client_metrics_resources",
                node,
                lcr.ListConfigResourcesRequest(),
                deadline,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                raise err
            return sorted(r.resource_name for r in resp.config_resources)

        return await self._run_one("list_client_metrics_resources", attempt, timeout_ms)

    async def unregister_broker(self, broker_id: int, timeout_ms: int | None = None) -> None:
        """Remove a broker that left for good from the KRaft cluster's registrations."""

        async def attempt(deadline: float) -> None:
            node = await self._any_node()
            resp = await self._send(
                "unregister_broker", node, ub.UnregisterBrokerRequest(broker_id=broker_id), deadline
            )
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err

        await self._run_one("unregister_broker", attempt, timeout_ms)

    async def add_raft_voter(
        self,
        voter_id: int,
        voter_directory_id: uuid.UUID,
        endpoints: Iterable[tuple[str, str, int]],
        cluster_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Add a controller to the KRaft quorum's voters (KIP-853): its id, metadata log
        directory id and ``(listener, host, port)`` endpoints."""
        listeners = [arv.Listener(name=n, host=h, port=p) for n, h, p in endpoints]

        async def attempt(deadline: float) -> None:
            node = await self._any_node()
            req = arv.AddRaftVoterRequest(
                cluster_id=cluster_id,
                timeout_ms=self._server_timeout_ms(deadline),
                voter_id=voter_id,
                voter_directory_id=voter_directory_id,
                listeners=listeners,
            )
            resp = await self._send("add_raft_voter", node, req, deadline)
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err

        await self._run_one("add_raft_voter", attempt, timeout_ms)

    async def remove_raft_voter(
        self,
        voter_id: int,
        voter_directory_id: uuid.UUID,
        cluster_id: str | None = None,
        timeout_ms: int | None = None,
    ) -> None:
        """Remove a controller from the KRaft quorum's voters (KIP-853)."""

        async def attempt(deadline: float) -> None:
            node = await self._any_node()
            req = rrv.RemoveRaftVoterRequest(
                cluster_id=cluster_id, voter_id=voter_id, voter_directory_id=voter_directory_id
            )
            resp = await self._send("remove_raft_voter", node, req, deadline)
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err

        await self._run_one("remove_raft_voter", attempt, timeout_ms)
