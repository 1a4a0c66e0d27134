"""``statechan balance``: one run's measures as a table and its pictures; ``statechan balance
sweep``: a grid of runs on Spark (or in one process) with a Parquet of results and a ranking."""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table

from statechan.balance.settings import SETTINGS, STRATEGIES, WORKLOADS, PlacementKind, ShedderKind, Workload

app = typer.Typer(
    help="The load-balance lab: Pulsar's shedders and placements on a simulated cluster.",
    no_args_is_help=False,
)
console = Console(width=None if sys.stdout.isatty() else 132, soft_wrap=True)  # as statechan.cli
err = Console(stderr=True, soft_wrap=True)


class Engine(enum.Enum):
    spark = "spark"
    local = "local"


def _table(title: str, rows: list[dict[str, float | int | str | None]]) -> Table:
    table = Table(title=title)
    if not rows:
        return table
    for name in rows[0]:
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else str(v) for v in row.values()))
    return table


def _progress(label: str) -> Callable[[int, int], None]:
    start = time.monotonic()

    def note(done: int, total: int) -> None:
        err.print(f"{label}: {done}/{total} ({time.monotonic() - start:.0f} s)")

    return note


@app.callback(invoke_without_command=True)
def balance(
    ctx: typer.Context,
    shedder: Annotated[ShedderKind, typer.Option(help="The load shedding strategy.")] = ShedderKind.threshold,
    placement: Annotated[
        PlacementKind, typer.Option(help="The placement strategy.")
    ] = PlacementKind.least_long_term_message_rate,
    setting: Annotated[str, typer.Option(help=f"Pulsar settings: {', '.join(SETTINGS)}.")] = "seed-001",
    workload: Annotated[str, typer.Option(help=f"The workload: {', '.join(WORKLOADS)}.")] = "seed-001",
    brokers: Annotated[int | None, typer.Option(min=2, help="Brokers (default: the workload's, 136).")] = None,
    hours: Annotated[float | None, typer.Option(help="Simulated hours (default: the workload's, 10).")] = None,
    seed: Annotated[int, typer.Option(help="The workload's seed.")] = 1,
    through_channel: Annotated[
        bool, typer.Option("--through-channel", help="Carry every move through the channel model, checked.")
    ] = False,
    target_std: Annotated[
        float, typer.Option(min=0.0, help="The broker-load standard deviation the settle time is measured against.")
    ] = 0.1,
    check_every: Annotated[int, typer.Option(min=1, help="Minutes between invariant checks (channel mode).")] = 10,
    crashes_per_hour: Annotated[
        float, typer.Option(min=0.0, help="Channel mode: crash a running broker at this rate (restarted later).")
    ] = 0.0,
    down_minutes: Annotated[int, typer.Option(min=1, help="Channel mode: minutes a crashed broker stays down.")] = 5,
    png: Annotated[Path | None, typer.Option(help="Write the picture as PNG here.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write the interactive HTML page here.")] = None,
) -> None:
    """One run: the measures as a table, and the pictures when asked."""
    if ctx.invoked_subcommand is not None:
        return
    from statechan.balance.lab import LabConfig, run

    if setting not in SETTINGS or workload not in WORKLOADS:
        err.print(f"unknown setting or workload: {setting!r}, {workload!r}")
        raise typer.Exit(2)
    for option, path in (("--png", png), ("--html", html)):
        if path is not None and not path.parent.is_dir():  # before the run, not after it
            err.print(f"{option}: the folder {path.parent} does not exist")
            raise typer.Exit(2)
    update: dict[str, object] = {"seed": seed}
    if brokers is not None:
        update["brokers"] = brokers
    if hours is not None:
        update["hours"] = hours
    load: Workload = WORKLOADS[workload].model_copy(update=update)
    config = LabConfig(
        workload=load, shedder=shedder, placement=placement, balancer=SETTINGS[setting], target_std=target_std
    )
    started = time.monotonic()
    note = _progress("simulated hours")

    def hourly(minute: int, minutes: int) -> None:
        note(minute // 60, minutes // 60)

    carrier = None
    if through_channel:
        from statechan.balance.channel import ThroughChannel

        carrier = ThroughChannel(
            load, check_every_minutes=check_every, crashes_per_hour=crashes_per_hour, down_minutes=down_minutes
        )
    elif crashes_per_hour > 0:
        err.print("--crashes-per-hour needs --through-channel (faults happen in the channel model)")
        raise typer.Exit(2)
    result = run(config, carrier, progress=hourly)
    breaches: list[str] = []
    if carrier is not None:
        result.channel = carrier.finish()
        breaches = carrier.breaches
    measures = result.measures()
    console.print(
        _table(
            f"{config.label()} ({time.monotonic() - started:.1f} s)",
            [{"measure": k, "value": v} for k, v in measures.items()],
        )
    )
    for line in breaches:
        console.print(f"[red]breach[/red] {line}")
    if png is not None:
        from statechan.balance.plot import png as write_png

        write_png(result, png)
        console.print(f"wrote {png}")
    if html is not None:
        from statechan.balance.plot import html_page

        html_page(result, html)
        console.print(f"wrote {html}")
    if breaches:
        raise typer.Exit(1)


@app.command()
def sweep(
    out: Annotated[Path, typer.Option(help="The Parquet of every run's measures.")] = Path("balance-sweep.parquet"),
    strategy: Annotated[
        list[str] | None, typer.Option(help=f"Combinations (repeatable): {', '.join(STRATEGIES)}.")
    ] = None,
    setting: Annotated[list[str] | None, typer.Option(help=f"Settings (repeatable): {', '.join(SETTINGS)}.")] = None,
    workload: Annotated[list[str] | None, typer.Option(help=f"Workloads (repeatable): {', '.join(WORKLOADS)}.")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds 1..N for each combination.")] = 3,
    hours: Annotated[float | None, typer.Option(help="Simulated hours per run (default 10).")] = None,
    engine: Annotated[Engine, typer.Option(help="Spark tasks, or one process.")] = Engine.spark,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[*]).")] = None,
) -> None:
    """Run the grid, write the Parquet, print the ranking."""
    from statechan.balance.sweep import grid, summary, sweep_local, sweep_spark, write_parquet

    names = strategy or list(STRATEGIES)
    settings = setting or ["seed-001"]
    loads = workload or ["seed-001"]
    unknown = (
        [n for n in names if n not in STRATEGIES]
        + [s for s in settings if s not in SETTINGS]
        + [w for w in loads if w not in WORKLOADS]
    )
    if unknown:
        err.print(f"unknown: {', '.join(unknown)}")
        raise typer.Exit(2)
    if not out.parent.exists():
        err.print(f"--out: the folder {out.parent} does not exist")
        raise typer.Exit(2)
    cells = grid(names, settings, loads, range(1, seeds + 1), hours)
    started = time.monotonic()
    note = _progress("runs")
    rows = sweep_spark(cells, master, note) if engine is Engine.spark else sweep_local(cells, note)
    write_parquet(rows, out)
    elapsed = time.monotonic() - started
    console.print(_table(f"{len(cells)} runs on {engine.value} in {elapsed:.1f} s; ranking", summary(rows)))
    console.print(f"wrote {out}")
    sys.stdout.flush()


if __name__ == "__main__":
    app()
