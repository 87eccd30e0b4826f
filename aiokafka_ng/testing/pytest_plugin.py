"""pytest fixtures that provide a real local Kafka-compatible broker.

Registered through the ``pytest11`` entry point once aiokafka-ng is installed. Fixtures:

- ``kafka_broker`` (session): one broker for the whole run; tests create uniquely named topics.
- ``kafka_broker_factory`` (function): ``factory(**LocalBroker kwargs)`` starts a broker of the
  test's own; every broker it made is stopped after the test.
- ``fresh_kafka_broker`` (function): one broker of the test's own, free to stop and restart.

A broker that cannot start fails the test (``pytest.fail``); it is never skipped.

Apache Kafka (:class:`~aiokafka_ng.testing.KafkaCluster`):

- ``kafka_cluster`` (session): one 3-node KRaft cluster for the whole run, started on first
  use; tests that use it carry the ``kafka`` marker (``-m kafka`` selects them, ``-m "not
  kafka"`` leaves them out). ``--kafka=auto`` (the default) runs them where Java and Maven
  (or the cached jars) are present and skips them with a one-line reason where not;
  ``--kafka=require`` (the default under ``CI=true``) fails them instead; ``--kafka=off``
  skips them. A cluster that cannot start fails them in every mode. A failing test that used
  the cluster gets the tail of each node's log as a report section.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Generator, Iterator
from typing import Any

import pytest

from aiokafka_ng.testing._broker import LocalBroker, LocalBrokerError
from aiokafka_ng.testing._kafka import KafkaCluster, KafkaClusterError
from aiokafka_ng.testing._kafka_jars import missing_tools

_KAFKA_MODES = ("auto", "require", "off")


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("aiokafka_ng").addoption(
        "--kafka",
        choices=_KAFKA_MODES,
        default=None,
        help="tests marked 'kafka' (a real Apache Kafka cluster): auto = run where Java and "
        "Maven are present, else skip (default); require = fail without them (default under "
        "CI=true); off = skip them",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kafka: needs the real Apache Kafka cluster (the kafka_cluster fixture)"
    )


def _kafka_mode(config: pytest.Config) -> str:
    chosen = config.getoption("--kafka", default=None)
    if chosen:
        return str(chosen)
    ci = os.environ.get("CI", "").strip().lower()
    return "require" if ci not in ("", "0", "false", "no") else "auto"


@pytest.fixture(scope="session")
def kafka_cluster(request: pytest.FixtureRequest) -> Iterator[KafkaCluster]:
    """A 3-node Apache Kafka cluster shared by the whole session (see the module docstring)."""
    mode = _kafka_mode(request.config)
    if mode == "off":
        pytest.skip("Apache Kafka tests are off (--kafka=off)")
    missing = missing_tools()
    if missing is not None:
        if mode == "auto":
            pytest.skip(f"no Apache Kafka here: {missing}")
        pytest.fail(f"Apache Kafka is required (--kafka=require or CI=true): {missing}")
    cluster = KafkaCluster(brokers=3)
    try:
        cluster.start_sync()
    except KafkaClusterError as exc:
        pytest.fail(f"the Apache Kafka cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop_sync()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cluster = funcargs.get("kafka_cluster")
    if report.failed and call.when == "call" and isinstance(cluster, KafkaCluster):
        report.sections.append(("Apache Kafka node logs (last lines)", cluster.log_tail(25)))
    return report


def _start_or_fail(broker: LocalBroker) -> None:
    try:
        broker.start_sync()
    except LocalBrokerError as exc:
        pytest.fail(f"the local Kafka broker could not start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[LocalBroker]:
    """A broker shared by the whole session (started on first use)."""
    broker = LocalBroker()
    _start_or_fail(broker)
    try:
        yield broker
    finally:
        broker.stop_sync()


@pytest.fixture
def kafka_broker_factory() -> Iterator[Callable[..., LocalBroker]]:
    """Start brokers of the test's own: ``factory(port=..., advertised_port=..., ...)``."""
    brokers: list[LocalBroker] = []

    def factory(**kwargs: Any) -> LocalBroker:
        broker = LocalBroker(**kwargs)
        brokers.append(broker)
        _start_or_fail(broker)
        return broker

    try:
        yield factory
    finally:
        for broker in brokers:
            broker.stop_sync()


@pytest.fixture
def fresh_kafka_broker(kafka_broker_factory: Callable[..., LocalBroker]) -> LocalBroker:
    """A broker of the test's own, which the test may stop and start again."""
    return kafka_broker_factory()
