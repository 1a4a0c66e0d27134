"""The conflict resolver: Pulsar's ``ServiceUnitStateDataConflictResolver.shouldKeepLeft``.

It decides whether a reader (system topic), the compactor, or a compare-and-set write
(metadata store) takes a new value over the one it holds. This is the only implementation;
the rules it applies (table, broker checks, version policy) come from the protocol model.
"""

from __future__ import annotations

import enum
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from statechan.model import BrokerCheck, ProtocolModel, StorageRules, load_model
from statechan.states import ServiceUnitState, StorageType
from statechan.values import LONG_MAX, LONG_MIN, ServiceUnitStateData, ValueView, is_blank

_Init = ServiceUnitState.Init


class Reason(enum.Enum):
    """Why the resolver took or refused a value."""

    ACCEPTED = "accepted"
    """A valid transition with consecutive versions and consistent brokers."""
    ACCEPTED_TOMBSTONE = "accepted-tombstone"
    """A null value (delete); never refused."""
    ACCEPTED_VERSION_GAP = "accepted-version-gap"
    """System topic: a jump of two or more versions, taken as the fast-forward after compaction."""
    ACCEPTED_FORCED = "accepted-forced"
    """``force=true``: the version gate passed; table and broker checks skipped."""
    ACCEPTED_FIRST_WRITE = "accepted-first-write"
    """Metadata store: the first value of a key, at the first version; the table is not consulted."""
    STALE_VERSION = "stale-version"
    """The new version is not above the held one (a duplicate or a lost race)."""
    VERSION_GAP_REJECTED = "version-gap-rejected"
    """Metadata store (or a store whose model refuses gaps): a version jump of two or more."""
    FIRST_WRITE_NOT_V1 = "first-write-not-v1"
    """Metadata store: the first value of a key is not at the first version."""
    INVALID_TRANSITION = "invalid-transition"
    """The (held state, new state) pair is not in the storage's table."""
    BROKER_MISMATCH = "broker-mismatch"
    """The transition is valid but the brokers break one of its checks."""

    __hash__ = object.__hash__

    @property
    def accepted(self) -> bool:
        return self in _ACCEPTING

    def __str__(self) -> str:
        return self.value


_ACCEPTING = frozenset(
    {
        Reason.ACCEPTED,
        Reason.ACCEPTED_TOMBSTONE,
        Reason.ACCEPTED_VERSION_GAP,
        Reason.ACCEPTED_FORCED,
        Reason.ACCEPTED_FIRST_WRITE,
    }
)


@dataclass(frozen=True, slots=True)
class Verdict:
    """The resolver's decision: ``reason`` says why; ``check`` names a failed broker check."""

    reason: Reason
    check: BrokerCheck | None = None
    accepted: bool = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "accepted", self.reason in _ACCEPTING)

    @property
    def rejected(self) -> bool:
        return not self.accepted

    def __str__(self) -> str:
        """``accepted``, ``accepted-forced``, ``rejected: broker-mismatch (same-dst)``."""
        if self.accepted:
            return self.reason.value
        detail = self.reason.value if self.check is None else f"{self.reason.value} ({self.check.value})"
        return f"rejected: {detail}"


_VERDICT = {reason: Verdict(reason) for reason in Reason}
_MISMATCH = {check: Verdict(Reason.BROKER_MISMATCH, check) for check in BrokerCheck}
_ACCEPTED = _VERDICT[Reason.ACCEPTED]
_ACCEPTED_TOMBSTONE = _VERDICT[Reason.ACCEPTED_TOMBSTONE]
_ACCEPTED_VERSION_GAP = _VERDICT[Reason.ACCEPTED_VERSION_GAP]
_ACCEPTED_FORCED = _VERDICT[Reason.ACCEPTED_FORCED]
_ACCEPTED_FIRST_WRITE = _VERDICT[Reason.ACCEPTED_FIRST_WRITE]
_STALE_VERSION = _VERDICT[Reason.STALE_VERSION]
_VERSION_GAP_REJECTED = _VERDICT[Reason.VERSION_GAP_REJECTED]
_FIRST_WRITE_NOT_V1 = _VERDICT[Reason.FIRST_WRITE_NOT_V1]
_INVALID_TRANSITION = _VERDICT[Reason.INVALID_TRANSITION]


_HOLDS: dict[BrokerCheck, Callable[[ValueView, ValueView], bool]] = {
    BrokerCheck.SAME_DST: lambda prev, new: prev.dst_broker == new.dst_broker,
    BrokerCheck.SAME_SRC: lambda prev, new: prev.source_broker == new.source_broker,
    BrokerCheck.SRC_IS_PREV_DST: lambda prev, new: prev.dst_broker == new.source_broker,
    BrokerCheck.DST_NOT_PREV_DST: lambda prev, new: prev.dst_broker != new.dst_broker,
    BrokerCheck.DST_BLANK: lambda _, new: is_blank(new.dst_broker),
    BrokerCheck.DST_NONBLANK: lambda _, new: not is_blank(new.dst_broker),
    BrokerCheck.SRC_BLANK: lambda _, new: is_blank(new.source_broker),
    BrokerCheck.SRC_NONBLANK: lambda _, new: not is_blank(new.source_broker),
}
"""Each broker check as a predicate of (held, new): one lookup, no chain of comparisons (the
resolver runs millions of times in an audit)."""


if set(_HOLDS) != set(BrokerCheck):  # a check added to the model needs its predicate here
    raise ImportError(f"no predicate for broker checks {sorted(set(BrokerCheck) - set(_HOLDS), key=str)}")


_NO_PREV = ServiceUnitStateData.model_construct(state=ServiceUnitState.Init)
"""Stands in for a missing previous value in broker checks (its brokers are null)."""


def decide(
    rules: StorageRules,
    prev: ValueView | None,
    new: ValueView | None,
    check_brokers: bool = True,
) -> Verdict:
    """The resolver itself, on compiled rules (see :func:`rules_for`); stores call this directly."""
    if new is None:
        return _ACCEPTED_TOMBSTONE
    if rules.versioned:
        if prev is not None:
            held, offered = prev.version_id, new.version_id
            if not (held == LONG_MAX and offered == LONG_MIN):
                if held >= offered:
                    return _STALE_VERSION
                if held < offered - 1:
                    if rules.gap_accepted:
                        return _ACCEPTED_VERSION_GAP
                    return _VERSION_GAP_REJECTED
        elif rules.first_write_version is not None:
            if new.version_id == rules.first_write_version:
                return _ACCEPTED_FIRST_WRITE
            return _FIRST_WRITE_NOT_V1
    if new.force and rules.force:
        return _ACCEPTED_FORCED
    checks = rules.edges.get((_Init if prev is None else prev.state, new.state))
    if checks is None:
        return _INVALID_TRANSITION
    if check_brokers and checks:
        held_value: ValueView = _NO_PREV if prev is None else prev
        for check in checks:
            if not _HOLDS[check](held_value, new):
                return _MISMATCH[check]
    return _ACCEPTED


def _rules_for(storage: StorageType, model: str | Path | ProtocolModel | None) -> StorageRules:
    if not isinstance(storage, StorageType):
        raise TypeError(f"storage must be a StorageType, not {storage!r}")
    return load_model(model).rules(storage)


_DEFAULT_RULES = {storage: _rules_for(storage, None) for storage in StorageType}


def rules_for(storage: StorageType, model: str | Path | ProtocolModel | None = None) -> StorageRules:
    """The compiled rules the resolver applies (the default model's are cached)."""
    if model is None:
        rules = _DEFAULT_RULES.get(storage)
        if rules is not None:
            return rules
    return _rules_for(storage, model)


def resolve(
    prev: ServiceUnitStateData | None,
    new: ServiceUnitStateData | None,
    storage: StorageType = StorageType.SystemTopic,
    check_brokers: bool = True,
    model: str | Path | ProtocolModel | None = None,
) -> Verdict:
    """Decide whether ``new`` replaces ``prev`` (a held value; ``None`` = no record / Init).

    Pulsar's steps, in order: a tombstone is always taken; the version gate (with Java's
    ``Long`` wrap-around, and a gap policy per storage); the metadata store's first-write rule;
    ``force``; the storage's transition table; the transition's broker checks.
    """
    return decide(rules_for(storage, model), prev, new, check_brokers)


def should_reject(
    prev: ServiceUnitStateData | None,
    new: ServiceUnitStateData | None,
    storage: StorageType = StorageType.SystemTopic,
    check_brokers: bool = True,
    model: str | Path | ProtocolModel | None = None,
) -> bool:
    """Pulsar's ``shouldKeepLeft(prev, new)``: true keeps ``prev`` and rejects ``new``."""
    return not decide(rules_for(storage, model), prev, new, check_brokers).accepted


Held = TypeVar("Held", bound=ValueView)
"""A value as its reader keeps it: a :class:`ServiceUnitStateData`, or a lighter :class:`ValueView`."""


def offer(
    rules: StorageRules, held: Held | None, value: Held | None, check_brokers: bool = True
) -> tuple[Held | None, Verdict]:
    """One step of a reader's fold: what it holds after ``value`` is offered to ``held`` (None:
    nothing, or a tombstone), and the resolver's verdict. Every fold over a key's records is made
    of these steps (:func:`offers`, :func:`settle`)."""
    verdict = decide(rules, held, value, check_brokers)
    return (value if verdict.accepted else held), verdict


def offers(
    rules: StorageRules, values: Iterable[Held | None], start: Held | None = None
) -> Iterator[tuple[Held | None, Verdict]]:
    """The fold of ``values`` in order, from ``start``, a step at a time: after each value, what
    the reader holds and the verdict on it (a reader that needs to see each step: the history
    invariants, ``traces show``)."""
    held = start
    for value in values:
        held, verdict = offer(rules, held, value)
        yield held, verdict


def settle(rules: StorageRules, values: Iterable[Held | None], start: Held | None = None) -> Held | None:
    """The value a reader holds after offering ``values`` in order, starting from ``start`` (the
    fold of :func:`offers`, its last step)."""
    last = deque(offers(rules, values, start), maxlen=1)
    return last[0][0] if last else start


def fold(
    values: Iterable[ServiceUnitStateData | None],
    storage: StorageType = StorageType.SystemTopic,
    start: ServiceUnitStateData | None = None,
    model: str | Path | ProtocolModel | None = None,
) -> ServiceUnitStateData | None:
    """The value a reader holds after offering ``values`` in order, starting from ``start``: the
    fold on ``storage``'s rules (:func:`settle`)."""
    return settle(rules_for(storage, model), values, start)
