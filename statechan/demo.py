"""``make demo`` / ``statechan demo``: the main job on built-in defaults, shown as a user would
meet it. It drives the library and the command line's own commands and renderers (so what it
prints is what those commands print); it holds no logic of its own beyond choosing what to show."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import typer
from rich.table import Table

from statechan.graph import check_graph, mermaid
from statechan.model import DEFAULT_MODEL, ProtocolModel
from statechan.render import (
    console,
    history_checker,
    invariant_checker,
    print_audit,
    progress,
    story_table,
    transition_table,
    verdict_cell,
)
from statechan.resolver import resolve
from statechan.states import ServiceUnitState, StorageType
from statechan.values import ServiceUnitStateData, brief

if TYPE_CHECKING:
    from statechan.audit import AuditReport


def _v(
    state: ServiceUnitState, dst: str | None = None, src: str | None = None, version: int = 1, force: bool = False
) -> ServiceUnitStateData:
    return ServiceUnitStateData(state=state, dst_broker=dst, source_broker=src, version_id=version, force=force)


S = ServiceUnitState
DEMO_QUESTIONS: list[tuple[str, ServiceUnitStateData | None, ServiceUnitStateData | None, StorageType]] = [
    (
        "two brokers race to assign; the second Assigning v1 arrives",
        _v(S.Assigning, "broker-1"),
        _v(S.Assigning, "broker-2"),
        StorageType.SystemTopic,
    ),
    (
        "the destination takes ownership",
        _v(S.Assigning, "broker-1"),
        _v(S.Owned, "broker-1", version=2),
        StorageType.SystemTopic,
    ),
    (
        "an assign on an Owned bundle",
        _v(S.Owned, "broker-1", version=2),
        _v(S.Assigning, "broker-2", version=3),
        StorageType.SystemTopic,
    ),
    (
        "transfer to the current owner",
        _v(S.Owned, "broker-1", version=2),
        _v(S.Releasing, "broker-1", "broker-1", 3),
        StorageType.SystemTopic,
    ),
    (
        "a lagging reader after compaction (v1 -> v5)",
        _v(S.Owned, "broker-1"),
        _v(S.Owned, "broker-2", "broker-1", 5),
        StorageType.SystemTopic,
    ),
    (
        "the same jump on the metadata store",
        _v(S.Owned, "broker-1"),
        _v(S.Owned, "broker-2", "broker-1", 5),
        StorageType.MetadataStore,
    ),
    (
        "the leader overrides an orphan Assigning",
        _v(S.Assigning, "dead-1", version=4),
        _v(S.Owned, "broker-2", version=5, force=True),
        StorageType.SystemTopic,
    ),
    (
        "a split parent is resurrected",
        _v(S.Deleted, None, "broker-1", 7),
        _v(S.Assigning, "broker-2", version=8),
        StorageType.SystemTopic,
    ),
    ("a split child, first write at v1 (metadata store)", None, _v(S.Owned, "broker-1"), StorageType.MetadataStore),
    ("a first write at v3 on the metadata store", None, _v(S.Owned, "broker-1", version=3), StorageType.MetadataStore),
    ("a tombstone after Owned", _v(S.Owned, "broker-1", version=9), None, StorageType.SystemTopic),
    (
        "the version wraps from Long.MAX_VALUE",
        _v(S.Owned, "broker-1", version=2**63 - 1),
        _v(S.Releasing, None, "broker-1", 2**63),
        StorageType.SystemTopic,
    ),
]


@dataclass(frozen=True)
class Commands:
    """The command line's commands the demo runs as a user would (given by the command line, which
    sits above the demo)."""

    check: Callable[..., None]
    replay: Callable[..., None]


def run(m: ProtocolModel, pages: Path | None = None, commands: Commands | None = None) -> None:
    """The main job on built-in defaults: the state graph, its checks, and resolver answers; on the
    default model also a checked simulation, the model checker and the auditor, with their pages
    written to ``pages`` (none: no pages)."""
    console.rule(f"statechan demo — model {m.name}")
    console.print(m.spec.description, highlight=False)
    for storage in m.storages:
        console.print(transition_table(m, storage))
    console.print("[bold]Graph checks[/bold]")
    for result in check_graph(m):
        style = "green" if result.ok else "red"
        console.print(f"  [{style}]{result}[/{style}]", highlight=False)
    if m.has_resolver:
        table = Table(title="Resolver questions (held value -> offered value)", title_justify="left")
        for column in ("question", "store", "held", "offered", "verdict"):
            table.add_column(column)
        for question, prev, new, storage in DEMO_QUESTIONS:
            if storage not in m.storages:
                continue
            verdict = resolve(prev, new, storage, model=m)
            table.add_row(question, storage.value, brief(prev), brief(new), verdict_cell(verdict))
        console.print(table)
    console.print("Mermaid source of the system-topic graph (paste into any Mermaid viewer):")
    console.print(mermaid(m, m.storages[0]), markup=False, highlight=False)
    if m.name == DEFAULT_MODEL:
        if pages is not None:
            pages.mkdir(parents=True, exist_ok=True)
        _demo_simulation()
        if commands is not None:
            _demo_check(pages, commands.check)
        _demo_audit(pages)
        if commands is not None:
            _demo_pages(pages, commands.replay)
        _demo_explore()


def _demo_simulation() -> None:
    """A small faulty cluster for two simulated hours, every invariant checked at every step."""
    from statechan.cluster import SimConfig
    from statechan.cluster.runner import Simulation, Workload

    console.rule("a simulated cluster: 4 brokers, 40 bundles, 2 hours with crashes, restarts, session losses")
    config = SimConfig(brokers=4, namespaces=2, bundles_per_namespace=20, seed=1)
    workload = Workload(crashes_per_hour=2, session_losses_per_hour=2, shutdowns_per_hour=1, leader_changes_per_hour=1)
    checker, every = invariant_checker(1)
    simulation = Simulation(config, workload)
    summary = simulation.run(2 * 3_600_000, check=checker, check_every=every)
    summary.violations.extend(history_checker(simulation.cluster))
    for line in summary.lines():
        console.print(line, highlight=False, markup=False)
    console.print(
        "More: statechan simulate --help · statechan replay RUN · docs/bench.md · docs/counterexamples.md",
        highlight=False,
    )


def _demo_check(pages: Path | None, check_command: Callable[..., None]) -> None:
    """The model checker on its default bound, then a historical bug it finds (and its page)."""
    console.rule("the model checker: every run of 2 brokers, 1 bundle, 1 lookup, 1 transfer or split")
    console.print("$ statechan check", highlight=False)
    check_command()
    html = None if pages is None else pages / "counterexample-25379.html"
    console.print(
        "$ statechan check --variant 25379 --crashes 1 --restarts 1" + (f" --html {html}" if html else ""),
        highlight=False,
    )
    try:
        check_command(variant="25379", crashes=1, restarts=1, html=html)
    except typer.Exit as exc:
        console.print(f"(exit status {exc.exit_code}: the bug put back is found)", highlight=False)
    console.print("More: statechan check --help · docs/checker.md", highlight=False)


def _demo_audit(pages: Path | None) -> None:
    """The trace auditor on Spark: the sample trace, a generated one with planted violations (and
    its report's page), and a historical bug's run with its view records."""
    import tempfile

    from statechan.audit import audit
    from statechan.tracegen import PLANT_KINDS, write_generated

    sample = Path("traces/sample.jsonl")
    console.rule("the trace auditor (PySpark, local[*])")
    if not sample.exists():
        console.print(f"{sample} is not here (run the demo from the repository); skipping the auditor", highlight=False)
        return
    console.print(f"$ statechan audit {sample}", highlight=False)
    print_audit(audit([sample], None, progress=progress))
    with tempfile.TemporaryDirectory() as folder:
        trace = Path(folder) / "planted.parquet"
        stats = write_generated(trace, 50_000, seed=1, plant=dict.fromkeys(PLANT_KINDS, 1))
        console.print(
            f"$ statechan traces generate planted.parquet -n 50000 --seed 1 --plant KIND=1 (each of the "
            f"{len(PLANT_KINDS)} kinds)  # {stats.records:,} records",
            highlight=False,
        )
        console.print("$ statechan audit planted.parquet", highlight=False)
        planted = audit([trace], None, progress=progress)
        print_audit(planted, hint=False)
        if pages is not None:
            from statechan.pages import audit_report_page, write_page

            write_page(pages / "audit-planted.html", audit_report_page(planted))
        _demo_story(trace, planted)
        _demo_audit_views(Path(folder))
    console.print("More: statechan audit --help · traces/README.md (format, report, recipes)", highlight=False)


def _demo_audit_views(folder: Path) -> None:
    """The auditor on a simulated run's view records: a historical bug's saved counterexample."""
    from statechan.audit import AuditSettings, audit
    from statechan.cluster.runfile import load_saved_run, replay
    from statechan.traces import write_records

    run = Path("docs/counterexamples/24186.json")
    if not run.exists():
        return
    config, actions, _, picks = load_saved_run(run)
    cluster = replay(config, actions, picks)
    trace = folder / "24186.jsonl"
    write_records(cluster.trace, trace)
    console.print(f"$ statechan replay {run} --quiet --trace 24186.jsonl   # #24186 put back", highlight=False)
    console.print("$ statechan audit 24186.jsonl --storage metadata-store", highlight=False)
    print_audit(
        audit([trace], None, AuditSettings(storage=cluster.storage, model=cluster.model.name), progress=progress),
        hint=False,
    )


def _demo_story(trace: Path, report: AuditReport) -> None:
    """What ``traces show`` tells about the planted resurrection the audit just reported."""
    from statechan.explain import Selection, story

    example = report.violations["no-resurrection"].examples[0]
    if example.key is None or example.offset is None:
        return
    console.print(
        f"$ statechan traces show planted.parquet --key {example.key} --around {example.offset} --context 3",
        highlight=False,
    )
    told = story([trace], Selection(frozenset({example.key})))
    console.print(story_table(told.around(example.offset, 3), several=False))


def _demo_pages(pages: Path | None, replay_command: Callable[..., None]) -> None:
    """A saved finding's run as a page, and where every page of the demo is."""
    if pages is None:
        return
    run = Path("docs/counterexamples/finding-split-handover.json")
    if run.exists():
        console.print(f"$ statechan replay {run} --quiet --html {pages / 'finding-split-handover.html'}")
        with contextlib.suppress(typer.Exit):  # the finding breaks single-owner: exit status 1, as meant
            replay_command(run, quiet=True, trace=None, html=pages / "finding-split-handover.html")
    written = sorted(pages.glob("*.html"))
    console.rule("pages")
    for page in written:
        console.print(f"  {page.resolve().as_uri()}", highlight=False, markup=False)
    console.print("Open them in a browser: self-contained HTML, no network needed (docs/pages.md).", highlight=False)


def _demo_explore() -> None:
    """How to walk the model in a browser (a server the demo does not start: it would not end)."""
    console.rule("explore the model in a browser")
    console.print(
        "$ statechan explore --variant 25379 --crashes 1 --restarts 1\n"
        "  serves a local page (127.0.0.1, a free port; it prints the address): step the cluster by clicking\n"
        "  the enabled actions, see each broker's view, the channel and the timers, every invariant's verdict\n"
        "  and the path as a sequence diagram; jump to the checker's counterexample, a saved run or a state of\n"
        "  the state graph. Without options it explores the default bound (docs/explore.md).",
        highlight=False,
        markup=False,
    )
