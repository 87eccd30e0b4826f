"""Hypothesis profiles for the codec tests: ``HYPOTHESIS_PROFILE=fuzz`` runs many more examples."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz",
    max_examples=5000,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
if os.environ.get("HYPOTHESIS_PROFILE") == "fuzz":
    settings.load_profile("fuzz")
