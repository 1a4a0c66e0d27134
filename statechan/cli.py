"""The ``statechan`` command line: thin commands over the library."""

from __future__ import annotations

import enum
import json
import os
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NoReturn, TypeVar

import pydantic
import typer
from rich.table import Table

from statechan.audit import EXAMPLES_MAX, TIMEOUT_MAX_S
from statechan.balance.cli import app as balance_app
from statechan.checker import Bounds, FingerprintCollision, bound_flag, checker_config, counted
from statechan.checker import Engine as SearchEngine
from statechan.clock import Clock
from statechan.cluster.config import VARIANTS, StoreKind, Variant
from statechan.docs import stale_docs, write_docs
from statechan.graph import check_graph, dot, mermaid
from statechan.invariants.replay import CLEANUP_TIMEOUT_MS, IN_FLIGHT_TIMEOUT_MS, TOMBSTONE_TIMEOUT_MS
from statechan.model import DEFAULT_MODEL, ModelError, ProtocolModel, builtin_model_names, load_model
from statechan.pages.explore.explorer import GRAPH_LIMIT, GRAPH_LIMIT_MAX
from statechan.render import (
    console,
    err,
    history_checker,
    invariant_checker,
    print_audit,
    progress,
    story_table,
    transition_table,
)
from statechan.resolver import resolve
from statechan.states import StorageType
from statechan.stores.metadata import Store, StoreError
from statechan.values import LONG_MAX, ServiceUnitStateData

if TYPE_CHECKING:
    from statechan.checker import CheckResult
    from statechan.checker.compact import Level
    from statechan.cluster import Action, Cluster, SimConfig

app = typer.Typer(
    name="statechan",
    help="A formally-checked model of Apache Pulsar's service unit state channel.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
VARIANT_HELP = "current, or a historical bug put back, by PR: " + ", ".join(
    v for v in sorted(VARIANTS) if v != "current"
)


class Storage(enum.Enum):
    system_topic = "system-topic"
    metadata_store = "metadata-store"

    @property
    def storage(self) -> StorageType:
        return StorageType.SystemTopic if self is Storage.system_topic else StorageType.MetadataStore


class GraphFormat(enum.Enum):
    table = "table"
    mermaid = "mermaid"
    dot = "dot"


T = TypeVar("T")
ModelOption = Annotated[str, typer.Option("--model", "-m", help="A built-in model name or a model file (.toml).")]
StorageOption = Annotated[Storage, typer.Option("--storage", "-s", help="Which store's table.")]


def _shown(number: float) -> str:
    return f"{int(number):,}" if float(number).is_integer() else f"{number:g}"


def _finite(value: float | None) -> float | None:
    """NaN passes every range comparison, so a number option refuses it by name."""
    if value is not None and value != value:
        raise typer.BadParameter("not a number")
    return value


def _number(help: str, lo: float, hi: float, why: str, *names: str) -> Any:
    """A numeric option with its range, checked by the parser before any work, and the reason
    for the range in its help (an unbounded one ran out of memory, overflowed or never ended)."""
    return typer.Option(*names, min=lo, max=hi, callback=_finite, help=f"{help} [{_shown(lo)} to {_shown(hi)}: {why}]")


RATE_MAX = 360_000.0
"""Events per simulated hour: 100 a simulated second; more is no workload and the run would not end."""
RATE_WHY = "100 a simulated second; more would never end"
EVENTS_MAX = 100
"""Events of one kind in a model checker's run."""
EVENTS_WHY = "each multiplies the runs; --max-states stops far sooner"
PLANTS_MAX = 10_000
"""Planted violations of one kind in a generated trace (each is a namespace of its own)."""


def _load(model: str) -> ProtocolModel:
    try:
        return load_model(model)
    except ModelError as exc:
        err.print(f"[red]error:[/red] {exc}")
        raise typer.Exit(2) from None


@app.command("models")
def models_command() -> None:
    """List the built-in protocol models."""
    table = Table(title="Protocol models", title_justify="left")
    for column in ("name", "states", "storages", "resolver", "description"):
        table.add_column(column)
    for name in builtin_model_names():
        m = load_model(name)
        table.add_row(
            name + (" (default)" if name == DEFAULT_MODEL else ""),
            ", ".join(m.spec.states),
            ", ".join(s.value for s in m.storages),
            "yes" if m.has_resolver else "graph only",
            m.spec.description,
        )
    console.print(table)


@app.command("graph")
def graph_command(
    model: ModelOption = DEFAULT_MODEL,
    storage: StorageOption = Storage.system_topic,
    fmt: Annotated[GraphFormat, typer.Option("--format", "-f", help="How to print the graph.")] = GraphFormat.table,
    check: Annotated[bool, typer.Option("--check", help="Run the graph checks; exit 1 if one fails.")] = False,
    write_docs_to: Annotated[
        Path | None, typer.Option("--write-docs", help="Regenerate the diagrams and state-graph page in DIR.")
    ] = None,
    check_docs: Annotated[
        Path | None, typer.Option("--check-docs", help="Exit 1 if the generated files in DIR are stale.")
    ] = None,
) -> None:
    """Print a model's state graph, check it, or regenerate the diagrams in docs/."""
    m = _load(model)
    if write_docs_to is not None:
        changed = write_docs(write_docs_to)
        console.print(f"{len(changed)} file(s) regenerated under {write_docs_to}")
        for path in changed:
            console.print(f"  {path}")
        return
    if check_docs is not None:
        stale = stale_docs(check_docs)
        if stale:
            err.print(f"stale generated docs under {check_docs}: {', '.join(stale)}")
            err.print(f"regenerate with: statechan graph --write-docs {check_docs}")
            raise typer.Exit(1)
        console.print(f"generated docs under {check_docs} are up to date")
        return
    if check:
        results = check_graph(m)
        for result in results:
            style = "green" if result.ok else "red"
            console.print(f"[{style}]{result}[/{style}]", highlight=False)
        failed = [r for r in results if not r.ok]
        console.print(f"{len(results) - len(failed)} of {len(results)} graph checks hold for {m.name}")
        if failed:
            raise typer.Exit(1)
        return
    if storage.storage not in m.storages:
        err.print(f"[red]error:[/red] model {m.name} has no {storage.storage.value} table")
        raise typer.Exit(2)
    if fmt is GraphFormat.mermaid:
        console.print(mermaid(m, storage.storage), end="", markup=False, highlight=False)
    elif fmt is GraphFormat.dot:
        console.print(dot(m, storage.storage), end="", markup=False, highlight=False)
    else:
        console.print(transition_table(m, storage.storage))


def _value(text: str, what: str) -> ServiceUnitStateData | None:
    if text.strip() in ("", "null", "None"):
        return None
    from statechan.traces import value_from_json

    try:
        return value_from_json(text)
    except pydantic.ValidationError as exc:
        problems = "; ".join(f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors())
        err.print(f"[red]error:[/red] --{what} is not a valid Pulsar value: {problems}")
        raise typer.Exit(2) from None


@app.command("resolve")
def resolve_command(
    prev: Annotated[str, typer.Option("--prev", help="The held value as Pulsar JSON, or null.")],
    new: Annotated[str, typer.Option("--new", help="The offered value as Pulsar JSON, or null.")],
    storage: StorageOption = Storage.system_topic,
    model: ModelOption = DEFAULT_MODEL,
    no_check_brokers: Annotated[bool, typer.Option("--no-check-brokers", help="Skip broker checks.")] = False,
) -> None:
    """Ask the conflict resolver whether a new value replaces the held one."""
    m = _load(model)
    if not m.has_resolver:
        err.print(f"[red]error:[/red] model {m.name} is graph-only: it has no resolver")
        raise typer.Exit(2)
    verdict = resolve(_value(prev, "prev"), _value(new, "new"), storage.storage, not no_check_brokers, m)
    console.print(
        json.dumps(
            {
                "accepted": verdict.accepted,
                "reason": verdict.reason.value,
                "check": verdict.check.value if verdict.check else None,
            }
        )
    )


@app.command("demo")
def demo_command(
    model: ModelOption = DEFAULT_MODEL,
    pages: Annotated[
        Path, typer.Option(help="Where to write the demo's pages (a counterexample, a saved run, an audit).")
    ] = Path("demo-pages"),
) -> None:
    """The main job on built-in defaults: the state graph, its checks, resolver answers, a checked
    simulation, the model checker and the auditor (statechan.demo drives the commands)."""
    from statechan.demo import Commands, run

    run(_load(model), pages, Commands(check=check_command, replay=replay_command))


def _write_trace(cluster: Cluster, path: Path) -> None:
    """Write a cluster's trace and say how to audit it: the auditor's storage and model are the
    cluster's (the trace does not record them)."""
    from statechan.traces import atomic_output, write_records

    with atomic_output(path) as partial:
        count = write_records(cluster.trace, partial)
    flags = "" if cluster.storage is StorageType.SystemTopic else " --storage metadata-store"
    if cluster.model.name != DEFAULT_MODEL:
        flags += f" --model {cluster.model.name}"
    console.print(
        f"trace: {count:,} records written to {path} (audit it: statechan audit {path}{flags})",
        highlight=False,
        markup=False,
        soft_wrap=True,
    )


def _write_run_page(
    path: Path,
    title: str,
    config: SimConfig,
    actions: Sequence[Action],
    picks: Sequence[int] | None,
    **how: Any,
) -> None:
    """Write a run's sequence diagram page (:func:`statechan.sequence.run_diagram` takes ``how``)."""
    from statechan.pages import diagram_page, write_page
    from statechan.sequence import run_diagram

    final = history_checker if how.get("check") is not None else None
    write_page(path, diagram_page(run_diagram(config, actions, title, picks=picks, final_check=final, **how)))
    console.print(f"page: {path} (the run as a sequence diagram)", highlight=False, markup=False)


class StoreChoice(enum.Enum):
    system_topic = "system-topic"
    metadata_store = "metadata-store"
    both = "both"


def _zookeeper_store(address: str) -> Callable[[Clock], Store]:
    """``HOST:PORT[,HOST:PORT][/ROOT]`` -> a factory of :class:`ZooKeeperStore` on it."""
    from statechan.stores.zookeeper import ZooKeeperStore

    hosts, slash, root = address.partition("/")
    return lambda clock: ZooKeeperStore(hosts, clock, root=("/" + root) if slash else None)


def _writable(path: Path | None, option: str, inputs: Sequence[Path] = (), role: str = "an input") -> None:
    """Exit 2 before any work when an output cannot be written where asked (a long run must not
    end in a traceback with its result lost) or would overwrite one of ``inputs``
    (:func:`statechan.traces.check_output`); ``option`` names it in the message."""
    from statechan.traces import check_output

    if path is None:
        return
    try:
        check_output(path, inputs, option, role)
    except ValueError as exc:
        _usage_error(str(exc))


def _usage_error(message: str) -> NoReturn:
    """Exit 2 with ``message`` on one line (printed as it is: paths may hold brackets)."""
    err.print("[red]error:[/red] ", end="")
    err.print(message, markup=False, highlight=False, soft_wrap=True)
    raise typer.Exit(2)


@app.command("simulate")
def simulate_command(
    brokers: Annotated[int, _number("Brokers in the cluster.", 1, 64, "a run's broker set")] = 5,
    namespaces: Annotated[int, _number("Namespaces.", 1, 1_000, "every bundle is checked at every step")] = 10,
    bundles: Annotated[
        int, _number("Bundles per namespace at the start.", 1, 10_000, "every bundle is checked at every step")
    ] = 100,
    hours: Annotated[
        float, _number("Simulated hours of workload (then settling).", 0, 8_760, "a simulated year")
    ] = 24.0,
    seed: Annotated[
        int, _number("Seed: the same seed replays the same run.", 0, LONG_MAX, "a Java long, as saved runs keep it")
    ] = 0,
    store: Annotated[StoreChoice, typer.Option(help="Table view the brokers use; both = with the syncer.")] = (
        StoreChoice.system_topic
    ),
    variant: Annotated[str, typer.Option(help=VARIANT_HELP)] = "current",
    crashes: Annotated[float, _number("Broker crashes per hour.", 0, RATE_MAX, RATE_WHY)] = 0.25,
    session_losses: Annotated[float, _number("Metadata session losses per hour.", 0, RATE_MAX, RATE_WHY)] = 0.25,
    shutdowns: Annotated[float, _number("Graceful shutdowns per hour.", 0, RATE_MAX, RATE_WHY)] = 0.1,
    leader_changes: Annotated[float, _number("Leader resignations per hour.", 0, RATE_MAX, RATE_WHY)] = 0.1,
    transfers: Annotated[float, _number("Admin transfers per hour.", 0, RATE_MAX, RATE_WHY)] = 120.0,
    unloads: Annotated[float, _number("Admin unloads per hour.", 0, RATE_MAX, RATE_WHY)] = 20.0,
    splits: Annotated[float, _number("Bundle splits per hour.", 0, RATE_MAX, RATE_WHY)] = 2.0,
    lookups: Annotated[float, _number("Client lookups per hour.", 0, RATE_MAX, RATE_WHY)] = 3600.0,
    topic_policies: Annotated[
        bool,
        typer.Option(
            "--topic-policies/--no-topic-policies",
            help="Topic-level policies enabled, so the channel topic compacts at 5 MiB (Pulsar's usual case); "
            "without them nothing compacts it.",
        ),
    ] = True,
    check: Annotated[bool, typer.Option("--check/--no-check", help="Check the invariant catalogue.")] = True,
    check_every: Annotated[
        int, _number("Check every N steps (1 = every step).", 1, 1_000_000_000, "a billion steps: never")
    ] = 1,
    trace: Annotated[Path | None, typer.Option(help="Write the trace (JSON Lines) here.")] = None,
    save_run: Annotated[Path | None, typer.Option(help="Save the run (config + actions) for replay.")] = None,
    zookeeper: Annotated[
        str | None,
        typer.Option(
            help="Run the metadata store on this real ZooKeeper (HOST:PORT, or HOST:PORT/ROOT; needs the zk extra); "
            "the run's nodes go under ROOT, or a fresh /statechan-… path that is printed."
        ),
    ] = None,
) -> None:
    """Run a seeded cluster simulation and print what happened."""
    from statechan.cluster.config import VARIANTS, SimConfig, StoreKind, check_cluster_size
    from statechan.cluster.runfile import save_run as write_run
    from statechan.cluster.runner import Simulation, Workload
    from statechan.traces import atomic_output

    if variant not in VARIANTS:
        err.print(f"[red]error:[/red] --variant: unknown {variant!r}; choose from {', '.join(VARIANTS)}")
        raise typer.Exit(2)
    _writable(trace, "--trace")
    _writable(save_run, "--save-run", [trace] if trace else [], "the --trace file")
    try:
        check_cluster_size(namespaces, bundles)
    except ValueError as exc:
        _usage_error(f"--namespaces {namespaces} × --bundles {bundles}: {exc}")
    config = SimConfig(
        brokers=brokers,
        namespaces=namespaces,
        bundles_per_namespace=bundles,
        seed=seed,
        store=StoreKind(store.value),
        variant=VARIANTS[variant],
        trace_views=trace is not None,
        topic_policies=topic_policies,
    )
    workload = Workload(
        crashes_per_hour=crashes,
        session_losses_per_hour=session_losses,
        shutdowns_per_hour=shutdowns,
        leader_changes_per_hour=leader_changes,
        transfers_per_hour=transfers,
        unloads_per_hour=unloads,
        splits_per_hour=splits,
        lookups_per_hour=lookups,
    )
    checker, every = invariant_checker(check_every) if check else (None, check_every)
    console.print(
        f"simulating {brokers} brokers, {namespaces * bundles} bundles, {hours:g} h on "
        f"{store.value}, variant {variant}, seed {seed} …",
        highlight=False,
    )
    make_store = None if zookeeper is None else _zookeeper_store(zookeeper)
    try:
        simulation = Simulation(config, workload, make_store)
    except StoreError as exc:
        err.print(f"[red]error:[/red] --zookeeper: {exc}", highlight=False)
        raise typer.Exit(2) from None
    if zookeeper is not None:
        console.print(f"metadata store: ZooKeeper, nodes under {simulation.cluster.store}", highlight=False)
    summary = simulation.run(int(hours * 3_600_000), check=checker, check_every=every)
    for line in summary.lines():
        console.print(line, highlight=False, markup=False)
    if check:
        history = history_checker(simulation.cluster)
        console.print(
            f"history invariants over {len(simulation.cluster.trace):,} trace records: "
            + (f"{len(history)} violation(s)" if history else "no violation"),
            highlight=False,
        )
        for line in history[:20]:
            console.print(f"  {line}", highlight=False, markup=False)
        summary.violations.extend(history)
    if trace is not None:
        _write_trace(simulation.cluster, trace)
    simulation.cluster.close()
    if save_run is not None:
        with atomic_output(save_run) as partial:
            write_run(partial, config, simulation.cluster.history, note=f"statechan simulate --seed {seed}")
        console.print(f"run saved to {save_run} ({len(simulation.cluster.history):,} actions)")
    if summary.violations or summary.never_reached:
        raise typer.Exit(1)


_BOUNDS = Bounds()
"""The checker's default bounds: the ``statechan check`` options default to them."""


@app.command("check")
def check_command(
    brokers: Annotated[int, _number("Brokers.", 1, 6, "the state space grows with each")] = _BOUNDS.brokers,
    bundles: Annotated[
        int, _number("Bundles (one namespace).", 1, 8, "the state space grows with each")
    ] = _BOUNDS.bundles,
    lookups: Annotated[int, _number("Client lookups in a run.", 0, EVENTS_MAX, EVENTS_WHY)] = _BOUNDS.lookups,
    admin: Annotated[int, _number("Admin operations in a run.", 0, EVENTS_MAX, EVENTS_WHY)] = _BOUNDS.admin,
    admin_kinds: Annotated[
        str, typer.Option(help="Which admin operations: comma-separated transfer, split, unload.")
    ] = ",".join(_BOUNDS.admin_kinds),
    crashes: Annotated[int, _number("Broker crashes in a run.", 0, EVENTS_MAX, EVENTS_WHY)] = _BOUNDS.crashes,
    restarts: Annotated[
        int, _number("Restarts of crashed or shut-down brokers in a run.", 0, EVENTS_MAX, EVENTS_WHY)
    ] = _BOUNDS.restarts,
    shutdowns: Annotated[int, _number("Graceful shutdowns in a run.", 0, EVENTS_MAX, EVENTS_WHY)] = _BOUNDS.shutdowns,
    session_losses: Annotated[
        int, _number("Metadata session losses in a run.", 0, EVENTS_MAX, EVENTS_WHY)
    ] = _BOUNDS.session_losses,
    leader_changes: Annotated[
        int, _number("Leader resignations in a run.", 0, EVENTS_MAX, EVENTS_WHY)
    ] = _BOUNDS.leader_changes,
    compactions: Annotated[
        int, _number("Topic compactions in a run.", 0, EVENTS_MAX, EVENTS_WHY)
    ] = _BOUNDS.compactions,
    ticks: Annotated[int, _number("Timer firings in a run.", 0, EVENTS_MAX, EVENTS_WHY)] = _BOUNDS.ticks,
    depth: Annotated[
        int | None, _number("Longest run explored.", 1, 10_000, "far past any bound's runs")
    ] = _BOUNDS.depth,
    timely_ms: Annotated[
        int | None,
        _number(
            "Timing assumption (ms): no timer fires more than this long after work waits for a running broker.",
            0,
            3_600_000,
            "an hour",
        ),
    ] = _BOUNDS.timely_delivery_ms,
    tombstone_delay: Annotated[
        int,
        _number(
            "Seconds before Free/Deleted are tombstoned (Pulsar: 3600).", 30, 604_800, "a week; 30 lets ticks reach it"
        ),
    ] = _BOUNDS.tombstone_delay_s,
    untimely: Annotated[
        bool, typer.Option("--untimely", help="Drop the timing assumption: timers race any backlog.")
    ] = False,
    store: Annotated[StoreChoice, typer.Option(help="Table view the brokers use; both = with the syncer.")] = (
        StoreChoice.system_topic
    ),
    variant: Annotated[
        str,
        typer.Option(help=VARIANT_HELP),
    ] = "current",
    model: Annotated[
        str | None,
        typer.Option("--model", "-m", help="Run this protocol model (a built-in name or a .toml file) instead."),
    ] = None,
    vacuity: Annotated[
        bool,
        typer.Option(
            "--vacuity/--no-vacuity",
            help="Fail a complete search that never walks a flow the bound demands (statechan.vacuity).",
        ),
    ] = True,
    symmetry: Annotated[bool, typer.Option("--symmetry/--no-symmetry", help="Broker symmetry reduction.")] = True,
    por: Annotated[
        bool,
        typer.Option(
            "--por/--no-por",
            help="Partial-order reduction on the system topic: expand a state through one delivery where that is "
            "shown sound (the same verdict and settled states; docs/checker.md).",
        ),
    ] = True,
    measure_por: Annotated[
        bool, typer.Option(help="Also count states without partial-order reduction, for its factor (slower).")
    ] = False,
    max_states: Annotated[
        int, _number("Stop after this many distinct states.", 1, 1_000_000_000, "far past what one machine searches")
    ] = 1_000_000,
    max_seconds: Annotated[float | None, _number("Stop after this many seconds.", 0.1, 604_800, "a week")] = None,
    max_memory: Annotated[
        int, _number("Stop when the process holds more than this many MiB.", 64, 1_048_576, "a TiB")
    ] = 4_096,
    measure_symmetry: Annotated[
        bool, typer.Option(help="Also count states without symmetry, for the reduction factor (slower).")
    ] = False,
    workers: Annotated[
        int,
        _number(
            "Processes (this one included) that expand each level from the first of 128 states on (the same search "
            "and verdict as one; --verify-fingerprints keeps it to one; not with --graph or --engine memory).",
            1,
            256,
            "a machine's cores",
        ),
    ] = 1,
    verify_fingerprints: Annotated[
        bool,
        typer.Option(
            help="Keep each state's canonical value and stop if two states ever share a fingerprint (memory)."
        ),
    ] = False,
    engine: Annotated[
        SearchEngine | None,
        typer.Option(
            help="compact: 64-bit fingerprints and flat arrays in memory, each level's states on disk (the default "
            "in one process); memory: a node per state (what --graph uses; one process).",
        ),
    ] = None,
    spill_dir: Annotated[
        Path | None,
        typer.Option(help="Where the compact search writes its levels' states (default: the temporary directory)."),
    ] = None,
    swarm: Annotated[
        int | None,
        _number(
            "Instead of searching, run this many seeded random walks checking every invariant (finds bugs past "
            "what a search can finish; proves nothing, checks no liveness).",
            1,
            100_000_000,
            "a hundred million walks",
        ),
    ] = None,
    swarm_longest: Annotated[
        int, _number("Longest swarm walk (each draws its limit between a quarter of this and this).", 1, 100_000, "")
    ] = 120,
    seed: Annotated[
        int, _number("The swarm's seed: the same walks for the same seed.", 0, LONG_MAX, "a Java long, as runs keep it")
    ] = 0,
    spark: Annotated[
        bool,
        typer.Option(
            "--spark",
            help="Search on Spark: each breadth-first level one job, the states spread over the executors "
            "(with --swarm: the walks run on the executors).",
        ),
    ] = False,
    master: Annotated[
        str | None, typer.Option(help="--spark: the Spark master URL (default local[*]: this machine's cores).")
    ] = None,
    checkpoint: Annotated[
        Path | None,
        typer.Option(
            help="Keep the run's checkpoint in this folder, saved at the end of a level (--spark: every level, in one "
            "path the driver and every executor see; else every --checkpoint-every seconds)."
        ),
    ] = None,
    resume: Annotated[
        Path | None,
        typer.Option(help="Go on with the interrupted run in this folder (its --checkpoint), same options."),
    ] = None,
    checkpoint_every: Annotated[
        float,
        _number("Seconds between two checkpoints of the search in this machine.", 0, 604_800, "a week"),
    ] = 600,
    partitions: Annotated[
        int | None,
        _number(
            "--spark: partitions the states are spread over (default twice the task slots).",
            1,
            100_000,
            "far past a cluster's task slots",
        ),
    ] = None,
    liveness: Annotated[
        bool,
        typer.Option(
            "--liveness/--no-liveness",
            help="--spark: check on the driver that every state can settle (it holds the graph's edges); "
            "--no-liveness for graphs one machine cannot hold (the verdict then says liveness was not checked).",
        ),
    ] = True,
    save_run: Annotated[Path | None, typer.Option(help="Save a counterexample here (statechan replay).")] = None,
    graph: Annotated[
        Path | None,
        typer.Option(help="Write the explored graph here: .dot (Graphviz) or .mmd (Mermaid); small bounds only."),
    ] = None,
    skip: Annotated[
        list[str] | None,
        typer.Option(help="Leave out this cluster invariant (repeatable), e.g. to look past a known finding."),
    ] = None,
    also: Annotated[
        list[str] | None,
        typer.Option(
            help="Check this hazard invariant too (repeatable): one the current protocol is known not to hold, "
            "off by default (docs/catalogue.md: release-acted-on, departed-not-assigned, single-server)."
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(help="Write a counterexample as a sequence diagram here (a self-contained HTML page)."),
    ] = None,
) -> None:
    """Explore every run of a small cluster within the bounds: safety and liveness.

    Breadth first, so a counterexample is a shortest one; every cluster invariant is checked on
    every state, and every state must still be able to settle (liveness). Exit 0 when nothing
    breaks, 1 on a counterexample."""
    from statechan.checker import check, graph_text
    from statechan.checker.checkpoint import CheckpointError
    from statechan.cluster.config import StoreKind
    from statechan.cluster.runfile import save_run as write_run
    from statechan.cluster.timeline import build_timeline, format_timeline
    from statechan.traces import atomic_output, write_text_atomically

    bounds, chosen, invariants = _bound_options(**locals())  # the options, by their names
    _writable(save_run, "--save-run")
    _writable(graph, "--graph", [save_run] if save_run else [], "the --save-run file")
    _writable(html, "--html", [p for p in (save_run, graph) if p], "the --save-run or --graph file")
    graph_format = {".dot": "dot", ".gv": "dot", ".mmd": "mermaid"}.get(graph.suffix if graph else "")
    if graph is not None and graph_format is None:
        err.print(f"[red]error:[/red] --graph {graph}: the name must end in .dot, .gv or .mmd")
        raise typer.Exit(2)
    label = variant if model is None else f"{variant} with model {model}"
    console.print(f"checking {label} on {store.value}: {bounds.describe()} …", highlight=False)
    _search_options(
        spark,
        master,
        checkpoint,
        resume,
        partitions,
        liveness,
        swarm,
        graph,
        engine,
        workers,
        verify_fingerprints,
        measure_symmetry,
        measure_por,
    )
    if swarm is not None:
        _swarm(
            bounds,
            StoreKind(store.value),
            chosen,
            invariants,
            swarm,
            swarm_longest,
            seed,
            workers,
            save_run,
            spark,
            master,
        )
        return

    def progress(states: int, queue: int, level: int, seconds: float) -> None:
        console.print(
            f"  {states:,} states, {queue:,} waiting, depth {level}, {states / seconds:,.0f} states/s",
            highlight=False,
        )

    if engine is SearchEngine.compact and graph is not None:
        err.print("[red]error:[/red] --engine compact keeps no graph (drop --graph, or use --engine memory)")
        raise typer.Exit(2)
    if workers > 1 and (graph is not None or engine is SearchEngine.memory):
        err.print("[red]error:[/red] --workers shares out the compact search only (drop --graph or --engine memory)")
        raise typer.Exit(2)
    last_level = [0.0]

    def level_done(level: Level) -> None:
        # every level of a long search; a short one's levels are summed up at the end
        if level.seconds < 10 and level.seconds - last_level[0] < 10:
            return
        last_level[0] = level.seconds
        console.print(f"  {_level_line(level)}", highlight=False)

    try:
        if spark:
            result = _check_on_spark(
                bounds,
                StoreKind(store.value),
                chosen,
                symmetry,
                max_states,
                max_seconds,
                invariants,
                por,
                vacuity,
                master,
                checkpoint,
                resume,
                partitions,
                liveness,
                spill_dir,
                level_done,
            )
        else:
            result = check(
                bounds,
                StoreKind(store.value),
                chosen,
                symmetry=symmetry,
                max_states=max_states,
                max_seconds=max_seconds,
                max_memory_mb=max_memory,
                keep_graph=graph is not None,
                invariants=invariants,
                progress=progress,
                measure_symmetry=measure_symmetry,
                verify_fingerprints=verify_fingerprints,
                workers=workers,
                por=por,
                measure_por=measure_por,
                vacuity=vacuity,
                engine=engine,
                on_level=level_done,
                spill_dir=spill_dir,
                checkpoint=resume or checkpoint,
                resume=resume is not None,
                checkpoint_every_s=checkpoint_every,
                note=lambda text: console.print(f"  {text}", highlight=False),
            )
    except CheckpointError as exc:
        _usage_error(str(exc))
    except FingerprintCollision as exc:
        err.print(
            f"[red]{exc}[/red]: this search is no proof (report it; --no-verify-fingerprints would have merged them)",
            highlight=False,
        )
        raise typer.Exit(3) from exc
    if not result.searched:
        for problem in result.model_problems:
            console.print(f"[red]model:[/red] {problem}", highlight=False)
        for gap in result.never_reached:
            console.print(f"[red]vacuous:[/red] {gap}", highlight=False)
        console.print(
            "the model cannot do what a protocol is asked here, so nothing was searched "
            "(statechan graph --check --model … says more; --no-vacuity searches it anyway)"
        )
        raise typer.Exit(1)
    reduction = ""
    if result.concrete_states:
        reduction = (
            f"; without symmetry {result.concrete_states:,} (reduction {result.concrete_states / result.states:.2f}x)"
        )
    if result.por:
        reduction += f"; {result.reduced:,} expanded through one delivery (partial-order reduction)"
        if result.full_states:
            reduction += f"; without it {result.full_states:,} ({result.full_states / result.states:.2f}x)"
    console.print(
        f"{result.states:,} distinct states{' (broker symmetry)' if symmetry else ''}, "
        f"{result.transitions:,} transitions, depth {result.depth}, {result.seconds:.1f} s, "
        f"{result.rate:,.0f} states/s{reduction}",
        highlight=False,
    )
    console.print(_resources_line(result), highlight=False)
    config = result.config()
    _print_coverage(result.coverage, config.variant.model, config.storage)
    if graph is not None and graph_format is not None:
        write_text_atomically(graph, graph_text(result, graph_format))
        console.print(f"explored graph ({result.states:,} states) written to {graph}", highlight=False)
        if result.states > 500:
            console.print("[yellow]note:[/yellow] more than 500 states; a picture of it will not be readable")
    if not result.complete:
        console.print(
            f"[yellow]not a proof:[/yellow] stopped at the {result.stopped}; the states above were "
            "checked, the rest of the bounded space was not",
            highlight=False,
        )
    if result.ok:
        if result.complete:
            settle = "every state can settle; " if liveness or not spark else ""
            console.print(f"no invariant broken; {settle}every flow the bound demands was walked", highlight=False)
            if not settle:
                from statechan.checker.sparksearch import LIVENESS_NOT_CHECKED

                console.print(f"[yellow]{LIVENESS_NOT_CHECKED}[/yellow]", highlight=False)
        return
    if result.never_reached:
        for gap in result.never_reached:
            console.print(f"[red]vacuous:[/red] {gap}", highlight=False)
        console.print(
            "the invariants held, but the protocol never did what the bound asks of it (--no-vacuity to allow)"
        )
        raise typer.Exit(1)
    problem = result.violation or result.liveness or ""
    steps = build_timeline(config, result.path, None, stop_at_violation=False, picks=result.picks)
    if result.lasso >= 0:
        for step in steps[result.lasso :]:
            step.action = "(loop) " + step.action
    console.print(format_timeline(steps, f"counterexample ({len(result.path)} steps)"), markup=False, highlight=False)
    console.print(f"[red]{'broken' if result.violation else 'liveness'}:[/red] ", end="")
    console.print(problem, markup=False, highlight=False)
    if save_run is not None:
        with atomic_output(save_run) as partial:
            write_run(partial, config, result.path, note=f"statechan check: {problem}", picks=result.picks)
        console.print(f"saved to {save_run}; statechan replay {save_run}", highlight=False)
    if html is not None:
        title = f"statechan check --variant {variant} ({bounds.describe()})"
        _write_run_page(
            html,
            title,
            config,
            result.path,
            result.picks,
            problem=problem,
            liveness=result.violation is None,
            lasso=result.lasso,
            note=f"counterexample: {problem}",
        )
    raise typer.Exit(1)


def _search_options(
    spark: bool,
    master: str | None,
    checkpoint: Path | None,
    resume: Path | None,
    partitions: int | None,
    liveness: bool,
    swarm: int | None,
    graph: Path | None,
    engine: SearchEngine | None,
    workers: int,
    verify_fingerprints: bool,
    measure_symmetry: bool,
    measure_por: bool,
) -> None:
    """``statechan check``'s Spark and checkpoint options: exit 2 naming one that does not go with the others."""
    if checkpoint is not None and resume is not None and checkpoint != resume:
        _usage_error("--resume DIR goes on in DIR: give --checkpoint the same folder, or leave it out")
    if not spark:
        given = [name for name, value in (("--master", master), ("--partitions", partitions)) if value is not None] + (
            [] if liveness else ["--no-liveness"]
        )
        if given:
            _usage_error(f"{', '.join(given)}: for --spark")
        saving = checkpoint is not None or resume is not None
        clashes = [
            name
            for name, clash in (
                ("--swarm", swarm is not None),
                ("--graph", graph is not None),
                ("--engine memory", engine is SearchEngine.memory),
                ("--verify-fingerprints", verify_fingerprints),
            )
            if clash
        ]
        if saving and clashes:
            _usage_error(f"--checkpoint and --resume are the compact search's: not with {', '.join(clashes)}")
        return
    clashes = [
        name
        for name, clash in (
            ("--graph", graph is not None),
            ("--engine", engine is not None),
            ("--workers", workers > 1),
            ("--verify-fingerprints", verify_fingerprints),
            ("--measure-symmetry", measure_symmetry),
            ("--measure-por", measure_por),
        )
        if clash
    ]
    if clashes:
        _usage_error(f"--spark searches on the executors: {', '.join(clashes)} is for the search in this machine")
    if swarm is not None and (checkpoint or resume or partitions or not liveness):
        _usage_error("--swarm --spark takes --master only (a swarm keeps no checkpoint and checks no liveness)")


def _check_on_spark(
    bounds: Bounds,
    store: StoreKind,
    variant: str | Variant,
    symmetry: bool,
    max_states: int,
    max_seconds: float | None,
    invariants: list[str],
    por: bool,
    vacuity: bool,
    master: str | None,
    checkpoint: Path | None,
    resume: Path | None,
    partitions: int | None,
    liveness: bool,
    spill_dir: Path | None,
    level_done: Callable[[Level], None],
) -> CheckResult:
    """``statechan check --spark``: the search on Spark, its notes printed; a checkpoint that cannot be
    resumed, or a Spark failure, is an error naming it."""
    from statechan.checker.sparksearch import CheckpointMismatch, check_on_spark

    def note(text: str) -> None:
        console.print(f"  {text}", highlight=False)

    try:
        return check_on_spark(
            bounds,
            store,
            variant,
            symmetry,
            max_states,
            max_seconds,
            invariants,
            por,
            vacuity,
            master=master,
            checkpoint=resume or checkpoint,
            resume=resume is not None,
            partitions=partitions,
            liveness=liveness,
            spill_dir=spill_dir,
            on_level=level_done,
            note=note,
        )
    except CheckpointMismatch as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from exc


def _swarm(
    bounds: Bounds,
    store: StoreKind,
    variant: str | Variant,
    invariants: list[str],
    walks: int,
    longest: int,
    seed: int,
    workers: int,
    save_run: Path | None,
    spark: bool = False,
    master: str | None = None,
) -> None:
    """``statechan check --swarm N``: the walks, what they covered, and the shortest counterexample."""
    from statechan.checker.swarm import swarm
    from statechan.cluster.runfile import save_run as write_run
    from statechan.cluster.timeline import build_timeline, format_timeline
    from statechan.traces import atomic_output

    def progress(done: int, states: int, seconds: float) -> None:
        console.print(f"  {done:,} walks, {states:,} distinct states, {seconds:,.0f} s", highlight=False)

    session, owned = None, False
    if spark:
        from statechan.checker.sparksearch import start_spark

        session, owned = start_spark(master, note=lambda text: console.print(f"  {text}", highlight=False))
    try:
        result = swarm(
            bounds, store, variant, walks, seed, longest, workers, invariants, progress=progress, spark=session
        )
    finally:
        if session is not None and owned:
            session.stop()
    console.print(
        f"swarm: {result.walks:,} walks (seed {seed}, up to {longest} steps each), {result.steps:,} steps, "
        f"{result.states:,} distinct states (broker symmetry), {result.seconds:.1f} s",
        highlight=False,
    )
    if result.ok:
        console.print(result.verdict, highlight=False)
        return
    config = checker_config(bounds, store, variant)
    steps = build_timeline(config, result.path, None, stop_at_violation=False, picks=result.picks)
    console.print(format_timeline(steps, f"counterexample ({len(result.path)} steps)"), markup=False, highlight=False)
    console.print("[red]broken:[/red] ", end="")
    console.print(
        f"{result.violation} — found by {result.violating_walks:,} walk(s); the shortest shown "
        "(a search may find a shorter one)",
        markup=False,
        highlight=False,
    )
    if save_run is not None:
        with atomic_output(save_run) as partial:
            write_run(
                partial, config, result.path, note=f"statechan check --swarm: {result.violation}", picks=result.picks
            )
        console.print(f"saved to {save_run}; statechan replay {save_run}", highlight=False)
    raise typer.Exit(1)


def _level_line(level: Level) -> str:
    """A finished breadth-first level: its states, growth, the projected total, time and resources."""
    projected = f"projected total {level.projected:,}" if level.projected is not None else "no end projected yet"
    return (
        f"depth {level.depth}: {level.states:,} states (x{level.growth:.2f}), {level.total:,} in all, {projected}; "
        f"{level.seconds:,.0f} s, {level.resident_mb:,.0f} MiB resident, {level.disk_mb:,.1f} MiB on disk"
    )


def _resources_line(result: CheckResult) -> str:
    """What the search held (peak resident memory, disk), and the chance its 64-bit fingerprints
    merged two states."""
    from statechan.checker.compact import projected_total

    line = f"peak memory {result.peak_memory_mb:,.0f} MiB resident"
    if result.engine is SearchEngine.compact:
        line += f" ({result.memory_mb:,.1f} MiB of fingerprints and arrays), {result.disk_mb:,.1f} MiB on disk at most"
        if result.levels:
            widest = max(range(len(result.levels)), key=result.levels.__getitem__)
            line += f"; {len(result.levels)} levels, the widest {result.levels[widest]:,} states at depth {widest}"
            if not result.complete:
                projected = projected_total(result.levels)
                line += f", projected total {projected:,}" if projected is not None else ", no end projected yet"
    line += f"; chance of a fingerprint collision {result.collision_probability:.1e}"
    return line


def _hazards_named(also: list[str] | None) -> tuple[str, ...]:
    """The hazard entries ``--also`` names; exit 2 naming one the catalogue does not have."""
    from statechan.invariants.catalogue import hazard_ids

    unknown = sorted(set(also or ()) - set(hazard_ids()))
    if unknown:
        _usage_error(f"--also: unknown {', '.join(unknown)}; hazard invariants: {', '.join(hazard_ids())}")
    return tuple(also or ())


def _bound_options(
    *,
    brokers: int,
    bundles: int,
    lookups: int,
    admin: int,
    admin_kinds: str,
    crashes: int,
    restarts: int,
    shutdowns: int,
    session_losses: int,
    leader_changes: int,
    compactions: int,
    ticks: int,
    depth: int | None,
    timely_ms: int | None,
    tombstone_delay: int,
    untimely: bool,
    variant: str,
    model: str | None,
    skip: list[str] | None,
    also: list[str] | None = None,
    **_: object,
) -> tuple[Bounds, str | Variant, list[str]]:
    """The bound, the variant (with its model) and the cluster invariants that ``statechan check``'s
    options name (``statechan explore`` takes the same); exit 2 naming the option that is wrong."""
    from statechan.invariants.catalogue import checked_ids, simulation_ids

    if variant not in VARIANTS:
        err.print(f"[red]error:[/red] --variant: unknown {variant!r}; choose from {', '.join(VARIANTS)}")
        raise typer.Exit(2)
    chosen: str | Variant = variant
    if model is not None:
        try:
            load_model(model)
        except (ModelError, ValueError) as exc:
            _usage_error(f"--model: {exc}")
        chosen = VARIANTS[variant].model_copy(update={"model": model})
    cluster_ids = simulation_ids()
    unknown_ids = sorted(set(skip or ()) - set(cluster_ids))
    if unknown_ids:
        err.print(
            f"[red]error:[/red] --skip: unknown {', '.join(unknown_ids)}; cluster invariants: {', '.join(cluster_ids)}"
        )
        raise typer.Exit(2)
    if restarts > crashes + shutdowns:
        _usage_error(
            f"--restarts {restarts}: only a crashed or shut-down broker restarts, and a run has "
            f"{crashes} crash(es) and {shutdowns} shutdown(s) (--crashes, --shutdowns)"
        )
    invariants = checked_ids(skip or (), _hazards_named(also))
    kinds = tuple(k.strip() for k in admin_kinds.split(",") if k.strip())
    try:
        bounds = Bounds(
            brokers=brokers,
            bundles=bundles,
            lookups=lookups,
            admin=admin,
            admin_kinds=kinds,
            crashes=crashes,
            restarts=restarts,
            shutdowns=shutdowns,
            session_losses=session_losses,
            leader_changes=leader_changes,
            compactions=compactions,
            ticks=ticks,
            depth=depth,
            timely_delivery_ms=None if untimely else timely_ms,
            tombstone_delay_s=tombstone_delay,
        )
    except pydantic.ValidationError as exc:
        for error in exc.errors():
            field = str(error["loc"][0]) if error["loc"] else "bounds"
            flag = bound_flag(field)
            err.print(f"[red]error:[/red] {flag}: {error['msg'].removeprefix('Value error, ')}", highlight=False)
        raise typer.Exit(2) from None
    return bounds, chosen, invariants


EXPLORE_CHECK_OPTIONS = (
    "brokers",
    "bundles",
    "lookups",
    "admin",
    "admin_kinds",
    "crashes",
    "restarts",
    "shutdowns",
    "session_losses",
    "leader_changes",
    "compactions",
    "ticks",
    "depth",
    "timely_ms",
    "tombstone_delay",
    "untimely",
    "store",
    "variant",
    "model",
    "skip",
    "symmetry",
    "por",
)
"""The ``statechan check`` options ``statechan explore`` takes too (the bound, and how its graph is searched)."""
GRAPH_LIMIT_WHY = "past it the picture helps nobody and takes minutes to lay out"


def explore_command(
    runs: Annotated[
        list[Path] | None,
        typer.Option(
            "--runs",
            help="Saved runs the explorer may open (files, or folders of *.json; repeatable). "
            "Default: docs/counterexamples when it is here.",
        ),
    ] = None,
    host: Annotated[str, typer.Option(help="The address to listen on (127.0.0.1: this machine only).")] = "127.0.0.1",
    port: Annotated[int, _number("The port to listen on (0: a free one).", 0, 65_535, "TCP's ports")] = 0,
    graph_limit: Annotated[
        int, _number("Draw the bound's state graph up to this many states.", 1, GRAPH_LIMIT_MAX, GRAPH_LIMIT_WHY)
    ] = GRAPH_LIMIT,
    **options: Any,
) -> None:
    """Walk the model in a browser: from a bound's initial state (the same options as statechan
    check), step by choosing among the enabled actions, see each broker's view, the channel, the
    timers and every invariant's verdict, the path as a sequence diagram; jump to the checker's
    counterexample, a saved run, or a state of the bound's state graph (docs/explore.md)."""
    from statechan.cluster.config import StoreKind
    from statechan.pages.explore import ServeError, bind, open_explorer, serve  # Flask: the explore extra

    bounds, chosen, invariants = _bound_options(**options)
    if runs is None:
        runs = [Path("docs/counterexamples")] if Path("docs/counterexamples").is_dir() else []
    missing = [str(r) for r in runs if not r.exists()]
    if missing:
        _usage_error(f"--runs: no such file or folder: {', '.join(missing)}")
    try:
        listening = bind(host, port)
    except ServeError as exc:
        _usage_error(str(exc))
    explorer = open_explorer(
        bounds,
        StoreKind(options["store"].value),
        chosen,
        options["variant"],
        invariants,
        runs,
        graph_limit=graph_limit,
        symmetry=options["symmetry"],
        por=options["por"],
    )
    unopenable = [saved for saved in explorer.runs if saved.error]
    console.print(
        f"exploring {explorer.bound.describe()}; {len(explorer.runs) - len(unopenable)} saved run(s) to open"
        + (f" from {', '.join(map(str, runs))}" if runs else ""),
        highlight=False,
    )
    for saved in unopenable:
        err.print(f"[yellow]cannot open:[/yellow] {saved.error}", highlight=False, markup=True)
    server = serve(explorer, host, port, listening)
    if host not in ("127.0.0.1", "::1", "localhost"):
        err.print(f"[yellow]note:[/yellow] listening on {host}: whoever reaches this machine there can use it")
    console.print(f"statechan explore: open {server.url} (Ctrl-C stops it)", highlight=False, markup=False)
    sys.stdout.flush()
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        console.print("stopped")


def _with_options_of(command: Callable[..., Any], names: Sequence[str], into: Callable[..., Any]) -> None:
    """Give ``into`` (whose last parameter is ``**options``) the parameters ``names`` of
    ``command``, declared there once: the command line offers them, with the same help and
    checks, and passes their values in ``options``."""
    import inspect

    theirs = inspect.signature(command, eval_str=True).parameters
    own = [p for p in inspect.signature(into, eval_str=True).parameters.values() if p.kind is not p.VAR_KEYWORD]
    shared = [theirs[name].replace(kind=inspect.Parameter.KEYWORD_ONLY) for name in names]
    setattr(into, "__signature__", inspect.Signature([*own, *shared]))  # noqa: B010 (what typer reads)


_with_options_of(check_command, EXPLORE_CHECK_OPTIONS, explore_command)
app.command("explore")(explore_command)


def _print_coverage(coverage: dict[tuple[str, str], Counter[str]], model: str, storage: StorageType) -> None:
    """The declared table's transitions, each with how often the exploration took it, and by which step."""
    table = Table(title=f"Transitions taken ({storage.value} table)", title_justify="left")
    table.add_column("from")
    table.add_column("to")
    table.add_column("taken", justify="right")
    table.add_column("by")
    table.add_column("declared flows")
    declared = {(a.name, b.name): edge.flows for (a, b), edge in load_model(model).edges(storage).items()}
    for pair in sorted(set(declared) | set(coverage)):
        counts = coverage.get(pair, Counter())
        total = sum(counts.values())
        table.add_row(
            pair[0],
            pair[1],
            f"{total:,}" if total else "[yellow]0[/yellow]",
            ", ".join(f"{k} {v:,}" for k, v in counts.most_common()),
            ", ".join(declared[pair]) if pair in declared else _undeclared(pair, storage),
        )
    console.print(table)


def _undeclared(pair: tuple[str, str], storage: StorageType) -> str:
    if pair[0] == "Init" and storage is StorageType.MetadataStore:
        # section 3 of the reference: with no previous value the resolver returns before the table
        return "not in the table: a first value (split children), accepted without it"
    return "[red]not declared![/red]"


@app.command("replay")
def replay_command(
    run: Annotated[Path, typer.Argument(help="A run saved by simulate --save-run or by the bench.")],
    quiet: Annotated[bool, typer.Option(help="Only the verdict, not the timeline.")] = False,
    trace: Annotated[
        Path | None, typer.Option(help="Write the whole run's trace (JSON Lines, view records included) here.")
    ] = None,
    html: Annotated[
        Path | None, typer.Option(help="Write the run as a sequence diagram here (a self-contained HTML page).")
    ] = None,
    also: Annotated[
        list[str] | None,
        typer.Option(help="Check this hazard invariant too (repeatable), as statechan check --also does."),
    ] = None,
) -> None:
    """Replay a saved run step by step, printing its timeline and any broken invariant."""
    from statechan.cluster.runfile import RunFileError, load_saved_run, replay
    from statechan.cluster.timeline import build_timeline, format_timeline

    try:
        config, actions, note, picks = load_saved_run(run)
    except RunFileError as exc:
        _usage_error(str(exc))
    hazards = _hazards_named(also)
    _writable(trace, "--trace", [run])
    _writable(html, "--html", [run, *([trace] if trace else [])], "an input or the --trace file")
    checker, _ = invariant_checker(1, hazards)
    steps = build_timeline(config, actions, checker, stop_at_violation=True, final_check=history_checker, picks=picks)
    if not quiet:
        console.print(format_timeline(steps, f"{run}: {note}".rstrip(": ")), markup=False, highlight=False)
    if html is not None:
        _write_run_page(html, str(run), config, actions, picks, note=note, check=invariant_checker(1, hazards)[0])
    broken = [v for step in steps for v in step.violations]
    errors = [(i, step) for i, step in enumerate(steps, start=1) if step.error]
    if errors:
        number, failed = errors[0]
        error = failed.error or ""
        said = error if error.startswith(failed.action) else f"{failed.action}: {error}"  # name the action once
        _usage_error(f"{run}: step {number} cannot run: {said}")
    replayed = sum(1 for step in steps if step.number > 0 and step.error is None)
    console.print(
        f"{replayed} of {len(actions)} steps replayed; "
        + (f"broken: {broken[0]}" if broken else "no invariant broken"),
        highlight=False,
        markup=False,
    )
    if trace is not None:  # every action, past a broken invariant too: the trace of the whole run
        _write_trace(replay(config, actions, picks), trace)
    if broken:
        raise typer.Exit(1)


traces_app = typer.Typer(help="The trace format: validate traces, print the JSON Schema.", no_args_is_help=True)
app.add_typer(traces_app, name="traces")


@traces_app.command("schema")
def traces_schema_command() -> None:
    """Print the JSON Schema of one trace line (traces/trace.schema.json is this output)."""
    from statechan.traces import json_schema

    sys.stdout.write(json.dumps(json_schema(), indent=2, sort_keys=True) + "\n")


@traces_app.command("report-schema")
def traces_report_schema_command() -> None:
    """Print the JSON Schema of the auditor's report (traces/report.schema.json is this output)."""
    from statechan.audit import report_schema

    sys.stdout.write(json.dumps(report_schema(), indent=2, sort_keys=True) + "\n")


def _trace_files(paths: Sequence[Path]) -> list[Path]:
    """The trace files named (:func:`statechan.traces.trace_files`: folders as their part files);
    exit 2 naming a path that is neither a file nor a folder of traces."""
    from statechan.traces import trace_files

    try:
        return trace_files(paths)
    except ValueError as exc:
        _usage_error(str(exc))


def _readable(paths: Sequence[Path]) -> None:
    """Every trace can be read through, or exit 2 naming the first that cannot."""
    from statechan.traces import check_readable

    for path in paths:
        try:
            check_readable(path)
        except (OSError, ValueError) as exc:
            message = f"{path}: no such file" if isinstance(exc, FileNotFoundError) else str(exc)
            err.print("[red]error:[/red] ", end="", highlight=False)
            err.print(message, highlight=False, markup=False, soft_wrap=True)
            raise typer.Exit(2) from None


@traces_app.command("validate")
def traces_validate_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Traces: .jsonl, .jsonl.gz or .parquet (any mix), or folders of them.")
    ],
    show: Annotated[int, _number("Bad lines or rows to print.", 0, 1_000_000, "all are counted anyway")] = 20,
) -> None:
    """Read traces, count records per kind and report every line (or Parquet row) that is not a
    trace record."""
    from collections import Counter

    from statechan.traces import ReadStats, read_records

    kinds: Counter[str] = Counter()
    stats = ReadStats()
    last_offset = -1
    out_of_order = 0
    paths = _trace_files(paths)
    _readable(paths)
    for path in paths:
        for record in read_records(path, stats):
            kinds[record.kind] += 1
            if record.offset <= last_offset:
                out_of_order += 1
            last_offset = record.offset
    summary = ", ".join(f"{kind} {count:,}" for kind, count in sorted(kinds.items())) or "none"
    console.print(f"{stats.records:,} records ({summary}); {len(stats.bad):,} bad line(s)", highlight=False)
    if out_of_order:
        console.print(f"{out_of_order:,} record(s) not in offset order", highlight=False)
    for bad in stats.bad[:show]:
        err.print(str(bad), markup=False, highlight=False, soft_wrap=True)
    if stats.bad or out_of_order:
        raise typer.Exit(1)


@traces_app.command("convert")
def traces_convert_command(
    source: Annotated[Path, typer.Argument(help="A trace: .jsonl, .jsonl.gz or .parquet.")],
    destination: Annotated[Path, typer.Argument(help="Where to write: .jsonl, .jsonl.gz or .parquet.")],
) -> None:
    """Convert a trace between JSON Lines and Parquet (the format follows the file names)."""
    from statechan.traces import ReadStats, convert

    for path in (source, destination):
        if not (path.name.endswith((".jsonl", ".jsonl.gz", ".parquet"))):
            err.print(f"[red]error:[/red] {path}: expected a .jsonl, .jsonl.gz or .parquet name")
            raise typer.Exit(2)
    _readable([source])
    _writable(destination, "destination", [source])
    stats = ReadStats()
    written = convert(source, destination, stats)
    console.print(f"{written:,} records written to {destination}; {len(stats.bad):,} bad line(s) left out")
    for bad in stats.bad[:20]:
        err.print(str(bad), markup=False, highlight=False, soft_wrap=True)
    if stats.bad:
        raise typer.Exit(1)


@traces_app.command("show")
def traces_show_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Traces: .jsonl, .jsonl.gz or .parquet (any mix), or folders of them.")
    ],
    key: Annotated[list[str] | None, typer.Option("--key", "-k", help="A bundle key to follow (repeatable).")] = None,
    namespace: Annotated[
        str | None, typer.Option("--namespace", "-n", help="Follow every key of this tenant/namespace.")
    ] = None,
    around: Annotated[
        int | None,
        _number("Show only the entries around this offset (an audit example's).", 0, LONG_MAX, "an offset is a long"),
    ] = None,
    context: Annotated[int, _number("Entries either side of --around.", 0, 1_000_000, "a screenful is far less")] = 10,
    storage: Annotated[
        Storage, typer.Option("--storage", "-s", help="The resolver's storage: a topic or a store dump.")
    ] = Storage.system_topic,
    model: ModelOption = DEFAULT_MODEL,
    views: Annotated[bool, typer.Option("--views", help="Also show the view records of the keys.")] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="One JSON object per entry (the record, its verdict, the value held).")
    ] = False,
    html: Annotated[
        Path | None, typer.Option(help="Also write the entries shown as a sequence diagram here (an HTML page).")
    ] = None,
) -> None:
    """Show a bundle's records in offset order, each with the resolver's verdict and the value a
    reader holds after it, interleaved with the broker registry and leader records."""
    from statechan.explain import Selection, story

    _load(model)
    try:
        selection = Selection(frozenset(key or ()), namespace, views)
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    paths = _trace_files(paths)
    _readable(paths)
    _writable(html, "--html", paths, "a trace")
    try:
        told = story(paths, selection, storage.storage, model)
    except (OSError, ValueError) as exc:
        err.print("[red]error:[/red] ", end="", highlight=False)
        err.print(str(exc), highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    shown = told.entries if around is None else told.around(around, context)
    channel = sum(1 for e in told.entries if e.verdict is not None)
    if as_json:
        for entry in shown:
            sys.stdout.write(json.dumps(entry.to_json(), separators=(",", ":")) + "\n")
    else:
        console.print(story_table(shown, several=len(told.keys) > 1 or selection.namespace is not None))
        console.print(
            f"{counted(channel, 'channel record')} of {counted(len(told.keys), 'key')}"
            + (f", {len(shown):,} of {len(told.entries):,} entries shown" if len(shown) < len(told.entries) else "")
            + f"; {told.records:,} records read, {told.malformed:,} malformed",
            highlight=False,
        )
    if not channel:
        err.print("[red]error:[/red] no channel record of the selected keys in the trace", highlight=False)
        raise typer.Exit(1)
    if html is not None:
        from statechan.pages import diagram_page, write_page
        from statechan.sequence import story_diagram

        title = ", ".join(told.keys) + ("" if around is None else f" around offset {around}")
        left = len(told.entries) - len(shown)
        omitted = f"{left:,} more entries of the story are not drawn (--around, --context)" if left else ""
        diagram = story_diagram(shown, title, focus={around: []} if around is not None else None, omitted=omitted)
        write_page(html, diagram_page(diagram))
        console.print(f"page: {html} (the story as a sequence diagram)", highlight=False, markup=False)


def _plants(specs: list[str]) -> dict[str, int]:
    from statechan.tracegen import PLANT_KINDS

    plants: dict[str, int] = {}
    for spec in specs:
        kind, _, count = spec.partition("=")
        if kind not in PLANT_KINDS or not re.fullmatch(r"[0-9]{1,9}", count) or int(count) > PLANTS_MAX:
            raise typer.BadParameter(
                f"{spec!r}: expected KIND=COUNT with KIND one of {', '.join(PLANT_KINDS)} and COUNT 0 to "
                f"{PLANTS_MAX:,} (each plant is a namespace of its own)",
                param_hint="--plant",
            )
        plants[kind] = plants.get(kind, 0) + int(count)
    return plants


@traces_app.command("generate")
def traces_generate_command(
    destination: Annotated[Path, typer.Argument(help="Where to write: .jsonl, .jsonl.gz or .parquet.")],
    records: Annotated[
        int, _number("About how many records.", 1, 10_000_000_000, "about a TB of JSON", "--records", "-n")
    ] = 100_000,
    seed: Annotated[int, _number("The same seed gives the same trace.", 0, LONG_MAX, "a Java long")] = 0,
    namespaces: Annotated[
        int | None,
        _number("Namespaces (default: records/500, at most 1000).", 1, 100_000, "each is kept in memory"),
    ] = None,
    brokers: Annotated[int, _number("Brokers in the generated cluster.", 2, 10_000, "each is kept in memory")] = 8,
    plant: Annotated[
        list[str] | None,
        typer.Option(help="Inject violations: KIND=COUNT (repeatable), e.g. --plant stuck-in-flight=3."),
    ] = None,
    workers: Annotated[
        int | None,
        _number(
            "Worker processes that play shares of the namespaces (default: every core); the same trace "
            "whatever their number.",
            1,
            256,
            "each is a process",
        ),
    ] = None,
) -> None:
    """Generate a trace at scale, optionally with planted violations.

    Assign, transfer, unload, split, crashes and clean-up across many bundles and brokers, with
    known numbers of planted violations."""
    from statechan.tracegen import write_generated
    from statechan.traces import atomic_output

    if not destination.name.endswith((".jsonl", ".jsonl.gz", ".parquet")):
        err.print(f"[red]error:[/red] {destination}: expected a .jsonl, .jsonl.gz or .parquet name")
        raise typer.Exit(2)
    _writable(destination, "destination")
    plants = _plants(plant or [])
    with atomic_output(destination) as partial:
        stats = write_generated(
            partial,
            records,
            seed,
            namespaces=namespaces,
            brokers=brokers,
            plant=plants,
            workers=workers if workers is not None else os.cpu_count() or 1,
        )
    planted = ", ".join(f"{k} {v}" for k, v in stats.planted.items() if v) or "none"
    console.print(
        f"{stats.records:,} records ({stats.channel_records:,} channel, {stats.bundles:,} bundles in "
        f"{stats.namespaces:,} namespaces, {counted(stats.crashes, 'crash')}) written to {destination}; "
        f"planted: {planted}",
        highlight=False,
    )


capture_app = typer.Typer(help="Capture a live store's ownership state as a trace.", no_args_is_help=True)
app.add_typer(capture_app, name="capture")
app.add_typer(balance_app, name="balance")


@capture_app.command("zk")
def capture_zk_command(
    hosts: Annotated[
        str,
        typer.Option(
            help="ZooKeeper connect string, host:port, several joined by commas, optionally ending in /root (a chroot)."
        ),
    ],
    out: Annotated[Path, typer.Option(help="Where to write the trace: .jsonl or .jsonl.gz.")],
    timeout: Annotated[float, _number("Seconds to wait for the connection.", 0.1, 3_600, "an hour")] = 10.0,
    follow: Annotated[
        float, _number("After the snapshot, record every change for this many seconds.", 0, 604_800, "a week")
    ] = 0.0,
) -> None:
    """Snapshot a live ZooKeeper's bundle states and broker registry into a trace.

    /service_unit_state/** and the registry, for statechan audit (a snapshot holds each bundle's
    last write only, like a compacted topic, so audit it with the default system-topic rules);
    with --follow, go on recording changes (new values, deletions as tombstones, brokers
    registering and leaving). Malformed nodes are kept in OUT.quarantine.jsonl, not fatal."""
    from statechan.capture import CaptureError, capture_zk
    from statechan.traces import atomic_output, write_records

    if not out.name.endswith((".jsonl", ".jsonl.gz")):
        err.print(f"[red]error:[/red] --out {out}: expected a .jsonl or .jsonl.gz name", soft_wrap=True)
        raise typer.Exit(2)
    _writable(out, "--out")
    try:
        if follow > 0:
            console.print(f"taking a snapshot, then following changes for {follow:g} s …", highlight=False)
        captured = capture_zk(hosts, timeout, follow_s=follow)
    except CaptureError as exc:
        _usage_error(str(exc))
    with atomic_output(out) as partial:
        written = write_records(captured.records, partial)
    channel = sum(1 for r in captured.records if r.kind == "channel")
    console.print(
        f"{written:,} records ({channel:,} channel, {written - channel:,} registry) written to {out}",
        highlight=False,
    )
    if captured.unseen:
        console.print(
            f"{sum(captured.unseen.values()):,} write(s) to {len(captured.unseen):,} bundle node(s) came between "
            "two reads and are not in the trace (a ZooKeeper watch says that a node changed; the read after it "
            "gets only the latest value)",
            highlight=False,
        )
    if captured.bad:
        quarantine = out.with_name(out.name.split(".jsonl")[0] + ".quarantine.jsonl")
        with atomic_output(quarantine) as partial, open(partial, "w", encoding="utf-8") as handle:
            for bad in captured.bad:
                handle.write(json.dumps({"path": bad.path, "error": bad.error, "data": bad.data}) + "\n")
        console.print(f"{len(captured.bad):,} malformed node(s) kept in {quarantine}", highlight=False)
        for bad in captured.bad[:20]:
            err.print(str(bad), markup=False, highlight=False, soft_wrap=True)


class Engine(enum.Enum):
    spark = "spark"
    local = "local"


class SparkRead(enum.Enum):
    """How the Spark engine reads a trace (:func:`statechan.audit.audit_spark`)."""

    auto = "auto"
    workers = "workers"
    spark = "spark"


@app.command("mutate")
def mutate_command(
    model: Annotated[str, typer.Argument(help="A built-in model name or a model file (.toml).")] = DEFAULT_MODEL,
    jobs: Annotated[int, _number("Mutants run at a time (processes).", 1, 64, "a machine's cores")] = 2,
    kind: Annotated[list[str] | None, typer.Option("--kind", help="Only mutants of this kind (repeatable).")] = None,
    only: Annotated[
        list[str] | None, typer.Option("--only", help="Only mutants whose id contains this text (repeatable).")
    ] = None,
    equivalent: Annotated[
        Path | None,
        typer.Option(help="The equivalence arguments (default: models/equivalent/<model>.toml, if it exists)."),
    ] = None,
    markdown: Annotated[Path | None, typer.Option(help="Also write the result as a Markdown table here.")] = None,
) -> None:
    """Mutation-test a protocol model: change it one way at a time and see whether the bench notices.

    Each mutant (an edge removed or added, a broker check removed, a resolver rule flipped, a state
    moved between classes, an override removed) runs the battery of checker bounds and
    simulations; the first failure kills it. Exit 1 when a mutant survives without an
    equivalence argument."""
    from statechan.mutate import (
        MutantKind,
        Outcome,
        Verdict,
        default_equivalents,
        load_equivalents,
        mutate,
        read_model_data,
    )

    kinds = {k.value for k in MutantKind}
    unknown = sorted(set(kind or ()) - kinds)
    if unknown:
        _usage_error(f"--kind: unknown {', '.join(unknown)}; kinds: {', '.join(sorted(kinds))}")
    try:
        _, origin = read_model_data(model)
    except (ModelError, ValueError) as exc:
        _usage_error(f"MODEL: {exc}")
    path = equivalent if equivalent is not None else default_equivalents(origin)
    read = [path, *([origin] if origin.is_file() else [])]  # a built-in model's name is no file here
    _writable(markdown, "--markdown", read)
    arguments: dict[str, str] = {}
    if equivalent is not None or path.exists():
        try:
            arguments = load_equivalents(path)
        except ValueError as exc:
            _usage_error(f"--equivalent: {exc}")
    wanted_kinds = set(kind or ())
    wanted_text = list(only or ())

    def keep(mutant: Any) -> bool:
        return (not wanted_kinds or mutant.kind.value in wanted_kinds) and (
            not wanted_text or any(text in mutant.id for text in wanted_text)
        )

    def progress(done: int, total: int, outcome: Outcome) -> None:
        err.print(
            f"[dim]{done}/{total}[/dim] {outcome.mutant}: {outcome.verdict.value}"
            + (f" by {outcome.by}" if outcome.verdict is Verdict.KILLED else "")
            + f" ({outcome.seconds:.0f} s)",
            highlight=False,
            markup=True,
        )

    err.print(f"mutating {origin}: running the battery on the original first …", highlight=False)
    try:
        report = mutate(
            model,
            jobs=jobs,
            only=keep,
            equivalents=arguments,
            progress=progress,
            equivalents_file=str(path) if arguments else "",
        )
    except ValueError as exc:
        err.print(f"[red]error:[/red] {exc}", highlight=False)
        raise typer.Exit(2) from None
    table = Table(title=f"Mutants of {report.model}", title_justify="left")
    for column in ("mutant", "verdict", "by", "what it said / why equivalent"):
        table.add_column(column)
    colour = {Verdict.SURVIVED: "red", Verdict.EQUIVALENT: "yellow"}
    for o in report.outcomes:
        shade = colour.get(o.verdict)
        verdict = f"[{shade}]{o.verdict.value}[/{shade}]" if shade else o.verdict.value
        table.add_row(
            o.mutant,
            verdict,
            o.by if o.verdict is not Verdict.EQUIVALENT else "",
            o.detail or (o.by if o.verdict is Verdict.EQUIVALENT else ""),
        )
    console.print(table)
    counts = ", ".join(f"{report.count(v)} {v.value}" for v in Verdict)
    console.print(
        f"{len(report.outcomes)} mutants: {counts}; killed {report.score:.1%} of those not argued "
        f"equivalent; {report.seconds:.0f} s with {jobs} at a time",
        highlight=False,
    )
    console.print(
        "first killed by: " + "; ".join(f"{by} {n}" for by, n in report.killers().most_common()), highlight=False
    )
    for stale in report.stale:
        console.print(
            f"[yellow]note:[/yellow] the equivalence argument for {stale!r} is stale (killed, or no such mutant)",
            highlight=False,
        )
    if markdown is not None:
        from statechan.traces import write_text_atomically

        write_text_atomically(markdown, report.markdown())
        console.print(f"written to {markdown}", highlight=False)
    if report.count(Verdict.SURVIVED):
        raise typer.Exit(1)


@app.command("audit")
def audit_command(
    paths: Annotated[
        list[Path], typer.Argument(help="Traces: .jsonl, .jsonl.gz or .parquet (any mix), or folders of them.")
    ],
    report: Annotated[Path, typer.Option("--report", "-r", help="Where to write the JSON report.")] = Path(
        "audit-report.json"
    ),
    master: Annotated[
        str | None, typer.Option(help="Spark master URL (default: spark-submit's, else local[*]).")
    ] = None,
    remote: Annotated[
        str | None,
        typer.Option(
            help="A Spark Connect server, sc://HOST:PORT, instead of a Spark driver in this process "
            "(the traces must be readable at the same path here and on the server's nodes)."
        ),
    ] = None,
    engine: Annotated[Engine, typer.Option(help="spark, or local: one Python process, no Java needed.")] = Engine.spark,
    storage: Annotated[
        Storage, typer.Option("--storage", "-s", help="The resolver's storage: a topic or a store dump.")
    ] = Storage.system_topic,
    model: ModelOption = DEFAULT_MODEL,
    in_flight_timeout: Annotated[
        float, _number("Seconds (stuck-in-flight).", 0.001, TIMEOUT_MAX_S, "times are whole ms; a year is no limit")
    ] = IN_FLIGHT_TIMEOUT_MS / 1000,
    cleanup_timeout: Annotated[
        float, _number("Seconds (orphan-cleaned).", 0.001, TIMEOUT_MAX_S, "times are whole ms; a year is no limit")
    ] = CLEANUP_TIMEOUT_MS / 1000,
    tombstone_timeout: Annotated[
        float,
        _number("Seconds (lingering-semi-terminal).", 0.001, TIMEOUT_MAX_S, "times are whole ms; a year is no limit"),
    ] = TOMBSTONE_TIMEOUT_MS / 1000,
    examples: Annotated[
        int, _number("Examples kept per invariant.", 0, EXAMPLES_MAX, "kept in memory and in the report")
    ] = 5,
    invariant: Annotated[
        list[str] | None, typer.Option("--invariant", "-i", help="Check only these (repeatable).")
    ] = None,
    history: Annotated[
        bool | None,
        typer.Option(
            "--history/--no-history",
            help="Also check the per-bundle history invariants (version-monotonic, one-value-per-version, "
            "compaction-equivalence), streaming each bundle's records a key at a time (default: when the trace has "
            "view records).",
        ),
    ] = None,
    partitions: Annotated[
        int | None,
        _number(
            "Spark partitions (default: ~250,000 records each, 4 per core at least).",
            1,
            100_000,
            "a task each; more is only overhead",
        ),
    ] = None,
    conf: Annotated[
        list[str] | None,
        typer.Option(
            "--conf",
            "-c",
            help="A Spark setting, KEY=VALUE (repeatable; e.g. spark.executor.memory=8g), over the auditor's own.",
        ),
    ] = None,
    ship_code: Annotated[
        bool | None,
        typer.Option(
            "--ship-code/--no-ship-code",
            help="Send the auditor's code to Spark's executors, so a cluster's nodes need only its "
            "dependencies (default: when the master is not local).",
        ),
    ] = None,
    html: Annotated[
        Path | None,
        typer.Option(
            help="Also write the report as a page here (self-contained HTML): counts per invariant, each example "
            "linked to its key's story as a sequence diagram."
        ),
    ] = None,
    read: Annotated[
        SparkRead,
        typer.Option(
            help="How Spark's Python workers get each namespace's records in offset order: workers (each task reads "
            "the Parquet trace itself and replays its share of the namespaces, in file order: no shuffle or sort), "
            "spark (Spark reads, shuffles by namespace and sorts), or auto (workers for Parquet in offset order on "
            "a session of at most 8 task slots, without the history invariants).",
        ),
    ] = SparkRead.auto,
) -> None:
    """Audit recorded channel records against the protocol and report every violation.

    Each record is replayed through the resolver and the record invariants (and, with view
    records or --history, each bundle's history through the history invariants). Exit status:
    0 none, 1 violations found, 2 bad usage, unreadable input or no valid channel record."""
    from statechan.audit import AuditSettings, audit, check_report, check_spark_settings

    _load(model)
    try:
        settings = AuditSettings(
            storage=storage.storage,
            model=model,
            in_flight_timeout_s=in_flight_timeout,
            cleanup_timeout_s=cleanup_timeout,
            tombstone_timeout_s=tombstone_timeout,
            examples=examples,
            invariants=tuple(invariant) if invariant else None,
            history=history,
        )
        settings.ids()
    except (ValueError, pydantic.ValidationError) as exc:
        err.print(f"[red]error:[/red] {exc}", markup=True, highlight=False)
        raise typer.Exit(2) from None
    inputs = _trace_files(paths)
    spark_conf = _spark_conf(conf or [])
    if (spark_conf or remote or read is not SparkRead.auto) and engine is not Engine.spark:
        given = "--conf" if spark_conf else "--remote" if remote else "--read"
        err.print(f"[red]error:[/red] {given} is for the spark engine")
        raise typer.Exit(2)
    _writable(html, "--html", [*inputs, report], "a trace or the --report file")
    try:
        check_report(report, inputs)
        if engine is Engine.spark:
            check_spark_settings(master, spark_conf, remote)
    except ValueError as exc:
        _usage_error(str(exc))
    from statechan.audit import spark_session

    progress_bar = {} if remote else {"spark.ui.showConsoleProgress": "true" if sys.stderr.isatty() else "false"}
    try:
        result = audit(
            inputs,
            report,
            settings,
            engine.value,
            master,
            partitions,
            progress,
            ship_code=ship_code,
            start_spark=lambda: _held_back(
                lambda: spark_session(master, conf=progress_bar | spark_conf, remote=remote)
            ),
            read=read.value,
        )
    except ModuleNotFoundError:  # an extra not installed: statechan.__main__ names it
        raise
    except (OSError, ValueError) as exc:
        err.print("[red]error:[/red] ", end="", highlight=False)
        err.print(str(exc), highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    except Exception as exc:  # a Spark failure (a bad file it could not read, a worker that died)
        from statechan.audit import spark_error

        err.print("[red]error:[/red] the audit failed: ", end="", highlight=False)
        err.print(spark_error(exc, master, spark_conf), highlight=False, markup=False, soft_wrap=True)
        raise typer.Exit(2) from None
    print_audit(result)
    if html is not None:
        from statechan.pages import audit_report_page, write_page

        write_page(html, audit_report_page(result))
        console.print(f"page: {html} (the report, each example linked to its key's story)", highlight=False)
    if not result.channel_records:  # all zeros would read as a clean audit of nothing
        if not result.records:
            why = "the trace is empty"
        elif result.malformed == result.records:
            why = f"all {counted(result.records, 'record')} are malformed"
        else:
            why = f"none of its {counted(result.records, 'record')} is a valid channel record"
        err.print(
            f"[red]error:[/red] nothing audited: {why} (report written to {report})", highlight=False, soft_wrap=True
        )
        raise typer.Exit(2)
    if result.violation_count:
        raise typer.Exit(1)


def _held_back(start: Callable[[], T]) -> T:
    """Start Spark with its JVM's standard error held back until it is up: a JVM that fails to
    start, or a SparkContext that refuses a setting, prints a Java stack trace that says less than
    the one line the caller prints. Once up, what was held and all that follows passes through."""
    import threading

    read, write = os.pipe()
    real, saved = os.dup(2), os.dup(2)
    held: list[bytes] = []
    mode = ["hold"]  # hold, pass or drop
    lock = threading.Lock()

    def forward() -> None:
        while chunk := os.read(read, 65_536):
            with lock:
                if mode[0] == "pass":
                    os.write(real, chunk)
                elif mode[0] == "hold":
                    held.append(chunk)
        os.close(read)

    threading.Thread(target=forward, name="statechan-spark-stderr", daemon=True).start()
    os.dup2(write, 2)  # the JVM starts now and keeps this as its standard error
    os.close(write)
    try:
        started = start()
    except BaseException:
        with lock:
            mode[0] = "drop"
        raise
    else:
        with lock:
            mode[0] = "pass"
            os.write(real, b"".join(held))
        return started
    finally:
        os.dup2(saved, 2)
        os.close(saved)


def _spark_conf(specs: Sequence[str]) -> dict[str, str]:
    """``--conf KEY=VALUE`` options as a mapping; exit 2 on one that is not a Spark setting."""
    conf: dict[str, str] = {}
    for spec in specs:
        key, equals, value = spec.partition("=")
        if not equals or not key.strip().startswith("spark.") or not value.strip():
            err.print(f"[red]error:[/red] --conf {spec!r}: expected KEY=VALUE with a spark.* key", highlight=False)
            raise typer.Exit(2)
        conf[key.strip()] = value.strip()
    return conf


def main() -> None:
    argv = sys.argv[1:]
    saving = any(arg.split("=")[0] in ("--checkpoint", "--resume") for arg in argv)
    if argv[:1] == ["check"] and saving and "--spark" not in argv:
        from statechan.checker.checkpoint import restart_repeatably

        restart_repeatably()  # a checkpoint's fingerprints must hash alike in the run that resumes it
    app()
