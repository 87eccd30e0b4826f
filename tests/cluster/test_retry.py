"""The retry driver (aiokafka_ng.cluster.retry) and Cluster.call.

The loop's own rules (which errors retry, the deadline, the backoff, cancellation) are
tested with scripted attempts: an attempt is any coroutine, so no broker is involved there.
Routing repairs (coordinator re-lookup on NOT_COORDINATOR, metadata refresh on NOT_LEADER)
are tested on a FakeKafka of several nodes, which moves leaders and coordinators as a
multi-node Kafka cluster does: test_retry_routing.py.
"""

from __future__ import annotations

import random
import uuid
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import (
    Cluster,
    ClusterConfig,
    Leader,
    Retry,
    RetryState,
    parse_bootstrap_servers,
)
from aiokafka_ng.cluster.retry import retrying
from aiokafka_ng.errors import (
    ConcurrentTransactionsError,
    CoordinatorLoadInProgressError,
    KafkaError,
    KafkaTimeoutError,
    NotCoordinatorError,
    NotLeaderForPartitionError,
    RequestTimedOutError,
    TopicAuthorizationFailedError,
    error_for_code,
)
from aiokafka_ng.net.backoff import ExponentialBackoff
from aiokafka_ng.protocol.messages.list_offsets import (
    ListOffsetsPartition,
    ListOffsetsRequest,
    ListOffsetsTopic,
)
from aiokafka_ng.testing import LocalBroker

pytestmark = pytest.mark.anyio

LIST_OFFSETS = 2
NOT_LEADER = 6
NOT_COORDINATOR = 16
REQUEST_TIMED_OUT = 7


def _fast() -> ExponentialBackoff:
    return ExponentialBackoff(1, 8, rng=random.Random(1))


class _Script:
    """An attempt that raises the given errors in turn, then returns ``result``."""

    def __init__(self, *errors: KafkaError, result: str = "done") -> None:
        self.errors = list(errors)
        self.calls = 0
        self.result = result

    async def __call__(self) -> str:
        self.calls += 1
        await anyio.lowlevel.checkpoint()
        if self.errors:
            raise self.errors.pop(0)
        return self.result


# ---------------------------------------------------------------------- the loop


async def test_retriable_errors_are_retried_until_success() -> None:
    attempt = _Script(RequestTimedOutError("1"), CoordinatorLoadInProgressError("2"))
    state = RetryState(_fast(), timeout=10)
    assert await retrying(attempt, state, what="op") == "done"
    assert attempt.calls == 3
    assert state.failures == 0  # a success resets the count
    assert isinstance(state.last_error, CoordinatorLoadInProgressError)


async def test_a_fatal_error_is_raised_at_once() -> None:
    attempt = _Script(TopicAuthorizationFailedError("no"))
    with pytest.raises(TopicAuthorizationFailedError):
        await retrying(attempt, RetryState(_fast(), timeout=10), what="op")
    assert attempt.calls == 1


async def test_policy_can_make_a_retriable_error_final() -> None:
    attempt = _Script(NotCoordinatorError("moved"))
    retry = Retry(fatal=(NotCoordinatorError,))
    with pytest.raises(NotCoordinatorError):
        await retrying(attempt, RetryState(_fast()), what="op", retry=retry)
    assert attempt.calls == 1


async def test_max_retries_bounds_the_attempts() -> None:
    attempt = _Script(*(RequestTimedOutError(str(i)) for i in range(5)))
    with pytest.raises(RequestTimedOutError, match=r": 2$"):
        await retrying(attempt, RetryState(_fast()), what="op", retry=Retry(max_retries=2))
    assert attempt.calls == 3  # the first attempt and two retries


async def test_deadline_raises_kafka_timeout_naming_the_last_error() -> None:
    async def never() -> None:
        await anyio.lowlevel.checkpoint()
        raise RequestTimedOutError("broker gave up")

    state = RetryState(ExponentialBackoff(5, 20), timeout=0.2)
    with pytest.raises(KafkaTimeoutError) as info:
        await retrying(never, state, what="list offsets")
    text = str(info.value)
    assert text.startswith("timed out: list offsets did not complete within 200 ms")
    assert "last error: RequestTimedOutError: " in text and text.endswith("broker gave up")
    assert isinstance(info.value.__cause__, RequestTimedOutError)
    assert state.failures >= 2
    assert anyio.current_time() >= state.deadline  # type: ignore[operator]


async def test_on_retry_runs_before_each_pause() -> None:
    seen: list[str] = []

    async def note(error: KafkaError) -> None:
        seen.append(str(error))

    attempt = _Script(RequestTimedOutError("a"), RequestTimedOutError("b"))
    await retrying(attempt, RetryState(_fast()), what="op", on_retry=note)
    assert [s[-1] for s in seen] == ["a", "b"]


async def test_backoff_grows_is_capped_and_jitter_stays_in_bounds() -> None:
    backoff = ExponentialBackoff(100, 1000, jitter=0.2, rng=random.Random(7))
    state = RetryState(backoff)
    for n in range(1, 12):
        pause = state.failed(RequestTimedOutError(), now=50.0)
        base = min(100 * 2 ** (n - 1), 1000) / 1000
        assert base * 0.8 <= pause <= base * 1.2, (n, pause)
        assert state.retry_at == pytest.approx(50.0 + pause)
    assert state.failures == 11
    state.succeeded()
    assert state.failures == 0
    assert 0.08 <= state.failed(now=0.0) <= 0.12  # back to the first step after a success


def test_a_steady_failure_pauses_a_first_step_and_does_not_grow_the_count() -> None:
    backoff = ExponentialBackoff(100, 1000, jitter=0.2, rng=random.Random(3))
    state = RetryState(backoff)
    for _ in range(3):
        state.failed(RequestTimedOutError(), now=0.0)
    for _ in range(5):
        pause = state.failed(ConcurrentTransactionsError("markers"), now=10.0, steady_ms=1e9)
        assert 0.08 <= pause <= 0.12  # the first step, though three failures are counted
        assert state.retry_at == pytest.approx(10.0 + pause)
        # No longer than steady_ms, when that is shorter than the first step (jittered).
        short = state.failed(ConcurrentTransactionsError("markers"), now=10.0, steady_ms=20)
        assert 0.016 <= short <= 0.024
    assert state.failures == 3
    assert isinstance(state.last_error, ConcurrentTransactionsError)
    assert 0.64 <= state.failed(RequestTimedOutError(), now=0.0) <= 0.96  # the fourth step


async def test_steady_errors_keep_the_count_and_still_count_as_retries() -> None:
    steady = Retry(steady=(ConcurrentTransactionsError,))
    counts: list[int] = []
    state = RetryState(_fast())

    async def note(_error: KafkaError) -> None:
        counts.append(state.failures)

    attempt = _Script(
        RequestTimedOutError("a"),
        ConcurrentTransactionsError("b"),
        ConcurrentTransactionsError("c"),
        RequestTimedOutError("d"),
    )
    assert await retrying(attempt, state, what="op", retry=steady, on_retry=note) == "done"
    assert counts == [1, 1, 1, 2]
    # max_retries bounds every retry, steady ones too.
    attempt = _Script(*(ConcurrentTransactionsError(str(i)) for i in range(5)))
    bounded = Retry(steady=(ConcurrentTransactionsError,), max_retries=2)
    with pytest.raises(ConcurrentTransactionsError, match=r"2$"):
        await retrying(attempt, RetryState(_fast()), what="op", retry=bounded)
    assert attempt.calls == 3


async def test_an_outer_cancellation_propagates_and_leaves_the_state_usable() -> None:
    # Cancelled in the middle of a backoff pause: no KafkaTimeoutError (the deadline was
    # not ours), and the same state drives a later call to completion.
    state = RetryState(ExponentialBackoff(10_000, 10_000), timeout=60)
    attempt = _Script(RequestTimedOutError("x"))
    with anyio.move_on_after(0.1) as scope:
        await retrying(attempt, state, what="op")
    assert scope.cancelled_caught
    assert attempt.calls == 1 and state.failures == 1
    state.succeeded()
    assert await retrying(_Script(), state, what="op") == "done"


# ---------------------------------------------------------------------- Cluster.call


@asynccontextmanager
async def _cluster(servers: str, **overrides: Any) -> AsyncIterator[Cluster]:
    settings: dict[str, Any] = {
        "bootstrap_servers": parse_bootstrap_servers(servers),
        "retry_backoff_ms": 20,
        "retry_backoff_max_ms": 200,
        "reconnect_backoff_ms": 20,
        "reconnect_backoff_max_ms": 200,
    }
    settings.update(overrides)
    async with Cluster(ClusterConfig(**settings)) as cluster:
        yield cluster


def _name(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:10]}"


def _list_offsets(topic: str, partition: int) -> ListOffsetsRequest:
    # EARLIEST: Tansu answers LATEST wrongly (shared/TANSU.md); earliest is 0 for a new topic.
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


async def test_leader_route_to_a_topic_that_cannot_exist_fails_with_its_error(
    kafka_broker: LocalBroker,
) -> None:
    async with _cluster(kafka_broker.bootstrap_servers) as cluster:
        with pytest.raises(KafkaError) as info:
            await cluster.call(_list_offsets("bad name!", 0), Leader("bad name!", 0), timeout=20)
        assert not isinstance(info.value, KafkaTimeoutError)
        assert not info.value.retriable


def test_not_leader_error_is_invalid_metadata() -> None:
    # The repair rule keys on the class attribute, not on a list of codes.
    assert NotLeaderForPartitionError.invalid_metadata
