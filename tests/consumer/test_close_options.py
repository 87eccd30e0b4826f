"""Closing a consumer with or without leaving its group (KIP-1092: Java's ``CloseOptions``
and ``GroupMembershipOperation``), for the classic and the KIP-848 protocol, on FakeKafka
in memory and on virtual time. The member is looked for the way an operator would, with
the admin client's ``describe_consumer_groups``; what was sent is read off the wire. The
Apache Kafka version is tests/kafka/test_kafka_close_options.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng import AdminClient, Consumer
from aiokafka_ng.consumer import CloseOptions, GroupMembershipOperation
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.helpers import topic_name

pytestmark = pytest.mark.anyio

LEAVE_GROUP_API, CONSUMER_GROUP_HEARTBEAT = 13, 68
DEFAULT = GroupMembershipOperation.DEFAULT
LEAVE = GroupMembershipOperation.LEAVE_GROUP
REMAIN = GroupMembershipOperation.REMAIN_IN_GROUP


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def members_after_close(
    protocol: str, operation: GroupMembershipOperation | None, instance: str | None
) -> tuple[list[str], FakeKafka]:
    """Join a group, close with ``operation`` (None: plain ``close()``), and describe it."""
    topic, group = topic_name("close"), topic_name("g")
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic(topic, 2)
        config: dict[str, Any] = {
            **kafka.client_config(),
            "group_id": group,
            "group_protocol": protocol,
            "group_instance_id": instance,
        }
        consumer = Consumer(topic, **config)
        await consumer.start()
        try:
            assert await consumer.wait_for_assignment(timeout_ms=30_000)
        finally:
            if operation is None:
                await consumer.close()
            else:
                await consumer.close(CloseOptions(operation))
        async with AdminClient(**kafka.client_config()) as admin:
            described = (await admin.describe_consumer_groups([group])).result(group)
        return [m.member_id for m in described.members], kafka


def leave_epochs(kafka: FakeKafka) -> list[int]:
    return [
        r.request.member_epoch
        for r in kafka.received(CONSUMER_GROUP_HEARTBEAT)
        if r.request.member_epoch < 0
    ]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_remain_in_group_keeps_a_dynamic_member(protocol: str) -> None:
    members, kafka = await members_after_close(protocol, REMAIN, None)
    assert len(members) == 1  # still there: its session has not timed out
    assert kafka.received(LEAVE_GROUP_API) == [] and leave_epochs(kafka) == []


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("operation", [None, DEFAULT, LEAVE])
async def test_a_dynamic_member_leaves_by_default_and_when_told(
    protocol: str, operation: GroupMembershipOperation | None
) -> None:
    members, kafka = await members_after_close(protocol, operation, None)
    assert members == []  # gone at once, no session timeout waited for
    if protocol == "consumer":
        assert leave_epochs(kafka) == [-1]
    else:
        assert len(kafka.received(LEAVE_GROUP_API)) == 1


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_leave_group_lets_a_static_member_go(protocol: str) -> None:
    members, kafka = await members_after_close(protocol, LEAVE, "host-1")
    assert members == []
    if protocol == "consumer":
        assert leave_epochs(kafka) == [-1]  # not -2: it will not be back
    else:
        (leave,) = kafka.received(LEAVE_GROUP_API)
        assert [m.group_instance_id for m in leave.request.members] == ["host-1"]


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
@pytest.mark.parametrize("operation", [DEFAULT, REMAIN])
async def test_a_static_member_remains_by_default(
    protocol: str, operation: GroupMembershipOperation
) -> None:
    members, kafka = await members_after_close(protocol, operation, "host-1")
    assert len(members) == 1
    assert kafka.received(LEAVE_GROUP_API) == []
    # KIP-848: a static member says it will be back (epoch -2), as Java does.
    assert leave_epochs(kafka) == ([-2] if protocol == "consumer" else [])


async def test_keyword_and_string_forms() -> None:
    assert CloseOptions("remain_in_group").operation is REMAIN
    assert CloseOptions("LEAVE_GROUP", timeout=2).operation is LEAVE
    with pytest.raises(ValueError, match="'stay' is not one of"):
        CloseOptions("stay")
    with pytest.raises(ValueError, match="timeout"):
        CloseOptions(timeout=-1)
    consumer = Consumer(group_id="g")  # never started: close only checks its arguments
    with pytest.raises(TypeError, match="not both"):
        await consumer.close(CloseOptions(REMAIN), group_membership_operation=LEAVE)
    await consumer.close(group_membership_operation="remain_in_group")
