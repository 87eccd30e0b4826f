"""docs/spark.md lists every option of Spark's Kafka connector beside ours; this keeps the
table and the options the source and sink accept from drifting apart (no Spark needed)."""

from __future__ import annotations

import re
from pathlib import Path

from aiokafka_ng.spark import REGISTRY_OPTIONS
from aiokafka_ng.spark._options import READ_OPTIONS, WRITE_OPTIONS

DOC = Path(__file__).resolve().parents[2] / "docs" / "spark.md"

#: Spark 4's Kafka connector options (Structured Streaming + Kafka Integration Guide).
SPARK_READ = {
    "kafka.bootstrap.servers", "assign", "subscribe", "subscribePattern",
    "startingTimestamp", "startingOffsetsByTimestamp", "startingOffsets",
    "startingOffsetsByTimestampStrategy", "endingTimestamp", "endingOffsetsByTimestamp",
    "endingOffsets", "failOnDataLoss", "kafkaConsumer.pollTimeoutMs", "fetchOffset.numRetries",
    "fetchOffset.retryIntervalMs", "maxOffsetsPerTrigger", "minOffsetsPerTrigger",
    "maxTriggerDelay", "minPartitions", "maxRecordsPerPartition", "groupIdPrefix",
    "kafka.group.id", "includeHeaders",
}  # fmt: skip
SPARK_WRITE = {"kafka.bootstrap.servers", "topic", "includeHeaders"}
STATUSES = ("supported", "differs", "not applicable")


def _table(heading: str) -> dict[str, str]:
    """``option -> status cell`` of the table under ``## heading``."""
    text = DOC.read_text()
    section = text.split(f"## {heading}\n", 1)[1].split("\n## ", 1)[0]
    rows: dict[str, str] = {}
    for line in section.splitlines():
        m = re.match(r"\| `([^`]+)` \|(.*)\|\s*$", line)
        if m:
            rows[m.group(1)] = m.group(2).rsplit("|", 1)[1].strip()
    return rows


def _check(rows: dict[str, str], spark: set[str], accepted: frozenset[str]) -> None:
    assert set(rows) - {"kafka.*"} == spark, "the table must list exactly Spark's options"
    for option, status in rows.items():
        assert status.startswith(STATUSES), f"{option}: status {status!r}"
        if option.startswith("kafka."):
            continue  # passed through to the client config, not an option of ours
        if status.startswith("not applicable"):
            assert option not in accepted, f"{option} is accepted but documented n/a"
        else:
            assert option in accepted, f"{option} is documented but not accepted"
        if status.startswith(("differs", "not applicable")):
            assert ":" in status, f"{option}: say why it differs"
    documented = {o for o, s in rows.items() if not s.startswith("not applicable")}
    assert accepted <= documented, f"accepted but undocumented: {sorted(accepted - documented)}"


def test_read_options_table_matches_the_source() -> None:
    _check(_table("Read options"), SPARK_READ, READ_OPTIONS)


def test_write_options_table_matches_the_sink() -> None:
    _check(_table("Write options"), SPARK_WRITE, WRITE_OPTIONS)


def test_registry_options_table_matches_the_options() -> None:
    text = DOC.read_text()
    section = text.split("## Schema Registry values\n", 1)[1].split("\n## ", 1)[0]
    rows = set(re.findall(r"^\| `([^`]+)` \|", section, re.MULTILINE))
    assert rows == REGISTRY_OPTIONS
