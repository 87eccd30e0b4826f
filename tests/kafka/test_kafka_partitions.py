"""Network partitions on Apache Kafka (issue 50): the nemesis cuts what it says, leaves the
machine's tables as they were, and a short seeded schedule of faults loses nothing an
idempotent acks=all producer or a committing consumer group was told was done.

The cluster is this module's own (``KafkaCluster(addressable=True)``, Kafka's settings from
tests/kafka/partitions.py): the faults must not reach the session's shared cluster. The
nemesis needs root, iptables and tc: without them these tests skip with the reason, and fail
under CI=true (.ci/run installs iptables).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator

import pytest

from aiokafka_ng.testing import CLIENTS, KafkaCluster, KafkaClusterError, Nemesis
from aiokafka_ng.testing._kafka_jars import missing_tools
from aiokafka_ng.testing.pytest_plugin import _kafka_mode
from tests.kafka.partitions import Schedule, new_cluster, run

pytestmark = [pytest.mark.kafka]


def _unavailable(reason: str, config: pytest.Config) -> None:
    if _kafka_mode(config) == "require":
        pytest.fail(f"network partition tests are required (CI=true): {reason}", pytrace=False)
    pytest.skip(reason)


@pytest.fixture(scope="module")
def cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    if _kafka_mode(request.config) == "off":
        pytest.skip("Apache Kafka tests are off (--kafka=off)")
    for reason in (missing_tools(), Nemesis.unavailable()):
        if reason is not None:
            _unavailable(reason, request.config)
    cluster = new_cluster()
    try:
        cluster.start_sync()
    except KafkaClusterError as exc:
        pytest.fail(f"the addressable Kafka cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop_sync()


def _tables() -> str:
    """What the nemesis may touch: both iptables tables and lo's qdiscs."""
    return "".join(
        subprocess.run(command, capture_output=True, text=True, check=True).stdout
        for command in (
            ["iptables", "-w", "-S"],
            ["iptables", "-w", "-t", "mangle", "-S"],
            ["tc", "qdisc", "show", "dev", "lo"],
        )
    )


_PROBE = """
import os, socket, sys
gid, host, port = sys.argv[1:]
if gid != "-":
    os.setgroups([]); os.setgid(int(gid))
# As the JVM does: an IPv6 socket, the node's IPv4 address mapped.
s = socket.socket(socket.AF_INET6)
s.settimeout(1.5)  # a loopback connect that gets through takes microseconds
try:
    s.connect(("::ffff:" + host, int(port)))
except OSError as exc:
    print("cut", type(exc).__name__)
else:
    print("open", s.getsockname()[0])
"""


def _reaches(sender: int | str, cluster: KafkaCluster, receiver: int) -> bool:
    """Whether a connection from ``sender``'s group (a node id, or CLIENTS) to the node
    ``receiver`` is set up: the very match the filter makes on the nodes' own sockets."""
    gid = "-" if sender == CLIENTS else str(cluster.node(int(sender)).gid)
    node = cluster.node(receiver)
    out = subprocess.run(
        [sys.executable, "-c", _PROBE, gid, node.host, str(node.port)],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    if out[0] == "open":
        # Loopback's source address quirk, the reason the filter matches groups: an unbound
        # socket leaves from 127.0.0.1 whatever node it goes to.
        assert out[1] == "::ffff:127.0.0.1"
    return out[0] == "open"


def test_the_rules_cut_exactly_the_links_named(cluster: KafkaCluster) -> None:
    before = _tables()
    with Nemesis(cluster) as nemesis:
        assert _reaches(1, cluster, 2) and _reaches(CLIENTS, cluster, 2)
        nemesis.partition({1}, {2})
        assert not _reaches(1, cluster, 2)
        assert not _reaches(2, cluster, 1)
        assert _reaches(1, cluster, 3) and _reaches(3, cluster, 2)
        assert _reaches(CLIENTS, cluster, 1) and _reaches(CLIENTS, cluster, 2)
        nemesis.heal()
        nemesis.cut_clients(3)
        assert not _reaches(CLIENTS, cluster, 3)
        assert _reaches(1, cluster, 3) and _reaches(CLIENTS, cluster, 1)
        nemesis.heal()
        nemesis.isolate(2)
        assert not _reaches(CLIENTS, cluster, 2) and not _reaches(1, cluster, 2)
        assert not _reaches(2, cluster, 3) and _reaches(3, cluster, 1)
        nemesis.heal()
        assert _reaches(CLIENTS, cluster, 2) and _reaches(2, cluster, 3)
    assert _tables() == before


def test_every_rule_is_removed_on_an_error(cluster: KafkaCluster) -> None:
    before = _tables()
    with pytest.raises(RuntimeError, match="the test's own"), Nemesis(cluster) as nemesis:
        nemesis.partition({1, CLIENTS}, {2, 3})
        nemesis.lossy(1, 0.5)
        nemesis.slow(2, "1mbit")
        assert _tables() != before
        raise RuntimeError("the test's own")
    assert _tables() == before


_HOLDER = """
import sys, time
from aiokafka_ng.testing import KafkaCluster, Nemesis
with Nemesis(KafkaCluster(addressable=True)):
    print("ready", flush=True)
    time.sleep(600)
"""


@pytest.mark.parametrize("how", [signal.SIGINT, signal.SIGKILL], ids=["interrupt", "kill"])
def test_every_rule_is_removed_on_interrupt_or_by_the_next_nemesis(
    cluster: KafkaCluster, how: signal.Signals
) -> None:
    """Ctrl-C: the holder removes its own chains. SIGKILL: nothing can run in the killed
    process; the next nemesis removes the chains of processes that are gone."""
    before = _tables()
    with subprocess.Popen(
        [sys.executable, "-c", _HOLDER],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,  # the KeyboardInterrupt traceback
        text=True,
        cwd=os.getcwd(),
    ) as holder:
        assert holder.stdout is not None
        assert holder.stdout.readline().strip() == "ready"
        assert f"AKNG-{holder.pid}" in _tables()
        holder.send_signal(how)
        holder.wait()
    if how == signal.SIGKILL:
        assert f"AKNG-{holder.pid}" in _tables()
        with Nemesis(cluster):
            pass
    assert _tables() == before


@pytest.mark.anyio
async def test_a_short_schedule_of_faults_loses_nothing_acknowledged(
    cluster: KafkaCluster, anyio_backend: str
) -> None:
    """Six faults of about 3 s each (a seed per backend): every acknowledged record read back
    once and in order, every acknowledged commit still the group's."""
    schedule = Schedule.seeded(
        seed=11 if anyio_backend == "asyncio" else 12, steps=6, hold=3.0, recover=3.0
    )
    before = _tables()
    with Nemesis(cluster) as nemesis:
        report = await run(cluster, nemesis, schedule)
    print(report.row())
    assert _tables() == before
    assert report.acknowledged > 0
    assert report.lost == [] and report.duplicated == [] and report.reordered == []
    assert report.committed_lost == {}
