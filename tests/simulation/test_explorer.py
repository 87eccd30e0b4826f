"""The seeded explorer (tests/simulation/explorer.py) in CI: 2,000 fault schedules of the
real producer (idempotent, send_many, transactional) and consumer groups on FakeKafka, on
virtual time, every
invariant checked after each; a failure names the seed that replays it."""

from __future__ import annotations

import pytest

from tests.simulation import explorer

SCHEDULES = 2000
CHUNK = 250


@pytest.mark.parametrize("start", range(0, SCHEDULES, CHUNK))
def test_fault_schedules_keep_every_invariant(start: int) -> None:
    found = explorer.explore(range(start, start + CHUNK))
    assert not found, "\n\n".join(found)


#: Seeds that found a bug, kept as regressions: 713 and 2941 (transactional, transaction
#: version 1) left the producer fenced by itself before the abort ended run()'s
#: AddPartitionsToTxn call (TransactionManager._stop_adding).
REGRESSIONS = [713, 2941]


@pytest.mark.parametrize("seed", REGRESSIONS)
def test_seeds_that_found_bugs_stay_fixed(seed: int) -> None:
    explorer.run(seed)


def test_a_seed_replays_exactly() -> None:
    # A transactional run with cut responses, retries, reconnects and aborts: twice the same
    # seed, the same outcome, offset for offset.
    first, second = explorer.run(713), explorer.run(713)
    assert first == second
    assert first.acked and first.committed_read is not None


def test_a_broken_invariant_is_reported_with_its_seed(monkeypatch: pytest.MonkeyPatch) -> None:
    # The explorer must see what it is there to see: a log that keeps no producer state
    # (no duplicate detection) writes a retried batch twice under these faults.
    from aiokafka_ng.testing.fake._log import PartitionLog

    monkeypatch.setattr(PartitionLog, "_check_producer", lambda self, *args: None)
    found = explorer.explore(range(0, 200))
    assert found
    assert all("replay: python -m tests.simulation.explorer --seed" in f for f in found)
