"""Group membership and offset commits against FakeKafka's classic group coordinator, in
memory and on virtual time.

Why not Tansu: it cannot be made to answer MEMBER_ID_REQUIRED, expel a member, or refuse a
commit on demand; FakeKafka answers MEMBER_ID_REQUIRED as Kafka 4 does (KIP-394), and the
expulsion and the refused commits are injected. The requests the member sends are read off
the wire (``FakeKafka.received``).
"""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.consumer import CommitFailedError
from aiokafka_ng.consumer.assignors import decode_assignment
from aiokafka_ng.consumer.classic_member import ClassicMember
from aiokafka_ng.consumer.membership import GroupMembership
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    IllegalGenerationError,
    NotCoordinatorError,
    RebalanceInProgressError,
    UnknownMemberIdError,
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

OFFSET_COMMIT, HEARTBEAT = 8, 12
JOIN_GROUP, LEAVE_GROUP, SYNC_GROUP = 11, 13, 14


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


class AsyncListener(Listener):
    """``on_partitions_assigned`` a coroutine function, as applications may write it."""

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:  # type: ignore[override]
        super().on_partitions_assigned(assigned)


async def run_classic(body: Body, **settings: Any) -> FakeKafka:
    """One classic member (``canned_group.run_group``), heartbeating every 20 ms unless
    told."""
    settings = {
        "session_timeout_ms": 6000,  # group.min.session.timeout.ms: Kafka's least
        "heartbeat_interval_s": 0.02,
        **settings,
    }
    return await run_group(body, ClassicMember, listener=AsyncListener(), within=30, **settings)


def joins(kafka: FakeKafka) -> list[str]:
    """The member ids of the JoinGroup requests written, in order."""
    return [x.request.member_id for x in kafka.received(JOIN_GROUP)]


async def test_member_id_required_then_join_with_that_id() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        # KIP-394: the first join gets MEMBER_ID_REQUIRED and the id to join with.
        assert group.member_id and joins(kafka) == ["", group.member_id]
        assert group.generation == 1
        assert listener.events == [("assigned", ALL)]
        assert kafka.requests(kafka.coordinator_for("g"))[11] == 2  # both at the coordinator

    kafka = await run_classic(body)
    leaves = kafka.received(LEAVE_GROUP)
    assert len(leaves) == 1 and leaves[0].request.members[0].member_id == joins(kafka)[-1]


async def test_expelled_member_loses_partitions_and_rejoins() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        first = group.member_id
        kafka.inject(HEARTBEAT, UnknownMemberIdError.errno)  # expelled
        while group.generation < 2 or not group.settled:
            await group.wait_joined()
        assert ("lost", ALL) in listener.events
        assert listener.events[-1] == ("assigned", ALL)
        # Expelled: it joined again from scratch (no member id), then with the new id.
        assert joins(kafka) == ["", first, "", group.member_id]
        assert group.member_id != first

    await run_classic(body)


async def test_static_member_sends_instance_id_and_does_not_leave() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        # Heartbeats every 20 ms: let a few go out.
        await kafka.wait_until(lambda: kafka.requests()[HEARTBEAT] >= 3)
        assert all(x.request.group_instance_id == "host-1" for x in kafka.received(JOIN_GROUP))

    kafka = await run_classic(body, group_instance_id="host-1")
    assert not kafka.received(LEAVE_GROUP)
    heartbeats = kafka.received(HEARTBEAT)
    assert heartbeats and all(x.request.group_instance_id == "host-1" for x in heartbeats)


async def test_commit_retries_coordinator_errors_and_fails_on_stale_generation() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        tp = TopicPartition(T, 0)
        lookups = len(kafka.received(FIND_COORDINATOR))
        kafka.inject(OFFSET_COMMIT, NotCoordinatorError.errno)
        await group.commit({tp: OffsetAndMetadata(5)})
        assert len(kafka.received(FIND_COORDINATOR)) > lookups  # looked up again
        commits = [x.request for x in kafka.received(OFFSET_COMMIT)]
        assert len(commits) == 2
        assert commits[-1].generation_id_or_member_epoch == group.generation
        assert commits[-1].member_id == group.member_id
        assert commits[-1].topics[0].partitions[0].committed_offset == 5
        assert kafka.committed("g") == {(T, 0): 5}
        kafka.inject(OFFSET_COMMIT, IllegalGenerationError.errno)
        with pytest.raises(CommitFailedError):
            await group.commit({tp: OffsetAndMetadata(6)})
        assert kafka.committed("g") == {(T, 0): 5}

    await run_classic(body)


async def test_leader_rebalances_when_partitions_are_added() -> None:
    async def body(group: GroupMembership, kafka: FakeKafka, cluster: Cluster, _: Listener) -> None:
        before = len(joins(kafka))
        kafka.cluster.add_partitions(kafka.cluster.topics[T], 6)
        await cluster.refresh([T])  # the leader's next metadata snapshot has 6 partitions
        while len(joins(kafka)) == before or not group.settled:
            await group.wait_joined()
        assert len(joins(kafka)) == before + 1

    kafka = await run_classic(body)
    syncs = kafka.received(SYNC_GROUP)
    assert len(syncs) == 2
    assert len(decode_assignment(syncs[-1].request.assignments[0].assignment)) == 6


async def test_a_failed_heartbeat_goes_again_after_the_backoff_not_the_interval() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        # COORDINATOR_NOT_AVAILABLE: the coordinator is looked up again and the heartbeat
        # retried after the retry backoff (100 ms, jittered), as Java's, rather than a whole
        # heartbeat interval (10 s) later, most of a session timeout gone.
        await kafka.wait_until(lambda: kafka.requests()[HEARTBEAT] >= 1)
        kafka.inject(HEARTBEAT, CoordinatorNotAvailableError.errno)
        await kafka.wait_until(lambda: kafka.requests()[HEARTBEAT] >= 3, within=60)
        first, failed, retried = kafka.received(HEARTBEAT)[:3]
        assert failed.at - first.at == pytest.approx(10.0, abs=0.1)  # the interval
        assert kafka.errors(HEARTBEAT, CoordinatorNotAvailableError.errno) == 1
        assert 0.07 <= retried.at - failed.at <= 0.2  # the backoff's first step
        assert group.settled

    await run_classic(body, heartbeat_interval_s=10.0, session_timeout_ms=45000)


async def test_an_expelled_member_joins_again_at_once() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        # The rejoin the expulsion asks for wakes the member task when it next waits: the
        # JoinGroup follows the failed heartbeat, not a heartbeat interval (2 s) later.
        await kafka.wait_until(lambda: kafka.requests()[HEARTBEAT] >= 1)
        kafka.inject(HEARTBEAT, UnknownMemberIdError.errno)
        while group.generation < 2 or not group.settled:
            await group.wait_joined()
        expelled = kafka.received(HEARTBEAT)[1]
        rejoin = kafka.received(JOIN_GROUP)[2]  # after the first join's two
        assert rejoin.request.member_id == ""  # from scratch: the member id was forgotten
        assert 0 <= rejoin.at - expelled.at < 0.1

    await run_classic(body, heartbeat_interval_s=2.0)


# ---------------------------------------------------------------- the coordinator route
#
# Whether a failed group request costs a new FindCoordinator is the coordinator route's to
# decide (aiokafka_ng.cluster.retry), for every caller alike: only an answer saying the
# coordinator moved or is unavailable, a dropped connection or a request left unanswered
# past its timeout (as Java's consumer), not every retriable error.


def faults(kafka: FakeKafka, api_key: int, fault: str) -> None:
    """The next request of ``api_key`` fails with ``fault``: an error code's name, or a
    dropped connection, or no answer within the request timeout."""
    if fault == "dropped":
        kafka.answer(api_key, dropped, times=1)
    elif fault == "unanswered":
        kafka.answer(api_key, unanswered, times=1)
    else:
        kafka.inject(api_key, {"NOT_COORDINATOR": NotCoordinatorError.errno}[fault])


@pytest.mark.parametrize("error", [CoordinatorLoadInProgressError, RebalanceInProgressError])
async def test_a_heartbeat_error_that_does_not_concern_the_coordinator_keeps_it(
    error: type[CoordinatorLoadInProgressError | RebalanceInProgressError],
) -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        await kafka.wait_until(lambda: kafka.requests()[HEARTBEAT] >= 1)
        lookups, beats = len(kafka.received(FIND_COORDINATOR)), len(kafka.received(HEARTBEAT))
        kafka.inject(HEARTBEAT, error.errno)
        # The failed heartbeat, then (after the backoff, or a rejoin) two more.
        await kafka.wait_until(lambda: len(kafka.received(HEARTBEAT)) >= beats + 3, within=60)
        assert kafka.errors(HEARTBEAT, error.errno) == 1
        assert len(kafka.received(FIND_COORDINATOR)) == lookups
        coordinator = kafka.coordinator_for("g")
        assert {x.node for x in kafka.received(HEARTBEAT)[beats:]} == {coordinator}

    await run_classic(body)


@pytest.mark.parametrize("fault", ["NOT_COORDINATOR", "dropped", "unanswered"])
async def test_a_heartbeat_the_coordinator_did_not_answer_finds_it_again(fault: str) -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        await kafka.wait_until(lambda: kafka.requests()[HEARTBEAT] >= 1)
        beats = len(kafka.received(HEARTBEAT))
        faults(kafka, HEARTBEAT, fault)
        await kafka.wait_until(lambda: len(kafka.received(HEARTBEAT)) >= beats + 2, within=120)
        failed, after = kafka.received(HEARTBEAT)[beats : beats + 2]
        assert lookups_between(kafka, failed, after) == 1  # looked up again, once

    # A session long enough that the unanswered heartbeat does not cost the membership.
    await run_classic(
        body, session_timeout_ms=120_000, heartbeat_interval_s=1.0, request_timeout_s=5.0
    )


async def test_a_join_answered_coordinator_load_in_progress_keeps_the_coordinator() -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        lookups, before = len(kafka.received(FIND_COORDINATOR)), len(joins(kafka))
        kafka.inject(JOIN_GROUP, CoordinatorLoadInProgressError.errno)
        group.request_rejoin()
        while len(joins(kafka)) < before + 2 or not group.settled:
            await group.wait_joined()
        assert kafka.errors(JOIN_GROUP, CoordinatorLoadInProgressError.errno) == 1
        assert len(kafka.received(FIND_COORDINATOR)) == lookups  # retried at the same one

    await run_classic(body)


@pytest.mark.parametrize("fault", ["NOT_COORDINATOR", "dropped"])
async def test_a_join_the_coordinator_did_not_answer_finds_it_again(fault: str) -> None:
    async def body(
        group: GroupMembership, kafka: FakeKafka, c: Cluster, listener: Listener
    ) -> None:
        before = len(joins(kafka))
        faults(kafka, JOIN_GROUP, fault)
        group.request_rejoin()
        while len(joins(kafka)) < before + 2 or not group.settled:
            await group.wait_joined()
        failed, retried = kafka.received(JOIN_GROUP)[before : before + 2]
        assert lookups_between(kafka, failed, retried) == 1

    await run_classic(body)
