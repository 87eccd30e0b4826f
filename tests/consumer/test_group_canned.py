"""Group membership and offset commits against a scripted coordinator (no broker).

Why canned: Tansu cannot be made to answer MEMBER_ID_REQUIRED, expel a member, or refuse a
commit on demand; here each case is scripted and the requests the member sends are checked.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import CommitFailedError, ConsumerRebalanceListener
from aiokafka_ng.consumer.assignors import decode_assignment, encode_assignment
from aiokafka_ng.consumer.group import GroupCoordinator
from aiokafka_ng.consumer.membership import GroupSettings
from aiokafka_ng.consumer.models import OffsetAndMetadata, TopicPartition
from aiokafka_ng.consumer.offsets import OffsetsClient
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.errors import (
    IllegalGenerationError,
    MemberIdRequiredError,
    NotCoordinatorError,
    UnknownMemberIdError,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.heartbeat import HeartbeatRequest, HeartbeatResponse
from aiokafka_ng.protocol.messages.join_group import (
    JoinGroupRequest,
    JoinGroupResponse,
    JoinGroupResponseMember,
)
from aiokafka_ng.protocol.messages.leave_group import LeaveGroupRequest, LeaveGroupResponse
from aiokafka_ng.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitResponse,
    OffsetCommitResponsePartition,
    OffsetCommitResponseTopic,
)
from aiokafka_ng.protocol.messages.sync_group import SyncGroupRequest, SyncGroupResponse
from aiokafka_ng.testing import ScriptedCluster, make_metadata

pytestmark = pytest.mark.anyio

T = "t"


class Listener(ConsumerRebalanceListener):
    def __init__(self) -> None:
        self.events: list[tuple[str, frozenset[TopicPartition]]] = []

    def on_partitions_revoked(self, revoked: set[TopicPartition]) -> None:
        self.events.append(("revoked", frozenset(revoked)))

    async def on_partitions_assigned(self, assigned: set[TopicPartition]) -> None:
        self.events.append(("assigned", frozenset(assigned)))

    def on_partitions_lost(self, lost: set[TopicPartition]) -> None:
        self.events.append(("lost", frozenset(lost)))


ALL = frozenset(TopicPartition(T, p) for p in range(4))


class Coordinator:
    """Scripted group coordinator: one member; hooks decide special answers."""

    def __init__(self) -> None:
        self.joins: list[JoinGroupRequest] = []
        self.heartbeat_errors: list[int] = []
        self.commit_errors: list[int] = []
        self.generation = 0

    def __call__(self, request: Any) -> Any:
        if isinstance(request, JoinGroupRequest):
            self.joins.append(request)
            if not request.member_id:  # KIP-394: the broker hands out the id first
                return JoinGroupResponse(
                    error_code=MemberIdRequiredError.errno, member_id=f"m-{len(self.joins)}"
                )
            self.generation += 1
            metadata = request.protocols[0].metadata
            return JoinGroupResponse(
                generation_id=self.generation,
                protocol_name=request.protocols[0].name,
                leader=request.member_id,
                member_id=request.member_id,
                members=[
                    JoinGroupResponseMember(
                        member_id=request.member_id,
                        group_instance_id=request.group_instance_id,
                        metadata=metadata,
                    )
                ],
            )
        if isinstance(request, SyncGroupRequest):
            mine = next(a for a in request.assignments if a.member_id == request.member_id)
            assigned = decode_assignment(mine.assignment)
            assert set(assigned) >= ALL  # the one member gets everything
            return SyncGroupResponse(assignment=encode_assignment(assigned))
        if isinstance(request, HeartbeatRequest):
            code = self.heartbeat_errors.pop(0) if self.heartbeat_errors else 0
            return HeartbeatResponse(error_code=code)
        if isinstance(request, LeaveGroupRequest):
            return LeaveGroupResponse()
        if isinstance(request, OffsetCommitRequest):
            code = self.commit_errors.pop(0) if self.commit_errors else 0
            return OffsetCommitResponse(
                topics=[
                    OffsetCommitResponseTopic(
                        name=t.name,
                        partitions=[
                            OffsetCommitResponsePartition(
                                partition_index=p.partition_index, error_code=code
                            )
                            for p in t.partitions
                        ],
                    )
                    for t in request.topics
                ]
            )
        raise AssertionError(f"unexpected request {request!r}")


async def run_group(
    coordinator: Coordinator,
    body: Callable[[GroupCoordinator, ScriptedCluster, Listener], Any],
    **settings: Any,
) -> ScriptedCluster:
    cluster = ScriptedCluster(
        metadata=make_metadata({T: 4}), handler=lambda node, request, version: coordinator(request)
    )
    group_settings = GroupSettings(
        group_id="g",
        session_timeout_ms=2000,
        heartbeat_interval_s=0.02,
        enable_auto_commit=False,
        **settings,
    )
    subs = SubscriptionState(lambda: None)
    offsets = OffsetsClient(
        cluster,
        group_id="g",
        isolation_level=0,
        backoff=ExponentialBackoff(1, 5),
        timeout_s=5,
    )
    group = GroupCoordinator(cluster, group_settings, subs, offsets)
    listener = Listener()
    async with anyio.create_task_group() as tg:
        await tg.start(group.run)
        with anyio.fail_after(10):
            subs.subscribe([T], listener)
            group.request_rejoin()
            while not group.settled:
                await group.wait_joined()
            await body(group, cluster, listener)
            await group.close()
        tg.cancel_scope.cancel()
    return cluster


async def test_member_id_required_then_join_with_that_id() -> None:
    coordinator = Coordinator()

    async def body(group: GroupCoordinator, cluster: ScriptedCluster, listener: Listener) -> None:
        assert [j.member_id for j in coordinator.joins] == ["", "m-1"]
        assert group.member_id == "m-1" and group.generation == 1
        assert listener.events == [("assigned", ALL)]

    cluster = await run_group(coordinator, body)
    leaves = [r for r in cluster.requests() if isinstance(r, LeaveGroupRequest)]
    assert len(leaves) == 1 and leaves[0].members[0].member_id == "m-1"


async def test_expelled_member_loses_partitions_and_rejoins() -> None:
    coordinator = Coordinator()

    async def body(group: GroupCoordinator, cluster: ScriptedCluster, listener: Listener) -> None:
        coordinator.heartbeat_errors = [UnknownMemberIdError.errno]
        while group.generation < 2 or not group.settled:
            await group.wait_joined()
        assert ("lost", ALL) in listener.events
        assert listener.events[-1] == ("assigned", ALL)
        # Expelled: it joined again from scratch (no member id), then with the new id.
        assert [j.member_id for j in coordinator.joins] == ["", "m-1", "", "m-3"]

    await run_group(coordinator, body)


async def test_static_member_sends_instance_id_and_does_not_leave() -> None:
    coordinator = Coordinator()

    async def body(group: GroupCoordinator, cluster: ScriptedCluster, listener: Listener) -> None:
        assert all(j.group_instance_id == "host-1" for j in coordinator.joins)

    cluster = await run_group(coordinator, body, group_instance_id="host-1")
    sent = cluster.requests()
    assert not any(isinstance(r, LeaveGroupRequest) for r in sent)
    assert all(r.group_instance_id == "host-1" for r in sent if isinstance(r, HeartbeatRequest))


async def test_commit_retries_coordinator_errors_and_fails_on_stale_generation() -> None:
    coordinator = Coordinator()

    async def body(group: GroupCoordinator, cluster: ScriptedCluster, listener: Listener) -> None:
        tp = TopicPartition(T, 0)
        coordinator.commit_errors = [NotCoordinatorError.errno]
        await group.commit({tp: OffsetAndMetadata(5)})
        assert len(cluster.invalidated) >= 1
        commits = [r for r in cluster.requests() if isinstance(r, OffsetCommitRequest)]
        assert len(commits) == 2
        assert commits[-1].generation_id_or_member_epoch == group.generation
        assert commits[-1].member_id == group.member_id
        assert commits[-1].topics[0].partitions[0].committed_offset == 5
        coordinator.commit_errors = [IllegalGenerationError.errno]
        with pytest.raises(CommitFailedError):
            await group.commit({tp: OffsetAndMetadata(6)})

    await run_group(coordinator, body)


async def test_leader_rebalances_when_partitions_are_added() -> None:
    coordinator = Coordinator()

    async def body(group: GroupCoordinator, cluster: ScriptedCluster, listener: Listener) -> None:
        joins = len(coordinator.joins)
        cluster.set_metadata(make_metadata({T: 6}))  # partitions added: a new snapshot
        while len(coordinator.joins) == joins or not group.settled:
            await group.wait_joined()
        assert len(coordinator.joins) == joins + 1

    cluster = await run_group(coordinator, body)
    syncs = [r for r in cluster.requests() if isinstance(r, SyncGroupRequest)]
    assert len(syncs) == 2
    assert len(decode_assignment(syncs[-1].assignments[0].assignment)) == 6
