"""The progress properties (issue 25): each bounded by the Pulsar settings it names, each breaking
exactly where its bound is passed, and none vacuous where the bench reaches them."""

from __future__ import annotations

from typing import Any

import pytest

from statechan.checker import Bounds, check
from statechan.cluster.config import SimConfig
from statechan.cluster.state import Rec
from statechan.invariants.catalogue import (
    CATALOGUE,
    lookup_within,
    tombstone_bound_ms,
    tombstoned_within,
    unload_not_stranded,
)
from statechan.observation import Observation
from statechan.states import ServiceUnitState as S

B1, B2 = 0, 1
KEY = "tenant/ns/0x00000000_0xffffffff"
CONFIG = SimConfig()
DELAY = CONFIG.channel.tombstone_delay_s * 1000
WAIT = CONFIG.channel.in_flight_wait_ms
BOUND = tombstone_bound_ms(CONFIG.channel)

BASE = Observation.of(
    CONFIG,
    time=0,
    views={},
    serving={},
    started=frozenset({B1, B2}),
    connected=frozenset({B1, B2}),
    registered=frozenset({B1, B2}),
    unregistered_at={},
    leader=(B1, False),
    leader_since=0,
    acting_leaders=frozenset({B1}),
    bundles=frozenset({KEY}),
    quiescent=True,
    syncer_differences=None,
    timers_overdue=False,
    pending_lookups={},
    pending_unloads={},
)


def value(state: S, at: int = 0, dst: int | None = None, src: int | None = B2, force: bool = False) -> Rec:
    return Rec(state, dst, src, 4, force, at)


def seen(time: int, data: Rec | None, **fields: Any) -> Observation:
    return BASE.replace(time=time, views={B1: {} if data is None else {KEY: data}}, **fields)


def test_the_tombstone_bound_is_pulsars_settings() -> None:
    assert BOUND == 3_600_000 + 120_000 + 30_000, "Pulsar's defaults: an hour, two one-minute periods, 30 s"


@pytest.mark.parametrize(
    ("observation", "broken"),
    [
        (seen(BOUND, value(S.Free)), False),
        (seen(BOUND + 1, value(S.Free)), True),
        (seen(BOUND + 1, value(S.Deleted)), True),
        (seen(BOUND + 1, value(S.Owned, dst=B2)), False),
        (seen(BOUND + 1, value(S.Free), timers_overdue=True), False),
        (seen(BOUND + 1, value(S.Free), leader_since=None), False),
        (seen(BOUND + 10, value(S.Free), leader_since=10), False),
        (seen(BOUND + 11, value(S.Free), leader_since=10), True),
    ],
    ids=[
        "at the bound",
        "a Free past it",
        "a Deleted past it",
        "an Owned is not tombstoned",
        "a timer overdue: the bench's timing assumption does not hold",
        "no leader acts",
        "the leader's own time",
        "past the leader's own time",
    ],
)
def test_a_free_or_deleted_record_is_tombstoned_within_its_bound(observation: Observation, broken: bool) -> None:
    found = tombstoned_within(observation)
    assert bool(found) is broken, found
    if broken:
        assert found[0].key == KEY
        assert f"bound {BOUND // 1000} s" in found[0].detail


@pytest.mark.parametrize(
    ("waited", "broken"),
    [(WAIT, False), (WAIT + 1, True), (0, False)],
)
def test_a_deferred_lookup_is_answered_within_the_in_flight_wait(waited: int, broken: bool) -> None:
    observation = seen(1_000_000, None, pending_lookups={B1: {KEY: 1_000_000 - waited}})
    found = lookup_within(observation)
    assert bool(found) is broken, found
    assert not lookup_within(observation.replace(timers_overdue=True))


@pytest.mark.parametrize(
    ("held", "stranded"),
    [
        (None, True),
        (value(S.Free), True),
        (value(S.Free, force=True), False),
        (value(S.Owned, dst=B1, src=B2), True),
        (value(S.Owned, dst=B1, src=None), False),
        (value(S.Releasing, dst=B1, src=B2), False),
    ],
    ids=[
        "nothing",
        "Free",
        "forced Free (waits for its tombstone)",
        "a transfer's Owned",
        "an assignment's Owned",
        "in flight",
    ],
)
def test_an_unload_or_transfer_is_not_left_waiting_once_its_end_was_seen(held: Rec | None, stranded: bool) -> None:
    observation = seen(0, held, pending_unloads={B1: {KEY: (B2, B1)}})
    assert bool(unload_not_stranded(observation)) is stranded


def test_the_progress_properties_are_default_invariants() -> None:
    for name in ("tombstoned-within", "lookup-within", "in-flight-completes", "unload-not-stranded"):
        assert CATALOGUE[name].default


@pytest.mark.parametrize(
    "bounds",
    [
        Bounds(admin_kinds=("unload",), tombstone_delay_s=30, ticks=3),
        Bounds(admin_kinds=("transfer", "unload")),
    ],
    ids=lambda b: b.describe(),
)
def test_the_current_protocol_makes_progress_where_the_checker_reaches_the_bounds(bounds: Bounds) -> None:
    result = check(bounds)
    assert result.complete
    assert result.ok, result.violation or result.liveness or result.never_reached
    taken = {edge for edge, counts in result.coverage.items() if sum(counts.values())}
    assert ("Releasing", "Free") in taken, "the unload whose end the properties judge happened"
