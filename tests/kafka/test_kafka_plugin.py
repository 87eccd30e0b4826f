"""The pytest plugin's Kafka switch, run in a child pytest on a machine without Java.

Java is hidden from the child (an empty PATH, no JAVA_HOME, an empty jar cache), which is
the user's laptop of issue 32: without CI=true the Kafka tests are skipped with one line;
with CI=true (or --kafka=require) they fail.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

TEST = """
import pytest

pytestmark = pytest.mark.kafka


def test_needs_kafka(kafka_cluster):
    assert kafka_cluster.bootstrap_servers
"""


def run_child(tmp_path: Path, *args: str, ci: str | None) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_child.py").write_text(TEST)
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("JAVA_HOME", "AIOKAFKA_NG_JAVA", "CI", "PYTEST_ADDOPTS")
    }
    env["PATH"] = str(tmp_path)  # no java, no mvn
    env["AIOKAFKA_NG_KAFKA_HOME"] = str(tmp_path / "no-jars")
    env["PYTHONPATH"] = str(ROOT)
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_without_java_kafka_tests_are_skipped_with_a_reason(tmp_path: Path) -> None:
    result = run_child(tmp_path, ci=None)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 skipped" in result.stdout
    assert "no Apache Kafka here: no Java found (install a JDK 17+, or set JAVA_HOME)" in (
        result.stdout
    )


def test_without_java_kafka_tests_fail_under_ci(tmp_path: Path) -> None:
    result = run_child(tmp_path, ci="true")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Apache Kafka is required" in result.stdout and "no Java found" in result.stdout


def test_kafka_off_skips(tmp_path: Path) -> None:
    result = run_child(tmp_path, "--kafka=off", ci="true")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Apache Kafka tests are off (--kafka=off)" in result.stdout


BROKER_TESTS = {
    "both/test_b.py": """
import pytest

def test_plain(kafka_broker):
    pass

@pytest.mark.tansu_only("needs Tansu's single node")
def test_tansu_only(kafka_broker):
    pass

def test_no_broker():
    pass
""",
    "tansu/test_t.py": """
def test_here(kafka_broker):
    pass
""",
    "instead/test_i.py": """
import pytest

def test_on_kafka(kafka_broker):
    pass

@pytest.mark.tansu_only("needs Tansu's single node")
def test_still_tansu(kafka_broker):
    pass
""",
}


def collect(tmp_path: Path, *args: str) -> list[str]:
    """The node ids a child pytest collects (collection starts no broker)."""
    for name, text in BROKER_TESTS.items():
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text(text)
    (tmp_path / "pytest.ini").write_text(
        "[pytest]\nkafka_broker_paths =\n    both\nkafka_instead_paths =\n    instead\n"
    )
    env = {k: v for k, v in os.environ.items() if k not in ("CI", "PYTEST_ADDOPTS")}
    env["PYTHONPATH"] = str(ROOT)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "--collect-only", "-p", "no:cacheprovider", *args],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode in (0, 5), result.stdout + result.stderr  # 5: none collected
    return sorted(line for line in result.stdout.splitlines() if "::" in line)


collect_all = collect


def test_broker_default_adds_kafka_only_under_kafka_broker_paths(tmp_path: Path) -> None:
    assert collect(tmp_path, "--kafka=require") == [
        "both/test_b.py::test_no_broker",
        "both/test_b.py::test_plain[kafka]",
        "both/test_b.py::test_plain[tansu]",
        "both/test_b.py::test_tansu_only[tansu]",
        "instead/test_i.py::test_on_kafka[kafka]",
        "instead/test_i.py::test_still_tansu[tansu]",
        "tansu/test_t.py::test_here[tansu]",
    ]


def test_kafka_instead_paths_fall_back_to_tansu_where_kafka_cannot_run(tmp_path: Path) -> None:
    assert [n for n in collect(tmp_path, "--kafka=off") if n.startswith("instead/")] == [
        "instead/test_i.py::test_on_kafka[tansu]",
        "instead/test_i.py::test_still_tansu[tansu]",
    ]


def test_broker_choices(tmp_path: Path) -> None:
    def collect(tmp_path: Path, *args: str) -> list[str]:  # instead/: the test above
        return [n for n in collect_all(tmp_path, *args) if not n.startswith("instead/")]

    assert collect(tmp_path, "--broker=tansu", "-m", "kafka") == []
    assert collect(tmp_path, "--broker=both", "-m", "kafka") == [
        "both/test_b.py::test_plain[kafka]",
        "tansu/test_t.py::test_here[kafka]",
    ]
    # A Tansu-only test is still collected on --broker=kafka, and skipped with its reason.
    assert collect(tmp_path, "--broker=kafka", "-m", "kafka") == [
        "both/test_b.py::test_plain[kafka]",
        "both/test_b.py::test_tansu_only[kafka]",
        "tansu/test_t.py::test_here[kafka]",
    ]
