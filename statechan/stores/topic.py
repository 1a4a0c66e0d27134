"""An in-process Pulsar topic: an append-only keyed log, readers with their own positions, and
strategic compaction that keeps, per key, the value the conflict resolver's fold produces.

Nothing here moves on its own: publishing appends at once; a reader advances one message per
call, so the caller (a test, the simulator, the model checker) chooses who sees what when.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import NamedTuple, TypeVar

import pydantic

from statechan.clock import Clock, ManualClock
from statechan.model import ProtocolModel, StorageRules
from statechan.resolver import decide, rules_for
from statechan.states import StorageType
from statechan.values import ServiceUnitStateData, ValueView

CHANNEL_TOPIC = "persistent://pulsar/system/loadbalancer-service-unit-state"
COMPACTION_THRESHOLD = 5 * 1024 * 1024
"""The channel topic's compaction threshold in bytes (5 MiB, asserted by Pulsar's channel test)."""

_UNDECODED = object()


class MalformedValueError(ValueError):
    """A message whose payload is not a Pulsar ``ServiceUnitStateData`` JSON value."""

    def __init__(self, message_id: str, key: str, problem: str) -> None:
        super().__init__(f"message {message_id} (key {key!r}): {problem}")
        self.message_id = message_id
        self.key = key
        self.problem = problem


@dataclass(frozen=True, order=True, slots=True)
class MessageId:
    """Pulsar's ``ledgerId:entryId``; here the ledger is fixed and the entry is the offset."""

    ledger: int
    entry: int

    def __str__(self) -> str:
        return f"{self.ledger}:{self.entry}"


@dataclass(slots=True, eq=False)
class Message:
    """One message of the log. ``payload`` is the JSON bytes; ``None`` (or empty) is a tombstone."""

    offset: int
    key: str
    payload: bytes | None
    publish_time: int
    producer: str | None
    ledger: int = 1
    _value: object = field(default=_UNDECODED, repr=False)

    @property
    def message_id(self) -> MessageId:
        return MessageId(self.ledger, self.offset)

    @property
    def is_tombstone(self) -> bool:
        return not self.payload

    def value(self) -> ServiceUnitStateData | None:
        """The decoded value (``None`` for a tombstone); :class:`MalformedValueError` if it cannot be."""
        decoded = self._value
        if decoded is _UNDECODED:
            if not self.payload:
                decoded = None
            else:
                try:
                    decoded = ServiceUnitStateData.model_validate_json(self.payload)
                except pydantic.ValidationError as exc:
                    problems = "; ".join(
                        f"{'.'.join(str(p) for p in e['loc']) or 'value'}: {e['msg']}" for e in exc.errors()
                    )
                    decoded = MalformedValueError(str(self.message_id), self.key, problems)
            self._value = decoded
        if isinstance(decoded, MalformedValueError):
            raise decoded
        return decoded  # type: ignore[return-value]


@dataclass(frozen=True)
class CompactionReport:
    """What one compaction did: its horizon, how many keys it kept, and what it dropped."""

    horizon: int
    kept: int
    dropped_messages: int
    deleted_keys: int
    malformed: int


V = TypeVar("V", bound=ValueView)


class Compacted(NamedTuple):
    """What one strategic compaction keeps: the offsets of the surviving messages, in order, how
    many keys hold a value and how many ended deleted."""

    survivors: tuple[int, ...]
    live: int
    deleted: int


def compaction(
    kept_before: Iterable[tuple[int, str, V | None]],
    messages: Iterable[tuple[int, str, V | None]],
    rules: StorageRules,
    keep_tombstones: bool = False,
) -> Compacted:
    """Strategic compaction, the one implementation (the library's :class:`Topic` and the cluster
    protocol's topic both call it): each key's last kept message (``kept_before``, the previous
    snapshot as (offset, key, value) in offset order) is offered every later message of the key
    (``messages``, well-formed ones only), and the message holding the fold's result survives. A
    key whose fold ends in a tombstone is dropped, as Pulsar's compactor drops it; with
    ``keep_tombstones`` (report 01's fix) each key keeps its last tombstone too, at its offset."""
    kept: dict[str, tuple[int, V] | None] = {}
    tombstones: dict[str, int] = {}
    for offset, key, value in kept_before:  # in offset order: a key's kept tombstone comes before its value
        kept[key] = None if value is None else (offset, value)
        if value is None:
            tombstones[key] = offset
    for offset, key, value in messages:
        held = kept.get(key)
        verdict = decide(rules, None if held is None else held[1], value)
        if verdict.accepted:
            kept[key] = None if value is None else (offset, value)
            if value is None and keep_tombstones:
                tombstones[key] = offset
    live = [held[0] for held in kept.values() if held is not None]
    survivors = tuple(sorted([*live, *tombstones.values()]))
    return Compacted(survivors, len(live), sum(1 for held in kept.values() if held is None))


def next_offset(position: int, horizon: int, compacted: Sequence[int], end: int) -> int | None:
    """The offset a read-compacted reader at ``position`` reads next (None: nothing left): behind
    the horizon, the next message of the compacted snapshot (``compacted``: its offsets), skipping
    what compaction dropped (the fast-forward of PR #20110); past it, the next message of the log."""
    if position < horizon:
        i = bisect.bisect_left(compacted, position)
        if i < len(compacted):
            return compacted[i]
        position = horizon
    return position if position < end else None


class Topic:
    """The channel topic. ``publish`` never checks anything: readers and compaction judge."""

    def __init__(self, name: str = CHANNEL_TOPIC, clock: Clock | None = None) -> None:
        self.name = name
        self.clock: Clock = clock if clock is not None else ManualClock()
        self._log: list[Message] = []
        self._compacted: list[Message] = []
        self._compacted_offsets: list[int] = []
        self.horizon = 0
        self.compaction_threshold: int = COMPACTION_THRESHOLD
        self._bytes_since_horizon = 0
        self.compactions = 0
        self.observers: list[Callable[[Message], None]] = []
        """Called with every appended message (the simulator's trace)."""

    def __len__(self) -> int:
        return len(self._log)

    def __iter__(self) -> Iterator[Message]:
        return iter(self._log)

    @property
    def end(self) -> int:
        """The offset the next message will get."""
        return len(self._log)

    def message(self, offset: int) -> Message:
        return self._log[offset]

    def publish(self, key: str, value: ServiceUnitStateData | None, producer: str | None = None) -> Message:
        """Append ``value`` (``None`` = tombstone) as its Pulsar JSON; returns the message."""
        payload = None if value is None else value.to_json().encode()
        message = Message(len(self._log), key, payload, self.clock.now_ms(), producer, _value=value)
        self._append(message)
        return message

    def publish_raw(
        self, key: str, payload: bytes | None, producer: str | None = None, publish_time: int | None = None
    ) -> Message:
        """Append raw bytes as a message (a captured record, or a malformed one); decoded on first read."""
        when = self.clock.now_ms() if publish_time is None else publish_time
        message = Message(len(self._log), key, payload or None, when, producer)
        self._append(message)
        return message

    def _append(self, message: Message) -> None:
        self._log.append(message)
        self._bytes_since_horizon += len(message.payload or b"") + len(message.key)
        for observer in self.observers:
            observer(message)

    @property
    def compacted(self) -> tuple[Message, ...]:
        """The compacted snapshot of ``[0, horizon)``: one message per live key (and each key's last
        tombstone, when compaction keeps them), in offset order."""
        return tuple(self._compacted)

    @property
    def compaction_enabled(self) -> bool:
        return self.compaction_threshold > 0

    def needs_compaction(self) -> bool:
        """Whether the bytes published since the last horizon reached the threshold (0 disables)."""
        return self.compaction_enabled and self._bytes_since_horizon >= self.compaction_threshold

    def compact(
        self,
        until: int | None = None,
        model: str | Path | ProtocolModel | None = None,
        keep_tombstones: bool = False,
    ) -> CompactionReport:
        """Strategic compaction of ``[0, until)`` (default: the whole log) with the resolver.

        Per key, the last compacted message is offered the new messages in order, and the
        message holding the fold's result is kept; a key whose fold ends in a tombstone is
        dropped, as Pulsar's compactor drops it (finding 1: a reader behind the horizon then never
        learns of the deletion). ``keep_tombstones`` is report 01's fix: each key keeps its last
        tombstone in the snapshot, at its offset, whether or not the key was written again after
        it (for good here; Pulsar would drop it after a retention period), so a reader that held an
        earlier lifetime applies the deletion before the next lifetime's value. Malformed messages
        are skipped, as a reader skips them.
        """
        horizon = self.end if until is None else until
        if not self.horizon <= horizon <= self.end:
            raise ValueError(f"compaction horizon {horizon} must be within [{self.horizon}, {self.end}]")
        malformed = 0

        def values() -> Iterator[tuple[int, str, ServiceUnitStateData | None]]:
            nonlocal malformed
            for message in self._log[self.horizon : horizon]:
                try:
                    yield message.offset, message.key, message.value()
                except MalformedValueError:
                    malformed += 1

        kept_before = [(m.offset, m.key, m.value()) for m in self._compacted]
        done = compaction(kept_before, values(), rules_for(StorageType.SystemTopic, model), keep_tombstones)
        self._compacted = [self._log[offset] for offset in done.survivors]
        self._compacted_offsets = list(done.survivors)
        self.horizon = horizon
        self._bytes_since_horizon = sum(len(m.payload or b"") + len(m.key) for m in self._log[horizon:])
        self.compactions += 1
        return CompactionReport(horizon, done.live, horizon - len(done.survivors), done.deleted, malformed)

    def reader(self, name: str = "reader", read_compacted: bool = True) -> Reader:
        """A reader at the earliest position; ``read_compacted`` as Pulsar's table views use."""
        return Reader(self, name, read_compacted)


class Reader:
    """A cursor on the topic. A read-compacted reader behind the horizon is served from the
    compacted snapshot (skipping superseded messages: the fast-forward of PR #20110)."""

    def __init__(self, topic: Topic, name: str, read_compacted: bool) -> None:
        self.topic = topic
        self.name = name
        self.read_compacted = read_compacted
        self.position = 0

    def __repr__(self) -> str:
        return f"Reader({self.name!r} at {self.position} of {self.topic.end})"

    def has_next(self) -> bool:
        """Whether ``read_next`` would return a message (behind the horizon, the compacted
        snapshot may have nothing left for this reader while the horizon is the end)."""
        topic = self.topic
        if not self.read_compacted:
            return self.position < topic.end
        return next_offset(self.position, topic.horizon, topic._compacted_offsets, topic.end) is not None

    @property
    def lag(self) -> int:
        """Original-log offsets not yet passed (compaction may let the reader skip some)."""
        return self.topic.end - self.position

    def read_next(self) -> Message | None:
        """The next message, or ``None`` at the end of the log."""
        topic = self.topic
        if self.read_compacted:
            offset = next_offset(self.position, topic.horizon, topic._compacted_offsets, topic.end)
        else:
            offset = self.position if self.position < topic.end else None
        if offset is None:
            self.position = max(self.position, min(topic.horizon, topic.end)) if self.read_compacted else self.position
            return None
        self.position = offset + 1
        return topic._log[offset]

    def read_all(self) -> Iterable[Message]:
        while (message := self.read_next()) is not None:
            yield message

    def seek(self, position: int) -> None:
        if not 0 <= position <= self.topic.end:
            raise ValueError(f"position {position} is outside [0, {self.topic.end}]")
        self.position = position
