"""A grid of runs (strategies x settings x workloads x seeds), one Spark task each, or in one
process; a Parquet of every run's measures, and a summary ranking the combinations.

Each task is a :class:`Cell` sent as JSON and run by the same :func:`statechan.balance.lab.run`
as a single run, so a cell of the sweep and ``statechan balance`` with its options agree.
"""

from __future__ import annotations

import itertools
import statistics
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from statechan.balance.lab import LabConfig, Verdict, run
from statechan.balance.settings import SETTINGS, STRATEGIES, WORKLOADS

Row = dict[str, float | int | str | None]


class Cell(BaseModel):
    """One run of the grid, with the names its row is grouped by."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: str
    setting: str
    workload_name: str
    lab: LabConfig


def grid(
    strategies: Sequence[str],
    settings: Sequence[str],
    workloads: Sequence[str],
    seeds: Iterable[int],
    hours: float | None = None,
) -> list[Cell]:
    """Every combination, by the names in :data:`STRATEGIES`, :data:`SETTINGS`, :data:`WORKLOADS`."""
    cells = []
    for name, setting, load, seed in itertools.product(strategies, settings, workloads, list(seeds)):
        shedder, placement = STRATEGIES[name]
        update: dict[str, object] = {"seed": seed} if hours is None else {"seed": seed, "hours": hours}
        workload = WORKLOADS[load].model_copy(update=update)
        lab = LabConfig(workload=workload, shedder=shedder, placement=placement, balancer=SETTINGS[setting])
        cells.append(Cell(strategy=name, setting=setting, workload_name=load, lab=lab))
    return cells


def run_cell(cell_json: str) -> Row:
    """One cell, from its JSON (what a Spark task receives), to its row."""
    cell = Cell.model_validate_json(cell_json)
    row: Row = {"strategy_name": cell.strategy, "setting": cell.setting, "workload": cell.workload_name}
    row.update(run(cell.lab).measures())
    return row


def sweep_local(cells: Sequence[Cell], progress: Callable[[int, int], None] | None = None) -> list[Row]:
    """The grid in this process, one cell after another (the baseline the Spark sweep is measured against)."""
    rows = []
    for i, cell in enumerate(cells, 1):
        rows.append(run_cell(cell.model_dump_json()))
        if progress is not None:
            progress(i, len(cells))
    return rows


def sweep_spark(
    cells: Sequence[Cell],
    master: str | None = None,
    progress: Callable[[int, int], None] | None = None,
    spark: Any = None,
) -> list[Row]:
    """The grid as Spark tasks (one partition per cell); ``progress(done, total)`` as tasks finish."""
    from statechan.audit import StageProgress, code_zip, spark_session

    spark = spark or spark_session(master, app="statechan-balance")
    context = spark.sparkContext
    if not context.master.startswith("local"):
        context.addPyFile(str(code_zip()))
    payload = [cell.model_dump_json() for cell in cells]
    total = len(payload)
    rdd = context.parallelize(payload, max(1, total)).map(run_cell)
    if progress is None:
        return list(rdd.collect())
    seen = [-1]

    def changed(done: int, _: float) -> None:
        if done != seen[0]:
            seen[0] = done
            progress(done, total)

    with StageProgress(spark, total, changed, every=2.0):
        rows: list[Row] = rdd.collect()
    progress(total, total)
    return rows


def write_parquet(rows: Sequence[Row], path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.Table.from_pylist(list(rows)), str(path))


def summary(rows: Sequence[Row]) -> list[Row]:
    """One row per (combination by short name, setting, workload): means over seeds, the share of
    runs that settled, ranked by that share, then by a lower busiest-broker load in the last hour
    (a shedder that never acts settles too), then by fewer moves."""
    groups: dict[tuple[str, str, str], list[Row]] = {}
    for row in rows:
        key = (str(row["strategy_name"]), str(row["setting"]), str(row["workload"]))
        groups.setdefault(key, []).append(row)
    out: list[Row] = []
    for (strategy, setting, workload), runs in groups.items():

        def mean(name: str, runs: list[Row] = runs) -> float:
            return round(statistics.fmean(float(r[name] or 0) for r in runs), 2)

        out.append(
            {
                "strategy": strategy,
                "setting": setting,
                "workload": workload,
                "runs": len(runs),
                "settled": round(sum(1 for r in runs if r["verdict"] == Verdict.settles.value) / len(runs), 2),
                "moves": mean("unloads") + mean("transfers"),
                "late_moves_per_hour": mean("late_moves_per_hour"),
                "moved_again": mean("moved_again"),
                "final_std": mean("final_std"),
                "late_max_load": mean("late_max_load"),
            }
        )
    out.sort(key=lambda r: (-float(r["settled"] or 0), float(r["late_max_load"] or 0), float(r["moves"] or 0)))
    for rank, row in enumerate(out, 1):
        row["rank"] = rank
    return out
