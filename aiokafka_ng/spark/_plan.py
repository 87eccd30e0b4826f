"""Read planning on the driver: options into a :class:`ReadPlan`, positions into ranges.

Follows Spark's Kafka source: exactly one of assign/subscribe/subscribePattern; where to
start and end by timestamp (global, then per partition) before offsets; a batch read may not
start at latest nor end at earliest; explicit JSON positions must name every partition read;
``failOnDataLoss`` (default true) fails when records the query should read are gone, false
logs and skips them. A range is split by ``maxRecordsPerPartition``, then, while there are
fewer than ``minPartitions`` ranges, in proportion to its size.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Literal

import anyio
from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from aiokafka_ng.consumer import TopicPartition
from aiokafka_ng.spark._offsets import Bounds, offsets_for_times, subscribed_bounds
from aiokafka_ng.spark._options import (
    EARLIEST,
    LATEST,
    READ_OPTIONS,
    OffsetSpec,
    SparkOptionError,
    Subscription,
    TimestampSpec,
    bool_option,
    consumer_properties,
    log,
    option_value,
    parse_limit,
    positive_int,
    subscription_option,
    warn_unknown,
)
from aiokafka_ng.spark._registry import REGISTRY_OPTIONS, ValueFormat, plan_formats

__all__ = [
    "DATA_LOSS_HINT",
    "ReadPlan",
    "plan_read",
    "read_schema",
    "resolve_positions",
    "split_ranges",
]

_BASE_FIELDS = [
    StructField("key", BinaryType()),
    StructField("value", BinaryType()),
    StructField("topic", StringType()),
    StructField("partition", IntegerType()),
    StructField("offset", LongType()),
    StructField("timestamp", TimestampType()),
    StructField("timestampType", IntegerType()),
]
_HEADERS = StructField(
    "headers",
    ArrayType(StructType([StructField("key", StringType()), StructField("value", BinaryType())])),
)

_DEFAULT_POLL_TIMEOUT_MS = 120_000  # Spark's kafkaConsumer.pollTimeoutMs default
_DEFAULT_MAX_TRIGGER_DELAY_S = 15 * 60.0  # Spark's maxTriggerDelay default, "15m"

DATA_LOSS_HINT = (
    "some records are no longer in Kafka (aged out, or the topic was deleted) before the query "
    "read them; set the source option failOnDataLoss=false to log this and read on"
)


def read_schema(include_headers: bool, formats: tuple[ValueFormat, ...] = ()) -> StructType:
    """The columns of Spark's Kafka source: ``headers`` only with ``includeHeaders=true``;
    ``key``/``value`` typed by their registry schema with ``keyFormat``/``valueFormat``.
    Built from types, not DDL: parsing DDL needs a SparkContext, which the planner's Python
    worker does not have."""
    typed = {f.column: f.spark_type for f in formats}
    fields = [StructField(f.name, typed[f.name]) if f.name in typed else f for f in _BASE_FIELDS]
    return StructType(fields + ([_HEADERS] if include_headers else []))


@dataclass(frozen=True)
class ReadPlan:
    """Validated read options (pickled to the executors inside each partition)."""

    properties: dict[str, str]
    subscription: Subscription
    starting: OffsetSpec | TimestampSpec
    ending: OffsetSpec | TimestampSpec | None  # None: streaming
    max_records_per_partition: int | None = None
    min_partitions: int | None = None
    max_offsets_per_trigger: int | None = None
    min_offsets_per_trigger: int | None = None
    max_trigger_delay_s: float = _DEFAULT_MAX_TRIGGER_DELAY_S
    poll_timeout_ms: int = _DEFAULT_POLL_TIMEOUT_MS
    fail_on_data_loss: bool = True
    include_headers: bool = False
    fetch_offset_retries: int = 3
    fetch_offset_retry_interval_ms: int = 10
    formats: tuple[ValueFormat, ...] = ()  # registry-framed key/value (._registry)


_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0, "d": 86400.0}


def _duration_s(options: Mapping[str, str], name: str, default: float) -> float:
    """A Spark time string ("15m", "30s", "500ms"; a bare number is milliseconds)."""
    raw = option_value(options, name)
    if raw is None:
        return default
    m = re.fullmatch(r"\s*(\d+)\s*([a-z]*)\s*", raw.lower())
    if m is None or (m.group(2) or "ms") not in _UNITS:
        raise SparkOptionError(
            f"option '{name}' must be a duration like '15m', '30s' or '500ms' (got {raw!r})"
        )
    return int(m.group(1)) * _UNITS[m.group(2) or "ms"]


def plan_read(options: Mapping[str, str], *, streaming: bool | None) -> ReadPlan:
    """The read's plan; ``streaming=None`` checks what both kinds of query share (all but
    the rules of one kind: a batch cannot start at latest, a stream has no end)."""
    warn_unknown(options, READ_OPTIONS | REGISTRY_OPTIONS, "source")
    properties = consumer_properties(options)
    subscription = subscription_option(options)
    starting = parse_limit(options, "starting", "earliest" if streaming is False else "latest")
    ending: OffsetSpec | TimestampSpec | None = None
    if streaming:
        for name, what in (
            ("endingOffsets", "ending offset"),
            ("endingOffsetsByTimestamp", "ending timestamp"),
            ("endingTimestamp", "ending timestamp"),
        ):
            if option_value(options, name) is not None:
                raise SparkOptionError(f"option '{name}': {what} not valid in streaming queries")
    else:
        ending = parse_limit(options, "ending", "latest")
    if streaming is False:
        assert ending is not None
        _check_batch_limits(starting, ending)
        for name in ("maxOffsetsPerTrigger", "minOffsetsPerTrigger", "maxTriggerDelay"):
            if option_value(options, name) is not None:
                log.warning("option %s is ignored in batch queries", name)
    max_per_trigger = positive_int(options, "maxOffsetsPerTrigger", None)
    min_per_trigger = positive_int(options, "minOffsetsPerTrigger", None)
    if max_per_trigger and min_per_trigger and min_per_trigger > max_per_trigger:
        raise SparkOptionError(
            f"minOffsetsPerTrigger ({min_per_trigger}) is higher than maxOffsetsPerTrigger "
            f"({max_per_trigger})"
        )
    poll = positive_int(options, "kafkaConsumer.pollTimeoutMs", _DEFAULT_POLL_TIMEOUT_MS)
    assert poll is not None
    return ReadPlan(
        properties,
        subscription,
        starting,
        ending,
        max_records_per_partition=positive_int(options, "maxRecordsPerPartition", None),
        min_partitions=positive_int(options, "minPartitions", None),
        max_offsets_per_trigger=max_per_trigger,
        min_offsets_per_trigger=min_per_trigger,
        max_trigger_delay_s=_duration_s(options, "maxTriggerDelay", _DEFAULT_MAX_TRIGGER_DELAY_S),
        poll_timeout_ms=poll,
        fail_on_data_loss=bool_option(options, "failOnDataLoss", True),
        include_headers=bool_option(options, "includeHeaders", False),
        fetch_offset_retries=_int(options, "fetchOffset.numRetries", 3, minimum=0),
        fetch_offset_retry_interval_ms=_int(options, "fetchOffset.retryIntervalMs", 10, minimum=0),
        # Last: the only check that asks a server (the registry), after every local one.
        formats=plan_formats(options, _named_topics(subscription), writing=False),
    )


def _named_topics(subscription: Subscription) -> list[str]:
    """The topics a subscription names (none for a pattern): the default subjects'."""
    return list(subscription.topics or dict.fromkeys(t for t, _ in subscription.assigned))


def _int(options: Mapping[str, str], name: str, default: int, *, minimum: int) -> int:
    value = positive_int(options, name, default, minimum=minimum)
    assert value is not None
    return value


def _check_batch_limits(
    starting: OffsetSpec | TimestampSpec, ending: OffsetSpec | TimestampSpec
) -> None:
    if isinstance(starting, OffsetSpec):
        if not starting.explicit and starting.default == LATEST:
            raise SparkOptionError("starting offset can't be latest for batch queries on Kafka")
        for t, ps in starting.per_partition.items():
            for p, o in ps.items():
                if o == LATEST:
                    raise SparkOptionError(
                        f"startingOffsets for {t}-{p} can't be latest for batch queries on Kafka"
                    )
    if isinstance(ending, OffsetSpec):
        if not ending.explicit and ending.default == EARLIEST:
            raise SparkOptionError("ending offset can't be earliest for batch queries on Kafka")
        for t, ps in ending.per_partition.items():
            for p, o in ps.items():
                if o == EARLIEST:
                    raise SparkOptionError(
                        f"ending offset for {t}-{p} can't be earliest for batch queries on Kafka"
                    )
    same_kind = type(starting) is type(ending)
    if same_kind and starting.explicit and ending.explicit:
        if _keys(starting.per_partition) != _keys(ending.per_partition):
            raise SparkOptionError(
                "the starting and ending positions name different partitions: "
                f"{sorted(_keys(starting.per_partition))} vs {sorted(_keys(ending.per_partition))}"
            )
        for t, ps in starting.per_partition.items():
            for p, a in ps.items():
                b = ending.per_partition[t][p]
                if a >= 0 and b >= 0 and a > b:
                    raise SparkOptionError(f"{t}-{p}: the start ({a}) is after the end ({b})")


def _keys(per_partition: Mapping[str, Mapping[int, int]]) -> set[tuple[str, int]]:
    return {(t, p) for t, ps in per_partition.items() for p in ps}


def plan_bounds(plan: ReadPlan) -> Bounds:
    return anyio.run(
        subscribed_bounds,
        plan.properties,
        plan.subscription,
        plan.fetch_offset_retries,
        plan.fetch_offset_retry_interval_ms,
    )


def resolve_positions(
    plan: ReadPlan,
    spec: OffsetSpec | TimestampSpec,
    bounds: Bounds,
    which: Literal["starting", "ending"],
) -> dict[TopicPartition, int]:
    """Each partition's offset for ``spec`` (earliest/latest resolved against ``bounds``)."""
    if spec.explicit:
        named = _keys(spec.per_partition)
        read = {(tp.topic, tp.partition) for tp in bounds}
        if named != read:
            name = (
                f"{which}Offsets" if isinstance(spec, OffsetSpec) else f"{which}OffsetsByTimestamp"
            )
            raise SparkOptionError(
                f"option '{name}' must name every partition read (-2 earliest, -1 latest): "
                f"missing {sorted(read - named)}, not read {sorted(named - read)}"
            )
    if isinstance(spec, OffsetSpec):
        out = {}
        for tp, (low, high) in bounds.items():
            offset = spec.offset_for(tp.topic, tp.partition)
            out[tp] = low if offset == EARLIEST else high if offset == LATEST else offset
        return out
    times: dict[TopicPartition, int] = {}
    for tp in bounds:
        ts = spec.timestamp_for(tp.topic, tp.partition)
        assert ts is not None  # every partition is named, or there is a global timestamp
        times[tp] = ts
    found = (
        anyio.run(
            offsets_for_times,
            plan.properties,
            times,
            plan.fetch_offset_retries,
            plan.fetch_offset_retry_interval_ms,
        )
        if times
        else {}
    )
    resolved: dict[TopicPartition, int] = {}
    for tp, (_, high) in bounds.items():
        match = found.get(tp)
        if match is None:
            if which == "starting" and spec.on_no_match == "error":
                raise SparkOptionError(
                    f"{tp.topic}-{tp.partition}: no record at or after timestamp {times[tp]} "
                    "(set startingOffsetsByTimestampStrategy=latest to start at the end instead)"
                )
            match = high
        resolved[tp] = match
    return resolved


def split_ranges(
    plan: ReadPlan, spans: Mapping[TopicPartition, tuple[int, int]]
) -> list[tuple[TopicPartition, int, int]]:
    """``(tp, start, end)`` pieces of the non-empty spans, split as Spark's Kafka source does:
    first into pieces of at most ``maxRecordsPerPartition`` records, then, while there are
    fewer pieces than ``minPartitions``, each into ``round(size / total * minPartitions)``
    (at least 1) equal parts."""
    pieces: list[tuple[TopicPartition, int, int]] = []
    step = plan.max_records_per_partition
    for tp in sorted(spans):
        start, end = spans[tp]
        if start >= end:
            continue
        parts = 1 if step is None else -(-(end - start) // step)
        pieces.extend(_even(tp, start, end, parts))
    wanted = plan.min_partitions
    if wanted is None or len(pieces) >= wanted:
        return pieces
    total = sum(end - start for _, start, end in pieces)
    out: list[tuple[TopicPartition, int, int]] = []
    for tp, start, end in pieces:
        parts = max(round((end - start) / total * wanted), 1)
        out.extend(_even(tp, start, end, parts))
    return out


def _even(
    tp: TopicPartition, start: int, end: int, parts: int
) -> list[tuple[TopicPartition, int, int]]:
    size = end - start
    parts = min(parts, size)
    cuts = [start + size * i // parts for i in range(parts + 1)]
    return [(tp, a, b) for a, b in itertools.pairwise(cuts) if a < b]
