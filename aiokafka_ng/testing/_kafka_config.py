"""The files a test Kafka cluster is made of: node properties, TLS material, log4j2 config.

Pure functions of their arguments (plus trustme for the certificates), kept apart from the
process handling in :mod:`aiokafka_ng.testing._kafka`.
"""

from __future__ import annotations

import base64
import re
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Final

HOST: Final = "127.0.0.1"

#: The listeners a client can use, by name (= security protocol).
CLIENT_LISTENERS: Final = ("PLAINTEXT", "SASL_PLAINTEXT", "SSL", "SASL_SSL")
SASL_MECHANISMS: Final = ("PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512")
_USER_NAME: Final = re.compile(r"^[A-Za-z0-9_.-]+$")

# INFO for the broker's own lifecycle (what a failing start needs), WARN for the chatty
# per-partition loggers; everything to stdout, which the launcher sends to the node's file.
LOG4J2: Final = """\
status = warn
appender.out.type = Console
appender.out.name = OUT
appender.out.layout.type = PatternLayout
appender.out.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = INFO
rootLogger.appenderRef.out.ref = OUT
logger.state.name = state.change.logger
logger.state.level = WARN
logger.log.name = kafka.log
logger.log.level = WARN
logger.storage.name = org.apache.kafka.storage
logger.storage.level = WARN
logger.cfg.name = org.apache.kafka.common.config.AbstractConfig
logger.cfg.level = WARN
logger.cfgs.name = org.apache.kafka.common.utils.AppInfoParser
logger.cfgs.level = WARN
"""


@dataclass(frozen=True, slots=True)
class NodePorts:
    """The ports of one node: one per client listener, plus the controller's."""

    PLAINTEXT: int
    SASL_PLAINTEXT: int
    SSL: int
    SASL_SSL: int
    CONTROLLER: int

    def all(self) -> tuple[int, ...]:
        return (self.PLAINTEXT, self.SASL_PLAINTEXT, self.SSL, self.SASL_SSL, self.CONTROLLER)

    def client(self, listener: str) -> int:
        port: int = getattr(self, listener)
        return port


def new_cluster_id() -> str:
    """A KRaft cluster id: a random UUID in URL-safe base64 without padding (22 chars).

    Never one starting with "-" (1 in 64 would): StorageTool's argument parser takes it for
    an option and the format fails; Kafka's own ``Uuid.randomUuid`` skips those too."""
    while True:
        cluster_id = base64.urlsafe_b64encode(uuid.uuid4().bytes).decode().rstrip("=")
        if not cluster_id.startswith("-"):
            return cluster_id


def check_users(users: Mapping[str, str]) -> None:
    for name, password in users.items():
        # They go into a JAAS line and a StorageTool argument unquoted: keep them plain.
        if not _USER_NAME.match(name) or not _USER_NAME.match(password):
            raise ValueError(
                f"user {name!r}: names and passwords may only use letters, digits and _.-"
            )


def node_properties(
    *,
    node_id: int,
    ports: NodePorts,
    voters: str,
    host: str = HOST,
    data_dir: Path,
    keystore: Path | None,
    users: Mapping[str, str],
    brokers: int,
    token_secret: str,
    extra: Mapping[str, str],
) -> str:
    """``server.properties`` of one combined broker+controller node, listening on ``host``."""
    listeners = [name for name in CLIENT_LISTENERS if keystore is not None or "SSL" not in name]
    replicas = str(min(3, brokers))
    min_isr = str(min(2, brokers))
    props: dict[str, str] = {
        "process.roles": "broker,controller",
        "node.id": str(node_id),
        "controller.quorum.voters": voters,
        "controller.listener.names": "CONTROLLER",
        "listeners": ",".join(
            [f"{name}://{host}:{ports.client(name)}" for name in listeners]
            + [f"CONTROLLER://{host}:{ports.CONTROLLER}"]
        ),
        "advertised.listeners": ",".join(
            f"{name}://{host}:{ports.client(name)}" for name in listeners
        ),
        "listener.security.protocol.map": ",".join(
            [f"{name}:{name}" for name in CLIENT_LISTENERS] + ["CONTROLLER:PLAINTEXT"]
        ),
        "inter.broker.listener.name": "PLAINTEXT",
        "log.dirs": str(data_dir),
        # Internal topics sized for a test cluster: few partitions (each costs start time),
        # replicated like production so a killed broker loses nothing.
        "offsets.topic.num.partitions": "5",
        "offsets.topic.replication.factor": replicas,
        "transaction.state.log.num.partitions": "5",
        "transaction.state.log.replication.factor": replicas,
        "transaction.state.log.min.isr": min_isr,
        "share.coordinator.state.topic.num.partitions": "5",
        "share.coordinator.state.topic.replication.factor": replicas,
        "share.coordinator.state.topic.min.isr": min_isr,
        "group.initial.rebalance.delay.ms": "0",
        # No deletion by age: tests write records with fixed timestamps years in the past,
        # and the default 7-day retention, checked every 5 minutes, deleted such a topic's
        # records between a test's write and its read (librdkafka then got
        # OFFSET_OUT_OF_RANGE for offset 0 and reset to the end: a hang, not a failure).
        # A topic's own retention.ms still applies.
        "log.retention.ms": "-1",
        # Test clients use 1-2 s session timeouts so a lost member is noticed fast (and Tansu
        # holds a first join for half of it); Kafka's floor is 6 s by default.
        "group.min.session.timeout.ms": "1000",
        # A killed broker is fenced (and its partitions' leaders moved) after 6 s, not 9.
        "broker.heartbeat.interval.ms": "1000",
        "broker.session.timeout.ms": "6000",
        # The active controller writes a no-op record this often when idle (default 500 ms),
        # and every node replicates it: the bulk of an idle cluster's CPU.
        "metadata.max.idle.interval.ms": "5000",
        "num.network.threads": "2",
        "num.io.threads": "4",
        "log.cleaner.threads": "1",
        "sasl.enabled.mechanisms": ",".join(SASL_MECHANISMS),
        # ACL operations need an authorizer; everyone may do anything no ACL names.
        "authorizer.class.name": "org.apache.kafka.metadata.authorizer.StandardAuthorizer",
        "allow.everyone.if.no.acl.found": "true",
        "super.users": "User:ANONYMOUS;User:admin",
        "delegation.token.secret.key": token_secret,
    }
    plain_users = " ".join(f'user_{name}="{password}"' for name, password in users.items())
    for listener in ("sasl_plaintext", "sasl_ssl"):
        prefix = f"listener.name.{listener}"
        props[f"{prefix}.plain.sasl.jaas.config"] = (
            f"org.apache.kafka.common.security.plain.PlainLoginModule required {plain_users};"
        )
        for mechanism in ("scram-sha-256", "scram-sha-512"):
            props[f"{prefix}.{mechanism}.sasl.jaas.config"] = (
                "org.apache.kafka.common.security.scram.ScramLoginModule required;"
            )
    if keystore is not None:
        props["ssl.keystore.type"] = "PEM"
        props["ssl.keystore.location"] = str(keystore)
        props["ssl.client.auth"] = "none"
    props.update(_SHARE_GROUPS)
    props.update(extra)
    return "".join(f"{key}={_escape(value)}\n" for key, value in props.items())


#: The JVM system property listing the URLs Kafka's OAuth code may fetch (Kafka 4 refuses
#: every other URL, the JWKS endpoint's included): pass it through ``java_options``.
OAUTH_ALLOWED_URLS: Final = "org.apache.kafka.sasl.oauthbearer.allowed.urls"
_OAUTH_PACKAGE: Final = "org.apache.kafka.common.security.oauthbearer"


def oauth_properties(
    *,
    jwks_url: str | None = None,
    audience: str = "kafka",
    issuer: str | None = None,
    reauth_ms: int | None = None,
) -> dict[str, str]:
    """``broker_properties`` adding SASL OAUTHBEARER (KIP-255) to both SASL listeners.

    SASL_PLAINTEXT validates tokens with Kafka's unsecured-JWS validator (unsigned tokens,
    ``sub`` and ``exp`` required: :class:`aiokafka_ng.net.oauth.UnsecuredTokenProvider`).
    SASL_SSL does too, unless ``jwks_url`` is given: then it verifies signed JWTs against that
    JWKS endpoint (KIP-768), which must be up before the cluster starts and be allowed with
    ``java_options=[f"-D{OAUTH_ALLOWED_URLS}={jwks_url}"]``; tokens must then carry ``aud``
    = ``audience`` (Kafka 4.4 refuses to start a JWKS validator without an expected
    audience) and, when ``issuer`` is given, ``iss`` = ``issuer``. ``reauth_ms`` sets
    ``connections.max.reauth.ms`` for OAUTHBEARER on both listeners (KIP-368: sessions then
    last at most that long and clients must re-authenticate).
    """
    props = {"sasl.enabled.mechanisms": ",".join((*SASL_MECHANISMS, "OAUTHBEARER"))}
    for listener in ("sasl_plaintext", "sasl_ssl"):
        prefix = f"listener.name.{listener}.oauthbearer"
        # The broker logs in too (its login module needs a subject even when it never uses
        # it: inter-broker traffic is on PLAINTEXT).
        props[f"{prefix}.sasl.jaas.config"] = (
            f"{_OAUTH_PACKAGE}.OAuthBearerLoginModule required "
            'unsecuredLoginStringClaim_sub="admin";'
        )
        if reauth_ms is not None:
            props[f"{prefix}.connections.max.reauth.ms"] = str(reauth_ms)
    if jwks_url is not None:
        prefix = "listener.name.sasl_ssl.oauthbearer"
        props[f"{prefix}.sasl.server.callback.handler.class"] = (
            f"{_OAUTH_PACKAGE}.OAuthBearerValidatorCallbackHandler"
        )
        props[f"{prefix}.sasl.oauthbearer.jwks.endpoint.url"] = jwks_url
        props[f"{prefix}.sasl.oauthbearer.expected.audience"] = audience
        if issuer is not None:
            props[f"{prefix}.sasl.oauthbearer.expected.issuer"] = issuer
    return props


def kerberos_properties(
    *, keytab: str, principal: str, service_name: str = "kafka"
) -> dict[str, str]:
    """``broker_properties`` adding SASL GSSAPI (Kerberos) to both SASL listeners: the
    broker logs in as ``principal`` (``kafka/127.0.0.1@REALM``) from ``keytab``. The JVM also
    needs the realm's krb5.conf: ``java_options=["-Djava.security.krb5.conf=PATH"]``, and
    the KDC must be up before the cluster starts (the broker logs in at start)."""
    jaas = (
        "com.sun.security.auth.module.Krb5LoginModule required useKeyTab=true "
        f'storeKey=true keyTab="{keytab}" principal="{principal}";'
    )
    props = {
        "sasl.enabled.mechanisms": ",".join((*SASL_MECHANISMS, "GSSAPI")),
        "sasl.kerberos.service.name": service_name,
    }
    for listener in ("sasl_plaintext", "sasl_ssl"):  # the mechanism list is for both
        props[f"listener.name.{listener}.gssapi.sasl.jaas.config"] = jaas
    return props


# Share groups (KIP-932) are on by default in Kafka 4.2+ (nothing to set at format time).
# A group's ``share.record.lock.duration.ms`` may not go below this broker floor (15 s by
# default); 1 s (Kafka's least) lets the lock-expiry tests run in seconds.
_SHARE_GROUPS: Final = {"group.share.min.record.lock.duration.ms": "1000"}


def scram_arguments(users: Mapping[str, str]) -> list[str]:
    """StorageTool ``--add-scram`` arguments: every user for both SCRAM mechanisms."""
    args: list[str] = []
    for name, password in users.items():
        for mechanism in ("SCRAM-SHA-256", "SCRAM-SHA-512"):
            args += ["--add-scram", f"{mechanism}=[name={name},password={password}]"]
    return args


def _escape(value: str) -> str:
    # java.util.Properties: a backslash starts an escape; our values (paths, JAAS lines)
    # contain none on POSIX, but keep the file right if one ever does.
    return value.replace("\\", "\\\\")


@dataclass(frozen=True, slots=True)
class TlsFiles:
    """The certificate authority clients trust and the brokers' PEM keystore."""

    ca_file: Path
    keystore: Path


def make_tls_files(directory: Path, hosts: tuple[str, ...] = (HOST,)) -> TlsFiles:
    """A fresh CA and a server certificate for ``hosts`` and localhost, as PEM files."""
    try:
        import trustme
        from cryptography.hazmat.primitives import serialization
    except ImportError as exc:  # a test dependency, not a runtime one
        raise RuntimeError(
            "the SSL listeners need trustme (pip install trustme), or pass tls=False"
        ) from exc
    ca = trustme.CA()
    cert = ca.issue_cert(*hosts, "localhost")
    key = serialization.load_pem_private_key(cert.private_key_pem.bytes(), password=None)
    # Kafka's PEM keystore reads PKCS#8 keys only ("BEGIN PRIVATE KEY").
    pkcs8 = key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )
    keystore = directory / "broker-keystore.pem"
    keystore.write_bytes(pkcs8 + b"".join(blob.bytes() for blob in cert.cert_chain_pems))
    ca_file = directory / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    return TlsFiles(ca_file=ca_file, keystore=keystore)
