"""What a decoded answer may hold, and where a decode failed.

A broker chooses every count in its answers. :class:`~aiokafka_ng.protocol.primitives.Reader`
refuses a count larger than the bytes left (each element takes at least one), which bounds
strings, bytes and scalar arrays by the frame. It does not bound what a frame full of small
structs costs once decoded, so struct arrays (read by the generated code with their field's
name) are also charged against :class:`DecodeLimits` before they are allocated.

:func:`located` names the field whose bytes were bad, from the traceback of the generated
``_read`` code, so the success path pays nothing for it.
"""

from __future__ import annotations

import linecache
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType, TracebackType

from aiokafka_ng.protocol.errors import ProtocolError

__all__ = [
    "DEFAULT_LIMITS",
    "MAX_API_KEYS",
    "MAX_BROKERS_PER_METADATA",
    "MAX_PARTITIONS_PER_TOPIC",
    "MAX_STRUCTS_PER_RESPONSE",
    "MAX_TOPICS_PER_METADATA",
    "DecodeLimits",
    "ResponseLimitError",
    "located",
]


class ResponseLimitError(ProtocolError):
    """An answer claims more elements of a field than :class:`DecodeLimits` accepts.

    Raised at the array's count, before anything is allocated for it. Retriable, like any
    :class:`ProtocolError`: the connection that sent it is dropped."""


# Measured (CPython 3.11, Metadata v12, one topic): a partition costs 415 bytes and 4.7 us
# decoded, 676 bytes with the cluster snapshot's entry, 742 with three replicas.
# Kafka caps neither count, so the limits are "beyond any real cluster" and what they allow
# is what a hostile answer can cost at most.
#: Partitions of one topic in a Metadata answer: ~70 MB and ~0.5 s of decoding at most.
#: Real topics stay in the thousands.
MAX_PARTITIONS_PER_TOPIC = 100_000
#: Topics of one Metadata answer (an admin's "all topics" request on a very large cluster).
MAX_TOPICS_PER_METADATA = 100_000
#: Brokers of one Metadata answer: the largest clusters run a few thousand.
MAX_BROKERS_PER_METADATA = 10_000
#: Entries of an ApiVersions answer (read at every connect): API keys are int16, so more
#: entries than that cannot all be distinct.
MAX_API_KEYS = 32_768
#: Struct elements of one answer, over all its arrays and nesting levels: bounds what any
#: answer can make the client allocate. An answer running into it has cost ~400 MB and
#: 5-9 s of decoding (measured: 11 topics of 99,999 partitions); a "describe all topics"
#: answer of a million partitions that stays under it costs ~700 MB once cached.
MAX_STRUCTS_PER_RESPONSE = 1_000_000


@dataclass(frozen=True, slots=True)
class DecodeLimits:
    """What one decoded answer may contain: ``max_structs`` struct elements in all, and
    at most ``per_field[name]`` elements in one array of the field ``name``
    (``"ClassName.field"``, as the generated code names it)."""

    max_structs: int = MAX_STRUCTS_PER_RESPONSE
    per_field: Mapping[str, int] = field(
        default_factory=lambda: MappingProxyType(
            {
                "MetadataResponseTopic.partitions": MAX_PARTITIONS_PER_TOPIC,
                "MetadataResponse.topics": MAX_TOPICS_PER_METADATA,
                "MetadataResponse.brokers": MAX_BROKERS_PER_METADATA,
                "ApiVersionsResponse.api_keys": MAX_API_KEYS,
            }
        )
    )


DEFAULT_LIMITS = DecodeLimits()


class StructBudget:
    """Struct elements left for one decode; shared with the Readers of tagged fields, so
    nesting does not start a fresh budget."""

    __slots__ = ("left", "limits")

    def __init__(self, limits: DecodeLimits) -> None:
        self.limits = limits
        self.left = limits.max_structs


# A line of generated ``_read`` code names the field it reads: ``f_name = r.string()``,
# ``_n_topics = r.array_len(...)``, ``f_a, f_b = r.fixed(...)``, ``obj.name = ...`` (tagged).
_FIELD_LINE = re.compile(r"((?:f_|_n_|obj\.)\w+(?:, f_\w+)*) = ")
_FIELD_NAME = re.compile(r"(?:f_|_n_|obj\.)(\w+)")


def _failed_field(tb: TracebackType | None) -> str | None:
    """``Class.field`` whose read raised, from the innermost generated ``_read`` frame.

    Worked out from the traceback, so the success path pays nothing for naming fields.
    """
    found = None
    while tb is not None:
        code = tb.tb_frame.f_code  # not f_locals: a snapshot of them would pin the buffer
        owner, _, method = code.co_qualname.rpartition(".")
        if method == "_read" and owner:
            line = linecache.getline(code.co_filename, tb.tb_lineno)
            m = _FIELD_LINE.match(line.strip())
            if m is not None:
                # A run of fixed-width fields is one read: name them all.
                found = f"{owner}.{'/'.join(_FIELD_NAME.findall(m.group(1)))}"
            elif "unknown_tags" in line or "tag_count" in line or "tagged_field" in line:
                found = f"{owner} tagged fields"
        tb = tb.tb_next
    return found


def located(exc: BaseException, message: str, version: int) -> ProtocolError:
    """A ProtocolError (of ``exc``'s class when it is one) naming the message, version and
    the field whose bytes were bad.

    ``exc`` loses its traceback: its frames hold the Reader and so the whole answer, and
    with the raising frame it forms a cycle only the cyclic GC would free -- a broker
    sending 90 MB answers got several of them kept alive at once (measured: +500 MB)."""
    field_name = _failed_field(exc.__traceback__)
    exc.with_traceback(None)
    text = str(exc)
    if field_name is not None and not text.startswith(field_name):
        text = f"{field_name}: {text}"
    if isinstance(exc, ProtocolError):
        return type(exc)(f"{message} v{version}, {text}")
    return ProtocolError(f"malformed {message} v{version}, {text}")
