"""FakeKafka.answer with RawFrames (bytes written as they are), the correlation and client
ids of Received, and an ApiVersions newer than the node knows (answered in v0). In memory,
on virtual time, asyncio and trio."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.errors import CorrelationIdMismatchError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.framing import encode_response
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataResponse,
    MetadataResponsePartition,
    MetadataResponseTopic,
)
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import RawFrames, Received

pytestmark = pytest.mark.anyio

NODE, METADATA, API_VERSIONS = 1, 3, 18
PIECE = RawFrames.PIECE  # the largest write the fake makes of a raw answer


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def config(kafka: FakeKafka) -> ConnectionConfig:
    return ConnectionConfig(transport=kafka.transport, request_timeout_s=10)


def address(kafka: FakeKafka) -> tuple[str, int]:
    return "127.0.0.1", kafka.nodes[NODE].port


def test_raw_frames_are_written_in_bounded_pieces_in_order() -> None:
    big = bytes(range(256)) * (3 * PIECE // 256 + 7)
    raw = RawFrames(b"ab", memoryview(big)[2:], bytearray(b"z"))
    pieces = list(raw.pieces())
    assert b"".join(pieces) == b"ab" + big[2:] + b"z"
    assert len(raw) == len(big) + 1
    assert max(len(p) for p in pieces) == PIECE


async def test_a_raw_answer_reaches_the_client_byte_for_byte() -> None:
    # Over a megabyte, so it goes out in several pieces, then one frame with the next
    # request's correlation id: the client takes the first and poisons the connection on
    # the second.
    topic = MetadataResponseTopic(
        name="t", partitions=[MetadataResponsePartition(partition_index=p) for p in range(60_000)]
    )
    calls: list[Received] = []

    def raw(call: Received) -> RawFrames:
        calls.append(call)
        frame = encode_response(MetadataResponse(topics=[topic]), call.version, call.correlation_id)
        assert len(frame) > PIECE
        stray = encode_response(MetadataResponse(), call.version, call.correlation_id + 1)
        return RawFrames(frame, stray)

    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.answer(METADATA, raw, times=1)
        async with connect(*address(kafka), config(kafka)) as conn:
            response = await conn.send(MetadataRequest(topics=None))
            assert isinstance(response, MetadataResponse)
            assert len(response.topics[0].partitions) == 60_000
            await conn.wait_closed()
            assert "unsolicited" in conn.close_reason
        (call,) = calls
        handshake, metadata = kafka.received()
        assert metadata is call
        assert (handshake.correlation_id, metadata.correlation_id) == (0, 1)
        assert metadata.client_id == handshake.client_id == "aiokafka-ng"
        await kafka.wait_until(lambda: kafka.open_connections(NODE) == 0)


async def test_a_raw_answer_with_the_wrong_correlation_id_is_a_mismatch() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.answer(
            METADATA,
            lambda call: RawFrames(
                encode_response(MetadataResponse(), call.version, call.correlation_id + 7)
            ),
        )
        async with connect(*address(kafka), config(kafka)) as conn:
            with pytest.raises(CorrelationIdMismatchError):
                await conn.send(MetadataRequest(topics=None))
            assert conn.closed


async def test_an_api_versions_newer_than_the_node_knows_is_answered_in_v0() -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.api_versions[API_VERSIONS] = (0, 1)
        async with connect(*address(kafka), config(kafka)) as conn:
            # The v0 answer (error 35) named the range: the client asked again in v1.
            assert conn.api_versions == kafka.api_versions
        sent = [r.version for r in kafka.received(API_VERSIONS)]
        assert sent == [ApiVersionsRequest.MAX_STABLE_VERSION, 1]
        assert kafka.errors(API_VERSIONS, 35, NODE) == 1  # UNSUPPORTED_VERSION, once
