"""Fuzz budgets and the byte mutator.

Budgets: a few thousand inputs in the normal (CI) run, over 100k with
``HYPOTHESIS_PROFILE=fuzz`` (``nox -s fuzz``), a tenth of the CI budget with
``HYPOTHESIS_PROFILE=sanitize`` (the sanitizer run inside the normal suite, see
``tests/sanitizer.py``: ASan makes every example several times slower). Tests count what
they decode in ``INPUTS``.
"""

from __future__ import annotations

import os
from collections import Counter

from hypothesis import strategies as st

FUZZ = os.environ.get("HYPOTHESIS_PROFILE") == "fuzz"
SANITIZE = os.environ.get("HYPOTHESIS_PROFILE") == "sanitize"
INPUTS: Counter[str] = Counter()


def budget(ci: int, fuzz: int) -> int:
    """Examples per test: ``ci`` normally, ``fuzz`` under ``HYPOTHESIS_PROFILE=fuzz``, a
    tenth of ``ci`` (at least 10) under ``HYPOTHESIS_PROFILE=sanitize``."""
    if FUZZ:
        return fuzz
    return max(ci // 10, 10) if SANITIZE else ci


#: Planted at random places: huge/negative 32-bit lengths, an overlong varint, zeros, and
#: ten-byte varints of 2**63-1, -2**63 and of a value past 64 bits (issue 34: lengths and
#: deltas at the int64 edges).
_PLANTS = (
    b"\x7f\xff\xff\xff",
    b"\xff\xff\xff\xff",
    b"\x80\x80\x80\x80\x08",
    b"\x00\x00\x00\x00",
    b"\xfe" + b"\xff" * 8 + b"\x01",
    b"\xff" * 9 + b"\x01",
    b"\x80" * 9 + b"\x7f",
)


def mutate(data: st.DataObject, buf: bytearray) -> bytearray:
    """Apply 1-4 random edits to ``buf`` (in place): set a byte, insert, delete, truncate,
    or plant one of ``_PLANTS``."""
    for _ in range(data.draw(st.integers(1, 4), label="mutations")):
        pos = data.draw(st.integers(0, len(buf)), label="pos")
        op = data.draw(st.sampled_from(["set", "insert", "delete", "truncate", "plant"]))
        if op == "set" and pos < len(buf):
            buf[pos] = data.draw(st.integers(0, 255))
        elif op == "insert":
            buf[pos:pos] = data.draw(st.binary(min_size=1, max_size=6))
        elif op == "delete":
            del buf[pos : pos + data.draw(st.integers(1, 4))]
        elif op == "truncate":
            del buf[pos:]
        else:
            patch = data.draw(st.sampled_from(_PLANTS))
            buf[pos : pos + len(patch)] = patch
    return buf
