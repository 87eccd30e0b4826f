"""Write docs/configuration.md from the pydantic config models.

Every key of ``ClientConfig`` (shared), ``ProducerConfig``, ``ConsumerConfig`` and
``AdminConfig``: its keyword name, the Kafka dotted name ``from_properties`` accepts, type,
default, bounds, and the ``#:`` comment written above the field in the source, if any.

    python tools/gen_config_docs.py           # write docs/configuration.md
    python tools/gen_config_docs.py --check   # exit 1 if the file is out of date

The test suite runs the check, so the reference cannot drift from the models.
"""

from __future__ import annotations

import argparse
import ast
import inspect
import re
import sys
import textwrap
import types
import typing
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from aiokafka_ng.admin.config import AdminConfig  # noqa: E402
from aiokafka_ng.config import ClientConfig, ProducerConfig  # noqa: E402
from aiokafka_ng.consumer.config import ConsumerConfig  # noqa: E402

OUTPUT = ROOT / "docs" / "configuration.md"

#: Settings with no Kafka property (Python objects).
PYTHON_ONLY = frozenset({"ssl_context", "transport"})

#: One line per setting whose model field has no ``#:`` comment of its own. A setting missing
#: here and in the source just has an empty "notes" cell; the drift check still covers it.
DESCRIPTIONS = {
    "bootstrap_servers": "`host:port` list (comma-separated string or list) for the first "
    "connection; the cluster's own metadata names the rest. Port 9092 when left out; an IPv6 "
    "address with a port in brackets (`[::1]:9092`).",
    "client_id": "Sent with every request; shows up in broker logs and quotas.",
    "request_timeout_ms": "How long to wait for a broker's answer before the connection is "
    "considered broken and the request retried.",
    "retry_backoff_ms": "First retry delay; doubles per failure up to `retry_backoff_max_ms`, "
    "with +/-20 % jitter (KIP-580).",
    "retry_backoff_max_ms": "Cap of the retry delay.",
    "reconnect_backoff_ms": "First reconnect delay to a broker; doubles up to "
    "`reconnect_backoff_max_ms` (KIP-144).",
    "reconnect_backoff_max_ms": "Cap of the reconnect delay.",
    "metadata_max_age_ms": "Metadata is refreshed at least this often, even without errors.",
    "connections_max_idle_ms": "Idle connections are closed after this long.",
    "security_protocol": "Transport: plain TCP, TLS, SASL, or SASL over TLS.",
    "ssl_context": "An `ssl.SSLContext` for TLS; a default one is made when TLS is on and "
    "none is given.",
    "sasl_mechanism": "SASL mechanism (required with a SASL security protocol).",
    "sasl_plain_username": "SASL user name.",
    "sasl_plain_password": "SASL password.",
    "enable_idempotence": "Exactly-once per partition: the broker drops duplicates of retried "
    "batches by sequence number. Needs `acks=all`, at most 5 in flight, `retries > 0`.",
    "linger_ms": (
        "How long a batch waits for more records before it is sent (KIP-1030: 5). An upper"
        " bound: a batch may go up to 1 ms early (at most half the linger), since event-loop"
        " timers fire up to 1 ms late."
    ),
    "batch_size": "Target size of one partition's batch, in bytes.",
    "buffer_memory": "Cap on the bytes of records held by the producer; `send()` waits (at "
    "most `max_block_ms`) when it is full.",
    "max_block_ms": "The longest `send()` waits for buffer memory before raising "
    "`BufferExhaustedError`.",
    "delivery_timeout_ms": "Upper bound from `send()` to success or failure, retries included.",
    "max_in_flight_requests_per_connection": "Produce requests on the wire per connection, "
    "enforced by a semaphore. Without idempotence, order under retries needs 1.",
    "max_request_size": "Largest Produce request (and so largest record) the producer sends.",
    "retries": "How often a failed batch is retried (within `delivery_timeout_ms`).",
    "compression_type": "Codec for record batches.",
    "key_serializer": "Callable turning a key into bytes.",
    "value_serializer": "Callable turning a value into bytes.",
    "group_id": "Consumer group to join; without one, assign partitions yourself and "
    "nothing is committed.",
    "group_instance_id": "Static membership (KIP-345): a restart within the session timeout "
    "does not rebalance.",
    "client_rack": "Rack of this client, for fetching from the closest replica (KIP-392).",
    "auto_offset_reset": "Where to start without a committed offset (or when it is out of "
    "range); `none` raises. `by_duration:PnDTnHnMn.nS` (KIP-1106, e.g. `by_duration:PT1H`) "
    "starts at the first record written at most that long ago, the log end if none is. "
    "After a log truncation (KIP-320: an unclean leader election under the consumer) a "
    "policy resumes at the divergence with a warning, and `none` raises "
    "`LogTruncationError`.",
    "enable_auto_commit": "Commit consumed positions every `auto_commit_interval_ms` and on close.",
    "auto_commit_interval_ms": "Auto-commit period.",
    "session_timeout_ms": "A member that sends no heartbeat for this long is removed from the "
    "group.",
    "heartbeat_interval_ms": "Heartbeat period; must be below `session_timeout_ms`.",
    "max_poll_interval_ms": "A member that does not poll for this long leaves the group.",
    "max_poll_records": "Most records one `getmany()` returns.",
    "fetch_min_bytes": "The broker waits for at least this much data (or `fetch_max_wait_ms`).",
    "fetch_max_bytes": "Most bytes one Fetch response may carry.",
    "fetch_max_wait_ms": "Longest the broker holds a Fetch waiting for `fetch_min_bytes`.",
    "max_partition_fetch_bytes": "Most bytes per partition in one Fetch response.",
    "isolation_level": "`read_committed` hides records of open and aborted transactions.",
    "check_crcs": "Verify each record batch's CRC32C.",
    "exclude_internal_topics": "Pattern subscriptions never match internal topics.",
    "allow_auto_create_topics": "Let metadata requests create missing topics (when the broker "
    "allows it).",
    "key_deserializer": "Callable turning key bytes into the record's key.",
    "value_deserializer": "Callable turning value bytes into the record's value.",
    "default_api_timeout_ms": "Bounds a whole admin operation, retries included, when the call "
    "passes no `timeout_ms` of its own.",
}

SECTIONS: list[tuple[str, type[ClientConfig], str]] = [
    (
        "Every client",
        ClientConfig,
        "Shared by `Producer`, `Consumer` and `AdminClient` (`aiokafka_ng.config.ClientConfig`).",
    ),
    ("Producer", ProducerConfig, "`Producer(**settings)` (`aiokafka_ng.config.ProducerConfig`)."),
    (
        "Consumer",
        ConsumerConfig,
        "`Consumer(*topics, **settings)` (`aiokafka_ng.consumer.ConsumerConfig`): topic names as\n"
        'separate arguments, `Consumer("t1", "t2", group_id="g")`; a list '
        '(`Consumer(["t1", "t2"])`)\n'
        "is refused with a `TypeError` saying so — unpack it, `Consumer(*topics, ...)`.",
    ),
    ("Admin client", AdminConfig, "`AdminClient(**settings)` (`aiokafka_ng.admin.AdminConfig`)."),
]

HEADER = """\
# Configuration reference

<!-- Generated by tools/gen_config_docs.py from the pydantic models; do not edit by hand.
     Regenerate with: python tools/gen_config_docs.py -->

Settings are keyword arguments in snake_case, validated once when the client is created: a
bad configuration raises `ConfigError` naming every bad key (a misspelt one with the
closest known names: "did you mean 'linger_ms'?"). Each client also has
`from_properties({...})`, which takes Kafka's dotted names (second column) with values as
strings or native types:

```python
from aiokafka_ng import Producer

Producer(linger_ms=5, acks="all")
Producer.from_properties({"linger.ms": "5", "acks": "all"})
```

The keyword settings are typed (`ProducerSettings`, `ConsumerSettings` and `AdminSettings` in
`aiokafka_ng._settings`, generated from the same models), so editors complete them and mypy
rejects `Producer(lingr_ms=5)` before it runs. mypy cannot see into setuptools' default
editable install (an import hook): install a checkout for type checking with
`pip install -e . --config-settings editable_mode=compat` (a plain path entry), or
`editable_mode=strict`.

Defaults are the Java client's (Kafka 4.0) unless a note says otherwise. Where two settings
conflict, a conflict with a default you did not set is resolved the Java way (for example
`enable_idempotence` is switched off when you set `acks=1`); a conflict between settings you
both set is an error.
"""


def field_comments(cls: type) -> dict[str, str]:
    """The ``#:`` comment lines written directly above each field in ``cls``'s source."""
    source = textwrap.dedent(inspect.getsource(cls))
    lines = source.splitlines()
    out: dict[str, str] = {}
    for node in ast.parse(source).body[0].body:  # type: ignore[attr-defined]
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            comment: list[str] = []
            i = node.lineno - 2
            while i >= 0 and lines[i].strip().startswith("#:"):
                comment.insert(0, lines[i].strip()[2:].strip())
                i -= 1
            if comment:
                out[node.target.id] = " ".join(comment)
    return out


def type_name(annotation: Any) -> str:
    origin = typing.get_origin(annotation)
    args = typing.get_args(annotation)
    if origin is typing.Literal:
        return " | ".join(f'`"{a}"`' if isinstance(a, str) else f"`{a}`" for a in args)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(type_name(a) for a in args)
    if annotation is type(None):
        return "None"
    if origin is not None and args:
        inner = ", ".join("..." if a is Ellipsis else type_name(a) for a in args)
        if isinstance(args[0], list):  # Callable[[...], R]
            inner = "..."
        return f"{getattr(origin, '__name__', str(origin))}[{inner}]"
    if isinstance(annotation, list):
        return ", ".join(type_name(a) for a in annotation)
    if isinstance(annotation, type):
        return annotation.__name__
    return re.sub(r"\b(typing|collections\.abc)\.", "", str(annotation))


def default_text(name: str, value: Any) -> str:
    if name == "acks" and value == -1:
        return '`"all"` (-1)'
    if isinstance(value, str):
        return f'`"{value}"`'
    if isinstance(value, tuple):
        return "`" + ", ".join(f'"{v}"' if isinstance(v, str) else repr(v) for v in value) + "`"
    if isinstance(value, bool) or value is None:
        return f"`{value}`"
    if isinstance(value, int) and value >= 1 << 20 and value % (1 << 20) == 0:
        return f"`{value}` ({value >> 20} MiB)"
    return f"`{value!r}`"


def bounds_text(info: Any) -> str:
    parts = []
    for meta in info.metadata:
        for attr, sign in (("gt", ">"), ("ge", ">="), ("lt", "<"), ("le", "<=")):
            bound = getattr(meta, attr, None)
            if bound is not None:
                parts.append(f"{sign} {bound}")
    return ", ".join(parts)


def kafka_name(cls: type[ClientConfig], name: str) -> str:
    """Every dotted name ``from_properties`` maps to ``name``: its own, then the aliases."""
    if name in PYTHON_ONLY:
        return "(Python only)"
    names = [name.replace("_", ".")]
    names += sorted(k for k, v in cls.PROPERTY_ALIASES.items() if v == name and k not in names)
    return ", ".join(f"`{n}`" for n in names)


def cell(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render() -> str:
    out = [HEADER]
    comments: dict[str, str] = {}
    for cls in (ClientConfig, ProducerConfig, ConsumerConfig, AdminConfig):
        comments.update({f"{cls.__name__}.{k}": v for k, v in field_comments(cls).items()})
    base_fields = ClientConfig.model_fields
    for title, cls, intro in SECTIONS:
        out.append(f"\n## {title}\n\n{intro}\n")
        if cls is not ClientConfig:
            out.append("Also takes every setting of [Every client](#every-client).\n")
        out.append("| setting | Kafka name | type | default | bounds | notes |")
        out.append("|---|---|---|---|---|---|")
        for name, info in cls.model_fields.items():
            inherited = name in base_fields and cls is not ClientConfig
            if inherited and info.default == base_fields[name].default:
                continue
            note = comments.get(f"{cls.__name__}.{name}") or DESCRIPTIONS.get(name, "")
            if inherited:
                note = (note + " " if note else "") + "Overrides the shared default."
            out.append(
                "| "
                + " | ".join(
                    [
                        f"`{name}`",
                        kafka_name(cls, name),
                        cell(type_name(info.annotation)),
                        cell(default_text(name, info.default)),
                        bounds_text(info),
                        cell(note),
                    ]
                )
                + " |"
            )
    return "\n".join(out) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--check", action="store_true", help="fail if the file is stale")
    parser.add_argument("--output", type=Path, default=OUTPUT)
    args = parser.parse_args(argv)
    text = render()
    if args.check:
        current = args.output.read_text() if args.output.exists() else ""
        if current != text:
            print(f"{args.output} is out of date: run python tools/gen_config_docs.py")
            return 1
        return 0
    args.output.write_text(text)
    print(f"wrote {args.output}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
