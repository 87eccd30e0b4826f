"""The soak (bench/soak.py) in short: 30 s of a producer and a two-member consumer group on a
3-node FakeKafka over TCP, a fault step every 5 s (leader moves, a cut node, a node killed
or cut off, then back). Nothing lost, doubled or reordered, and
after everything closed the process holds the file descriptors and tasks it held before.
asyncio only: the soak counts asyncio tasks (trio's are covered by the reliability tests)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "bench"))
from soak import soak

pytestmark = pytest.mark.anyio


@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_short_soak_loses_nothing_and_leaks_nothing(anyio_backend: str) -> None:
    lines: list[str] = []
    result = await soak(30, rate=2000, fault_every=5, report_every=10, out=lines.append)
    print("\n".join(lines))
    assert result.faults >= 4 and result.produced >= 50_000
    assert result.failed_sends == 0
    assert (result.lost, result.duplicated, result.reordered) == (0, 0, 0)
    assert result.consumed == result.produced
    assert result.fds_after <= result.fds_before, (result.fds_before, result.fds_after)
    assert result.tasks_after <= result.tasks_before, (result.tasks_before, result.tasks_after)
