"""Cluster against a fake broker (canned Metadata / FindCoordinator answers).

Tansu auto-creates every topic a Metadata request names and its coordinators are always
ready (TANSU.md), so topics that never resolve, zero-partition topics, leaderless
partitions, authorization errors and COORDINATOR_LOAD_IN_PROGRESS are shown here with the
fake connection from ``cluster_fakes``; everything above the Connection is production code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from cluster_fakes import (
    COORDINATOR_LOAD_IN_PROGRESS,
    GROUP_AUTHORIZATION_FAILED,
    NOT_COORDINATOR,
    TOPIC_AUTHORIZATION_FAILED,
    FakeBroker,
    topic,
    unknown,
)

from aiokafka_ng.cluster import BrokerMetadata, Cluster, ClusterConfig, ClusterMetadata
from aiokafka_ng.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka_ng.protocol.messages.find_coordinator import FindCoordinatorRequest
from aiokafka_ng.protocol.messages.metadata import MetadataRequest

pytestmark = pytest.mark.anyio


@asynccontextmanager
async def fake_cluster(broker: FakeBroker, **overrides: Any) -> AsyncIterator[Cluster]:
    settings: dict[str, Any] = {
        "bootstrap_servers": [(broker.host, broker.port)],
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 100,
        "reconnect_backoff_ms": 10,
        "reconnect_backoff_max_ms": 100,
    }
    settings.update(overrides)
    async with Cluster(ClusterConfig(**settings), connector=broker.connector) as cluster:  # type: ignore[arg-type]
        yield cluster


async def test_bootstrap_skips_bad_server_and_reuses_connection() -> None:
    broker = FakeBroker(node_id=7)
    broker.refuse.add(("bad", 1))
    async with fake_cluster(broker, bootstrap_servers=[("bad", 1), ("fake", 9092)]) as c:
        assert set(c.metadata.brokers) == {7}
        assert c.metadata.cluster_id == "fake-cluster"
        # The bootstrap connection became node 7's: one socket, not two.
        await c.request(7, MetadataRequest(topics=[]))
        assert broker.connects == 1
        assert set(c.statistics().pool.nodes) == {7}


async def test_bootstrap_gives_up_after_timeout() -> None:
    broker = FakeBroker()
    broker.refuse.update({("bad", 1), ("bad", 2)})
    with pytest.raises(KafkaConnectionError, match="unable to bootstrap from bad:1, bad:2"):
        async with fake_cluster(
            broker, bootstrap_servers=[("bad", 1), ("bad", 2)], bootstrap_timeout_ms=200
        ):
            pass


async def test_many_waiters_share_one_metadata_request() -> None:
    broker = FakeBroker()
    broker.topics["t"] = lambda n: topic("t", 4)
    async with fake_cluster(broker) as c:
        before = len(broker.metadata_requests())
        results = []

        async def wait() -> None:
            results.append(await c.wait_for_topics(["t"], timeout=5))

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(wait)
        assert len(results) == 50
        assert all(len(r["t"].partitions) == 4 for r in results)
        assert len(broker.metadata_requests()) - before == 1
        assert c.statistics().metadata_requests == len(broker.metadata_requests())


async def test_waiters_arriving_mid_request_join_the_next_one() -> None:
    """50 different topics asked while a request is in flight: served by ONE next request."""
    broker = FakeBroker()
    for i in range(51):
        broker.topics[f"t{i}"] = lambda n, i=i: topic(f"t{i}", 1)
    async with fake_cluster(broker) as c:
        before = len(broker.metadata_requests())
        broker.metadata_gate = anyio.Event()
        in_flight = anyio.Event()
        broker.metadata_hook = lambda names: in_flight.set()
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.wait_for_topics, ["t0"])
            await in_flight.wait()  # the request for t0 is on the wire, held by the gate
            for i in range(1, 51):
                tg.start_soon(c.wait_for_topics, [f"t{i}"])
            await anyio.wait_all_tasks_blocked()  # all 50 are waiting on their topics
            broker.metadata_gate.set()
        sent = broker.metadata_requests()[before:]
        assert len(sent) == 2
        assert [t.name for t in sent[0].request.topics] == ["t0"]
        assert len(sent[1].request.topics) == 51


async def test_topic_a_is_not_delayed_by_topic_b_that_never_resolves() -> None:
    """B answers UNKNOWN_TOPIC_OR_PARTITION forever (Tansu would auto-create it, hence the
    fake). After four failed rounds B's retry backoff has grown to ~1.2 s; a waiter for A is
    then served by the very next request, well before B's next retry would be due."""
    broker = FakeBroker()
    broker.topics["b"] = lambda n: unknown("b")
    broker.topics["a"] = lambda n: topic("a", 2)
    b_rounds = anyio.Event()
    broker.metadata_hook = lambda names: (
        b_rounds.set() if "b" in names and broker._rounds.get("b", 0) >= 3 else None
    )
    async with fake_cluster(broker, retry_backoff_ms=150, retry_backoff_max_ms=10_000) as c:
        async with anyio.create_task_group() as tg:

            async def wait_b() -> None:
                await c.wait_for_topics(["b"])

            tg.start_soon(wait_b)
            with anyio.fail_after(10):
                await b_rounds.wait()  # B's 4th request is being answered
            requests_before = len(broker.metadata_requests())
            start = anyio.current_time()
            with anyio.fail_after(5):
                a = (await c.wait_for_topics(["a"]))["a"]
            elapsed = anyio.current_time() - start
            assert len(a.partitions) == 2
            assert len(broker.metadata_requests()) - requests_before == 1
            assert elapsed < 0.5, elapsed  # B's next retry is ~1.2 s away
            tg.cancel_scope.cancel()
        # B is still unresolved and still tracked: it will keep being retried.
        assert not c.metadata.topics["b"].ready
        assert "b" in c.statistics().tracked_topics


async def test_wait_for_topics_timeout_names_the_topic_and_error() -> None:
    broker = FakeBroker()
    async with fake_cluster(broker) as c:
        with pytest.raises(KafkaTimeoutError, match=r"'nope' \(UnknownTopicOrPartitionError\)"):
            await c.wait_for_topics(["nope"], timeout=0.2)


async def test_fatal_topic_error_is_raised_and_topic_untracked() -> None:
    broker = FakeBroker()
    broker.topics["secret"] = lambda n: topic("secret", 0, error=TOPIC_AUTHORIZATION_FAILED)
    broker.topics["ok"] = lambda n: topic("ok", 1)
    async with fake_cluster(broker) as c:
        with pytest.raises(TopicAuthorizationFailedError):
            await c.wait_for_topics(["ok", "secret"], timeout=5)
        assert "secret" not in c.statistics().tracked_topics
        assert (await c.wait_for_topics(["ok"], timeout=5))["ok"].ready
        # Access granted meanwhile: asking again is answered by a new request, not by the
        # cached error.
        broker.topics["secret"] = lambda n: topic("secret", 1)
        assert (await c.wait_for_topics(["secret"], timeout=5))["secret"].ready


async def test_non_retriable_refresh_failure_reaches_waiters() -> None:
    broker = FakeBroker()
    async with fake_cluster(broker) as c:
        broker.connect_error = SaslAuthenticationFailedError("bad password")
        for conn in broker.connections:
            await conn.aclose()
        with pytest.raises(SaslAuthenticationFailedError):
            await c.wait_for_topics(["t"], timeout=5)
        with pytest.raises(SaslAuthenticationFailedError):
            await c.refresh(timeout=5)
        broker.connect_error = None  # fixed: the refresher's retries recover
        broker.topics["t"] = lambda n: topic("t", 1)
        assert (await c.wait_for_topics(["t"], timeout=5))["t"].ready


async def test_zero_partitions_then_created() -> None:
    broker = FakeBroker()
    broker.topics["slow"] = lambda n: topic("slow", 0 if n < 3 else 2)
    async with fake_cluster(broker) as c:
        t = (await c.wait_for_topics(["slow"], timeout=5))["slow"]
        assert len(t.partitions) == 2
        assert broker._rounds["slow"] == 3


async def test_leader_for_waits_for_a_leader_and_rejects_missing_partition() -> None:
    broker = FakeBroker()
    broker.topics["t"] = lambda n: topic("t", 2, leader=-1 if n < 3 else 1)
    async with fake_cluster(broker) as c:
        assert await c.leader_for("t", 1, timeout=5) == 1
        with pytest.raises(UnknownTopicOrPartitionError):
            await c.leader_for("t", 5, timeout=5)
        assert await c.controller(timeout=5) == 1


async def test_refresh_returns_data_requested_after_the_call() -> None:
    broker = FakeBroker()
    broker.topics["t"] = lambda n: topic("t", 1, epoch=n)
    async with fake_cluster(broker) as c:
        await c.wait_for_topics(["t"])
        broker.metadata_gate = anyio.Event()
        in_flight = anyio.Event()
        broker.metadata_hook = lambda names: in_flight.set()
        c.request_update()
        async with anyio.create_task_group() as tg:
            await in_flight.wait()
            results: list[ClusterMetadata] = []

            async def refresh() -> None:
                results.append(await c.refresh(timeout=5))

            for _ in range(5):
                tg.start_soon(refresh)
            await anyio.wait_all_tasks_blocked()
            broker.metadata_gate.set()
        # The in-flight request was sent before refresh() was called: the callers waited
        # for the next one (epoch 3), and all five shared it.
        assert {r.topics["t"].partitions[0].leader_epoch for r in results} == {3}
        assert broker._rounds["t"] == 3


async def test_update_leader_hint_and_listener() -> None:
    broker = FakeBroker()
    broker.topics["t"] = lambda n: topic("t", 2, epoch=4)
    async with fake_cluster(broker) as c:
        await c.wait_for_topics(["t"])
        seen: list[ClusterMetadata] = []
        remove = c.add_listener(seen.append)
        c.update_leader("t", 0, 1, 3)  # older epoch: ignored
        assert not seen
        c.update_leader("t", 0, 9, 5, BrokerMetadata(9, "b9", 1))
        assert c.metadata.leader_for("t", 0) == 9
        assert c.metadata.brokers[9].host == "b9"
        assert len(seen) == 1 and seen[0] is c.metadata
        remove()
        c.update_leader("t", 1, 9, 6)
        assert len(seen) == 1


async def test_coordinator_retries_load_in_progress_and_caches() -> None:
    broker = FakeBroker()
    broker.coordinator_codes = [COORDINATOR_LOAD_IN_PROGRESS, NOT_COORDINATOR]
    async with fake_cluster(broker) as c:
        results = []

        async def ask() -> None:
            results.append(await c.coordinator("g", timeout=5))

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(ask)
        assert results == [1] * 10
        assert c.statistics().coordinator_requests == 3  # two retries, shared by all ten
        assert await c.coordinator("g") == 1
        assert c.statistics().coordinator_requests == 3  # cached
        c.invalidate_coordinator("g")
        assert await c.coordinator("g") == 1
        assert c.statistics().coordinator_requests == 4


async def test_coordinator_batches_keys_v4_and_one_key_before() -> None:
    broker = FakeBroker()
    async with fake_cluster(broker) as c:
        assert await c.coordinators(["a", "b"], key_type=1) == {"a": 1, "b": 1}
        sent = [s for s in broker.sent if s.api == "FindCoordinator"]
        assert len(sent) == 1 and sent[0].version == 6
        assert sent[0].request.coordinator_keys == ["a", "b"] and sent[0].request.key_type == 1
    old = FakeBroker()
    old.api_versions[FindCoordinatorRequest.API_KEY] = (0, 3)
    async with fake_cluster(old) as c:
        assert await c.coordinators(["a", "b"]) == {"a": 1, "b": 1}
        sent = [s for s in old.sent if s.api == "FindCoordinator"]
        assert [(s.version, s.request.key) for s in sent] == [(3, "a"), (3, "b")]


async def test_coordinator_fatal_error_is_raised() -> None:
    broker = FakeBroker()
    broker.coordinator_codes = [GROUP_AUTHORIZATION_FAILED]
    async with fake_cluster(broker) as c:
        with pytest.raises(GroupAuthorizationFailedError):
            await c.coordinator("g", timeout=5)


async def test_metadata_version_is_the_highest_common() -> None:
    broker = FakeBroker()
    broker.api_versions[MetadataRequest.API_KEY] = (0, 7)
    async with fake_cluster(broker) as c:
        await c.refresh()
        assert {s.version for s in broker.metadata_requests()} == {7}
        assert c.metadata.controller_id == 1


async def test_burst_of_request_update_costs_one_refresh() -> None:
    broker = FakeBroker()
    async with fake_cluster(broker) as c:
        before = len(broker.metadata_requests())
        generation = c.metadata.generation
        refreshed = anyio.Event()
        c.add_listener(lambda md: refreshed.set())
        for _ in range(100):  # e.g. NOT_LEADER_OR_FOLLOWER on 100 partitions
            c.request_update()
        with anyio.fail_after(5):
            await refreshed.wait()
        assert len(broker.metadata_requests()) - before == 1
        assert c.metadata.generation == generation + 1


async def test_periodic_refresh_without_any_caller() -> None:
    broker = FakeBroker()
    async with fake_cluster(broker, metadata_max_age_ms=50) as c:
        seen: list[int] = []
        done = anyio.Event()

        def on_change(md: ClusterMetadata) -> None:
            seen.append(md.generation)
            if len(seen) == 3:
                done.set()

        c.add_listener(on_change)
        start = anyio.current_time()
        with anyio.fail_after(5):
            await done.wait()
        assert anyio.current_time() - start >= 3 * 0.050 * 0.9  # not sooner than max age
        assert seen == sorted(seen) and len(set(seen)) == 3
