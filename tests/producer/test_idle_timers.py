"""Nothing runs when nothing is due: the producer's timers are armed from deadlines.

On virtual time (FakeKafka in memory), so the event loop's turns can be counted
(``virtual_time.count_loop_turns``) and an expiry's moment asserted exactly.
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import KafkaTimeoutError
from aiokafka_ng.producer import Producer
from aiokafka_ng.testing import FakeKafka, virtual_time

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


async def test_an_idle_started_producer_does_not_wake_up() -> None:
    # A started producer that has delivered its record has nothing due until its metadata
    # ages (metadata_max_age_ms, 5 min by default): a minute of idleness costs the turns
    # of the test's own sleep, not one per poll (the old expiry tick: ~600 a minute).
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(**kafka.client_config(), linger_ms=5) as producer,
    ):
        await (await producer.send("idle", b"x"))
        await anyio.sleep(1)  # let what follows the answer settle
        with virtual_time.count_loop_turns() as turns:
            await anyio.sleep(60)
        assert turns.count <= 3, turns.count
        # And it still works afterwards.
        meta = await (await producer.send("idle", b"y"))
        assert meta.offset == 1


async def test_a_producer_that_never_sent_does_not_wake_up() -> None:
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(**kafka.client_config()),
    ):
        await anyio.sleep(1)
        with virtual_time.count_loop_turns() as turns:
            await anyio.sleep(60)
        assert turns.count <= 3, turns.count


async def test_an_in_flight_record_expires_at_its_delivery_timeout_not_later() -> None:
    # A black-holed broker never answers: the record's batch is in flight (then re-sent
    # after the request times out) until delivery_timeout_ms after it was created. The
    # record was sent at an odd moment (not on any tick of a periodic timer): it fails at
    # exactly its deadline.
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(**kafka.client_config(), linger_ms=0, delivery_timeout_ms=40_000) as producer,
    ):
        await (await producer.send("bh", b"warm-up"))
        kafka.black_hole(1)
        await anyio.sleep(0.0537)
        t0 = anyio.current_time()
        fut = await producer.send("bh", b"lost")
        with pytest.raises(KafkaTimeoutError):
            await fut
        assert anyio.current_time() - t0 == pytest.approx(40.0, abs=1e-6)
        assert producer.statistics().expired_batches == 1
        await producer.close(timeout=0)


async def test_a_record_waiting_for_metadata_expires_at_its_delivery_timeout() -> None:
    # The topic does not exist and is not created: the record waits in its topic's queue
    # and fails alone at delivery_timeout_ms, even though the producer was idle until then.
    async with (
        FakeKafka(brokers=1, tcp=False, auto_create_topics=False) as kafka,
        Producer(**kafka.client_config(), delivery_timeout_ms=31_000) as producer,
    ):
        await anyio.sleep(12.3456)
        t0 = anyio.current_time()
        fut = await producer.send("missing", b"x")
        with pytest.raises(KafkaTimeoutError, match="metadata"):
            await fut
        assert anyio.current_time() - t0 == pytest.approx(31.0, abs=1e-6)


async def test_expiry_rearms_after_an_idle_period() -> None:
    # The timer went idle (nothing held); a record sent afterwards still expires on time.
    async with (
        FakeKafka(brokers=1, tcp=False) as kafka,
        Producer(**kafka.client_config(), linger_ms=0, delivery_timeout_ms=35_000) as producer,
    ):
        await (await producer.send("re", b"a"))
        await anyio.sleep(100)  # long past the first record's deadline: the timer idles
        kafka.black_hole(1)
        t0 = anyio.current_time()
        fut = await producer.send("re", b"b")
        with pytest.raises(KafkaTimeoutError):
            await fut
        assert anyio.current_time() - t0 == pytest.approx(35.0, abs=1e-6)
        await producer.close(timeout=0)
