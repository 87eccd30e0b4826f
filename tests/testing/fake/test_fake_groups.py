"""The fake cluster's group coordinator, driven with request objects (no network).

Each test plays clients' requests against :class:`GroupCoordinator` and checks Kafka's
answers: classic rebalances (leader, generations, parked JoinGroup/SyncGroup, session and
rebalance timeouts, static members), offsets, KIP-848 consumer groups (epochs, revocation
before reassignment, fencing) and the group admin APIs. Every test runs on asyncio and trio,
on virtual time (:mod:`aiokafka_ng.testing.virtual_time`), so timings are asserted exactly.
"""

from __future__ import annotations

import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar

import anyio
import anyio.abc
import pytest

from aiokafka_ng import Consumer, Producer, TopicPartition
from aiokafka_ng.consumer.assignors import encode_subscription
from aiokafka_ng.protocol.messages.consumer_group_describe import (
    ConsumerGroupDescribeRequest,
    ConsumerGroupDescribeResponse,
)
from aiokafka_ng.protocol.messages.consumer_group_heartbeat import (
    ConsumerGroupHeartbeatRequest,
    ConsumerGroupHeartbeatResponse,
    TopicPartitions,
)
from aiokafka_ng.protocol.messages.delete_groups import DeleteGroupsRequest, DeleteGroupsResponse
from aiokafka_ng.protocol.messages.describe_groups import (
    DescribeGroupsRequest,
    DescribeGroupsResponse,
)
from aiokafka_ng.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from aiokafka_ng.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupRequestProtocol,
    JoinGroupResponse,
)
from aiokafka_ng.protocol.messages.leave_group import (
    LeaveGroupRequest,
    LeaveGroupResponse,
    MemberIdentity,
)
from aiokafka_ng.protocol.messages.list_groups import ListGroupsRequest, ListGroupsResponse
from aiokafka_ng.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
    OffsetCommitResponse,
)
from aiokafka_ng.protocol.messages.offset_delete import (
    OffsetDeleteRequest,
    OffsetDeleteRequestPartition,
    OffsetDeleteRequestTopic,
    OffsetDeleteResponse,
)
from aiokafka_ng.protocol.messages.offset_fetch import (
    OffsetFetchRequest,
    OffsetFetchRequestGroup,
    OffsetFetchRequestTopic,
    OffsetFetchRequestTopics,
    OffsetFetchResponse,
)
from aiokafka_ng.protocol.messages.sync_group import (
    SyncGroupRequest,
    SyncGroupRequestAssignment,
    SyncGroupResponse,
)
from aiokafka_ng.protocol.primitives import ApiMessage
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake._cluster import Broker, FakeCluster
from aiokafka_ng.testing.fake._codes import (
    COORDINATOR_NOT_AVAILABLE,
    FENCED_INSTANCE_ID,
    FENCED_MEMBER_EPOCH,
    GROUP_ID_NOT_FOUND,
    ILLEGAL_GENERATION,
    INCONSISTENT_GROUP_PROTOCOL,
    MEMBER_ID_REQUIRED,
    NON_EMPTY_GROUP,
    NONE,
    NOT_COORDINATOR,
    REBALANCE_IN_PROGRESS,
    STALE_MEMBER_EPOCH,
    UNKNOWN_MEMBER_ID,
    UNKNOWN_TOPIC_OR_PARTITION,
    UNRELEASED_INSTANCE_ID,
    UNSUPPORTED_VERSION,
    code,
)
from aiokafka_ng.testing.fake._groups import GroupCoordinator

pytestmark = pytest.mark.anyio

GROUP = "g"
R = TypeVar("R")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    """Every test on asyncio and trio, on virtual time: sleeps and timeouts cost no wall time
    and differences of ``anyio.current_time()`` are exact."""
    return virtual_time.backend(request.param)


def make_cluster(**topics: int) -> FakeCluster:
    cluster = FakeCluster([Broker(n, "127.0.0.1", 9090 + n) for n in (1, 2, 3)])
    for name, partitions in topics.items():
        cluster.create_topic(name, partitions)
    return cluster


async def ask(coord: GroupCoordinator, node: int, version: int, request: Any, kind: type[R]) -> R:
    response: ApiMessage = await coord.handle(node, version, request)
    assert isinstance(response, kind)
    return response


class Background(Generic[R]):
    """A request answered later: started in a task, read once it has returned."""

    def __init__(self, tg: anyio.abc.TaskGroup, call: Callable[[], Awaitable[R]]) -> None:
        self._value: R | None = None
        self._done = anyio.Event()
        tg.start_soon(self._run, call)

    async def _run(self, call: Callable[[], Awaitable[R]]) -> None:
        self._value = await call()
        self._done.set()

    @property
    def done(self) -> bool:
        return self._done.is_set()

    async def result(self) -> R:
        await self._done.wait()
        assert self._value is not None
        return self._value


@dataclass
class Classic:
    """A classic-protocol member, as a client library drives one."""

    coord: GroupCoordinator
    node: int
    protocols: list[tuple[str, bytes]] = field(default_factory=lambda: [("range", b"m")])
    instance_id: str | None = None
    session_ms: int = 10_000
    rebalance_ms: int = 30_000
    member_id: str = ""
    generation: int = -1

    async def join(self, version: int = 9) -> JoinGroupResponse:
        """JoinGroup, and again with the member id when asked for one (KIP-394)."""
        response = await self._join_once(version)
        if response.error_code == MEMBER_ID_REQUIRED:
            self.member_id = response.member_id
            response = await self._join_once(version)
        if response.error_code == NONE:
            self.member_id = response.member_id
            self.generation = response.generation_id
        return response

    async def _join_once(self, version: int) -> JoinGroupResponse:
        request = JoinGroupRequest(
            group_id=GROUP,
            session_timeout_ms=self.session_ms,
            rebalance_timeout_ms=self.rebalance_ms,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            protocol_type="consumer",
            protocols=[JoinGroupRequestProtocol(name=n, metadata=m) for n, m in self.protocols],
        )
        return await ask(self.coord, self.node, version, request, JoinGroupResponse)

    async def sync(self, assignments: dict[str, bytes] | None = None) -> SyncGroupResponse:
        request = SyncGroupRequest(
            group_id=GROUP,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
            assignments=[
                SyncGroupRequestAssignment(member_id=m, assignment=a)
                for m, a in (assignments or {}).items()
            ],
        )
        return await ask(self.coord, self.node, 5, request, SyncGroupResponse)

    async def heartbeat(self) -> int:
        request = HeartbeatRequest(
            group_id=GROUP,
            generation_id=self.generation,
            member_id=self.member_id,
            group_instance_id=self.instance_id,
        )
        return (await ask(self.coord, self.node, 4, request, HeartbeatResponse)).error_code

    async def commit(
        self, offsets: dict[tuple[str, int], int], generation: int | None = None
    ) -> int:
        """Commit ``offsets``; the one error code of every partition."""
        response = await commit(
            self.coord,
            self.node,
            offsets,
            generation=self.generation if generation is None else generation,
            member_id=self.member_id,
        )
        (only,) = {p.error_code for t in response.topics for p in t.partitions}
        return only


async def commit(
    coord: GroupCoordinator,
    node: int,
    offsets: dict[tuple[str, int], int],
    *,
    generation: int = -1,
    member_id: str = "",
    version: int = 9,
) -> OffsetCommitResponse:
    by_topic: dict[str, list[OffsetCommitRequestPartition]] = {}
    for (topic, partition), offset in offsets.items():
        by_topic.setdefault(topic, []).append(
            OffsetCommitRequestPartition(
                partition_index=partition, committed_offset=offset, committed_leader_epoch=3
            )
        )
    request = OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=generation,
        member_id=member_id,
        topics=[OffsetCommitRequestTopic(name=t, partitions=ps) for t, ps in by_topic.items()],
    )
    return await ask(coord, node, version, request, OffsetCommitResponse)


async def describe(coord: GroupCoordinator, node: int) -> tuple[str, set[str]]:
    """The classic group's state and member ids, as DescribeGroups tells them."""
    response = await ask(
        coord, node, 5, DescribeGroupsRequest(groups=[GROUP]), DescribeGroupsResponse
    )
    (group,) = response.groups
    return group.group_state, {m.member_id for m in group.members}


async def form_group(first: Classic, second: Classic) -> int:
    """Both members in one stable generation (``first`` leads); returns the generation."""
    await first.join()
    await first.sync({first.member_id: b""})
    async with anyio.create_task_group() as tg:
        joining = Background(tg, second.join)
        await anyio.wait_all_tasks_blocked()
        assert not joining.done
        await first.join()
        await joining.result()
        following = Background(tg, second.sync)
        await first.sync({first.member_id: b"1", second.member_id: b"2"})
        assert (await following.result()).assignment == b"2"
    assert first.generation == second.generation
    return first.generation


def setup(**topics: int) -> tuple[FakeCluster, GroupCoordinator, int]:
    cluster = make_cluster(**topics)
    return cluster, GroupCoordinator(cluster), cluster.coordinator(GROUP)


def group_on(cluster: FakeCluster, node: int, prefix: str) -> str:
    """A group id that ``node`` coordinates too."""
    return next(
        f"{prefix}-{i}" for i in range(1000) if cluster.coordinator(f"{prefix}-{i}") == node
    )


# ---- classic groups -----------------------------------------------------------------------


async def test_two_members_get_one_leader_one_generation_and_their_assignments() -> None:
    _, coord, node = setup()
    a, b = Classic(coord, node), Classic(coord, node)
    alone = await a.join()
    assert (alone.error_code, alone.generation_id, alone.leader) == (NONE, 1, a.member_id)
    assert (await a.sync({a.member_id: b"everything"})).assignment == b"everything"

    async with anyio.create_task_group() as tg:
        b_join = Background(tg, b.join)
        await anyio.wait_all_tasks_blocked()
        assert not b_join.done  # parked until the rebalance completes
        a_join = await a.join()
        b_joined = await b_join.result()
    assert a_join.error_code == b_joined.error_code == NONE
    assert a_join.generation_id == b_joined.generation_id == 2
    assert a_join.leader == b_joined.leader == a.member_id
    assert {m.member_id for m in a_join.members} == {a.member_id, b.member_id}
    assert {m.metadata for m in a_join.members} == {b"m"}
    assert b_joined.members == []  # only the leader is told the members
    assert a_join.protocol_name == b_joined.protocol_name == "range"

    async with anyio.create_task_group() as tg:
        b_sync = Background(tg, b.sync)
        await anyio.wait_all_tasks_blocked()
        assert not b_sync.done  # waits for the leader's assignments
        a_sync = await a.sync({a.member_id: b"p0", b.member_id: b"p1"})
        b_synced = await b_sync.result()
    assert (a_sync.error_code, a_sync.assignment) == (NONE, b"p0")
    assert (b_synced.error_code, b_synced.assignment) == (NONE, b"p1")
    assert await describe(coord, node) == ("Stable", {a.member_id, b.member_id})


async def test_heartbeat_and_sync_during_a_rebalance_answer_rebalance_in_progress() -> None:
    _, coord, node = setup()
    a, b = Classic(coord, node), Classic(coord, node)
    await form_group(a, b)
    assert await a.heartbeat() == NONE
    # A follower joining again with the same metadata just gets the current generation.
    assert (await b.join()).generation_id == b.generation == 2
    assert await describe(coord, node) == ("Stable", {a.member_id, b.member_id})
    async with anyio.create_task_group() as tg:
        c = Classic(coord, node)
        c_join = Background(tg, c.join)
        await anyio.wait_all_tasks_blocked()
        assert await describe(coord, node) == (
            "PreparingRebalance",
            {a.member_id, b.member_id, c.member_id},
        )
        assert await a.heartbeat() == REBALANCE_IN_PROGRESS
        assert (await a.sync()).error_code == REBALANCE_IN_PROGRESS
        a_join = Background(tg, a.join)
        await anyio.wait_all_tasks_blocked()
        assert not (a_join.done or c_join.done)  # b has not rejoined yet
        await b.join()
        await a_join.result()
        await c_join.result()
    assert a.generation == b.generation == c.generation == 3


async def test_a_new_member_joins_twice_from_v4_and_once_before() -> None:
    _, coord, node = setup()
    old = Classic(coord, node)
    direct = await old._join_once(3)
    assert (direct.error_code, direct.generation_id) == (NONE, 1)
    old.member_id, old.generation = direct.member_id, direct.generation_id
    await old.sync()
    first = await Classic(coord, node)._join_once(4)
    assert first.error_code == MEMBER_ID_REQUIRED
    assert first.member_id  # the id to join with
    assert await describe(coord, node) == ("Stable", {old.member_id})  # no rebalance yet
    async with anyio.create_task_group() as tg:
        rejoin = Background(tg, lambda: old.join(version=3))
        # The member id handed out is pending: the join phase waits for it.
        await anyio.wait_all_tasks_blocked()
        assert not rejoin.done
        second = Classic(coord, node, member_id=first.member_id)
        joined = await second.join(version=4)
        assert (joined.error_code, joined.member_id) == (NONE, first.member_id)
        assert (await rejoin.result()).generation_id == joined.generation_id == 2


async def test_protocol_is_one_all_members_support_else_inconsistent() -> None:
    _, coord, node = setup()
    a = Classic(coord, node, protocols=[("range", b"a"), ("roundrobin", b"a")])
    b = Classic(coord, node, protocols=[("cooperative-sticky", b"b"), ("roundrobin", b"b")])
    odd = Classic(coord, node, protocols=[("sticky", b"x")])
    await a.join()
    await a.sync()
    assert (await odd.join()).error_code == INCONSISTENT_GROUP_PROTOCOL
    async with anyio.create_task_group() as tg:
        b_join = Background(tg, b.join)
        await anyio.wait_all_tasks_blocked()
        leader = await a.join()
        assert (await b_join.result()).protocol_name == leader.protocol_name == "roundrobin"
    assert {m.metadata for m in leader.members} == {b"a", b"b"}


async def test_commit_with_a_stale_generation_is_refused() -> None:
    _, coord, node = setup(t=2)
    a = Classic(coord, node)
    await a.join()  # generation 1, the group completing its rebalance
    assert await a.commit({("t", 0): 5}) == REBALANCE_IN_PROGRESS
    await a.sync({a.member_id: b""})
    assert await a.commit({("t", 0): 5}) == NONE
    assert await a.commit({("t", 0): 6}, generation=0) == ILLEGAL_GENERATION
    await a.join()  # the leader rejoins: generation 2
    await a.sync({a.member_id: b""})
    assert a.generation == 2
    assert await a.commit({("t", 0): 7}, generation=1) == ILLEGAL_GENERATION
    stranger = Classic(coord, node, member_id="nobody", generation=2)
    assert await stranger.commit({("t", 0): 8}) == UNKNOWN_MEMBER_ID
    # Outside group management (generation -1) only an empty group takes commits.
    response = await commit(coord, node, {("t", 1): 9})
    assert response.topics[0].partitions[0].error_code == UNKNOWN_MEMBER_ID
    assert await fetched(coord, node, {"t": [0, 1]}) == {("t", 0): 5, ("t", 1): -1}


async def fetched(
    coord: GroupCoordinator, node: int, topics: dict[str, list[int]] | None, version: int = 7
) -> dict[tuple[str, int], int]:
    request = OffsetFetchRequest(
        group_id=GROUP,
        topics=None
        if topics is None
        else [OffsetFetchRequestTopic(name=t, partition_indexes=ps) for t, ps in topics.items()],
    )
    response = await ask(coord, node, version, request, OffsetFetchResponse)
    assert response.error_code == NONE
    return {
        (t.name, p.partition_index): p.committed_offset
        for t in response.topics
        for p in t.partitions
    }


async def test_offset_fetch_returns_what_was_committed() -> None:
    cluster, _, node = setup(t=3, u=1)
    # The transaction coordinator's offsets not yet committed (its pending_offsets).
    pending: dict[str, set[tuple[str, int]]] = {}
    coord = GroupCoordinator(cluster, pending_txn_offsets=lambda g: pending.get(g, set()))
    response = await commit(coord, node, {("t", 0): 10, ("t", 2): 12, ("u", 0): 1, ("t", 9): 1})
    errors = {
        (t.name, p.partition_index): p.error_code for t in response.topics for p in t.partitions
    }
    assert errors == {
        ("t", 0): NONE,
        ("t", 2): NONE,
        ("u", 0): NONE,
        ("t", 9): UNKNOWN_TOPIC_OR_PARTITION,
    }
    assert await fetched(coord, node, {"t": [0, 1, 2]}) == {
        ("t", 0): 10,
        ("t", 1): -1,
        ("t", 2): 12,
    }
    assert await fetched(coord, node, None) == {("t", 0): 10, ("t", 2): 12, ("u", 0): 1}
    assert cluster.offsets[GROUP][("t", 0)] == (10, 3, "")

    # v8+: several groups at once; a group never committed to has no offsets.
    other = group_on(cluster, node, "other")
    request = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup(
                group_id=g, topics=[OffsetFetchRequestTopics(name="t", partition_indexes=[2])]
            )
            for g in (GROUP, other)
        ]
    )
    batched = await ask(coord, node, 9, request, OffsetFetchResponse)
    assert [(g.group_id, g.error_code) for g in batched.groups] == [(GROUP, NONE), (other, NONE)]
    offsets = [g.topics[0].partitions[0].committed_offset for g in batched.groups]
    assert offsets == [12, -1]

    # require_stable: offsets a transaction has pending are not answered (KIP-447).
    pending[GROUP] = {("t", 0)}
    stable = OffsetFetchRequest(
        group_id=GROUP,
        topics=[OffsetFetchRequestTopic(name="t", partition_indexes=[0, 2])],
        require_stable=True,
    )
    answer = await ask(coord, node, 7, stable, OffsetFetchResponse)
    parts = {p.partition_index: p for p in answer.topics[0].partitions}
    assert (parts[0].error_code, parts[0].committed_offset) == (
        code("UNSTABLE_OFFSET_COMMIT"),
        -1,
    )
    assert (parts[2].error_code, parts[2].committed_offset) == (NONE, 12)
    assert await fetched(coord, node, {"t": [0]}) == {("t", 0): 10}  # not asked stable

    # v10 names topics by id, in the commit and in the fetch.
    t_id = cluster.topics["t"].topic_id
    by_id = OffsetCommitRequest(
        group_id=GROUP,
        topics=[
            OffsetCommitRequestTopic(
                topic_id=t_id,
                partitions=[OffsetCommitRequestPartition(partition_index=1, committed_offset=11)],
            )
        ],
    )
    committed = await ask(coord, node, 10, by_id, OffsetCommitResponse)
    assert committed.topics[0].topic_id == t_id
    assert committed.topics[0].partitions[0].error_code == NONE
    fetch_by_id = OffsetFetchRequest(
        groups=[
            OffsetFetchRequestGroup(
                group_id=GROUP,
                topics=[OffsetFetchRequestTopics(topic_id=t_id, partition_indexes=[1])],
            )
        ]
    )
    got = await ask(coord, node, 10, fetch_by_id, OffsetFetchResponse)
    assert got.groups[0].topics[0].topic_id == t_id
    assert got.groups[0].topics[0].partitions[0].committed_offset == 11


async def test_a_member_whose_session_expires_is_removed_and_the_other_rejoins() -> None:
    _, coord, node = setup()
    a, b = Classic(coord, node), Classic(coord, node)  # sessions of 10 s
    generation = await form_group(a, b)
    start = anyio.current_time()
    for _ in range(3):  # a heartbeats every 3 s; b is silent
        await anyio.sleep(3)
        assert await a.heartbeat() == NONE
    assert await describe(coord, node) == ("Stable", {a.member_id, b.member_id})  # at 9 s
    await anyio.sleep(3)
    assert anyio.current_time() - start == pytest.approx(12)
    assert await a.heartbeat() == REBALANCE_IN_PROGRESS  # b expired at 10 s
    rejoined = await a.join()
    assert rejoined.generation_id == generation + 1
    assert [m.member_id for m in rejoined.members] == [a.member_id]
    assert await b.heartbeat() == UNKNOWN_MEMBER_ID


async def test_a_member_that_does_not_rejoin_is_removed_at_the_rebalance_timeout() -> None:
    _, coord, node = setup()
    a, b = Classic(coord, node), Classic(coord, node)  # rebalance timeouts of 30 s
    generation = await form_group(a, b)
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        rejoin = Background(tg, a.join)  # the leader rejoins: a rebalance
        for _ in range(7):  # b keeps its session alive but never rejoins
            await anyio.sleep(4)
            assert await b.heartbeat() == REBALANCE_IN_PROGRESS
        assert not rejoin.done
        answer = await rejoin.result()
    assert anyio.current_time() - start == pytest.approx(30)
    assert answer.generation_id == generation + 1
    assert [m.member_id for m in answer.members] == [a.member_id]
    assert await b.heartbeat() == UNKNOWN_MEMBER_ID


async def test_a_member_that_never_syncs_is_removed_at_the_rebalance_timeout() -> None:
    _, coord, node = setup()
    # Sessions longer than the 30 s rebalance timeout, so that only the latter can end b.
    a, b = Classic(coord, node, session_ms=45_000), Classic(coord, node, session_ms=45_000)
    await a.join()
    await a.sync()
    async with anyio.create_task_group() as tg:
        b_join = Background(tg, b.join)
        await anyio.wait_all_tasks_blocked()
        await a.join()
        await b_join.result()
    start = anyio.current_time()
    await a.sync({a.member_id: b"", b.member_id: b""})  # b never sends its SyncGroup
    for _ in range(7):
        await anyio.sleep(4)
        assert await a.heartbeat() == NONE
    await anyio.sleep(4)  # 32 s: past the 30 s rebalance timeout
    assert await a.heartbeat() == REBALANCE_IN_PROGRESS
    assert anyio.current_time() - start == pytest.approx(32)
    assert await describe(coord, node) == ("PreparingRebalance", {a.member_id})


async def test_the_initial_rebalance_waits_for_members_that_keep_arriving() -> None:
    cluster = make_cluster()
    coord = GroupCoordinator(cluster, initial_rebalance_delay_ms=3000)  # Kafka's default
    node = cluster.coordinator(GROUP)
    a, b = Classic(coord, node), Classic(coord, node)
    start = anyio.current_time()
    async with anyio.create_task_group() as tg:
        a_join = Background(tg, a.join)
        await anyio.sleep(1)
        b_join = Background(tg, b.join)
        a_joined, b_joined = await a_join.result(), await b_join.result()
    # b arrived within the first 3 s, so the delay ran once more.
    assert anyio.current_time() - start == pytest.approx(6)
    assert a_joined.generation_id == b_joined.generation_id == 1
    assert a_joined.leader == b_joined.leader == a.member_id


async def test_a_static_member_that_rejoins_takes_its_place_without_a_rebalance() -> None:
    _, coord, node = setup()
    a = Classic(coord, node)
    s = Classic(coord, node, instance_id="pod-1")
    generation = await form_group(a, s)
    old_id = s.member_id
    restarted = Classic(coord, node, instance_id="pod-1")  # same instance, no member id
    answer = await restarted.join()
    assert answer.error_code == NONE
    assert answer.generation_id == generation  # no new generation
    assert restarted.member_id != old_id
    assert (await restarted.sync()).assignment == b"2"  # the old member's assignment
    assert await describe(coord, node) == ("Stable", {a.member_id, restarted.member_id})
    assert await s.heartbeat() == FENCED_INSTANCE_ID  # the old incarnation is fenced


async def test_leave_group_v3_removes_a_batch_and_names_unknown_members() -> None:
    _, coord, node = setup()
    a, b = Classic(coord, node), Classic(coord, node)
    await form_group(a, b)
    request = LeaveGroupRequest(
        group_id=GROUP,
        members=[
            MemberIdentity(member_id=a.member_id),
            MemberIdentity(member_id=b.member_id),
            MemberIdentity(member_id="ghost"),
        ],
    )
    response = await ask(coord, node, 5, request, LeaveGroupResponse)
    assert response.error_code == NONE
    assert [m.error_code for m in response.members] == [NONE, NONE, UNKNOWN_MEMBER_ID]
    assert await describe(coord, node) == ("Empty", set())
    # v0-2 name one member, and its error is the answer's.
    old = LeaveGroupRequest(group_id=GROUP, member_id="ghost")
    assert (await ask(coord, node, 1, old, LeaveGroupResponse)).error_code == UNKNOWN_MEMBER_ID


async def test_every_request_on_the_wrong_node_is_not_coordinator() -> None:
    cluster, coord, node = setup(t=1)
    wrong = next(n for n in cluster.brokers if n != node)
    requests: list[tuple[int, ApiMessage, Callable[[Any], int]]] = [
        (9, JoinGroupRequest(group_id=GROUP, session_timeout_ms=10_000), lambda r: r.error_code),
        (5, SyncGroupRequest(group_id=GROUP), lambda r: r.error_code),
        (4, HeartbeatRequest(group_id=GROUP), lambda r: r.error_code),
        (5, LeaveGroupRequest(group_id=GROUP), lambda r: r.error_code),
        (
            9,
            OffsetCommitRequest(
                group_id=GROUP,
                topics=[
                    OffsetCommitRequestTopic(
                        name="t", partitions=[OffsetCommitRequestPartition(partition_index=0)]
                    )
                ],
            ),
            lambda r: r.topics[0].partitions[0].error_code,
        ),
        (7, OffsetFetchRequest(group_id=GROUP, topics=None), lambda r: r.error_code),
        (
            9,
            OffsetFetchRequest(groups=[OffsetFetchRequestGroup(group_id=GROUP)]),
            lambda r: r.groups[0].error_code,
        ),
        (
            1,
            ConsumerGroupHeartbeatRequest(
                group_id=GROUP,
                member_id="m",
                rebalance_timeout_ms=1000,
                subscribed_topic_names=["t"],
                topic_partitions=[],
            ),
            lambda r: r.error_code,
        ),
        (5, DescribeGroupsRequest(groups=[GROUP]), lambda r: r.groups[0].error_code),
        (2, DeleteGroupsRequest(groups_names=[GROUP]), lambda r: r.results[0].error_code),
        (0, ConsumerGroupDescribeRequest(group_ids=[GROUP]), lambda r: r.groups[0].error_code),
        (
            0,
            OffsetDeleteRequest(
                group_id=GROUP,
                topics=[
                    OffsetDeleteRequestTopic(
                        name="t", partitions=[OffsetDeleteRequestPartition(partition_index=0)]
                    )
                ],
            ),
            lambda r: r.error_code,
        ),
    ]
    for version, request, error_of in requests:
        assert error_of(await coord.handle(wrong, version, request)) == NOT_COORDINATOR, request
    # Nothing was created on the way.
    listed = await ask(coord, node, 5, ListGroupsRequest(), ListGroupsResponse)
    assert listed.groups == []
    # With the group's coordinator down there is none to go to.
    cluster.coordinator_overrides[GROUP] = wrong
    cluster.brokers[wrong].alive = False
    for version, request, error_of in requests:
        answer = await coord.handle(node, version, request)
        assert error_of(answer) == COORDINATOR_NOT_AVAILABLE, request


async def test_describe_list_and_delete_groups() -> None:
    cluster, coord, node = setup(t=2, u=1)
    metadata = encode_subscription(["t"])  # the consumer protocol: subscribed to t
    a = Classic(coord, node, protocols=[("range", metadata)])
    b = Classic(coord, node, protocols=[("range", metadata)])
    await form_group(a, b)
    state, members = await describe(coord, node)
    assert (state, members) == ("Stable", {a.member_id, b.member_id})

    listed = await ask(coord, node, 5, ListGroupsRequest(), ListGroupsResponse)
    assert [(g.group_id, g.group_state, g.group_type) for g in listed.groups] == [
        (GROUP, "Stable", "classic")
    ]
    filtered = ListGroupsRequest(states_filter=["empty"])
    assert (await ask(coord, node, 5, filtered, ListGroupsResponse)).groups == []
    elsewhere = next(n for n in cluster.brokers if n != node)
    assert (await ask(coord, elsewhere, 5, ListGroupsRequest(), ListGroupsResponse)).groups == []

    assert await a.commit({("t", 0): 4, ("u", 0): 5}) == NONE
    delete = DeleteGroupsRequest(groups_names=[GROUP, group_on(cluster, node, "missing")])
    results = (await ask(coord, node, 2, delete, DeleteGroupsResponse)).results
    assert [r.error_code for r in results] == [NON_EMPTY_GROUP, GROUP_ID_NOT_FOUND]

    # Offsets of a topic the members subscribe to are kept; others may go.
    offset_delete = OffsetDeleteRequest(
        group_id=GROUP,
        topics=[
            OffsetDeleteRequestTopic(
                name=name, partitions=[OffsetDeleteRequestPartition(partition_index=0)]
            )
            for name in ("t", "u")
        ],
    )
    refused = await ask(coord, node, 0, offset_delete, OffsetDeleteResponse)
    assert [t.partitions[0].error_code for t in refused.topics] == [
        code("GROUP_SUBSCRIBED_TO_TOPIC"),
        NONE,
    ]
    assert cluster.offsets[GROUP] == {("t", 0): (4, 3, "")}

    leave = LeaveGroupRequest(
        group_id=GROUP,
        members=[MemberIdentity(member_id=a.member_id), MemberIdentity(member_id=b.member_id)],
    )
    await ask(coord, node, 5, leave, LeaveGroupResponse)
    deleted = await ask(coord, node, 0, offset_delete, OffsetDeleteResponse)
    assert (deleted.error_code, deleted.topics[0].partitions[0].error_code) == (NONE, NONE)
    assert cluster.offsets[GROUP] == {}

    results = (await ask(coord, node, 2, delete, DeleteGroupsResponse)).results
    assert [r.error_code for r in results] == [NONE, GROUP_ID_NOT_FOUND]
    gone = await ask(coord, node, 6, DescribeGroupsRequest(groups=[GROUP]), DescribeGroupsResponse)
    assert (gone.groups[0].group_state, gone.groups[0].error_code) == ("Dead", GROUP_ID_NOT_FOUND)
    assert GROUP not in cluster.offsets


# ---- KIP-848 consumer groups --------------------------------------------------------------


@dataclass
class Member848:
    """A KIP-848 member: it names itself, and revokes what the answers take away only when
    told to (``owned``), so that tests choose when a revocation is acknowledged."""

    coord: GroupCoordinator
    node: int
    topics: list[str]
    instance_id: str | None = None
    member_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    epoch: int = 0
    #: What the coordinator last said the member is assigned.
    assigned: dict[uuid.UUID, set[int]] = field(default_factory=dict)
    #: What the member still consumes (its last heartbeat's owned partitions).
    owned: dict[uuid.UUID, set[int]] = field(default_factory=dict)

    async def heartbeat(
        self, owned: dict[uuid.UUID, set[int]] | None = None, epoch: int | None = None
    ) -> ConsumerGroupHeartbeatResponse:
        """Heartbeat owning ``owned`` (default: what it was last assigned, i.e. it has
        revoked whatever the last answer took away)."""
        epoch = self.epoch if epoch is None else epoch
        if owned is None:
            owned = {} if epoch == 0 else self.assigned
        self.owned = {t: set(ps) for t, ps in owned.items()}
        request = ConsumerGroupHeartbeatRequest(
            group_id=GROUP,
            member_id=self.member_id,
            member_epoch=epoch,
            instance_id=self.instance_id,
            rebalance_timeout_ms=30_000,
            subscribed_topic_names=self.topics,
            topic_partitions=[
                TopicPartitions(topic_id=t, partitions=sorted(ps)) for t, ps in owned.items()
            ],
        )
        response = await ask(self.coord, self.node, 1, request, ConsumerGroupHeartbeatResponse)
        if response.error_code == NONE:
            self.epoch = response.member_epoch
            if response.assignment is not None:
                self.assigned = {
                    tp.topic_id: set(tp.partitions) for tp in response.assignment.topic_partitions
                }
        return response

    def partitions(self, topic_id: uuid.UUID) -> set[int]:
        return self.assigned.get(topic_id, set())

    def holds(self, topic_id: uuid.UUID) -> set[int]:
        """What it may be consuming: assigned, or owned and not yet acknowledged as given up."""
        return self.partitions(topic_id) | self.owned.get(topic_id, set())


def assert_nobody_shares(topic: uuid.UUID, *members: Member848) -> None:
    seen: set[int] = set()
    for m in members:
        assert not (m.holds(topic) & seen), f"{m.member_id} shares {m.holds(topic) & seen}"
        seen |= m.holds(topic)


async def test_consumer_group_members_split_partitions_and_revoke_before_reassignment() -> None:
    cluster, coord, node = setup(t=6)
    t = cluster.topics["t"].topic_id
    a, b, c = (Member848(coord, node, ["t"]) for _ in range(3))
    everything = set(range(6))

    joined = await a.heartbeat()
    assert (joined.error_code, joined.member_epoch) == (NONE, 2)
    assert joined.heartbeat_interval_ms == 5000
    assert a.partitions(t) == everything

    joined = await b.heartbeat()
    assert joined.member_epoch == 3
    assert b.partitions(t) == set()  # a still holds them all
    revoking = await a.heartbeat(owned=a.assigned)
    assert revoking.member_epoch == 2  # keeps its epoch until it has revoked
    kept = a.partitions(t)
    assert len(kept) == 3
    assert_nobody_shares(t, a, b)
    await b.heartbeat()
    assert b.partitions(t) == set()  # a has not confirmed yet
    done = await a.heartbeat(owned={t: kept})  # revoked: no longer owned
    assert done.member_epoch == 3
    await b.heartbeat()
    assert b.partitions(t) == everything - kept
    assert b.epoch == 3

    # A third member: each gives up one partition, and c gets each only once released.
    await c.heartbeat()
    assert c.epoch == 4
    assert c.partitions(t) == set()
    await a.heartbeat()
    await b.heartbeat()
    assert len(a.partitions(t)) == len(b.partitions(t)) == 2
    assert (a.epoch, b.epoch) == (3, 3)  # both still revoking
    assert_nobody_shares(t, a, b, c)
    await c.heartbeat()
    assert c.partitions(t) == set()
    await a.heartbeat()  # a confirms: owns what it was left
    assert a.epoch == 4
    await c.heartbeat()
    assert len(c.partitions(t)) == 1  # a's; b's is still b's
    assert_nobody_shares(t, a, b, c)
    await b.heartbeat()
    await c.heartbeat()
    assert len(c.partitions(t)) == 2
    assert_nobody_shares(t, a, b, c)
    assert a.partitions(t) | b.partitions(t) | c.partitions(t) == everything

    described = await ask(
        coord,
        node,
        0,
        ConsumerGroupDescribeRequest(group_ids=[GROUP]),
        ConsumerGroupDescribeResponse,
    )
    (group,) = described.groups
    assert (group.group_state, group.group_epoch, group.assignment_epoch) == ("Stable", 4, 4)
    assert group.assignor_name == "uniform"
    assert {m.member_id: m.member_epoch for m in group.members} == {
        a.member_id: 4,
        b.member_id: 4,
        c.member_id: 4,
    }


async def test_consumer_group_fencing_leaving_and_commits_by_member_epoch() -> None:
    cluster, coord, node = setup(t=4)
    t = cluster.topics["t"].topic_id
    a, b = Member848(coord, node, ["t"]), Member848(coord, node, ["t"])
    await a.heartbeat()
    assert (await a.heartbeat(epoch=a.epoch + 1)).error_code == FENCED_MEMBER_EPOCH
    stranger = Member848(coord, node, ["t"])
    assert (await stranger.heartbeat(epoch=1)).error_code == UNKNOWN_MEMBER_ID

    await b.heartbeat()
    await a.heartbeat()
    await a.heartbeat()
    await b.heartbeat()
    assert a.epoch == b.epoch == 3
    assert len(a.partitions(t)) == len(b.partitions(t)) == 2

    # Commits carry the member epoch: an old one is stale (KIP-848), v8 is too old.
    current = await commit(coord, node, {("t", 0): 1}, generation=a.epoch, member_id=a.member_id)
    assert current.topics[0].partitions[0].error_code == NONE
    stale = await commit(coord, node, {("t", 0): 2}, generation=1, member_id=a.member_id)
    assert stale.topics[0].partitions[0].error_code == STALE_MEMBER_EPOCH
    old = await commit(
        coord, node, {("t", 0): 2}, generation=a.epoch, member_id=a.member_id, version=8
    )
    assert old.topics[0].partitions[0].error_code == UNSUPPORTED_VERSION

    left = await b.heartbeat(epoch=-1)
    assert (left.error_code, left.member_epoch) == (NONE, -1)
    await a.heartbeat()
    assert a.epoch == 4
    assert a.partitions(t) == set(range(4))  # b's partitions were free at once


async def test_a_static_consumer_member_keeps_its_partitions_across_a_restart() -> None:
    cluster, coord, node = setup(t=6)
    t = cluster.topics["t"].topic_id
    everything = set(range(6))
    a = Member848(coord, node, ["t"])
    s = Member848(coord, node, ["t"], instance_id="pod-1")
    await a.heartbeat()
    await s.heartbeat()
    await a.heartbeat()
    await a.heartbeat()
    await s.heartbeat()
    mine = s.partitions(t)
    assert len(mine) == 3

    paused = await s.heartbeat(epoch=-2)  # a restart: it leaves for a while
    assert paused.member_epoch == -2
    await a.heartbeat()
    assert a.partitions(t) == everything - mine  # no rebalance: s's stay s's
    # A new member: a and s must each give one up; s, away, cannot yet.
    intruder = Member848(coord, node, ["t"], instance_id="pod-2")
    await intruder.heartbeat()
    await a.heartbeat()  # gives one up
    await a.heartbeat()  # and confirms
    await intruder.heartbeat()
    assert len(intruder.partitions(t)) == 1
    assert not intruder.partitions(t) & mine

    back = Member848(coord, node, ["t"], instance_id="pod-1")  # a new member id
    await back.heartbeat()
    assert back.epoch == 4
    assert len(back.partitions(t)) == 2
    assert back.partitions(t) < mine  # its own, less the one it now gives up
    await intruder.heartbeat()
    assert intruder.partitions(t) == everything - a.partitions(t) - back.partitions(t)
    assert len(intruder.partitions(t)) == 2
    twin = Member848(coord, node, ["t"], instance_id="pod-1")
    assert (await twin.heartbeat()).error_code == UNRELEASED_INSTANCE_ID


async def test_a_consumer_member_that_does_not_revoke_in_time_is_fenced() -> None:
    cluster, coord, node = setup(t=2)
    t = cluster.topics["t"].topic_id
    a, b = Member848(coord, node, ["t"]), Member848(coord, node, ["t"])
    await a.heartbeat()
    await b.heartbeat()
    told = await a.heartbeat()  # to give one partition up, within its 30 s rebalance timeout
    assert told.member_epoch == 2
    start = anyio.current_time()
    everything = {t: {0, 1}}
    for _ in range(7):  # keeps heartbeating, but still owning both
        await anyio.sleep(4)
        assert (await a.heartbeat(owned=everything)).error_code == NONE
    await anyio.sleep(4)
    assert anyio.current_time() - start == pytest.approx(32)
    assert (await a.heartbeat(owned=everything)).error_code == UNKNOWN_MEMBER_ID
    await b.heartbeat()
    assert b.partitions(t) == {0, 1}


async def test_a_silent_consumer_member_is_fenced_after_its_session() -> None:
    cluster, coord, node = setup(t=2)
    t = cluster.topics["t"].topic_id
    a, b = Member848(coord, node, ["t"]), Member848(coord, node, ["t"])
    await a.heartbeat()
    await b.heartbeat()
    await a.heartbeat()
    await a.heartbeat()
    await b.heartbeat()
    assert len(a.partitions(t)) == len(b.partitions(t)) == 1
    start = anyio.current_time()
    for _ in range(11):  # a heartbeats every 4 s; b is silent
        await anyio.sleep(4)
        assert (await a.heartbeat()).error_code == NONE
    assert anyio.current_time() - start == pytest.approx(44)
    assert a.epoch == 3  # b's session (45 s) has a second to go
    await anyio.sleep(2)
    await a.heartbeat()
    assert a.epoch == 4
    assert a.partitions(t) == {0, 1}
    assert (await b.heartbeat()).error_code == UNKNOWN_MEMBER_ID


# ---- end to end: our Consumer against FakeKafka -------------------------------------------


async def consume_together(consumers: list[Consumer], n: int) -> list[list[tuple[int, bytes]]]:
    """``n`` records read by ``consumers`` at once: (partition, value) per consumer."""
    got: list[list[tuple[int, bytes]]] = [[] for _ in consumers]

    async def read(i: int, consumer: Consumer, scope: anyio.CancelScope) -> None:
        async for record in consumer:
            assert record.value is not None
            got[i].append((record.partition, record.value))
            if sum(map(len, got)) == n:
                scope.cancel()

    with anyio.fail_after(60):
        async with anyio.create_task_group() as tg:
            for i, consumer in enumerate(consumers):
                tg.start_soon(read, i, consumer, tg.cancel_scope)
    return got


@pytest.mark.parametrize("protocol", ["classic", "consumer"])
async def test_two_consumers_split_a_topic_and_one_takes_over_when_the_other_leaves(
    protocol: str,
) -> None:
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic("t", partitions=4)
        config = kafka.client_config()
        group: dict[str, Any] = {
            "group_id": "g",
            "group_protocol": protocol,
            "auto_offset_reset": "earliest",
        }
        everything = frozenset(TopicPartition("t", p) for p in range(4))

        async with Producer(**config) as producer, Consumer("t", **config, **group) as first:
            async with Consumer("t", **config, **group) as second:

                def split() -> bool:
                    mine, theirs = first.assignment(), second.assignment()
                    return bool(mine) and bool(theirs) and mine | theirs == everything

                await kafka.wait_until(split, within=60)
                assert not first.assignment() & second.assignment()
                for i in range(40):
                    await producer.send_and_wait("t", b"%d" % i, partition=i % 4)
                by_first, by_second = await consume_together([first, second], 40)
                # Each read exactly the records of its own partitions.
                for consumer, got in ((first, by_first), (second, by_second)):
                    own = {tp.partition for tp in consumer.assignment()}
                    assert {p for p, _ in got} == own
                    assert len(got) == 10 * len(own)
                await second.commit()
            # second has left the group: first gets every partition, from second's commits.
            await kafka.wait_until(lambda: first.assignment() == everything, within=60)
            for i in range(40, 48):
                await producer.send_and_wait("t", b"%d" % i, partition=i % 4)
            (later,) = await consume_together([first], 8)
            assert sorted(later) == sorted((i % 4, b"%d" % i) for i in range(40, 48))
            await first.commit()
        assert kafka.committed("g") == {("t", p): 12 for p in range(4)}
