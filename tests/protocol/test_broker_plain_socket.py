"""The codec against the real broker, with nothing but a blocking socket in between.

This proves the generated messages and the framing speak the broker's language before any
of our I/O layers are involved.
"""

from __future__ import annotations

import socket
import struct
from typing import Any

from aiokafka_ng.protocol.framing import decode_response, encode_request
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)


def _recv_exact(sock: socket.socket, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        assert chunk, "broker closed the connection"
        buf += chunk
    return bytes(buf)


def _roundtrip(sock: socket.socket, request: Any, version: int, correlation_id: int) -> Any:
    sock.sendall(encode_request(request, version, correlation_id, "plain-socket-test"))
    (size,) = struct.unpack(">i", _recv_exact(sock, 4))
    cid, response = decode_response(request.RESPONSE_TYPE, version, _recv_exact(sock, size))
    assert cid == correlation_id
    return response


def test_api_versions_v3_and_metadata(kafka_broker: Any) -> None:
    with socket.create_connection((kafka_broker.host, kafka_broker.port), timeout=10) as sock:
        versions = _roundtrip(
            sock,
            ApiVersionsRequest(client_software_name="aiokafka-ng", client_software_version="0"),
            3,
            1,
        )
        assert isinstance(versions, ApiVersionsResponse)
        assert versions.error_code == 0
        advertised = {k.api_key: (k.min_version, k.max_version) for k in versions.api_keys}
        # TANSU.md lists what the broker advertises; spot-check a few ranges.
        assert advertised[MetadataRequest.API_KEY] == (0, 12)
        assert advertised[ApiVersionsRequest.API_KEY][1] >= 3
        assert advertised[0] == (0, 11)  # Produce

        for version, cid in ((12, 2), (9, 3), (1, 4)):
            topic = f"plain-socket-{version}"
            request = MetadataRequest(
                topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
            )
            metadata = _roundtrip(sock, request, version, cid)
            assert isinstance(metadata, MetadataResponse)
            assert [b.node_id for b in metadata.brokers] == [111]
            assert metadata.brokers[0].port == kafka_broker.port
            (answer,) = metadata.topics
            assert answer.name == topic
            assert answer.error_code == 0
            # Tansu auto-creates unknown topics with 4 partitions, all led by itself.
            assert sorted(p.partition_index for p in answer.partitions) == [0, 1, 2, 3]
            assert {p.leader_id for p in answer.partitions} == {111}
