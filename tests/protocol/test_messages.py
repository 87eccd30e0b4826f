"""Generated messages: hypothesis round trips for every message and version, golden bytes."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
    FinalizedFeatureKey,
)
from aiokafka_ng.protocol.messages.consumer_protocol import ConsumerProtocolSubscription
from aiokafka_ng.protocol.messages.describe_topic_partitions import (
    Cursor,
    DescribeTopicPartitionsRequest,
)
from aiokafka_ng.protocol.messages.fetch import (
    EpochEndOffset,
    FetchableTopicResponse,
    FetchResponse,
    PartitionData,
)
from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataRequestTopic
from aiokafka_ng.protocol.messages.produce import (
    PartitionProduceData,
    ProduceRequest,
    TopicProduceData,
)
from aiokafka_ng.protocol.primitives import Message
from tests.protocol.strategies import ALL_MESSAGE_CLASSES, sample, scaled, versioned_messages

_SETTINGS = settings(
    max_examples=scaled(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


@pytest.mark.parametrize("cls", ALL_MESSAGE_CLASSES, ids=lambda c: c.__name__)
def test_round_trip(cls: type[Message]) -> None:
    @_SETTINGS
    @given(versioned_messages(cls))
    def check(pair: tuple[int, Any]) -> None:
        version, msg = pair
        data = msg.encode(version)
        assert cls.decode(data, version) == msg
        # Re-encoding the decoded value is byte-identical (deterministic encoder).
        assert cls.decode(data, version).encode(version) == data

    check()


@pytest.mark.parametrize("cls", ALL_MESSAGE_CLASSES, ids=lambda c: c.__name__)
def test_round_trip_full_sample(cls: type[Message]) -> None:
    """Every field set (non-default, arrays of two) in every version."""
    for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
        msg = sample(cls, v, cls.is_flexible(v))
        assert cls.decode(msg.encode(v), v) == msg, v


def test_tables_and_class_attributes() -> None:
    assert len(REQUEST_TYPES) >= 60
    assert REQUEST_TYPES.keys() == RESPONSE_TYPES.keys()
    for key, req in REQUEST_TYPES.items():
        resp = RESPONSE_TYPES[key]
        assert req.API_KEY == resp.API_KEY == key
        assert req.RESPONSE_TYPE is resp  # type: ignore[attr-defined]
        assert (req.MIN_VERSION, req.MAX_VERSION) == (resp.MIN_VERSION, resp.MAX_VERSION)
        assert req.MAX_STABLE_VERSION <= req.MAX_VERSION
    assert ProduceRequest.API_KEY == 0 and FetchResponse.FLEXIBLE_MIN_VERSION == 12
    assert MetadataRequest.MIN_VERSION == 0 and MetadataRequest.FLEXIBLE_MIN_VERSION == 9
    assert ConsumerProtocolSubscription.FLEXIBLE_MIN_VERSION is None


def test_defaults() -> None:
    req = ProduceRequest()
    assert req.transactional_id is None and req.topic_data == [] and req.acks == 0
    part = PartitionData()
    assert part.last_stable_offset == -1 and part.records is None
    assert part.diverging_epoch == EpochEndOffset(epoch=-1, end_offset=-1)
    assert DescribeTopicPartitionsRequest().cursor is None
    assert DescribeTopicPartitionsRequest().response_partition_limit == 2000
    # Hex default "0x7fffffff" (CreateTopicsRequest... uses int32 defaults of -1 etc.).
    from aiokafka_ng.protocol.messages.fetch import FetchRequest

    assert FetchRequest().max_bytes == 0x7FFFFFFF and FetchRequest().cluster_id is None


def test_encode_rejects_bad_version_and_null() -> None:
    with pytest.raises(ValueError):
        MetadataRequest().encode(MetadataRequest.MAX_VERSION + 1)
    with pytest.raises(ValueError):
        MetadataRequest().encode(-1)
    # Topics is nullable from v1 only.
    assert MetadataRequest(topics=None).encode(1) == b"\xff\xff\xff\xff"
    with pytest.raises(ValueError):
        MetadataRequest(topics=None).encode(0)
    with pytest.raises(ValueError):
        MetadataRequestTopic(name=None).encode(1)  # name is nullable only from v10
    with pytest.raises(ValueError):
        ProduceRequest(acks=1 << 20).encode(3)
    with pytest.raises(ProtocolError):
        MetadataRequest.decode(b"", MetadataRequest.MAX_VERSION + 1)


# ---- golden bytes, derived by hand from the protocol guide's BNF ---------------------------


def test_golden_api_versions_request() -> None:
    # v0-2: empty body. v3 (flexible): compact strings (len+1 varint) + empty tag section.
    assert ApiVersionsRequest().encode(0) == b""
    req = ApiVersionsRequest(client_software_name="kc", client_software_version="1.0")
    assert req.encode(3) == b"\x03kc" + b"\x041.0" + b"\x00"


def test_golden_api_versions_response_v3_with_tags() -> None:
    resp = ApiVersionsResponse(
        error_code=0,
        api_keys=[ApiVersion(api_key=0, min_version=0, max_version=11)],
        throttle_time_ms=5,
        finalized_features_epoch=7,
        finalized_features=[FinalizedFeatureKey(name="mv", max_version_level=2)],
    )
    expected = (
        b"\x00\x00"  # error_code
        + b"\x02"  # compact array: 1 element
        + b"\x00\x00\x00\x00\x00\x0b\x00"  # api_key, min, max, empty tags
        + b"\x00\x00\x00\x05"  # throttle_time_ms
        + b"\x02"  # two tagged fields, ascending tags
        + b"\x01\x08"
        + (7).to_bytes(8, "big")  # tag 1: int64 epoch
        + b"\x02\x09"
        + b"\x02\x03mv\x00\x02\x00\x00\x00"  # tag 2: 1 feature: name, max, min, tags
    )
    assert resp.encode(3) == expected
    assert ApiVersionsResponse.decode(expected, 3) == resp


def test_golden_metadata_request() -> None:
    req = MetadataRequest(topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=True)
    assert req.encode(0) == b"\x00\x00\x00\x01\x00\x01t"
    assert req.encode(4) == b"\x00\x00\x00\x01\x00\x01t\x01"
    # v10+: topic id (uuid) before the compact nullable name; each struct ends in tags.
    assert req.encode(12) == (b"\x02" + b"\x00" * 16 + b"\x02t\x00" + b"\x01" + b"\x00" + b"\x00")


def test_golden_produce_request_v9() -> None:
    req = ProduceRequest(
        transactional_id=None,
        acks=-1,
        timeout_ms=1000,
        topic_data=[
            TopicProduceData(
                name="t", partition_data=[PartitionProduceData(index=2, records=b"RB")]
            )
        ],
    )
    assert req.encode(9) == (
        b"\x00"  # null compact string
        + b"\xff\xff"  # acks
        + b"\x00\x00\x03\xe8"  # timeout
        + b"\x02\x02t"  # one topic, name
        + b"\x02\x00\x00\x00\x02\x03RB\x00"  # one partition: index, records, tags
        + b"\x00"  # topic tags
        + b"\x00"  # request tags
    )
    assert req.encode(3) == (
        b"\xff\xff"  # null transactional id (int16 -1)
        + b"\xff\xff\x00\x00\x03\xe8"
        + b"\x00\x00\x00\x01\x00\x01t"
        + b"\x00\x00\x00\x01\x00\x00\x00\x02\x00\x00\x00\x02RB"
    )


def test_golden_nullable_struct_marker() -> None:
    # Non-tagged nullable structs carry an int8 marker: -1 null, 1 present.
    assert DescribeTopicPartitionsRequest().encode(0) == b"\x01" + b"\x00\x00\x07\xd0" + b"\xff\x00"
    req = DescribeTopicPartitionsRequest(cursor=Cursor(topic_name="a", partition_index=3))
    assert req.encode(0) == b"\x01\x00\x00\x07\xd0\x01\x02a\x00\x00\x00\x03\x00\x00"


def test_tagged_fields_decoded_and_unknown_preserved() -> None:
    part = PartitionData(partition_index=1, diverging_epoch=EpochEndOffset(epoch=3, end_offset=9))
    resp = FetchResponse(responses=[FetchableTopicResponse(topic="t", partitions=[part])])
    data = resp.encode(12)
    assert FetchResponse.decode(data, 12) == resp
    # An unknown tag written by a newer broker survives a decode/encode cycle.
    resp.unknown_tagged_fields = {42: b"xyz"}
    data = resp.encode(12)
    assert data.endswith(b"\x01\x2a\x03xyz")
    assert FetchResponse.decode(data, 12).unknown_tagged_fields == {42: b"xyz"}


def test_uuid_and_records_fields() -> None:
    tid = uuid.uuid4()
    part = PartitionData(partition_index=0, records=b"\x00" * 100)
    resp = FetchResponse(responses=[FetchableTopicResponse(topic_id=tid, partitions=[part])])
    got = FetchResponse.decode(memoryview(resp.encode(13)), 13)
    assert got.responses[0].topic_id == tid
    assert got.responses[0].partitions[0].records == b"\x00" * 100
    assert isinstance(got.responses[0].partitions[0].records, bytes)


@given(st.binary(max_size=40))
@settings(max_examples=scaled(50), deadline=None)
def test_bytearray_and_memoryview_inputs_agree(blob: bytes) -> None:
    req = ProduceRequest(
        topic_data=[
            TopicProduceData(name="x", partition_data=[PartitionProduceData(index=0, records=blob)])
        ]
    )
    data = req.encode(9)
    for buf in (data, bytearray(data), memoryview(data)):
        assert ProduceRequest.decode(buf, 9) == req


def test_golden_fetch_request_v12_with_tagged_cluster_id() -> None:
    from aiokafka_ng.protocol.messages.fetch import FetchPartition, FetchRequest, FetchTopic

    req = FetchRequest(
        cluster_id="c",
        max_wait_ms=500,
        min_bytes=1,
        topics=[
            FetchTopic(
                topic="t",
                partitions=[FetchPartition(partition=0, fetch_offset=5, partition_max_bytes=1024)],
            )
        ],
    )
    expected = (
        b"\xff\xff\xff\xff"  # replica_id default -1
        + b"\x00\x00\x01\xf4\x00\x00\x00\x01"  # max_wait_ms, min_bytes
        + b"\x7f\xff\xff\xff\x00"  # max_bytes default 0x7fffffff, isolation_level
        + b"\x00\x00\x00\x00\xff\xff\xff\xff"  # session_id, session_epoch default -1
        + b"\x02\x02t\x02"  # 1 topic "t", 1 partition
        + b"\x00\x00\x00\x00\xff\xff\xff\xff"  # partition, current_leader_epoch -1
        + (5).to_bytes(8, "big")  # fetch_offset
        + b"\xff\xff\xff\xff"
        + b"\xff" * 8  # last_fetched_epoch, log_start_offset
        + b"\x00\x00\x04\x00\x00\x00"  # partition_max_bytes, partition tags, topic tags
        + b"\x01\x01"  # no forgotten topics, rack_id ""
        + b"\x01\x00\x02\x02c"  # tags: cluster_id (tag 0) = compact "c"
    )
    assert req.encode(12) == expected
    assert FetchRequest.decode(expected, 12) == req
