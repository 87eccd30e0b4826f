"""The examples run end to end (on the shared session, to spare a JVM start): the batch
pipeline, and the checkpointed streaming pipeline run twice over the same checkpoint."""

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


STREAMING = Path(__file__).resolve().parents[2] / "examples" / "spark_streaming_pipeline.py"


def test_streaming_example_restarts_without_loss_or_duplicates(
    spark: Any, kafka_broker: Any
) -> None:
    spec = importlib.util.spec_from_file_location("spark_streaming_pipeline", STREAMING)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.run_twice(spark, kafka_broker.bootstrap_servers, per_run=1500)
    # The second run read only what arrived after the first run's checkpoint.
    assert result["runs"] == [1500, 1500]
    assert result["output_records"] == 3000
    assert result["exactly_once"] is True
