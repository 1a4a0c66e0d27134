"""One bundle's story in a trace: its records in offset order, each with the resolver's verdict and
what a reader holds after it — the view an operator needs once the auditor has named a key and an
offset (``statechan traces show``).

The verdicts come from the library's resolver (:func:`statechan.resolver.offer`), replayed from
each key's first record exactly as the auditor replays it, so a record the audit counted as
refused shows here with the same reason. Registry and leader records are interleaved for context:
they are what ``owner-registered`` and ``orphan-cleaned`` read.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from statechan.keys import BadKeyError, parse_key
from statechan.resolver import Verdict, offer, rules_for
from statechan.states import StorageType
from statechan.traces import (
    AnyRecord,
    BadLine,
    ChannelRecord,
    LeaderRecord,
    RegistryRecord,
    ViewRecord,
    read_lines,
    trace_files,
)
from statechan.values import ServiceUnitStateData


@dataclass(frozen=True)
class Selection:
    """Which keys to follow: named ``keys``, every key of a ``namespace`` (``tenant/ns``), or both."""

    keys: frozenset[str] = frozenset()
    namespace: str | None = None
    views: bool = False

    def __post_init__(self) -> None:
        if not self.keys and self.namespace is None:
            raise ValueError("name a key (--key) or a namespace (--namespace) to show")
        for key in self.keys:
            try:
                parse_key(key)
            except BadKeyError as exc:
                raise ValueError(f"--key: {exc}") from None
        if self.namespace is not None and self.namespace.count("/") != 1:
            raise ValueError(f"--namespace: expected tenant/namespace, not {self.namespace!r}")

    def wants(self, key: str) -> bool:
        return key in self.keys or (self.namespace is not None and key.startswith(self.namespace + "/"))

    def arrow_mask(self, batch: Any) -> Any:
        """The rows of an Arrow batch of the flat schema that may be selected: the keys named, the
        namespace's keys, and the registry and leader records (context)."""
        import pyarrow as pa
        import pyarrow.compute as pc

        keys = batch.column("key")
        wanted = pc.is_in(keys, value_set=pa.array(sorted(self.keys), pa.string()))
        if self.namespace is not None:
            wanted = pc.or_(wanted, pc.starts_with(keys, self.namespace + "/"))
        context = pc.is_in(batch.column("kind"), value_set=pa.array(["registry", "leader"]))
        return pc.or_(pc.fill_null(wanted, False), context)

    def might_want(self, text: str) -> bool:
        """A cheap look at a raw JSON line before decoding it (an escaped ``\\/`` is decoded to be sure)."""
        if "registry" in text or "leader" in text or "\\/" in text:
            return True
        if self.namespace is not None and self.namespace + "/" in text:
            return True
        return any(key in text for key in self.keys)


@dataclass(frozen=True)
class Entry:
    """One line of a story: a record, and for a channel record the verdict and the key's value after it."""

    record: AnyRecord
    verdict: Verdict | None = None
    held: ServiceUnitStateData | None = None

    @property
    def offset(self) -> int:
        return self.record.offset

    @property
    def time(self) -> int:
        return self.record.publish_time if isinstance(self.record, ChannelRecord) else self.record.time

    def to_json(self) -> dict[str, Any]:
        """The record as a trace line has it, plus ``verdict`` and ``held`` for a channel record."""
        data: dict[str, Any] = self.record.model_dump(mode="json", by_alias=True)
        if self.verdict is not None:
            data["verdict"] = {"accepted": self.verdict.accepted, "reason": self.verdict.reason.value}
            if self.verdict.check is not None:
                data["verdict"]["check"] = self.verdict.check.value
            data["held"] = None if self.held is None else self.held.model_dump(mode="json", by_alias=True)
        return data


@dataclass
class Story:
    """The entries of the selected keys, in offset order, and what reading left out."""

    entries: list[Entry] = field(default_factory=list)
    keys: list[str] = field(default_factory=list)
    malformed: int = 0
    records: int = 0

    def around(self, offset: int, context: int) -> list[Entry]:
        """``context`` entries either side of the first at or after ``offset`` (the last one if none is)."""
        if not self.entries:
            return []
        at = next((i for i, e in enumerate(self.entries) if e.offset >= offset), len(self.entries) - 1)
        return self.entries[max(0, at - context) : at + context + 1]


def story(
    paths: Sequence[str | Path],
    selection: Selection,
    storage: StorageType = StorageType.SystemTopic,
    model: str | None = None,
) -> Story:
    """Read the traces, keep the selected keys' records, and replay each key from its first record
    through the resolver. The context kept around them: the registry records of the brokers those
    records name (each one's last before the first record, and all after it) and the leader records
    over their span (and the leader at its start)."""
    kept: list[tuple[int, int, int, AnyRecord]] = []
    result = Story()
    for source, path in enumerate(trace_files(paths)):
        for line, record in _read(path, selection, result):
            kept.append((record.offset, source, line, record))
    kept.sort(key=lambda item: item[:3])
    records = [record for *_, record in kept]
    channel = [r for r in records if isinstance(r, ChannelRecord)]
    if not channel:
        return result
    first, last = channel[0].offset, channel[-1].offset
    named = {b for r in channel for b in _brokers(r)}
    start = next(i for i, r in enumerate(records) if r.offset >= first)
    before: dict[str, AnyRecord] = {}  # each context's last record before the first channel record
    for record in records[:start]:
        if isinstance(record, RegistryRecord) and record.broker in named:
            before[record.broker] = record
        elif isinstance(record, LeaderRecord):
            before[""] = record
    result.entries.extend(Entry(r) for r in sorted(before.values(), key=lambda r: r.offset))
    rules = rules_for(storage, model)
    held: dict[str, ServiceUnitStateData | None] = {}
    for record in records[start:]:
        if isinstance(record, ChannelRecord):
            prior = held.get(record.key)
            if record.key not in held:
                result.keys.append(record.key)
            after, verdict = offer(rules, prior, record.value)
            held[record.key] = after
            result.entries.append(Entry(record, verdict, after))
        elif isinstance(record, ViewRecord) or (
            record.broker in named if isinstance(record, RegistryRecord) else record.offset <= last
        ):
            result.entries.append(Entry(record))
    return result


def _brokers(record: ChannelRecord) -> Iterator[str]:
    if record.producer:
        yield record.producer
    value = record.value
    if value is not None:
        yield from (b for b in (value.dst_broker, value.source_broker) if b)


def _read(path: str | Path, selection: Selection, result: Story) -> Iterator[tuple[int, AnyRecord]]:
    """The records of one trace file that may be selected (the rest only counted, unread: a trace
    may hold millions), through the one reader; a malformed one among them is counted."""

    def skipped(count: int) -> None:
        result.records += count

    for line, record in read_lines(path, selection, skipped):
        result.records += 1
        if isinstance(record, BadLine):
            result.malformed += 1
        elif _selected(record, selection):
            yield line, record


def _selected(record: AnyRecord, selection: Selection) -> bool:
    if isinstance(record, RegistryRecord | LeaderRecord):
        return True
    if isinstance(record, ViewRecord):
        return selection.views and selection.wants(record.key)
    return selection.wants(record.key)
