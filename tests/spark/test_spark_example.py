"""examples/spark_pipeline.py runs end to end (on the shared session, to spare a JVM start)."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "spark_pipeline.py"


def test_example_pipeline_runs(spark: Any, kafka_broker: Any) -> None:
    spec = importlib.util.spec_from_file_location("spark_pipeline", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.run_pipeline(spark, kafka_broker.bootstrap_servers, rows=2000)
    assert result["matches"] is True
    assert sum(count for count, _ in result["per_customer"].values()) == 2000
