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

if TYPE_CHECKING:
    from rich.console import Console
    from rich.progress import Progress

DEFAULT_BOOTSTRAP = "127.0.0.1:9092"

#: Exit codes: 0 success, 1 runtime failure (broker unreachable, Kafka error, records
#: failed or missing), 2 bad usage (argparse's own code), 130 interrupted by Ctrl-C.
EXIT_OK = 0
EXIT_FAILURE = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130


class CliError(Exception):
    """A failure the CLI reports as one line on stderr, then exits with ``exit_code``."""

    def __init__(self, message: str, exit_code: int = EXIT_FAILURE) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def add_connection_args(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-b",
        "--bootstrap-servers",
        default=DEFAULT_BOOTSTRAP,
        help=f"comma-separated host:port list (default: {DEFAULT_BOOTSTRAP})",
    )
    parser.add_argument(
        "--connect-timeout",
        type=float,
        default=10.0,
        metavar="SECONDS",
        help="how long to try reaching the broker before giving up (default: 10)",
    )


async def probe(bootstrap_servers: str, wait_s: float) -> None:
    """Fail fast with one clear line when no bootstrap server accepts a TCP connection.

    The clients themselves keep retrying bootstrap for up to 30 s (as they should inside an
    application); a command-line user wants to hear at once that nothing is listening.
    """
    from aiokafka_ng.config import parse_bootstrap_servers

    try:
        servers = parse_bootstrap_servers(bootstrap_servers)
    except ValueError as exc:
        raise CliError(f"bad --bootstrap-servers {bootstrap_servers!r}: {exc}") from None
    deadline = anyio.current_time() + wait_s
    while True:
        for host, port in servers:
            try:
                with anyio.fail_after(max(0.1, min(2.0, deadline - anyio.current_time()))):
                    stream = await anyio.connect_tcp(host, port)
            except (OSError, TimeoutError):
                continue
            await stream.aclose()
            return
        if anyio.current_time() >= deadline:
            raise CliError(f"cannot reach a Kafka broker at {bootstrap_servers}")
        await anyio.sleep(min(0.25, max(0.0, deadline - anyio.current_time())))


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
