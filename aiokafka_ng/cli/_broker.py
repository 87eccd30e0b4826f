"""``aiokafka-ng broker``: a local Kafka-compatible broker (Tansu) in the foreground.

Prints ``bootstrap_servers=127.0.0.1:PORT`` once the broker accepts connections, then runs
until Ctrl-C (SIGINT, exit 130) or SIGTERM (exit 143), stopping the broker first. Exits 1 with
one line if the broker cannot start or dies.

``--kafka`` runs real Apache Kafka instead (:class:`~aiokafka_ng.testing.KafkaCluster`, 3
KRaft nodes by default; needs Java 17+, and Maven the first time to fetch the jars) and
also prints the SASL listener, the SASL users and, with TLS, the SSL and SASL_SSL
listeners and the CA file. TLS needs ``trustme`` (in the ``cli`` extra) for the certificates:
``--tls`` asks for it (an error without trustme), ``--no-tls`` turns it off, and by default
it is on when trustme is installed and off with a note on stderr saying how to get it. ``--kafka
--fetch-only`` fetches the jars, makes the JVM class archive that starts a node faster
(``aiokafka_ng.testing._kafka_cds``), and exits (``.ci/run`` does this first, to time it).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TypeVar

from aiokafka_ng.cli._common import (
    EXIT_OK,
    EXIT_USAGE,
    CliError,
    exit_code_for_signal,
    first_line,
)

_WATCH_INTERVAL = 0.5

_B = TypeVar("_B")  # what runs in the foreground: a LocalBroker or a KafkaCluster


def register(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("broker", help="run a local dev broker in the foreground")
    p.add_argument("--port", type=int, default=None, help="listener port (default: a free one)")
    p.add_argument(
        "--kafka",
        action="store_true",
        help="run an Apache Kafka cluster (KRaft, needs Java 17+ and Maven) instead of Tansu",
    )
    p.add_argument(
        "--brokers", type=int, default=3, help="with --kafka: number of nodes (default: 3)"
    )
    p.add_argument(
        "--tls",
        action=argparse.BooleanOptionalAction,
        default=None,
        help="with --kafka: SSL and SASL_SSL listeners too (default: when trustme is installed)",
    )
    p.add_argument(
        "--fetch-only",
        action="store_true",
        help="with --kafka: fetch the Kafka jars and make the JVM class archive, print where, exit",
    )
    p.set_defaults(func=cmd_broker)


def _stop_on_signals() -> tuple[threading.Event, list[int]]:
    """An event set by SIGINT or SIGTERM, and the list the signal numbers go to (the exit
    code says which one stopped the broker)."""
    stop = threading.Event()
    received: list[int] = []

    def on_signal(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    signal.signal(signal.SIGINT, on_signal)
    signal.signal(signal.SIGTERM, on_signal)
    return stop, received


def _run_in_foreground(
    what: str,
    start: Callable[[], _B],
    errors: tuple[type[Exception], ...],
    announce: Callable[[_B], None],
    dead: Callable[[_B], str | None],
    stop: Callable[[_B], None],
) -> int:
    """The foreground life of a broker (Tansu) or a cluster (Apache Kafka): ``start()`` it
    (``errors`` become one line naming ``what``), ``announce`` its addresses, then wait for
    SIGINT or SIGTERM, checking every half second that ``dead`` has nothing to report; stop
    it on every way out. Returns the exit code of the signal that ended it."""
    signalled, received = _stop_on_signals()
    try:
        running = start()
    except errors as exc:
        raise CliError(f"{what} could not start: {first_line(exc)}") from None
    try:
        announce(running)
        while not signalled.wait(_WATCH_INTERVAL):
            problem = dead(running)
            if problem is not None:
                raise CliError(problem)
    finally:
        stop(running)
    return exit_code_for_signal(received[0])


def cmd_kafka(args: argparse.Namespace) -> int:
    from aiokafka_ng.testing import KafkaCluster, KafkaClusterError
    from aiokafka_ng.testing._kafka_cds import make_archive
    from aiokafka_ng.testing._kafka_jars import KafkaSetupError, ensure_jars

    if args.fetch_only:
        started = time.monotonic()
        try:
            libs = ensure_jars()
        except KafkaSetupError as exc:
            raise CliError(str(exc)) from None
        print(f"kafka_libs={libs} ({time.monotonic() - started:.1f} s)", flush=True)
        started = time.monotonic()
        try:
            archive = make_archive()
        except KafkaSetupError as exc:
            # Only speed is lost: nodes start without the archive.
            print(f"warning: {exc}", file=sys.stderr, flush=True)
        else:
            print(f"class_archive={archive} ({time.monotonic() - started:.1f} s)", flush=True)
        return EXIT_OK

    tls = _tls_wanted(args.tls)

    def start() -> KafkaCluster:
        cluster = KafkaCluster(brokers=args.brokers, tls=tls)
        cluster.start_sync()
        return cluster

    def announce(cluster: KafkaCluster) -> None:
        print(f"bootstrap_servers={cluster.bootstrap_servers}", flush=True)
        listeners = ("SASL_PLAINTEXT", "SSL", "SASL_SSL") if tls else ("SASL_PLAINTEXT",)
        for listener in listeners:
            print(f"{listener.lower()}={cluster.bootstrap_for(listener)}", flush=True)
        if tls:
            print(f"ssl_cafile={cluster.ca_file}", flush=True)
        users = " ".join(f"{name}:{password}" for name, password in cluster.users.items())
        print(f"sasl_users={users} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", flush=True)
        print(
            f"Apache Kafka running ({cluster.start_seconds:.1f} s to start; logs under "
            f"{cluster.directory}); press Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )

    def dead(cluster: KafkaCluster) -> str | None:
        for node in cluster.brokers:
            if not node.running:
                return f"Kafka node {node.node_id} exited on its own: {node.log_tail(1)}"
        return None

    return _run_in_foreground(
        "the Kafka cluster",
        start,
        (KafkaClusterError, ValueError),
        announce,
        dead,
        KafkaCluster.stop_sync,
    )


def _tls_wanted(asked: bool | None) -> bool:
    """Whether the cluster opens its TLS listeners: as asked, or when trustme (which makes
    the certificates) is installed. Checked before any jar is fetched or node started."""
    import importlib.util

    have_trustme = importlib.util.find_spec("trustme") is not None
    if asked and not have_trustme:
        raise CliError(
            "--tls needs trustme for the certificates: pip install trustme "
            "(or 'aiokafka-ng[cli]'), or leave --tls out"
        )
    if asked is None and not have_trustme:
        print(
            "note: no SSL or SASL_SSL listeners: trustme is not installed "
            "(pip install trustme, or 'aiokafka-ng[cli]'); --no-tls silences this note",
            file=sys.stderr,
            flush=True,
        )
    return have_trustme if asked is None else asked


def cmd_broker(args: argparse.Namespace) -> int:
    from aiokafka_ng.testing import LocalBroker, LocalBrokerError

    if args.kafka:
        return cmd_kafka(args)
    if args.fetch_only:
        raise CliError("--fetch-only goes with --kafka")
    if args.tls is not None:
        raise CliError("--tls and --no-tls go with --kafka", EXIT_USAGE)

    def start() -> LocalBroker:
        broker = LocalBroker(port=args.port)
        broker.start_sync()
        return broker

    def announce(broker: LocalBroker) -> None:
        print(f"bootstrap_servers={broker.bootstrap_servers}", flush=True)
        print("broker running; press Ctrl-C to stop", file=sys.stderr, flush=True)

    return _run_in_foreground(
        "the local broker",
        start,
        (LocalBrokerError, ValueError),
        announce,
        lambda broker: None if broker.running else "the broker exited on its own",
        LocalBroker.stop_sync,
    )


__all__ = ["register"]
