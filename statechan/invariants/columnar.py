"""The record replay a batch of columns at a time: what :class:`~statechan.invariants.replay.NamespaceReplay`
does record by record, decided for a whole batch with numpy, the record invariants called only
where an event can concern them.

The auditor's replay of millions of records spends its time on work most records do not need: a
Python call per record for the resolver, and calls of record invariants that cannot fire. Here a
batch's records are grouped by key (each key's in offset order), and

- **the resolver** decides every record at once. Its verdict depends on the value held, the value
  offered and only how their versions compare (stale, next, a gap; for a first write, whether it
  is the storage's first version): each (held, offered) pair of distinct values is decided once by
  :func:`statechan.resolver.decide` itself, on stand-in versions of each kind, and the verdicts are
  looked up by numpy. What a key holds before a record depends on which earlier records were
  accepted: the batch is decided assuming every record is, then again with what that found, until
  nothing changes (two or three rounds: a refused record changes the held value of the records
  after it; a run the rounds do not settle is decided record by record);
- **what a key holds and since when**, its last Owned and first Deleted, come from running maxima
  over each key's records;
- **the record invariants** are called on the events that can concern them, as the record-at-a-time
  replay calls them: steps whose (held state, state) pair the check looks at
  (:data:`~statechan.invariants.replay.Looks`) and that meet the conditions it declared it needs
  (:func:`~statechan.invariants.replay.needs`: each decided for the whole batch), dwells longer
  than the check's floor, deadlines the namespace's records pass. Each check reads the namespace as
  it stood before the record (:class:`_View`: what a reader held for each key, looked up in the
  batch's columns).

The record-at-a-time replay stays the library's pure-Python path (``statechan simulate``, the
catalogue's :func:`~statechan.invariants.catalogue.check_trace`); the tests replay generated
traces with every violation planted, and random ones, through both and compare every violation.
"""

from __future__ import annotations

import enum
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeVar

import numpy as np

from statechan.invariants.replay import (
    Deadline,
    Dwell,
    Held,
    RecordChecks,
    Registry,
    ReplayPlan,
    ReplaySettings,
    Step,
    Value,
    _new,
    needed,
)
from statechan.invariants.violation import Violation
from statechan.keys import Bundle, parse_key
from statechan.model import load_model
from statechan.resolver import Reason, decide
from statechan.states import ServiceUnitState
from statechan.values import LONG_MAX, LONG_MIN, ValueView

REASONS = tuple(Reason)
_ACCEPTS = np.array([reason.accepted for reason in REASONS], dtype=bool)
_PAIR = np.int64(1 << 31)
"""A (held value, offered value) pair as one number: ``(held + 1) * _PAIR + offered + 1``."""
FIRST, FIRST_OTHER, STALE, NEXT, GAP = range(5)
"""How an offered version compares with the held one: no value held and the offered version is the
storage's first write version (or the storage has none), or not; a held value and the offered
version not above it, one above it (or Java's wrap-around from the largest long), or more."""
ROUNDS = 6
"""Rounds of deciding a batch before the keys still changing are decided record by record."""
OVERLAP_INDEX_MAX = 4_096
"""Keys of one namespace up to which the keys overlapping each key are kept; past it, worked out
when asked."""

T = TypeVar("T")


def _grown(array: np.ndarray[Any, Any], size: int, fill: int) -> np.ndarray[Any, Any]:
    """``array`` with room for ``size`` entries (doubled, the new ones ``fill``)."""
    if size <= len(array):
        return array
    bigger = np.full(max(size, 2 * len(array), 64), fill, dtype=array.dtype)
    bigger[: len(array)] = array
    return bigger


@dataclass
class _Book:
    """One namespace: its keys, the keys overlapping each, its deadline cursor."""

    name: str
    kids: list[int] = field(default_factory=list)
    lowers: list[int] = field(default_factory=list)
    uppers: list[int] = field(default_factory=list)
    overlaps: dict[int, list[int]] | None = field(default_factory=dict)
    """Per key, the keys of the namespace whose ranges overlap it (None past :data:`OVERLAP_INDEX_MAX`)."""
    next_deadline: int = 0


@dataclass
class _Batch:
    """A batch's records sorted by key (stably: each key's in offset order), and what the replay
    decided for each (indices into the sorted order)."""

    kids: np.ndarray[Any, Any]
    positions: np.ndarray[Any, Any]
    """Each record's place in the batch as given (the order the namespace saw them)."""
    sort_key: np.ndarray[Any, Any]
    """``kid * (n + 1) + position``: ascending; finds a key's last record before a place."""
    group_start: np.ndarray[Any, Any]
    values: np.ndarray[Any, Any]
    versions: np.ndarray[Any, Any]
    last_accepted: np.ndarray[Any, Any]
    """The last accepted record at or before each (any key: compare with ``group_start``)."""
    state_after: np.ndarray[Any, Any]
    """The state code a reader holds after each accepted record (0: nothing)."""
    since_time: np.ndarray[Any, Any]
    since_offset: np.ndarray[Any, Any]
    owned_after: np.ndarray[Any, Any]
    deleted_after: np.ndarray[Any, Any]


class BatchReplay:
    """Every namespace of a trace, replayed a batch at a time (:meth:`offer`): the same events,
    checks and verdict counts as :class:`~statechan.invariants.replay.TraceReplay` on the same
    records in the same order."""

    def __init__(self, checks: RecordChecks, settings: ReplaySettings | None = None, registry: Registry | None = None):
        self.settings = settings or ReplaySettings()
        self.registry = registry or Registry()
        plan = self.plan = ReplayPlan(checks, self.settings, self.registry)
        model = load_model(self.settings.model)
        self.rules = plan.rules
        self.states: tuple[enum.Enum, ...] = tuple(model.states)
        self.code = {state: i + 1 for i, state in enumerate(self.states)}
        """Each state's code; 0 is nothing held (or a tombstone offered)."""
        everything: list[enum.Enum | None] = [None, *self.states]
        self.active_code = np.array([s in plan.active for s in everything], dtype=bool)
        self.owned_code = self.code.get(ServiceUnitState.Owned, -1)
        self.deleted_code = self.code.get(ServiceUnitState.Deleted, -1)
        self.step_checks = [check for check, _ in checks.steps]
        self.step_needs = [needed(check) if checks.narrowed else () for check in self.step_checks]
        bits = np.zeros((len(everything), len(everything)), dtype=np.int64)
        for h, held in enumerate(everything):
            for s, state in enumerate(everything):
                for check in plan.steps[held][state]:
                    bits[h, s] |= 1 << self.step_checks.index(check)
        self.step_bits = bits
        self.dwell_any = np.array([bool(plan.dwells[s]) for s in everything], dtype=bool)
        self.dwell_floor = np.array([plan.dwell_floor[s] for s in everything], dtype=np.int64)
        self.dwell_checks = [plan.dwells[s] for s in everything]
        self.deadlines = plan.deadlines
        self.deadline_checks = checks.deadlines
        self.reason_counts = np.zeros(len(REASONS), dtype=np.int64)
        # keys and namespaces
        self.kids: dict[str, int] = {}
        self.key_names: list[str] = []
        self.key_bundles: list[Bundle] = []
        self.key_book: list[int] = []
        self.books: list[_Book] = []
        self.book_ids: dict[str, int] = {}
        self.views: list[_View] = []
        # per key, what a reader holds after the batches so far
        self.held_value = np.empty(0, dtype=np.int64)
        self.held_version = np.empty(0, dtype=np.int64)
        self.since_time = np.empty(0, dtype=np.int64)
        self.since_offset = np.empty(0, dtype=np.int64)
        self.owned_at = np.empty(0, dtype=np.int64)
        self.deleted_at = np.empty(0, dtype=np.int64)
        # distinct values (state, dst, src, force)
        self.vids: dict[tuple[Any, ...], int] = {}
        self.prefixes: list[tuple[Any, ...]] = []
        self.value_state = np.empty(0, dtype=np.int64)
        self.value_dst = np.empty(0, dtype=np.int64)
        """Each value's destination broker, as the registry numbers it (-1: not in the registry)."""
        # the verdicts of the (held, offered) pairs decided so far
        self.pair_keys = np.empty(0, dtype=np.int64)
        self.pair_reasons = np.empty((0, 5), dtype=np.int64)
        self.pair_rows: dict[int, list[int]] = {}
        self.batch: _Batch | None = None

    # -- what a batch names ------------------------------------------------------------------------
    def key_id(self, key: str) -> int:
        """The key's number (its namespace begun if new); :class:`~statechan.keys.BadKeyError` if
        it is not a bundle key."""
        kid = self.kids.get(key)
        if kid is not None:
            return kid
        bundle = parse_key(key)
        book_id = self.book_ids.get(bundle.namespace)
        if book_id is None:
            book_id = self.book_ids[bundle.namespace] = len(self.books)
            self.books.append(_Book(bundle.namespace))
            self.views.append(_View(self, book_id))
        kid = self.kids[key] = len(self.key_names)
        self.key_names.append(key)
        self.key_bundles.append(bundle)
        self.key_book.append(book_id)
        size = kid + 1
        self.held_value = _grown(self.held_value, size, -1)
        self.held_version = _grown(self.held_version, size, 0)
        self.since_time = _grown(self.since_time, size, 0)
        self.since_offset = _grown(self.since_offset, size, 0)
        self.owned_at = _grown(self.owned_at, size, -1)
        self.deleted_at = _grown(self.deleted_at, size, -1)
        book = self.books[book_id]
        if book.overlaps is not None:
            if len(book.kids) >= OVERLAP_INDEX_MAX:
                book.overlaps = None
            else:
                mine = [
                    other
                    for other, lower, upper in zip(book.kids, book.lowers, book.uppers, strict=True)
                    if lower < bundle.upper and bundle.lower < upper
                ]
                for other in mine:
                    book.overlaps[other].append(kid)
                book.overlaps[kid] = mine
        book.kids.append(kid)
        book.lowers.append(bundle.lower)
        book.uppers.append(bundle.upper)
        return kid

    def value_id(self, state: enum.Enum, dst: str | None, src: str | None, force: bool) -> int:
        """The number of a value's fields but its version (validated by the caller)."""
        fields = (state, dst, src, force)
        vid = self.vids.get(fields)
        if vid is not None:
            return vid
        vid = self.vids[fields] = len(self.prefixes)
        self.prefixes.append(fields)
        self.value_state = _grown(self.value_state, vid + 1, 0)
        self.value_dst = _grown(self.value_dst, vid + 1, -1)
        self.value_state[vid] = self.code[state]
        self.value_dst[vid] = self.registry.number(dst)
        return vid

    @property
    def namespaces_seen(self) -> int:
        return len(self.books)

    @property
    def reasons(self) -> Counter[Reason]:
        """How many records the resolver decided for each reason (none absent)."""
        return Counter({REASONS[i]: int(n) for i, n in enumerate(self.reason_counts) if n})

    def value(self, vid: int, version: int) -> Value | None:
        if vid < 0:
            return None
        return _new(Value, (*self.prefixes[vid], version, ()))

    # -- the resolver, a batch at a time -----------------------------------------------------------
    def _verdicts(
        self,
        held: np.ndarray[Any, Any],
        offered: np.ndarray[Any, Any],
        held_version: np.ndarray[Any, Any],
        version: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """Each record's reason (an index into :data:`REASONS`), from the value held before it."""
        wrap = (held_version == LONG_MAX) & (version == LONG_MIN)
        following = wrap | (held_version == version - 1)  # version - 1 wraps only at LONG_MIN: the wrap itself
        compared = np.where(~wrap & (held_version >= version), STALE, np.where(following, NEXT, GAP))
        first_version = self.rules.first_write_version
        if first_version is None:
            first = np.full(len(held), FIRST)
        else:
            first = np.where(version == first_version, FIRST, FIRST_OTHER)
        kind = np.where(held >= 0, compared, first)
        pairs = (held + 1) * _PAIR + (offered + 1)
        at = np.searchsorted(self.pair_keys, pairs)
        known = at < len(self.pair_keys)
        known[known] = self.pair_keys[at[known]] == pairs[known]
        if not known.all():
            self._decide_pairs(np.unique(pairs[~known]))
            at = np.searchsorted(self.pair_keys, pairs)
        reasons: np.ndarray[Any, Any] = self.pair_reasons[at, kind]
        return reasons

    def _decide_pairs(self, pairs: np.ndarray[Any, Any]) -> None:
        """Decide each new (held, offered) pair for every way the versions can compare, by the
        resolver itself on stand-in versions."""
        first_version = self.rules.first_write_version
        start = 1 if first_version is None else first_version
        rows = []
        for pair in pairs.tolist():
            held, offered = divmod(pair, int(_PAIR))
            held, offered = held - 1, offered - 1
            row = []
            for kind, (held_version, version) in enumerate(
                [(0, start), (0, start + 1), (5, 5), (4, 5), (3, 5)]
            ):
                if (held < 0) != (kind in (FIRST, FIRST_OTHER)):
                    row.append(0)  # a combination no record has
                    continue
                verdict = decide(self.rules, self.value(held, held_version), self.value(offered, version))
                row.append(REASONS.index(verdict.reason))
            rows.append(row)
        keys = np.concatenate([self.pair_keys, pairs])
        order = np.argsort(keys, kind="stable")
        self.pair_keys = keys[order]
        self.pair_reasons = np.concatenate([self.pair_reasons, np.array(rows, dtype=np.int64)])[order]

    def _pair_row(self, held: int, offered: int) -> list[int]:
        """The reasons of one (held, offered) pair, by how the versions compare."""
        pair = (held + 1) * int(_PAIR) + offered + 1
        row = self.pair_rows.get(pair)
        if row is None:
            at = int(np.searchsorted(self.pair_keys, pair))
            if at >= len(self.pair_keys) or self.pair_keys[at] != pair:
                self._decide_pairs(np.array([pair], dtype=np.int64))
                at = int(np.searchsorted(self.pair_keys, pair))
            row = self.pair_rows[pair] = self.pair_reasons[at].tolist()
        return row

    def _settle(
        self,
        kids: np.ndarray[Any, Any],
        values: np.ndarray[Any, Any],
        versions: np.ndarray[Any, Any],
        start: np.ndarray[Any, Any],
    ) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        """The verdicts of records sorted by key (``start``: each one's key's first index): each
        record's reason, whether it was accepted, and the last accepted record of its key before
        it (-1: none in the batch, so the held value is the one carried from earlier batches)."""
        n = len(kids)
        index = np.arange(n)
        carried, carried_version = self.held_value[kids], self.held_version[kids]
        accepted = np.ones(n, dtype=bool)
        for _ in range(ROUNDS):
            before = _previous(accepted, index, start)
            inside = before >= 0
            held = np.where(inside, values[before], carried)
            held_version = np.where(inside, versions[before], carried_version)
            reasons = self._verdicts(held, values, held_version, versions)
            now = _ACCEPTS[reasons]
            if np.array_equal(now, accepted):
                return reasons, accepted, before
            moved = now != accepted
            accepted = now
        # each key's verdicts depend on its own records alone: a key whose verdicts did not move in
        # the last round has settled; the others (a long run of refused records) go record by record
        moving = np.zeros(n, dtype=bool)
        moving[np.unique(start[moved])] = True
        moving = np.logical_or.accumulate(moving) if False else moving[start]
        for j in np.nonzero(moving & (start == index))[0].tolist():
            last = -1
            kid = int(kids[j])
            k = j
            while k < n and start[k] == j:
                if last >= 0:
                    held_now, version_now = int(values[last]), int(versions[last])
                else:
                    held_now, version_now = int(self.held_value[kid]), int(self.held_version[kid])
                row = self._pair_row(held_now, int(values[k]))
                reason = row[_kind(held_now, version_now, int(versions[k]), self.rules.first_write_version)]
                reasons[k] = reason
                before[k] = last
                accepted[k] = _ACCEPTS[reason]
                if accepted[k]:
                    last = k
                k += 1
        return reasons, accepted, before

    # -- a batch ---------------------------------------------------------------------------------
    def offer(
        self,
        kids: np.ndarray[Any, Any],
        offsets: np.ndarray[Any, Any],
        times: np.ndarray[Any, Any],
        values: np.ndarray[Any, Any],
        versions: np.ndarray[Any, Any],
    ) -> list[Violation]:
        """Replay a batch of channel records (key numbers, offsets, times, value numbers, -1 for a
        tombstone, and versions), each namespace's in offset order (namespaces may interleave);
        returns the violations they show."""
        n = len(kids)
        if not n:
            return []
        order = np.argsort(kids, kind="stable")
        kid, value, version = kids[order], values[order], versions[order]
        time, offset = times[order], offsets[order]
        index = np.arange(n)
        first = np.ones(n, dtype=bool)
        first[1:] = kid[1:] != kid[:-1]
        start = np.maximum.accumulate(np.where(first, index, 0))
        reasons, accepted, before = self._settle(kid, value, version, start)
        self.reason_counts += np.bincount(reasons, minlength=len(REASONS))
        inside = before >= 0
        held = np.where(inside, value[before], self.held_value[kid])
        held_version = np.where(inside, version[before], self.held_version[kid])
        held_state = np.where(held >= 0, self.value_state[np.maximum(held, 0)], 0)
        state = np.where(value >= 0, self.value_state[np.maximum(value, 0)], 0)
        # since when a key holds its state, after each accepted record
        change = accepted & (state != held_state)
        changed = np.maximum.accumulate(np.where(change, index, -1))
        ours = changed >= start
        since_time = np.where(ours, time[np.maximum(changed, 0)], self.since_time[kid])
        since_offset = np.where(ours, offset[np.maximum(changed, 0)], self.since_offset[kid])
        held_since_time = np.where(inside, since_time[before], self.since_time[kid])
        held_since_offset = np.where(inside, since_offset[before], self.since_offset[kid])
        # its last Owned, and its first Deleted since its last tombstone, after each record
        owned = np.maximum.accumulate(np.where(accepted & (state == self.owned_code), index, -1))
        owned_after = np.where(owned >= start, offset[np.maximum(owned, 0)], self.owned_at[kid])
        deleted_after = self._deleted_after(kid, offset, accepted, value < 0, state == self.deleted_code, start, index)
        last_accepted = np.maximum.accumulate(np.where(accepted, index, -1))
        state_after = np.where(accepted, state, 0)
        self.batch = _Batch(
            kid,
            order,
            kid * (n + 1) + order,
            start,
            value,
            version,
            last_accepted,
            state_after,
            since_time,
            since_offset,
            owned_after,
            deleted_after,
        )
        events: list[tuple[int, int, int]] = []  # (place in the batch, kind, index or deadline)
        # the steps each check looks at and needs
        bits = np.where(accepted, self.step_bits[held_state, state], 0)
        for i, conditions in enumerate(self.step_needs):
            bit = np.int64(1 << i)
            called = (bits & bit) != 0
            for condition in conditions:
                if called.any():
                    called &= self._meets(condition, called, kid, order, value, offset, start, index, before, deleted_after)
            bits = np.where(called, bits | bit, bits & ~bit)
        events.extend((int(order[j]), _STEP, j) for j in np.nonzero(bits)[0].tolist())
        dwelt = (
            accepted
            & (held >= 0)
            & (state != held_state)
            & self.dwell_any[held_state]
            & (time - held_since_time > self.dwell_floor[held_state])
        )
        events.extend((int(order[j]), _DWELL, j) for j in np.nonzero(dwelt)[0].tolist())
        if self.deadline_checks and self.deadlines:
            events.extend(self._deadline_events(kids, times))
        found: list[Violation] = []
        if events:
            events.sort()
            for place, kind, j in events:
                view = self.views[self.key_book[int(kid[j])] if kind != _DEADLINE else j >> 32]
                view.cursor = place
                if kind == _DEADLINE:
                    deadline = self.deadlines[j & 0xFFFFFFFF]
                    for deadline_check in self.deadline_checks:
                        found.extend(deadline_check(deadline, view))
                    continue
                k = int(kid[j])
                prev = None
                if held[j] >= 0:
                    prev = _new(
                        Held,
                        (self.value(int(held[j]), int(held_version[j])), int(held_since_time[j]), int(held_since_offset[j])),
                    )
                if kind == _STEP:
                    mask = int(bits[j])
                    step = _new(
                        Step,
                        (
                            self.key_names[k],
                            self.key_bundles[k],
                            int(offset[j]),
                            int(time[j]),
                            prev,
                            self.value(int(value[j]), int(version[j])),
                            REASONS[int(reasons[j])],
                        ),
                    )
                    for i, step_check in enumerate(self.step_checks):
                        if mask >> i & 1:
                            found.extend(step_check(step, view))
                else:
                    assert prev is not None
                    dwell = _new(
                        Dwell,
                        (self.key_names[k], prev.value, prev.since_time, prev.since_offset, int(time[j]), int(offset[j])),
                    )
                    for dwell_check in self.dwell_checks[int(held_state[j])]:
                        found.extend(dwell_check(dwell, view))
        # what each key holds after the batch
        last = np.nonzero(np.append(first[1:], True))[0]
        keys = kid[last]
        taken = last_accepted[last]
        moved = taken >= start[last]
        moved_keys, moved_at = keys[moved], taken[moved]
        self.held_value[moved_keys] = value[moved_at]
        self.held_version[moved_keys] = version[moved_at]
        self.since_time[moved_keys] = since_time[moved_at]
        self.since_offset[moved_keys] = since_offset[moved_at]
        self.owned_at[keys] = owned_after[last]
        self.deleted_at[keys] = deleted_after[last]
        self.batch = None
        for view in self.views:
            view.cursor = None
        return found

    def _deleted_after(
        self,
        kid: np.ndarray[Any, Any],
        offset: np.ndarray[Any, Any],
        accepted: np.ndarray[Any, Any],
        tombstone: np.ndarray[Any, Any],
        deleted: np.ndarray[Any, Any],
        start: np.ndarray[Any, Any],
        index: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """The offset of each key's first accepted Deleted since its last tombstone, after each
        record (-1: none)."""
        n = len(kid)
        cleared = accepted & tombstone
        dropped = np.maximum.accumulate(np.where(cleared, index, -1))
        fresh = dropped < start  # no tombstone of the key in the batch yet: what was carried stands
        # segments of a key's records between its tombstones; the first Deleted in each
        begins = index == start
        begins[1:] |= cleared[:-1] & ~begins[1:]
        segment = np.cumsum(begins) - 1
        first = np.full(int(segment[-1]) + 1 if n else 0, n, dtype=np.int64)
        taken = np.nonzero(accepted & deleted)[0]
        np.minimum.at(first, segment[taken], taken)
        first_here = first[segment]
        found = np.where(first_here <= index, offset[np.minimum(first_here, n - 1)], -1)
        carried = self.deleted_at[kid]
        after = np.where(fresh & (carried >= 0), carried, found)
        result: np.ndarray[Any, Any] = np.where(cleared, -1, after)
        return result

    def _meets(
        self,
        condition: str,
        called: np.ndarray[Any, Any],
        kid: np.ndarray[Any, Any],
        order: np.ndarray[Any, Any],
        value: np.ndarray[Any, Any],
        offset: np.ndarray[Any, Any],
        start: np.ndarray[Any, Any],
        index: np.ndarray[Any, Any],
        before: np.ndarray[Any, Any],
        deleted_after: np.ndarray[Any, Any],
    ) -> np.ndarray[Any, Any]:
        """Whether each step meets a declared condition (:data:`~statechan.invariants.replay.NEEDS`),
        worked out for the steps ``called`` (the others: False)."""
        meets = np.zeros(len(kid), dtype=bool)
        chosen = np.nonzero(called)[0]
        if condition == "dst-unregistered":
            if self.registry.present:
                brokers = self.value_dst[np.maximum(value[chosen], 0)]
                meets[chosen] = ~self.registry.registered_many(brokers, offset[chosen])
        elif condition == "after-deleted":
            previous = np.where(chosen > start[chosen], deleted_after[np.maximum(chosen - 1, 0)], self.deleted_at[kid[chosen]])
            meets[chosen] = previous >= 0
        elif condition == "overlaps-active":
            meets[chosen] = self._overlaps_active(kid[chosen], order[chosen])
        else:
            raise ValueError(f"unknown step condition {condition!r}")
        return meets

    def _overlaps_active(self, kids: np.ndarray[Any, Any], places: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Whether another key overlapping each key is held in an active state at each place."""
        rows: list[int] = []
        others: list[int] = []
        at: list[int] = []
        crowded = np.zeros(len(kids), dtype=bool)
        for row, (k, place) in enumerate(zip(kids.tolist(), places.tolist(), strict=True)):
            overlaps = self.books[self.key_book[k]].overlaps
            if overlaps is None:
                crowded[row] = True  # no index kept: ask the check
                continue
            for other in overlaps[k]:
                rows.append(row)
                others.append(other)
                at.append(place)
        meets = crowded
        if rows:
            states = self._states_at(np.array(others, dtype=np.int64), np.array(at, dtype=np.int64))
            active_rows = np.array(rows, dtype=np.int64)[self.active_code[states]]
            meets[active_rows] = True
        return meets

    def _states_at(self, kids: np.ndarray[Any, Any], places: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """The state code each key holds just before each place of the batch (or after the batches
        so far, outside one)."""
        taken = self._taken_at(kids, places)
        carried = self.held_value[kids]
        carried_state = np.where(carried >= 0, self.value_state[np.maximum(carried, 0)], 0)
        batch = self.batch
        if batch is None:
            return carried_state
        states: np.ndarray[Any, Any] = np.where(taken >= 0, batch.state_after[np.maximum(taken, 0)], carried_state)
        return states

    def _last_at(self, kids: np.ndarray[Any, Any], places: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Each key's last record of the batch before each place (-1: none)."""
        batch = self.batch
        if batch is None:
            return np.full(len(kids), -1, dtype=np.int64)
        n = len(batch.kids)
        at = np.searchsorted(batch.sort_key, kids * (n + 1) + places) - 1
        ours = at >= 0
        ours[ours] = batch.kids[at[ours]] == kids[ours]
        result: np.ndarray[Any, Any] = np.where(ours, at, -1)
        return result

    def _taken_at(self, kids: np.ndarray[Any, Any], places: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        """Each key's last accepted record of the batch before each place (-1: none)."""
        last = self._last_at(kids, places)
        batch = self.batch
        if batch is None:
            return last
        taken = batch.last_accepted[np.maximum(last, 0)]
        result: np.ndarray[Any, Any] = np.where((last >= 0) & (taken >= batch.group_start[np.maximum(last, 0)]), taken, -1)
        return result

    def _deadline_events(self, kids: np.ndarray[Any, Any], times: np.ndarray[Any, Any]) -> list[tuple[int, int, int]]:
        """The deadlines each namespace's records of the batch pass (at the first record later
        than the deadline's due time, the namespace as it was before that record)."""
        books = np.array(self.key_book, dtype=np.int64)[kids]
        events: list[tuple[int, int, int]] = []
        deadlines = self.deadlines
        dues = np.array([d.due for d in deadlines], dtype=np.int64)
        latest = np.full(len(self.books), np.iinfo(np.int64).min, dtype=np.int64)
        np.maximum.at(latest, books, times)
        waiting = [b for b in np.unique(books).tolist() if self.books[b].next_deadline < len(deadlines)]
        passing = [b for b in waiting if dues[self.books[b].next_deadline] < latest[b]]
        if not passing:
            return events
        order = np.argsort(books, kind="stable")
        sorted_books = books[order]
        for b in passing:
            lo, hi = np.searchsorted(sorted_books, [b, b + 1])
            places = order[lo:hi]
            running = np.maximum.accumulate(times[places])
            book = self.books[b]
            i = book.next_deadline
            while i < len(deadlines):
                first = int(np.searchsorted(running, dues[i], side="right"))
                if first >= len(places):
                    break
                events.append((int(places[first]), _DEADLINE, b << 32 | i))
                i += 1
            book.next_deadline = i
        return events

    def finish(self, end_time: int) -> list[Violation]:
        """The trace ended at ``end_time``: every namespace's deadlines passed by then, and every
        state still held closed."""
        found: list[Violation] = []
        for b in sorted(range(len(self.books)), key=lambda b: self.books[b].name):
            book, view = self.books[b], self.views[b]
            view.cursor = None
            deadlines, i = self.deadlines, book.next_deadline
            while i < len(deadlines) and deadlines[i].due < end_time:
                for deadline_check in self.deadline_checks:
                    found.extend(deadline_check(deadlines[i], view))
                i += 1
            book.next_deadline = i
            for k in sorted(book.kids, key=self.key_names.__getitem__):
                vid = int(self.held_value[k])
                if vid < 0:
                    continue
                value = self.value(vid, int(self.held_version[k]))
                assert value is not None
                dwell = Dwell(self.key_names[k], value, int(self.since_time[k]), int(self.since_offset[k]), end_time, None)
                for dwell_check in self.dwell_checks[int(self.value_state[vid])]:
                    found.extend(dwell_check(dwell, view))
        return found


_STEP, _DWELL, _DEADLINE = 1, 2, 0
"""Event kinds, in the order they are shown at one record: the deadlines the record passes first
(before it, as :meth:`NamespaceReplay.offer` fires them), then its step, then the dwell it ends."""


def _kind(held: int, held_version: int, version: int, first_version: int | None) -> int:
    """How an offered version compares with the held one (:data:`FIRST` … :data:`GAP`), for one record."""
    if held < 0:
        return FIRST if first_version is None or version == first_version else FIRST_OTHER
    if held_version == LONG_MAX and version == LONG_MIN:
        return NEXT
    if held_version >= version:
        return STALE
    return NEXT if held_version == version - 1 else GAP


def _previous(accepted: np.ndarray[Any, Any], index: np.ndarray[Any, Any], start: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
    """For each record (sorted by key), the last accepted record of its key before it (-1: none)."""
    running = np.maximum.accumulate(np.where(accepted, index, -1))
    before = np.empty_like(running)
    before[0] = -1
    before[1:] = running[:-1]
    result: np.ndarray[Any, Any] = np.where(before >= start, before, -1)
    return result


class _View:
    """A namespace as it stood at a place of the batch being replayed (``cursor``; None: after
    the batches so far): what a record invariant reads (:class:`~statechan.invariants.replay.Namespace`)."""

    def __init__(self, replay: BatchReplay, book: int) -> None:
        self.replay = replay
        self.book = replay.books[book]
        self.cursor: int | None = None
        self.name = self.book.name
        self.settings = replay.settings
        self.registry = replay.registry
        self.active_states = replay.plan.active
        self.in_flight_states = replay.plan.in_flight
        self.held = _Keyed(self, self._held)
        self.bundles = _Keyed(self, self._bundle)
        self.owned_at = _Keyed(self, self._owned_at)
        self.deleted_at = _Keyed(self, self._deleted_at)
        self.active = _Active(self)

    def _places(self, kids: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.full(len(kids), self.cursor if self.cursor is not None else 0, dtype=np.int64)

    def _one(self, key: str) -> int:
        kid = self.replay.kids.get(key)
        if kid is None or self.replay.key_book[kid] != self.replay.book_ids[self.name]:
            raise KeyError(key)
        return kid

    def _held(self, kid: int) -> Held | None:
        replay = self.replay
        kids = np.array([kid], dtype=np.int64)
        taken = int(replay._taken_at(kids, self._places(kids))[0]) if self.cursor is not None else -1
        batch = replay.batch
        if taken >= 0 and batch is not None:
            vid = int(batch.values[taken])
            if vid < 0:
                return None
            value = replay.value(vid, int(batch.versions[taken]))
            return _new(Held, (value, int(batch.since_time[taken]), int(batch.since_offset[taken])))
        vid = int(replay.held_value[kid])
        if vid < 0:
            return None
        value = replay.value(vid, int(replay.held_version[kid]))
        return _new(Held, (value, int(replay.since_time[kid]), int(replay.since_offset[kid])))

    def _bundle(self, kid: int) -> Bundle | None:
        return self.replay.key_bundles[kid]

    def _after(self, kid: int, column: str) -> int:
        replay = self.replay
        kids = np.array([kid], dtype=np.int64)
        last = int(replay._last_at(kids, self._places(kids))[0]) if self.cursor is not None else -1
        batch = replay.batch
        if last >= 0 and batch is not None:
            return int(getattr(batch, column)[last])
        return int(getattr(replay, column)[kid])

    def _owned_at(self, kid: int) -> int | None:
        found = self._after(kid, "owned_after" if self.cursor is not None else "owned_at")
        return None if found < 0 else found

    def _deleted_at(self, kid: int) -> int | None:
        found = self._after(kid, "deleted_after" if self.cursor is not None else "deleted_at")
        return None if found < 0 else found

    def active_keys(self) -> list[str]:
        replay = self.replay
        kids = np.array(self.book.kids, dtype=np.int64)
        states = replay._states_at(kids, self._places(kids)) if self.cursor is not None else replay._states_at(kids, kids)
        return [replay.key_names[k] for k in kids[replay.active_code[states]].tolist()]

    def overlapping(self, key: str) -> list[str]:
        kid = self._one(key)
        names = self.replay.key_names
        overlaps = self.book.overlaps
        if overlaps is not None:
            return [names[k] for k in overlaps[kid]]
        bundle = self.replay.key_bundles[kid]
        return [
            names[k]
            for k, lower, upper in zip(self.book.kids, self.book.lowers, self.book.uppers, strict=True)
            if lower < bundle.upper and bundle.lower < upper and k != kid
        ]


class _Keyed(Mapping[str, T]):
    """One of a namespace's per-key facts at the view's place, looked up a key at a time."""

    def __init__(self, view: _View, get: Callable[[int], T | None]) -> None:
        self.view, self.get_one = view, get

    def __getitem__(self, key: str) -> T:
        found = self.get_one(self.view._one(key))
        if found is None:
            raise KeyError(key)
        return found

    def __iter__(self) -> Iterator[str]:
        names = self.view.replay.key_names
        return iter([names[k] for k in self.view.book.kids if self.get_one(k) is not None])

    def __len__(self) -> int:
        return sum(1 for _ in self)


class _Active(Collection[str]):
    """The keys of a namespace held in an active state at the view's place."""

    def __init__(self, view: _View) -> None:
        self.view = view

    def __contains__(self, key: object) -> bool:
        replay = self.view.replay
        kid = replay.kids.get(key) if isinstance(key, str) else None
        if kid is None or replay.key_book[kid] != replay.book_ids[self.view.name]:
            return False
        kids = np.array([kid], dtype=np.int64)
        return bool(replay.active_code[replay._states_at(kids, self.view._places(kids))[0]])

    def __iter__(self) -> Iterator[str]:
        return iter(self.view.active_keys())

    def __len__(self) -> int:
        return len(self.view.active_keys())
