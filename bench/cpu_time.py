"""CPU seconds used so far, from ``/proc`` (Linux): a process's, and the whole machine's.
Shared by the benchmark scripts; 0.0 where ``/proc`` is missing, so the scripts still run."""

from __future__ import annotations

import os


def process_cpu(pid: int | None) -> float:
    """CPU seconds (user + system) process ``pid`` has used so far."""
    if pid is None:
        return 0.0
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def machine_cpu() -> float:
    """CPU seconds every process together has used so far (all but idle and iowait)."""
    try:
        with open("/proc/stat") as f:
            fields = f.readline().split()[1:]
    except OSError:
        return 0.0
    busy = sum(int(x) for x in fields[:8]) - int(fields[3]) - int(fields[4])
    return busy / os.sysconf("SC_CLK_TCK")
