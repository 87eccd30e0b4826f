"""docs/spark.md's code blocks run as a reader would paste them, on the shared Spark session
and the bundled broker (the other pages: tests/ecosystem/test_docs.py).

The reader's own edits only: the documented address becomes the test broker's, topic names
and the checkpoint directory get a unique suffix, and the names a block takes from the
reader's program (``spark``, ``df``, ``bootstrap``, ``F``) are given to it.
"""

from __future__ import annotations

import re
import uuid
from pathlib import Path
from typing import Any

from aiokafka_ng import Producer

DOCS = Path(__file__).resolve().parents[2] / "docs"

#: First characters of each block that is not run here -> why.
FRAGMENTS = {
    'export PYSPARK_PYTHON="$VIRTUAL_ENV/bin/python"': (
        "shell setup: the Spark fixture sets PYSPARK_PYTHON to this interpreter itself"
    ),
    "python -m pytest tests/kafka/test_spark_connector_peer.py": (
        "runs the peer test and the Spark benchmark (CI runs the test; bench/ is not a test)"
    ),
}
WRITE_READ = "from aiokafka_ng.spark import register"
STREAMING = "orders = (\n    spark.readStream"
REGISTRY = "orders = (\n    spark.read.format"


def spark_blocks() -> list[str]:
    return re.findall(r"^```\w*\n(.*?)^```", (DOCS / "spark.md").read_text(), flags=re.S | re.M)


def the_block(starts: str) -> str:
    found = [code for code in spark_blocks() if code.startswith(starts)]
    assert len(found) == 1, (starts, found)
    return found[0]


def test_every_block_is_run_or_named() -> None:
    for code in spark_blocks():
        known = [s for s in (*FRAGMENTS, WRITE_READ, STREAMING, REGISTRY) if code.startswith(s)]
        assert len(known) == 1, code[:80]


def test_write_then_read_block(spark: Any, kafka_broker: Any) -> None:
    topic = f"events-{uuid.uuid4().hex[:8]}"
    code = the_block(WRITE_READ)
    code = code.replace("127.0.0.1:9092", kafka_broker.bootstrap_servers)
    code = code.replace('"events"', repr(topic))
    df = spark.createDataFrame(
        [(b"k%d" % i, b"v%d" % i) for i in range(50)], "key binary, value binary"
    )
    names: dict[str, Any] = {"spark": spark, "df": df}
    exec(compile(code, "<docs/spark.md write and read>", "exec"), names)
    rows = names["records"].select("key", "value", "headers").collect()
    assert sorted((bytes(r.key), bytes(r.value)) for r in rows) == sorted(
        (b"k%d" % i, b"v%d" % i) for i in range(50)
    )
    # includeHeaders adds the column; records sent without headers have null there, as with
    # Spark's own connector.
    assert all(r.headers is None for r in rows)


async def _produce(bootstrap: str, topic: str, values: list[bytes]) -> None:
    async with Producer(bootstrap_servers=bootstrap) as producer:
        for i, value in enumerate(values):
            await producer.send(topic, value, key=b"%d" % i)


def test_streaming_block(spark: Any, kafka_broker: Any, tmp_path: Path) -> None:
    import anyio
    from pyspark.sql import functions

    suffix = uuid.uuid4().hex[:8]
    source, sink = f"orders-{suffix}", f"orders-upper-{suffix}"
    code = the_block(STREAMING)
    code = code.replace('"orders"', repr(source)).replace('"orders-upper"', repr(sink))
    code = code.replace('"/tmp/orders-upper-checkpoint"', repr(str(tmp_path / "checkpoint")))
    values = [b"order %d" % i for i in range(30)]
    anyio.run(_produce, kafka_broker.bootstrap_servers, source, values)
    names: dict[str, Any] = {
        "spark": spark,
        "bootstrap": kafka_broker.bootstrap_servers,
        "F": functions,
    }
    exec(compile(code, "<docs/spark.md streaming>", "exec"), names)
    out = (
        spark.read.format("aiokafka_ng")
        .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
        .option("subscribe", sink)
        .load()
        .select("key", "value")
        .collect()
    )
    assert sorted((bytes(r.key), bytes(r.value)) for r in out) == sorted(
        (b"%d" % i, v.upper()) for i, v in enumerate(values)
    )


def test_registry_block(spark: Any, kafka_broker: Any, schema_registry: Any) -> None:
    """The Schema Registry section's read: typed columns from registry-framed Avro."""
    import json

    import anyio

    from aiokafka_ng.schema_registry import AvroSerializer, SchemaRegistryClient

    topic = f"orders-{uuid.uuid4().hex[:8]}"
    schema = json.dumps(
        {
            "type": "record",
            "name": "Order",
            "fields": [{"name": "id", "type": "long"}, {"name": "customer", "type": "string"}],
        }
    )

    async def produce() -> None:
        async with SchemaRegistryClient(schema_registry.url) as registry:
            serializer = await AvroSerializer.create(registry, schema, topic=topic)
            async with Producer(
                bootstrap_servers=kafka_broker.bootstrap_servers, value_serializer=serializer
            ) as producer:
                for i in range(3):
                    await producer.send(topic, {"id": i, "customer": f"c{i}"}, partition=0)

    anyio.run(produce)
    code = the_block(REGISTRY)
    code = code.replace("localhost:9092", kafka_broker.bootstrap_servers)
    code = code.replace("http://localhost:8081", schema_registry.url)
    code = code.replace('"orders"', repr(topic))
    names: dict[str, Any] = {"spark": spark}
    exec(compile(code, "<docs/spark.md registry read>", "exec"), names)
    rows = names["orders"].select("value.id", "value.customer").orderBy("id").collect()
    assert [(r.id, r.customer) for r in rows] == [(0, "c0"), (1, "c1"), (2, "c2")]
