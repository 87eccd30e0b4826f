"""Client quotas: describe and alter (KIP-546).

Describing goes to any broker; altering to the controller, as the Java client sends it (a
KRaft cluster names a broker there, which forwards). Quota values are floats on the wire
(``producer_byte_rate``, ``consumer_byte_rate``, ``request_percentage``,
``controller_mutation_rate``, ``connection_creation_rate``); removing one sends ``remove``.
"""

from __future__ import annotations

from collections.abc import Iterable

from aiokafka_ng.admin._core import _AdminCore, broker_error
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.admin.user_models import (
    ClientQuotaAlteration,
    ClientQuotaEntity,
    ClientQuotaFilter,
)
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.protocol.messages import alter_client_quotas as alter
from aiokafka_ng.protocol.messages import describe_client_quotas as describe


def _entity(entries: Iterable[describe.EntityData | alter.EntityData]) -> ClientQuotaEntity:
    return ClientQuotaEntity({e.entity_type: e.entity_name for e in entries})


class QuotaOps(_AdminCore):
    """Client quota operations of :class:`AdminClient`."""

    async def describe_client_quotas(
        self, quota_filter: ClientQuotaFilter | None = None, timeout_ms: int | None = None
    ) -> dict[ClientQuotaEntity, dict[str, float]]:
        """The quotas of every entity the filter matches (all of them by default)."""
        f = quota_filter or ClientQuotaFilter.all()
        req = describe.DescribeClientQuotasRequest(
            components=[
                describe.ComponentData(
                    entity_type=c.entity_type, match_type=int(c.match), match=c.name
                )
                for c in f.components
            ],
            strict=f.strict,
        )

        async def attempt(deadline: float) -> dict[ClientQuotaEntity, dict[str, float]]:
            node = await self._any_node()
            resp = await self._send("describe_client_quotas", node, req, deadline)
            err = broker_error(resp.error_code, resp.error_message)
            if err is not None:
                raise err
            return {
                _entity(e.entity): {v.key: v.value for v in e.values} for e in resp.entries or ()
            }

        return await self._run_one("describe_client_quotas", attempt, timeout_ms)

    async def alter_client_quotas(
        self,
        alterations: Iterable[ClientQuotaAlteration],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[ClientQuotaEntity, None]:
        """Set or remove quota values; one outcome per entity. ``validate_only`` asks the
        broker to check the alterations without applying them."""
        by_entity: dict[ClientQuotaEntity, dict[str, float | None]] = {}
        for a in alterations:
            by_entity.setdefault(a.entity, {}).update(a.ops)

        async def attempt(
            pending: list[ClientQuotaEntity], deadline: float
        ) -> dict[ClientQuotaEntity, KafkaError | None]:
            req = alter.AlterClientQuotasRequest(
                entries=[
                    alter.AlterClientQuotasRequestEntryData(
                        entity=[
                            alter.EntityData(entity_type=t, entity_name=n)
                            for t, n in entity.entries.items()
                        ],
                        ops=[
                            alter.OpData(key=k, value=0.0 if v is None else v, remove=v is None)
                            for k, v in by_entity[entity].items()
                        ],
                    )
                    for entity in pending
                ],
                validate_only=validate_only,
            )
            node = await self._controller()
            resp = await self._send("alter_client_quotas", node, req, deadline)
            return {
                _entity(e.entity): broker_error(e.error_code, e.error_message) for e in resp.entries
            }

        return await self._run("alter_client_quotas", list(by_entity), attempt, timeout_ms)
