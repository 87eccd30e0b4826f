"""The test Kafka cluster's process and port helpers: free ports below the ephemeral range,
a child that dies with its parent, a node's listing check, and reading why a node failed.

Split from :mod:`aiokafka_ng.testing._kafka` (the cluster and its nodes), which uses them.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import random
import signal
import socket
import sys
from collections.abc import Callable
from pathlib import Path

import anyio

from aiokafka_ng.testing._kafka_config import HOST

__all__ = [
    "KafkaClusterError",
    "bind_failed",
    "child_setup",
    "die_with_parent",
    "ephemeral_range",
    "first_leaf",
    "free_ports",
    "last_error",
    "listed_brokers",
    "node_gid",
    "port_clash",
    "port_is_free",
]


class KafkaClusterError(RuntimeError):
    """The cluster (or one node) could not start or stop; the first line says why.

    ``reason`` is that line and ``log_tail`` the last lines of the node logs concerned.
    """

    def __init__(self, reason: str, log_tail: str = "") -> None:
        self.reason = reason
        self.log_tail = log_tail
        super().__init__(f"{reason}\n{log_tail}" if log_tail else reason)


async def listed_brokers(port: int, host: str = HOST) -> set[int]:
    """The node ids a Metadata answer from ``host:port`` lists; empty if no answer."""
    from aiokafka_ng.net.connection import ConnectionConfig, connect
    from aiokafka_ng.protocol.messages.metadata import MetadataRequest, MetadataResponse

    config = ConnectionConfig(client_id="aiokafka-ng-testing", connect_timeout_s=2.0)
    try:
        with anyio.fail_after(5.0):
            async with connect(host, port, config) as conn:
                response = await conn.send(MetadataRequest(topics=[]))
    except (Exception, TimeoutError):  # not up yet: refused, reset, timed out, ...
        return set()
    assert isinstance(response, MetadataResponse)
    return {broker.node_id for broker in response.brokers}


def last_error(log_tail: str) -> str:
    """The line of a log tail that best says why a node failed, for a one-line reason."""
    lines = [line.strip() for line in log_tail.splitlines() if line.strip()]
    for marker in ("Exception", "ERROR", "Error", "FATAL"):
        for line in reversed(lines):
            if marker in line:
                return line[:300]
    return lines[-1][:300] if lines else "(no log output)"


def bind_failed(log_path: Path) -> bool:
    try:
        return b"Address already in use" in log_path.read_bytes()
    except OSError:
        return False


def port_clash(exc: KafkaClusterError) -> bool:
    return "is taken" in exc.reason or "Address already in use" in exc.log_tail


def first_leaf(group: BaseExceptionGroup[BaseException]) -> BaseException:
    exc: BaseException = group
    while isinstance(exc, BaseExceptionGroup):
        exc = exc.exceptions[0]
    return exc


def free_ports(count: int, hosts: tuple[str, ...] = (HOST,)) -> list[int]:
    """``count`` distinct ports free on every one of ``hosts``, below the kernel's ephemeral
    range where it allows.

    Why not ``bind(0)``: that hands out a port of the ephemeral range and we release it at
    once, while the node binds it seconds later. In between, the kernel may give the same
    port to any outgoing connection on the machine as its local port -- including the
    first nodes' own connections to the controller quorum, opened while a later node's JVM
    is still booting -- and that node then dies with "Address already in use". Ports below
    the ephemeral range are never handed out implicitly, so only a process that picks the
    very same port on purpose can collide (and :meth:`KafkaCluster.start` retries once).
    """
    low, _high = ephemeral_range()
    pool_start = 10000
    if low - pool_start < 20 * count:  # no room below the range: take what bind(0) gives
        with contextlib.ExitStack() as stack:
            ports: list[int] = []
            for _ in range(20 * count):
                if len(ports) == count:
                    break
                sock = stack.enter_context(socket.socket(socket.AF_INET, socket.SOCK_STREAM))
                sock.bind((HOST, 0))
                port = int(sock.getsockname()[1])
                if all(port_is_free(port, host) for host in hosts if host != HOST):
                    ports.append(port)
            return ports
    rng = random.SystemRandom()
    chosen: list[int] = []
    for port in rng.sample(range(pool_start, low), min(low - pool_start, 50 * count)):
        if all(port_is_free(port, host) for host in hosts):
            chosen.append(port)
            if len(chosen) == count:
                return chosen
    raise KafkaClusterError(f"no {count} free ports between {pool_start} and {low}")


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of implicitly assigned local ports (Linux; else IANA's)."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return 49152, 65535


def port_is_free(port: int, host: str = HOST) -> bool:
    """No listener on ``host:port`` (also :class:`~aiokafka_ng.testing.LocalBroker`'s
    check). SO_REUSEADDR, as the JVM and Tansu (tokio) bind with it: connections left in
    TIME_WAIT by a previous run must not count as "in use", only another listener does."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError:
            return False
        return True


def node_gid(controller_port: int) -> int:
    """The group id a node of an addressable cluster runs under (see ``KafkaCluster``): one
    per node on the machine (its controller port is), so that a packet filter can tell which
    node a packet comes from (``iptables -m owner --gid-owner``)."""
    return _NODE_GID_BASE + controller_port


#: Far above any group a distribution allocates (Debian's dynamic ones end at 59999).
_NODE_GID_BASE = 3_000_000


def child_setup(gid: int | None) -> Callable[[], None]:
    """The ``preexec_fn`` of a node: die with the parent and, if ``gid`` is given, run
    under that group (the user stays: a root JVM still reads every file it did)."""

    def setup() -> None:
        die_with_parent()
        if gid is not None:
            os.setgroups([])
            os.setgid(gid)

    return setup


def die_with_parent() -> None:
    """In the child before exec: be SIGKILLed when the spawning thread's process dies."""
    if sys.platform == "linux":
        pr_set_pdeathsig = 1
        ctypes.CDLL(None).prctl(pr_set_pdeathsig, signal.SIGKILL)
