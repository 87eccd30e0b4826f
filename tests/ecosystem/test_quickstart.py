"""docs/quickstart.md runs top to bottom against the bundled broker, as a reader pastes it.

Its Produce, Consume and Administer examples run in order, each in a fresh interpreter as the
complete program it is, with the documented address replaced by the test broker's. Left out,
each for its reason (``FRAGMENTS``): the "Many records" snippets continue the Produce example
inside its ``async with`` (they use ``producer``, ``items``, ``values`` from the reader's own
code), the lag/reset snippet works on consumer groups ("billing", "audit") the reader already
has, and the Transactions example is run on its own, as a file, by tests/ecosystem/test_docs.py
(the order of the page does not matter to it).

Before: the Consume example waited 22.5 s in silence for its first record on this broker (a
new group's first join is held for half the 45 s default session timeout), and the
Administer example failed with TOPIC_ALREADY_EXISTS for the topic the Produce example made.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import anyio

ROOT = Path(__file__).resolve().parents[2]
QUICKSTART = ROOT / "docs" / "quickstart.md"
#: The snippets that do not run here, by a line of theirs, and why (module docstring).
FRAGMENTS = {
    "futs = [await producer.send(": "continues the Produce example (producer, items)",
    "futs = await producer.send_batch(": "continues the Produce example (values, keys)",
    "run = await producer.send_many(": "continues the Produce example (values, keys)",
    "from datetime import timedelta": "works on consumer groups the reader already has",
    "# A transactional producer": "runs as a file in tests/ecosystem/test_docs.py",
}


def _python_blocks(text: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", text, flags=re.S)


def _runnable(blocks: list[str]) -> list[str]:
    return [b for b in blocks if not any(k in b for k in FRAGMENTS)]


def test_every_snippet_is_run_or_named_as_a_fragment() -> None:
    blocks = _python_blocks(QUICKSTART.read_text())
    runnable = _runnable(blocks)
    assert len(runnable) == 3, runnable  # Produce, Consume, Administer
    assert len(blocks) == len(runnable) + len(FRAGMENTS)


def test_quickstart_top_to_bottom(kafka_broker: Any, tmp_path: Path) -> None:
    produce, consume, administer = _runnable(_python_blocks(QUICKSTART.read_text()))
    address = kafka_broker.bootstrap_servers
    steps = {"produce": produce, "consume": consume, "administer": administer}
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    outputs: dict[str, subprocess.CompletedProcess[str]] = {}
    took: dict[str, float] = {}
    for name, code in steps.items():
        script = tmp_path / f"{name}.py"
        script.write_text(code.replace("127.0.0.1:9092", address))
        start = time.monotonic()
        outputs[name] = done = subprocess.run(
            [sys.executable, str(script)],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            check=False,
        )
        took[name] = time.monotonic() - start
        assert done.returncode == 0, (name, done.stdout, done.stderr[-3000:])
    print(f"quickstart steps, seconds: {took}")
    # Produce printed partition and offset of its first record.
    assert re.fullmatch(r"\d+ \d+\n", outputs["produce"].stdout), outputs["produce"].stdout
    # Consume read both records (in either order: two partitions) and said why it waited.
    lines = sorted(outputs["consume"].stdout.splitlines(), key=lambda line: line[-7:])
    assert len(lines) == 2 and all(line.startswith("events ") for line in lines), lines
    assert lines[0].endswith("None b'again'") and lines[1].endswith("b'user-1' b'hello'"), lines
    assert "group my-service: joining" in outputs["consume"].stderr
    # Administer created its own topic and listed the Produce example's. On Kafka the broker
    # answering list_topics may not have applied the creation yet (KRaft metadata reaches
    # each broker a moment after the controller answers), so "orders" is looked for until
    # it is listed.
    assert "'events'" in outputs["administer"].stdout
    if "'orders'" not in outputs["administer"].stdout:
        anyio.run(_listed_eventually, address, "orders")


async def _listed_eventually(address: str, topic: str) -> None:
    from aiokafka_ng import AdminClient

    async with AdminClient(bootstrap_servers=address) as admin:
        with anyio.fail_after(30):
            while topic not in await admin.list_topics():  # noqa: ASYNC110 (polling the broker)
                await anyio.sleep(0.1)
