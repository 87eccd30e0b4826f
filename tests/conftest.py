from __future__ import annotations

import os

import pytest
from hypothesis import settings

# No per-example deadline: on a loaded 2-core machine (CI, or helpers sharing it) an example
# of a property test can take over Hypothesis's default 200 ms, and DeadlineExceeded then
# fails a correct test at random. Under CI the examples are also derandomized (the same
# every run), so a CI failure is reproducible; `nox -s fuzz` keeps exploring at random.
settings.register_profile(
    "suite", deadline=None, derandomize=os.environ.get("CI", "").lower() in {"1", "true", "yes"}
)
if not os.environ.get("HYPOTHESIS_PROFILE"):
    settings.load_profile("suite")


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> str:
    """Every ``@pytest.mark.anyio`` test runs on asyncio and on trio."""
    return str(request.param)
