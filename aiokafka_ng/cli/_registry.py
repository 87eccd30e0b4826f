"""``aiokafka-ng registry``: a local Schema Registry (Apicurio Registry) in the foreground.

Prints ``schema_registry_url=http://127.0.0.1:PORT/apis/ccompat/v7`` (the Confluent-compatible
API, what registry clients are given) once the registry answers, then runs until Ctrl-C
(SIGINT, exit 130) or SIGTERM (exit 143), stopping it first. Needs Java 21+, and Maven the
first time to fetch the distribution. ``--fetch-only`` fetches it, prints where, and exits
(``.ci/run`` does this before the tests, to time it).
"""

from __future__ import annotations

import argparse
import sys
import time

from aiokafka_ng.cli._broker import _run_in_foreground
from aiokafka_ng.cli._common import EXIT_OK, CliError


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "registry", help="run a local Schema Registry (Apicurio, Java 21+) in the foreground"
    )
    p.add_argument(
        "--fetch-only",
        action="store_true",
        help="fetch the registry's distribution with Maven (once), print where, exit",
    )
    p.set_defaults(func=cmd_registry)


def cmd_registry(args: argparse.Namespace) -> int:
    from aiokafka_ng.testing import SchemaRegistry, SchemaRegistryProcessError
    from aiokafka_ng.testing._registry import ensure_distribution, find_java21

    if args.fetch_only:
        started = time.monotonic()
        try:
            java = find_java21()
            dist = ensure_distribution()
        except SchemaRegistryProcessError as exc:
            raise CliError(exc.reason) from None
        print(f"registry_dist={dist} ({time.monotonic() - started:.1f} s)", flush=True)
        print(f"registry_java={java}", flush=True)
        return EXIT_OK

    def start() -> SchemaRegistry:
        registry = SchemaRegistry()
        registry.start_sync()
        return registry

    def announce(registry: SchemaRegistry) -> None:
        print(f"schema_registry_url={registry.url}", flush=True)
        print(
            f"Apicurio Registry running ({registry.start_seconds:.1f} s to start; in-memory "
            "storage); press Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )

    def dead(registry: SchemaRegistry) -> str | None:
        if registry.running:
            return None
        return f"the schema registry exited on its own: {registry.log_tail(1)}"

    return _run_in_foreground(
        "the schema registry",
        start,
        (SchemaRegistryProcessError,),
        announce,
        dead,
        SchemaRegistry.stop_sync,
    )


__all__ = ["register"]
