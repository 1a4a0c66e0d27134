"""The resolver over columns (:class:`ColumnResolver`) against the resolver's own fold, record by record."""

from __future__ import annotations

import random

import numpy as np
import pytest

from statechan.invariants.catalogue import owner_registered, owner_registered_quiet
from statechan.invariants.replay import (
    ColumnResolver,
    Held,
    Namespace,
    Registry,
    ReplaySettings,
    Step,
    StepColumns,
    Value,
    version_cases,
)
from statechan.keys import parse_key
from statechan.resolver import Reason, decide, offers, rules_for
from statechan.states import ServiceUnitState, StorageType
from statechan.values import LONG_MAX, LONG_MIN

BROKERS = (None, "", " ", "b1", "b2", "b3")
EDGE_VERSIONS = (LONG_MIN, LONG_MIN + 1, -1, 0, 1, 2, 3, LONG_MAX - 1, LONG_MAX)


def _value(rng: random.Random, version: int) -> Value | None:
    if rng.random() < 0.08:
        return None  # a tombstone
    state = rng.choice(list(ServiceUnitState))
    return Value(state, rng.choice(BROKERS), rng.choice(BROKERS), rng.random() < 0.1, version)


def _histories(rng: random.Random, keys: int, records: int) -> list[tuple[int, Value | None]]:
    """Records of ``keys`` keys, interleaved: versions mostly consecutive per key, with duplicates,
    gaps, wrap-around and edge values."""
    last = [rng.choice((0, 1, LONG_MAX - 2)) for _ in range(keys)]
    out = []
    for _ in range(records):
        k = rng.randrange(keys)
        roll = rng.random()
        if roll < 0.6:
            version = last[k] + 1
        elif roll < 0.75:
            version = last[k]
        elif roll < 0.85:
            version = last[k] + rng.randint(2, 4)
        else:
            version = rng.choice(EDGE_VERSIONS)
        version = (version - LONG_MIN) % 2**64 + LONG_MIN  # a Java long, as Parquet stores it
        last[k] = version
        out.append((k, _value(rng, version)))
    return out


@pytest.mark.parametrize("storage", list(StorageType))
def test_column_verdicts_are_the_folds(storage: StorageType) -> None:
    """Each record's verdict, solved a batch at a time with what each key held carried between
    batches, equals the reason the resolver's fold gives it record by record."""
    rules = rules_for(storage)
    rng = random.Random(39)
    keys = 40
    records = _histories(rng, keys, 4000)
    expected = []
    held: list[Value | None] = [None] * keys
    for k, value in records:
        ((held[k], verdict),) = offers(rules, [value], held[k])
        expected.append(verdict.reason)
    resolver = ColumnResolver(rules, rounds=10_000)
    held_value = np.full(keys, -1, dtype=np.int64)
    held_version = np.zeros(keys, dtype=np.int64)
    got: list[Reason] = []
    for lo in range(0, len(records), 700):
        batch = records[lo : lo + 700]
        key = np.array([k for k, _ in batch], dtype=np.int64)
        number = np.array(
            [
                resolver.number(None if v is None else (v.state, v.dst_broker, v.source_broker, v.force))
                for _, v in batch
            ]
        )
        version = np.array([0 if v is None else v.version_id for _, v in batch], dtype=np.int64)
        reasons = resolver.solve(key, number, version, held_value, held_version)
        assert reasons is not None
        got.extend(resolver.reasons[i] for i in reasons.tolist())
    assert got == expected
    assert {r.accepted for r in got} == {True, False}  # both kinds met
    for k in range(keys):  # what each key holds after the last batch is the fold's
        value = held[k]
        if value is None:
            assert held_value[k] == -1
        else:
            assert resolver.values[held_value[k]][:4] == value[:4]
            assert held_version[k] == value.version_id


def test_version_cases_tell_apart_what_the_resolver_does() -> None:
    """Every (held, offered) pair of edge versions gets the verdict of its case's example pair."""
    for storage in StorageType:
        rules = rules_for(storage)
        examples = ColumnResolver(rules).examples
        pairs = [(h, o) for h in (None, *EDGE_VERSIONS) for o in EDGE_VERSIONS]
        held = np.array([0 if h is None else h for h, _ in pairs], dtype=np.int64)
        offered = np.array([o for _, o in pairs], dtype=np.int64)
        present = np.array([h is not None for h, _ in pairs])
        cases = version_cases(rules, held, offered, present).tolist()
        for state in (ServiceUnitState.Owned, ServiceUnitState.Assigning):
            for (h, o), case in zip(pairs, cases, strict=True):
                eh, eo = examples[case]
                prev = None if h is None else Value(ServiceUnitState.Owned, "b1", None, False, h)
                prev_example = None if eh is None else Value(ServiceUnitState.Owned, "b1", None, False, eh)
                assert (h is None) == (eh is None)
                new = Value(state, "b1", "b1", False, o)
                assert decide(rules, prev, new) == decide(rules, prev_example, new._replace(version_id=eo)), (h, o)


def test_an_unsettled_batch_is_left_to_the_replay() -> None:
    """Past its rounds, the solver gives up rather than guess, and leaves what keys hold alone."""
    rules = rules_for(StorageType.SystemTopic)
    resolver = ColumnResolver(rules, rounds=1)
    assigning = resolver.number((ServiceUnitState.Assigning, "b1", None, False))
    owned = resolver.number((ServiceUnitState.Owned, "b1", None, False))
    key = np.zeros(3, dtype=np.int64)
    number = np.array([assigning, assigning, owned], dtype=np.int64)
    version = np.array([1, 1, 2], dtype=np.int64)  # the second is stale: the third meets the first
    held_value, held_version = np.full(1, -1, dtype=np.int64), np.zeros(1, dtype=np.int64)
    assert resolver.solve(key, number, version, held_value, held_version) is None
    assert held_value.tolist() == [-1]
    resolver.rounds = 3
    settled = resolver.solve(key, number, version, held_value, held_version)
    assert settled is not None
    assert [resolver.reasons[i].value for i in settled.tolist()] == ["accepted", "stale-version", "accepted"]
    assert held_value.tolist() == [owned]
    assert held_version.tolist() == [2]


def _registry(rng: random.Random) -> Registry:
    events = []
    for broker in ("b1", "b2", "b3"):
        registered = rng.random() < 0.5
        for offset in sorted(rng.sample(range(0, 400), 6)):
            events.append((offset, offset * 10, broker, registered))
            registered = not registered
    return Registry(events)


def test_registered_many_is_registered_at() -> None:
    rng = random.Random(7)
    registry = _registry(rng)
    brokers = list(BROKERS)
    broker = np.array([rng.randrange(len(brokers)) for _ in range(2000)], dtype=np.int64)
    offsets = np.array([rng.randrange(-5, 420) for _ in range(2000)], dtype=np.int64)
    many = registry.registered_many(brokers, broker, offsets).tolist()
    assert many == [
        registry.registered_at(brokers[b], o) for b, o in zip(broker.tolist(), offsets.tolist(), strict=True)
    ]
    assert set(many) == {True, False}


def test_owner_registered_shortcut_never_hides_a_violation() -> None:
    """Every record the column shortcut leaves out is one the check itself passes; the others
    include records it fails (so the comparison can fail)."""
    rng = random.Random(11)
    registry = _registry(rng)
    resolver = ColumnResolver(rules_for(StorageType.SystemTopic))
    for _ in range(60):
        state = rng.choice(list(ServiceUnitState))
        resolver.number((state, rng.choice(BROKERS), rng.choice(BROKERS), False))
    count = len(resolver.values)
    value = np.array([rng.randrange(-1, count) for _ in range(3000)], dtype=np.int64)
    held = np.array([rng.randrange(-1, count) for _ in range(3000)], dtype=np.int64)
    offsets = np.array([rng.randrange(0, 420) for _ in range(3000)], dtype=np.int64)
    quiet = owner_registered_quiet(StepColumns(value, held, offsets, resolver.values, registry)).tolist()
    ns = Namespace("t/n", ReplaySettings(), registry, frozenset(), frozenset())
    bundle = parse_key("t/n/0x00000000_0xffffffff")
    fired = []
    for v, h, offset, left_out in zip(value.tolist(), held.tolist(), offsets.tolist(), quiet, strict=True):
        prev = None if h < 0 else Held(resolver.values[h], 0, 0)
        new = None if v < 0 else resolver.values[v]
        shown = owner_registered(Step(bundle.key, bundle, offset, 0, prev, new, Reason.ACCEPTED), ns)
        if left_out:
            assert shown == [], (v, h, offset)
        fired.append(bool(shown))
    assert any(fired)
    assert not all(quiet)
    empty = Registry()
    assert all(owner_registered_quiet(StepColumns(value, held, offsets, resolver.values, empty)).tolist())
