"""A long bootstrap list stays out of log lines and error messages.

The servers are 1,000 closed ports on 127.0.0.1: each is held by a socket that is bound and
never listens, so the kernel refuses every connection at once (no timeouts to wait out) and
no other process can take the port while the test runs. No broker is involved: what is
tested is what the client says when none answers.
"""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator

import anyio
import pytest

from aiokafka_ng.admin import AdminClient, NewTopic
from aiokafka_ng.cluster import Cluster, ClusterConfig, describe_servers
from aiokafka_ng.errors import KafkaConnectionError, KafkaError, KafkaTimeoutError

N = 1000
#: What a bounded message may take: three host:port, "and 997 more", and the last error.
LIMIT = 500


@pytest.fixture(scope="module")
def closed_ports() -> Iterator[list[tuple[str, int]]]:
    socks = []
    try:
        for _ in range(N):
            s = socket.socket()
            s.bind(("127.0.0.1", 0))  # bound, not listening: connections are refused
            socks.append(s)
        yield [("127.0.0.1", s.getsockname()[1]) for s in socks]
    finally:
        for s in socks:
            s.close()


def _fast(servers: list[tuple[str, int]], **overrides: float | bool) -> ClusterConfig:
    return ClusterConfig(
        bootstrap_servers=servers,
        retry_backoff_ms=10,
        retry_backoff_max_ms=50,
        reconnect_backoff_ms=10,
        reconnect_backoff_max_ms=50,
        **overrides,  # type: ignore[arg-type]
    )


def test_describe_servers_names_the_first_three_and_counts_the_rest() -> None:
    hosts = [(f"h{i}", 9000 + i) for i in range(5)]
    assert describe_servers(hosts[:1]) == "h0:9000"
    assert describe_servers(hosts[:3]) == "h0:9000, h1:9001, h2:9002"
    assert describe_servers(hosts[:4]) == "h0:9000, h1:9001, h2:9002 and 1 more"
    assert describe_servers(hosts, shown=1) == "h0:9000 and 4 more"


class _Waiter(logging.Handler):
    """Sets an event when the "no answer" warning is logged (logging runs in the event
    loop's thread here, inside the refresher task, so setting an anyio event is safe)."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.records: list[logging.LogRecord] = []
        self.seen = anyio.Event()

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)
        if "no answer from bootstrap servers" in record.getMessage():
            self.seen.set()


@pytest.mark.anyio
async def test_no_answer_warning_and_wait_ready_error_are_bounded(
    closed_ports: list[tuple[str, int]],
) -> None:
    first = f"127.0.0.1:{closed_ports[0][1]}"
    logger = logging.getLogger("aiokafka_ng.cluster.refresher")
    waiter = _Waiter()
    logger.addHandler(waiter)
    try:
        async with Cluster(_fast(closed_ports, wait_for_bootstrap=False)) as cluster:
            with anyio.fail_after(20):
                await waiter.seen.wait()
            with pytest.raises(KafkaTimeoutError) as info:
                await cluster.wait_ready(timeout=0.05)
            assert cluster.status("running").bootstrap_servers.count(",") == N - 1  # all kept
    finally:
        logger.removeHandler(waiter)
    (line,) = [r.getMessage() for r in waiter.records if "no answer" in r.getMessage()]
    assert first in line and f"and {N - 3} more" in line
    assert len(line) < LIMIT, line
    message = str(info.value)
    assert first in message and f"and {N - 3} more" in message
    assert len(message) < LIMIT, message


@pytest.mark.anyio
async def test_bootstrap_failure_is_bounded(closed_ports: list[tuple[str, int]]) -> None:
    with pytest.raises(KafkaConnectionError, match="unable to bootstrap from") as info:
        async with Cluster(_fast(closed_ports, bootstrap_timeout_ms=300)):
            pass
    assert f"and {N - 3} more" in str(info.value)
    assert len(str(info.value)) < LIMIT, str(info.value)


@pytest.mark.anyio
async def test_admin_timeout_and_repr_are_bounded(closed_ports: list[tuple[str, int]]) -> None:
    servers = [f"{h}:{p}" for h, p in closed_ports]
    async with AdminClient(
        bootstrap_servers=servers, default_api_timeout_ms=300, request_timeout_ms=300
    ) as admin:
        assert len(repr(admin)) < 120 and f"and {N - 3} more" in repr(admin)
        with pytest.raises(KafkaError) as info:
            (await admin.create_topics([NewTopic("t", 1)])).raise_on_error()
    message = str(info.value)
    assert "has answered" in message and f"and {N - 3} more" in message
    assert len(message) < LIMIT, message
