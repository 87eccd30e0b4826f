"""An in-test fake Kafka cluster speaking the real protocol over 127.0.0.1 TCP.

Used for what Tansu (the LocalBroker) lacks or answers wrongly (see TANSU.md): each node
is an anyio TCP listener that splits frames with ``FrameReader``, decodes requests with the
codec's server-side ``decode_request`` and answers with canned responses. ApiVersions and
Metadata have defaults (every API the codec knows, unless removed; the fake's brokers and
controller); a test installs a handler per API key for the rest.

A handler is ``handler(node_id, request, version) -> response``, where the response is a
generated message (encoded at the request's version), raw ``bytes`` (the response *body*,
framed here -- byte-level canned answers), or None (drop the connection).
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import anyio
from anyio.abc import SocketStream

from aiokafka_ng.protocol import framing
from aiokafka_ng.protocol.messages import REQUEST_TYPES
from aiokafka_ng.protocol.messages.api_versions import ApiVersion, ApiVersionsResponse
from aiokafka_ng.protocol.messages.metadata import (
    MetadataResponse,
    MetadataResponseBroker,
    MetadataResponsePartition,
    MetadataResponseTopic,
)

Handler = Callable[[int, Any, int], Any]

API_VERSIONS = 18
METADATA = 3


@dataclass
class Received:
    node_id: int
    api_key: int
    version: int
    request: Any
    at: float  # anyio.current_time() when it arrived


# Stays a wire-level broker, not a ScriptedCluster: the admin client builds its own real
# Cluster from bootstrap servers, so what it talks to must be sockets speaking the protocol.
@dataclass
class FakeCluster:
    """Nodes ``node_ids`` on free ports; ``controller`` is what Metadata reports."""

    node_ids: tuple[int, ...] = (1,)
    controller: int = 1
    #: topic -> partition count; every partition is led by ``leaders.get((t, p), first node)``
    topics: dict[str, int] = field(default_factory=dict)
    leaders: dict[tuple[str, int], int] = field(default_factory=dict)
    #: API keys not advertised in ApiVersions (simulates a broker lacking them)
    missing_apis: set[int] = field(default_factory=set)
    #: max version advertised per API key (default: the codec's highest stable)
    max_versions: dict[int, int] = field(default_factory=dict)
    handlers: dict[int, Handler] = field(default_factory=dict)
    received: list[Received] = field(default_factory=list)
    ports: dict[int, int] = field(default_factory=dict)

    @property
    def bootstrap_servers(self) -> str:
        return f"127.0.0.1:{self.ports[self.node_ids[0]]}"

    def requests(self, api_key: int) -> list[Received]:
        return [r for r in self.received if r.api_key == api_key]

    @asynccontextmanager
    async def running(self) -> AsyncIterator[FakeCluster]:
        listeners = {}
        for node in self.node_ids:
            listener = await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=0)
            listeners[node] = listener
            self.ports[node] = listener.extra(anyio.abc.SocketAttribute.local_port)
        try:
            async with anyio.create_task_group() as tg:
                for node, listener in listeners.items():
                    tg.start_soon(listener.serve, self._serve_factory(node))
                try:
                    yield self
                finally:
                    tg.cancel_scope.cancel()
        finally:
            for listener in listeners.values():
                await listener.aclose()

    # ------------------------------------------------------------------ default answers

    def _api_versions(self) -> ApiVersionsResponse:
        keys = []
        for key, cls in sorted(REQUEST_TYPES.items()):
            if key in self.missing_apis:
                continue
            top = self.max_versions.get(key, cls.MAX_STABLE_VERSION)
            keys.append(ApiVersion(api_key=key, min_version=cls.MIN_VERSION, max_version=top))
        return ApiVersionsResponse(error_code=0, api_keys=keys)

    def _metadata(self, request: Any) -> MetadataResponse:
        wanted = (
            list(self.topics)
            if request.topics is None
            else [t.name for t in request.topics if t.name is not None]
        )
        topics = []
        for name in wanted:
            if name not in self.topics:
                topics.append(MetadataResponseTopic(error_code=3, name=name))
                continue
            parts = []
            for p in range(self.topics[name]):
                leader = self.leaders.get((name, p), self.node_ids[0])
                parts.append(
                    MetadataResponsePartition(
                        partition_index=p,
                        leader_id=leader,
                        leader_epoch=0,
                        replica_nodes=[leader],
                        isr_nodes=[leader],
                    )
                )
            topics.append(
                MetadataResponseTopic(
                    name=name, topic_id=uuid.uuid5(uuid.NAMESPACE_DNS, name), partitions=parts
                )
            )
        return MetadataResponse(
            brokers=[
                MetadataResponseBroker(node_id=n, host="127.0.0.1", port=self.ports[n])
                for n in self.node_ids
            ],
            cluster_id="fake-cluster",
            controller_id=self.controller,
            topics=topics,
        )

    # ------------------------------------------------------------------ serving

    def _serve_factory(self, node: int) -> Callable[[SocketStream], Any]:
        async def serve(stream: SocketStream) -> None:
            async with stream:
                reader = framing.FrameReader()
                while True:
                    try:
                        data = await stream.receive()
                    except (anyio.EndOfStream, anyio.BrokenResourceError):
                        return
                    reader.feed(data)
                    while (frame := reader.next_frame()) is not None:
                        out = self._answer(node, frame)
                        if out is None:
                            return  # the handler asked to drop the connection
                        try:
                            await stream.send(out)
                        except (anyio.BrokenResourceError, anyio.ClosedResourceError):
                            return

        return serve

    def _answer(self, node: int, frame: bytes) -> bytes | None:
        header, request = framing.decode_request(frame)
        self.received.append(
            Received(node, header.api_key, header.api_version, request, anyio.current_time())
        )
        handler = self.handlers.get(header.api_key)
        response: Any
        if handler is not None:
            response = handler(node, request, header.api_version)
        elif header.api_key == API_VERSIONS:
            response = self._api_versions()
        elif header.api_key == METADATA:
            response = self._metadata(request)
        else:
            raise AssertionError(f"fake broker has no handler for API key {header.api_key}")
        if response is None:
            return None
        if isinstance(response, bytes):
            return frame_body(header.api_key, header.api_version, header.correlation_id, response)
        return framing.encode_response(response, header.api_version, header.correlation_id)


def frame_body(api_key: int, version: int, correlation_id: int, body: bytes) -> bytes:
    """Size prefix + response header + ``body`` (hand-written response bytes)."""
    out = bytearray(correlation_id.to_bytes(4, "big", signed=True))
    if framing.response_header_version(api_key, version) >= 1:
        out += b"\x00"  # no tagged fields in the header
    out += body
    return len(out).to_bytes(4, "big") + bytes(out)
