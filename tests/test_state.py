"""The cluster's state is a value: a step never changes the state it was given, the same state and
action always give the same next state, and a state survives pickling (the checker's workers and
saved runs) with its canonical form intact.

Each walk takes random enabled actions (a seeded ``random.Random``, no global state) on a bound
whose configuration allows crashes, restarts, session losses, leader changes and compactions, on
each store; every step is held to all three properties. A record changed in place by a step (a
draft written after it became part of a state, or a cache mistaken for a field) fails the first;
a step that reads anything but its arguments fails the second.
"""

from __future__ import annotations

import pickle
import random

import pytest

from statechan import checker
from statechan.bounds import Bounds
from statechan.checker import Fingerprinter
from statechan.cluster import protocol
from statechan.cluster.config import StoreKind
from statechan.cluster.state import ClusterState

BOUNDS = Bounds(
    brokers=3, bundles=2, lookups=2, crashes=1, restarts=1, session_losses=1, leader_changes=1, compactions=1
)
STEPS = 60
CAP = 10**12
"""Ages are never capped in these forms: two states that differ in any time differ in form."""


def _form(state: ClusterState) -> object:
    return Fingerprinter(BOUNDS.brokers, CAP, False).form(state)


def _bytes(state: ClusterState) -> bytes:
    return pickle.dumps(state, protocol=pickle.HIGHEST_PROTOCOL)


@pytest.mark.parametrize("store", list(StoreKind), ids=lambda s: s.value)
@pytest.mark.parametrize("seed", range(4))
def test_a_step_leaves_its_state_alone_and_is_a_function_of_it(store: StoreKind, seed: int) -> None:
    setup = protocol.setup(checker.checker_config(BOUNDS, store, "current"))
    rng = random.Random(seed)
    state = protocol.init(setup, trace=False).state
    taken = 0
    for _ in range(STEPS):
        actions = protocol.enabled(state, setup)
        if not actions:
            break
        action = rng.choice(actions)
        form, raw = _form(state), _bytes(state)
        first = protocol.step(state, action, setup, trace=False).state
        second = protocol.step(state, action, setup, trace=False).state
        assert _form(state) == form, f"step {taken} ({action}) changed the state it was given"
        assert _bytes(state) == raw, f"step {taken} ({action}) changed a field outside the canonical form"
        assert _bytes(first) == _bytes(second), f"step {taken} ({action}) gave two different states"
        copy = pickle.loads(_bytes(first))
        assert _form(copy) == _form(first), f"after step {taken} ({action}) a pickled state lost part of its form"
        state = first
        taken += 1
    assert taken >= 20, f"the walk stopped after {taken} steps: too short to hold a step to anything"


def test_what_a_view_works_out_follows_its_maps_when_a_step_s_draft_changes_them() -> None:
    """A view's dict, owned keys and signature are worked out once per map: a step's draft changes
    its maps (the protocol's ``view_set``), and what was worked out before the change is not kept."""
    import immutables

    from statechan.cluster.state import Rec, View
    from statechan.states import ServiceUnitState as S

    view = View(0)
    owned = Rec(S.Owned, 0, None, 1, False, 0, None)
    view.items, view.owned = immutables.Map({"a": (0, owned)}), immutables.Map({"a": True})
    assert dict(view.data()) == {"a": owned}
    assert view.owned_keys() == {"a"}
    before = view.signature(0)
    released = Rec(S.Releasing, None, 0, 2, False, 0, None)
    view.items, view.owned = view.items.set("a", (0, released)).set("b", (1, owned)), view.owned.delete("a")
    assert dict(view.data()) == {"a": released, "b": owned}
    assert view.owned_keys() == frozenset()
    assert view.signature(0) != before
    assert len(view.signature(0)) == 2
