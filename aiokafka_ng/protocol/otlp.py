"""OTLP metrics in protobuf: the ``MetricsData`` KIP-714's PushTelemetry carries.

KIP-714 has clients push their metrics as an OpenTelemetry ``MetricsData`` message
(``opentelemetry/proto/metrics/v1/metrics.proto``) serialized as protobuf, then compressed
with one of the codecs the broker accepts. We send only number gauges and sums, one data
point each, so this module encodes exactly that subset by hand -- a few dozen lines instead
of a protobuf runtime on the client's path. Decoding is left to the receivers (the broker's
plugin, an OpenTelemetry collector); the tests decode with ``opentelemetry-proto``.

Field numbers (metrics.proto, common.proto, resource.proto, v1):

* ``MetricsData``: resource_metrics = 1
* ``ResourceMetrics``: resource = 1, scope_metrics = 2
* ``Resource``: attributes = 1 (``KeyValue``)
* ``ScopeMetrics``: scope = 1, metrics = 2; ``InstrumentationScope``: name = 1, version = 2
* ``Metric``: name = 1, gauge = 5, sum = 7
* ``Gauge``: data_points = 1; ``Sum``: data_points = 1, aggregation_temporality = 2,
  is_monotonic = 3
* ``NumberDataPoint``: start_time_unix_nano = 2 (fixed64), time_unix_nano = 3 (fixed64),
  as_double = 4 (double), as_int = 6 (sfixed64), attributes = 7
* ``KeyValue``: key = 1, value = 2; ``AnyValue``: string_value = 1

Pure and synchronous: bytes out, nothing else.
"""

from __future__ import annotations

import enum
import struct
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["MetricKind", "MetricPoint", "Temporality", "encode_metrics_data"]

_FIXED64 = struct.Struct("<Q")
_SFIXED64 = struct.Struct("<q")
_DOUBLE = struct.Struct("<d")

# Wire types.
_VARINT, _I64, _LEN = 0, 1, 2


class MetricKind(enum.Enum):
    GAUGE = "gauge"
    SUM = "sum"


class Temporality(enum.IntEnum):
    """OTLP's ``AggregationTemporality`` (the values on the wire)."""

    DELTA = 1
    CUMULATIVE = 2


@dataclass(frozen=True, slots=True)
class MetricPoint:
    """One metric with one data point. ``attributes`` are the point's (string) labels;
    ``start_ns`` is a sum's interval start (0: not sent); ``temporality`` and ``monotonic``
    only apply to sums. An ``int`` value is sent as ``as_int``, a ``float`` as
    ``as_double``."""

    name: str
    kind: MetricKind
    value: int | float
    time_ns: int
    attributes: tuple[tuple[str, str], ...] = ()
    start_ns: int = 0
    temporality: Temporality = Temporality.CUMULATIVE
    monotonic: bool = True


def _varint(n: int, out: bytearray) -> None:
    while n > 0x7F:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)


def _tag(field: int, wire: int, out: bytearray) -> None:
    _varint((field << 3) | wire, out)


def _bytes_field(field: int, data: bytes | bytearray, out: bytearray) -> None:
    _tag(field, _LEN, out)
    _varint(len(data), out)
    out += data


def _string_field(field: int, text: str, out: bytearray) -> None:
    _bytes_field(field, text.encode(), out)


def _key_value(key: str, value: str) -> bytearray:
    any_value = bytearray()
    _string_field(1, value, any_value)
    kv = bytearray()
    _string_field(1, key, kv)
    _bytes_field(2, any_value, kv)
    return kv


def _attributes(field: int, attributes: Iterable[tuple[str, str]], out: bytearray) -> None:
    for key, value in attributes:
        _bytes_field(field, _key_value(key, value), out)


def _data_point(p: MetricPoint) -> bytearray:
    out = bytearray()
    if p.kind is MetricKind.SUM and p.start_ns:
        _tag(2, _I64, out)
        out += _FIXED64.pack(p.start_ns)
    _tag(3, _I64, out)
    out += _FIXED64.pack(p.time_ns)
    # bool is an int: a flag is sent as 0/1, as Java's gauges of booleans are numbers.
    if isinstance(p.value, int):
        _tag(6, _I64, out)
        out += _SFIXED64.pack(int(p.value))
    else:
        _tag(4, _I64, out)
        out += _DOUBLE.pack(p.value)
    _attributes(7, p.attributes, out)
    return out


def _metric(p: MetricPoint) -> bytearray:
    out = bytearray()
    _string_field(1, p.name, out)
    body = bytearray()
    _bytes_field(1, _data_point(p), body)
    if p.kind is MetricKind.SUM:
        _tag(2, _VARINT, body)
        _varint(int(p.temporality), body)
        if p.monotonic:
            _tag(3, _VARINT, body)
            _varint(1, body)
        _bytes_field(7, body, out)
    else:
        _bytes_field(5, body, out)
    return out


def encode_metrics_data(
    points: Sequence[MetricPoint],
    *,
    resource: Iterable[tuple[str, str]] = (),
    scope: tuple[str, str] | None = None,
) -> bytes:
    """``MetricsData`` with one ``ResourceMetrics`` (``resource``: its attributes) holding
    one ``ScopeMetrics`` (``scope``: name and version, or none) of ``points``."""
    res = bytearray()
    _attributes(1, resource, res)
    scope_metrics = bytearray()
    if scope is not None:
        sc = bytearray()
        _string_field(1, scope[0], sc)
        _string_field(2, scope[1], sc)
        _bytes_field(1, sc, scope_metrics)
    for p in points:
        _bytes_field(2, _metric(p), scope_metrics)
    rm = bytearray()
    _bytes_field(1, res, rm)
    _bytes_field(2, scope_metrics, rm)
    out = bytearray()
    _bytes_field(1, rm, out)
    return bytes(out)
