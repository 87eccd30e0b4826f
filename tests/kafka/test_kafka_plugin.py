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
