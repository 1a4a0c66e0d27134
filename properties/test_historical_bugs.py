"""Historical bugs as proof that the bench is worth running.

For each variant that puts a fixed Pulsar bug back, the bench (derandomized: a fixed seed, the
hunt's example budget) finds a run breaking the bug's invariant; the shrunk counterexamples saved
in ``docs/counterexamples/`` still break it on the variant and break nothing on the current
protocol.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.bench import history_violations_of, timeline_check
from properties.hunts import HUNTS, Hunt, _recorded, hunt
from statechan.cluster import Cluster, SimConfig
from statechan.cluster.actions import Action
from statechan.cluster.config import VARIANTS
from statechan.cluster.runfile import load_saved_run

DOCS = Path(__file__).resolve().parent.parent / "docs"


BENCH_HUNTS = [h for h in HUNTS if not h.checker_only]
SHADOWED: dict[str, str] = {}
"""Variants the current protocol's own finding hides at every bound tried (an expected failure until
the finding is settled)."""
HUNT_SHADOWED: dict[str, str] = {**SHADOWED}
"""Variants whose hunt is an expected failure (their saved run may still tell them apart)."""


def _param(h: Hunt, shadowed: dict[str, str] = SHADOWED) -> object:
    marks = [pytest.mark.xfail(strict=True, reason=shadowed[h.variant])] if h.variant in shadowed else []
    return pytest.param(h, id=f"#{h.variant}", marks=marks)


@pytest.mark.parametrize("h", [_param(h, HUNT_SHADOWED) for h in BENCH_HUNTS])
def test_the_bench_finds_the_bug(h: Hunt) -> None:
    failure = hunt(h, shrink=False)
    assert failure is not None, f"#{h.variant} not found within {h.max_examples} examples"
    assert set(failure.invariants) & set(h.expect), str(failure)


def broken_by(config: SimConfig, actions: list[Action], picks: list[int] | None = None) -> set[str]:
    """The invariants a replay breaks (the starting state's, then the cluster and step invariants at
    each step, the histories at the end); a step the protocol cannot take ends the replay. A
    checker's run carries its placement choices (``picks``)."""
    cluster = Cluster(config, picks=list(picks)) if picks else Cluster(config)
    stepwise = timeline_check()
    stepwise.start(cluster)
    found = stepwise(cluster)  # the starting state (#21894 breaks it before any step)
    for action in actions:
        if found:
            break
        try:
            cluster.step(action)
        except ValueError:
            break
        found = stepwise(cluster)
    if found:
        return {text.split(" ")[0].rstrip(":") for text in found}
    return {v.invariant for v in history_violations_of(cluster)}


@pytest.mark.parametrize("h", [_param(h) for h in HUNTS])
def test_the_documented_counterexample_breaks_the_variant_only(h: Hunt) -> None:
    path = DOCS / "counterexamples" / f"{h.variant}.json"
    assert path.exists(), f"run `python -m properties.hunts --write docs` to save #{h.variant}'s counterexample"
    assert f"## #{h.variant}:" in (DOCS / "counterexamples.md").read_text(encoding="utf-8")
    saved = load_saved_run(path)
    config, actions, picks = saved.config, saved.actions, saved.picks
    assert config.variant == VARIANTS[h.variant]
    assert broken_by(config, actions, picks) & set(h.expect)
    fixed = config.model_copy(update={"variant": VARIANTS["current"]})
    assert broken_by(fixed, actions, picks) == set()


def test_a_partial_rewrite_keeps_every_other_recorded_run() -> None:
    """``--only`` re-hunts one bug and copies the others' rows and sections from the page as they
    are: each must be found whole, and only its own."""
    page = (DOCS / "counterexamples.md").read_text(encoding="utf-8")
    for h in HUNTS:
        kept = _recorded(page, h.variant)
        assert kept is not None, f"#{h.variant}: no row or section on the page"
        row, section = kept
        assert row.startswith(f"| [#{h.variant}](")
        assert section[0].startswith(f"## #{h.variant}:")
        assert sum(line.startswith("## ") for line in section) == 1, f"#{h.variant}: took the next section too"
        assert "```text" in section
        assert section[-2] == "```"
    assert _recorded(page, "99999") is None
