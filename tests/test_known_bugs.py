"""Every fixed Pulsar bug the model puts back is found by the model checker at its documented bound,
with a counterexample that replays and breaks one of the bug's invariants, while the current
protocol (every switch off) is clean at that same bound. The bounds are in
``statechan.known_bugs.KNOWN_BUGS`` and docs/bench.md; the bigger ones run in ``make bench``-like
sessions, not here."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from statechan.cli import app
from statechan.cluster.config import VARIANTS
from statechan.cluster.runfile import load_run
from statechan.invariants.catalogue import CATALOGUE
from statechan.known_bugs import KNOWN_BUGS, KnownBug, known_bug

runner = CliRunner()
SMALL = [bug for bug in KNOWN_BUGS if bug.small]


@pytest.mark.parametrize("bug", SMALL, ids=[f"#{b.variant}" for b in SMALL])
def test_the_checker_finds_the_bug_and_the_current_protocol_is_clean_at_its_bound(bug: KnownBug) -> None:
    found = bug.check()
    assert found.violation is not None, f"#{bug.variant} not found at {bug.command()}"
    assert found.violation.split(" ")[0].split(":")[0] in bug.breaks, found.violation
    current = bug.check("current")
    assert current.within_bound, f"the current protocol's search at {bug.command()} stopped: {current.stopped}"
    assert current.ok, (current.violation, current.liveness)


@pytest.mark.parametrize("bug", SMALL, ids=[f"#{b.variant}" for b in SMALL])
def test_the_command_line_exits_1_and_its_saved_run_replays_on_the_variant_only(bug: KnownBug, tmp_path: Path) -> None:
    saved = tmp_path / f"{bug.variant}.json"
    out = runner.invoke(app, ["check", "--variant", bug.variant, *bug.options(), "--save-run", str(saved)])
    assert out.exit_code == 1, out.output
    assert any(invariant in out.output for invariant in bug.breaks), out.output
    replayed = runner.invoke(app, ["replay", str(saved), "--quiet"])
    assert replayed.exit_code == 1, replayed.output
    config, _actions, _note = load_run(saved)
    assert config.variant == VARIANTS[bug.variant]


def test_partial_order_reduction_finds_each_bug_the_full_search_finds() -> None:
    """The reduced search breaks an invariant exactly when the full one does. Its counterexample is
    as long, or longer by deliveries a crash absorbs (a crashed broker's view is not in the state, so
    the reduction may deliver before the crash what the full search never delivers: docs/por.md)."""
    for bug in SMALL:
        if bug.store.value != "system-topic":
            continue
        reduced, full = bug.check(), bug.check(por=False)
        assert (reduced.violation is None) == (full.violation is None), bug.variant
        assert len(full.path) <= len(reduced.path), bug.variant
        if len(reduced.path) > len(full.path):
            assert any(action.kind == "crash" for action in reduced.path), bug.variant


def test_every_bug_names_known_invariants_and_a_variant_and_is_listed_once() -> None:
    assert len({b.variant for b in KNOWN_BUGS}) == len(KNOWN_BUGS)
    for bug in KNOWN_BUGS:
        assert bug.variant in VARIANTS
        assert set(bug.breaks) <= set(CATALOGUE), bug.breaks
        assert set(bug.skip) <= set(CATALOGUE)
        assert bug.command().startswith(f"statechan check --variant {bug.variant}")
    with pytest.raises(KeyError, match="no known bug"):
        known_bug("1")
    assert known_bug("21721").catalogue == "B30"
