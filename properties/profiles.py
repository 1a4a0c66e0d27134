"""Hypothesis profiles: ``ci`` (default; fast, derandomized) and ``deep`` (many more examples).

Choose with ``HYPOTHESIS_PROFILE=deep`` (``make deep``). The example database lives in
``.hypothesis/``, which git ignores.
"""

from __future__ import annotations

import os

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


def load() -> str:
    """Load the profile named by ``HYPOTHESIS_PROFILE`` (default ``ci``) and return its name."""
    name = os.environ.get("HYPOTHESIS_PROFILE", "ci")
    settings.load_profile(name)
    return name
