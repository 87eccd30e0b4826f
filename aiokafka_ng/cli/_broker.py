"""``aiokafka-ng broker``: a local Kafka-compatible broker (Tansu) in the foreground.

Prints ``bootstrap_servers=127.0.0.1:PORT`` once the broker accepts connections, then runs
until Ctrl-C (SIGINT, exit 130) or SIGTERM (exit 143), stopping the broker first. Exits 1 with
one line if the broker cannot start or dies.

``--kafka`` runs real Apache Kafka instead (:class:`~aiokafka_ng.testing.KafkaCluster`, 3
KRaft nodes by default; needs Java 17+, and Maven the first time to fetch the jars) and
also prints the SASL and TLS listeners, the CA file and the SASL users. ``--kafka
--fetch-only`` fetches the jars and exits (``.ci/run`` does this first, to time it).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
import time
from types import FrameType

from aiokafka_ng.cli._common import EXIT_OK, CliError, exit_code_for_signal, first_line

_WATCH_INTERVAL = 0.5


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
        "--fetch-only",
        action="store_true",
        help="with --kafka: fetch the Kafka jars into the cache, print where, and exit",
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


def cmd_kafka(args: argparse.Namespace) -> int:
    from aiokafka_ng.testing import KafkaCluster, KafkaClusterError
    from aiokafka_ng.testing._kafka_jars import KafkaSetupError, ensure_jars

    if args.fetch_only:
        started = time.monotonic()
        try:
            libs = ensure_jars()
        except KafkaSetupError as exc:
            raise CliError(str(exc)) from None
        print(f"kafka_libs={libs} ({time.monotonic() - started:.1f} s)", flush=True)
        return EXIT_OK
    stop, received = _stop_on_signals()
    try:
        cluster = KafkaCluster(brokers=args.brokers)
        cluster.start_sync()
    except (KafkaClusterError, ValueError) as exc:
        raise CliError(f"the Kafka cluster could not start: {first_line(exc)}") from None
    try:
        print(f"bootstrap_servers={cluster.bootstrap_servers}", flush=True)
        for listener in ("SASL_PLAINTEXT", "SSL", "SASL_SSL"):
            print(f"{listener.lower()}={cluster.bootstrap_for(listener)}", flush=True)
        print(f"ssl_cafile={cluster.ca_file}", flush=True)
        users = " ".join(f"{name}:{password}" for name, password in cluster.users.items())
        print(f"sasl_users={users} (PLAIN, SCRAM-SHA-256, SCRAM-SHA-512)", flush=True)
        print(
            f"Apache Kafka running ({cluster.start_seconds:.1f} s to start; logs under "
            f"{cluster.directory}); press Ctrl-C to stop",
            file=sys.stderr,
            flush=True,
        )
        while not stop.wait(_WATCH_INTERVAL):
            for node in cluster.brokers:
                if not node.running:
                    tail = node.log_tail(1)
                    raise CliError(f"Kafka node {node.node_id} exited on its own: {tail}")
    finally:
        cluster.stop_sync()
    return exit_code_for_signal(received[0])


def cmd_broker(args: argparse.Namespace) -> int:
    from aiokafka_ng.testing import LocalBroker, LocalBrokerError

    if args.kafka:
        return cmd_kafka(args)
    if args.fetch_only:
        raise CliError("--fetch-only goes with --kafka")
    stop, received = _stop_on_signals()
    try:
        broker = LocalBroker(port=args.port)
        broker.start_sync()
    except (LocalBrokerError, ValueError) as exc:
        raise CliError(f"the local broker could not start: {first_line(exc)}") from None
    try:
        print(f"bootstrap_servers={broker.bootstrap_servers}", flush=True)
        print("broker running; press Ctrl-C to stop", file=sys.stderr, flush=True)
        while not stop.wait(_WATCH_INTERVAL):
            if not broker.running:
                raise CliError("the broker exited on its own")
    finally:
        broker.stop_sync()
    return exit_code_for_signal(received[0])


__all__ = ["register"]
