"""Client statistics as metrics: a flat snapshot, a Prometheus collector, OpenTelemetry gauges.

Each client has a ``statistics()`` method returning a plain snapshot (nested dicts,
dataclasses and named tuples of numbers). This module turns such a snapshot into samples --
a dotted metric name, labels, a float -- and hands them to a metrics library. Neither
``prometheus-client`` nor ``opentelemetry-api`` is a dependency: each is imported only by the
function that needs it.

Flattening rules: numbers (and bools, as 0/1) become samples; nested mappings and dataclasses
extend the name (``memory.available``); a mapping keyed by something other than a name (the
producer's per-broker counters, keyed by node id) becomes one metric with a ``key`` label;
a list or tuple becomes its length (``assignment.count``); strings and ``None`` are skipped.

Everything is exported as a gauge: a snapshot cannot tell a counter from a level, and a
gauge reports both faithfully (use ``rate()`` on the ones that only grow).

Usage::

    from prometheus_client import REGISTRY
    collector = PrometheusCollector({"orders-producer": producer})
    REGISTRY.register(collector)

    from opentelemetry import metrics
    instrument_opentelemetry(metrics.get_meter("my-app"), {"orders-producer": producer})

Our clients answer in any state (before ``start()``, after ``close()``); anything else whose
``statistics()`` raises is skipped.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

__all__ = [
    "PrometheusCollector",
    "Sample",
    "StatisticsSource",
    "instrument_opentelemetry",
    "samples",
    "snapshot",
]

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


class StatisticsSource(Protocol):
    """Anything with a ``statistics()`` snapshot: Producer, Consumer, ..."""

    def statistics(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Sample:
    """One number of a snapshot: ``name`` is dotted (``memory.available``)."""

    name: str
    labels: tuple[tuple[str, str], ...]
    value: float


def samples(stats: Any) -> list[Sample]:
    """Flatten a statistics snapshot into samples (see the module docstring)."""
    out: list[Sample] = []
    _walk(stats, "", (), out)
    return out


def _walk(obj: Any, name: str, labels: tuple[tuple[str, str], ...], out: list[Sample]) -> None:
    if obj is None or isinstance(obj, str | bytes):
        return
    if isinstance(obj, bool | int | float):
        if name:
            out.append(Sample(name, labels, float(obj)))
        return
    items: Iterable[tuple[Any, Any]] | None = None
    if isinstance(obj, Mapping):
        items = obj.items()
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        items = ((f.name, getattr(obj, f.name)) for f in dataclasses.fields(obj))
    elif isinstance(obj, tuple) and hasattr(obj, "_asdict") and not name.endswith("]"):
        items = obj._asdict().items()
    if items is not None:
        for key, value in items:
            if isinstance(key, str) and _NAME_RE.match(key):
                _walk(value, f"{name}.{key}" if name else key, labels, out)
            else:
                _walk(value, name, (*labels, ("key", str(key))), out)
        return
    if isinstance(obj, list | tuple | set | frozenset):
        out.append(Sample(f"{name}.count" if name else "count", labels, float(len(obj))))


def _collect(clients: Mapping[str, StatisticsSource]) -> Iterator[tuple[str, Sample]]:
    for client_name, client in list(clients.items()):
        try:
            stats = client.statistics()
        except Exception:  # a source that cannot report now (ours answer in any state)
            continue
        for sample in samples(stats):
            yield client_name, sample


def snapshot(client: StatisticsSource) -> dict[str, float]:
    """``client.statistics()`` as ``{"memory.available": 33554432.0, "senders{key=1}": 3.0}``."""
    out: dict[str, float] = {}
    for sample in samples(client.statistics()):
        key = sample.name
        if sample.labels:
            key += "{" + ",".join(f"{k}={v}" for k, v in sample.labels) + "}"
        out[key] = sample.value
    return out


def _metric_name(namespace: str, dotted: str) -> str:
    return f"{namespace}_{dotted.replace('.', '_')}" if namespace else dotted.replace(".", "_")


class PrometheusCollector:
    """A ``prometheus_client`` custom collector over named clients.

    Every sample becomes a gauge ``<namespace>_<name>`` with a ``client`` label (plus
    ``key`` where the snapshot is keyed, e.g. by broker node id). Add and remove clients at
    any time with :meth:`add` / :meth:`remove`; register the collector once.
    """

    def __init__(
        self,
        clients: Mapping[str, StatisticsSource] | None = None,
        namespace: str = "aiokafka_ng",
    ) -> None:
        self._clients: dict[str, StatisticsSource] = dict(clients or {})
        self._namespace = namespace

    def add(self, name: str, client: StatisticsSource) -> None:
        self._clients[name] = client

    def remove(self, name: str) -> None:
        self._clients.pop(name, None)

    def describe(self) -> list[Any]:
        # Metric names depend on live snapshots; an empty description tells
        # prometheus_client not to call collect() at registration time.
        return []

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        families: dict[tuple[str, tuple[str, ...]], Any] = {}
        for client_name, sample in _collect(self._clients):
            label_names = ("client", *(k for k, _ in sample.labels))
            metric = _metric_name(self._namespace, sample.name)
            family = families.get((metric, label_names))
            if family is None:
                family = GaugeMetricFamily(
                    metric, f"aiokafka_ng statistic {sample.name}", labels=list(label_names)
                )
                families[(metric, label_names)] = family
            family.add_metric([client_name, *(v for _, v in sample.labels)], sample.value)
        yield from families.values()


def instrument_opentelemetry(
    meter: Any,
    clients: Mapping[str, StatisticsSource],
    namespace: str = "aiokafka_ng",
) -> list[Any]:
    """Create one observable gauge per statistic on ``meter`` (an OpenTelemetry ``Meter``).

    Names are OpenTelemetry-style, ``<namespace>.<dotted name>`` (``aiokafka_ng.memory.total``).
    The metric names are learnt from the clients' snapshots now, so call this after the
    clients have started. Each collection reads fresh snapshots; attributes are ``client``
    (the mapping's key) and ``key`` where the snapshot is keyed. Returns the gauges.
    """
    from opentelemetry.metrics import CallbackOptions, Observation

    names = sorted({sample.name for _, sample in _collect(clients)})

    def callback_for(dotted: str) -> Callable[[CallbackOptions], Iterable[Observation]]:
        def callback(options: CallbackOptions) -> Iterable[Observation]:
            return [
                Observation(sample.value, {"client": client_name, **dict(sample.labels)})
                for client_name, sample in _collect(clients)
                if sample.name == dotted
            ]

        return callback

    return [
        meter.create_observable_gauge(
            f"{namespace}.{name}" if namespace else name,
            callbacks=[callback_for(name)],
            description=f"aiokafka_ng statistic {name}",
        )
        for name in names
    ]
