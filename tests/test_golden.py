"""The simulator does what the implementation before the state redesign did: the same trace and the
same observation at every step of seeded random walks (every historical-bug variant and fix, on all
three stores, faults included) and of seeded faulty simulations, as recorded on that implementation
(tests/golden.py says how)."""

from __future__ import annotations

import pytest

from tests import golden

RECORDED = golden.load()


@pytest.mark.parametrize("name", sorted(golden.runs()))
def test_a_recorded_run_takes_the_same_steps_and_observes_the_same(name: str) -> None:
    kept = golden.make(golden.runs()[name])
    wanted = RECORDED[name]
    assert len(kept) == len(wanted), f"{name}: {len(kept)} checkpoints, recorded {len(wanted)}"
    first = next((i for i, (a, b) in enumerate(zip(kept, wanted, strict=True)) if a != b), None)
    assert first is None, f"{name}: differs from step {first * golden.EVERY} on (checkpoint {first})"
