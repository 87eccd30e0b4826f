"""The fake cluster's state: brokers, topics, partitions and leaders, producer ids, offsets.

Synchronous and free of I/O: :mod:`._handlers` reads and changes it to answer requests,
:class:`~aiokafka_ng.testing.fake.FakeKafka` changes it for faults (a node killed, a leader
moved). Placement follows Kafka's defaults where a client can see it: partition ``p`` of a
new topic is led by the ``p``-th live broker in id order (round robin from a per-topic start
offset, as Kafka spreads leaders), replicas are the leader and the next brokers, the ISR is
the live replicas, and every leader change bumps the partition's leader epoch (KIP-101,
KIP-320). Group and transaction coordinators are the leader of the partition of
``__consumer_offsets`` / ``__transaction_state`` that the key hashes to (Java's
``Utils.abs(key.hashCode()) % partitions``), as in Kafka.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field

from aiokafka_ng.testing.fake._log import PartitionLog

__all__ = ["Broker", "FakeCluster", "Partition", "Topic", "java_string_hash"]

#: Partitions of the internal topics the coordinators hash keys onto (Kafka's defaults).
OFFSETS_PARTITIONS = 50
TXN_STATE_PARTITIONS = 50


def java_string_hash(key: str) -> int:
    """Java's ``String.hashCode()`` (UTF-16 code units), as an int32."""
    h = 0
    data = key.encode("utf-16-be")
    for i in range(0, len(data), 2):
        h = (31 * h + ((data[i] << 8) | data[i + 1])) & 0xFFFFFFFF
    return h - (1 << 32) if h >= 1 << 31 else h


def coordinator_partition(key: str, partitions: int) -> int:
    # Utils.abs maps Integer.MIN_VALUE to 0 rather than overflowing.
    h = java_string_hash(key)
    return (0 if h == -(1 << 31) else abs(h)) % partitions


@dataclass(slots=True)
class Broker:
    node_id: int
    host: str
    port: int
    rack: str | None = None
    alive: bool = True


@dataclass(slots=True)
class Partition:
    index: int
    replicas: list[int]
    leader: int
    leader_epoch: int = 0
    log: PartitionLog = field(default_factory=PartitionLog)

    def isr(self, cluster: FakeCluster) -> list[int]:
        return [n for n in self.replicas if cluster.brokers[n].alive]


@dataclass(slots=True)
class Topic:
    name: str
    topic_id: uuid.UUID
    partitions: list[Partition]
    configs: dict[str, str] = field(default_factory=dict)
    internal: bool = False


class FakeCluster:
    """Brokers, topics and the coordinators' data. See the module docstring."""

    def __init__(
        self,
        brokers: Iterable[Broker],
        *,
        cluster_id: str = "fake-kafka-cluster",
        default_partitions: int = 1,
        auto_create_topics: bool = True,
    ) -> None:
        self.brokers: dict[int, Broker] = {b.node_id: b for b in brokers}
        if not self.brokers:
            raise ValueError("a cluster needs at least one broker")
        self.cluster_id = cluster_id
        self.controller_id = min(self.brokers)
        self.default_partitions = default_partitions
        self.auto_create_topics = auto_create_topics
        self.topics: dict[str, Topic] = {}
        self._leader_spread = 0
        self.next_producer_id = 1000
        #: Committed offsets: group -> (topic, partition) -> (offset, leader epoch, metadata).
        self.offsets: dict[str, dict[tuple[str, int], tuple[int, int, str | None]]] = {}
        #: Coordinator overrides set by tests (key -> node id), else the hashed leader.
        self.coordinator_overrides: dict[str, int] = {}

    # ---- brokers --------------------------------------------------------------------------

    def live_brokers(self) -> list[int]:
        return sorted(n for n, b in self.brokers.items() if b.alive)

    def kill(self, node_id: int) -> None:
        """A broker stops: the partitions it led elect another live replica (epoch + 1), or
        have no leader (-1) when none is left; the controller moves to a live broker."""
        self.brokers[node_id].alive = False
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.leader == node_id:
                    live = p.isr(self)
                    self.set_leader(p, live[0] if live else -1)
        if self.controller_id == node_id:
            live_nodes = self.live_brokers()
            if live_nodes:
                self.controller_id = live_nodes[0]

    def restart(self, node_id: int) -> None:
        """A broker comes back; leaderless partitions it replicates elect it."""
        self.brokers[node_id].alive = True
        for topic in self.topics.values():
            for p in topic.partitions:
                if p.leader == -1 and node_id in p.replicas:
                    self.set_leader(p, node_id)

    def assign(self, p: Partition, replicas: list[int]) -> None:
        """Place ``p`` on ``replicas`` (a manual assignment): the first live one leads."""
        p.replicas = list(replicas)
        live = p.isr(self)
        p.leader = live[0] if live else -1

    @staticmethod
    def set_leader(p: Partition, node_id: int) -> None:
        """``node_id`` (-1: none) leads ``p`` in a new epoch, which starts at the log end."""
        p.leader = node_id
        p.leader_epoch += 1
        if node_id >= 0:
            p.log.assign_epoch(p.leader_epoch, p.log.log_end_offset)

    def truncate(self, p: Partition, offset: int) -> None:
        """An unclean election: a replica whose log ends at ``offset`` becomes leader (the
        next live replica, or the same node when it is the only one), in a new epoch; the
        records from ``offset`` on are lost."""
        p.log.truncate(offset)
        live = [n for n in p.isr(self) if n != p.leader]
        self.set_leader(p, live[0] if live else p.leader)

    # ---- topics ---------------------------------------------------------------------------

    def create_topic(
        self,
        name: str,
        partitions: int | None = None,
        replication_factor: int | None = None,
        *,
        configs: dict[str, str] | None = None,
        internal: bool = False,
    ) -> Topic:
        count = self.default_partitions if partitions is None or partitions < 0 else partitions
        nodes = sorted(self.brokers)
        rf = (
            min(3, len(nodes))
            if replication_factor is None or replication_factor < 0
            else replication_factor
        )
        if not 1 <= rf <= len(nodes):
            raise ValueError(f"replication factor {rf} with {len(nodes)} brokers")
        topic = Topic(name, uuid.uuid4(), [], dict(configs or {}), internal)
        start = self._leader_spread
        self._leader_spread += 1
        for i in range(count):
            topic.partitions.append(self._new_partition(topic, i, nodes, rf, start))
        self.topics[name] = topic
        return topic

    def _new_partition(
        self, topic: Topic, index: int, nodes: list[int], rf: int, start: int
    ) -> Partition:
        first = (start + index) % len(nodes)
        replicas = [nodes[(first + k) % len(nodes)] for k in range(rf)]
        live = [n for n in replicas if self.brokers[n].alive]
        log = PartitionLog(
            max_message_bytes=int(topic.configs.get("max.message.bytes", 1048588)),
            log_append_time=topic.configs.get("message.timestamp.type") == "LogAppendTime",
        )
        leader = live[0] if live else -1
        if leader >= 0:
            log.assign_epoch(0, 0)  # the first leader's epoch starts the log
        return Partition(index, replicas, leader, 0, log)

    def add_partitions(self, topic: Topic, total: int) -> None:
        nodes = sorted(self.brokers)
        rf = len(topic.partitions[0].replicas) if topic.partitions else min(3, len(nodes))
        for i in range(len(topic.partitions), total):
            topic.partitions.append(self._new_partition(topic, i, nodes, rf, self._leader_spread))

    def topic_by_id(self, topic_id: uuid.UUID) -> Topic | None:
        for topic in self.topics.values():
            if topic.topic_id == topic_id:
                return topic
        return None

    def partition(self, topic: str, index: int) -> Partition | None:
        t = self.topics.get(topic)
        if t is None or not 0 <= index < len(t.partitions):
            return None
        return t.partitions[index]

    # ---- coordinators -------------------------------------------------------------------

    def coordinator(self, key: str, *, transaction: bool = False) -> int:
        """The node coordinating group (or transactional id) ``key``; -1 when its partition
        has no live leader."""
        if key in self.coordinator_overrides:
            node = self.coordinator_overrides[key]
            return node if self.brokers[node].alive else -1
        live = self.live_brokers()
        if not live:
            return -1
        slot = coordinator_partition(
            key, TXN_STATE_PARTITIONS if transaction else OFFSETS_PARTITIONS
        )
        # The internal topic's partition p is led like any topic's: round robin over nodes,
        # moving to the next live one when its leader is down.
        nodes = sorted(self.brokers)
        for k in range(len(nodes)):
            node = nodes[(slot + k) % len(nodes)]
            if self.brokers[node].alive:
                return node
        return -1

    def allocate_producer_id(self) -> int:
        pid = self.next_producer_id
        self.next_producer_id += 1
        return pid
