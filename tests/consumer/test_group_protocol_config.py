"""group_protocol="consumer" (KIP-848): settings the broker owns are refused, by name."""

from __future__ import annotations

import pytest

from aiokafka_ng import Consumer
from aiokafka_ng.compat import AIOKafkaConsumer
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import ConfigError


def test_forbidden_settings_are_each_named_with_the_reason() -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig(
            group_id="g",
            group_protocol="consumer",
            session_timeout_ms=30000,
            heartbeat_interval_ms=1000,
            partition_assignment_strategy=["range"],
        )
    text = str(info.value)
    for key in ("session_timeout_ms", "heartbeat_interval_ms", "partition_assignment_strategy"):
        assert key in text
    assert text.count("not supported with group_protocol='consumer'") == 3
    assert "group.consumer.session.timeout.ms" in text
    assert "group_remote_assignor" in text


def test_consumer_protocol_defaults_and_properties() -> None:
    config = ConsumerConfig.from_properties(
        {"group.id": "g", "group.protocol": "CONSUMER", "group.remote.assignor": "range"}
    )
    assert config.group_protocol == "consumer"
    assert config.group_remote_assignor == "range"
    assert ConsumerConfig(group_id="g").group_protocol == "classic"  # Java's default
    with pytest.raises(ConfigError, match="group_remote_assignor"):
        ConsumerConfig(group_id="g", group_remote_assignor="uniform")  # classic has no use


def test_compat_consumer_passes_the_protocol_through() -> None:
    # aiokafka's session timeout and assignors are our compat defaults only for classic.
    consumer = AIOKafkaConsumer(group_id="g", group_protocol="consumer")
    assert consumer.config.group_protocol == "consumer"
    assert "session_timeout_ms" not in consumer.config.model_fields_set
    assert Consumer(group_id="g", group_protocol="consumer").config.group_remote_assignor is None
