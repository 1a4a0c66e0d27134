"""``statechan balance``: one run's measures as a table and its pictures; ``sweep``: a grid of
runs on Spark (or in one process) with a Parquet of results and a summary with spreads; ``study``:
seed 001's three causes over held-out seeds and cluster sizes; ``recommend``: settings for an
operator's own cluster; ``example``: a small cluster's input files to start from."""

from __future__ import annotations

import enum
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from statechan.balance.settings import (
    SETTINGS,
    STRATEGIES,
    WORKLOADS,
    BalancerConfig,
    PlacementKind,
    ShedderKind,
    SplitAlgorithm,
    Workload,
)

if TYPE_CHECKING:
    from statechan.balance.conf import OperatorCluster, OperatorConf

app = typer.Typer(
    help="The load-balance lab: Pulsar's shedders, placements and bundle splits on a simulated cluster.",
    no_args_is_help=False,
)
console = Console(width=None if sys.stdout.isatty() else 160, soft_wrap=True)  # as statechan.cli
err = Console(stderr=True, soft_wrap=True)


class Engine(enum.Enum):
    spark = "spark"
    local = "local"


class Store(enum.Enum):
    system_topic = "system-topic"
    metadata_store = "metadata-store"


def _table(title: str, rows: list[dict[str, float | int | str | None]]) -> Table:
    """Rows as a table; nothing in them is read as markup (a "[min–max]" stays as it is)."""
    table = Table(title=escape(title))
    if not rows:
        return table
    for name in rows[0]:
        table.add_column(escape(name), overflow="fold")
    for row in rows:
        table.add_row(*("" if v is None else escape(str(v)) for v in row.values()))
    return table


def _progress(label: str) -> Callable[[int, int], None]:
    start = time.monotonic()

    def note(done: int, total: int) -> None:
        err.print(f"{label}: {done}/{total} ({time.monotonic() - start:.0f} s)")

    return note


def _refuse(problems: list[str]) -> NoReturn:
    for problem in problems:
        err.print(f"[red]error[/red] {escape(problem)}")
    raise typer.Exit(2)


def _folder_exists(*paths: tuple[str, Path | None]) -> None:
    for option, path in paths:
        if path is not None and not path.parent.is_dir():  # before the run, not after it
            _refuse([f"{option}: the folder {path.parent} does not exist"])


def _operator(
    conf: Path | None, cluster: Path | None, load: Path | None, hours: float | None
) -> tuple[OperatorConf, OperatorCluster]:
    """Read an operator's files, or refuse with every problem named (exit 2)."""
    from statechan.balance.conf import (
        InputError,
        check_against_cluster,
        read_broker_conf,
        read_cluster,
        read_recorded_load,
    )

    if conf is None or cluster is None:
        _refuse(["--conf and --cluster go together (an operator's broker.conf and cluster description)"])
    problems: list[str] = []
    read_conf = read_cluster_ = None
    try:
        read_conf = read_broker_conf(conf)
    except InputError as exc:
        problems += [str(p) for p in exc.problems]
    try:
        read_cluster_ = read_cluster(cluster, hours)
        if load is not None:
            read_cluster_ = read_recorded_load(load, read_cluster_)
    except InputError as exc:
        problems += [str(p) for p in exc.problems]
    if read_conf is not None and read_cluster_ is not None:
        try:
            check_against_cluster(read_conf, read_cluster_)
        except InputError as exc:
            problems += [str(p) for p in exc.problems]
    if problems or read_conf is None or read_cluster_ is None:
        _refuse(problems)
    if read_conf.not_modelled:
        err.print(f"not modelled, read and left aside: {', '.join(read_conf.not_modelled)}")
    if read_conf.ignored:
        err.print(f"{read_conf.ignored} lines of {read_conf.path} are not load-balance settings (ignored)")
    for note in read_cluster_.notes:
        err.print(note)
    return read_conf, read_cluster_


@app.callback(invoke_without_command=True)
def balance(
    ctx: typer.Context,
    shedder: Annotated[ShedderKind, typer.Option(help="The load shedding strategy.")] = ShedderKind.threshold,
    placement: Annotated[
        PlacementKind, typer.Option(help="The placement strategy.")
    ] = PlacementKind.least_long_term_message_rate,
    setting: Annotated[str, typer.Option(help=f"Pulsar settings: {', '.join(SETTINGS)}.")] = "seed-001",
    workload: Annotated[str, typer.Option(help=f"The workload: {', '.join(WORKLOADS)}.")] = "seed-001",
    brokers: Annotated[
        int | None, typer.Option(min=2, help="Brokers (default: the workload's, 136); bundles scale with them.")
    ] = None,
    hours: Annotated[float | None, typer.Option(help="Simulated hours (default: the workload's, 10).")] = None,
    seed: Annotated[int, typer.Option(help="The workload's seed.")] = 1,
    split: Annotated[
        bool, typer.Option("--split/--no-split", help="Load-driven bundle splits (on by default, as in Pulsar).")
    ] = True,
    split_algorithm: Annotated[
        SplitAlgorithm | None, typer.Option(help="defaultNamespaceBundleSplitAlgorithm (default: the setting's).")
    ] = None,
    pulsar_2_10_overload: Annotated[
        bool, typer.Option("--pulsar-2.10-overload", help="LeastLongTermMessageRate's overload test as in 2.10.")
    ] = False,
    conf: Annotated[Path | None, typer.Option(help="Run on an operator's broker.conf (with --cluster).")] = None,
    cluster: Annotated[Path | None, typer.Option(help="An operator's cluster description (YAML).")] = None,
    load: Annotated[Path | None, typer.Option(help="Recorded load (admin API JSON) for the cluster.")] = None,
    through_channel: Annotated[
        bool, typer.Option("--through-channel", help="Carry every move and split through the channel model, checked.")
    ] = False,
    store: Annotated[Store, typer.Option(help="The channel's storage (channel mode).")] = Store.system_topic,
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

    problems = [f"unknown setting {setting!r} (known: {', '.join(SETTINGS)})"] if setting not in SETTINGS else []
    if workload not in WORKLOADS:
        problems.append(f"unknown workload {workload!r} (known: {', '.join(WORKLOADS)})")
    if problems:
        _refuse(problems)
    _folder_exists(("--png", png), ("--html", html))
    balancer: BalancerConfig = SETTINGS[setting]
    spec = None
    if conf is not None or cluster is not None:
        operator_conf, operator_cluster = _operator(conf, cluster, load, hours)
        balancer, spec = operator_conf.balancer, operator_cluster.spec
        base: Workload = operator_cluster.workload.model_copy(update={"seed": seed})
        if through_channel:
            _refuse(["--through-channel runs the lab's own workloads (the channel model's namespaces are uniform)"])
    else:
        base = WORKLOADS[workload] if brokers is None else WORKLOADS[workload].for_brokers(brokers)
        update: dict[str, object] = {"seed": seed}
        if hours is not None:
            update["hours"] = hours
        base = base.model_copy(update=update)
    changes: dict[str, object] = {} if split else {"auto_split_enabled": False}
    if split_algorithm is not None:
        changes["split_algorithm"] = split_algorithm
    if changes:
        balancer = balancer.model_copy(update=changes)
    config = LabConfig(
        workload=base,
        shedder=shedder,
        placement=placement,
        balancer=balancer,
        pulsar_2_10_overload=pulsar_2_10_overload,
        cluster=spec,
    )
    started = time.monotonic()
    note = _progress("simulated hours")

    def hourly(minute: int, minutes: int) -> None:
        note(minute // 60, minutes // 60)

    carrier = None
    if through_channel:
        from statechan.balance.channel import ThroughChannel
        from statechan.cluster import StoreKind

        carrier = ThroughChannel(
            base,
            store=StoreKind(store.value),
            check_every_minutes=check_every,
            crashes_per_hour=crashes_per_hour,
            down_minutes=down_minutes,
        )
    elif crashes_per_hour > 0:
        _refuse(["--crashes-per-hour needs --through-channel (faults happen in the channel model)"])
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
        console.print(f"[red]breach[/red] {escape(line)}")
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
    brokers: Annotated[list[int] | None, typer.Option(help="Cluster sizes (repeatable; bundles scale).")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per combination.")] = 3,
    seed_start: Annotated[int, typer.Option(help="The first seed (101 and up are held out from tuning).")] = 101,
    hours: Annotated[float | None, typer.Option(help="Simulated hours per run (default 10).")] = None,
    engine: Annotated[Engine, typer.Option(help="Spark tasks, or one process.")] = Engine.spark,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[*]).")] = None,
) -> None:
    """Run the grid, write the Parquet, print each group's median and range over seeds."""
    from statechan.balance.sweep import grid, summary, sweep_local, sweep_spark, write_parquet

    names = strategy or [n for n in STRATEGIES if n != "none+lltmr"]
    settings = setting or ["seed-001"]
    loads = workload or ["seed-001"]
    unknown = (
        [f"strategy {n!r}" for n in names if n not in STRATEGIES]
        + [f"setting {s!r}" for s in settings if s not in SETTINGS]
        + [f"workload {w!r}" for w in loads if w not in WORKLOADS]
    )
    if unknown:
        _refuse([f"unknown {u}" for u in unknown])
    bad = [b for b in brokers or [] if b < 2]
    if bad:
        _refuse([f"--brokers {b}: a cluster has at least 2 brokers" for b in bad])
    _folder_exists(("--out", out))
    cells = grid(names, settings, loads, range(seed_start, seed_start + seeds), hours, brokers)
    started = time.monotonic()
    note = _progress("runs")
    rows = sweep_spark(cells, master, note) if engine is Engine.spark else sweep_local(cells, note)
    write_parquet(rows, out)
    elapsed = time.monotonic() - started
    title = f"{len(cells)} runs on {engine.value} in {elapsed:.1f} s; median [range] over seeds, best balance first"
    console.print(_table(title, summary(rows)))
    console.print(f"wrote {out}")
    sys.stdout.flush()


@app.command()
def study(
    out: Annotated[Path, typer.Option(help="The Parquet of every run's measures.")] = Path("balance-study.parquet"),
    brokers: Annotated[list[int] | None, typer.Option(help="Cluster sizes (default 20, 60, 136).")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Held-out seeds per cell.")] = 10,
    seed_start: Annotated[int, typer.Option(help="The first seed.")] = 101,
    hours: Annotated[float | None, typer.Option(help="Simulated hours per run (default 10).")] = None,
    scenario: Annotated[list[str] | None, typer.Option(help="Scenarios by name (default: all).")] = None,
    engine: Annotated[Engine, typer.Option(help="Spark tasks, or one process.")] = Engine.spark,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[*]).")] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the table as Markdown here.")] = None,
) -> None:
    """Seed 001's three causes, one at a time: LeastLongTermMessageRate against
    LeastResourceUsageWithWeight (and no shedding) over held-out seeds and cluster sizes."""
    from statechan.balance.scenarios import SCENARIOS, STUDY_BROKERS, study_cells, study_table
    from statechan.balance.sweep import sweep_local, sweep_spark, write_parquet

    chosen = [s for s in SCENARIOS if not scenario or s.name in scenario]
    missing = [n for n in scenario or [] if n not in {s.name for s in SCENARIOS}]
    if missing:
        _refuse([f"unknown scenario {n!r} (known: {'; '.join(s.name for s in SCENARIOS)})" for n in missing])
    _folder_exists(("--out", out), ("--markdown", markdown))
    cells = study_cells(chosen, brokers or list(STUDY_BROKERS), range(seed_start, seed_start + seeds), hours)
    started = time.monotonic()
    note = _progress("runs")
    rows = sweep_spark(cells, master, note) if engine is Engine.spark else sweep_local(cells, note)
    write_parquet(rows, out)
    table = study_table(rows)
    console.print(_table(f"{len(cells)} runs in {time.monotonic() - started:.0f} s; median [range] over seeds", table))
    if markdown is not None:
        head = list(table[0])
        lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
        lines += ["| " + " | ".join("" if r.get(k) is None else str(r.get(k)) for k in head) + " |" for r in table]
        markdown.write_text("\n".join(lines) + "\n", encoding="utf-8")
        console.print(f"wrote {markdown}")
    console.print(f"wrote {out}")


@app.command()
def recommend(
    conf: Annotated[Path, typer.Option(help="The operator's broker.conf.")],
    cluster: Annotated[Path, typer.Option(help="The cluster description (YAML): brokers, capacities, namespaces.")],
    load: Annotated[Path | None, typer.Option(help="Recorded load as the admin API returns it (JSON).")] = None,
    seeds: Annotated[int, typer.Option(min=1, help="Seeds per candidate.")] = 3,
    seed_start: Annotated[int, typer.Option(help="The first seed.")] = 101,
    hours: Annotated[float, typer.Option(min=0.5, help="Simulated hours per run.")] = 4.0,
    strategy: Annotated[
        list[str] | None, typer.Option(help="Combinations to try (default: threshold+lltmr, +lruww, transfer).")
    ] = None,
    engine: Annotated[Engine, typer.Option(help="Spark tasks, or one process.")] = Engine.spark,
    master: Annotated[str | None, typer.Option(help="Spark master (default local[*]).")] = None,
    png: Annotated[Path | None, typer.Option(help="Write the trade-off picture as PNG here.")] = None,
    html: Annotated[Path | None, typer.Option(help="Write the trade-off page (HTML) here.")] = None,
    out: Annotated[Path | None, typer.Option(help="Write every run's measures as Parquet here.")] = None,
) -> None:
    """Which settings to trust on your cluster: a ranked table with spreads, the trade-off, the
    broker.conf lines to apply, and a dry run of them on the recorded state."""
    from statechan.balance import recommend as rec
    from statechan.balance.lab import LabConfig
    from statechan.balance.sweep import sweep_local, sweep_spark, write_parquet

    unknown = [s for s in strategy or [] if s not in STRATEGIES]
    if unknown:
        _refuse([f"unknown strategy {s!r} (known: {', '.join(STRATEGIES)})" for s in unknown])
    _folder_exists(("--png", png), ("--html", html), ("--out", out))
    operator_conf, operator_cluster = _operator(conf, cluster, load, hours)
    found = rec.candidates(operator_conf, strategy)
    cells = rec.cells(found, operator_cluster, range(seed_start, seed_start + seeds))
    err.print(f"{len(found)} candidates x {seeds} seeds = {len(cells)} runs of {hours:g} h on {engine.value}")
    started = time.monotonic()
    note = _progress("runs")
    rows = sweep_spark(cells, master, note) if engine is Engine.spark else sweep_local(cells, note)
    if out is not None:
        write_parquet(rows, out)
    result = rec.rank(found, rows)
    elapsed = time.monotonic() - started
    spec = operator_cluster.spec
    title = (
        f"{spec.name}: {len(spec.brokers)} brokers, {sum(n.bundles for n in spec.namespaces)} bundles; "
        f"{len(cells)} runs in {elapsed:.0f} s; median [range] over {seeds} seeds, best balance first"
    )
    console.print(_table(title, result.table()))
    console.print(escape(result.trade_off()))
    lines = result.chosen.candidate.lines
    console.print("[bold]broker.conf lines to apply[/bold]" if lines else "[bold]keep your settings[/bold]")
    for line in lines:
        console.print(f"  {escape(line)}")
    shedder, placement = STRATEGIES[result.chosen.candidate.strategy]
    chosen = LabConfig(
        workload=operator_cluster.workload.model_copy(update={"seed": seed_start}),
        shedder=shedder,
        placement=placement,
        balancer=result.chosen.candidate.balancer,
        cluster=spec,
    )
    dry = rec.dry_run(chosen)
    state = "the recorded state" if dry.recorded else "the cluster as the workload starts it (no --load)"
    proposals: list[dict[str, float | int | str | None]] = [
        {
            "bundle": p.bundle,
            "from": p.source,
            "to": p.destination,
            "MB/s": p.throughput_mb,
            "msg/s": p.msg_rate,
            "how": "transfer" if p.transfer else "unload",
        }
        for p in dry.proposals
    ]
    console.print(_table(f"Dry run on {state}: {len(proposals)} moves now", proposals))
    console.print(escape(f"balance before {dry.before}; after {dry.after}"))
    if png is not None:
        rec.frontier_png(result, png)
        console.print(f"wrote {png}")
    if html is not None:
        rec.frontier_html(result, dry, html)
        console.print(f"wrote {html}")


@app.command()
def example(
    folder: Annotated[Path, typer.Argument(help="Where to write broker.conf, cluster.yaml and load.json.")],
) -> None:
    """Write a small cluster's broker.conf, cluster.yaml and recorded load to start from."""
    from statechan.balance.conf import example_cluster

    if not folder.is_dir():
        _refuse([f"{folder} is not a folder"])
    conf_text, cluster_text, load_text = example_cluster()
    for name, text in (("broker.conf", conf_text), ("cluster.yaml", cluster_text), ("load.json", load_text)):
        (folder / name).write_text(text, encoding="utf-8")
        console.print(f"wrote {folder / name}")


if __name__ == "__main__":
    app()
