"""Kafka client properties the Java way: ``.properties`` files and security settings.

Kafka's own tools take ``--command-config client.properties``; Spark passes ``kafka.*``
options; operators already have those files. :func:`load_properties` reads the Java
properties format, and :func:`translate_security` turns the Java client's security
properties into what our configs take (``ClientConfig.from_properties`` calls it):

* ``sasl.jaas.config`` with ``PlainLoginModule`` or ``ScramLoginModule``: its ``username``
  and ``password`` (explicit ``sasl.username``/``sasl.password`` win);
* ``sasl.jaas.config`` with ``OAuthBearerLoginModule``: ``clientId``, ``clientSecret`` and
  ``scope`` for the OIDC client credentials provider (with ``sasl.oauthbearer.token.endpoint.url``;
  the KIP-1139 ``sasl.oauthbearer.client.credentials.*`` and ``sasl.oauthbearer.scope``
  properties win), ``extension_NAME`` options as SASL extensions (KIP-342), and
  ``unsecuredLoginStringClaim_sub`` (+ ``unsecuredLoginLifetimeSeconds``) for an unsigned
  token (development brokers only). ``sasl.login.callback.handler.class`` may name Java's
  own OAuth handler (what Java needs for OIDC); any other class is refused;
  ``sasl.oauthbearer.jwt.retriever.class`` may name Kafka's retrievers, and
  ``JwtBearerJwtRetriever`` picks the jwt-bearer grant (KIP-1139);
* ``sasl.jaas.config`` with ``Krb5LoginModule`` (GSSAPI): ``principal``, ``keyTab`` (with
  ``useKeyTab=true``) and ``ticketCache``; ``sasl.kerberos.service.name`` is a plain setting;
* ``ssl.truststore.location`` / ``ssl.truststore.certificates`` (PEM),
  ``ssl.keystore.location`` (PEM certificate chain and key) or
  ``ssl.keystore.certificate.chain`` + ``ssl.keystore.key`` (PEM text),
  ``ssl.key.password``/``ssl.keystore.password``, ``ssl.endpoint.identification.algorithm``
  (empty: no host name check), and librdkafka's ``ssl.ca.location``,
  ``ssl.certificate.location``, ``ssl.key.location``: one ``ssl.SSLContext``. JKS and
  PKCS12 stores are refused with a message saying so.

Errors are ``ConfigError`` naming the property, never echoing a value (values may be
secrets).
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from aiokafka_ng.errors import ConfigError

__all__ = ["load_properties", "translate_security"]

_JAAS_MODULES = (
    "plainloginmodule",
    "scramloginmodule",
    "oauthbearerloginmodule",
    "krb5loginmodule",
)
_JAVA_OAUTH_HANDLERS = frozenset(
    {
        "org.apache.kafka.common.security.oauthbearer.OAuthBearerLoginCallbackHandler",
        "org.apache.kafka.common.security.oauthbearer.secured.OAuthBearerLoginCallbackHandler",
    }
)
#: Java's token retrievers (Kafka 4.1+) -> the grant each asks for.
_JAVA_RETRIEVERS = {
    "org.apache.kafka.common.security.oauthbearer.DefaultJwtRetriever": "client_credentials",
    "org.apache.kafka.common.security.oauthbearer.ClientCredentialsJwtRetriever": (
        "client_credentials"
    ),
    "org.apache.kafka.common.security.oauthbearer.JwtBearerJwtRetriever": (
        "urn:ietf:params:oauth:grant-type:jwt-bearer"
    ),
}
_JAAS_VALUE = re.compile(r"""(\w+)\s*=\s*(?:"((?:[^"\\]|\\.)*)"|'((?:[^'\\]|\\.)*)'|([^\s;]+))""")
#: Properties consumed here (they never reach the config models as such).
SECURITY_KEYS = frozenset(
    {
        "sasl.jaas.config",
        "sasl.login.callback.handler.class",
        "sasl.oauthbearer.jwt.retriever.class",
        "ssl.truststore.location",
        "ssl.truststore.type",
        "ssl.truststore.certificates",
        "ssl.truststore.password",
        "ssl.keystore.location",
        "ssl.keystore.type",
        "ssl.keystore.password",
        "ssl.keystore.certificate.chain",
        "ssl.keystore.key",
        "ssl.key.password",
        "ssl.endpoint.identification.algorithm",
        "ssl.protocol",
        "ssl.enabled.protocols",
        "ssl.ca.location",
        "ssl.certificate.location",
        "ssl.key.location",
    }
)
_ESCAPES = {"t": "\t", "n": "\n", "r": "\r", "f": "\f"}


def load_properties(path: str | Path) -> dict[str, str]:
    """Read a Java ``.properties`` file: ``key=value``, ``key: value`` or ``key value``;
    ``#``/``!`` comments; a trailing backslash continues the line; ``\\t``, ``\\n``,
    ``\\uXXXX`` and escaped separators. ``ConfigError`` if it cannot be read."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            {str(path): f"cannot read the properties file ({exc.strerror})"}
        ) from None
    out: dict[str, str] = {}
    logical = ""
    for raw in text.splitlines():
        line = raw.lstrip()
        if not logical and (not line or line[0] in "#!"):
            continue
        trailing = len(line) - len(line.rstrip("\\"))
        if trailing % 2:  # an odd number of backslashes: the line continues
            logical += line[:-1]
            continue
        logical += line
        key, value = _split(logical)
        out[key] = value
        logical = ""
    if logical:
        key, value = _split(logical)
        out[key] = value
    return out


def _split(line: str) -> tuple[str, str]:
    key, i = _read(line, 0, "=: \t\f")
    rest = line[i:].lstrip(" \t\f")
    if rest[:1] in ("=", ":"):
        rest = rest[1:].lstrip(" \t\f")
    value, _ = _read(rest, 0, "")
    return key, value


def _read(s: str, i: int, stops: str) -> tuple[str, int]:
    """Unescape ``s`` from ``i`` up to the first unescaped character of ``stops``; the text
    and where it stopped."""
    out: list[str] = []
    while i < len(s):
        ch = s[i]
        if ch == "\\" and i + 1 < len(s):
            out.append(_unescape(s, i))
            i += 6 if s[i + 1] == "u" else 2
            continue
        if ch in stops:
            break
        out.append(ch)
        i += 1
    return "".join(out), i


def _unescape(s: str, i: int) -> str:
    nxt = s[i + 1]
    if nxt == "u":
        try:
            return chr(int(s[i + 2 : i + 6], 16))
        except ValueError:
            raise ConfigError({"<properties>": "bad \\u escape"}) from None
    return _ESCAPES.get(nxt, nxt)


def translate_security(props: Mapping[str, Any]) -> tuple[dict[str, Any], ssl.SSLContext | None]:
    """Split off the Java security properties: returns the remaining properties (with
    ``sasl.username``/``sasl.password`` from a JAAS line) and the SSL context they
    describe (None when ``security.protocol`` is not SSL/SASL_SSL and none is asked for)."""
    plain = {k: v for k, v in props.items() if k not in SECURITY_KEYS}
    handler = props.get("sasl.login.callback.handler.class")
    if handler is not None and str(handler).strip() not in _JAVA_OAUTH_HANDLERS:
        raise ConfigError(
            {
                "sasl.login.callback.handler.class": "Java classes cannot be loaded; for OAuth "
                "use sasl.oauthbearer.token.endpoint.url or a token provider"
            }
        )
    retriever = props.get("sasl.oauthbearer.jwt.retriever.class")
    if retriever is not None:
        grant = _JAVA_RETRIEVERS.get(str(retriever).strip())
        if grant is None:
            raise ConfigError(
                {
                    "sasl.oauthbearer.jwt.retriever.class": "Java classes cannot be loaded; "
                    "Kafka's DefaultJwtRetriever, ClientCredentialsJwtRetriever and "
                    "JwtBearerJwtRetriever are understood"
                }
            )
        plain.setdefault("sasl.oauthbearer.grant.type", grant)
    if "sasl.jaas.config" in props:
        module, options = _jaas(str(props["sasl.jaas.config"]))
        if module == "oauthbearerloginmodule":
            plain.update({k: v for k, v in _oauth(options).items() if k not in plain})
        elif module == "krb5loginmodule":
            plain.update({k: v for k, v in _kerberos(options).items() if k not in plain})
        else:
            plain.setdefault("sasl.username", options["username"])
            plain.setdefault("sasl.password", options["password"])
    protocol = str(props.get("security.protocol", "PLAINTEXT")).upper()
    uses_ssl_keys = any(k.startswith("ssl.") for k in props if k in SECURITY_KEYS)
    if protocol not in ("SSL", "SASL_SSL") and not uses_ssl_keys:
        return plain, None
    return plain, _ssl_context({k: str(v) for k, v in props.items()})


def _jaas(value: str) -> tuple[str, dict[str, str]]:
    """The login module (lower case, without package) and the JAAS line's options."""
    head = value.strip().split(None, 1)
    module = head[0].rsplit(".", 1)[-1].lower() if head else ""
    if module not in _JAAS_MODULES:
        raise ConfigError(
            {
                "sasl.jaas.config": "only PlainLoginModule, ScramLoginModule, "
                "OAuthBearerLoginModule and Krb5LoginModule are supported"
            }
        )
    found = {
        m.group(1): m.group(2) or m.group(3) or m.group(4) or ""
        for m in _JAAS_VALUE.finditer(value)
    }
    if module in ("oauthbearerloginmodule", "krb5loginmodule"):
        return module, found
    missing = [k for k in ("username", "password") if k not in found]
    if missing:
        raise ConfigError({"sasl.jaas.config": f"no {' or '.join(missing)} in the JAAS line"})
    return module, {"username": found["username"], "password": found["password"]}


def _kerberos(options: Mapping[str, str]) -> dict[str, Any]:
    """Krb5LoginModule options -> our GSSAPI settings (keytab only with useKeyTab=true)."""
    out: dict[str, Any] = {}
    if options.get("principal"):
        out["sasl_kerberos_principal"] = options["principal"]
    if options.get("useKeyTab", "false").lower() == "true" and options.get("keyTab"):
        out["sasl_kerberos_keytab"] = options["keyTab"]
    if options.get("ticketCache"):
        out["sasl_kerberos_ccache"] = options["ticketCache"]
    return out


def _oauth(options: Mapping[str, str]) -> dict[str, Any]:
    """OAuthBearerLoginModule options -> our settings (see the module docstring)."""
    out: dict[str, Any] = {}
    for option, key in (
        ("clientId", "sasl.oauthbearer.client.credentials.client.id"),
        ("clientSecret", "sasl.oauthbearer.client.credentials.client.secret"),
        ("scope", "sasl.oauthbearer.scope"),
    ):
        if option in options:
            out[key] = options[option]
    extensions = {
        k.removeprefix("extension_"): v for k, v in options.items() if k.startswith("extension_")
    }
    if extensions:
        out["sasl_oauthbearer_extensions"] = extensions
    subject = options.get("unsecuredLoginStringClaim_sub")
    if subject:
        from aiokafka_ng.net.oauth import UnsecuredTokenProvider

        try:
            lifetime = float(options.get("unsecuredLoginLifetimeSeconds", "3600"))
            out["sasl_oauth_token_provider"] = UnsecuredTokenProvider(subject, lifetime_s=lifetime)
        except ValueError:
            raise ConfigError(
                {"sasl.jaas.config": "unsecuredLoginLifetimeSeconds must be a positive number"}
            ) from None
    return out


def _pem(props: Mapping[str, str], store: str, alias: str) -> str | None:
    location = props.get(f"ssl.{store}.location") or props.get(alias)
    # Java's default store type is JKS; without a type, the file's extension decides.
    guess = Path(location or "").suffix.lower().lstrip(".")
    default = {"jks": "JKS", "p12": "PKCS12", "pfx": "PKCS12"}.get(guess, "PEM")
    kind = props.get(f"ssl.{store}.type", default).upper()
    if props.get(f"ssl.{store}.location") is not None and kind != "PEM":
        reason = f"only PEM stores are supported (got {kind}); convert it with keytool/openssl"
        raise ConfigError({f"ssl.{store}.type": reason})
    return location


def _ssl_context(props: Mapping[str, str]) -> ssl.SSLContext:
    ca_file = _pem(props, "truststore", "ssl.ca.location")
    try:
        context = ssl.create_default_context(
            cafile=ca_file, cadata=props.get("ssl.truststore.certificates")
        )
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            {"ssl.truststore.location": f"cannot load the CA certificates ({type(exc).__name__})"}
        ) from None
    password = props.get("ssl.key.password") or props.get("ssl.keystore.password")
    chain = _pem(props, "keystore", "ssl.certificate.location")
    key_file = props.get("ssl.key.location")
    try:
        if chain is not None:
            context.load_cert_chain(chain, keyfile=key_file, password=password)
        elif "ssl.keystore.certificate.chain" in props:
            import tempfile

            with tempfile.NamedTemporaryFile("w", suffix=".pem") as f:
                f.write(props["ssl.keystore.certificate.chain"] + "\n")
                f.write(props.get("ssl.keystore.key", "") + "\n")
                f.flush()
                context.load_cert_chain(f.name, password=password)
    except (OSError, ssl.SSLError) as exc:
        raise ConfigError(
            {"ssl.keystore.location": f"cannot load the client certificate ({type(exc).__name__})"}
        ) from None
    if props.get("ssl.endpoint.identification.algorithm", "https").strip() == "":
        context.check_hostname = False
    return context
