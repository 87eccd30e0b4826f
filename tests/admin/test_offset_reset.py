"""Lag view and offset resets: the pure planner by property tests, the admin coroutines
against the real broker (Tansu).

What Tansu cannot show (TANSU.md): ListOffsets LATEST answers "first offset of the last
batch + 1", so the records here are written one per batch (``send_and_wait`` each), which
makes that answer the true log end; ListOffsets by timestamp always answers 0, so
time-based resets are shown on the planner (which takes the broker's per-partition answer
as input) and, against Tansu, only to run end to end without asserting Tansu's offset.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from typing import Any

import anyio
import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka_ng import Producer
from aiokafka_ng.admin import (
    AdminClient,
    ConsumerGroupState,
    NewTopic,
    OffsetReset,
    OffsetResetSpec,
    TopicPartition,
    plan_targets,
)
from aiokafka_ng.admin.offset_reset import _Kind
from aiokafka_ng.errors import NonEmptyGroupError
from aiokafka_ng.testing import LocalBroker
from tests.admin.test_admin_broker import _consume, admin_for
from tests.helpers import topic_name

# --------------------------------------------------------------------------- the planner

_TPS = [TopicPartition("a", 0), TopicPartition("a", 1), TopicPartition("b", 0)]


Logs = tuple[
    dict[TopicPartition, int | None],
    dict[TopicPartition, int],
    dict[TopicPartition, int],
    dict[TopicPartition, int],
]


@st.composite
def _logs(draw: st.DrawFn) -> Logs:
    current: dict[TopicPartition, int | None] = {}
    starts: dict[TopicPartition, int] = {}
    ends: dict[TopicPartition, int] = {}
    at_time: dict[TopicPartition, int] = {}
    for tp in draw(st.lists(st.sampled_from(_TPS), min_size=1, unique=True)):
        start = draw(st.integers(0, 1000))
        end = start + draw(st.integers(0, 1000))
        starts[tp], ends[tp] = start, end
        # A committed offset may lie anywhere, even outside the log (retention moved on).
        current[tp] = draw(st.one_of(st.none(), st.integers(0, 3000)))
        at_time[tp] = draw(st.one_of(st.just(-1), st.integers(start, end)))
    return current, starts, ends, at_time


_RESETS = st.one_of(
    st.just(OffsetReset.to_earliest()),
    st.just(OffsetReset.to_latest()),
    st.integers(0, 2**41).map(OffsetReset.to_timestamp),
    st.integers(-5000, 5000).map(OffsetReset.shift_by),
    st.integers(-10, 5000).map(OffsetReset.to_offset),
)


@given(_logs(), _RESETS)
def test_plan_never_leaves_the_log(logs: Logs, reset: OffsetReset) -> None:
    current, starts, ends, at_time = logs
    if reset.kind == "shift-by" and any(c is None for c in current.values()):
        with pytest.raises(ValueError, match="no committed offset to shift"):
            plan_targets(reset, current, starts, ends, at_time)
        return
    targets = plan_targets(reset, current, starts, ends, at_time)
    assert set(targets) == set(current)
    for tp, target in targets.items():
        assert starts[tp] <= target <= ends[tp]
        if reset.kind == "to-earliest":
            assert target == starts[tp]
        elif reset.kind == "to-latest":
            assert target == ends[tp]
        elif reset.kind == "to-datetime":
            assert target == (ends[tp] if at_time[tp] < 0 else at_time[tp])
        elif reset.kind == "shift-by":
            committed = current[tp]
            assert committed is not None
            assert target == min(max(committed + reset.value, starts[tp]), ends[tp])
        else:
            assert target == min(max(reset.value, starts[tp]), ends[tp])


@given(_logs(), st.data())
def test_explicit_offsets_are_clamped_per_partition(logs: Logs, data: st.DataObject) -> None:
    current, starts, ends, _ = logs
    wanted = {tp: data.draw(st.integers(-100, 3000)) for tp in current}
    targets = plan_targets(OffsetReset.to_offsets(wanted), current, starts, ends)
    assert targets == {tp: min(max(o, starts[tp]), ends[tp]) for tp, o in wanted.items()}


def test_time_based_resets_compute_their_timestamp() -> None:
    when = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
    assert OffsetReset.to_datetime(when).value == int(when.timestamp() * 1000)
    reset = OffsetReset.by_duration(timedelta(minutes=5), now_ms=1_000_000)
    assert (reset.kind, reset.value) == ("to-datetime", 700_000)
    with pytest.raises(ValueError):
        OffsetReset.to_timestamp(-1)


@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("earliest", "to-earliest"),
        ("to-earliest", "to-earliest"),
        ("latest", "to-latest"),
        ("to-latest", "to-latest"),
    ],
)
def test_string_specs_name_the_valueless_resets(spec: OffsetResetSpec, kind: str) -> None:
    assert OffsetReset.parse(spec) == OffsetReset(_Kind(kind))
    reset = OffsetReset.shift_by(-2)
    assert OffsetReset.parse(reset) is reset


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("Earliest", "must be an OffsetReset or one of 'earliest', 'latest'"),
        ("bogus", "got 'bogus'"),
        (None, "got None"),
        (5, "got 5"),
        (b"earliest", "got b'earliest'"),
        ("to-datetime", r"needs a value: pass OffsetReset\.to_datetime"),
        ("shift-by", r"needs a value: pass OffsetReset\.shift_by"),
        ("to-offset", r"needs a value: pass OffsetReset\.to_offset"),
    ],
)
@pytest.mark.anyio
async def test_anything_else_is_a_type_error_before_any_request(spec: object, match: str) -> None:
    # No broker: the spec is checked before the first request (this client never starts,
    # so a request would fail differently).
    with pytest.raises(TypeError, match=match) as info:
        OffsetReset.parse(spec)  # type: ignore[arg-type]
    assert "OffsetReset" in str(info.value) and "'latest'" in str(info.value)
    admin = AdminClient(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(TypeError, match=match):
        await admin.reset_consumer_group_offsets("g", spec)  # type: ignore[arg-type]


@pytest.mark.parametrize("name", ["orders", b"orders"])
@pytest.mark.anyio
async def test_a_lone_name_is_a_type_error_not_one_letter_names(name: Any) -> None:
    # Iterating "orders" used to ask for the lag of groups 'o', 'r', 'd', 'e', 's'. Refused
    # before any request (this client never starts, so a request would fail differently).
    admin = AdminClient(bootstrap_servers="127.0.0.1:1")
    pass_as_list = re.escape(f"got {name!r}: pass [{name!r}]")
    with pytest.raises(TypeError, match=f"group_ids takes a collection of names, {pass_as_list}"):
        await admin.describe_consumer_group_lag(name)
    with pytest.raises(TypeError, match=f"topics takes a collection of names, {pass_as_list}"):
        await admin.reset_consumer_group_offsets("g", "earliest", topics=name, dry_run=True)


# --------------------------------------------------------------------------- the broker

PER_PARTITION = 6


async def _topic_with_records(admin: AdminClient, broker: LocalBroker) -> str:
    topic = topic_name("reset")
    (await admin.create_topics([NewTopic(topic, 2, 1)])).raise_on_error()
    async with Producer(bootstrap_servers=broker.bootstrap_servers) as producer:
        for i in range(PER_PARTITION * 2):
            # One record per batch: Tansu's LATEST is then the true log end (see above).
            await producer.send_and_wait(topic, b"v%d" % i, partition=i % 2)
    return topic


@pytest.mark.anyio
async def test_lag_and_resets_against_the_broker(kafka_broker: LocalBroker) -> None:
    group, other = topic_name("lag"), topic_name("lag-other")
    async with admin_for(kafka_broker) as admin:
        topic = await _topic_with_records(admin, kafka_broker)
        p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        (await admin.alter_consumer_group_offsets(group, {p0: 2, p1: 5})).raise_on_error()
        (await admin.alter_consumer_group_offsets(other, {p1: 6})).raise_on_error()

        lags = await admin.describe_consumer_group_lag([group, other])
        lag = lags.result(group)
        seen = {
            tp: (p.committed, p.log_start, p.log_end, p.lag) for tp, p in lag.partitions.items()
        }
        assert seen == {
            p0: (2, 0, PER_PARTITION, PER_PARTITION - 2),
            p1: (5, 0, PER_PARTITION, PER_PARTITION - 5),
        }
        assert lag.total_lag == PER_PARTITION - 2 + PER_PARTITION - 5
        assert lag.state in (ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD)
        assert lags.result(other).total_lag == 0

        # Dry run: the plan, nothing committed.
        plan = await admin.reset_consumer_group_offsets(
            group, OffsetReset.to_earliest(), dry_run=True
        )
        assert not plan.applied
        assert {tp: (r.current, r.target, r.lag_after) for tp, r in plan.partitions.items()} == {
            p0: (2, 0, PER_PARTITION),
            p1: (5, 0, PER_PARTITION),
        }
        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: o.offset for tp, o in committed.items()} == {p0: 2, p1: 5}

        # Shift, then past the end (clamped), then explicit, each applied.
        plan = await admin.reset_consumer_group_offsets(group, OffsetReset.shift_by(-3))
        assert plan.applied and {tp: r.target for tp, r in plan.partitions.items()} == {
            p0: 0,
            p1: 2,
        }
        await admin.reset_consumer_group_offsets(
            group, OffsetReset.to_offset(1000), partitions=[p1]
        )
        await admin.reset_consumer_group_offsets(group, OffsetReset.to_offsets({p0: 4}))
        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: o.offset for tp, o in committed.items()} == {p0: 4, p1: PER_PARTITION}

        # By topic: every partition of it, including one the group never committed.
        fresh = topic_name("fresh")
        plan = await admin.reset_consumer_group_offsets(
            fresh, OffsetReset.to_latest(), topics=[topic]
        )
        assert {tp: (r.current, r.target) for tp, r in plan.partitions.items()} == {
            p0: (None, PER_PARTITION),
            p1: (None, PER_PARTITION),
        }
        # Time-based: runs end to end (Tansu's by-timestamp answer is not asserted).
        plan = await admin.reset_consumer_group_offsets(
            group, OffsetReset.by_duration(timedelta(hours=1)), dry_run=True
        )
        assert set(plan.partitions) == {p0, p1}
        assert all(0 <= r.target <= PER_PARTITION for r in plan.partitions.values())


@pytest.mark.anyio
async def test_reset_refuses_while_the_group_has_members(kafka_broker: LocalBroker) -> None:
    group = topic_name("busy")
    async with admin_for(kafka_broker) as admin:
        topic = await _topic_with_records(admin, kafka_broker)
        member = await anyio.to_thread.run_sync(
            _consume, kafka_broker.bootstrap_servers, topic, group, PER_PARTITION * 2
        )
        try:
            with pytest.raises(NonEmptyGroupError, match="member"):
                await admin.reset_consumer_group_offsets(group, OffsetReset.to_earliest())
            # The dry run still shows the plan, and nothing moved.
            plan = await admin.reset_consumer_group_offsets(
                group, OffsetReset.to_earliest(), dry_run=True
            )
            assert plan.state is ConsumerGroupState.STABLE and not plan.applied
            assert {r.target for r in plan.partitions.values()} == {0}
            committed = await admin.list_consumer_group_offsets(group)
            assert {o.offset for o in committed.values()} == {PER_PARTITION}
        finally:
            await anyio.to_thread.run_sync(member.close)
        # Once the member left, the same reset goes through.
        with anyio.fail_after(30):
            while True:
                desc = (await admin.describe_consumer_groups([group])).result(group)
                if not desc.members:
                    break
                await anyio.sleep(0.2)  # polling the broker's view; no event to await
        plan = await admin.reset_consumer_group_offsets(group, OffsetReset.to_earliest())
        assert plan.applied
        committed = await admin.list_consumer_group_offsets(group)
        assert {o.offset for o in committed.values()} == {0}


@pytest.mark.anyio
async def test_reset_by_string_spec_against_the_broker(kafka_broker: LocalBroker) -> None:
    group = topic_name("by-name")
    async with admin_for(kafka_broker) as admin:
        topic = await _topic_with_records(admin, kafka_broker)
        p0, p1 = TopicPartition(topic, 0), TopicPartition(topic, 1)
        (await admin.alter_consumer_group_offsets(group, {p0: 2, p1: 5})).raise_on_error()

        plan = await admin.reset_consumer_group_offsets(group, "earliest")
        assert plan.applied and plan.reset == OffsetReset.to_earliest()
        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: o.offset for tp, o in committed.items()} == {p0: 0, p1: 0}

        plan = await admin.reset_consumer_group_offsets(group, "latest", partitions=[p1])
        assert plan.applied and plan.reset == OffsetReset.to_latest()
        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: o.offset for tp, o in committed.items()} == {p0: 0, p1: PER_PARTITION}

        plan = await admin.reset_consumer_group_offsets(group, "to-latest", dry_run=True)
        assert not plan.applied
        assert {tp: r.target for tp, r in plan.partitions.items()} == {
            p0: PER_PARTITION,
            p1: PER_PARTITION,
        }
        plan = await admin.reset_consumer_group_offsets(group, "to-earliest")
        committed = await admin.list_consumer_group_offsets(group)
        assert {tp: o.offset for tp, o in committed.items()} == {p0: 0, p1: 0}
