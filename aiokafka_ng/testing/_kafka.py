"""KafkaCluster: a real Apache Kafka cluster (KRaft) on loopback, for tests and benchmarks.

Theory of operation
-------------------
Shape. ``brokers`` nodes, each a JVM in the combined ``broker,controller`` role with a
static quorum (``controller.quorum.voters``): the fewest JVMs for a cluster whose
replication factor is 3, and no separate controller to keep alive. Three voters tolerate one
node down, which is what the fault tests do (one node killed, stopped or paused at a time).

Start. The jars come from :func:`~aiokafka_ng.testing._kafka_jars.ensure_jars` (Maven, once,
into a shared cache); every node maps the JVM class archive beside them if ``aiokafka-ng
broker --kafka --fetch-only`` made one for this ``java`` (``_kafka_cds``). In a fresh
temporary directory: a CA and server certificate (trustme; Kafka reads the PEM keystore as
is), then per node a ``server.properties``, and storage
formatted by ``kafka.tools.StorageTool`` with one cluster id and the SCRAM users
(``--add-scram``), all nodes at once. Then every node is spawned, and the cluster is ready
when each node answers a Metadata request, over our own :func:`aiokafka_ng.net.connect`,
that lists every node: a broker is listed only once the controller has unfenced it. All of
it runs under one deadline (``startup_timeout``); a start that fails raises
:class:`KafkaClusterError` whose first line says why and whose rest is the last log lines.
Ports are picked free but bound by the JVMs seconds later, so a start that lost one to
another process in between is tried once more on new ports.

Addresses. By default every node listens on 127.0.0.1 (ports tell them apart). With
``addressable=True`` node N listens on 127.0.0.(N+1) alone, for clients, replication and the
controller quorum, so that a packet filter can cut one node's traffic by address
(:class:`~aiokafka_ng.testing.Nemesis`). An address tells where a packet goes, not where it
comes from: a socket that is not bound gets the source address of the route, 127.0.0.1 for all
of 127.0.0.0/8, and Kafka binds none of its outgoing connections. So, run as root, each node of
an addressable cluster also runs under a group of its own (:func:`node_gid`; the user stays
root, so it reads every file as before), and the filter tells senders apart by that group
(``-m owner --gid-owner``), which the kernel knows for every packet a local socket sends.

Processes. Each node is a :class:`subprocess.Popen` (not bound to an event loop, so a
cluster started by a sync fixture can be driven from asyncio or trio tests), spawned from
the calling thread with ``PR_SET_PDEATHSIG=SIGKILL`` so the JVMs die with the Python process
even when it is SIGKILLed; spawning from a worker thread would tie them to that thread's
life instead, so spawns stay on the caller's thread. stdout and stderr go to
``node-N/server.log``, appended across restarts. ``kill`` is SIGKILL, ``stop`` SIGTERM (a
controlled shutdown: leadership moves away first) then SIGKILL after ``stop_timeout``,
``pause``/``resume`` SIGSTOP/SIGCONT. Closing the cluster SIGKILLs what is left (nothing in
the temporary directory is worth a controlled shutdown) and deletes the directory.
"""

from __future__ import annotations

import os
import shutil
import signal
import ssl
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any, Final, Self

import anyio
import anyio.to_thread

from aiokafka_ng.testing._kafka_cds import archive_for
from aiokafka_ng.testing._kafka_config import (
    HOST,
    LOG4J2,
    NodePorts,
    check_users,
    make_tls_files,
    new_cluster_id,
    node_properties,
    scram_arguments,
)
from aiokafka_ng.testing._kafka_jars import KafkaSetupError, ensure_jars, find_java, missing_tools
from aiokafka_ng.testing._kafka_procs import (
    KafkaClusterError,
    bind_failed,
    child_setup,
    first_leaf,
    free_ports,
    last_error,
    listed_brokers,
    node_gid,
    port_clash,
    port_is_free,
)

__all__ = ["DEFAULT_USERS", "KafkaCluster", "KafkaClusterError", "KafkaNode"]

#: SASL users made at start, for PLAIN and both SCRAM mechanisms (``admin`` is a super user).
DEFAULT_USERS: Final[Mapping[str, str]] = {"admin": "admin-secret", "alice": "alice-secret"}

_POLL_INTERVAL: Final = 0.1
_LOG_TAIL_LINES: Final = 40
# Kept small: several JVMs share a 2-core machine with the tests. SerialGC starts fastest
# and needs no GC threads. The C1 compiler alone (no C2) nearly halves a node's start on a
# busy machine -- with both cores busy, a restart took 13.6 s with C2 and 7 s without (both with
# the class archive, _kafka_cds.py) -- at the cost of peak speed a test cluster does not
# need; ``java_options=["-XX:TieredStopAtLevel=4"]`` brings C2 back (the last one counts).
_JVM_OPTIONS: Final = (
    "-XX:+UseSerialGC",
    "-XX:TieredStopAtLevel=1",
    "-XX:+ExitOnOutOfMemoryError",
    "-Djava.awt.headless=true",
    "-Dnetworkaddress.cache.ttl=0",
)
# The format step is a short-lived JVM: the C1 compiler alone starts it fastest.
_TOOL_OPTIONS: Final = ("-Xmx256m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1")


class KafkaNode:
    """One node (broker and controller) of a :class:`KafkaCluster`."""

    def __init__(
        self,
        cluster: KafkaCluster,
        node_id: int,
        ports: NodePorts,
        directory: Path,
        host: str = HOST,
        gid: int | None = None,
    ):
        self._cluster = cluster
        self.node_id: Final = node_id
        #: The loopback address every listener of this node (the controller's too) is on.
        self.host: Final = host
        #: The group the node's JVM runs under (addressable clusters started as root), by
        #: which a packet filter tells this node's packets from others'; else None.
        self.gid: Final = gid
        self.ports: Final = ports
        self.directory: Final = directory
        self.log_path: Final = directory / "server.log"
        self.properties_path: Final = directory / "server.properties"
        self._proc: subprocess.Popen[bytes] | None = None
        self._paused = False

    # -- state -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        """The PLAINTEXT listener's port."""
        return self.ports.PLAINTEXT

    @property
    def bootstrap_servers(self) -> str:
        return f"{self.host}:{self.ports.PLAINTEXT}"

    def address(self, listener: str = "PLAINTEXT") -> str:
        """``host:port`` of one client listener: PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL."""
        return f"{self.host}:{self.ports.client(listener)}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def paused(self) -> bool:
        return self._paused and self.running

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self.running and self._proc is not None else None

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last ``lines`` lines of this node's log, over all its runs."""
        try:
            text = self.log_path.read_bytes()[-256 * 1024 :].decode(errors="replace")
        except OSError:
            return ""
        return "\n".join(text.splitlines()[-lines:])

    def __repr__(self) -> str:
        state = "paused" if self.paused else "running" if self.running else "stopped"
        return f"<KafkaNode {self.node_id} {self.bootstrap_servers} {state}>"

    # -- control -----------------------------------------------------------------------------

    def kill(self) -> None:
        """SIGKILL the node and reap it (no controlled shutdown); no-op if not running."""
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()
        self._paused = False

    def pause(self) -> None:
        """SIGSTOP: the process stays, its sockets stay open, nothing answers."""
        proc = self._require_running("pause")
        proc.send_signal(signal.SIGSTOP)
        self._paused = True

    def resume(self) -> None:
        """SIGCONT after :meth:`pause`."""
        proc = self._require_running("resume")
        proc.send_signal(signal.SIGCONT)
        self._paused = False

    async def stop(self) -> None:
        """Controlled shutdown (SIGTERM) and wait; SIGKILL after the cluster's ``stop_timeout``."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._terminate, self._cluster.stop_timeout)

    async def start(self) -> None:
        """Start a stopped node and wait until it is back in the cluster's metadata."""
        if self.running:
            raise KafkaClusterError(f"node {self.node_id} is already running")
        self._check_ports_free()
        self._spawn()
        try:
            with anyio.fail_after(self._cluster.startup_timeout):
                await self._wait_listed({self.node_id})
        except TimeoutError:
            self.kill()
            raise KafkaClusterError(
                f"node {self.node_id} did not rejoin within {self._cluster.startup_timeout:g} s",
                self.log_tail(),
            ) from None
        except BaseException:
            self.kill()
            raise

    async def restart(self) -> None:
        """:meth:`stop` (if running) then :meth:`start`."""
        await self.stop()
        await self.start()

    # -- internals ---------------------------------------------------------------------------

    def _require_running(self, what: str) -> subprocess.Popen[bytes]:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            raise KafkaClusterError(f"cannot {what} node {self.node_id}: it is not running")
        return proc

    def _check_ports_free(self) -> None:
        for port in self.ports.all():
            if not port_is_free(port, self.host):
                raise KafkaClusterError(f"port {port} of node {self.node_id} is taken")

    def _spawn(self) -> None:
        command = [
            self._cluster.java,
            f"-Xmx{self._cluster.heap}",
            f"-Xms{self._cluster.heap}",
            *_JVM_OPTIONS,
            *self._cluster.class_archive_options,
            *self._cluster.java_options,
            f"-Dlog4j2.configurationFile={self._cluster.directory / 'log4j2.properties'}",
            "-cp",
            os.pathsep.join([f"{self._cluster.libs}/*", *self._cluster.extra_classpath]),
            "kafka.Kafka",
            str(self.properties_path),
        ]
        with open(self.log_path, "ab") as log:
            log.write(f"=== start {time.strftime('%H:%M:%S')}: {' '.join(command)}\n".encode())
            log.flush()
            try:
                self._proc = subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=child_setup(self.gid),
                )
            except OSError as exc:
                raise KafkaClusterError(f"cannot run {command[0]}: {exc}") from exc
        self._paused = False

    def _terminate(self, timeout: float) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        if self._paused:
            proc.send_signal(signal.SIGCONT)  # a stopped process cannot act on SIGTERM
            self._paused = False
        proc.terminate()
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        finally:  # also on KeyboardInterrupt: never leave the JVM behind
            if proc.poll() is None:
                proc.kill()
                proc.wait()

    def _exit_problem(self) -> str | None:
        proc = self._proc
        code = None if proc is None else proc.poll()
        if proc is None or code is not None:
            return f"node {self.node_id} exited with code {code}: {last_error(self.log_tail())}"
        return None

    async def _wait_listed(self, node_ids: set[int]) -> None:
        """Until this node answers Metadata listing every one of ``node_ids``."""
        while True:
            problem = self._exit_problem()
            if problem is not None:
                raise KafkaClusterError(problem, self.log_tail())
            if node_ids <= await listed_brokers(self.ports.PLAINTEXT, self.host):
                return
            await anyio.sleep(_POLL_INTERVAL)


class KafkaCluster:
    """Apache Kafka in KRaft mode: ``brokers`` nodes on free loopback ports.

    Use it as ``async with KafkaCluster(brokers=3) as cluster:`` (asyncio or trio), or call
    :meth:`start_sync`/:meth:`stop_sync` outside an event loop. Listeners: PLAINTEXT
    (:attr:`bootstrap_servers`), SASL_PLAINTEXT with PLAIN, SCRAM-SHA-256 and SCRAM-SHA-512
    for every user in ``users``, and, with ``tls=True``, SSL and SASL_SSL with a certificate
    for the nodes' addresses and localhost signed by :attr:`ca_file`. See :meth:`bootstrap_for`.

    Args:
        brokers: number of nodes (each broker and controller; 3 allows replication factor 3).
        users: SASL ``name -> password``; created for PLAIN and both SCRAM mechanisms.
        tls: also open the SSL and SASL_SSL listeners (needs trustme).
        broker_properties: extra ``server.properties`` entries for every node.
        heap: the JVM heap of each node (``-Xmx`` and ``-Xms``).
        startup_timeout: seconds for the whole start (after the jars are there) and for a
            node's restart.
        stop_timeout: seconds a controlled shutdown may take before SIGKILL.
        java_options: extra JVM options for every node.
        extra_classpath: directories or jars put on every node's class path after Kafka's
            own (a broker plugin: a metrics reporter, an authorizer).
        addressable: node N on 127.0.0.(N+1) instead of every node on 127.0.0.1, and, when
            run as root, under a group of its own (:attr:`KafkaNode.gid`): what
            :class:`~aiokafka_ng.testing.Nemesis` needs to cut and slow nodes' links.
    """

    def __init__(
        self,
        brokers: int = 3,
        *,
        users: Mapping[str, str] | None = None,
        tls: bool = True,
        broker_properties: Mapping[str, str] | None = None,
        heap: str = "384m",
        startup_timeout: float = 120.0,
        stop_timeout: float = 60.0,
        java_options: Sequence[str] = (),
        extra_classpath: Sequence[str | Path] = (),
        addressable: bool = False,
    ) -> None:
        if brokers < 1:
            raise ValueError(f"brokers must be >= 1, got {brokers}")
        self.users: Final[Mapping[str, str]] = dict(DEFAULT_USERS if users is None else users)
        check_users(self.users)
        self.broker_count: Final = brokers
        self.tls: Final = tls
        self.broker_properties: Final = dict(broker_properties or {})
        self.heap: Final = heap
        self.startup_timeout: Final = startup_timeout
        self.stop_timeout: Final = stop_timeout
        self.java_options: Final = tuple(java_options)
        self.extra_classpath: Final = tuple(str(p) for p in extra_classpath)
        self.addressable: Final = addressable
        #: Every node's address, in node id order.
        self.hosts: Final = tuple(
            f"127.0.0.{i + 2}" if addressable else HOST for i in range(brokers)
        )
        self.cluster_id: Final = new_cluster_id()
        self.brokers: list[KafkaNode] = []
        self.java = ""
        self.libs = Path()
        #: ``-XX:SharedArchiveFile=...`` when this java's class archive exists (_kafka_cds).
        self.class_archive_options: tuple[str, ...] = ()
        self._directory: Path | None = None
        self._ca_file: Path | None = None
        #: seconds the last :meth:`start` took, jars fetch excluded.
        self.start_seconds: float | None = None
        self._bind_failed = False

    @staticmethod
    def unavailable() -> str | None:
        """Why no cluster can start here (no Java 17+, or no Maven and no cached jars), in
        one line; None when one can."""
        return missing_tools()

    # -- state -------------------------------------------------------------------------------

    @property
    def directory(self) -> Path:
        if self._directory is None:
            raise KafkaClusterError("the cluster is not started")
        return self._directory

    @property
    def bootstrap_servers(self) -> str:
        """The PLAINTEXT listeners of every node, comma-separated."""
        return self.bootstrap_for("PLAINTEXT")

    def bootstrap_for(self, listener: str) -> str:
        """Every node's ``listener`` (PLAINTEXT, SASL_PLAINTEXT, SSL, SASL_SSL) address."""
        if "SSL" in listener and not self.tls:
            raise KafkaClusterError(f"no {listener} listener: the cluster runs with tls=False")
        return ",".join(node.address(listener) for node in self.brokers)

    @property
    def ca_file(self) -> Path:
        """The PEM certificate of the CA that signed the brokers' certificate."""
        if self._ca_file is None:
            raise KafkaClusterError("no CA: the cluster is not started or runs with tls=False")
        return self._ca_file

    def ssl_context(self) -> ssl.SSLContext:
        """A client context that trusts the cluster's CA and checks the host name."""
        return ssl.create_default_context(cafile=str(self.ca_file))

    def node(self, node_id: int) -> KafkaNode:
        for node in self.brokers:
            if node.node_id == node_id:
                return node
        raise KeyError(node_id)

    def log_tail(self, lines: int = _LOG_TAIL_LINES) -> str:
        """The last lines of every node's log, each under a ``--- node N`` header."""
        return "\n".join(f"--- node {n.node_id}\n{n.log_tail(lines)}" for n in self.brokers)

    def __repr__(self) -> str:
        return f"<KafkaCluster {self.cluster_id} {self.brokers!r}>"

    # -- lifecycle ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Fetch the jars if needed, then start every node and wait until all are listed."""
        if self._directory is not None:
            raise KafkaClusterError("the cluster is already started")
        try:
            self.java = find_java()
            self.libs = await anyio.to_thread.run_sync(ensure_jars)
        except KafkaSetupError as exc:
            raise KafkaClusterError(str(exc)) from exc
        archive = archive_for(self.java, self.libs.parent)
        self.class_archive_options = (
            (f"-XX:SharedArchiveFile={archive}",) if archive.is_file() else ()
        )
        started = time.monotonic()
        for attempt in (1, 2):
            try:
                await self._start_once()
                break
            except KafkaClusterError as exc:
                # Free ports are picked, then bound by the JVMs seconds later: another
                # process may take one in between. Once, pick new ports and start again.
                if attempt == 2 or not (self._bind_failed or port_clash(exc)):
                    raise
        self.start_seconds = time.monotonic() - started

    async def _start_once(self) -> None:
        """Prepare, format and start every node in a fresh directory, or clean up and raise."""
        self._directory = Path(tempfile.mkdtemp(prefix="aiokafka-ng-kafka-"))
        self._bind_failed = False
        try:
            with anyio.fail_after(self.startup_timeout):
                await anyio.to_thread.run_sync(self._prepare)
                await self._format()
                for node in self.brokers:
                    node._check_ports_free()
                for node in self.brokers:
                    node._spawn()
                all_ids = {node.node_id for node in self.brokers}
                async with anyio.create_task_group() as tg:
                    for node in self.brokers:
                        tg.start_soon(node._wait_listed, all_ids)
        except BaseException as exc:
            tail = self.log_tail()
            # Read before the directory goes: a bind failure's line sits above a stack trace
            # and the shutdown lines, often out of the tail.
            self._bind_failed = any(bind_failed(node.log_path) for node in self.brokers)
            await self.stop()
            if isinstance(exc, TimeoutError):
                raise KafkaClusterError(
                    f"the Kafka cluster did not start within {self.startup_timeout:g} s: "
                    f"{last_error(tail)}",
                    tail,
                ) from None
            if isinstance(exc, BaseExceptionGroup):
                first = first_leaf(exc)
                if isinstance(first, KafkaClusterError):
                    raise KafkaClusterError(first.reason, tail) from None
            raise

    async def stop(self) -> None:
        """SIGKILL every node and delete the cluster's directory; no-op if not started."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self.stop_sync)

    def start_sync(self) -> None:
        """Blocking :meth:`start`, for code outside an event loop (fixtures, the CLI)."""
        anyio.run(self.start)

    def stop_sync(self) -> None:
        """Blocking :meth:`stop`."""
        for node in self.brokers:
            node.kill()
        if self._directory is not None:
            shutil.rmtree(self._directory, ignore_errors=True)
        self._directory = None
        self._ca_file = None

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

    # -- internals ---------------------------------------------------------------------------

    def _prepare(self) -> None:
        """Write every file of the cluster: TLS material, log4j2 config, node properties."""
        directory = self.directory
        keystore = None
        if self.tls:
            try:
                tls = make_tls_files(directory, tuple(dict.fromkeys(self.hosts)))
            except RuntimeError as exc:
                raise KafkaClusterError(str(exc)) from exc
            keystore, self._ca_file = tls.keystore, tls.ca_file
        (directory / "log4j2.properties").write_text(LOG4J2)
        count = 5 * self.broker_count
        all_ports = free_ports(count, self.hosts) if self.addressable else free_ports(count)
        ports = [NodePorts(*all_ports[i * 5 : i * 5 + 5]) for i in range(self.broker_count)]
        voters = ",".join(f"{i + 1}@{self.hosts[i]}:{p.CONTROLLER}" for i, p in enumerate(ports))
        # A group per node only where the process may take one (root): without it the
        # cluster still runs on its addresses, and the nemesis says what it lacks.
        gids = self.addressable and os.geteuid() == 0
        token_secret = new_cluster_id()
        self.brokers = []
        for index, node_ports in enumerate(ports):
            node_id = index + 1
            node_dir = directory / f"node-{node_id}"
            node_dir.mkdir()
            node = KafkaNode(
                self,
                node_id,
                node_ports,
                node_dir,
                host=self.hosts[index],
                gid=node_gid(node_ports.CONTROLLER) if gids else None,
            )
            node.properties_path.write_text(
                node_properties(
                    node_id=node_id,
                    ports=node_ports,
                    voters=voters,
                    host=node.host,
                    data_dir=node_dir / "data",
                    keystore=keystore,
                    users=self.users,
                    brokers=self.broker_count,
                    token_secret=token_secret,
                    extra=self.broker_properties,
                )
            )
            self.brokers.append(node)

    async def _format(self) -> None:
        """Format every node's storage at once (one short JVM each)."""
        procs: list[tuple[KafkaNode, subprocess.Popen[bytes]]] = []
        try:
            procs.extend((node, self._spawn_format(node)) for node in self.brokers)
            for node, proc in procs:
                await anyio.to_thread.run_sync(proc.wait)
                if proc.returncode != 0:
                    raise KafkaClusterError(
                        f"formatting node {node.node_id}'s storage failed "
                        f"(exit code {proc.returncode}): {last_error(node.log_tail())}",
                        node.log_tail(),
                    )
        finally:
            for _, proc in procs:
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()

    def _spawn_format(self, node: KafkaNode) -> subprocess.Popen[bytes]:
        command = [
            self.java,
            *_TOOL_OPTIONS,
            f"-Dlog4j2.configurationFile={self.directory / 'log4j2.properties'}",
            "-cp",
            f"{self.libs}/*",
            "kafka.tools.StorageTool",
            "format",
            "--cluster-id",
            self.cluster_id,
            "--config",
            str(node.properties_path),
            *scram_arguments(self.users),
        ]
        with open(node.log_path, "ab") as log:
            try:
                return subprocess.Popen(
                    command,
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=child_setup(None),
                )
            except OSError as exc:
                raise KafkaClusterError(f"cannot run {self.java}: {exc}") from exc
