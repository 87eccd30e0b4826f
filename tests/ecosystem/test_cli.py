"""The ``aiokafka-ng`` command, run as a subprocess against the local broker.

Every subcommand is exercised on its success path and on its failure paths; a failure must
be one line on stderr (``aiokafka-ng: error: ...``) and a non-zero exit, never a traceback.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

import aiokafka_ng
from aiokafka_ng.cli import main
from tests.helpers import topic_name

ROOT = Path(__file__).resolve().parents[2]


def _env() -> dict[str, str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    env["COLUMNS"] = "200"  # rich tables: no wrapping in captured output
    return env


def cli(
    *args: str, stdin: bytes | None = None, timeout: float = 90, **env: str
) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(
        [sys.executable, "-m", "aiokafka_ng.cli", *args],
        input=stdin,
        capture_output=True,
        env={**_env(), **env},
        timeout=timeout,
    )
    return subprocess.CompletedProcess(
        done.args, done.returncode, done.stdout.decode(), done.stderr.decode()
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str], *needles: str) -> None:
    assert done.returncode == 1, (done.returncode, done.stdout, done.stderr)
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    assert lines[0].startswith("aiokafka-ng: error: ")
    assert "Traceback" not in done.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]


@pytest.fixture
def dead_address() -> Iterator[str]:
    """A 127.0.0.1 port that refuses connections (bound, never listening)."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    try:
        yield f"127.0.0.1:{sock.getsockname()[1]}"
    finally:
        sock.close()


def test_version_and_usage(capsys: pytest.CaptureFixture[str]) -> None:
    # In-process: argparse's own paths need no broker and no fresh interpreter.
    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0 and capsys.readouterr().out.startswith("aiokafka-ng ")
    for argv in ([], ["topics", "frobnicate"], ["consume"]):
        with pytest.raises(SystemExit) as exit_info:
            main(argv)
        assert exit_info.value.code == 2
    assert main(["topics", "create", "x", "-c", "novalue"]) == 2
    assert main(["consume", "t", "-n", "0"]) == 2
    assert "--max-records" in capsys.readouterr().err
    # The same through the real entry point.
    done = cli("--version")
    assert done.returncode == 0 and done.stdout.startswith("aiokafka-ng ")


def test_invalid_values_and_client_side_checks_exit_2(dead_address: str) -> None:
    # Nothing listens at dead_address: a check that reached for the broker would report
    # "cannot reach" with exit 1 instead.
    done = cli("topics", "list", "-b", "127.0.0.1:99999")
    assert done.returncode == 2, done.stderr
    assert "port out of range" in done.stderr and "Traceback" not in done.stderr
    for flag in ("-p", "-r"):
        done = cli("topics", "create", "t", flag, "0", "-b", dead_address)
        assert done.returncode == 2, done.stderr
        assert "must be at least 1" in done.stderr and "cannot reach" not in done.stderr
    done = cli("produce", "t", stdin=b"", AIOKAFKA_NG_BOOTSTRAP_SERVERS="h:0")
    assert done.returncode == 2 and "bad bootstrap servers" in done.stderr, done.stderr


def test_an_unresolvable_host_is_named_as_such() -> None:
    # .invalid never resolves (RFC 6761): the error says so at once, not "cannot reach".
    done = cli("topics", "list", "-b", "no-such-host.invalid:9092", "--connect-timeout", "30")
    assert_one_line_error(done, "cannot resolve host 'no-such-host.invalid'")
    assert "cannot reach" not in done.stderr


def test_trio_backend_without_trio_is_a_one_line_hint(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setitem(sys.modules, "trio", None)  # what an environment without trio imports
    assert main(["--backend", "trio", "topics", "list"]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err == ["aiokafka-ng: error: --backend trio needs trio: pip install 'aiokafka-ng[trio]'"]


def test_spark_without_pyspark_names_the_extra() -> None:
    code = (
        "import sys; sys.modules['pyspark'] = None\n"
        "try:\n    import aiokafka_ng.spark\n"
        "except ModuleNotFoundError as exc:\n    print(exc.name, '|', exc)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, env=_env(), text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("pyspark | "), done.stdout
    assert "pip install 'aiokafka-ng[spark]'" in done.stdout


@contextmanager
def broker_command() -> Iterator[tuple[subprocess.Popen[bytes], str]]:
    """``aiokafka-ng broker`` in a subprocess, and the address it printed; killed on the
    way out if the test left it running."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiokafka_ng.cli", "broker"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        first = proc.stdout.readline().decode().strip()
        assert first.startswith("bootstrap_servers=127.0.0.1:"), first
        yield proc, first.split("=", 1)[1]
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate(timeout=20)


@pytest.mark.broker  # starts a broker of its own (see tests/conftest.py)
def test_broker_prints_its_address_and_stops_on_ctrl_c() -> None:
    with broker_command() as (proc, address):
        name = topic_name()
        assert cli("topics", "create", name, "-b", address).returncode == 0
        assert name in cli("topics", "list", "-b", address).stdout.split()
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=20) == 130  # docs/cli.md: interrupted, after a clean stop


@pytest.mark.broker  # starts a broker of its own (see tests/conftest.py)
def test_broker_that_dies_under_the_command_is_one_line_and_exit_1() -> None:
    with broker_command() as (proc, _):
        # The command's one child is the broker process: kill it behind the command's back.
        children = Path(f"/proc/{proc.pid}/task/{proc.pid}/children").read_text().split()
        assert len(children) == 1, children
        os.kill(int(children[0]), signal.SIGKILL)
        assert proc.wait(timeout=20) == 1
        assert proc.stderr is not None
        last = proc.stderr.read().decode().strip().splitlines()[-1]
        assert last == "aiokafka-ng: error: the broker exited on its own"


@pytest.mark.broker  # starts a broker of its own (see tests/conftest.py)
def test_broker_on_a_taken_port_fails_in_one_line() -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        done = cli("broker", "--port", str(sock.getsockname()[1]), timeout=60)
    assert_one_line_error(done, "could not start")


def test_topics_create_list_describe_delete(kafka_broker: Any) -> None:
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    done = cli("topics", "create", name, "-p", "3", "-c", "retention.ms=60000", *b)
    assert done.returncode == 0 and f"created {name} (3 partitions)" in done.stdout
    assert_one_line_error(cli("topics", "create", name, *b), name)
    done = cli("topics", "create", name, "--if-not-exists", *b)
    assert done.returncode == 0 and f"exists {name}" in done.stdout
    assert name in cli("topics", "list", *b).stdout.split()
    # One known and one missing topic: the known one is shown, the missing one is the
    # single error line, and the exit code says something failed.
    missing = topic_name()
    done = cli("topics", "describe", name, missing, *b)
    assert_one_line_error(done, f"topic {missing!r} does not exist")
    # The table's partition rows: those whose first cell is a partition number.
    rows = [
        line
        for line in done.stdout.splitlines()
        if line.startswith("│") and line.strip("│ ").split("│")[0].strip().isdigit()
    ]
    assert len(rows) == 3, done.stdout
    done = cli("topics", "delete", name, missing, *b)
    assert_one_line_error(done, f"topic {missing!r} does not exist")
    assert f"deleted {name}" in done.stdout


def _cells(table: str, first: str) -> list[str]:
    """The cells of the table row that starts with ``first``."""
    for line in table.splitlines():
        cells = [c.strip() for c in line.strip().strip("│┃").split("│")]
        if cells and cells[0] == first:
            return cells
    raise AssertionError(f"no row {first!r} in:\n{table}")


def test_groups_reset_describe_list_delete(kafka_broker: Any) -> None:
    from confluent_kafka import Producer as CProducer

    b = ["-b", kafka_broker.bootstrap_servers]
    name, group = topic_name(), f"cli-group-{uuid.uuid4().hex[:8]}"
    assert cli("topics", "create", name, "-p", "1", *b).returncode == 0
    producer = CProducer({"bootstrap.servers": kafka_broker.bootstrap_servers})
    for i in range(6):
        # One record per batch: Tansu's ListOffsets LATEST is right only then (TANSU.md).
        producer.produce(name, b"v%d" % i, partition=0)
        assert producer.flush(20) == 0
    # A dry run (the default) prints the plan and commits nothing.
    done = cli("groups", "reset", group, "--to-offset", "4", "--topic", name, *b)
    assert done.returncode == 0, done.stderr
    assert "dry run" in done.stdout and "--execute" in done.stdout
    # Nothing committed: the group does not exist (issue 49 item 8: it was "Empty, lag 0").
    assert_one_line_error(cli("groups", "describe", group, *b), f"group {group!r} does not exist")
    done = cli("groups", "reset", group, "--to-offset", "4", "--topic", name, "--execute", *b)
    assert done.returncode == 0, done.stderr
    assert f"reset 1 partitions of {group}" in done.stdout
    done = cli("groups", "describe", group, *b)
    assert done.returncode == 0, done.stderr
    assert "total lag=2" in done.stdout, done.stdout
    # topic, partition, committed, log end, lag, member
    assert _cells(done.stdout, name)[:5] == [name, "0", "4", "6", "2"]
    assert group in cli("groups", "list", *b).stdout
    # Shift past the log start: clamped to it.
    done = cli("groups", "reset", group, "--shift-by", "-10", *b)
    # topic, partition, current, target
    assert _cells(done.stdout, name)[:4] == [name, "0", "4", "0"]
    assert_one_line_error(cli("groups", "reset", group, "--by-duration", "soon", *b), "soon")
    done = cli("groups", "delete", group, *b)
    assert done.returncode == 0 and f"deleted {group}" in done.stdout


def test_produce_stdin_then_consume_json(kafka_broker: Any) -> None:
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    assert cli("topics", "create", name, "-p", "1", *b).returncode == 0
    lines = b"k1:v1\nk2:v:2\r\nk3:\n"
    done = cli("produce", name, "-K", ":", "-H", "source=cli", *b, stdin=lines)
    assert done.returncode == 0, done.stderr
    assert f"produced 3 records to {name}" in done.stderr
    done = cli("consume", name, "--from-beginning", "-n", "3", "--format", "json", *b)
    assert done.returncode == 0, done.stderr
    docs = [json.loads(line) for line in done.stdout.splitlines()]
    assert [(d["key"], d["value"], d["offset"]) for d in docs] == [
        ("k1", "v1", 0),
        ("k2", "v:2", 1),
        ("k3", "", 2),
    ]
    assert all(d["headers"] == [["source", "cli"]] for d in docs)
    assert "consumed 3 records" in done.stderr
    done = cli("consume", name, "--from-beginning", "-n", "1", "--format", "kv", "-K", "=", *b)
    assert done.stdout == "k1=v1\n"


def test_produce_file_with_progress_on_trio_then_consume(kafka_broker: Any, tmp_path: Path) -> None:
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    assert cli("topics", "create", name, "-p", "2", *b).returncode == 0
    data = tmp_path / "lines.txt"
    data.write_text("".join(f"line {i}\n" for i in range(1000)))
    done = cli("--backend", "trio", "produce", name, "-f", str(data), "--progress", *b)
    assert done.returncode == 0, done.stderr
    assert "1000/1000" in done.stderr and f"produced 1000 records to {name}" in done.stderr
    done = cli("--backend", "trio", "consume", name, "--from-beginning", "--timeout", "2", *b)
    assert done.returncode == 0, done.stderr
    assert sorted(done.stdout.splitlines()) == sorted(f"line {i}" for i in range(1000))
    done = cli("consume", name, "--from-beginning", "-P", "7", "--timeout", "1", *b)
    assert_one_line_error(done, "no partition 7")


def test_produce_failures_are_one_line(kafka_broker: Any, tmp_path: Path) -> None:
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    assert cli("topics", "create", name, *b).returncode == 0
    assert_one_line_error(
        cli("produce", name, "-K", ":", *b, stdin=b"a:1\nno separator\n"), "line 2"
    )
    assert_one_line_error(cli("produce", name, "-f", str(tmp_path / "nope"), *b), "nope")
    assert_one_line_error(cli("produce", "bad topic!", *b, stdin=b"x\n"), "bad topic!")


def test_consume_with_a_group_commits_and_stops_cleanly_on_ctrl_c(kafka_broker: Any) -> None:
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    assert cli("topics", "create", name, "-p", "1", *b).returncode == 0
    assert cli("produce", name, *b, stdin=b"a\nb\nc\n").returncode == 0
    group = ["-g", f"g-{name}", "--session-timeout-ms", "2000", "--from-beginning"]
    # -n 2 on trio: exactly two records printed, and committed.
    done = cli("--backend", "trio", "consume", name, *group, "-n", "2", "--format", "full", *b)
    assert done.returncode == 0, done.stderr
    assert [line.split(" ")[0] for line in done.stdout.splitlines()] == [
        f"{name}[0]@0",
        f"{name}[0]@1",
    ]
    # Open-ended on asyncio: resumes at the committed offset; Ctrl-C ends it cleanly.
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiokafka_ng.cli", "consume", name, *group, *b],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdout is not None
        # The record printed means the loop is waiting for more: interrupt it there.
        assert proc.stdout.readline() == b"c\n"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    # Interrupted (130, as docs/cli.md says), though the stop itself was clean: the summary is
    # printed and the group committed.
    assert proc.returncode == 130, err.decode()
    assert f"consumed 1 records from {name}" in err.decode()
    # It committed on the way out: nothing is left for the group.
    done = cli("consume", name, *group, "--timeout", "1", *b)
    assert done.returncode == 0 and done.stdout == ""


def test_consume_unknown_topic(kafka_broker: Any) -> None:
    missing = topic_name()
    done = cli("consume", missing, "-b", kafka_broker.bootstrap_servers, "--timeout", "1")
    assert_one_line_error(done, missing, "does not exist")


FAST_FAIL = ["--connect-timeout", "0.5"]
# Every subcommand that talks to a broker goes through the same probe; one of each kind.
UNREACHABLE_CASES = [
    ["topics", "describe", "t"],
    ["produce", "t"],
    ["consume", "t"],
    ["demo"],
    ["bench"],
]


def test_unreachable_broker_is_one_line_and_exit_1(dead_address: str) -> None:
    # All at once: each is a fresh interpreter, and they only wait for a refused connect.
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "aiokafka_ng.cli", *args, "-b", dead_address, *FAST_FAIL],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env=_env(),
        )
        for args in UNREACHABLE_CASES
    ]
    for args, proc in zip(UNREACHABLE_CASES, procs, strict=True):
        out, err = proc.communicate(timeout=60)
        done = subprocess.CompletedProcess(args, proc.returncode, out.decode(), err.decode())
        assert_one_line_error(done, "cannot reach a Kafka broker", dead_address)


def test_a_refused_port_fails_at_once_not_after_the_connect_timeout(dead_address: str) -> None:
    # Issue 49 item 10: a port nothing listens on made every command wait its whole
    # --connect-timeout. With an hour's timeout, the subprocess's own limit is the guard.
    done = cli("topics", "list", "-b", dead_address, "--connect-timeout", "3600", timeout=120)
    assert_one_line_error(done, "cannot reach a Kafka broker", dead_address, "connection refused")


@pytest.mark.broker  # starts a broker of its own (see tests/conftest.py)
def test_demo_main_job_as_the_readme_runs_it() -> None:
    # The README's main command: default settings (200k records, its own broker).
    started = time.monotonic()
    done = cli("demo", timeout=120)
    elapsed = time.monotonic() - started
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for label in ("produce throughput", "send->ack latency p50", "send->ack latency p99"):
        assert label in out
    assert "consume throughput" in out and "records/s" in out
    assert "200,000 / 200,000 OK" in out
    assert elapsed < 60, f"the demo took {elapsed:.0f} s"


def test_demo_against_a_running_broker(kafka_broker: Any) -> None:
    done = cli("demo", "-n", "2000", "-b", kafka_broker.bootstrap_servers, "--progress")
    assert done.returncode == 0, done.stderr
    assert "2,000 / 2,000 OK" in done.stdout and "producing" in done.stderr
    assert ("compiled (mypyc)" in done.stdout) == aiokafka_ng.__compiled__, done.stdout
    pure = cli(
        "demo", "-n", "500", "-b", kafka_broker.bootstrap_servers, AIOKAFKA_NG_PURE_PYTHON="1"
    )
    assert pure.returncode == 0, pure.stderr
    assert "500 / 500 OK" in pure.stdout
    assert "pure Python (AIOKAFKA_NG_PURE_PYTHON=1)" in pure.stdout, pure.stdout
    bad = cli("demo", "-n", "0")
    assert bad.returncode == 2 and "--records" in bad.stderr


def test_bench_against_installed_peers(kafka_broker: Any) -> None:
    done = cli("bench", "-n", "2000", "-b", kafka_broker.bootstrap_servers, "--partitions", "2")
    assert done.returncode == 0, done.stderr
    rows = {line.split()[1]: line for line in done.stdout.splitlines() if line.startswith("│")}
    assert set(rows) >= {"aiokafka_ng", "aiokafka", "confluent-kafka"}, done.stdout
    assert "x" in rows["aiokafka"]  # the ratio column
    bad = cli("bench", "--clients", "kafka-python")
    assert bad.returncode == 2 and "kafka-python" in bad.stderr


def test_demo_reports_a_failed_verification() -> None:
    # In-process: a broker cannot be made to lose records on demand, so check the verdict
    # logic and its table on a result that lost, duplicated and reordered records.
    from rich.console import Console

    from aiokafka_ng.cli._demo import DemoResult, _print_table

    result = DemoResult(
        records=10,
        size=100,
        partitions=1,
        window=5,
        produce_s=1.0,
        consume_s=1.0,
        latencies_ms=[1.0, 2.0],
        received=10,
        missing=1,
        duplicates=1,
        out_of_order=2,
        corrupted=0,
        failed=0,
    )
    assert not result.ok and result.verified == 9
    console = Console(record=True, width=200)
    _print_table(console, result)
    text = console.export_text()
    assert "FAILED: 9 / 10 (missing 1, duplicates 1, out of order 2" in text
    assert "p99" in text and "2.0 ms" in text


def test_produce_sends_each_typed_line_at_once(kafka_broker: Any) -> None:
    # stdin is a terminal: a line must reach the broker when it is typed, not at EOF.
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    assert cli("topics", "create", name, *b).returncode == 0
    master, slave = os.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiokafka_ng.cli", "produce", name, *b],
        stdin=slave,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    os.close(slave)
    try:
        os.write(master, b"typed line\n")
        done = cli("consume", name, "--from-beginning", "-n", "1", "--timeout", "30", *b)
        assert done.returncode == 0 and done.stdout == "typed line\n", done.stderr
        assert proc.poll() is None  # still reading the terminal
        os.write(master, b"\x04")  # Ctrl-D: end of input
        _, err = proc.communicate(timeout=30)
    finally:
        os.close(master)
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 0, err.decode()
    assert f"produced 1 record to {name}" in err.decode()


def test_ctrl_c_during_a_produce_says_how_many_records_landed(kafka_broker: Any) -> None:
    # Issue 49 item 9: the input is still open (a pipe nobody writes to any more) when the
    # user presses Ctrl-C; the command must stop reading, deliver what it took, and say so.
    b = ["-b", kafka_broker.bootstrap_servers]
    name = topic_name()
    assert cli("topics", "create", name, *b).returncode == 0
    proc = subprocess.Popen(
        [sys.executable, "-m", "aiokafka_ng.cli", "produce", name, "-q", *b],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=_env(),
    )
    try:
        assert proc.stdin is not None
        proc.stdin.write(b"".join(b"line %d\n" % i for i in range(5)))
        proc.stdin.flush()
        done = cli("consume", name, "--from-beginning", "-n", "5", "--timeout", "30", *b)
        assert done.stdout.splitlines() == [f"line {i}" for i in range(5)], done.stderr
        assert proc.poll() is None  # still reading its input
        proc.send_signal(signal.SIGINT)
        # wait, not communicate: the input stays open (communicate would close it, an end of
        # input racing the signal), as a terminal's would when the user presses Ctrl-C.
        code = proc.wait(timeout=30)
        assert proc.stderr is not None
        text = proc.stderr.read().decode()
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert code == 130, text
    assert f"interrupted: 5 records to {name} in " in text, text
    assert "not delivered" not in text and "Traceback" not in text, text


def test_reset_durations_parse_like_kafkas_tool() -> None:
    from datetime import timedelta

    from aiokafka_ng.cli._common import CliError
    from aiokafka_ng.cli._groups import parse_duration

    assert parse_duration("PT1H30M") == timedelta(hours=1, minutes=30)
    assert parse_duration("P1DT2H") == timedelta(days=1, hours=2)
    assert parse_duration("pt0.5s") == timedelta(seconds=0.5)
    assert parse_duration("90s") == timedelta(seconds=90)
    assert parse_duration("15m") == timedelta(minutes=15)
    assert parse_duration("2h") == timedelta(hours=2)
    assert parse_duration("1d") == timedelta(days=1)
    for bad in ("", "P", "PT", "1w", "-5m", "PT1X", "soon"):
        with pytest.raises(CliError, match="bad duration"):
            parse_duration(bad)


def test_version_and_help_work_without_rich_and_commands_say_what_is_missing(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The base install has no rich (it is the [cli] extra): what needs no output tables
    # answers anyway; a command says which extra to install, in one line.
    monkeypatch.setitem(sys.modules, "rich", None)  # import rich -> ImportError
    with pytest.raises(SystemExit) as exited:
        main(["--version"])
    assert exited.value.code == 0
    assert aiokafka_ng.__version__ in capsys.readouterr().out
    with pytest.raises(SystemExit) as exited:
        main(["--help"])
    assert exited.value.code == 0
    assert "topics" in capsys.readouterr().out
    assert main(["topics", "list", "-b", "127.0.0.1:1"]) == 1
    assert "the CLI needs rich: pip install 'aiokafka-ng[cli]'" in capsys.readouterr().err
