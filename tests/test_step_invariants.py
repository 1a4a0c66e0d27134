"""The step invariants (predicates over two consecutive observations, TLA+'s ``[][A]_v``): each
fails on a planted bad step and passes on the good ones around it; the observation a simulated
cluster gives carries the channel's settled values and lifetimes they read; a historical bug put
back is caught by the step form on the simulator and in the Hypothesis bench."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from properties.bench import InvariantBroken, MetadataStoreBench
from statechan.cluster import Cluster, Observation, SimConfig, StoreKind
from statechan.cluster.actions import Action, Lookup, RunTask, Shutdown, Tick
from statechan.cluster.config import VARIANTS
from statechan.cluster.runfile import load_saved_run
from statechan.cluster.runner import ObservationCheck, Simulation, Workload
from statechan.cluster.state import Rec, broker_name
from statechan.invariants.catalogue import (
    CATALOGUE,
    check,
    check_step,
    check_trace,
    simulation_ids,
    simulation_settings,
    step_ids,
    step_invariant,
)
from statechan.keys import parse_key
from statechan.resolver import fold
from statechan.states import ServiceUnitState, StorageType
from statechan.values import ServiceUnitStateData

S = ServiceUnitState
DOCS = Path(__file__).resolve().parent.parent / "docs"
KEY = "tenant/ns-0/0x00000000_0xffffffff"
LEFT, RIGHT = (child.key for child in parse_key(KEY).split())
B0, B1, B2 = 0, 1, 2
N0, N1 = broker_name(B0), broker_name(B1)
STEP_IDS = [
    "version-monotonic",
    "one-value-per-version",
    "no-resurrection",
    "split-partitions-parent",
    "no-spurious-takeover",
    "unload-completion-matches",
]
STEP_FORMS = STEP_IDS[:4]
"""The step forms of history or record invariants (the rest are step invariants alone)."""


def val(state: S, version: int, dst: int | None = B0, src: int | None = None, at: int = 1) -> Rec:
    return Rec(state, dst, src, version, False, at)


BASE = Observation.of(
    SimConfig(),
    time=0,
    views={},
    serving={},
    started=frozenset(),
    connected=frozenset(),
    registered=frozenset(),
    unregistered_at={},
    leader=None,
    leader_since=None,
    acting_leaders=frozenset(),
    bundles=frozenset(),
    quiescent=True,
    syncer_differences=None,
    positions={},
    pending_unloads={},
)


def obs(
    channel: dict[str, Rec] | None = None,
    born: dict[str, int] | None = None,
    deleted: tuple[str, ...] = (),
    views: dict[int, dict[str, Rec]] | None = None,
    incarnations: dict[int, int] | None = None,
) -> Observation:
    """An observation holding only what the step invariants read (lifetimes from 0 unless given)."""
    channel = channel or {}
    views = views or {}
    return BASE.replace(
        channel=channel,
        born=dict.fromkeys(channel, 0) if born is None else born,
        deleted=frozenset(deleted),
        views=dict(views),
        incarnations=dict.fromkeys(views, 1) if incarnations is None else incarnations,
    )


OWNED2, OWNED3 = val(S.Owned, 2), val(S.Owned, 3)
OTHER_OWNED3 = val(S.Owned, 3, dst=B1)
LATER_OWNED3 = val(S.Owned, 3, at=2)
SPLITTING, DELETED = val(S.Splitting, 4, dst=None, src=B0), val(S.Deleted, 5, dst=None, src=B0)


def live(o: Observation, *brokers: int) -> Observation:
    """``o`` with ``brokers`` running (channel started) and registered."""
    return o.replace(started=frozenset(brokers), registered=frozenset(brokers))


FORCED_TO_B1 = Rec(S.Owned, B1, B0, 3, True, 0)
RELEASING = val(S.Releasing, 3, dst=B1, src=B0)

Case = tuple[str, Observation, Observation, list[tuple[str, str]]]
CASES: list[Case] = [
    # no-spurious-takeover (#23064, #21721)
    (
        "a forced override takes an Owned bundle from a running, registered owner",
        live(obs({KEY: OWNED2}), B0, B1),
        live(obs({KEY: FORCED_TO_B1}), B0, B1),
        [("no-spurious-takeover", KEY)],
    ),
    (
        "a tombstone deletes an Owned bundle of a running, registered owner",
        live(obs({KEY: OWNED2}), B0),
        live(obs(), B0),
        [("no-spurious-takeover", KEY)],
    ),
    ("a forced override of a broker that left", live(obs({KEY: OWNED2}), B1), live(obs({KEY: FORCED_TO_B1}), B1), []),
    (
        "a forced override of a registered broker that crashed (not running)",
        obs({KEY: OWNED2}).replace(registered=frozenset({B0, B1}), started=frozenset({B1})),
        obs({KEY: FORCED_TO_B1}).replace(registered=frozenset({B0, B1}), started=frozenset({B1})),
        [],
    ),
    ("an unload (not forced) of a running owner", live(obs({KEY: OWNED2}), B0), live(obs({KEY: RELEASING}), B0), []),
    # version-monotonic: the channel
    ("the channel moves on a version", obs({KEY: OWNED2}), obs({KEY: OWNED3}), []),
    ("the channel goes back a version", obs({KEY: OWNED3}), obs({KEY: OWNED2}), [("version-monotonic", KEY)]),
    (
        "the channel's lower version is a new lifetime (deleted and written again in between)",
        obs({KEY: OWNED3}, born={KEY: 0}),
        obs({KEY: OWNED2}, born={KEY: 9}),
        [],
    ),
    ("the channel takes a first value", obs(), obs({KEY: OWNED2}), []),
    # version-monotonic: a view
    (
        "a view goes back a version while the channel is ahead",
        obs({KEY: OWNED3}, views={B1: {KEY: OWNED3}}),
        obs({KEY: OWNED3}, views={B1: {KEY: OWNED2}}),
        [("version-monotonic", KEY)],
    ),
    (
        "a view lands on the channel's lower version (it crossed a deletion)",
        obs({KEY: OWNED2}, born={KEY: 5}, views={B1: {KEY: OWNED3}}),
        obs({KEY: OWNED2}, born={KEY: 5}, views={B1: {KEY: OWNED2}}),
        [],
    ),
    (
        "a restarted broker's view starts afresh",
        obs({KEY: OWNED3}, views={B1: {KEY: OWNED3}}, incarnations={B1: 1}),
        obs({KEY: OWNED3}, views={B1: {KEY: OWNED2}}, incarnations={B1: 2}),
        [],
    ),
    (
        "a view that held nothing takes an old version",
        obs({KEY: OWNED3}, views={B1: {}}),
        obs({KEY: OWNED3}, views={B1: {KEY: OWNED2}}),
        [],
    ),
    # one-value-per-version
    (
        "the channel rewrites a version with another value",
        obs({KEY: OWNED3}),
        obs({KEY: LATER_OWNED3}),
        [("one-value-per-version", KEY)],
    ),
    ("the channel holds the same value", obs({KEY: OWNED3}), obs({KEY: val(S.Owned, 3)}), []),
    (
        "the channel's same version is a new lifetime",
        obs({KEY: OWNED3}, born={KEY: 0}),
        obs({KEY: OTHER_OWNED3}, born={KEY: 9}),
        [],
    ),
    (
        "a view swaps a version's value for one the channel does not hold",
        obs({KEY: OWNED3}, views={B1: {KEY: OWNED3}}),
        obs({KEY: OWNED3}, views={B1: {KEY: OTHER_OWNED3}}),
        [("one-value-per-version", KEY)],
    ),
    (
        "a view lands on the channel's value of the same version (it crossed a deletion)",
        obs({KEY: OTHER_OWNED3}, born={KEY: 9}, views={B1: {KEY: OWNED3}}),
        obs({KEY: OTHER_OWNED3}, born={KEY: 9}, views={B1: {KEY: OTHER_OWNED3}}),
        [],
    ),
    # no-resurrection
    (
        "a Deleted key becomes Owned again",
        obs({KEY: DELETED}, deleted=(KEY,)),
        obs({KEY: val(S.Owned, 6)}),
        [("no-resurrection", KEY)],
    ),
    (
        "a key Deleted in its lifetime becomes active from Free (the history variable)",
        obs({KEY: val(S.Free, 6, dst=None, src=B0)}, deleted=(KEY,)),
        obs({KEY: val(S.Assigning, 7)}, deleted=(KEY,)),
        [("no-resurrection", KEY)],
    ),
    (
        "a tombstoned key's new lifetime becomes active",
        obs({KEY: DELETED}, deleted=(KEY,), born={KEY: 0}),
        obs({KEY: val(S.Assigning, 1)}, born={KEY: 9}),
        [],
    ),
    (
        "a Free key never Deleted becomes active beside a Deleted one",
        obs({LEFT: val(S.Free, 2, dst=None), RIGHT: DELETED}, deleted=(RIGHT,)),
        obs({LEFT: OWNED3, RIGHT: DELETED}, deleted=(RIGHT,)),
        [],
    ),
    # split-partitions-parent
    (
        "a split parent Deleted with both children held",
        obs({KEY: SPLITTING}),
        obs({KEY: DELETED, LEFT: val(S.Owned, 1), RIGHT: val(S.Owned, 1)}),
        [],
    ),
    (
        "a split parent Deleted with one child held",
        obs({KEY: SPLITTING}),
        obs({KEY: DELETED, LEFT: val(S.Owned, 1)}),
        [("split-partitions-parent", KEY)],
    ),
    (
        "a split parent Deleted with no child",
        obs({KEY: SPLITTING}),
        obs({KEY: DELETED}),
        [("split-partitions-parent", KEY)],
    ),
    (
        "a key Deleted from Owned is no split",
        obs({KEY: OWNED3}),
        obs({KEY: val(S.Deleted, 4, dst=None, src=B0)}),
        [],
    ),
]


@pytest.mark.parametrize(("name", "before", "after", "expected"), CASES, ids=[c[0] for c in CASES])
def test_a_step_invariant_holds_or_not(name: str, before: Observation, after: Observation, expected: list[Any]) -> None:
    assert [(v.invariant, v.key) for v in check_step(before, after)] == expected


def test_the_step_ids_and_their_registration() -> None:
    assert step_ids() == STEP_IDS
    assert step_ids(["version-monotonic", "single-owner"]) == ["version-monotonic"]
    assert all(CATALOGUE[i].history_check is not None or CATALOGUE[i].has_record_form for i in STEP_FORMS)
    assert all(CATALOGUE[i].when == "step" for i in STEP_IDS[4:])
    # one step form per id
    with pytest.raises(ValueError, match="has a step form already"):
        step_invariant("version-monotonic", "again")(lambda before, after: [])
    # naming ids runs only those
    before, after = obs({KEY: OWNED3}), obs({KEY: OWNED2})
    assert check_step(before, after, ["no-resurrection"]) == []
    assert [v.invariant for v in check_step(before, after, ["version-monotonic"])] == ["version-monotonic"]


def test_the_violation_names_both_values() -> None:
    (found,) = check_step(obs({KEY: OWNED3}, views={B1: {KEY: OWNED3}}), obs({KEY: OWNED3}, views={B1: {KEY: OWNED2}}))
    assert found.detail == (
        f"{N1} went from Owned dst={N0} v3 to Owned dst={N0} v2 (the channel holds Owned dst={N0} v3)"
    )


def settled_now(cluster: Cluster) -> dict[str, ServiceUnitStateData]:
    """The channel's settled values worked out afresh: the store's nodes, or a fold of the whole log."""
    if cluster.storage is StorageType.MetadataStore:
        return {
            key: node.data.data() for key, node in cluster.state.store.channel.items() if isinstance(node.data, Rec)
        }
    by_key: dict[str, list[ServiceUnitStateData | None]] = {}
    for key, value in cluster.topic:
        by_key.setdefault(key, []).append(value)
    settled = {key: fold(values, StorageType.SystemTopic, model=cluster.model) for key, values in by_key.items()}
    return {key: value for key, value in settled.items() if value is not None}


def channel_now(obs: Observation) -> dict[str, ServiceUnitStateData]:
    return {key: value.data() for key, value in obs.channel.items()}


@pytest.mark.parametrize("store", [StoreKind.system_topic, StoreKind.metadata_store, StoreKind.both])
def test_the_observation_holds_the_channels_settled_values(store: StoreKind) -> None:
    """At every step of a simulated run, ``channel`` is a full reader's fold of the topic (or the
    store's nodes), ``born`` moves only when a key comes back after nothing, an observation's
    views stay as they were when taken, and every step invariant holds on the current protocol."""
    config = SimConfig(brokers=3, namespaces=1, bundles_per_namespace=2, seed=4, store=store)
    workload = Workload(lookups_per_hour=6, unloads_per_hour=30, splits_per_hour=3, settle_ms=3 * 3_600_000)
    simulation = Simulation(config, workload)
    taken: list[tuple[Observation, dict[int, dict[str, Rec]]]] = []
    lifetimes: set[tuple[str, int]] = set()
    step_broken: list[str] = []

    def look(cluster: Cluster) -> list[str]:
        now = cluster.observe()
        if taken:
            step_broken.extend(str(v) for v in check_step(taken[-1][0], now))
        if len(taken) % 97 == 0:  # a sample: a full fold at every step is quadratic
            assert channel_now(now) == settled_now(cluster)
        assert set(now.born) == set(now.channel)
        holding_deleted = {key for key, value in now.channel.items() if value.state is S.Deleted}
        if cluster.storage is StorageType.MetadataStore:
            assert now.deleted == holding_deleted
        else:
            assert now.deleted >= holding_deleted
        lifetimes.update(now.born.items())
        taken.append((now, {b: dict(view) for b, view in now.views.items()}))
        return []

    simulation.run(4 * 3_600_000, check=look)
    assert step_broken == []
    assert any(now.deleted for now, _ in taken), "no split reached Deleted: the run shows nothing"
    assert len(lifetimes) > len({key for key, _ in lifetimes}), "no key came back after a tombstone"
    for now, views in taken[:: max(1, len(taken) // 50)]:
        assert {b: dict(view) for b, view in now.views.items()} == views  # unchanged by the later steps


def replayed(path: Path, variant: str) -> tuple[list[str], list[str]]:
    """A saved run replayed on ``variant`` with an :class:`ObservationCheck` of the step forms
    alone, as ``statechan simulate``/``replay`` run it; what it and the trace forms report."""
    run = load_saved_run(path)
    config = run.config.model_copy(update={"variant": VARIANTS[variant]})
    cluster = Cluster(config, picks=run.picks)
    stepwise = ObservationCheck(lambda now: [], check_step)
    stepwise.start(cluster)
    by_step: list[str] = []
    for number, action in enumerate(run.actions, start=1):
        try:
            cluster.step(action)
        except ValueError:
            break  # a step the protocol cannot take (another variant) ends the replay
        by_step += [f"step {number}: {found}" for found in stepwise(cluster)]
    settings = simulation_settings(cluster.config, cluster.storage, cluster.model.name)
    on_trace = check_trace(cluster.trace, cluster.storage, cluster.model.name, simulation_ids(), settings)
    return by_step, [str(v) for v in on_trace]


def test_the_step_form_catches_24186_on_the_simulator_at_the_step_it_happens() -> None:
    """#24186 put back (a lost compare-and-set retried without the resolver): the retry writes a
    second value at version 2. The history form finds it in the trace at the end; the step form
    at the step that writes it, and nothing on the current protocol."""
    path = DOCS / "counterexamples" / "24186.json"
    by_step, on_trace = replayed(path, "24186")
    assert len(by_step) == 1  # one step writes the second value; nothing else breaks a step invariant
    assert by_step[0].startswith("step ")
    assert f": one-value-per-version [{KEY}]: the channel's version " in by_step[0]
    assert [v.split(" ")[0] for v in on_trace] == ["one-value-per-version"]
    assert replayed(path, "current") == ([], [])


def test_the_bench_checks_the_step_forms_at_each_step(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    """The Hypothesis bench's check after each step compares the observation with the one before:
    on #24186's run it stops at the step that writes the second value, long before the teardown
    would read the histories (no cluster invariant breaks on that run)."""
    monkeypatch.setenv("STATECHAN_RUNS_DIR", str(tmp_path))
    run = load_saved_run(DOCS / "counterexamples" / "24186.json")
    machine_class = type("Bug24186", (MetadataStoreBench,), {"config": run.config})
    machine = machine_class()
    by_step, _ = replayed(DOCS / "counterexamples" / "24186.json", "24186")
    breaking = int(by_step[0].split(":")[0].removeprefix("step "))  # where the replay's step form sees it
    steps = run.actions
    for action in steps[: breaking - 1]:
        machine.cluster.step(action)
        machine.catalogue_holds()
    machine.cluster.step(steps[breaking - 1])
    assert check(machine.cluster.observe()) == []  # no cluster invariant sees it
    with pytest.raises(InvariantBroken) as failure:
        machine.catalogue_holds()
    assert failure.value.invariants == ["one-value-per-version"]
    assert failure.value.steps == breaking
    assert "the channel's version 1 went from Assigning " in str(failure.value)


# #24186's race, found by the bench with the step form alone: broker-2 reads no node and prepares
# Assigning v1; broker-1 assigns and owns the bundle (v1, v2) before broker-2's create runs, which
# fails and is retried without the resolver, writing v1 over v2.
RACE_24186 = [
    Lookup("broker-2:8080", KEY),
    Tick(),
    RunTask("broker-2:8080"),
    Lookup("broker-1:8080", KEY),
    Shutdown("broker-2:8080"),
    RunTask("broker-1:8080"),
    RunTask("broker-1:8080"),
    RunTask("broker-1:8080"),
    RunTask("broker-1:8080"),
    RunTask("broker-2:8080"),
]


@pytest.mark.parametrize(("variant", "expected"), [("24186", [10]), ("current", [])])
def test_a_simulated_run_going_back_a_version_is_caught_by_the_step_form(variant: str, expected: list[int]) -> None:
    """The simulator's check (an :class:`ObservationCheck` of the cluster and step forms, as
    ``statechan simulate`` and ``replay`` take it) reports ``version-monotonic`` at the step that
    writes v1 over v2; the trace's history form agrees at the end; the fixed protocol refuses the
    retry and breaks nothing."""
    config = MetadataStoreBench.config.model_copy(update={"variant": VARIANTS[variant]})
    cluster = Cluster(config)
    stepwise = ObservationCheck(check, check_step)
    stepwise.start(cluster)
    broken: list[tuple[int, str]] = []
    for number, action in enumerate(RACE_24186, start=1):
        cluster.step(action)
        broken += [(number, found) for found in stepwise(cluster)]
    assert [number for number, _ in broken] == expected
    settings = simulation_settings(cluster.config, cluster.storage, cluster.model.name)
    on_trace = check_trace(cluster.trace, cluster.storage, cluster.model.name, ["version-monotonic"], settings)
    if expected:
        assert broken == [
            (
                10,
                f"version-monotonic [{KEY}]: the channel went from Owned dst=broker-1:8080 v2 "
                "to Assigning dst=broker-2:8080 v1",
            )
        ]
        assert [v.invariant for v in on_trace] == ["version-monotonic"]
    else:
        assert on_trace == []


@pytest.mark.parametrize("observe_every", [1, 2, 3])
def test_the_observation_follows_the_store_whatever_the_trace_holds(observe_every: int) -> None:
    """The observation reads the state: the store's channel at every step, with the trace emptied
    (as the model checker runs) or not."""
    config = MetadataStoreBench.config.model_copy(update={"brokers": 2})
    cluster = Cluster(config)
    seen = []
    action: Action | None = Lookup(broker_name(B1), KEY)
    number = 0
    while action is not None:
        cluster.step(action)
        number += 1
        cluster.trace.clear()
        if number % observe_every == 0:
            now = cluster.observe()
            assert channel_now(now) == settled_now(cluster)
            seen.append(now.channel.get(KEY))
        work = cluster.work_actions()
        action = work[0] if work else None
    assert channel_now(cluster.observe()) == settled_now(cluster)
    assert any(value is not None and value.state is S.Owned for value in seen)


def test_a_hand_made_observation_answers_what_it_is_given_and_reads_the_rest_from_the_state() -> None:
    cluster = Cluster(SimConfig(brokers=2, namespaces=1, bundles_per_namespace=1))
    cluster.drain()
    now = cluster.observe()
    assert now.started == frozenset({B0, B1})
    changed = now.replace(started=frozenset({B1}))
    assert changed.started == frozenset({B1})
    assert changed.registered == now.registered == frozenset({B0, B1})  # read from the state
    assert now.started == frozenset({B0, B1})  # the observation replaced is as it was
    made = Observation.of(SimConfig(brokers=2), started=frozenset())
    assert made.started == frozenset()
    with pytest.raises(AttributeError):
        made.registered  # noqa: B018 - a hand-made observation without a state reads nothing else
