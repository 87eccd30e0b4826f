"""FakeKafka: an in-process model of a Kafka 4 cluster for tests (see :mod:`._server`)."""

from aiokafka_ng.testing.fake._inject import Injection
from aiokafka_ng.testing.fake._raw import RawFrames
from aiokafka_ng.testing.fake._scripted import Received, Script
from aiokafka_ng.testing.fake._server import FakeKafka, FakeNode

__all__ = ["FakeKafka", "FakeNode", "Injection", "RawFrames", "Received", "Script"]
