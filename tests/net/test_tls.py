"""TLS: a TLS-terminating front (written here, stdlib ssl + anyio) forwarding to LocalBroker.

Tansu's own TLS flags do not work together (/work/shared/TANSU.md), so the test terminates
TLS itself and forwards the plaintext bytes to the real broker. The certificate
(SAN IP:127.0.0.1, signed by a throw-away CA) is made per module with ``trustme``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import pytest
import trustme
from anyio.streams.tls import TLSListener

from aiokafka_ng.errors import KafkaConnectionError, SslAuthenticationError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages.metadata import (
    MetadataRequest,
    MetadataRequestTopic,
    MetadataResponse,
)
from aiokafka_ng.testing import LocalBroker

pytestmark = pytest.mark.anyio

_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A CA-signed server certificate for IP 127.0.0.1, as (CA cert, server cert+key) files."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
    directory = tmp_path_factory.mktemp("tls")
    ca_file, chain_file = directory / "ca.pem", directory / "server.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    server.private_key_and_cert_chain_pem.write_to_path(str(chain_file))
    return ca_file, chain_file


async def _pump(source: anyio.abc.ByteStream, sink: anyio.abc.ByteStream) -> None:
    try:
        async for chunk in source:
            await sink.send(chunk)
    except _STREAM_ERRORS:
        pass


@asynccontextmanager
async def tls_front(broker: LocalBroker, chain: Path) -> AsyncIterator[int]:
    """Terminate TLS on a free 127.0.0.1 port and forward each connection to ``broker``."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(chain)
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener = TLSListener(tcp, server_context, standard_compatible=False)

    async def forward(client: anyio.abc.ByteStream) -> None:
        upstream = await anyio.connect_tcp(broker.host, broker.port)
        async with client, upstream, anyio.create_task_group() as tg:

            async def one_way(a: anyio.abc.ByteStream, b: anyio.abc.ByteStream) -> None:
                await _pump(a, b)
                tg.cancel_scope.cancel()  # either side gone: tear the pair down

            tg.start_soon(one_way, client, upstream)
            tg.start_soon(one_way, upstream, client)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, forward)
        try:
            yield port
        finally:
            tg.cancel_scope.cancel()


async def test_tls_connection_through_trusted_certificate(
    kafka_broker: LocalBroker, certificate: tuple[Path, Path]
) -> None:
    ca_file, chain = certificate
    client_context = ssl.create_default_context(cafile=str(ca_file))
    config = ConnectionConfig(ssl_context=client_context, request_timeout_s=10)
    async with (
        tls_front(kafka_broker, chain) as port,
        connect("127.0.0.1", port, config) as conn,
    ):
        request = MetadataRequest(
            topics=[MetadataRequestTopic(name="tls-topic")], allow_auto_topic_creation=True
        )
        response = await conn.send(request)
        assert isinstance(response, MetadataResponse)
        assert [b.node_id for b in response.brokers] == [kafka_broker.node_id]
        assert response.topics[0].name == "tls-topic"
        assert MetadataRequest.API_KEY in conn.api_versions


async def test_untrusted_certificate_is_refused_with_a_clear_error(
    kafka_broker: LocalBroker, certificate: tuple[Path, Path]
) -> None:
    _ca_file, chain = certificate
    # The platform's default trust store does not know our self-signed certificate.
    config = ConnectionConfig(ssl_context=ssl.create_default_context(), request_timeout_s=10)
    async with tls_front(kafka_broker, chain) as port:
        with anyio.fail_after(10), pytest.raises(KafkaConnectionError) as info:
            async with connect("127.0.0.1", port, config):
                pass
    assert "certificate verification failed" in str(info.value)
    assert isinstance(info.value.__cause__, ssl.SSLCertVerificationError)
    # Not retriable: the cluster raises it at once instead of retrying until its deadline.
    assert isinstance(info.value, SslAuthenticationError) and not info.value.retriable


async def test_plaintext_client_against_tls_port_fails_not_hangs(
    kafka_broker: LocalBroker, certificate: tuple[Path, Path]
) -> None:
    _ca_file, chain = certificate
    async with tls_front(kafka_broker, chain) as port:
        with anyio.fail_after(10), pytest.raises(KafkaConnectionError):
            async with connect("127.0.0.1", port, ConnectionConfig(request_timeout_s=2)):
                pass
