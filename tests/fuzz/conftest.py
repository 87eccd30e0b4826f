"""Prints how many inputs the fuzz tests decoded (``pytest -s`` shows it)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.fuzz.fuzz_budget import INPUTS


@pytest.fixture(scope="session", autouse=True)
def _report_inputs() -> Iterator[None]:
    yield
    if INPUTS:
        total = sum(INPUTS.values())
        parts = ", ".join(f"{k}={v}" for k, v in sorted(INPUTS.items()))
        print(f"\n[fuzz] {total} inputs decoded ({parts})")
