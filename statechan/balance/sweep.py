"""A grid of runs (strategies x settings x workloads x broker counts x seeds), one Spark task
each, or in one process; a Parquet of every run's measures, and a summary with the median and
range over seeds of each group.

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

from statechan.balance.lab import LabConfig, run
from statechan.balance.settings import SETTINGS, STRATEGIES, WORKLOADS

Row = dict[str, float | int | str | None]

HELD_OUT_SEEDS = range(101, 111)
"""Seeds kept apart from the ones the workloads were built with (1-4): the figures use these."""

SPREAD_MEASURES = ("moves", "late_moves_per_hour", "moved_3plus", "late_std", "late_spread", "late_peak", "splits")
"""The measures a summary gives with their spread over seeds."""


class Cell(BaseModel):
    """One run of the grid, with the names its row is grouped by."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strategy: str
    setting: str
    workload_name: str
    lab: LabConfig
    group: str = ""
    """Extra grouping label (a scenario's or a candidate's name)."""


def grid(
    strategies: Sequence[str],
    settings: Sequence[str],
    workloads: Sequence[str],
    seeds: Iterable[int],
    hours: float | None = None,
    brokers: Sequence[int] | None = None,
) -> list[Cell]:
    """Every combination, by the names in :data:`STRATEGIES`, :data:`SETTINGS`, :data:`WORKLOADS`;
    ``brokers`` runs each workload at those sizes (:meth:`Workload.for_brokers`)."""
    cells = []
    sizes: Sequence[int | None] = list(brokers) if brokers else [None]
    for name, setting, load, size, seed in itertools.product(strategies, settings, workloads, sizes, list(seeds)):
        shedder, placement = STRATEGIES[name]
        workload = WORKLOADS[load] if size is None else WORKLOADS[load].for_brokers(size)
        update: dict[str, object] = {"seed": seed} if hours is None else {"seed": seed, "hours": hours}
        lab = LabConfig(
            workload=workload.model_copy(update=update),
            shedder=shedder,
            placement=placement,
            balancer=SETTINGS[setting],
        )
        cells.append(Cell(strategy=name, setting=setting, workload_name=load, lab=lab))
    return cells


def run_cell(cell_json: str) -> Row:
    """One cell, from its JSON (what a Spark task receives), to its row."""
    cell = Cell.model_validate_json(cell_json)
    row: Row = {
        "strategy_name": cell.strategy,
        "setting": cell.setting,
        "workload": cell.workload_name,
        "group": cell.group,
    }
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


def spread(values: Sequence[float]) -> tuple[float, float, float]:
    """Median, smallest and largest."""
    return statistics.median(values), min(values), max(values)


def show(values: Sequence[float], digits: int = 2) -> str:
    """``median [min–max]``."""
    mid, low, high = spread(values)
    return f"{round(mid, digits):g} [{round(low, digits):g}–{round(high, digits):g}]"


def summary(
    rows: Sequence[Row], keys: Sequence[str] = ("group", "strategy_name", "setting", "workload", "brokers")
) -> list[Row]:
    """One row per group (the ``keys``): the runs, and each of :data:`SPREAD_MEASURES` as its
    median with its range over the group's seeds, ranked by the median late spread of broker
    load, then by the median moves."""
    groups: dict[tuple[object, ...], list[Row]] = {}
    for row in rows:
        groups.setdefault(tuple(row.get(k) for k in keys), []).append(row)
    out: list[Row] = []
    for key, runs in groups.items():
        entry: Row = {k: v for k, v in zip(keys, key, strict=True) if v not in (None, "")}  # type: ignore[misc]
        entry["runs"] = len(runs)
        for name in SPREAD_MEASURES:
            entry[name] = show([float(r[name] or 0) for r in runs], 3 if name.startswith("late_s") else 2)
        entry["_spread"] = statistics.median(float(r["late_spread"] or 0) for r in runs)
        entry["_moves"] = statistics.median(float(r["moves"] or 0) for r in runs)
        out.append(entry)
    out.sort(key=lambda r: (float(r["_spread"] or 0), float(r["_moves"] or 0)))
    for rank, row in enumerate(out, 1):
        row["rank"] = rank
        del row["_spread"], row["_moves"]
    return out
