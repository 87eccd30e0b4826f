"""A scripted Kafka server for connection tests (127.0.0.1, real sockets, our codec).

It speaks the framing through the codec's server-side helpers (``decode_request`` /
``encode_response``). ApiVersions is answered automatically (optionally the way a broker
answers a version it does not know: v0 format, error 35); ``responders`` answer other APIs
at once; every other request is queued on :attr:`FakeKafka.requests` so the test decides
when and how (in order, out of order, garbage, never) to answer it.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import anyio.abc

from aiokafka_ng.protocol.framing import (
    FrameReader,
    RequestHeader,
    decode_request,
    encode_response,
)
from aiokafka_ng.protocol.messages import REQUEST_TYPES
from aiokafka_ng.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from aiokafka_ng.protocol.primitives import ApiMessage

Responder = Callable[["FakeConnection", RequestHeader, ApiMessage], ApiMessage | None]

API_VERSIONS_KEY = 18


def all_api_versions() -> dict[int, tuple[int, int]]:
    """Every API our codec knows, advertised over its whole stable range."""
    return {key: (cls.MIN_VERSION, cls.MAX_STABLE_VERSION) for key, cls in REQUEST_TYPES.items()}


@dataclass(eq=False)
class FakeConnection:
    """The server side of one accepted client connection."""

    stream: anyio.abc.ByteStream
    closed: anyio.Event = field(default_factory=anyio.Event)
    seen: list[tuple[int, int]] = field(default_factory=list)  # (api_key, api_version)
    state: dict[str, object] = field(default_factory=dict)  # for stateful responders

    async def reply(self, header: RequestHeader, response: ApiMessage) -> None:
        await self.send_raw(encode_response(response, header.api_version, header.correlation_id))

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send(data)

    async def close(self) -> None:
        await anyio.aclose_forcefully(self.stream)


@dataclass(eq=False)
class Received:
    """A queued request awaiting the test's answer."""

    conn: FakeConnection
    header: RequestHeader
    request: ApiMessage

    async def reply(self, response: ApiMessage) -> None:
        await self.conn.reply(self.header, response)


class FakeKafka:
    def __init__(
        self,
        *,
        api_versions: dict[int, tuple[int, int]] | None = None,
        api_versions_max: int | None = None,
        advertise_on_unsupported: bool = True,
        responders: dict[int, Responder] | None = None,
    ) -> None:
        self.api_versions = api_versions if api_versions is not None else all_api_versions()
        # Highest ApiVersions version "this broker" understands; above it, answer like Kafka.
        self.api_versions_max = api_versions_max
        self.advertise_on_unsupported = advertise_on_unsupported
        self.responders = dict(responders or {})
        self.connections: list[FakeConnection] = []
        self.api_versions_requests: list[ApiMessage] = []
        self.connected = anyio.Event()
        self.port = 0
        self._send, self.requests = anyio.create_memory_object_stream[Received](100)

    def _api_versions_reply(self, conn: FakeConnection, header: RequestHeader) -> bytes:
        if self.api_versions_max is not None and header.api_version > self.api_versions_max:
            keys = (
                [ApiVersion(API_VERSIONS_KEY, 0, self.api_versions_max)]
                if self.advertise_on_unsupported
                else []
            )
            # What Kafka does for an ApiVersions version it does not know: a v0 body.
            response = ApiVersionsResponse(error_code=35, api_keys=keys)
            return encode_response(response, 0, header.correlation_id)
        response = ApiVersionsResponse(
            api_keys=[ApiVersion(k, lo, hi) for k, (lo, hi) in sorted(self.api_versions.items())]
        )
        return encode_response(response, header.api_version, header.correlation_id)

    async def _handle(self, stream: anyio.abc.ByteStream) -> None:
        conn = FakeConnection(stream)
        self.connections.append(conn)
        self.connected.set()
        frames = FrameReader()
        try:
            async with stream:
                while True:
                    frames.feed(await stream.receive())
                    while (frame := frames.next_frame()) is not None:
                        header, request = decode_request(frame)
                        conn.seen.append((header.api_key, header.api_version))
                        if header.api_key == API_VERSIONS_KEY:
                            self.api_versions_requests.append(request)
                            await conn.send_raw(self._api_versions_reply(conn, header))
                            continue
                        responder = self.responders.get(header.api_key)
                        if responder is not None:
                            response = responder(conn, header, request)
                            if response is not None:
                                await conn.reply(header, response)
                            continue
                        await self._send.send(Received(conn, header, request))
        except (anyio.EndOfStream, anyio.BrokenResourceError, anyio.ClosedResourceError):
            pass
        finally:
            conn.closed.set()

    @asynccontextmanager
    async def serve(self) -> AsyncIterator[FakeKafka]:
        listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        async with listener, self._send, self.requests, anyio.create_task_group() as tg:
            tg.start_soon(listener.serve, self._handle)
            try:
                yield self
            finally:
                tg.cancel_scope.cancel()

    async def next_request(self) -> Received:
        with anyio.fail_after(10):
            return await self.requests.receive()

    def pending_requests(self) -> int:
        return self.requests.statistics().current_buffer_used
