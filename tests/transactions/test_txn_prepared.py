"""Prepared transactions: ``prepare_transaction()`` in one producer, ``complete_transaction()``
in another (the Spark sink's tasks prepare, its driver commits), on Tansu and Apache Kafka,
asyncio and trio."""

from __future__ import annotations

import pickle
from typing import Any

import pytest

from aiokafka_ng import Producer
from aiokafka_ng.errors import KafkaTimeoutError, ProducerFencedError
from aiokafka_ng.producer import IllegalTransactionStateError, PreparedTransaction
from aiokafka_ng.testing import LocalBroker
from tests.helpers import topic_name
from tests.transactions.test_txn_broker import _ABORT, _COMMIT, read_log, txn_producer

pytestmark = pytest.mark.anyio


async def prepared(broker: Any, topic: str, tid: str, values: list[bytes]) -> PreparedTransaction:
    """A transaction of ``values`` on partition 0, prepared, its producer closed."""
    async with txn_producer(broker, tid) as producer:
        producer.begin_transaction()
        for value in values:
            await producer.send(topic, value, partition=0)
        ready = await producer.prepare_transaction()
        # Prepared: nothing more happens in this producer, and closing it (below) must not
        # abort the transaction.
        with pytest.raises(IllegalTransactionStateError, match="prepared"):
            await producer.send(topic, b"more", partition=0)
        with pytest.raises(IllegalTransactionStateError, match="prepared"):
            producer.begin_transaction()
    assert ready.transactional_id == tid and ready.producer_id >= 0
    return pickle.loads(pickle.dumps(ready))  # what travels in a Spark commit message


async def test_another_producer_commits_a_prepared_transaction(kafka_broker: Any) -> None:
    topic, tid = topic_name("t"), topic_name("txn")
    ready = await prepared(kafka_broker, topic, tid, [b"a", b"b"])
    # Still open after its producer closed: no marker, the last stable offset is held back.
    assert (await read_log(kafka_broker.bootstrap_servers, topic, settle=False)).markers == []
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as driver:
        await driver.complete_transaction(ready, commit=True)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [(o, v) for o, _, v in log.data] == [(0, b"a"), (1, b"b")]
    assert [(o, k) for o, _, k in log.markers] == [(2, _COMMIT)]


async def test_another_producer_aborts_a_prepared_transaction(kafka_broker: Any) -> None:
    topic, tid = topic_name("t"), topic_name("txn")
    ready = await prepared(kafka_broker, topic, tid, [b"a"])
    async with Producer(bootstrap_servers=kafka_broker.bootstrap_servers) as driver:
        await driver.complete_transaction(ready, commit=False)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [(o, k) for o, _, k in log.markers] == [(1, _ABORT)]
    # The transactional id goes on: the next producer with it commits normally.
    async with txn_producer(kafka_broker, tid) as producer, producer.transaction():
        await producer.send(topic, b"next", partition=0)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [(o, k) for o, _, k in log.markers] == [(1, _ABORT), (3, _COMMIT)]


async def test_a_newer_producer_fences_a_prepared_transaction(kafka_broker: Any) -> None:
    """A retried task's producer starts with the same transactional id: its InitProducerId
    aborts the prepared transaction, and completing that one fails instead of committing."""
    topic, tid = topic_name("t"), topic_name("txn")
    ready = await prepared(kafka_broker, topic, tid, [b"zombie"])
    async with txn_producer(kafka_broker, tid) as retry:
        async with Producer(
            bootstrap_servers=kafka_broker.bootstrap_servers, max_block_ms=3000
        ) as driver:
            if isinstance(kafka_broker, LocalBroker):
                # Tansu closes the connection on an EndTxn with a fenced epoch instead of
                # answering PRODUCER_FENCED: the call fails once max_block_ms is spent.
                with pytest.raises(KafkaTimeoutError, match="connection closed"):
                    await driver.complete_transaction(ready, commit=True)
            else:
                with pytest.raises(ProducerFencedError):
                    await driver.complete_transaction(ready, commit=True)
        async with retry.transaction():
            await retry.send(topic, b"retry", partition=0)
    log = await read_log(kafka_broker.bootstrap_servers, topic)
    assert [(o, v) for o, _, v in log.data] == [(0, b"zombie"), (2, b"retry")]
    assert [(o, k) for o, _, k in log.markers] == [(1, _ABORT), (3, _COMMIT)]


async def test_an_empty_prepared_transaction_needs_no_completion(kafka_broker: Any) -> None:
    tid = topic_name("txn")
    async with txn_producer(kafka_broker, tid) as producer:
        producer.begin_transaction()
        ready = await producer.prepare_transaction()
        assert ready.producer_id == -1
        await producer.complete_transaction(ready)  # nothing to end: no request
