"""``auto_offset_reset="by_duration:PnDTnHnMn.nS"`` (KIP-1106): a partition without a
committed offset starts at the first record written at most that long ago, the log end if
none is. Records carry timestamps hours apart (CreateTime, set by the producer), so the
answer does not depend on how long the test takes. On FakeKafka in memory and on virtual
time; tests/kafka/test_kafka_consumer_kips.py has the Apache Kafka version.
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import pytest

from aiokafka_ng import Consumer, Producer
from aiokafka_ng.admin import OffsetReset
from aiokafka_ng.config import parse_duration
from aiokafka_ng.consumer import ConsumerConfig, TopicPartition
from aiokafka_ng.errors import ConfigError
from aiokafka_ng.testing import FakeKafka, virtual_time

HOUR_MS = 3_600_000
#: Record ages: 3 h, 2 h, 30 min and 1 min before the test starts (offsets 0..3).
AGES_MS = [3 * HOUR_MS, 2 * HOUR_MS, HOUR_MS // 2, 60_000]


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


@pytest.mark.anyio
@pytest.mark.parametrize(
    ("strategy", "first"),
    [
        ("by_duration:PT1H", 2),  # the 30-minute-old record is the first within the hour
        ("by_duration:PT2H30M", 1),
        ("BY_DURATION:P1D", 0),  # case-insensitive, as the other strategies
        ("by_duration:PT10S", 4),  # nothing that recent: the log end
        ("earliest", 0),
        ("latest", 4),
    ],
)
async def test_a_new_group_starts_that_long_ago(strategy: str, first: int) -> None:
    now_ms = time.time_ns() // 1_000_000
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", 1)
        async with Producer(**kafka.client_config()) as producer:
            for i, age in enumerate(AGES_MS):
                await producer.send_and_wait("t", b"%d" % i, timestamp_ms=now_ms - age)
        tp = TopicPartition("t", 0)
        config = {**kafka.client_config(), "group_id": "g", "auto_offset_reset": strategy}
        async with Consumer(**config) as consumer:
            consumer.assign([tp])
            assert await consumer.position(tp) == first
            if first < len(AGES_MS):
                record = await consumer.getone()
                assert (record.offset, record.value) == (first, b"%d" % first)


def test_config_accepts_durations_and_names_the_bad_key() -> None:
    ok = ConsumerConfig(auto_offset_reset="by_duration:PT1H30M")
    assert ok.auto_offset_reset == "by_duration:pt1h30m"
    for bad in (
        "by_duration",
        "by_duration:",
        "by_duration:-PT1H",
        "by_duration:P1W",
        "by_duration:PT",
        "smallest",
    ):
        with pytest.raises(ConfigError) as info:
            ConsumerConfig(auto_offset_reset=bad)
        assert set(info.value.errors) == {"auto_offset_reset"}, bad
    props = ConsumerConfig.from_properties({"auto.offset.reset": "by_duration:P1DT2H"})
    assert props.auto_offset_reset == "by_duration:p1dt2h"


def test_one_duration_parser_for_consumer_admin_and_cli() -> None:
    assert parse_duration("P1DT2H30M") == timedelta(days=1, hours=2, minutes=30)
    assert parse_duration("PT0.5S") == timedelta(seconds=0.5)
    with pytest.raises(ValueError, match="bad duration"):
        parse_duration("P1DT")
    reset = OffsetReset.parse("by_duration:PT1H")
    assert reset == OffsetReset.by_duration(timedelta(hours=1), now_ms=reset.value + HOUR_MS)
