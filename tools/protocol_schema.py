"""Load Kafka's JSON message schemas into a small typed model (used by gen_protocol.py).

The schema files are JSON with ``//`` line comments. A field's ``type`` is a primitive, an
array ``[]T``, or a struct name; struct fields either carry their own ``fields`` or refer to
the message's ``commonStructs``. Version specs are ``"3+"``, ``"0-2"``, ``"5"`` or ``"none"``.
"""

from __future__ import annotations

import json
import keyword
import re
import zipfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

PRIMITIVES = {
    "bool",
    "int8",
    "int16",
    "uint16",
    "int32",
    "uint32",
    "int64",
    "float64",
    "string",
    "bytes",
    "records",
    "uuid",
}
FIXED = {"bool", "int8", "int16", "uint16", "int32", "uint32", "int64", "float64"}
MAX_VERSION = 0x7FFF

Versions = tuple[int, int] | None  # inclusive range, None = never


def parse_versions(spec: str | None) -> Versions:
    if spec is None or spec == "none":
        return None
    if spec.endswith("+"):
        return int(spec[:-1]), MAX_VERSION
    lo, _, hi = spec.partition("-")
    return int(lo), int(hi or lo)


def in_range(r: Versions, v: int) -> bool:
    return r is not None and r[0] <= v <= r[1]


def strip_comments(text: str) -> str:
    """Drop ``//`` comments that are outside JSON strings."""
    out: list[str] = []
    i, n, in_str = 0, len(text), False
    while i < n:
        c = text[i]
        if in_str:
            out.append(c)
            if c == "\\":
                out.append(text[i + 1])
                i += 1
            elif c == '"':
                in_str = False
        elif c == '"':
            in_str = True
            out.append(c)
        elif text.startswith("//", i):
            while i < n and text[i] != "\n":
                i += 1
            continue
        else:
            out.append(c)
        i += 1
    return "".join(out)


def snake(name: str) -> str:
    s = re.sub(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])", "_", name).lower()
    return s + "_" if keyword.iskeyword(s) else s


@dataclass
class Field:
    name: str  # schema name, CamelCase
    type: str  # schema type, e.g. "int32", "[]Topic", "Cursor"
    versions: Versions
    nullable: Versions
    tagged: Versions
    tag: int | None
    default: Any  # raw schema default (string) or None
    # Per-field "flexibleVersions" override (only RequestHeader.ClientId uses it: "none").
    flexible_override: bool
    flexible_versions: Versions
    struct: StructDef | None = None  # resolved element/struct type

    @property
    def attr(self) -> str:
        return snake(self.name)

    @property
    def is_array(self) -> bool:
        return self.type.startswith("[]")

    @property
    def elem(self) -> str:
        return self.type[2:] if self.is_array else self.type

    def present(self, v: int) -> bool:
        return in_range(self.versions, v)

    def is_tagged(self, v: int) -> bool:
        return in_range(self.tagged, v)

    def is_nullable(self, v: int) -> bool:
        return in_range(self.nullable, v)

    @property
    def ever_nullable(self) -> bool:
        return self.nullable is not None or self.default_is_null

    @property
    def default_is_null(self) -> bool:
        return self.default == "null" or (self.type == "records" and self.default is None)


@dataclass
class StructDef:
    name: str  # schema name
    fields: list[Field]
    versions: Versions
    class_name: str = ""
    children: list[StructDef] = field(default_factory=list)


@dataclass
class MessageDef:
    name: str
    kind: str  # request, response, header, data
    api_key: int | None
    valid: tuple[int, int]
    flexible: Versions
    listeners: list[str]
    unstable_latest: bool
    root: StructDef
    path: Path


def _parse_fields(raw: list[dict[str, Any]], commons: dict[str, StructDef]) -> list[Field]:
    fields = []
    for f in raw:
        fd = Field(
            name=f["name"],
            type=f["type"],
            versions=parse_versions(f.get("versions")),
            nullable=parse_versions(f.get("nullableVersions")),
            tagged=parse_versions(f.get("taggedVersions")),
            tag=f.get("tag"),
            default=f.get("default"),
            flexible_override="flexibleVersions" in f,
            flexible_versions=parse_versions(f.get("flexibleVersions")),
        )
        if fd.elem not in PRIMITIVES:
            if "fields" in f:
                fd.struct = StructDef(fd.elem, _parse_fields(f["fields"], commons), fd.versions)
            elif fd.elem in commons:
                fd.struct = commons[fd.elem]
            else:
                raise ValueError(f"unknown struct type {fd.type!r} for field {fd.name}")
        fields.append(fd)
    return fields


def load_message(path: Path, text: str | None = None) -> MessageDef | None:
    """The message in ``path`` (or ``text``, read from ``path`` in a jar); None for one Kafka
    has retired (``validVersions: none``: the inter-broker RPCs KRaft replaced, kept in the
    jar as tombstones)."""
    d = json.loads(strip_comments(path.read_text() if text is None else text))
    if d.get("validVersions") == "none":
        return None
    commons: dict[str, StructDef] = {}
    # Common structs may refer to each other in any order: create them all, then fill in.
    raw_commons = d.get("commonStructs", [])
    for cs in raw_commons:
        commons[cs["name"]] = StructDef(cs["name"], [], parse_versions(cs["versions"]))
    for cs in raw_commons:
        commons[cs["name"]].fields = _parse_fields(cs["fields"], commons)
    valid = parse_versions(d["validVersions"])
    assert valid is not None
    root = StructDef(d["name"], _parse_fields(d["fields"], commons), valid)
    return MessageDef(
        name=d["name"],
        kind=d["type"],
        api_key=d.get("apiKey"),
        valid=valid,
        flexible=parse_versions(d["flexibleVersions"]),
        listeners=d.get("listeners", []),
        unstable_latest=bool(d.get("latestVersionUnstable", False)),
        root=root,
        path=path,
    )


#: Where a kafka-clients jar keeps the message schemas.
JAR_SCHEMAS = "common/message/"


def has_schemas(source: Path) -> bool:
    """Whether ``source`` is a directory of schemas or a jar that carries them."""
    if source.is_dir():
        return any(source.glob("*.json"))
    if source.is_file() and zipfile.is_zipfile(source):
        with zipfile.ZipFile(source) as jar:
            return any(_is_schema(n) for n in jar.namelist())
    return False


def _is_schema(name: str) -> bool:
    return name.startswith(JAR_SCHEMAS) and name.endswith(".json") and name.count("/") == 2


def load_all(source: Path) -> list[MessageDef]:
    """Every live message of ``source``: a directory of Kafka's JSON schemas, or a
    kafka-clients jar (they are under ``common/message/`` there)."""
    if source.is_dir():
        loaded = [load_message(p) for p in sorted(source.glob("*.json"))]
    else:
        with zipfile.ZipFile(source) as jar:
            names = sorted(n for n in jar.namelist() if _is_schema(n))
            loaded = [load_message(Path(n), jar.read(n).decode()) for n in names]
    return [m for m in loaded if m is not None]
