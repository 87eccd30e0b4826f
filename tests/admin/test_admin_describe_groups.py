"""``describe_consumer_groups`` and ``describe_consumer_group_lag`` over both group protocols
and a group that does not exist, on FakeKafka (in memory, virtual time), which models
ConsumerGroupDescribe and DescribeGroups v6 as Kafka 4 answers them (checked against Kafka
by the differential tests).

A KIP-848 group is described by ConsumerGroupDescribe (member epochs, target assignments,
racks: issue 48), a classic one by DescribeGroups after ConsumerGroupDescribe said
GROUP_ID_NOT_FOUND, and a group that does not exist is a GroupIdNotFoundError in both
calls, not a success (issue 49 item 8).
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.admin import AdminClient, ConsumerGroupState, TopicPartition
from aiokafka_ng.consumer import Consumer
from aiokafka_ng.errors import GroupIdNotFoundError
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def consumer(kafka: FakeKafka, group: str, protocol: str, **config: Any) -> Consumer:
    return Consumer("t", **kafka.client_config(), group_id=group, group_protocol=protocol, **config)


async def test_kip848_classic_and_unknown_groups() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 2)
        async with (
            consumer(kafka, "new", "consumer", client_rack="rack-a") as new,
            consumer(kafka, "old", "classic") as old,
            AdminClient(**kafka.client_config()) as admin,
        ):
            owned = await new.wait_for_assignment()
            await old.wait_for_assignment()
            await new.commit({TopicPartition("t", 0): 0})
            described = await admin.describe_consumer_groups(["new", "old", "nosuch"])
            lags = await admin.describe_consumer_group_lag(["new", "nosuch"])

    kip848 = described.result("new")
    assert kip848.group_type == "consumer" and kip848.state is ConsumerGroupState.STABLE
    assert kip848.group_epoch is not None and kip848.group_epoch > 0
    assert kip848.target_assignment_epoch == kip848.group_epoch
    (member,) = kip848.members
    assert set(member.assignment) == set(member.target_assignment or ()) == set(owned)
    assert member.member_epoch == kip848.group_epoch
    assert member.rack_id == "rack-a" and member.subscribed_topic_names == ["t"]

    classic = described.result("old")
    assert classic.group_type == "classic" and classic.state is ConsumerGroupState.STABLE
    assert classic.group_epoch is None and classic.members[0].member_epoch is None
    assert {tp.partition for tp in classic.members[0].assignment} == {0, 1}

    for outcome in (described["nosuch"], lags["nosuch"]):
        assert isinstance(outcome, GroupIdNotFoundError)
        assert "group 'nosuch' does not exist" in str(outcome)
    assert lags.result("new").partitions[TopicPartition("t", 0)].committed == 0
