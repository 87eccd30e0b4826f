"""The cluster's topics as a whole, as the clients ask about them: every topic there is (a
listing), and the names of topic ids.

*Listing.* :meth:`ClusterClient.all_topics` asks a broker for every topic now (the cache
holds only the topics the client tracks). What a listing shows of that answer is
:func:`listed_topics`: topics without a topic error (one the client may not describe, or
one being deleted, is no topic to subscribe to), internal ones (``__consumer_offsets``...)
only when asked. The consumer's ``topics()``, a pattern subscription's matching, the Spark
source's pattern and the admin client's ``list_topics`` all list this way.

*Topic ids.* Since KIP-516 requests and answers name topics by id (Fetch v13+, ShareFetch,
the KIP-848 and share group assignments); Metadata v10+ carries each topic's id.
:func:`topic_names_by_id` maps the ids of a metadata snapshot to names, and
:func:`resolve_topic_ids` asks the cluster for ids the snapshot does not know yet (a topic
just created, not tracked yet).
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Collection, Iterable, Mapping

from aiokafka_ng.cluster.client import ClusterClient
from aiokafka_ng.cluster.metadata import TopicMetadata
from aiokafka_ng.protocol.errors import KafkaError

__all__ = ["list_topics", "listed_topics", "resolve_topic_ids", "topic_names_by_id"]

log = logging.getLogger(__name__)


def listed_topics(
    topics: Mapping[str, TopicMetadata], *, include_internal: bool
) -> dict[str, TopicMetadata]:
    """What a listing shows of ``topics`` (an all-topics answer): the topics without a topic
    error; internal ones only with ``include_internal``."""
    return {
        name: t
        for name, t in topics.items()
        if t.error is None and (include_internal or not t.is_internal)
    }


async def list_topics(
    cluster: ClusterClient,
    *,
    include_internal: bool = False,
    timeout: float | None = None,  # noqa: ASYNC109 (the request's, as all_topics's)
) -> dict[str, TopicMetadata]:
    """Every topic in the cluster now, as a listing shows them (:func:`listed_topics`).
    A failed request raises (see :meth:`ClusterClient.all_topics`)."""
    return listed_topics(
        await cluster.all_topics(timeout=timeout), include_internal=include_internal
    )


def topic_names_by_id(topics: Iterable[TopicMetadata]) -> dict[uuid.UUID, str]:
    """Topic id -> name, of the ``topics`` that have an id (the zero id means none: a
    Metadata answer before v10)."""
    return {t.topic_id: t.name for t in topics if t.topic_id.int}


async def resolve_topic_ids(
    cluster: ClusterClient,
    ids: Collection[uuid.UUID],
    *,
    among: Iterable[str] | None = None,
) -> dict[uuid.UUID, str]:
    """Topic id -> name for every id the cluster's metadata knows, ``ids`` included as far
    as it can: ids the cached metadata does not know are asked for, by refreshing the
    topics ``among`` (when the caller knows which topics the ids can be) or else by
    listing every topic. A failed request is logged; the ids it would have named are left
    out, for the caller to ask again later."""
    names = topic_names_by_id(cluster.metadata.topics.values())
    if all(i in names for i in ids):
        return names
    try:
        if among is not None:
            await cluster.refresh(among)
            names = topic_names_by_id(cluster.metadata.topics.values())
        else:
            names.update(topic_names_by_id((await cluster.all_topics()).values()))
    except KafkaError as exc:
        log.debug("naming topic ids %s failed: %r", sorted(map(str, ids)), exc)
    return names
