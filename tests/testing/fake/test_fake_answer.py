"""FakeKafka.answer: scripted answers per API key, in memory and over TCP, and the log of
received requests (FakeKafka.received) the scripts and the tests read."""

from __future__ import annotations

import struct
from typing import Any

import anyio
import pytest

from aiokafka_ng import AdminClient, NewTopic
from aiokafka_ng.admin import PartitionReassignment, TopicPartition
from aiokafka_ng.errors import (
    NotControllerError,
    OffsetOutOfRangeError,
    TopicAuthorizationFailedError,
    UnsupportedVersionError,
)
from aiokafka_ng.protocol.messages import create_topics as ct
from aiokafka_ng.protocol.messages import list_partition_reassignments as lpr
from aiokafka_ng.protocol.messages import metadata as md
from aiokafka_ng.testing import FakeKafka
from aiokafka_ng.testing.fake import Received

pytestmark = pytest.mark.anyio

METADATA, CREATE_TOPICS, DELETE_RECORDS, LIST_REASSIGN, DESCRIBE_CLUSTER = 3, 19, 21, 46, 60


@pytest.fixture(params=[True, False], ids=["memory", "tcp"])
def memory(request: pytest.FixtureRequest) -> bool:
    return bool(request.param)


def admin_for(kafka: FakeKafka, memory: bool) -> AdminClient:
    return AdminClient(
        **kafka.client_config(memory=memory), retry_backoff_ms=10, retry_backoff_max_ms=20
    )


def reassignments(call: Received) -> lpr.ListPartitionReassignmentsResponse:
    return lpr.ListPartitionReassignmentsResponse(
        topics=[
            lpr.OngoingTopicReassignment(
                name="t",
                partitions=[
                    lpr.OngoingPartitionReassignment(
                        partition_index=call.node,  # which node answered, to assert on
                        replicas=[1, 2],
                        adding_replicas=[2],
                        removing_replicas=[],
                    )
                ],
            )
        ]
    )


async def test_an_api_the_fake_lacks_is_advertised_and_answered_by_the_script(
    memory: bool,
) -> None:
    async with FakeKafka(brokers=2) as kafka:
        async with admin_for(kafka, memory) as admin:
            with pytest.raises(UnsupportedVersionError):  # not modelled, not advertised
                await admin.list_partition_reassignments()
            assert LIST_REASSIGN not in kafka.api_versions
            rule = kafka.answer(LIST_REASSIGN, reassignments)
            assert LIST_REASSIGN in kafka.api_versions
            # The client learned the versions on connecting: a new client sees the API.
        async with admin_for(kafka, memory) as admin:
            got = await admin.list_partition_reassignments()
    controller = kafka.controller
    assert got == {TopicPartition("t", controller): PartitionReassignment([1, 2], [2], [])}
    (sent,) = kafka.received(LIST_REASSIGN)
    assert (sent.node, sent.api_key, sent.request.topics) == (controller, LIST_REASSIGN, None)
    assert sent.version == kafka.api_versions[LIST_REASSIGN][1]
    assert rule.hits == 1 and rule.active  # times=None: answers until cleared
    assert kafka.received(LIST_REASSIGN, node=controller) == [sent]
    assert kafka.received(LIST_REASSIGN, node=3 - controller) == []


async def test_once_then_the_model_and_match_by_node(memory: bool) -> None:
    async with FakeKafka(brokers=2) as kafka:
        kafka.move_controller(1)

        def not_controller(call: Received) -> Any:
            kafka.move_controller(2)  # the controller moved: the model says so from now on
            return ct.CreateTopicsResponse(
                topics=[
                    ct.CreatableTopicResult(name=t.name, error_code=NotControllerError.errno)
                    for t in call.request.topics
                ]
            )

        rule = kafka.answer(CREATE_TOPICS, not_controller, times=1, match=1)
        async with admin_for(kafka, memory) as admin:
            (await admin.create_topics([NewTopic("t", 2, 1)])).raise_on_error()
        first, second = kafka.received(CREATE_TOPICS)
        assert (first.node, second.node) == (1, 2)  # retried at the new controller
        assert rule.hits == 1 and not rule.active
        assert [p.index for p in kafka.cluster.topics["t"].partitions] == [0, 1]  # the model


async def test_a_predicate_rule_before_a_catch_all_and_clear_faults(memory: bool) -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t", 2)
        out_of_range = kafka.answer(
            DELETE_RECORDS,
            lambda call: None,  # never called: the rule below answers first
            match=lambda call: False,
        )

        def v0_body(call: Received) -> bytes:
            # DeleteRecords v0 written out by hand: throttle, 1 topic, 1 partition each.
            assert call.version == 0
            ((topic, parts),) = [(t.name, t.partitions) for t in call.request.topics]
            body: bytes = struct.pack(">ii", 0, 1) + struct.pack(">h", len(topic)) + topic.encode()
            body += struct.pack(">i", len(parts))
            for p in parts:
                error = OffsetOutOfRangeError.errno
                body += struct.pack(">iqh", p.partition_index, p.offset, error)
            return body

        kafka.answer(DELETE_RECORDS, v0_body, match=lambda call: call.version == 0)
        kafka.api_versions[DELETE_RECORDS] = (0, 0)
        async with admin_for(kafka, memory) as admin:
            results = await admin.delete_records({TopicPartition("t", 0): 1})
            assert isinstance(results[TopicPartition("t", 0)], OffsetOutOfRangeError)
            assert out_of_range.hits == 0
            kafka.clear_faults()  # scripts go: the model answers
            results = await admin.delete_records({TopicPartition("t", 1): 0})
            assert results[TopicPartition("t", 1)].low_watermark == 0  # type: ignore[union-attr]


async def test_none_drops_the_connection_and_a_held_answer_waits(memory: bool) -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.answer(DESCRIBE_CLUSTER, lambda call: None, times=1)
        release = anyio.Event()
        held: list[Received] = []

        async def hold(call: Received) -> None:
            held.append(call)
            await release.wait()
            return None  # fall through is not a thing: a second drop, then the model

        kafka.answer(DESCRIBE_CLUSTER, hold, times=1)
        done = anyio.Event()
        async with admin_for(kafka, memory) as admin, anyio.create_task_group() as tg:

            async def describe() -> None:
                cluster = await admin.describe_cluster()
                assert [b.node_id for b in cluster.brokers] == [1]
                done.set()

            tg.start_soon(describe)
            await kafka.wait_until(lambda: bool(held))
            assert not done.is_set()  # held by the script
            release.set()
            await done.wait()
        first, second, third = kafka.received(DESCRIBE_CLUSTER)
        # Each dropped connection was replaced by a new one.
        assert len({first.connection, second.connection, third.connection}) == 3
        assert held == [second]


async def test_bad_rules_and_answers_are_refused() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        with pytest.raises(ValueError, match="unknown API key"):
            kafka.answer(9999, lambda call: None)
        with pytest.raises(ValueError, match="times"):
            kafka.answer(LIST_REASSIGN, lambda call: None, times=0)
        with pytest.raises(ValueError, match="no node 7"):
            kafka.answer(LIST_REASSIGN, lambda call: None, match=7)
        with pytest.raises(TypeError, match="match"):
            kafka.answer(LIST_REASSIGN, lambda call: None, match=True)
        assert LIST_REASSIGN not in kafka.api_versions  # a refused rule advertises nothing


async def test_a_script_holds_and_edits_the_models_answer(memory: bool) -> None:
    async with FakeKafka(brokers=1) as kafka:
        kafka.create_topic("t", 2)
        release = anyio.Event()

        async def deny(call: Received) -> Any:
            await release.wait()
            answer = await kafka.model_answer(call)
            assert isinstance(answer, md.MetadataResponse)
            (topic,) = answer.topics
            assert len(topic.partitions) == 2  # the model's answer, edited below
            topic.error_code, topic.partitions = TopicAuthorizationFailedError.errno, []
            return answer

        def names_t(call: Received) -> bool:
            return [t.name for t in call.request.topics or ()] == ["t"]

        kafka.answer(METADATA, deny, times=1, match=names_t)
        outcome: list[Any] = []
        async with admin_for(kafka, memory) as admin:
            async with anyio.create_task_group() as tg:

                async def describe() -> None:
                    outcome.append(await admin.describe_topics(["t"]))

                tg.start_soon(describe)
                await kafka.wait_until(lambda: any(names_t(r) for r in kafka.received(METADATA)))
                assert outcome == []  # held by the script
                release.set()
            assert isinstance(outcome[0]["t"], TopicAuthorizationFailedError)
            again = await admin.describe_topics(["t"])  # the rule is spent: the model answers
        assert len(again.result("t").partitions) == 2


async def test_received_keeps_the_latest_max_received_requests() -> None:
    async with FakeKafka(brokers=1, tcp=False, max_received=3) as kafka:
        kafka.create_topic("t")
        async with AdminClient(**kafka.client_config()) as admin:
            for _ in range(5):
                await admin.describe_topics(["t"])
        kept = kafka.received()
        assert len(kept) == 3
        assert [r.api_key for r in kept] == [3, 3, 3]  # the last three: Metadata
        assert kafka.requests(1)[3] > 3  # counted all the same
    with pytest.raises(ValueError, match="max_received"):
        FakeKafka(max_received=-1)
