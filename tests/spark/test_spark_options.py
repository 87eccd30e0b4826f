"""Bad options fail while Spark plans the query (no job runs), with a message naming the
option or column; plus the option parsing and the maxOffsetsPerTrigger split, without Spark."""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows

from aiokafka_ng.spark._options import (
    EARLIEST,
    LATEST,
    SparkOptionError,
    consumer_properties,
    parse_offsets,
    producer_properties,
)
from aiokafka_ng.spark._read import KafkaStreamReader, plan_read


def _fails_at_planning(spark: Any, action: Callable[[], Any], *needles: str) -> None:
    group = f"bad-options-{uuid.uuid4().hex[:8]}"
    sc = spark.sparkContext
    sc.setJobGroup(group, "expected to fail at planning time")
    try:
        with pytest.raises(Exception) as info:
            action()
    finally:
        sc.setLocalProperty("spark.jobGroup.id", None)
    for needle in needles:
        assert needle in str(info.value)
    assert list(sc.statusTracker().getJobIdsForGroup(group)) == []  # no Spark job ran


def test_bad_options_fail_at_planning_naming_the_option(spark: Any, kafka_broker: Any) -> None:
    bootstrap = kafka_broker.bootstrap_servers

    def read(**options: str) -> Callable[[], Any]:
        # load() alone must fail: the options are checked when the schema is asked for.
        return lambda: spark.read.format("aiokafka_ng").options(**options).load()

    def write(df: Any, **options: str) -> Callable[[], Any]:
        return lambda: df.write.format("aiokafka_ng").options(**options).mode("append").save()

    _fails_at_planning(spark, read(subscribe="t"), "kafka.bootstrap.servers")
    _fails_at_planning(spark, read(**{"kafka.bootstrap.servers": bootstrap}), "'subscribe'")
    _fails_at_planning(
        spark,
        read(**{"kafka.bootstrap.servers": bootstrap, "subscribe": "t", "startingOffsets": "soon"}),
        "startingOffsets",
    )
    good = spark.range(3).selectExpr("cast(id as string) as value")
    _fails_at_planning(spark, write(good, topic="t"), "kafka.bootstrap.servers")
    _fails_at_planning(
        spark,
        write(spark.range(3), **{"kafka.bootstrap.servers": bootstrap, "topic": "t"}),
        "column 'value'",
    )
    _fails_at_planning(
        spark,
        write(good, **{"kafka.bootstrap.servers": bootstrap, "kafka.lingerr.ms": "5"}),
        "lingerr.ms",
    )
    _fails_at_planning(
        spark, write(good, **{"kafka.bootstrap.servers": bootstrap}), "option 'topic'"
    )


# ---------------------------------------------------------------------- no Spark needed

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def test_offsets_option_parsing() -> None:
    assert parse_offsets({}, "startingOffsets", "earliest").offset_for("t", 0) == EARLIEST
    latest = parse_offsets({"startingOffsets": "LATEST"}, "startingOffsets", "earliest")
    assert latest.offset_for("t", 5) == LATEST
    spec = parse_offsets({"endingOffsets": '{"t": {"0": 7, "2": -2}}'}, "endingOffsets", "latest")
    assert (spec.offset_for("t", 0), spec.offset_for("t", 2)) == (7, EARLIEST)
    assert spec.offset_for("t", 1) == LATEST  # not named: the default
    for bad in ("later", "[1]", '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": -3}}'):
        with pytest.raises(SparkOptionError, match="'endingOffsets'"):
            parse_offsets({"endingOffsets": bad}, "endingOffsets", "latest")


def test_kafka_options_pass_through_and_are_validated() -> None:
    props = producer_properties({**BOOT, "kafka.linger.ms": "7", "topic": "x"})
    assert props == {"bootstrap.servers": "127.0.0.1:9", "linger.ms": "7"}
    with pytest.raises(SparkOptionError, match=r"kafka\.group\.id"):
        consumer_properties({**BOOT, "kafka.group.id": "g"})
    with pytest.raises(SparkOptionError, match="maxOffsetsPerTrigger"):
        plan_read({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, streaming=True)


def test_max_offsets_per_trigger_is_shared_by_backlog() -> None:
    plan = plan_read({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "100"}, streaming=True)
    reader = KafkaStreamReader(plan)
    assert reader.getDefaultReadLimit() == ReadMaxRows(100)
    reader._target = {"t": {"0": 1000, "1": 300, "2": 50, "3": 0}}  # no broker needed
    start = {"t": {"0": 0, "1": 100, "2": 50}}  # partition 3 is new: starts at 0
    end = reader.latestOffset(start, ReadMaxRows(100))
    advance = {p: end["t"][p] - start["t"].get(p, 0) for p in end["t"]}
    assert sum(advance.values()) == 100
    assert advance["2"] == advance["3"] == 0  # nothing to read there
    assert advance["0"] > advance["1"] > 0  # proportional to backlog (1000 vs 200)
    assert reader.latestOffset(start, ReadAllAvailable()) == reader._target
    # Ranges per partition; empty ones produce no task.
    ranges = reader.partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, end["t"]["0"]),
        (1, 100, end["t"]["1"]),
    ]
