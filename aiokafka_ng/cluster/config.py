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
    """``"h1:9092, h2:9093"`` or ``["h1:9092", "[::1]:9093"]`` -> ``[(host, port), ...]``.

    The one parser of bootstrap lists: every client's config, the CLI and the cluster layer
    use it. The port defaults to 9092. An IPv6 literal takes a port only in brackets
    (``[fe80::1]:9092``, RFC 3986 and Kafka's own listener syntax). A bare literal is the
    address alone (``::1`` is ``("::1", 9092)``); where a bare literal could also be read
    as address plus port (``fe80::1:9092``: the address ``fe80::1:9092`` or ``fe80::1`` at
    port 9092) it is refused rather than guessed. Raises :class:`ConfigError` (key
    ``bootstrap_servers``) on an empty list, a bad host, a bad port or a malformed entry.
    """
    items = servers.split(",") if isinstance(servers, str) else list(servers)
    out: list[tuple[str, int]] = []
    for raw in items:
        if not isinstance(raw, str):
            raise _bad(f"bootstrap server must be a 'host:port' string, got {raw!r}")
        item = raw.strip()
        if item:
            out.append(_parse_one(item))
    if not out:
        raise _bad("at least one 'host:port' is required")
    return out


def _parse_one(entry: str) -> tuple[str, int]:
    # Messages quote the entry cut to 80 characters: a pasted blob stays readable.
    item = entry if len(entry) <= 80 else entry[:77] + "..."
    port_s = "9092"
    scheme, found, address = entry.partition("://")
    if found:
        # kafka://, PLAINTEXT://, SASL_SSL://...: a listener's or a URL's form, which the
        # checks below would misname (a colon too many reads as a bad IPv6 address).
        raise _bad(
            f"bootstrap server {item!r} has a scheme ({scheme}://): write host:port alone, "
            f"e.g. {address.strip('/')[:80]!r}; security_protocol sets the protocol"
        )
    if entry.startswith("["):
        host, sep, rest = entry[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise _bad(f"malformed bootstrap server {item!r}")
        if rest:
            port_s = rest[1:]
        if not _is_ipv6(host):
            raise _bad(f"bad IPv6 address in bootstrap server {item!r}")
    elif entry.count(":") > 1:
        host = entry
        if not _is_ipv6(host):
            raise _bad(
                f"bad host in bootstrap server {item!r} "
                "(an IPv6 address with a port is written [address]:port)"
            )
        address, _, last = host.rpartition(":")
        if 0 < (_port(last) or 0) < 65536 and _is_ipv6(address):
            hint = (
                f"write [{address}]:{last} for port {last}, or [{host}] for the address alone"
                if item is entry
                else "bracket the address: [address]:port"
            )
            raise _bad(f"ambiguous bootstrap server {item!r}: {hint}")
    else:
        host, sep, rest = entry.partition(":")
        if sep:
            port_s = rest
        # Letters (IDN names too), digits, '-', '.', '_': what a host name or an IPv4
        # address is made of; "http://h" or "h/1" is a mistake to name now, not a
        # name-resolution failure to puzzle over later.
        if not host or not all(c.isalnum() or c in "-._" for c in host):
            raise _bad(f"bad host in bootstrap server {item!r}")
    port = _port(port_s)
    if port is None:
        raise _bad(f"bad port in bootstrap server {item!r}")
    if not 0 < port < 65536:
        raise _bad(f"port out of range (1-65535) in bootstrap server {item!r}")
    return host, port


def _is_ipv6(text: str) -> bool:
    # ipaddress takes any text after "%" as the zone (scope id), spaces and NULs too; a
    # zone names an interface, so it is held to the host-name characters.
    _, _, zone = text.partition("%")
    if not all(c.isalnum() or c in "-._" for c in zone):
        return False
    try:
        ipaddress.IPv6Address(text)
    except ValueError:
        return False
    return True


def _port(text: str) -> int | None:
    """The number ``text`` spells in ASCII digits, else None. Leading zeros are allowed
    (as Java allows them); longer numbers are capped at 65536, out of range, so a
    5000-digit "port" costs nothing and never meets ``int``'s digit limit."""
    if not text.isascii() or not text.isdigit():
        return None
    digits = text.lstrip("0")
    return int(digits or "0") if len(digits) <= 5 else 65536


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
    #: KIP-899/KIP-1102 (Java's ``metadata.recovery.strategy``): "rebootstrap" goes back to
    #: ``bootstrap_servers`` when no broker of the last metadata has answered a Metadata
    #: request for ``metadata_recovery_rebootstrap_trigger_ms``; "none" keeps trying them.
    metadata_recovery_strategy: str = "rebootstrap"
    metadata_recovery_rebootstrap_trigger_ms: float = 300_000
    #: KIP-1242: connections to brokers the metadata named send its cluster id and their
    #: node id (ApiVersions v5); a broker that is another answers REBOOTSTRAP_REQUIRED and
    #: the client re-bootstraps. Only with metadata_recovery_strategy "rebootstrap".
    metadata_cluster_check_enable: bool = True

    def __post_init__(self) -> None:
        if not self.bootstrap_servers:
            raise _bad("at least one (host, port) is required")
