"""Configuration of a transactional producer: transactions require idempotence (Java's
"Cannot set a transactional.id without also enabling idempotence")."""

from __future__ import annotations

from typing import Any

import pytest

from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import ConfigError


def test_defaults_and_properties() -> None:
    c = ProducerConfig(transactional_id="t")
    assert (c.transactional_id, c.transaction_timeout_ms, c.enable_idempotence) == (
        "t",
        60000,
        True,
    )
    c = ProducerConfig.from_properties({"transactional.id": "x", "transaction.timeout.ms": "900"})
    assert (c.transactional_id, c.transaction_timeout_ms) == ("x", 900)
    assert ProducerConfig().transactional_id is None


@pytest.mark.parametrize(
    ("settings", "bad"),
    [
        ({"enable_idempotence": False}, {"transactional_id"}),
        # Without a transactional id these would switch idempotence off silently.
        ({"acks": 1}, {"acks"}),
        ({"max_in_flight_requests_per_connection": 6}, {"max_in_flight_requests_per_connection"}),
        ({"retries": 0}, {"retries"}),
        ({"transaction_timeout_ms": 0}, {"transaction_timeout_ms"}),
    ],
)
def test_transactions_require_idempotence(settings: dict[str, Any], bad: set[str]) -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig(transactional_id="t", **settings)
    assert bad <= set(info.value.errors)
    # ... while the same settings without a transactional id are accepted.
    if "transaction_timeout_ms" not in settings and "enable_idempotence" not in settings:
        assert ProducerConfig(**settings).enable_idempotence is False
