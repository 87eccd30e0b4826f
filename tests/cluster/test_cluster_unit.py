"""Cluster against FakeKafka in memory, on virtual time.

Tansu auto-creates every topic a Metadata request names and its coordinators are always
ready (TANSU.md), so topics that never resolve, zero-partition topics, leaderless
partitions, authorization errors and COORDINATOR_LOAD_IN_PROGRESS are shown here: FakeKafka
without auto-creation, its Metadata answers held or edited by a script
(``FakeKafka.answer`` + ``model_answer``), its FindCoordinator answers given errors with
``inject``. Everything from the Connection up is production code.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng.cluster import BrokerMetadata, Cluster, ClusterConfig, ClusterMetadata
from aiokafka_ng.errors import (
    GroupAuthorizationFailedError,
    KafkaConnectionError,
    KafkaTimeoutError,
    SaslAuthenticationFailedError,
    TopicAuthorizationFailedError,
    UnknownTopicOrPartitionError,
)
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.net.sasl import SaslConfig
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseTopic,
)
from aiokafka_ng.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from aiokafka_ng.protocol.messages.sasl_handshake import SaslHandshakeResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received, Script

pytestmark = pytest.mark.anyio

METADATA, FIND_COORDINATOR, SASL_HANDSHAKE, SASL_AUTHENTICATE = 3, 10, 17, 36
COORDINATOR_LOAD_IN_PROGRESS = 14
NOT_COORDINATOR = 16
TOPIC_AUTHORIZATION_FAILED = 29
GROUP_AUTHORIZATION_FAILED = 30


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def address(kafka: FakeKafka) -> tuple[str, int]:
    return "127.0.0.1", kafka.nodes[1].port


@asynccontextmanager
async def fake_cluster(kafka: FakeKafka, **overrides: Any) -> AsyncIterator[Cluster]:
    settings: dict[str, Any] = {
        "bootstrap_servers": [address(kafka)],
        "retry_backoff_ms": 10,
        "retry_backoff_max_ms": 100,
        "reconnect_backoff_ms": 10,
        "reconnect_backoff_max_ms": 100,
        "connection": ConnectionConfig(transport=kafka.transport),
    }
    settings.update(overrides)
    async with Cluster(ClusterConfig(**settings)) as cluster:
        yield cluster


def one_broker() -> FakeKafka:
    """One node that creates no topic by itself: an unknown topic stays unknown."""
    return FakeKafka(brokers=1, tcp=False, auto_create_topics=False)


def names(call: Received) -> list[str]:
    return [t.name for t in call.request.topics or ()]


def asked(kafka: FakeKafka, topic: str) -> int:
    """Metadata requests that named ``topic`` so far."""
    return sum(topic in names(r) for r in kafka.received(METADATA))


def edit_metadata(kafka: FakeKafka, edit: Callable[[MetadataResponseTopic, int], None]) -> Script:
    """Metadata answered by the model, each topic then passed to ``edit(topic, round)``,
    ``round`` counting the requests that named the topic, this one included."""

    async def handle(call: Received) -> MetadataResponse:
        answer = await kafka.model_answer(call)
        assert isinstance(answer, MetadataResponse)
        for t in answer.topics:
            if t.name is not None:
                edit(t, asked(kafka, t.name))
        return answer

    return kafka.answer(METADATA, handle)


async def test_bootstrap_skips_bad_server_and_reuses_connection() -> None:
    kafka = one_broker()
    async with kafka, fake_cluster(kafka, bootstrap_servers=[("bad", 1), address(kafka)]) as c:
        assert set(c.metadata.brokers) == {1}
        assert c.metadata.cluster_id == "fake-kafka-cluster"
        # The bootstrap connection became node 1's: one connection, not two.
        await c.request(1, MetadataRequest(topics=[]))
        assert len(kafka.connection_attempts(1)) == 1
        assert set(c.statistics().pool.nodes) == {1}


async def test_bootstrap_gives_up_after_timeout() -> None:
    async with one_broker() as kafka:
        with pytest.raises(KafkaConnectionError, match="unable to bootstrap from bad:1, bad:2"):
            async with fake_cluster(
                kafka, bootstrap_servers=[("bad", 1), ("bad", 2)], bootstrap_timeout_ms=200
            ):
                pass
        assert kafka.connection_attempts(1) == []


async def test_many_waiters_share_one_metadata_request() -> None:
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        kafka.create_topic("t", 4)
        before = len(kafka.received(METADATA))
        results = []

        async def wait() -> None:
            results.append(await c.wait_for_topics(["t"], timeout=5))

        async with anyio.create_task_group() as tg:
            for _ in range(50):
                tg.start_soon(wait)
        assert len(results) == 50
        assert all(len(r["t"].partitions) == 4 for r in results)
        assert len(kafka.received(METADATA)) - before == 1
        assert c.statistics().metadata_requests == len(kafka.received(METADATA))


async def test_waiters_arriving_mid_request_join_the_next_one() -> None:
    """50 different topics asked while a request is in flight: served by ONE next request."""
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        for i in range(51):
            kafka.create_topic(f"t{i}", 1)
        before = len(kafka.received(METADATA))
        gate, in_flight = anyio.Event(), anyio.Event()

        async def hold(call: Received) -> Any:
            in_flight.set()
            await gate.wait()
            return await kafka.model_answer(call)

        kafka.answer(METADATA, hold, times=1)
        async with anyio.create_task_group() as tg:
            tg.start_soon(c.wait_for_topics, ["t0"])
            await in_flight.wait()  # the request for t0 is on the wire, held by the gate
            for i in range(1, 51):
                tg.start_soon(c.wait_for_topics, [f"t{i}"])
            await anyio.wait_all_tasks_blocked()  # all 50 are waiting on their topics
            gate.set()
        sent = kafka.received(METADATA)[before:]
        assert len(sent) == 2
        assert names(sent[0]) == ["t0"]
        assert len(names(sent[1])) == 51


async def test_topic_a_is_not_delayed_by_topic_b_that_never_resolves() -> None:
    """B answers UNKNOWN_TOPIC_OR_PARTITION forever (Tansu would auto-create it). After four
    failed rounds B's retry backoff has grown to ~1.2 s; a waiter for A is then served by
    the very next request, well before B's next retry would be due."""
    async with one_broker() as kafka:
        kafka.create_topic("a", 2)
        async with fake_cluster(kafka, retry_backoff_ms=150, retry_backoff_max_ms=10_000) as c:
            async with anyio.create_task_group() as tg:

                async def wait_b() -> None:
                    await c.wait_for_topics(["b"])

                tg.start_soon(wait_b)
                await kafka.wait_until(lambda: asked(kafka, "b") >= 4)  # B's 4th request
                requests_before = len(kafka.received(METADATA))
                start = anyio.current_time()
                a = (await c.wait_for_topics(["a"]))["a"]
                elapsed = anyio.current_time() - start
                assert len(a.partitions) == 2
                assert len(kafka.received(METADATA)) - requests_before == 1
                assert elapsed < 0.5, elapsed  # virtual seconds; B's next retry is ~1.2 s away
                assert "a" in names(kafka.received(METADATA)[-1])
                tg.cancel_scope.cancel()
            # B is still unresolved and still tracked: it will keep being retried.
            assert not c.metadata.topics["b"].ready
            assert "b" in c.statistics().tracked_topics


async def test_wait_for_topics_timeout_names_the_topic_and_error() -> None:
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        with pytest.raises(KafkaTimeoutError, match=r"'nope' \(UnknownTopicOrPartitionError\)"):
            await c.wait_for_topics(["nope"], timeout=0.2)
        assert asked(kafka, "nope") >= 2  # retried until the timeout


async def test_fatal_topic_error_is_raised_and_topic_untracked() -> None:
    async with one_broker() as kafka:
        kafka.create_topic("secret", 1)
        kafka.create_topic("ok", 1)
        denied = {"secret"}

        def deny(t: MetadataResponseTopic, _round: int) -> None:
            if t.name in denied:  # the model has no ACLs: the refusal is edited in
                t.error_code, t.partitions = TOPIC_AUTHORIZATION_FAILED, []

        edit_metadata(kafka, deny)
        async with fake_cluster(kafka) as c:
            with pytest.raises(TopicAuthorizationFailedError):
                await c.wait_for_topics(["ok", "secret"], timeout=5)
            assert "secret" not in c.statistics().tracked_topics
            assert (await c.wait_for_topics(["ok"], timeout=5))["ok"].ready
            # Access granted meanwhile: asking again is answered by a new request, not by the
            # cached error.
            denied.clear()
            before = asked(kafka, "secret")
            assert (await c.wait_for_topics(["secret"], timeout=5))["secret"].ready
            assert asked(kafka, "secret") == before + 1


async def test_non_retriable_refresh_failure_reaches_waiters() -> None:
    """A login refused (SaslAuthenticate error 58) on reconnecting: a fatal error, raised to
    the waiters; once logins work again, the refresher's retries recover."""
    refused = anyio.Event()
    login_ok = True

    def handshake(call: Received) -> SaslHandshakeResponse:
        return SaslHandshakeResponse(mechanisms=["PLAIN"])

    def authenticate(call: Received) -> SaslAuthenticateResponse:
        if login_ok:
            return SaslAuthenticateResponse(auth_bytes=b"")
        refused.set()
        return SaslAuthenticateResponse(error_code=58, error_message="bad password")

    async with one_broker() as kafka:
        kafka.answer(SASL_HANDSHAKE, handshake)
        kafka.answer(SASL_AUTHENTICATE, authenticate)
        sasl = SaslConfig("PLAIN", "alice", "pw")
        connection = ConnectionConfig(transport=kafka.transport, sasl=sasl)
        async with fake_cluster(kafka, connection=connection) as c:
            login_ok = False
            kafka.isolate(1)  # the connections drop ...
            kafka.isolate(1, on=False)  # ... and every new one's login is refused
            with pytest.raises(SaslAuthenticationFailedError):
                await c.wait_for_topics(["t"], timeout=5)
            with pytest.raises(SaslAuthenticationFailedError):
                await c.refresh(timeout=5)
            assert refused.is_set()
            login_ok = True  # fixed: the refresher's retries recover
            kafka.create_topic("t", 1)
            assert (await c.wait_for_topics(["t"], timeout=5))["t"].ready


async def test_zero_partitions_then_created() -> None:
    async with one_broker() as kafka:
        kafka.create_topic("slow", 2)

        def not_yet(t: MetadataResponseTopic, n: int) -> None:
            if n < 3:
                t.partitions = []

        edit_metadata(kafka, not_yet)
        async with fake_cluster(kafka) as c:
            t = (await c.wait_for_topics(["slow"], timeout=5))["slow"]
            assert len(t.partitions) == 2
            assert asked(kafka, "slow") == 3


async def test_leader_for_waits_for_a_leader_and_rejects_missing_partition() -> None:
    async with one_broker() as kafka:
        kafka.create_topic("t", 2)

        def leaderless(t: MetadataResponseTopic, n: int) -> None:
            if n < 3:
                for p in t.partitions:
                    p.leader_id = -1

        edit_metadata(kafka, leaderless)
        async with fake_cluster(kafka) as c:
            assert await c.leader_for("t", 1, timeout=5) == 1
            assert asked(kafka, "t") == 3
            with pytest.raises(UnknownTopicOrPartitionError):
                await c.leader_for("t", 5, timeout=5)
            assert await c.controller(timeout=5) == 1


async def test_refresh_returns_data_requested_after_the_call() -> None:
    async with one_broker() as kafka:
        kafka.create_topic("t", 1)
        gate: anyio.Event | None = None
        in_flight = anyio.Event()

        async def epoch_is_round(call: Received) -> Any:
            answer = await kafka.model_answer(call)
            assert isinstance(answer, MetadataResponse)
            for t in answer.topics:
                t.partitions[0].leader_epoch = asked(kafka, "t")
            if gate is not None and not in_flight.is_set():
                in_flight.set()
                await gate.wait()
            return answer

        kafka.answer(METADATA, epoch_is_round, match=lambda call: names(call) == ["t"])
        async with fake_cluster(kafka) as c:
            await c.wait_for_topics(["t"])
            gate = anyio.Event()
            c.request_update()
            async with anyio.create_task_group() as tg:
                await in_flight.wait()
                results: list[ClusterMetadata] = []

                async def refresh() -> None:
                    results.append(await c.refresh(timeout=5))

                for _ in range(5):
                    tg.start_soon(refresh)
                await anyio.wait_all_tasks_blocked()
                gate.set()
        # The in-flight request was sent before refresh() was called: the callers waited
        # for the next one (epoch 3), and all five shared it.
        assert {r.topics["t"].partitions[0].leader_epoch for r in results} == {3}
        assert asked(kafka, "t") == 3


async def test_update_leader_hint_and_listener() -> None:
    async with one_broker() as kafka:
        kafka.create_topic("t", 2)
        for _ in range(4):  # leader epoch 4 on both partitions
            kafka.move_leader("t", 0, 1)
            kafka.move_leader("t", 1, 1)
        async with fake_cluster(kafka) as c:
            await c.wait_for_topics(["t"])
            assert c.metadata.topics["t"].partitions[0].leader_epoch == 4
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
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        kafka.inject(FIND_COORDINATOR, COORDINATOR_LOAD_IN_PROGRESS, times=1)
        kafka.inject(FIND_COORDINATOR, NOT_COORDINATOR, times=1)
        results = []

        async def ask() -> None:
            results.append(await c.coordinator("g", timeout=5))

        async with anyio.create_task_group() as tg:
            for _ in range(10):
                tg.start_soon(ask)
        assert results == [1] * 10
        assert c.statistics().coordinator_requests == 3  # two retries, shared by all ten
        assert len(kafka.received(FIND_COORDINATOR)) == 3
        assert await c.coordinator("g") == 1
        assert c.statistics().coordinator_requests == 3  # cached
        c.invalidate_coordinator("g")
        assert await c.coordinator("g") == 1
        assert c.statistics().coordinator_requests == 4


async def test_coordinator_batches_keys_v4_and_one_key_before() -> None:
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        assert await c.coordinators(["a", "b"], key_type=1) == {"a": 1, "b": 1}
        sent = kafka.received(FIND_COORDINATOR)
        assert len(sent) == 1 and sent[0].version == 6
        assert sent[0].request.coordinator_keys == ["a", "b"] and sent[0].request.key_type == 1
    async with one_broker() as old:
        old.api_versions[FIND_COORDINATOR] = (0, 3)
        async with fake_cluster(old) as c:
            assert await c.coordinators(["a", "b"]) == {"a": 1, "b": 1}
        sent = old.received(FIND_COORDINATOR)
        assert [(s.version, s.request.key) for s in sent] == [(3, "a"), (3, "b")]


async def test_coordinator_fatal_error_is_raised() -> None:
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        kafka.inject(FIND_COORDINATOR, GROUP_AUTHORIZATION_FAILED, times=1)
        with pytest.raises(GroupAuthorizationFailedError):
            await c.coordinator("g", timeout=5)
        assert len(kafka.received(FIND_COORDINATOR)) == 1  # not retried


async def test_metadata_version_is_the_highest_common() -> None:
    async with one_broker() as kafka:
        kafka.api_versions[METADATA] = (0, 7)
        kafka.move_controller(1)
        async with fake_cluster(kafka) as c:
            await c.refresh()
            assert {s.version for s in kafka.received(METADATA)} == {7}
            assert c.metadata.controller_id == 1


async def test_burst_of_request_update_costs_one_refresh() -> None:
    async with one_broker() as kafka, fake_cluster(kafka) as c:
        before = len(kafka.received(METADATA))
        generation = c.metadata.generation
        refreshed = anyio.Event()
        c.add_listener(lambda md: refreshed.set())
        for _ in range(100):  # e.g. NOT_LEADER_OR_FOLLOWER on 100 partitions
            c.request_update()
        await refreshed.wait()
        assert len(kafka.received(METADATA)) - before == 1
        assert c.metadata.generation == generation + 1


async def test_periodic_refresh_without_any_caller() -> None:
    # On virtual time, which starts at 0.0: the refresher once took a last success at 0.0
    # for none ("last_ok_at or now") and so never came due (found porting this test).
    async with one_broker() as kafka, fake_cluster(kafka, metadata_max_age_ms=50) as c:
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
        elapsed = anyio.current_time() - start
        assert len(kafka.received(METADATA)) == 4  # bootstrap, then one per max age
        assert elapsed == pytest.approx(3 * 0.050)  # each exactly one max age after the last
        assert seen == sorted(seen) and len(set(seen)) == 3


async def test_a_node_the_metadata_no_longer_names_fails_without_a_dial() -> None:
    """``can_dial`` is what the producer's sender and the consumer's fetcher ask after a
    failed ``connection()``: a node the pool dials (and paces) against one that fails at
    once, which the caller must pace itself."""
    async with FakeKafka(brokers=2, tcp=False) as kafka, fake_cluster(kafka) as c:
        await c.refresh()
        assert sorted(c.metadata.brokers) == [1, 2]
        assert c.can_dial(2)
        kafka.isolate(2)  # refused, yet still named by the metadata
        dials = len(kafka.connection_attempts(2))
        with pytest.raises(KafkaConnectionError):
            await c.connection(2)
        assert len(kafka.connection_attempts(2)) == dials + 1  # dialled, and refused
        assert c.can_dial(2)

        kafka.kill(2)  # gone from the metadata's brokers
        await c.refresh()
        assert sorted(c.metadata.brokers) == [1]
        assert not c.can_dial(2)
        dials = len(kafka.connection_attempts(2))
        with pytest.raises(KafkaConnectionError, match="no address known for node 2"):
            await c.connection(2)
        assert len(kafka.connection_attempts(2)) == dials  # failed without a dial
        assert c.can_dial(1)
        assert not c.can_dial(99)  # never named at all
