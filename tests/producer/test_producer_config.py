"""ProducerConfig: Java defaults, cross-field rules, dotted properties, ConfigError only."""

from __future__ import annotations

import pytest

from aiokafka_ng.config import ProducerConfig, parse_bootstrap_servers
from aiokafka_ng.errors import ConfigError


def test_java_defaults() -> None:
    c = ProducerConfig()
    assert c.acks == -1
    assert c.enable_idempotence is True
    assert c.linger_ms == 5
    assert c.batch_size == 16384
    assert c.buffer_memory == 32 * 1024 * 1024
    assert c.max_block_ms == 60000
    assert c.delivery_timeout_ms == 120000
    assert c.request_timeout_ms == 30000
    assert c.max_in_flight_requests_per_connection == 5
    assert c.retry_backoff_ms == 100
    assert c.retry_backoff_max_ms == 1000
    assert c.max_request_size == 1024 * 1024
    assert c.compression_type == "none"
    assert c.reconnect_backoff_ms == 50 and c.reconnect_backoff_max_ms == 1000
    assert c.metadata_max_age_ms == 300000


def test_acks_forms() -> None:
    assert ProducerConfig(acks="all").acks == -1
    assert ProducerConfig(acks=-1).acks == -1
    assert ProducerConfig(acks="1", enable_idempotence=False).acks == 1
    assert ProducerConfig(acks=0, enable_idempotence=False).acks == 0
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(acks=2)
    assert set(ei.value.errors) == {"acks"}


def test_idempotence_conflicts_name_every_key_when_set() -> None:
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(enable_idempotence=True, acks=1, max_in_flight_requests_per_connection=6)
    assert {"enable_idempotence", "acks", "max_in_flight_requests_per_connection"} <= set(
        ei.value.errors
    )


def test_idempotence_silently_off_when_not_set() -> None:
    c = ProducerConfig(acks=1)
    assert c.enable_idempotence is False
    c = ProducerConfig(max_in_flight_requests_per_connection=10)
    assert c.enable_idempotence is False


def test_delivery_timeout_rule() -> None:
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(delivery_timeout_ms=1000, linger_ms=10, request_timeout_ms=5000)
    assert {"delivery_timeout_ms", "linger_ms", "request_timeout_ms"} == set(ei.value.errors)
    # not set by the user: raised silently
    c = ProducerConfig(request_timeout_ms=200000)
    assert c.delivery_timeout_ms >= 200005


def test_every_bad_key_named_and_no_pydantic_error() -> None:
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(linger_ms=-1, batch_size="x", compression_type="brotli", nope=1)
    assert {"linger_ms", "batch_size", "compression_type", "nope"} == set(ei.value.errors)
    for key in ("linger_ms", "batch_size", "compression_type", "nope"):
        assert key in str(ei.value)
    assert ei.value.__cause__ is None  # the pydantic error is not even chained


def test_from_properties_dotted_names_and_strings() -> None:
    c = ProducerConfig.from_properties(
        {
            "bootstrap.servers": "127.0.0.1:9092,127.0.0.1:9093",
            "linger.ms": "7",
            "acks": "all",
            "enable.idempotence": "false",
            "max.in.flight.requests.per.connection": "1",
            "compression.type": "LZ4",
            "batch.size": "32768",
        }
    )
    assert isinstance(c, ProducerConfig)
    assert c.linger_ms == 7 and c.acks == -1 and c.enable_idempotence is False
    assert c.max_in_flight_requests_per_connection == 1
    assert c.compression_type == "lz4" and c.batch_size == 32768
    assert c.bootstrap_addresses == [("127.0.0.1", 9092), ("127.0.0.1", 9093)]


def test_from_properties_unknown_keys_named() -> None:
    with pytest.raises(ConfigError) as ei:
        ProducerConfig.from_properties({"linger.ms": "5", "no.such": "1", "other.bad": "2"})
    assert set(ei.value.errors) == {"no.such", "other.bad"}


def test_sasl_requires_credentials() -> None:
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(security_protocol="SASL_PLAINTEXT")
    assert {"sasl_mechanism", "sasl_plain_username", "sasl_plain_password"} == set(ei.value.errors)


def test_bootstrap_parsing() -> None:
    assert parse_bootstrap_servers("a:1, b") == [("a", 1), ("b", 9092)]
    assert parse_bootstrap_servers(["[::1]:9093"]) == [("::1", 9093)]
    with pytest.raises(ConfigError):
        ProducerConfig(bootstrap_servers="h:notaport")
    with pytest.raises(ConfigError):
        ProducerConfig(bootstrap_servers="")


def test_frozen() -> None:
    c = ProducerConfig()
    with pytest.raises(Exception):  # noqa: B017 -- pydantic's frozen error
        c.linger_ms = 3  # type: ignore[misc]


def test_transactional_id_requires_idempotence() -> None:
    c = ProducerConfig(transactional_id="tx")
    assert c.enable_idempotence and c.transaction_timeout_ms == 60000
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(transactional_id="tx", enable_idempotence=False)
    assert {"transactional_id", "enable_idempotence"} <= set(ei.value.errors)
    with pytest.raises(ConfigError) as ei:
        ProducerConfig(transactional_id="tx", acks=1)  # not silently non-idempotent
    assert "acks" in ei.value.errors
    c2 = ProducerConfig.from_properties(
        {"transactional.id": "t2", "transaction.timeout.ms": "5000"}
    )
    assert c2.transactional_id == "t2" and c2.transaction_timeout_ms == 5000


def test_compression_level_checked_against_the_codecs_range() -> None:
    assert ProducerConfig().compression_level is None  # the codec's Kafka default
    for codec, level in (("gzip", 9), ("gzip", -1), ("lz4", 17), ("zstd", -131072), ("zstd", 22)):
        assert (
            ProducerConfig(compression_type=codec, compression_level=level).compression_level
            == level
        )
    for codec, level in (
        ("gzip", 0),
        ("gzip", 10),
        ("lz4", 18),
        ("zstd", 23),
        ("snappy", 1),
        ("none", 1),
    ):
        with pytest.raises(ConfigError) as ei:
            ProducerConfig(compression_type=codec, compression_level=level)
        assert set(ei.value.errors) == {"compression_level"}
        assert codec in ei.value.errors["compression_level"]


def test_from_properties_takes_javas_level_for_the_configured_codec() -> None:
    c = ProducerConfig.from_properties(
        {"compression.type": "zstd", "compression.zstd.level": "19", "compression.gzip.level": "2"}
    )
    assert c.compression_level == 19
    # The other codecs' levels are checked as Java checks them, and otherwise unused.
    assert ProducerConfig.from_properties({"compression.lz4.level": 4}).compression_level is None
    with pytest.raises(ConfigError) as ei:
        ProducerConfig.from_properties({"compression.type": "lz4", "compression.gzip.level": "10"})
    assert set(ei.value.errors) == {"compression.gzip.level"}
    with pytest.raises(ConfigError) as ei:
        ProducerConfig.from_properties(
            {"compression.type": "gzip", "compression.gzip.level": 3, "compression.level": 4}
        )
    assert set(ei.value.errors) == {"compression.gzip.level"}
    # librdkafka's single setting is ours by name.
    assert (
        ProducerConfig.from_properties(
            {"compression.type": "gzip", "compression.level": "4"}
        ).compression_level
        == 4
    )


def test_rack_aware_partitioning_settings_have_javas_names_and_defaults() -> None:
    assert ProducerConfig().partitioner_rack_aware is False
    assert ProducerConfig().client_rack == ""
    c = ProducerConfig.from_properties(
        {"client.rack": "use1-az1", "partitioner.rack.aware": "true"}
    )
    assert c.client_rack == "use1-az1" and c.partitioner_rack_aware is True
