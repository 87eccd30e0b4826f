"""The KIP-848 member (``group_protocol="consumer"``) on its membership core against
FakeKafka's ConsumerGroupHeartbeat, in memory and on virtual time: what the epoch heartbeat
does with the answers a healthy broker seldom sends (fencing, a moved coordinator) and a
commit refused for a stale member epoch. The errors are injected; what the member wrote is
read off the wire (``FakeKafka.received``). The same member against Apache Kafka is in
tests/kafka/test_kip848_group.py.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import Cluster
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer import ConsumerRebalanceListener
from aiokafka_ng.consumer.kip848_member import ConsumerGroupMember
from aiokafka_ng.consumer.membership import GroupMembership, GroupSettings
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.errors import (
    CoordinatorLoadInProgressError,
    CoordinatorNotAvailableError,
    FencedMemberEpochError,
    NotCoordinatorError,
    StaleMemberEpochError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

T = "t"
OFFSET_COMMIT, FIND_COORDINATOR, HEARTBEAT = 8, 10, 68
ALL = frozenset(TopicPartition(T, p) for p in range(4))


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


class Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", frozenset(lost)))


Body = Callable[[GroupMembership, FakeKafka, Listener], Any]


async def run_member(body: Body, **settings: Any) -> FakeKafka:
    """One KIP-848 member of group ``g`` subscribed to ``t`` (4 partitions): joined and
    settled, then ``body``, then closed. Returns the FakeKafka."""
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(T, partitions=4)
        async with Cluster(ProducerConfig(**kafka.client_config()).cluster_config()) as cluster:
            group_settings = GroupSettings(
                group_id="g", **{"enable_auto_commit": False, **settings}
            )
            subs = SubscriptionState(lambda: None)
            offsets = OffsetsClient(
                cluster, group_id="g", isolation_level=0, backoff=ExponentialBackoff(1, 5),
                timeout_s=5,
            )  # fmt: skip
            group = GroupMembership(
                cluster, group_settings, subs, offsets, protocol=ConsumerGroupMember
            )
            listener = Listener()
            async with anyio.create_task_group() as tg:
                await tg.start(group.run)
                with anyio.fail_after(60):
                    subs.subscribe([T], listener)
                    group.request_rejoin()
                    while not group.settled:
                        await group.wait_joined()
                    await body(group, kafka, listener)
                    await group.close()
                tg.cancel_scope.cancel()
    return kafka


async def test_a_fenced_member_loses_its_partitions_and_joins_again_at_once() -> None:
    async def body(group: GroupMembership, kafka: FakeKafka, listener: Listener) -> None:
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
    async def body(group: GroupMembership, kafka: FakeKafka, listener: Listener) -> None:
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
    async def body(group: GroupMembership, kafka: FakeKafka, listener: Listener) -> None:
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


async def dropped(call: Received) -> None:
    return None  # the connection is closed, the request unanswered


async def unanswered(call: Received) -> None:
    await anyio.sleep(60)  # past the request timeout, then the connection is closed


def lookups_between(kafka: FakeKafka, first: Received, last: Received) -> int:
    """FindCoordinator requests received after ``first`` and before ``last`` (in arrival
    order: on virtual time a lookup and the request it serves arrive at the same instant)."""
    order = kafka.received()
    start = next(i for i, x in enumerate(order) if x is first)
    end = next(i for i, x in enumerate(order) if x is last)
    return sum(x.api_key == FIND_COORDINATOR for x in order[start:end])


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
    async def body(group: GroupMembership, kafka: FakeKafka, listener: Listener) -> None:
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
