"""``make fuzz``: each target of :mod:`tests.test_fuzz` for a stated time, with fresh random seeds
and no example database, until the time is up; prints the inputs tried per target. A failure
stops it with Hypothesis's shrunk example and exit status 1.

    python -m tests.fuzz --seconds 60
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

from hypothesis import HealthCheck, settings

settings.register_profile(
    "fuzz", max_examples=100, derandomize=False, database=None, deadline=None, suppress_health_check=list(HealthCheck)
)
settings.load_profile("fuzz")  # before the targets are imported: they take the profile loaded when they run

from tests import test_fuzz  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seconds", type=float, default=60.0, help="time per target (default 60)")
    seconds = parser.parse_args(argv).seconds
    if not 0 < seconds <= 86_400:
        parser.error("--seconds: 0 to 86,400 (a day)")
    started = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="statechan-fuzz-") as folder:
        for target in test_fuzz.TARGETS:
            before = sum(test_fuzz.TRIED.values())
            began = time.perf_counter()
            while time.perf_counter() - began < seconds:
                target(folder=Path(folder))  # a round of 100 inputs, from a fresh seed
            tried = sum(test_fuzz.TRIED.values()) - before
            spent = time.perf_counter() - began
            print(f"{target.__name__}: {tried:,} inputs in {spent:.0f} s, no failure", flush=True)
    total = sum(test_fuzz.TRIED.values())
    print(f"fuzz: {total:,} inputs over {len(test_fuzz.TARGETS)} targets in {time.perf_counter() - started:.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
