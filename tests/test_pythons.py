"""Every supported Python: a wheel built, imported compiled in a clean venv, and tested.

The main suite runs on the interpreter that runs it (3.11 in CI); this test runs
``tools/pythons.py`` for 3.12 and 3.13 (see its docstring for what each version runs and
why): side by side when run alone, one after the other under pytest-xdist. Under
``CI=true`` a missing interpreter fails the test, as a broker that cannot start does; on a
machine without them (a laptop with one Python) it is skipped, saying which.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))
import pythons  # noqa: E402

IN_CI = os.environ.get("CI", "").strip().lower() in {"1", "true", "yes"}


@pytest.mark.slow
@pytest.mark.timeout(2400)
def test_wheel_and_suite_on_every_python(tmp_path: Path) -> None:
    """Every version, each in its own copy of the checkout; the logs are in the failure
    message."""
    versions = [v for v in pythons.VERSIONS if pythons.find_interpreter(v) is not None]
    missing = sorted(set(pythons.VERSIONS) - set(versions))
    if missing and not IN_CI:
        if not versions:
            pytest.skip(f"Python {', '.join(missing)} not installed here (CI requires them)")
    else:
        versions = list(pythons.VERSIONS)  # under CI a missing one fails in the tool
    # Under pytest-xdist the other worker keeps a core busy: one version at a time then, or
    # three CPU-bound processes share two cores with the Kafka cluster's tests.
    jobs = "1" if os.environ.get("PYTEST_XDIST_WORKER") else str(len(versions))
    log = tmp_path / "pythons.log"
    with log.open("w") as out:
        done = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "pythons.py"),
                "--jobs",
                jobs,
                "--versions",
                *versions,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            cwd=ROOT,
            check=False,
        )
    text = log.read_text()
    assert done.returncode == 0, text[-8000:]
    for version in versions:
        assert f"{version}: wheel built, imports compiled, suite passed" in text, text[-3000:]
