"""One SparkSession (``local[2]``) for every Spark test: JVM startup costs ~10-20 s."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.spark_session import local_builder, started


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    session = started(local_builder())
    try:
        yield session
    finally:
        session.stop()
