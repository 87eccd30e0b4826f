"""Topic and cluster operations: create/delete/list/describe topics, partitions, cluster.

Creating and deleting topics and partitions goes to the controller (NOT_CONTROLLER makes
the driver refresh metadata and retry on the new one); describing and listing asks any
broker with a Metadata request of our own, so the answer is the broker's, not a cache.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Iterable, Mapping

import anyio

from aiokafka_ng.admin._core import Final, _AdminCore, broker_error
from aiokafka_ng.admin.models import (
    ClusterDescription,
    ConfigEntry,
    ConfigSource,
    CreatedTopic,
    NewPartitions,
    NewTopic,
    Node,
    PartitionInfo,
    TopicDescription,
    TopicListing,
    decode_authorized_operations,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.cluster.metadata import ZERO_UUID
from aiokafka_ng.cluster.topics import listed_topics
from aiokafka_ng.errors import (
    InvalidPartitionsError,
    InvalidReplicationFactorError,
    InvalidRequestError,
    InvalidTopicError,
    KafkaError,
    UnknownTopicOrPartitionError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages.create_partitions import (
    CreatePartitionsAssignment,
    CreatePartitionsRequest,
    CreatePartitionsTopic,
)
from aiokafka_ng.protocol.messages.create_topics import (
    CreatableReplicaAssignment,
    CreatableTopic,
    CreatableTopicConfig,
    CreateTopicsRequest,
)
from aiokafka_ng.protocol.messages.delete_topics import (
    DeleteTopicsRequest,
    DeleteTopicState,
)
from aiokafka_ng.protocol.messages.describe_cluster import DescribeClusterRequest

__all__ = ["validate_topic_name"]

_LEGAL_TOPIC = re.compile(r"[a-zA-Z0-9._-]+")
_MAX_TOPIC_LEN = 249


def validate_topic_name(name: str) -> InvalidTopicError | None:
    """Kafka's topic name rules (``Topic.validate``); the error, or None when legal.

    Checked on the client because not every broker does (Tansu accepts any name).
    """
    if not name:
        return InvalidTopicError("topic name is empty")
    if name in (".", ".."):
        return InvalidTopicError(f"topic name cannot be {name!r}")
    if len(name) > _MAX_TOPIC_LEN:
        return InvalidTopicError(
            f"topic name is {len(name)} characters long, the limit is {_MAX_TOPIC_LEN}"
        )
    if not _LEGAL_TOPIC.fullmatch(name):
        return InvalidTopicError(f"topic name {name!r} has characters outside [a-zA-Z0-9._-]")
    return None


def _no_such_topic(name: str) -> UnknownTopicOrPartitionError:
    """UNKNOWN_TOPIC_OR_PARTITION for a whole topic, said as such: the code's own text ("The
    broker does not host this topic-partition") reads as a fault of the broker's."""
    return UnknownTopicOrPartitionError(
        f"topic {name!r} does not exist (UNKNOWN_TOPIC_OR_PARTITION)"
    )


def _topic_id(value: uuid.UUID) -> uuid.UUID | None:
    return None if value == ZERO_UUID else value


def _check_new_topic(topic: NewTopic) -> KafkaError | None:
    """What the Java client and the broker would reject, found before sending."""
    err = validate_topic_name(topic.name)
    if err is not None:
        return err
    for name, value, error in (
        ("num_partitions", topic.num_partitions, InvalidPartitionsError),
        ("replication_factor", topic.replication_factor, InvalidReplicationFactorError),
    ):
        if value.__class__ is not int:
            return error(f"{topic.name}: {name} must be an int (got {value!r})")
        if value == 0 or value < -1:
            return error(f"{topic.name}: {name} must be positive or -1 (got {value})")
    if topic.replication_factor > 32767:
        return InvalidReplicationFactorError(
            f"{topic.name}: replication_factor {topic.replication_factor} exceeds int16"
        )
    if topic.replica_assignments:
        if topic.num_partitions != -1 or topic.replication_factor != -1:
            return InvalidRequestError(
                f"{topic.name}: with replica_assignments, num_partitions and "
                "replication_factor must both be -1"
            )
        sizes = {len(brokers) for brokers in topic.replica_assignments.values()}
        if 0 in sizes or len(sizes) > 1:
            return InvalidReplicationFactorError(
                f"{topic.name}: every partition needs the same, non-zero number of replicas"
            )
    return None


def _creatable(topic: NewTopic) -> CreatableTopic:
    assignments = [
        CreatableReplicaAssignment(partition_index=p, broker_ids=list(brokers))
        for p, brokers in sorted((topic.replica_assignments or {}).items())
    ]
    configs = [CreatableTopicConfig(name=k, value=v) for k, v in topic.topic_configs.items()]
    return CreatableTopic(
        name=topic.name,
        num_partitions=topic.num_partitions,
        replication_factor=topic.replication_factor,
        assignments=assignments,
        configs=configs,
    )


class TopicOps(_AdminCore):
    """Topic, partition and cluster-level operations of :class:`AdminClient`."""

    async def create_topics(
        self,
        new_topics: Iterable[NewTopic],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, CreatedTopic]:
        """Create topics on the controller; one outcome per topic name.

        Names that break Kafka's rules fail with ``InvalidTopicError`` without being sent.
        ``validate_only`` asks the broker to check without creating (CreateTopics v1+).
        """
        by_name = {t.name: t for t in new_topics}
        invalid = {n: e for n, t in by_name.items() if (e := _check_new_topic(t)) is not None}

        async def attempt(
            names: list[str], deadline: float
        ) -> dict[str, CreatedTopic | BaseException]:
            out: dict[str, CreatedTopic | BaseException] = {}
            req = CreateTopicsRequest(
                topics=[_creatable(by_name[n]) for n in names],
                timeout_ms=self._server_timeout_ms(deadline),
                validate_only=validate_only,
            )
            node = await self._controller()
            resp = await self._send(
                "create_topics", node, req, deadline, min_version=1 if validate_only else None
            )
            for t in resp.topics:
                err = broker_error(t.error_code, t.error_message)
                out[t.name] = err or CreatedTopic(
                    name=t.name,
                    topic_id=_topic_id(t.topic_id),
                    num_partitions=t.num_partitions,
                    replication_factor=t.replication_factor,
                    configs=[
                        ConfigEntry(
                            name=c.name,
                            value=c.value,
                            source=ConfigSource.parse(c.config_source),
                            is_read_only=c.read_only,
                            is_sensitive=c.is_sensitive,
                        )
                        for c in t.configs or ()
                    ],
                )
            return out

        valid = [n for n in by_name if n not in invalid]
        sent = await self._run("create_topics", valid, attempt, timeout_ms) if valid else {}
        outcomes = {**sent, **invalid}
        return ItemResults("create_topics", {n: outcomes[n] for n in by_name})

    async def delete_topics(
        self, topics: Iterable[str], timeout_ms: int | None = None
    ) -> ItemResults[str, None]:
        """Delete topics on the controller; one outcome (None on success) per name."""

        async def attempt(names: list[str], deadline: float) -> dict[str, BaseException | None]:
            req = DeleteTopicsRequest(
                topics=[DeleteTopicState(name=n) for n in names],
                topic_names=list(names),
                timeout_ms=self._server_timeout_ms(deadline),
            )
            node = await self._controller()
            resp = await self._send("delete_topics", node, req, deadline)
            out: dict[str, BaseException | None] = {}
            for r in resp.responses:
                if r.name is None:
                    continue
                err = broker_error(r.error_code, r.error_message)
                # Retrying will not make a missing topic exist.
                missing = isinstance(err, UnknownTopicOrPartitionError)
                out[r.name] = Final(_no_such_topic(r.name)) if missing else err
            return out

        return await self._run("delete_topics", topics, attempt, timeout_ms)

    async def create_partitions(
        self,
        new_partitions: Mapping[str, NewPartitions],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, None]:
        """Grow topics to ``NewPartitions.total_count`` partitions (controller).

        A count that does not grow the topic (its current count comes from a metadata
        request first) fails with ``InvalidPartitionsError`` without being sent.
        """
        wanted = dict(new_partitions)
        invalid = await self._not_growing(wanted, timeout_ms)

        async def attempt(names: list[str], deadline: float) -> dict[str, KafkaError | None]:
            topics = []
            for n in names:
                spec = wanted[n]
                assignments = (
                    None
                    if spec.new_assignments is None
                    else [
                        CreatePartitionsAssignment(broker_ids=list(b)) for b in spec.new_assignments
                    ]
                )
                topics.append(
                    CreatePartitionsTopic(name=n, count=spec.total_count, assignments=assignments)
                )
            req = CreatePartitionsRequest(
                topics=topics,
                timeout_ms=self._server_timeout_ms(deadline),
                validate_only=validate_only,
            )
            node = await self._controller()
            resp = await self._send("create_partitions", node, req, deadline)
            return {r.name: broker_error(r.error_code, r.error_message) for r in resp.results}

        valid = [n for n in wanted if n not in invalid]
        sent = await self._run("create_partitions", valid, attempt, timeout_ms) if valid else {}
        outcomes: dict[str, BaseException | None] = {**sent, **invalid}
        return ItemResults("create_partitions", {n: outcomes[n] for n in wanted})

    async def _not_growing(
        self, wanted: Mapping[str, NewPartitions], timeout_ms: int | None
    ) -> dict[str, BaseException]:
        bad: dict[str, BaseException] = {}
        for name, spec in wanted.items():
            if spec.total_count.__class__ is not int or spec.total_count < 1:
                bad[name] = InvalidPartitionsError(
                    f"{name}: total_count must be a positive int (got {spec.total_count!r})"
                )
        names = [n for n in wanted if n not in bad]
        if not names:
            return bad
        try:
            deadline = anyio.current_time() + self._timeout_s(timeout_ms)
            _, meta = await self._metadata("create_partitions", names, deadline, authorized=False)
        except KafkaError:
            return bad  # the broker checks it too
        for name in names:
            tm = meta.topics.get(name)
            current = len(tm.partitions) if tm is not None and tm.partitions else 0
            if current and wanted[name].total_count <= current:
                bad[name] = InvalidPartitionsError(
                    f"{name} already has {current} partitions; create_partitions only grows "
                    f"a topic (asked for {wanted[name].total_count})"
                )
        return bad

    async def list_topics(
        self, include_internal: bool = False, timeout_ms: int | None = None
    ) -> dict[str, TopicListing]:
        """Every topic the cluster has (name -> listing), sorted by name."""

        async def attempt(deadline: float) -> dict[str, TopicListing]:
            _, meta = await self._metadata("list_topics", None, deadline, authorized=False)
            listings = {
                name: TopicListing(name, _topic_id(t.topic_id), t.is_internal)
                for name, t in listed_topics(meta.topics, include_internal=include_internal).items()
            }
            return dict(sorted(listings.items()))

        return await self._run_one("list_topics", attempt, timeout_ms)

    async def describe_topics(
        self,
        topics: Iterable[str],
        include_authorized_operations: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, TopicDescription]:
        """Partitions, leaders, replicas, ISR and topic id of each topic."""

        async def attempt(
            names: list[str], deadline: float
        ) -> dict[str, TopicDescription | BaseException]:
            resp, snap = await self._metadata(
                "describe_topics", names, deadline, authorized=include_authorized_operations
            )

            def node(i: int) -> Node:
                b = snap.brokers.get(i)
                return Node(i, b.host, b.port, b.rack) if b else Node(i, "", -1)

            out: dict[str, TopicDescription | BaseException] = {}
            for t in resp.topics:
                if t.name is None:
                    continue
                err = broker_error(t.error_code)
                if isinstance(err, UnknownTopicOrPartitionError):
                    # Retrying will not make the topic exist.
                    out[t.name] = Final(_no_such_topic(t.name))
                    continue
                if err is not None:
                    out[t.name] = err
                    continue
                parts = sorted(t.partitions, key=lambda p: p.partition_index)
                out[t.name] = TopicDescription(
                    name=t.name,
                    topic_id=_topic_id(t.topic_id),
                    is_internal=t.is_internal,
                    partitions=[
                        PartitionInfo(
                            partition=p.partition_index,
                            leader=node(p.leader_id) if p.leader_id >= 0 else None,
                            leader_epoch=p.leader_epoch,
                            replicas=[node(i) for i in p.replica_nodes],
                            isr=[node(i) for i in p.isr_nodes],
                            offline_replicas=[node(i) for i in p.offline_replicas],
                        )
                        for p in parts
                    ],
                    authorized_operations=decode_authorized_operations(
                        t.topic_authorized_operations
                    )
                    if include_authorized_operations
                    else None,
                )
            return out

        return await self._run("describe_topics", topics, attempt, timeout_ms)

    async def describe_cluster(
        self, include_authorized_operations: bool = False, timeout_ms: int | None = None
    ) -> ClusterDescription:
        """Brokers, controller and cluster id (DescribeCluster; Metadata on old brokers)."""

        async def attempt(deadline: float) -> ClusterDescription:
            node = await self._any_node()
            req = DescribeClusterRequest(
                include_cluster_authorized_operations=include_authorized_operations
            )
            try:
                resp = await self._send("describe_cluster", node, req, deadline)
            except UnsupportedVersionError:
                return await self._cluster_from_metadata(deadline)
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err
            brokers = [Node(b.broker_id, b.host, b.port, b.rack) for b in resp.brokers]
            by_id = {b.node_id: b for b in brokers}
            return ClusterDescription(
                cluster_id=resp.cluster_id or None,
                controller=by_id.get(resp.controller_id),
                brokers=sorted(brokers, key=lambda b: b.node_id),
                authorized_operations=decode_authorized_operations(
                    resp.cluster_authorized_operations
                )
                if include_authorized_operations
                else None,
            )

        return await self._run_one("describe_cluster", attempt, timeout_ms)

    async def _cluster_from_metadata(self, deadline: float) -> ClusterDescription:
        _, snap = await self._metadata("describe_cluster", [], deadline, authorized=False)
        brokers = sorted(
            (Node(b.node_id, b.host, b.port, b.rack) for b in snap.brokers.values()),
            key=lambda b: b.node_id,
        )
        by_id = {b.node_id: b for b in brokers}
        controller = None if snap.controller_id is None else by_id.get(snap.controller_id)
        return ClusterDescription(snap.cluster_id, controller, brokers)
