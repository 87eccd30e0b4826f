"""``aiokafka-ng --command-config FILE`` and bootstrap from the environment; the Java
properties reader and security translation behind them (``aiokafka_ng.properties``).

TLS end to end: Tansu's own TLS listener is not usable (TANSU.md), so a TLS-terminating
loopback proxy of this test (anyio's TLSListener, certificates from trustme) sits in front
of a LocalBroker that advertises the proxy's port: the CLI reaches the broker only if the
SSL context built from ``ssl.truststore.location`` verifies the proxy's certificate.
SASL against a real broker is not shown (Tansu does not authenticate); the translated
credentials are checked, and the SASL exchange itself is tested in tests/net."""

from __future__ import annotations

import ssl
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import anyio
import anyio.from_thread
import pytest
import trustme
from anyio.streams.tls import TLSListener

from aiokafka_ng.cli import main
from aiokafka_ng.cli._common import client_settings, resolve_connection
from aiokafka_ng.config import ProducerConfig
from aiokafka_ng.errors import ConfigError
from aiokafka_ng.properties import load_properties, translate_security
from tests.helpers import free_port

SECRET = "Cmd-Config-S3cret"


def write(tmp_path: Path, text: str) -> str:
    path = tmp_path / f"client-{uuid.uuid4().hex[:6]}.properties"
    path.write_text(text)
    return str(path)


def test_java_properties_format(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "# comment\n! another\n\n"
        "bootstrap.servers = 127.0.0.1:1234\n"
        "client.id:my-app\n"
        "linger.ms 7\n"
        "sasl.jaas.config=org.apache.kafka.common.security.plain.PlainLoginModule \\\n"
        '    required username="alice" \\\n'
        f'    password="{SECRET}";\n'
        "key\\=with\\:seps = a\\tb\\u0041\n",
    )
    props = load_properties(path)
    assert props["bootstrap.servers"] == "127.0.0.1:1234"
    assert props["client.id"] == "my-app" and props["linger.ms"] == "7"
    assert props["key=with:seps"] == "a\tbA"
    plain, ctx = translate_security(props)
    assert ctx is None
    assert plain["sasl.username"] == "alice" and plain["sasl.password"] == SECRET
    with pytest.raises(ConfigError, match="cannot read"):
        load_properties(tmp_path / "missing.properties")


def test_security_translation_errors_name_the_property_not_the_value(tmp_path: Path) -> None:
    cases = [
        ({"sasl.jaas.config": "com.example.NtlmLoginModule required;"},
         "sasl.jaas.config"),
        ({"sasl.jaas.config": f'x.PlainLoginModule required password="{SECRET}";'},
         "no username"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/x.jks"}, "only PEM"),
        ({"security.protocol": "SSL", "ssl.truststore.location": "/nope.pem",
          "ssl.truststore.type": "PEM", "ssl.key.password": SECRET}, "CA certificates"),
    ]  # fmt: skip
    for props, match in cases:
        with pytest.raises(ConfigError, match=match) as info:
            ProducerConfig.from_properties(props)
        assert SECRET not in str(info.value)


@pytest.fixture
def ca(tmp_path: Path) -> Iterator[tuple[trustme.CA, str]]:
    authority = trustme.CA()
    path = tmp_path / "ca.pem"
    authority.cert_pem.write_to_path(str(path))
    yield authority, str(path)


def test_ssl_and_sasl_settings_reach_the_client_config(
    tmp_path: Path, ca: tuple[trustme.CA, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    _, ca_path = ca
    path = write(
        tmp_path,
        "security.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"
        "sasl.jaas.config=org.apache.kafka.common.security.scram.ScramLoginModule required "
        f'username="bob" password="{SECRET}";\n'
        f"ssl.truststore.location={ca_path}\nssl.truststore.type=PEM\n"
        "ssl.endpoint.identification.algorithm=\nacks=1\n",
    )
    monkeypatch.delenv("AIOKAFKA_NG_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.setenv("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:5555")

    class Args:
        bootstrap_servers = None
        command_config = path

    args: Any = Args()
    resolve_connection(args)
    assert args.bootstrap_servers == "127.0.0.1:5555"  # environment over the default
    settings = client_settings(args, ProducerConfig, linger_ms=3)
    config = ProducerConfig(**settings)
    assert config.security_protocol == "SASL_SSL" and config.sasl_mechanism == "SCRAM-SHA-512"
    assert config.sasl_plain_password is not None
    assert config.sasl_plain_password.get_secret_value() == SECRET
    assert config.acks == 1 and config.linger_ms == 3
    ctx = config.ssl_context
    assert isinstance(ctx, ssl.SSLContext) and not ctx.check_hostname
    assert ctx.get_ca_certs()  # the CA file was loaded
    assert SECRET not in repr(config) + repr(settings)


def test_bad_command_config_is_one_line_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = write(tmp_path, f"bogus.key=1\nsasl.password={SECRET}\n")
    assert main(["topics", "list", "--command-config", path, "-b", "127.0.0.1:1"]) == 2
    err = capsys.readouterr().err
    assert "bogus.key" in err and SECRET not in err and len(err.strip().splitlines()) == 1


async def _tls_proxy(listen_port: int, broker_port: int, context: ssl.SSLContext) -> None:
    listener = TLSListener(
        await anyio.create_tcp_listener(local_host="127.0.0.1", local_port=listen_port),
        context,
        standard_compatible=False,
        handshake_timeout=5,
    )

    async def handle(client: Any) -> None:
        async with client, await anyio.connect_tcp("127.0.0.1", broker_port) as upstream:

            async def pump(src: Any, dst: Any) -> None:
                try:
                    async for chunk in src:
                        await dst.send(chunk)
                except (anyio.EndOfStream, anyio.BrokenResourceError, ssl.SSLError, OSError):
                    pass
                finally:
                    tg.cancel_scope.cancel()

            async with anyio.create_task_group() as tg:
                tg.start_soon(pump, client, upstream)
                tg.start_soon(pump, upstream, client)

    async with listener:
        await listener.serve(handle)


def test_cli_over_tls_with_command_config(
    tmp_path: Path,
    ca: tuple[trustme.CA, str],
    kafka_broker_factory: Any,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    authority, ca_path = ca
    proxy_port = free_port()
    broker = kafka_broker_factory(advertised_port=proxy_port)
    server_ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    authority.issue_cert("127.0.0.1").configure_cert(server_ctx)
    path = write(
        tmp_path,
        f"bootstrap.servers=127.0.0.1:{proxy_port}\nsecurity.protocol=SSL\n"
        f"ssl.truststore.location={ca_path}\nssl.truststore.type=PEM\n",
    )
    monkeypatch.delenv("AIOKAFKA_NG_BOOTSTRAP_SERVERS", raising=False)
    monkeypatch.delenv("KAFKA_BOOTSTRAP_SERVERS", raising=False)
    topic = f"tls-{uuid.uuid4().hex[:8]}"
    with anyio.from_thread.start_blocking_portal() as portal:
        future = portal.start_task_soon(_tls_proxy, proxy_port, broker.port, server_ctx)
        try:
            assert main(["topics", "create", topic, "-p", "2", "--command-config", path]) == 0
            assert main(["topics", "list", "--command-config", path]) == 0
            assert topic in capsys.readouterr().out
            # The same file without TLS settings cannot talk to the TLS port.
            plain = write(
                tmp_path,
                f"bootstrap.servers=127.0.0.1:{proxy_port}\n"
                "request.timeout.ms=1000\ndefault.api.timeout.ms=2000\n",
            )
            code = main(["topics", "list", "--command-config", plain, "--connect-timeout", "2"])
            assert code == 1
        finally:
            future.cancel()
