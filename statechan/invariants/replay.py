"""Replaying channel records, a namespace at a time, for the record invariants.

A record history is what a reader of the channel saw: every record, in log order, offered to the
library's resolver. The replay keeps, per namespace, what a reader holds for each key and since
when, and shows the record invariants three kinds of event:

- a :class:`Step`: an accepted record (what the key held before, what it holds now);
- a :class:`Dwell`: a state a key held from one time until the next accepted record changed it,
  or until the trace's last time;
- a :class:`Deadline`: the clean-up bound after a broker unregistered has passed.

The invariants themselves are pure functions in :mod:`statechan.invariants.catalogue`; this module only
feeds them. Namespaces are independent, so a trace can be replayed in any interleaving of its
namespaces (the auditor replays them in parallel); within one, records go in offset order.
"""

from __future__ import annotations

import bisect
import enum
import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple

from pydantic import BaseModel, ConfigDict, Field

from statechan.invariants.violation import Violation
from statechan.keys import Bundle, parse_key
from statechan.model import DEFAULT_MODEL, StorageRules, load_model
from statechan.resolver import Reason, decide, rules_for
from statechan.states import ServiceUnitState, StorageType
from statechan.values import LONG_MAX, LONG_MIN, ServiceUnitStateData, ValueView, is_blank

IN_FLIGHT_TIMEOUT_MS = 90_000
"""Pulsar's 30 s in-flight wait plus its 60 s monitor period."""
CLEANUP_TIMEOUT_MS = 300_000
"""After a broker unregisters, until its bundles have moved."""
TOMBSTONE_TIMEOUT_MS = 3_660_000
"""Free or Deleted until the leader tombstones it: the 3,600 s delay plus a monitor period."""
_NEVER = float("inf")


class ReplaySettings(BaseModel):
    """The thresholds of the time-based record invariants, and the resolver to replay through."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    storage: StorageType = StorageType.SystemTopic
    model: str = DEFAULT_MODEL
    in_flight_timeout_ms: int = Field(IN_FLIGHT_TIMEOUT_MS, gt=0)
    cleanup_timeout_ms: int = Field(CLEANUP_TIMEOUT_MS, gt=0)
    tombstone_timeout_ms: int = Field(TOMBSTONE_TIMEOUT_MS, gt=0)


class Value(NamedTuple):
    """A channel value as a plain tuple (a :class:`~statechan.values.ValueView`), cheap to build."""

    state: ServiceUnitState
    dst_broker: str | None
    source_broker: str | None
    force: bool
    version_id: int
    split_children: tuple[str, ...] = ()


def light(value: ServiceUnitStateData | None) -> Value | None:
    """A validated value as a :class:`Value`."""
    if value is None:
        return None
    return Value(
        value.state, value.dst_broker, value.source_broker, value.force, value.version_id, value.split_children
    )


def holder(value: ValueView) -> str | int | None:
    """The broker a value ties the bundle to: its destination, else (unload, split) its source."""
    return value.source_broker if is_blank(value.dst_broker) else value.dst_broker


class Held(NamedTuple):
    """What a reader holds for a key, and since when it has been in that state."""

    value: ValueView
    since_time: int
    since_offset: int


class Step(NamedTuple):
    """An accepted record: the key held ``prev`` (None: nothing) and now holds ``value`` (None: tombstone)."""

    key: str
    bundle: Bundle
    offset: int
    time: int
    prev: Held | None
    value: ValueView | None
    reason: Reason


class Dwell(NamedTuple):
    """A key held ``value`` from ``since_time`` until ``until_time`` (``until_offset`` None: the trace's end)."""

    key: str
    value: ValueView
    since_time: int
    since_offset: int
    until_time: int
    until_offset: int | None


@dataclass(frozen=True, order=True)
class Deadline:
    """``due``: the clean-up bound after ``broker`` unregistered at ``time`` (offset ``offset``)."""

    due: int
    broker: str
    time: int
    offset: int


class Registry:
    """Broker registrations over the trace, answered by offset or by time.

    A broker whose first event is ``unregistered`` was registered before the trace began.
    """

    def __init__(self, events: Iterable[tuple[int, int, str, bool]] = ()) -> None:
        """``events``: (offset, time, broker, registered) in any order."""
        by_broker: dict[str, list[tuple[int, int, bool]]] = {}
        for offset, time, broker, registered in events:
            by_broker.setdefault(broker, []).append((offset, time, registered))
        self._offsets: dict[str, list[int]] = {}
        self._times: dict[str, list[int]] = {}
        self._states: dict[str, list[bool]] = {}
        self.unregistrations: list[tuple[int, int, str]] = []
        for broker, history in by_broker.items():
            history.sort()
            self._offsets[broker] = [o for o, _, _ in history]
            self._times[broker] = [t for _, t, _ in history]
            self._states[broker] = [r for _, _, r in history]
            self.unregistrations.extend((o, t, broker) for o, t, r in history if not r)
        self.unregistrations.sort()
        self.present = bool(self._offsets)
        """Whether the trace has registry records at all (the registry checks are skipped without)."""
        self._answered: dict[str, tuple[float, float, bool]] = {}
        """Per broker, the last answer and the offsets (after, up to) it holds for: a replay asks
        in offset order, so one registration interval answers most questions."""

    def registered_at(self, broker: str | None, offset: int) -> bool:
        """Whether ``broker`` is registered when the record at ``offset`` is written."""
        name = broker or ""
        answered = self._answered.get(name)
        if answered is not None and answered[0] < offset <= answered[1]:
            return answered[2]
        offsets = self._offsets.get(name)
        if offsets is None:
            return False
        states = self._states[name]
        i = bisect.bisect_left(offsets, offset)
        registered = states[i - 1] if i > 0 else not states[0]
        after = offsets[i - 1] if i > 0 else -_NEVER
        self._answered[name] = (after, offsets[i] if i < len(offsets) else _NEVER, registered)
        return registered

    def registered_many(self, brokers: Sequence[str | None], broker: Any, offsets: Any) -> Any:
        """:meth:`registered_at` for many records at once: ``broker`` (an int array) names each
        record's broker by its place in ``brokers``, ``offsets`` (int64) its offset; a bool array."""
        import numpy as np

        registered = np.zeros(len(offsets), dtype=bool)
        for code in np.unique(broker).tolist():
            history = self._offsets.get(brokers[code] or "")
            if history is None:
                continue
            rows = np.flatnonzero(broker == code)
            states = np.array(self._states[brokers[code] or ""], dtype=bool)
            i = np.searchsorted(np.array(history, dtype=np.int64), offsets[rows], side="left")
            registered[rows] = np.where(i > 0, states[np.maximum(i - 1, 0)], not states[0])
        return registered

    def registers_again(self, broker: str, after_offset: int, until: int) -> bool:
        """Whether ``broker`` registers again after the event at ``after_offset``, by time ``until``
        (the same millisecond counts: a session re-established at once)."""
        offsets, times, states = (
            self._offsets.get(broker, []),
            self._times.get(broker, []),
            self._states.get(broker, []),
        )
        i = bisect.bisect_right(offsets, after_offset)
        while i < len(times) and times[i] <= until:
            if states[i]:
                return True
            i += 1
        return False

    def deadlines(self, timeout_ms: int) -> list[Deadline]:
        return sorted(Deadline(t + timeout_ms, b, t, o) for o, t, b in self.unregistrations)


StepCheck = Callable[[Step, "Namespace"], list[Violation]]
DwellCheck = Callable[[Dwell, "Namespace"], list[Violation]]
DeadlineCheck = Callable[[Deadline, "Namespace"], list[Violation]]


Looks = tuple[str, ...] | None
"""The values a step or dwell invariant looks at: state names, ``active``, ``in-flight``, and for
steps ``tombstone`` and ``becomes-active`` (from nothing or an inactive state into an active one);
None for every one. The replay calls a check only for those (a declared shortcut for speed: each
check still guards itself, and is correct called on anything)."""


FiresAfter = Callable[[ReplaySettings], int] | None
"""For a dwell invariant, the longest dwell (ms, from the settings) it never fires on: the replay
does not call it for a dwell that short or shorter (a declared shortcut, like :data:`Looks`)."""


@dataclass(frozen=True)
class RecordChecks:
    """The record invariants to run, by the event each looks at."""

    steps: tuple[tuple[StepCheck, Looks], ...] = ()
    dwells: tuple[tuple[DwellCheck, Looks, FiresAfter], ...] = ()
    deadlines: tuple[DeadlineCheck, ...] = ()


Dispatch = dict[enum.Enum | None, dict[enum.Enum | None, tuple[Any, ...]]]
"""For each held state (None: nothing held), for each new state (None: a tombstone), the checks
to call, in declaration order."""


def _dispatch(
    checks: Sequence[tuple[Any, Looks]],
    states: Iterable[enum.Enum],
    active: frozenset[enum.Enum],
    in_flight: frozenset[enum.Enum],
) -> Dispatch:
    """Which checks look at each (held state, state) pair: a dwell's state is the one it held, a
    step's the one it takes."""

    def looks(names: Looks, held: enum.Enum | None, state: enum.Enum | None) -> bool:
        if names is None:
            return True
        if state is None:
            return "tombstone" in names
        return (
            state.name in names
            or ("active" in names and state in active)
            or ("in-flight" in names and state in in_flight)
            or ("becomes-active" in names and state in active and held not in active)
        )

    everything = [*states, None]
    return {
        held: {state: tuple(c for c, names in checks if looks(names, held, state)) for state in everything}
        for held in everything
    }


@dataclass
class Namespace:
    """One namespace's replay state: what the invariants may read (they never write it)."""

    name: str
    settings: ReplaySettings
    registry: Registry
    active_states: frozenset[enum.Enum]
    in_flight_states: frozenset[enum.Enum]
    held: dict[str, Held] = field(default_factory=dict)
    bundles: dict[str, Bundle] = field(default_factory=dict)
    """Each key with an accepted record: its bundle (:meth:`add_bundle`)."""
    active: set[str] = field(default_factory=set)
    """Keys held in an active state."""
    deleted_at: dict[str, int] = field(default_factory=dict)
    """Keys with an accepted Deleted since their last tombstone: the offset of the first."""
    owned_at: dict[str, int] = field(default_factory=dict)
    """The offset of each key's last accepted Owned record."""
    overlaps: dict[str, list[str]] = field(default_factory=dict)
    """Each key of :attr:`bundles`: the other keys of :attr:`bundles` whose hash ranges overlap its
    own (a namespace's bundles partition its range, so most keys have none but a split's parent
    and children)."""

    def add_bundle(self, key: str, bundle: Bundle) -> None:
        """A key's first accepted record: its bundle, and which keys' ranges overlap it."""
        if key in self.bundles:
            return
        lower, upper = bundle.lower, bundle.upper
        mine = []
        overlaps = self.overlaps
        for other, b in self.bundles.items():
            if b.lower < upper and lower < b.upper:
                mine.append(other)
                overlaps[other].append(key)
        overlaps[key] = mine
        self.bundles[key] = bundle

    def overlapping(self, key: str) -> list[str]:
        """The keys with an accepted record whose hash ranges overlap ``key``'s (not itself)."""
        return self.overlaps.get(key, [])


_OWNED = ServiceUnitState.Owned
_DELETED = ServiceUnitState.Deleted
_new = tuple.__new__
_ACCEPTING = frozenset(r for r in Reason if r.accepted)
"""Builds a NamedTuple from a tuple without the Python-level ``__new__``: the replay builds
several per record, millions of times."""


class ReplayPlan:
    """What every namespace's replay derives from the checks, settings and registry: worked out
    once per trace, not once per namespace."""

    def __init__(self, checks: RecordChecks, settings: ReplaySettings, registry: Registry) -> None:
        model = load_model(settings.model)
        self.checks, self.settings, self.registry = checks, settings, registry
        self.active, self.in_flight = model.active, model.in_flight
        self.rules = rules_for(settings.storage, settings.model)
        self.deadlines: Sequence[Deadline] = registry.deadlines(settings.cleanup_timeout_ms) if checks.deadlines else ()
        self.steps: Dispatch = _dispatch(checks.steps, model.states, model.active, model.in_flight)
        # a dwell's checks depend on the state it held alone: one row of the dispatch (its held axis unused)
        self.dwells: dict[enum.Enum | None, tuple[DwellCheck, ...]] = _dispatch(
            [(c, looks) for c, looks, _ in checks.dwells], model.states, model.active, model.in_flight
        )[None]
        after = {c: -1 if fires_after is None else fires_after(settings) for c, _, fires_after in checks.dwells}
        self.dwell_floor: dict[enum.Enum | None, int] = {
            s: min((after[c] for c in chosen), default=-1) for s, chosen in self.dwells.items()
        }
        """For each held state, the longest dwell none of its checks fires on."""
        self._without: dict[frozenset[StepCheck], Dispatch] = {frozenset(): self.steps}

    def steps_without(self, quiet: frozenset[StepCheck]) -> Dispatch:
        """The step dispatch without the checks of ``quiet`` (for records shown not to fire them)."""
        found = self._without.get(quiet)
        if found is None:
            kept = [(c, looks) for c, looks in self.checks.steps if c not in quiet]
            model = load_model(self.settings.model)
            found = self._without[quiet] = _dispatch(kept, model.states, model.active, model.in_flight)
        return found


class StepColumns(NamedTuple):
    """A batch's records as columns, for a step check's column shortcut (which records cannot fire
    it, worked out by numpy): each record's value and the value its key held when it came, as
    numbers into ``values`` (-1: a tombstone, nothing held), and its offset."""

    value: Any
    held: Any
    offset: Any
    values: Sequence[Value]
    registry: Registry


ColumnShortcut = Callable[[StepColumns], Any]
"""For a step check, the records of a batch it cannot fire on (a bool array): the replay does not
call it for them (a declared shortcut, like :data:`Looks`, tested against the check itself)."""


class NamespaceReplay:
    """Offer one namespace's channel records in offset order; collect what the checks report."""

    def __init__(
        self,
        name: str,
        checks: RecordChecks,
        settings: ReplaySettings | None = None,
        registry: Registry | None = None,
        reasons: Counter[Reason] | None = None,
        plan: ReplayPlan | None = None,
    ) -> None:
        plan = plan or ReplayPlan(checks, settings or ReplaySettings(), registry or Registry())
        self.state = Namespace(name, plan.settings, plan.registry, plan.active, plan.in_flight)
        self.checks = checks
        self.rules = plan.rules
        self.reasons: Counter[Reason] = reasons if reasons is not None else Counter()
        self._deadlines = plan.deadlines
        self._next_deadline = 0
        self._next_due: float = self._deadlines[0].due if self._deadlines else _NEVER
        """The due time of the next deadline to fire (a record later than it fires it)."""
        self._steps = plan.steps
        self._dwells = plan.dwells
        self._dwell_floor = plan.dwell_floor

    def _due(self, now: int) -> list[Violation]:
        """Fire the deadlines passed before ``now`` (the namespace's state is as it was then)."""
        found: list[Violation] = []
        deadlines, i = self._deadlines, self._next_deadline
        while i < len(deadlines) and deadlines[i].due < now:
            for check in self.checks.deadlines:
                found.extend(check(deadlines[i], self.state))
            i += 1
        self._next_deadline = i
        self._next_due = deadlines[i].due if i < len(deadlines) else _NEVER
        return found

    def offer(
        self, key: str, offset: int, time: int, value: ValueView | None, bundle: Bundle | None = None
    ) -> list[Violation]:
        """Replay one channel record; returns the violations it shows (``bundle``: the key's, if
        known)."""
        return self.offer_run((key,), (offset,), (time,), (value,), bundle)

    def offer_run(
        self,
        keys: Sequence[str],
        offsets: Sequence[int],
        times: Sequence[int],
        values: Sequence[ValueView | None],
        bundle: Bundle | None = None,
        decided: Sequence[Reason] | None = None,
        dispatch: Sequence[Dispatch] | None = None,
    ) -> list[Violation]:
        """Replay a run of this namespace's channel records in offset order (the sequences side by
        side); returns the violations they show. The replay's one loop: :meth:`offer` is a run of
        one, and the auditor offers each namespace's records of an Arrow batch as one run.
        ``bundle``: the bundle of a run whose keys are all one key, if known (else parsed from the
        key on its first accepted record). ``decided``: the resolver's reason for each record, if
        already known (:class:`ColumnResolver`; the caller counts them): the run then only applies
        the accepted ones. ``dispatch``: each record's step dispatch, if some checks are known not
        to fire on some records (:meth:`ReplayPlan.steps_without`)."""
        ns = self.state
        found: list[Violation] = []
        held_by_key, bundles, owned_at, deleted_at, active = ns.held, ns.bundles, ns.owned_at, ns.deleted_at, ns.active
        active_states, rules, reasons = ns.active_states, self.rules, self.reasons
        steps, dwells, dwell_floor = self._steps, self._dwells, self._dwell_floor
        next_due = self._next_due
        given = itertools.repeat(None) if decided is None else decided
        row_steps = itertools.repeat(steps) if dispatch is None else dispatch
        for key, offset, time, value, reason, chosen in zip(
            keys, offsets, times, values, given, row_steps, strict=False
        ):
            if time > next_due:  # the deadlines passed before this record, the namespace as it was then
                found.extend(self._due(time))
                next_due = self._next_due
            if reason is None:
                held = held_by_key.get(key)
                verdict = decide(rules, None if held is None else held.value, value)  # the resolver's step
                reason = verdict.reason
                reasons[reason] += 1
                if not verdict.accepted:  # a refused value leaves held as it is
                    continue
            elif reason not in _ACCEPTING:
                continue
            else:
                held = held_by_key.get(key)
            if held is None:
                held_value = held_state = None
            else:
                held_value = held.value
                held_state = held_value.state
            if held is None and key not in bundles:
                ns.add_bundle(key, bundle if bundle is not None else parse_key(key))
            state = None if value is None else value.state
            step_checks = chosen[held_state][state]
            if step_checks:
                step = _new(Step, (key, bundles[key], offset, time, held, value, reason))
                for step_check in step_checks:
                    shown = step_check(step, ns)
                    if shown:
                        found.extend(shown)
            if held is not None:
                if held_state is state:
                    held_by_key[key] = _new(Held, (value, held.since_time, held.since_offset))
                    if state is _OWNED:
                        owned_at[key] = offset
                    continue
                dwell_checks = dwells[held_state]
                if dwell_checks and time - held.since_time > dwell_floor[held_state]:
                    dwell = _new(Dwell, (key, held_value, held.since_time, held.since_offset, time, offset))
                    for dwell_check in dwell_checks:
                        shown = dwell_check(dwell, ns)
                        if shown:
                            found.extend(shown)
            if state is None:
                held_by_key.pop(key, None)
                active.discard(key)
                deleted_at.pop(key, None)
                continue
            held_by_key[key] = _new(Held, (value, time, offset))
            if state in active_states:
                if held_state not in active_states:
                    active.add(key)
            elif held_state in active_states:
                active.discard(key)
            if state is _OWNED:
                owned_at[key] = offset
            elif state is _DELETED:
                deleted_at.setdefault(key, offset)
        return found

    def finish(self, end_time: int) -> list[Violation]:
        """The trace ended at ``end_time``: close every state still held, fire the deadlines passed."""
        ns = self.state
        found = self._due(end_time)
        for key, held in sorted(ns.held.items()):
            dwell = Dwell(key, held.value, held.since_time, held.since_offset, end_time, None)
            for check in self._dwells[held.value.state]:
                found.extend(check(dwell, ns))
        return found


class TraceReplay:
    """Every namespace of a trace, records offered in offset order (interleaved as they come)."""

    def __init__(self, checks: RecordChecks, settings: ReplaySettings | None = None, registry: Registry | None = None):
        self.checks = checks
        self.settings = settings or ReplaySettings()
        self.registry = registry or Registry()
        self.reasons: Counter[Reason] = Counter()
        self.namespaces: dict[str, NamespaceReplay] = {}
        self.namespaces_seen = 0
        self._plan = ReplayPlan(checks, self.settings, self.registry)

    @property
    def plan(self) -> ReplayPlan:
        """What every namespace's replay derives from the checks, settings and registry."""
        return self._plan

    def namespace_of(self, key: str) -> tuple[NamespaceReplay, Bundle]:
        """The replay of the key's namespace (begun if new) and the key's bundle."""
        bundle = parse_key(key)
        replay = self.namespaces.get(bundle.namespace)
        if replay is None:
            replay = NamespaceReplay(bundle.namespace, self.checks, reasons=self.reasons, plan=self._plan)
            self.namespaces[bundle.namespace] = replay
            self.namespaces_seen += 1
        return replay, bundle

    def offer(self, key: str, offset: int, time: int, value: ValueView | None) -> list[Violation]:
        replay, bundle = self.namespace_of(key)
        return replay.offer(key, offset, time, value, bundle)

    def finish(self, end_time: int) -> list[Violation]:
        """Finish every namespace still open: the trace ended at ``end_time`` (its last record's
        time, whatever its kind)."""
        found: list[Violation] = []
        for name in sorted(self.namespaces):
            found.extend(self.namespaces[name].finish(end_time))
        return found


# -- the resolver over columns --------------------------------------------------------------------------
_VERSION_CASES = 6
"""How a record's version stands to the held one's, as far as the resolver can tell them apart:
0, 1: nothing held, the offered version is (is not) the storage's first-write version; 2: Java's
``Long`` wrap-around (held ``LONG_MAX``, offered ``LONG_MIN``); 3: not above the held one; 4: the
next one; 5: two or more above it."""


def _version_examples(rules: StorageRules) -> list[tuple[int | None, int]]:
    """For each version case, a (held, offered) pair in it: the resolver is asked about these."""
    first = rules.first_write_version
    other = 1 if first is None else (first + 1 if first < LONG_MAX else first - 1)
    return [(None, 1 if first is None else first), (None, other), (LONG_MAX, LONG_MIN), (2, 2), (1, 2), (1, 3)]


def version_cases(rules: StorageRules, held: Any, offered: Any, present: Any) -> Any:
    """Each record's version case (:data:`_VERSION_CASES`), from int64 arrays of the held and offered
    versions and whether a value is held at all (numpy, no Python per row)."""
    import numpy as np

    first = rules.first_write_version
    cases = np.where(offered == first, 0, 1) if first is not None else np.ones(len(offered), dtype=np.int64)
    wrap = (held == LONG_MAX) & (offered == LONG_MIN)
    below = held < offered  # then offered > LONG_MIN: offered - 1 does not wrap
    next_one = below & (held == np.where(below, offered, 1) - 1)
    cases = np.where(present, np.where(wrap, 2, np.where(~below, 3, np.where(next_one, 4, 5))), cases)
    return cases.astype(np.int64)


def stable_order(numbers: Any) -> Any:
    """The stable sort order of an array of small non-negative numbers: numpy's radix sort when
    they fit 16 bits (a batch's namespaces or keys, most often), else its merge sort."""
    import numpy as np

    if len(numbers) and numbers.min() >= 0 and numbers.max() < 1 << 16:
        numbers = numbers.astype(np.uint16)
    return np.argsort(numbers, kind="stable")


class ColumnResolver:
    """The resolver's verdicts on a batch of records at once, each one :func:`decide`'s own.

    A verdict depends on the held value, the offered value and only the case of their versions
    (:func:`version_cases`); each distinct (held, offered, case) is put to :func:`decide` once, with
    versions of that case, and remembered. Which value a key holds when a record comes depends on
    the verdicts before it; the batch is solved as a fixed point: guess every record accepted, work
    out what each would then meet, decide, and again until no verdict changes. A record's verdict
    depends only on those before it, so the k-th round settles at least the first k records of each
    key, and the fixed point is the sequential fold's (most batches settle in two or three rounds; a
    batch that has not settled after :attr:`rounds` is left to the record-by-record replay)."""

    def __init__(self, rules: StorageRules, rounds: int = 12) -> None:
        self.rules = rules
        self.rounds = rounds
        self.values: list[Value] = []
        """Each distinct value (its version aside) met so far, by its number."""
        self.numbers: dict[tuple[Any, ...], int] = {}
        self.known: dict[int, Reason] = {}
        """Each (held, offered, case) code decided so far: the resolver's reason."""
        self.examples = _version_examples(rules)
        self.reasons: list[Reason] = list(Reason)
        self._index = {r: i for i, r in enumerate(self.reasons)}
        self._accepting = [r.accepted for r in self.reasons]
        self.met: Any = None
        """After a batch has settled: what each of its records met (the number of the value its key
        held when it came, -1: nothing), in the batch's order."""

    def number(self, fields: tuple[Any, ...] | None) -> int:
        """The number of a value's (state, dst, src, force), -1 for None (a tombstone: nothing held)."""
        if fields is None:
            return -1
        found = self.numbers.get(fields)
        if found is None:
            found = self.numbers[fields] = len(self.values)
            self.values.append(_new(Value, (*fields, 0, ())))
        return found

    def _decide(self, code: int) -> Reason:
        held, offered, case = (code >> 27) - 1, ((code >> 3) & 0xFFFFFF) - 1, code & 7
        held_version, offered_version = self.examples[case]
        prev = None if held < 0 or held_version is None else self.values[held]._replace(version_id=held_version)
        new = None if offered < 0 else self.values[offered]._replace(version_id=offered_version)
        reason = self.known[code] = decide(self.rules, prev, new).reason
        return reason

    def solve(self, key: Any, value: Any, version: Any, held_value: Any, held_version: Any) -> Any | None:
        """The reason index (into :attr:`reasons`) of each record, or None if the batch did not settle.

        ``key``: each record's key number, the records of a key in offset order (keys may
        interleave); ``value``: each record's value number (:meth:`number`), ``version`` its version;
        ``held_value``, ``held_version``: per key number, what the key holds before the batch (-1:
        nothing), updated to what it holds after it once the batch has settled."""
        import numpy as np

        n = len(key)
        if n == 0:
            return np.zeros(0, dtype=np.int64)
        if len(self.values) >= 0xFFFFFF:  # more distinct values than a code holds
            return None
        order = stable_order(key)
        keys, values, versions = key[order], value[order], version[order]
        place = np.arange(n)
        first = np.empty(n, dtype=bool)
        first[0] = True
        first[1:] = keys[1:] != keys[:-1]
        start = np.maximum.accumulate(np.where(first, place, 0))
        carried_value, carried_version = held_value[keys], held_version[keys]
        accepted = np.ones(n, dtype=bool)
        index = np.asarray(self._accepting, dtype=bool)
        reasons = None
        for _ in range(self.rounds):
            last = np.maximum.accumulate(np.where(accepted, place, -1))
            before = np.empty(n, dtype=np.int64)
            before[0] = -1
            before[1:] = last[:-1]
            mine = before >= start  # an accepted record of the key before this one, in the batch
            at = np.where(mine, before, 0)
            meets = np.where(mine, values[at], carried_value)
            meets_version = np.where(mine, versions[at], carried_version)
            cases = version_cases(self.rules, meets_version, versions, meets >= 0)
            codes = (((meets + 1) << 24 | (values + 1)) << 3) | cases
            distinct, inverse = np.unique(codes, return_inverse=True)
            known, decide_code, number = self.known, self._decide, self._index
            table = np.array(
                [number[decide_code(c) if (r := known.get(c)) is None else r] for c in distinct.tolist()],
                dtype=np.int64,
            )
            reasons = table[inverse.reshape(-1)]
            now = index[reasons]
            if np.array_equal(now, accepted):
                out = np.empty(n, dtype=np.int64)
                out[order] = reasons
                self.met = np.empty(n, dtype=np.int64)
                self.met[order] = meets
                end = np.empty(n, dtype=bool)  # each key's last record in the batch
                end[-1] = True
                end[:-1] = first[1:]
                last_accepted = np.maximum.accumulate(np.where(accepted, place, -1))[end]
                changed = last_accepted >= start[end]
                at = last_accepted[changed]
                held_value[keys[end][changed]] = values[at]
                held_version[keys[end][changed]] = versions[at]
                return out
            accepted = now
        return None
