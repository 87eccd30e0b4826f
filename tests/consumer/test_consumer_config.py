"""ConsumerConfig: Java/aiokafka names and defaults, every bad key named, dotted properties."""

from __future__ import annotations

import pytest

from aiokafka_ng.consumer import Consumer, ConsumerStoppedError
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.consumer.membership import GroupSettings
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


def test_group_settings_defaults_are_the_configs() -> None:
    # GroupSettings repeats ConsumerConfig's defaults (tests build it directly): a default
    # changed on one side only fails here.
    assert ConsumerConfig(group_id="g").group_settings() == GroupSettings(group_id="g")
    assert GroupSettings(group_id="g").client_rack is None  # "" means no rack on the wire


def test_group_settings_carry_each_value_in_its_unit() -> None:
    # Every value differs from its default, so a field left unmapped or mis-mapped (a ms
    # value where seconds are read, the raw rebalance_timeout_ms) fails.
    c = ConsumerConfig(
        group_id="orders",
        group_instance_id="host-7",
        partition_assignment_strategy="roundrobin",
        client_rack="rack-b",
        session_timeout_ms=12000,
        heartbeat_interval_ms=1500,
        max_poll_interval_ms=90000,
        rebalance_timeout_ms=70000,
        request_timeout_ms=25000,
        metadata_max_age_ms=60000,
        retry_backoff_ms=150,
        retry_backoff_max_ms=4000,
        enable_auto_commit=False,
        auto_commit_interval_ms=2500,
        exclude_internal_topics=False,
    )
    assert c.group_settings() == GroupSettings(
        group_id="orders",
        group_instance_id="host-7",
        assignors=("roundrobin",),
        remote_assignor=None,
        client_rack="rack-b",
        session_timeout_ms=12000,
        rebalance_timeout_ms=70000,
        max_poll_interval_ms=90000,
        heartbeat_interval_s=1.5,
        request_timeout_s=25.0,
        metadata_max_age_s=60.0,
        retry_backoff_ms=150,
        retry_backoff_max_ms=4000,
        enable_auto_commit=False,
        auto_commit_interval_s=2.5,
        exclude_internal_topics=False,
    )
    # Without rebalance_timeout_ms the rebalance timeout is max_poll_interval_ms (Java's).
    unset = ConsumerConfig(group_id="g", max_poll_interval_ms=90000).group_settings()
    assert unset.rebalance_timeout_ms == 90000
    kip848 = ConsumerConfig(group_id="g", group_protocol="consumer", group_remote_assignor="range")
    assert kip848.group_settings().remote_assignor == "range"
    with pytest.raises(ConfigError) as info:
        ConsumerConfig().group_settings()
    assert set(info.value.errors) == {"group_id"}


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


@pytest.mark.parametrize("cls_name", ["Consumer", "AIOKafkaConsumer", "ShareConsumer"])
def test_a_list_of_topics_is_refused_at_construction_naming_the_fix(cls_name: str) -> None:
    # Issue 49 item 6: the list was kept and start() failed with "unhashable type: 'list'".
    from aiokafka_ng.compat import AIOKafkaConsumer
    from aiokafka_ng.consumer.share import ShareConsumer

    cls = {
        "Consumer": Consumer,
        "AIOKafkaConsumer": AIOKafkaConsumer,
        "ShareConsumer": ShareConsumer,
    }
    topics: object = ["t1", "t2"]
    with pytest.raises(TypeError, match="separate str arguments") as e:
        cls[cls_name](topics, group_id="g")
    assert f"{cls_name}('t1', 't2', ...)" in str(e.value)
    assert f"{cls_name}(*topics, ...)" in str(e.value)
    with pytest.raises(TypeError, match=r"Consumer\('t1', 't2', \.\.\.\)"):
        Consumer("t1", 5, group_id="g")  # type: ignore[arg-type]
    # Names as separate arguments are still taken.
    assert Consumer("t1", "t2", group_id="g")._initial_topics == ("t1", "t2")
