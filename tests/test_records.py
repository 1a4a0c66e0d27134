"""The record invariants on hand-written channel histories: each fires once per episode, at its
threshold and not before, and not on the flows the protocol allows."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from statechan.invariants.catalogue import CATALOGUE, replay_trace
from statechan.invariants.replay import ReplaySettings

NS = "t/ns"
A = f"{NS}/0x00000000_0x80000000"
B = f"{NS}/0x80000000_0xffffffff"
A1 = f"{NS}/0x00000000_0x40000000"
A2 = f"{NS}/0x40000000_0x80000000"
B0, B1 = "b0:8080", "b1:8080"


def v(state: str, version: int, dst: str | None = None, src: str | None = None, **more: Any) -> dict[str, Any]:
    value = {"state": state, "dstBroker": dst, "sourceBroker": src, "versionId": version}
    value.update(more)
    return value


def trace(*items: tuple[Any, ...]) -> list[dict[str, Any]]:
    """Records from (seconds, key, value) channel items and (seconds, "registry", broker, event) ones."""
    out: list[dict[str, Any]] = []
    for offset, item in enumerate(items):
        ms = int(item[0] * 1000)
        if item[1] == "registry":
            out.append({"kind": "registry", "offset": offset, "time": ms, "broker": item[2], "event": item[3]})
        else:
            out.append({"kind": "channel", "offset": offset, "publish_time": ms, "key": item[1], "value": item[2]})
    return out


def counts(records: list[dict[str, Any]], **settings: Any) -> Counter[str]:
    found, _ = replay_trace(records, ReplaySettings(**settings))
    return Counter(v.invariant for v in found)


OWNED_A = [(0, A, v("Assigning", 1, B0)), (1, A, v("Owned", 2, B0))]


CASES: list[tuple[str, list[dict[str, Any]], dict[str, int]]] = [
    (
        "assign, transfer, unload, tombstone: nothing",
        trace(
            *OWNED_A,
            (2, A, v("Releasing", 3, B1, B0)),
            (3, A, v("Assigning", 4, B1, B0)),
            (4, A, v("Owned", 5, B1, B0)),
            (5, A, v("Releasing", 6, None, B1)),
            (6, A, v("Free", 7, None, B1)),
            (7, A, None),
        ),
        {},
    ),
    (
        "in flight for exactly the timeout: not stuck",
        trace((0, A, v("Assigning", 1, B0)), (90, A, v("Owned", 2, B0))),
        {},
    ),
    (
        "in flight one ms longer: stuck, once",
        trace((0, A, v("Assigning", 1, B0)), (90.001, A, v("Owned", 2, B0))),
        {"stuck-in-flight": 1},
    ),
    (
        "still in flight at the trace's end",
        trace((0, A, v("Assigning", 1, B0)), (100, B, v("Assigning", 1, B0)), (101, B, v("Owned", 2, B0))),
        {"stuck-in-flight": 1},
    ),
    (
        "a refused record does not end the dwell",
        trace((0, A, v("Assigning", 1, B0)), (50, A, v("Assigning", 1, B0)), (95, A, v("Owned", 2, B0))),
        {"stuck-in-flight": 1},
    ),
    (
        "Free past the tombstone timeout, then tombstoned",
        trace((0, A, v("Free", 1, None, B0)), (3661, A, None)),
        {"lingering-semi-terminal": 1},
    ),
    (
        "split: children partition the parent; then deleted and tombstoned",
        trace(
            *OWNED_A,
            (
                2,
                A,
                v(
                    "Splitting",
                    3,
                    None,
                    B0,
                    splitServiceUnitToDestBroker={"0x00000000_0x40000000": None, "0x40000000_0x80000000": None},
                ),
            ),
            (3, A1, v("Owned", 1, B0)),
            (3, A2, v("Owned", 1, B0)),
            (4, A, v("Deleted", 4, None, B0)),
            (5, A, None),
        ),
        {},
    ),
    (
        "split: a child missing when the parent is deleted",
        trace(
            *OWNED_A,
            (2, A, v("Splitting", 3, None, B0)),
            (3, A1, v("Owned", 1, B0)),
            (4, A, v("Deleted", 4, None, B0)),
            (5, A, None),
        ),
        {"split-partitions-parent": 1},
    ),
    (
        "split: a child Owned before the Splitting does not count",
        trace(
            (0, A1, v("Owned", 1, B0)),
            (0, A1, v("Releasing", 2, None, B0)),
            (0, A1, v("Free", 3, None, B0)),
            *OWNED_A,
            (2, A, v("Splitting", 3, None, B0)),
            (3, A2, v("Owned", 1, B0)),
            (4, A, v("Deleted", 4, None, B0)),
            (5, A, None),
            (5, A1, None),
        ),
        {"split-partitions-parent": 1},
    ),
    (
        "resurrection by a version gap after Deleted, counted once",
        trace(
            *OWNED_A,
            (2, A, v("Deleted", 3, None, B0, force=True)),
            (3, A, v("Owned", 5, B0)),
            (4, A, v("Releasing", 6, B1, B0)),
        ),
        {"no-resurrection": 1},
    ),
    (
        "after a tombstone the key may live again",
        trace(
            *OWNED_A,
            (2, A, v("Deleted", 3, None, B0, force=True)),
            (3, A, None),
            (4, A, v("Assigning", 1, B0)),
            (5, A, v("Owned", 2, B0)),
        ),
        {},
    ),
    (
        "an overlapping key becomes active: single-owner, once",
        trace(
            *OWNED_A,
            (2, A1, v("Assigning", 1, B1)),
            (3, A1, v("Owned", 2, B1)),
        ),
        {"single-owner": 1},
    ),
    (
        "the same range twice in two namespaces: no overlap",
        trace(
            *OWNED_A,
            (2, "t/other/0x00000000_0x80000000", v("Assigning", 1, B1)),
            (3, "t/other/0x00000000_0x80000000", v("Owned", 2, B1)),
        ),
        {},
    ),
    (
        "assigned to a broker that is not registered, once per hand-over",
        trace(
            (0, "registry", B0, "registered"),
            (1, A, v("Assigning", 1, B1)),
            (2, A, v("Owned", 2, B1)),
            (3, A, v("Releasing", 3, B0, B1)),
            (4, A, v("Assigning", 4, B0, B1)),
            (5, A, v("Owned", 5, B0, B1)),
        ),
        {"owner-registered": 1},
    ),
    (
        "a broker first seen unregistering was registered before",
        trace(
            (0, A, v("Assigning", 1, B1)),
            (1, A, v("Owned", 2, B1)),
            (2, A, v("Owned", 3, B0, B1, force=True)),
            (3, "registry", B1, "unregistered"),
            (3, "registry", B0, "registered"),
        ),
        {"owner-registered": 1},
    ),
    ("no registry records: registry checks skipped", trace(*OWNED_A), {}),
    (
        "owner unregistered, bundle still there after the clean-up timeout",
        trace(
            (0, "registry", B0, "registered"),
            (0, "registry", B1, "registered"),
            *[(t + 1, k, val) for t, k, val in OWNED_A],
            (10, "registry", B0, "unregistered"),
            (311, A, v("Owned", 3, B1, B0, force=True)),
        ),
        {"orphan-cleaned": 1},
    ),
    (
        "owner unregistered, cleaned within the timeout",
        trace(
            (0, "registry", B0, "registered"),
            (0, "registry", B1, "registered"),
            *[(t + 1, k, val) for t, k, val in OWNED_A],
            (10, "registry", B0, "unregistered"),
            (200, A, v("Owned", 3, B1, B0, force=True)),
            (400, B, v("Assigning", 1, B1)),
            (401, B, v("Owned", 2, B1)),
        ),
        {},
    ),
    (
        "owner unregistered and registered again in the same millisecond",
        trace(
            (0, "registry", B0, "registered"),
            *[(t + 1, k, val) for t, k, val in OWNED_A],
            (10, "registry", B0, "unregistered"),
            (10, "registry", B0, "registered"),
            (400, B, v("Assigning", 1, B0)),
            (401, B, v("Owned", 2, B0)),
        ),
        {},
    ),
    (
        "owner unregistered and came back before the timeout",
        trace(
            (0, "registry", B0, "registered"),
            *[(t + 1, k, val) for t, k, val in OWNED_A],
            (10, "registry", B0, "unregistered"),
            (60, "registry", B0, "registered"),
            (400, B, v("Assigning", 1, B0)),
            (401, B, v("Owned", 2, B0)),
        ),
        {},
    ),
]


@pytest.mark.parametrize(("records", "expected"), [(c[1], c[2]) for c in CASES], ids=[c[0] for c in CASES])
def test_record_invariants_count_each_episode_once(records: list[dict[str, Any]], expected: dict[str, int]) -> None:
    assert dict(counts(records)) == expected


def test_thresholds_are_settings() -> None:
    records = trace((0, A, v("Assigning", 1, B0)), (60, A, v("Owned", 2, B0)))
    assert counts(records) == Counter()
    assert counts(records, in_flight_timeout_ms=30_000) == Counter({"stuck-in-flight": 1})


def test_metadata_store_refuses_the_gap_that_resurrects_on_a_topic() -> None:
    records = trace(*OWNED_A, (2, A, v("Deleted", 3, None, B0, force=True)), (3, A, v("Owned", 5, B0)))
    assert counts(records) == Counter({"no-resurrection": 1})
    assert counts(records, storage="MetadataStore") == Counter()


def test_the_auditor_ids_are_record_forms_in_the_catalogue() -> None:
    ids = {
        "stuck-in-flight",
        "no-resurrection",
        "split-partitions-parent",
        "single-owner",
        "owner-registered",
        "orphan-cleaned",
        "lingering-semi-terminal",
    }
    assert {inv.id for inv in CATALOGUE.values() if inv.has_record_form} == ids
    assert CATALOGUE["single-owner"].cluster_check is not None  # one id, both forms
    assert CATALOGUE["orphan-cleaned"].cluster_check is not None


def test_the_looks_at_shortcut_changes_no_result() -> None:
    """The replay skips a check for states it does not look at; calling every check on every
    event must find the same violations (on a generated trace with every kind planted)."""
    from statechan.invariants.catalogue import record_checks
    from statechan.invariants.replay import RecordChecks, TraceReplay
    from statechan.tracegen import PLANT_KINDS, generate

    trace, _ = generate(20_000, seed=6, plant=dict.fromkeys(PLANT_KINDS, 2))
    records = [r.to_json() for r in trace]
    shortcut = record_checks()
    everything = RecordChecks(
        steps=tuple((check, None) for check, _ in shortcut.steps),
        dwells=tuple((check, None, None) for check, _, _ in shortcut.dwells),
        deadlines=shortcut.deadlines,
    )
    assert any(looks is not None for _, looks in shortcut.steps)

    def run(checks: RecordChecks) -> list[str]:
        from statechan.invariants.catalogue import registry_from_trace
        from statechan.invariants.replay import light
        from statechan.values import ServiceUnitStateData

        replay = TraceReplay(checks, ReplaySettings(), registry_from_trace(records))
        found = []
        for r in records:
            if r["kind"] == "channel":
                value = None if r["value"] is None else light(ServiceUnitStateData.model_validate(r["value"]))
                found.extend(replay.offer(r["key"], r["offset"], r["publish_time"], value))
        found.extend(replay.finish(max(r.get("publish_time", r.get("time", 0)) for r in records)))
        return sorted(str(v) for v in found)

    with_shortcut = run(shortcut)
    assert len(with_shortcut) == 2 * len(PLANT_KINDS)
    assert with_shortcut == run(everything)


def test_the_registry_answers_the_same_in_any_order_of_questions() -> None:
    """``registered_at`` remembers its last answer per broker; asked in offset order (as a replay
    asks), out of order, or at the events' own offsets, it must answer as a fresh lookup does."""
    import bisect
    import random

    from statechan.invariants.replay import Registry

    rng = random.Random(7)
    events = []
    for offset in rng.sample(range(1, 2_000), 120):
        events.append((offset, offset * 10, f"b{rng.randrange(4)}", rng.random() < 0.5))
    by_broker: dict[str, list[tuple[int, bool]]] = {}
    for offset, _, broker, registered in sorted(events):
        by_broker.setdefault(broker, []).append((offset, registered))

    def fresh(broker: str, offset: int) -> bool:
        history = by_broker.get(broker)
        if not history:
            return False
        i = bisect.bisect_left([o for o, _ in history], offset)
        return history[i - 1][1] if i > 0 else not history[0][1]

    registry = Registry(events)
    questions = [(f"b{rng.randrange(5)}", o) for o in range(0, 2_100)]
    questions += [(b, o) for b, o in rng.sample(questions, 500)] + [(b, o) for o, _, b, _ in events]
    answers = [registry.registered_at(b, o) for b, o in questions]
    assert answers == [fresh(b, o) for b, o in questions]
    assert any(answers)
    assert not all(answers)
