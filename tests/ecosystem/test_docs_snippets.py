"""Every code block of docs/fastapi.md, migration.md, cli.md and admin.md runs as a reader
would paste it, against the bundled broker (docs/quickstart.md: test_quickstart.py;
docs/spark.md: tests/spark/test_spark_docs_snippets.py, on the shared Spark session).

The only edits are the reader's own: the documented address (``127.0.0.1:9092``, or
``PORT`` where the page says to note the printed one) becomes the test broker's, and names
the test broker already has get a unique suffix. A block that is not a whole program is
named in ``FRAGMENTS`` with why, and run where it belongs (the FastAPI readiness lines inside
the page's own lifespan). ``test_every_block_is_run_or_named`` fails when a page gains a
block this module does not know.
"""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
import uuid
from pathlib import Path
from types import ModuleType
from typing import Any

import anyio
import httpx
import pytest
import trustme
from fastapi import FastAPI
from fastapi.testclient import TestClient

from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.consumer import Consumer, TopicPartition
from aiokafka_ng.properties import load_properties
from aiokafka_ng.testing import FakeKafka

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
PAGES = ("fastapi", "migration", "cli", "admin")

#: (page, first line of the block) -> why the block is not run on its own here.
FRAGMENTS = {
    ("fastapi", "producer = await stack.enter_async_context("): (
        "two lines for the page's lifespan: run inside it (test_fastapi_wait_ready_lines)"
    ),
}


def blocks(page: str) -> list[tuple[str, str]]:
    """(language, code) of each fenced block of ``docs/<page>.md``."""
    text = (DOCS / f"{page}.md").read_text()
    return re.findall(r"^```(\w*)\n(.*?)^```", text, flags=re.S | re.M)


def block(page: str, lang: str, starts: str) -> str:
    found = [code for kind, code in blocks(page) if kind == lang and code.startswith(starts)]
    assert len(found) == 1, (page, lang, starts, found)
    return found[0]


#: What the tests below run, by (page, language, first characters of the block).
RUN = {
    ("fastapi", "python", "from contextlib import AsyncExitStack"),
    ("migration", "python", "# from aiokafka import"),
    ("cli", "sh", "aiokafka-ng broker &"),
    ("cli", "properties", "bootstrap.servers="),
}


def test_every_block_is_run_or_named() -> None:
    for page in PAGES:
        for lang, code in blocks(page):
            ran = any(p == page and lang == kind and code.startswith(s) for p, kind, s in RUN)
            named = any(p == page and code.startswith(s) for p, s in FRAGMENTS)
            assert ran != named, (page, lang, code[:80])


def unique(name: str) -> str:
    return f"{name}-{uuid.uuid4().hex[:8]}"


def exec_module(code: str, name: str) -> ModuleType:
    module = ModuleType(name)
    exec(compile(code, f"<docs snippet {name}>", "exec"), module.__dict__)
    return module


async def read_values(bootstrap: str, topic: str, count: int) -> list[bytes]:
    consumer = Consumer(bootstrap_servers=bootstrap, auto_offset_reset="earliest")
    got: list[bytes] = []
    async with consumer:
        partitions = await consumer.partitions_for_topic(topic)
        consumer.assign([TopicPartition(topic, p) for p in partitions])
        with anyio.fail_after(30):
            while len(got) < count:
                for records in (await consumer.getmany(timeout_ms=500)).values():
                    got += [r.value for r in records if r.value is not None]
    return got


# --------------------------------------------------------------------------- fastapi.md


def fastapi_app(kafka_broker: Any, topic: str, ready_lines: bool = False) -> FastAPI:
    code = block("fastapi", "python", "from contextlib import AsyncExitStack")
    code = code.replace("127.0.0.1:9092", kafka_broker.bootstrap_servers)
    code = code.replace('"events"', repr(topic))
    if ready_lines:
        # The page's second block replaces the producer line of the lifespan.
        lines = block("fastapi", "python", "producer = await stack.enter_async_context(")
        old = "        app.state.producer = await stack.enter_async_context(Producer("
        start = code.index(old)
        end = code.index("\n", start)
        indented = "".join("        " + line + "\n" for line in lines.splitlines())
        code = code[:start] + indented + "        app.state.producer = producer" + code[end:]
    app = exec_module(code, "docs_fastapi").app
    assert isinstance(app, FastAPI)
    return app


def test_fastapi_page_app(kafka_broker: Any) -> None:
    topic = unique("events")
    with TestClient(fastapi_app(kafka_broker, topic)) as client:
        # (Right after startup /health may say 503 until the first metadata answer: the
        # page's second block, test_fastapi_wait_ready_lines, is for apps that mind.)
        created = client.post("/events", params={"value": "first"})
        assert created.status_code == 201, created.text
        assert set(created.json()) == {"partition", "offset"}
        health = client.get("/health")
        assert health.status_code == 200 and health.json()["status"] == "ok", health.text
        queued = client.post("/events/fire-and-forget", params={"value": "second"})
        assert queued.status_code == 202 and queued.json() == {"queued": True}
    # Leaving the lifespan delivered the fire-and-forget record.
    got = anyio.run(read_values, kafka_broker.bootstrap_servers, topic, 2)
    assert sorted(got) == [b"first", b"second"]


def test_fastapi_wait_ready_lines(kafka_broker: Any) -> None:
    topic = unique("events")
    with TestClient(fastapi_app(kafka_broker, topic, ready_lines=True)) as client:
        # wait_ready returned inside the lifespan: ready before the first request.
        assert client.app.state.producer.status().ready  # type: ignore[attr-defined]
        assert client.post("/events", params={"value": "v"}).status_code == 201


@pytest.mark.anyio
async def test_fastapi_page_health_answers_503_after_shutdown() -> None:
    # The page's /health asks producer.status().ready: once the lifespan has closed the
    # producer, a request still served (uvicorn drains in-flight ones) must hear 503, not
    # 200 (issue 47; a closed producer said ready=True). On FakeKafka over TCP, the page's
    # own app: only the address is the reader's edit.
    async with FakeKafka(brokers=1) as kafka:
        app = fastapi_app(kafka, unique("events"))
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://app") as client:
            async with app.router.lifespan_context(app):
                await app.state.producer.wait_ready(30)
                up = await client.get("/health")
                assert up.status_code == 200 and up.json() == {"status": "ok", "brokers": 1}
            down = await client.get("/health")
    assert down.status_code == 503, down.text
    assert down.json()["detail"].startswith("kafka unavailable")
    assert app.state.producer.status().state == "closed"


# --------------------------------------------------------------------------- migration.md


def test_migration_import_block() -> None:
    code = block("migration", "python", "# from aiokafka import")
    names = exec_module(code, "docs_migration").__dict__
    assert names["AIOKafkaProducer"].__module__ == "aiokafka_ng.compat"
    assert names["AIOKafkaConsumer"].__module__ == "aiokafka_ng.compat"


# --------------------------------------------------------------------------- cli.md


def _shell_line(line: str, address: str) -> str:
    command = line.split("#", 1)[0].strip()
    cli = f"{shlex.quote(sys.executable)} -m aiokafka_ng.cli"
    return command.replace("127.0.0.1:PORT", address).replace("aiokafka-ng", cli)


@pytest.mark.broker  # the page's own `aiokafka-ng broker &`, in a subprocess
def test_cli_examples_in_order(tmp_path: Path) -> None:
    lines = block("cli", "sh", "aiokafka-ng broker &").splitlines()
    assert lines[0].startswith("aiokafka-ng broker &")
    env = {"PYTHONPATH": str(ROOT), "COLUMNS": "200", "PATH": "/usr/bin:/bin"}
    broker = subprocess.Popen(
        shlex.split(_shell_line(lines[0].replace("&", ""), "")),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=env,
        cwd=tmp_path,
    )
    try:
        assert broker.stdout is not None
        printed = broker.stdout.readline().decode().strip()  # "note the printed address"
        assert printed.startswith("bootstrap_servers=127.0.0.1:"), printed
        address = printed.split("=", 1)[1]
        outputs: list[str] = []
        for line in lines[1:]:
            done = subprocess.run(
                ["bash", "-c", _shell_line(line, address)],
                capture_output=True,
                text=True,
                env=env,
                cwd=tmp_path,
                timeout=120,
                check=False,
            )
            assert done.returncode == 0, (line, done.stdout, done.stderr[-2000:])
            outputs.append(done.stdout)
        create, _produce, consume, describe, plan, execute = outputs
        assert "created orders (3 partitions)" in create
        records = [json.loads(row) for row in consume.splitlines()]
        assert sorted((r["key"], r["value"]) for r in records) == [("alice", "1"), ("bob", "2")]
        # The group committed what it printed: no lag, one row per partition.
        assert describe.startswith("audit  type=classic  state=Empty  members=0  total lag=0"), (
            describe
        )
        assert describe.count("│ orders │") == 3, describe
        assert "dry run" in plan and plan.count("│ orders │") == 3, plan
        assert "reset 3 partitions of audit" in execute, execute
    finally:
        broker.terminate()
        broker.communicate(timeout=30)


def test_cli_command_config_block(tmp_path: Path) -> None:
    # The reader's own CA file stands in for the page's /etc/kafka/ca.pem.
    ca = tmp_path / "ca.pem"
    trustme.CA().cert_pem.write_to_path(str(ca))
    path = tmp_path / "client.properties"
    text = block("cli", "properties", "bootstrap.servers=")
    assert "/etc/kafka/ca.pem" in text
    path.write_text(text.replace("/etc/kafka/ca.pem", str(ca)))
    config = ProducerConfig.from_properties(load_properties(path))
    assert config.bootstrap_servers == "broker1:9093,broker2:9093"
    assert (config.security_protocol, config.sasl_mechanism) == ("SASL_SSL", "SCRAM-SHA-512")
    assert config.sasl_plain_username == "alice"
    # The password's value (quoted as repr shows str values), not a field name that
    # contains the word (sasl_oauthbearer_client_secret).
    assert "'secret'" not in repr(config) and "secret')" not in repr(config)
    assert config.sasl_plain_password is not None
    assert config.sasl_plain_password.get_secret_value() == "secret"
