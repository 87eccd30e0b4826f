"""``PendingResponse.on_settled``: a request's answer acted on by a callback the connection
calls, instead of a task waiting for it (asyncio; the producer's senders use it); and, on
asyncio's plain TCP stream, answers matched and settled in the transport's own callback
(``PlainAsyncioStream.deliver_to``) instead of a reader task woken for each.

What must hold, as for ``wait()``: each callback is called exactly once -- with the answer,
or with the error the request failed with (a poisoned or closed connection, its own
deadline) -- and a connection's callbacks are called in wire order, a dying connection's
all at once, oldest first. Against FakeKafka in memory, on virtual time (asyncio only:
``on_settled`` bounds its wait with a loop timer).
"""

from __future__ import annotations

from typing import Any

import anyio
import pytest

from aiokafka_ng.errors import (
    CorrelationIdMismatchError,
    KafkaConnectionError,
    KafkaError,
    RequestTimeoutError,
)
from aiokafka_ng.net.connection import ConnectionConfig, connect
from aiokafka_ng.protocol.connection import ClientConnection
from aiokafka_ng.protocol.messages.metadata import MetadataRequest
from aiokafka_ng.protocol.messages.produce import ProduceRequest
from aiokafka_ng.testing import FakeKafka, virtual_time
from tests.net.test_connection import HeldAnswers, address, arrived, config, fake, node_of

pytestmark = pytest.mark.anyio


@pytest.fixture
def anyio_backend() -> tuple[str, dict[str, Any]]:
    return virtual_time.backend("asyncio")


class Calls:
    """What the callbacks were called with, in call order: (tag, response, error)."""

    def __init__(self) -> None:
        self.calls: list[tuple[int, Any, KafkaError | None]] = []
        self.changed = anyio.Event()

    def callback(self, tag: int) -> Any:
        def called(response: Any, error: KafkaError | None) -> None:
            self.calls.append((tag, response, error))
            self.changed.set()
            self.changed = anyio.Event()

        return called

    async def wait_for(self, n: int) -> None:
        while len(self.calls) < n:
            await self.changed.wait()


async def test_answers_reach_their_callbacks_once_in_wire_order() -> None:
    async with fake() as kafka:
        held = HeldAnswers(kafka)
        async with connect(*address(kafka), config(kafka, max_in_flight=3)) as conn:
            calls = Calls()
            for i in range(3):
                pending = await conn.submit(MetadataRequest(), expect_response=True)
                pending.on_settled(calls.callback(i))
            await arrived(kafka, 3)
            assert calls.calls == []
            held.release(0, 1, 2)
            await calls.wait_for(3)
            assert [(tag, node_of(r), e) for tag, r, e in calls.calls] == [
                (0, 0, None),
                (1, 1, None),
                (2, 2, None),
            ]
            stats = conn.statistics()
            assert (stats.in_flight, stats.permits_available) == (0, 3)
            assert not conn.closed
            await anyio.sleep(60)  # past every deadline: no timer fires any more
            assert len(calls.calls) == 3
            assert not conn.closed


async def test_a_poisoned_connection_fails_every_callback_once_oldest_first() -> None:
    async with fake() as kafka:
        held = HeldAnswers(kafka)
        async with connect(*address(kafka), config(kafka)) as conn:
            calls = Calls()
            for i in range(3):
                pending = await conn.submit(MetadataRequest(), expect_response=True)
                pending.on_settled(calls.callback(i))
            await arrived(kafka, 3)
            kafka.swap_next_responses(1)  # answers out of order: a correlation mismatch
            held.release(0, 1, 2)
            await calls.wait_for(3)
            assert [tag for tag, _, _ in calls.calls] == [0, 1, 2]
            for _, response, error in calls.calls:
                assert response is None
                assert isinstance(error, CorrelationIdMismatchError)
            assert conn.closed
            assert conn.statistics().permits_available == conn.statistics().max_in_flight


async def test_a_deadline_times_out_its_request_and_fails_the_others_in_wire_order() -> None:
    async with fake() as kafka:
        HeldAnswers(kafka)  # never released
        async with connect(*address(kafka), config(kafka)) as conn:
            calls = Calls()
            first = await conn.submit(MetadataRequest(), expect_response=True)
            first.on_settled(calls.callback(0))
            start = anyio.current_time()
            second = await conn.submit(MetadataRequest(), timeout=0.2, expect_response=True)
            second.on_settled(calls.callback(1))
            third = await conn.submit(MetadataRequest(), expect_response=True)
            third.on_settled(calls.callback(2))
            await calls.wait_for(3)
            assert anyio.current_time() - start == pytest.approx(0.2)
            assert [tag for tag, _, _ in calls.calls] == [0, 1, 2]
            errors = [error for _, _, error in calls.calls]
            assert type(errors[0]) is KafkaConnectionError
            assert isinstance(errors[1], RequestTimeoutError)
            assert "got no response within 0.2s" in str(errors[1])
            assert type(errors[2]) is KafkaConnectionError
            assert conn.closed
            assert "timed out" in conn.close_reason
            await anyio.sleep(60)  # the other deadlines pass: nothing is called again
            assert len(calls.calls) == 3


async def test_closing_the_connection_fails_the_unanswered_callbacks() -> None:
    async with fake() as kafka:
        held = HeldAnswers(kafka)
        async with connect(*address(kafka), config(kafka)) as conn:
            calls = Calls()
            answered = await conn.submit(MetadataRequest(), expect_response=True)
            answered.on_settled(calls.callback(0))
            unanswered = await conn.submit(MetadataRequest(), expect_response=True)
            unanswered.on_settled(calls.callback(1))
            held.release(0)
            await calls.wait_for(1)
            await conn.aclose()
            assert [tag for tag, _, _ in calls.calls] == [0, 1]
            assert calls.calls[0][2] is None
            assert type(calls.calls[1][2]) is KafkaConnectionError
            held.release(1)
            await anyio.sleep(60)
            assert len(calls.calls) == 2


async def test_a_request_without_an_answer_is_settled_at_once() -> None:
    async with fake() as kafka, connect(*address(kafka), config(kafka)) as conn:
        calls = Calls()
        pending = await conn.submit(ProduceRequest(acks=0), expect_response=False)
        pending.on_settled(calls.callback(0))
        assert calls.calls == [(0, None, None)]


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # real sockets: real time
async def test_answers_over_tcp_reach_waiters_and_callbacks_from_the_transport() -> None:
    async with FakeKafka(brokers=1) as kafka:
        held = HeldAnswers(kafka)
        tcp = ConnectionConfig(request_timeout_s=10.0, max_in_flight=3)
        async with connect(*address(kafka), tcp) as conn:
            calls = Calls()
            for i in range(2):
                pending = await conn.submit(MetadataRequest(), expect_response=True)
                pending.on_settled(calls.callback(i))
            waited = await conn.submit(MetadataRequest(), expect_response=True)
            held.release(0, 1, 2)
            assert node_of(await waited.wait()) == 2
            assert [(tag, node_of(r), e) for tag, r, e in calls.calls] == [
                (0, 0, None),
                (1, 1, None),
            ]
            assert conn.statistics().responses_received == 4  # ApiVersions and these three
            held.rule.cancel()
        assert conn.closed


def _broken(self: ClientConnection[Any]) -> Any:
    """``ClientConnection.next_event`` with a bug in it."""
    raise RuntimeError("injected bug")


@pytest.mark.parametrize("anyio_backend", ["asyncio"])  # real sockets: real time
async def test_a_bug_acting_on_bytes_read_closes_the_connection_loudly(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    async with FakeKafka(brokers=1) as kafka:
        tcp = ConnectionConfig(request_timeout_s=10.0)
        async with connect(*address(kafka), tcp) as conn:
            monkeypatch.setattr(ClientConnection, "next_event", _broken)
            calls = Calls()
            pending = await conn.submit(MetadataRequest(), expect_response=True)
            pending.on_settled(calls.callback(0))
            with pytest.raises(KafkaConnectionError):
                await conn.send(MetadataRequest())
            assert conn.closed
            assert "injected bug" in conn.close_reason
            assert [(tag, type(e)) for tag, _, e in calls.calls] == [(0, KafkaConnectionError)]
    assert "reading from" in caplog.text


@pytest.mark.parametrize("anyio_backend", ["asyncio", "trio"])
async def test_a_bug_acting_on_an_answer_closes_the_connection_loudly_on_a_reader_task(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """The same bug where a reader task reads (trio, TLS, this in-memory stream): the
    connection closes, its request fails, the bug is logged -- the task group the reader
    runs in (a client's pool) is not ended by it."""
    async with fake() as kafka, connect(*address(kafka), config(kafka)) as conn:
        monkeypatch.setattr(ClientConnection, "next_event", _broken)
        with pytest.raises(KafkaConnectionError):
            await conn.send(MetadataRequest())
        assert conn.closed
        assert "injected bug" in conn.close_reason
    assert "reading from" in caplog.text
