"""docs/admin.md's table of Java Admin methods is checked against the client: a row marked
supported names a coroutine AdminClient has, every public AdminClient method is in one of
the tables, and the counts the page states are the table's."""

from __future__ import annotations

import inspect
import re
from pathlib import Path

from aiokafka_ng.admin import AdminClient

DOC = Path(__file__).resolve().parents[2] / "docs" / "admin.md"

# Java's Admin interface (apache/kafka trunk, October 2024), method names.
JAVA_ADMIN = set(
    [
        "abortTransaction",
        "addRaftVoter",
        "alterClientQuotas",
        "alterConfigs",
        "alterConsumerGroupOffsets",
        "alterPartitionReassignments",
        "alterReplicaLogDirs",
        "alterUserScramCredentials",
        "clientInstanceId",
        "close",
        "create",
        "createAcls",
        "createDelegationToken",
        "createPartitions",
        "createTopics",
        "deleteAcls",
        "deleteConsumerGroupOffsets",
        "deleteConsumerGroups",
        "deleteRecords",
        "deleteTopics",
        "describeAcls",
        "describeClientQuotas",
        "describeCluster",
        "describeConfigs",
        "describeConsumerGroups",
        "describeDelegationToken",
        "describeFeatures",
        "describeLogDirs",
        "describeMetadataQuorum",
        "describeProducers",
        "describeReplicaLogDirs",
        "describeShareGroups",
        "describeTopics",
        "describeTransactions",
        "describeUserScramCredentials",
        "electLeaders",
        "expireDelegationToken",
        "fenceProducers",
        "incrementalAlterConfigs",
        "listClientMetricsResources",
        "listConsumerGroupOffsets",
        "listConsumerGroups",
        "listOffsets",
        "listPartitionReassignments",
        "listShareGroups",
        "listTopics",
        "listTransactions",
        "metrics",
        "registerMetricForSubscription",
        "removeMembersFromConsumerGroup",
        "removeRaftVoter",
        "renewDelegationToken",
        "unregisterBroker",
        "unregisterMetricFromSubscription",
        "updateFeatures",
    ]
)


def _rows(text: str) -> list[list[str]]:
    return [
        [cell.strip() for cell in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| `")
    ]


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


def test_the_table_matches_the_client() -> None:
    text = DOC.read_text()
    java_rows = [r for r in _rows(text) if len(r) == 3]
    extra_rows = [r for r in _rows(text) if len(r) == 2]
    java = {r[0].strip("`"): r for r in java_rows}
    assert set(java) == JAVA_ADMIN
    ours = {
        name
        for name, member in inspect.getmembers(AdminClient)
        if not name.startswith("_") and callable(member)
    }
    documented: set[str] = set()
    counts = {"supported": 0, "not yet": 0, "not applicable": 0}
    for name, (_, mine, status) in java.items():
        kind = next(k for k in counts if status.startswith(k))
        counts[kind] += 1
        if kind == "supported" and mine.startswith("`") and "(" not in mine:
            method = mine.strip("`")
            assert method in ours, f"{name}: the table names {method}, AdminClient lacks it"
            assert method == _snake(name), f"{name}: expected {_snake(name)}"
            documented.add(method)
        elif kind == "supported":
            assert name == "create"  # the constructor
        else:
            assert not mine, f"{name} is {kind} but names {mine}"
            assert _snake(name) not in ours, f"{name}: AdminClient has it, the table says {kind}"
    documented |= {r[0].strip("`") for r in extra_rows}
    assert ours == documented, (ours - documented, documented - ours)
    stated = re.search(
        r"(\d+) supported here, (\d+) not yet, (\d+) not applicable", " ".join(text.split())
    )
    assert stated is not None
    assert tuple(int(n) for n in stated.groups()) == (
        counts["supported"],
        counts["not yet"],
        counts["not applicable"],
    )
