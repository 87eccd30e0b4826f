"""Admin operations against FakeKafka, in memory, on virtual time.

Each test names the reason it cannot run against the LocalBroker (Tansu 0.6.0, TANSU.md):
the API is not advertised, or Tansu answers it wrongly, or the behaviour (a controller
move, a retriable error that never clears) cannot be provoked there. What FakeKafka models
(topics, partitions, leaders, coordinators, ListOffsets) comes from the model; the rest is
scripted with ``FakeKafka.answer``.
"""

from __future__ import annotations

import struct
from typing import Any

import anyio
import pytest

from aiokafka_ng.admin import (
    AclBinding,
    AclBindingFilter,
    AclOperation,
    AclPermissionType,
    AdminClient,
    ConfigResource,
    ConsumerGroupState,
    ListOffsetsSpec,
    NewPartitions,
    NewTopic,
    PatternType,
    ResourceType,
    TopicPartition,
)
from aiokafka_ng.errors import (
    GroupSubscribedToTopicError,
    InvalidPartitionsError,
    InvalidReplicaAssignmentError,
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    SecurityDisabledError,
    UnsupportedVersionError,
)
from aiokafka_ng.producer import Producer
from aiokafka_ng.protocol.messages import alter_configs as ac
from aiokafka_ng.protocol.messages import create_topics as ct
from aiokafka_ng.protocol.messages import delete_acls as da
from aiokafka_ng.protocol.messages import describe_groups as dg
from aiokafka_ng.protocol.messages import list_offsets as lo
from aiokafka_ng.protocol.messages import offset_delete as od
from aiokafka_ng.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


CREATE_TOPICS, DELETE_RECORDS, CREATE_PARTITIONS = 19, 21, 37
LIST_OFFSETS, FIND_COORDINATOR, METADATA = 2, 10, 3
ALTER_CONFIGS, DELETE_ACLS, OFFSET_DELETE, DESCRIBE_GROUPS = 33, 31, 47, 15

FAST = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 50}


def admin_for(kafka: FakeKafka, **config: Any) -> AdminClient:
    return AdminClient(**kafka.client_config(), **{**FAST, **config})


async def test_create_partitions_at_the_controller() -> None:
    """Tansu does not advertise CreatePartitions: one request at the controller; the model
    grows a topic where the assignments say, grows another with its own placement, and
    refuses a bad assignment with a message the client keeps; a shrink is refused by the
    client before sending (it read the partition count from the metadata)."""
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.move_controller(2)
        for name in ("grow", "more", "bad", "shrink"):
            kafka.create_topic(name, 3, 1)
        async with admin_for(kafka) as admin:
            results = await admin.create_partitions(
                {
                    "grow": NewPartitions(6, [[1], [2], [1]]),
                    "more": NewPartitions(4),
                    "bad": NewPartitions(5, [[1, 2], [2, 1]]),  # 2 replicas, the topic has 1
                    "shrink": NewPartitions(1),
                }
            )
    assert results["grow"] is None and results["more"] is None
    bad = results["bad"]
    assert isinstance(bad, InvalidReplicaAssignmentError)
    assert "needs that many assignments" in str(bad)  # the broker's message is kept
    shrink = results["shrink"]
    assert isinstance(shrink, InvalidPartitionsError)
    topics = kafka.cluster.topics
    assert [p.replicas for p in topics["grow"].partitions[3:]] == [[1], [2], [1]]
    assert [len(topics[n].partitions) for n in ("more", "bad", "shrink")] == [4, 3, 3]
    (sent,) = kafka.received(CREATE_PARTITIONS)
    assert sent.node == 2  # the controller
    by_name = {t.name: t for t in sent.request.topics}
    assert by_name.keys() == {"grow", "more", "bad"}
    assert by_name["grow"].count == 6
    assert [a.broker_ids for a in by_name["grow"].assignments] == [[1], [2], [1]]
    assert by_name["more"].assignments is None


async def test_legacy_alter_configs_routes_broker_resources() -> None:
    """Tansu does not advertise AlterConfigs: a broker resource goes to that broker, a topic
    resource to any broker; outcomes are per resource."""

    def handle(call: Received) -> Any:
        req: ac.AlterConfigsRequest = call.request
        return ac.AlterConfigsResponse(
            responses=[
                ac.AlterConfigsResourceResponse(
                    error_code=44 if r.resource_type == 2 else 0,
                    error_message="policy says no" if r.resource_type == 2 else None,
                    resource_type=r.resource_type,
                    resource_name=r.resource_name,
                )
                for r in req.resources
            ]
        )

    topic, broker = ConfigResource.topic("t"), ConfigResource.broker(2)
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.answer(ALTER_CONFIGS, handle)
        async with admin_for(kafka) as admin:
            results = await admin.alter_configs(
                {topic: {"retention.ms": "1000"}, broker: {"log.cleaner.threads": "2"}}
            )
    assert results[broker] is None
    assert isinstance(results[topic], PolicyViolationError)
    sent = kafka.received(ALTER_CONFIGS)
    # batched per node: at most one request per node, each resource sent once
    assert len({s.node for s in sent}) == len(sent) <= 2
    where = {r.resource_name: s.node for s in sent for r in s.request.resources}
    assert where.keys() == {"t", "2"}
    assert where["2"] == 2  # the broker resource went to that broker
    configs = {r.resource_name: r.configs for s in sent for r in s.request.resources}
    assert [(c.name, c.value) for c in configs["2"]] == [("log.cleaner.threads", "2")]


async def test_delete_records_per_leader_byte_level() -> None:
    """Tansu panics on DeleteRecords: one request per partition leader, answered with
    hand-written DeleteRecords v0 response bytes."""

    def handle(call: Received) -> bytes:
        assert call.version == 0
        (topic,) = call.request.topics
        (part,) = topic.partitions
        error = 0 if call.node == 1 else 1  # OFFSET_OUT_OF_RANGE from the second leader
        name = topic.name.encode()
        return (
            struct.pack(">ii", 0, 1)  # throttle_time_ms, 1 topic
            + struct.pack(">h", len(name))
            + name
            + struct.pack(">i", 1)  # 1 partition
            + struct.pack(">iqh", part.partition_index, part.offset, error)
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.create_topic("t", 2, 1)
        kafka.move_leader("t", 0, 1)
        kafka.move_leader("t", 1, 2)
        kafka.answer(DELETE_RECORDS, handle)
        kafka.api_versions[DELETE_RECORDS] = (0, 0)
        async with admin_for(kafka) as admin:
            results = await admin.delete_records({("t", 0): 5, ("t", 1): 7})
    assert results[TopicPartition("t", 0)].low_watermark == 5  # type: ignore[union-attr]
    assert isinstance(results[TopicPartition("t", 1)], OffsetOutOfRangeError)
    sent = kafka.received(DELETE_RECORDS)
    assert sorted(s.node for s in sent) == [1, 2]


async def test_list_offsets_latest_timestamp_max_timestamp() -> None:
    """Tansu answers LATEST wrongly, by-timestamp always 0, and drops the connection on
    MAX_TIMESTAMP: the specs' wire values and versions are checked against the model's log."""
    stamps = {
        0: [1, 2, 3, 4],
        1: [1_699_999_999_000, 1_700_000_000_123, 1_700_000_000_500],
        2: [5, 1_800_000_000_000, 7],
    }
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 3, 1)
        for _ in range(3):  # leader epoch 3 on partition 2: the answer carries the epoch
            kafka.move_leader("t", 2, 1)
        async with Producer(**kafka.client_config()) as producer:
            for p, times in stamps.items():
                for ts in times:
                    await producer.send_and_wait("t", b"v", partition=p, timestamp_ms=ts)
        async with admin_for(kafka) as admin:
            results = await admin.list_offsets(
                {
                    ("t", 0): ListOffsetsSpec.latest(),
                    ("t", 1): ListOffsetsSpec.for_timestamp(1_700_000_000_000),
                    ("t", 2): ListOffsetsSpec.max_timestamp(),
                }
            )
    ok = results.raise_on_error()
    assert ok[TopicPartition("t", 0)].offset == 4
    assert ok[TopicPartition("t", 1)].offset == 1
    assert ok[TopicPartition("t", 1)].timestamp == 1_700_000_000_123
    assert ok[TopicPartition("t", 2)].offset == 1
    assert ok[TopicPartition("t", 2)].timestamp == 1_800_000_000_000
    assert ok[TopicPartition("t", 2)].leader_epoch == 3
    (sent,) = kafka.received(LIST_OFFSETS)  # one leader: one batched request
    assert sent.version >= 7  # max-timestamp needs v7 (KIP-734)
    assert sent.request.replica_id == -1
    wire = {p.partition_index: p.timestamp for t in sent.request.topics for p in t.partitions}
    assert wire == {0: -1, 1: 1_700_000_000_000, 2: -3}


async def test_max_timestamp_needs_v7() -> None:
    """A broker offering ListOffsets only up to v6 cannot express MAX_TIMESTAMP."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 1, 1)
        kafka.api_versions[LIST_OFFSETS] = (kafka.api_versions[LIST_OFFSETS][0], 6)
        async with admin_for(kafka) as admin:
            with pytest.raises(UnsupportedVersionError, match="list_offsets"):
                await admin.list_offsets({("t", 0): ListOffsetsSpec.max_timestamp()})
    assert kafka.received(LIST_OFFSETS) == []


async def test_delete_consumer_group_offsets_canned() -> None:
    """Tansu does not advertise OffsetDelete: sent to the group's coordinator (node 2)."""

    def delete(call: Received) -> Any:
        assert call.request.group_id == "g"
        return od.OffsetDeleteResponse(
            topics=[
                od.OffsetDeleteResponseTopic(
                    name="t",
                    partitions=[
                        od.OffsetDeleteResponsePartition(partition_index=0, error_code=0),
                        od.OffsetDeleteResponsePartition(partition_index=1, error_code=86),
                    ],
                )
            ]
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.move_coordinator("g", 2)
        kafka.answer(OFFSET_DELETE, delete)
        async with admin_for(kafka) as admin:
            results = await admin.delete_consumer_group_offsets("g", [("t", 0), ("t", 1)])
    assert results[TopicPartition("t", 0)] is None
    assert isinstance(results[TopicPartition("t", 1)], GroupSubscribedToTopicError)
    assert [s.node for s in kafka.received(OFFSET_DELETE)] == [2]


async def test_delete_acls_canned() -> None:
    """Tansu does not advertise DeleteAcls: per-filter outcomes, matched by position."""

    def handle(call: Received) -> Any:
        assert len(call.request.filters) == 2
        return da.DeleteAclsResponse(
            filter_results=[
                da.DeleteAclsFilterResult(
                    matching_acls=[
                        da.DeleteAclsMatchingAcl(
                            resource_type=2,
                            resource_name="orders",
                            pattern_type=3,
                            principal="User:alice",
                            host="*",
                            operation=3,
                            permission_type=3,
                        )
                    ]
                ),
                da.DeleteAclsFilterResult(error_code=54, error_message="no authorizer"),
            ]
        )

    by_topic = AclBindingFilter(resource_type=ResourceType.TOPIC, name="orders")
    by_user = AclBindingFilter(principal="User:bob")
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.answer(DELETE_ACLS, handle)
        async with admin_for(kafka) as admin:
            results = await admin.delete_acls([by_topic, by_user])
    assert results[by_topic] == [
        AclBinding(
            ResourceType.TOPIC,
            "orders",
            PatternType.LITERAL,
            "User:alice",
            "*",
            AclOperation.READ,
            AclPermissionType.ALLOW,
        )
    ]
    assert isinstance(results[by_user], SecurityDisabledError)
    assert len(kafka.received(DELETE_ACLS)) == 1


async def test_not_controller_retried_after_refresh_with_backoff() -> None:
    """A controller move cannot happen on single-node Tansu: node 1 answers NOT_CONTROLLER
    once (and the metadata now names node 2); the client refreshes metadata, backs off,
    and retries on node 2, where the model creates the topic."""
    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.move_controller(1)

        def not_controller(call: Received) -> Any:
            kafka.move_controller(2)  # the controller moved
            return ct.CreateTopicsResponse(
                topics=[
                    ct.CreatableTopicResult(name=t.name, error_code=41)  # NOT_CONTROLLER
                    for t in call.request.topics
                ]
            )

        kafka.answer(CREATE_TOPICS, not_controller, times=1, match=1)
        async with admin_for(kafka, retry_backoff_ms=200, retry_backoff_max_ms=1000) as admin:
            results = await admin.create_topics([NewTopic("moved", 3, 1)])
    created = results.result("moved")
    assert created.num_partitions == 3
    assert len(kafka.cluster.topics["moved"].partitions) == 3
    first, second = kafka.received(CREATE_TOPICS)
    assert (first.node, second.node) == (1, 2)
    refreshes = [r for r in kafka.received(METADATA) if first.at <= r.at <= second.at]
    assert refreshes, "no metadata refresh between the two attempts"
    # backoff(1) = 200 ms +-20% jitter, on the virtual clock
    assert 0.16 <= second.at - first.at <= 0.24 + 0.01


async def test_retriable_item_bounded_by_timeout_others_succeed() -> None:
    """One partition's leader keeps answering NOT_LEADER_OR_FOLLOWER (Tansu never moves
    leaders): it is retried until the operation's timeout and then fails with
    KafkaTimeoutError naming that error; the other partition succeeds."""

    def handle(call: Received) -> Any:
        return lo.ListOffsetsResponse(
            topics=[
                lo.ListOffsetsTopicResponse(
                    name="t",
                    partitions=[
                        lo.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            error_code=6 if p.partition_index == 1 else 0,
                            offset=0,
                        )
                        for p in t.partitions
                    ],
                )
                for t in call.request.topics
            ]
        )

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 2, 1)
        kafka.answer(LIST_OFFSETS, handle)
        async with admin_for(kafka) as admin:
            start = anyio.current_time()
            results = await admin.list_offsets(
                {("t", 0): ListOffsetsSpec.earliest(), ("t", 1): ListOffsetsSpec.earliest()},
                timeout_ms=600,
            )
            elapsed = anyio.current_time() - start
    assert results.succeeded[TopicPartition("t", 0)].offset == 0
    err = results.failed[TopicPartition("t", 1)]
    assert isinstance(err, KafkaTimeoutError)
    assert "NotLeaderOrFollowerError" in str(err)
    assert isinstance(err.__cause__, NotLeaderOrFollowerError)
    assert 0.6 <= elapsed <= 0.65  # the operation's timeout, on the virtual clock
    # retried (several rounds), but paced by the backoff, not a busy loop
    assert 3 <= len(kafka.received(LIST_OFFSETS)) <= 30


async def test_missing_api_names_the_operation() -> None:
    """A broker that does not advertise CreatePartitions: UnsupportedVersionError naming
    the operation, raised (not a per-item outcome)."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        del kafka.api_versions[CREATE_PARTITIONS]
        kafka.create_topic("t", 1, 1)
        async with admin_for(kafka) as admin:
            with pytest.raises(UnsupportedVersionError, match="create_partitions"):
                await admin.create_partitions({"t": NewPartitions(4)})
    assert len(kafka.cluster.topics["t"].partitions) == 1


async def test_describe_groups_batched_per_coordinator_with_relookup() -> None:
    """Tansu answers DescribeGroups with empty member assignments and has one node: two
    groups on two coordinators get one request each; a NOT_COORDINATOR answer makes the
    client look the coordinator up again and retry; assignments are decoded."""
    home = {"g-one": 1, "g-two": 2}
    moved = {"g-two": True}  # g-two's first coordinator answer is NOT_COORDINATOR
    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(topic="orders", partitions=[0, 2])
        ]
    )
    blob = (3).to_bytes(2, "big") + assignment.encode(3)

    def describe(call: Received) -> Any:
        groups = []
        for g in call.request.groups:
            if moved.pop(g, False):
                groups.append(dg.DescribedGroup(error_code=16, group_id=g))
                continue
            groups.append(
                dg.DescribedGroup(
                    group_id=g,
                    group_state="Stable",
                    protocol_type="consumer",
                    protocol_data="range",
                    members=[
                        dg.DescribedGroupMember(
                            member_id=f"{g}-m1",
                            client_id="cid",
                            client_host="/127.0.0.1",
                            member_assignment=blob,
                        )
                    ],
                )
            )
        return dg.DescribeGroupsResponse(groups=groups)

    async with FakeKafka(brokers=2, tcp=False) as kafka:
        for group, node in home.items():
            kafka.move_coordinator(group, node)
        kafka.answer(DESCRIBE_GROUPS, describe)
        async with admin_for(kafka) as admin:
            results = await admin.describe_consumer_groups(["g-one", "g-two"])
    ok = results.raise_on_error()
    for g in ("g-one", "g-two"):
        assert ok[g].state is ConsumerGroupState.STABLE
        assert ok[g].partition_assignor == "range"
        (member,) = ok[g].members
        assert member.assignment == [("orders", 0), ("orders", 2)]
        assert ok[g].coordinator is not None and ok[g].coordinator.node_id == home[g]
    sent = [(r.node, list(r.request.groups)) for r in kafka.received(DESCRIBE_GROUPS)]
    assert sorted(sent[:2]) == [(1, ["g-one"]), (2, ["g-two"])]
    assert sent[2:] == [(2, ["g-two"])]  # only the NOT_COORDINATOR group is retried
    # ... after looking its coordinator up again
    lookups = [list(r.request.coordinator_keys) for r in kafka.received(FIND_COORDINATOR)]
    assert lookups[-1] == ["g-two"]
