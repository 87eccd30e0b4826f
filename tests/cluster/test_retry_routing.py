"""Cluster.call's routing repairs on a FakeKafka of several nodes, on virtual time: a
coordinator looked up again on NOT_COORDINATOR, metadata refreshed on NOT_LEADER, a call
that keeps failing timing out with the error that kept coming, and a cancelled call that
leaves no stale lookup, a coordinator request left unanswered (its connection closed, the
coordinator forgotten). (The retry loop's own rules: test_retry.py.)"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import (
    ANY,
    ONCE,
    Cluster,
    ClusterConfig,
    Coordinator,
    Leader,
    Node,
    RetryState,
    parse_bootstrap_servers,
    unchecked,
)
from aiokafka_ng.errors import (
    KafkaTimeoutError,
    NotCoordinatorError,
    RequestTimedOutError,
    RequestTimeoutError,
    UnsupportedVersionError,
    error_for_code,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsPartitionResponse,
    ListOffsetsRequest,
    ListOffsetsResponse,
    ListOffsetsTopic,
    ListOffsetsTopicResponse,
)
from aiokafka_ng.protocol.messages.offset_commit import (
    OffsetCommitRequest,
    OffsetCommitRequestPartition,
    OffsetCommitRequestTopic,
)
from aiokafka_ng.protocol.messages.offset_fetch import OffsetFetchRequest, OffsetFetchRequestTopic
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

LIST_OFFSETS = 2
OFFSET_COMMIT = 8
OFFSET_FETCH = 9
FIND_COORDINATOR = 10
NOT_LEADER = 6
LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
REQUEST_TIMED_OUT = 7
TOPIC = "retry"
GROUP = "retry-group"


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@asynccontextmanager
async def _faked(brokers: int = 3) -> AsyncIterator[tuple[FakeKafka, Cluster]]:
    async with FakeKafka(brokers, tcp=False) as kafka:
        kafka.create_topic(TOPIC, 1, replication_factor=brokers)
        config = ClusterConfig(
            bootstrap_servers=parse_bootstrap_servers(kafka.bootstrap_servers),
            connection=ConnectionConfig(transport=kafka.transport),
            retry_backoff_ms=20,
            retry_backoff_max_ms=200,
            reconnect_backoff_ms=20,
            reconnect_backoff_max_ms=200,
        )
        async with Cluster(config) as cluster:
            yield kafka, cluster


def _other(kafka: FakeKafka, node: int) -> int:
    return next(n for n in sorted(kafka.nodes) if n != node)


def _list_offsets(topic: str, partition: int) -> ListOffsetsRequest:
    return ListOffsetsRequest(
        replica_id=-1,
        topics=[
            ListOffsetsTopic(
                name=topic,
                partitions=[ListOffsetsPartition(partition_index=partition, timestamp=-2)],
            )
        ],
    )


def _offsets_checked(response: Any) -> int:
    part = response.topics[0].partitions[0]
    if part.error_code:
        raise error_for_code(part.error_code)("ListOffsets")
    return int(part.offset)


def _offset_fetch() -> OffsetFetchRequest:
    return OffsetFetchRequest(
        group_id=GROUP, topics=[OffsetFetchRequestTopic(name=TOPIC, partition_indexes=[0])]
    )


def _offset_commit() -> OffsetCommitRequest:
    # An admin commit (no member): the fake accepts it for a group with no members.
    return OffsetCommitRequest(
        group_id=GROUP,
        generation_id_or_member_epoch=-1,
        member_id="",
        topics=[
            OffsetCommitRequestTopic(
                name=TOPIC,
                partitions=[OffsetCommitRequestPartition(partition_index=0, committed_offset=0)],
            )
        ],
    )


async def test_not_leader_refreshes_metadata_and_retries_at_the_new_leader() -> None:
    async with _faked(3) as (kafka, cluster):
        await cluster.wait_for_topics([TOPIC], timeout=20)
        old = await cluster.leader_for(TOPIC, 0)
        new = kafka.move_leader(TOPIC, 0, to_node=_other(kafka, old))
        refreshes = cluster.statistics().metadata_requests
        offset = await cluster.call(
            _list_offsets(TOPIC, 0), Leader(TOPIC, 0), timeout=20, check=_offsets_checked
        )
        assert offset == 0
        assert kafka.errors(LIST_OFFSETS, NOT_LEADER, node=old) == 1  # the stale leader said so...
        assert cluster.metadata.topics[TOPIC].partitions[0].leader == new  # ...refreshed
        assert cluster.statistics().metadata_requests > refreshes
        assert kafka.requests(new)[LIST_OFFSETS] == 1


async def test_not_coordinator_looks_the_coordinator_up_again() -> None:
    async with _faked(3) as (kafka, cluster):
        first = await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=20, max_version=7)
        assert first.error_code == 0
        old = cluster.coordinator_cached(GROUP)
        assert old == kafka.coordinator_for(GROUP)
        kafka.move_coordinator(GROUP, _other(kafka, old))
        lookups = cluster.statistics().coordinator_requests
        answer = await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=20, max_version=7)
        assert answer.error_code == 0
        assert kafka.errors(error_code=NOT_COORDINATOR, node=old) >= 1
        assert cluster.coordinator_cached(GROUP) == _other(kafka, old)
        assert cluster.statistics().coordinator_requests == lookups + 1


async def test_call_times_out_naming_the_error_that_kept_coming() -> None:
    async with _faked(1) as (kafka, cluster):
        await cluster.wait_for_topics([TOPIC], timeout=20)
        kafka.inject(LIST_OFFSETS, REQUEST_TIMED_OUT, times=None)
        started = anyio.current_time()
        with pytest.raises(KafkaTimeoutError, match="RequestTimedOutError") as info:
            await cluster.call(
                _list_offsets(TOPIC, 0), Node(1), timeout=0.5, check=_offsets_checked
            )
        assert anyio.current_time() - started == pytest.approx(0.5, abs=0.05)
        assert "ListOffsets did not complete within 500 ms" in str(info.value)
        assert kafka.errors(LIST_OFFSETS, REQUEST_TIMED_OUT) >= 2  # retried, not given up
        kafka.clear_injections()
        # Nothing was left behind: the next call on the same cluster succeeds.
        checked = await cluster.call(
            _list_offsets(TOPIC, 0), ANY, timeout=20, check=_offsets_checked
        )
        assert checked == 0


async def test_a_cancelled_call_leaves_the_coordinator_lookup_clean() -> None:
    async with _faked(3) as (kafka, cluster):
        coordinator = kafka.coordinator_for(GROUP)
        kafka.delay(coordinator, 5000)  # the OffsetFetch will not be answered in time
        with anyio.move_on_after(0.5) as scope:
            await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=20, max_version=7)
        assert scope.cancelled_caught
        kafka.delay(coordinator, 0)
        moved = _other(kafka, coordinator)
        kafka.move_coordinator(GROUP, moved)
        cluster.invalidate_coordinator(GROUP)
        # The cancelled call holds no lookup and no stale route: a new call finds the
        # moved coordinator and is answered there.
        answer = await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=20, max_version=7)
        assert answer.error_code == 0
        assert cluster.coordinator_cached(GROUP) == moved
        assert kafka.requests(moved)[9] == 1  # OffsetFetch


async def test_once_sends_one_request_and_raises_what_it_answered() -> None:
    # retry=ONCE is for callers with a rule of their own for each error (a heartbeat, a
    # join): the retriable error comes back to them as it is, after one request. The
    # coordinator route still forgets the coordinator that said it is not one (as Java's
    # clients mark it unknown), so the caller's next request looks it up again.
    async with _faked(3) as (kafka, cluster):
        first = await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=20, max_version=7)
        assert first.error_code == 0
        lookups = cluster.statistics().coordinator_requests
        kafka.inject(OFFSET_FETCH, NOT_COORDINATOR, times=1)
        with pytest.raises(NotCoordinatorError):
            await cluster.call(_offset_fetch(), Coordinator(GROUP), retry=ONCE, max_version=7)
        assert kafka.errors(OFFSET_FETCH, NOT_COORDINATOR) == 1
        assert cluster.coordinator_cached(GROUP) is None
        again = await cluster.call(_offset_fetch(), Coordinator(GROUP), retry=ONCE, max_version=7)
        assert again.error_code == 0
        assert cluster.statistics().coordinator_requests == lookups + 1
        # unchecked: the error code is the caller's to read, nothing is raised -- and the
        # route has read it too.
        kafka.inject(OFFSET_FETCH, NOT_COORDINATOR, times=1)
        answer = await cluster.call(
            _offset_fetch(), Coordinator(GROUP), retry=ONCE, check=unchecked, max_version=7
        )
        assert answer.error_code == NOT_COORDINATOR
        assert kafka.errors(OFFSET_FETCH, NOT_COORDINATOR) == 2
        assert cluster.coordinator_cached(GROUP) is None


async def test_a_coordinator_error_inside_an_answer_is_read_by_the_route() -> None:
    # OffsetCommit answers NOT_COORDINATOR per partition (no top-level code): the route
    # reads it there too, whatever the caller's check makes of the answer.
    async with _faked(3) as (kafka, cluster):
        await cluster.coordinator(GROUP)

        # The fake's injected answer: NOT_COORDINATOR in every partition, nothing else.
        kafka.inject(OFFSET_COMMIT, NOT_COORDINATOR, times=1)
        answer = await cluster.call(_offset_commit(), Coordinator(GROUP), retry=ONCE)
        assert answer.topics[0].partitions[0].error_code == NOT_COORDINATOR
        assert cluster.coordinator_cached(GROUP) is None
        # An answer without one leaves the cache as it is.
        await cluster.call(_offset_commit(), Coordinator(GROUP), retry=ONCE)
        assert cluster.coordinator_cached(GROUP) == kafka.coordinator_for(GROUP)


async def test_load_in_progress_is_retried_at_the_same_coordinator() -> None:
    # COORDINATOR_LOAD_IN_PROGRESS: the coordinator is the right one, still loading; Java
    # retries there without a new FindCoordinator, and so do we.
    async with _faked(3) as (kafka, cluster):
        coordinator = await cluster.coordinator(GROUP)
        lookups = cluster.statistics().coordinator_requests
        kafka.inject(OFFSET_FETCH, LOAD_IN_PROGRESS, times=2)
        answer = await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=20, max_version=7)
        assert answer.error_code == 0
        assert kafka.errors(OFFSET_FETCH, LOAD_IN_PROGRESS, node=coordinator) == 2
        assert kafka.requests(coordinator)[OFFSET_FETCH] == 3
        assert cluster.statistics().coordinator_requests == lookups
        assert cluster.coordinator_cached(GROUP) == coordinator


async def test_a_request_timeout_forgets_the_coordinator() -> None:
    # No answer within the request timeout: the connection closes (its late answer could
    # be taken for the next one's) and the route forgets the coordinator, as Java's clients
    # count a timed-out request as a disconnect.
    async with _faked(3) as (kafka, cluster):
        coordinator = await cluster.coordinator(GROUP)
        kafka.delay(coordinator, 5000, api_key=OFFSET_FETCH)
        with pytest.raises(RequestTimeoutError):
            await cluster.call(
                _offset_fetch(), Coordinator(GROUP), retry=ONCE, request_timeout=0.5,
                max_version=7,
            )  # fmt: skip
        assert cluster.coordinator_cached(GROUP) is None


async def test_a_request_the_call_deadline_abandons_closes_its_connection() -> None:
    # A call whose deadline is its request's timeout (the epoch heartbeat's) ends before the
    # connection's own timeout can. The connection still times the request out, though its
    # caller has gone: it closes, as a broker answers one connection's requests in order
    # and the next would wait behind the lost one; and the route forgets the coordinator.
    async with _faked(3) as (kafka, cluster):
        coordinator = await cluster.coordinator(GROUP)
        lookups = cluster.statistics().coordinator_requests
        kafka.delay(coordinator, 5000, api_key=OFFSET_FETCH)  # the first one only:
        with pytest.raises(KafkaTimeoutError):
            await cluster.call(
                _offset_fetch(), Coordinator(GROUP), retry=ONCE, timeout=0.5, max_version=7
            )
        assert cluster.coordinator_cached(GROUP) is None
        kafka.delay(coordinator, 0, api_key=OFFSET_FETCH)  # the next is answered at once...
        started = anyio.current_time()
        answer = await cluster.call(_offset_fetch(), Coordinator(GROUP), timeout=1, max_version=7)
        # ...on a new connection, not behind the lost request's answer (due in 4.5 s).
        assert answer.error_code == 0 and anyio.current_time() - started < 0.1
        assert cluster.statistics().coordinator_requests == lookups + 1


async def test_a_pinned_version_is_sent_as_it_is_and_named_when_unsupported() -> None:
    async with _faked(1) as (kafka, cluster):
        await cluster.wait_for_topics([TOPIC], timeout=20)
        versions: list[int] = []
        answered: list[tuple[int, float]] = []

        def record(call: Any) -> ListOffsetsResponse:
            versions.append(call.version)
            return ListOffsetsResponse(
                topics=[
                    ListOffsetsTopicResponse(
                        name=TOPIC,
                        partitions=[ListOffsetsPartitionResponse(partition_index=0, offset=7)],
                    )
                ]
            )

        kafka.answer(LIST_OFFSETS, record)
        offset = await cluster.call(
            _list_offsets(TOPIC, 0),
            Node(1),
            version=2,
            check=_offsets_checked,
            on_answer=lambda node, seconds: answered.append((node, seconds)),
        )
        assert (offset, versions) == (7, [2])  # not the newest both offer
        assert [node for node, _ in answered] == [1]
        high = kafka.api_versions[LIST_OFFSETS][1]
        with pytest.raises(UnsupportedVersionError, match=r"offsets of the test.*broker 1"):
            await cluster.call(
                _list_offsets(TOPIC, 0), Node(1), version=high + 1, what="offsets of the test"
            )
        assert versions == [2]  # never sent
        with pytest.raises(ValueError, match="pinned"):
            await cluster.call(_list_offsets(TOPIC, 0), Node(1), version=2, max_version=3)


async def test_a_broker_below_min_version_is_not_sent_to() -> None:
    async with _faked(1) as (kafka, cluster):
        await cluster.wait_for_topics([TOPIC], timeout=20)
        kafka.api_versions[LIST_OFFSETS] = (kafka.api_versions[LIST_OFFSETS][0], 3)
        async with Cluster(cluster.config) as capped:  # negotiates the capped versions
            with pytest.raises(UnsupportedVersionError, match="v4\\+ is needed"):
                await capped.call(_list_offsets(TOPIC, 0), Node(1), timeout=20, min_version=4)
            assert kafka.requests(1)[LIST_OFFSETS] == 0
            offset = await capped.call(
                _list_offsets(TOPIC, 0), Node(1), timeout=20, min_version=3, check=_offsets_checked
            )
            assert offset == 0


async def test_a_callers_retry_state_paces_and_bounds_the_call() -> None:
    # state=: the caller's own backoff and deadline (a consumer's retry_backoff_ms) rather
    # than the cluster's; its failure count is the call's.
    async with _faked(1) as (kafka, cluster):
        await cluster.wait_for_topics([TOPIC], timeout=20)
        kafka.inject(LIST_OFFSETS, REQUEST_TIMED_OUT, times=3)
        state = RetryState(ExponentialBackoff(100, 100, jitter=0), timeout=20)
        started = anyio.current_time()
        offset = await cluster.call(
            _list_offsets(TOPIC, 0), Node(1), state=state, check=_offsets_checked
        )
        assert offset == 0
        assert anyio.current_time() - started == pytest.approx(0.3, abs=0.05)  # 3 x 100 ms
        assert state.failures == 0  # reset by the success
        assert isinstance(state.last_error, RequestTimedOutError)


@pytest.mark.parametrize("find_coordinator_max", [3, 6])
async def test_coordinators_of_several_groups_before_and_after_find_coordinator_v4(
    find_coordinator_max: int,
) -> None:
    # v4+ (KIP-699) asks for every key in one request; before it, one key per request and
    # the others on the next rounds. Either way each group gets its own coordinator.
    async with FakeKafka(3, tcp=False) as kafka:
        lo, _ = kafka.api_versions[FIND_COORDINATOR]
        kafka.api_versions[FIND_COORDINATOR] = (lo, find_coordinator_max)
        config = ClusterConfig(
            bootstrap_servers=parse_bootstrap_servers(kafka.bootstrap_servers),
            connection=ConnectionConfig(transport=kafka.transport),
            retry_backoff_ms=20,
            retry_backoff_max_ms=200,
        )
        groups = [f"{GROUP}-{i}" for i in range(3)]
        async with Cluster(config) as cluster:
            found = await cluster.coordinators(groups, timeout=20)
        assert found == {g: kafka.coordinator_for(g) for g in groups}
        asked = [r.version for r in kafka.received(FIND_COORDINATOR)]
        assert len(asked) == (1 if find_coordinator_max >= 4 else 3)
        assert set(asked) == {find_coordinator_max}
