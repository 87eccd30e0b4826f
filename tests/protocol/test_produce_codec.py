"""The Produce shortcuts (``protocol/produce_codec.py``) against the generic codec.

``framing.encode_request`` and ``framing.decode_response`` take the shortcut for Produce and
fall back to the generated code for whatever it declines. What must hold: every frame
written and every answer read (or refused, with the same exception type and message) is
the generated code's, which these tests compute on their own from the message classes --
on the common shapes (where the shortcut must also actually be taken), on hypothesis values
of every version, and on every truncation and many corruptions of answers.
"""

from __future__ import annotations

from dataclasses import replace
from types import MappingProxyType
from typing import Any, cast

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from aiokafka_ng.protocol.framing import decode_response, encode_request, encode_response
from aiokafka_ng.protocol.limits import DEFAULT_LIMITS, DecodeLimits
from aiokafka_ng.protocol.messages.headers import RequestHeader, ResponseHeader
from aiokafka_ng.protocol.messages.produce import (
    LeaderIdAndEpoch,
    PartitionProduceData,
    PartitionProduceResponse,
    ProduceRequest,
    ProduceResponse,
    TopicProduceData,
    TopicProduceResponse,
)
from aiokafka_ng.protocol.primitives import Reader
from aiokafka_ng.protocol.produce_codec import decode_produce_response, encode_produce_request
from tests.protocol.strategies import message_values, scaled

VERSIONS = range(ProduceRequest.MIN_VERSION, ProduceRequest.MAX_VERSION + 1)
COMMON = range(9, 13)  # the versions the shortcuts take


def outcome(fn: Any, *args: Any) -> tuple[str, Any]:
    """What calling ``fn`` comes to: its value, or its exception's type and message."""
    try:
        return ("value", fn(*args))
    except Exception as exc:
        return (type(exc).__name__, str(exc))


def generic_frame(
    request: ProduceRequest, version: int, correlation_id: int, client_id: str | None
) -> bytes:
    """The request frame as the generated code writes it (header v1/v2, then the body)."""
    header = RequestHeader(
        request_api_key=0,
        request_api_version=version,
        correlation_id=correlation_id,
        client_id=client_id,
    )
    body = header.encode(2 if version >= 9 else 1) + request.encode(version)
    return len(body).to_bytes(4, "big") + body


def generic_answer(
    frame: bytes, version: int, limits: DecodeLimits = DEFAULT_LIMITS
) -> tuple[int, ProduceResponse]:
    """The answer as the generated code reads it."""
    r = Reader(frame, limits=limits)
    correlation_id = ResponseHeader.read_from(r, 1 if version >= 9 else 0).correlation_id
    return correlation_id, ProduceResponse.read_from(r, version)


def common_request(topics: int, partitions: int, txn: str | None = None) -> ProduceRequest:
    return ProduceRequest(
        transactional_id=txn,
        acks=-1,
        timeout_ms=30_000,
        topic_data=[
            TopicProduceData(
                name=f"topic-{t}-é",
                partition_data=[
                    PartitionProduceData(index=p, records=bytes(range(p * 7)) * (t + 1))
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
    )


def common_answer(topics: int, partitions: int) -> ProduceResponse:
    return ProduceResponse(
        responses=[
            TopicProduceResponse(
                name=f"topic-{t}-é",
                partition_responses=[
                    PartitionProduceResponse(
                        index=p,
                        error_code=(0, 6, 45)[p % 3],
                        base_offset=(-1, 0, 2**62)[(p + t) % 3],
                        log_append_time_ms=-1 if p % 2 else 1_700_000_000_000,
                        log_start_offset=p * 1000,
                    )
                    for p in range(partitions)
                ],
            )
            for t in range(topics)
        ],
        throttle_time_ms=7 * topics,
    )


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", [(0, 0), (1, 0), (1, 1), (1, 3), (3, 2)])
@pytest.mark.parametrize("txn", [None, "txn-ü"])
@pytest.mark.parametrize("client_id", [None, "", "aiokafka-ng", "c" * 300])
def test_common_requests_encode_to_the_generic_bytes(
    version: int, shape: tuple[int, int], txn: str | None, client_id: str | None
) -> None:
    request = common_request(*shape, txn=txn)
    frame = encode_request(request, version, 2**31 - 1, client_id)
    assert frame == generic_frame(request, version, 2**31 - 1, client_id)
    taken = encode_produce_request(request, version, 2**31 - 1, client_id)
    assert (taken is not None) == (version in COMMON)


def test_long_names_and_records_take_multibyte_lengths() -> None:
    request = common_request(1, 1, txn="t" * 200)
    request.topic_data[0].name = "n" * 20_000
    request.topic_data[0].partition_data[0].records = b"r" * 70_000
    for version in COMMON:
        assert encode_produce_request(request, version, 1, "c") is not None
        assert encode_request(request, version, 1, "c") == generic_frame(request, version, 1, "c")


def _with_index(index: int) -> ProduceRequest:
    request = common_request(1, 1)
    request.topic_data[0].partition_data[0].index = index
    return request


@pytest.mark.parametrize(
    "request_",
    [
        replace(common_request(1, 1), acks=2**15),
        replace(common_request(1, 1), timeout_ms=-(2**31) - 1),
        _with_index(2**31),
        replace(common_request(1, 1), transactional_id="\ud800"),  # not encodable
        replace(common_request(1, 1), unknown_tagged_fields={5: b"x"}),
    ],
)
@pytest.mark.parametrize("version", COMMON)
def test_what_the_generic_encoder_refuses_or_writes_differently_is_left_to_it(
    request_: ProduceRequest, version: int
) -> None:
    assert encode_produce_request(request_, version, 1, "c") is None
    assert outcome(encode_request, request_, version, 1, "c") == outcome(
        generic_frame, request_, version, 1, "c"
    )


@pytest.mark.parametrize("version", COMMON)
def test_other_shapes_are_left_to_the_generic_encoder(version: int) -> None:
    tagged_topic = common_request(2, 1)
    tagged_topic.topic_data[1].unknown_tagged_fields[3] = b"t"
    tagged_part = common_request(1, 2)
    tagged_part.topic_data[0].partition_data[1].unknown_tagged_fields[3] = b"p"
    a_bytearray = common_request(1, 1)
    # (typed as bytes; the generic encoder writes any buffer)
    a_bytearray.topic_data[0].partition_data[0].records = cast("bytes", bytearray(b"abc"))
    null_records = common_request(1, 1)
    null_records.topic_data[0].partition_data[0].records = None
    for request in (tagged_topic, tagged_part, a_bytearray):
        assert encode_produce_request(request, version, 1, "c") is None
        assert encode_request(request, version, 1, "c") == generic_frame(request, version, 1, "c")
    # A null record set is the common shape's, written as the generic code writes it.
    assert encode_request(null_records, version, 1, "c") == generic_frame(
        null_records, version, 1, "c"
    )
    # A client id over the int16 length: both refuse it the same way.
    assert outcome(encode_request, common_request(1, 1), version, 1, "c" * 40_000) == outcome(
        generic_frame, common_request(1, 1), version, 1, "c" * 40_000
    )


@settings(max_examples=scaled(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), version=st.sampled_from(list(VERSIONS)))
def test_any_request_encodes_to_the_generic_bytes(data: st.DataObject, version: int) -> None:
    request = data.draw(message_values(ProduceRequest, version))
    client_id = data.draw(st.none() | st.text(max_size=20))
    cid = data.draw(st.integers(0, 2**31 - 1))
    assert outcome(encode_request, request, version, cid, client_id) == outcome(
        generic_frame, request, version, cid, client_id
    )


# -- answers ----------------------------------------------------------------------------------


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("shape", [(0, 0), (1, 0), (1, 1), (1, 3), (3, 2)])
def test_common_answers_decode_as_the_generic_decoder(version: int, shape: tuple[int, int]) -> None:
    frame = encode_response(common_answer(*shape), version, 12345)[4:]
    expected = generic_answer(frame, version)
    assert decode_response(ProduceResponse, version, frame) == expected
    taken = decode_produce_response(frame, version, DEFAULT_LIMITS)
    assert (taken is not None) == (version in COMMON)
    if taken is not None:
        assert taken == expected
    # What follows the answer is ignored by both.
    assert decode_response(ProduceResponse, version, frame + b"\x01\x02") == expected


@pytest.mark.parametrize("version", COMMON)
def test_uncommon_answers_are_left_to_the_generic_decoder(version: int) -> None:
    record_errors = common_answer(1, 2)
    part = record_errors.responses[0].partition_responses[1]
    part.error_message = "broken"
    with_leader = common_answer(1, 1)
    with_leader.responses[0].partition_responses[0].current_leader = LeaderIdAndEpoch(2, 9)
    tagged = common_answer(2, 1)
    tagged.responses[1].unknown_tagged_fields[7] = b"x"
    long_name = common_answer(1, 1)
    long_name.responses[0].name = "n" * 200
    uncommon = [record_errors, tagged, long_name]
    if version >= 10:  # the leader hint is a tagged field from v10 on
        uncommon.append(with_leader)
    for answer in uncommon:
        frame = encode_response(answer, version, 3)[4:]
        assert decode_produce_response(frame, version, DEFAULT_LIMITS) is None
        assert decode_response(ProduceResponse, version, frame) == generic_answer(frame, version)


@pytest.mark.parametrize("version", COMMON)
def test_every_truncation_fails_as_the_generic_decoder(version: int) -> None:
    frame = encode_response(common_answer(2, 2), version, 3)[4:]
    for n in range(len(frame)):
        cut = frame[:n]
        assert outcome(decode_response, ProduceResponse, version, cut) == outcome(
            generic_answer, cut, version
        ), n


@pytest.mark.parametrize("version", COMMON)
def test_every_corruption_decodes_or_fails_as_the_generic_decoder(version: int) -> None:
    frame = encode_response(common_answer(2, 2), version, 3)[4:]
    for i in range(len(frame)):
        for byte in (0x00, 0x01, 0x02, 0x7E, 0x7F, 0x80, 0xC3, 0xFF):
            bad = frame[:i] + bytes([byte]) + frame[i + 1 :]
            assert outcome(decode_response, ProduceResponse, version, bad) == outcome(
                generic_answer, bad, version
            ), (i, byte)


@pytest.mark.parametrize(
    "limits",
    [
        DecodeLimits(max_structs=4),
        DecodeLimits(max_structs=5),
        DecodeLimits(per_field=MappingProxyType({"ProduceResponse.responses": 1})),
        DecodeLimits(per_field=MappingProxyType({"TopicProduceResponse.partition_responses": 1})),
        DecodeLimits(per_field=MappingProxyType({})),
    ],
)
@pytest.mark.parametrize("version", COMMON)
def test_decode_limits_hold_as_in_the_generic_decoder(limits: DecodeLimits, version: int) -> None:
    frame = encode_response(common_answer(2, 2), version, 3)[4:]  # 2 topics, 4 partitions
    assert outcome(decode_response, ProduceResponse, version, frame, limits) == outcome(
        generic_answer, frame, version, limits
    )
    fits = limits.max_structs >= 6 and not (
        set(limits.per_field)
        & {
            "ProduceResponse.responses",
            "TopicProduceResponse.partition_responses",
        }
    )
    assert (decode_produce_response(frame, version, limits) is not None) == fits


@settings(max_examples=scaled(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), version=st.sampled_from(list(VERSIONS)))
def test_any_answer_decodes_as_the_generic_decoder(data: st.DataObject, version: int) -> None:
    answer = data.draw(message_values(ProduceResponse, version))
    frame = encode_response(answer, version, data.draw(st.integers(-(2**31), 2**31 - 1)))[4:]
    assert outcome(decode_response, ProduceResponse, version, frame) == outcome(
        generic_answer, frame, version
    )
