"""Mutation testing of a protocol model: does the bench notice a broken protocol?

Each *mutant* is a copy of a model file with one change: an edge of the table removed or
restricted to one storage, a broker check removed, an edge added, a resolver rule flipped, a state
moved into or out of one of the classes (in flight, active, stable, terminal, semi-terminal), an
override removed. A *battery* (model-checker bounds on both stores, a seeded simulation) runs on
each mutant; the first check that fails *kills* it. A mutant the model loader refuses is killed by
validation. A survivor is either a gap in the bench, or *equivalent*: no run of Pulsar's protocol
can tell it from the original; the equivalence arguments are data (a TOML file beside the model),
one line each, so a survivor without one is reported as such.

The mutants run in worker processes (``jobs``, two by default: this machine's cores), each
mutant's battery in one process, stopping at the first kill.
"""

from __future__ import annotations

import enum
import itertools
import tempfile
import time
import tomllib
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from statechan.model import ModelError, builtin_model_files, parse_model, read_text_file

CLASSES = ("in_flight", "active", "stable", "terminal", "semi_terminal")
"""The state classes a model declares (the monitor, the invariants and settledness read them)."""


class MutantKind(enum.Enum):
    """The kinds of change a mutant makes to its model."""

    REMOVE_EDGE = "remove-edge"
    DROP_STORAGE = "drop-storage"
    REMOVE_CHECK = "remove-check"
    ADD_EDGE = "add-edge"
    RESOLVER = "resolver"
    MOVE_STATE = "move-state"
    REMOVE_OVERRIDE = "remove-override"


@dataclass(frozen=True)
class Mutant:
    """One changed copy of a model (``data``: the model file's contents, as parsed TOML)."""

    id: str
    """Stable across runs: what the equivalence file names."""
    kind: MutantKind
    data: dict[str, Any] = field(repr=False, compare=False)


class Verdict(enum.Enum):
    KILLED = "killed"
    REFUSED = "refused"
    """The model loader refused the mutant (killed by validation)."""
    SURVIVED = "survived"
    EQUIVALENT = "equivalent"
    """Survived, and the equivalence file argues no run can tell it from the original."""


@dataclass(frozen=True)
class Outcome:
    mutant: str
    kind: MutantKind
    verdict: Verdict
    by: str = ""
    """The battery check that killed it (or the argument of an equivalent mutant)."""
    detail: str = ""
    seconds: float = 0.0


# -- writing a model back as TOML ---------------------------------------------------------------------
def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str):
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'
    if isinstance(value, list | tuple):
        return "[" + ", ".join(_toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        return "{ " + ", ".join(f"{k} = {_toml_value(v)}" for k, v in value.items()) + " }"
    raise TypeError(f"a model file holds no {type(value).__name__}: {value!r}")


def to_toml(data: Mapping[str, Any]) -> str:
    """A model's data as TOML text (the subset model files use: scalars, lists, inline tables,
    one table of tables and arrays of tables)."""
    lines: list[str] = []
    tables: list[tuple[str, Mapping[str, Any]]] = []
    arrays: list[tuple[str, Sequence[Mapping[str, Any]]]] = []
    for key, value in data.items():
        if isinstance(value, dict):
            tables.append((key, value))
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            arrays.append((key, value))
        else:
            lines.append(f"{key} = {_toml_value(value)}")
    for key, table in tables:
        lines += ["", f"[{key}]"] + [f"{k} = {_toml_value(v)}" for k, v in table.items()]
    for key, rows in arrays:
        for row in rows:
            lines += ["", f"[[{key}]]"] + [f"{k} = {_toml_value(v)}" for k, v in row.items()]
    return "\n".join(lines) + "\n"


# -- the mutants of a model ----------------------------------------------------------------------------
def _copy(data: Mapping[str, Any]) -> dict[str, Any]:
    parsed: dict[str, Any] = tomllib.loads(to_toml(data))
    return parsed


def _unflow(data: dict[str, Any], src: str, dst: str, forced: bool) -> None:
    """Take the edge ``src -> dst`` out of the flows that walk it (the forced flows, for an
    override): its paths go, and a flow left with none goes with its tags. So a removed edge makes
    a mutant the model's own consistency checks (``statechan graph --check``) cannot tell from a
    model written that way: what catches it must be the bench's runs, or the graph's structure."""
    gone: set[str] = set()
    for flow in data.get("flows", []):
        if bool(flow.get("forced", False)) is not forced:
            continue
        kept = [p for p in flow["paths"] if (src, dst) not in set(itertools.pairwise(p))]
        if len(kept) != len(flow["paths"]):
            flow["paths"] = kept
            if not kept:
                gone.add(flow["name"])
    if gone:
        data["flows"] = [f for f in data["flows"] if f["name"] not in gone]
        for edge in data.get("transitions", []) + data.get("overrides", []):
            if "flows" in edge:
                edge["flows"] = [f for f in edge["flows"] if f not in gone]


def mutants(data: Mapping[str, Any]) -> Iterator[Mutant]:
    """Every mutant of a model's data, in a fixed order."""
    storages: list[str] = list(data.get("storages", ["SystemTopic"]))
    edges: list[dict[str, Any]] = list(data.get("transitions", []))

    def edge_id(edge: Mapping[str, Any]) -> str:
        return f"{edge['from']}->{edge['to']}"

    for i, edge in enumerate(edges):
        changed = _copy(data)
        del changed["transitions"][i]
        _unflow(changed, edge["from"], edge["to"], forced=False)
        yield Mutant(f"remove-edge {edge_id(edge)}", MutantKind.REMOVE_EDGE, changed)
    for i, edge in enumerate(edges):
        on = list(edge.get("storages") or storages)
        if len(on) < 2:
            continue
        for storage in on:
            changed = _copy(data)
            changed["transitions"][i]["storages"] = [s for s in on if s != storage]
            yield Mutant(f"drop-storage {edge_id(edge)} {storage}", MutantKind.DROP_STORAGE, changed)
    for i, edge in enumerate(edges):
        for check in edge.get("checks", []):
            changed = _copy(data)
            changed["transitions"][i]["checks"] = [c for c in edge["checks"] if c != check]
            yield Mutant(f"remove-check {edge_id(edge)} {check}", MutantKind.REMOVE_CHECK, changed)
    declared = {(e["from"], e["to"]) for e in edges}
    states: list[str] = list(data.get("states", []))
    for src in states:
        for dst in states:
            if src == dst or (src, dst) in declared:
                continue
            changed = _copy(data)
            changed["transitions"].append({"from": src, "to": dst})
            yield Mutant(f"add-edge {src}->{dst}", MutantKind.ADD_EDGE, changed)
    resolver = data.get("resolver")
    if isinstance(resolver, dict):
        for flag in ("versioned", "force"):
            changed = _copy(data)
            changed["resolver"][flag] = not resolver.get(flag, True)
            yield Mutant(f"resolver {flag}={changed['resolver'][flag]}".lower(), MutantKind.RESOLVER, changed)
        for storage, policy in dict(resolver.get("version_gap", {})).items():
            changed = _copy(data)
            changed["resolver"]["version_gap"][storage] = "reject" if policy == "accept" else "accept"
            flipped = changed["resolver"]["version_gap"][storage]
            yield Mutant(f"resolver version_gap {storage}={flipped}", MutantKind.RESOLVER, changed)
        for storage in dict(resolver.get("first_write_version", {})):
            changed = _copy(data)
            del changed["resolver"]["first_write_version"][storage]
            yield Mutant(f"resolver first_write_version {storage} removed", MutantKind.RESOLVER, changed)
    for group in CLASSES:
        members = list(data.get(group, []))
        for state in states:
            if state == data.get("initial") and group != "semi_terminal":
                continue  # the initial state is "no record": never in flight, active or owned
            changed = _copy(data)
            if state in members:
                changed[group] = [s for s in members if s != state]
                yield Mutant(f"move-state {state} out of {group}", MutantKind.MOVE_STATE, changed)
            else:
                changed[group] = [*members, state]
                yield Mutant(f"move-state {state} into {group}", MutantKind.MOVE_STATE, changed)
    for i, override in enumerate(data.get("overrides", [])):
        changed = _copy(data)
        del changed["overrides"][i]
        _unflow(changed, override["from"], override["to"], forced=True)
        yield Mutant(f"remove-override {edge_id(override)}", MutantKind.REMOVE_OVERRIDE, changed)


def read_model_data(model: str) -> tuple[dict[str, Any], Path]:
    """A model's data (a built-in name or a file) and the file it came from. A variant file
    (``variant_of``) is mutated as the whole model it makes."""
    files = builtin_model_files()
    if model in files:
        text = files[model].read_text(encoding="utf-8")
        origin = Path(model + ".toml")
    else:
        text = read_text_file(model, "model file")
        origin = Path(model)
    parse_model(text, str(origin))  # validates (and resolves variant_of): a clear error first
    data = tomllib.loads(text)
    if "variant_of" in data:
        raise ModelError(f"{origin}: mutate a whole model, not a variant of {data['variant_of']!r}")
    return data, origin


# -- the battery ---------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Probe:
    """One check of the battery: a model-checker bound on one store, or a seeded simulation."""

    name: str
    kind: str
    """``graph`` (the model's structural checks), ``check``, ``simulate``, or ``replay`` (a saved
    scenario, ``options["run"]`` under ``models/scenarios/``, replayed on the mutant with every
    invariant checked at each step: a race a search of the original's size finds only in minutes,
    kept as the one run that shows it)."""
    options: Mapping[str, Any] = field(default_factory=dict)
    store: str = "system-topic"
    skip: tuple[str, ...] = ()
    """Invariants left out where the original model breaks them at the bound: a documented
    finding (on the metadata store, a split's source crashing while a lookup waits on an
    assignment whose Owned the store's notification skipped leaves the lookup to its timeout:
    finding 10, lookup-not-stranded in 12 steps)."""


BATTERY: tuple[Probe, ...] = (
    Probe("graph --check", "graph"),
    Probe("check default", "check"),
    Probe("check unload, 2 lookups", "check", {"lookups": 2, "admin_kinds": ("unload",)}),
    Probe("check crash", "check", {"admin": 0, "crashes": 1, "ticks": 3}),
    Probe("check shutdown", "check", {"admin": 0, "shutdowns": 1, "ticks": 3}),
    Probe(
        "check one broker, unload, shutdown",
        "check",
        {"brokers": 1, "lookups": 2, "admin_kinds": ("unload",), "shutdowns": 1, "ticks": 2},
    ),
    Probe("check split, crash", "check", {"admin_kinds": ("split",), "crashes": 1, "ticks": 3}),
    Probe("check unload, tombstone", "check", {"admin_kinds": ("unload",), "tombstone_delay_s": 30, "ticks": 3}),
    Probe("check unload, compaction", "check", {"admin_kinds": ("unload",), "compactions": 1}),
    Probe("check unload, compaction, 2 lookups", "check", {"lookups": 2, "admin_kinds": ("unload",), "compactions": 1}),
    Probe("simulate 1 h", "simulate", {"seed": 7, "hours": 1.0}),
    Probe("check default", "check", {}, "metadata-store"),
    # the store's version gate against a writer whose view still holds the key's last life: the
    # race needs three lookups, an unload, the monitor's tombstone (252,574 states, 200 s), so its run
    Probe("replay store-version-gap", "replay", {"run": "store-version-gap.json"}, "metadata-store"),
    Probe("check unload, 2 lookups", "check", {"lookups": 2, "admin_kinds": ("unload",), "ticks": 0}, "metadata-store"),
    Probe(
        "check unload, tombstone",
        "check",
        {"admin_kinds": ("unload",), "tombstone_delay_s": 30, "ticks": 3},
        "metadata-store",
    ),
    Probe("check crash", "check", {"admin": 0, "crashes": 1, "ticks": 3}, "metadata-store"),
    Probe("check shutdown", "check", {"admin": 0, "shutdowns": 1, "ticks": 2}, "metadata-store"),
    Probe(
        "check one broker, unload, shutdown",
        "check",
        {"brokers": 1, "lookups": 2, "admin_kinds": ("unload",), "shutdowns": 1, "ticks": 2},
        "metadata-store",
    ),
    Probe(
        "check split, crash (lookup-not-stranded skipped)",
        "check",
        {"admin_kinds": ("split",), "crashes": 1, "ticks": 3},
        "metadata-store",
        skip=("lookup-not-stranded",),
    ),
    Probe("simulate 1 h", "simulate", {"seed": 7, "hours": 1.0}, "metadata-store"),
)
"""The default battery: each bound is one the original model passes (complete and clean), small
enough for about a second or a few; together they take every edge the model declares except those
the model says are never taken (the coverage guard)."""

COVERAGE = "coverage"
"""The name of the battery's last check: every declared edge taken at one of its bounds."""


def _run_probe(probe: Probe, model_path: str) -> tuple[str | None, dict[tuple[str, str], Counter[str]]]:
    """What ``probe`` found wrong on the model (None: nothing) and the edges it took."""
    from statechan.checker import Bounds, check
    from statechan.cluster.config import StoreKind, Variant

    variant = Variant(model=model_path)
    if probe.kind == "graph":
        from statechan.graph import graph_problems

        return ("; ".join(graph_problems(model_path)) or None), {}
    if probe.kind == "check":
        from statechan.invariants.catalogue import simulation_ids

        bounds = Bounds(**dict(probe.options))
        ids = [i for i in simulation_ids() if i not in probe.skip]
        result = check(bounds, StoreKind(probe.store), variant, max_seconds=600, invariants=ids)
        if result.searched and not result.complete:
            return f"incomplete: stopped at the {result.stopped}", result.coverage
        # a model its own checks refused before any state: what they found (model problems, flows)
        gaps = [*result.model_problems, *(str(gap) for gap in result.never_reached)]
        problem = result.violation or result.liveness or "; ".join(gaps)
        return (problem or None), result.coverage
    if probe.kind == "replay":
        return _replay(probe, model_path), {}
    return _simulate(probe, model_path), {}


def _replay(probe: Probe, model_path: str) -> str | None:
    """The first invariant the scenario breaks on the model, if any. A step the model refuses
    means its protocol went elsewhere: the scenario then says nothing of it."""
    from statechan.cluster.runfile import load_saved_run
    from statechan.cluster.runner import ObservationCheck
    from statechan.cluster.timeline import build_timeline
    from statechan.invariants.catalogue import check, check_step
    from statechan.model import builtin_data_file

    with resources.as_file(builtin_data_file("scenarios", str(probe.options["run"]))) as path:
        saved = load_saved_run(path)
    variant = saved.config.variant.model_copy(update={"model": model_path})
    config = saved.config.model_copy(update={"variant": variant})
    steps = build_timeline(config, saved.actions, ObservationCheck(check, check_step), picks=saved.picks)
    broken = [(step.number, v) for step in steps if step.error is None for v in step.violations]
    return f"{broken[0][1]} (step {broken[0][0]} of {len(saved.actions)})" if broken else None


def _simulate(probe: Probe, model_path: str) -> str | None:
    from statechan.cluster.config import SimConfig, StoreKind, Variant
    from statechan.cluster.runner import ObservationCheck, Simulation
    from statechan.invariants.catalogue import check, check_step, check_trace, simulation_ids, simulation_settings

    options = dict(probe.options)
    config = SimConfig(
        brokers=3,
        bundles_per_namespace=8,
        store=StoreKind(probe.store),
        variant=Variant(model=model_path),
        seed=int(options.get("seed", 7)),
    )
    simulation = Simulation(config)
    summary = simulation.run(int(float(options.get("hours", 1.0)) * 3_600_000), ObservationCheck(check, check_step))
    if summary.violations:
        return summary.violations[0]
    if summary.never_reached:
        return summary.never_reached[0]
    cluster = simulation.cluster
    settings = simulation_settings(cluster.config, cluster.storage, model_path)
    found = check_trace(cluster.trace, cluster.storage, model_path, simulation_ids(), settings)
    return str(found[0]) if found else None


def run_battery(
    model_path: str, battery: Sequence[Probe], storages: Sequence[str], coverage: bool = True
) -> tuple[str, str]:
    """The first probe of ``battery`` that fails on the model at ``model_path``, and what it said;
    then (``coverage``) the coverage guard over every check's bounds. ``("", "")`` when the model
    passes all."""
    from statechan.model import load_model
    from statechan.states import StorageType
    from statechan.vacuity import undeclared_edges, untaken_edges

    coverages: dict[str, list[dict[tuple[str, str], Counter[str]]]] = {}
    for probe in battery:
        problem, taken = _run_probe(probe, model_path)
        if problem is not None:
            return f"{probe.name} ({probe.store})", problem
        coverages.setdefault(probe.store, []).append(taken)
    if not coverage:
        return "", ""
    model = load_model(model_path)
    for store, covered in coverages.items():
        if store not in storages:
            continue
        storage = StorageType.MetadataStore if store == "metadata-store" else StorageType.SystemTopic
        if storage not in model.storages:
            continue
        untaken = untaken_edges(model, storage, covered)
        if untaken:
            edges = ", ".join(f"{a} -> {b}" for a, b in untaken)
            return f"{COVERAGE} ({store})", f"declared, never taken at the battery's bounds: {edges}"
        undeclared = undeclared_edges(model, storage, covered)
        if undeclared:
            edges = ", ".join(f"{a} -> {b}" for a, b in undeclared)
            return f"{COVERAGE} ({store})", f"taken, but not declared: {edges}"
    return "", ""


def _run_mutant(mutant: Mutant, directory: str, battery: Sequence[Probe], storages: Sequence[str]) -> Outcome:
    started = time.perf_counter()
    path = Path(directory) / (mutant.id.replace(" ", "_").replace(">", "").replace("=", "-") + ".toml")
    path.write_text(to_toml(mutant.data), encoding="utf-8")
    try:
        parse_model(path.read_text(encoding="utf-8"), str(path))
    except ModelError as exc:
        return Outcome(mutant.id, mutant.kind, Verdict.REFUSED, "the model loader", str(exc).splitlines()[0])
    try:
        by, detail = run_battery(str(path), battery, storages)
    except (ValueError, AssertionError, KeyError) as exc:  # a mutant the protocol cannot run is a noticed one
        by, detail = "an error", f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - started
    if by:
        return Outcome(mutant.id, mutant.kind, Verdict.KILLED, by, detail.splitlines()[0][:300], seconds)
    return Outcome(mutant.id, mutant.kind, Verdict.SURVIVED, seconds=seconds)


def load_equivalents(path: Path) -> dict[str, str]:
    """The equivalence arguments: ``"mutant id" = "why no run can tell it from the original"``."""
    try:
        data = tomllib.loads(read_text_file(path, "equivalence file"))
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"{path}: not valid TOML: {exc}") from None
    table = data.get("equivalent", {})
    if not isinstance(table, dict) or not all(isinstance(v, str) for v in table.values()):
        raise ValueError(f'{path}: expected an [equivalent] table of "mutant id" = "argument" strings')
    return dict(table)


def default_equivalents(origin: Path) -> Path:
    """Where a model's equivalence arguments live: ``models/equivalent/<name>.toml`` (beside the
    built-in models, not among them)."""
    return Path("models") / "equivalent" / (origin.stem + ".toml")


@dataclass
class Report:
    model: str
    outcomes: list[Outcome]
    seconds: float
    stale: list[str] = field(default_factory=list)
    """Equivalence arguments for mutants that were killed (or that no longer exist)."""
    jobs: int = 1
    """Mutants run at a time (the run's time depends on it)."""
    equivalents: str = ""
    """The file the equivalence arguments came from, if any."""

    def count(self, verdict: Verdict) -> int:
        return sum(1 for o in self.outcomes if o.verdict is verdict)

    def markdown(self) -> str:
        """The report as a page: what ran and how long it took, then a row per mutant (for docs/)."""
        arguments = ""
        if self.equivalents:
            arguments = f", or, for an equivalent mutant, the argument from `{self.equivalents}`"
        lines = [
            f"# Mutants of {Path(self.model).stem}",
            "",
            f"Written by `statechan mutate {self.model} --markdown`: {len(self.outcomes)} mutants in "
            f"{self.seconds:,.0f} s, {self.jobs} at a time. Each row is one mutant, its verdict, the battery's "
            f"check that killed it (the first that failed) and what that check said{arguments}.",
            "",
            "| mutant | verdict | by | what it said, or why it is equivalent |",
            "|---|---|---|---|",
        ]
        for o in self.outcomes:
            said = (o.detail if o.verdict is not Verdict.EQUIVALENT else o.by).replace("|", "\\|")
            by = o.by if o.verdict is not Verdict.EQUIVALENT else ""
            lines.append(f"| {o.mutant} | {o.verdict.value} | {by} | {said} |")
        counts = ", ".join(f"{self.count(v)} {v.value}" for v in Verdict)
        lines += [
            "",
            f"{len(self.outcomes)} mutants: {counts}; killed {self.score:.1%} of those not argued equivalent.",
            "",
            "First killed by: " + "; ".join(f"{by} {n}" for by, n in self.killers().most_common()) + ".",
        ]
        return "\n".join(lines) + "\n"

    def killers(self) -> Counter[str]:
        """How many mutants each check of the battery killed first."""
        return Counter(o.by for o in self.outcomes if o.verdict in (Verdict.KILLED, Verdict.REFUSED))

    @property
    def score(self) -> float:
        """Killed (or refused) among the mutants not argued equivalent."""
        judged = len(self.outcomes) - self.count(Verdict.EQUIVALENT)
        killed = self.count(Verdict.KILLED) + self.count(Verdict.REFUSED)
        return killed / judged if judged else 1.0


def mutate(
    model: str,
    battery: Sequence[Probe] = BATTERY,
    jobs: int = 2,
    only: Callable[[Mutant], bool] | None = None,
    equivalents: Mapping[str, str] | None = None,
    progress: Callable[[int, int, Outcome], None] | None = None,
    equivalents_file: str = "",
) -> Report:
    """Run ``battery`` on every mutant of ``model`` (those ``only`` keeps), ``jobs`` at a time.
    Raises ``ValueError`` if the original model fails the battery: a battery must pass first."""
    data, origin = read_model_data(model)
    started = time.perf_counter()
    storages = [s for s in ("system-topic", "metadata-store") if _storage_name(s) in data.get("storages", [])]
    with tempfile.TemporaryDirectory(prefix="statechan-mutate-") as directory:
        original = Path(directory) / "original.toml"
        original.write_text(to_toml(data), encoding="utf-8")
        by, detail = run_battery(str(original), battery, storages)
        if by:
            raise ValueError(f"{origin}: the original model fails the battery's {by}: {detail}")
        chosen = [m for m in mutants(data) if only is None or only(m)]
        outcomes: list[Outcome] = []
        with ProcessPoolExecutor(max_workers=max(1, jobs)) as pool:
            futures = [pool.submit(_run_mutant, m, directory, battery, storages) for m in chosen]
            for future in as_completed(futures):
                outcome = future.result()
                argument = (equivalents or {}).get(outcome.mutant)
                if outcome.verdict is Verdict.SURVIVED and argument:
                    outcome = Outcome(outcome.mutant, outcome.kind, Verdict.EQUIVALENT, argument, "", outcome.seconds)
                outcomes.append(outcome)
                if progress is not None:
                    progress(len(outcomes), len(chosen), outcome)
    order = {m.id: i for i, m in enumerate(chosen)}
    outcomes.sort(key=lambda o: order[o.mutant])
    ids = {o.mutant: o for o in outcomes}
    stale = sorted(m for m in (equivalents or {}) if m in ids and ids[m].verdict in (Verdict.KILLED, Verdict.REFUSED))
    if only is None:
        stale += sorted(m for m in (equivalents or {}) if m not in ids)
    return Report(str(origin), outcomes, time.perf_counter() - started, stale, max(1, jobs), equivalents_file)


def _storage_name(store: str) -> str:
    return "MetadataStore" if store == "metadata-store" else "SystemTopic"


__all__ = [
    "BATTERY",
    "Mutant",
    "MutantKind",
    "Outcome",
    "Probe",
    "Report",
    "Verdict",
    "load_equivalents",
    "mutants",
    "mutate",
    "to_toml",
]
