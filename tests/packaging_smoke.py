"""The smoke check ``tests/test_packaging.py`` runs inside a clean virtualenv, against an
installed artifact (a wheel or the sdist): not a test module, a script.

``python -I packaging_smoke.py compiled`` (or ``pure REASON``) checks that:

- ``aiokafka_ng`` is imported from the virtualenv's site-packages, not from a checkout;
- its ``__version__`` is the installed distribution's version;
- LICENSE (the Apache-2.0 text) and NOTICE are installed with it;
- :func:`aiokafka_ng.build_info` reports the build expected: every mypyc module and the C
  kernel loaded, or the pure one with REASON in its reason;
- records make the round trip: a producer writes 500 (keyed, three codecs) to
  ``aiokafka_ng.testing.FakeKafka`` and a consumer reads back exactly them, on asyncio and
  on trio (virtual time).

It prints one JSON line (what it saw) and exits non-zero, naming the check, if one fails.
"""

from __future__ import annotations

import importlib.metadata
import json
import sys
from pathlib import Path
from typing import Any

import anyio

import aiokafka_ng
from aiokafka_ng import Consumer, Producer, TopicPartition, build_info
from aiokafka_ng.testing import FakeKafka, virtual_time

RECORDS = 500


async def round_trip() -> list[tuple[int, int, bytes | None, bytes | None]]:
    """(partition, offset, key, value) of every record read back, in order per partition."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("smoke", 2)
        sent = []
        for codec in ("none", "gzip", "zstd"):
            async with Producer(**kafka.client_config(), compression_type=codec) as producer:
                for _ in range(RECORDS // 3 + (codec == "none") * (RECORDS % 3)):
                    key = b"k%d" % (len(sent) % 7)
                    value = b"%s-%06d" % (codec.encode(), len(sent))
                    sent.append((key, value, await producer.send("smoke", value, key=key)))
                await producer.flush()
        got: list[tuple[int, int, bytes | None, bytes | None]] = []
        async with Consumer(**kafka.client_config(), auto_offset_reset="earliest") as consumer:
            consumer.assign([TopicPartition("smoke", p) for p in range(2)])
            with anyio.fail_after(60):  # virtual time: a hang fails at once, not in a minute
                while len(got) < len(sent):
                    for records in (await consumer.getmany(timeout_ms=500)).values():
                        got.extend((r.partition, r.offset, r.key, r.value) for r in records)
        # What each send's metadata said is where the consumer found the record.
        expected = sorted(
            (future.result().partition, future.result().offset, key, value)
            for key, value, future in sent
        )
        assert sorted(got) == expected, "the records read back are not the records sent"
        assert len(got) == RECORDS
        return got


def check(expect: str, reason: str) -> dict[str, Any]:
    seen: dict[str, Any] = {"python": sys.version.split()[0], "file": aiokafka_ng.__file__}
    assert Path(aiokafka_ng.__file__ or "").is_relative_to(sys.prefix), "not the installed copy"
    seen["version"] = aiokafka_ng.__version__
    dist = importlib.metadata.distribution("aiokafka-ng")
    assert dist.version == aiokafka_ng.__version__, f"metadata says {dist.version}"
    legal = {
        Path(str(f)).name: f for f in dist.files or () if Path(str(f)).parent.name == "licenses"
    }
    assert set(legal) == {"LICENSE", "NOTICE"}, f"licenses installed: {sorted(legal)}"
    license_text = legal["LICENSE"].read_text()
    assert "Apache License" in license_text and "Version 2.0, January 2004" in license_text
    info = build_info()
    seen["build"] = str(info)
    if expect == "compiled":
        assert info.compiled and all(info.modules.values()), f"expected compiled: {info}"
    else:
        assert not info.compiled and not any(info.modules.values()), f"expected pure: {info}"
        assert reason in info.reason, f"expected {reason!r} in the reason: {info.reason!r}"
    for backend in ("asyncio", "trio"):
        name, options = virtual_time.backend(backend)
        got = anyio.run(round_trip, backend=name, backend_options=options)
        seen[f"round_trip_{backend}"] = len(got)
    return seen


if __name__ == "__main__":
    print(json.dumps(check(sys.argv[1], sys.argv[2] if len(sys.argv) > 2 else "")), flush=True)
