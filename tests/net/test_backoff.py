"""ExponentialBackoff (KIP-580): the curve, the jitter bounds, the constant case, determinism."""

from __future__ import annotations

import random
import statistics

import pytest

from aiokafka_ng.net.backoff import ExponentialBackoff


def test_curve_doubles_then_caps() -> None:
    policy = ExponentialBackoff(100, 1000, jitter=0.0)
    assert [policy.backoff_ms(n) for n in range(1, 8)] == [
        100.0,
        200.0,
        400.0,
        800.0,
        1000.0,
        1000.0,
        1000.0,
    ]


def test_no_failures_means_no_pause() -> None:
    policy = ExponentialBackoff(100, 1000)
    assert policy.backoff_ms(0) == 0.0
    assert policy.backoff_ms(-3) == 0.0
    assert policy.backoff_s(0) == 0.0


def test_custom_multiplier() -> None:
    policy = ExponentialBackoff(10, 10_000, multiplier=3.0, jitter=0.0)
    assert [policy.backoff_ms(n) for n in range(1, 5)] == [10.0, 30.0, 90.0, 270.0]


def test_huge_failure_count_does_not_overflow() -> None:
    policy = ExponentialBackoff(50, 1000, jitter=0.0)
    assert policy.backoff_ms(10**9) == 1000.0


def test_seconds_are_milliseconds_over_1000() -> None:
    policy = ExponentialBackoff(100, 1000, jitter=0.0)
    assert policy.backoff_s(3) == pytest.approx(0.4)


@pytest.mark.parametrize("failures", [1, 2, 3, 4, 8])
def test_jitter_stays_within_bounds_and_is_spread(failures: int) -> None:
    policy = ExponentialBackoff(100, 1000, jitter=0.2, rng=random.Random(failures))
    base = min(1000.0, 100.0 * 2 ** (failures - 1))
    samples = [policy.backoff_ms(failures) for _ in range(5000)]
    assert min(samples) >= base * 0.8
    assert max(samples) <= base * 1.2
    # Uniform on [0.8, 1.2]: both ends are visited and the mean sits in the middle.
    assert min(samples) < base * 0.82
    assert max(samples) > base * 1.18
    assert statistics.fmean(samples) == pytest.approx(base, rel=0.02)


def test_constant_when_max_not_above_initial() -> None:
    policy = ExponentialBackoff(500, 200, jitter=0.0)
    assert {policy.backoff_ms(n) for n in range(1, 10)} == {200.0}
    equal = ExponentialBackoff(300, 300, jitter=0.0)
    assert {equal.backoff_ms(n) for n in range(1, 10)} == {300.0}
    jittered = ExponentialBackoff(500, 200, rng=random.Random(7))
    samples = [jittered.backoff_ms(n) for n in range(1, 500)]
    assert all(160.0 <= s <= 240.0 for s in samples)
    assert statistics.fmean(samples) == pytest.approx(200.0, rel=0.03)


def test_seeded_rng_is_deterministic() -> None:
    first = ExponentialBackoff(100, 1000, rng=random.Random(42))
    second = ExponentialBackoff(100, 1000, rng=random.Random(42))
    a = [first.backoff_ms(n) for n in range(1, 20)]
    random.random()  # the global generator must not influence a seeded policy
    b = [second.backoff_ms(n) for n in range(1, 20)]
    assert a == b
    other = ExponentialBackoff(100, 1000, rng=random.Random(43))
    assert [other.backoff_ms(n) for n in range(1, 20)] != a


def test_named_policies_use_kafka_defaults() -> None:
    retry = ExponentialBackoff.retry()
    assert (retry.initial_ms, retry.max_ms, retry.jitter) == (100.0, 1000.0, 0.2)
    reconnect = ExponentialBackoff.reconnect()
    assert (reconnect.initial_ms, reconnect.max_ms) == (50.0, 1000.0)
    custom = ExponentialBackoff.retry(retry_backoff_ms=10, retry_backoff_max_ms=20)
    assert custom.base_ms(5) == 20.0


@pytest.mark.parametrize(
    "kwargs",
    [
        {"initial_ms": -1, "max_ms": 10},
        {"initial_ms": 1, "max_ms": 10, "jitter": 1.0},
        {"initial_ms": 1, "max_ms": 10, "multiplier": 0.5},
    ],
)
def test_rejects_nonsense(kwargs: dict[str, float]) -> None:
    with pytest.raises(ValueError):
        ExponentialBackoff(**kwargs)  # type: ignore[arg-type]
