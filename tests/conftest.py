"""Suite-wide fixtures and the ``unit`` / ``broker`` markers.

Every test is exactly one of:

* ``broker``: needs a running broker (or schema registry) -- it uses a ``kafka_broker*``,
  ``kafka_cluster`` or ``schema_registry`` fixture (directly or through another fixture), is
  marked ``kafka``, or its module says so with ``pytestmark = pytest.mark.broker`` because it
  starts brokers itself (``LocalBroker()``, a ``broker`` subprocess, a ``SchemaRegistry()``);
* ``unit``: everything else. ``pytest -m unit`` runs them without starting any broker.

The split is kept honest at run time: a ``unit`` test that starts a :class:`LocalBroker`
fails, naming the marker it is missing.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from hypothesis import settings

from aiokafka_ng.testing import LocalBroker

# No per-example deadline: on a loaded 2-core machine (CI, or helpers sharing it) an example
# of a property test can take over Hypothesis's default 200 ms, and DeadlineExceeded then
# fails a correct test at random. Under CI the examples are also derandomized (the same
# every run), so a CI failure is reproducible; `nox -s fuzz` keeps exploring at random.
settings.register_profile(
    "suite", deadline=None, derandomize=os.environ.get("CI", "").lower() in {"1", "true", "yes"}
)
if not os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile("suite")

#: Fixtures that start a broker: a test whose fixture closure holds one is a broker test.
#: The schema registry counts as one: a server of its own (a JVM), which the quick command
#: (``-m "unit and not slow"``) leaves out.
BROKER_FIXTURES = ("kafka_broker", "kafka_cluster", "schema_registry")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(_SparkPeerFirst(), "spark-peer-first")
    config.addinivalue_line("markers", "unit: needs no broker (marked by tests/conftest.py)")
    config.addinivalue_line(
        "markers",
        "broker: needs a running broker or schema registry (kafka_broker*/kafka_cluster/"
        "schema_registry fixtures, or the test starts its own)",
    )


def uses_a_broker(item: pytest.Item) -> bool:
    if item.get_closest_marker("broker") or item.get_closest_marker("kafka"):
        return True
    names = getattr(item, "fixturenames", ())
    return any(name.startswith(BROKER_FIXTURES) for name in names)


#: Tests that need a Spark JVM started with Spark's own Kafka connector (spark.jars.packages
#: is read only at JVM start, and one JVM serves the whole process).
SPARK_PEER = "tests/kafka/test_spark_connector_peer.py"


#: The tests of the session's JVMs, in two units (:func:`worker_group`).
KAFKA_PATH = "tests/kafka/"
SPARK_PATH = "tests/spark/"
JVM_PATHS = (KAFKA_PATH, SPARK_PATH)
#: The tests of the schema registry (one JVM for the session, :func:`worker_group`).
REGISTRY_PATH = "tests/schema_registry/"
#: The units that start a Kafka cluster (and Spark) in their worker.
JVM_UNITS = ("jvm", "jvm2")


def worker_group(nodeid: str) -> str:
    """The work unit of a test under pytest-xdist (``--dist loadgroup``, scheduled by
    :func:`pytest_xdist_make_scheduler`): a unit runs on one worker.

    The tests of the session's JVMs (a 3-node Kafka cluster, an in-process Spark) are in two
    units, so that each worker starts one cluster at most:

    - "jvm": ``tests/kafka/`` -- the fault tests that kill and restart the cluster's nodes,
      and the Spark connector's peer, whose JVM options must be the first its process's
      Spark gets (``_SparkPeerFirst``). It is the longest unit by far and starts first.
    - "jvm2": ``tests/spark/`` and every other test with ``kafka`` among its parameter ids
      (``kafka_broker``'s: the client suites run on Kafka too). It is collected last
      (``_SparkPeerFirst``), so the worker that is not running "jvm" takes it once the
      short units are done, and only then starts its own cluster: with one unit for all
      of them, the other worker sat idle for the last third of the run.
    - "registry": ``tests/schema_registry/``, so that one worker starts the session's
      schema registry (a JVM) and the other none.

    Every other test is grouped with its file, so module-scoped fixtures start once. Read
    from the node id alone, as the controller sees only ids; collection checks that every
    test that uses the cluster is found so (``pytest_collection_modifyitems``).
    """
    path, _, rest = nodeid.partition("::")
    if path.startswith(KAFKA_PATH):
        return "jvm"
    if path.startswith(SPARK_PATH):
        return "jvm2"
    if path.startswith(REGISTRY_PATH):
        return "registry"
    params = rest[rest.find("[") + 1 : -1] if rest.endswith("]") else ""
    return "jvm2" if "kafka" in params.split("-") else path


@pytest.hookimpl(tryfirst=True)  # before ``-m`` selects by these markers
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        item.add_marker(pytest.mark.broker if uses_a_broker(item) else pytest.mark.unit)
        names = getattr(item, "fixturenames", ())
        on_kafka = item.get_closest_marker("kafka") or "kafka_cluster" in names
        if on_kafka and worker_group(item.nodeid) not in JVM_UNITS:
            raise pytest.UsageError(
                f"{item.nodeid} uses the Kafka cluster outside {JVM_PATHS} without a 'kafka' "
                "parameter id: pytest-xdist would start another cluster for it (conftest.py, "
                "worker_group)"
            )


try:  # pytest-xdist's scheduler, when it is installed (it is in the dev extra)
    from xdist.scheduler import LoadScopeScheduling
except ImportError:  # pragma: no cover
    LoadScopeScheduling = None

if LoadScopeScheduling is not None:

    class _ByWorkerGroup(LoadScopeScheduling):  # type: ignore[misc]
        """``--dist loadscope`` with :func:`worker_group` for the scope, in collection order
        (not largest first): the Spark peer's tests come first (``_SparkPeerFirst``), so
        the "jvm" unit, the longest by far, starts at once on the first worker. (xdist's
        own ``loadgroup`` renames node ids, which pytest 9's structured ids do not allow.)"""

        def __init__(self, config: pytest.Config, log: Any) -> None:
            config.option.loadscopereorder = False
            super().__init__(config, log)

        def _split_scope(self, nodeid: str) -> str:
            return worker_group(nodeid)

    def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
        if config.getvalue("dist") != "loadgroup":
            return None  # another --dist: xdist's own
        return _ByWorkerGroup(config, log)


class _SparkPeerFirst:
    """After every reordering: the Spark connector's peer tests go first, the "jvm2" unit's
    tests last (:func:`worker_group`). pytest groups the tests of the parametrised session
    broker together, which put tests/spark (a JVM without the connector) ahead of the peer
    and failed them all."""

    @pytest.hookimpl(trylast=True)
    def pytest_collection_modifyitems(self, items: list[pytest.Item]) -> None:
        peer = [item for item in items if item.nodeid.startswith(SPARK_PEER)]
        last = [item for item in items if worker_group(item.nodeid) == "jvm2"]
        if peer or last:
            first, late = set(map(id, peer)), set(map(id, last))
            rest = [i for i in items if id(i) not in first and id(i) not in late]
            items[:] = peer + rest + last


@pytest.fixture(autouse=True)
def _unit_tests_start_no_broker(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> Iterator[None]:
    if request.node.get_closest_marker("unit") is None:
        yield
        return
    problem = (
        f"{request.node.nodeid} starts a LocalBroker but is marked 'unit': give its module "
        "pytestmark = pytest.mark.broker (or use the kafka_broker fixture)"
    )

    async def guarded_start(self: LocalBroker, *args: Any, **kwargs: Any) -> None:
        pytest.fail(problem)

    def guarded_start_sync(self: LocalBroker, *args: Any, **kwargs: Any) -> None:
        pytest.fail(problem)

    monkeypatch.setattr(LocalBroker, "start", guarded_start)
    monkeypatch.setattr(LocalBroker, "start_sync", guarded_start_sync)
    yield


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``@pytest.mark.anyio`` test runs on asyncio and on trio."""
    return str(request.param)
