"""pytest fixtures that provide a real local Kafka-compatible broker.

Registered through the ``pytest11`` entry point once aiokafka-ng is installed. Fixtures:

- ``kafka_broker`` (session): one broker for the whole run; tests create uniquely named topics.
- ``kafka_broker_factory`` (function): ``factory(**LocalBroker kwargs)`` starts a broker of the
  test's own; every broker it made is stopped after the test.
- ``fresh_kafka_broker`` (function): one broker of the test's own, free to stop and restart.

A broker that cannot start fails the test (``pytest.fail``); it is never skipped.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from aiokafka_ng.testing._broker import LocalBroker, LocalBrokerError


def _start_or_fail(broker: LocalBroker) -> None:
    try:
        broker.start_sync()
    except LocalBrokerError as exc:
        pytest.fail(f"the local Kafka broker could not start: {exc}", pytrace=False)


@pytest.fixture(scope="session")
def kafka_broker() -> Iterator[LocalBroker]:
    """A broker shared by the whole session (started on first use)."""
    broker = LocalBroker()
    _start_or_fail(broker)
    try:
        yield broker
    finally:
        broker.stop_sync()


@pytest.fixture
def kafka_broker_factory() -> Iterator[Callable[..., LocalBroker]]:
    """Start brokers of the test's own: ``factory(port=..., advertised_port=..., ...)``."""
    brokers: list[LocalBroker] = []

    def factory(**kwargs: Any) -> LocalBroker:
        broker = LocalBroker(**kwargs)
        brokers.append(broker)
        _start_or_fail(broker)
        return broker

    try:
        yield factory
    finally:
        for broker in brokers:
            broker.stop_sync()


@pytest.fixture
def fresh_kafka_broker(kafka_broker_factory: Callable[..., LocalBroker]) -> LocalBroker:
    """A broker of the test's own, which the test may stop and start again."""
    return kafka_broker_factory()
