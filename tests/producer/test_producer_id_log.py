"""What the producer id's owner logs when InitProducerId fails (issue 49 item 10): a
retriable error answered once -- COORDINATOR_LOAD_IN_PROGRESS to the first InitProducerId on
every fresh Kafka cluster -- is routine, said at DEBUG; one that persists is a WARNING.
On FakeKafka in memory, on virtual time (the retries' backoff costs no wall time)."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio

INIT_PRODUCER_ID = 22
COORDINATOR_LOAD_IN_PROGRESS = 14


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


def _init_logs(caplog: pytest.LogCaptureFixture) -> list[logging.LogRecord]:
    """The owner's own lines (the retry loop's per-attempt DEBUG lines aside)."""
    return [
        r
        for r in caplog.records
        if "InitProducerId failed" in r.getMessage() and " times (" in r.getMessage()
    ]


async def _send_one_after_failures(failures: int) -> None:
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t")
        kafka.inject(INIT_PRODUCER_ID, COORDINATOR_LOAD_IN_PROGRESS, times=failures)
        async with Producer(**kafka.client_config()) as producer:
            await producer.send_and_wait("t", b"v")
        assert len(kafka.received(INIT_PRODUCER_ID)) == failures + 1


async def test_a_transient_first_failure_is_said_at_debug(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiokafka_ng")
    await _send_one_after_failures(1)
    logged = _init_logs(caplog)
    assert [r.levelno for r in logged] == [logging.DEBUG], logged
    assert "COORDINATOR_LOAD_IN_PROGRESS" in logged[0].getMessage()
    assert [r for r in caplog.records if r.levelno >= logging.WARNING] == []


async def test_a_persisting_failure_is_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG, logger="aiokafka_ng")
    await _send_one_after_failures(10)
    # Said at the 1st failure (DEBUG) and the 10th (WARNING), not at each retry.
    assert [r.levelno for r in _init_logs(caplog)] == [logging.DEBUG, logging.WARNING]
