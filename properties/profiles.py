"""Hypothesis profiles: ``ci`` (default; fast, derandomized) and ``deep`` (many more examples).

Choose with ``HYPOTHESIS_PROFILE=deep`` (``make deep``). The example database lives in
``.hypothesis/``, which git ignores.
"""

from __future__ import annotations

import os
from typing import Any

from hypothesis import HealthCheck, settings

settings.register_profile(
    "ci",
    max_examples=200,
    derandomize=True,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile(
    "deep",
    max_examples=20_000,
    deadline=None,
    print_blob=True,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.register_profile("dev", max_examples=50, deadline=None)


def fixed(**options: Any) -> settings:
    """Settings for a run that must go the same way every time and be judged by itself alone
    (the bench's speed measurement, a bug hunt): derandomized, no example database, no deadline,
    no health check; ``options`` add the run's own (examples, steps, phases)."""
    return settings(derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck), **options)


def load() -> str:
    """Load the profile named by ``HYPOTHESIS_PROFILE`` (default ``ci``) and return its name."""
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    settings.load_profile(name)
    return name
