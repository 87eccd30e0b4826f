"""SchemaRegistry: a real Schema Registry (Apicurio Registry) on 127.0.0.1, for tests and dev.

Theory of operation
-------------------
What runs. Apicurio Registry :data:`APICURIO_VERSION`, whose Confluent-compatible API
(``/apis/ccompat/v7``) is what :mod:`aiokafka_ng.schema_registry` and confluent-kafka's
registry client speak. Its prebuilt distribution (``io.apicurio:apicurio-registry-app``,
type ``tar.gz``, classifier ``all``: a Quarkus ``quarkus-run.jar`` plus ``lib/``) comes from
Maven Central: ``mvn dependency:copy`` fetches it once and it is unpacked into
``~/.cache/aiokafka_ng/apicurio-registry-<version>/dist`` (``AIOKAFKA_NG_REGISTRY_HOME``
overrides the directory), the cache the Kafka jars use (``_kafka_jars``). Storage is the
registry's default in-memory H2: a new registry starts empty, and nothing survives a stop.

Java. The distribution is built for Java 21 (class file 65); the machine's default ``java``
may be 17 (the Kafka cluster's). :func:`find_java21` takes the first Java 21+ among
``AIOKAFKA_NG_REGISTRY_JAVA``, ``AIOKAFKA_NG_JAVA``, ``$JAVA_HOME``, the ``PATH``'s ``java``
and the JDKs under ``/usr/lib/jvm``, reading each one's ``release`` file for its version.

Concurrency of the fetch. As for the Kafka jars: an exclusive ``flock`` on ``<home>/.lock``,
the archive copied and unpacked into ``dist.partial``, renamed to ``dist`` only once whole, so
a directory named ``dist`` is always complete and several pytest workers fetch it once.

Start and stop. The JVM is spawned from the calling thread (``PR_SET_PDEATHSIG``: it dies
with the Python process even when that is SIGKILLed) in a process group of its own, with the
HTTP listener on ``127.0.0.1`` and a port picked free (below the ephemeral range), and the
management interface (health, metrics) on ``127.0.0.1`` and a port the kernel picks: left to
its defaults it would listen on ``0.0.0.0:9000``. Ready is when ``GET /subjects`` answers 200,
polled under one deadline while watching that the process has not exited. A start that lost
its port to another process in between is tried once more on another port. Stop sends
SIGTERM to the whole group, then SIGKILL after ``stop_timeout``; every way out of a failed
start stops it too. The log goes to a temporary directory, removed at stop; its last lines
are in every start error.

A path it has no route for. Apicurio 3.3.3 sometimes never answers a request to a path
it has no route for (about 1 in 1,000 on fresh connections; every thread idle after: the
request is dropped), while its routes, 404s for unknown subjects included, always answer.
confluent-kafka's serializers (2.16, default subject name strategy ``ASSOCIATED``) ask such
a path first for every topic, ``/associations/resources/-/<topic>``: give them
``"subject.name.strategy.type": "TOPIC"`` (the subject they fall back to on a 404), or a
request timeout (their client has none by default), or they may wait forever.

Authentication. With ``oidc`` (:class:`RegistryOidc`) the registry validates bearer tokens
as Apicurio Registry 3 does in production: Quarkus OIDC as a ``service`` application
(``quarkus.oidc.tenant-enabled``), the signing keys from the identity provider's JWKS,
discovery off (a test IdP need not serve ``.well-known/openid-configuration``), ``iss`` and
``aud`` checked when given. With ``basic_client_credentials`` it also takes HTTP basic auth
as a client id and secret, which it trades at the token endpoint for a token (Apicurio's
``apicurio.authn.basic-client-credentials``). Every API call then needs credentials, so a
started registry is one whose anonymous ``GET /subjects`` answers 401: a 200 there means
authentication is off, and the start fails saying so.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import ssl
import subprocess
import tarfile
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio
import anyio.to_thread

from aiokafka_ng.testing._kafka_config import HOST, make_tls_files
from aiokafka_ng.testing._kafka_procs import die_with_parent, free_ports, last_error

__all__ = [
    "APICURIO_VERSION",
    "RegistryOidc",
    "SchemaRegistry",
    "SchemaRegistryProcessError",
    "ensure_distribution",
    "find_java21",
    "missing_tools",
]

#: The Apicurio Registry release :class:`SchemaRegistry` runs.
APICURIO_VERSION: Final = "3.3.3"
_ARTIFACT: Final = "io.apicurio:apicurio-registry-app:{version}:tar.gz:all"
HOME_ENV_VAR: Final = "AIOKAFKA_NG_REGISTRY_HOME"
JAVA_ENV_VAR: Final = "AIOKAFKA_NG_REGISTRY_JAVA"
_KAFKA_JAVA_ENV_VAR: Final = "AIOKAFKA_NG_JAVA"
_JVM_DIR: Final = Path("/usr/lib/jvm")
#: The oldest Java the distribution runs on (its classes are version 65).
MIN_JAVA: Final = 21
#: The Confluent-compatible API's path on the registry.
CCOMPAT_PATH: Final = "/apis/ccompat/v7"

_FETCH_TIMEOUT: Final = 900.0
_POLL_INTERVAL: Final = 0.1
_LOG_TAIL_LINES: Final = 40
# One small JVM beside the tests on a 2-core machine: SerialGC needs no GC threads and C1
# alone starts fastest; a test registry holds a few hundred schemas at most.
_JVM_OPTIONS: Final = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
)


class SchemaRegistryProcessError(RuntimeError):
    """The registry could not be fetched, started or stopped; the first line says why.

    ``reason`` is that line and ``log_tail`` the last lines of the registry's log, if any.
    """

    def __init__(self, reason: str, log_tail: str = "") -> None:
        self.reason = reason
        self.log_tail = log_tail
        super().__init__(f"{reason}\n{log_tail}" if log_tail else reason)


@dataclass(frozen=True, slots=True)
class RegistryOidc:
    """How :class:`SchemaRegistry` authenticates its callers: OIDC bearer tokens.

    Args:
        jwks_url: the identity provider's JWK Set, whose keys sign the tokens.
        token_url: its token endpoint (used for ``basic_client_credentials``).
        issuer: the ``iss`` tokens must carry; None: not checked.
        audience: an ``aud`` tokens must carry; None: not checked.
        basic_client_credentials: also accept HTTP basic auth as ``client_id:secret``,
            which the registry exchanges at ``token_url`` (client credentials grant).
        client_id: the registry's own OIDC client id (Quarkus's ``quarkus.oidc.client-id``).
    """

    jwks_url: str
    token_url: str
    issuer: str | None = None
    audience: str | None = None
    basic_client_credentials: bool = False
    client_id: str = "registry-api"

    def java_options(self) -> list[str]:
        """The ``-D`` options that turn authentication on (Apicurio Registry 3.3 names)."""
        options = [
            "-Dquarkus.oidc.tenant-enabled=true",
            "-Dquarkus.oidc.application-type=service",
            f"-Dquarkus.oidc.client-id={self.client_id}",
            # Quarkus needs a server URL even with discovery off; the paths below are
            # absolute, so it is used for nothing else.
            f"-Dquarkus.oidc.auth-server-url={self.token_url.rsplit('/', 1)[0]}",
            "-Dquarkus.oidc.discovery-enabled=false",
            f"-Dquarkus.oidc.jwks-path={self.jwks_url}",
            f"-Dquarkus.oidc.token-path={self.token_url}",
            "-Dapicurio.authn.basic-client-credentials.enabled="
            + str(self.basic_client_credentials).lower(),
        ]
        if self.issuer is not None:
            options.append(f"-Dquarkus.oidc.token.issuer={self.issuer}")
        if self.audience is not None:
            options.append(f"-Dquarkus.oidc.token.audience={self.audience}")
        return options


# -- Java and the distribution -----------------------------------------------------------------


def java_major(java: str) -> int | None:
    """The major version of the ``java`` executable, from its JDK's ``release`` file, or by
    running ``java -version`` when there is none; None if neither tells."""
    home = Path(os.path.realpath(java)).parent.parent
    with contextlib.suppress(OSError):
        match = re.search(r'JAVA_VERSION="(\d+)', (home / "release").read_text())
        if match:
            return int(match.group(1))
    try:
        result = subprocess.run(
            [java, "-version"], capture_output=True, text=True, timeout=30, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    match = re.search(r'version "(\d+)', result.stderr)
    return int(match.group(1)) if match else None


def _java_candidates(env: Mapping[str, str], jvm_dir: Path) -> list[str]:
    candidates = [
        env.get(JAVA_ENV_VAR),
        env.get(_KAFKA_JAVA_ENV_VAR),
        str(Path(env["JAVA_HOME"]) / "bin" / "java") if env.get("JAVA_HOME") else None,
        shutil.which("java", path=env.get("PATH")),
    ]
    with contextlib.suppress(OSError):
        candidates += sorted((str(jdk / "bin" / "java") for jdk in jvm_dir.iterdir()), reverse=True)
    return [c for c in candidates if c and os.access(c, os.X_OK)]


def find_java21(env: Mapping[str, str] | None = None, *, jvm_dir: Path = _JVM_DIR) -> str:
    """The first Java 21+ of: ``AIOKAFKA_NG_REGISTRY_JAVA``, ``AIOKAFKA_NG_JAVA``,
    ``$JAVA_HOME/bin/java``, the ``PATH``'s ``java``, the JDKs under ``jvm_dir``."""
    env = os.environ if env is None else env
    seen: list[str] = []
    for candidate in _java_candidates(env, jvm_dir):
        major = java_major(candidate)
        if major is not None and major >= MIN_JAVA:
            return candidate
        seen.append(f"{candidate} ({major or 'unknown version'})")
    found = "; found only " + ", ".join(seen) if seen else "; no Java found at all"
    raise SchemaRegistryProcessError(
        f"no Java {MIN_JAVA}+ for Apicurio Registry {APICURIO_VERSION}{found} "
        f"(install a JDK {MIN_JAVA}+, or set {JAVA_ENV_VAR} to its bin/java)"
    )


def registry_home(env: Mapping[str, str] | None = None) -> Path:
    """Where the unpacked distribution lives (``dist/`` inside it)."""
    env = os.environ if env is None else env
    if env.get(HOME_ENV_VAR):
        return Path(env[HOME_ENV_VAR])
    cache = Path(env.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return cache / "aiokafka_ng" / f"apicurio-registry-{APICURIO_VERSION}"


def distribution_present(env: Mapping[str, str] | None = None) -> bool:
    return (registry_home(env) / "dist" / "quarkus-run.jar").is_file()


def missing_tools(env: Mapping[str, str] | None = None, *, jvm_dir: Path = _JVM_DIR) -> str | None:
    """Why a registry cannot be started here, in one line, or None if it can."""
    env = os.environ if env is None else env
    try:
        find_java21(env, jvm_dir=jvm_dir)
    except SchemaRegistryProcessError as exc:
        return exc.reason
    if not distribution_present(env) and shutil.which("mvn", path=env.get("PATH")) is None:
        return (
            f"no Maven (mvn) to fetch Apicurio Registry {APICURIO_VERSION}, and it is not "
            f"cached in {registry_home(env)}"
        )
    return None


def ensure_distribution(env: Mapping[str, str] | None = None) -> Path:
    """The unpacked distribution's directory (``quarkus-run.jar`` in it), fetched first if
    it is not there yet."""
    env = os.environ if env is None else env
    home = registry_home(env)
    dist = home / "dist"
    if distribution_present(env):
        return dist
    mvn = shutil.which("mvn", path=env.get("PATH"))
    if mvn is None:
        raise SchemaRegistryProcessError(
            f"no Maven (mvn) to fetch Apicurio Registry {APICURIO_VERSION} into {dist}"
        )
    home.mkdir(parents=True, exist_ok=True)
    with open(home / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # another process may be fetching: wait for it
        if not distribution_present(env):
            _fetch(mvn, home)
    return dist


def _fetch(mvn: str, home: Path) -> None:
    partial = home / "dist.partial"
    download = home / "download"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.rmtree(download, ignore_errors=True)
    artifact = _ARTIFACT.format(version=APICURIO_VERSION)
    command = [
        mvn,
        "-q",
        "-B",
        "dependency:copy",
        f"-Dartifact={artifact}",
        f"-DoutputDirectory={download}",
    ]
    started = time.monotonic()
    try:
        result = subprocess.run(
            command,
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=_FETCH_TIMEOUT,
            check=False,
            cwd=home,  # no pom.xml there: dependency:copy needs no project
        )
    except subprocess.TimeoutExpired as exc:
        raise SchemaRegistryProcessError(
            f"fetching {artifact} with Maven took over {_FETCH_TIMEOUT:g} s"
        ) from exc
    archives = sorted(download.glob("*.tar.gz")) if download.is_dir() else []
    if result.returncode != 0 or not archives:
        lines = (result.stdout + result.stderr).strip().splitlines()
        errors = [line for line in lines if "ERROR" in line] or lines
        last = errors[0] if errors else f"exit code {result.returncode}, no archive"
        raise SchemaRegistryProcessError(f"Maven could not fetch {artifact}: {last}")
    try:
        with tarfile.open(archives[0]) as archive:
            archive.extractall(partial, filter="data")
    except (OSError, tarfile.TarError) as exc:
        raise SchemaRegistryProcessError(f"cannot unpack {archives[0]}: {exc}") from exc
    if not (partial / "quarkus-run.jar").is_file():
        raise SchemaRegistryProcessError(f"{archives[0]} holds no quarkus-run.jar")
    partial.rename(home / "dist")
    # Maven's local repository keeps its own copy; this one is not needed once unpacked.
    shutil.rmtree(download, ignore_errors=True)
    (home / "fetch-seconds").write_text(f"{time.monotonic() - started:.1f}\n")


# -- the running registry ----------------------------------------------------------------------


class SchemaRegistry:
    """Apicurio Registry on a free ``127.0.0.1`` port, its Confluent-compatible API at :attr:`url`.

    Use it as ``async with SchemaRegistry() as registry:`` (asyncio or trio) or ``with
    SchemaRegistry() as registry:``, or call :meth:`start_sync`/:meth:`stop_sync`. Needs Java
    21+ and, the first time, Maven (see the module docstring). The registry starts empty;
    its global compatibility level is Apicurio's default, ``NONE`` (Confluent's is
    ``BACKWARD``): set it per subject, or globally, through the client.

    Args:
        heap: the JVM's maximum heap (``-Xmx``).
        startup_timeout: seconds for the start, fetch excluded.
        stop_timeout: seconds a SIGTERM may take before SIGKILL.
        tls: also open an HTTPS listener (:attr:`tls_url`) whose certificate, for 127.0.0.1
            and localhost, is signed by :attr:`ca_file` (needs trustme).
        java_options: extra JVM options (``-Dname=value`` sets a registry property).
        oidc: make every call authenticate with a token of this identity provider (see
            :class:`RegistryOidc` and the module docstring); None: no authentication.
    """

    def __init__(
        self,
        *,
        heap: str = "256m",
        startup_timeout: float = 120.0,
        stop_timeout: float = 20.0,
        tls: bool = False,
        java_options: Sequence[str] = (),
        oidc: RegistryOidc | None = None,
    ) -> None:
        self.tls: Final = tls
        self.oidc: Final = oidc
        self.heap: Final = heap
        self.startup_timeout: Final = startup_timeout
        self.stop_timeout: Final = stop_timeout
        self.java_options: Final = tuple(java_options)
        self.java = ""
        self.port: int | None = None
        self.tls_port: int | None = None
        self._ca_file: Path | None = None
        #: seconds the last :meth:`start` took, fetch excluded.
        self.start_seconds: float | None = None
        self._proc: subprocess.Popen[bytes] | None = None
        self._directory: Path | None = None

    # -- state -------------------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """``http://127.0.0.1:PORT``: the registry's root (its own API is under ``/apis``)."""
        if self.port is None or not self.running:
            raise SchemaRegistryProcessError("the schema registry is not running")
        return f"http://{HOST}:{self.port}"

    @property
    def url(self) -> str:
        """The Confluent-compatible API's URL: what registry clients are given."""
        return self.base_url + CCOMPAT_PATH

    @property
    def tls_url(self) -> str:
        """The Confluent-compatible API over HTTPS (``tls=True``)."""
        if not self.tls:
            raise SchemaRegistryProcessError("no HTTPS listener: the registry runs with tls=False")
        self.base_url  # noqa: B018 (raises when not running)
        return f"https://{HOST}:{self.tls_port}{CCOMPAT_PATH}"

    @property
    def ca_file(self) -> Path:
        """The PEM certificate of the CA that signed the HTTPS listener's certificate."""
        if self._ca_file is None:
            raise SchemaRegistryProcessError("no CA: the registry is not running with tls=True")
        return self._ca_file

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts :attr:`ca_file` and checks the host name."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    @property
    def log_path(self) -> Path | None:
        return None if self._directory is None else self._directory / "registry.log"

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of the registry's log."""
        path = self.log_path
        try:
            text = b"" if path is None else path.read_bytes()[-256 * 1024 :]
        except OSError:
            return ""
        return "\n".join(text.decode(errors="replace").splitlines()[-lines:])

    def __repr__(self) -> str:
        where = f"{HOST}:{self.port}" if self.running else "stopped"
        return f"<SchemaRegistry Apicurio {APICURIO_VERSION} {where}>"

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the distribution if needed, start the registry, wait until it answers."""
        if self._proc is not None:
            raise SchemaRegistryProcessError("the schema registry is already started")
        self.java = find_java21()
        dist = await anyio.to_thread.run_sync(ensure_distribution)
        started = time.monotonic()
        for attempt in (1, 2):
            try:
                await self._start_once(dist)
                break
            except SchemaRegistryProcessError as exc:
                # The port was free when picked, bound by the JVM seconds later: another
                # process may have taken it in between. Once, take another port.
                if attempt == 2 or "Address already in use" not in exc.log_tail:
                    raise
        self.start_seconds = time.monotonic() - started

    async def _start_once(self, dist: Path) -> None:
        self._directory = Path(tempfile.mkdtemp(prefix="aiokafka-ng-registry-"))
        tls_options: list[str] = []
        if self.tls:
            try:
                files = make_tls_files(self._directory)
            except RuntimeError as exc:
                await self.stop()
                raise SchemaRegistryProcessError(str(exc)) from exc
            self._ca_file = files.ca_file
            # One PEM file holds the key and the chain; Quarkus reads each from it.
            tls_options = [
                f"-Dquarkus.http.ssl.certificate.files={files.keystore}",
                f"-Dquarkus.http.ssl.certificate.key-files={files.keystore}",
            ]
        self.port, self.tls_port = free_ports(2)
        if self.tls:
            tls_options.append(f"-Dquarkus.http.ssl-port={self.tls_port}")
        self._spawn(dist, tls_options)
        try:
            with anyio.fail_after(self.startup_timeout):
                while not await anyio.to_thread.run_sync(self._answers):
                    proc = self._proc
                    if proc is None or proc.poll() is not None:
                        code = None if proc is None else proc.returncode
                        tail = self.log_tail()
                        raise SchemaRegistryProcessError(
                            f"the schema registry exited with code {code}: {last_error(tail)}",
                            tail,
                        )
                    await anyio.sleep(_POLL_INTERVAL)
        except BaseException as exc:
            tail = self.log_tail()
            await self.stop()
            if isinstance(exc, TimeoutError):
                raise SchemaRegistryProcessError(
                    f"the schema registry did not answer within {self.startup_timeout:g} s: "
                    f"{last_error(tail)}",
                    tail,
                ) from None
            raise

    def _spawn(self, dist: Path, tls_options: Sequence[str]) -> None:
        command = [
            self.java,
            f"-Xmx{self.heap}",
            *_JVM_OPTIONS,
            f"-Dquarkus.http.host={HOST}",
            f"-Dquarkus.http.port={self.port}",
            # Left to its defaults the management interface listens on 0.0.0.0:9000.
            f"-Dquarkus.management.host={HOST}",
            "-Dquarkus.management.port=0",
            *tls_options,
            *(self.oidc.java_options() if self.oidc is not None else ()),
            *self.java_options,
            "-jar",
            str(dist / "quarkus-run.jar"),
        ]
        assert self.log_path is not None
        with open(self.log_path, "ab") as log:
            log.write(f"=== start {time.strftime('%H:%M:%S')}: {' '.join(command)}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    cwd=self._directory,
                    preexec_fn=die_with_parent,
                    # Its own process group: stop() signals every process the JVM started.
                    start_new_session=True,
                )
            except OSError as exc:
                raise SchemaRegistryProcessError(f"cannot run {self.java}: {exc}") from exc

    def _answers(self) -> bool:
        """``GET /subjects`` answers as it should: 200, or 401 when ``oidc`` asks for
        credentials (blocking; run in a worker thread)."""
        url = f"http://{HOST}:{self.port}{CCOMPAT_PATH}/subjects"
        try:
            with urllib.request.urlopen(url, timeout=2.0) as response:
                status = int(response.status)
        except urllib.error.HTTPError as exc:
            status = exc.code
        except (OSError, urllib.error.URLError, ValueError):
            return False
        if self.oidc is None:
            return status == 200
        if status == 200:
            raise SchemaRegistryProcessError(
                "the schema registry answered an anonymous call although oidc is set: "
                "its authentication is off (are the quarkus.oidc options overridden?)",
                self.log_tail(),
            )
        return status == 401

    async def stop(self) -> None:
        """Stop the registry (its process group) and remove its directory; no-op if stopped."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop_sync)

    def stop_sync(self) -> None:
        """Blocking :meth:`stop`."""
        proc, self._proc = self._proc, None
        if proc is not None:
            _signal_group(proc, signal.SIGTERM)
            try:
                proc.wait(timeout=self.stop_timeout)
            except subprocess.TimeoutExpired:
                pass
            finally:  # also on KeyboardInterrupt: never leave the JVM behind
                if proc.poll() is None:  # once reaped, its pid may be another's
                    _signal_group(proc, signal.SIGKILL)
                    proc.wait()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
        self._directory = None
        self._ca_file = None

    def start_sync(self) -> None:
        """Blocking :meth:`start`, for code outside an event loop (fixtures, the CLI)."""
        anyio.run(self.start)

    async def __aenter__(self) -> Self:
        await self.start()
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.stop()

    def __enter__(self) -> Self:
        self.start_sync()
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.stop_sync()


def _signal_group(proc: subprocess.Popen[bytes], signum: int) -> None:
    """``signum`` to ``proc``'s process group (its own: ``start_new_session``)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signum)
