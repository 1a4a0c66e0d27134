"""The search on Spark (``local[2]``) against the compact search in this process: the same states,
levels, transitions, coverage, reduction, verdict and shortest counterexample, whether a level runs
as a job of its own (expanded, asked, answered and deduplicated across partitions) or small levels
run in one task; a run interrupted after a level and resumed from its folder; the swarm's walks on
the executors; the command line."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statechan.checker import Bounds, CheckResult, check
from statechan.checker.compact import Level
from statechan.checker.swarm import swarm
from statechan.cli import app
from statechan.cluster import StoreKind

pytest.importorskip("pyspark")

from statechan.checker.sparksearch import (
    CHECKPOINT,
    LIVENESS_NOT_CHECKED,
    CheckpointMismatch,
    check_on_spark,
    start_spark,
)

pytestmark = pytest.mark.slow
runner = CliRunner()

FAULTS = Bounds(admin=0, ticks=1, crashes=1, restarts=1)
THREE = Bounds(brokers=3, admin=0, ticks=1)


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session, owned = start_spark("local[2]")
    yield session
    if owned:
        session.stop()


def _found(result: CheckResult) -> tuple[object, ...]:
    """What both searches must report. At a violation the search stops: the compact search part-way
    through a level, the Spark search after it, so the level's transitions, coverage and reduced
    states are compared only where the search completes."""
    found: tuple[object, ...] = (
        result.states,
        result.levels,
        result.depth,
        result.violation,
        [a.describe() for a in result.path],
        result.picks,
        result.liveness,
        result.lasso,
        result.complete,
        result.stopped,
        [str(gap) for gap in result.never_reached],
    )
    if result.violation is None:
        coverage = {pair: dict(counts) for pair, counts in result.coverage.items()}
        found += (result.transitions, result.refused, result.reduced, coverage)
    return found


CASES = [
    # (bounds, store, variant, the compact search's options, the Spark search's own)
    (Bounds(), StoreKind.system_topic, "current", {}, {}),
    (THREE, StoreKind.system_topic, "current", {}, {}),
    (FAULTS, StoreKind.system_topic, "current", {}, {}),
    (Bounds(crashes=1, restarts=1), StoreKind.system_topic, "25379", {}, {}),
    # every level a job; past the first states, each partition knows its own states only (the
    # proviso's questions asked and answered), and the depth bound stops it after four levels
    (Bounds(admin=0, ticks=0, depth=4), StoreKind.system_topic, "current", {}, {"small_level": 0, "shared_visited": 4}),
    (Bounds(compactions=1, depth=6), StoreKind.system_topic, "current", {}, {}),
    (Bounds(), StoreKind.system_topic, "current", {"max_states": 300}, {}),
]
IDS = ["default", "three-brokers", "crash-restart", "25379", "jobs", "depth-bound", "state-bound"]


@pytest.mark.parametrize(("bounds", "store", "variant", "options", "own"), CASES, ids=IDS)
def test_the_spark_search_finds_what_the_compact_search_finds(
    spark: Any, bounds: Bounds, store: StoreKind, variant: str, options: dict[str, Any], own: dict[str, Any]
) -> None:
    compact = check(bounds, store, variant, **options)
    on_spark = check_on_spark(bounds, store, variant, spark=spark, partitions=3, **options, **own)
    if "max_states" in options:
        # the compact search stops at the bound's very state, the Spark search at the end of its level
        assert not on_spark.complete
        assert on_spark.stopped == compact.stopped == "state bound 300"
        assert on_spark.levels[: len(compact.levels) - 1] == compact.levels[:-1]
        assert on_spark.states >= 300
        return
    assert _found(on_spark) == _found(compact)
    if own and store is StoreKind.system_topic:
        assert on_spark.reduced > 0  # the proviso's questions were asked, and answered


def test_an_interrupted_run_resumes_from_its_last_level(spark: Any, tmp_path: Path) -> None:
    """Levels 1 to 3 as jobs (no reduction on the metadata store: every successor sent on), the
    run interrupted, then resumed from its folder: the search's result, nothing searched twice."""
    folder = tmp_path / "run"
    store = StoreKind.metadata_store
    bounds = Bounds(admin=0, ticks=1)
    seen: list[int] = []

    def interrupt(level: Level) -> None:
        seen.append(level.depth)
        if level.depth == 3:
            raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        check_on_spark(
            bounds, store, spark=spark, checkpoint=folder, on_level=interrupt, small_level=0, shared_visited=0
        )
    assert (folder / CHECKPOINT).is_file()
    with pytest.raises(CheckpointMismatch, match="holds a run already"):
        check_on_spark(bounds, store, spark=spark, checkpoint=folder)
    with pytest.raises(CheckpointMismatch, match="another bound"):
        check_on_spark(Bounds(), store, spark=spark, checkpoint=folder, resume=True)
    resumed: list[int] = []
    result = check_on_spark(
        bounds, store, spark=spark, checkpoint=folder, resume=True, on_level=lambda lv: resumed.append(lv.depth)
    )
    assert seen == [1, 2, 3]
    assert resumed[0] == 4  # levels 1 to 3 were not searched again
    assert _found(result) == _found(check(bounds, store))


def test_the_check_command_searches_on_spark_and_says_when_liveness_is_left_out(tmp_path: Path) -> None:
    args = ["check", "--admin", "0", "--ticks", "0", "--spark", "--master", "local[2]"]
    out = runner.invoke(app, [*args, "--checkpoint", str(tmp_path / "levels"), "--no-liveness"])
    assert out.exit_code == 0, out.output
    assert f"{check(Bounds(admin=0, ticks=0)).states:,} distinct states" in out.output
    assert LIVENESS_NOT_CHECKED in " ".join(out.output.split())
    assert "every state can settle" not in out.output
    assert (tmp_path / "levels" / CHECKPOINT).is_file()
    again = runner.invoke(app, [*args, "--checkpoint", str(tmp_path / "levels")])
    assert again.exit_code == 2
    assert "holds a run already" in again.output


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--spark", "--graph", "g.mmd"], "--graph is for the search in this machine"),
        (["--spark", "--workers", "2"], "--workers is for the search in this machine"),
        (["--master", "local[2]"], "--master: for --spark"),
        (["--no-liveness"], "--no-liveness: for --spark"),
        (["--spark", "--swarm", "5", "--checkpoint", "x"], "--swarm --spark takes --master only"),
    ],
)
def test_spark_options_that_do_not_go_together_are_named(extra: list[str], message: str) -> None:
    out = runner.invoke(app, ["check", *extra])
    assert out.exit_code == 2
    assert message in " ".join(out.output.split())


def test_the_swarm_on_spark_walks_the_walks_of_one_process(spark: Any) -> None:
    faults = Bounds(crashes=1, restarts=1)
    local = swarm(faults, variant="25379", walks=60, seed=1)
    on_spark = swarm(faults, variant="25379", walks=60, seed=1, spark=spark)
    assert on_spark.violation is not None
    assert on_spark.violation.startswith("in-flight-acted-on")
    assert (on_spark.violation, on_spark.path, on_spark.picks, on_spark.states, on_spark.steps, on_spark.walks) == (
        local.violation,
        local.path,
        local.picks,
        local.states,
        local.steps,
        local.walks,
    )
    out = runner.invoke(app, ["check", "--swarm", "20", "--spark", "--master", "local[2]"])
    assert out.exit_code == 0, out.output
    assert "swarm: 20 walks" in out.output
    assert "not a proof" in out.output
