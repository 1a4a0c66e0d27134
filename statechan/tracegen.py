"""A fast trace generator for scale: the simulator's lifecycles, without the simulator's cost.

It writes what a channel reader of a busy cluster would see: bundles assigned, transferred
(PIP-307: Releasing, Assigning, Owned), unloaded (Releasing, Free), split (Splitting, the
children Owned, the parent Deleted, then tombstoned) and Free/Deleted keys tombstoned; brokers
that crash (unregistered), whose bundles the leader overrides (``force``) onto live brokers, and
come back; now and then a stale duplicate the resolver refuses. Namespaces are served in turn,
so each lifecycle's records are interleaved with every other namespace's, and every step of a
lifecycle lands within one turn (well under the auditor's thresholds).

``plant`` adds known numbers of each record-invariant violation, each in a namespace of its own
(``plant/<kind>-<n>``) owned by a broker that never crashes, so an audit must count exactly
that many. Everything comes from ``seed``: the same arguments give the same trace.
"""

from __future__ import annotations

import random
from collections import deque
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NamedTuple

from statechan.keys import Bundle, namespace_bundles
from statechan.states import ServiceUnitState
from statechan.traces import value_columns
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
    values: dict[str, GenValue] = field(default_factory=dict)
    pending: dict[str, _Pending] = field(default_factory=dict)
    semi: dict[str, int] = field(default_factory=dict)
    """Free or Deleted keys, with when they may be tombstoned or reassigned."""


class Generator:
    """Yields :class:`GenRecord` s in offset order; ``stats`` fills in as it goes."""

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
        self.target = records
        self.rng = random.Random(seed)
        count = namespaces if namespaces is not None else max(1, min(1000, records // 500))
        self.namespaces = [
            _Namespace(name, {b.key: b for b in namespace_bundles(name, bundles_per_namespace)})
            for name in (f"tenant-{i % 50}/ns-{i}" for i in range(count))
        ]
        self.max_bundles = max_bundles
        self.brokers = [f"broker-{i}:8080" for i in range(brokers)]
        self.alive = list(self.brokers)
        self.dead: dict[str, int] = {}
        """Crashed brokers, with when they come back."""
        self.turn_ms = turn_ms
        self.plant = {kind: (plant or {}).get(kind, 0) for kind in PLANT_KINDS}
        self.stats = GenStats(namespaces=count)
        self.offset = 0
        self.time = START_TIME_MS

    # -- records -----------------------------------------------------------------------------------
    def _emit(self, record: GenRecord) -> GenRecord:
        self.offset += 1
        self.stats.records += 1
        self.stats.end_time = record.time
        if record.kind == "channel":
            self.stats.channel_records += 1
            assert record.key is not None
            self.stats.keys.add(record.key)
        return record

    def _publish(self, ns: _Namespace, key: str, value: GenValue | None) -> GenRecord:
        if value is None:
            ns.values.pop(key, None)
        else:
            ns.values[key] = value
            self.stats.forced += value.force
        self.time += 1
        return self._emit(GenRecord("channel", self.offset, self.time, key, value))

    def _value(
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
        return GenValue(state, dst, src, version, self.time + 1, force, split)

    def _registry(self, broker: str, event: str) -> GenRecord:
        self.time += 1
        return self._emit(GenRecord("registry", self.offset, self.time, broker=broker, event=event))

    # -- lifecycles --------------------------------------------------------------------------------
    def _live_broker(self, besides: str | None = None) -> str:
        choices = [b for b in self.alive if b != besides] or self.alive
        return self.rng.choice(choices)

    def _cleanup(self, ns: _Namespace) -> Iterator[GenRecord]:
        """The leader's override of every bundle a crashed broker holds (force, onto a live broker)."""
        for key, value in sorted(ns.values.items()):
            if value.state in (S.Free, S.Deleted):
                continue
            involved = {value.dst_broker, value.source_broker} if value.state is not S.Owned else {value.dst_broker}
            dead = [b for b in involved if b in self.dead]
            if not dead:
                continue
            ns.pending.pop(key, None)
            old = value.dst_broker or value.source_broker
            new = self._live_broker(old)
            yield self._publish(ns, key, self._value(ns, key, S.Owned, new, old, force=True))

    def _step(self, ns: _Namespace, pending: _Pending) -> Iterator[GenRecord]:
        what, broker = pending.steps.popleft()
        key = pending.key
        value = ns.values.get(key)
        if what == "tombstone":
            ns.semi.pop(key, None)
            yield self._publish(ns, key, None)
        elif what == "assigning":
            assert value is not None
            yield self._publish(ns, key, self._value(ns, key, S.Assigning, broker, value.source_broker))
        elif what == "owned":
            assert value is not None
            yield self._publish(ns, key, self._value(ns, key, S.Owned, value.dst_broker, value.source_broker))
        elif what == "free":
            assert value is not None
            yield self._publish(ns, key, self._value(ns, key, S.Free, None, value.source_broker))
            ns.semi[key] = self.time + self.rng.randint(5_000, 600_000)
        elif what == "split-done":
            assert value is not None
            assert value.split is not None
            owner = value.source_broker
            parent = ns.bundles.pop(key)
            for child in (parent.child(r) for r in value.split):
                ns.bundles[child.key] = child
                yield self._publish(ns, child.key, GenValue(S.Owned, owner, None, VERSION_ID_INIT, self.time + 1))
            yield self._publish(ns, key, self._value(ns, key, S.Deleted, None, owner))
            ns.semi[key] = self.time + self.rng.randint(5_000, 600_000)
        if not pending.steps:
            ns.pending.pop(key, None)

    def _start(self, ns: _Namespace) -> Iterator[GenRecord]:
        """Maybe begin one lifecycle on one bundle of the namespace."""
        rng = self.rng
        due = [key for key, when in ns.semi.items() if when <= self.time and key not in ns.pending]
        if due:
            key = min(due)
            value = ns.values[key]
            if value.state is S.Free and rng.random() < 0.5:
                del ns.semi[key]
                yield from self._assign(ns, key)
            else:
                ns.pending[key] = _Pending(key, deque([("tombstone", None)]))
                yield from self._step(ns, ns.pending[key])
            return
        idle = [key for key in ns.bundles if key not in ns.values and key not in ns.pending]
        if idle and rng.random() < 0.5:
            yield from self._assign(ns, rng.choice(idle))
            return
        owned = [
            key
            for key, value in ns.values.items()
            if value.state is S.Owned and key not in ns.pending and key in ns.bundles
        ]
        if not owned:
            return
        key = rng.choice(owned)
        value = ns.values[key]
        owner = value.dst_broker
        roll = rng.random()
        if roll < 0.30:  # transfer (PIP-307)
            target = self._live_broker(owner)
            yield self._publish(ns, key, self._value(ns, key, S.Releasing, target, owner))
            ns.pending[key] = _Pending(key, deque([("assigning", target), ("owned", None)]))
        elif roll < 0.45:  # unload
            yield self._publish(ns, key, self._value(ns, key, S.Releasing, None, owner))
            ns.pending[key] = _Pending(key, deque([("free", None)]))
        elif roll < 0.52 and len(ns.bundles) < self.max_bundles:  # split
            bundle = ns.bundles[key]
            if bundle.upper - bundle.lower >= 2:
                children = tuple(child.range_name for child in bundle.split())
                yield self._publish(ns, key, self._value(ns, key, S.Splitting, None, owner, split=children))
                ns.pending[key] = _Pending(key, deque([("split-done", None)]))
        elif roll < 0.54:  # a stale duplicate (a retried publish): the resolver refuses it
            self.stats.stale += 1
            self.time += 1
            yield self._emit(GenRecord("channel", self.offset, self.time, key, value))

    def _assign(self, ns: _Namespace, key: str) -> Iterator[GenRecord]:
        yield self._publish(ns, key, self._value(ns, key, S.Assigning, self._live_broker(), None))
        ns.pending[key] = _Pending(key, deque([("owned", None)]))

    def _turn(self, ns: _Namespace) -> Iterator[GenRecord]:
        if self.dead:
            yield from self._cleanup(ns)
        pending = list(ns.pending.values())
        if pending:
            yield from self._step(ns, self.rng.choice(pending))
        else:
            yield from self._start(ns)

    def _crashes(self) -> Iterator[GenRecord]:
        for broker, back in sorted(self.dead.items()):
            if back <= self.time:
                del self.dead[broker]
                self.alive.append(broker)
                yield self._registry(broker, "registered")
        if len(self.alive) > 2 and self.rng.random() < 0.002:
            broker = self.rng.choice([b for b in self.alive if b != self.brokers[0]])
            self.alive.remove(broker)
            round_ms = len(self.namespaces) * self.turn_ms
            self.dead[broker] = self.time + max(120_000, 3 * round_ms)
            self.stats.crashes += 1
            yield self._registry(broker, "unregistered")

    # -- the whole trace ---------------------------------------------------------------------------
    def __iter__(self) -> Iterator[GenRecord]:
        for broker in self.brokers:
            yield self._registry(broker, "registered")
        self.time += 1
        yield self._emit(GenRecord("leader", self.offset, self.time, broker=self.brokers[0]))
        plants = _Plants(self)
        yield from plants.register()
        reserve = plants.records
        while self.stats.records < self.target - reserve:
            for ns in self.namespaces:
                self.time += self.turn_ms
                yield from self._turn(ns)
                yield from plants.turn()
                if self.stats.records >= self.target - reserve:
                    break
            yield from self._crashes()
        yield from self._wind_down()
        yield from plants.finish()

    def _wind_down(self) -> Iterator[GenRecord]:
        """Finish every lifecycle begun, tombstone what is Free or Deleted, bring crashed brokers back."""
        for ns in self.namespaces:
            if self.dead:
                yield from self._cleanup(ns)
            while ns.pending:
                pending = next(iter(ns.pending.values()))
                while pending.steps:
                    self.time += 1
                    yield from self._step(ns, pending)
            for key in sorted(ns.semi):
                yield self._publish(ns, key, None)
            ns.semi.clear()
        for broker in sorted(self.dead):
            yield self._registry(broker, "registered")
        self.dead.clear()


class _Plants:
    """Scripted violations: per planted instance, a namespace and a list of (wait ms, action)."""

    def __init__(self, gen: Generator) -> None:
        self.gen = gen
        self.owner = gen.brokers[0]
        self.scripts: list[tuple[_Namespace, deque[tuple[int, Any]]]] = []
        self.due: list[int] = []
        self.extra_registry: list[tuple[str, str]] = []
        for kind, count in gen.plant.items():
            for n in range(count):
                name = f"plant/{kind}-{n}"
                ns = _Namespace(name, {b.key: b for b in namespace_bundles(name, 2)})
                self.scripts.append((ns, deque(self._script(kind, n, ns))))
                self.due.append(0)
            gen.stats.planted[kind] = count
        self.records = sum(sum(1 for _, a in s if a[0] != "wait") for _, s in self.scripts) + len(self.extra_registry)

    def _script(self, kind: str, n: int, ns: _Namespace) -> list[tuple[int, Any]]:
        first, second = ns.bundles.values()
        a, b = first.key, second.key
        own = self.owner
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
            self.extra_registry.append((orphan, "registered"))
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

    def register(self) -> Iterator[GenRecord]:
        for broker, event in self.extra_registry:
            yield self.gen._registry(broker, event)

    def _act(self, ns: _Namespace, action: tuple[Any, ...]) -> Iterator[GenRecord]:
        gen = self.gen
        what = action[0]
        if what == "set":
            _, key, state, dst, src, force, skip = action
            value = gen._value(ns, key, state, dst, src, force)
            if skip:
                value = value._replace(version_id=value.version_id + skip)
                gen.stats.version_gaps += 1
            yield gen._publish(ns, key, value)
        elif what == "split":
            _, key, children = action
            yield gen._publish(ns, key, gen._value(ns, key, S.Splitting, None, self.owner, split=children))
        elif what == "child":
            yield gen._publish(ns, action[1], GenValue(S.Owned, self.owner, None, VERSION_ID_INIT, gen.time + 1))
        elif what == "tombstone":
            yield gen._publish(ns, action[1], None)
        elif what == "registry":
            yield gen._registry(action[1], action[2])

    def turn(self) -> Iterator[GenRecord]:
        """Play every script whose next action is due (at most one action each per call)."""
        for i, (ns, script) in enumerate(self.scripts):
            if not script:
                continue
            wait, action = script[0]
            if self.due[i] == 0:
                self.due[i] = self.gen.time + wait
            if self.gen.time >= self.due[i]:
                script.popleft()
                self.due[i] = 0
                yield from self._act(ns, action)

    def finish(self) -> Iterator[GenRecord]:
        """Play the rest of every script, the clock jumping to each next action."""
        while any(script for _, script in self.scripts):
            pending = [self.due[i] or self.gen.time + s[0][0] for i, (_, s) in enumerate(self.scripts) if s]
            self.gen.time = max(self.gen.time, min(pending))
            yield from self.turn()


def generate(records: int, seed: int = 0, **options: Any) -> tuple[Iterator[GenRecord], GenStats]:
    """A generated trace (about ``records`` records) and the statistics it fills in as it is read."""
    gen = Generator(records, seed, **options)
    return iter(gen), gen.stats


def write_generated(path: str | Path, records: int, seed: int = 0, **options: Any) -> GenStats:
    """Generate a trace to ``path``: Parquet (flat schema) for ``.parquet``, else JSON Lines (``.gz``: gzip)."""
    from statechan.traces import is_parquet, write_flat_rows

    trace, stats = generate(records, seed, **options)
    if is_parquet(path):
        write_flat_rows((record.flat_row() for record in trace), path, compression="zstd")
    else:
        import gzip
        import json

        p = Path(path)
        with gzip.open(p, "wt", encoding="utf-8") if p.suffix == ".gz" else open(p, "w", encoding="utf-8") as out:
            for record in trace:
                out.write(json.dumps(record.to_json(), separators=(",", ":")) + "\n")
    return stats
