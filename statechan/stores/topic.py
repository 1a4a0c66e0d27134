"""An in-process Pulsar topic: an append-only keyed log, readers with their own positions, and
strategic compaction that keeps, per key, the value the conflict resolver's fold produces.

Nothing here moves on its own: publishing appends at once; a reader advances one message per
call, so the caller (a test, the simulator, the model checker) chooses who sees what when.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pydantic

from statechan.clock import Clock, ManualClock
from statechan.model import ProtocolModel
from statechan.resolver import offer, rules_for
from statechan.states import StorageType
from statechan.values import ServiceUnitStateData

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
        rules = rules_for(StorageType.SystemTopic, model)
        kept: dict[str, Message | None] = {}
        tombstones: dict[str, Message] = {}
        for m in self._compacted:  # in offset order: a key's kept tombstone comes before its value
            kept[m.key] = None if m.is_tombstone else m
            if m.is_tombstone:
                tombstones[m.key] = m
        malformed = 0
        for message in self._log[self.horizon : horizon]:
            try:
                value = message.value()
            except MalformedValueError:
                malformed += 1
                continue
            held_message = kept.get(message.key)
            held = held_message.value() if held_message is not None else None
            _, verdict = offer(rules, held, value)
            if verdict.accepted:
                kept[message.key] = None if value is None else message
                if value is None and keep_tombstones:
                    tombstones[message.key] = message
        live = [m for m in kept.values() if m is not None]
        survivors = sorted([*live, *tombstones.values()], key=lambda m: m.offset)
        deleted = sum(1 for m in kept.values() if m is None)
        dropped = horizon - len(survivors)
        self._compacted = survivors
        self._compacted_offsets = [m.offset for m in survivors]
        self.horizon = horizon
        self._bytes_since_horizon = sum(len(m.payload or b"") + len(m.key) for m in self._log[horizon:])
        self.compactions += 1
        return CompactionReport(horizon, len(live), dropped, deleted, malformed)

    def reader(self, name: str = "reader", read_compacted: bool = True) -> Reader:
        """A reader at the earliest position; ``read_compacted`` as Pulsar's table views use."""
        return Reader(self, name, read_compacted)

    def _next_compacted(self, position: int) -> Message | None:
        i = bisect.bisect_left(self._compacted_offsets, position)
        return self._compacted[i] if i < len(self._compacted) else None


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
        if self.read_compacted and self.position < topic.horizon and topic._next_compacted(self.position) is None:
            return topic.horizon < topic.end
        return self.position < topic.end

    @property
    def lag(self) -> int:
        """Original-log offsets not yet passed (compaction may let the reader skip some)."""
        return self.topic.end - self.position

    def read_next(self) -> Message | None:
        """The next message, or ``None`` at the end of the log."""
        topic = self.topic
        if self.read_compacted and self.position < topic.horizon:
            message = topic._next_compacted(self.position)
            if message is not None:
                self.position = message.offset + 1
                return message
            self.position = topic.horizon
        if self.position < topic.end:
            message = topic._log[self.position]
            self.position += 1
            return message
        return None

    def read_all(self) -> Iterable[Message]:
        while (message := self.read_next()) is not None:
            yield message

    def seek(self, position: int) -> None:
        if not 0 <= position <= self.topic.end:
            raise ValueError(f"position {position} is outside [0, {self.topic.end}]")
        self.position = position
