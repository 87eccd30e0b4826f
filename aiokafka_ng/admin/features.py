"""Cluster features (KIP-584) and listing groups of every type (KIP-1043).

``describe_features`` reads what a broker says in ApiVersions v3+ (supported ranges,
finalized levels and their epoch); ``update_features`` sends UpdateFeatures to the
controller (a KRaft cluster names a broker there, which forwards). ``list_groups`` asks every
broker for its groups of every type (classic, consumer, share, streams) with ListGroups,
using v5's type filter when one is asked for.
"""

from __future__ import annotations

import enum
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from aiokafka_ng.admin._core import _AdminCore, broker_error
from aiokafka_ng.admin.results import ItemResults
from aiokafka_ng.errors import KafkaError
from aiokafka_ng.net._handshake import _software_version
from aiokafka_ng.protocol.messages import api_versions as av
from aiokafka_ng.protocol.messages import list_groups as lgr
from aiokafka_ng.protocol.messages import update_features as uf

__all__ = ["FeatureMetadata", "FeatureUpdate", "GroupListing", "GroupType", "UpgradeType"]


@dataclass(frozen=True, slots=True)
class FeatureMetadata:
    """Finalized feature levels (``name -> (min, max)``), their epoch (None when the broker
    did not say) and the levels the answering broker supports."""

    finalized: dict[str, tuple[int, int]]
    finalized_epoch: int | None
    supported: dict[str, tuple[int, int]]


class UpgradeType(enum.IntEnum):
    UPGRADE = 1
    SAFE_DOWNGRADE = 2
    UNSAFE_DOWNGRADE = 3


@dataclass(frozen=True, slots=True)
class FeatureUpdate:
    """Move a feature to ``max_version_level`` (0 removes it, which is a downgrade)."""

    max_version_level: int
    upgrade_type: UpgradeType = UpgradeType.UPGRADE


class GroupType(enum.StrEnum):
    UNKNOWN = "unknown"
    CLASSIC = "classic"
    CONSUMER = "consumer"
    SHARE = "share"
    STREAMS = "streams"

    @classmethod
    def parse(cls, value: str) -> GroupType:
        try:
            return cls(value.lower())
        except ValueError:
            return cls.UNKNOWN


@dataclass(frozen=True, slots=True)
class GroupListing:
    """One group of ``list_groups``: ``type`` is None from brokers before ListGroups v5,
    ``state`` None before v4."""

    group_id: str
    type: GroupType | None
    protocol_type: str
    state: str | None


class FeatureOps(_AdminCore):
    """Features and the all-types group listing of :class:`AdminClient`."""

    async def describe_features(self, timeout_ms: int | None = None) -> FeatureMetadata:
        """The cluster's finalized features and a broker's supported ranges."""

        async def attempt(deadline: float) -> FeatureMetadata:
            node = await self._any_node()
            resp = await self._send(
                "describe_features",
                node,
                av.ApiVersionsRequest(
                    client_software_name="aiokafka-ng", client_software_version=_software_version()
                ),
                deadline,
                min_version=3,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                raise err
            return FeatureMetadata(
                {
                    f.name: (f.min_version_level, f.max_version_level)
                    for f in resp.finalized_features
                },
                None if resp.finalized_features_epoch < 0 else resp.finalized_features_epoch,
                {f.name: (f.min_version, f.max_version) for f in resp.supported_features},
            )

        return await self._run_one("describe_features", attempt, timeout_ms)

    async def update_features(
        self,
        updates: Mapping[str, FeatureUpdate],
        validate_only: bool = False,
        timeout_ms: int | None = None,
    ) -> ItemResults[str, None]:
        """Upgrade or downgrade finalized features; one outcome per feature."""
        wanted = dict(updates)

        async def attempt(pending: list[str], deadline: float) -> dict[str, KafkaError | None]:
            req = uf.UpdateFeaturesRequest(
                timeout_ms=self._server_timeout_ms(deadline),
                feature_updates=[
                    uf.FeatureUpdateKey(
                        feature=name,
                        max_version_level=wanted[name].max_version_level,
                        # v0's flag, v1's type: the codec writes the one of its version.
                        allow_downgrade=wanted[name].upgrade_type is not UpgradeType.UPGRADE,
                        upgrade_type=int(wanted[name].upgrade_type),
                    )
                    for name in pending
                ],
                validate_only=validate_only,
            )
            node = await self._controller()
            resp = await self._send(
                "update_features", node, req, deadline, min_version=1 if validate_only else None
            )
            top = broker_error(resp.error_code, resp.error_message)
            if top is not None:
                return dict.fromkeys(pending, top)
            if not resp.results:
                # v2 (KIP-1022) answers all or nothing: no per-feature results, and no
                # top-level error means every update was applied.
                return dict.fromkeys(pending)
            return {r.feature: broker_error(r.error_code, r.error_message) for r in resp.results}

        return await self._run("update_features", wanted, attempt, timeout_ms)

    async def list_groups(
        self,
        types: Iterable[GroupType | str] | None = None,
        states: Iterable[str] | None = None,
        timeout_ms: int | None = None,
    ) -> list[GroupListing]:
        """Every group of every type (or of ``types``; ListGroups v5), with its protocol
        and state, sorted by group id. Raises ``AdminBatchError`` if a broker could not
        answer."""
        type_filter = [str(GroupType.parse(str(t))) for t in types or ()]
        state_filter = [str(s) for s in states or ()]
        need = 5 if type_filter else 4 if state_filter else None

        async def on_broker(node: int, deadline: float) -> list[GroupListing] | BaseException:
            resp = await self._send(
                "list_groups",
                node,
                lgr.ListGroupsRequest(states_filter=state_filter, types_filter=type_filter),
                deadline,
                min_version=need,
            )
            err = broker_error(resp.error_code)
            if err is not None:
                return err
            return [
                GroupListing(
                    g.group_id,
                    GroupType.parse(g.group_type) if g.group_type else None,
                    g.protocol_type,
                    g.group_state or None,
                )
                for g in resp.groups
            ]

        per_broker = await self._each_broker("list_groups", on_broker, timeout_ms)
        found = {g.group_id: g for gs in per_broker.raise_on_error().values() for g in gs}
        return [found[k] for k in sorted(found)]
