"""Pure pieces of the admin client: per-item results, topic-name rules, models, config."""

from __future__ import annotations

import pickle

import pytest

from aiokafka_ng.admin import (
    AclOperation,
    AdminBatchError,
    AdminClient,
    AdminConfig,
    ItemResults,
    ListOffsetsSpec,
    TopicPartition,
    validate_topic_name,
)
from aiokafka_ng.admin._groups import decode_assignment
from aiokafka_ng.admin.models import decode_authorized_operations
from aiokafka_ng.errors import (
    ConfigError,
    InvalidTopicError,
    KafkaError,
    TopicAlreadyExistsError,
)
from aiokafka_ng.protocol.messages.consumer_protocol import (
    ConsumerProtocolAssignment,
    ConsumerProtocolAssignmentTopicPartition,
)


def test_item_results_split_and_raise() -> None:
    boom, exists = InvalidTopicError("bad"), TopicAlreadyExistsError("dup")
    results: ItemResults[str, int] = ItemResults("create_topics", {"a": 1, "b": boom, "c": exists})
    assert list(results) == ["a", "b", "c"]
    assert len(results) == 3
    assert results.succeeded == {"a": 1}
    assert results.failed == {"b": boom, "c": exists}
    assert results.result("a") == 1
    with pytest.raises(InvalidTopicError):
        results.result("b")
    with pytest.raises(AdminBatchError) as info:
        results.raise_on_error()
    err = info.value
    assert isinstance(err, KafkaError)
    assert err.operation == "create_topics"
    assert err.errors == {"b": boom, "c": exists}
    text = str(err)
    assert "2 item(s) failed" in text
    assert "'b': InvalidTopicError" in text and "'c': TopicAlreadyExistsError" in text
    assert "ok" in repr(results) and "InvalidTopicError" in repr(results)


def test_item_results_all_ok() -> None:
    results: ItemResults[str, None] = ItemResults("delete_topics", {"a": None, "b": None})
    assert results.raise_on_error() == {"a": None, "b": None}
    assert results.failed == {}


@pytest.mark.parametrize(
    ("name", "ok"),
    [
        ("orders", True),
        ("a.b_c-D9", True),
        ("x" * 249, True),
        ("x" * 250, False),
        ("", False),
        (".", False),
        ("..", False),
        ("...", True),
        ("with space", False),
        ("slash/es", False),
        ("ünïcode", False),
    ],
)
def test_topic_name_rules(name: str, ok: bool) -> None:
    err = validate_topic_name(name)
    assert (err is None) is ok
    if err is not None:
        assert isinstance(err, InvalidTopicError)


def test_list_offsets_specs() -> None:
    assert ListOffsetsSpec.earliest().timestamp == -2
    assert ListOffsetsSpec.latest().timestamp == -1
    assert ListOffsetsSpec.max_timestamp().timestamp == -3
    assert ListOffsetsSpec.for_timestamp(1234).timestamp == 1234
    with pytest.raises(ValueError, match="timestamp"):
        ListOffsetsSpec.for_timestamp(-5)


def test_authorized_operations_bits() -> None:
    assert decode_authorized_operations(-(2**31)) is None
    bits = (1 << AclOperation.READ) | (1 << AclOperation.DESCRIBE)
    assert decode_authorized_operations(bits) == {AclOperation.READ, AclOperation.DESCRIBE}


def test_decode_assignment() -> None:
    a = ConsumerProtocolAssignment(
        assigned_partitions=[ConsumerProtocolAssignmentTopicPartition("t", [1, 0])]
    )
    for version in (0, 1, 3):
        blob = version.to_bytes(2, "big") + a.encode(version)
        assert decode_assignment(blob) == [("t", 1), ("t", 0)]
    assert decode_assignment(b"") == []
    assert decode_assignment(b"\x00\x00\xff") == []  # not a consumer assignment


def test_topic_partition_is_a_tuple() -> None:
    assert TopicPartition("t", 1) == ("t", 1)
    assert {("t", 1): 5}[TopicPartition("t", 1)] == 5


def test_admin_config_defaults_and_errors() -> None:
    cfg = AdminConfig(bootstrap_servers="127.0.0.1:9092")
    assert cfg.default_api_timeout_ms == 60000
    assert cfg.client_id == "aiokafka-ng-admin"
    with pytest.raises(ConfigError) as info:
        AdminConfig(default_api_timeout_ms=0, retry_backoff_ms=-1, nope=True)
    assert set(info.value.errors) == {"default_api_timeout_ms", "retry_backoff_ms", "nope"}
    with pytest.raises(ConfigError, match="default_api_timeout_ms"):
        AdminConfig(default_api_timeout_ms=1000, request_timeout_ms=5000)
    # not set by the user: it follows a longer request timeout (Java's rule)
    assert AdminConfig(request_timeout_ms=90000).default_api_timeout_ms == 90000


def test_from_properties() -> None:
    admin = AdminClient.from_properties(
        {"bootstrap.servers": "127.0.0.1:9", "default.api.timeout.ms": "50000"}
    )
    assert admin.config.default_api_timeout_ms == 50000
    assert admin.config.bootstrap_servers == "127.0.0.1:9"
    with pytest.raises(ConfigError, match=r"linger\.ms"):
        AdminClient.from_properties({"linger.ms": "5"})
    assert "closed" in repr(admin)


def test_batch_error_pickles() -> None:
    err = AdminBatchError("op", {"a": InvalidTopicError("bad")})
    copy = pickle.loads(pickle.dumps(err))
    assert str(copy) == str(err)


@pytest.mark.anyio
async def test_broker_resources_need_a_node_id() -> None:
    from aiokafka_ng.admin import AlterConfigOp, ConfigResource, ConfigResourceType

    bad = ConfigResource(ConfigResourceType.BROKER, "broker-one")
    admin = AdminClient(bootstrap_servers="127.0.0.1:1")
    with pytest.raises(ValueError, match="node id"):
        await admin.describe_configs([bad])
    with pytest.raises(ValueError, match="node id"):
        await admin.incremental_alter_configs({bad: [AlterConfigOp("x", "1")]})
