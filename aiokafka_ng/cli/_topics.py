"""``aiokafka-ng topics list|create|describe|delete``: the admin client from a shell."""

from __future__ import annotations

import argparse
import sys
from typing import TYPE_CHECKING

from aiokafka_ng.cli._common import (
    EXIT_FAILURE,
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    add_connection_args,
    client_settings,
    first_line,
    parse_key_values,
    probe,
    run,
    stdout_console,
)

if TYPE_CHECKING:
    from aiokafka_ng.admin import AdminClient


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    topics = sub.add_parser("topics", help="list, create, describe or delete topics")
    actions = topics.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", help="print every topic name, one a line")
    add_connection_args(p)
    p.add_argument("--internal", action="store_true", help="include internal topics")
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("create", help="create topics")
    add_connection_args(p)
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.add_argument("-p", "--partitions", type=int, default=1, help="partitions (default: 1)")
    p.add_argument("-r", "--replication-factor", type=int, default=1, help="replicas (default: 1)")
    p.add_argument(
        "-c", "--config", action="append", metavar="KEY=VALUE", help="topic config (repeatable)"
    )
    p.add_argument(
        "--if-not-exists", action="store_true", help="succeed when the topic already exists"
    )
    p.set_defaults(func=cmd_create)

    p = actions.add_parser("describe", help="partitions, leaders, replicas and ISR")
    add_connection_args(p)
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.set_defaults(func=cmd_describe)

    p = actions.add_parser("delete", help="delete topics")
    add_connection_args(p)
    p.add_argument("names", nargs="+", metavar="TOPIC")
    p.set_defaults(func=cmd_delete)


def _admin(args: argparse.Namespace) -> AdminClient:
    from aiokafka_ng.admin import AdminClient, AdminConfig

    return AdminClient(**client_settings(args, AdminConfig))


def cmd_list(args: argparse.Namespace) -> int:
    async def main() -> list[str]:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            return list(await admin.list_topics(include_internal=args.internal))

    for name in run(main, backend=args.backend):
        print(name)
    return EXIT_OK


def cmd_create(args: argparse.Namespace) -> int:
    from aiokafka_ng.admin import NewTopic

    # Checked here, not left to the broker: these are usage errors (exit 2) the user can fix
    # without a round trip, and some brokers accept 0 partitions (Tansu) or answer late.
    # -1 asks for the broker's default, as Kafka's CreateTopics allows.
    if args.partitions == 0 or args.partitions < -1:
        raise CliError(f"--partitions must be at least 1 (got {args.partitions})", EXIT_USAGE)
    if args.replication_factor == 0 or args.replication_factor < -1:
        raise CliError(
            f"--replication-factor must be at least 1 (got {args.replication_factor})", EXIT_USAGE
        )
    configs = parse_key_values(args.config, "--config")
    topics = [
        NewTopic(
            name,
            num_partitions=args.partitions,
            replication_factor=args.replication_factor,
            topic_configs=configs,
        )
        for name in args.names
    ]

    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            results = await admin.create_topics(topics)
        status = EXIT_OK
        for name, created in results.succeeded.items():
            print(f"created {name} ({created.num_partitions} partitions)")
        for name, exc in results.failed.items():
            if args.if_not_exists and type(exc).__name__ == "TopicAlreadyExistsError":
                print(f"exists {name}")
                continue
            print(f"aiokafka-ng: error: {name}: {first_line(exc)}", file=sys.stderr)
            status = EXIT_FAILURE
        return status

    return int(run(main, backend=args.backend))


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            results = await admin.describe_topics(args.names)
        console = stdout_console()
        for name, desc in results.succeeded.items():
            console.print(f"[bold]{name}[/bold]  id={desc.topic_id}")
            table = Table()
            for col in ("partition", "leader", "replicas", "isr"):
                table.add_column(col, justify="right")
            for part in sorted(desc.partitions, key=lambda p: p.partition):
                table.add_row(
                    str(part.partition),
                    str(part.leader.node_id) if part.leader else "-",
                    ",".join(str(n.node_id) for n in part.replicas),
                    ",".join(str(n.node_id) for n in part.isr),
                )
            console.print(table)
        failed = results.failed
        for name, exc in failed.items():
            print(f"aiokafka-ng: error: {name}: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE if failed else EXIT_OK

    return int(run(main, backend=args.backend))


def cmd_delete(args: argparse.Namespace) -> int:
    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            results = await admin.delete_topics(args.names)
        for name in results.succeeded:
            print(f"deleted {name}")
        failed = results.failed
        for name, exc in failed.items():
            print(f"aiokafka-ng: error: {name}: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE if failed else EXIT_OK

    return int(run(main, backend=args.backend))


__all__ = ["register"]
