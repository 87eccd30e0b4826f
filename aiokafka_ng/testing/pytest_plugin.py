"""pytest fixtures that provide a real local Kafka-compatible broker.

Registered through the ``pytest11`` entry point once aiokafka-ng is installed. Fixtures:

- ``kafka_broker`` (session): one broker for the whole run; tests create uniquely named topics.
- ``kafka_broker_factory`` (function): ``factory(**LocalBroker kwargs)`` starts a broker of the
  test's own; every broker it made is stopped after the test.
- ``fresh_kafka_broker`` (function): one broker of the test's own, free to stop and restart.

``--broker`` chooses what backs ``kafka_broker``: ``tansu``, the embedded broker; ``kafka``,
the 3-node Apache Kafka cluster below (a :class:`KafkaClusterBroker` view of the
``kafka_cluster`` fixture; such test items also carry the ``kafka`` marker); ``both``, each
in turn (test ids end in ``-tansu`` / ``-kafka``); ``default``, Tansu, plus Kafka for the
test files under the ini option ``kafka_broker_paths`` (where the project lists the suites
CI runs on both), and Kafka *instead of* Tansu under ``kafka_instead_paths`` (slow suites
whose behaviour follows the broker's semantics, run once on the reference broker; on Tansu
where Kafka cannot run: ``--kafka=off``, or no Java/Maven under ``--kafka=auto``). A test
that relies on what only Tansu does carries ``@pytest.mark.tansu_only("why")`` and is not
run on Kafka. ``kafka_broker_factory`` and ``fresh_kafka_broker`` are always Tansu: they
give a test a broker of its own.

A broker that cannot start fails the test (``pytest.fail``); it is never skipped.

In-process (:class:`~aiokafka_ng.testing.FakeKafka`, no broker process at all):

- ``fake_kafka`` (function, async: the test is an anyio test): a started 3-node FakeKafka
  of the test's own, on TCP and in memory; ``**fake_kafka.client_config()`` connects an
  aiokafka_ng client in memory (exact under virtual time: :mod:`aiokafka_ng.testing.virtual_time`),
  ``fake_kafka.bootstrap_servers`` any client over TCP.

Apache Kafka (:class:`~aiokafka_ng.testing.KafkaCluster`):

- ``kafka_cluster`` (session): one 3-node KRaft cluster for the whole run, started on first
  use; tests that use it carry the ``kafka`` marker (``-m kafka`` selects them, ``-m "not
  kafka"`` leaves them out). ``--kafka=auto`` (the default) runs them where Java and Maven
  (or the cached jars) are present and skips them with a one-line reason where not;
  ``--kafka=require`` (the default under ``CI=true``) fails them instead; ``--kafka=off``
  skips them. A cluster that cannot start fails them in every mode. A failing test that used
  the cluster gets the tail of each node's log as a report section.

A Schema Registry (:class:`~aiokafka_ng.testing.SchemaRegistry`, Apicurio Registry):

- ``schema_registry`` (session): one registry for the whole run, started on first use; its
  Confluent-compatible API is at ``schema_registry.url``, and over HTTPS at
  ``schema_registry.tls_url`` (``schema_registry.ssl_context()`` trusts it). Tests share
  it: they use subjects of their own. ``--schema-registry`` works as ``--kafka`` does:
  ``auto`` (the default) skips where Java 21+ or Maven (for the first fetch) is missing,
  ``require`` (the default under ``CI=true``) fails instead, ``off`` skips; a registry that
  cannot start fails the test.
- ``schema_registry_factory`` (session): ``factory(**SchemaRegistry kwargs)`` starts a
  registry of its own (another JVM: ``oidc=`` for one that takes only tokens), under the
  same ``--schema-registry`` rules; every registry it made is stopped at the end of the
  session, so a session fixture built on it starts its registry once.
"""

from __future__ import annotations

import os
from collections.abc import AsyncIterator, Callable, Generator, Iterator
from pathlib import Path
from typing import Any, Final

import pytest

from aiokafka_ng.testing._broker import LocalBroker, LocalBrokerError
from aiokafka_ng.testing._kafka import KafkaCluster, KafkaClusterError
from aiokafka_ng.testing._kafka_cds import make_archive
from aiokafka_ng.testing._kafka_jars import KafkaSetupError, missing_tools
from aiokafka_ng.testing._registry import SchemaRegistry, SchemaRegistryProcessError
from aiokafka_ng.testing._registry import missing_tools as registry_missing_tools
from aiokafka_ng.testing.fake import FakeKafka

_KAFKA_MODES = ("auto", "require", "off")
_BROKER_CHOICES = ("default", "tansu", "kafka", "both")


class KafkaClusterBroker:
    """``kafka_broker`` backed by the Apache Kafka cluster: the attributes tests read.

    ``host``/``port`` are the first node's PLAINTEXT listener (enough to bootstrap);
    ``bootstrap_servers`` lists every node. What a single Tansu broker also offers
    (``stop``/``start``, one ``node_id``) is left out on purpose: tests needing it are Tansu-only.
    """

    def __init__(self, cluster: KafkaCluster) -> None:
        self.cluster: Final = cluster

    @property
    def bootstrap_servers(self) -> str:
        return self.cluster.bootstrap_servers

    @property
    def host(self) -> str:
        return self.cluster.brokers[0].host

    @property
    def port(self) -> int:
        return self.cluster.brokers[0].port

    def __repr__(self) -> str:
        return f"<KafkaClusterBroker {self.bootstrap_servers}>"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.getgroup("aiokafka_ng").addoption(
        "--kafka",
        choices=_KAFKA_MODES,
        default=None,
        help="tests marked 'kafka' (a real Apache Kafka cluster): auto = run where Java and "
        "Maven are present, else skip (default); require = fail without them (default under "
        "CI=true); off = skip them",
    )
    parser.getgroup("aiokafka_ng").addoption(
        "--broker",
        choices=_BROKER_CHOICES,
        default="default",
        help="what backs the kafka_broker fixture: tansu = the embedded broker; kafka = the "
        "3-node Apache Kafka cluster; both = each in turn; default = Tansu, and Kafka as well "
        "for the test files under the ini option kafka_broker_paths",
    )
    parser.getgroup("aiokafka_ng").addoption(
        "--schema-registry",
        choices=_KAFKA_MODES,
        default=None,
        help="the schema_registry fixture (Apicurio Registry): auto = run where Java 21+ and "
        "Maven are present, else skip (default); require = fail without them (default under "
        "CI=true); off = skip its tests",
    )
    parser.addini(
        "kafka_broker_paths",
        "test paths (relative to the rootdir) whose kafka_broker tests also run on Apache "
        "Kafka with --broker=default",
        type="linelist",
        default=[],
    )
    parser.addini(
        "kafka_instead_paths",
        "test paths (relative to the rootdir) whose kafka_broker tests run on Apache Kafka "
        "instead of Tansu with --broker=default (on Tansu where Kafka cannot run)",
        type="linelist",
        default=[],
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "kafka: needs the real Apache Kafka cluster (the kafka_cluster fixture)"
    )
    config.addinivalue_line(
        "markers",
        "tansu_only(reason): relies on the embedded Tansu broker; not run with --broker=kafka",
    )


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Parametrise every test that uses ``kafka_broker`` by the brokers ``--broker`` names."""
    if "kafka_broker" not in metafunc.fixturenames:
        return
    choice = str(metafunc.config.getoption("--broker", default="default"))
    tansu_only = metafunc.definition.get_closest_marker("tansu_only")
    if choice == "default":
        kinds = ["tansu"]
        if _under(metafunc.definition.path, metafunc.config, "kafka_broker_paths"):
            kinds.append("kafka")
        elif (
            _under(metafunc.definition.path, metafunc.config, "kafka_instead_paths")
            and tansu_only is None
            and _kafka_can_run(metafunc.config)
        ):
            kinds = ["kafka"]
    else:
        kinds = ["tansu", "kafka"] if choice == "both" else [choice]
    params = []
    for kind in kinds:
        marks: list[pytest.MarkDecorator] = []
        if kind == "kafka":
            marks.append(pytest.mark.kafka)
            if tansu_only is not None:
                if "tansu" in kinds:
                    continue  # it runs on Tansu in this session already
                reason = tansu_only.args[0] if tansu_only.args else "(no reason given)"
                marks.append(pytest.mark.skip(reason=f"Tansu only: {reason}"))
        params.append(pytest.param(kind, marks=marks, id=kind))
    metafunc.parametrize("kafka_broker", params, indirect=True, scope="session")


def _kafka_mode(config: pytest.Config, option: str = "--kafka") -> str:
    chosen = config.getoption(option, default=None)
    if chosen:
        return str(chosen)
    ci = os.environ.get("CI", "").strip().lower()
    return "require" if ci not in ("", "0", "false", "no") else "auto"


def _kafka_can_run(config: pytest.Config) -> bool:
    """Whether the Kafka cluster is wanted and (outside ``require``) has what it needs."""
    mode = _kafka_mode(config)
    return mode == "require" or (mode == "auto" and missing_tools() is None)


def _under(path: Path, config: pytest.Config, ini: str) -> bool:
    roots = [(config.rootpath / entry).resolve() for entry in config.getini(ini)]
    return any(path.resolve().is_relative_to(root) for root in roots)


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
    # Auto-created topics as Tansu makes them (4 partitions, TANSU.md), so the suites written
    # against Tansu can run here too (--broker), but replicated on every node.
    # A 1 GiB heap per node: the whole suite's topics, groups and share groups accumulate on
    # this one cluster, and at 384 MiB two nodes died of OutOfMemoryError late in a full
    # CI-style run (every later Kafka test then failed).
    cluster = KafkaCluster(
        brokers=3,
        broker_properties={"num.partitions": "4", "default.replication.factor": "3"},
        heap="1g",
    )
    try:
        # Made once per machine (.ci/run makes it before the tests): every node start of the
        # session is faster with it. Without it (the JVM could not write one) only speed is
        # lost; test_kafka_cluster.py's test of the archive then fails and says why.
        make_archive()
    except KafkaSetupError:
        pass
    try:
        cluster.start_sync()
    except KafkaClusterError as exc:
        pytest.fail(f"the Apache Kafka cluster could not start: {exc}", pytrace=False)
    try:
        yield cluster
    finally:
        cluster.stop_sync()


def _registry_wanted(config: pytest.Config) -> None:
    """Skip or fail, as ``--schema-registry`` says, where no registry can run."""
    mode = _kafka_mode(config, "--schema-registry")
    if mode == "off":
        pytest.skip("schema registry tests are off (--schema-registry=off)")
    missing = registry_missing_tools()
    if missing is not None:
        if mode == "auto":
            pytest.skip(f"no schema registry here: {missing}")
        pytest.fail(
            f"the schema registry is required (CI=true or --schema-registry=require): {missing}"
        )


def _start_registry(registry: SchemaRegistry) -> SchemaRegistry:
    try:
        registry.start_sync()
    except SchemaRegistryProcessError as exc:
        pytest.fail(f"the schema registry could not start: {exc}", pytrace=False)
    return registry


@pytest.fixture(scope="session")
def schema_registry(request: pytest.FixtureRequest) -> Iterator[SchemaRegistry]:
    """A Schema Registry shared by the whole session (see the module docstring)."""
    _registry_wanted(request.config)
    registry = _start_registry(SchemaRegistry(tls=True))
    try:
        yield registry
    finally:
        registry.stop_sync()


@pytest.fixture(scope="session")
def schema_registry_factory(
    request: pytest.FixtureRequest,
) -> Iterator[Callable[..., SchemaRegistry]]:
    """``factory(**SchemaRegistry kwargs)``: a started registry of its own, stopped at the
    end of the session (see the module docstring)."""
    started: list[SchemaRegistry] = []

    def factory(**kwargs: Any) -> SchemaRegistry:
        _registry_wanted(request.config)
        registry = SchemaRegistry(**kwargs)
        started.append(registry)
        return _start_registry(registry)

    try:
        yield factory
    finally:
        for registry in started:
            registry.stop_sync()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    report = yield
    funcargs = getattr(item, "funcargs", {})
    cluster = funcargs.get("kafka_cluster")
    broker = funcargs.get("kafka_broker")
    if isinstance(broker, KafkaClusterBroker):
        cluster = broker.cluster
    if report.failed and call.when == "call" and isinstance(cluster, KafkaCluster):
        report.sections.append(("Apache Kafka node logs (last lines)", cluster.log_tail(25)))
    registry = funcargs.get("schema_registry")
    if report.failed and call.when == "call" and isinstance(registry, SchemaRegistry):
        report.sections.append(("schema registry log (last lines)", registry.log_tail(25)))
    return report


def _start_or_fail(broker: LocalBroker) -> None:
    try:
        broker.start_sync()
    except LocalBrokerError as exc:
        pytest.fail(f"the local Kafka broker could not start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_broker(request: pytest.FixtureRequest) -> Iterator[LocalBroker | KafkaClusterBroker]:
    """A broker shared by the whole session (started on first use); see ``--broker``."""
    if getattr(request, "param", "tansu") == "kafka":
        yield KafkaClusterBroker(request.getfixturevalue("kafka_cluster"))
        return
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


@pytest.fixture
async def fake_kafka(anyio_backend: Any) -> AsyncIterator[FakeKafka]:
    """A started 3-node :class:`FakeKafka` of the test's own (see the module docstring)."""
    async with FakeKafka() as kafka:
        yield kafka
