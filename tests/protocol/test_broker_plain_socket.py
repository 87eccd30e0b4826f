"""The codec against the real broker, with nothing but a blocking socket in between.

This proves the generated messages and the framing speak the broker's language before any
of our I/O layers are involved.
"""

from __future__ import annotations

import socket
import struct
import time
import uuid
from typing import Any

from aiokafka_ng.protocol.framing import decode_response, encode_request
from aiokafka_ng.protocol.messages.api_versions import ApiVersionsRequest, ApiVersionsResponse
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokafka_ng.testing import LocalBroker


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
    tansu = isinstance(kafka_broker, LocalBroker)
    if tansu:
        nodes, first = {111}, 111
    else:
        nodes = {node.node_id for node in kafka_broker.cluster.brokers}
        first = kafka_broker.cluster.brokers[0].node_id  # the node at host:port
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
        assert advertised[ApiVersionsRequest.API_KEY][1] >= 3
        if tansu:  # TANSU.md lists what the broker advertises; spot-check a few ranges.
            assert advertised[MetadataRequest.API_KEY] == (0, 12)
            assert advertised[0] == (0, 11)  # Produce
        else:  # Apache Kafka 4.4 advertises newer maxima
            low, high = advertised[MetadataRequest.API_KEY]
            assert low <= 1 and high >= 12
            assert advertised[0][1] >= 11  # Produce

        cid = 2
        for version in (12, 9, 1):
            topic = f"plain-socket-{version}-{uuid.uuid4().hex[:8]}"
            request = MetadataRequest(
                topics=[MetadataRequestTopic(name=topic)], allow_auto_topic_creation=True
            )
            # Kafka answers LEADER_NOT_AVAILABLE until the auto-created topic has leaders.
            deadline = time.monotonic() + 30
            while True:
                metadata = _roundtrip(sock, request, version, cid)
                cid += 1
                (answer,) = metadata.topics
                led = answer.partitions and all(p.leader_id >= 0 for p in answer.partitions)
                if (answer.error_code == 0 and led) or time.monotonic() > deadline:
                    break
                time.sleep(0.05)  # polling the broker's view, not a timing guess
            assert isinstance(metadata, MetadataResponse)
            assert {b.node_id for b in metadata.brokers} == nodes
            assert {b.port for b in metadata.brokers if b.node_id == first} == {kafka_broker.port}
            assert answer.name == topic
            assert answer.error_code == 0
            # Both auto-create unknown topics with 4 partitions (the Kafka fixture sets
            # num.partitions=4), led by the cluster's nodes.
            assert sorted(p.partition_index for p in answer.partitions) == [0, 1, 2, 3]
            assert {p.leader_id for p in answer.partitions} <= nodes
