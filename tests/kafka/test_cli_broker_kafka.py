"""``aiokafka-ng broker --kafka`` as a user runs it after the README's ``.[cli]`` install.

Issue 49 item 1: without ``trustme`` the command fetched the jars and then failed ("the SSL
listeners need trustme"), and nothing could turn TLS off. Now TLS is on only when trustme is
there (or asked for with ``--tls``); without it the cluster starts with its PLAINTEXT and
SASL_PLAINTEXT listeners and a note says how to get the others.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.kafka

ROOT = Path(__file__).resolve().parents[2]

#: The CLI with trustme made unimportable, as on an install without it.
_WITHOUT_TRUSTME = (
    "import sys; sys.modules['trustme'] = None\n"
    "from aiokafka_ng.cli import main\n"
    "sys.exit(main(sys.argv[1:]))\n"
)


def _cli_without_trustme(*args: str) -> subprocess.Popen[str]:
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), env.get("PYTHONPATH")]))
    return subprocess.Popen(
        [sys.executable, "-c", _WITHOUT_TRUSTME, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=env,
        text=True,
    )


def test_kafka_broker_without_trustme_starts_without_tls_and_says_so() -> None:
    proc = _cli_without_trustme("broker", "--kafka", "--brokers", "1")
    try:
        assert proc.stdout is not None
        printed = [proc.stdout.readline().strip() for _ in range(3)]
        assert printed[0].startswith("bootstrap_servers=127.0.0.1:"), printed
        assert printed[1].startswith("sasl_plaintext=127.0.0.1:"), printed
        assert printed[2].startswith("sasl_users="), printed
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert "ssl" not in out, out  # no SSL listener, no CA file announced
    assert "trustme is not installed" in err and "aiokafka-ng[cli]" in err, err
    assert "Traceback" not in err, err


def test_tls_asked_for_without_trustme_is_one_line_before_anything_starts() -> None:
    proc = _cli_without_trustme("broker", "--kafka", "--tls")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 1, (out, err)
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("aiokafka-ng: error: --tls needs trustme"), err
    assert out == ""  # nothing was fetched or started: no address printed
