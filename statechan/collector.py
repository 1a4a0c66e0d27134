"""The cycle collector's pace during long loops over immutable states.

A search or a simulated day makes many small containers (a step's drafts, records, tuples) that die
young and are never part of a cycle: the collector's youngest generation, run every 700
allocations by default, would find nothing to free and costs about a tenth of such a loop. Both
run it less often while they loop, and put the caller's setting back (worker processes inherit it).
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager

YOUNGEST = 50_000
"""Allocations between two runs of the youngest generation while a loop runs."""


def fewer(youngest: int = YOUNGEST) -> tuple[int, int, int]:
    """Run the youngest generation at most every ``youngest`` allocations from now on (a caller that
    already runs it less often keeps its setting); the setting before, for ``gc.set_threshold``."""
    setting = gc.get_threshold()
    gc.set_threshold(max(setting[0], youngest), *setting[1:])
    return setting


@contextmanager
def fewer_collections(youngest: int = YOUNGEST) -> Iterator[None]:
    """:func:`fewer` inside the block, the caller's setting back after it."""
    setting = fewer(youngest)
    try:
        yield
    finally:
        gc.set_threshold(*setting)
