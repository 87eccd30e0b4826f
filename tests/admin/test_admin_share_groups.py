"""Share groups (KIP-932). Tansu has no share groups (TANSU.md: no ShareGroupHeartbeat or
ShareGroupDescribe), so against the real broker we show only that ``list_share_groups``
leaves a classic group out; listing and describing real share groups run on FakeKafka in
memory (coordinators from the model, ListGroups and ShareGroupDescribe scripted: it runs no
share groups), which decodes our requests with the codec's server side."""

from __future__ import annotations

import uuid
from typing import Any

import anyio
import pytest
from confluent_kafka import Producer as CProducer

from aiokafka_ng.admin import (
    AclOperation,
    AdminClient,
    NewTopic,
    ShareGroupDescription,
    ShareGroupListing,
    ShareGroupState,
    ShareMemberDescription,
    TopicPartition,
)
from aiokafka_ng.errors import GroupIdNotFoundError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import list_groups as lgr
from aiokafka_ng.protocol.messages import share_group_describe as sgd
from aiokafka_ng.testing import FakeKafka, LocalBroker
from aiokafka_ng.testing.fake import Received
from tests.admin.test_admin_broker import _consume, admin_for
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

LIST_GROUPS, SHARE_GROUP_DESCRIBE = 16, 77


def fake_admin(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


async def test_a_classic_group_is_not_a_share_group(kafka_broker: LocalBroker) -> None:
    topic, group = topic_name("sg-topic"), topic_name("sg")
    bootstrap = kafka_broker.bootstrap_servers
    async with admin_for(kafka_broker) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
        producer = CProducer({"bootstrap.servers": bootstrap})
        producer.produce(topic, b"v", partition=0)
        assert await anyio.to_thread.run_sync(lambda: producer.flush(20)) == 0
        member = await anyio.to_thread.run_sync(_consume, bootstrap, topic, group, 1)
        try:
            assert group in [g.group_id for g in await admin.list_groups()]
            assert group not in [g.group_id for g in await admin.list_share_groups()]
        finally:
            await anyio.to_thread.run_sync(member.close)


async def test_list_share_groups_filters_by_type_on_both_sides() -> None:
    seen: list[tuple[int, list[str], list[str]]] = []

    def handle(call: Received) -> Any:
        req: lgr.ListGroupsRequest = call.request
        seen.append((call.version, list(req.types_filter), list(req.states_filter)))
        groups = {
            1: [lgr.ListedGroup("s2", "share", "Empty", "share")],
            # A broker that ignored the type filter: the classic group must not come back.
            2: [
                lgr.ListedGroup("c1", "consumer", "Stable", "classic"),
                lgr.ListedGroup("s1", "share", "Stable", "share"),
            ],
        }[call.node]
        return lgr.ListGroupsResponse(groups=groups)

    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.answer(LIST_GROUPS, handle)
        listed = await admin.list_share_groups(states=[ShareGroupState.STABLE, "Empty"])
    assert listed == [
        ShareGroupListing("s1", ShareGroupState.STABLE),
        ShareGroupListing("s2", ShareGroupState.EMPTY),
    ]
    assert sorted(seen) == [(5, ["share"], ["Stable", "Empty"])] * 2


async def test_describe_share_groups_at_their_coordinators() -> None:
    tid = uuid.uuid4()
    asked: dict[int, sgd.ShareGroupDescribeRequest] = {}

    def describe(call: Received) -> Any:
        req: sgd.ShareGroupDescribeRequest = call.request
        assert call.version == 1  # the first stable version (Kafka 4.1+)
        asked[call.node] = req
        groups = []
        for gid in req.group_ids:
            if gid == "gone":
                groups.append(
                    sgd.DescribedGroup(
                        error_code=GroupIdNotFoundError.errno,
                        error_message="no such group",
                        group_id=gid,
                    )
                )
                continue
            member = sgd.Member(
                member_id="m1",
                rack_id="r1",
                member_epoch=4,
                client_id="c1",
                client_host="/127.0.0.1",
                subscribed_topic_names=["t"],
                assignment=sgd.Assignment(topic_partitions=[sgd.TopicPartitions(tid, "t", [0, 2])]),
            )
            groups.append(
                sgd.DescribedGroup(
                    group_id=gid,
                    group_state="Stable",
                    group_epoch=5,
                    assignment_epoch=4,
                    assignor_name="simple",
                    members=[member],
                    authorized_operations=(1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE),
                )
            )
        return sgd.ShareGroupDescribeResponse(groups=groups)

    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_admin(kafka) as admin:
        for group, node in {"a": 1, "gone": 1, "b": 2}.items():
            kafka.move_coordinator(group, node)
        kafka.answer(SHARE_GROUP_DESCRIBE, describe)
        results = await admin.describe_share_groups(
            ["a", "b", "gone"], include_authorized_operations=True
        )
    a = results.result("a")
    assert a == ShareGroupDescription(
        group_id="a",
        state=ShareGroupState.STABLE,
        group_epoch=5,
        assignment_epoch=4,
        partition_assignor="simple",
        members=[
            ShareMemberDescription(
                "m1",
                "c1",
                "/127.0.0.1",
                "r1",
                4,
                ["t"],
                [TopicPartition("t", 0), TopicPartition("t", 2)],
            )
        ],
        coordinator=a.coordinator,
        authorized_operations=frozenset({AclOperation.READ, AclOperation.DESCRIBE}),
    )
    assert a.coordinator is not None and a.coordinator.node_id == 1
    b = results.result("b")
    assert b.coordinator is not None and b.coordinator.node_id == 2
    assert isinstance(results["gone"], GroupIdNotFoundError)
    assert sorted(asked[1].group_ids) == ["a", "gone"] and asked[2].group_ids == ["b"]
    assert asked[1].include_authorized_operations


async def test_describe_needs_a_broker_offering_the_stable_v1() -> None:
    # Kafka 4.0 advertises only the early-access v0 (with unstable.api.versions.enable),
    # which the client does not speak.
    async with FakeKafka(brokers=1, tcp=False) as kafka, fake_admin(kafka) as admin:
        kafka.answer(SHARE_GROUP_DESCRIBE, lambda call: None)  # never reached
        kafka.api_versions[SHARE_GROUP_DESCRIBE] = (0, 0)
        with pytest.raises(UnsupportedVersionError, match="describe_share_groups"):
            await admin.describe_share_groups(["a"], timeout_ms=2000)
    assert kafka.received(SHARE_GROUP_DESCRIBE) == []
