"""Fixtures of the schema-registry tests: the Protobuf test messages, generated at test time
from protos/srtest/*.proto by grpcio-tools' protoc (so the generated code always matches the
installed protobuf runtime; nothing generated is committed)."""

from __future__ import annotations

import importlib
import sys
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pytest

PROTOS = Path(__file__).parent / "protos"


class ProtoModules(NamedTuple):
    money: ModuleType  # srtest/money.proto: Money
    shop: ModuleType  # srtest/shop.proto: Order (imports money.proto), Order.Line, OrderKey


@pytest.fixture(scope="session")
def protos(tmp_path_factory: pytest.TempPathFactory) -> ProtoModules:
    from grpc_tools import protoc  # the dev extra's grpcio-tools

    out = tmp_path_factory.mktemp("pb2")
    files = sorted(str(p.relative_to(PROTOS)) for p in PROTOS.rglob("*.proto"))
    # protoc's own include directory holds the well-known types (timestamp.proto).
    well_known = Path(protoc.__file__).parent / "_proto"
    code = protoc.main(["protoc", f"-I{PROTOS}", f"-I{well_known}", f"--python_out={out}", *files])
    assert code == 0, f"protoc failed ({code}) on {files}"
    sys.path.insert(0, str(out))
    try:
        return ProtoModules(
            importlib.import_module("srtest.money_pb2"), importlib.import_module("srtest.shop_pb2")
        )
    finally:
        sys.path.remove(str(out))
