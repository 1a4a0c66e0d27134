"""The cluster's state as a value: capturing loses nothing that decides what happens next.

The model checker keeps states as captured values and steps clusters restored from them, so a
value that left out something behaviour depends on (an order, a pending write, a session) would
make it explore runs the protocol cannot take, or miss some. Here every state of seeded random
runs is captured, restored, and stepped by every enabled action beside an exact copy of the
original (a pickle): the two must give the same next value and the same refusals.
"""

from __future__ import annotations

import itertools
import pickle
from collections import deque
from collections.abc import Callable

import pytest

from statechan.checker import Bounds, check, checker_config, fingerprint_cap
from statechan.cluster import Cluster, StoreKind
from statechan.cluster import value as value_module
from statechan.cluster.actions import Action, Crash, Lookup, Restart, Tick
from statechan.cluster.value import Value, capture, rename, restore, rewind
from statechan.observation import Observation


def _states(store: StoreKind, variant: str, bounds: Bounds, every: int) -> list[bytes]:
    """Exact copies of every ``every``-th state a bounded search reaches: splits, transfers, a
    crash and a restart, session losses and the leader's clean-up among them."""
    states: list[bytes] = []
    seen = 0

    def keep(cluster: Cluster, left: dict[str, int]) -> None:
        nonlocal seen
        seen += 1
        if seen % every == 0:
            states.append(pickle.dumps(cluster))

    check(bounds, store, variant, visitor=keep, por=False)  # every state, not the reduced search's
    return states


def _step(cluster: Cluster, action: Action) -> str | None:
    cluster.plan = deque([0])
    try:
        cluster.step(action)
    except ValueError as exc:
        return str(exc)
    return None


ADMIN = Bounds()
"""Transfers and splits: the default bound."""
FAULTS = Bounds(lookups=1, admin=0, crashes=1, restarts=1, ticks=2)
"""A crash, a restart, session losses and the leader's clean-up."""


@pytest.mark.parametrize(
    ("store", "variant", "bounds", "every"),
    [
        (StoreKind.system_topic, "current", ADMIN, 2),
        (StoreKind.metadata_store, "current", ADMIN, 16),
        (StoreKind.system_topic, "current", FAULTS, 40),
        (StoreKind.metadata_store, "current", FAULTS, 60),
        (StoreKind.both, "current", Bounds(admin=0, ticks=1), 4),
        (StoreKind.metadata_store, "24186", Bounds(admin=0, ticks=2), 4),
        (StoreKind.system_topic, "24478", Bounds(lookups=1, admin=0, crashes=1, ticks=1), 10),
        # pending unloads and a broker's registry cache are in the value (session 17)
        (StoreKind.system_topic, "22899", Bounds(lookups=2, admin_kinds=("unload", "transfer"), ticks=1), 10),
    ],
    ids=["topic-admin", "store-admin", "topic-faults", "store-faults", "both", "24186", "24478", "22899-unloads"],
)
def test_a_restored_state_steps_exactly_as_the_original(
    store: StoreKind, variant: str, bounds: Bounds, every: int
) -> None:
    cap = fingerprint_cap(checker_config(Bounds(), store, variant).channel)
    compared = 0
    for blob in _states(store, variant, bounds, every):
        original: Cluster = pickle.loads(blob)
        value = capture(original, cap)
        restored = restore(value, original.clock.now_ms(), original)
        assert capture(restored, cap) == value
        assert restored.enabled_actions() == original.enabled_actions()
        for action in original.enabled_actions():
            exact: Cluster = pickle.loads(blob)
            again = restore(value, original.clock.now_ms(), original)
            assert _step(again, action) == _step(exact, action), action
            assert capture(again, cap) == capture(exact, cap), action
            compared += 1
    assert compared > 200


def test_times_are_ages_capped_past_the_longest_timeout() -> None:
    """A tick that only moves the clock far past every timeout leads back to the same value."""
    cluster = Cluster(checker_config(Bounds(), StoreKind.system_topic, "current"), picks=[])
    cluster.drain()
    cap = fingerprint_cap(cluster.config.channel)
    early = capture(cluster, cap)
    assert capture(cluster, cap) == early  # capturing changes nothing
    cluster.clock.advance(10)
    moved = capture(cluster, cap)
    assert moved != early  # ages moved with the clock
    cluster.clock.advance(cap * 3)
    far = capture(cluster, cap)
    cluster.clock.advance(cap)
    assert capture(cluster, cap) == far
    assert isinstance(hash(far), int)
    assert Tick() in cluster.enabled_actions() or not cluster.live_timers()


def _two_lookups(first: str, second: str) -> Cluster:
    """Two brokers each take a lookup at the same time: their timeouts fall due together."""
    config = checker_config(Bounds(lookups=2, timely_delivery_ms=None), StoreKind.system_topic, "current")
    cluster = Cluster(config, picks=[])
    cluster.drain()
    cluster.step(Tick())  # the leader's first monitor run, due at once
    key = cluster.sorted_bundle_keys()[0]
    cluster.step(Lookup(first, key))
    cluster.step(Lookup(second, key))
    return cluster


def test_timers_of_two_brokers_due_together_fire_in_either_order_and_are_one_state() -> None:
    """Which broker scheduled its timer first is no part of the state (no common executor orders
    them); a tick names the broker whose timer fires, and each order is a different run."""
    one, two = "broker-1:8080", "broker-2:8080"
    forward, backward = _two_lookups(one, two), _two_lookups(two, one)
    cap = fingerprint_cap(forward.config.channel)
    assert [t.broker for t in forward.live_timers()] != [t.broker for t in backward.live_timers()]
    assert capture(forward, cap) == capture(backward, cap)
    ticks = [a for a in forward.enabled_actions() if isinstance(a, Tick)]
    assert ticks == [Tick(one), Tick(two)]
    fired = []
    for tick in ticks:
        copy: Cluster = pickle.loads(pickle.dumps(forward))
        copy.step(tick)
        fired.append(capture(copy, cap))
        waiting = [t.broker for t in copy.live_timers() if t.kind == "lookup-timeout"]
        assert waiting == [one if tick.broker == two else two]
    assert fired[0] != fired[1]
    with pytest.raises(ValueError, match="no timer of"):
        forward.step(Tick("broker-3:8080"))
    # a restored copy keeps neither order, and fires the one a tick names
    restored = restore(capture(forward, cap), forward.clock.now_ms(), forward)
    for tick, expected in zip(ticks, fired, strict=True):
        again = restore(capture(forward, cap), forward.clock.now_ms(), forward)
        again.step(tick)
        assert capture(again, cap) == expected
    assert [a for a in restored.enabled_actions() if isinstance(a, Tick)] == ticks


def test_zookeepers_expiry_of_a_session_races_the_restarted_brokers_own_timers() -> None:
    """A crashed broker's session expiry is ZooKeeper's timer, not the broker's: due together with
    a timer of the broker's next incarnation, either fires first."""
    config = checker_config(
        Bounds(lookups=1, crashes=1, restarts=1, timely_delivery_ms=None), StoreKind.system_topic, "current"
    )
    cluster = Cluster(config, picks=[])
    cluster.drain()
    cluster.step(Tick())  # the leader's first monitor run, due at once
    two = "broker-2:8080"
    cluster.step(Crash(two))
    cluster.step(Restart(two))
    cluster.drain()
    cluster.step(Lookup(two, cluster.sorted_bundle_keys()[0]))  # its 30 s timeout ties with the expiry
    ticks = [a for a in cluster.enabled_actions() if isinstance(a, Tick)]
    assert ticks == [Tick(two), Tick("zk:" + two)]
    cap = fingerprint_cap(cluster.config.channel)
    fired = set()
    for tick in ticks:
        copy: Cluster = pickle.loads(pickle.dumps(cluster))
        copy.step(tick)
        fired.add(capture(copy, cap))
        assert {t.kind for t in copy.live_timers()} >= {"session-expiry" if tick.broker == two else "lookup-timeout"}
    assert len(fired) == 2


def test_a_value_names_brokers_only_as_the_renaming_says() -> None:
    cluster = Cluster(checker_config(Bounds(brokers=2), StoreKind.metadata_store, "current"), picks=[])
    cluster.drain()
    swap = {"broker-1:8080": "broker-2:8080", "broker-2:8080": "broker-1:8080"}
    plain, swapped = repr(capture(cluster, 10**6)), repr(capture(cluster, 10**6, swap))
    assert plain != swapped
    assert plain.count("broker-1:8080") == swapped.count("broker-2:8080")
    assert plain.count("broker-2:8080") == swapped.count("broker-1:8080")


def _seen(cluster: Cluster, before: Observation) -> tuple[object, ...]:
    """What the invariants see of the channel and the views after a step from ``before`` (not
    the step count, the time, or a store's zxids themselves: whether each key's life began anew)."""
    obs = cluster.observe()
    renewed = {key: born != before.born.get(key) for key, born in obs.born.items()}
    return (obs.channel, renewed, obs.deleted, obs.views, obs.serving, obs.registered, obs.leader, obs.quiescent)


def _rewound_steps(store: StoreKind, blobs: list[bytes], rewinder: Callable[..., bool]) -> tuple[int, int]:
    """For every state and every two of its enabled actions ``a`` and ``b``: step ``a`` on a
    restored copy, rewind the copy, step ``b``; and step ``b`` on an exact copy. Returns how many
    rewinds were compared, and in how many the two ``b`` steps differed."""
    cap = fingerprint_cap(checker_config(Bounds(), store, "current").channel)
    compared = differed = 0
    for blob in blobs:
        original: Cluster = pickle.loads(blob)
        value, now = capture(original, cap), original.clock.now_ms()
        actions = original.enabled_actions()
        for first in actions:
            for second in actions:
                copy = restore(value, now, original)
                if _step(copy, first) is not None:
                    continue
                copy.observe()  # as the checker does: what the cluster keeps of it must not outlive a rewind
                if not rewinder(copy, value, now, capture(copy, cap)):
                    continue
                exact: Cluster = pickle.loads(blob)
                compared += 1
                same = capture(copy, cap) == value
                fresh = restore(value, now, original)
                before = fresh.observe()
                same = same and copy.observe().channel == before.channel
                same = same and _step(copy, second) == _step(exact, second) == _step(fresh, second)
                same = same and capture(copy, cap) == capture(exact, cap)
                differed += not (same and _seen(copy, before) == _seen(fresh, before))
    return compared, differed


@pytest.mark.parametrize(
    ("store", "bounds", "every"),
    [
        (StoreKind.system_topic, ADMIN, 20),
        (StoreKind.metadata_store, ADMIN, 200),
        (StoreKind.system_topic, FAULTS, 400),
        (StoreKind.metadata_store, FAULTS, 700),
    ],
    ids=["topic-admin", "store-admin", "topic-faults", "store-faults"],
)
def test_a_rewound_copy_steps_exactly_as_the_original(store: StoreKind, bounds: Bounds, every: int) -> None:
    """The checker rewinds a successor's copy to its parent (rebuilding only what the step
    changed) instead of restoring one: the rewound copy must hold the parent's value and take
    every next step as an exact copy of the parent does."""
    blobs = _states(store, "current", bounds, every)
    assert len(blobs) >= 15
    compared, differed = _rewound_steps(store, blobs, rewind)
    assert compared > 60
    assert differed == 0


@pytest.mark.parametrize(
    ("store", "bounds", "every"),
    [
        (StoreKind.system_topic, ADMIN, 9),
        (StoreKind.metadata_store, FAULTS, 300),
        (StoreKind.system_topic, FAULTS, 150),
    ],
    ids=["topic-admin", "store-faults", "topic-faults"],
)
def test_a_copy_rewound_from_another_state_steps_exactly_as_the_original(
    store: StoreKind, bounds: Bounds, every: int
) -> None:
    """The checker also rewinds a copy an earlier expansion left (another state altogether, of the
    same time and brokers) instead of restoring one: rewound from any sampled state it accepts,
    the copy holds the target's value and takes every step as an exact copy of the target."""
    blobs = _states(store, "current", bounds, every)
    cap = fingerprint_cap(checker_config(bounds, store, "current").channel)
    clusters: list[Cluster] = [pickle.loads(blob) for blob in blobs]
    values = [(capture(c, cap), c.clock.now_ms()) for c in clusters]
    rewound = 0
    for target, (value, now) in enumerate(values):
        original = clusters[target]
        for source in (target - 3, target - 1, target + 2):
            if not 0 <= source < len(values) or source == target:
                continue
            for action in original.enabled_actions():
                copy = restore(*values[source], original)
                copy.observe()
                if not rewind(copy, value, now, values[source][0]):
                    break
                assert capture(copy, cap) == value
                exact: Cluster = pickle.loads(blobs[target])
                assert _step(copy, action) == _step(exact, action), action
                assert capture(copy, cap) == capture(exact, cap), action
                rewound += 1
    assert rewound > 100


def test_a_rewind_that_leaves_a_view_as_the_step_left_it_is_caught() -> None:
    blobs = _states(StoreKind.system_topic, "current", ADMIN, 40)

    def careless(cluster: Cluster, value: Value, now: int, stepped: Value) -> bool:
        fill = value_module._fill_view
        value_module._fill_view = lambda *args: None
        try:
            return rewind(cluster, value, now, stepped)
        finally:
            value_module._fill_view = fill

    compared, differed = _rewound_steps(StoreKind.system_topic, blobs, careless)
    assert compared > 30
    assert differed > 0


@pytest.mark.parametrize(
    ("store", "bounds", "every"),
    [
        (StoreKind.system_topic, ADMIN, 7),
        (StoreKind.metadata_store, FAULTS, 97),
        (StoreKind.both, Bounds(admin=0, ticks=1), 5),
        (StoreKind.system_topic, Bounds(brokers=3, crashes=1, restarts=1, ticks=2, depth=9), 50),
    ],
    ids=["topic-admin", "store-faults", "both", "three-brokers"],
)
def test_renaming_a_value_is_capturing_with_the_renaming(store: StoreKind, bounds: Bounds, every: int) -> None:
    """The checker captures a state once and renames the value for each candidate of its symmetry
    reduction: the renamed value must be exactly the capture with that renaming (ids renamed
    everywhere, every map keyed by broker re-sorted), or symmetric states would not meet."""
    cap = fingerprint_cap(checker_config(Bounds(), store, "current").channel)
    compared = 0
    for blob in _states(store, "current", bounds, every):
        cluster: Cluster = pickle.loads(blob)
        own = capture(cluster, cap)
        ids = list(cluster.brokers)
        for order in itertools.permutations(range(1, len(ids) + 1)):
            names = {old: f"broker-{new}:8080" for old, new in zip(ids, order, strict=True)}
            assert rename(own, names) == capture(cluster, cap, names), names
            compared += 1
    assert compared > 100
    assert rename(own, None) is own
