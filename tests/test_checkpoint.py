"""The compact search's checkpoints: a run interrupted after a level and resumed from its folder
finds what one uninterrupted run finds (states, transitions, coverage, verdict, counterexample,
liveness), in one process or several; a checkpoint of another run, or one this process
fingerprints otherwise, is refused with the reason."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from statechan.checker import Bounds, CheckResult, check
from statechan.checker.checkpoint import CHECKPOINT, CheckpointError, hashing_probe, repeatable_hashing
from statechan.checker.compact import Level, LevelReport
from statechan.cluster import StoreKind

ROOT = Path(__file__).resolve().parent.parent


class _Interrupted(Exception):
    """Stands for a run killed once a level is saved."""


def _interrupt_at(depth: int) -> LevelReport:
    def on_level(level: Level) -> None:
        if level.depth == depth:
            raise _Interrupted

    return on_level


def _same(resumed: CheckResult, whole: CheckResult) -> None:
    assert (resumed.states, resumed.transitions, resumed.depth) == (whole.states, whole.transitions, whole.depth)
    assert resumed.levels == whole.levels
    assert resumed.coverage == whole.coverage
    assert (resumed.violation, resumed.liveness, resumed.complete) == (whole.violation, whole.liveness, whole.complete)
    assert [a.describe() for a in resumed.path] == [a.describe() for a in whole.path]
    assert resumed.picks == whole.picks
    assert (resumed.reduced, resumed.por_blockers) == (whole.reduced, whole.por_blockers)


@pytest.mark.parametrize(
    ("bounds", "store", "variant", "depth", "workers"),
    [
        (Bounds(), StoreKind.system_topic, "current", 6, 1),
        (Bounds(brokers=3), StoreKind.system_topic, "current", 11, 2),
        (
            Bounds(brokers=2, bundles=1, lookups=1, admin=1, ticks=2, crashes=1, restarts=1),
            StoreKind.system_topic,
            "25379",
            5,
            1,
        ),
        (Bounds(brokers=2, bundles=1, lookups=1, admin=0, ticks=1), StoreKind.metadata_store, "current", 4, 1),
    ],
    ids=["default", "3-brokers-2-workers", "bug-25379", "metadata-store"],
)
def test_a_run_interrupted_after_a_level_resumes_to_what_one_run_finds(
    bounds: Bounds, store: StoreKind, variant: str, depth: int, workers: int, tmp_path: Path
) -> None:
    whole = check(bounds, store, variant, workers=workers)
    with pytest.raises(_Interrupted):
        check(
            bounds,
            store,
            variant,
            workers=workers,
            checkpoint=tmp_path,
            checkpoint_every_s=0,
            on_level=_interrupt_at(depth),
        )
    assert (tmp_path / CHECKPOINT).is_file()
    notes: list[str] = []
    resumed = check(bounds, store, variant, workers=workers, checkpoint=tmp_path, resume=True, note=notes.append)
    assert any(n.startswith(f"resuming from {tmp_path}") and f"depth {depth}," in n for n in notes), notes
    _same(resumed, whole)


def test_only_the_newest_checkpoint_is_kept_and_a_new_run_leaves_it_alone(tmp_path: Path) -> None:
    with pytest.raises(_Interrupted):
        check(Bounds(), checkpoint=tmp_path, checkpoint_every_s=0, on_level=_interrupt_at(8))
    kept = sorted(p.name for p in tmp_path.iterdir())
    assert len(kept) == 2
    assert kept[0] == CHECKPOINT
    assert kept[1].startswith("point-8-")
    with pytest.raises(CheckpointError, match="holds a run already: resume it"):
        check(Bounds(), checkpoint=tmp_path)
    with pytest.raises(CheckpointError, match="is not a folder"):
        check(Bounds(), checkpoint=tmp_path / CHECKPOINT)
    assert sorted(p.name for p in tmp_path.iterdir()) == kept


def test_a_checkpoint_of_another_run_or_none_is_refused(tmp_path: Path) -> None:
    with pytest.raises(CheckpointError, match="holds no checkpoint"):
        check(Bounds(), checkpoint=tmp_path, resume=True)
    with pytest.raises(_Interrupted):
        check(Bounds(), checkpoint=tmp_path, checkpoint_every_s=0, on_level=_interrupt_at(3))
    with pytest.raises(CheckpointError, match="another bound, store, variant or option set"):
        check(Bounds(ticks=1), checkpoint=tmp_path, resume=True)
    with pytest.raises(CheckpointError, match="another bound, store, variant or option set"):
        check(Bounds(), variant="25379", checkpoint=tmp_path, resume=True)


def test_a_checkpoint_whose_states_fingerprint_otherwise_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A resumed run fingerprints saved states again: a build whose fingerprints differ (here every
    state's canonical hash shifted by one) cannot go on with the table, and says so."""
    import statechan.checker as checker

    with pytest.raises(_Interrupted):
        check(Bounds(), checkpoint=tmp_path, checkpoint_every_s=0, on_level=_interrupt_at(4))
    digest = checker.Fingerprinter.digest
    monkeypatch.setattr(checker.Fingerprinter, "digest", staticmethod(lambda hashed: digest(hashed ^ 1)))
    with pytest.raises(CheckpointError, match="fingerprints otherwise in this process"):
        check(Bounds(), checkpoint=tmp_path, resume=True)


def test_a_process_with_random_hashes_is_told_that_only_it_can_resume(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("PYTHONHASHSEED", raising=False)
    assert repeatable_hashing() is not None
    notes: list[str] = []
    check(Bounds(ticks=1), checkpoint=tmp_path, checkpoint_every_s=0, note=notes.append)
    assert any(n.startswith("only this process can resume its checkpoints: PYTHONHASHSEED is not set") for n in notes)


def _statechan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "statechan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "COLUMNS": "200", **(env or {})},
        check=False,
        timeout=300,
    )


def _counts(out: str) -> tuple[int, int]:
    found = re.search(r"([\d,]+) distinct states .*?, ([\d,]+) transitions", out)
    assert found is not None, out
    return int(found[1].replace(",", "")), int(found[2].replace(",", ""))


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="repeatable hashing is set up on Linux")
def test_the_command_stops_and_another_process_resumes_on_two_cores(tmp_path: Path) -> None:
    """``statechan check --checkpoint`` in one process (two workers, stopped by a state bound), then
    ``--resume`` in another (one worker): the counts of one uninterrupted search. The command
    starts itself with repeatable hashing; a process hashing otherwise is refused."""
    whole = check(Bounds(brokers=3))
    folder = tmp_path / "run"
    bound = ["check", "--brokers", "3"]
    first = _statechan(
        *bound, "--workers", "2", "--checkpoint", str(folder), "--checkpoint-every", "0", "--max-states", "2000"
    )
    assert first.returncode == 0, first.stdout + first.stderr
    assert "not a proof: stopped at the state bound 2,000" in first.stdout
    assert "checkpoint at depth" in first.stdout
    assert _counts(first.stdout)[0] == 2000
    other = _statechan(*bound, "--resume", str(folder), env={"PYTHONHASHSEED": "7"})
    assert other.returncode == 2
    assert "hashes differently from the one that wrote" in other.stderr
    resumed = _statechan(*bound, "--resume", str(folder))
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert "resuming from" in resumed.stdout
    assert _counts(resumed.stdout) == (whole.states, whole.transitions)


def test_the_probe_tells_hash_seeds_apart() -> None:
    """What the checkpoint records of a process's hashing changes with the seed (so a resumed run
    with another seed is refused before it merges states wrongly)."""
    script = "from statechan.checker.checkpoint import hashing_probe; print(hashing_probe()[1])"
    seeds = {
        seed: subprocess.run(
            [sys.executable, "-c", script],
            capture_output=True,
            text=True,
            env={**os.environ, "PYTHONHASHSEED": seed},
            check=True,
        ).stdout
        for seed in ("0", "1")
    }
    assert seeds["0"] != seeds["1"]
    assert isinstance(hashing_probe()[0], int)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--graph", "g.dot"], "--graph"),
        (["--verify-fingerprints"], "--verify-fingerprints"),
        (["--swarm", "5"], "--swarm"),
    ],
)
def test_checkpoint_options_that_do_not_go_with_the_compact_search_are_named(
    extra: list[str], named: str, tmp_path: Path
) -> None:
    from typer.testing import CliRunner

    from statechan.cli import app

    done = CliRunner().invoke(app, ["check", "--checkpoint", str(tmp_path / "run"), *extra])
    assert done.exit_code == 2
    assert f"--checkpoint and --resume are the compact search's: not with {named}" in done.output
    assert not (tmp_path / "run").exists()
