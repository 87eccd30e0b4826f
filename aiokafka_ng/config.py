"""Client configuration: pydantic models validated once, at the edge.

Every client (producer, consumer, admin) shares :class:`ClientConfig` (bootstrap servers,
timeouts, backoff, security). :class:`ProducerConfig` adds the producer settings with the
Java client's defaults (Kafka 4.0, KIP-1030 ``linger.ms=5``).

Rules:

* Keyword names are snake_case; :meth:`ClientConfig.from_properties` also takes Kafka's
  dotted names (``"linger.ms": "5"``), values as strings or native types.
* A bad configuration raises :class:`~aiokafka_ng.errors.ConfigError` naming *every* bad key
  (field errors and cross-field conflicts). A pydantic ``ValidationError`` never escapes.
  An unknown key says which known one it looks like (``lingr_ms``: "did you mean
  'linger_ms'?"), matched over the field names and Kafka's dotted names.
* Cross-field rules follow the Java client: a conflict with a setting the user did not set
  is resolved silently (``enable_idempotence`` switched off, ``delivery_timeout_ms`` raised),
  a conflict between settings the user set is an error.

Hot paths never touch these models: the client copies the values it needs into plain
attributes when it starts.
"""

from __future__ import annotations

import difflib
import re
import ssl
from collections.abc import Callable, Mapping
from datetime import timedelta
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    PrivateAttr,
    SecretStr,
    ValidationError,
    field_validator,
)

# The one bootstrap parser (re-exported: ``aiokafka_ng.config.parse_bootstrap_servers`` is
# public). The cluster layer owns it; the clients validate their setting with it.
from aiokafka_ng.cluster.config import parse_bootstrap_servers
from aiokafka_ng.errors import ConfigError
from aiokafka_ng.protocol.compression import Compression, level_problem

if TYPE_CHECKING:
    from aiokafka_ng.cluster import ClusterConfig
    from aiokafka_ng.net.connection import ConnectionConfig

__all__ = ["ClientConfig", "ProducerConfig", "parse_bootstrap_servers", "parse_duration"]

SecurityProtocol = Literal["PLAINTEXT", "SSL", "SASL_PLAINTEXT", "SASL_SSL"]
SaslMechanism = Literal["PLAIN", "SCRAM-SHA-256", "SCRAM-SHA-512", "OAUTHBEARER", "GSSAPI"]
CompressionType = Literal["none", "gzip", "snappy", "lz4", "zstd"]
OAuthGrantType = Literal["client_credentials", "urn:ietf:params:oauth:grant-type:jwt-bearer"]

_MAX_INT32 = 2**31 - 1
_MIB = 1024 * 1024


_SIMPLE_DURATION = re.compile(r"^(\d+(?:\.\d+)?)([smhd])$")
_ISO_DURATION = re.compile(
    r"^P(?:(?P<d>\d+(?:\.\d+)?)D)?(?:T(?:(?P<h>\d+(?:\.\d+)?)H)?"
    r"(?:(?P<m>\d+(?:\.\d+)?)M)?(?:(?P<s>\d+(?:\.\d+)?)S)?)?$"
)


def parse_duration(text: str) -> timedelta:
    """A duration as ISO 8601 writes it (``PT1H30M``, ``P1DT2H``, ``PT0.5S``: what Java's
    ``Duration.parse`` reads, less signs, for the consumer's ``auto_offset_reset=
    "by_duration:..."`` and ``kafka-consumer-groups --by-duration``), or short (``90s``,
    ``15m``, ``2h``, ``1d``). ValueError naming the text otherwise; never negative."""
    stripped = text.strip()
    simple = _SIMPLE_DURATION.match(stripped)
    if simple:
        unit = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}[simple.group(2)]
        return timedelta(**{unit: float(simple.group(1))})
    upper = stripped.upper()
    iso = _ISO_DURATION.match(upper)
    if iso and upper not in ("P", "PT") and not upper.endswith("T"):
        parts = {k: float(v) for k, v in iso.groupdict().items() if v is not None}
        return timedelta(
            days=parts.get("d", 0),
            hours=parts.get("h", 0),
            minutes=parts.get("m", 0),
            seconds=parts.get("s", 0),
        )
    raise ValueError(f"bad duration {text!r}: use ISO 8601 (PT1H, P1DT2H30M) or 90s, 15m, 2h, 1d")


def _describe(err: Mapping[str, Any]) -> tuple[str, str]:
    loc = err.get("loc") or ()
    key = str(loc[0]) if loc else "<config>"
    return key, str(err.get("msg", "invalid value"))


def _normal(name: str) -> str:
    return name.lower().replace(".", "_").replace("-", "_")


def unknown_key_problem(name: str, *classes: type[ClientConfig], dotted: bool = False) -> str:
    """What to say about a key none of ``classes`` knows: "unknown configuration key", plus
    "(did you mean ...?)" naming up to two close known keys: difflib over the field names and
    the Kafka dotted names, compared without case or separators, else the keys the name is
    the start of (``max_in_flight``). ``dotted``: suggest the dotted spelling (for
    properties), else the keyword one."""
    spellings: dict[str, tuple[type[ClientConfig], str]] = {}
    for cls in classes:
        for field in cls.model_fields:
            spellings.setdefault(field, (cls, field))
        for alias, field in cls.PROPERTY_ALIASES.items():
            spellings.setdefault(_normal(alias), (cls, field))
    wanted = _normal(name)
    matches = difflib.get_close_matches(wanted, spellings, n=6, cutoff=0.7)
    if not matches and len(wanted) >= 6:
        matches = sorted(k for k in spellings if k.startswith(wanted))
    found: dict[str, None] = {}
    for match in matches:
        cls, field = spellings[match]
        found[cls.property_name(field) if dotted else field] = None
    named = [f"{key!r}" for key in list(found)[:2]]
    hint = f" (did you mean {' or '.join(named)}?)" if named else ""
    return "unknown configuration key" + hint


class ClientConfig(BaseModel):
    """Settings every client shares. Subclasses add their own and their cross-field rules."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        arbitrary_types_allowed=True,
        validate_default=False,
    )

    #: Kafka dotted names that do not map to ours by replacing "." with "_".
    PROPERTY_ALIASES: ClassVar[dict[str, str]] = {
        "sasl.username": "sasl_plain_username",
        "sasl.password": "sasl_plain_password",
        "sasl.mechanisms": "sasl_mechanism",
        # KIP-1139 names of the client credentials (the JAAS clientId/clientSecret also work).
        "sasl.oauthbearer.client.credentials.client.id": "sasl_oauthbearer_client_id",
        "sasl.oauthbearer.client.credentials.client.secret": "sasl_oauthbearer_client_secret",
    }

    bootstrap_servers: str | list[str] = "localhost:9092"
    client_id: str | None = "aiokafka-ng"
    request_timeout_ms: int = Field(default=30000, gt=0)
    retry_backoff_ms: int = Field(default=100, ge=0)
    retry_backoff_max_ms: int = Field(default=1000, ge=0)
    reconnect_backoff_ms: int = Field(default=50, ge=0)
    reconnect_backoff_max_ms: int = Field(default=1000, ge=0)
    metadata_max_age_ms: int = Field(default=300000, gt=0)
    #: KIP-1102: "rebootstrap" (Java's default since 4.0) goes back to bootstrap_servers when
    #: no known broker has answered for metadata_recovery_rebootstrap_trigger_ms.
    metadata_recovery_strategy: Literal["none", "rebootstrap"] = "rebootstrap"
    metadata_recovery_rebootstrap_trigger_ms: int = Field(default=300000, gt=0)
    #: KIP-1242 (Java's ``metadata.cluster.check.enable``): a connection to a broker the
    #: metadata named tells it the cluster id and node id it expects, and a broker that is
    #: another answers REBOOTSTRAP_REQUIRED (Kafka 4.4+); ignored when
    #: metadata_recovery_strategy is "none", as in Java.
    metadata_cluster_check_enable: bool = True
    connections_max_idle_ms: int = Field(default=540000, gt=0)
    security_protocol: SecurityProtocol = "PLAINTEXT"
    ssl_context: ssl.SSLContext | None = None
    #: An async callable ``(host, port) -> anyio.abc.ByteStream`` that opens each broker
    #: connection instead of TCP (TLS is not applied to it): ``FakeKafka.transport`` connects
    #: a client to an in-process cluster in memory. None: TCP.
    transport: Any = None
    sasl_mechanism: SaslMechanism | None = None
    sasl_plain_username: str | None = None
    #: A secret: shown as ``'**********'`` by repr, str, model_dump and model_dump_json (as
    #: the Java client prints ``[hidden]``); pass a str, read it with ``.get_secret_value()``.
    sasl_plain_password: SecretStr | None = None
    #: OAUTHBEARER token source: a sync or async callable returning a token (an
    #: ``OAuthBearerToken`` or a JWT string), or aiokafka's ``AbstractTokenProvider``.
    sasl_oauth_token_provider: Any = None
    #: OAUTHBEARER via OIDC client credentials (KIP-768): the IdP's token endpoint.
    sasl_oauthbearer_token_endpoint_url: str | None = None
    #: OIDC client id (JAAS ``clientId``).
    sasl_oauthbearer_client_id: str | None = None
    #: OIDC client secret (JAAS ``clientSecret``); a secret, hidden like the password.
    sasl_oauthbearer_client_secret: SecretStr | None = None
    #: OIDC scope to ask for (JAAS ``scope``).
    sasl_oauthbearer_scope: str | None = None
    #: The grant (librdkafka's ``sasl.oauthbearer.grant.type``): ``client_credentials``, or
    #: ``urn:ietf:params:oauth:grant-type:jwt-bearer`` (KIP-1139: a signed assertion is the
    #: grant; Java's ``JwtBearerJwtRetriever``).
    sasl_oauthbearer_grant_type: OAuthGrantType = "client_credentials"
    #: KIP-1139/1258 assertions: signed RS256 or ES256 with the PKCS#8 PEM key in this file.
    #: With client_credentials an assertion (this key, or ``..._assertion_file``)
    #: authenticates the client instead of a secret (KIP-1258, ``private_key_jwt``).
    sasl_oauthbearer_assertion_private_key_file: str | None = None
    #: The key file's passphrase, if it is encrypted; a secret.
    sasl_oauthbearer_assertion_private_key_passphrase: SecretStr | None = None
    sasl_oauthbearer_assertion_algorithm: Literal["RS256", "ES256"] = "RS256"
    #: The assertion's ``iss``, ``sub`` and ``aud`` claims (none when not set).
    sasl_oauthbearer_assertion_claim_iss: str | None = None
    sasl_oauthbearer_assertion_claim_sub: str | None = None
    sasl_oauthbearer_assertion_claim_aud: str | None = None
    #: ``exp`` this long after ``iat``; ``nbf`` this long before it; a random ``jti`` or not.
    sasl_oauthbearer_assertion_claim_exp_seconds: int = Field(default=300, ge=0, le=86400)
    sasl_oauthbearer_assertion_claim_nbf_seconds: int = Field(default=60, ge=0, le=3600)
    sasl_oauthbearer_assertion_claim_jti_include: bool = False
    #: JSON ``{"header": {...}, "payload": {...}}`` merged into every assertion (re-read
    #: when it changes; the times and ``alg``/``typ`` win).
    sasl_oauthbearer_assertion_template_file: str | None = None
    #: A ready-made assertion (a JWT made elsewhere), sent as it is, re-read when it changes;
    #: first choice over a key, as in Java.
    sasl_oauthbearer_assertion_file: str | None = None
    #: SASL extensions (KIP-342) sent with every token (JAAS ``extension_NAME``).
    sasl_oauthbearer_extensions: dict[str, str] = {}
    #: GSSAPI: the brokers' Kerberos service name (their principal's first part).
    sasl_kerberos_service_name: str = "kafka"
    #: GSSAPI: the host in the service principal, for every broker (None: each broker's
    #: own host name, as Java does).
    sasl_kerberos_domain_name: str | None = None
    #: GSSAPI: the client principal to log in as (with a keytab; None: the ticket cache's).
    sasl_kerberos_principal: str | None = None
    #: GSSAPI: a keytab file for ``sasl_kerberos_principal`` (JAAS ``keyTab``).
    sasl_kerberos_keytab: str | None = None
    #: GSSAPI: a credential cache other than the default (JAAS ``ticketCache``).
    sasl_kerberos_ccache: str | None = None
    # The OIDC provider built from the fields above: one per client, so its connections share
    # one cached token.
    _token_provider: Any = PrivateAttr(default=None)

    def __init__(self, **data: Any) -> None:
        # pydantic's ValidationError must never reach users: translate it here, once, and
        # add the cross-field findings so every bad key is named in one error.
        errors: dict[str, str] = {}
        try:
            super().__init__(**data)
        except ValidationError as exc:
            for err in exc.errors():
                key, msg = _describe(err)
                if err.get("type") == "extra_forbidden":
                    msg = unknown_key_problem(key, type(self))
                errors.setdefault(key, msg)
            raise ConfigError(errors) from None
        errors.update(self._cross_check())
        if errors:
            raise ConfigError(errors)

    @field_validator("sasl_oauthbearer_assertion_algorithm", mode="before")
    @classmethod
    def _upper_algorithm(cls, v: Any) -> Any:
        # Java takes the algorithm in any case (CaseInsensitiveValidString).
        return v.upper() if isinstance(v, str) else v

    @field_validator("transport")
    @classmethod
    def _check_transport(cls, v: Any) -> Any:
        if v is not None and not callable(v):
            raise ValueError("must be an async callable (host, port) -> byte stream, or None")
        return v

    @field_validator("bootstrap_servers", mode="before")
    @classmethod
    def _check_servers_type(cls, v: Any) -> Any:
        # Before pydantic's own check, whose "Input should be a valid string" says nothing
        # of the list it also takes nor of the likely mistake (a bare port).
        if isinstance(v, str | list | tuple):
            return v
        hint = ""
        if isinstance(v, int) and not isinstance(v, bool) and 0 < v < 65536:
            hint = f" (for port {v} on this machine: 'localhost:{v}')"
        raise ValueError(
            f"expected 'host:port[,host:port...]' or a list of 'host:port' strings, "
            f"got {type(v).__name__} {v!r}"[:200]
            + hint
        )

    @field_validator("bootstrap_servers")
    @classmethod
    def _check_servers(cls, v: str | list[str]) -> str | list[str]:
        try:
            parse_bootstrap_servers(v)
        except ConfigError as exc:
            # The problem alone: __init__ files it under this key with the others.
            raise ValueError(exc.errors["bootstrap_servers"]) from None
        return v

    def _cross_check(self) -> dict[str, str]:
        """Cross-field rules; may adjust defaults the user did not set. Returns bad keys."""
        errors: dict[str, str] = {}
        if self.security_protocol.startswith("SASL"):
            if self.sasl_mechanism is None:
                errors["sasl_mechanism"] = (
                    f"required with security_protocol={self.security_protocol}"
                )
            if self.sasl_mechanism == "OAUTHBEARER":
                errors.update(self._oauth_problems())
            elif self.sasl_mechanism == "GSSAPI":
                import importlib.util

                if importlib.util.find_spec("gssapi") is None:
                    errors["sasl_mechanism"] = (
                        "GSSAPI needs the gssapi package: pip install 'aiokafka-ng[gssapi]'"
                    )
                if self.sasl_kerberos_keytab and not self.sasl_kerberos_principal:
                    errors["sasl_kerberos_principal"] = "required with sasl_kerberos_keytab"
            else:
                if not self.sasl_plain_username:
                    errors["sasl_plain_username"] = "required for SASL authentication"
                if self.sasl_plain_password is None:
                    errors["sasl_plain_password"] = "required for SASL authentication"
        return errors

    def _oauth_problems(self) -> dict[str, str]:
        url = self.sasl_oauthbearer_token_endpoint_url or ""
        if url and not url.startswith(("http://", "https://")):
            return {"sasl_oauthbearer_token_endpoint_url": "must be an http:// or https:// URL"}
        assertion = (
            self.sasl_oauthbearer_assertion_file or self.sasl_oauthbearer_assertion_private_key_file
        )
        jwt_bearer = self.sasl_oauthbearer_grant_type != "client_credentials"
        oidc = {
            "sasl_oauthbearer_token_endpoint_url": url,
            "sasl_oauthbearer_client_id": self.sasl_oauthbearer_client_id,
            "sasl_oauthbearer_client_secret": self.sasl_oauthbearer_client_secret,
            "sasl_oauthbearer_assertion_private_key_file": assertion,
        }
        given = {key for key, value in oidc.items() if value}
        if self.sasl_oauth_token_provider is not None:
            if given:
                return {
                    key: "not with sasl_oauth_token_provider (one source of tokens)"
                    for key in given
                }
            return {}
        if not given:
            return {
                "sasl_oauth_token_provider": "OAUTHBEARER needs a token provider or "
                "sasl_oauthbearer_token_endpoint_url with client id and secret (or an assertion)"
            }
        problems: dict[str, str] = {}
        if not url:
            problems["sasl_oauthbearer_token_endpoint_url"] = (
                "required with the other OIDC settings"
            )
        if jwt_bearer or assertion:
            if not assertion:
                problems["sasl_oauthbearer_assertion_private_key_file"] = (
                    "the jwt-bearer grant needs an assertion: a private key file to sign it "
                    "(or sasl_oauthbearer_assertion_file)"
                )
            if self.sasl_oauthbearer_client_secret is not None:
                problems["sasl_oauthbearer_client_secret"] = (
                    "not with an assertion (the assertion authenticates the client)"
                    if not jwt_bearer
                    else "not with the jwt-bearer grant (the assertion is the grant)"
                )
            if assertion and not self.sasl_oauthbearer_assertion_file:
                try:
                    import cryptography  # noqa: F401
                except ImportError:
                    problems["sasl_oauthbearer_assertion_private_key_file"] = (
                        "signing assertions needs cryptography: pip install 'aiokafka-ng[oauth]'"
                    )
            return problems
        for key in ("sasl_oauthbearer_client_id", "sasl_oauthbearer_client_secret"):
            if key not in given:
                problems[key] = "required with the other OIDC settings"
        return problems

    def _force(self, **values: Any) -> None:
        # Frozen model: adjusting a default the user did not set is the only mutation.
        for key, value in values.items():
            object.__setattr__(self, key, value)

    # ----------------------------------------------------------------- construction helpers

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Any:
        """Build from Kafka-style properties: ``{"linger.ms": "5", "acks": "all"}``.

        Dotted and snake_case names are both accepted. Unknown names raise ``ConfigError``
        naming each of them. The Java client's security properties (``sasl.jaas.config``,
        ``ssl.truststore.location``, ...) are translated: see :mod:`aiokafka_ng.properties`.
        """
        from aiokafka_ng.properties import translate_security

        properties, ssl_context = translate_security(properties)
        data: dict[str, Any] = {}
        if ssl_context is not None:
            data["ssl_context"] = ssl_context
        unknown: dict[str, str] = {}
        for raw_key, value in properties.items():
            key = cls.field_for(raw_key)
            if key is None:
                unknown[raw_key] = unknown_key_problem(raw_key, cls, dotted="." in raw_key)
                continue
            data[key] = value
        if unknown:
            raise ConfigError(unknown)
        return cls(**data)

    @classmethod
    def field_for(cls, name: str) -> str | None:
        """The field a Kafka property name (dotted or snake_case) sets; None if unknown."""
        key = cls.PROPERTY_ALIASES.get(name, name.replace(".", "_").replace("-", "_"))
        return key if key in cls.model_fields else None

    @classmethod
    def property_name(cls, field: str) -> str:
        """The Kafka dotted name of ``field`` (``linger_ms`` -> ``linger.ms``)."""
        for alias, target in cls.PROPERTY_ALIASES.items():
            if target == field:
                return alias
        return field.replace("_", ".")

    @property
    def bootstrap_addresses(self) -> list[tuple[str, int]]:
        return parse_bootstrap_servers(self.bootstrap_servers)

    @property
    def max_response_bytes(self) -> int:
        """The largest answer a broker may send this client; a larger frame is refused at
        its size prefix and the connection dropped. An admin's largest answers are
        "describe all topics" Metadata on a big cluster (~42 bytes a partition: 100 MiB is
        ~2.5M partitions), so the base (admin) keeps 100 MiB; producer and consumer derive
        theirs from their own size settings."""
        return 100 * _MIB

    def connection_config(self, *, max_in_flight: int = 5) -> ConnectionConfig:
        """The per-connection settings for :mod:`aiokafka_ng.net`."""
        from aiokafka_ng.net.connection import ConnectionConfig

        sasl = None
        if self.security_protocol.startswith("SASL"):
            from aiokafka_ng.net.sasl import SaslConfig

            sasl = SaslConfig(
                mechanism=self.sasl_mechanism or "PLAIN",
                username=self.sasl_plain_username or "",
                password=(
                    self.sasl_plain_password.get_secret_value() if self.sasl_plain_password else ""
                ),
                token_provider=self.oauth_token_provider(),
                extensions=dict(self.sasl_oauthbearer_extensions),
                kerberos_service_name=self.sasl_kerberos_service_name,
                kerberos_host=self.sasl_kerberos_domain_name,
                kerberos_principal=self.sasl_kerberos_principal,
                kerberos_keytab=self.sasl_kerberos_keytab,
                kerberos_ccache=self.sasl_kerberos_ccache,
            )
        ctx = self.ssl_context
        if ctx is None and self.security_protocol in ("SSL", "SASL_SSL"):
            ctx = ssl.create_default_context()
        return ConnectionConfig(
            client_id=self.client_id,
            max_in_flight=max_in_flight,
            request_timeout_s=self.request_timeout_ms / 1000,
            ssl_context=ctx,
            sasl=sasl,
            max_response_bytes=self.max_response_bytes,
            transport=self.transport,
        )

    def oauth_token_provider(self) -> Any:
        """The OAUTHBEARER token provider: the one given, or the OIDC client-credentials one
        built (once) from the ``sasl_oauthbearer_*`` settings; None without OAUTHBEARER."""
        if self.sasl_mechanism != "OAUTHBEARER":
            return None
        if self.sasl_oauth_token_provider is not None:
            return self.sasl_oauth_token_provider
        if self._token_provider is None and self.sasl_oauthbearer_token_endpoint_url:
            self._token_provider = self._oidc_provider(self.sasl_oauthbearer_token_endpoint_url)
        return self._token_provider

    def _oidc_provider(self, url: str) -> Any:
        """The token endpoint's provider for the configured grant and client authentication
        (the settings were checked: see ``_oauth_problems``)."""
        from aiokafka_ng.net.oidc import ClientCredentialsTokenProvider, JwtBearerTokenProvider

        assertion = self._assertion_source()
        if self.sasl_oauthbearer_grant_type != "client_credentials" and assertion is not None:
            return JwtBearerTokenProvider(url, assertion, scope=self.sasl_oauthbearer_scope)
        secret = self.sasl_oauthbearer_client_secret
        return ClientCredentialsTokenProvider(
            url,
            self.sasl_oauthbearer_client_id,
            None if secret is None else secret.get_secret_value(),
            client_assertion=assertion,
            scope=self.sasl_oauthbearer_scope,
        )

    def _assertion_source(self) -> Callable[[], str] | None:
        """What makes the KIP-1139/1258 assertions: the assertion file (Java's first choice),
        else a signer with the private key; None without either."""
        from aiokafka_ng.net.assertion import JwtAssertion, read_assertion_file

        if self.sasl_oauthbearer_assertion_file:
            return read_assertion_file(self.sasl_oauthbearer_assertion_file)
        key_file = self.sasl_oauthbearer_assertion_private_key_file
        if not key_file:
            return None
        passphrase = self.sasl_oauthbearer_assertion_private_key_passphrase
        return JwtAssertion(
            key_file,
            algorithm=self.sasl_oauthbearer_assertion_algorithm,
            passphrase=None if passphrase is None else passphrase.get_secret_value(),
            issuer=self.sasl_oauthbearer_assertion_claim_iss,
            subject=self.sasl_oauthbearer_assertion_claim_sub,
            audience=self.sasl_oauthbearer_assertion_claim_aud,
            exp_seconds=self.sasl_oauthbearer_assertion_claim_exp_seconds,
            nbf_seconds=self.sasl_oauthbearer_assertion_claim_nbf_seconds,
            include_jti=self.sasl_oauthbearer_assertion_claim_jti_include,
            template_file=self.sasl_oauthbearer_assertion_template_file,
        )

    def cluster_config(self, *, max_in_flight: int = 5) -> ClusterConfig:
        """The settings for :class:`aiokafka_ng.cluster.Cluster`."""
        from aiokafka_ng.cluster import ClusterConfig

        return ClusterConfig(
            bootstrap_servers=self.bootstrap_addresses,
            client_id=self.client_id,
            connection=self.connection_config(max_in_flight=max_in_flight),
            retry_backoff_ms=self.retry_backoff_ms,
            retry_backoff_max_ms=self.retry_backoff_max_ms,
            reconnect_backoff_ms=self.reconnect_backoff_ms,
            reconnect_backoff_max_ms=self.reconnect_backoff_max_ms,
            metadata_max_age_ms=self.metadata_max_age_ms,
            metadata_recovery_strategy=self.metadata_recovery_strategy,
            metadata_recovery_rebootstrap_trigger_ms=self.metadata_recovery_rebootstrap_trigger_ms,
            metadata_cluster_check_enable=self.metadata_cluster_check_enable,
            connections_max_idle_ms=self.connections_max_idle_ms,
            # Clients start without the cluster; bootstrap runs in the background.
            wait_for_bootstrap=False,
        )


def _acks(value: Any) -> int:
    if isinstance(value, bool):
        raise ValueError("acks must be 'all', -1, 0 or 1")
    text = str(value).strip().lower()
    if text in ("all", "-1"):
        return -1
    if text in ("0", "1"):
        return int(text)
    raise ValueError("acks must be 'all', -1, 0 or 1")


class ProducerConfig(ClientConfig):
    """Producer settings. Defaults are the Java client's (Kafka 4.0)."""

    PROPERTY_ALIASES: ClassVar[dict[str, str]] = {
        **ClientConfig.PROPERTY_ALIASES,
        "key.serializer": "key_serializer",
        "value.serializer": "value_serializer",
        "partitioner.class": "partitioner",
    }

    #: -1 means "all" (the string "all" is accepted and stored as -1).
    acks: int = -1
    enable_idempotence: bool = True
    linger_ms: float = Field(default=5, ge=0)
    batch_size: int = Field(default=16384, ge=0)
    buffer_memory: int = Field(default=32 * 1024 * 1024, gt=0)
    max_block_ms: int = Field(default=60000, ge=0)
    delivery_timeout_ms: int = Field(default=120000, gt=0)
    #: How long ``close()`` (and leaving ``async with``) waits for records still queued or
    #: in flight; what is left then fails with ``ClosedBeforeDeliveryError``. Not a Java
    #: setting (its ``close()`` waits forever): a web app's shutdown must end before its
    #: orchestrator kills it (Kubernetes: 30 s after SIGTERM), so 10 s by default.
    close_timeout_ms: int = Field(default=10000, ge=0)
    max_in_flight_requests_per_connection: int = Field(default=5, ge=1)
    max_request_size: int = Field(default=1024 * 1024, gt=0)
    retries: int = Field(default=_MAX_INT32, ge=0)
    compression_type: CompressionType = "none"
    #: KIP-390: the codec's level, in the range Kafka validates for it (gzip 1..9 or -1,
    #: lz4 1..17, zstd -131072..22; snappy and none have none); None is Kafka's default
    #: (gzip 6, lz4 9 -- its fast compressor --, zstd 3). Java has one setting per codec
    #: (``compression.zstd.level``): ``from_properties`` takes those too.
    compression_level: int | None = None
    key_serializer: Callable[[Any], bytes | None] | None = None
    value_serializer: Callable[[Any], bytes | None] | None = None
    #: Makes the producer transactional (KIP-98); requires idempotence.
    transactional_id: str | None = None
    transaction_timeout_ms: int = Field(default=60000, gt=0)
    #: ``partitioner(key_bytes, all_partitions, available_partitions) -> int`` (aiokafka's
    #: signature); None is the Java-compatible default (murmur2 / KIP-794 sticky).
    partitioner: Callable[[bytes | None, list[int], list[int]], int] | None = None
    #: Where this client runs (Java's ``client.rack``, the brokers' ``broker.rack``).
    client_rack: str = ""
    #: KIP-1123: with a ``client_rack``, records without key or partition stick to
    #: partitions whose leader is in that rack, while one has a leader (then to any). No
    #: effect on keyed records or with a custom ``partitioner``. Off by default, as in Java.
    partitioner_rack_aware: bool = False
    #: KIP-714: push the producer's metrics to the brokers when they subscribe to them (a
    #: client-metrics subscription on the cluster); Java's ``enable.metrics.push``, on by
    #: default. Nothing is sent to brokers without a telemetry plugin.
    enable_metrics_push: bool = True
    #: OpenTelemetry tracing (``pip install aiokafka-ng[tracing]``): a ``TracerProvider``
    #: (``opentelemetry.trace.get_tracer_provider()`` for the global one). A PRODUCER span
    #: per send, its context in the record's headers (W3C ``traceparent``). None: off.
    tracer_provider: Any = None

    @field_validator("acks", mode="before")
    @classmethod
    def _check_acks(cls, v: Any) -> int:
        return _acks(v)

    @property
    def max_response_bytes(self) -> int:
        """A producer's answers do not grow with its requests (a Produce answer is a few
        dozen bytes a partition); the largest is Metadata for the topics it writes, and
        32 MiB holds ~800k partition entries. Never below ``max_request_size``: whoever
        raised that for a reason must not find answers capped below what they send."""
        return max(32 * _MIB, self.max_request_size)

    @field_validator("compression_type", mode="before")
    @classmethod
    def _lower_codec(cls, v: Any) -> Any:
        return v.lower() if isinstance(v, str) else ("none" if v is None else v)

    @classmethod
    def from_properties(cls, properties: Mapping[str, Any]) -> Any:
        """As :meth:`ClientConfig.from_properties`; Java's per-codec levels
        (``compression.gzip.level``, ``.lz4.``, ``.zstd.``) are checked as Java checks each,
        and the one of the configured ``compression.type`` becomes ``compression_level``."""
        props = dict(properties)
        codec = props.get("compression.type", props.get("compression_type")) or "none"
        errors: dict[str, str] = {}
        chosen: int | None = None
        for name in ("gzip", "lz4", "zstd"):
            key = f"compression.{name}.level"
            if key not in props:
                continue
            value = props.pop(key)
            try:
                level = int(value)
            except (TypeError, ValueError):
                errors[key] = f"must be an integer, not {value!r}"
                continue
            problem = level_problem(Compression[name.upper()], level)
            if problem is not None:
                errors[key] = problem
            elif str(codec).strip().lower() == name:
                if "compression.level" in props or "compression_level" in props:
                    errors[key] = "not with compression.level (one level for the codec)"
                chosen = level
        if errors:
            raise ConfigError(errors)
        if chosen is not None:
            props["compression_level"] = chosen
        return super().from_properties(props)

    def _cross_check(self) -> dict[str, str]:
        errors = super()._cross_check()
        if self.compression_level is not None:
            codec = Compression.parse(self.compression_type)
            problem = level_problem(codec, self.compression_level)
            if problem is not None:
                errors["compression_level"] = problem
        user = self.model_fields_set
        conflicts: dict[str, str] = {}
        if self.acks != -1:
            conflicts["acks"] = "idempotence requires acks='all'"
        if self.max_in_flight_requests_per_connection > 5:
            conflicts["max_in_flight_requests_per_connection"] = (
                "idempotence requires max_in_flight_requests_per_connection <= 5"
            )
        if self.retries == 0:
            conflicts["retries"] = "idempotence requires retries > 0"
        if self.transactional_id is not None and not self.enable_idempotence:
            # Only reachable when the user switched idempotence off explicitly.
            errors["enable_idempotence"] = "a transactional_id requires idempotence"
            errors["transactional_id"] = "requires enable_idempotence=True"
        elif self.enable_idempotence and conflicts:
            # A transactional id makes idempotence required, as if the user had set it.
            if "enable_idempotence" in user or self.transactional_id is not None:
                errors["enable_idempotence"] = "conflicts with " + ", ".join(sorted(conflicts))
                errors.update(conflicts)
            else:
                # Java: idempotence is switched off silently when only its default conflicts.
                self._force(enable_idempotence=False)
        floor = self.linger_ms + self.request_timeout_ms
        if self.delivery_timeout_ms < floor:
            if "delivery_timeout_ms" in user:
                msg = f"must be >= linger_ms + request_timeout_ms ({floor:g})"
                errors["delivery_timeout_ms"] = msg
                for key in ("linger_ms", "request_timeout_ms"):
                    if key in user:
                        errors[key] = "linger_ms + request_timeout_ms exceeds delivery_timeout_ms"
            else:
                self._force(delivery_timeout_ms=int(floor + 0.999))
        return errors
