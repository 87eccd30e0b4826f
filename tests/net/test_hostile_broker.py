"""A hostile or broken broker cannot make the client allocate what its answer dictates.

Each row serves one hostile answer to every Metadata request (the cluster's bootstrap) from
``FakeKafka`` (a ``RawFrames`` script), which answers ApiVersions properly first. A fake
because no real broker can be made to send a 2 GiB frame length, a 2**31 - 1 element count
or 3,000,000 partitions. In memory, on virtual time: the timeouts and the bootstrap's retry
window are exact, however long a 90 MB answer takes to refuse on a loaded machine. Every
row shows:

* a clean, named error surfaced to the caller (naming the broker and what was wrong:
  the field, the frame size, the correlation id, the timeout), after retries;
* a reconnect: the fake sees a second connection (the hostile one was dropped);
* bounded memory: the peak RSS growth during the row, sampled every 2 ms. Before the
  limits, the 3,000,000-partition answer was accepted: +1.2 GB in this row, the event loop
  blocked for 27-39 s (issue 34 measured +4.9 GB with a whole client); the bound asserted
  here is far below that and above what the row needs (the client buffers the 90 MB frame
  and joins it: about twice its size at the peak).

Runs on asyncio and trio.
"""

from __future__ import annotations

import gc
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import anyio
import pytest
from hostile_answers import (
    METADATA_VERSION,
    garbage,
    huge_array_count,
    huge_frame,
    many_partitions,
    peak_rss_growth,
    raw_answer,
    string_past_frame,
    wrong_correlation_id,
)

from aiokafka_ng.cluster import Cluster, ClusterConfig
from aiokafka_ng.errors import KafkaConnectionError
from aiokafka_ng.net.connection import ConnectionConfig
from aiokafka_ng.protocol.messages.metadata import MetadataRequest
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import RawFrames, Received

pytestmark = pytest.mark.anyio

_MB = 1024 * 1024
NODE = 1


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@dataclass(frozen=True)
class Row:
    name: str
    build: Callable[[int, int], bytes] | None  # None: never answer
    error: str  # regex the surfaced error must match ({where}: the broker's host:port)
    max_growth_mb: int = 60
    cid_shift: int = 0  # the answer's correlation id minus the request's
    # How long the bootstrap keeps retrying (virtual time: long enough for two attempts,
    # silence 0.3 s per attempt).
    bootstrap_ms: int = 700
    # The client's request timeout: short only where silence is the row.
    request_timeout_s: float = 5.0


ROWS = [
    Row("frame_2gib", huge_frame, r"{where}.*frame of 2147483647 bytes is larger than"),
    Row(
        "array_count_2g",
        huge_array_count,
        r"{where}.*MetadataResponse\.brokers count 2147483646 exceeds the 30 bytes left",
    ),
    Row(
        "metadata_3m_partitions",
        lambda cid, port: many_partitions(cid, port, 3_000_000),
        r"{where}.*MetadataResponseTopic\.partitions has 3000000 elements, more than the "
        r"limit of 100000",
        # The 90 MB frame is buffered, then joined: ~180 MB at the peak, then decoding
        # stops at the count. Unbounded, the row took +1.2 GB.
        max_growth_mb=300,
    ),
    Row(
        "string_past_frame",
        string_past_frame,
        r"{where}.*MetadataResponseTopic\.name: need 2147418112 bytes at offset \d+, have 3",
    ),
    Row("garbage", garbage, r"{where}.*undecodable frame from the broker"),
    Row(
        "wrong_correlation_id",
        wrong_correlation_id,
        r"{where}.*response correlation id \d+ does not match the oldest in-flight",
        cid_shift=1000,
    ),
    Row(
        "silence",
        None,
        r"{where}.*Metadata \(correlation id \d+\) got no response within 0.3s",
        bootstrap_ms=1200,
        request_timeout_s=0.3,
    ),
]


def _answerer(row: Row, template: bytes) -> Callable[[Received], Any]:
    """Every Metadata request's answer: ``template``, or (silence) none at all."""

    async def answer(call: Received) -> RawFrames:
        if row.build is None:  # silence: the client's request_timeout_ms must apply
            await anyio.sleep_forever()
        return raw_answer(call, template, row.cid_shift)

    return answer


@pytest.mark.parametrize("row", ROWS, ids=[r.name for r in ROWS])
async def test_hostile_metadata_answer(row: Row) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        port = kafka.nodes[NODE].port
        kafka.api_versions[MetadataRequest.API_KEY] = (METADATA_VERSION, METADATA_VERSION)
        template = b"" if row.build is None else row.build(0, port)
        kafka.answer(MetadataRequest.API_KEY, _answerer(row, template))
        config = ClusterConfig(
            bootstrap_servers=[("127.0.0.1", port)],
            # The admin's frame cap (100 MiB): the 90 MB answer gets through the frame
            # check and must be stopped by the decoder's limits.
            connection=ConnectionConfig(
                request_timeout_s=row.request_timeout_s,
                connect_timeout_s=2,
                transport=kafka.transport,
            ),
            retry_backoff_ms=10,
            retry_backoff_max_ms=20,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=20,
            bootstrap_timeout_ms=row.bootstrap_ms,
        )
        gc.collect()
        with peak_rss_growth() as growth, pytest.raises(KafkaConnectionError) as caught:
            async with Cluster(config):
                pass
        connections = kafka.connections(NODE)

    message = str(caught.value)
    where = re.escape(f"127.0.0.1:{port}")
    assert message.startswith(f"unable to bootstrap from 127.0.0.1:{port}")
    assert re.search(row.error.format(where=where), message), message
    assert connections >= 2, "the client did not reconnect after the hostile answer"
    grown_mb = growth() / _MB
    assert grown_mb < row.max_growth_mb, f"RSS grew {grown_mb:.0f} MB"
