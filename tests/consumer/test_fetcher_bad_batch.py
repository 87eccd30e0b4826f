"""A malformed record batch reaching the consumer: nothing decoded before it is lost.

Why scripted: a broker validates every batch it stores (CRC, record lengths and counts), so
no producer can make it serve a malformed one. FakeKafka holds seven good records (offsets
0-6) and its Fetch answers are the model's with their records replaced by the batches
below (``FakeKafka.answer``), on virtual time. The batches here are
CRC-valid and malformed inside (issue 34: a key length of 2**63-1, which the compiled reader
once failed on with ValueError, dropping the good records taken from earlier batches of the
same fetch while the position moved past them), or have a bad CRC.

Each test runs with the compiled decoder and buffer and with their pure-Python twins.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

import pytest

from aiokafka_ng import _native
from aiokafka_ng.consumer import buffer as buffer_compiled
from aiokafka_ng.consumer import fetch_wire
from aiokafka_ng.consumer import fetcher as fetcher_module
from aiokafka_ng.consumer.fetcher import Fetcher
from aiokafka_ng.consumer.state import SubscriptionState
from aiokafka_ng.protocol import record_reader as reader_compiled
from aiokafka_ng.protocol.errors import ProtocolError
from aiokafka_ng.protocol.messages.fetch import FetchResponse
from aiokafka_ng.testing import FakeKafka, virtual_time
from aiokafka_ng.testing.fake import Received
from tests.consumer.test_fetcher_canned import (
    FETCH,
    TP0,
    drain_values,
    fake_fetcher,
    model_fetch,
    write,
)
from tests.protocol.malformed import INT64_MAX, batch, good, record

pytestmark = pytest.mark.anyio


@pytest.fixture(params=["asyncio", "trio"])
def anyio_backend(request: pytest.FixtureRequest) -> tuple[str, dict[str, Any]]:
    return virtual_time.backend(request.param)


_PURE = {
    "reader": _native.load_pure_twin("aiokafka_ng.protocol.record_reader"),
    "buffer": _native.load_pure_twin("aiokafka_ng.consumer.buffer"),
}


@pytest.fixture(params=["compiled", "pure"])
def build(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    """The fetcher decoding with the compiled reader and buffer, or with the pure twins."""
    if request.param == "pure":
        monkeypatch.setattr(fetch_wire, "iter_batches", _PURE["reader"].iter_batches)
        monkeypatch.setattr(fetcher_module, "BufferedFetch", _PURE["buffer"].BufferedFetch)
    else:
        assert fetch_wire.iter_batches is reader_compiled.iter_batches
        assert fetcher_module.BufferedFetch is buffer_compiled.BufferedFetch
    return str(request.param)


def _bad_key_length() -> bytes:
    return batch(5, record(b"k", key_len=INT64_MAX), 1)  # the batch of issue 34


def _bad_crc() -> bytes:
    bad = bytearray(good(5, [b"five"]))
    bad[-2] ^= 0xFF  # a value byte: the CRC no longer matches
    return bytes(bad)


def _log(bad: bytes) -> list[tuple[int, bytes]]:
    """(last offset, batch): 0-2 and 3-4 good, 5 bad, 6 good."""
    return [
        (2, good(0, [b"a", b"b", b"c"])),
        (4, good(3, [b"d", b"e"])),
        (5, bad),
        (6, good(6, [b"g"])),
    ]


Body = Callable[[Fetcher, SubscriptionState], Awaitable[None]]


async def run_fetcher(
    log: list[tuple[int, bytes]],
    body: Body,
    value_deserializer: Callable[[bytes | None], Any] | None = None,
) -> None:
    """``body`` with a running Fetcher whose Fetch answers carry, like a broker's, every
    batch of ``log`` from the one holding the fetch offset to the end."""
    async with FakeKafka(brokers=1, tcp=False) as kafka:
        kafka.create_topic("t", partitions=1)
        await write(kafka, *[b"x"] * 7)  # offsets 0-6: the log the answers stand for

        async def fetch(call: Received) -> FetchResponse:
            response = await model_fetch(kafka, call)
            offset = call.request.topics[0].partitions[0].fetch_offset
            data = b"".join(b for last, b in log if last >= offset)
            if data:
                response.responses[0].partitions[0].records = data
            return response

        kafka.answer(FETCH, fetch)
        async with fake_fetcher(kafka, value_deserializer) as (fetcher, subs, _):
            await body(fetcher, subs)


@pytest.mark.parametrize(
    ("make_bad", "kind", "says"),
    [
        (_bad_key_length, "ProtocolError", f"bad key length {INT64_MAX}"),
        (_bad_crc, "CorruptRecordError", "CRC mismatch"),
    ],
)
@pytest.mark.parametrize("max_records", [100, 2])
async def test_records_before_a_bad_batch_are_kept(
    build: str, make_bad: Callable[[], bytes], kind: str, says: str, max_records: int
) -> None:
    async def body(fetcher: Fetcher, subs: SubscriptionState) -> None:
        subs.assign_manual([TP0])
        subs.state(TP0).seek(0)
        got: list[bytes] = []
        with pytest.raises(ProtocolError) as info:
            while True:
                out = fetcher.drain(max_records)
                for records in out.values():
                    got.extend(r.value for r in records)
                if not out:
                    await fetcher.wait_for_data()
        # Every good record before the bad batch, then its error naming where it is.
        assert got == [b"a", b"b", b"c", b"d", b"e"]
        assert type(info.value).__name__ == kind
        assert "t-0" in str(info.value) and "offset 5" in str(info.value)
        assert says in str(info.value)
        assert subs.state(TP0).position == 5
        # Raised once: the next drain has nothing (the batch is fetched again, and fails
        # again, until the application moves on).
        assert fetcher.drain(max_records) == {}
        subs.state(TP0).seek(6)  # the application skips the bad batch
        fetcher.wake()  # as Consumer.seek does
        assert await drain_values(fetcher, 6) == [(6, b"g")]

    await run_fetcher(_log(make_bad()), body)


async def test_a_bad_batch_first_raises_at_once(build: str) -> None:
    # Nothing good before it: the error comes on the first drain that meets it, and again
    # after the refetch while the position stays at the batch.
    log = [(5, _bad_key_length()), (6, good(6, [b"g"]))]

    async def body(fetcher: Fetcher, subs: SubscriptionState) -> None:
        subs.assign_manual([TP0])
        subs.state(TP0).seek(5)
        for _ in range(2):
            with pytest.raises(ProtocolError, match="t-0 at offset 5: bad key length"):
                while True:
                    assert fetcher.drain(10) == {}
                    await fetcher.wait_for_data()
            assert subs.state(TP0).position == 5
        subs.state(TP0).seek(6)
        fetcher.wake()
        assert await drain_values(fetcher, 6) == [(6, b"g")]

    await run_fetcher(log, body)


async def test_drain_one_keeps_the_position_at_a_bad_batch(build: str) -> None:
    log = _log(_bad_key_length())

    async def body(fetcher: Fetcher, subs: SubscriptionState) -> None:
        subs.assign_manual([TP0])
        subs.state(TP0).seek(3)
        got: list[bytes] = []
        with pytest.raises(ProtocolError, match="offset 5"):
            while True:
                r = fetcher.drain_one()
                if r is not None:
                    got.append(r.value)
                else:
                    await fetcher.wait_for_data()
        assert got == [b"d", b"e"] and subs.state(TP0).position == 5

    await run_fetcher(log, body)


async def test_deserialized_records_before_a_bad_batch_are_kept(build: str) -> None:
    # With a deserializer the records go one by one (take_into's slow path).
    log = _log(_bad_key_length())

    async def body(fetcher: Fetcher, subs: SubscriptionState) -> None:
        subs.assign_manual([TP0])
        subs.state(TP0).seek(0)
        got: list[str] = []
        with pytest.raises(ProtocolError, match="offset 5"):
            while True:
                out = fetcher.drain(100)
                for records in out.values():
                    got.extend(r.value for r in records)
                if not out:
                    await fetcher.wait_for_data()
        assert got == ["a", "b", "c", "d", "e"] and subs.state(TP0).position == 5

    await run_fetcher(log, body, value_deserializer=lambda b: (b or b"").decode())
