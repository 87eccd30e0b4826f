"""Config operations: describe, incremental alter (KIP-339) and legacy alter.

A broker (or broker-logger) resource is answered only by that broker, so those go to the
node named by the resource; every other resource (topics, groups, ...) goes, batched, to
any broker.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from aiokafka_ng.admin._core import _AdminCore, broker_error, group_by
from aiokafka_ng.admin.models import (
    AlterConfigOp,
    AlterConfigOpType,
    ConfigEntry,
    ConfigResource,
    ConfigResourceType,
    ConfigSource,
    ConfigSynonym,
    ConfigType,
)
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import alter_configs as legacy
from aiokafka_ng.protocol.messages import incremental_alter_configs as incremental
from aiokafka_ng.protocol.messages.describe_configs import (
    DescribeConfigsRequest,
    DescribeConfigsResource,
    DescribeConfigsResourceResult,
)

_PER_BROKER = (ConfigResourceType.BROKER, ConfigResourceType.BROKER_LOGGER)

ConfigsResult = dict[str, ConfigEntry]


def _config_type(value: int) -> ConfigType:
    try:
        return ConfigType(value)
    except ValueError:
        return ConfigType.UNKNOWN


def _entry(c: DescribeConfigsResourceResult) -> ConfigEntry:
    # v1+ (all Kafka 4 speaks) carries the source; v0's is_default flag is gone with v0.
    source = ConfigSource.parse(c.config_source)
    return ConfigEntry(
        name=c.name,
        value=c.value,
        source=source,
        is_read_only=c.read_only,
        is_sensitive=c.is_sensitive,
        is_default=source is ConfigSource.DEFAULT_CONFIG,
        synonyms=[ConfigSynonym(s.name, s.value, ConfigSource.parse(s.source)) for s in c.synonyms],
        config_type=_config_type(c.config_type),
        documentation=c.documentation or None,
    )


def _checked(resources: Iterable[ConfigResource]) -> list[ConfigResource]:
    """The resources, after checking broker ones are named by a node id (they are routed
    to that node)."""
    items = list(resources)
    for r in items:
        if r.type in _PER_BROKER and r.name and not r.name.isdigit():
            raise ValueError(f"a broker resource's name must be a node id, got {r.name!r}")
    return items


class ConfigOps(_AdminCore):
    """Config operations of :class:`AdminClient`."""

    async def _route_resources(
        self, resources: list[ConfigResource]
    ) -> dict[int, list[ConfigResource]]:
        """Broker resources to that broker; all others batched to one broker."""
        any_node: int | None = None
        pairs: list[tuple[int, ConfigResource]] = []
        for r in resources:
            if r.type in _PER_BROKER and r.name:
                pairs.append((int(r.name), r))
            else:
                if any_node is None:
                    any_node = await self._any_node()
                pairs.append((any_node, r))
        return group_by(pairs)

    async def describe_configs(
        self,
        resources: Iterable[ConfigResource],
        include_synonyms: bool = False,
        include_documentation: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[ConfigResource, ConfigsResult]:
        """Each resource's configs (name -> entry), with sources and, if asked, synonyms."""
        items = _checked(resources)

        async def on_node(
            node: int, batch: list[ConfigResource], deadline: float
        ) -> dict[ConfigResource, ConfigsResult | BaseException]:
            req = DescribeConfigsRequest(
                resources=[
                    DescribeConfigsResource(
                        resource_type=int(r.type), resource_name=r.name, configuration_keys=None
                    )
                    for r in batch
                ],
                include_synonyms=include_synonyms,
                include_documentation=include_documentation,
            )
            resp = await self._send("describe_configs", node, req, deadline)
            keys = {(int(r.type), r.name): r for r in batch}
            out: dict[ConfigResource, ConfigsResult | BaseException] = {}
            for res in resp.results:
                key = keys.get((res.resource_type, res.resource_name))
                if key is None:
                    continue
                err = broker_error(res.error_code, res.error_message)
                out[key] = err if err is not None else {c.name: _entry(c) for c in res.configs}
            return out

        async def attempt(
            pending: list[ConfigResource], deadline: float
        ) -> dict[ConfigResource, ConfigsResult | BaseException]:
            batches = await self._route_resources(pending)
            return await self._per_node(batches, lambda n, b: on_node(n, b, deadline))

        return await self._run("describe_configs", items, attempt, timeout_ms)

    async def incremental_alter_configs(
        self,
        configs: Mapping[ConfigResource, Iterable[AlterConfigOp]],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[ConfigResource, None]:
        """Apply SET/DELETE/APPEND/SUBTRACT operations per resource (KIP-339)."""
        ops = {r: list(o) for r, o in configs.items()}

        def build(batch: list[ConfigResource]) -> incremental.IncrementalAlterConfigsRequest:
            return incremental.IncrementalAlterConfigsRequest(
                resources=[
                    incremental.AlterConfigsResource(
                        resource_type=int(r.type),
                        resource_name=r.name,
                        configs=[
                            incremental.AlterableConfig(
                                name=o.name,
                                config_operation=int(o.op_type),
                                value=None if o.op_type is AlterConfigOpType.DELETE else o.value,
                            )
                            for o in ops[r]
                        ],
                    )
                    for r in batch
                ],
                validate_only=validate_only,
            )

        return await self._alter("incremental_alter_configs", ops, build, timeout_ms)

    async def alter_configs(
        self,
        configs: Mapping[ConfigResource, Mapping[str, str | None]],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[ConfigResource, None]:
        """Legacy AlterConfigs: *replaces* each resource's whole dynamic config set.

        Keys left out revert to their defaults; prefer ``incremental_alter_configs``.
        """
        values = {r: dict(v) for r, v in configs.items()}

        def build(batch: list[ConfigResource]) -> legacy.AlterConfigsRequest:
            return legacy.AlterConfigsRequest(
                resources=[
                    legacy.AlterConfigsResource(
                        resource_type=int(r.type),
                        resource_name=r.name,
                        configs=[
                            legacy.AlterableConfig(name=k, value=v) for k, v in values[r].items()
                        ],
                    )
                    for r in batch
                ],
                validate_only=validate_only,
            )

        return await self._alter("alter_configs", values, build, timeout_ms)

    async def _alter(
        self,
        operation: str,
        resources: Mapping[ConfigResource, object],
        build: Callable[[list[ConfigResource]], Any],
        timeout_ms: int | None,
    ) -> ItemResults[ConfigResource, None]:
        async def on_node(
            node: int, batch: list[ConfigResource], deadline: float
        ) -> dict[ConfigResource, KafkaError | None]:
            req = build(batch)
            resp = await self._send(operation, node, req, deadline)
            keys = {(int(r.type), r.name): r for r in batch}
            out: dict[ConfigResource, KafkaError | None] = {}
            for res in resp.responses:
                key = keys.get((res.resource_type, res.resource_name))
                if key is not None:
                    out[key] = broker_error(res.error_code, res.error_message)
            return out

        async def attempt(
            pending: list[ConfigResource], deadline: float
        ) -> dict[ConfigResource, BaseException | None]:
            batches = await self._route_resources(pending)
            return await self._per_node(batches, lambda n, b: on_node(n, b, deadline))

        return await self._run(operation, _checked(resources), attempt, timeout_ms)
