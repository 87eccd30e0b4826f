"""A record for a topic that does not exist (auto-creation off), issue 49 item 2: it used to
fail only at ``delivery_timeout_ms`` (120 s) with "no usable metadata", never naming
UNKNOWN_TOPIC_OR_PARTITION, with nothing logged. As the Java client's ``send()`` does, it
now fails after ``max_block_ms`` saying "not present in metadata" and what the brokers
answer; one WARNING says so while it waits (once UNKNOWN_TOPIC_OR_PARTITION has been the
answer for 2 s: Kafka answers it, for a moment, to a request that auto-creates a topic);
and ``send_and_wait(timeout=...)`` says what the record waits for. On FakeKafka in memory,
on virtual time: the timings are exact."""

from __future__ import annotations

import logging
from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import KafkaTimeoutError, SendTimeoutError, UnknownTopicOrPartitionError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _warnings(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]


async def test_fails_after_max_block_ms_naming_the_brokers_answer(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokafka_ng")
    async with (
        FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka,
        Producer(**kafka.client_config(), max_block_ms=5000) as producer,
    ):
        start = anyio.current_time()
        futures = [await producer.send("nosuch", b"v%d" % i) for i in range(3)]
        for future in futures:
            with pytest.raises(KafkaTimeoutError) as info:
                await future
        waited = anyio.current_time() - start
    assert waited == 5.0  # max_block_ms, not delivery_timeout_ms (120 s)
    text = str(info.value)
    assert "topic 'nosuch' not present in metadata after 5000 ms (max_block_ms)" in text
    assert "UnknownTopicOrPartitionError" in text and "does not exist" in text, text
    assert isinstance(info.value.__cause__, UnknownTopicOrPartitionError)
    said = [m for m in _warnings(caplog) if "'nosuch'" in m]
    assert len(said) == 1, said  # once per wait, not every metadata round
    assert "does not exist" in said[0] and "UNKNOWN_TOPIC_OR_PARTITION" in said[0], said
    assert "3 record(s)" in said[0] and "5000 ms" in said[0], said


async def test_send_and_wait_says_what_the_record_waits_for() -> None:
    async with (
        FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka,
        Producer(**kafka.client_config()) as producer,
    ):
        with pytest.raises(SendTimeoutError) as info:
            await producer.send_and_wait("nosuch", b"v", timeout=3)
    text = str(info.value)
    assert "it waits for the metadata of topic 'nosuch'" in text, text
    assert "(the brokers answer UnknownTopicOrPartitionError)" in text, text
    assert "within 60000 ms" in text  # max_block_ms's default


async def test_a_topic_created_while_records_wait_gets_them(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.WARNING, logger="aiokafka_ng")
    async with (
        FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka,
        Producer(**kafka.client_config(), max_block_ms=5000) as producer,
    ):
        start = anyio.current_time()
        future = await producer.send("later", b"v")
        # Virtual: the producer has heard "unknown" long enough to call the topic missing
        # (an auto-created topic is answered so for a moment: not missing before 2 s).
        await anyio.sleep(3)
        kafka.create_topic("later")
        meta = await future
        assert meta.offset == 0
        assert anyio.current_time() - start < 5  # delivered before the wait's bound
        # A batch of a known topic keeps delivery_timeout_ms (its own, longer, bound).
        kafka.black_hole(1)
        start = anyio.current_time()
        with pytest.raises(KafkaTimeoutError, match="delivery_timeout_ms"):
            await (await producer.send("later", b"w"))
        assert anyio.current_time() - start == 120.0
    assert any("'later'" in m for m in _warnings(caplog))
