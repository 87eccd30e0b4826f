"""Count the tests' reaches into private names, against a baseline that may only go down.

A reach is ``name._attr`` in a test file, ``name`` not ``self`` or ``cls`` and ``_attr`` a
single-underscore name: ``producer._acc``, ``aiokafka_ng.testing._kafka_procs``. A test that
reaches into the wiring breaks at every redesign and proves nothing a user relies on
(STYLE.md rule 17): tests go through the public API, the engines' interfaces and the hooks
of ``aiokafka_ng.testing``. The reaches left are counted per file in
``tests/private_reaches.txt``; ``--check`` (run by tests/test_quality.py) fails when a file
has more than its baseline -- a new reach -- and when it has fewer, so that the baseline
is lowered with the change that removed them (``--write``) and cannot creep back up.

    python tools/private_reaches.py            # the counts, most first
    python tools/private_reaches.py --check    # compare with the baseline
    python tools/private_reaches.py --write    # write the baseline
"""

from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = ROOT / "tests"
BASELINE = TESTS / "private_reaches.txt"

_REACH = re.compile(r"\b([A-Za-z_][A-Za-z0-9_]*)\._[a-z][A-Za-z0-9_]*")


def reaches(path: Path) -> list[tuple[int, str]]:
    """Each reach in ``path``: its line number and the reach itself (comments skipped)."""
    out: list[tuple[int, str]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        code = line.split("#", 1)[0]
        out.extend(
            (number, match.group(0))
            for match in _REACH.finditer(code)
            if match.group(1) not in ("self", "cls")
        )
    return out


def count_all() -> dict[str, list[tuple[int, str]]]:
    found = {}
    for path in sorted(TESTS.rglob("*.py")):
        hits = reaches(path)
        if hits:
            found[path.relative_to(ROOT).as_posix()] = hits
    return found


def read_baseline() -> dict[str, int]:
    if not BASELINE.exists():
        return {}
    out = {}
    for line in BASELINE.read_text(encoding="utf-8").splitlines():
        if line.strip() and not line.startswith("#"):
            count, path = line.split(maxsplit=1)
            out[path] = int(count)
    return out


def write_baseline(found: dict[str, list[tuple[int, str]]]) -> None:
    lines = [
        "# Reaches into private names per test file: may only go down (tools/private_reaches.py).",
        *(f"{len(hits)} {path}" for path, hits in sorted(found.items())),
    ]
    BASELINE.write_text("\n".join(lines) + "\n", encoding="utf-8")


def problems(found: dict[str, list[tuple[int, str]]], baseline: dict[str, int]) -> list[str]:
    out = []
    for path in sorted(set(found) | set(baseline)):
        hits, allowed = found.get(path, []), baseline.get(path, 0)
        if len(hits) > allowed:
            listed = ", ".join(f"line {n}: {text}" for n, text in hits)
            out.append(
                f"{path}: {len(hits)} reaches into private names, {allowed} allowed ({listed}); "
                "use the public API or a hook of aiokafka_ng.testing instead (STYLE.md rule 17)"
            )
        elif len(hits) < allowed:
            out.append(
                f"{path}: {len(hits)} reaches, the baseline says {allowed}: lower it with "
                "`python tools/private_reaches.py --write`, so they cannot come back"
            )
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--check", action="store_true", help="compare with the baseline")
    action.add_argument("--write", action="store_true", help="write the baseline")
    args = parser.parse_args(argv)
    found = count_all()
    if args.write:
        write_baseline(found)
        return 0
    if args.check:
        found_problems = problems(found, read_baseline())
        for problem in found_problems:
            print(problem)
        return 1 if found_problems else 0
    for path, hits in sorted(found.items(), key=lambda item: -len(item[1])):
        print(f"{len(hits):4} {path}")
    print(f"{sum(len(h) for h in found.values()):4} in all")
    return 0


if __name__ == "__main__":
    sys.exit(main())
