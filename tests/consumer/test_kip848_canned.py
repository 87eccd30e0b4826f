"""The KIP-848 member (``group_protocol="consumer"``) on its membership core against
FakeKafka's ConsumerGroupHeartbeat, in memory and on virtual time: what the epoch heartbeat
does with the answers a healthy broker seldom sends (fencing, a moved coordinator) and a
commit refused for a stale member epoch. The errors are injected; what the member wrote is
read off the wire (``FakeKafka.received``). The same member against Apache Kafka is in
tests/kafka/test_kip848_group.py.
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.consumer.kip848_member import ConsumerGroupMember
from aiokafka_ng.consumer.membership import GroupMembership
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    NotCoordinatorError,
    StaleMemberEpochError,
)
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.consumer.canned_group import (
    ALL,
    FIND_COORDINATOR,
    Body,
    Listener,
    T,
    dropped,
    lookups_between,
    run_group,
    unanswered,
)

pytestmark = pytest.mark.anyio

OFFSET_COMMIT, HEARTBEAT = 8, 68


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def run_member(body: Body, **settings: Any) -> FakeKafka:
    """One KIP-848 member (``canned_group.run_group``)."""
    return await run_group(body, ConsumerGroupMember, within=60, **settings)


async def test_a_fenced_member_loses_its_partitions_and_joins_again_at_once() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        member, epoch = group.member_id, group.generation
        assert epoch > 0 and listener.events == [("assigned", ALL)]
        before = len(kafka.received(HEARTBEAT))
        kafka.inject(HEARTBEAT, FencedMemberEpochError.errno)
        await kafka.wait_until(lambda: len(kafka.received(HEARTBEAT)) >= before + 2, within=30)
        fenced, rejoin = kafka.received(HEARTBEAT)[before : before + 2]
        # The join that follows: epoch 0, the same member id (KIP-1082), at once -- not a
        # heartbeat interval later.
        assert fenced.request.member_epoch == epoch
        assert (rejoin.request.member_epoch, rejoin.request.member_id) == (0, member)
        assert rejoin.at - fenced.at < 0.001
        while not group.settled:
            await group.wait_joined()
        assert listener.events[1:] == [("lost", ALL), ("assigned", ALL)]
        assert group.member_id == member and group.generation > 0

    await run_member(body)


async def test_a_moved_coordinator_is_looked_up_and_the_heartbeat_retried_after_the_backoff(
) -> None:  # fmt: skip
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        before = len(kafka.received(HEARTBEAT))
        lookups = len(kafka.received(FIND_COORDINATOR))
        kafka.inject(HEARTBEAT, CoordinatorNotAvailableError.errno)
        await kafka.wait_until(lambda: len(kafka.received(HEARTBEAT)) >= before + 2, within=30)
        failed, retried = kafka.received(HEARTBEAT)[before : before + 2]
        assert len(kafka.received(FIND_COORDINATOR)) > lookups  # looked up again
        # The retry backoff's first step (100 ms, +-20 %), not the broker's interval (5 s).
        assert 0.07 <= retried.at - failed.at <= 0.2
        assert retried.request.member_epoch == failed.request.member_epoch  # not fenced
        assert group.settled and listener.events == [("assigned", ALL)]

    await run_member(body)


async def test_a_commit_refused_for_a_stale_epoch_goes_again_with_the_next_heartbeat() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        beats = len(kafka.received(HEARTBEAT))
        kafka.inject(OFFSET_COMMIT, StaleMemberEpochError.errno)
        await group.commit({TopicPartition(T, 0): OffsetAndMetadata(7)})
        commits = kafka.received(OFFSET_COMMIT)
        assert len(commits) == 2
        # Retried once a heartbeat (sent at once for it) was answered, not before.
        answered = [x for x in kafka.received(HEARTBEAT)[beats:] if x.at <= commits[1].at]
        assert answered and commits[0].at <= answered[0].at
        assert commits[1].request.generation_id_or_member_epoch == group.generation
        assert kafka.committed("g") == {(T, 0): 7}

    await run_member(body)


# Whether a failed heartbeat costs a new FindCoordinator is the coordinator route's to decide
# (aiokafka_ng.cluster.retry): only an answer saying the coordinator moved, a dropped
# connection, or no answer within the request timeout, as Java's heartbeat manager.


@pytest.mark.parametrize(
    ("fault", "lookups"),
    [
        ("COORDINATOR_LOAD_IN_PROGRESS", 0),  # the right coordinator, still loading
        ("NOT_COORDINATOR", 1),
        ("dropped", 1),
        ("unanswered", 1),
    ],
)
async def test_only_a_heartbeat_the_coordinator_did_not_answer_finds_it_again(
    fault: str, lookups: int
) -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        before = len(kafka.received(HEARTBEAT))
        if fault == "dropped":
            kafka.answer(HEARTBEAT, dropped, times=1)
        elif fault == "unanswered":
            kafka.answer(HEARTBEAT, unanswered, times=1)
        else:
            codes = {
                "COORDINATOR_LOAD_IN_PROGRESS": CoordinatorLoadInProgressError.errno,
                "NOT_COORDINATOR": NotCoordinatorError.errno,
            }
            kafka.inject(HEARTBEAT, codes[fault])
        await kafka.wait_until(lambda: len(kafka.received(HEARTBEAT)) >= before + 2, within=50)
        failed, retried = kafka.received(HEARTBEAT)[before : before + 2]
        assert lookups_between(kafka, failed, retried) == lookups
        assert retried.node == kafka.coordinator_for("g")
        assert retried.request.member_epoch == failed.request.member_epoch  # not fenced
        assert group.settled and listener.events == [("assigned", ALL)]

    await run_member(body, request_timeout_s=5.0)
