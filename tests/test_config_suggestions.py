"""A misspelled setting says which known one it looks like, for every client's config, in
keyword form and in Kafka's dotted form, and every bad key is still named."""

from __future__ import annotations

import re

import pytest

from aiokafka_ng import Producer
from aiokafka_ng.admin import AdminClient, AdminConfig
from aiokafka_ng.config import ClientConfig, ProducerConfig, unknown_key_problem
from aiokafka_ng.consumer import Consumer, ConsumerConfig
from aiokafka_ng.errors import ConfigError

CLASSES = [ProducerConfig, ConsumerConfig, AdminConfig]


def _suggested(problem: str) -> list[str]:
    match = re.search(r"\(did you mean (.*)\?\)$", problem)
    return re.findall(r"'([^']*)'", match.group(1)) if match else []


def test_producer_keyword_typo_names_the_setting() -> None:
    with pytest.raises(ConfigError) as info:
        Producer(lingr_ms=5)
    assert info.value.errors == {
        "lingr_ms": "unknown configuration key (did you mean 'linger_ms'?)"
    }
    assert "Extra inputs" not in str(info.value)
    assert "did you mean 'linger_ms'?" in str(info.value)


def test_every_bad_key_is_still_named_with_its_own_hint() -> None:
    with pytest.raises(ConfigError) as info:
        Producer(lingr_ms=5, batchsize=1, linger_ms=-1, zzz_unrelated=1, sasl_password="x")
    errors = info.value.errors
    assert set(errors) == {"lingr_ms", "batchsize", "linger_ms", "zzz_unrelated", "sasl_password"}
    assert _suggested(errors["lingr_ms"]) == ["linger_ms"]
    assert _suggested(errors["batchsize"]) == ["batch_size"]
    # Kafka's own alias (sasl.password) leads to the keyword that sets it.
    assert _suggested(errors["sasl_password"]) == ["sasl_plain_password"]
    assert errors["zzz_unrelated"] == "unknown configuration key"  # nothing close: no guess
    assert "did you mean" not in errors["linger_ms"]  # a bad value is not a bad key


def test_consumer_and_admin_keyword_typos() -> None:
    with pytest.raises(ConfigError) as info:
        Consumer("t", group_idd="g", auto_offset_rest="earliest")
    assert {k: _suggested(v) for k, v in info.value.errors.items()} == {
        "group_idd": ["group_id"],
        "auto_offset_rest": ["auto_offset_reset"],
    }
    with pytest.raises(ConfigError) as info:
        AdminClient(default_api_timout_ms=5000)
    assert _suggested(info.value.errors["default_api_timout_ms"]) == ["default_api_timeout_ms"]


def test_properties_get_the_spelling_they_were_written_in() -> None:
    with pytest.raises(ConfigError) as info:
        Producer.from_properties(
            {"lingr.ms": "5", "sasl.usernme": "u", "bacth_size": "1", "no.such": "1"}
        )
    assert {k: _suggested(v) for k, v in info.value.errors.items()} == {
        "lingr.ms": ["linger.ms"],
        "sasl.usernme": ["sasl.username"],
        "bacth_size": ["batch_size"],
        "no.such": [],
    }
    with pytest.raises(ConfigError) as info:
        Consumer.from_properties({"enable.auto.comit": "false"}, "t")
    assert _suggested(info.value.errors["enable.auto.comit"]) == ["enable.auto.commit"]
    with pytest.raises(ConfigError) as info:
        AdminClient.from_properties({"default.api.timeout": "5000"})
    assert _suggested(info.value.errors["default.api.timeout"]) == ["default.api.timeout.ms"]


def test_two_close_keys_are_both_offered_and_a_prefix_finds_a_long_name() -> None:
    problem = unknown_key_problem("retries_backoff_ms", ProducerConfig)
    assert _suggested(problem) == ["retry_backoff_ms", "retry_backoff_max_ms"]
    assert _suggested(unknown_key_problem("max_in_flight", ProducerConfig)) == [
        "max_in_flight_requests_per_connection"
    ]


@pytest.mark.parametrize("cls", CLASSES, ids=lambda c: c.__name__)
def test_one_dropped_or_swapped_letter_leads_back_to_the_field(cls: type[ClientConfig]) -> None:
    # Exhaustive over every field of the class: each single deletion and each swap of two
    # neighbours that is not itself a known key suggests that field, in both spellings.
    checked = 0
    for field in cls.model_fields:
        dotted = cls.property_name(field)
        for name, want, is_dotted in ((field, field, False), (dotted, dotted, True)):
            for i in range(len(name)):
                typos = [name[:i] + name[i + 1 :]]
                if i + 1 < len(name):
                    typos.append(name[:i] + name[i + 1] + name[i] + name[i + 2 :])
                for typo in typos:
                    if typo == name or cls.field_for(typo) is not None:
                        continue
                    suggested = _suggested(unknown_key_problem(typo, cls, dotted=is_dotted))
                    assert want in suggested, (typo, suggested)
                    assert all(cls.field_for(s) is not None for s in suggested)
                    checked += 1
    assert checked > 500
