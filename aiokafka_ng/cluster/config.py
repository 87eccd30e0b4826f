"""Cluster layer settings and the bootstrap-servers parser."""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

from aiokafka_ng.errors import ConfigError
from aiokafka_ng.net.connection import ConnectionConfig

__all__ = ["ClusterConfig", "describe_servers", "parse_bootstrap_servers"]

#: How many bootstrap servers a log line or an error message names before "and N more".
SHOWN_SERVERS = 3


def _bad(problem: str) -> ConfigError:
    return ConfigError({"bootstrap_servers": problem})


def parse_bootstrap_servers(servers: str | Iterable[str]) -> list[tuple[str, int]]:
    """``"h1:9092,h2:9093"`` or ``["h1:9092", "[::1]:9093"]`` -> ``[(host, port), ...]``.

    The port defaults to 9092. IPv6 literals must be bracketed when a port follows
    (``[::1]:9092``); a bare ``::1`` is taken as a host without port. Raises
    :class:`ConfigError` on an empty list, a bad port or a malformed entry.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        if not isinstance(raw, str):
            raise _bad(f"bootstrap server must be a 'host:port' string, got {raw!r}")
        item = raw.strip()
        if not item:
            continue
        if item.startswith("["):
            host, sep, rest = item[1:].partition("]")
            if not sep or (rest and not rest.startswith(":")):
                raise _bad(f"malformed bootstrap server {item!r}")
            port_s = rest[1:] if rest else "9092"
            try:
                ipaddress.IPv6Address(host)
            except ValueError:
                raise _bad(f"bad IPv6 address in bootstrap server {item!r}") from None
        elif item.count(":") > 1:
            host, port_s = item, "9092"  # bare IPv6 literal, no port
        else:
            host, _, port_s = item.partition(":")
            port_s = port_s or ("9092" if ":" not in item else "")
        if not host or any(c.isspace() for c in host):
            raise _bad(f"bad host in bootstrap server {item!r}")
        if not port_s.isdigit() or not 0 < int(port_s) < 65536:
            raise _bad(f"bad port in bootstrap server {item!r}")
        out.append((host, int(port_s)))
    if not out:
        raise _bad("at least one 'host:port' is required")
    return out


def describe_servers(servers: Sequence[tuple[str, int]], shown: int = SHOWN_SERVERS) -> str:
    """``"h1:9092, h2:9092, h3:9092 and 997 more"``: the bootstrap list for a log line or
    an error message, bounded (a list of a thousand hosts would otherwise make every
    "no answer" warning 17 KB long). The full list stays in ``ClientStatus``."""
    named = ", ".join(f"{h}:{p}" for h, p in servers[:shown])
    rest = len(servers) - shown
    return f"{named} and {rest} more" if rest > 0 else named


@dataclass(frozen=True, slots=True)
class ClusterConfig:
    """Settings of the cluster layer. Times in milliseconds, as Kafka names them."""

    bootstrap_servers: list[tuple[str, int]]
    #: For logs and users' reference; the id sent on the wire is ``connection.client_id``.
    client_id: str | None = "aiokafka-ng"
    #: What kind of client this cluster serves, for logs: ``"producer web-1: lost broker
    #: 111 at ..."`` tells a producer from a consumer sharing the default client id.
    role: str = "client"
    connection: ConnectionConfig = field(default_factory=ConnectionConfig)
    retry_backoff_ms: float = 100
    retry_backoff_max_ms: float = 1000
    reconnect_backoff_ms: float = 50
    reconnect_backoff_max_ms: float = 1000
    metadata_max_age_ms: float = 300_000
    connections_max_idle_ms: float = 540_000
    allow_auto_topic_creation: bool = True
    #: How long ``async with Cluster(...)`` keeps trying the bootstrap servers.
    bootstrap_timeout_ms: float = 30_000
    #: False: ``async with Cluster(...)`` returns at once and bootstrap runs in the
    #: background under the retry backoff (what the clients use: they start without the
    #: cluster, like the Java client); ``wait_ready()`` waits for it.
    wait_for_bootstrap: bool = True

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise _bad("at least one (host, port) is required")
