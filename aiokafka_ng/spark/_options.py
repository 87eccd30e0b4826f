"""Option parsing shared by the reader and the writer.

Spark hands a data source its options as a case-insensitive mapping of strings. Everything
here runs on the driver while Spark plans the query, so a bad option fails the query before
any task starts, with a message naming the option. Options under ``kafka.`` are passed to our
clients as Kafka properties (``kafka.linger.ms`` -> ``linger.ms``) and validated by the
client's own config model, which names every unknown or bad key.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import ConfigError

__all__ = [
    "EARLIEST",
    "LATEST",
    "OffsetSpec",
    "SparkOptionError",
    "consumer_properties",
    "kafka_properties",
    "parse_offsets",
    "positive_int",
    "producer_properties",
    "topics_option",
]

EARLIEST = -2  # Spark's Kafka source uses the same sentinels in JSON offsets
LATEST = -1

#: Consumer settings the reader controls itself: it reads exact ranges without a group.
_READER_OWNED = {"group.id", "enable.auto.commit", "auto.offset.reset"}


class SparkOptionError(ValueError):
    """A data source option is missing or invalid (raised while Spark plans the query)."""


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


def producer_properties(options: Mapping[str, str]) -> dict[str, str]:
    """Producer properties from ``kafka.*`` options, validated now (at planning time)."""
    return _checked(ProducerConfig, kafka_properties(options), "producer")


def consumer_properties(options: Mapping[str, str]) -> dict[str, str]:
    """Consumer properties from ``kafka.*`` options, validated now (at planning time)."""
    props = kafka_properties(options)
    owned = sorted(k for k in props if k in _READER_OWNED)
    if owned:
        raise SparkOptionError(
            "options "
            + ", ".join(f"'kafka.{k}'" for k in owned)
            + " are not supported: the source reads exact offset ranges without a group"
        )
    props.update({"enable.auto.commit": "false", "auto.offset.reset": "earliest"})
    return _checked(ConsumerConfig, props, "consumer")


def topics_option(options: Mapping[str, str]) -> list[str]:
    """The topics of the ``subscribe`` option ("t1,t2")."""
    raw = options.get("subscribe")
    topics = [t.strip() for t in (raw or "").split(",") if t.strip()]
    if not topics:
        raise SparkOptionError("option 'subscribe' is required: a comma-separated topic list")
    return list(dict.fromkeys(topics))


def positive_int(options: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = options.get(name)
    if raw is None:
        return default
    try:
        value = int(raw)
    except ValueError:
        value = 0
    if value <= 0:
        raise SparkOptionError(f"option '{name}' must be a positive integer (got {raw!r})")
    return value


@dataclass(frozen=True, slots=True)
class OffsetSpec:
    """``earliest``/``latest`` for every partition, or per-partition offsets from JSON.

    ``per_partition`` maps topic -> partition -> offset (>= 0, or EARLIEST/LATEST); partitions
    it does not name get ``default``.
    """

    default: int
    per_partition: dict[str, dict[int, int]]

    def offset_for(self, topic: str, partition: int) -> int:
        return self.per_partition.get(topic, {}).get(partition, self.default)


def parse_offsets(options: Mapping[str, str], name: str, default: str) -> OffsetSpec:
    """Parse ``startingOffsets``/``endingOffsets``: earliest, latest or JSON like
    ``{"t1": {"0": 23, "1": -2}}`` (-2 earliest, -1 latest), as Spark's Kafka source."""
    raw = (options.get(name) or default).strip()
    if raw.lower() == "earliest":
        return OffsetSpec(EARLIEST, {})
    if raw.lower() == "latest":
        return OffsetSpec(LATEST, {})
    bad = SparkOptionError(
        f"option '{name}' must be 'earliest', 'latest' or JSON like "
        f'{{"topic": {{"0": 23, "1": -2}}}} (-2 earliest, -1 latest); got {raw!r}'
    )
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
        if any(o < EARLIEST for o in out[topic].values()):
            raise bad
    default_offset = EARLIEST if default == "earliest" else LATEST
    return OffsetSpec(default_offset, out)
