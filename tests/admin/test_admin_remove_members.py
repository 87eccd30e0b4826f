"""remove_members_from_consumer_group: against the real broker (Tansu answers LeaveGroup v3+
with a member list) for a dynamic member, and on FakeKafka (in memory, LeaveGroup scripted)
for what a single Tansu group cannot show (static members, per-member errors, a broker below
v3)."""

from __future__ import annotations

from typing import Any

import anyio
import pytest
from confluent_kafka import Producer as CProducer

from aiokafka_ng.admin import AdminClient, MemberToRemove, NewTopic
from aiokafka_ng.errors import UnknownMemberIdError, UnsupportedVersionError
from aiokafka_ng.protocol.messages import leave_group as lg
from aiokafka_ng.testing import FakeKafka, LocalBroker
from aiokafka_ng.testing.fake import Received
from tests.admin.test_admin_broker import _consume, admin_for
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

LEAVE_GROUP = 13


async def test_remove_every_member_against_the_broker(kafka_broker: LocalBroker) -> None:
    topic, group = topic_name("rm-topic"), topic_name("rm")
    bootstrap = kafka_broker.bootstrap_servers
    async with admin_for(kafka_broker) as admin:
        (await admin.create_topics([NewTopic(topic, 1, 1)])).raise_on_error()
        producer = CProducer({"bootstrap.servers": bootstrap})
        producer.produce(topic, b"v", partition=0)
        assert await anyio.to_thread.run_sync(lambda: producer.flush(20)) == 0
        member = await anyio.to_thread.run_sync(_consume, bootstrap, topic, group, 1)
        try:
            before = (await admin.describe_consumer_groups([group])).result(group)
            assert len(before.members) == 1
            results = await admin.remove_members_from_consumer_group(group, reason="stuck")
            assert results.raise_on_error() == {
                MemberToRemove(None, before.members[0].member_id): None
            }
            after = (await admin.describe_consumer_groups([group])).result(group)
            assert after.members == []
        finally:
            await anyio.to_thread.run_sync(member.close)


def fake_admin(kafka: FakeKafka) -> AdminClient:
    return AdminClient(**kafka.client_config(), retry_backoff_ms=20, retry_backoff_max_ms=50)


async def test_static_and_dynamic_members_with_per_member_errors() -> None:
    def handle(call: Received) -> Any:
        return lg.LeaveGroupResponse(
            members=[
                # The coordinator answers a static member with the member id it knew.
                lg.MemberResponse(member_id="m-1", group_instance_id="host-a"),
                lg.MemberResponse(
                    member_id="ghost", group_instance_id=None, error_code=UnknownMemberIdError.errno
                ),
            ]
        )

    async with FakeKafka(brokers=2, tcp=False) as kafka:
        kafka.move_coordinator("g", 2)
        kafka.answer(LEAVE_GROUP, handle)
        async with fake_admin(kafka) as admin:
            results = await admin.remove_members_from_consumer_group(
                "g", [MemberToRemove("host-a"), MemberToRemove(member_id="ghost")], reason="r1"
            )
    assert results.succeeded == {MemberToRemove("host-a"): None}
    assert isinstance(results[MemberToRemove(member_id="ghost")], UnknownMemberIdError)
    (sent,) = kafka.received(LEAVE_GROUP)
    req = sent.request
    assert sent.node == 2  # the group's coordinator
    assert sent.version >= 3 and req.group_id == "g"
    assert [(m.group_instance_id, m.member_id) for m in req.members] == [
        ("host-a", ""),
        (None, "ghost"),
    ]
    if sent.version >= 5:
        assert {m.reason for m in req.members} == {"r1"}


async def test_a_broker_below_leave_group_v3_names_the_operation() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.api_versions[LEAVE_GROUP] = (kafka.api_versions[LEAVE_GROUP][0], 2)
        async with fake_admin(kafka) as admin:
            with pytest.raises(UnsupportedVersionError, match="remove_members_from_consumer_group"):
                await admin.remove_members_from_consumer_group("g", [MemberToRemove("x")])
    assert kafka.received(LEAVE_GROUP) == []


def test_a_member_needs_an_identity() -> None:
    with pytest.raises(ValueError):
        MemberToRemove()
