"""Partial-order reduction against the search without it (which tests/test_checker.py shows reaches
every state a search without any abstraction reaches). On the system-topic bounds the checker tests
use, the reduced search must reach the same verdict and completeness, only states the full search
reaches, every state the full search reaches where no delivery is pending (so every quiescent and
every settled state, every observation the quiescent invariants and the liveness check read), and
every state and step invariant the full search breaks; a planted unsound reduction must fail it."""

from __future__ import annotations

import random
from collections import Counter
from typing import Any

import pytest

from statechan import checker
from statechan.checker import (
    Bounds,
    CheckResult,
    Fingerprinter,
    _expander,
    _por_after,
    _por_candidates,
    budget_kind,
    check,
)
from statechan.cluster import StoreKind, protocol
from statechan.cluster.actions import Action, Crash, Deliver, Tick
from statechan.cluster.state import ClusterState
from statechan.invariants import catalogue
from statechan.invariants.catalogue import simulation_ids, step_ids
from statechan.observation import Observation

CAP = 10**9
SMALL = Bounds(brokers=2, bundles=1, lookups=1, admin=1, ticks=2)
State = tuple[Any, int, tuple[tuple[str, int], ...]]


def _form(state: ClusterState, brokers: int) -> Any:
    """A state's form with every time told apart and no renaming: the state itself, as a value."""
    return Fingerprinter(brokers, CAP, False).form(state)


def _search(
    bounds: Bounds, por: bool, variant: str = "current", invariants: list[str] | None = None
) -> tuple[CheckResult, dict[State, tuple[bool, bool, bool]]]:
    """The search, and each state it reached (form, clock, budgets left) with whether a delivery
    is pending there, whether it is quiescent, whether it is settled."""
    seen: dict[State, tuple[bool, bool, bool]] = {}
    agree = invariants is None or "views-converge" in invariants
    setup = protocol.setup(checker.checker_config(bounds, StoreKind.system_topic, variant))

    def visit(state: ClusterState, left: dict[str, int]) -> None:
        key = (_form(state, bounds.brokers), state.now, tuple(sorted(left.items())))
        pending = any(isinstance(a, Deliver) for a in protocol.enabled(state, setup))
        seen[key] = (pending, protocol.quiescent(state, setup), checker.settled(Observation(state, setup), agree))

    result = check(
        bounds, StoreKind.system_topic, variant, symmetry=False, visitor=visit, por=por, invariants=invariants
    )
    return result, seen


def _verdict(result: CheckResult) -> tuple[object, ...]:
    broken = None if result.violation is None else result.violation.split(":")[0]
    return (result.complete, result.stopped, broken, result.liveness is None)


SKIP_CONVERGE = [i for i in simulation_ids() if i != "views-converge"]
SAFE_BOUNDS = [
    (SMALL, None),
    (Bounds(admin=0, ticks=2), None),
    (Bounds(admin_kinds=("unload",), ticks=4), None),
    (Bounds(lookups=0, admin=0, crashes=1, restarts=1, ticks=1), None),
    (Bounds(lookups=1, admin=0, crashes=1, ticks=1), None),
    (Bounds(lookups=1, admin=1, admin_kinds=("transfer",), ticks=2), None),
    (Bounds(lookups=1, admin=1, admin_kinds=("split",), ticks=1), None),
    (Bounds(admin_kinds=("unload",), compactions=1, ticks=3, tombstone_delay_s=30), SKIP_CONVERGE),
]
"""The complete, safe system-topic bounds of tests/test_checker.py (the unload-and-compaction one
past finding 1, as it checks it)."""


@pytest.mark.parametrize(
    ("bounds", "invariants"),
    SAFE_BOUNDS,
    ids=["small", "no-admin", "unload", "crash-restart", "lookup-crash", "transfer", "split", "unload-compaction"],
)
def test_the_reduced_search_keeps_the_verdict_and_every_state_without_a_pending_delivery(
    bounds: Bounds, invariants: list[str] | None
) -> None:
    full, everything = _search(bounds, False, invariants=invariants)
    reduced, kept = _search(bounds, True, invariants=invariants)
    assert _verdict(reduced) == _verdict(full)
    assert full.complete
    assert full.ok
    assert kept.keys() <= everything.keys()
    assert reduced.states <= full.states
    for flag in range(3):  # no delivery pending; quiescent; settled
        wanted = {k for k, flags in everything.items() if flags[flag] is (flag > 0)}
        assert wanted <= kept.keys(), flag
        assert wanted == {k for k, flags in kept.items() if flags[flag] is (flag > 0)}, flag
    assert reduced.reduced > 0 or reduced.states == full.states


@pytest.mark.parametrize(
    ("variant", "bounds", "invariant"),
    [
        ("25379", SMALL.model_copy(update={"crashes": 1, "restarts": 1}), "in-flight-acted-on"),
        ("24478", SMALL.model_copy(update={"session_losses": 1, "admin": 0}), "single-owner"),
        ("20110", Bounds(compactions=1), "views-converge"),
        ("current", Bounds(admin_kinds=("unload",), compactions=1, ticks=3, tombstone_delay_s=30), "views-converge"),
    ],
    ids=["25379", "24478", "20110", "finding-1"],
)
def test_bug_variants_are_still_found_with_the_reduction_and_no_longer(
    variant: str, bounds: Bounds, invariant: str
) -> None:
    full = check(bounds, StoreKind.system_topic, variant, por=False)
    reduced = check(bounds, StoreKind.system_topic, variant, por=True)
    assert full.violation is not None
    assert full.violation.startswith(invariant)
    assert reduced.violation is not None
    assert reduced.violation.startswith(invariant)
    assert len(reduced.path) <= len(full.path)
    assert reduced.states <= full.states


def test_without_the_bugs_the_reduction_finds_nothing_within_the_variants_depth() -> None:
    """tests/test_checker.py's 20110 check: the current protocol has nothing within the depth the
    bug needs. A depth bound stops both searches alike."""
    bug = check(Bounds(compactions=1), variant="20110")
    current = check(Bounds(compactions=1, depth=len(bug.path)))
    full = check(Bounds(compactions=1, depth=len(bug.path)), por=False)
    assert _verdict(current) == _verdict(full) == (False, f"depth bound {len(bug.path)}", None, True)


def _broken_everywhere(
    bounds: Bounds, por: bool, variant: str, monkeypatch: pytest.MonkeyPatch
) -> tuple[CheckResult, set[str]]:
    """Every state invariant some reached state breaks and every step invariant some taken step
    breaks (the search itself is told of none, so it goes on past the first)."""
    ids = [i for i in simulation_ids() if i != "lookup-answers-live-owner"]
    state_ids = [i for i in ids if i not in step_ids(ids)]
    broken: set[str] = set()
    real_step = catalogue.check_step

    def record_step(before: Any, after: Any, chosen: Any = None) -> list[Any]:
        broken.update(v.invariant for v in real_step(before, after, chosen))
        return []

    setup = protocol.setup(checker.checker_config(bounds, StoreKind.system_topic, variant))

    def visit(state: ClusterState, left: dict[str, int]) -> None:
        broken.update(v.invariant for v in catalogue.check(Observation(state, setup), state_ids))

    monkeypatch.setattr(catalogue, "check_step", record_step)
    result = check(bounds, StoreKind.system_topic, variant, symmetry=False, visitor=visit, por=por, invariants=ids)
    monkeypatch.setattr(catalogue, "check_step", real_step)
    return result, broken


@pytest.mark.parametrize(
    ("variant", "bounds"),
    [
        ("25379", Bounds(crashes=1, restarts=1, admin=0, ticks=2)),
        ("20110", Bounds(compactions=1, ticks=1)),
    ],
    ids=["25379", "20110"],
)
def test_the_reduced_search_breaks_every_invariant_the_full_search_breaks(
    variant: str, bounds: Bounds, monkeypatch: pytest.MonkeyPatch
) -> None:
    full, everywhere = _broken_everywhere(bounds, False, variant, monkeypatch)
    reduced, kept = _broken_everywhere(bounds, True, variant, monkeypatch)
    assert full.complete
    assert reduced.complete
    assert everywhere
    assert kept == everywhere


def _one_step_deep(bounds: Bounds, samples: int) -> tuple[Counter[str], list[str]]:
    """Persistence and invisibility one step deep, on states of a search: wherever the reduction
    takes a delivery α alone, every other enabled action β commutes with it (both orders reach one
    value, α stays enabled; a crash of α's broker absorbs it), β's step breaks the same step
    invariants after α as before it, and α's step breaks the same ones after β as at the state
    (none: a step the reduction takes alone never breaks one)."""
    from statechan.invariants.catalogue import check_step

    expander = _expander(bounds, StoreKind.system_topic, "current", False, [], False)
    setup = expander.setup
    states: list[tuple[ClusterState, Counter[str]]] = []
    budget = bounds.budget()

    def visit(state: ClusterState, left: dict[str, int]) -> None:
        states.append((state, Counter({k: budget[k] - n for k, n in left.items()})))

    check(bounds, StoreKind.system_topic, symmetry=False, visitor=visit, invariants=[], max_states=6_000, por=False)
    rng = random.Random(7)
    checked: Counter[str] = Counter()
    broken: list[str] = []
    for state, spent in rng.sample(states, min(samples, len(states))):
        taken: list[tuple[Action, str | None]] = []
        for action in protocol.enabled(state, setup):
            kind = budget_kind(action, bounds)
            if kind != "off" and (kind is None or spent[kind] < budget[kind]):
                taken.append((action, kind))
        before = Observation(state, setup)
        for candidate in _por_candidates(state, setup, taken, budget, spent, bounds):
            if candidate.reasons - {"tick-clock"}:
                continue
            alpha = candidate.action
            outcome = protocol.step(state, alpha, setup, trace=False)
            after = Observation(outcome.state, setup, outcome.answers)
            if _por_after(state, outcome, before, after, candidate, budget, spent, bounds):
                continue
            checked["states"] += 1

            def run(*actions: Action, state: ClusterState = state) -> tuple[Any, list[Any]] | None:
                """The state's form after ``actions`` and the step invariants the last one broke."""
                last: list[Any] = []
                for a in actions:
                    if a not in protocol.enabled(state, setup):
                        return None
                    was = Observation(state, setup)
                    stepped = protocol.step(state, a, setup, trace=False)
                    state = stepped.state
                    last = check_step(was, Observation(state, setup, stepped.answers))
                return _form(state, bounds.brokers), last

            alone = run(alpha)
            assert alone is not None
            for beta, _ in taken:
                if beta == alpha:
                    continue
                checked[type(beta).__name__ + ("(b)" if isinstance(beta, Tick) and beta.broker else "")] += 1
                first, second = run(beta, alpha), run(alpha, beta)
                if isinstance(beta, Crash) and beta.broker == alpha.broker:
                    first = run(beta)
                    first = None if first is None else (first[0], [])
                if first is None or second is None or first[0] != second[0]:
                    broken.append(f"{alpha.describe()} and {beta.describe()} at t={state.now}: not commuting")
                    continue
                beta_alone = run(beta)
                assert beta_alone is not None
                if alone[1] or (first[1] and not isinstance(beta, Crash)):
                    broken.append(f"{alpha.describe()} after {beta.describe()} breaks {first[1] or alone[1]}")
                if [v.invariant for v in second[1]] != [v.invariant for v in beta_alone[1]]:
                    broken.append(
                        f"{beta.describe()} breaks {second[1]} after {alpha.describe()}, {beta_alone[1]} before"
                    )
    return checked, broken


@pytest.mark.parametrize(
    "bounds",
    [
        Bounds(brokers=3, lookups=2, admin=1, ticks=2),
        Bounds(crashes=1, restarts=1, admin=1, ticks=3),
    ],
    ids=["three-brokers", "crash-restart"],
)
def test_a_reduced_delivery_commutes_with_every_other_enabled_action_and_hides_no_broken_step(bounds: Bounds) -> None:
    checked, broken = _one_step_deep(bounds, 300)
    assert checked["states"] > 20
    assert broken == []


def test_a_delivery_of_a_broker_whose_timer_ties_with_another_brokers_is_never_taken_alone() -> None:
    """Timers of two brokers due together fire in either order (``Tick(broker)``); a tick may fire
    before the delivery whichever fires first, so a broker with a timer in the window is blocked
    (``tick-own-timer``) whether its timer fires first or second, and so is every broker when
    none of the tied timers can fire yet."""
    bounds = Bounds(brokers=3, lookups=2, admin=0, crashes=1, ticks=2)
    budget = bounds.budget()
    tied_states = 0
    setup = protocol.setup(checker.checker_config(bounds, StoreKind.system_topic, "current"))

    def visit(state: ClusterState, left: dict[str, int]) -> None:
        nonlocal tied_states
        tied = protocol.tied_sources(state)
        if not tied:
            return
        tied_states += 1
        spent = Counter({k: budget[k] - n for k, n in left.items()})
        taken: list[tuple[Action, str | None]] = [(a, budget_kind(a, bounds)) for a in protocol.enabled(state, setup)]
        for candidate in _por_candidates(state, setup, taken, budget, spent, bounds):
            if candidate.action.broker in tied and any(isinstance(a, Tick) for a, _ in taken):
                assert "tick-own-timer" in candidate.reasons, candidate

    check(bounds, symmetry=False, visitor=visit, invariants=[], max_states=5_000, por=False)
    assert tied_states > 0


def test_a_planted_unsound_reduction_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    """Dropping one condition (a delivery that changes what a queued split or assignment of its
    broker reads in the view) must fail the one-step check: the task and the delivery then do not
    commute. (The state comparisons above cannot see it: at those bounds even reducing every
    delivery keeps the states without a pending delivery.)"""
    real = _por_after

    def unsound(*args: Any) -> list[str]:
        return [why for why in real(*args) if why != "task-reads-view"]

    monkeypatch.setitem(globals(), "_por_after", unsound)
    _, broken = _one_step_deep(Bounds(brokers=3, lookups=2, admin=1, ticks=2), 150)
    assert any("run-task" in line and "not commuting" in line for line in broken), broken


@pytest.mark.parametrize(
    ("bounds", "variant"),
    [
        (SMALL, "current"),
        (Bounds(crashes=1, restarts=1, admin=0), "current"),
        (Bounds(crashes=1, restarts=1), "25379"),
        (Bounds(compactions=1), "20110"),
    ],
    ids=["default", "crash-restart", "25379", "20110"],
)
def test_two_workers_reduce_as_one_process(bounds: Bounds, variant: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """With workers, each worker finds the ample candidates and the merge applies the cycle
    proviso: the same states, transitions, reduced states, verdict and counterexample as one
    process (the reasons counted for blocked candidates may differ: a worker tries them all).
    The workers take over at the root's successors (these levels are below the default hand-over)."""
    import statechan.checker.parallel as parallel

    monkeypatch.setattr(parallel, "HANDOVER", 0)
    one = check(bounds, StoreKind.system_topic, variant)
    two = check(bounds, StoreKind.system_topic, variant, workers=2)
    assert one.por
    assert two.por
    assert one.reduced > 0
    assert (two.states, two.transitions, two.reduced) == (one.states, one.transitions, one.reduced)
    assert (two.violation, two.path, two.picks, two.complete) == (one.violation, one.path, one.picks, one.complete)
