"""The graph layer: networkx graphs, structural checks, the lifecycle machine, diagrams, docs."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from statechan import ServiceUnitState, StorageType, builtin_model_names, load_model
from statechan.docs import stale_docs
from statechan.graph import BundleLifecycle, InvalidTransitionError, check_graph, dot, mermaid, state_graph
from statechan.model import parse_model

S = ServiceUnitState
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("name", builtin_model_names())
def test_every_builtin_model_passes_its_graph_checks(name: str) -> None:
    failed = [str(c) for c in check_graph(name) if not c.ok]
    assert failed == []


@pytest.mark.parametrize("name", builtin_model_names())
def test_graph_edges_are_the_table(name: str) -> None:
    m = load_model(name)
    for storage in m.storages:
        graph = state_graph(m, storage)
        assert set(graph.edges) == set(m.edges(storage))
        for src, dst in graph.edges:
            assert m.is_valid_transition(src, dst, storage)


def test_metadata_store_graph_is_a_subgraph_of_the_system_topic_graph() -> None:
    ms = state_graph(storage=StorageType.MetadataStore)
    st = state_graph(storage=StorageType.SystemTopic)
    assert set(ms.edges) < set(st.edges)


@pytest.mark.parametrize(
    ("change", "problem"),
    [
        ({"stable": ["Init", "Owned"]}, "stable must be"),  # Free rests between an unload and the next lookup
        ({"stable": ["Init", "Free", "Owned", "Deleted"]}, "stable must be"),  # Deleted's only way out: its tombstone
        ({"semi_terminal": ["Deleted"]}, "semi-terminal must be"),  # Free names no owner either
    ],
)
def test_the_classes_the_protocol_does_not_read_are_pinned_to_the_table(
    change: dict[str, object], problem: str
) -> None:
    from statechan.mutate import read_model_data, to_toml

    data, _ = read_model_data("pulsar-4")
    changed = parse_model(to_toml({**data, **change}))
    classes = next(c for c in check_graph(changed) if c.name == "classes-consistent")
    assert not classes.ok
    assert problem in classes.detail


def test_owned_is_the_only_terminal_but_live_state() -> None:
    m = load_model()
    assert m.active - m.in_flight == {S.Owned}


@pytest.mark.parametrize("name", builtin_model_names())
def test_lifecycle_machine_walks_every_flow(name: str) -> None:
    m = load_model(name)
    for flow in m.spec.flows:
        for path in flow.paths:
            storages = [
                s for s in m.storages if all(m.is_valid_transition(a, b, s) for a, b in itertools.pairwise(path))
            ]
            if flow.forced:
                machine = BundleLifecycle(m, initial=path[0])
                for state in path[1:]:
                    machine.step(state, forced=True)
                assert [s.name for s in machine.history] == list(path)
                continue
            assert storages, f"{name}: flow {flow.name} path {path} is valid on no storage"
            machine = BundleLifecycle(m, storages[0], initial=path[0])
            assert [s.name for s in machine.walk(path)] == list(path)


def test_lifecycle_machine_refuses_invalid_steps() -> None:
    machine = BundleLifecycle()
    machine.walk(["Init", "Assigning", "Owned"])
    with pytest.raises(InvalidTransitionError, match="Owned -> Assigning is not a valid SystemTopic transition"):
        machine.step(S.Assigning)
    assert machine.current is S.Owned
    machine.step(S.Owned, forced=True)  # the leader's override of an orphan
    with pytest.raises(InvalidTransitionError, match="not a valid override"):
        machine.step(S.Deleted, forced=True)


def test_metadata_store_machine_refuses_what_only_the_topic_allows() -> None:
    machine = BundleLifecycle(storage=StorageType.MetadataStore)
    with pytest.raises(InvalidTransitionError):
        machine.step(S.Owned)


def test_pip_192_design_uses_its_own_states() -> None:
    m = load_model("pip-192-design")
    assert [s.name for s in m.states] == ["Unassigned", "Assigning", "Assigned", "Splitting"]
    machine = BundleLifecycle(m)
    machine.walk(["Unassigned", "Assigning", "Assigned", "Splitting", "Unassigned"])
    with pytest.raises(ValueError, match="graph-only"):
        m.rules()


@pytest.mark.parametrize("storage", list(StorageType))
def test_diagrams_show_every_edge(storage: StorageType) -> None:
    m = load_model()
    text_mermaid, text_dot = mermaid(m, storage), dot(m, storage)
    for src, dst in m.edges(storage):
        assert f"{src.name} -->|" in text_mermaid
        assert f"| {dst.name}" in text_mermaid
        assert f"{src.name} -> {dst.name} [" in text_dot
    for src, dst in m.overrides:
        if (src, dst) not in m.edges(storage):
            assert f"{src.name} -.->" in text_mermaid


def test_committed_docs_are_generated_from_the_models() -> None:
    assert stale_docs(ROOT / "docs") == [], "run: make docs"


BROKEN = """
name = "broken"
states = ["Init", "Owned", "Assigning", "Lost", "Stuck"]
initial = "Init"
in_flight = ["Assigning", "Stuck"]
active = ["Owned", "Assigning", "Lost", "Stuck"]
stable = ["Init", "Owned"]
terminal = ["Owned"]

[[transitions]]
from = "Init"
to = "Assigning"
flows = ["assign"]

[[transitions]]
from = "Assigning"
to = "Owned"
flows = ["assign"]

[[flows]]
name = "assign"
paths = [["Init", "Assigning", "Owned", "Init"]]
"""


def test_graph_checks_catch_a_broken_model() -> None:
    results = {c.name: c for c in check_graph(parse_model(BROKEN, "broken.toml"))}
    assert not results["reachable-from-initial"].ok
    assert "Lost, Stuck" in results["reachable-from-initial"].detail
    assert not results["in-flight-can-settle"].ok
    assert "Stuck" in results["in-flight-can-settle"].detail
    assert not results["flows-are-paths"].ok
    assert "Owned->Init is not an edge" in results["flows-are-paths"].detail
    assert not results["terminal-but-live"].ok  # Lost is active, not in flight, and not declared terminal
