"""The share consumer (KIP-932) against Apache Kafka 4.4: distinct records per member,
release / reject / lock expiry, implicit and explicit acknowledgement, admin views.

A share group starts at the latest offset unless its ``share.auto.offset.reset`` group
config says otherwise, so every test sets it to ``earliest`` first (``share_group``). Records
are produced one per batch: the broker acquires whole batches, and one record per batch
lets ``max_poll_records`` split the work between members record by record.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import AsyncExitStack, asynccontextmanager
from typing import Any

import anyio
import pytest

from aiokafka_ng import AcknowledgeType, Producer, ShareConsumer, ShareRecord, TopicPartition
from aiokafka_ng.admin import AlterConfigOp, ConfigResource
from aiokafka_ng.admin.share_groups import ShareGroupState
from aiokafka_ng.consumer.errors import RecordDeserializationError
from aiokafka_ng.errors import IllegalStateError, InvalidRecordStateError, NonEmptyGroupError
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for, eventually, new_topic, unique

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]


async def share_group(cluster: KafkaCluster, **configs: str) -> str:
    """A fresh share group id, reading from the earliest offset; ``configs`` use ``_``."""
    group = unique("share")
    ops = [AlterConfigOp("share.auto.offset.reset", "earliest")] + [
        AlterConfigOp(key.replace("_", "."), value) for key, value in configs.items()
    ]
    async with admin_for(cluster) as admin:
        resource = ConfigResource.group(group)
        (await admin.incremental_alter_configs({resource: ops})).raise_on_error()
    return group


async def produce(cluster: KafkaCluster, topic: str, values: list[bytes]) -> None:
    async with Producer(bootstrap_servers=cluster.bootstrap_servers, linger_ms=0) as producer:
        for value in values:  # one batch each (see the module docstring)
            await producer.send_and_wait(topic, value)


@asynccontextmanager
async def consumers(
    cluster: KafkaCluster, topic: str, group: str, n: int = 1, **config: Any
) -> AsyncIterator[list[ShareConsumer]]:
    """``n`` started share consumers, each assigned the topic's partition."""
    config.setdefault("bootstrap_servers", cluster.bootstrap_servers)
    async with AsyncExitStack() as stack:
        out = [
            await stack.enter_async_context(ShareConsumer(topic, group_id=group, **config))
            for _ in range(n)
        ]
        for c in out:
            await c.wait_for_assignment(30)
        yield out


async def poll_until(
    consumer: ShareConsumer, done: Any, within: float = 30
) -> list[ShareRecord[Any, Any]]:
    """Poll (each batch accepted implicitly or acknowledged by ``done``) until ``done``."""
    got: list[ShareRecord[Any, Any]] = []
    with anyio.fail_after(within):
        while not done(got):
            got += await consumer.poll(timeout_ms=1000)
    return got


async def test_members_get_distinct_records_and_together_all(kafka_cluster: KafkaCluster) -> None:
    values = [b"v%d" % i for i in range(60)]
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        async with consumers(kafka_cluster, topic, group, 3, max_poll_records=4) as members:
            await produce(kafka_cluster, topic, values)
            got: list[list[ShareRecord[Any, Any]]] = [[] for _ in members]
            with anyio.fail_after(60):
                # Members take turns: each poll acquires records the others' locks do not
                # hold, and accepts the member's previous batch (implicit mode).
                while sum(map(len, got)) < len(values):
                    for i, member in enumerate(members):
                        got[i] += await member.poll(timeout_ms=500)
            for member in members:
                assert await member.commit() in ({}, {TopicPartition(topic, 0): None})
    offsets = [[r.offset for r in g] for g in got]
    assert all(offsets), f"a member got nothing: {[len(o) for o in offsets]}"
    flat = sorted(o for os in offsets for o in os)
    assert flat == list(range(len(values)))  # disjoint, and together every record
    assert {r.value for g in got for r in g} == set(values)
    assert {r.delivery_count for g in got for r in g} == {1}


async def test_released_record_comes_back_rejected_does_not(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"a", b"b", b"c", b"d"])
        async with consumers(kafka_cluster, topic, group, acknowledgement_mode="explicit") as [c]:
            first = await poll_until(c, lambda got: got)
            for record in first:
                kind = {0: AcknowledgeType.RELEASE, 1: AcknowledgeType.REJECT}.get(
                    record.offset, AcknowledgeType.ACCEPT
                )
                c.acknowledge(record, kind)
            tp = TopicPartition(topic, 0)
            assert await c.commit() == {tp: None}
            rest: list[ShareRecord[Any, Any]] = []

            def has_sentinel(got: list[ShareRecord[Any, Any]]) -> bool:
                for record in got[len(rest) :]:
                    c.acknowledge(record)  # explicit mode: everything else accepted
                rest[:] = got
                return any(r.value == b"end" for r in got)

            # Offset 0 came back; offset 1 (rejected) never does: the sentinel produced after
            # it arrives without it.
            again = await poll_until(c, lambda got: any(r.offset == 0 for r in got))
            rest.clear()
            for record in again:
                c.acknowledge(record)
            await produce(kafka_cluster, topic, [b"end"])
            tail = await poll_until(c, has_sentinel)
    first_offsets = sorted(r.offset for r in first)
    assert first_offsets[:2] == [0, 1] and all(r.delivery_count == 1 for r in first)
    redelivered = [r for r in again if r.offset == 0]
    assert len(redelivered) == 1 and redelivered[0].value == b"a"
    assert redelivered[0].delivery_count == 2
    assert all(r.offset not in (0, 1) for r in tail)
    assert 1 not in {r.offset for r in again}


async def test_lock_expiry_redelivers_to_another_member(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster, share_record_lock_duration_ms="1000")
        await produce(kafka_cluster, topic, [b"x", b"y"])
        async with consumers(kafka_cluster, topic, group, 2, acknowledgement_mode="explicit") as [
            holder,
            other,
        ]:
            held = await poll_until(holder, lambda got: len(got) == 2)
            # The holder never acknowledges: after 1 s the broker gives them to `other`.
            later = await poll_until(other, lambda got: len(got) == 2)
            # The holder's acknowledgement comes too late: the records are `other`'s now.
            tp = TopicPartition(topic, 0)
            holder.acknowledge(held[0])
            late = await holder.commit()
            for record in later:
                other.acknowledge(record)
            assert await other.commit() == {tp: None}
            # Once they are accepted, the share-partition start offset has moved past them
            # and Kafka 4.4 answers an acknowledgement below it with no error at all.
            holder.acknowledge(held[1])
            below_start = await holder.commit()
    assert sorted(r.offset for r in held) == sorted(r.offset for r in later) == [0, 1]
    assert all(r.delivery_count == 1 for r in held)
    assert all(r.delivery_count == 2 for r in later)
    assert isinstance(late[tp], InvalidRecordStateError), late
    assert below_start == {tp: None}


async def test_implicit_mode_accepts_the_previous_batch(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"p", b"q"])
        async with consumers(kafka_cluster, topic, group) as [c]:
            got = await poll_until(c, lambda got: len(got) == 2)
            with pytest.raises(IllegalStateError, match="explicit"):
                c.acknowledge(got[0])  # implicit mode: no per-record acknowledgement
            # Asking for the next batch accepts this one (piggy-backed on the ShareFetch).
            assert await c.poll(timeout_ms=200) == []
        # A new member of the group finds nothing left: both were accepted.
        await produce(kafka_cluster, topic, [b"end"])
        async with consumers(kafka_cluster, topic, group) as [late]:
            after = await poll_until(late, lambda got: any(r.value == b"end" for r in got))
    assert [r.value for r in got] == [b"p", b"q"]
    assert [r.value for r in after] == [b"end"]


async def test_closing_in_implicit_mode_accepts_the_last_batch(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"one"])
        async with consumers(kafka_cluster, topic, group) as [c]:
            seen = []
            with anyio.fail_after(30):
                async for record in c:
                    seen.append(record)
                    break
        await produce(kafka_cluster, topic, [b"end"])
        async with consumers(kafka_cluster, topic, group) as [late]:
            after = await poll_until(late, lambda got: any(r.value == b"end" for r in got))
    assert [r.value for r in seen] == [b"one"]
    assert [r.value for r in after] == [b"end"]  # "one" was accepted on close


async def test_explicit_mode_wants_every_record_acknowledged(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"e"])
        async with consumers(kafka_cluster, topic, group, acknowledgement_mode="explicit") as [c]:
            got = await poll_until(c, lambda got: got)
            with pytest.raises(IllegalStateError, match="not acknowledged"):
                await c.poll(timeout_ms=0)
            c.acknowledge(got[0], AcknowledgeType.ACCEPT)
            with pytest.raises(IllegalStateError, match="not an unacknowledged"):
                c.acknowledge(got[0])  # twice
            assert await c.poll(timeout_ms=200) == []
            assert await c.commit() == {}  # the acceptance rode on that ShareFetch


async def test_describe_share_groups_shows_the_members(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        async with (
            consumers(kafka_cluster, topic, group, 2) as members,
            admin_for(kafka_cluster) as admin,
        ):
            desc = await eventually(
                lambda: admin.describe_share_groups([group]),
                lambda d: (
                    group in d.succeeded
                    and len(d.result(group).members) == 2
                    and all(m.assignment for m in d.result(group).members)
                ),
            )
            listed = await admin.list_share_groups()
    d = desc.result(group)
    assert d.state is ShareGroupState.STABLE
    assert {m.member_id for m in d.members} == {c.member_id for c in members}
    assert all(m.assignment == [TopicPartition(topic, 0)] for m in d.members)
    assert all(m.subscribed_topics == [topic] for m in d.members)
    assert group in {g.group_id for g in listed}


async def test_share_group_offsets_list_alter_delete(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        tp = TopicPartition(topic, 0)
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"r%d" % i for i in range(6)])
        async with consumers(kafka_cluster, topic, group) as [c]:
            await poll_until(c, lambda got: len(got) == 6)
            assert await c.commit() == {tp: None}  # all six accepted
        async with admin_for(kafka_cluster) as admin:
            listed = await eventually(
                lambda: admin.list_share_group_offsets(group),
                lambda offsets: tp in offsets and offsets[tp].lag == 0,
            )
            # Back to offset 2 (the group is empty now): offsets 2..5 are delivered again.
            (await admin.alter_share_group_offsets(group, {tp: 2})).raise_on_error()
            altered = await admin.list_share_group_offsets(group, [tp])
            async with consumers(kafka_cluster, topic, group) as [again]:
                replay = await poll_until(again, lambda got: len(got) == 4)
                # A live member makes the group non-empty: altering is refused, named.
                busy = await admin.alter_share_group_offsets(group, {tp: 0})
            (await admin.delete_share_group_offsets(group, [topic])).raise_on_error()
            deleted = await admin.list_share_group_offsets(group)
    # Kafka 4.4 reports the lag right away but a start offset that trails the last
    # acknowledgement (it moves when the next one is persisted), so only the lag is exact.
    assert listed[tp].lag == 0 and 0 <= listed[tp].start_offset <= 6
    assert altered[tp].start_offset == 2 and altered[tp].lag == 4
    assert sorted(r.offset for r in replay) == [2, 3, 4, 5]
    assert isinstance(busy[tp], NonEmptyGroupError), busy[tp]
    assert tp not in deleted


async def test_undeserializable_record_is_released_and_reported(
    kafka_cluster: KafkaCluster,
) -> None:
    failing = {b"bad"}  # the deserializer fails on this value the first time only

    def value_de(raw: bytes | None) -> bytes | None:
        if raw in failing:
            failing.discard(raw)
            raise ValueError("cannot read it")
        return raw

    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        await produce(kafka_cluster, topic, [b"good", b"bad"])
        async with consumers(kafka_cluster, topic, group, value_deserializer=value_de) as [c]:
            with anyio.fail_after(30), pytest.raises(RecordDeserializationError) as info:
                while True:
                    await c.poll(timeout_ms=1000)  # "good" may come in an earlier round
            got = await poll_until(c, lambda got: any(r.value == b"bad" for r in got))
    assert (info.value.topic, info.value.offset) == (topic, 1)
    bad = [r for r in got if r.value == b"bad"]
    assert len(bad) == 1 and bad[0].delivery_count == 2  # released, delivered again


async def test_closing_releases_what_was_not_acknowledged(kafka_cluster: KafkaCluster) -> None:
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)  # the default 30 s lock
        await produce(kafka_cluster, topic, [b"u", b"w"])
        async with consumers(kafka_cluster, topic, group, acknowledgement_mode="explicit") as [c]:
            held = await poll_until(c, lambda got: len(got) == 2)
            member_id = c.member_id
        # Left without acknowledging: the share session closed and the member left, so the
        # broker released both at once (well before their 30 s locks would have run out).
        async with consumers(kafka_cluster, topic, group) as [after]:
            again = await poll_until(after, lambda got: len(got) == 2, within=20)
            async with admin_for(kafka_cluster) as admin:
                desc = (await admin.describe_share_groups([group])).result(group)
    assert [r.offset for r in held] == [0, 1]
    assert sorted((r.offset, r.delivery_count) for r in again) == [(0, 2), (1, 2)]
    assert member_id not in {m.member_id for m in desc.members}


async def test_a_traced_poll_is_one_consumer_span_linked_to_each_producer(
    kafka_cluster: KafkaCluster,
) -> None:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
    from opentelemetry.trace import SpanKind

    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    servers = kafka_cluster.bootstrap_servers
    async with new_topic(kafka_cluster, 1, 3) as topic:
        group = await share_group(kafka_cluster)
        async with consumers(kafka_cluster, topic, group, tracer_provider=provider) as (member,):
            async with Producer(bootstrap_servers=servers, tracer_provider=provider) as producer:
                for i in range(3):
                    await producer.send_and_wait(topic, b"v%d" % i)
            got = await poll_until(member, lambda got: len(got) >= 3)
    sent = [s for s in exporter.get_finished_spans() if s.name == f"{topic} send"]
    polls = [s for s in exporter.get_finished_spans() if s.name == f"{topic} receive"]
    assert len(sent) == 3 and len(got) == 3
    assert all(s.kind is SpanKind.CONSUMER for s in polls)
    linked = [link.context.span_id for s in polls for link in s.links]
    assert sorted(linked) == sorted(s.context.span_id for s in sent if s.context)
    counts = [(s.attributes or {})["messaging.batch.message_count"] for s in polls]
    assert sum(counts) == 3
    assert all((s.attributes or {})["messaging.consumer.group.name"] == group for s in polls)
