"""Framing: header versions, size prefixes, correlation ids, incremental frame splitting."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka_ng.protocol import framing
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import (
    FrameReader,
    RequestHeader,
    decode_request,
    decode_request_header,
    decode_response,
    encode_request,
    encode_response,
    peek_correlation_id,
    request_header_version,
    response_header_version,
)
from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokafka_ng.protocol.messages.produce import ProduceRequest


def test_header_versions_follow_flexible_versions() -> None:
    assert request_header_version(3, 8) == 1 and request_header_version(3, 9) == 2
    assert response_header_version(3, 8) == 0 and response_header_version(3, 9) == 1
    assert request_header_version(0, 8) == 1 and request_header_version(0, 9) == 2
    # ApiVersions: flexible request header from v3, but responses always use header v0.
    assert request_header_version(18, 3) == 2
    assert all(response_header_version(18, v) == 0 for v in range(5))
    assert request_header_version(7, 0) == 0
    with pytest.raises(ValueError):
        request_header_version(9999, 0)
    for key, cls in REQUEST_TYPES.items():
        for v in range(cls.MIN_VERSION, cls.MAX_VERSION + 1):
            assert request_header_version(key, v) == (2 if cls.is_flexible(v) else 1)
            if key != 18:
                expected = 1 if RESPONSE_TYPES[key].is_flexible(v) else 0
                assert response_header_version(key, v) == expected


def test_golden_request_frames() -> None:
    frame = encode_request(ApiVersionsRequest(), 0, correlation_id=1, client_id="ab")
    # size, api_key 18, version 0, correlation id 1, client id "ab" (int16 length)
    assert frame == b"\x00\x00\x00\x0c" + b"\x00\x12\x00\x00\x00\x00\x00\x01\x00\x02ab"
    req = ApiVersionsRequest(client_software_name="n", client_software_version="1")
    frame = encode_request(req, 3, correlation_id=7, client_id=None)
    # Header v2: client id keeps its int16 length (-1 = null), then an empty tag section.
    header = b"\x00\x12\x00\x03\x00\x00\x00\x07\xff\xff\x00"
    assert frame == len(header + b"\x02n\x021\x00").to_bytes(4, "big") + header + b"\x02n\x021\x00"


def test_request_round_trip_through_server_side() -> None:
    req = MetadataRequest(topics=[MetadataRequestTopic(name="t")], allow_auto_topic_creation=False)
    for version in (0, 8, 9, 12):
        frame = encode_request(req, version, correlation_id=42, client_id="client")
        assert int.from_bytes(frame[:4], "big") == len(frame) - 4
        header, body = decode_request(frame[4:])
        assert header == RequestHeader(3, version, 42, "client")
        assert isinstance(body, MetadataRequest) and body.topics is not None
        assert body.topics[0].name == "t"
        h2, offset = decode_request_header(frame[4:])
        assert h2 == header
        assert MetadataRequest.decode(frame[4 + offset :], version) == body


def test_response_round_trip_and_header_v0_for_api_versions() -> None:
    resp = ApiVersionsResponse(api_keys=[ApiVersion(api_key=3, min_version=0, max_version=12)])
    frame = encode_response(resp, 3, correlation_id=9)
    # Header v0: just the correlation id, no tag byte, even though the body is flexible.
    assert frame[4:8] == b"\x00\x00\x00\x09"
    assert frame[8:] == resp.encode(3)
    assert peek_correlation_id(frame[4:]) == 9
    assert decode_response(ApiVersionsResponse, 3, frame[4:]) == (9, resp)

    meta = MetadataResponse(throttle_time_ms=3)
    frame = encode_response(meta, 12, correlation_id=-5)
    assert frame[4:9] == b"\xff\xff\xff\xfb\x00"  # header v1 has a tag section
    cid, got = decode_response(MetadataResponse, 12, memoryview(frame)[4:])
    assert (cid, got) == (-5, meta)


def test_decode_errors_are_protocol_errors() -> None:
    with pytest.raises(ProtocolError):
        peek_correlation_id(b"\x00\x01")
    with pytest.raises(ProtocolError):
        decode_response(MetadataResponse, 12, b"\x00\x00")
    with pytest.raises(ProtocolError):
        decode_request(b"\x00\x03")
    with pytest.raises(ProtocolError):
        decode_request(b"\x27\x0f\x00\x00\x00\x00\x00\x01\xff\xff")  # unknown API key 9999
    # Unknown keys still yield a header (so a server can answer UNSUPPORTED_VERSION).
    header, offset = decode_request_header(b"\x27\x0f\x00\x00\x00\x00\x00\x01\xff\xff")
    assert header == RequestHeader(9999, 0, 1, None) and offset == 10


def test_encode_request_checks_version() -> None:
    with pytest.raises(ValueError):
        encode_request(ProduceRequest(), 99, 1, None)


def test_frame_reader_split_across_feeds() -> None:
    frames = [encode_request(ApiVersionsRequest(), 0, i, "c") for i in range(3)] + [
        encode_response(MetadataResponse(), 12, 77)
    ]
    stream = b"".join(frames)
    for chunk in (1, 3, 7, len(stream)):
        fr = FrameReader()
        got: list[bytes] = []
        for i in range(0, len(stream), chunk):
            fr.feed(stream[i : i + chunk])
            while (f := fr.next_frame()) is not None:
                got.append(f)
        assert got == [f[4:] for f in frames]
        assert fr.buffered() == 0 and fr.next_frame() is None
    fr = FrameReader()
    fr.feed(b"\x00\x00")
    assert fr.next_frame() is None
    fr.feed(b"\x00\x00")  # zero-length frame is legal
    assert fr.next_frame() == b""


def test_frame_reader_rejects_bad_sizes() -> None:
    fr = FrameReader()
    fr.feed(b"\xff\xff\xff\xff")
    with pytest.raises(ProtocolError):
        fr.next_frame()
    fr = FrameReader(max_frame_size=1024)
    fr.feed((1025).to_bytes(4, "big"))
    with pytest.raises(ProtocolError, match="1025"):
        fr.next_frame()
    fr = FrameReader(max_frame_size=1024)
    fr.feed((1024).to_bytes(4, "big") + b"x" * 1024)
    assert fr.next_frame() == b"x" * 1024


def test_module_exports() -> None:
    assert set(framing.__all__) >= {"FrameReader", "encode_request", "decode_response"}


@given(
    sizes=st.lists(st.integers(0, 3000), max_size=12),
    cuts=st.lists(st.integers(1, 5000), min_size=1, max_size=40),
    as_bytearray=st.booleans(),
)
def test_frame_reader_any_chunking(sizes: list[int], cuts: list[int], as_bytearray: bool) -> None:
    # Frames (zero-length, prefix split across chunks, many per chunk, one over many
    # chunks) come out whole and in order however the stream is cut, and what is buffered
    # is always the bytes fed minus the frames returned.
    payloads = [bytes([i % 251]) * n for i, n in enumerate(sizes)]
    stream = b"".join(len(p).to_bytes(4, "big") + p for p in payloads)
    fr = FrameReader()
    got: list[bytes] = []
    pos = returned = 0
    i = 0
    while pos < len(stream):
        chunk = stream[pos : pos + cuts[i % len(cuts)]]
        i += 1
        pos += len(chunk)
        fr.feed(bytearray(chunk) if as_bytearray else chunk)
        while (frame := fr.next_frame()) is not None:
            assert type(frame) is bytes
            got.append(frame)
            returned += 4 + len(frame)
        assert fr.buffered() == pos - returned
    assert got == payloads and fr.buffered() == 0
