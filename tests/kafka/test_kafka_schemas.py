"""The message schemas come from the kafka-clients jar of the pinned Kafka release
(tools/gen_protocol.py), with each request the client already sends held at the version its
code is written for (tools/protocol_caps.py). Checked against the real cluster: what the
handshake picks, and a request that exists only in the newer schemas."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from aiokafka_ng.errors import GroupIdNotFoundError
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.messages import REQUEST_TYPES
from aiokafka_ng.testing import KafkaCluster
from tests.kafka.helpers import admin_for

pytestmark = [pytest.mark.kafka, pytest.mark.anyio]

ROOT = Path(__file__).resolve().parents[2]


def caps_module() -> ModuleType:
    spec = importlib.util.spec_from_file_location(
        "protocol_caps", ROOT / "tools" / "protocol_caps.py"
    )
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


async def test_the_handshake_holds_each_capped_request_at_its_cap(
    kafka_cluster: KafkaCluster,
) -> None:
    """Kafka 4.4 offers newer versions of these requests (Produce v13 with topic ids, EndTxn
    v5 of transactions v2, ...); the client must still pick the versions its code is for."""
    caps: dict[str, tuple[int, str]] = caps_module().CAPS
    by_name = {cls.__name__.removesuffix("Request"): cls for cls in REQUEST_TYPES.values()}
    host, port = kafka_cluster.bootstrap_servers.split(",")[0].rsplit(":", 1)
    async with connect(host, int(port), ConnectionConfig()) as conn:
        beyond = 0
        for name, (cap, _why) in caps.items():
            cls = by_name[name]
            theirs = conn.api_versions.get(cls.API_KEY)
            if theirs is None:  # a controller-only API, not served by a broker
                continue
            assert conn.version_for(cls) == min(cap, theirs[1]), name
            beyond += theirs[1] > cap
        assert beyond >= 5  # the broker does offer newer versions: the caps are doing work


async def test_share_group_describe_negotiates_the_stable_v1(kafka_cluster: KafkaCluster) -> None:
    """ShareGroupDescribe had only an unstable v0 in the October 2024 schemas; from the 4.4
    jar it is v1, and a real broker answers it."""
    async with admin_for(kafka_cluster) as admin:
        result = await admin.describe_share_groups(["no-such-share-group"])
        assert isinstance(result["no-such-share-group"], GroupIdNotFoundError)
        # Answered (other tests of the session may have made share groups of their own).
        listed = await admin.list_share_groups()
        assert "no-such-share-group" not in {g.group_id for g in listed}
