"""aiokafka's admin surface (``AIOKafkaAdminClient``, aiokafka 0.14) over our AdminClient.

Every public method of aiokafka's admin client exists with aiokafka's name and argument
order. Where aiokafka returns plain Python data, so do these methods, in aiokafka's shape:

==============================  ==========================================================
``list_topics()``               ``list[str]``
``describe_topics(topics)``     ``list[dict]``: ``error_code``, ``topic``, ``is_internal``,
                                ``partitions`` (``error_code``, ``partition``, ``leader``,
                                ``replicas``, ``isr``, ``offline_replicas``)
``describe_cluster()``          ``dict``: ``brokers`` (``node_id``, ``host``, ``port``,
                                ``rack``), ``cluster_id``, ``controller_id``
``list_consumer_groups()``      ``list[tuple[group_id, protocol_type]]``
``find_coordinator(group)``     the coordinator's node id
``list_consumer_group_offsets`` ``dict[TopicPartition, OffsetAndMetadata]``
``delete_records(...)``         ``dict[TopicPartition, low_watermark]``; raises the first
                                partition error, as aiokafka does
==============================  ==========================================================

The difference, by design: where aiokafka returns the raw protocol ``Response`` object
(``create_topics``, ``delete_topics``, ``create_partitions``, ``describe_configs``,
``alter_configs``, ``describe_consumer_groups``), these return our typed per-item results
(``ItemResults``: ``.result(name)``, ``raise_on_error()``); like aiokafka's responses they
do not raise for a failed item. Code that only awaits them, or checks for exceptions, runs
unchanged; code that reads response fields (``response.topic_errors``) must switch to the
typed results. aiokafka's ``group_coordinator_id`` / ``broker_ids`` arguments are accepted
and not needed (routing is automatic).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from aiokafka_ng.admin import AdminClient
from aiokafka_ng.admin import NewPartitions as _NewPartitions
from aiokafka_ng.admin.models import ConfigResource as _ConfigResource
from aiokafka_ng.admin.models import ConfigResourceType, Node, OffsetAndMetadata, TopicPartition
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import IllegalStateError

__all__ = [
    "AdminCompat",
    "ConfigResource",
    "ConfigResourceType",
    "NewPartitions",
    "RecordsToDelete",
]


class ConfigResource:
    """aiokafka's ``ConfigResource(resource_type, name, configs=None)``: ``resource_type``
    a :class:`ConfigResourceType` or its name (``"TOPIC"``, ``"BROKER"``)."""

    def __init__(
        self,
        resource_type: ConfigResourceType | str | int,
        name: str,
        configs: Mapping[str, Any] | None = None,
    ) -> None:
        if isinstance(resource_type, str):
            resource_type = ConfigResourceType[resource_type.upper()]
        self.resource_type = ConfigResourceType(resource_type)
        self.name = name
        self.configs = configs

    def native(self) -> _ConfigResource:
        return _ConfigResource(self.resource_type, str(self.name))

    def __repr__(self) -> str:
        return f"ConfigResource({self.resource_type.name}, {self.name!r})"


class RecordsToDelete:
    """aiokafka's ``RecordsToDelete(before_offset)``."""

    def __init__(self, before_offset: int) -> None:
        self.before_offset = before_offset


def NewPartitions(  # a class in aiokafka; a factory here
    total_count: int, new_assignments: list[list[int]] | None = None
) -> _NewPartitions:
    return _NewPartitions(total_count, new_assignments)


def _native(resource: Any) -> _ConfigResource:
    return resource.native() if isinstance(resource, ConfigResource) else resource


def _node_id(node: Node | None) -> int:
    return -1 if node is None else node.node_id


class AdminCompat(AdminClient):
    """The aiokafka-shaped methods; see the module docstring. (``start()`` and ``close()``
    are AdminClient's own.)"""

    async def create_topics(  # type: ignore[override]
        self, new_topics: Iterable[Any], timeout_ms: int | None = None, validate_only: bool = False
    ) -> ItemResults[str, Any]:
        return await super().create_topics(new_topics, validate_only, timeout_ms)

    async def delete_topics(
        self, topics: Iterable[str], timeout_ms: int | None = None
    ) -> ItemResults[str, None]:
        return await super().delete_topics(topics, timeout_ms)

    async def list_topics(  # type: ignore[override]
        self, include_internal: bool = False, timeout_ms: int | None = None
    ) -> list[str]:
        return list(await super().list_topics(include_internal, timeout_ms))

    async def describe_topics(  # type: ignore[override]
        self, topics: Iterable[str] | None = None
    ) -> list[dict[str, Any]]:
        names = list(await super().list_topics(True)) if topics is None else list(topics)
        results = await super().describe_topics(names)
        out: list[dict[str, Any]] = []
        for name in names:
            exc = results[name]
            if isinstance(exc, BaseException):
                code = getattr(exc, "errno", -1)
                out.append({"error_code": code, "topic": name, "is_internal": False,
                            "partitions": []})  # fmt: skip
                continue
            desc = results.result(name)
            partitions = [
                {
                    "error_code": 0,
                    "partition": p.partition,
                    "leader": _node_id(p.leader),
                    "replicas": [n.node_id for n in p.replicas],
                    "isr": [n.node_id for n in p.isr],
                    "offline_replicas": [n.node_id for n in p.offline_replicas],
                }
                for p in desc.partitions
            ]
            out.append({"error_code": 0, "topic": name, "is_internal": desc.is_internal,
                        "partitions": partitions})  # fmt: skip
        return out

    async def describe_cluster(self) -> dict[str, Any]:  # type: ignore[override]
        desc = await super().describe_cluster()
        return {
            "brokers": [
                {"node_id": b.node_id, "host": b.host, "port": b.port, "rack": b.rack}
                for b in desc.brokers
            ],
            "cluster_id": desc.cluster_id,
            "controller_id": _node_id(desc.controller),
        }

    async def describe_configs(  # type: ignore[override]
        self, config_resources: Iterable[Any], include_synonyms: bool = False
    ) -> ItemResults[Any, Any]:
        return await super().describe_configs(
            [_native(r) for r in config_resources], include_synonyms
        )

    async def alter_configs(  # type: ignore[override]
        self, config_resources: Iterable[ConfigResource]
    ) -> ItemResults[Any, None]:
        wanted = {
            r.native(): {k: None if v is None else str(v) for k, v in (r.configs or {}).items()}
            for r in config_resources
        }
        return await super().alter_configs(wanted)

    async def create_partitions(  # type: ignore[override]
        self,
        topic_partitions: Mapping[str, Any],
        timeout_ms: int | None = None,
        validate_only: bool = False,
    ) -> ItemResults[str, None]:
        return await super().create_partitions(topic_partitions, validate_only, timeout_ms)

    async def describe_consumer_groups(  # type: ignore[override]
        self,
        group_ids: Iterable[str],
        group_coordinator_id: int | None = None,
        include_authorized_operations: bool = False,
    ) -> ItemResults[str, Any]:
        return await super().describe_consumer_groups(group_ids, include_authorized_operations)

    async def list_consumer_groups(  # type: ignore[override]
        self, broker_ids: Iterable[int] | None = None
    ) -> list[tuple[str, str]]:
        return [(g.group_id, g.protocol_type) for g in await super().list_consumer_groups()]

    async def find_coordinator(self, group_id: str, coordinator_type: int = 0) -> int:
        cluster = self._runtime.open_cluster
        if cluster is None:
            raise IllegalStateError("the AdminClient is not open: call start() first")
        return await cluster.coordinator(group_id, coordinator_type)

    async def list_consumer_group_offsets(  # type: ignore[override]
        self,
        group_id: str,
        group_coordinator_id: int | None = None,
        partitions: Iterable[TopicPartition] | None = None,
    ) -> dict[TopicPartition, OffsetAndMetadata]:
        return await super().list_consumer_group_offsets(group_id, partitions)

    async def delete_records(  # type: ignore[override]
        self, records_to_delete: Mapping[TopicPartition, Any], timeout_ms: int | None = None
    ) -> dict[TopicPartition, int]:
        wanted = {
            TopicPartition(*tp): r.before_offset if isinstance(r, RecordsToDelete) else int(r)
            for tp, r in records_to_delete.items()
        }
        results = await super().delete_records(wanted, timeout_ms)
        return {tp: results.result(tp).low_watermark for tp in wanted}  # raises, as aiokafka
