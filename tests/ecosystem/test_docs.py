"""The documentation: the configuration reference matches the models, the site builds with
``mkdocs build --strict``, and every Python snippet of the README and the docs runs as a
file (or is listed, with the reason it cannot)."""

from __future__ import annotations

import ast
import importlib.util
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

import pytest
import trustme

from aiokafka_ng.admin.config import AdminConfig
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.testing import LocalBroker

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"


def load_generator() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "gen_config_docs", ROOT / "tools" / "gen_config_docs.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_configuration_reference_matches_the_models() -> None:
    rendered = load_generator().render()
    current = (DOCS / "configuration.md").read_text()
    assert current == rendered, (
        "docs/configuration.md is stale: run python tools/gen_config_docs.py"
    )


def test_every_setting_is_in_the_reference() -> None:
    text = (DOCS / "configuration.md").read_text()
    for model in (ProducerConfig, ConsumerConfig, AdminConfig):
        for name in model.model_fields:
            assert f"| `{name}` |" in text, name
            dotted = name.replace("_", ".")
            assert f"`{dotted}`" in text or name == "ssl_context", dotted
    assert "`linger.ms` | float | `5`" in text
    assert "`session.timeout.ms` | int | `45000`" in text


def test_generator_check_mode_detects_drift(tmp_path: Path) -> None:
    gen = load_generator()
    stale = tmp_path / "configuration.md"
    stale.write_text("old\n")
    assert gen.main(["--check", "--output", str(stale)]) == 1
    assert gen.main(["--output", str(stale)]) == 0
    assert gen.main(["--check", "--output", str(stale)]) == 0


# -- Snippets -------------------------------------------------------------------------------
#
# Every ```python block of the README and the docs runs as a file, in a fresh interpreter:
# a complete program runs as it is written (a user pastes it into a file); a block that
# continues an earlier one runs inside the program INSIDE gives it, or after the block AFTER
# names; a pytest module (it defines test_ functions) runs under pytest. BEFORE runs a
# program first (the records a consumer reads). A block none of these fits is listed in
# NOT_RUN with the reason. The docs' broker address, 127.0.0.1:9092, becomes a fresh
# LocalBroker's (ADDRESS_FORMS). A new block that is not a complete program fails here
# until it is made one or listed; an entry that matches no block (or several) fails
# test_every_listed_snippet_exists.

SNIPPET_PAGES = (ROOT / "README.md", *sorted(DOCS.glob("*.md")))

#: The forms the docs' broker address takes in the snippets.
ADDRESS_FORMS = ('"127.0.0.1:9092"', '("127.0.0.1", 9092)')

#: The clients a continued snippet of the quickstart and observability pages talks about.
CLIENTS = """
import asyncio

import anyio
from aiokafka_ng import AdminClient, Consumer, NewTopic, Producer


async def main() -> None:
    async with AdminClient(bootstrap_servers="127.0.0.1:9092") as admin:
        (await admin.create_topics([NewTopic("events", 4, 1)])).raise_on_error()
    items = [(b"k1", b"v1"), (b"k2", b"v2")]
    values, keys, ts = [b"v%d" % i for i in range(10)], [b"k%d" % i for i in range(10)], 0
    async with (
        Producer(bootstrap_servers="127.0.0.1:9092") as producer,
        Consumer("events", bootstrap_servers="127.0.0.1:9092") as consumer,
    ):
        {snippet}


anyio.run(main)
"""

#: An admin client, and the group "billing" with committed positions on "events".
ADMIN_WITH_GROUP = """
import anyio
from aiokafka_ng import AdminClient, Consumer, Producer, TopicPartition


async def main() -> None:
    async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        for _ in range(3):
            await producer.send_and_wait("events", b"v", partition=0)
    async with Consumer(bootstrap_servers="127.0.0.1:9092", group_id="billing") as consumer:
        await consumer.commit({TopicPartition("events", 0): 2})
    async with AdminClient(bootstrap_servers="127.0.0.1:9092") as admin:
        {snippet}


anyio.run(main)
"""

FASTAPI_LIFESPAN = """
from contextlib import AsyncExitStack

import anyio
from aiokafka_ng import Producer

SERVERS = "127.0.0.1:9092"


async def main() -> None:
    async with AsyncExitStack() as stack:
        {snippet}


anyio.run(main)
"""

FAKE_KAFKA = """
import anyio
from aiokafka_ng.protocol.messages.create_topics import (
    CreatableTopicResult,
    CreateTopicsResponse,
)
from aiokafka_ng.protocol.messages.describe_acls import DescribeAclsResponse
from aiokafka_ng.testing import FakeKafka


async def main() -> None:
    async with FakeKafka(brokers=3) as kafka:
        {snippet}


anyio.run(main)
"""

SHARE_CALLBACK = """
import logging

from aiokafka_ng import ShareConsumer

log = logging.getLogger(__name__)

{snippet}
"""

#: (page, a line of the snippet) -> the program it runs inside, at "{snippet}".
INSIDE: dict[tuple[str, str], str] = {
    ("quickstart.md", "futs = [await producer.send("): CLIENTS,
    ("quickstart.md", "futs = await producer.send_batch("): CLIENTS,
    ("quickstart.md", "run = await producer.send_many("): CLIENTS,
    ("quickstart.md", "lags = await admin.describe_consumer_group_lag("): ADMIN_WITH_GROUP,
    ("observability.md", "snapshot(producer)"): CLIENTS,
    ("observability.md", "collector = PrometheusCollector("): CLIENTS,
    ("observability.md", "instrument_opentelemetry("): CLIENTS,
    ("fastapi.md", "await producer.wait_ready(timeout=10)"): FASTAPI_LIFESPAN,
    ("testing.md", "kafka.cut_after(1, 3)"): FAKE_KAFKA,
    ("testing.md", "from aiokafka_ng.testing.fake import RawFrames"): FAKE_KAFKA,
    ("share-groups.md", "def on_acknowledged(offsets, error):"): SHARE_CALLBACK,
}

#: (page, a line of the snippet) -> (page, a line of the snippet it continues): the two run
#: as one file.
AFTER: dict[tuple[str, str], tuple[str, str]] = {}

#: The records the quickstart's consumer reads (the Produce example's two).
PRODUCE_TWO = """
import anyio
from aiokafka_ng import Producer


async def main() -> None:
    async with Producer(bootstrap_servers="127.0.0.1:9092") as producer:
        await producer.send_and_wait("events", b"hello")
        await producer.send_and_wait("events", b"again")


anyio.run(main)
"""

#: (page, a line of the snippet) -> a program run first, against the same broker.
BEFORE: dict[tuple[str, str], str] = {
    ("quickstart.md", 'group_id="my-service",'): PRODUCE_TWO,
}

_KAFKA_JVM = (
    "starts an Apache Kafka cluster (KafkaCluster: a JVM, 10-25 s per start), over this "
    "file's budget"
)
_SHARE_GROUPS = (
    "share groups (KIP-932) need Apache Kafka: neither Tansu nor FakeKafka models them, and "
    "a KafkaCluster start (a JVM, 10-25 s) is over this file's budget; "
    "tests/kafka/test_kafka_share.py runs these calls against Apache Kafka"
)
_SPARK = (
    "needs a SparkSession (a JVM) and the reader's DataFrame: "
    "tests/spark/test_spark_docs_snippets.py runs it on the suite's shared Spark session"
)

_REGISTRY = (
    "needs a Schema Registry (a JVM, 6-9 s to start), over this file's budget; "
    "tests/schema_registry/ runs these calls against one"
)

#: (page, a line of the snippet) -> why it is not run.
NOT_RUN: dict[tuple[str, str], str] = {
    ("schema-registry.md", 'schema_id = await registry.register("orders-value"'): _REGISTRY,
    ("schema-registry.md", "value_serializer = await AvroSerializer.create("): _REGISTRY,
    ("schema-registry.md", "deserializer = AvroDeserializer(registry)"): _REGISTRY,
    ("schema-registry.md", "async with SchemaRegistry() as registry:"): _REGISTRY,
    ("schema-registry.md", "serializer = await JsonSerializer.create(registry, Order"): _REGISTRY,
    ("schema-registry.md", "serializer = await ProtobufSerializer.create(registry"): (
        _REGISTRY + "; and needs the application's generated order_pb2"
    ),
    ("security.md", "async with KafkaCluster(brokers=1, broker_properties=oauth_properties())"): (
        _KAFKA_JVM + "; tests/kafka/test_kafka_oauth.py runs this recipe"
    ),
    ("testing.md", "async with KafkaCluster(brokers=3) as cluster:"): _KAFKA_JVM,
    ("testing.md", "async with KafkaCluster(brokers=3, addressable=True) as cluster:"): (
        _KAFKA_JVM + ", and needs root; tests/kafka/test_kafka_partitions.py runs each call"
    ),
    ("share-groups.md", '"jobs", bootstrap_servers="127.0.0.1:9092", group_id="workers"'): (
        _SHARE_GROUPS
    ),
    ("share-groups.md", 'acknowledgement_mode="explicit", bootstrap_servers=servers'): (
        _SHARE_GROUPS
    ),
    ("share-groups.md", "await admin.incremental_alter_configs("): (
        "Tansu keeps no group configs; " + _SHARE_GROUPS
    ),
    ("share-groups.md", "await admin.list_share_groups()"): _SHARE_GROUPS,
    ("spark.md", "register(spark)  # once per SparkSession"): _SPARK,
    ("spark.md", 'spark.readStream.format("aiokafka_ng")'): _SPARK,
    ("spark.md", '.option("valueFormat", "avro")'): (
        _SPARK + " with a schema registry; tests/spark/test_spark_registry.py reads so"
    ),
}


#: (page, a line of the snippet) -> the module it needs, which the dev extra cannot install
#: everywhere: without it the snippet is skipped, saying so (under CI=true it fails: .ci/run
#: installs it).
NEEDS_MODULE: dict[tuple[str, str], str] = {
    ("security.md", 'sasl_mechanism="GSSAPI"'): "gssapi",
}


@dataclass(frozen=True)
class Snippet:
    page: str
    number: int  # its place on the page, from 1
    code: str

    def __str__(self) -> str:
        return f"{self.page}#{self.number}"

    def listed_in(self, table: Mapping[tuple[str, str], object]) -> list[tuple[str, str]]:
        return [key for key in table if key[0] == self.page and key[1] in self.code]


def python_snippets() -> list[Snippet]:
    return [
        Snippet(page.name, number, block)
        for page in SNIPPET_PAGES
        for number, block in enumerate(
            re.findall(r"^```python\n(.*?)^```", page.read_text(), flags=re.S | re.M), 1
        )
    ]


SNIPPETS = python_snippets()


def find_snippet(key: tuple[str, str]) -> Snippet:
    (found,) = [s for s in SNIPPETS if key in s.listed_in({key: None})]
    return found


def program_of(snippet: Snippet) -> str:
    """The file the snippet runs as."""
    (inside,) = [INSIDE[key] for key in snippet.listed_in(INSIDE)] or ["{snippet}"]
    code = snippet.code
    for key in snippet.listed_in(AFTER):
        code = find_snippet(AFTER[key]).code + "\n\n" + code
    indent = inside.split("{snippet}")[0].rsplit("\n", 1)[-1]
    return inside.replace(indent + "{snippet}", textwrap.indent(code, indent))


def test_every_listed_snippet_exists() -> None:
    """A table entry that matches no snippet (or several) is stale: the docs moved on."""
    for table in (INSIDE, AFTER, BEFORE, NOT_RUN, NEEDS_MODULE):
        for key in table:
            matches = [s for s in SNIPPETS if key in s.listed_in({key: None})]
            assert len(matches) == 1, (key, [str(s) for s in matches])
    for snippet in SNIPPETS:
        assert len(snippet.listed_in(INSIDE)) + len(snippet.listed_in(NOT_RUN)) <= 1, snippet


@pytest.mark.parametrize("snippet", SNIPPETS, ids=str)
def test_python_snippets_parse(snippet: Snippet) -> None:
    ast.parse(snippet.code, filename=snippet.page, feature_version=(3, 11))


def run_python(args: list[str], cwd: Path, **env_vars: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")} | env_vars
    env["PYTHONPATH"] = str(ROOT)  # the package under test, whatever the cwd
    # A hang guard only (a snippet takes 1-6 s); pytest-timeout would kill the whole worker.
    return subprocess.run(
        [sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=240
    )


RUNNABLE = [s for s in SNIPPETS if not s.listed_in(NOT_RUN)]


@pytest.mark.broker  # most start a LocalBroker (through the factory, or in the snippet)
@pytest.mark.parametrize("snippet", RUNNABLE, ids=str)
def test_python_snippet_runs_as_a_file(
    snippet: Snippet, tmp_path: Path, kafka_broker_factory: Callable[..., LocalBroker]
) -> None:
    for key in snippet.listed_in(NEEDS_MODULE):
        if importlib.util.find_spec(NEEDS_MODULE[key]) is None:
            reason = f"{snippet} needs the {NEEDS_MODULE[key]} package"
            if os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}:
                pytest.fail(reason, pytrace=False)
            pytest.skip(reason)
    programs = [BEFORE[key] for key in snippet.listed_in(BEFORE)] + [program_of(snippet)]
    if any(form in program for form in ADDRESS_FORMS for program in programs):
        broker = kafka_broker_factory()
        programs = [
            program.replace(ADDRESS_FORMS[0], f'"{broker.bootstrap_servers}"').replace(
                ADDRESS_FORMS[1], f'("127.0.0.1", {broker.port})'
            )
            for program in programs
        ]
    *before, program = programs
    for number, setup in enumerate(before):
        (tmp_path / f"before{number}.py").write_text(setup)
        done = run_python([f"before{number}.py"], tmp_path)
        assert done.returncode == 0, f"before {snippet}:\n{setup}\n{done.stderr}"
    if "/etc/kafka/ca.pem" in program:  # the TLS recipe's CA file: a throw-away CA's
        ca_file = tmp_path / "ca.pem"
        trustme.CA().cert_pem.write_to_path(str(ca_file))
        program = program.replace("/etc/kafka/ca.pem", str(ca_file))
    if re.search(r"^(async )?def test_", program, flags=re.M):
        (tmp_path / "test_snippet.py").write_text(program)
        # Only the plugins such a test file uses (anyio's, and aiokafka_ng's fixtures, which
        # installing the package registers): loading every installed one costs seconds.
        plugins = ["-p", "anyio", "-p", "aiokafka_ng.testing.pytest_plugin"]
        done = run_python(
            ["-m", "pytest", "-q", "-p", "no:cacheprovider", *plugins],
            tmp_path,
            PYTEST_DISABLE_PLUGIN_AUTOLOAD="1",
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert re.search(r"\b\d+ passed\b", done.stdout), done.stdout
        assert not re.search(r"\b(failed|skipped|error)", done.stdout), done.stdout
    else:
        (tmp_path / "snippet.py").write_text(program)
        done = run_python(["snippet.py"], tmp_path)
        assert done.returncode == 0, f"{snippet} as a file:\n{program}\n{done.stderr}"
