"""Peak RSS, time and outcome of each hostile-broker row, for a before/after comparison.

The rows of ``tests/net/test_hostile_broker.py`` (plus an 11 x 99,999 partition answer that
runs into the per-answer struct budget), each served once from ``FakeKafka`` over TCP (a
``RawFrames`` script answering every Metadata request) to a ``Cluster`` bootstrapping
against it for 0.7 s of real time (the 90 MB row on the code before the limits decodes well
past that: the bootstrap succeeds). ``cd CHECKOUT && PYTHONPATH=. python
/path/to/bench/hostile_rows.py asyncio,trio [row,row]``: the fake comes from the measured
checkout's package, so it measures checkouts that have ``aiokafka_ng.testing.fake.RawFrames``;
for older ones, run this file as it was before RawFrames (it served the rows from
tests/net/net_fake_kafka.py, a TCP server of its own).
"""

from __future__ import annotations

import gc
import sys
import time
from pathlib import Path

sys.path[:0] = [".", str(Path(__file__).resolve().parent.parent / "tests" / "net")]

import anyio  # noqa: E402
import hostile_answers as h  # noqa: E402

import aiokafka_ng  # noqa: E402
from aiokafka_ng.cluster import Cluster, ClusterConfig  # noqa: E402
from aiokafka_ng.net.connection import ConnectionConfig  # noqa: E402
from aiokafka_ng.protocol.messages.metadata import MetadataRequest  # noqa: E402
from aiokafka_ng.testing import FakeKafka  # noqa: E402
from aiokafka_ng.testing.fake import RawFrames, Received  # noqa: E402

MB = 1 << 20
ROWS = {
    "frame_2gib": (h.huge_frame, 0),
    "array_count_2g": (h.huge_array_count, 0),
    "metadata_3m_partitions": (lambda c, p: h.many_partitions(c, p, 3_000_000), 0),
    "string_past_frame": (h.string_past_frame, 0),
    "garbage": (h.garbage, 0),
    "wrong_correlation_id": (h.wrong_correlation_id, 1000),
    "silence": (None, 0),
    "budget_11x99999": (lambda c, p: h.many_partitions(c, p, 99_999, topics=11), 0),
}


async def row(name: str) -> None:
    build, shift = ROWS[name]
    async with FakeKafka(brokers=1) as kafka:
        port = kafka.nodes[1].port
        kafka.api_versions[MetadataRequest.API_KEY] = (h.METADATA_VERSION, h.METADATA_VERSION)
        template = b"" if build is None else build(0, port)

        async def answer(call: Received) -> RawFrames:
            if build is None:  # silence
                await anyio.sleep_forever()
            return h.raw_answer(call, template, shift)

        kafka.answer(MetadataRequest.API_KEY, answer)
        config = ClusterConfig(
            bootstrap_servers=[("127.0.0.1", port)],
            connection=ConnectionConfig(request_timeout_s=0.3, connect_timeout_s=2),
            retry_backoff_ms=10,
            retry_backoff_max_ms=20,
            reconnect_backoff_ms=10,
            reconnect_backoff_max_ms=20,
            bootstrap_timeout_ms=700,
        )
        gc.collect()
        start = time.perf_counter()
        with h.peak_rss_growth() as growth:
            try:
                async with Cluster(config):
                    pass
                outcome = "no error: bootstrap succeeded"
            except Exception as exc:
                outcome = f"{type(exc).__name__}: ...{str(exc)[-110:]}"
        connections = kafka.connections(1)
    print(
        f"{name:24s} +{growth() / MB:6.0f} MB {time.perf_counter() - start:5.1f}s "
        f"connections={connections}  {outcome}",
        flush=True,
    )


def main() -> None:
    print("package:", aiokafka_ng.__file__)
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(ROWS)
    for backend in sys.argv[1].split(",") if len(sys.argv) > 1 else ["asyncio"]:
        print("backend", backend)
        for name in names:
            anyio.run(row, name, backend=backend)


if __name__ == "__main__":
    main()
