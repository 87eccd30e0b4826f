"""The sans-IO client connection: bytes in, events out, no event loop and no broker.

Each test plays the broker by hand: it decodes the frames ``send_request`` returns with the
protocol's own request decoder and answers with ``encode_response`` (or with bytes no real
broker would send: that is the point of the poisoning rows).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, TypeVar

import pytest
from hypothesis import given
from hypothesis import strategies as st

from aiokafka_ng.errors import (
    SaslAuthenticationFailedError,
    UnsupportedSaslMechanismError,
    UnsupportedVersionError,
)
from aiokafka_ng.net.sasl import PlainMechanism
from aiokafka_ng.protocol.connection import (
    NEED_DATA,
    ClientConnection,
    Poisoned,
    Response,
    decode_api_versions,
)
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.framing import decode_request, encode_response
from aiokafka_ng.protocol.handshake import (
    BrokerVersions,
    Steps,
    negotiate_api_versions,
    sasl_authenticate,
)
from aiokafka_ng.protocol.limits import DecodeLimits, ResponseLimitError
from aiokafka_ng.protocol.messages.api_versions import (
    ApiVersion,
    ApiVersionsRequest,
    ApiVersionsResponse,
)
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponseBroker,
)
from aiokafka_ng.protocol.messages.produce import ProduceRequest
from aiokafka_ng.protocol.messages.sasl_authenticate import SaslAuthenticateResponse
from aiokafka_ng.protocol.messages.sasl_handshake import SaslHandshakeResponse
from aiokafka_ng.protocol.primitives import ApiMessage

T = TypeVar("T")

METADATA_VERSION = 12


def metadata(node_id: int) -> MetadataResponse:
    # node_id tags which request a response was built for.
    return MetadataResponse(brokers=[MetadataResponseBroker(node_id, "h", 1)])


def correlation_id_of(frame: bytes) -> int:
    header, _ = decode_request(frame[4:])
    return header.correlation_id


def answer(frame: bytes, response: ApiMessage, version: int = METADATA_VERSION) -> bytes:
    """The broker's answer to the request ``frame``: same correlation id, size-prefixed."""
    return encode_response(response, version, correlation_id_of(frame))


def events(conn: ClientConnection[Any]) -> Iterator[Response[Any] | Poisoned]:
    """Every event up to NEED_DATA (or the first Poisoned)."""
    while True:
        event = conn.next_event()
        if event is NEED_DATA:
            return
        assert isinstance(event, Response | Poisoned)
        yield event
        if isinstance(event, Poisoned):
            return


def contexts(conn: ClientConnection[str]) -> list[str]:
    got = []
    for event in events(conn):
        assert isinstance(event, Response), event
        got.append(event.request.context)
    return got


def test_a_response_comes_back_with_its_request_and_context() -> None:
    conn: ClientConnection[str] = ClientConnection("me")
    frame = conn.send_request(MetadataRequest(), METADATA_VERSION, "first")
    header, request = decode_request(frame[4:])
    assert (header.api_key, header.api_version, header.client_id) == (3, METADATA_VERSION, "me")
    assert header.correlation_id == conn.last_correlation_id == 0
    assert isinstance(request, MetadataRequest)
    assert conn.next_event() is NEED_DATA and conn.in_flight == 1
    conn.receive_data(answer(frame, metadata(7)))
    event = conn.next_event()
    assert isinstance(event, Response)
    assert event.request.context == "first" and event.request.api_name == "Metadata"
    assert isinstance(event.response, MetadataResponse)
    assert event.response.brokers[0].node_id == 7
    assert conn.next_event() is NEED_DATA
    assert (conn.in_flight, conn.responses_received, conn.buffered()) == (0, 1, 0)


def test_correlation_ids_count_up_per_request() -> None:
    conn: ClientConnection[int] = ClientConnection()
    frames = [conn.send_request(MetadataRequest(), METADATA_VERSION, i) for i in range(3)]
    assert [correlation_id_of(f) for f in frames] == [0, 1, 2]
    assert conn.max_in_flight_seen == 3


def test_partial_frames_wait_for_the_rest() -> None:
    conn: ClientConnection[str] = ClientConnection()
    frame = conn.send_request(MetadataRequest(), METADATA_VERSION, "a")
    data = answer(frame, metadata(1))
    for i in range(len(data) - 1):
        conn.receive_data(data[i : i + 1])
        assert conn.next_event() is NEED_DATA
    conn.receive_data(data[-1:])
    assert contexts(conn) == ["a"]
    assert conn.bytes_received == len(data)


def test_several_responses_in_one_chunk_come_out_in_order() -> None:
    conn: ClientConnection[str] = ClientConnection()
    frames = [conn.send_request(MetadataRequest(), METADATA_VERSION, c) for c in "abc"]
    conn.receive_data(b"".join(answer(f, metadata(i)) for i, f in enumerate(frames)))
    assert contexts(conn) == ["a", "b", "c"]


@given(cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=12))
def test_any_chunking_gives_the_same_responses(cuts: list[int]) -> None:
    conn: ClientConnection[int] = ClientConnection()
    frames = [conn.send_request(MetadataRequest(), METADATA_VERSION, i) for i in range(4)]
    data = b"".join(answer(f, metadata(i)) for i, f in enumerate(frames))
    got: list[int] = []
    start = 0
    for stop in [*sorted(c % (len(data) + 1) for c in cuts), len(data)]:
        conn.receive_data(data[start:stop])
        start = max(start, stop)
        for event in events(conn):
            assert isinstance(event, Response)
            assert isinstance(event.response, MetadataResponse)
            assert event.response.brokers[0].node_id == event.request.context
            got.append(event.request.context)
    assert got == [0, 1, 2, 3]


def test_out_of_order_response_poisons_and_close_returns_every_pending_request() -> None:
    conn: ClientConnection[str] = ClientConnection()
    frames = [conn.send_request(MetadataRequest(), METADATA_VERSION, c) for c in "ab"]
    conn.receive_data(answer(frames[1], metadata(1)))  # the second answered first
    event = conn.next_event()
    assert isinstance(event, Poisoned) and event.mismatch and event.cause is None
    assert "correlation id 1 does not match the oldest in-flight request (0)" in event.reason
    conn.receive_data(answer(frames[0], metadata(0)))
    assert conn.next_event() is event  # poisoned for good, even with good bytes after
    assert conn.closed and conn.poisoned is event
    assert conn.buffered() > 0
    pending = conn.close()
    assert conn.buffered() == 0  # what was buffered is let go at close
    assert [(p.context, p.correlation_id) for p in pending] == [("a", 0), ("b", 1)]
    assert conn.close() == []  # each request is handed back once
    with pytest.raises(RuntimeError):
        conn.send_request(MetadataRequest(), METADATA_VERSION, "c")


def test_a_response_with_nothing_in_flight_poisons() -> None:
    conn: ClientConnection[str] = ClientConnection()
    frame = conn.send_request(MetadataRequest(), METADATA_VERSION, "a")
    conn.receive_data(answer(frame, metadata(1)) * 2)  # answered twice
    (first, second) = events(conn)
    assert isinstance(first, Response)
    assert isinstance(second, Poisoned) and second.mismatch
    assert "unsolicited response with correlation id 0" in second.reason


def test_acks0_requests_are_not_awaited_and_their_answers_are_dropped() -> None:
    conn: ClientConnection[str] = ClientConnection()
    a = conn.send_request(MetadataRequest(), METADATA_VERSION, "a")
    produce = conn.send_oneway(ProduceRequest(acks=0), 9)
    b = conn.send_request(MetadataRequest(), METADATA_VERSION, "b")
    assert [correlation_id_of(f) for f in (a, produce, b)] == [0, 1, 2]
    assert conn.in_flight == 2  # the acks=0 request is not waited for
    # Tansu answers acks=0 anyway, in order: that answer is dropped, not a mismatch.
    tansu_answer = encode_response(metadata(99), METADATA_VERSION, 1)
    conn.receive_data(answer(a, metadata(0)) + tansu_answer + answer(b, metadata(2)))
    assert contexts(conn) == ["a", "b"]
    assert conn.responses_dropped == 1 and not conn.closed


def test_acks0_requests_kafka_never_answers_are_forgotten() -> None:
    conn: ClientConnection[str] = ClientConnection()
    conn.send_oneway(ProduceRequest(acks=0), 9)
    b = conn.send_request(MetadataRequest(), METADATA_VERSION, "b")
    conn.receive_data(answer(b, metadata(1)))  # Kafka: no answer to id 0
    assert contexts(conn) == ["b"]
    # Id 0 was sent before the awaited id 1 was answered: an answer now is unsolicited.
    conn.receive_data(encode_response(metadata(9), METADATA_VERSION, 0))
    event = conn.next_event()
    assert isinstance(event, Poisoned) and "unsolicited" in event.reason


def test_acks0_ids_remembered_are_bounded() -> None:
    conn: ClientConnection[str] = ClientConnection()
    for _ in range(1025):  # one more than remembered
        conn.send_oneway(ProduceRequest(acks=0), 9)
    conn.receive_data(encode_response(metadata(0), METADATA_VERSION, 0))
    event = conn.next_event()
    assert isinstance(event, Poisoned) and event.mismatch  # id 0 was forgotten
    conn = ClientConnection()
    for _ in range(1024):
        conn.send_oneway(ProduceRequest(acks=0), 9)
    conn.receive_data(encode_response(metadata(0), METADATA_VERSION, 0))
    assert conn.next_event() is NEED_DATA and conn.responses_dropped == 1


def test_a_frame_over_the_limit_is_refused_at_its_size_prefix() -> None:
    conn: ClientConnection[str] = ClientConnection(max_frame_size=1024)
    conn.send_request(MetadataRequest(), METADATA_VERSION, "a")
    conn.receive_data((1025).to_bytes(4, "big"))  # the prefix alone: no body buffered
    event = conn.next_event()
    assert isinstance(event, Poisoned) and not event.mismatch
    assert isinstance(event.cause, ResponseLimitError)
    assert "frame of 1025 bytes is larger than the 1024" in event.reason
    assert [p.context for p in conn.close()] == ["a"]


def test_a_negative_frame_size_poisons() -> None:
    conn: ClientConnection[str] = ClientConnection()
    conn.receive_data(b"\xff\xff\xff\xf0")
    event = conn.next_event()
    assert isinstance(event, Poisoned) and isinstance(event.cause, ProtocolError)
    assert "invalid frame size" in event.reason


def test_a_frame_too_short_for_a_header_poisons() -> None:
    conn: ClientConnection[str] = ClientConnection()
    conn.send_request(MetadataRequest(), METADATA_VERSION, "a")
    conn.receive_data(b"\x00\x00\x00\x03abc")
    event = conn.next_event()
    assert isinstance(event, Poisoned) and not event.mismatch
    assert "has no correlation id" in event.reason


def test_an_undecodable_body_poisons_with_its_request_still_pending() -> None:
    conn: ClientConnection[str] = ClientConnection()
    conn.send_request(MetadataRequest(), METADATA_VERSION, "a")
    conn.receive_data((9).to_bytes(4, "big") + (0).to_bytes(4, "big") + b"\xff" * 5)
    event = conn.next_event()
    assert isinstance(event, Poisoned) and isinstance(event.cause, ProtocolError)
    assert event.reason.startswith("undecodable frame from the broker: ")
    # The cause is detached: the decoder's traceback (and through it the frame) is not kept.
    assert event.cause.__traceback__ is None and event.cause.__context__ is None
    assert conn.responses_received == 0
    assert [p.context for p in conn.close()] == ["a"]


def test_decode_limits_per_request_replace_the_connections() -> None:
    conn: ClientConnection[str] = ClientConnection()
    tight = DecodeLimits(per_field={"MetadataResponse.brokers": 1})
    frames = [
        conn.send_request(MetadataRequest(), METADATA_VERSION, "default"),
        conn.send_request(MetadataRequest(), METADATA_VERSION, "tight", limits=tight),
    ]
    two_brokers = MetadataResponse(brokers=[MetadataResponseBroker(i, "h", 1) for i in (1, 2)])
    conn.receive_data(b"".join(answer(f, two_brokers) for f in frames))
    first, second = events(conn)
    assert isinstance(first, Response) and first.request.context == "default"
    assert isinstance(second, Poisoned) and isinstance(second.cause, ResponseLimitError)
    assert "MetadataResponse.brokers" in second.reason


# -- handshake ---------------------------------------------------------------------------------


def run(conn: ClientConnection[str], steps: Steps[T], broker: Any) -> tuple[T, list[Any]]:
    """Drive ``steps`` through ``conn``; ``broker(request, version)`` answers each request
    with (response, response version). Returns the result and the requests seen."""
    seen: list[Any] = []
    try:
        request, version = next(steps)
        while True:
            frame = conn.send_request(request, version, "setup")
            header, decoded = decode_request(frame[4:])
            seen.append((type(decoded).__name__, header.api_version))
            response, response_version = broker(decoded, version)
            conn.receive_data(encode_response(response, response_version, header.correlation_id))
            (event,) = events(conn)
            assert isinstance(event, Response)
            request, version = steps.send(event.response)
    except StopIteration as done:
        result: T = done.value
        return result, seen


def api_versions(max_api_versions: int = 4) -> ApiVersionsResponse:
    return ApiVersionsResponse(
        api_keys=[
            ApiVersion(18, 0, max_api_versions),
            ApiVersion(3, 0, 12),
            ApiVersion(17, 0, 1),
            ApiVersion(36, 0, 2),
        ]
    )


def test_api_versions_negotiation_falls_back_as_the_broker_says() -> None:
    def broker(request: Any, version: int) -> tuple[ApiMessage, int]:
        assert isinstance(request, ApiVersionsRequest)
        if version > 2:  # an older broker: error 35 in the v0 format, with its range
            answer = api_versions(2)
            answer.error_code = 35
            return answer, 0
        return api_versions(2), version

    conn: ClientConnection[str] = ClientConnection()
    result, seen = run(conn, negotiate_api_versions("b:1", "1.0"), broker)
    assert seen == [
        ("ApiVersionsRequest", ApiVersionsRequest.MAX_STABLE_VERSION),
        ("ApiVersionsRequest", 2),
    ]
    assert isinstance(result, BrokerVersions) and result.api_versions[3] == (0, 12)
    assert conn.in_flight == 0 and not conn.closed


def test_api_versions_answer_undecodable_in_the_version_asked_is_read_as_v0() -> None:
    v0 = encode_response(api_versions(2), 0, 5)[4:]
    assert decode_api_versions(v0, 0).api_keys[0].max_version == 2
    # A v0 body in answer to v3: not a v3 body (no tagged fields), so read as v0.
    assert decode_api_versions(v0, 3).api_keys[0].max_version == 2
    with pytest.raises(ProtocolError):
        decode_api_versions(v0[:-3], 0)


def test_sasl_plain_sequence_returns_the_session_lifetime() -> None:
    versions = {17: (0, 1), 36: (0, 2)}

    def broker(request: Any, version: int) -> tuple[ApiMessage, int]:
        if type(request).__name__ == "SaslHandshakeRequest":
            assert request.mechanism == "PLAIN"
            return SaslHandshakeResponse(mechanisms=["PLAIN"]), version
        assert request.auth_bytes == b"\0alice\0secret"
        return SaslAuthenticateResponse(session_lifetime_ms=60_000), version

    conn: ClientConnection[str] = ClientConnection()
    steps = sasl_authenticate(PlainMechanism("alice", "secret"), versions, "b:1")
    lifetime, seen = run(conn, steps, broker)
    assert lifetime == 60_000
    assert seen == [("SaslHandshakeRequest", 1), ("SaslAuthenticateRequest", 2)]


def test_sasl_failure_and_refused_mechanism_raise_named_errors() -> None:
    versions = {17: (0, 1), 36: (0, 2)}

    def refusing(request: Any, version: int) -> tuple[ApiMessage, int]:
        return SaslHandshakeResponse(error_code=33, mechanisms=["SCRAM-SHA-512"]), version

    def failing(request: Any, version: int) -> tuple[ApiMessage, int]:
        if type(request).__name__ == "SaslHandshakeRequest":
            return SaslHandshakeResponse(mechanisms=["PLAIN"]), version
        return SaslAuthenticateResponse(error_code=58, error_message="bad password"), version

    mechanism = PlainMechanism("alice", "secret")
    with pytest.raises(UnsupportedSaslMechanismError, match="the broker enables SCRAM-SHA-512"):
        run(ClientConnection(), sasl_authenticate(mechanism, versions, "b:1"), refusing)
    with pytest.raises(SaslAuthenticationFailedError, match="bad password"):
        run(ClientConnection(), sasl_authenticate(mechanism, versions, "b:1"), failing)
    with pytest.raises(UnsupportedVersionError, match="SaslHandshake v1"):
        next(sasl_authenticate(mechanism, {17: (0, 0), 36: (0, 2)}, "b:1"))
