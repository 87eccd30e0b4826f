"""What an operator's script computes by hand: a group's lag, and an offset reset planned and
applied the way ``kafka-consumer-groups --reset-offsets`` does it.

The planning is a pure function (:func:`plan_targets`) of the committed offsets, the log
bounds and, for time-based resets, the offsets the broker found for that time; the admin
coroutines only gather those inputs (committed offsets at the group's coordinator, log start
and end from each partition's leader, batched per leader by ``list_offsets``) and apply the
result with one admin commit. As the Kafka tool does, every target is clamped to
``[log start, log end]``, and applying refuses while the group has members (Kafka's
coordinator would reject a commit from outside the generation anyway, and moving a running
consumer's offsets under it is never what was meant); a dry run returns the same plan and
changes nothing.
"""

from __future__ import annotations

import dataclasses
import enum
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from aiokafka_ng.admin._groups import GroupOps
from aiokafka_ng.admin._partitions import PartitionOps
from aiokafka_ng.admin._topics import TopicOps
from aiokafka_ng.admin.models import (
    ConsumerGroupState,
    ListOffsetsSpec,
    OffsetAndMetadata,
    TopicPartition,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.config import parse_duration
from aiokafka_ng.errors import GroupIdNotFoundError, NonEmptyGroupError

__all__ = [
    "GroupLag",
    "OffsetReset",
    "OffsetResetPlan",
    "OffsetResetRow",
    "PartitionLag",
    "plan_targets",
]

#: States in which a group's offsets may be reset: no member holds partitions.
INACTIVE_STATES = frozenset({ConsumerGroupState.EMPTY, ConsumerGroupState.DEAD})


@dataclass(frozen=True, slots=True)
class PartitionLag:
    """One partition of a group: its committed offset (None: never committed) and log."""

    committed: int | None
    log_start: int
    log_end: int
    metadata: str = ""

    @property
    def lag(self) -> int | None:
        """Records between the committed offset and the log end; None without a commit."""
        return None if self.committed is None else max(0, self.log_end - self.committed)


@dataclass(frozen=True, slots=True)
class GroupLag:
    """``describe_consumer_group_lag`` for one group."""

    group_id: str
    state: ConsumerGroupState
    partitions: dict[TopicPartition, PartitionLag]

    @property
    def total_lag(self) -> int:
        """The sum of the partitions' lags (partitions without a commit count 0)."""
        return sum(p.lag or 0 for p in self.partitions.values())


class _Kind(enum.StrEnum):
    EARLIEST = "to-earliest"
    LATEST = "to-latest"
    DATETIME = "to-datetime"
    SHIFT = "shift-by"
    OFFSET = "to-offset"
    EXPLICIT = "from-offsets"


@dataclass(frozen=True, slots=True)
class OffsetReset:
    """Where to move a group's offsets; build it with the class methods, named like the
    options of ``kafka-consumer-groups --reset-offsets``."""

    kind: _Kind
    value: int = 0  # the timestamp (ms), the shift, or the offset
    offsets: Mapping[TopicPartition, int] = dataclasses.field(default_factory=dict)

    @classmethod
    def parse(cls, spec: OffsetResetSpec) -> OffsetReset:
        """``spec`` itself, the reset one of :data:`RESET_STRINGS` names, or
        ``"by_duration:PT1H"`` (the consumer's ``auto_offset_reset`` spelling, KIP-1106; a bad
        duration is a ValueError). Other resets that take a value have no string form: a
        TypeError (a string naming one says which class method to call)."""
        if isinstance(spec, OffsetReset):
            return spec
        if isinstance(spec, str):
            for prefix in ("by_duration:", "by-duration:"):  # KIP-1106's consumer spelling
                if spec.startswith(prefix):
                    return cls.by_duration(parse_duration(spec[len(prefix) :]))
            if spec in ("earliest", "to-earliest"):
                return cls.to_earliest()
            if spec in ("latest", "to-latest"):
                return cls.to_latest()
            needs = _NEEDS_VALUE.get(spec)
            if needs is not None:
                raise TypeError(
                    f"offset reset {spec!r} needs a value: pass OffsetReset.{needs}(...) "
                    f"(strings accepted: {', '.join(map(repr, RESET_STRINGS))})"
                )
        raise TypeError(
            f"offset reset must be an OffsetReset or one of "
            f"{', '.join(map(repr, RESET_STRINGS))}, got {spec!r}"
        )

    @classmethod
    def to_earliest(cls) -> OffsetReset:
        return cls(_Kind.EARLIEST)

    @classmethod
    def to_latest(cls) -> OffsetReset:
        return cls(_Kind.LATEST)

    @classmethod
    def to_datetime(cls, when: datetime) -> OffsetReset:
        """The first record at or after ``when`` (timezone-aware; naive means local time),
        the log end where there is none."""
        return cls(_Kind.DATETIME, int(when.timestamp() * 1000))

    @classmethod
    def to_timestamp(cls, timestamp_ms: int) -> OffsetReset:
        if timestamp_ms < 0:
            raise ValueError(f"timestamp must be >= 0, got {timestamp_ms}")
        return cls(_Kind.DATETIME, timestamp_ms)

    @classmethod
    def by_duration(cls, ago: timedelta, *, now_ms: int | None = None) -> OffsetReset:
        """The first record written at most ``ago`` before now."""
        now = time.time_ns() // 1_000_000 if now_ms is None else now_ms
        return cls.to_timestamp(max(0, now - int(ago.total_seconds() * 1000)))

    @classmethod
    def shift_by(cls, n: int) -> OffsetReset:
        """The committed offset plus ``n`` (negative goes back); partitions without a
        committed offset cannot be shifted."""
        return cls(_Kind.SHIFT, n)

    @classmethod
    def to_offset(cls, offset: int) -> OffsetReset:
        """The same offset in every partition (clamped to each log)."""
        return cls(_Kind.OFFSET, offset)

    @classmethod
    def to_offsets(cls, offsets: Mapping[TopicPartition, int]) -> OffsetReset:
        """An offset per partition (clamped); the partitions are the mapping's keys."""
        return cls(_Kind.EXPLICIT, offsets={TopicPartition(*tp): o for tp, o in offsets.items()})


#: What ``reset_consumer_group_offsets`` takes: an :class:`OffsetReset`, or the name of one
#: of the two resets that need no value (as ``kafka-consumer-groups`` spells them, or short).
#: A ``"by_duration:<ISO 8601 duration>"`` string (KIP-1106's spelling) is accepted too.
OffsetResetSpec = OffsetReset | Literal["earliest", "latest", "to-earliest", "to-latest"] | str
RESET_STRINGS = ("earliest", "latest", "to-earliest", "to-latest")
# The other kinds, by their string and by the class method that builds them.
_NEEDS_VALUE = {
    str(_Kind.DATETIME): "to_datetime",
    "datetime": "to_datetime",
    "timestamp": "to_timestamp",
    "by-duration": "by_duration",
    str(_Kind.SHIFT): "shift_by",
    str(_Kind.OFFSET): "to_offset",
    str(_Kind.EXPLICIT): "to_offsets",
}


@dataclass(frozen=True, slots=True)
class OffsetResetRow:
    """One partition of a plan: where the group is, where it will be, and the log."""

    current: int | None
    target: int
    log_start: int
    log_end: int

    @property
    def lag_after(self) -> int:
        return self.log_end - self.target


@dataclass(frozen=True, slots=True)
class OffsetResetPlan:
    """What ``reset_consumer_group_offsets`` did (``applied``) or would do (dry run)."""

    group_id: str
    state: ConsumerGroupState
    reset: OffsetReset
    partitions: dict[TopicPartition, OffsetResetRow]
    applied: bool


def plan_targets(
    reset: OffsetReset,
    current: Mapping[TopicPartition, int | None],
    log_start: Mapping[TopicPartition, int],
    log_end: Mapping[TopicPartition, int],
    at_time: Mapping[TopicPartition, int] | None = None,
) -> dict[TopicPartition, int]:
    """The target offset of each partition of ``current``, clamped to its log.

    ``at_time`` holds, for a time-based reset, the offset ``list_offsets`` found for the
    timestamp (-1: no record that late, so the log end). Raises ValueError naming the
    partitions a shift cannot apply to (no committed offset).
    """
    unshiftable = sorted(tp for tp, c in current.items() if c is None)
    if reset.kind is _Kind.SHIFT and unshiftable:
        raise ValueError(f"no committed offset to shift for {unshiftable}")
    out: dict[TopicPartition, int] = {}
    for tp, committed in current.items():
        start, end = log_start[tp], log_end[tp]
        kind = reset.kind
        if kind is _Kind.EARLIEST:
            target = start
        elif kind is _Kind.LATEST:
            target = end
        elif kind is _Kind.DATETIME:
            found = -1 if at_time is None else at_time.get(tp, -1)
            target = end if found < 0 else found
        elif kind is _Kind.SHIFT:
            assert committed is not None
            target = committed + reset.value
        elif kind is _Kind.OFFSET:
            target = reset.value
        else:
            target = reset.offsets[tp]
        out[tp] = min(max(target, start), end)
    return out


def _names(value: Iterable[str], argument: str) -> list[str]:
    """``value`` as a list, repeats dropped. A lone str is a TypeError before any request:
    iterating it would ask about one-character names (``"orders"`` -> ``o``, ``r``, ...)."""
    if isinstance(value, str | bytes):
        raise TypeError(f"{argument} takes a collection of names, got {value!r}: pass [{value!r}]")
    return list(dict.fromkeys(value))


class OffsetToolOps(TopicOps, PartitionOps, GroupOps):
    """Lag and offset resets of :class:`AdminClient`."""

    async def _log_bounds(
        self, tps: Iterable[TopicPartition], timeout_ms: int | None
    ) -> tuple[dict[TopicPartition, int], dict[TopicPartition, int]]:
        """Log start and end of each partition (two ListOffsets rounds, each batched per
        leader); raises the first partition's error."""
        wanted = list(dict.fromkeys(tps))
        earliest = await self.list_offsets(
            {tp: ListOffsetsSpec.earliest() for tp in wanted}, timeout_ms=timeout_ms
        )
        latest = await self.list_offsets(
            {tp: ListOffsetsSpec.latest() for tp in wanted}, timeout_ms=timeout_ms
        )
        starts = {tp: r.offset for tp, r in earliest.raise_on_error().items()}
        ends = {tp: r.offset for tp, r in latest.raise_on_error().items()}
        return starts, ends

    async def describe_consumer_group_lag(
        self, group_ids: Iterable[str], timeout_ms: int | None = None
    ) -> ItemResults[str, GroupLag]:
        """Committed offset, log start/end and lag of every partition each group has
        committed, for several groups in one call (log bounds asked once, per leader).
        ``group_ids`` is a collection (``["g"]`` for one group); a lone str is a TypeError."""
        ids = _names(group_ids, "group_ids")
        described = await self.describe_consumer_groups(ids, timeout_ms=timeout_ms)
        items: dict[str, GroupLag | BaseException] = {}
        committed: dict[str, dict[TopicPartition, OffsetAndMetadata]] = {}
        for group_id in ids:
            desc = described[group_id]
            if isinstance(desc, BaseException):
                items[group_id] = desc
                continue
            try:
                offsets = await self.list_consumer_group_offsets(group_id, timeout_ms=timeout_ms)
            except Exception as exc:  # this group fails, the others go on
                items[group_id] = exc
                continue
            if not offsets and not desc.members and not desc.protocol_type:
                # No member, no protocol and no offset: no group. (Brokers before KIP-1043
                # that do not answer Dead for it -- Tansu -- describe it as an empty
                # simple group; a real one is its committed offsets.)
                items[group_id] = GroupIdNotFoundError(f"group {group_id!r} does not exist")
                continue
            committed[group_id] = offsets
        tps = [tp for offsets in committed.values() for tp in offsets]
        bounds_error: BaseException | None = None
        starts: dict[TopicPartition, int] = {}
        ends: dict[TopicPartition, int] = {}
        if tps:
            try:
                starts, ends = await self._log_bounds(tps, timeout_ms)
            except Exception as exc:
                bounds_error = exc
        for group_id, offsets in committed.items():
            desc = described.result(group_id)
            if bounds_error is not None:
                items[group_id] = bounds_error
                continue
            items[group_id] = GroupLag(
                group_id,
                desc.state,
                {
                    tp: PartitionLag(o.offset, starts[tp], ends[tp], o.metadata)
                    for tp, o in sorted(offsets.items())
                },
            )
        return ItemResults("describe_consumer_group_lag", {g: items[g] for g in ids})

    async def reset_consumer_group_offsets(
        self,
        group_id: str,
        reset: OffsetResetSpec,
        *,
        topics: Iterable[str] | None = None,
        partitions: Iterable[TopicPartition] | None = None,
        dry_run: bool = False,
        timeout_ms: int | None = None,
    ) -> OffsetResetPlan:
        """Plan an offset reset of ``group_id`` and, unless ``dry_run``, apply it.

        Scope: ``partitions``, else every partition of ``topics``, else every partition of
        the topics the group has committed offsets for (``to_offsets`` names its own).
        ``reset`` may be ``"earliest"``/``"latest"`` (or ``"to-earliest"``/``"to-latest"``);
        anything else that is not an :class:`OffsetReset` raises TypeError before any
        request. Applying raises ``NonEmptyGroupError`` while the group has members; a dry
        run returns the plan (with the group's state) and changes nothing.
        """
        reset = OffsetReset.parse(reset)
        wanted_topics = None if topics is None else _names(topics, "topics")
        group = (await self.describe_consumer_groups([group_id], timeout_ms=timeout_ms))[group_id]
        if isinstance(group, GroupIdNotFoundError):
            # Offsets may be set for a group that does not exist yet (Kafka's tool does it
            # too): committing them creates it, for the consumers that start later.
            state, members = ConsumerGroupState.DEAD, 0
        elif isinstance(group, BaseException):
            raise group
        else:
            state, members = group.state, len(group.members)
        committed = await self.list_consumer_group_offsets(group_id, timeout_ms=timeout_ms)
        if reset.kind is _Kind.EXPLICIT:
            scope = list(reset.offsets)
        elif partitions is not None:
            scope = [TopicPartition(*tp) for tp in partitions]
        else:
            names = sorted(
                wanted_topics if wanted_topics is not None else {tp.topic for tp in committed}
            )
            described = (await self.describe_topics(names, timeout_ms=timeout_ms)).raise_on_error()
            scope = [
                TopicPartition(name, p.partition)
                for name in names
                for p in described[name].partitions
            ]
        scope = sorted(dict.fromkeys(scope))
        current = {tp: (committed[tp].offset if tp in committed else None) for tp in scope}
        starts, ends = await self._log_bounds(scope, timeout_ms) if scope else ({}, {})
        at_time = None
        if reset.kind is _Kind.DATETIME and scope:
            spec = ListOffsetsSpec.for_timestamp(reset.value)
            found = await self.list_offsets({tp: spec for tp in scope}, timeout_ms=timeout_ms)
            at_time = {tp: r.offset for tp, r in found.raise_on_error().items()}
        targets = plan_targets(reset, current, starts, ends, at_time)
        plan = OffsetResetPlan(
            group_id,
            state,
            reset,
            {tp: OffsetResetRow(current[tp], targets[tp], starts[tp], ends[tp]) for tp in scope},
            applied=False,
        )
        if dry_run:
            return plan
        if state not in INACTIVE_STATES or members:
            raise NonEmptyGroupError(
                f"group {group_id!r} is {state} with {members} member(s): "
                "offsets can only be reset while it has none (stop its consumers first)"
            )
        if targets:
            keep = {
                tp: OffsetAndMetadata(t, committed[tp].metadata if tp in committed else "")
                for tp, t in targets.items()
            }
            (
                await self.alter_consumer_group_offsets(group_id, keep, timeout_ms=timeout_ms)
            ).raise_on_error()
        return dataclasses.replace(plan, applied=True)
