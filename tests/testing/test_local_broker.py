"""LocalBroker, its pytest fixtures and ``python -m aiokafka_ng.testing``, against real Tansu."""

from __future__ import annotations

import os
import selectors
import signal
import socket
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest

from aiokafka_ng.testing import BINARY_ENV_VAR, LocalBroker, LocalBrokerError
from aiokafka_ng.testing.pytest_plugin import KafkaClusterBroker

# broker: it starts its own brokers, no fixture says so (see tests/conftest.py)
pytestmark = pytest.mark.broker

# The kafka_broker* fixtures come from aiokafka_ng.testing.pytest_plugin, which the pytest11
# entry point registers (aiokafka-ng is installed in editable mode in the dev venv).
REPO_ROOT = Path(__file__).resolve().parents[2]


# -- helpers ----------------------------------------------------------------------------------


def api_versions_v0_request(correlation_id: int) -> bytes:
    # Hand-built on purpose: this test checks the broker, not our codec. Header v1: api_key 18,
    # api_version 0, correlation_id, client_id (int16 length + bytes); ApiVersions v0 has no body.
    client_id = b"local-broker-test"
    payload = struct.pack(">hhih", 18, 0, correlation_id, len(client_id)) + client_id
    return struct.pack(">i", len(payload)) + payload


async def check_api_versions(port: int) -> int:
    """Send ApiVersions v0 and return how many APIs the broker advertises."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(api_versions_v0_request(correlation_id=7))
        data = b""
        with anyio.fail_after(10):
            while len(data) < 4 or len(data) < 4 + struct.unpack_from(">i", data)[0]:
                data += await stream.receive()
    correlation_id, error_code, count = struct.unpack_from(">ihi", data, 4)
    assert correlation_id == 7
    assert error_code == 0
    return int(count)


def accepts_connections(port: int) -> bool:
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=2):
            return True
    except OSError:
        return False


def processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text`` (Linux /proc)."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
            state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue  # gone meanwhile
        if text in cmdline and state != "Z":
            pids.append(int(entry.name))
    return pids


def process_gone(pid: int) -> bool:
    """True if ``pid`` no longer exists (exited and reaped, so no zombie either)."""
    return not Path(f"/proc/{pid}").exists()


def write_script(path: Path, body: str) -> Path:
    path.write_text(f"#!/bin/sh\n{body}\n")
    path.chmod(0o755)
    return path


# -- LocalBroker (async, on asyncio and trio) ---------------------------------------------------


@pytest.mark.anyio
async def test_starts_accepts_connections_and_answers_kafka_requests() -> None:
    async with LocalBroker() as broker:
        assert broker.running
        assert broker.host == "127.0.0.1"
        assert broker.node_id == 111
        assert broker.bootstrap_servers == f"127.0.0.1:{broker.port}"
        assert broker.advertised_port == broker.port
        assert await check_api_versions(broker.port) > 20
        pid = broker.pid
        assert pid is not None
        assert "listening on" in broker.log()
    assert not broker.running
    assert broker.pid is None
    assert process_gone(pid)
    assert not accepts_connections(broker.port)
    assert f"tcp://127.0.0.1:{broker.port}" in broker.log()  # kept after the run ended


@pytest.mark.anyio
async def test_stop_and_start_again_on_the_same_port() -> None:
    async with LocalBroker() as broker:
        port, first_pid = broker.port, broker.pid
        assert first_pid is not None
        # A client connection open across the stop leaves TIME_WAIT sockets on the port.
        async with await anyio.connect_tcp("127.0.0.1", port):
            await broker.stop()
        assert not broker.running
        assert process_gone(first_pid)
        assert not accepts_connections(port)

        await broker.start()
        assert broker.port == port
        assert broker.pid != first_pid
        assert await check_api_versions(port) > 20
        assert broker.log().count("listening on") == 2  # both runs are in the log


@pytest.mark.anyio
async def test_advertised_port_is_passed_to_the_broker() -> None:
    other_port = LocalBroker().port  # any free port number: nothing needs to listen on it
    async with LocalBroker(advertised_port=other_port) as broker:
        assert broker.advertised_port == other_port
        assert f"--advertised-listener-url tcp://127.0.0.1:{other_port}" in " ".join(broker.command)
        assert f"advertised: tcp://127.0.0.1:{other_port}" in broker.log()


@pytest.mark.anyio
async def test_starting_twice_is_an_error() -> None:
    async with LocalBroker() as broker:
        with pytest.raises(LocalBrokerError, match="already running"):
            await broker.start()
        assert broker.running


@pytest.mark.anyio
async def test_cancelled_start_leaves_no_process(tmp_path: Path) -> None:
    # A "broker" that never listens, so start() polls until cancelled.
    binary = write_script(tmp_path / "tansu", f"echo $$ > {tmp_path}/pid; exec sleep 60")
    broker = LocalBroker(env={BINARY_ENV_VAR: str(binary)}, startup_timeout=30)
    with anyio.move_on_after(0.3) as scope:
        await broker.start()
    assert scope.cancelled_caught
    assert not broker.running
    assert process_gone(int((tmp_path / "pid").read_text()))


@pytest.mark.anyio
async def test_bad_binary_gives_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    not_executable = tmp_path / "tansu"
    not_executable.write_text("not a program")
    not_executable.chmod(0o644)
    monkeypatch.setenv(BINARY_ENV_VAR, str(not_executable))
    with pytest.raises(LocalBrokerError) as info:
        async with LocalBroker():
            pytest.fail("the broker must not start")
    assert BINARY_ENV_VAR in str(info.value)
    assert str(not_executable) in str(info.value)
    assert "not an executable file" in str(info.value)


@pytest.mark.anyio
async def test_broker_that_exits_reports_command_and_log(tmp_path: Path) -> None:
    binary = write_script(tmp_path / "tansu", "echo 'boom: no storage'; exit 3")
    broker = LocalBroker(env={BINARY_ENV_VAR: str(binary)})
    with pytest.raises(LocalBrokerError) as info:
        await broker.start()
    err = info.value
    assert "exited with code 3" in str(err)
    assert "boom: no storage" in err.log_tail
    assert err.command[0] == str(binary)
    assert f"tcp://127.0.0.1:{broker.port}" in str(err)  # the command line is in the message
    assert not broker.running


@pytest.mark.anyio
async def test_broker_that_never_listens_times_out(tmp_path: Path) -> None:
    binary = write_script(tmp_path / "tansu", f"echo $$ > {tmp_path}/pid; exec sleep 60")
    broker = LocalBroker(env={BINARY_ENV_VAR: str(binary)}, startup_timeout=0.5)
    with pytest.raises(LocalBrokerError, match=r"did not accept connections .* within 0.5 s"):
        await broker.start()
    assert not broker.running
    assert process_gone(int((tmp_path / "pid").read_text()))


def test_explicit_port_in_use_is_an_error() -> None:
    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        port = holder.getsockname()[1]
        with pytest.raises(LocalBrokerError, match=f"port {port} .* in use"):
            LocalBroker(port=port).start_sync()


def test_port_is_validated() -> None:
    with pytest.raises(ValueError, match="port"):
        LocalBroker(port=70000)


# -- sync API and fixtures ---------------------------------------------------------------------


def test_sync_context_manager() -> None:
    with LocalBroker() as broker:
        assert accepts_connections(broker.port)
        broker.stop_sync()
        assert not accepts_connections(broker.port)
        broker.start_sync()
        assert accepts_connections(broker.port)
        pid = broker.pid
    assert pid is not None and process_gone(pid)


def test_session_fixture(kafka_broker: LocalBroker | KafkaClusterBroker) -> None:
    if isinstance(kafka_broker, LocalBroker):
        assert kafka_broker.running
    else:
        assert all(node.running for node in kafka_broker.cluster.brokers)
    assert accepts_connections(kafka_broker.port)


@pytest.mark.anyio
async def test_fixture_broker_can_be_restarted_from_async_code(
    fresh_kafka_broker: LocalBroker,
) -> None:
    # Started by a sync fixture, stopped and restarted here on asyncio or trio.
    port = fresh_kafka_broker.port
    await fresh_kafka_broker.stop()
    assert not accepts_connections(port)
    await fresh_kafka_broker.start()
    assert await check_api_versions(port) > 20


def test_factory_stops_its_brokers(
    kafka_broker_factory: Callable[..., LocalBroker],
) -> None:
    first = kafka_broker_factory()
    second = kafka_broker_factory(startup_timeout=5)
    assert first.port != second.port
    assert first.running and second.running


def test_fixtures_fail_not_skip_when_the_broker_cannot_start(
    kafka_broker_factory: Callable[..., LocalBroker],
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv(BINARY_ENV_VAR, str(tmp_path / "missing-tansu"))
    with pytest.raises(pytest.fail.Exception, match="local Kafka broker could not start"):
        kafka_broker_factory()


# -- python -m aiokafka_ng.testing --------------------------------------------------------------


def read_line(proc: subprocess.Popen[str], timeout: float) -> str:
    assert proc.stdout is not None
    with selectors.DefaultSelector() as selector:
        selector.register(proc.stdout, selectors.EVENT_READ)
        if not selector.select(timeout):
            pytest.fail(f"no output within {timeout} s")
    return proc.stdout.readline()


def test_cli_prints_address_and_stops_the_broker_on_sigterm() -> None:
    port = LocalBroker().port  # a free port, to exercise --port
    env = {**os.environ, "PYTHONPATH": str(REPO_ROOT)}
    command = [sys.executable, "-m", "aiokafka_ng.testing", "--port", str(port)]
    with subprocess.Popen(
        command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True, env=env, cwd=REPO_ROOT,
    ) as proc:  # fmt: skip
        try:
            line = read_line(proc, timeout=30)
            assert line == f"bootstrap_servers=127.0.0.1:{port}\n"
            assert accepts_connections(port)
            brokers = processes_mentioning(f"--listener-url tcp://127.0.0.1:{port}")
            assert len(brokers) == 1
            proc.send_signal(signal.SIGTERM)
            out, err = proc.communicate(timeout=30)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
    assert proc.returncode == 0, err
    assert out == ""
    assert process_gone(brokers[0])
    assert not accepts_connections(port)


# -- interop: confluent-kafka (librdkafka) against the broker ----------------------------------


def test_confluent_kafka_produces_and_consumes(
    kafka_broker: LocalBroker | KafkaClusterBroker,
) -> None:
    import confluent_kafka

    topic = f"local-broker-smoke-{uuid.uuid4().hex[:8]}"
    producer = confluent_kafka.Producer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(10):
        producer.produce(topic, value=f"value-{i}".encode(), key=f"k{i}".encode(), partition=0)
    assert producer.flush(30) == 0

    consumer = confluent_kafka.Consumer(
        {
            "bootstrap.servers": kafka_broker.bootstrap_servers,
            "group.id": f"{topic}-group",
            "enable.auto.commit": False,
        }
    )
    try:
        consumer.assign(
            [confluent_kafka.TopicPartition(topic, 0, confluent_kafka.OFFSET_BEGINNING)]
        )
        values: list[bytes] = []
        deadline = time.monotonic() + 30
        while len(values) < 10 and time.monotonic() < deadline:
            for message in consumer.consume(num_messages=10, timeout=1.0):
                assert message.error() is None, message.error()
                value = message.value()
                assert value is not None
                values.append(value)
    finally:
        consumer.close()
    assert values == [f"value-{i}".encode() for i in range(10)]
