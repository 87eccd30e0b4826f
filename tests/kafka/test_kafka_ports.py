"""KafkaCluster's port pick, which needs no cluster: ports outside the ephemeral range."""

from __future__ import annotations

import socket

from aiokafka_ng.testing._kafka_procs import ephemeral_range, free_ports


def test_free_ports_are_distinct_bindable_and_below_the_ephemeral_range() -> None:
    # A port of the ephemeral range can be handed to any outgoing connection between our
    # pick and the JVM's bind (a node then dies with "Address already in use"); below the
    # range only an explicit bind can take it.
    low, _high = ephemeral_range()
    ports = free_ports(15)
    assert len(set(ports)) == 15
    assert all(1024 <= port < low for port in ports)
    for port in ports:
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind(("127.0.0.1", port))


def test_ephemeral_range_matches_the_kernel() -> None:
    low, high = ephemeral_range()
    with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
        assert (low, high) == tuple(int(x) for x in f.read().split())
