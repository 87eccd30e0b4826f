"""The C kernel's tests again, with the kernel built under AddressSanitizer and UBSan.

``tests/sanitizer.py`` builds ``_speedups.c``/``_column.c``/``_decode.c`` with
``-fsanitize=address,undefined -fno-sanitize-recover=all`` into a temporary directory and
runs :data:`tests.sanitizer.KERNEL_TESTS` in a child process that imports that build (the
in-place build is not touched), at a tenth of the CI hypothesis budget (about 30-50 s on
two cores). Any report -- an out-of-bounds access, a use after free, a signed overflow --
aborts the child and fails this test with the report. ``nox -s sanitize`` runs the same at
the full CI budget.
"""

from __future__ import annotations

import pytest

from tests import sanitizer


@pytest.mark.slow
def test_kernel_tests_pass_under_asan_and_ubsan() -> None:
    assert sanitizer.compiler() is not None, "gcc is needed (it builds the C kernel too)"
    done = sanitizer.run(timeout=240)
    output = done.stdout + done.stderr
    assert sanitizer.reports(output) == [], output[-6000:]
    assert done.returncode == 0, output[-6000:]
    assert " passed" in done.stdout and " failed" not in done.stdout
