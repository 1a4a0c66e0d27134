"""What the command line and the demo show: the console, the tables and the reports of the
commands (so the demo prints what the commands print), and the checks a simulated run takes."""

from __future__ import annotations

import datetime
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from rich.console import Console
from rich.table import Table

from statechan.checker import counted
from statechan.model import DEFAULT_MODEL, ProtocolModel
from statechan.resolver import Verdict
from statechan.states import StorageType
from statechan.values import brief

if TYPE_CHECKING:
    from statechan.audit import AuditReport
    from statechan.cluster import Cluster
    from statechan.explain import Entry

# Piped output (make demo, CI logs) gets a fixed, readable width instead of rich's 80 columns.
# soft_wrap: a message naming a path or a key is never broken across lines (tables still fit the width)
console = Console(width=None if sys.stdout.isatty() else 132, soft_wrap=True)
err = Console(stderr=True, soft_wrap=True)


def transition_table(m: ProtocolModel, storage: StorageType) -> Table:
    table = Table(title=f"{m.name}: {storage.value} transitions", title_justify="left")
    for column in ("from", "valid to", "flows", "broker checks"):
        table.add_column(column)
    edges = m.edges(storage)
    for src in m.states:
        outgoing = [(dst, edge) for (a, dst), edge in edges.items() if a == src]
        for i, (dst, edge) in enumerate(outgoing):
            table.add_row(
                src.name if i == 0 else "",
                dst.name,
                ", ".join(edge.flows),
                ", ".join(c.value for c in edge.checks) or "-",
            )
        if not outgoing:
            table.add_row(src.name, "-", "", "")
    return table


def verdict_cell(verdict: Verdict) -> str:
    colour = "green" if verdict.accepted else "red"
    return f"[{colour}]{verdict}[/{colour}]"


def progress(message: str) -> None:
    err.print(f"[dim]audit:[/dim] {message}", highlight=False, soft_wrap=True)


def invariant_checker(every: int, also: tuple[str, ...] = ()) -> tuple[Callable[[Cluster], list[str]], int]:
    """The catalogue's cluster invariants on each checked observation, and its step invariants on
    each with the one checked before it; ``also``: hazard entries checked besides the defaults."""
    from statechan.cluster.runner import ObservationCheck
    from statechan.invariants.catalogue import check, check_step, checked_ids

    if not also:
        return ObservationCheck(check, check_step), every
    ids = tuple(checked_ids(also=also))
    return ObservationCheck(lambda obs: check(obs, ids), lambda before, after: check_step(before, after, ids)), every


def history_checker(cluster: Cluster) -> list[str]:
    """The history invariants over everything the cluster recorded."""
    from statechan.invariants.catalogue import check_trace, simulation_ids, simulation_settings

    settings = simulation_settings(cluster.config, cluster.storage, cluster.model.name)
    found = check_trace(cluster.trace, cluster.storage, cluster.model.name, simulation_ids(), settings)
    return [str(v) for v in found]


def story_table(entries: Sequence[Entry], several: bool) -> Table:
    from statechan.traces import ChannelRecord, LeaderRecord, RegistryRecord, ViewRecord

    table = Table(title_justify="left")
    table.add_column("offset", justify="right")
    table.add_column("time")
    if several:
        table.add_column("key")
    table.add_column("record")
    table.add_column("verdict")
    table.add_column("held after")
    for entry in entries:
        record = entry.record
        cells = [f"{entry.offset:,}", moment(entry.time)]
        if isinstance(record, ChannelRecord):
            who = f" (by {record.producer})" if record.producer else ""
            bundle = [record.key.rsplit("/", 1)[1]] if several else []
            verdict = "" if entry.verdict is None else verdict_cell(entry.verdict)
            held = brief(entry.held, none="(nothing)")
            cells += [*bundle, brief(record.value, none="tombstone") + who, verdict, held]
        else:
            if isinstance(record, RegistryRecord):
                what = f"[dim]registry: {record.broker} {record.event}[/dim]"
            elif isinstance(record, LeaderRecord):
                what = f"[dim]leader: {record.broker}[/dim]"
            else:
                assert isinstance(record, ViewRecord)
                took = "took" if record.accepted else "refused"
                what = f"[dim]view of {record.observer}: {took} {brief(record.value, none='tombstone')}[/dim]"
            cells += [*([""] if several else []), what, "", ""]
        table.add_row(*cells)
    return table


def moment(ms: int) -> str:
    """A record's time: UTC to the millisecond for a real clock, seconds for a simulator's (from 0)."""
    if ms >= 10**12:  # after 2001: a wall clock
        moment = datetime.datetime.fromtimestamp(ms / 1000, datetime.UTC)
        return moment.strftime("%Y-%m-%d %H:%M:%S.") + f"{ms % 1000:03d}"
    return f"{ms / 1000:.3f} s"


def print_audit(result: AuditReport, hint: bool = True) -> None:
    rejected = sum(result.rejected.values())
    console.print(
        f"{result.records:,} records ({result.channel_records:,} channel, {counted(result.bundles, 'bundle')}, "
        f"{counted(result.namespaces, 'namespace')}; {result.malformed:,} malformed); resolver: {result.accepted:,} "
        f"accepted, {rejected:,} rejected"
        + (f" ({', '.join(f'{r} {n:,}' for r, n in result.rejected.items())})" if rejected else ""),
        highlight=False,
    )
    table = Table(title=f"Violations ({result.engine}, {result.elapsed_s:.1f} s)", title_justify="left")
    table.add_column("invariant")
    table.add_column("count", justify="right")
    table.add_column("first example")
    for invariant, summary in result.violations.items():
        first = summary.examples[0] if summary.examples else None
        where = "" if first is None or first.offset is None else f" @ {first.offset}"
        shown = "" if first is None else f"{first.key}{where}: {first.detail}"
        count = f"[red]{summary.count:,}[/red]" if summary.count else "0"
        table.add_row(invariant, count, shown)
    console.print(table)
    others = ", ".join(f"{k} {v:,}" for k, v in result.counted.items())
    console.print(f"counted (not violations): {others}", highlight=False)
    reasons: dict[str, list[str]] = {}
    for skipped in result.skipped:  # one line per reason
        reasons.setdefault(skipped.reason, []).append(skipped.check)
    for reason, checks in reasons.items():
        console.print(f"skipped: {', '.join(checks)}: {reason}", highlight=False)
    if result.quarantine:
        console.print(f"malformed lines quarantined in {result.quarantine}", highlight=False)
    example = next((e for s in result.violations.values() for e in s.examples if e.key and e.offset is not None), None)
    if example is not None and hint:
        storage = " --storage metadata-store" if result.settings.get("storage") == "MetadataStore" else ""
        if result.settings.get("model", DEFAULT_MODEL) != DEFAULT_MODEL:
            storage += f" --model {result.settings['model']}"
        console.print(
            f"look closer: statechan traces show {' '.join(result.inputs)} --key {example.key} "
            f"--around {example.offset}{storage}",
            highlight=False,
            soft_wrap=True,
        )
