"""TLS: a TLS-terminating front (``tls_front``: stdlib ssl + anyio) forwarding to a broker.

Tansu's own TLS flags do not work together (/work/shared/TANSU.md), so the test terminates
TLS itself and forwards the plaintext bytes to the real broker. The certificate
(SAN IP:127.0.0.1, signed by a throw-away CA) is made per module with ``trustme``.
"""

from __future__ import annotations

import ssl
from pathlib import Path

import anyio
import pytest
from net_tls_front import tls_front, write_certificate

from aiokafka_ng.errors import KafkaConnectionError, SslAuthenticationError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokafka_ng.testing import LocalBroker
from aiokafka_ng.testing.pytest_plugin import KafkaClusterBroker

pytestmark = pytest.mark.anyio


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return write_certificate(tmp_path_factory.mktemp("tls"))


async def test_tls_connection_through_trusted_certificate(
    kafka_broker: LocalBroker | KafkaClusterBroker, certificate: tuple[Path, Path]
) -> None:
    ca_file, chain = certificate
    client_context = ssl.create_default_context(cafile=str(ca_file))
    config = ConnectionConfig(ssl_context=client_context, request_timeout_s=10)
    async with (
        tls_front(kafka_broker.host, kafka_broker.port, chain) as port,
        connect("127.0.0.1", port, config) as conn,
    ):
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name="tls-topic")], allow_auto_topic_creation=True
        )
        response = await conn.send(request)
        assert isinstance(response, MetadataResponse)
        if isinstance(kafka_broker, LocalBroker):
            expected = [kafka_broker.node_id]
        else:
            expected = sorted(node.node_id for node in kafka_broker.cluster.brokers)
        assert sorted(b.node_id for b in response.brokers) == expected
        assert response.topics[0].name == "tls-topic"
        assert MetadataRequest.API_KEY in conn.api_versions


async def test_untrusted_certificate_is_refused_with_a_clear_error(
    kafka_broker: LocalBroker | KafkaClusterBroker, certificate: tuple[Path, Path]
) -> None:
    _ca_file, chain = certificate
    # The platform's default trust store does not know our self-signed certificate.
    config = ConnectionConfig(ssl_context=ssl.create_default_context(), request_timeout_s=10)
    async with tls_front(kafka_broker.host, kafka_broker.port, chain) as port:
        with anyio.fail_after(10), pytest.raises(KafkaConnectionError) as info:
            async with connect("127.0.0.1", port, config):
                pass
    assert "certificate verification failed" in str(info.value)
    assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
    # Not retriable: the cluster raises it at once instead of retrying until its deadline.
    assert isinstance(info.value, SslAuthenticationError) and not info.value.retriable


async def test_plaintext_client_against_tls_port_fails_not_hangs(
    kafka_broker: LocalBroker | KafkaClusterBroker, certificate: tuple[Path, Path]
) -> None:
    _ca_file, chain = certificate
    async with tls_front(kafka_broker.host, kafka_broker.port, chain) as port:
        with anyio.fail_after(10), pytest.raises(KafkaConnectionError):
            async with connect("127.0.0.1", port, ConnectionConfig(request_timeout_s=2)):
                pass
