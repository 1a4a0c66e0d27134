"""Findings about the current protocol (docs/findings.md), pinned so that a change to the model
that makes them disappear or change is noticed."""

from __future__ import annotations

from pathlib import Path

from properties.bench import violations_of
from statechan.cluster import Cluster
from statechan.cluster.config import VARIANTS
from statechan.cluster.runfile import load_run

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _replay_until_broken(name: str) -> tuple[Cluster, list[str], int]:
    """Replay a saved run on the current protocol, stopping at the first step that breaks an
    invariant; the cluster, the invariants broken there, and the run's length."""
    config, actions, _ = load_run(DOCS / "counterexamples" / name)
    assert config.variant == VARIANTS["current"]
    cluster = Cluster(config)
    broken: list[str] = []
    for action in actions:
        cluster.step(action)
        broken = [v.invariant for v in violations_of(cluster)]
        if broken:
            break
    return cluster, broken, len(actions)


def test_a_split_handed_over_after_a_session_blip_leaves_two_owners_for_a_moment() -> None:
    cluster, broken, steps = _replay_until_broken("finding-split-handover.json")
    assert set(broken) == {"single-owner"}
    assert len(cluster.history) == steps  # it is the last step that shows it
    cluster.drain()  # once the handed-over split is read, the overlap is gone
    assert violations_of(cluster) == []


def test_a_departing_brokers_clean_up_overrides_a_transfer_in_flight_from_a_live_source() -> None:
    cluster, broken, steps = _replay_until_broken("finding-shutdown-override.json")
    assert set(broken) == {"single-owner"}
    assert len(cluster.history) == steps
    cluster.drain()  # once the source reads the override, it stops serving
    assert violations_of(cluster) == []


def test_a_lookup_of_a_split_child_before_its_owned_record_assigns_it_elsewhere() -> None:
    cluster, broken, steps = _replay_until_broken("finding-split-child-lookup.json")
    assert set(broken) == {"single-owner"}
    assert len(cluster.history) == steps
