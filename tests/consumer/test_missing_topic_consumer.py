"""A consumer of a topic that does not exist (auto-creation off), issue 49 item 2:
``getmany`` returns nothing, as in every client, but it used to say nothing either; one
WARNING now names the topic and the brokers' answer (the Java client logs it every
metadata round). FakeKafka in memory, on virtual time."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from aiokafka_ng.consumer import Consumer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_a_missing_topic_is_a_warning_once(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="aiokafka_ng")
    async with (
        FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka,
        Consumer("nosuch", **kafka.client_config(), allow_auto_create_topics=False) as consumer,
    ):
        for _ in range(5):  # several metadata rounds
            assert await consumer.getmany(timeout_ms=2000) == {}
    said = [
        r.getMessage()
        for r in caplog.records
        if r.levelno == logging.WARNING and "'nosuch'" in r.getMessage()
    ]
    assert len(said) == 1, said
    assert "does not exist" in said[0] and "UNKNOWN_TOPIC_OR_PARTITION" in said[0], said
