"""ConsumerConfig: Java/aiokafka names and defaults, every bad key named, dotted properties."""

from __future__ import annotations

import pytest

from aiokafka_ng.consumer import Consumer, ConsumerStoppedError
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import ConfigError


def test_defaults_match_the_java_client() -> None:
    c = ConsumerConfig(group_id="g")
    assert (c.auto_offset_reset, c.enable_auto_commit, c.auto_commit_interval_ms) == (
        "latest",
        True,
        5000,
    )
    assert (c.session_timeout_ms, c.heartbeat_interval_ms, c.max_poll_interval_ms) == (
        45000,
        3000,
        300000,
    )
    assert (c.max_poll_records, c.fetch_min_bytes, c.fetch_max_bytes) == (500, 1, 52428800)
    assert (c.fetch_max_wait_ms, c.max_partition_fetch_bytes) == (500, 1048576)
    assert (c.isolation_level, c.check_crcs) == ("read_uncommitted", True)
    assert c.fetch_buffer_bytes == 64 * 1024 * 1024
    assert c.partition_assignment_strategy == ("range", "cooperative-sticky", "roundrobin")
    assert c.effective_rebalance_timeout_ms == 300000


def test_every_bad_key_is_named() -> None:
    with pytest.raises(ConfigError) as info:
        ConsumerConfig(auto_offset_reset="sometimes", fetch_max_bytes=0, isolation_level="x")
    assert set(info.value.errors) == {"auto_offset_reset", "fetch_max_bytes", "isolation_level"}
    with pytest.raises(ConfigError) as info:
        ConsumerConfig(heartbeat_interval_ms=5000, session_timeout_ms=4000, enable_auto_commit=True)
    assert set(info.value.errors) == {"heartbeat_interval_ms", "enable_auto_commit"}
    with pytest.raises(ConfigError) as info:
        ConsumerConfig(partition_assignment_strategy=["sticky-ish"])
    assert "partition_assignment_strategy" in info.value.errors


def test_without_group_auto_commit_is_off_silently() -> None:
    assert ConsumerConfig().enable_auto_commit is False
    with pytest.raises(ConfigError) as info:
        ConsumerConfig(group_instance_id="x")
    assert "group_instance_id" in info.value.errors


def test_dotted_properties_and_assignor_aliases() -> None:
    c = ConsumerConfig.from_properties({
        "group.id": "g",
        "auto.offset.reset": "EARLIEST",
        "max.poll.records": "10",
        "partition.assignment.strategy": (
            "org.apache.kafka.clients.consumer.RoundRobinAssignor,cooperative-sticky"
        ),
    })  # fmt: skip
    assert (c.group_id, c.auto_offset_reset, c.max_poll_records) == ("g", "earliest", 10)
    assert c.partition_assignment_strategy == ("roundrobin", "cooperative-sticky")
    consumer = Consumer.from_properties({"group.id": "g", "max.poll.records": "7"})
    assert consumer.config.max_poll_records == 7
    with pytest.raises(ConfigError) as info:
        ConsumerConfig.from_properties({"no.such.key": 1})
    assert "no.such.key" in info.value.errors


@pytest.mark.anyio
async def test_calls_before_start_raise() -> None:
    consumer = Consumer(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ConsumerStoppedError):
        await consumer.getmany()
    with pytest.raises(ConsumerStoppedError):
        consumer.assign([])
