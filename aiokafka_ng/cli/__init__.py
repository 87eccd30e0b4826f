"""The ``aiokafka-ng`` command: a local broker, topics, produce, consume, bench, demo.

``aiokafka-ng demo`` is the one-line first run: it starts an embedded broker, produces and
consumes 200k records and prints what it measured. Every subcommand reports failures as one
line on stderr (``aiokafka-ng: error: ...``) and exits non-zero; see
:mod:`aiokafka_ng.cli._common` for the exit codes. Progress bars and tables need ``rich``
(the ``cli`` extra: ``pip install 'aiokafka-ng[cli]'``).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from aiokafka_ng.cli._common import (
    EXIT_FAILURE,
    EXIT_INTERRUPTED,
    CliError,
    first_line,
    resolve_connection,
)

__all__ = ["build_parser", "main"]

_PROG = "aiokafka-ng"


class _VersionAction(argparse.Action):
    """``--version``: the version and which build runs (a machine without a C compiler
    installs the pure-Python build, and pip hides the build's warning that says so)."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: object,
        option_string: str | None = None,
    ) -> None:
        from aiokafka_ng import __version__, build_info

        print(f"{parser.prog} {__version__} ({build_info()})", flush=True)  # stdout, as argparse's
        parser.exit()


def build_parser() -> argparse.ArgumentParser:
    from aiokafka_ng.cli import (
        _bench,
        _broker,
        _consume,
        _demo,
        _groups,
        _produce,
        _registry,
        _topics,
    )

    parser = argparse.ArgumentParser(
        prog=_PROG,
        description="An asyncio/trio Kafka client's command line: a local broker, topics, "
        "consumer groups, produce, consume, bench and a demo.",
    )
    parser.add_argument(
        "--version",
        action=_VersionAction,
        nargs=0,
        help="show the version and the build (compiled, or pure Python and why), then exit",
    )
    parser.add_argument(
        "--backend",
        choices=["asyncio", "trio"],
        default="asyncio",
        help="event loop to run on (default: asyncio)",
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for module in (_broker, _registry, _topics, _groups, _produce, _consume, _bench, _demo):
        module.register(sub)
    return parser


def _leaf(exc: BaseException) -> BaseException:
    """The one error worth reporting inside (nested) exception groups from task groups."""
    while isinstance(exc, BaseExceptionGroup):
        inner = [e for e in exc.exceptions if not isinstance(e, KeyboardInterrupt)]
        exc = inner[0] if inner else exc.exceptions[0]
    return exc


def _fail(message: str, code: int) -> int:
    print(f"{_PROG}: error: {message}", file=sys.stderr, flush=True)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line; returns the exit code (the console script exits with it)."""
    # Parsed first: --help, --version and a usage error need nothing beyond the base install.
    args = build_parser().parse_args(argv)
    try:
        import rich  # noqa: F401 (checked here so the failure is one clear line)
    except ImportError:
        return _fail("the CLI needs rich: pip install 'aiokafka-ng[cli]'", EXIT_FAILURE)
    if args.backend == "trio":
        try:
            import trio  # noqa: F401 (checked here so the failure is one clear line)
        except ImportError:
            return _fail("--backend trio needs trio: pip install 'aiokafka-ng[trio]'", EXIT_FAILURE)
    try:
        if hasattr(args, "command_config"):
            resolve_connection(args)
        code: int = args.func(args)
        return code
    except KeyboardInterrupt:
        return _fail("interrupted", EXIT_INTERRUPTED)
    except BaseException as raw:
        from aiokafka_ng.errors import KafkaError

        exc = _leaf(raw)
        if isinstance(exc, KeyboardInterrupt):
            return _fail("interrupted", EXIT_INTERRUPTED)
        if isinstance(exc, CliError):
            return _fail(str(exc), exc.exit_code)
        if isinstance(exc, KafkaError):
            return _fail(f"{type(exc).__name__}: {first_line(exc)}", EXIT_FAILURE)
        if isinstance(exc, OSError):
            return _fail(first_line(exc), EXIT_FAILURE)
        if exc is not raw:
            raise exc from raw
        raise


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
