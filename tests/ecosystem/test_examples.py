"""Every script in examples/ runs against the local broker and does what it says."""

from __future__ import annotations

import os
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "examples"


def run_example(name: str, *args: str) -> str:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        env=env,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr.decode()[-3000:]
    return done.stdout.decode()


def test_every_example_is_tested() -> None:
    scripts = {p.name for p in EXAMPLES.glob("*.py")}
    # The Spark pipelines belong to the Spark tests (tests/spark/test_spark_example.py; the
    # exactly-once one needs Apache Kafka: tests/kafka/test_spark_exactly_once_example.py).
    spark = {"spark_pipeline.py", "spark_streaming_pipeline.py", "spark_exactly_once.py"}
    assert scripts - spark == {
        "admin_script.py",
        "consumer_script.py",
        "producer_script.py",
        "trio_example.py",
    }
    assert (EXAMPLES / "fastapi_app" / "app.py").exists()  # tested in test_fastapi.py


def test_admin_script(kafka_broker: Any) -> None:
    out = run_example("admin_script.py", kafka_broker.bootstrap_servers, uuid.uuid4().hex[:8])
    assert "created" in out and "deleted" in out


def test_producer_then_consumer_script(kafka_broker: Any) -> None:
    topic = f"ex-{uuid.uuid4().hex[:8]}"
    out = run_example("producer_script.py", kafka_broker.bootstrap_servers, topic, "50")
    assert f"sent 51 records to {topic}" in out
    group = f"g-{topic}"
    out = run_example("consumer_script.py", kafka_broker.bootstrap_servers, topic, "30", group)
    assert "consumed and committed 30 records" in out
    first = {line.split(":")[0] for line in out.splitlines() if line.startswith(topic)}
    assert len(first) == 30
    # The second run starts where the first committed: together they saw each record once.
    out = run_example("consumer_script.py", kafka_broker.bootstrap_servers, topic, "21", group)
    assert "consumed and committed 21 records" in out
    second = {line.split(":")[0] for line in out.splitlines() if line.startswith(topic)}
    assert len(second) == 21 and not first & second


def test_trio_example(kafka_broker: Any) -> None:
    out = run_example("trio_example.py", kafka_broker.bootstrap_servers)
    assert "consumer: received 500 records, in order" in out
    assert "done under trio" in out


def test_every_example_takes_help() -> None:
    # `--help` used to be taken as the bootstrap address (the scripts read sys.argv by
    # position) and the script then tried to connect to a host called "--help".
    for script in sorted(EXAMPLES.glob("*.py")):
        out = run_example(script.name, "--help")
        assert out.startswith("usage: "), (script.name, out)
        assert "HOST:PORT" in out or "bootstrap" in out, (script.name, out)
