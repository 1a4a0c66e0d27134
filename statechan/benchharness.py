"""The benchmarks' harness: the figure type every benchmark returns, what a run was measured on,
the committed results file (``docs/benchmarks.json``) and the page written from it
(``docs/benchmarks.md``).

The benchmark functions live with what they measure (``statechan.bench``,
``statechan.balance.bench``); both import :class:`Figure` from here, so neither imports the other
at module level. ``python -m statechan.bench --only ENGINE --markdown`` measures one engine, stores
its run as that engine's current one (the run it replaces moves to the engine's history) and
writes the whole page again from the file, so an engine that takes many minutes is measured only
when asked, and the page never holds a figure the file does not.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Figure:
    """One measured figure: ``items`` done in ``seconds``, beside a ``baseline`` measured in the
    same run (its ``baseline_seconds``), with whatever else the benchmark noted."""

    name: str
    items: int
    seconds: float
    baseline: str = ""
    baseline_seconds: float = 0.0
    notes: dict[str, object] = field(default_factory=dict)

    @property
    def rate(self) -> float:
        return self.items / self.seconds if self.seconds else float("inf")

    @property
    def ratio(self) -> float:
        return self.seconds / self.baseline_seconds if self.baseline_seconds else float("nan")

    def line(self) -> str:
        text = f"{self.name:<44} {self.items:>10,} items  {self.seconds:8.3f} s  {self.rate:>12,.0f} /s"
        if self.baseline:
            text += f"   {self.ratio:5.2f}x {self.baseline}"
        return text


def machine() -> dict[str, object]:
    """What the figures were measured on."""
    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as info:
            for line in info:
                if line.startswith("model name"):
                    cpu = line.split(":", 1)[1].strip()
                    break
    except OSError:
        pass
    return {
        "python": platform.python_version(),
        "implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "cpu": cpu,
        "cores": os.cpu_count(),
    }


def machine_text(info: Mapping[str, object]) -> str:
    """A machine in a few words: ``AMD EPYC 7B13, 2 cores, CPython 3.11.7``."""
    implementation = f"{info.get('implementation', '')} {info.get('python', '')}".strip()
    return f"{info.get('cpu', '?')}, {info.get('cores', '?')} cores, {implementation}"


def commit(root: Path | None = None) -> str:
    """The checkout's commit, with ``-dirty`` when files other than the benchmark page and its
    results file have uncommitted changes (the bench writes those two itself as it goes); empty
    outside a git checkout."""
    where = root or Path(__file__).resolve().parent.parent

    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=where, capture_output=True, text=True, check=False, timeout=10)
        except (OSError, subprocess.TimeoutExpired):
            return None
        return done.stdout.strip() if done.returncode == 0 else None

    sha = git("rev-parse", "--short=7", "HEAD")
    if not sha:
        return ""
    changed = git("status", "--porcelain", "--untracked-files=no", "--", ".", *(f":!{p}" for p in BENCH_FILES))
    return sha + ("-dirty" if changed else "")


BENCH_FILES = ("docs/benchmarks.json", "docs/benchmarks.md")
"""What the bench itself writes in the checkout."""


def load_average() -> tuple[float, float, float]:
    return os.getloadavg() if hasattr(os, "getloadavg") else (0.0, 0.0, 0.0)


# -- the engines and the results file ------------------------------------------------------------------


@dataclass(frozen=True)
class Engine:
    """An engine's table on the page: its title, what one item is, and what the run measures."""

    title: str
    unit: str
    about: str


ENGINES: dict[str, Engine] = {
    "resolver": Engine(
        "Resolver",
        "decisions",
        "`should_reject` and `resolve` on (held, offered) pairs in the mix a channel reader sees "
        "(`statechan.bench.realistic_pairs`, seed 7), on value objects and from Pulsar's JSON.",
    ),
    "replay": Engine(
        "Topic replay and compaction",
        "records",
        "One system-topic table view folding a long channel log (`statechan.bench.realistic_log`, "
        "seed 11: 10,000 bundles, a racing duplicate after about one record in ten), and strategic "
        "compaction of that log.",
    ),
    "simulate": Engine(
        "Cluster simulator",
        "actions",
        "A simulated day of 5 brokers and 1,000 bundles with lookups, transfers, unloads, splits, "
        "crashes, session losses, shutdowns and leader changes (seed 1), unchecked.",
    ),
    "hypothesis": Engine(
        "Hypothesis bench",
        "steps",
        "The system-topic machine on the current protocol, 500 derandomized examples of up to 30 "
        "steps, every step checked (`python -m properties.speed`, in a process of its own).",
    ),
    "check": Engine(
        "Model checker",
        "states",
        "`statechan check` at its documented small bounds: distinct states per second, and the "
        "partial-order and broker-symmetry reductions, each beside the search without it.",
    ),
    "check-spark": Engine(
        "Model checker on Spark",
        "states",
        "`statechan check --spark` on `local[2]` beside the compact search in one process, the same "
        "bound in the same run, alternating: each run a fresh process tree (`nice -n 10`), its own "
        "search seconds and its tree's CPU seconds; Spark's fixed cost (its JVM, a session, the "
        "Python workers) measured on a one-level bound and taken off, so what is left is the cost "
        "of a state: what sizes a cluster for a bound.",
    ),
    "check-workers": Engine(
        "Model checker on two cores",
        "states",
        "`statechan check --workers 2` beside the same search in one process (`--workers 1`), the "
        "same bound in alternating rounds, on the default bound, three brokers, and the first states "
        "of three brokers with a crash and a restart: the search's wall time, worker processes "
        "started included.",
    ),
    "audit": Engine(
        "Trace auditor",
        "records",
        "`statechan audit` on a generated Parquet trace (seed 1; 10M records by default, generated "
        "once into `.bench/`): Spark beside Spark's own floor for the file, the single-process "
        "engine, and DuckDB's SQL checks. Each run is a fresh process tree.",
    ),
    "audit-scale": Engine(
        "Trace auditor at scale",
        "records",
        "The Spark audit and Spark's floor at several trace sizes, the time per record at the "
        "largest size against the smallest.",
    ),
    "audit-stages": Engine(
        "Trace auditor by stage",
        "records",
        "One in-process classic audit timed by stage (reading, the replay job, the history checks), "
        "and the replay job's pipeline into a `mapInArrow` that only counts its rows: the hand-over "
        "to Python without the fold.",
    ),
    "generate": Engine(
        "Trace generator",
        "records",
        "`statechan traces generate` writing the same Parquet trace with every core and with one "
        "worker (the file is the same whatever the number of workers).",
    ),
    "balance": Engine(
        "Load-balance lab",
        "runs",
        "The lab's default workload (136 brokers, 3,000 bundles, 10 simulated hours): balancer "
        "only, every move through the channel, and the Spark sweep beside a one-process loop.",
    ),
    "fuzz": Engine(
        "Fuzzing the readers",
        "inputs",
        "`make fuzz`: the four Hypothesis targets of `tests/fuzz.py` (any bytes and any JSON as a "
        "trace and as a saved run), random, each asserting that nothing raises and that records = "
        "valid + malformed. Not a speed benchmark: recorded here as history only.",
    ),
}
"""Every engine the page can show, in the page's order."""


def _number(value: float) -> str:
    if value != value or value in (float("inf"), float("-inf")):
        return "—"
    return f"{value:,.0f}" if value >= 100 else f"{value:,.2f}"


def _seconds(value: float) -> str:
    return f"{value:,.1f} s" if value >= 10 else f"{value:.3f} s"


def figures_json(figures: Sequence[Figure]) -> list[dict[str, Any]]:
    rows = []
    for f in figures:
        ratio = f.ratio
        rows.append(
            json.loads(json.dumps(asdict(f), default=str))
            | {"rate": f.rate, "ratio": None if ratio != ratio else ratio}
        )
    return rows


def run_info(command: str, size: str, root: Path | None = None) -> dict[str, Any]:
    """What a run was: its command, size, the commit measured, the time (UTC), the machine and the
    load average before it."""
    now = datetime.datetime.now(datetime.UTC).replace(microsecond=0)
    return {
        "command": command,
        "size": size,
        "commit": commit(root),
        "date": now.isoformat().replace("+00:00", "Z"),
        "machine": machine(),
        "load": [round(x, 2) for x in load_average()],
    }


def load_results(path: Path) -> dict[str, Any]:
    """The results file, or an empty one."""
    if not path.exists():
        return {"engines": {}}
    data: dict[str, Any] = json.loads(path.read_text(encoding="utf-8"))
    data.setdefault("engines", {})
    return data


def save_results(path: Path, results: Mapping[str, Any]) -> None:
    part = path.with_name(path.name + ".part")
    part.write_text(json.dumps(results, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    os.replace(part, path)


def _headline(run: Mapping[str, Any]) -> dict[str, Any] | None:
    """A run's first figure as one history row."""
    figures = run.get("figures") or []
    if not figures:
        return None
    first = figures[0]
    ratio = first.get("ratio")
    machine_info = run.get("machine") or {}
    return {
        "date": str(run.get("date", ""))[:10],
        "commit": run.get("commit", ""),
        "figure": first["name"],
        "size": run.get("size", ""),
        "rate": first.get("rate"),
        "against baseline": f"{ratio:.2f}x {first.get('baseline', '')}".strip() if ratio else "",
        "machine": machine_text(machine_info) if isinstance(machine_info, Mapping) else str(machine_info),
        "load": ", ".join(f"{x:.2f}" for x in run.get("load") or []),
    }


def record(results: dict[str, Any], engine: str, run: Mapping[str, Any], figures: Sequence[Figure]) -> None:
    """Store ``figures`` as ``engine``'s current run; the run it replaces goes to its history."""
    entry = results["engines"].setdefault(engine, {"history": []})
    previous = entry.get("current")
    if previous:
        row = _headline(previous)
        if row is not None:
            entry.setdefault("history", []).insert(0, row)
    entry["current"] = dict(run) | {"figures": figures_json(figures)}


# -- the page -------------------------------------------------------------------------------------------

PAGE_NOTE = (
    "<!-- generated by `python -m statechan.bench --markdown` from docs/benchmarks.json; do not edit by hand -->"
)


def _cell(value: object) -> str:
    return " ".join(str(value).split()).replace("|", "\\|")


def _note(value: object) -> str:
    if isinstance(value, Mapping):
        return ", ".join(f"{k} {_note(v)}" for k, v in value.items())
    if isinstance(value, float):
        return _number(value)
    if isinstance(value, int) and not isinstance(value, bool):
        return f"{value:,}"
    return str(value)


def render(results: Mapping[str, Any]) -> str:
    """The benchmarks page: one table per engine (its current run) and its history."""
    engines: Mapping[str, Any] = results.get("engines", {})
    out = [
        "# Benchmarks",
        "",
        PAGE_NOTE,
        "",
        "Each table is one engine's last run of `python -m statechan.bench` (`make bench`): every figure",
        "beside a baseline measured in the same run, so compare ratios, not absolute times, across",
        "machines. Nothing in the test suite times anything; speed is measured here only.",
        "`python -m statechan.bench --only ENGINE --markdown` measures one engine again and rewrites",
        "its table, keeping the others' from `docs/benchmarks.json`; the run it replaces joins the",
        "engine's history. *Commit* is the code measured (`-dirty`: with uncommitted changes); for",
        "history rows from before the results file existed, the commit that recorded the figure.",
        "",
    ]
    for name, engine in ENGINES.items():
        entry = engines.get(name)
        if not entry:
            continue
        out += [f"## {engine.title}", "", engine.about, ""]
        current = entry.get("current")
        if current:
            info = current.get("machine") or {}
            load = ", ".join(f"{x:.2f}" for x in current.get("load") or [])
            out += [
                f"Command: `{current.get('command', '')}` · size: {current.get('size', '')} · "
                f"commit: `{current.get('commit') or 'unknown'}` · date: {current.get('date', '')} · "
                f"machine: {machine_text(info)} · load average before (1, 5, 15 min): {load}",
                "",
                "| figure | items | time | rate | baseline, same run | baseline time | ratio |",
                "|---|---:|---:|---:|---|---:|---:|",
            ]
            for f in current.get("figures", []):
                ratio = f.get("ratio")
                out.append(
                    f"| {_cell(f['name'])} | {f['items']:,} | {_seconds(f['seconds'])} | "
                    f"{_number(f['rate'])} {engine.unit}/s | {_cell(f.get('baseline') or '—')} | "
                    + (f"{_seconds(f['baseline_seconds'])} | {ratio:.2f}x |" if ratio else "— | — |")
                )
            notes = [(f["name"], f.get("notes") or {}) for f in current.get("figures", [])]
            lines = [
                f"- *{_cell(n)}*: " + "; ".join(f"{k}: {_note(v)}" for k, v in ns.items()) for n, ns in notes if ns
            ]
            if lines:
                out += ["", *lines]
            out.append("")
        else:
            out += ["Not measured by `python -m statechan.bench`; earlier figures below.", ""]
        history = entry.get("history") or []
        if history:
            out += [
                "Earlier runs:",
                "",
                "| date | commit | figure | size | rate | against baseline | machine | load |",
                "|---|---|---|---|---:|---|---|---|",
            ]
            for row in history:
                rate = row.get("rate")
                shown = f"{_number(rate)} {engine.unit}/s" if isinstance(rate, int | float) else _cell(rate or "")
                sha = f"`{row['commit']}`" if row.get("commit") else ""
                cells = [row.get("date", ""), sha, _cell(row.get("figure", "")), _cell(row.get("size", "")), shown]
                cells += [_cell(row.get(k, "")) for k in ("against baseline", "machine", "load")]
                out.append("| " + " | ".join(str(c) for c in cells) + " |")
            out.append("")
        for table in entry.get("tables") or []:
            out += _table(table)
    return "\n".join(out).rstrip() + "\n"


def _table(table: Mapping[str, Any]) -> list[str]:
    """A table of earlier measurements an engine keeps as data (a run that is not the bench's own:
    a documented command measured by hand), under its own heading."""
    columns: list[str] = list(table["columns"])
    out = [f"### {table['title']}", ""]
    if table.get("about"):
        out += [str(table["about"]), ""]
    out += ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    out += ["| " + " | ".join(_cell(cell) for cell in row) + " |" for row in table["rows"]]
    return [*out, ""]
