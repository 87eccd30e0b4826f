"""Typed inputs and results of the admin client.

Every admin operation takes and returns these slotted dataclasses and enums, never raw
protocol messages: the wire layout changes between API versions, these do not. Enum values
are the numbers Kafka puts on the wire, so converting is ``Enum(value)`` one way and
``int(member)`` the other.
"""

from __future__ import annotations

import enum
import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

__all__ = [
    "AclBinding",
    "AclBindingFilter",
    "AclOperation",
    "AclPermissionType",
    "AlterConfigOp",
    "AlterConfigOpType",
    "ClusterDescription",
    "ConfigEntry",
    "ConfigResource",
    "ConfigResourceType",
    "ConfigSource",
    "ConfigSynonym",
    "ConfigType",
    "ConsumerGroupDescription",
    "ConsumerGroupListing",
    "ConsumerGroupState",
    "CreatedTopic",
    "DeletedRecords",
    "ElectionType",
    "IsolationLevel",
    "ListOffsetsResultInfo",
    "ListOffsetsSpec",
    "LogDirDescription",
    "MemberDescription",
    "MemberToRemove",
    "NewPartitions",
    "NewTopic",
    "Node",
    "OffsetAndMetadata",
    "OffsetSpec",
    "PartitionInfo",
    "PatternType",
    "ProducerState",
    "ReplicaInfo",
    "ResourceType",
    "TopicDescription",
    "TopicListing",
    "TopicPartition",
    "TransactionDescription",
    "TransactionListing",
]


class TopicPartition(NamedTuple):
    """A partition of a topic; a plain tuple, so ``("t", 0)`` compares equal to it."""

    topic: str
    partition: int


# ---------------------------------------------------------------------------- cluster


@dataclass(frozen=True, slots=True)
class Node:
    """A broker as the cluster advertises it."""

    node_id: int
    host: str
    port: int
    rack: str | None = None


@dataclass(frozen=True, slots=True)
class ClusterDescription:
    """What ``describe_cluster`` returns."""

    cluster_id: str | None
    controller: Node | None
    brokers: list[Node]
    authorized_operations: frozenset[AclOperation] | None = None


# ---------------------------------------------------------------------------- topics


@dataclass(frozen=True, slots=True)
class NewTopic:
    """A topic to create.

    ``num_partitions`` / ``replication_factor`` of -1 mean "the broker's default"; with
    ``replica_assignments`` (partition -> broker ids) both must stay -1.
    """

    name: str
    num_partitions: int = -1
    replication_factor: int = -1
    replica_assignments: Mapping[int, Sequence[int]] | None = None
    topic_configs: Mapping[str, str | None] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class CreatedTopic:
    """One topic's successful ``create_topics`` outcome (fields the broker reported)."""

    name: str
    topic_id: uuid.UUID | None
    num_partitions: int
    replication_factor: int
    configs: list[ConfigEntry] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class NewPartitions:
    """Grow a topic to ``total_count`` partitions, optionally placing the new ones."""

    total_count: int
    new_assignments: Sequence[Sequence[int]] | None = None


@dataclass(frozen=True, slots=True)
class TopicListing:
    """One entry of ``list_topics``."""

    name: str
    topic_id: uuid.UUID | None
    is_internal: bool


@dataclass(frozen=True, slots=True)
class PartitionInfo:
    """One partition of a described topic; ``leader`` is None when it has none."""

    partition: int
    leader: Node | None
    leader_epoch: int
    replicas: list[Node]
    isr: list[Node]
    offline_replicas: list[Node] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class TopicDescription:
    """What ``describe_topics`` returns for one topic."""

    name: str
    topic_id: uuid.UUID | None
    is_internal: bool
    partitions: list[PartitionInfo]
    authorized_operations: frozenset[AclOperation] | None = None


# ---------------------------------------------------------------------------- configs


class ConfigResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    BROKER = 4
    BROKER_LOGGER = 8
    CLIENT_METRICS = 16
    #: Kafka's ``ConfigResource.Type.GROUP`` (KIP-848/KIP-932 group configs such as
    #: ``share.auto.offset.reset``). ``GROUP = 3`` above is not a config resource type.
    GROUP_CONFIGS = 32


class ConfigSource(enum.IntEnum):
    UNKNOWN = 0
    DYNAMIC_TOPIC_CONFIG = 1
    DYNAMIC_BROKER_CONFIG = 2
    DYNAMIC_DEFAULT_BROKER_CONFIG = 3
    STATIC_BROKER_CONFIG = 4
    DEFAULT_CONFIG = 5
    DYNAMIC_BROKER_LOGGER_CONFIG = 6
    CLIENT_METRICS_CONFIG = 7
    GROUP_CONFIG = 8

    @classmethod
    def parse(cls, value: int) -> ConfigSource:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


class ConfigType(enum.IntEnum):
    UNKNOWN = 0
    BOOLEAN = 1
    STRING = 2
    INT = 3
    SHORT = 4
    LONG = 5
    DOUBLE = 6
    LIST = 7
    CLASS = 8
    PASSWORD = 9


class AlterConfigOpType(enum.IntEnum):
    SET = 0
    DELETE = 1
    APPEND = 2
    SUBTRACT = 3


@dataclass(frozen=True, slots=True)
class ConfigResource:
    """A thing that has configs: a topic, a broker (name = its node id), a group, ..."""

    type: ConfigResourceType
    name: str

    @classmethod
    def topic(cls, name: str) -> ConfigResource:
        return cls(ConfigResourceType.TOPIC, name)

    @classmethod
    def broker(cls, node_id: int | str) -> ConfigResource:
        return cls(ConfigResourceType.BROKER, str(node_id))

    @classmethod
    def group(cls, group_id: str) -> ConfigResource:
        """A group's dynamic configs (e.g. a share group's ``share.auto.offset.reset``)."""
        return cls(ConfigResourceType.GROUP_CONFIGS, group_id)


@dataclass(frozen=True, slots=True)
class ConfigSynonym:
    """A lower-precedence source of the same config (KIP-226), highest precedence first."""

    name: str
    value: str | None
    source: ConfigSource


@dataclass(frozen=True, slots=True)
class ConfigEntry:
    """One config of a resource, as ``describe_configs`` reports it."""

    name: str
    value: str | None
    source: ConfigSource = ConfigSource.UNKNOWN
    is_read_only: bool = False
    is_sensitive: bool = False
    is_default: bool = False
    synonyms: list[ConfigSynonym] = field(default_factory=list)
    config_type: ConfigType = ConfigType.UNKNOWN
    documentation: str | None = None


@dataclass(frozen=True, slots=True)
class AlterConfigOp:
    """One change of ``incremental_alter_configs``; ``value`` is ignored for DELETE."""

    name: str
    value: str | None = None
    op_type: AlterConfigOpType = AlterConfigOpType.SET


# ---------------------------------------------------------------------------- offsets


class IsolationLevel(enum.IntEnum):
    READ_UNCOMMITTED = 0
    READ_COMMITTED = 1


@dataclass(frozen=True, slots=True)
class ListOffsetsSpec:
    """Which offset of a partition ``list_offsets`` looks up.

    Built with the class methods; ``timestamp`` carries Kafka's sentinel for the special
    specs (-2 earliest, -1 latest, -3 max timestamp) or a real timestamp in ms.
    """

    timestamp: int

    EARLIEST_TIMESTAMP = -2
    LATEST_TIMESTAMP = -1
    MAX_TIMESTAMP = -3

    @classmethod
    def earliest(cls) -> ListOffsetsSpec:
        return cls(cls.EARLIEST_TIMESTAMP)

    @classmethod
    def latest(cls) -> ListOffsetsSpec:
        return cls(cls.LATEST_TIMESTAMP)

    @classmethod
    def max_timestamp(cls) -> ListOffsetsSpec:
        """The offset of the record with the highest timestamp (KIP-734, ListOffsets v7+)."""
        return cls(cls.MAX_TIMESTAMP)

    @classmethod
    def for_timestamp(cls, timestamp_ms: int) -> ListOffsetsSpec:
        """The earliest offset whose timestamp is >= ``timestamp_ms``."""
        if timestamp_ms < 0:
            raise ValueError(f"timestamp must be >= 0, got {timestamp_ms}")
        return cls(timestamp_ms)


OffsetSpec = ListOffsetsSpec


@dataclass(frozen=True, slots=True)
class ListOffsetsResultInfo:
    """A partition's offset found by ``list_offsets``; offset -1 means "no such record"."""

    offset: int
    timestamp: int
    leader_epoch: int | None


@dataclass(frozen=True, slots=True)
class DeletedRecords:
    """``delete_records`` outcome: the partition's new log start offset."""

    low_watermark: int


# ---------------------------------------------------------------------------- groups


class ConsumerGroupState(enum.StrEnum):
    UNKNOWN = "Unknown"
    PREPARING_REBALANCE = "PreparingRebalance"
    COMPLETING_REBALANCE = "CompletingRebalance"
    STABLE = "Stable"
    DEAD = "Dead"
    EMPTY = "Empty"
    ASSIGNING = "Assigning"
    RECONCILING = "Reconciling"

    @classmethod
    def parse(cls, value: str) -> ConsumerGroupState:
        try:
            return cls(value)
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class ConsumerGroupListing:
    """One group of ``list_consumer_groups``."""

    group_id: str
    is_simple_consumer_group: bool
    state: ConsumerGroupState | None = None
    group_type: str | None = None
    protocol_type: str = ""


@dataclass(frozen=True, slots=True)
class MemberToRemove:
    """A member for ``remove_members_from_consumer_group``: a static member by its
    ``group_instance_id`` (KIP-345), or a dynamic one by ``member_id``."""

    group_instance_id: str | None = None
    member_id: str = ""

    def __post_init__(self) -> None:
        if not self.group_instance_id and not self.member_id:
            raise ValueError("a member to remove needs a group_instance_id or a member_id")


@dataclass(frozen=True, slots=True)
class MemberDescription:
    """A member of a described group; ``assignment`` is decoded for consumer groups.

    The fields after ``assignment`` are those of a KIP-848 group's member (None in a classic
    group): ``target_assignment`` is what the group wants it to own once it has reconciled
    (``assignment`` is what it owns now), ``member_epoch`` the epoch it has reached, and
    what it subscribed to and the rack it said it is in."""

    member_id: str
    group_instance_id: str | None
    client_id: str
    host: str
    assignment: list[TopicPartition]
    target_assignment: list[TopicPartition] | None = None
    member_epoch: int | None = None
    rack_id: str | None = None
    subscribed_topic_names: list[str] | None = None
    subscribed_topic_regex: str | None = None


@dataclass(frozen=True, slots=True)
class ConsumerGroupDescription:
    """What ``describe_consumer_groups`` returns for one group."""

    group_id: str
    is_simple_consumer_group: bool
    members: list[MemberDescription]
    partition_assignor: str
    state: ConsumerGroupState
    coordinator: Node | None
    protocol_type: str = ""
    authorized_operations: frozenset[AclOperation] | None = None
    #: "consumer" for a KIP-848 group (the broker assigns; ConsumerGroupDescribe describes
    #: it), "classic" for a group of the JoinGroup/SyncGroup protocol (DescribeGroups).
    group_type: str = "classic"
    #: A KIP-848 group's epoch, and the epoch of its target assignment (None: classic).
    group_epoch: int | None = None
    target_assignment_epoch: int | None = None


@dataclass(frozen=True, slots=True)
class OffsetAndMetadata:
    """A committed offset of a group."""

    offset: int
    metadata: str = ""
    leader_epoch: int | None = None


# ---------------------------------------------------------------------------- ACLs


class ResourceType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    TOPIC = 2
    GROUP = 3
    CLUSTER = 4
    TRANSACTIONAL_ID = 5
    DELEGATION_TOKEN = 6
    USER = 7


class PatternType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    MATCH = 2
    LITERAL = 3
    PREFIXED = 4


class AclOperation(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    ALL = 2
    READ = 3
    WRITE = 4
    CREATE = 5
    DELETE = 6
    ALTER = 7
    DESCRIBE = 8
    CLUSTER_ACTION = 9
    DESCRIBE_CONFIGS = 10
    ALTER_CONFIGS = 11
    IDEMPOTENT_WRITE = 12
    CREATE_TOKENS = 13
    DESCRIBE_TOKENS = 14


class AclPermissionType(enum.IntEnum):
    UNKNOWN = 0
    ANY = 1
    DENY = 2
    ALLOW = 3


@dataclass(frozen=True, slots=True)
class AclBinding:
    """One ACL: who may (or may not) do what to which resource, from where."""

    resource_type: ResourceType
    name: str
    pattern_type: PatternType
    principal: str
    host: str
    operation: AclOperation
    permission_type: AclPermissionType


@dataclass(frozen=True, slots=True)
class AclBindingFilter:
    """Matches ACLs: None matches any name/principal/host, ANY any enum value."""

    resource_type: ResourceType = ResourceType.ANY
    name: str | None = None
    pattern_type: PatternType = PatternType.ANY
    principal: str | None = None
    host: str | None = None
    operation: AclOperation = AclOperation.ANY
    permission_type: AclPermissionType = AclPermissionType.ANY


# ---------------------------------------------------------------------------- misc


class ElectionType(enum.IntEnum):
    PREFERRED = 0
    UNCLEAN = 1


@dataclass(frozen=True, slots=True)
class ReplicaInfo:
    """A replica stored in a log dir."""

    size: int
    offset_lag: int
    is_future: bool


@dataclass(frozen=True, slots=True)
class LogDirDescription:
    """One log directory of a broker; ``error`` is the dir's own error, if any."""

    path: str
    error: Exception | None
    replicas: dict[TopicPartition, ReplicaInfo]
    total_bytes: int | None = None
    usable_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class ProducerState:
    """An active producer of a partition (``describe_producers``)."""

    producer_id: int
    producer_epoch: int
    last_sequence: int
    last_timestamp: int
    coordinator_epoch: int
    current_transaction_start_offset: int | None


@dataclass(frozen=True, slots=True)
class TransactionListing:
    """One entry of ``list_transactions``."""

    transactional_id: str
    producer_id: int
    state: str


@dataclass(frozen=True, slots=True)
class TransactionDescription:
    """What ``describe_transactions`` returns for one transactional id."""

    transactional_id: str
    state: str
    coordinator_id: int
    producer_id: int
    producer_epoch: int
    transaction_timeout_ms: int
    transaction_start_time_ms: int | None
    topic_partitions: list[TopicPartition]


def decode_authorized_operations(bits: int) -> frozenset[AclOperation] | None:
    """The bit field of ``*_authorized_operations`` as a set; None when not requested.

    Kafka sends INT32_MIN when the caller did not ask for operations.
    """
    if bits == -(2**31):
        return None
    return frozenset(op for op in AclOperation if op > AclOperation.ALL and bits & (1 << op))
