"""KafkaCluster itself: node control on the shared cluster, and starts that must fail fast.

The node-control tests run on the session's ``kafka_cluster`` and leave it whole (every node
running and listed) when they end, as the other Kafka tests expect.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import anyio
import pytest

from aiokafka_ng.testing import KafkaCluster, KafkaClusterError, KafkaNode
from aiokafka_ng.testing import _kafka as kafka_module
from aiokafka_ng.testing._kafka_cds import archive_for, make_archive
from aiokafka_ng.testing._kafka_config import NodePorts
from aiokafka_ng.testing._kafka_jars import (
    HOME_ENV_VAR,
    KafkaSetupError,
    find_java,
    kafka_home,
    missing_tools,
)
from aiokafka_ng.testing._kafka_procs import free_ports, listed_brokers
from tests.kafka.helpers import eventually

pytestmark = pytest.mark.kafka

ALL = {1, 2, 3}


async def listed_by_others(cluster: KafkaCluster, node_id: int) -> set[int]:
    other = next(n for n in cluster.brokers if n.node_id != node_id)
    return await listed_brokers(other.port)


@pytest.mark.anyio
async def test_kill_then_restart_a_node(kafka_cluster: KafkaCluster, anyio_backend: str) -> None:
    """SIGKILL: the node is gone at once; the controller fences it after the broker session
    timeout; restart brings it back into every node's metadata."""
    node = kafka_cluster.node(3 if anyio_backend == "asyncio" else 2)
    pid = node.pid
    node.kill()
    assert not node.running and node.pid is None
    assert await listed_brokers(node.port) == set()  # nothing listens there any more
    # broker.session.timeout.ms is 6 s; a loaded machine delays the controller's check (a
    # CI-style run at a load average of ~18 missed the default 10 s of eventually()): 30 s.
    listed = await eventually(
        lambda: listed_by_others(kafka_cluster, node.node_id),
        lambda ids: node.node_id not in ids,
        attempts=600,
    )
    assert listed == ALL - {node.node_id}  # fenced after broker.session.timeout.ms
    await node.restart()
    assert node.running and node.pid != pid
    assert await listed_brokers(node.port) >= ALL - {node.node_id} | {node.node_id}
    assert "=== start" in node.log_path.read_text(errors="replace")  # this run's mark


@pytest.mark.anyio
async def test_controlled_stop_and_start(kafka_cluster: KafkaCluster) -> None:
    node = kafka_cluster.node(1)
    await node.stop()
    assert not node.running
    # A controlled shutdown deregisters at once: no waiting for a session timeout.
    assert node.node_id not in await listed_by_others(kafka_cluster, node.node_id)
    await node.start()
    assert node.node_id in await listed_brokers(node.port)
    with pytest.raises(KafkaClusterError, match="already running"):
        await node.start()


@pytest.mark.anyio
async def test_pause_and_resume(kafka_cluster: KafkaCluster) -> None:
    node = kafka_cluster.node(2)
    node.pause()
    try:
        assert node.paused
        # The kernel still accepts connections for the stopped process ...
        stream = await anyio.connect_tcp("127.0.0.1", node.port)
        await stream.aclose()
        # ... and nothing answers: no Metadata within listed_brokers' own bound (5 s). (A
        # 1 s move_on_after around it failed once at a load average of ~15: the event loop
        # woke after both that deadline and the connection's inner one had passed, the
        # inner timeout took the cancellation, and the outer scope saw none.)
        assert await listed_brokers(node.port) == set()
    finally:
        node.resume()
    assert not node.paused
    assert node.node_id in await eventually(
        lambda: listed_brokers(node.port), lambda ids: node.node_id in ids
    )


def test_bad_broker_property_fails_fast_with_the_reason(kafka_cluster: KafkaCluster) -> None:
    # kafka_cluster: only for its checks (Java present, jars fetched, or a skip with reason).
    cluster = KafkaCluster(brokers=1, tls=False, broker_properties={"num.io.threads": "many"})
    with pytest.raises(KafkaClusterError) as info:
        cluster.start_sync()
    first_line = str(info.value).splitlines()[0]
    # The storage format step already reads the properties and says what is wrong.
    assert first_line.startswith("formatting node 1's storage failed")
    assert "Invalid value many for configuration num.io.threads" in first_line
    assert "num.io.threads" in info.value.log_tail
    assert not any(node.running for node in cluster.brokers)
    with pytest.raises(KafkaClusterError, match="not started"):
        _ = cluster.directory  # the temporary directory is gone


def test_taken_port_is_named(kafka_cluster: KafkaCluster) -> None:
    node = kafka_cluster.node(1)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        ports = NodePorts(*free_ports(4), taken)  # CONTROLLER is the one taken
        clone = KafkaNode(kafka_cluster, 9, ports, node.directory)
        with pytest.raises(KafkaClusterError, match=f"port {taken} of node 9 is taken"):
            clone._check_ports_free()


def test_a_port_taken_before_the_spawn_is_retried_on_new_ports(
    kafka_cluster: KafkaCluster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another process binds one of the picked ports between the pick and the spawn: the
    start is tried again on fresh ports instead of failing."""
    # kafka_cluster: only for its checks (Java present, jars fetched, or a skip with reason).
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", 0))
        squatter.listen()
        taken = squatter.getsockname()[1]
        picks: list[list[int]] = []

        def pick(count: int) -> list[int]:
            ports = free_ports(count)
            if not picks:
                ports[0] = taken  # node 1's PLAINTEXT port, as if stolen
            picks.append(ports)
            return ports

        monkeypatch.setattr(kafka_module, "free_ports", pick)
        with KafkaCluster(brokers=1, tls=False) as cluster:
            assert len(picks) == 2
            assert cluster.node(1).port == picks[1][0] != taken
            assert cluster.node(1).running


def test_every_node_maps_the_class_archive(kafka_cluster: KafkaCluster) -> None:
    """The JVM class archive (_kafka_cds) exists and every running node has it mapped: it
    halves a node's start, which the fault tests pay many times."""
    archive = make_archive()  # made before the cluster started (the fixture): found here
    assert archive == archive_for(kafka_cluster.java, kafka_cluster.libs.parent)
    assert kafka_cluster.class_archive_options == (f"-XX:SharedArchiveFile={archive}",)
    for node in kafka_cluster.brokers:
        if node.pid is None:
            continue  # another test's node between stop and start
        maps = Path(f"/proc/{node.pid}/maps").read_text()
        # A JVM that could not use the archive runs on without mapping it.
        assert str(archive) in maps, f"node {node.node_id} runs without {archive}"


def test_the_class_archive_is_named_for_the_java_that_made_it(tmp_path: Path) -> None:
    java = tmp_path / "jdk" / "bin" / "java"
    java.parent.mkdir(parents=True)
    java.write_bytes(b"one build")
    link = tmp_path / "java"
    link.symlink_to(java)
    first = archive_for(str(link), tmp_path / "home")
    assert first.parent == tmp_path / "home"
    assert first.suffix == ".jsa"
    assert archive_for(str(java), tmp_path / "home") == first  # the resolved binary counts
    java.write_bytes(b"another build")  # an upgraded JDK: its own archive, not a stale one
    assert archive_for(str(link), tmp_path / "home") != first


def test_an_unusable_class_archive_does_not_stop_the_jvm(
    kafka_cluster: KafkaCluster, tmp_path: Path
) -> None:
    """What a stale or damaged archive costs is the speed, not the start (as _kafka_cds
    relies on): the JVM runs on without it."""
    # kafka_cluster: only for its checks (Java present, or a skip with reason).
    garbage = tmp_path / "garbage.jsa"
    garbage.write_bytes(bytes(range(256)) * 64)
    done = subprocess.run(
        [kafka_cluster.java, f"-XX:SharedArchiveFile={garbage}", "-version"],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert "version" in done.stderr


def test_missing_java_and_maven_are_one_line_reasons(tmp_path: Path) -> None:
    env = {"PATH": str(tmp_path), HOME_ENV_VAR: str(tmp_path / "kafka")}
    with pytest.raises(KafkaSetupError, match="no Java found"):
        find_java(env)
    assert missing_tools(env) == "no Java found (install a JDK 17+, or set JAVA_HOME)"
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    assert find_java(env) == str(java)
    assert missing_tools(env) == "no Maven (mvn) to fetch the Kafka jars, and they are not cached"
    (tmp_path / "kafka" / "libs").mkdir(parents=True)
    assert missing_tools(env) is None  # cached jars need no Maven
    assert kafka_home(env) == tmp_path / "kafka"


def test_users_are_checked() -> None:
    with pytest.raises(ValueError, match="letters, digits"):
        KafkaCluster(users={"bob": 'pass"word'})


def test_missing_tools_reads_the_process_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The fixture's call, missing_tools() without arguments, on a machine with Java but
    neither the jars nor Maven (the case a fresh laptop with a JDK is in)."""
    java = tmp_path / "java"
    java.write_text("#!/bin/sh\n")
    java.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.delenv("JAVA_HOME", raising=False)
    monkeypatch.delenv("AIOKAFKA_NG_JAVA", raising=False)
    monkeypatch.setenv(HOME_ENV_VAR, str(tmp_path / "empty-cache"))
    assert missing_tools() == "no Maven (mvn) to fetch the Kafka jars, and they are not cached"
