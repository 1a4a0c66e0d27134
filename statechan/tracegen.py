"""A fast trace generator for scale: the simulator's lifecycles, without the simulator's cost.

It writes what a channel reader of a busy cluster would see: bundles assigned, transferred
(PIP-307: Releasing, Assigning, Owned), unloaded (Releasing, Free), split (Splitting, the
children Owned, the parent Deleted, then tombstoned) and Free/Deleted keys tombstoned; brokers
that crash (unregistered), whose bundles the leader overrides (``force``) onto live brokers, and
come back; now and then a stale duplicate the resolver refuses. Namespaces are served in turn,
so each lifecycle's records are interleaved with every other namespace's, and every step of a
lifecycle lands within one round of turns (well under the auditor's thresholds).

Built for 100M records on a few cores: each namespace draws from a random stream of its own and
publishes a quota of records (then finishes what it began); its turn falls at a time fixed by
its round and place, and the brokers' crashes come from one more stream that every process
replays. So a namespace's records depend on nothing another namespace does, worker processes
can each play a share of them, and the writer only interleaves their blocks by round and
numbers the offsets: the trace is the same whatever the number of workers.

``plant`` adds known numbers of each record-invariant violation, each in a namespace of its own
(``plant/<kind>-<n>``) owned by a broker that never crashes, so an audit must count exactly
that many. Everything comes from ``seed``: the same arguments give the same trace.
"""

from __future__ import annotations

import functools
import random
import sys
from collections import deque
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from pathlib import Path
from typing import Any, NamedTuple

from statechan.keys import Bundle, namespace_bundles
from statechan.states import ServiceUnitState
from statechan.traces import arrow_schema, collector_paused, value_columns
from statechan.values import VERSION_ID_INIT, ServiceUnitStateData

_JSON_NAMES = tuple(f.alias or name for name, f in ServiceUnitStateData.model_fields.items())
"""A value's JSON field names in declaration order: state, dstBroker, sourceBroker,
splitServiceUnitToDestBroker, force, timestamp, versionId."""

S = ServiceUnitState

PLANT_KINDS = (
    "stuck-in-flight",
    "no-resurrection",
    "split-partitions-parent",
    "single-owner",
    "owner-registered",
    "orphan-cleaned",
    "lingering-semi-terminal",
)
"""The record invariants :func:`generate` can plant violations of."""

START_TIME_MS = 1_767_225_600_000
"""2026-01-01T00:00:00Z: where generated traces start."""


class GenValue(NamedTuple):
    """A channel value (its JSON fields), as the generator writes it."""

    state: ServiceUnitState
    dst_broker: str | None
    source_broker: str | None
    version_id: int
    timestamp: int
    force: bool = False
    split: tuple[str, ...] | None = None
    """The split map's child ranges (their destinations are null)."""

    def to_json(self) -> dict[str, Any]:
        """Pulsar's JSON, named by :class:`ServiceUnitStateData`'s own aliases (no validation: fast)."""
        split = None if self.split is None else dict.fromkeys(self.split)
        values = (
            self.state.value,
            self.dst_broker,
            self.source_broker,
            split,
            self.force,
            self.timestamp,
            self.version_id,
        )
        return dict(zip(_JSON_NAMES, values, strict=True))


class GenRecord(NamedTuple):
    """One trace record: ``kind`` channel (key, value), registry (broker, event) or leader (broker)."""

    kind: str
    offset: int
    time: int
    key: str | None = None
    value: GenValue | None = None
    broker: str | None = None
    event: str | None = None

    def flat_row(self) -> dict[str, Any]:
        """The record as a row of the flat Parquet schema (only the columns it fills)."""
        row: dict[str, Any] = {"kind": self.kind, "offset": self.offset, "time": self.time}
        if self.kind != "channel":
            row.update(broker=self.broker, event=self.event)
            return row
        value = self.value
        row.update(key=self.key, has_value=value is not None)
        if value is not None:
            split = None if value.split is None else [(child, None) for child in value.split]
            row.update(
                value_columns(
                    value.state,
                    value.dst_broker,
                    value.source_broker,
                    value.force,
                    value.timestamp,
                    value.version_id,
                    split,
                )
            )
        return row

    def to_json(self) -> dict[str, Any]:
        if self.kind == "channel":
            value = None if self.value is None else self.value.to_json()
            return {
                "kind": "channel",
                "offset": self.offset,
                "publish_time": self.time,
                "key": self.key,
                "value": value,
            }
        if self.kind == "registry":
            return {
                "kind": "registry",
                "offset": self.offset,
                "time": self.time,
                "broker": self.broker,
                "event": self.event,
            }
        return {"kind": "leader", "offset": self.offset, "time": self.time, "broker": self.broker}


@dataclass
class GenStats:
    """What a generated trace holds, for tests to compare an audit against."""

    records: int = 0
    channel_records: int = 0
    namespaces: int = 0
    keys: set[str] = field(default_factory=set)
    crashes: int = 0
    forced: int = 0
    version_gaps: int = 0
    stale: int = 0
    planted: dict[str, int] = field(default_factory=dict)
    end_time: int = 0

    @property
    def bundles(self) -> int:
        return len(self.keys)

    def merge(self, other: GenStats) -> None:
        """Add what another part of the same trace (other namespaces) holds."""
        self.records += other.records
        self.channel_records += other.channel_records
        self.keys |= other.keys
        self.crashes += other.crashes
        self.forced += other.forced
        self.version_gaps += other.version_gaps
        self.stale += other.stale
        self.end_time = max(self.end_time, other.end_time)


Published = tuple[int, str, "GenValue | None"]
"""A channel record as a namespace publishes it: (time, key, value); offsets come later."""


_new_value: Callable[[tuple[Any, ...]], GenValue] = functools.partial(tuple.__new__, GenValue)
"""A GenValue from all its fields, without the named tuple's Python-level ``__new__`` (the
generator makes one a record)."""


@dataclass
class _Pending:
    """The rest of a lifecycle: the steps to publish, one per turn of the namespace."""

    key: str
    steps: deque[tuple[str, str | None]]
    """(what, broker): ``assigning``, ``owned``, ``free``, ``split-done``, ``tombstone``."""


@dataclass
class _Namespace:
    name: str
    bundles: dict[str, Bundle]
    """The namespace's current bundles, by key."""
    rng: random.Random = field(default_factory=random.Random)
    quota: int = 0
    """Records to publish before winding down (finishing what is begun, tombstoning)."""
    published: int = 0
    closed: bool = False
    values: dict[str, GenValue] = field(default_factory=dict)
    pending: dict[str, _Pending] = field(default_factory=dict)
    """At most one lifecycle under way (a turn starts one only when none is)."""
    semi: dict[str, int] = field(default_factory=dict)
    """Free or Deleted keys, with when they may be tombstoned or reassigned."""
    owned: dict[str, None] = field(default_factory=dict)
    """The keys whose value is Owned, kept as they change (not searched for every turn)."""
    idle: dict[str, None] = field(default_factory=dict)
    """The bundles without a value, kept likewise."""

    def __post_init__(self) -> None:
        self.idle = dict.fromkeys(self.bundles)


def _pick(rng: random.Random, items: Sequence[str]) -> str:
    """``rng.choice`` for the generator's hot path: one draw, without its rejection sampling."""
    return items[int(rng.random() * len(items))]


class _Brokers:
    """The cluster's brokers: which are alive in each round. Crashes come from a random stream of
    their own, so every process that generates namespaces of one trace sees the same crashes."""

    def __init__(self, names: list[str], seed: int, round_ms: int) -> None:
        self.names = names
        self.alive = list(names)
        self.dead: dict[str, int] = {}
        """Crashed brokers, with the round at whose end they come back."""
        self.rng = random.Random(f"statechan-tracegen/{seed}/brokers")
        self.down_rounds = -(-max(120_000, 3 * round_ms) // round_ms)

    def end_round(self, r: int) -> list[tuple[str, str]]:
        """The registry events at the end of round ``r``: brokers back, then maybe a crash."""
        events = []
        for broker, back in sorted(self.dead.items()):
            if back <= r:
                del self.dead[broker]
                self.alive.append(broker)
                events.append((broker, "registered"))
        if len(self.alive) > 2 and self.rng.random() < 0.002:
            broker = self.rng.choice([b for b in self.alive if b != self.names[0]])
            self.alive.remove(broker)
            self.dead[broker] = r + self.down_rounds
            events.append((broker, "unregistered"))
        return events


class _Plan:
    """What every part of one trace agrees on: the namespaces and their quotas, the brokers, the
    plants, and where each namespace's turn falls in time (round ``r``, slot ``i``)."""

    def __init__(
        self,
        records: int,
        seed: int = 0,
        namespaces: int | None = None,
        brokers: int = 8,
        bundles_per_namespace: int = 4,
        max_bundles: int = 16,
        plant: Mapping[str, int] | None = None,
        turn_ms: int = 10,
    ) -> None:
        if records < 1:
            raise ValueError(f"records must be at least 1, not {records}")
        if brokers < 2:
            raise ValueError(f"a generated cluster needs at least 2 brokers, not {brokers}")
        unknown = sorted(set(plant or {}) - set(PLANT_KINDS))
        if unknown:
            raise ValueError(f"cannot plant {', '.join(unknown)}; plantable: {', '.join(PLANT_KINDS)}")
        if any(count < 0 for count in (plant or {}).values()):
            raise ValueError("plant counts must not be negative")
        self.seed = seed
        self.count = namespaces if namespaces is not None else max(1, min(1000, records // 500))
        self.bundles_per_namespace = bundles_per_namespace
        self.max_bundles = max_bundles
        self.brokers = [f"broker-{i}:8080" for i in range(brokers)]
        self.plant = {kind: (plant or {}).get(kind, 0) for kind in PLANT_KINDS}
        self.turn_ms = turn_ms
        self.plant_slots = sum(self.plant.values())
        self.slots = self.count + self.plant_slots + 1  # the namespaces, the plants, the registry
        self.round_ms = self.slots * turn_ms
        reserve = len(self.brokers) + 1 + _Plants.records_for(self.plant)
        budget = max(self.count, records - reserve)
        self.quotas = [budget // self.count + (i < budget % self.count) for i in range(self.count)]

    def base(self, r: int, slot: int) -> int:
        """The time just before slot ``slot`` of round ``r`` (round -1: the opening records)."""
        return START_TIME_MS + ((r + 1) * self.slots + slot) * self.turn_ms

    def namespace(self, i: int) -> _Namespace:
        name = f"tenant-{i % 50}/ns-{i}"
        bundles = {b.key: b for b in namespace_bundles(name, self.bundles_per_namespace)}
        return _Namespace(name, bundles, random.Random(f"statechan-tracegen/{self.seed}/{i}"), self.quotas[i])

    def opening(self, plants: _Plants) -> list[GenRecord]:
        """Every broker registered, the first one leader, the plants' own brokers registered."""
        time = START_TIME_MS
        events = [(b, "registered") for b in self.brokers]
        opening = [GenRecord("registry", -1, time + i + 1, broker=b, event=e) for i, (b, e) in enumerate(events)]
        opening.append(GenRecord("leader", -1, time + len(events) + 1, broker=self.brokers[0]))
        t = time + len(opening)
        opening += [GenRecord("registry", -1, t + i + 1, broker=b, event=e) for i, (b, e) in enumerate(plants.extra)]
        return opening


class _Runner:
    """Some of a trace's namespaces (``first`` to ``last``), turn by turn: what each publishes, in
    slot order, as (time, key, value). A namespace's records depend only on the seed, its index
    and the brokers' crashes, never on which runner plays it or what the others do."""

    def __init__(self, plan: _Plan, first: int, last: int) -> None:
        self.plan = plan
        self.first = first
        self.namespaces = [plan.namespace(i) for i in range(first, last)]
        self.open = len(self.namespaces)
        self.brokers = _Brokers(plan.brokers, plan.seed, plan.round_ms)
        self.stats = GenStats()
        self.out: list[Published] = []
        self.time = 0

    # -- records -----------------------------------------------------------------------------------
    def publish(self, ns: _Namespace, key: str, value: GenValue | None) -> None:
        if value is None:
            ns.values.pop(key, None)
            ns.owned.pop(key, None)
            if key in ns.bundles:
                ns.idle[key] = None
        else:
            ns.values[key] = value  # an idle key takes a value only in _assign, which says so
            if value.state is S.Owned:
                ns.owned[key] = None
            else:
                ns.owned.pop(key, None)
            self.stats.forced += value.force
        ns.published += 1
        self.time += 1
        self.out.append((self.time, key, value))

    def value(
        self,
        ns: _Namespace,
        key: str,
        state: ServiceUnitState,
        dst: str | None,
        src: str | None,
        force: bool = False,
        split: tuple[str, ...] | None = None,
    ) -> GenValue:
        prev = ns.values.get(key)
        version = VERSION_ID_INIT if prev is None else prev.version_id + 1
        return _new_value((state, dst, src, version, self.time + 1, force, split))

    # -- lifecycles --------------------------------------------------------------------------------
    def _live_broker(self, ns: _Namespace, besides: str | None = None) -> str:
        alive = self.brokers.alive
        choices = [b for b in alive if b != besides] or alive
        return _pick(ns.rng, choices)

    def _cleanup(self, ns: _Namespace) -> None:
        """The leader's override of every bundle a crashed broker holds (force, onto a live broker)."""
        dead = self.brokers.dead
        for key, value in sorted(ns.values.items()):
            state = value.state
            if state is S.Free or state is S.Deleted:
                continue
            if value.dst_broker not in dead and (state is S.Owned or value.source_broker not in dead):
                continue
            ns.pending.pop(key, None)
            old = value.dst_broker or value.source_broker
            self.publish(ns, key, self.value(ns, key, S.Owned, self._live_broker(ns, old), old, force=True))

    def _step(self, ns: _Namespace, pending: _Pending) -> None:
        what, broker = pending.steps.popleft()
        key = pending.key
        value = ns.values.get(key)
        if what == "tombstone":
            ns.semi.pop(key, None)
            self.publish(ns, key, None)
        elif what == "assigning":
            assert value is not None
            self.publish(ns, key, self.value(ns, key, S.Assigning, broker, value.source_broker))
        elif what == "owned":
            assert value is not None
            self.publish(ns, key, self.value(ns, key, S.Owned, value.dst_broker, value.source_broker))
        elif what == "free":
            assert value is not None
            self.publish(ns, key, self.value(ns, key, S.Free, None, value.source_broker))
            ns.semi[key] = self.time + ns.rng.randint(5_000, 600_000)
        elif what == "split-done":
            assert value is not None
            assert value.split is not None
            owner = value.source_broker
            parent = ns.bundles.pop(key)
            for child in (parent.child(r) for r in value.split):
                ns.bundles[child.key] = child
                self.publish(ns, child.key, GenValue(S.Owned, owner, None, VERSION_ID_INIT, self.time + 1))
            self.publish(ns, key, self.value(ns, key, S.Deleted, None, owner))
            ns.semi[key] = self.time + ns.rng.randint(5_000, 600_000)
        if not pending.steps:
            ns.pending.pop(key, None)

    def _start(self, ns: _Namespace) -> None:
        """Maybe begin one lifecycle on one bundle of the namespace."""
        rng = ns.rng
        now = self.time
        if ns.semi and min(ns.semi.values()) <= now:  # nothing is pending here
            key = min(key for key, when in ns.semi.items() if when <= now)
            if ns.values[key].state is S.Free and rng.random() < 0.5:
                del ns.semi[key]
                self._assign(ns, key)
            else:
                ns.pending[key] = _Pending(key, deque([("tombstone", None)]))
                self._step(ns, ns.pending[key])
            return
        if ns.idle and rng.random() < 0.5:
            self._assign(ns, _pick(rng, list(ns.idle)))
            return
        roll = rng.random()
        if roll >= 0.54 or not ns.owned:  # a quiet turn: drawn first, so no bundle is picked for it
            return
        key = _pick(rng, list(ns.owned))
        value = ns.values[key]
        owner = value.dst_broker
        if roll < 0.30:  # transfer (PIP-307)
            target = self._live_broker(ns, owner)
            self.publish(ns, key, self.value(ns, key, S.Releasing, target, owner))
            ns.pending[key] = _Pending(key, deque([("assigning", target), ("owned", None)]))
        elif roll < 0.45:  # unload
            self.publish(ns, key, self.value(ns, key, S.Releasing, None, owner))
            ns.pending[key] = _Pending(key, deque([("free", None)]))
        elif roll < 0.52 and len(ns.bundles) < self.plan.max_bundles:  # split
            bundle = ns.bundles[key]
            if bundle.upper - bundle.lower >= 2:
                children = tuple(child.range_name for child in bundle.split())
                self.publish(ns, key, self.value(ns, key, S.Splitting, None, owner, split=children))
                ns.pending[key] = _Pending(key, deque([("split-done", None)]))
        else:  # a stale duplicate (a retried publish): the resolver refuses it
            self.stats.stale += 1
            ns.published += 1
            self.time += 1
            self.out.append((self.time, key, value))

    def _assign(self, ns: _Namespace, key: str) -> None:
        ns.idle.pop(key, None)
        self.publish(ns, key, self.value(ns, key, S.Assigning, self._live_broker(ns), None))
        ns.pending[key] = _Pending(key, deque([("owned", None)]))

    def _wind_down(self, ns: _Namespace) -> None:
        """Past its quota a namespace only finishes what it began and tombstones what is Free or
        Deleted, a step a turn; then it is closed."""
        if ns.pending:
            self._step(ns, next(iter(ns.pending.values())))
        elif ns.semi:
            key = min(ns.semi)
            del ns.semi[key]
            self.publish(ns, key, None)
        if not ns.pending and not ns.semi:
            ns.closed = True
            self.open -= 1

    def round(self, r: int) -> None:
        """Every open namespace's turn in round ``r``, then the brokers' registry events (which
        the caller writes: one runner of a trace's several)."""
        turn_ms = self.plan.turn_ms
        dead = self.brokers.dead
        time = self.plan.base(r, self.first) - turn_ms
        for ns in self.namespaces:
            time += turn_ms
            if ns.closed:
                continue
            self.time = time
            if dead:
                self._cleanup(ns)
            if ns.published >= ns.quota:
                self._wind_down(ns)
            elif ns.pending:
                self._step(ns, next(iter(ns.pending.values())))
            else:
                self._start(ns)
        self.brokers.end_round(r)

    def take(self) -> list[Published]:
        """What was published since the last take; counted in ``stats``."""
        out, self.out = self.out, []
        if out:
            self.stats.records += len(out)
            self.stats.channel_records += len(out)
            self.stats.keys.update(map(itemgetter(1), out))
            self.stats.end_time = max(self.stats.end_time, out[-1][0])
        return out


class _Plants:
    """Scripted violations: per planted instance, a namespace with a slot of its own after the
    generated ones, and a list of (wait ms, action)."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.owner = plan.brokers[0]
        self.runner = _Runner(plan, 0, 0)
        self.scripts: list[tuple[_Namespace, deque[tuple[int, Any]]]] = []
        self.due: list[int] = []
        self.extra: list[tuple[str, str]] = []
        """Brokers registered at the start: the plants' own."""
        for kind, count in plan.plant.items():
            for n in range(count):
                name = f"plant/{kind}-{n}"
                ns = _Namespace(name, {b.key: b for b in namespace_bundles(name, 2)})
                self.scripts.append((ns, deque(_script(kind, n, ns, self.owner, self.extra))))
                self.due.append(0)
        self.out: list[GenRecord] = []
        self.stats = GenStats(planted=dict(plan.plant))

    @staticmethod
    def records_for(plant: Mapping[str, int]) -> int:
        """How many records the plants of ``plant`` write, their opening registrations included."""
        owner = "broker-0:8080"
        total = 0
        for kind, count in plant.items():
            if count:
                ns = _Namespace(f"plant/{kind}-0", {b.key: b for b in namespace_bundles(f"plant/{kind}-0", 2)})
                extra: list[tuple[str, str]] = []
                total += count * (sum(1 for _, a in _script(kind, 0, ns, owner, extra) if a[0] != "wait") + len(extra))
        return total

    def _act(self, ns: _Namespace, action: tuple[Any, ...]) -> None:
        runner = self.runner
        what = action[0]
        if what == "set":
            _, key, state, dst, src, force, skip = action
            value = runner.value(ns, key, state, dst, src, force)
            if skip:
                value = value._replace(version_id=value.version_id + skip)
                self.stats.version_gaps += 1
            runner.publish(ns, key, value)
        elif what == "split":
            _, key, children = action
            runner.publish(ns, key, runner.value(ns, key, S.Splitting, None, self.owner, split=children))
        elif what == "child":
            runner.publish(ns, action[1], GenValue(S.Owned, self.owner, None, VERSION_ID_INIT, runner.time + 1))
        elif what == "tombstone":
            runner.publish(ns, action[1], None)
        elif what == "registry":
            runner.time += 1
            self.out.append(GenRecord("registry", -1, runner.time, broker=action[1], event=action[2]))
        self.out.extend(GenRecord("channel", -1, time, key, published) for time, key, published in runner.take())

    def _play(self, i: int, now: int) -> None:
        ns, script = self.scripts[i]
        if not script:
            return
        wait, action = script[0]
        if self.due[i] == 0:
            self.due[i] = now + wait
        if now >= self.due[i]:
            script.popleft()
            self.due[i] = 0
            self.runner.time = now
            self._act(ns, action)

    def round(self, r: int) -> list[GenRecord]:
        """Every script whose next action is due by its slot of round ``r`` plays it (one each)."""
        first = self.plan.count
        for i in range(len(self.scripts)):
            self._play(i, self.plan.base(r, first + i))
        return self.take()

    def finish(self, now: int) -> list[GenRecord]:
        """Play the rest of every script from ``now``, the clock jumping to each next action."""
        while any(script for _, script in self.scripts):
            pending = [self.due[i] or now + s[0][0] for i, (_, s) in enumerate(self.scripts) if s]
            now = max(now, min(pending))
            for i in range(len(self.scripts)):
                self._play(i, now)
                now = max(now, self.runner.time)
        return self.take()

    def take(self) -> list[GenRecord]:
        out, self.out = self.out, []
        return out


def _script(kind: str, n: int, ns: _Namespace, own: str, extra: list[tuple[str, str]]) -> list[tuple[int, Any]]:
    """The actions that plant one violation of ``kind`` in ``ns`` (``extra``: brokers to register first)."""
    first, second = ns.bundles.values()
    a, b = first.key, second.key
    gap = 1_000
    owned = [(gap, ("set", a, S.Assigning, own, None, False, 0)), (gap, ("set", a, S.Owned, own, None, False, 0))]
    if kind == "stuck-in-flight":
        return [
            (gap, ("set", a, S.Assigning, own, None, False, 0)),
            (100_000, ("set", a, S.Owned, own, None, False, 0)),
        ]
    if kind == "no-resurrection":  # forced Deleted, then an Owned two versions on (a gap)
        return [
            *owned,
            (gap, ("set", a, S.Deleted, None, own, True, 0)),
            (gap, ("set", a, S.Owned, own, None, False, 1)),
        ]
    if kind == "split-partitions-parent":  # only one child becomes Owned before the parent is Deleted
        left, right = first.split()
        return [
            *owned,
            (gap, ("split", a, (left.range_name, right.range_name))),
            (gap, ("child", left.key)),
            (gap, ("set", a, S.Deleted, None, own, False, 0)),
            (gap, ("tombstone", a)),
        ]
    if kind == "single-owner":  # a key inside an Owned one becomes Owned too
        inner = Bundle(first.namespace, first.lower, (first.lower + first.upper) // 2)
        return [
            *owned,
            (gap, ("set", inner.key, S.Assigning, own, None, False, 0)),
            (gap, ("set", inner.key, S.Owned, own, None, False, 0)),
        ]
    if kind == "owner-registered":  # assigned to a broker the registry never saw
        ghost = f"ghost-{n}:8080"
        return [
            (gap, ("set", b, S.Assigning, ghost, None, False, 0)),
            (gap, ("set", b, S.Owned, ghost, None, False, 0)),
        ]
    if kind == "orphan-cleaned":  # its owner unregisters; the override comes after the clean-up timeout
        orphan = f"plant-orphan-{n}:8080"
        extra.append((orphan, "registered"))
        return [
            (gap, ("set", a, S.Assigning, orphan, None, False, 0)),
            (gap, ("set", a, S.Owned, orphan, None, False, 0)),
            (gap, ("registry", orphan, "unregistered")),
            (310_000, ("set", a, S.Owned, own, orphan, True, 0)),
        ]
    assert kind == "lingering-semi-terminal"
    return [
        *owned,
        (gap, ("set", a, S.Releasing, None, own, False, 0)),
        (gap, ("set", a, S.Free, None, own, False, 0)),
        (3_700_000, ("tombstone", a)),
    ]


# -- the whole trace -------------------------------------------------------------------------------
class _Conductor:
    """The records no namespace runner writes, in their places: the opening, each round's plants
    and registry events, and the close (crashed brokers back, the plants' rest)."""

    def __init__(self, plan: _Plan) -> None:
        self.plan = plan
        self.plants = _Plants(plan)
        self.brokers = _Brokers(plan.brokers, plan.seed, plan.round_ms)
        self.stats = GenStats(namespaces=plan.count)
        self.time = START_TIME_MS

    def opening(self) -> list[GenRecord]:
        return self._count(self.plan.opening(self.plants))

    def round(self, r: int) -> list[GenRecord]:
        out = self.plants.round(r)
        time = self.plan.base(r, self.plan.slots - 1)
        for broker, event in self.brokers.end_round(r):
            time += 1
            self.stats.crashes += event == "unregistered"
            out.append(GenRecord("registry", -1, time, broker=broker, event=event))
        return self._count(out)

    def close(self, rounds: int, end_time: int) -> list[GenRecord]:
        """After the last round (``rounds`` played; the namespaces' last record at ``end_time``)."""
        time = max(end_time, self.plan.base(rounds, 0))
        out = []
        for broker in sorted(self.brokers.dead):
            time += 1
            out.append(GenRecord("registry", -1, time, broker=broker, event="registered"))
        out += self.plants.finish(time)
        return self._count(out)

    def _count(self, records: list[GenRecord]) -> list[GenRecord]:
        for record in records:
            self.stats.records += 1
            if record.kind == "channel":
                assert record.key is not None
                self.stats.channel_records += 1
                self.stats.keys.add(record.key)
            self.stats.end_time = max(self.stats.end_time, record.time)
        return records

    def totals(self, namespaces: GenStats) -> GenStats:
        stats = GenStats(namespaces=self.plan.count, planted=dict(self.plants.stats.planted))
        stats.merge(self.stats)
        stats.merge(namespaces)
        stats.forced += self.plants.runner.stats.forced  # the plants' records are counted by _count
        stats.version_gaps += self.plants.stats.version_gaps
        return stats


class Generator:
    """Yields :class:`GenRecord` s in offset order, in one process; ``stats`` is filled in when the
    last record has been read. The same records as :func:`write_generated` with any ``workers``."""

    def __init__(self, records: int, seed: int = 0, **options: Any) -> None:
        self.plan = _Plan(records, seed, **options)
        self.stats = GenStats(namespaces=self.plan.count)

    def __iter__(self) -> Iterator[GenRecord]:
        plan = self.plan
        conductor = _Conductor(plan)
        runner = _Runner(plan, 0, plan.count)
        offset = 0
        for record in conductor.opening():
            yield record._replace(offset=offset)
            offset += 1
        r = 0
        while runner.open:
            runner.round(r)
            for time, key, value in runner.take():
                yield GenRecord("channel", offset, time, key, value)
                offset += 1
            for record in conductor.round(r):
                yield record._replace(offset=offset)
                offset += 1
            r += 1
        for record in conductor.close(r, runner.stats.end_time):
            yield record._replace(offset=offset)
            offset += 1
        stats = conductor.totals(runner.stats)
        for name in ("records", "channel_records", "keys", "crashes", "forced", "version_gaps", "stale", "planted"):
            setattr(self.stats, name, getattr(stats, name))
        self.stats.end_time = stats.end_time


def generate(records: int, seed: int = 0, **options: Any) -> tuple[Iterator[GenRecord], GenStats]:
    """A generated trace (about ``records`` records) and the statistics it fills in as it is read."""
    gen = Generator(records, seed, **options)
    return iter(gen), gen.stats


# -- writing ---------------------------------------------------------------------------------------
BLOCK_ROUNDS = 128
"""Rounds a runner plays between hand-overs to the writer (about 64 records a namespace)."""

_STATE_NAMES: dict[ServiceUnitState | None, str | None] = {state: state.value for state in ServiceUnitState}
_STATE_NAMES[None] = None
_NO_VALUE = (None,) * len(GenValue._fields)


def _channel_table(published: list[Published], rounds: Any) -> Any:
    """Published channel records as a table of the flat schema plus their ``round``: built a
    column at a time (a record is a tuple, never a dict)."""
    import pyarrow as pa
    import pyarrow.compute as pc

    schema = arrow_schema()
    n = len(published)
    times, keys, values = zip(*published, strict=True) if n else ((), (), ())
    state, dst, src, version, timestamp, force, split = (
        zip(*[v or _NO_VALUE for v in values], strict=True) if n else ((),) * 7
    )
    version_ids = pa.array(version, pa.int64())  # null exactly for a tombstone
    children = [None if s is None else [{"range": c, "broker": None} for c in s] for s in split]
    columns = {
        "kind": pa.repeat("channel", n),
        "time": pa.array(times, pa.int64()),
        "key": pa.array(keys, pa.string()),
        "has_value": pc.is_valid(version_ids),
        "state": pa.array(list(map(_STATE_NAMES.__getitem__, state)), pa.string()),
        "dst_broker": pa.array(dst, pa.string()),
        "source_broker": pa.array(src, pa.string()),
        "force": pa.array(force, pa.bool_()),
        "timestamp": pa.array(timestamp, pa.int64()),
        "version_id": version_ids,
        "split_children": pa.array(children, schema.field("split_children").type),
    }
    arrays = [columns.get(f.name) or pa.nulls(n, f.type) for f in schema]
    return pa.Table.from_arrays(
        [*arrays, pa.array(rounds, pa.int64())], schema=schema.append(pa.field("round", pa.int64()))
    )


def _record_table(records: list[tuple[int, GenRecord]]) -> Any:
    """A few (round, record) pairs as a table of the flat schema plus their ``round``."""
    import pyarrow as pa

    schema = arrow_schema()
    rows = [record.flat_row() for _, record in records]
    table = pa.Table.from_pylist(rows, schema=schema)
    return table.append_column("round", pa.array([r for r, _ in records], pa.int64()))


def _blocks(plan: _Plan, first: int, last: int) -> Iterator[Block]:
    """Namespaces ``first`` to ``last`` played round by round: per block of :data:`BLOCK_ROUNDS`
    rounds, their records as a table, with the last round played once all are closed (and then
    their statistics)."""
    import numpy as np

    runner = _Runner(plan, first, last)
    r = 0
    with collector_paused():
        while runner.open:
            start, counts = r, []
            while runner.open and r < start + BLOCK_ROUNDS:
                before = len(runner.out)
                runner.round(r)
                counts.append(len(runner.out) - before)
                r += 1
            rounds = np.repeat(np.arange(start, r, dtype=np.int64), counts)
            table = _channel_table(runner.take(), rounds)
            yield table, (None if runner.open else r - 1), (None if runner.open else runner.stats)
    if r == 0:  # no namespace at all in this part
        yield _channel_table([], []), -1, runner.stats


Block = tuple[Any, int | None, GenStats | None]
"""A part's records of some rounds (a table), the last round it played once all its namespaces
are closed (else None), and then its statistics."""


def _serve() -> None:
    """A worker process (``python -c``, not multiprocessing: nothing of the caller's ``__main__``
    is run again): reads its (plan, first, last) as a pickle on stdin and writes its blocks to
    stdout, each a pickle after its length; the pipe's buffer holds the worker back."""
    import pickle
    import struct

    plan, first, last = pickle.load(sys.stdin.buffer)
    out = sys.stdout.buffer
    for block in _blocks(plan, first, last):
        data = pickle.dumps(block, protocol=pickle.HIGHEST_PROTOCOL)
        out.write(struct.pack("<Q", len(data)) + data)
        out.flush()


def _worker(plan: _Plan, first: int, last: int) -> tuple[Any, Iterator[Block]]:
    """Start a worker for namespaces ``first`` to ``last``; the process and its blocks as they come."""
    import os
    import pickle
    import struct
    import subprocess

    root = str(Path(__file__).resolve().parent.parent)  # where this statechan is imported from
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (root, os.environ.get("PYTHONPATH")) if p))
    command = [sys.executable, "-c", "from statechan.tracegen import _serve; _serve()"]
    process = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
    assert process.stdin is not None
    assert process.stdout is not None
    process.stdin.write(pickle.dumps((plan, first, last)))
    process.stdin.close()

    def blocks(stream: Any) -> Iterator[Block]:
        while True:
            head = stream.read(8)
            if len(head) < 8:
                raise RuntimeError(f"a generator worker stopped (exit status {process.wait()})")
            block: Block = pickle.loads(stream.read(struct.unpack("<Q", head)[0]))
            yield block

    return process, blocks(process.stdout)


def write_generated(path: str | Path, records: int, seed: int = 0, workers: int = 1, **options: Any) -> GenStats:
    """Generate a trace to ``path``: Parquet (flat schema) for ``.parquet``, else JSON Lines (``.gz``: gzip).
    ``workers`` processes play the namespaces for Parquet (each a contiguous share of them); the
    file is the same whatever their number."""
    from statechan.traces import is_parquet

    if workers < 1:
        raise ValueError(f"workers must be at least 1, not {workers}")
    if is_parquet(path):
        return _write_parquet(Path(path), _Plan(records, seed, **options), workers)
    import gzip
    import json

    trace, stats = generate(records, seed, **options)
    p = Path(path)
    with gzip.open(p, "wt", encoding="utf-8") if p.suffix == ".gz" else open(p, "w", encoding="utf-8") as out:
        for record in trace:
            out.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
    return stats


def _write_parquet(path: Path, plan: _Plan, workers: int) -> GenStats:
    """The writer: takes each block from every part in turn, puts the conductor's records of
    those rounds among them, orders the rows by round (a stable sort: within a round the parts
    are in namespace order, the plants and registry events last), numbers them and writes them."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    workers = min(workers, plan.count)
    bounds = [plan.count * w // workers for w in range(workers + 1)]
    conductor = _Conductor(plan)
    processes: list[Any] = []
    sources: list[Iterator[Block]] = []
    if workers == 1:
        sources.append(_blocks(plan, 0, plan.count))
    else:
        for w in range(workers):
            process, blocks = _worker(plan, bounds[w], bounds[w + 1])
            processes.append(process)
            sources.append(blocks)
    namespaces = GenStats()
    offset = 0
    try:
        with pq.ParquetWriter(str(path), arrow_schema(), compression="zstd") as writer:

            def write(table: Any) -> None:
                nonlocal offset
                if not len(table):
                    return  # no empty row group (nor its missing statistics) at the end
                order = np.argsort(table.column("round").to_numpy(), kind="stable")
                table = table.take(pa.array(order)).drop_columns(["round"])
                table = table.set_column(1, "offset", pa.array(np.arange(offset, offset + len(table), dtype=np.int64)))
                writer.write_table(table, row_group_size=100_000)
                offset += len(table)

            write(_record_table([(-1, record) for record in conductor.opening()]))
            active = list(range(len(sources)))
            r = 0
            last = -1
            while active:
                tables = []
                running = False
                for w in list(active):
                    table, closed_at, stats = next(sources[w])
                    tables.append(table)
                    if closed_at is None:
                        running = True
                    else:
                        last = max(last, closed_at)
                        assert stats is not None
                        namespaces.merge(stats)
                        active.remove(w)
                end = r + BLOCK_ROUNDS if running else last + 1
                extras = [(q, record) for q in range(r, end) for record in conductor.round(q)]
                r = end
                write(pa.concat_tables([*tables, _record_table(extras)]))
            close = conductor.close(r, namespaces.end_time)
            write(_record_table([(r, record) for record in close]))
    finally:
        for process in processes:
            if process.poll() is None:  # the writer stopped early: the worker's blocks are not wanted
                process.kill()
            process.wait()
            process.stdout.close()
    return conductor.totals(namespaces)


@dataclass
class GenerationRun:
    """One timed generation, for the benchmark: what was written, how long it took, and the peak
    resident memory of the writer and of its largest worker process."""

    path: str
    records: int
    workers: int
    seconds: float
    writer_peak_mb: float
    worker_peak_mb: float

    @property
    def per_record_us(self) -> float:
        return self.seconds / self.records * 1e6


def timed_generation(path: str | Path, records: int, seed: int = 1, workers: int = 2, **options: Any) -> GenerationRun:
    """:func:`write_generated` timed. Memory is ``getrusage``'s peak (the workers' once they have
    ended), so call it in a fresh process to measure one run alone."""
    import resource
    import time

    started = time.perf_counter()
    stats = write_generated(path, records, seed, workers=workers, **options)
    seconds = time.perf_counter() - started
    writer = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    worker = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    return GenerationRun(str(path), stats.records, workers, round(seconds, 3), round(writer, 1), round(worker, 1))
