"""``aiokafka-ng groups list|describe|reset|delete``: consumer groups from a shell.

``describe`` shows each partition's committed offset, log end and lag; ``reset`` plans an
offset reset the way ``kafka-consumer-groups --reset-offsets`` does and, as that tool, only
prints the plan unless ``--execute`` is given (and then refuses while the group has members).
"""

from __future__ import annotations

import argparse
import sys
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from aiokafka_ng.cli._common import (
    EXIT_FAILURE,
    EXIT_OK,
    CliError,
    add_connection_args,
    client_settings,
    first_line,
    probe,
    run,
    stdout_console,
)

if TYPE_CHECKING:
    from aiokafka_ng.admin import AdminClient, OffsetReset, TopicPartition


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    groups = sub.add_parser("groups", help="list, describe (with lag), reset or delete groups")
    actions = groups.add_subparsers(dest="action", metavar="ACTION", required=True)

    p = actions.add_parser("list", help="every consumer group, with its state")
    add_connection_args(p)
    p.set_defaults(func=cmd_list)

    p = actions.add_parser("describe", help="state, members and per-partition lag")
    add_connection_args(p)
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.set_defaults(func=cmd_describe)

    p = actions.add_parser(
        "reset",
        help="plan (default) or --execute an offset reset, like kafka-consumer-groups",
    )
    add_connection_args(p)
    p.add_argument("group", metavar="GROUP")
    to = p.add_mutually_exclusive_group(required=True)
    to.add_argument("--to-earliest", action="store_true", help="the log start")
    to.add_argument("--to-latest", action="store_true", help="the log end")
    to.add_argument(
        "--to-datetime", metavar="WHEN", help="first record at/after an ISO-8601 date-time"
    )
    to.add_argument(
        "--by-duration", metavar="DUR", help="that long ago: ISO-8601 (PT1H) or 90s, 15m, 2h, 1d"
    )
    to.add_argument("--shift-by", type=int, metavar="N", help="the committed offset + N")
    to.add_argument("--to-offset", type=int, metavar="N", help="offset N in every partition")
    p.add_argument("--topic", action="append", metavar="TOPIC", help="limit to a topic")
    p.add_argument("--partition", action="append", metavar="TOPIC:P", help="limit to a partition")
    p.add_argument("--execute", action="store_true", help="apply the plan (default: dry run)")
    p.set_defaults(func=cmd_reset)

    p = actions.add_parser("delete", help="delete groups (they must have no members)")
    add_connection_args(p)
    p.add_argument("groups", nargs="+", metavar="GROUP")
    p.set_defaults(func=cmd_delete)


def _admin(args: argparse.Namespace) -> AdminClient:
    from aiokafka_ng.admin import AdminClient, AdminConfig

    return AdminClient(**client_settings(args, AdminConfig))


def parse_duration(text: str) -> timedelta:
    """``PT1H30M``, ``P1DT2H`` (ISO 8601, as Kafka's tool takes) or ``90s``, ``15m``, ``2h``:
    :func:`aiokafka_ng.config.parse_duration` (the consumer's ``by_duration`` reads the same),
    its error as the CLI's."""
    from aiokafka_ng.config import parse_duration as parse

    try:
        return parse(text)
    except ValueError as exc:
        raise CliError(str(exc)) from None


def _reset_from_args(args: argparse.Namespace) -> OffsetReset:
    from aiokafka_ng.admin import OffsetReset

    if args.to_earliest:
        return OffsetReset.to_earliest()
    if args.to_latest:
        return OffsetReset.to_latest()
    if args.to_datetime is not None:
        try:
            when = datetime.fromisoformat(args.to_datetime)
        except ValueError:
            raise CliError(f"bad --to-datetime {args.to_datetime!r}: use ISO 8601") from None
        return OffsetReset.to_datetime(when)
    if args.by_duration is not None:
        return OffsetReset.by_duration(parse_duration(args.by_duration))
    if args.shift_by is not None:
        return OffsetReset.shift_by(args.shift_by)
    return OffsetReset.to_offset(args.to_offset)


def _partitions(items: list[str] | None) -> list[TopicPartition] | None:
    from aiokafka_ng.admin import TopicPartition

    if not items:
        return None
    out = []
    for item in items:
        topic, sep, number = item.rpartition(":")
        if not sep or not topic or not number.isdigit():
            raise CliError(f"bad --partition {item!r}: use TOPIC:PARTITION")
        out.append(TopicPartition(topic, int(number)))
    return out


def _num(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def cmd_list(args: argparse.Namespace) -> int:
    from rich.table import Table

    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            listed = await admin.list_consumer_groups()
        table = Table()
        # type: classic or consumer (KIP-848), which the protocol column cannot tell apart
        # (both say "consumer"); "-" where the broker does not say (ListGroups before v5).
        for col in ("group", "state", "type", "protocol"):
            table.add_column(col)
        for g in listed:
            table.add_row(
                g.group_id, str(g.state or "-"), g.group_type or "-", g.protocol_type or "-"
            )
        stdout_console().print(table)
        return EXIT_OK

    return int(run(main, backend=args.backend))


def cmd_describe(args: argparse.Namespace) -> int:
    from rich.table import Table

    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            described = await admin.describe_consumer_groups(args.groups)
            lags = await admin.describe_consumer_group_lag(args.groups)
        console = stdout_console()
        for group_id, lag in lags.succeeded.items():
            desc = described.result(group_id)
            console.print(
                f"[bold]{group_id}[/bold]  type={desc.group_type}  state={lag.state}"
                f"  members={len(desc.members)}"
                f"  total lag={lag.total_lag:,}"
            )
            owner = {tp: m.client_id for m in desc.members for tp in m.assignment}
            table = Table()
            for col in ("topic", "partition", "committed", "log end", "lag", "member"):
                table.add_column(col, justify="left" if col in ("topic", "member") else "right")
            for tp, p in lag.partitions.items():
                table.add_row(
                    tp.topic,
                    str(tp.partition),
                    _num(p.committed),
                    _num(p.log_end),
                    _num(p.lag),
                    owner.get(tp, "-"),
                )
            console.print(table)
        for group_id, exc in lags.failed.items():
            print(f"aiokafka-ng: error: {group_id}: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE if lags.failed else EXIT_OK

    return int(run(main, backend=args.backend))


def cmd_reset(args: argparse.Namespace) -> int:
    from rich.table import Table

    reset = _reset_from_args(args)
    partitions = _partitions(args.partition)

    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            plan = await admin.reset_consumer_group_offsets(
                args.group,
                reset,
                topics=args.topic,
                partitions=partitions,
                dry_run=not args.execute,
            )
        table = Table()
        cols = ("topic", "partition", "current", "target", "log start", "log end", "lag after")
        for col in cols:
            table.add_column(col, justify="left" if col == "topic" else "right")
        for tp, row in plan.partitions.items():
            table.add_row(
                tp.topic,
                str(tp.partition),
                _num(row.current),
                _num(row.target),
                _num(row.log_start),
                _num(row.log_end),
                _num(row.lag_after),
            )
        console = stdout_console()
        console.print(table)
        if plan.applied:
            console.print(f"reset {len(plan.partitions)} partitions of {args.group}")
        else:
            console.print(f"dry run ({plan.group_id} is {plan.state}): add --execute to apply")
        return EXIT_OK

    try:
        return int(run(main, backend=args.backend))
    except ValueError as exc:  # the planner's "nothing to shift" and friends
        raise CliError(first_line(exc)) from None


def cmd_delete(args: argparse.Namespace) -> int:
    async def main() -> int:
        await probe(args.bootstrap_servers, args.connect_timeout)
        async with _admin(args) as admin:
            results = await admin.delete_consumer_groups(args.groups)
        for group_id in results.succeeded:
            print(f"deleted {group_id}")
        for group_id, exc in results.failed.items():
            print(f"aiokafka-ng: error: {group_id}: {first_line(exc)}", file=sys.stderr)
        return EXIT_FAILURE if results.failed else EXIT_OK

    return int(run(main, backend=args.backend))
