"""TcpProxy: a byte-forwarding TCP proxy on 127.0.0.1 in front of one broker address.

Usage::

    async with LocalBroker() as old, TcpProxy(old) as proxy:
        client = make_client(bootstrap_servers=proxy.bootstrap_servers)
        ...
        proxy.set_upstream(new)   # new connections reach another broker: the same address,
                                  # a new cluster behind it (a DNS name or load balancer moved)
        proxy.cut()               # close every connection through it

Nothing is decoded or rewritten: the client sees the broker's own node ids and advertised
addresses, so after bootstrap it connects to the broker directly. For faults inside a
cluster (leaders, coordinators, errors, delays) use :class:`~aiokafka_ng.testing.FakeKafka`;
this proxy is for what only a real broker can show behind one stable address.
"""

from __future__ import annotations

from types import TracebackType
from typing import Protocol, Self

import anyio
import anyio.abc

__all__ = ["BrokerAddress", "TcpProxy"]

LOOPBACK = "127.0.0.1"
_STREAM_ERRORS = (anyio.BrokenResourceError, anyio.ClosedResourceError, OSError)


class BrokerAddress(Protocol):
    """Anything with a loopback ``host`` and a ``port``, e.g. a LocalBroker."""

    @property
    def host(self) -> str: ...

    @property
    def port(self) -> int: ...


def _loopback(broker: BrokerAddress) -> tuple[str, int]:
    host = str(broker.host)
    if host not in (LOOPBACK, "localhost"):
        raise ValueError(f"the upstream broker must be on {LOOPBACK}, not {host}")
    return (LOOPBACK, int(broker.port))


class TcpProxy:
    """Forward connections to ``127.0.0.1:<port>`` to ``upstream`` (loopback only).

    Args:
        upstream: the broker (``.host``/``.port``) new connections go to.
        max_connections: connections open at once; more are closed on accept.
    """

    def __init__(self, upstream: BrokerAddress, *, max_connections: int = 256) -> None:
        self.upstream = _loopback(upstream)
        self.max_connections = max_connections
        #: Connections accepted and forwarded.
        self.connections = 0
        self.port = 0
        self._open: set[anyio.CancelScope] = set()
        self._tg: anyio.abc.TaskGroup | None = None
        self._listener: anyio.abc.SocketListener | None = None

    def __repr__(self) -> str:
        return f"<TcpProxy 127.0.0.1:{self.port} -> {self.upstream[0]}:{self.upstream[1]}>"

    @property
    def bootstrap_servers(self) -> str:
        return f"{LOOPBACK}:{self.port}"

    def set_upstream(self, upstream: BrokerAddress) -> None:
        """Send new connections to ``upstream`` from now on (open ones stay)."""
        self.upstream = _loopback(upstream)

    def open_connections(self) -> int:
        return len(self._open)

    def cut(self) -> None:
        """Close every open connection (both of its sides)."""
        for scope in list(self._open):
            scope.cancel()

    async def __aenter__(self) -> Self:
        multi = await anyio.create_tcp_listener(local_host=LOOPBACK, local_port=0)
        (listener,) = multi.listeners
        assert isinstance(listener, anyio.abc.SocketListener)
        self.port = listener.extra(anyio.abc.SocketAttribute.local_port)
        self._listener = listener
        tg = anyio.create_task_group()
        await tg.__aenter__()
        self._tg = tg
        tg.start_soon(self._accept_loop, listener)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        tg, self._tg = self._tg, None
        if tg is None:
            return
        tg.cancel_scope.cancel()
        await tg.__aexit__(None, None, None)
        if self._listener is not None:
            await self._listener.aclose()

    async def _accept_loop(self, listener: anyio.abc.SocketListener) -> None:
        assert self._tg is not None
        while True:
            try:
                client = await listener.accept()
            except (anyio.ClosedResourceError, OSError):
                return
            if len(self._open) >= self.max_connections:
                await client.aclose()
                continue
            self.connections += 1
            scope = anyio.CancelScope()
            self._open.add(scope)
            self._tg.start_soon(self._forward, client, self.upstream, scope)

    async def _forward(
        self, client: anyio.abc.SocketStream, upstream: tuple[str, int], scope: anyio.CancelScope
    ) -> None:
        try:
            with scope:
                async with client:
                    try:
                        server = await anyio.connect_tcp(*upstream)
                    except OSError:
                        return  # upstream down: the client sees its connection close
                    async with server, anyio.create_task_group() as tg:
                        tg.start_soon(_pump, client, server, tg.cancel_scope)
                        tg.start_soon(_pump, server, client, tg.cancel_scope)
        finally:
            self._open.discard(scope)


async def _pump(
    source: anyio.abc.SocketStream, sink: anyio.abc.SocketStream, both: anyio.CancelScope
) -> None:
    """Copy bytes until either side closes, then close the pair."""
    try:
        async for chunk in source:
            await sink.send(chunk)
    except _STREAM_ERRORS:
        pass
    both.cancel()
