"""Shared pieces of the ``aiokafka-ng`` command: errors, broker probing, output helpers.

Errors reach the user as one line on stderr, never as a traceback: a subcommand raises
:class:`CliError` for what it detects itself, and :func:`aiokafka_ng.cli.main` turns
``KafkaError`` (and exception groups holding one) into the same one-line form.
"""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import anyio
import anyio.abc

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"
#: Where -b comes from when not given (first set wins), before --command-config's
#: bootstrap.servers and the default.
BOOTSTRAP_ENV = ("AIOKAFKA_NG_BOOTSTRAP_SERVERS", "KAFKA_BOOTSTRAP_SERVERS")

#: Exit codes: 0 success, 1 runtime failure (broker unreachable, Kafka error, records
#: failed or missing), 2 bad usage (argparse's own code, invalid values, checks the CLI
#: makes itself), 130 interrupted by Ctrl-C (SIGINT), 143 stopped by SIGTERM: the shell's
#: 128 + signal number, also when the command stopped cleanly (a consumer group committed
#: and left), so a script can tell an interrupted run from a finished one.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_TERMINATED = 143


def exit_code_for_signal(signum: int) -> int:
    """The exit code of a command that a signal stopped (see the table above)."""
    import signal

    return EXIT_TERMINATED if signum == signal.SIGTERM else EXIT_INTERRUPTED


class CliError(Exception):
    """A failure the CLI reports as one line on stderr, then exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-b",
        "--bootstrap-servers",
        default=None,
        help=(
            f"comma-separated host:port list (default: ${BOOTSTRAP_ENV[0]}, "
            f"${BOOTSTRAP_ENV[1]}, --command-config's bootstrap.servers, {DEFAULT_BOOTSTRAP})"
        ),
    )
    parser.add_argument(
        "--command-config",
        metavar="FILE",
        default=None,
        help=(
            "Java properties file with client settings, as Kafka's own tools take: "
            "security.protocol, sasl.*, sasl.jaas.config, ssl.* (PEM), any client setting"
        ),
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to try reaching the broker before giving up (default: 10)",
    )


def resolve_connection(args: argparse.Namespace) -> None:
    """Settle ``args.bootstrap_servers`` (-b, environment, command config, default) and load
    ``args.command_config``: its security properties translated once (a bad JAAS line or
    store is a usage error before anything connects) into ``args.ssl_context``, the rest in
    ``args.client_properties``."""
    import os

    props: dict[str, Any] = {}
    ssl_context = None
    if getattr(args, "command_config", None):
        from aiokafka_ng.errors import ConfigError
        from aiokafka_ng.properties import load_properties, translate_security

        try:
            props, ssl_context = translate_security(load_properties(args.command_config))
            _check_keys(props)
        except ConfigError as exc:
            raise CliError(f"--command-config: {exc}", EXIT_USAGE) from None
    servers = args.bootstrap_servers
    for name in BOOTSTRAP_ENV:
        servers = servers or os.environ.get(name) or None
    servers = servers or props.get("bootstrap.servers") or DEFAULT_BOOTSTRAP
    props.pop("bootstrap.servers", None)
    parse_servers(servers)
    args.bootstrap_servers = servers
    args.client_properties = props
    args.ssl_context = ssl_context


def parse_servers(servers: str) -> list[tuple[str, int]]:
    """The bootstrap list as (host, port) pairs, by the clients' own parser; a bad one is a
    usage error naming the entry."""
    from aiokafka_ng.cluster.config import parse_bootstrap_servers
    from aiokafka_ng.errors import ConfigError

    try:
        return parse_bootstrap_servers(servers)
    except ConfigError as exc:
        problem = exc.errors["bootstrap_servers"]
        raise CliError(f"bad bootstrap servers: {problem}", EXIT_USAGE) from None


def _check_keys(props: dict[str, Any]) -> None:
    """Before anything connects: every key must mean something to some client."""
    from aiokafka_ng.admin import AdminConfig
    from aiokafka_ng.config import ProducerConfig, unknown_key_problem
    from aiokafka_ng.consumer import ConsumerConfig
    from aiokafka_ng.errors import ConfigError

    classes = (ProducerConfig, ConsumerConfig, AdminConfig)
    unknown = {
        key: unknown_key_problem(key, *classes, dotted="." in key)
        for key in props
        if all(cls.field_for(key) is None for cls in classes)
    }
    if unknown:
        raise ConfigError(unknown)


def client_settings(args: argparse.Namespace, config_cls: Any, **settings: Any) -> dict[str, Any]:
    """Keyword settings for a client: the command config's properties (by field name, the
    SSL context as translated), then the command's own ``settings``, validated together."""
    from aiokafka_ng.config import unknown_key_problem
    from aiokafka_ng.errors import ConfigError

    props: dict[str, Any] = getattr(args, "client_properties", None) or {}
    try:
        unknown = {
            k: unknown_key_problem(k, config_cls, dotted="." in k)
            for k in props
            if not config_cls.field_for(k)
        }
        if unknown:
            raise ConfigError(unknown)
        merged = {config_cls.field_for(k): v for k, v in props.items()}
        if getattr(args, "ssl_context", None) is not None:
            merged["ssl_context"] = args.ssl_context
        merged["bootstrap_servers"] = args.bootstrap_servers
        merged.update(settings)
        config = config_cls(**merged)  # the command's own settings must agree with the file's
    except ConfigError as exc:
        raise CliError(f"--command-config: {exc}", EXIT_USAGE) from None
    # The validated values: the password as a secret type, not the file's plain text.
    return {k: getattr(config, k) for k in config.model_fields_set}


#: How long every bootstrap server may refuse connections before the CLI gives up: a broker
#: that is starting binds its port within moments, and a port nothing listens on is
#: usually a typo or a stopped broker, which the full --connect-timeout would not fix.
REFUSED_GRACE_S = 1.0
#: The longest pause between two rounds of dials while probing.
_PROBE_BACKOFF_MAX_MS = 250


async def probe(bootstrap_servers: str, wait_s: float) -> None:
    """Fail fast with one clear line when no bootstrap server accepts a TCP connection.

    The clients themselves keep retrying bootstrap for up to 30 s (as they should inside an
    application); a command-line user wants to hear at once that nothing is listening: a
    refusing port fails after :data:`REFUSED_GRACE_S`, a silent or unreachable host after
    ``wait_s``.
    """
    import socket

    from aiokafka_ng.cluster import describe_servers
    from aiokafka_ng.net.backoff import ExponentialBackoff, RetryState

    servers = parse_servers(bootstrap_servers)
    start = anyio.current_time()
    deadline = start + wait_s
    # Dials paced as the clients pace theirs (the reconnect policy, KIP-144: 50 ms, then
    # doubling), capped at a quarter second so a broker that comes up is noticed soon.
    pacing = RetryState(ExponentialBackoff.reconnect(50, _PROBE_BACKOFF_MAX_MS), deadline=deadline)
    while True:
        unresolved: dict[str, str] = {}
        refused = 0
        for host, port in servers:
            try:
                with anyio.fail_after(max(0.1, min(2.0, deadline - anyio.current_time()))):
                    stream = await anyio.connect_tcp(host, port)
            except socket.gaierror as exc:
                unresolved[host] = exc.strerror or str(exc)
                continue
            except (OSError, TimeoutError) as exc:
                refused += _refused(exc)
                continue
            await stream.aclose()
            return
        if len(unresolved) == len({host for host, _ in servers}):
            # No name resolves: a typo or a missing DNS entry, which waiting will not fix and
            # which "cannot reach" would misname as a broker that is down.
            host, reason = next(iter(unresolved.items()))
            more = f" (and {len(unresolved) - 1} more)" if len(unresolved) > 1 else ""
            raise CliError(f"cannot resolve host {host!r}{more}: {reason}")
        now = anyio.current_time()
        if refused == len(servers) and now - start >= min(REFUSED_GRACE_S, wait_s):
            raise CliError(
                f"cannot reach a Kafka broker at {describe_servers(servers)}: connection "
                "refused (nothing listens there: is the broker running, is the port right?)"
            )
        if now >= deadline:
            raise CliError(f"cannot reach a Kafka broker at {describe_servers(servers)}")
        pacing.failed(now=now)
        await pacing.pause(limit=pacing.remaining(now=now))


def _refused(exc: BaseException) -> bool:
    """Whether every address tried refused the connection (anyio chains what each one
    answered under its "All connection attempts failed")."""
    cause = exc.__cause__
    if cause is None:
        return isinstance(exc, ConnectionRefusedError)
    if isinstance(cause, BaseExceptionGroup):
        return all(_refused(inner) for inner in cause.exceptions)
    return _refused(cause)


async def cancel_on_signal(
    scope: anyio.CancelScope,
    received: list[int],
    *,
    task_status: anyio.abc.TaskStatus[None] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Ctrl-C (or SIGTERM) is how an open-ended ``consume`` or ``produce`` normally ends: it
    cancels ``scope`` (the reading loop), and the command then leaves its client block as
    usual -- a group commits what was printed and leaves, a producer delivers what it took
    -- and says what was done. The signal goes to ``received`` for the exit code. Only the
    first signal is caught: a second one interrupts at once."""
    import signal

    with anyio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        task_status.started()
        async for signum in signals:
            received.append(signum)
            scope.cancel()
            return


def parse_key_values(items: Sequence[str] | None, what: str) -> dict[str, str]:
    """``["a=1", "b=2"]`` -> ``{"a": "1", "b": "2"}``; a missing ``=`` is a usage error."""
    out: dict[str, str] = {}
    for item in items or ():
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise CliError(f"bad {what} {item!r}: expected KEY=VALUE", EXIT_USAGE)
        out[key] = value
    return out


def stderr_console() -> Console:
    from rich.console import Console

    return Console(stderr=True, highlight=False)


def stdout_console() -> Console:
    from rich.console import Console

    return Console(highlight=False)


def progress_bar(console: Console, *, enabled: bool) -> Progress:
    """A rich progress bar on ``console``; ``enabled=False`` draws nothing."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TaskProgressColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TaskProgressColumn(),
        TimeElapsedColumn(),
        console=console,
        disable=not enabled,
        transient=False,
    )


def percentile(sorted_values: Sequence[float], q: float) -> float:
    """The ``q`` quantile (0..1) of already sorted values, nearest-rank; NaN when empty."""
    if not sorted_values:
        return math.nan
    rank = max(1, math.ceil(q * len(sorted_values)))
    return sorted_values[rank - 1]


def first_line(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()
    return text[0] if text else type(exc).__name__


def run(func: Any, *args: Any, backend: str) -> Any:
    """``anyio.run`` on the chosen backend (the CLI's ``--backend``)."""
    return anyio.run(func, *args, backend=backend)


def isatty_stderr() -> bool:
    return sys.stderr.isatty()
