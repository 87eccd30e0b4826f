"""``Consumer.commit()`` retries retriable errors for ``default_api_timeout_ms``, as Java's
``commitSync`` does for ``default.api.timeout.ms`` (60 s), not for one request's timeout.

Found in the network-partition runs (issue 50): while a fault kept the group's coordinator
away for longer than ``request_timeout_ms`` (5 s there), our ``commit()`` raised
KafkaTimeoutError 1-4 times a run, where Java's committing consumer beside it, on the same
faults, never failed a commit. FakeKafka on virtual time, both group protocols: the
coordinator answers every OffsetCommit COORDINATOR_LOAD_IN_PROGRESS (retriable: the commit is
just asked again) for 20 s.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import ConfigError, CoordinatorLoadInProgressError, KafkaTimeoutError
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

OFFSET_COMMIT = 8
OFFSET_FETCH = 9
T = "t"
OUTAGE_S = 20.0


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@pytest.fixture(params=["classic", "consumer"])
def group_protocol(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def _consumer(kafka: FakeKafka, group_protocol: str, **settings: Any) -> Consumer:
    return Consumer(
        **kafka.client_config(),
        group_id="g",
        group_protocol=group_protocol,
        enable_auto_commit=False,
        request_timeout_ms=5000,
        **settings,
    )


async def test_a_commit_outlasts_a_coordinator_away_for_longer_than_a_request(
    group_protocol: str,
) -> None:
    tp = TopicPartition(T, 0)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic(T, 1)
        async with _consumer(kafka, group_protocol) as consumer:
            consumer.assign([tp])
            await consumer.commit({tp: 3})
            assert kafka.committed("g") == {(T, 0): 3}
            kafka.inject(OFFSET_COMMIT, CoordinatorLoadInProgressError.errno, times=None)
            started = anyio.current_time()

            async def coordinator_back() -> None:
                await anyio.sleep(OUTAGE_S)  # the outage, on virtual time
                kafka.clear_injections()

            async with anyio.create_task_group() as tg:
                tg.start_soon(coordinator_back)
                await consumer.commit({tp: 7})  # raised KafkaTimeoutError after 5 s
            took = anyio.current_time() - started
            assert kafka.committed("g") == {(T, 0): 7}
            assert await consumer.committed(tp) == 7
    # Retried through the outage (several times), done once it ended.
    assert OUTAGE_S <= took < OUTAGE_S + 5.0, took


async def test_a_commit_gives_up_after_default_api_timeout_ms(group_protocol: str) -> None:
    tp = TopicPartition(T, 0)
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic(T, 1)
        async with _consumer(kafka, group_protocol, default_api_timeout_ms=12000) as consumer:
            consumer.assign([tp])
            kafka.inject(OFFSET_COMMIT, CoordinatorLoadInProgressError.errno, times=None)
            started = anyio.current_time()
            with pytest.raises(KafkaTimeoutError):
                await consumer.commit({tp: 7})
            took = anyio.current_time() - started
            kafka.clear_injections()
            assert kafka.committed("g") == {}
    assert 12.0 <= took < 12.0 + 5.0, took


def test_default_api_timeout_ms_is_javas_and_never_below_a_request() -> None:
    assert ConsumerConfig().default_api_timeout_ms == 60000
    assert (
        ConsumerConfig.from_properties({"default.api.timeout.ms": "90000"}).default_api_timeout_ms
        == 90000
    )
    # Left unset, it follows a longer request timeout; set lower by hand, it is an error.
    assert ConsumerConfig(request_timeout_ms=90000).default_api_timeout_ms == 90000
    with pytest.raises(ConfigError, match="default_api_timeout_ms"):
        ConsumerConfig(request_timeout_ms=5000, default_api_timeout_ms=1000)


@pytest.mark.parametrize("operation", ["commit", "committed"])
async def test_a_request_to_a_silent_coordinator_is_given_up_after_request_timeout_ms(
    group_protocol: str, operation: str
) -> None:
    """Each request of a commit (or committed()) waits ``request_timeout_ms``, not the whole
    ``default_api_timeout_ms``; the coordinator it went to is then forgotten, so the next
    attempt looks the group up again, as Java's consumer does after a request timeout (a
    disconnect: ``markCoordinatorUnknown``). Found in the partition runs (issue 50): after
    the commit deadline became 60 s, a commit written to a coordinator just cut off waited
    for the node instead of 5 s, while the group moved to another node, and the consumer
    read nothing meanwhile. Here the old coordinator holds its answers to the group's
    offset requests for a minute and the group moves, as when Kafka fences a node cut off
    and elects new leaders (the node answers the rest: FindCoordinator, wherever it goes,
    names the new one)."""
    tp = TopicPartition(T, 0)
    api = OFFSET_COMMIT if operation == "commit" else OFFSET_FETCH
    async with FakeKafka(brokers=3, tcp=False) as kafka:
        kafka.create_topic(T, 1)
        async with _consumer(kafka, group_protocol) as consumer:
            await consumer.commit({tp: 3})
            old = kafka.coordinator_for("g")
            kafka.delay(old, 60_000, api_key=api)
            kafka.move_coordinator("g", next(n for n in (1, 2, 3) if n != old))
            started = anyio.current_time()
            if operation == "commit":
                # Before: KafkaTimeoutError after 60 s (the one request waited all of it);
                # with only the request bounded, the same coordinator again and again.
                await consumer.commit({tp: 7})
                assert kafka.committed("g") == {(T, 0): 7}
            else:
                assert await consumer.committed(tp) == 3
            took = anyio.current_time() - started
            kafka.delay(old, 0, api_key=api)
    # One request timeout (5 s) at the old coordinator, then the new one at once.
    assert 5.0 <= took < 5.0 + 1.0, took
