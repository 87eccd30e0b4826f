"""Option parsing shared by the reader and the writer, with the meanings, defaults and
validation of Spark's own Kafka connector (``format("kafka")``).

Spark hands a data source its options as a case-insensitive mapping of strings. Everything
here runs on the driver while Spark plans the query, so a bad option fails the query before
any task starts, with a message naming the option. Options under ``kafka.`` are passed to our
clients as Kafka properties (``kafka.linger.ms`` -> ``linger.ms``) and validated by the
client's own config model, which names every unknown or bad key; the few Kafka settings
Spark's connector forbids fail with the reason Spark gives.
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import ConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "READ_OPTIONS",
    "WRITE_OPTIONS",
    "OffsetSpec",
    "SparkOptionError",
    "Subscription",
    "TimestampSpec",
    "bool_option",
    "consumer_properties",
    "kafka_properties",
    "option_value",
    "parse_limit",
    "parse_offsets",
    "positive_int",
    "producer_properties",
    "subscription_option",
    "warn_unknown",
]

log = logging.getLogger("aiokafka_ng.spark")

EARLIEST = -2  # Spark's Kafka source uses the same sentinels in JSON offsets
LATEST = -1

#: Consumer settings Spark's source refuses, and why (the reader owns them).
_FORBIDDEN_CONSUMER = {
    "auto.offset.reset": (
        "set the source option 'startingOffsets' to 'earliest' or 'latest' instead: the source "
        "decides which offsets it reads, and a restarted query resumes from its checkpoint"
    ),
    "key.deserializer": ("keys are read as bytes; deserialize them with DataFrame operations"),
    "value.deserializer": ("values are read as bytes; deserialize them with DataFrame operations"),
    "enable.auto.commit": "the source commits nothing: progress lives in Spark's checkpoint",
    "interceptor.classes": "interceptors could change the records the source reads",
}
#: Producer settings Spark's sink refuses.
_FORBIDDEN_PRODUCER = {
    "key.serializer": "keys are written as the bytes of the 'key' column",
    "value.serializer": "values are written as the bytes of the 'value' column",
}
_STRATEGIES = ("assign", "subscribe", "subscribePattern")

#: The options of Spark's Kafka connector this source reads (besides ``kafka.*``); the
#: table in docs/spark.md is checked against these by a test.
READ_OPTIONS = frozenset(
    {
        *_STRATEGIES,
        "startingTimestamp",
        "startingOffsetsByTimestamp",
        "startingOffsets",
        "startingOffsetsByTimestampStrategy",
        "endingTimestamp",
        "endingOffsetsByTimestamp",
        "endingOffsets",
        "failOnDataLoss",
        "kafkaConsumer.pollTimeoutMs",
        "fetchOffset.numRetries",
        "fetchOffset.retryIntervalMs",
        "maxOffsetsPerTrigger",
        "minOffsetsPerTrigger",
        "maxTriggerDelay",
        "minPartitions",
        "maxRecordsPerPartition",
        "groupIdPrefix",
        "includeHeaders",
    }
)
WRITE_OPTIONS = frozenset({"topic", "includeHeaders"})
#: Set by Spark itself (``load(path)``/``save(path)``; a streaming write's
#: ``checkpointLocation`` reaches the sink's options too), not options of this source.
_SPARK_OWNED = frozenset({"path", "paths", "checkpointLocation"})


class SparkOptionError(ValueError):
    """A data source option is missing or invalid (raised while Spark plans the query)."""


def option_value(options: Mapping[str, str], name: str) -> str | None:
    """Option ``name`` whatever its case (Spark's maps are case-insensitive; a plain dict
    handed in by a test or by our own planner may not be)."""
    if name in options:
        return options[name]
    low = name.lower()
    for k, v in options.items():
        if k.lower() == low:
            return v
    return None


def warn_unknown(options: Mapping[str, str], known: frozenset[str], role: str) -> None:
    """Log options this source does not know (Spark ignores them too; a typo such as
    ``startingOffset`` would otherwise go unnoticed)."""
    lower = {k.lower() for k in known | _SPARK_OWNED}
    unknown = sorted(
        k for k in options if not k.lower().startswith("kafka.") and k.lower() not in lower
    )
    if unknown:
        log.warning("the aiokafka_ng %s ignores unknown options: %s", role, ", ".join(unknown))


def kafka_properties(options: Mapping[str, str]) -> dict[str, str]:
    """The ``kafka.*`` options without their prefix; ``kafka.bootstrap.servers`` required."""
    props = {
        k[len("kafka.") :]: str(v) for k, v in options.items() if k.lower().startswith("kafka.")
    }
    if not props.get("bootstrap.servers", "").strip():
        raise SparkOptionError(
            "option 'kafka.bootstrap.servers' is required, e.g. "
            ".option('kafka.bootstrap.servers', 'host1:9092,host2:9092')"
        )
    return props


def _checked(cls: Any, props: Mapping[str, str], role: str) -> dict[str, str]:
    try:
        cls.from_properties(props)
    except ConfigError as exc:
        raise SparkOptionError(f"bad kafka.* option for the {role}: {exc}") from exc
    return dict(props)


def _refuse(props: Mapping[str, str], forbidden: Mapping[str, str]) -> None:
    bad = [k for k in forbidden if k in props]
    if bad:
        raise SparkOptionError(
            "; ".join(f"Kafka option '{k}' is not supported: {forbidden[k]}" for k in bad)
        )


def producer_properties(options: Mapping[str, str]) -> dict[str, str]:
    """Producer properties from ``kafka.*`` options, validated now (at planning time)."""
    props = kafka_properties(options)
    _refuse(props, _FORBIDDEN_PRODUCER)
    return _checked(ProducerConfig, props, "producer")


def consumer_properties(options: Mapping[str, str]) -> dict[str, str]:
    """Consumer properties from ``kafka.*`` options, validated now (at planning time).

    ``kafka.group.id`` is accepted with Spark's warning; like ``groupIdPrefix`` it never
    reaches a broker, because the reader assigns partitions and commits nothing (Spark's
    executors do the same), so the id is dropped here.
    """
    props = kafka_properties(options)
    _refuse(props, _FORBIDDEN_CONSUMER)
    if props.pop("group.id", None) is not None:
        log.warning(
            "option 'kafka.group.id' is set: sharing a group id between queries is unsafe "
            "with Spark's Kafka source; this source joins no group and commits nothing, so "
            "the id has no effect here%s",
            " (groupIdPrefix is ignored too)" if option_value(options, "groupIdPrefix") else "",
        )
    props.update({"enable.auto.commit": "false", "auto.offset.reset": "earliest"})
    return _checked(ConsumerConfig, props, "consumer")


@dataclass(frozen=True, slots=True)
class Subscription:
    """Which partitions the source reads: one of Spark's three strategies."""

    kind: Literal["assign", "subscribe", "subscribePattern"]
    topics: tuple[str, ...] = ()  # subscribe
    pattern: str = ""  # subscribePattern: a regular expression matched against whole names
    assigned: tuple[tuple[str, int], ...] = ()  # assign

    def matches(self, topic: str) -> bool:
        return re.fullmatch(self.pattern, topic) is not None


def subscription_option(options: Mapping[str, str]) -> Subscription:
    """Exactly one of ``assign`` (JSON ``{"t": [0, 1]}``), ``subscribe`` ("t1,t2") or
    ``subscribePattern`` (a regex), as Spark requires."""
    given = {name: v for name in _STRATEGIES if (v := option_value(options, name)) is not None}
    names = ", ".join(_STRATEGIES)
    if not given:
        raise SparkOptionError(f"one of the options {names} is required (see docs/spark.md)")
    if len(given) > 1:
        raise SparkOptionError(
            f"only one of the options {names} can be given; got {', '.join(sorted(given))}"
        )
    ((kind, raw),) = given.items()
    if kind == "subscribe":
        topics = [t.strip() for t in raw.split(",") if t.strip()]
        if not topics:
            raise SparkOptionError(f"option 'subscribe' names no topic: {raw!r}")
        return Subscription("subscribe", topics=tuple(dict.fromkeys(topics)))
    if kind == "subscribePattern":
        pattern = raw.strip()
        if not pattern:
            raise SparkOptionError(f"option 'subscribePattern' is empty: {raw!r}")
        try:
            re.compile(pattern)
        except re.error as exc:
            raise SparkOptionError(f"option 'subscribePattern' is not a regex: {exc}") from None
        return Subscription("subscribePattern", pattern=pattern)
    bad = SparkOptionError(
        f'option \'assign\' must be JSON like {{"topicA": [0, 1], "topicB": [2]}}; got {raw!r}'
    )
    try:
        data = json.loads(raw)
    except ValueError:
        raise bad from None
    if not isinstance(data, dict) or not data:
        raise bad
    pairs: list[tuple[str, int]] = []
    for topic, parts in data.items():
        if not isinstance(parts, list) or not all(
            isinstance(p, int) and not isinstance(p, bool) and p >= 0 for p in parts
        ):
            raise bad
        pairs.extend((topic, p) for p in parts)
    return Subscription("assign", assigned=tuple(sorted(set(pairs))))


def bool_option(options: Mapping[str, str], name: str, default: bool) -> bool:
    raw = option_value(options, name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value not in ("true", "false"):
        raise SparkOptionError(f"option '{name}' must be 'true' or 'false' (got {raw!r})")
    return value == "true"


def positive_int(
    options: Mapping[str, str], name: str, default: int | None, *, minimum: int = 1
) -> int | None:
    raw = option_value(options, name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = minimum - 1
    if value < minimum:
        kind = "a positive" if minimum == 1 else f"an integer >= {minimum}, not"
        raise SparkOptionError(f"option '{name}' must be {kind} integer (got {raw!r})")
    return value


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``/``latest`` for every partition, or per-partition offsets from JSON.

    ``per_partition`` maps topic -> partition -> offset (>= 0, or EARLIEST/LATEST); when it is
    given (``explicit``), it must name every partition read, as in Spark.
    """

    default: int
    per_partition: dict[str, dict[int, int]]

    @property
    def explicit(self) -> bool:
        return bool(self.per_partition)

    def offset_for(self, topic: str, partition: int) -> int:
        return self.per_partition.get(topic, {}).get(partition, self.default)


@dataclass(frozen=True, slots=True)
class TimestampSpec:
    """Offsets by record timestamp: one timestamp (ms) for every partition, or one per
    partition from JSON. A partition resolves to the first offset whose timestamp is at or
    after it; when there is none, ``on_no_match`` says what a *starting* position does
    ("error" fails the query, "latest" starts at the end); an ending position uses the end.
    """

    default: int | None
    per_partition: dict[str, dict[int, int]]
    on_no_match: Literal["error", "latest"] = "error"

    @property
    def explicit(self) -> bool:
        return self.default is None

    def timestamp_for(self, topic: str, partition: int) -> int | None:
        return self.per_partition.get(topic, {}).get(partition, self.default)


def _per_partition_json(
    raw: str, name: str, example: str, minimum: int
) -> dict[str, dict[int, int]]:
    bad = SparkOptionError(f"option '{name}' must be JSON like {example}; got {raw!r}")
    try:
        data = json.loads(raw)
    except ValueError:
        raise bad from None
    if not isinstance(data, dict):
        raise bad
    out: dict[str, dict[int, int]] = {}
    for topic, parts in data.items():
        if not isinstance(parts, dict):
            raise bad
        try:
            out[topic] = {int(p): int(o) for p, o in parts.items()}
        except (TypeError, ValueError):
            raise bad from None
        if any(o < minimum for o in out[topic].values()) or any(p < 0 for p in out[topic]):
            raise bad
    return out


def parse_offsets(options: Mapping[str, str], name: str, default: str) -> OffsetSpec:
    """Parse ``startingOffsets``/``endingOffsets``: earliest, latest or JSON like
    ``{"t1": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest), as Spark's Kafka source."""
    raw = (option_value(options, name) or default).strip()
    if raw.lower() == "earliest":
        return OffsetSpec(EARLIEST, {})
    if raw.lower() == "latest":
        return OffsetSpec(LATEST, {})
    example = '{"topic": {"0": 23, "1": -2}} (-2 earliest, -1 latest) or earliest/latest'
    out = _per_partition_json(raw, name, example, EARLIEST)
    default_offset = EARLIEST if default == "earliest" else LATEST
    return OffsetSpec(default_offset, out)


def parse_limit(
    options: Mapping[str, str], which: Literal["starting", "ending"], default: str
) -> OffsetSpec | TimestampSpec:
    """Where reading starts or ends, in Spark's order of preference: ``<which>Timestamp``
    (one timestamp for all partitions), then ``<which>OffsetsByTimestamp`` (JSON per
    partition), then ``<which>Offsets`` (earliest, latest or JSON), else ``default``."""
    strategy_raw = (option_value(options, "startingOffsetsByTimestampStrategy") or "error").strip()
    strategy = strategy_raw.lower()
    if strategy not in ("error", "latest"):
        raise SparkOptionError(
            "option 'startingOffsetsByTimestampStrategy' must be 'error' or 'latest' "
            f"(got {strategy_raw!r})"
        )
    on_no_match: Literal["error", "latest"] = "error" if strategy == "error" else "latest"
    global_name = f"{which}Timestamp"
    raw = option_value(options, global_name)
    if raw is not None:
        try:
            ts = int(raw.strip())
        except ValueError:
            raise SparkOptionError(
                f"option '{global_name}' must be one timestamp in milliseconds (got {raw!r})"
            ) from None
        if ts < 0:
            raise SparkOptionError(f"option '{global_name}' must not be negative (got {raw!r})")
        return TimestampSpec(ts, {}, on_no_match)
    by_name = f"{which}OffsetsByTimestamp"
    raw = option_value(options, by_name)
    if raw is not None:
        example = '{"topic": {"0": 1700000000000}} (milliseconds per partition)'
        return TimestampSpec(None, _per_partition_json(raw, by_name, example, 0), on_no_match)
    return parse_offsets(options, f"{which}Offsets", default)
