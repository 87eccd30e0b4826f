"""Bad options fail while Spark plans the query (no job runs), with a message naming the
option or column; plus the option parsing and the maxOffsetsPerTrigger split, without Spark."""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any, TypeVar

import anyio
import anyio.to_thread
import pytest
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows
from pyspark.sql.types import BinaryType, StructField, StructType

from aiokafka_ng.producer import Producer
from aiokafka_ng.spark import KafkaDataSource, SparkOptionError

# The read plan as the option parser makes it: a batch reader (the public way to a plan)
# asks a broker for the partitions' bounds first. KafkaDataLossError is what a stream
# raises when failOnDataLoss holds (exported nowhere else).
from aiokafka_ng.spark._read import KafkaDataLossError, plan_read
from aiokafka_ng.testing import FakeKafka

T = TypeVar("T")
EARLIEST, LATEST = -2, -1  # Spark's JSON offsets (startingOffsets='{"t": {"0": -2}}')


def plan_write(options: dict[str, str], schema: StructType) -> Any:
    """The plan of the write Spark plans with ``options`` (its writer's)."""
    return KafkaDataSource(options).writer(schema, False).plan


def stream_reader(options: dict[str, str]) -> Any:
    """The stream reader Spark gets for ``options`` (``readStream...load()``)."""
    source = KafkaDataSource(options)
    return source.streamReader(source.schema())


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
    _fails_at_planning(
        spark, read(**{"kafka.bootstrap.servers": bootstrap}), "assign, subscribe, subscribePattern"
    )
    # Valid for a stream, which load() cannot tell from a batch: a batch query fails when
    # it is planned (the first action), still before any job runs.
    latest = {"kafka.bootstrap.servers": bootstrap, "subscribe": "t", "startingOffsets": "latest"}
    frame = spark.read.format("aiokafka_ng").options(**latest).load()
    _fails_at_planning(spark, frame.count, "starting offset can't be latest for batch queries")
    # A stream's load() still checks every value: a malformed one fails there.
    _fails_at_planning(
        spark,
        lambda: spark.readStream.format("aiokafka_ng").options(**latest, endingOffsets="x").load(),
        "endingOffsets",
    )
    _fails_at_planning(
        spark,
        read(
            **{
                "kafka.bootstrap.servers": bootstrap,
                "subscribe": "t",
                "kafka.auto.offset.reset": "x",
            }
        ),
        "'auto.offset.reset' is not supported",
    )
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
    _fails_at_planning(
        spark,
        write(
            good,
            **{"kafka.bootstrap.servers": bootstrap, "topic": "t", "kafka.key.serializer": "x"},
        ),
        "'key.serializer' is not supported",
    )


# ---------------------------------------------------------------------- no Spark needed

BOOT = {"kafka.bootstrap.servers": "127.0.0.1:9"}


def test_overwrite_is_refused_as_by_sparks_connector(spark: Any, kafka_broker: Any) -> None:
    """Spark's own connector refuses save mode Overwrite (a topic cannot be truncated); ours
    did append under that name. Checked against Spark's connector on a real cluster (docs/
    spark.md, "Compared with Spark's own connector")."""
    df = spark.createDataFrame([("v",)], "value string")
    _fails_at_planning(
        spark,
        lambda: (
            df.write.format("aiokafka_ng")
            .option("kafka.bootstrap.servers", kafka_broker.bootstrap_servers)
            .option("topic", "never-written")
            .mode("overwrite")
            .save()
        ),
        "save mode Overwrite is not allowed for Kafka",
    )


def test_offsets_option_parsing() -> None:
    def batch(**options: str) -> Any:
        return plan_read({**BOOT, "subscribe": "t", **options}, streaming=False)

    assert batch().starting.offset_for("t", 0) == EARLIEST
    latest = plan_read({**BOOT, "subscribe": "t", "startingOffsets": "LATEST"}, streaming=True)
    assert latest.starting.offset_for("t", 5) == LATEST
    spec = batch(startingOffsets='{"t": {"0": 7, "2": -2}}').starting
    assert (spec.offset_for("t", 0), spec.offset_for("t", 2)) == (7, EARLIEST)
    for bad in ("later", "[1]", '{"t": 3}', '{"t": {"x": 1}}', '{"t": {"0": -3}}'):
        with pytest.raises(SparkOptionError, match="'endingOffsets'"):
            batch(endingOffsets=bad)


def test_sink_batches_are_librdkafkas_size_unless_set() -> None:
    schema = StructType([StructField("value", BinaryType())])
    plan = plan_write({**BOOT, "topic": "t"}, schema)
    assert plan.properties["batch.size"] == "1000000"  # librdkafka's batch.size
    plan = plan_write({**BOOT, "topic": "t", "kafka.batch.size": "16384"}, schema)
    assert plan.properties["batch.size"] == "16384"
    # A batch never outgrows what one request may carry.
    plan = plan_write({**BOOT, "topic": "t", "kafka.max.request.size": "200000"}, schema)
    assert plan.properties["batch.size"] == "200000"


def test_kafka_options_pass_through_and_are_validated() -> None:
    schema = StructType([StructField("value", BinaryType())])
    props = plan_write({**BOOT, "kafka.linger.ms": "7", "topic": "x"}, schema).properties
    assert props == {"bootstrap.servers": "127.0.0.1:9", "linger.ms": "7", "batch.size": "1000000"}
    with pytest.raises(SparkOptionError, match="maxOffsetsPerTrigger"):
        plan_read({**BOOT, "subscribe": "t", "maxOffsetsPerTrigger": "0"}, streaming=True)
    # Security and other client settings pass through.
    sasl = {
        "kafka.security.protocol": "SASL_PLAINTEXT",
        "kafka.sasl.mechanism": "PLAIN",
        "kafka.sasl.plain.username": "etl",
        "kafka.sasl.plain.password": "s3cret-pw",
    }

    def read_properties(**options: str) -> dict[str, str]:
        return stream_reader({**BOOT, "subscribe": "t", **options}).plan.properties  # type: ignore[no-any-return]

    props = read_properties(**sasl)
    assert (props["security.protocol"], props["sasl.plain.username"]) == ("SASL_PLAINTEXT", "etl")
    with pytest.raises(SparkOptionError) as info:
        read_properties(**{**sasl, "kafka.sasl.mechanism": "NOPE"})
    assert "sasl_mechanism" in str(info.value) and "s3cret-pw" not in str(info.value)
    # Spark accepts a group id (with a warning); no group is joined, so it is dropped.
    assert "group.id" not in read_properties(**{"kafka.group.id": "g"})
    plan_read({**BOOT, "subscribe": "t", "groupIdPrefix": "etl"}, streaming=True)


@pytest.mark.parametrize(
    ("option", "reason"),
    [
        ("auto.offset.reset", "startingOffsets"),
        ("key.deserializer", "keys are read as bytes"),
        ("value.deserializer", "values are read as bytes"),
        ("enable.auto.commit", "commits nothing"),
        ("interceptor.classes", "interceptors"),
    ],
)
def test_kafka_options_spark_forbids_on_read(option: str, reason: str) -> None:
    with pytest.raises(SparkOptionError, match=f"'{option}' is not supported: .*{reason}"):
        plan_read({**BOOT, "subscribe": "t", f"kafka.{option}": "x"}, streaming=False)


@pytest.mark.parametrize("option", ["key.serializer", "value.serializer"])
def test_kafka_options_spark_forbids_on_write(option: str) -> None:
    schema = StructType([StructField("value", BinaryType())])
    with pytest.raises(SparkOptionError, match=f"'{option}' is not supported"):
        plan_write({**BOOT, "topic": "t", f"kafka.{option}": "x"}, schema)


def test_exactly_one_subscription_strategy() -> None:
    def plan(**options: str) -> Any:
        return plan_read({**BOOT, **options}, streaming=False).subscription

    with pytest.raises(SparkOptionError, match="one of the options assign, subscribe"):
        plan()
    with pytest.raises(SparkOptionError, match=r"only one of .* got assign, subscribe"):
        plan(subscribe="t", assign='{"t": [0]}')
    assert plan(subscribe=" a, b ,a,").topics == ("a", "b")
    assert plan(SUBSCRIBE="a").topics == ("a",)  # Spark's options are case-insensitive
    assert plan(assign='{"b": [1, 0], "a": [2]}').assigned == (("a", 2), ("b", 0), ("b", 1))
    sub = plan(subscribePattern="orders-.*")
    assert sub.matches("orders-eu") and not sub.matches("xorders-eu")  # whole-name match
    for bad in ("[0]", '{"t": 0}', '{"t": ["0"]}', '{"t": [-1]}', "{}", "nope"):
        with pytest.raises(SparkOptionError, match="'assign'"):
            plan(assign=bad)
    with pytest.raises(SparkOptionError, match="'subscribePattern'"):
        plan(subscribePattern="(")
    with pytest.raises(SparkOptionError, match="'subscribe'"):
        plan(subscribe=" , ")


def test_batch_and_streaming_position_rules() -> None:
    def batch(**options: str) -> Any:
        return plan_read({**BOOT, "subscribe": "t", **options}, streaming=False)

    def stream(**options: str) -> Any:
        return plan_read({**BOOT, "subscribe": "t", **options}, streaming=True)

    with pytest.raises(SparkOptionError, match="starting offset can't be latest"):
        batch(startingOffsets="latest")
    with pytest.raises(SparkOptionError, match="startingOffsets for t-0 can't be latest"):
        batch(startingOffsets='{"t": {"0": -1}}')
    with pytest.raises(SparkOptionError, match="ending offset can't be earliest"):
        batch(endingOffsets="earliest")
    with pytest.raises(SparkOptionError, match="ending offset for t-1 can't be earliest"):
        batch(endingOffsets='{"t": {"0": -1, "1": -2}}')
    with pytest.raises(SparkOptionError, match="name different partitions"):
        batch(startingOffsets='{"t": {"0": 1}}', endingOffsets='{"t": {"1": 5}}')
    with pytest.raises(SparkOptionError, match=r"t-0: the start \(9\) is after the end \(5\)"):
        batch(startingOffsets='{"t": {"0": 9}}', endingOffsets='{"t": {"0": 5}}')
    with pytest.raises(SparkOptionError, match="'startingTimestamp'"):
        batch(startingTimestamp="yesterday")
    with pytest.raises(SparkOptionError, match="'startingOffsetsByTimestampStrategy'"):
        batch(startingTimestamp="5", startingOffsetsByTimestampStrategy="closest")
    assert batch().starting.default == EARLIEST and batch().ending.default == LATEST
    assert stream().starting.default == LATEST and stream().ending is None
    for name in ("endingOffsets", "endingOffsetsByTimestamp", "endingTimestamp"):
        with pytest.raises(SparkOptionError, match=f"'{name}'.*not valid in streaming"):
            stream(**{name: "1"})
    with pytest.raises(SparkOptionError, match="higher than maxOffsetsPerTrigger"):
        stream(minOffsetsPerTrigger="10", maxOffsetsPerTrigger="5")
    for name in ("failOnDataLoss", "includeHeaders"):
        with pytest.raises(SparkOptionError, match=f"'{name}' must be 'true' or 'false'"):
            batch(**{name: "yes"})
    assert batch().fail_on_data_loss and not batch().include_headers  # Spark's defaults
    assert stream(maxTriggerDelay="30s").max_trigger_delay_s == 30
    assert stream(maxTriggerDelay="250").max_trigger_delay_s == 0.25  # bare number: ms
    assert stream().max_trigger_delay_s == 15 * 60  # Spark's default, 15m
    with pytest.raises(SparkOptionError, match="'maxTriggerDelay'"):
        stream(maxTriggerDelay="soon")


@pytest.mark.anyio
async def test_min_partitions_and_max_records_split_like_spark() -> None:
    # The batch reader's tasks over t-0 (100 records), t-1 (300) and t-2 (none).
    async with broker_with({"t": [100, 300, 0]}) as boot:

        def pieces(**options: str) -> list[tuple[int, int, int]]:
            source = KafkaDataSource({**boot, "subscribe": "t", **options})
            reader = source.reader(source.schema())
            return [(r.partition, r.start, r.end) for r in reader.partitions()]

        # 8 wanted over 400 records: 2 pieces of t-0, 6 of t-1; the empty span yields none.
        assert await in_thread(lambda: pieces(minPartitions="8")) == [
            (0, 0, 50),
            (0, 50, 100),
            *[(1, 50 * i, 50 * (i + 1)) for i in range(6)],
        ]
        # Fewer wanted than partitions: one piece each.
        assert len(await in_thread(lambda: pieces(minPartitions="1"))) == 2
        # maxRecordsPerPartition first, then minPartitions if still short.
        split = await in_thread(lambda: pieces(maxRecordsPerPartition="150", minPartitions="3"))
        assert split == [(0, 0, 100), (1, 0, 150), (1, 150, 300)]
        with pytest.raises(SparkOptionError, match="'minPartitions'"):
            await in_thread(lambda: pieces(minPartitions="0"))


@asynccontextmanager
async def broker_with(ends: dict[str, list[int]]) -> AsyncIterator[dict[str, str]]:
    """A FakeKafka whose topic ``t``'s partition ``p`` holds ``ends[t][p]`` records; yields
    the option naming it. Over TCP: the reader runs a loop of its own (``in_thread``)."""
    async with FakeKafka() as kafka:
        async with Producer(**kafka.client_config()) as producer:
            for topic, counts in ends.items():
                kafka.create_topic(topic, partitions=len(counts))
                for partition, n in enumerate(counts):
                    await producer.send_batch(topic, [b"x"] * n, partition=partition)
            await producer.flush()
        yield {"kafka.bootstrap.servers": kafka.bootstrap_servers}


async def in_thread(fn: Callable[[], T]) -> T:
    """The reader's calls are synchronous (they run ``anyio.run`` themselves): a worker
    thread's, while FakeKafka serves on the test's loop."""
    return await anyio.to_thread.run_sync(fn)


@pytest.mark.anyio
async def test_min_offsets_per_trigger_waits_up_to_max_trigger_delay() -> None:
    # Partition 0 ends at 100; a trigger from offset 100 - n has n records to read. A
    # skipped trigger answers its start (nothing to read), a planned one the end.
    end = {"t": {"0": 100}}

    def from_(n: int) -> dict[str, dict[str, int]]:
        return {"t": {"0": 100 - n}}

    async with broker_with({"t": [100]}) as boot:
        options = {**boot, "subscribe": "t", "minOffsetsPerTrigger": "100"}

        def reader(delay: str) -> Any:
            return stream_reader({**options, "maxTriggerDelay": delay})

        def trigger(r: Any, n: int) -> dict[str, dict[str, int]]:
            return r.latestOffset(from_(n), ReadAllAvailable())

        slow = reader("1h")
        assert await in_thread(lambda: trigger(slow, 5)) == end  # the first always runs
        # Too few records, and the delay has not passed: skipped.
        assert await in_thread(lambda: trigger(slow, 99)) == from_(99)
        assert await in_thread(lambda: trigger(slow, 100)) == end
        assert await in_thread(lambda: trigger(slow, 1)) == from_(1)
        fast = reader("0ms")  # the delay has always passed
        assert await in_thread(lambda: trigger(fast, 5)) == end
        assert await in_thread(lambda: trigger(fast, 1)) == end
        # Trigger.AvailableNow reads everything there is: no minimum.
        now = reader("1h")
        await in_thread(now.prepareForTriggerAvailableNow)
        assert await in_thread(lambda: trigger(now, 1)) == end
        assert await in_thread(lambda: trigger(now, 1)) == end


@pytest.mark.anyio
async def test_max_offsets_per_trigger_is_shared_by_backlog() -> None:
    async with broker_with({"t": [1000, 300, 50, 0]}) as boot:
        reader = stream_reader({**boot, "subscribe": "t", "maxOffsetsPerTrigger": "100"})
        assert reader.getDefaultReadLimit() == ReadMaxRows(100)
        start = {"t": {"0": 0, "1": 100, "2": 50}}  # partition 3 is new: starts at 0
        end = await in_thread(lambda: reader.latestOffset(start, ReadMaxRows(100)))
        advance = {p: end["t"][p] - start["t"].get(p, 0) for p in end["t"]}
        assert sum(advance.values()) == 100
        assert advance["2"] == advance["3"] == 0  # nothing to read there
        assert advance["0"] > advance["1"] > 0  # proportional to backlog (1000 vs 200)
        everything = await in_thread(lambda: reader.latestOffset(start, ReadAllAvailable()))
        assert everything == {"t": {"0": 1000, "1": 300, "2": 50, "3": 0}}
    # Ranges per partition; empty ones produce no task.
    ranges = reader.partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in ranges] == [
        (0, 0, end["t"]["0"]),
        (1, 100, end["t"]["1"]),
    ]


@pytest.mark.anyio
async def test_streaming_data_loss_vanished_and_recreated_partitions() -> None:
    # The topic now has partitions 0-2 only, and partition 2 ends at 5, before our offset
    # 10 (re-created); our partition 3 is gone.
    async with broker_with({"t": [50, 30, 5]}) as boot:
        options = {**boot, "subscribe": "t"}
        strict = stream_reader(options)
        gone = {"t": {"0": 40, "1": 30, "3": 7}}
        with pytest.raises(KafkaDataLossError, match="t-3 is gone"):
            await in_thread(lambda: strict.latestOffset(gone, ReadAllAvailable()))
        behind = {"t": {"0": 40, "1": 30, "2": 10}}
        with pytest.raises(KafkaDataLossError, match=r"t-2: its end \(5\) is before our offset 10"):
            await in_thread(lambda: strict.latestOffset(behind, ReadAllAvailable()))
        lenient = stream_reader({**options, "failOnDataLoss": "false"})
        start = {"t": {"0": 40, "1": 30, "2": 10, "3": 7}}
        end = await in_thread(lambda: lenient.latestOffset(start, ReadAllAvailable()))
    assert end == {"t": {"0": 50, "1": 30, "2": 5}}
    # The re-created partition is read from its start; the vanished one is dropped (and
    # partition 1, with nothing new, makes no task).
    ranges = lenient.partitions(start, end)
    assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 40, 50), (2, 0, 5)]


def test_registered_source_has_a_thread_safe_environment_map(spark: Any) -> None:
    # Every streaming query's source runner adds keys to this map on the driver from its own
    # thread; a plain HashMap corrupted by two queries starting together fails every task
    # serialised with it afterwards (OptionalDataException; see aiokafka_ng.spark.register).
    source = spark._jsparkSession.sessionState().dataSourceManager().lookupDataSource("aiokafka_ng")
    env = source.dataSourceCls().envVars()
    assert env.getClass().getName() == "java.util.concurrent.ConcurrentHashMap"
    assert env.get("PYTHONHASHSEED") == spark.sparkContext.environment.get("PYTHONHASHSEED")


def test_unknown_options_are_named_but_spark_s_own_are_not(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A streaming write hands the sink its checkpointLocation: every micro-batch warned.
    options = {**BOOT, "topic": "t", "checkpointLocation": "/tmp/c", "path": "p", "topik": "typo"}
    schema = StructType([StructField("value", BinaryType())])
    with caplog.at_level("WARNING", logger="aiokafka_ng"):
        KafkaDataSource(options).streamWriter(schema, False)
    assert [r.getMessage() for r in caplog.records] == [
        "the aiokafka_ng sink ignores unknown options: topik"
    ]
