"""Admin operations against an in-test fake broker speaking the real protocol.

Each test names the reason it cannot run against the LocalBroker (Tansu 0.6.0, TANSU.md):
the API is not advertised, or Tansu answers it wrongly, or the behaviour (a controller
move, a retriable error that never clears) cannot be provoked there.
"""

from __future__ import annotations

import struct
from typing import Any

import anyio
import pytest
from admin_fake_broker import FakeCluster

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
    KafkaTimeoutError,
    NotLeaderOrFollowerError,
    OffsetOutOfRangeError,
    PolicyViolationError,
    SecurityDisabledError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import alter_configs as ac
from aiokafka_ng.protocol.messages import create_partitions as cp
from aiokafka_ng.protocol.messages import create_topics as ct
from aiokafka_ng.protocol.messages import delete_acls as da
from aiokafka_ng.protocol.messages import describe_groups as dg
from aiokafka_ng.protocol.messages import find_coordinator as fc
from aiokafka_ng.protocol.messages import list_offsets as lo
from aiokafka_ng.protocol.messages import offset_delete as od
from aiokafka_ng.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)

pytestmark = pytest.mark.anyio

CREATE_TOPICS, DELETE_RECORDS, CREATE_PARTITIONS = 19, 21, 37
LIST_OFFSETS, FIND_COORDINATOR, METADATA = 2, 10, 3
ALTER_CONFIGS, DELETE_ACLS, OFFSET_DELETE, DESCRIBE_GROUPS = 33, 31, 47, 15

FAST = {"retry_backoff_ms": 20, "retry_backoff_max_ms": 50}


def admin_for(fake: FakeCluster, **config: Any) -> AdminClient:
    return AdminClient(bootstrap_servers=fake.bootstrap_servers, **{**FAST, **config})


async def test_create_partitions_canned() -> None:
    """Tansu does not advertise CreatePartitions: canned answers, sent to the controller."""
    fake = FakeCluster(node_ids=(1, 2), controller=2)

    def handle(node: int, req: cp.CreatePartitionsRequest, version: int) -> Any:
        return cp.CreatePartitionsResponse(
            results=[
                cp.CreatePartitionsTopicResult(name="grow", error_code=0),
                cp.CreatePartitionsTopicResult(
                    name="shrink", error_code=37, error_message="cannot shrink"
                ),
            ]
        )

    fake.handlers[CREATE_PARTITIONS] = handle
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.create_partitions(
            {"grow": NewPartitions(6, [[1], [2], [1]]), "shrink": NewPartitions(1)}
        )
    assert results["grow"] is None
    err = results["shrink"]
    assert isinstance(err, InvalidPartitionsError)
    assert "cannot shrink" in str(err)
    (sent,) = fake.requests(CREATE_PARTITIONS)
    assert sent.node_id == 2  # the controller
    by_name = {t.name: t for t in sent.request.topics}
    assert by_name["grow"].count == 6
    assert [a.broker_ids for a in by_name["grow"].assignments] == [[1], [2], [1]]
    assert by_name["shrink"].assignments is None


async def test_legacy_alter_configs_routes_broker_resources() -> None:
    """Tansu does not advertise AlterConfigs: a broker resource goes to that broker, a topic
    resource to any broker; outcomes are per resource."""
    fake = FakeCluster(node_ids=(1, 2))

    def handle(node: int, req: ac.AlterConfigsRequest, version: int) -> Any:
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

    fake.handlers[ALTER_CONFIGS] = handle
    topic, broker = ConfigResource.topic("t"), ConfigResource.broker(2)
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.alter_configs(
            {topic: {"retention.ms": "1000"}, broker: {"log.cleaner.threads": "2"}}
        )
    assert results[broker] is None
    assert isinstance(results[topic], PolicyViolationError)
    sent = fake.requests(ALTER_CONFIGS)
    # batched per node: at most one request per node, each resource sent once
    assert len({s.node_id for s in sent}) == len(sent) <= 2
    where = {r.resource_name: s.node_id for s in sent for r in s.request.resources}
    assert where.keys() == {"t", "2"}
    assert where["2"] == 2  # the broker resource went to that broker
    configs = {r.resource_name: r.configs for s in sent for r in s.request.resources}
    assert [(c.name, c.value) for c in configs["2"]] == [("log.cleaner.threads", "2")]


async def test_delete_records_per_leader_byte_level() -> None:
    """Tansu panics on DeleteRecords: one request per partition leader, answered with
    hand-written DeleteRecords v0 response bytes."""
    fake = FakeCluster(node_ids=(1, 2), topics={"t": 2}, leaders={("t", 0): 1, ("t", 1): 2})
    fake.max_versions[DELETE_RECORDS] = 0

    def handle(node: int, req: Any, version: int) -> bytes:
        assert version == 0
        (topic,) = req.topics
        (part,) = topic.partitions
        error = 0 if node == 1 else 1  # OFFSET_OUT_OF_RANGE from the second leader
        name = topic.name.encode()
        return (
            struct.pack(">ii", 0, 1)  # throttle_time_ms, 1 topic
            + struct.pack(">h", len(name))
            + name
            + struct.pack(">i", 1)  # 1 partition
            + struct.pack(">iqh", part.partition_index, part.offset, error)
        )

    fake.handlers[DELETE_RECORDS] = handle
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.delete_records({("t", 0): 5, ("t", 1): 7})
    assert results[TopicPartition("t", 0)].low_watermark == 5  # type: ignore[union-attr]
    assert isinstance(results[TopicPartition("t", 1)], OffsetOutOfRangeError)
    sent = fake.requests(DELETE_RECORDS)
    assert sorted(s.node_id for s in sent) == [1, 2]


async def test_list_offsets_latest_timestamp_max_timestamp() -> None:
    """Tansu answers LATEST wrongly, by-timestamp always 0, and drops the connection on
    MAX_TIMESTAMP: the specs' wire values and versions are checked on a fake."""
    fake = FakeCluster(topics={"t": 3})
    answers = {
        -1: (42, -1),
        1_700_000_000_000: (17, 1_700_000_000_123),
        -3: (41, 1_800_000_000_000),
    }

    def handle(node: int, req: lo.ListOffsetsRequest, version: int) -> Any:
        assert req.replica_id == -1
        return lo.ListOffsetsResponse(
            topics=[
                lo.ListOffsetsTopicResponse(
                    name=t.name,
                    partitions=[
                        lo.ListOffsetsPartitionResponse(
                            partition_index=p.partition_index,
                            offset=answers[p.timestamp][0],
                            timestamp=answers[p.timestamp][1],
                            leader_epoch=3,
                        )
                        for p in t.partitions
                    ],
                )
                for t in req.topics
            ]
        )

    fake.handlers[LIST_OFFSETS] = handle
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.list_offsets(
            {
                ("t", 0): ListOffsetsSpec.latest(),
                ("t", 1): ListOffsetsSpec.for_timestamp(1_700_000_000_000),
                ("t", 2): ListOffsetsSpec.max_timestamp(),
            }
        )
    ok = results.raise_on_error()
    assert ok[TopicPartition("t", 0)].offset == 42
    assert ok[TopicPartition("t", 1)].offset == 17
    assert ok[TopicPartition("t", 1)].timestamp == 1_700_000_000_123
    assert ok[TopicPartition("t", 2)].offset == 41
    assert ok[TopicPartition("t", 2)].leader_epoch == 3
    (sent,) = fake.requests(LIST_OFFSETS)  # one leader: one batched request
    assert sent.version >= 7  # max-timestamp needs v7 (KIP-734)


async def test_max_timestamp_needs_v7() -> None:
    """A broker offering ListOffsets only up to v6 cannot express MAX_TIMESTAMP."""
    fake = FakeCluster(topics={"t": 1})
    fake.max_versions[LIST_OFFSETS] = 6
    async with fake.running(), admin_for(fake) as admin:
        with pytest.raises(UnsupportedVersionError, match="list_offsets"):
            await admin.list_offsets({("t", 0): ListOffsetsSpec.max_timestamp()})


async def test_delete_consumer_group_offsets_canned() -> None:
    """Tansu does not advertise OffsetDelete: sent to the group's coordinator (node 2)."""
    fake = FakeCluster(node_ids=(1, 2))

    def find(node: int, req: fc.FindCoordinatorRequest, version: int) -> Any:
        return fc.FindCoordinatorResponse(
            coordinators=[
                fc.Coordinator(key=k, node_id=2, host="127.0.0.1", port=fake.ports[2])
                for k in req.coordinator_keys
            ],
            node_id=2,
            host="127.0.0.1",
            port=fake.ports[2],
        )

    def delete(node: int, req: od.OffsetDeleteRequest, version: int) -> Any:
        assert req.group_id == "g"
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

    fake.handlers[FIND_COORDINATOR] = find
    fake.handlers[OFFSET_DELETE] = delete
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.delete_consumer_group_offsets("g", [("t", 0), ("t", 1)])
    assert results[TopicPartition("t", 0)] is None
    assert isinstance(results[TopicPartition("t", 1)], GroupSubscribedToTopicError)
    assert [s.node_id for s in fake.requests(OFFSET_DELETE)] == [2]


async def test_delete_acls_canned() -> None:
    """Tansu does not advertise DeleteAcls: per-filter outcomes, matched by position."""
    fake = FakeCluster()

    def handle(node: int, req: da.DeleteAclsRequest, version: int) -> Any:
        assert len(req.filters) == 2
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

    fake.handlers[DELETE_ACLS] = handle
    by_topic = AclBindingFilter(resource_type=ResourceType.TOPIC, name="orders")
    by_user = AclBindingFilter(principal="User:bob")
    async with fake.running(), admin_for(fake) as admin:
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


async def test_not_controller_retried_after_refresh_with_backoff() -> None:
    """A controller move cannot happen on single-node Tansu: node 1 answers NOT_CONTROLLER
    once (and the metadata now names node 2); the client refreshes metadata, backs off,
    and retries on node 2."""
    fake = FakeCluster(node_ids=(1, 2), controller=1)

    def handle(node: int, req: ct.CreateTopicsRequest, version: int) -> Any:
        if node == 1:
            fake.controller = 2  # the controller moved
            code = 41  # NOT_CONTROLLER
        else:
            code = 0
        return ct.CreateTopicsResponse(
            topics=[
                ct.CreatableTopicResult(name=t.name, error_code=code, num_partitions=3)
                for t in req.topics
            ]
        )

    fake.handlers[CREATE_TOPICS] = handle
    async with (
        fake.running(),
        admin_for(fake, retry_backoff_ms=200, retry_backoff_max_ms=1000) as admin,
    ):
        results = await admin.create_topics([NewTopic("moved", 3, 1)])
    created = results.result("moved")
    assert created.num_partitions == 3
    first, second = fake.requests(CREATE_TOPICS)
    assert (first.node_id, second.node_id) == (1, 2)
    refreshes = [r for r in fake.requests(METADATA) if first.at <= r.at <= second.at]
    assert refreshes, "no metadata refresh between the two attempts"
    # backoff(1) = 200 ms +-20% jitter
    assert second.at - first.at >= 0.16


async def test_retriable_item_bounded_by_timeout_others_succeed() -> None:
    """One partition's leader keeps answering NOT_LEADER_OR_FOLLOWER (Tansu never moves
    leaders): it is retried until the operation's timeout and then fails with
    KafkaTimeoutError naming that error; the other partition succeeds."""
    fake = FakeCluster(topics={"t": 2})

    def handle(node: int, req: lo.ListOffsetsRequest, version: int) -> Any:
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
                for t in req.topics
            ]
        )

    fake.handlers[LIST_OFFSETS] = handle
    async with fake.running(), admin_for(fake) as admin:
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
    assert 0.55 <= elapsed < 3
    # retried (several rounds), but paced by the backoff, not a busy loop
    assert 3 <= len(fake.requests(LIST_OFFSETS)) <= 30


async def test_missing_api_names_the_operation() -> None:
    """A broker that does not advertise CreatePartitions: UnsupportedVersionError naming
    the operation, raised (not a per-item outcome)."""
    fake = FakeCluster()
    fake.missing_apis.add(CREATE_PARTITIONS)
    async with fake.running(), admin_for(fake) as admin:
        with pytest.raises(UnsupportedVersionError, match="create_partitions"):
            await admin.create_partitions({"t": NewPartitions(4)})


async def test_describe_groups_batched_per_coordinator_with_relookup() -> None:
    """Tansu answers DescribeGroups with empty member assignments and has one node: two
    groups on two coordinators get one request each; a NOT_COORDINATOR answer makes the
    client look the coordinator up again and retry; assignments are decoded."""
    fake = FakeCluster(node_ids=(1, 2))
    home = {"g-one": 1, "g-two": 2}
    lookups: list[list[str]] = []
    moved = {"g-two": True}  # g-two's first coordinator answer is NOT_COORDINATOR

    def find(node: int, req: fc.FindCoordinatorRequest, version: int) -> Any:
        lookups.append(list(req.coordinator_keys))
        return fc.FindCoordinatorResponse(
            coordinators=[
                fc.Coordinator(key=k, node_id=home[k], host="127.0.0.1", port=fake.ports[home[k]])
                for k in req.coordinator_keys
            ]
        )

    assignment = ConsumerProtocolAssignment(
        assigned_partitions=[
            ConsumerProtocolAssignmentTopicPartition(topic="orders", partitions=[0, 2])
        ]
    )
    blob = (3).to_bytes(2, "big") + assignment.encode(3)

    def describe(node: int, req: dg.DescribeGroupsRequest, version: int) -> Any:
        groups = []
        for g in req.groups:
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

    fake.handlers[FIND_COORDINATOR] = find
    fake.handlers[DESCRIBE_GROUPS] = describe
    async with fake.running(), admin_for(fake) as admin:
        results = await admin.describe_consumer_groups(["g-one", "g-two"])
    ok = results.raise_on_error()
    for g in ("g-one", "g-two"):
        assert ok[g].state is ConsumerGroupState.STABLE
        assert ok[g].partition_assignor == "range"
        (member,) = ok[g].members
        assert member.assignment == [("orders", 0), ("orders", 2)]
        assert ok[g].coordinator is not None and ok[g].coordinator.node_id == home[g]
    sent = [(r.node_id, list(r.request.groups)) for r in fake.requests(DESCRIBE_GROUPS)]
    assert sorted(sent[:2]) == [(1, ["g-one"]), (2, ["g-two"])]
    assert sent[2:] == [(2, ["g-two"])]  # only the NOT_COORDINATOR group is retried
    assert lookups[-1] == ["g-two"]  # ... after looking its coordinator up again
