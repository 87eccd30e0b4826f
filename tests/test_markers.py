"""The ``unit`` / ``broker`` split of tests/conftest.py: what it marks, and the guard that
keeps a ``unit`` test from starting a broker."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from aiokafka_ng.testing import LocalBroker

ROOT = Path(__file__).resolve().parents[1]

# One of each way a test comes to need a broker, and two that need none.
BY_FIXTURE = "tests/producer/test_producer_broker.py::test_send_and_await_metadata"
BY_FACTORY = "tests/ecosystem/test_command_config.py::test_cli_over_tls_with_command_config"
BY_MODULE_MARK = "tests/testing/test_local_broker.py::test_sync_context_manager"
BY_KAFKA_MARK = "tests/kafka/test_kafka_cluster.py::test_controlled_stop_and_start"
UNIT = "tests/cluster/test_bootstrap_servers.py::test_edges"
UNIT_ASYNC = (
    "tests/cluster/test_cluster_unit.py::test_bootstrap_skips_bad_server_and_reuses_connection"
)


def collected(marker: str, *nodes: str) -> set[str]:
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "--collect-only",
            "-q",
            "-p",
            "no:cacheprovider",
            "-m",
            marker,
            *nodes,
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode in (0, 5), done.stdout + done.stderr  # 5: nothing collected
    return {line.split("[")[0] for line in done.stdout.splitlines() if "::" in line}


def test_tests_are_marked_broker_or_unit_by_what_they_use() -> None:
    brokers = {BY_FIXTURE, BY_FACTORY, BY_MODULE_MARK, BY_KAFKA_MARK}
    units = {UNIT, UNIT_ASYNC}
    nodes = sorted(brokers | units)
    assert collected("broker", *nodes) == brokers
    assert collected("unit", *nodes) == units
    assert collected("unit and broker", *nodes) == set()


def test_a_unit_test_that_starts_a_broker_fails_naming_the_marker() -> None:
    # This test is itself 'unit', so the guard is armed here.
    with pytest.raises(pytest.fail.Exception, match=r"marked 'unit'.*pytest\.mark\.broker"):
        LocalBroker().start_sync()
