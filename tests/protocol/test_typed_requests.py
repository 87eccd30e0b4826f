"""Generated requests carry their response type; the messages package imports lazily.

``FooRequest(ApiRequest[FooResponse])`` is what lets ``Connection.send``/``Cluster.request``
return ``FooResponse`` to a type checker; the package ``__init__`` resolves names and API
keys on first use, so a client imports only the API modules it uses.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
import typing
from pathlib import Path

import pytest

from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
from aiokafka_ng.protocol.primitives import ApiRequest

ROOT = Path(__file__).resolve().parents[2]


def _run_python(code: str) -> str:
    """Run ``code`` in a fresh interpreter (imports start from nothing); return stdout."""
    proc = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_every_request_names_its_response_in_its_base() -> None:
    assert len(REQUEST_TYPES) >= 70
    for key, request in REQUEST_TYPES.items():
        bases = [b for b in request.__orig_bases__ if typing.get_origin(b) is ApiRequest]
        assert len(bases) == 1, request
        (response,) = typing.get_args(bases[0])
        assert response is request.RESPONSE_TYPE is RESPONSE_TYPES[key], request
        assert response.API_KEY == request.API_KEY == key


def test_tables_and_names_import_a_module_only_when_asked() -> None:
    out = _run_python(
        """
        import sys

        def loaded():
            prefix = "aiokafka_ng.protocol.messages."
            return sorted(m[len(prefix):] for m in sys.modules if m.startswith(prefix))

        from aiokafka_ng.protocol import messages
        from aiokafka_ng.protocol.messages import REQUEST_TYPES, RESPONSE_TYPES
        print(loaded())
        # Keys, membership and size need no module.
        print(len(REQUEST_TYPES), 3 in RESPONSE_TYPES, 9999 in REQUEST_TYPES,
              0 in list(REQUEST_TYPES))
        print(loaded())
        print(RESPONSE_TYPES[3].__name__, RESPONSE_TYPES.get(9999))
        print(loaded())
        from aiokafka_ng.protocol.messages import DescribeAclsRequest
        print(DescribeAclsRequest.__module__, loaded())
        from aiokafka_ng.protocol.messages import fetch  # a submodule, not a class name
        print(fetch.FetchRequest is messages.FetchRequest, loaded())
        try:
            RESPONSE_TYPES[9999]
        except KeyError as exc:
            print("KeyError", exc)
        try:
            from aiokafka_ng.protocol.messages import NoSuchRequest
        except ImportError as exc:
            print("ImportError", "NoSuchRequest" in str(exc))
        """
    )
    assert out.splitlines() == [
        "[]",
        f"{len(REQUEST_TYPES)} True False True",
        "[]",
        "MetadataResponse None",
        "['metadata']",
        "aiokafka_ng.protocol.messages.describe_acls ['describe_acls', 'metadata']",
        "True ['describe_acls', 'fetch', 'metadata']",
        "KeyError 9999",
        "ImportError True",
    ]


def test_importing_the_producer_loads_few_api_modules() -> None:
    # It used to load every API module (74 of the package's 75) through messages/__init__.
    out = _run_python(
        """
        import sys
        from aiokafka_ng import Producer
        prefix = "aiokafka_ng.protocol.messages."
        print(" ".join(sorted(m[len(prefix):] for m in sys.modules if m.startswith(prefix))))
        """
    )
    loaded = set(out.split())
    assert {"produce", "metadata", "api_versions"} <= loaded
    # Nothing a producer never sends: consumer, group and admin APIs stay unloaded.
    assert not loaded & {"fetch", "join_group", "create_topics", "describe_acls", "share_fetch"}
    assert len(loaded) < len(REQUEST_TYPES) // 4, sorted(loaded)


@pytest.mark.slow
def test_type_checkers_see_the_response_type(tmp_path: Path) -> None:
    snippet = tmp_path / "snippet.py"
    snippet.write_text(
        textwrap.dedent(
            """
            from aiokafka_ng.cluster import Cluster
            from aiokafka_ng.net.connection import Connection
            from aiokafka_ng.protocol.messages import MetadataRequest, ProduceRequest
            from aiokafka_ng.protocol.messages import MetadataRequst

            async def f(conn: Connection, cluster: Cluster, acks: int) -> None:
                reveal_type(await conn.send(MetadataRequest()))
                reveal_type(await conn.send(ProduceRequest(), expect_response=acks != 0))
                reveal_type(await cluster.request(1, MetadataRequest()))
                reveal_type(await cluster.request_any(MetadataRequest()))
                pending = await conn.submit(ProduceRequest(), expect_response=acks != 0)
                reveal_type(await pending.wait())
            """
        )
    )
    proc = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--config-file=", str(snippet)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    lines = proc.stdout.splitlines()
    revealed = [line.split("Revealed type is ")[1] for line in lines if "Revealed type" in line]
    metadata = '"aiokafka_ng.protocol.messages.metadata.MetadataResponse"'
    produce = '"aiokafka_ng.protocol.messages.produce.ProduceResponse | None"'
    assert revealed == [metadata, produce, metadata, metadata, produce], proc.stdout
    errors = [line for line in lines if ": error:" in line]
    # A misspelt name is an error (the package's lazy __getattr__ is hidden from mypy).
    assert len(errors) == 1 and '"MetadataRequst"' in errors[0], proc.stdout
