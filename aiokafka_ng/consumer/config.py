"""ConsumerConfig: the consumer's settings, with the Java client's names and defaults.

Built on :class:`aiokafka_ng.config.ClientConfig` (bootstrap servers, timeouts, backoff,
security), so a bad configuration raises :class:`~aiokafka_ng.errors.ConfigError` naming every
bad key, and ``ConsumerConfig.from_properties({"group.id": "g"})`` takes Kafka's dotted names.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal, cast

from pydantic import Field, field_validator

from aiokafka_ng.config import ClientConfig, parse_duration
from aiokafka_ng.errors import ConfigError

if TYPE_CHECKING:
    from aiokafka_ng.consumer.membership import GroupSettings

__all__ = ["ASSIGNOR_NAMES", "BY_DURATION", "ConsumerConfig", "by_duration_ago"]

#: The prefix of KIP-1106's reset strategy: ``auto_offset_reset="by_duration:PT1H"``.
BY_DURATION = "by_duration:"


def by_duration_ago(strategy: str) -> timedelta:
    """How far back a ``"by_duration:<duration>"`` reset goes (the one duration parser,
    :func:`aiokafka_ng.config.parse_duration`, which the admin's offset reset uses too)."""
    if not strategy.startswith(BY_DURATION):
        raise ValueError(f"not a by_duration strategy: {strategy!r}")
    return parse_duration(strategy[len(BY_DURATION) :])


#: Assignors known by name (see :mod:`aiokafka_ng.consumer.assignors`).
ASSIGNOR_NAMES = ("range", "roundrobin", "cooperative-sticky")
_ASSIGNOR_ALIASES = {
    "round-robin": "roundrobin",
    "org.apache.kafka.clients.consumer.rangeassignor": "range",
    "org.apache.kafka.clients.consumer.roundrobinassignor": "roundrobin",
    "org.apache.kafka.clients.consumer.cooperativestickyassignor": "cooperative-sticky",
}


_BROKER_OWNED = {
    "session_timeout_ms": "the broker sets it (group.consumer.session.timeout.ms)",
    "heartbeat_interval_ms": "the broker sets it (group.consumer.heartbeat.interval.ms) "
    "and tells the member in each heartbeat answer",
    "partition_assignment_strategy": "the broker assigns partitions; "
    "choose its assignor with group_remote_assignor",
}


class ConsumerConfig(ClientConfig):
    """Consumer settings. Defaults are the Java client's (Kafka 4.0) unless noted."""

    PROPERTY_ALIASES: ClassVar[dict[str, str]] = {
        **ClientConfig.PROPERTY_ALIASES,
        "key.deserializer": "key_deserializer",
        "value.deserializer": "value_deserializer",
        "partition.assignment.strategy": "partition_assignment_strategy",
        "allow.auto.create.topics": "allow_auto_create_topics",
        "group.protocol": "group_protocol",
        "group.remote.assignor": "group_remote_assignor",
    }

    group_id: str | None = None
    group_instance_id: str | None = None
    #: Java's ``group.protocol``: ``"classic"`` (JoinGroup/SyncGroup) or ``"consumer"``
    #: (KIP-848: ConsumerGroupHeartbeat, assignment computed by the broker).
    group_protocol: Literal["classic", "consumer"] = "classic"
    #: With ``group_protocol="consumer"``: the broker-side assignor (``"uniform"``,
    #: ``"range"``); None lets the broker use its default.
    group_remote_assignor: str | None = None
    client_rack: str = ""
    #: KIP-714: push the consumer's metrics to the brokers when they subscribe to them;
    #: Java's ``enable.metrics.push``, on by default.
    enable_metrics_push: bool = True
    # "earliest", "latest", "none" or "by_duration:PnDTnHnMn.nS" (KIP-1106; its docs text is
    # tools/gen_config_docs.py's).
    auto_offset_reset: str = "latest"
    enable_auto_commit: bool = True
    auto_commit_interval_ms: int = Field(default=5000, gt=0)
    #: How long ``stop()`` (and leaving ``async with``) may spend on the final commit and
    #: LeaveGroup before giving up on them. Not a Java setting; 10 s fits a web app's
    #: shutdown inside Kubernetes' 30 s grace period (see docs/fastapi.md).
    close_timeout_ms: int = Field(default=10000, ge=0)
    session_timeout_ms: int = Field(default=45000, gt=0)
    #: Java's ``default.api.timeout.ms``: how long ``commit()``, ``committed()``,
    #: ``offsets_for_times()``, ``beginning_offsets()`` and ``end_offsets()`` retry retriable
    #: errors (a coordinator or leader away, a request timed out) before raising
    #: ``KafkaTimeoutError``; each request is still bounded by ``request_timeout_ms``. Not
    #: lower than ``request_timeout_ms`` (left unset, it follows it).
    default_api_timeout_ms: int = Field(default=60000, gt=0)
    heartbeat_interval_ms: int = Field(default=3000, gt=0)
    max_poll_interval_ms: int = Field(default=300000, gt=0)
    #: JoinGroup's rebalance timeout; None means max_poll_interval_ms (as Java does).
    rebalance_timeout_ms: int | None = Field(default=None, gt=0)
    max_poll_records: int = Field(default=500, gt=0)
    fetch_min_bytes: int = Field(default=1, ge=1)
    fetch_max_bytes: int = Field(default=52428800, gt=0)
    fetch_max_wait_ms: int = Field(default=500, ge=0)
    max_partition_fetch_bytes: int = Field(default=1048576, gt=0)
    #: Hard cap on fetched-but-unconsumed record bytes (KIP-72's idea on the client side).
    fetch_buffer_bytes: int = Field(default=64 * 1024 * 1024, gt=0)
    isolation_level: Literal["read_uncommitted", "read_committed"] = "read_uncommitted"
    check_crcs: bool = True
    #: Assignor names (or objects with ``name``/``assign``) in order of preference. The
    #: default joins a group with any other client's default: Java's (range,
    #: cooperative-sticky), librdkafka's (range, roundrobin) and aiokafka's (roundrobin), so
    #: a rolling migration runs old and new members side by side (the coordinator picks the
    #: assignor every member offers, by the members' preference).
    partition_assignment_strategy: tuple[Any, ...] = ("range", "cooperative-sticky", "roundrobin")
    exclude_internal_topics: bool = True
    allow_auto_create_topics: bool = True
    key_deserializer: Callable[[bytes | None], Any] | None = None
    value_deserializer: Callable[[bytes | None], Any] | None = None
    #: OpenTelemetry tracing (``pip install aiokafka-ng[tracing]``): a ``TracerProvider``
    #: (``opentelemetry.trace.get_tracer_provider()`` for the global one). A CONSUMER span
    #: per record (``getmany``: per call) linked to its producer's context. None: off.
    tracer_provider: Any = None

    @field_validator("auto_offset_reset", "isolation_level", "group_protocol", mode="before")
    @classmethod
    def _lower(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else v

    @field_validator("auto_offset_reset")
    @classmethod
    def _reset_strategy(cls, v: str) -> str:
        if v in ("earliest", "latest", "none"):
            return v
        if v.startswith(BY_DURATION):
            by_duration_ago(v)  # ValueError saying what is wrong with the duration
            return v
        raise ValueError(
            "must be 'earliest', 'latest', 'none' or 'by_duration:<ISO 8601 duration>' "
            f"(e.g. 'by_duration:PT1H'), not {v!r}"
        )

    @field_validator("partition_assignment_strategy", mode="before")
    @classmethod
    def _assignors(cls, v: Any) -> tuple[Any, ...]:
        items = [s.strip() for s in v.split(",")] if isinstance(v, str) else list(v)
        out: list[Any] = []
        for item in items:
            if isinstance(item, str):
                name = _ASSIGNOR_ALIASES.get(item.lower(), item.lower())
                if name not in ASSIGNOR_NAMES:
                    raise ValueError(f"unknown assignor {item!r}; known: {ASSIGNOR_NAMES}")
                out.append(name)
            elif hasattr(item, "name") and hasattr(item, "assign"):
                out.append(item)
            else:
                raise ValueError(f"not an assignor: {item!r}")
        if not out:
            raise ValueError("at least one assignor is required")
        return tuple(out)

    def _cross_check(self) -> dict[str, str]:
        errors = super()._cross_check()
        user = self.model_fields_set
        if self.group_protocol == "consumer":
            # As Java's ConsumerConfig: with KIP-848 the broker owns these (the group's
            # group.consumer.* configs), so a value here would silently do nothing.
            for key, why in _BROKER_OWNED.items():
                if key in user:
                    errors[key] = f"not supported with group_protocol='consumer': {why}"
        elif "group_remote_assignor" in user and self.group_remote_assignor is not None:
            errors["group_remote_assignor"] = "requires group_protocol='consumer'"
        # The admin client's rule (Java's for its admin): a call is allowed at least one
        # whole request.
        if self.default_api_timeout_ms < self.request_timeout_ms:
            if "default_api_timeout_ms" in user:
                errors["default_api_timeout_ms"] = "must be >= request_timeout_ms"
            else:
                self._force(default_api_timeout_ms=self.request_timeout_ms)
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            key = (
                "heartbeat_interval_ms" if "heartbeat_interval_ms" in user else "session_timeout_ms"
            )
            errors[key] = "heartbeat_interval_ms must be lower than session_timeout_ms"
        if self.group_id is None:
            if self.enable_auto_commit:
                if "enable_auto_commit" in user:
                    errors["enable_auto_commit"] = "requires a group_id"
                else:  # Java: silently off without a group
                    self._force(enable_auto_commit=False)
            if self.group_instance_id is not None:
                errors["group_instance_id"] = "requires a group_id"
        elif not self.group_id:
            errors["group_id"] = "must not be empty"
        return errors

    @property
    def max_response_bytes(self) -> int:
        """A Fetch answer holds up to ``fetch_max_bytes`` of records (or one partition's
        ``max_partition_fetch_bytes``), but both are soft: the broker still returns a first
        batch larger than them so the consumer progresses. 32 MiB of headroom covers such a
        batch (topics' ``max.message.bytes`` is 1 MiB by default), the per-partition
        overhead, and the all-topics Metadata of a pattern subscription."""
        return max(self.fetch_max_bytes, self.max_partition_fetch_bytes) + 32 * 1024 * 1024

    @property
    def effective_rebalance_timeout_ms(self) -> int:
        return self.rebalance_timeout_ms or self.max_poll_interval_ms

    def group_settings(self) -> GroupSettings:
        """What group membership needs (requires ``group_id``): the consumer builds it once
        and hands it to the group member (:mod:`aiokafka_ng.consumer.membership`)."""
        from aiokafka_ng.consumer.membership import GroupSettings

        if self.group_id is None:
            raise ConfigError({"group_id": "group membership requires a group_id"})
        return GroupSettings(
            group_id=self.group_id,
            group_instance_id=self.group_instance_id,
            assignors=self.partition_assignment_strategy,
            remote_assignor=self.group_remote_assignor,
            client_rack=self.client_rack or None,
            session_timeout_ms=self.session_timeout_ms,
            rebalance_timeout_ms=self.effective_rebalance_timeout_ms,
            max_poll_interval_ms=self.max_poll_interval_ms,
            heartbeat_interval_s=self.heartbeat_interval_ms / 1000,
            request_timeout_s=self.request_timeout_ms / 1000,
            metadata_max_age_s=self.metadata_max_age_ms / 1000,
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            enable_auto_commit=self.enable_auto_commit,
            auto_commit_interval_s=self.auto_commit_interval_ms / 1000,
            exclude_internal_topics=self.exclude_internal_topics,
        )


def check_topic_args(cls_name: str, topics: tuple[object, ...]) -> tuple[str, ...]:
    """Refuse anything but topic names among a consumer's positional arguments.

    ``Consumer(["t1", "t2"])`` would otherwise be kept and fail only in ``start()`` with
    "unhashable type: 'list'". A list is refused rather than unpacked: the signature is
    ``*topics: str`` (as aiokafka's ``AIOKafkaConsumer(*topics)``), so type checkers already
    flag it, and one spelling keeps ``Consumer(["a"], "b")`` from having to mean something.
    """
    for topic in topics:
        if isinstance(topic, str):
            continue
        if isinstance(topic, (list, tuple, set, frozenset)):
            names = ", ".join(repr(t) for t in topic) or "'t1', 't2'"
            hint = f"{cls_name}({names}, ...)"
        else:
            hint = f"{cls_name}('t1', 't2', ...)"
        raise TypeError(
            f"{cls_name} takes topic names as separate str arguments, got "
            f"{type(topic).__name__} {topic!r}: write {hint}, or {cls_name}(*topics, ...)"
        )
    return cast("tuple[str, ...]", topics)  # each checked to be a str above
