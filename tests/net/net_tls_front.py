"""A TLS-terminating front for tests (stdlib ssl + anyio), shared by the TLS and SASL tests.

Tansu's own TLS flags do not work together (/work/shared/TANSU.md), so tests terminate TLS
here and forward the plaintext bytes to a real broker or to a fake one. The certificate
(SAN IP:127.0.0.1, signed by a throw-away CA) is made with ``trustme``.
"""

from __future__ import annotations

import ssl
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

import anyio
import anyio.abc
import trustme
from anyio.streams.tls import TLSListener

_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, anyio.EndOfStream, OSError)


def write_certificate(directory: Path) -> tuple[Path, Path]:
    """A CA-signed server certificate for IP 127.0.0.1, as (CA cert, server cert+key) files."""
    ca = trustme.CA()
    server = ca.issue_cert("127.0.0.1")
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
async def tls_front(host: str, port: int, chain: Path) -> AsyncIterator[int]:
    """Terminate TLS on a free 127.0.0.1 port and forward each connection to host:port."""
    server_context = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_context.load_cert_chain(chain)
    tcp = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
    front_port = tcp.extra(anyio.abc.SocketAttribute.local_port)
    listener = TLSListener(tcp, server_context, standard_compatible=False)

    async def forward(client: anyio.abc.ByteStream) -> None:
        upstream = await anyio.connect_tcp(host, port)
        async with client, upstream, anyio.create_task_group() as tg:

            async def one_way(a: anyio.abc.ByteStream, b: anyio.abc.ByteStream) -> None:
                await _pump(a, b)
                tg.cancel_scope.cancel()  # either side gone: tear the pair down

            tg.start_soon(one_way, client, upstream)
            tg.start_soon(one_way, upstream, client)

    async with listener, anyio.create_task_group() as tg:
        tg.start_soon(listener.serve, forward)
        try:
            yield front_port
        finally:
            tg.cancel_scope.cancel()
