"""A sentinel password never shows: repr, str, model_dump(_json), ConfigError text, log
lines, exception text -- for every client config, built from keywords and from properties;
and a real login with it (against the in-repo fake SASL broker: Tansu does not
authenticate, see TANSU.md) still uses it."""

from __future__ import annotations

import logging
import traceback
from dataclasses import replace
from typing import Any

import anyio
import pytest
from test_sasl import MECHANISMS, address, sasl_broker

from aiokafka_ng.admin.config import AdminConfig
from aiokafka_ng.config import ClientConfig, ProducerConfig
from aiokafka_ng.consumer.config import ConsumerConfig
from aiokafka_ng.errors import ConfigError, KafkaError
from aiokafka_ng.net.connection import connect
from aiokafka_ng.protocol.messages.sasl_authenticate import SaslAuthenticateRequest
from aiokafka_ng.testing import FakeKafka

SENTINEL = "Sentinel-Pa55word-7f3a"
SASL = {
    "security_protocol": "SASL_PLAINTEXT",
    "sasl_mechanism": "PLAIN",
    "sasl_plain_username": "alice",
    "sasl_plain_password": SENTINEL,
}


def every_view(obj: Any) -> str:
    views = [repr(obj), str(obj), repr(obj.model_dump()), str(obj.model_dump())]
    views.append(obj.model_dump_json())
    views.append(repr(obj.connection_config()))
    views.append(repr(obj.connection_config().sasl))
    return "\n".join(views)


@pytest.mark.parametrize("cls", [ClientConfig, ProducerConfig, ConsumerConfig, AdminConfig])
def test_configs_hide_the_password_but_keep_it_usable(cls: type[ClientConfig]) -> None:
    for config in (
        cls(**SASL),
        cls.from_properties(
            {
                "security.protocol": "SASL_PLAINTEXT",
                "sasl.mechanism": "PLAIN",
                "sasl.username": "alice",
                "sasl.password": SENTINEL,
            }
        ),
    ):
        assert SENTINEL not in every_view(config)
        assert config.sasl_plain_password is not None
        assert config.sasl_plain_password.get_secret_value() == SENTINEL
        sasl = config.connection_config().sasl
        assert sasl is not None and sasl.password == SENTINEL


def test_config_errors_do_not_echo_the_password() -> None:
    with pytest.raises(ConfigError) as info:
        ProducerConfig(**{**SASL, "linger_ms": -1, "sasl_mechanism": "NOPE"})
    text = str(info.value) + repr(info.value) + "".join(traceback.format_exception(info.value))
    assert {"linger_ms", "sasl_mechanism"} <= set(info.value.errors)
    assert SENTINEL not in text
    with pytest.raises(ConfigError) as info2:
        ProducerConfig(**{**SASL, "sasl_plain_password": [SENTINEL]})  # wrong type
    assert "sasl_plain_password" in info2.value.errors
    assert SENTINEL not in str(info2.value) + repr(info2.value.errors)


def test_protocol_messages_hide_credentials() -> None:
    request = SaslAuthenticateRequest(auth_bytes=f"\0alice\0{SENTINEL}".encode())
    assert SENTINEL not in repr(request) and SENTINEL not in str(request)


@pytest.mark.anyio
@pytest.mark.parametrize("mechanism", MECHANISMS)
async def test_login_and_failed_login_never_print_it(
    mechanism: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    config = ClientConfig(**{**SASL, "sasl_mechanism": mechanism, "request_timeout_ms": 5000})
    async with FakeKafka(brokers=1, tcp=False) as good:
        sasl_broker(good, user="alice", password=SENTINEL, enabled=MECHANISMS)
        settings = replace(config.connection_config(), transport=good.transport)
        async with connect(*address(good), settings) as conn:
            assert not conn.closed  # the secret is what logged in
    async with FakeKafka(brokers=1, tcp=False) as bad:
        sasl_broker(bad, user="alice", password="other", enabled=MECHANISMS)
        settings = replace(config.connection_config(), transport=bad.transport)
        with anyio.fail_after(10), pytest.raises(KafkaError) as info:
            async with connect(*address(bad), settings):
                pass
    text = "".join(traceback.format_exception(info.value)) + caplog.text
    assert "alice" in text or info.value.errno == 58  # the failure is reported...
    assert SENTINEL not in text  # ...without the password
