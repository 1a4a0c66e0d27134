"""Everything derived from a model's table as a graph: networkx graphs, checks, diagrams, and a
``transitions`` machine that follows one bundle through its lifecycle."""

from __future__ import annotations

import enum
import itertools
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import networkx as nx
from transitions import Machine, MachineError

from statechan.model import ProtocolModel, load_model
from statechan.states import StorageType


def state_graph(
    model: str | Path | ProtocolModel | None = None,
    storage: StorageType = StorageType.SystemTopic,
    include_overrides: bool = False,
) -> nx.DiGraph:
    """The table for one storage as a ``networkx.DiGraph`` over the model's state enum.

    Edge data: ``flows`` (tuple of flow names), ``checks`` (broker checks), ``forced`` (an edge
    only an override takes). Node data: ``in_flight``, ``active``, ``stable``.
    """
    m = load_model(model)
    graph = nx.DiGraph(model=m.name, storage=storage.value)
    for state in m.states:
        graph.add_node(
            state,
            in_flight=state in m.in_flight,
            active=state in m.active,
            stable=state in m.stable,
        )
    for (src, dst), edge in m.edges(storage).items():
        graph.add_edge(src, dst, flows=edge.flows, checks=edge.checks, forced=False)
    if include_overrides:
        for override, (src, dst) in zip(m.spec.overrides, m.overrides, strict=True):
            if not graph.has_edge(src, dst):
                graph.add_edge(src, dst, flows=override.flows, checks=(), forced=True)
    return graph


@dataclass(frozen=True)
class GraphCheck:
    """One structural property of a model's graph, and whether it holds."""

    name: str
    storage: StorageType | None
    ok: bool
    detail: str

    def __str__(self) -> str:
        where = f" [{self.storage.value}]" if self.storage else ""
        return f"{'ok  ' if self.ok else 'FAIL'} {self.name}{where}: {self.detail}"


def _names(states: Iterable[enum.Enum]) -> str:
    return ", ".join(sorted(s.name for s in states)) or "none"


def check_graph(model: str | Path | ProtocolModel | None = None) -> list[GraphCheck]:
    """The structural checks every channel model must pass (``statechan graph --check``)."""
    m = load_model(model)
    results: list[GraphCheck] = []
    for storage in m.storages:
        graph = state_graph(m, storage)
        reachable = nx.descendants(graph, m.initial) | {m.initial}
        unreachable = set(m.states) - reachable
        results.append(
            GraphCheck(
                "reachable-from-initial",
                storage,
                not unreachable,
                f"every state is reachable from {m.initial.name}"
                if not unreachable
                else f"unreachable from {m.initial.name}: {_names(unreachable)}",
            )
        )
        stuck = {s for s in m.in_flight if not (nx.descendants(graph, s) & m.stable)}
        results.append(
            GraphCheck(
                "in-flight-can-settle",
                storage,
                not stuck,
                f"a stable state ({_names(m.stable)}) is reachable from every in-flight state"
                if not stuck
                else f"no stable state reachable from: {_names(stuck)}",
            )
        )
        if storage is StorageType.SystemTopic and m.semi_terminal:
            lingering = {s for s in m.semi_terminal if m.initial not in nx.descendants(graph, s)}
            results.append(
                GraphCheck(
                    "semi-terminal-tombstoned",
                    storage,
                    not lingering,
                    f"{_names(m.semi_terminal)} can return to {m.initial.name}"
                    if not lingering
                    else f"cannot return to {m.initial.name}: {_names(lingering)}",
                )
            )
    results.append(_check_classes(m))
    live_resting = m.active - m.in_flight
    results.append(
        GraphCheck(
            "terminal-but-live",
            None,
            live_resting == m.terminal and m.terminal <= m.stable,
            f"the only active state that is not in flight is {_names(live_resting)}"
            f" (declared terminal: {_names(m.terminal)})",
        )
    )
    if StorageType.MetadataStore in m.storages and StorageType.SystemTopic in m.storages:
        extra = set(m.edges(StorageType.MetadataStore)) - set(m.edges(StorageType.SystemTopic))
        results.append(
            GraphCheck(
                "metadata-store-subgraph",
                None,
                not extra,
                "every metadata-store edge is a system-topic edge"
                if not extra
                else "metadata-store only: " + ", ".join(f"{a.name}->{b.name}" for a, b in sorted(extra, key=str)),
            )
        )
    results.append(_check_flows(m))
    results.append(_check_flows_walkable(m))
    return results


def graph_problems(model: str | Path | ProtocolModel | None = None) -> list[str]:
    """The failed checks of ``check_graph``, one line each (name: detail), for a report."""
    return [f"{c.name}: {c.detail}" for c in check_graph(model) if not c.ok]


def _check_flows_walkable(m: ProtocolModel) -> GraphCheck:
    """Every flow the model declares can be walked: it has a path, and in each storage whose table
    holds every edge of one of its paths, such a path starts where a key can be (a state reachable
    from the initial one). The check names the flow a broken table makes impossible (a model in
    which no bundle can be unloaded: the unload flow), where reachability names states."""
    problems: list[str] = []
    reachable = {
        storage: nx.descendants(state_graph(m, storage, include_overrides=True), m.initial) | {m.initial}
        for storage in m.storages
    }
    for flow in m.spec.flows:
        if not flow.paths:
            problems.append(f"flow {flow.name} has no path")
            continue
        for storage in m.storages:
            table = set(m.overrides) if flow.forced else set(m.edges(storage))
            whole = [p for p in flow.paths if all((m.state(a), m.state(b)) in table for a, b in itertools.pairwise(p))]
            if not whole:
                continue  # not a flow of this storage (the compaction cut on the store)
            if not any(m.state(p[0]) in reachable[storage] for p in whole):
                starts = _names({m.state(p[0]) for p in whole})
                where = f"{storage.value}: {starts} unreachable from {m.initial.name}"
                problems.append(f"flow {flow.name} cannot start on {where}")
    return GraphCheck(
        "flows-walkable",
        None,
        not problems,
        "every flow has a path a key can walk" if not problems else "; ".join(problems),
    )


def _check_classes(m: ProtocolModel) -> GraphCheck:
    """The state classes mean what Pulsar's names say: an in-flight state is active (it names
    an owner-to-be) and never stable; a semi-terminal state names no owner; the initial state is
    "no record", so never active; and every state is stable, in flight or semi-terminal.

    The classes the protocol does not read (stable, semi-terminal) are pinned to the table, so a
    model cannot misdeclare them unnoticed: the semi-terminal states are exactly those neither
    active nor initial (a record that names no owner); the stable ones are where a key can rest
    between flows: the initial state, the terminal ones, and each semi-terminal state a new flow
    can leave (a lookup assigns a Free bundle). A semi-terminal state whose only way out is its
    tombstone (Deleted, which its source tombstones at once) ends a life; it is no resting place."""
    problems = []
    semi = set(m.states) - m.active - {m.initial}
    if set(m.semi_terminal) != semi:
        problems.append(
            f"semi-terminal must be the states neither active nor initial: {_names(semi)}, "
            f"declared {_names(m.semi_terminal)}"
        )
    leaves = {src for storage in m.storages for (src, dst) in m.edges(storage) if dst != m.initial}
    resting = {m.initial} | set(m.terminal) | (semi & leaves)
    if set(m.stable) != resting:
        problems.append(
            f"stable must be the initial state, the terminal ones and the semi-terminal ones a flow "
            f"can leave: {_names(resting)}, declared {_names(m.stable)}"
        )
    if not m.in_flight <= m.active:
        problems.append(f"in flight but not active: {_names(m.in_flight - m.active)}")
    if m.stable & m.in_flight:
        problems.append(f"both stable and in flight: {_names(m.stable & m.in_flight)}")
    if m.semi_terminal & m.active:
        problems.append(f"semi-terminal but active: {_names(m.semi_terminal & m.active)}")
    if m.initial in m.active:
        problems.append(f"the initial state {m.initial.name} is active")
    unclassed = set(m.states) - m.stable - m.in_flight - m.semi_terminal
    if unclassed:
        problems.append(f"neither stable, in flight nor semi-terminal: {_names(unclassed)}")
    return GraphCheck(
        "classes-consistent",
        None,
        not problems,
        "in flight implies active and not stable; semi-terminal and initial imply not active; every state is classed; "
        "semi-terminal and stable are what the table makes them"
        if not problems
        else "; ".join(problems),
    )


def _check_flows(m: ProtocolModel) -> GraphCheck:
    tagged: dict[tuple[enum.Enum, enum.Enum], set[str]] = {}
    for storage in m.storages:
        for pair, edge in m.edges(storage).items():
            tagged.setdefault(pair, set()).update(edge.flows)
    forced_tags: dict[tuple[enum.Enum, enum.Enum], set[str]] = {}
    for override, pair in zip(m.spec.overrides, m.overrides, strict=True):
        forced_tags.setdefault(pair, set()).update(override.flows)
    problems: list[str] = []
    walked: set[tuple[str, tuple[enum.Enum, enum.Enum]]] = set()
    for flow in m.spec.flows:
        for path in flow.paths:
            for a, b in itertools.pairwise(path):
                pair = (m.state(a), m.state(b))
                tags = (forced_tags if flow.forced else tagged).get(pair)
                if tags is None:
                    problems.append(f"flow {flow.name}: {a}->{b} is not an edge")
                elif flow.name not in tags:
                    problems.append(f"flow {flow.name}: edge {a}->{b} does not list the flow")
                walked.add((flow.name, pair))
    for table in (tagged, forced_tags):
        for pair, tags in table.items():
            for tag in tags:
                if (tag, pair) not in walked:
                    problems.append(
                        f"edge {pair[0].name}->{pair[1].name} lists flow {tag} but no path of it walks there"
                    )
    count = sum(len(f.paths) for f in m.spec.flows)
    return GraphCheck(
        "flows-are-paths",
        None,
        not problems,
        f"{len(m.spec.flows)} flows, {count} paths, each a path of the graph" if not problems else "; ".join(problems),
    )


class InvalidTransitionError(ValueError):
    """A lifecycle step the model's table does not allow."""


class BundleLifecycle:
    """Follows one bundle through the model's table with a ``transitions`` state machine.

    Triggers are ``to_<State>``; only the storage's edges (and, for ``forced`` steps, the
    override edges) exist, so an invalid step raises :class:`InvalidTransitionError`.
    """

    state: str

    def __init__(
        self,
        model: str | Path | ProtocolModel | None = None,
        storage: StorageType = StorageType.SystemTopic,
        initial: enum.Enum | str | None = None,
    ) -> None:
        self.model = load_model(model)
        self.storage = storage
        self.history: list[enum.Enum] = []
        start = self.model.initial if initial is None else self.model.state(initial)
        self.machine = Machine(
            model=self,
            states=list(self.model.spec.states),
            initial=start.name,
            auto_transitions=False,
            ignore_invalid_triggers=False,
        )
        for src, dst in self.model.edges(storage):
            self.machine.add_transition(f"to_{dst.name}", src.name, dst.name)
        for src, dst in self.model.overrides:
            self.machine.add_transition(f"force_{dst.name}", src.name, dst.name)
        self.history.append(start)

    @property
    def current(self) -> enum.Enum:
        return self.model.state(self.state)

    def step(self, state: enum.Enum | str, forced: bool = False) -> enum.Enum:
        """Move to ``state``; ``forced`` takes an override edge (an overrideOwnership record)."""
        target = self.model.state(state)
        before = self.current
        trigger = f"{'force' if forced else 'to'}_{target.name}"
        try:
            self.trigger(trigger)  # type: ignore[attr-defined]
        except (MachineError, AttributeError):
            kind = "override" if forced else f"{self.storage.value} transition"
            raise InvalidTransitionError(
                f"{self.model.name}: {before.name} -> {target.name} is not a valid {kind}"
            ) from None
        self.history.append(target)
        return target

    def walk(self, states: list[str] | tuple[str, ...]) -> list[enum.Enum]:
        """Step through ``states`` in order (the first one must be the current state)."""
        first, *rest = states
        if self.model.state(first) != self.current:
            raise InvalidTransitionError(
                f"{self.model.name}: the walk starts at {first}, the bundle is {self.current.name}"
            )
        for state in rest:
            self.step(state)
        return list(self.history)


def mermaid(model: str | Path | ProtocolModel | None = None, storage: StorageType = StorageType.SystemTopic) -> str:
    """A Mermaid flowchart of one storage's table; dashed edges are forced overrides."""
    m = load_model(model)
    graph = state_graph(m, storage, include_overrides=True)
    lines = ["flowchart LR"]
    for state in m.states:
        shape = ("((", "))") if state == m.initial else ("([", "])") if state in m.stable else ("[", "]")
        lines.append(f"    {state.name}{shape[0]}{state.name}{shape[1]}")
    for src, dst, data in graph.edges(data=True):
        label = ", ".join(data["flows"]) or "-"
        arrow = "-.->" if data["forced"] else "-->"
        lines.append(f"    {src.name} {arrow}|{label}| {dst.name}")
    if m.in_flight:
        lines.append("    classDef inflight fill:#fff3cd,stroke:#b58900")
        lines.append(f"    class {','.join(s.name for s in m.states if s in m.in_flight)} inflight")
    return "\n".join(lines) + "\n"


def dot(model: str | Path | ProtocolModel | None = None, storage: StorageType = StorageType.SystemTopic) -> str:
    """A Graphviz DOT digraph of one storage's table; dashed edges are forced overrides."""
    m = load_model(model)
    graph = state_graph(m, storage, include_overrides=True)
    lines = [f'digraph "{m.name} {storage.value}" {{', "    rankdir=LR;", "    node [fontname=Helvetica];"]
    for state in m.states:
        attrs = ["shape=doublecircle" if state == m.initial else "shape=box, style=rounded"]
        if state in m.in_flight:
            attrs.append('style="rounded,filled", fillcolor="#fff3cd"')
        lines.append(f"    {state.name} [{', '.join(attrs)}];")
    for src, dst, data in graph.edges(data=True):
        label = ", ".join(data["flows"])
        style = ", style=dashed" if data["forced"] else ""
        lines.append(f'    {src.name} -> {dst.name} [label="{label}"{style}];')
    lines.append("}")
    return "\n".join(lines) + "\n"
