"""A running summary of request round-trip times, for clients' statistics snapshots."""

from __future__ import annotations

__all__ = ["LatencyRecorder"]


class LatencyRecorder:
    """Count, mean and maximum of recorded durations; O(1) memory, cheap per sample."""

    __slots__ = ("_count", "_max", "_total")

    def __init__(self) -> None:
        self._count = 0
        self._total = 0.0
        self._max = 0.0

    def record(self, seconds: float) -> None:
        self._count += 1
        self._total += seconds
        if seconds > self._max:
            self._max = seconds

    def snapshot(self) -> dict[str, float]:
        """``{"count": n, "avg": ms, "max": ms}`` (zeros before the first sample)."""
        avg = self._total / self._count if self._count else 0.0
        return {"count": self._count, "avg": avg * 1000, "max": self._max * 1000}
