"""Immutable snapshots of cluster metadata, built from MetadataResponse of any version.

A :class:`ClusterMetadata` is never mutated: every refresh, leader hint or merge produces a
new snapshot, so a task holding one sees a consistent picture (brokers, controller, topics)
no matter what the refresher does meanwhile. ``generation`` grows by one per new snapshot
handed out by the :class:`~aiokafka_ng.cluster.Cluster`.

Merging rules (:meth:`ClusterMetadata.merge`):

* brokers, controller and cluster id always come from the newest response (a Metadata
  response always carries the whole broker list);
* a response for some topics replaces just those topics; the others are kept;
* KIP-320: within a topic whose id did not change, a partition whose leader epoch went
  *backwards* keeps the cached entry. A stale broker (or a response that raced a KIP-951
  leader hint) must not undo newer knowledge.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any

from aiokafka_ng.protocol.errors import KafkaError, error_for_code
from aiokafka_ng.protocol.limits import MAX_PARTITIONS_PER_TOPIC, ResponseLimitError
from aiokafka_ng.protocol.messages.metadata import MetadataResponse

__all__ = [
    "BrokerMetadata",
    "ClusterMetadata",
    "PartitionMetadata",
    "TopicMetadata",
    "parse_metadata_response",
]

ZERO_UUID = uuid.UUID(int=0)
_EMPTY: Mapping[Any, Any] = MappingProxyType({})


def _empty() -> Mapping[Any, Any]:
    return _EMPTY


def _error(code: int) -> type[KafkaError] | None:
    return None if code == 0 else error_for_code(code)


@dataclass(frozen=True, slots=True)
class BrokerMetadata:
    """One broker as the cluster advertises it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class PartitionMetadata:
    """One partition: ``leader`` is -1 and ``leader_epoch`` -1 when unknown."""

    partition: int
    leader: int
    leader_epoch: int = -1
    replicas: tuple[int, ...] = ()
    isr: tuple[int, ...] = ()
    offline_replicas: tuple[int, ...] = ()
    error: type[KafkaError] | None = None


@dataclass(frozen=True, slots=True)
class TopicMetadata:
    """One topic. ``error`` is the topic-level error class (None when fine)."""

    name: str
    topic_id: uuid.UUID = ZERO_UUID
    is_internal: bool = False
    error: type[KafkaError] | None = None
    partitions: Mapping[int, PartitionMetadata] = field(default_factory=_empty)

    @property
    def ready(self) -> bool:
        """Usable: no topic error and at least one partition.

        A topic reported without error but with zero partitions counts as unknown (it is
        still being created), as franz-go and librdkafka treat it.
        """
        return self.error is None and len(self.partitions) > 0

    @property
    def complete(self) -> bool:
        """Ready and every partition has a leader (nothing left to refresh for)."""
        return self.ready and all(p.leader >= 0 for p in self.partitions.values())

    @property
    def fatal(self) -> bool:
        """The topic error is one that retrying metadata will not fix (e.g. authorization)."""
        return self.error is not None and not (self.error.retriable or self.error.invalid_metadata)

    def leader_for(self, partition: int) -> int | None:
        """The partition's leader id, or None when unknown or the partition does not exist."""
        p = self.partitions.get(partition)
        if p is None or p.leader < 0:
            return None
        return p.leader

    def available_partitions(self) -> tuple[int, ...]:
        """Partition indexes that currently have a leader, sorted."""
        return tuple(sorted(i for i, p in self.partitions.items() if p.leader >= 0))


@dataclass(frozen=True, slots=True)
class ClusterMetadata:
    """An immutable picture of the cluster. ``controller_id`` is None when unknown."""

    brokers: Mapping[int, BrokerMetadata] = field(default_factory=_empty)
    controller_id: int | None = None
    cluster_id: str | None = None
    topics: Mapping[str, TopicMetadata] = field(default_factory=_empty)
    generation: int = 0

    def topic(self, name: str) -> TopicMetadata | None:
        return self.topics.get(name)

    def leader_for(self, topic: str, partition: int) -> int | None:
        t = self.topics.get(topic)
        return None if t is None else t.leader_for(partition)

    def partitions_for_topic(self, topic: str) -> tuple[int, ...] | None:
        """Sorted partition indexes, or None when the topic is not (yet) usable."""
        t = self.topics.get(topic)
        if t is None or not t.ready:
            return None
        return tuple(sorted(t.partitions))

    def partitions_led_by(self, node_id: int) -> list[tuple[str, int]]:
        """Every (topic, partition) whose leader is ``node_id``."""
        return [
            (t.name, p.partition)
            for t in self.topics.values()
            for p in t.partitions.values()
            if p.leader == node_id
        ]

    def merge(self, update: ClusterMetadata, *, replace_topics: bool = False) -> ClusterMetadata:
        """A new snapshot: ``update`` applied on top of this one (see the module docstring).

        ``replace_topics=True`` (a response to an "all topics" request) drops cached topics
        the update does not mention. ``generation`` becomes this snapshot's plus one.
        """
        topics: dict[str, TopicMetadata] = {} if replace_topics else dict(self.topics)
        for name, new in update.topics.items():
            old = self.topics.get(name)
            topics[name] = new if old is None else _merge_topic(old, new)
        return ClusterMetadata(
            brokers=update.brokers,
            controller_id=update.controller_id,
            cluster_id=update.cluster_id,
            topics=MappingProxyType(topics),
            generation=self.generation + 1,
        )

    def with_leader(
        self, topic: str, partition: int, leader: int, leader_epoch: int
    ) -> ClusterMetadata | None:
        """Apply a KIP-951 leader hint; None when it tells us nothing new.

        The hint wins only if its epoch is newer than the cached one (or the cached one is
        unknown) -- hints from two responses can arrive out of order.
        """
        t = self.topics.get(topic)
        if t is None or leader < 0:
            return None
        old = t.partitions.get(partition)
        if old is None:
            return None
        if old.leader_epoch >= 0 and leader_epoch <= old.leader_epoch:
            return None
        if old.leader == leader and old.leader_epoch == leader_epoch:
            return None
        parts = dict(t.partitions)
        parts[partition] = replace(old, leader=leader, leader_epoch=leader_epoch, error=None)
        topics = dict(self.topics)
        topics[topic] = replace(t, partitions=MappingProxyType(parts))
        return replace(self, topics=MappingProxyType(topics), generation=self.generation + 1)

    def with_brokers(self, extra: Iterable[BrokerMetadata]) -> ClusterMetadata:
        """Add brokers not yet known (e.g. KIP-951 node endpoints); known ones are kept."""
        brokers = dict(self.brokers)
        added = False
        for b in extra:
            if b.node_id not in brokers:
                brokers[b.node_id] = b
                added = True
        if not added:
            return self
        return replace(self, brokers=MappingProxyType(brokers), generation=self.generation + 1)

    def without_topics(self, names: Iterable[str]) -> ClusterMetadata:
        topics = dict(self.topics)
        for n in names:
            topics.pop(n, None)
        return replace(self, topics=MappingProxyType(topics), generation=self.generation + 1)


def _merge_topic(old: TopicMetadata, new: TopicMetadata) -> TopicMetadata:
    # A recreated topic (different id) starts from scratch: its epochs restarted too.
    if old.topic_id != ZERO_UUID and new.topic_id != ZERO_UUID and old.topic_id != new.topic_id:
        return new
    if not old.partitions or not new.partitions:
        return new
    parts: dict[int, PartitionMetadata] | None = None
    for index, p in new.partitions.items():
        cached = old.partitions.get(index)
        if cached is not None and p.leader_epoch >= 0 and cached.leader_epoch > p.leader_epoch:
            if parts is None:
                parts = dict(new.partitions)
            parts[index] = cached
    if parts is None:
        return new
    return replace(new, partitions=MappingProxyType(parts))


def parse_metadata_response(response: MetadataResponse) -> ClusterMetadata:
    """Build a snapshot (generation 0) from a decoded ``MetadataResponse`` of any version.

    Fields absent in old versions carry the codec's defaults (rack None, controller -1,
    leader epoch -1, zero topic id), which map to "unknown" here. Topics without a name
    (v12+: queried by id and unknown) are skipped -- we only ever ask by name. A top-level
    error (v13+) is raised: REBOOTSTRAP_REQUIRED as ``RebootstrapRequiredError``.

    A partition index outside ``0 <= index < MAX_PARTITIONS_PER_TOPIC`` raises
    ResponseLimitError: the producer keeps a queue per index up to the highest one, so one
    partition numbered 2**31 - 1 would make it allocate two billion of them. (Kafka numbers
    a topic's partitions 0..n-1; the decoder already holds n to the same limit.)
    """
    if response.error_code:
        # v13+: the whole request failed (Kafka's error answer has no brokers and every
        # topic failing with the same code), e.g. REBOOTSTRAP_REQUIRED (KIP-1102). Installed,
        # it would read as a cluster without brokers or topics.
        raise error_for_code(response.error_code)("Metadata answer: top-level error")
    brokers = {
        b.node_id: BrokerMetadata(b.node_id, b.host, b.port, b.rack) for b in response.brokers
    }
    topics: dict[str, TopicMetadata] = {}
    for t in response.topics:
        if t.name is None:
            continue
        for p in t.partitions:
            if not 0 <= p.partition_index < MAX_PARTITIONS_PER_TOPIC:
                raise ResponseLimitError(
                    f"MetadataResponsePartition.partition_index {p.partition_index} of topic "
                    f"{t.name!r} is outside 0..{MAX_PARTITIONS_PER_TOPIC - 1}"
                )
        parts = {
            p.partition_index: PartitionMetadata(
                partition=p.partition_index,
                leader=p.leader_id,
                leader_epoch=p.leader_epoch,
                replicas=tuple(p.replica_nodes),
                isr=tuple(p.isr_nodes),
                offline_replicas=tuple(p.offline_replicas),
                error=_error(p.error_code),
            )
            for p in t.partitions
        }
        topics[t.name] = TopicMetadata(
            name=t.name,
            topic_id=t.topic_id,
            is_internal=t.is_internal,
            error=_error(t.error_code),
            partitions=MappingProxyType(parts),
        )
    controller = response.controller_id
    return ClusterMetadata(
        brokers=MappingProxyType(brokers),
        controller_id=controller if controller >= 0 else None,
        cluster_id=response.cluster_id,
        topics=MappingProxyType(topics),
    )
