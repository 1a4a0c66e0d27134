"""Swarm verification: seeded, diversified random walks that check every invariant on every step.
It finds a historical bug's counterexample, gives the same walks for a seed on any number of
processes, and its verdict says what it cannot prove."""

from __future__ import annotations

from typer.testing import CliRunner

from statechan.checker import Bounds, check
from statechan.checker.swarm import NOT_PROVEN, swarm
from statechan.cli import app

runner = CliRunner()
FAULTS = Bounds(crashes=1, restarts=1)


def test_a_swarm_finds_bug_25379_and_its_walks_do_not_depend_on_the_processes() -> None:
    one = swarm(FAULTS, variant="25379", walks=120, seed=1)
    two = swarm(FAULTS, variant="25379", walks=120, seed=1, workers=2)
    assert one.violation is not None
    assert one.violation.startswith("in-flight-acted-on")
    assert [a.kind for a in one.path].count("crash") == 1
    assert (two.violation, two.path, two.picks, two.states, two.steps) == (
        one.violation,
        one.path,
        one.picks,
        one.states,
        one.steps,
    )
    # the shortest run a walk found is no shorter than the search's shortest
    assert len(one.path) >= len(check(FAULTS, variant="25379").path)


def test_a_clean_swarm_says_it_proves_nothing_and_covers_part_of_the_space() -> None:
    result = swarm(Bounds(), walks=60, seed=3)
    assert result.ok
    assert result.verdict.endswith(NOT_PROVEN)
    assert "liveness is not checked" in result.verdict
    assert 0 < result.states <= check(Bounds(), por=False).states
    assert swarm(Bounds(), walks=60, seed=4).steps != result.steps  # another seed, other walks


def test_the_check_command_runs_a_swarm_and_saves_its_counterexample(tmp_path: object) -> None:
    from pathlib import Path

    saved = Path(str(tmp_path)) / "swarm.json"
    args = ["check", "--variant", "25379", "--crashes", "1", "--restarts", "1", "--swarm", "80", "--seed", "1"]
    out = runner.invoke(app, [*args, "--save-run", str(saved)])
    assert out.exit_code == 1, out.output
    assert "swarm: 80 walks" in out.output
    assert "in-flight-acted-on" in out.output
    replayed = runner.invoke(app, ["replay", str(saved), "--quiet"])
    assert replayed.exit_code == 1
    assert "in-flight-acted-on" in replayed.output
    clean = runner.invoke(app, ["check", "--swarm", "20"])
    assert clean.exit_code == 0, clean.output
    assert "not a proof" in clean.output
