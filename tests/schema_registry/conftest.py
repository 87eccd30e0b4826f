"""Fixtures of the schema-registry tests: the Protobuf test messages, generated at test time
from protos/srtest/*.proto by grpcio-tools' protoc (so the generated code always matches the
installed protobuf runtime; nothing generated is committed); and a second registry that
takes only tokens of an OIDC identity provider (tests/kafka/oidc_server.py), started once
per session."""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from types import ModuleType
from typing import NamedTuple

import pytest

from aiokafka_ng.testing import RegistryOidc, SchemaRegistry
from tests.kafka.oidc_server import AUDIENCE, ISSUER, IdentityProvider

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


#: The OIDC clients of the identity provider: id -> secret.
OIDC_CLIENTS = {"app": "app-secret", "reader": "reader-secret"}


class OidcRegistry(NamedTuple):
    idp: IdentityProvider  # issues the tokens; counts requests per client
    registry: SchemaRegistry  # Apicurio Registry validating them against idp's JWKS


@pytest.fixture(scope="session")
def schema_registry_oidc(
    schema_registry_factory: Callable[..., SchemaRegistry],
) -> Iterator[OidcRegistry]:
    """Apicurio Registry taking only tokens of ``idp`` (issuer and audience checked), and
    basic auth as a client id and secret it trades at ``idp`` for a token."""
    idp = IdentityProvider(OIDC_CLIENTS)
    idp.start()
    try:
        registry = schema_registry_factory(
            oidc=RegistryOidc(
                jwks_url=idp.jwks_url,
                token_url=idp.token_url,
                issuer=ISSUER,
                audience=AUDIENCE,
                basic_client_credentials=True,
            )
        )
        yield OidcRegistry(idp, registry)
    finally:
        # The registry (the factory's) stops at the end of the session; until then a
        # token request it made would find no IdP, which no test does after this.
        idp.stop()
