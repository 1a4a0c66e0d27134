"""The trace auditor: replay recorded channel records against the protocol and report every violation.

Records are partitioned by namespace (every record invariant is namespace-local), sorted by
offset within each, and replayed through the library's resolver and the property catalogue's
record invariants (:mod:`statechan.invariants.replay`); with view records (or ``--history``) each
bundle's records also go through the catalogue's history invariants. Nothing is restated here.
Two engines share the per-record code: ``spark`` (PySpark, ``local[*]`` by default, any master
for a cluster) and ``local`` (one Python process, for small traces and as the benchmark's baseline).

Bad input never stops an audit: each malformed line or row is counted, written with its file,
line and error to a quarantine file next to the report, and the rest is audited.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import json
import os
import pickle
import re
import sys
import tempfile
import time
import zlib
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from statechan.invariants.catalogue import (
    CATALOGUE,
    COLUMN_SHORTCUTS,
    HistoryRecord,
    HistoryStream,
    history_folds,
    history_ids,
    history_record,
    record_checks,
    record_ids,
)
from statechan.invariants.replay import (
    CLEANUP_TIMEOUT_MS,
    IN_FLIGHT_TIMEOUT_MS,
    TOMBSTONE_TIMEOUT_MS,
    ColumnResolver,
    Dispatch,
    NamespaceReplay,
    Registry,
    ReplaySettings,
    StepColumns,
    TraceReplay,
    Value,
    _new,
    stable_order,
)
from statechan.keys import BadKeyError, Bundle, parse_key
from statechan.model import DEFAULT_MODEL
from statechan.resolver import Reason, rules_for
from statechan.states import ServiceUnitState, StorageType
from statechan.traces import (
    PARQUET_BATCH_ROWS,
    PARQUET_COLUMNS,
    AnyRecord,
    BadLine,
    LeaderRecord,
    RegistryRecord,
    arrow_schema,
    atomic_output,
    check_output,
    check_readable,
    collector_paused,
    decoded_line,
    error_reason,
    flat_row,
    from_flat_row,
    is_parquet,
    parquet_rows,
    read_lines,
    row_text,
    split_map_errors,
    trace_files,
    write_text_atomically,
)
from statechan.values import LONG_MAX, LONG_MIN, ServiceUnitStateData

SPARK_LOGGING = Path(__file__).with_name("spark-log4j2.properties")
"""Spark's logging when the auditor starts the JVM: warnings, less the host-name and native-Hadoop
ones Spark's default profile prints on every local start, before a session can lower the level."""
REPORT_FORMAT = 1
EXAMPLES = 5
"""Examples kept per invariant, by default."""
EXAMPLES_MAX = 10_000
"""Examples kept per invariant at most: each is kept in memory and written to the report."""
TIMEOUT_MAX_S = 365 * 24 * 3600
"""The longest threshold, a year: times are whole milliseconds, and a longer one is no limit at all."""


# -- settings and report ------------------------------------------------------------------------------
class AuditSettings(BaseModel):
    """How to audit: the resolver's storage and model, the thresholds, what to report."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    storage: StorageType = StorageType.SystemTopic
    model: str = DEFAULT_MODEL
    in_flight_timeout_s: float = Field(IN_FLIGHT_TIMEOUT_MS / 1000, gt=0, le=TIMEOUT_MAX_S, allow_inf_nan=False)
    cleanup_timeout_s: float = Field(CLEANUP_TIMEOUT_MS / 1000, gt=0, le=TIMEOUT_MAX_S, allow_inf_nan=False)
    tombstone_timeout_s: float = Field(TOMBSTONE_TIMEOUT_MS / 1000, gt=0, le=TIMEOUT_MAX_S, allow_inf_nan=False)
    examples: int = Field(
        EXAMPLES, ge=0, le=EXAMPLES_MAX, description="examples kept per invariant (the smallest offsets)"
    )
    invariants: tuple[str, ...] | None = Field(
        None, description="record and history invariants to check (default: the catalogue's defaults)"
    )
    history: bool | None = Field(
        None,
        description="also check the per-bundle history invariants, streaming each bundle's records a key at a time "
        "(default: when the trace has view records)",
    )

    def replay(self) -> ReplaySettings:
        return ReplaySettings(
            storage=self.storage,
            model=self.model,
            in_flight_timeout_ms=round(self.in_flight_timeout_s * 1000),
            cleanup_timeout_ms=round(self.cleanup_timeout_s * 1000),
            tombstone_timeout_ms=round(self.tombstone_timeout_s * 1000),
        )

    def ids(self) -> list[str]:
        """The record invariants to check (the catalogue's defaults unless named)."""
        if self.invariants is not None:
            known = list(dict.fromkeys(record_ids(CATALOGUE) + history_ids(CATALOGUE)))
            unknown = [i for i in self.invariants if i not in known]
            if unknown:
                raise ValueError(f"not a record or history invariant: {', '.join(unknown)} (known: {', '.join(known)})")
        return record_ids(self.invariants)

    def history_ids(self) -> list[str]:
        """The history invariants to check when histories are kept (the defaults unless named)."""
        return history_ids(self.invariants)

    def keeps_history(self, view_records: int) -> bool:
        """Whether this audit checks the history invariants."""
        wanted = self.history if self.history is not None else view_records > 0
        return wanted and bool(self.history_ids())


class Example(BaseModel):
    key: str | None
    offset: int | None
    detail: str


class ViolationSummary(BaseModel):
    count: int
    examples: list[Example]


class Skipped(BaseModel):
    check: str
    reason: str


class AuditReport(BaseModel):
    """The report ``statechan audit`` writes (``traces/README.md`` documents every field)."""

    format: int = REPORT_FORMAT
    inputs: list[str]
    engine: str
    records: int = Field(description="lines or rows read: valid + malformed")
    channel_records: int
    registry_records: int
    leader_records: int
    view_records: int = Field(description="records of what a broker's view took; the history invariants read them")
    bundles: int = Field(description="distinct keys among the channel records")
    namespaces: int
    malformed: int
    quarantine: str | None = Field(description="where the malformed lines went (null: none)")
    accepted: int
    rejected: dict[str, int] = Field(description="channel records the resolver refused, by reason")
    accepted_by_reason: dict[str, int]
    violations: dict[str, ViolationSummary]
    counted: dict[str, int] = Field(description="not violations: accepted version gaps and forced overrides")
    skipped: list[Skipped]
    settings: dict[str, Any]
    start_time: int | None
    end_time: int | None
    elapsed_s: float

    @property
    def violation_count(self) -> int:
        return sum(v.count for v in self.violations.values())


def report_schema() -> dict[str, Any]:
    """The JSON Schema of the report (``traces/report.schema.json`` is generated from it)."""
    schema = AuditReport.model_json_schema()
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"statechan audit report (format {REPORT_FORMAT})"
    return schema


# -- one partition's work -----------------------------------------------------------------------------
def _heap_order(offset: int | None) -> int:
    """An example's place in the keep-heap: the root is the largest offset kept, so the smallest
    offsets stay (an example without an offset sorts first)."""
    return -(offset if offset is not None else -1)


def _offset_of(order: int) -> int | None:
    return None if order == 1 else -order


@dataclass
class Partial:
    """What one slice of the records showed; partials merge into the report."""

    examples_kept: int = EXAMPLES
    reasons: Counter[str] = field(default_factory=Counter)
    violations: Counter[str] = field(default_factory=Counter)
    examples: dict[str, list[tuple[int, str, str]]] = field(default_factory=dict)
    """Per invariant, the kept examples as (-offset, key, detail): a max-heap of the smallest offsets."""
    channel: int = 0
    bundles: int = 0
    namespaces: int = 0
    malformed: list[tuple[int, int | None, str, str]] = field(default_factory=list)
    """(source: the input's index, line or row, error, text)."""

    def violation(self, invariant: str, key: str | None, offset: int | None, detail: str) -> None:
        self.violations[invariant] += 1
        if self.examples_kept == 0:
            return
        kept = self.examples.setdefault(invariant, [])
        item = (_heap_order(offset), key or "", detail)
        if len(kept) < self.examples_kept:
            heapq.heappush(kept, item)
        elif item > kept[0]:
            heapq.heapreplace(kept, item)

    def merge(self, other: Partial) -> None:
        self.reasons.update(other.reasons)
        self.channel += other.channel
        self.bundles += other.bundles
        self.namespaces += other.namespaces
        self.malformed.extend(other.malformed)
        for invariant, count in other.violations.items():
            self.violations[invariant] += count - len(other.examples.get(invariant, ()))
            for order, key, detail in other.examples.get(invariant, ()):
                self.violation(invariant, key, _offset_of(order), detail)

    def to_json(self) -> str:
        return json.dumps(
            {
                "n": self.examples_kept,
                "reasons": self.reasons,
                "violations": self.violations,
                "examples": self.examples,
                "channel": self.channel,
                "bundles": self.bundles,
                "namespaces": self.namespaces,
                "malformed": self.malformed,
            }
        )

    @classmethod
    def from_json(cls, text: str) -> Partial:
        d = json.loads(text)
        return cls(
            d["n"],
            Counter(d["reasons"]),
            Counter(d["violations"]),
            {k: [tuple(e) for e in v] for k, v in d["examples"].items()},
            d["channel"],
            d["bundles"],
            d["namespaces"],
            [tuple(m) for m in d["malformed"]],
        )


@functools.lru_cache(maxsize=100_000)
def _checked_value(
    state: str, dst: str | None, src: str | None, force: bool | None
) -> tuple[ServiceUnitState, str | None, str | None, bool]:
    """A value's fields after :class:`ServiceUnitStateData` has validated them (cached: millions
    of records repeat a few thousand combinations)."""
    data = ServiceUnitStateData.model_validate({"state": state, "dstBroker": dst, "sourceBroker": src, "force": force})
    return data.state, dst, src, data.force


CHANNEL_COLUMNS = (
    "key",
    "offset",
    "time",
    "has_value",
    "state",
    "dst_broker",
    "source_broker",
    "force",
    "version_id",
    "row",
)
"""The columns the replay reads, in order (``row``: the input and line, :data:`ROW_SPAN`). Not the
split map: no record invariant reads it (the split check looks at which children became Owned),
and reading a nested column costs Spark more than the whole replay."""


class Fold:
    """Replays channel rows into a :class:`Partial`: Arrow batches (:meth:`batch`), or tuples in
    :data:`CHANNEL_COLUMNS` order (:meth:`rows`). ``share`` (mine, shares): replay only the rows
    of the namespaces :func:`namespace_share` gives to ``mine``; the others are passed over."""

    def __init__(
        self,
        settings: AuditSettings,
        registry_events: Sequence[tuple[int, int, str, bool]],
        end_time: int,
        refused: Mapping[tuple[int, int], tuple[str, str]] | None = None,
        share: tuple[int, int] | None = None,
    ):
        self.settings = settings
        self.refused = {_row_id(*place): found for place, found in refused.items()} if refused else None
        """Channel rows (by :func:`_row_id`) malformed for a field the replay does not read (a split
        map: :func:`statechan.traces.split_map_errors`; with the history invariants, any field:
        :meth:`Histories.record`), with their error and text."""
        self.end_time = end_time
        self.share = share
        self.partial = Partial(settings.examples)
        self.replay = TraceReplay(record_checks(settings.ids()), settings.replay(), Registry(registry_events))
        self.route: dict[str, tuple[NamespaceReplay, Bundle]] = {}
        """Each key seen: its namespace's replay and its bundle."""
        self.elsewhere: set[str] = set()
        """Each key seen whose namespace is another share's (with ``share``)."""
        self.shares_known: dict[str, int] = {}
        """Each namespace's share, worked out once (:func:`_share_mask`)."""
        self.replays: list[NamespaceReplay] = []
        self.numbers: dict[str, int] = {}
        """Each namespace of an Arrow batch so far: its replay's place in :attr:`replays`."""
        self.words: dict[str, str] = {}
        """Each distinct string of the batches, one object (see :func:`arrow_columns`)."""
        self.values: dict[tuple[Any, ...], tuple[Any, ...] | None] = {}
        """Each (state, dst, src, force) seen: its fields validated, or None if it is not a value."""
        self.resolver = ColumnResolver(rules_for(self.replay.settings.storage, self.replay.settings.model))
        """The resolver's verdicts on a batch's records at once."""
        self.key_names: Any = None
        """Each key met in a batch, by its number (:meth:`_key_ids`); the column state is made at the
        first Arrow batch (:meth:`_columns_start`): rows alone need neither numpy nor pyarrow."""
        self.key_set: Any = None
        self.key_replay: Any = None
        """Each key's namespace replay (its place in :attr:`replays`), -1 for another share's."""
        self.held_value: Any = None
        self.held_version: Any = None
        """What each key holds (:meth:`ColumnResolver.number`, -1: nothing) and its version, by key number."""
        self.in_step = True
        """Whether :attr:`held_value` is the replay's (no batch has been replayed row by row)."""
        self.shortcuts = [(c, COLUMN_SHORTCUTS[c]) for c, _ in self.replay.checks.steps if c in COLUMN_SHORTCUTS]
        """The step checks to run with their column shortcuts, the records each cannot fire on left out."""

    def _record(self, found: Iterable[Any]) -> None:
        for v in found:
            self.partial.violation(v.invariant, v.key, v.offset, v.detail)

    def batch(self, batch: Any) -> None:
        """Offer an Arrow batch of channel rows (:data:`CHANNEL_COLUMNS`), each namespace's in
        offset order. A batch whose every row is a record the replay takes as it is (Arrow finds
        no null, negative or refused field, each distinct value and new key is checked once) goes
        through the replay column by column, its rows never Python objects but for the lists the
        replay reads; a batch with a row to quarantine goes row by row (:meth:`rows`), which says
        why."""
        clean = self._columns(batch)
        if clean is None:
            if self.share is not None:
                batch = batch.filter(_share_mask(batch, *self.share, self.shares_known))
            self.rows(zip(*arrow_columns(batch, CHANNEL_COLUMNS, self.words), strict=True))
            return
        keys, offsets, times, values, runs, decided, dispatch = clean
        record = self._record
        for replay, lo, hi in runs:
            found = replay.offer_run(
                keys[lo:hi],
                offsets[lo:hi],
                times[lo:hi],
                values[lo:hi],
                None,
                None if decided is None else decided[lo:hi],
                None if dispatch is None else dispatch[lo:hi],
            )
            if found:
                record(found)
        self.partial.channel += len(keys)

    def _columns(
        self, batch: Any
    ) -> (
        tuple[
            list[str],
            list[int],
            list[int],
            list[Value | None],
            list[tuple[NamespaceReplay, int, int]],
            list[Reason] | None,
            list[Dispatch] | None,
        ]
        | None
    ):
        """The batch's keys, offsets, times and values as Python lists, its rows (of this share)
        grouped by namespace (stably: each namespace's in the batch's order; namespaces are
        independent), with the runs of rows of each namespace (its replay, first row, row after the
        last) and the resolver's reason for each row (:meth:`_decided`; None: left to the replay,
        row by row); or None if a row of the batch is not a record the replay can take as it is. The
        checks, the grouping and the gathering are numpy's, on the batch's own buffers."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if not batch.num_rows:
            return [], [], [], [], [], None, None
        offset_column, time_column = batch.column("offset"), batch.column("time")
        if batch.column("key").null_count or offset_column.null_count or time_column.null_count:
            return None
        offsets, times = offset_column.to_numpy(), time_column.to_numpy()  # no nulls: the buffers as they are
        if offsets.min() < 0 or times.min() < 0:
            return None
        if self.refused and pc.any(pc.is_in(batch.column("row"), value_set=pa.array(list(self.refused)))).as_py():
            return None
        has_value = pc.fill_null(batch.column("has_value"), False)
        versions = batch.column("version_id")
        if versions.null_count and pc.any(pc.and_(has_value, pc.is_null(versions))).as_py():
            return None
        encoded = batch.column("key").dictionary_encode()  # a dictionary column as it is
        indices = encoded.indices.to_numpy(zero_copy_only=False)
        ids = self._key_ids(encoded.dictionary, indices)
        if ids is None:
            return None
        number = self.key_replay[ids]
        of_row = number[indices]
        mine = np.flatnonzero(of_row >= 0) if self.elsewhere else None
        order = stable_order(of_row if mine is None else of_row[mine])
        if mine is not None:
            order = mine[order]
            if not len(order):  # every row another share's
                return [], [], [], [], [], None, None
        grouped = of_row[order]
        starts = [0, *(np.flatnonzero(grouped[1:] != grouped[:-1]) + 1).tolist(), len(grouped)]
        replays = self.replays
        runs = [(replays[int(grouped[lo])], lo, hi) for lo, hi in itertools.pairwise(starts)]
        made = self._values(batch, has_value.to_numpy(zero_copy_only=False), versions, order)
        if made is None:
            return None
        values, numbers, version_array = made
        key_ids = ids[indices[order]]
        decided = self._decided(key_ids, numbers, version_array)
        offsets = offsets[order]
        dispatch = None if decided is None else self._dispatch(numbers, offsets)
        keys = self.key_names[key_ids].tolist()  # no null key: checked above
        return keys, offsets.tolist(), times[order].tolist(), values, runs, decided, dispatch

    def _dispatch(self, numbers: Any, offsets: Any) -> list[Dispatch] | None:
        """Each row's step dispatch without the checks whose column shortcut shows it cannot fire
        them (:data:`statechan.invariants.catalogue.COLUMN_SHORTCUTS`), after :meth:`_decided`."""
        import numpy as np

        if not self.shortcuts:
            return None
        columns = StepColumns(numbers, self.resolver.met, offsets, self.resolver.values, self.replay.registry)
        bits = np.zeros(len(numbers), dtype=np.int64)
        for place, (_, shortcut) in enumerate(self.shortcuts):
            bits |= shortcut(columns).astype(np.int64) << place
        plan = self.replay.plan
        tables = np.empty(1 << len(self.shortcuts), dtype=object)
        for mask in range(len(tables)):
            tables[mask] = plan.steps_without(
                frozenset(c for place, (c, _) in enumerate(self.shortcuts) if mask >> place & 1)
            )
        dispatch: list[Dispatch] = tables[bits].tolist()
        return dispatch

    def _columns_start(self) -> None:
        """The keys' column state, empty (at the first Arrow batch)."""
        import numpy as np
        import pyarrow as pa

        self.key_names = np.zeros(0, dtype=object)
        self.key_set = pa.array([], type=pa.string())
        self.key_replay = np.zeros(0, dtype=np.int64)
        self.held_value = np.zeros(0, dtype=np.int64)
        self.held_version = np.zeros(0, dtype=np.int64)

    def _key_ids(self, dictionary: Any, indices: Any) -> Any | None:
        """Each key of a batch's dictionary: its number in :attr:`key_names` (-1: a key no row of
        the batch has), each new key's namespace replay (or another share) worked out once; None if
        a row's key is not a bundle key. Keys met before are found by Arrow, not by Python."""
        import numpy as np
        import pyarrow as pa
        import pyarrow.compute as pc

        if self.key_set is None:
            self._columns_start()
        ids = pc.fill_null(pc.index_in(dictionary, value_set=self.key_set), -1).to_numpy(zero_copy_only=False)
        ids = ids.astype(np.int64)
        used = np.zeros(len(ids), dtype=bool)
        used[indices] = True
        new = np.flatnonzero(used & (ids < 0))
        if not len(new):
            return ids
        route, numbers, namespace_of, elsewhere = self.route, self.numbers, self.replay.namespace_of, self.elsewhere
        names, replay_of = list(self.key_names), list(self.key_replay.tolist())
        try:
            for i, key in zip(new.tolist(), dictionary.take(pa.array(new)).to_pylist(), strict=True):
                found = -1
                if self.share is not None:
                    namespace = "/".join(key.split("/", 2)[:2])
                    share = self.shares_known.get(namespace)
                    if share is None:
                        share = self.shares_known[namespace] = _share_of(namespace, self.share[1])
                    if share != self.share[0]:
                        elsewhere.add(key)
                if key not in elsewhere:
                    if not _is_key(key):
                        return None
                    target = route[key] = namespace_of(key)
                    replay = target[0]
                    found = numbers.get(replay.state.name, -1)
                    if found < 0:
                        found = numbers[replay.state.name] = len(self.replays)
                        self.replays.append(replay)
                ids[i] = len(names)
                names.append(self.words.setdefault(key, key))
                replay_of.append(found)
        finally:  # the keys numbered so far stay numbered, a batch left to the rows or not
            self.key_names = np.array([*names, ""], dtype=object)[:-1]
            self.key_replay = np.array(replay_of, dtype=np.int64)
            self.key_set = pa.array(names, type=pa.string())
            grown = len(names) - len(self.held_value)
            self.held_value = np.append(self.held_value, np.full(grown, -1, dtype=np.int64))
            self.held_version = np.append(self.held_version, np.zeros(grown, dtype=np.int64))
        return ids

    def _decided(self, key: Any, numbers: Any, versions: Any) -> list[Reason] | None:
        """The resolver's reason for each row (``key``: its key's number, :meth:`_key_ids`;
        ``numbers``: its value's :meth:`ColumnResolver.number`), counted into the replay's reasons;
        None if the batch is left to the replay row by row (:meth:`ColumnResolver.solve`). What
        each key holds is kept beside the replay's own, by key number, while every batch is solved
        here; after a batch replayed row by row, it is read from the replay's."""
        import numpy as np

        if versions.dtype.kind != "i":  # not a column of Java longs (a column of nulls only): row by row
            self.in_step = False
            return None
        resolver, held_value, held_version = self.resolver, self.held_value, self.held_version
        if not self.in_step:
            names, route = self.key_names, self.route
            for i in np.unique(key).tolist():
                name = names[i]
                held = route[name][0].state.held.get(name)
                held_value[i], held_version[i] = -1, 0
                if held is not None:
                    value = held.value
                    if not LONG_MIN <= value.version_id <= LONG_MAX:
                        return None
                    held_value[i] = resolver.number((value.state, value.dst_broker, value.source_broker, value.force))
                    held_version[i] = value.version_id
        reasons = resolver.solve(key, numbers, versions, held_value, held_version)
        if reasons is None:
            self.in_step = False
            return None
        counts = np.bincount(reasons, minlength=len(resolver.reasons)).tolist()
        self.replay.reasons.update({r: n for r, n in zip(resolver.reasons, counts, strict=True) if n})
        decided: list[Reason] = np.array(resolver.reasons, dtype=object)[reasons].tolist()
        return decided

    def _values(
        self, batch: Any, has_value: Any, versions: Any, order: Any
    ) -> tuple[list[Value | None], Any, Any] | None:
        """The value of each row of ``order`` (None: a tombstone), each distinct (state, dst, src,
        force) validated once, with each row's value number (:meth:`ColumnResolver.number`) and
        version as arrays; None if one of them is not a value. Each value is built from columns
        gathered by numpy and zipped in C: no Python statement runs per row."""
        import numpy as np
        import pyarrow.compute as pc

        code = np.zeros(batch.num_rows, dtype=np.int64)
        parts: list[list[Any]] = []
        for name in ("state", "dst_broker", "source_broker"):
            encoded = batch.column(name).dictionary_encode()
            words = [self.words.setdefault(w, w) for w in encoded.dictionary.to_pylist()]
            parts.append([*words, None])
            code = code * len(parts[-1]) + encoded.indices.fill_null(len(words)).to_numpy(zero_copy_only=False)
        force = pc.fill_null(pc.cast(batch.column("force"), "int8"), 2).to_numpy(zero_copy_only=False)
        code = code * 3 + force + 1
        code[~has_value] = 0  # a tombstone
        code = code[order]
        if code.max() < 4 * len(code) + (1 << 16):  # few distinct codes in a small range: a table, no sort
            present = np.zeros(int(code.max()) + 1, dtype=bool)
            present[code] = True
            distinct = np.flatnonzero(present)
            rows = (np.cumsum(present) - 1)[code]
        else:
            distinct, rows = np.unique(code, return_inverse=True)
        table: list[tuple[Any, ...]] = []
        for each in distinct.tolist():
            if each == 0:
                table.append((None, None, None, None))
                continue
            each, f = divmod(each - 1, 3)
            each, r = divmod(each, len(parts[2]))
            s, d = divmod(each, len(parts[1]))
            fields = (parts[0][s], parts[1][d], parts[2][r], (False, True, None)[f])
            checked = self.values.get(fields, ())
            if checked == ():
                try:
                    checked = self.values[fields] = _checked_value(*fields)
                except ValueError:  # pydantic.ValidationError is a ValueError
                    checked = self.values[fields] = None
            if checked is None:
                return None
            table.append(checked)
        rows = rows.reshape(-1)
        columns = []
        for place in range(4):
            column = np.empty(len(table), dtype=object)
            column[:] = [fields[place] for fields in table]
            columns.append(column[rows].tolist())
        version_array = pc.fill_null(versions, 0).to_numpy(zero_copy_only=False)[order]
        made: list[Value | None] = list(
            map(
                _new,
                itertools.repeat(Value),
                zip(*columns, version_array.tolist(), itertools.repeat(()), strict=False),
            )
        )
        for i in np.flatnonzero(code == 0).tolist():
            made[i] = None
        number = self.resolver.number
        numbers = np.array(
            [number(None if each == 0 else fields) for each, fields in zip(distinct.tolist(), table, strict=True)],
            dtype=np.int64,
        )
        return made, numbers[rows], version_array

    def rows(self, rows: Iterable[tuple[Any, ...]]) -> None:
        """Offer rows (tuples in :data:`CHANNEL_COLUMNS` order), each namespace's in offset order
        (namespaces may interleave), each checked on its own: a bad one is quarantined with why."""
        partial, route, record, refused = self.partial, self.route, self._record, self.refused
        self.in_step = False
        channel = 0
        for row in rows:
            key, offset, when, has_value, state, dst, src, force, version, place = row
            if refused is not None and place in refused:
                partial.malformed.append((*_row_place(place), *refused[place]))
                continue
            try:
                target = route.get(key)
                if target is None:
                    if key is None or offset is None or when is None:
                        raise ValueError("a channel record needs key, offset and time")
                    target = route[key] = self.replay.namespace_of(key)
                elif offset is None or when is None:
                    raise ValueError("a channel record needs key, offset and time")
                if offset < 0 or when < 0:  # Parquet's int64 holds them; the format does not
                    raise ValueError(_whole_row_error(row))
                if has_value:
                    if state is None or version is None:
                        raise ValueError("a value needs state and versionId")
                    value: Value | None = _new(Value, (*_checked_value(state, dst, src, force), version, ()))

                else:
                    value = None
            except (ValueError, BadKeyError) as exc:  # pydantic.ValidationError is a ValueError
                partial.malformed.append((*_row_place(place), error_reason(exc, "value."), _row_text(row)))
                continue
            channel += 1
            found = target[0].offer(key, offset, when, value, target[1])
            if found:
                record(found)
        partial.channel += channel

    def finish(self) -> Partial:
        self._record(self.replay.finish(self.end_time))
        self.partial.reasons.update({str(r): n for r, n in self.replay.reasons.items()})
        self.partial.bundles = len(self.route)
        self.partial.namespaces = self.replay.namespaces_seen
        return self.partial


def _is_key(key: str) -> bool:
    """Whether ``key`` is a bundle key (:func:`statechan.keys.parse_key` takes it)."""
    try:
        parse_key(key)
    except BadKeyError:
        return False
    return True


_BLANK_ROW: dict[str, Any] = dict.fromkeys(name for name, _ in PARQUET_COLUMNS)
HISTORY_COLUMNS = (
    "kind",
    "timestamp",
    "split_children",
    "message_id",
    "producer",
    "observer",
    "incarnation",
    "accepted",
)
"""The columns the history invariants read besides :data:`CHANNEL_COLUMNS` (a whole record)."""


HistoryItem = tuple[str, int, int, int, HistoryRecord]
"""A channel or view record for the history invariants: key, offset, source, line (the order
they are checked in: each key's records together, by offset, ties in file order) and the record."""


class Histories:
    """The history invariants over channel and view records given in :data:`HistoryItem` order:
    one key's :class:`~statechan.invariants.catalogue.HistoryStream` at a time, so a worker holds
    what the invariants hold for one key (never its records: see the catalogue's folds), however
    many records the key or its namespace has."""

    def __init__(self, settings: AuditSettings):
        self.settings = settings
        self.partial = Partial(settings.examples)
        self.folds = history_folds(settings.history_ids())
        self.key: str | None = None
        self.stream: HistoryStream | None = None

    def item(self, row: dict[str, Any]) -> HistoryItem | None:
        """A channel or view row (flat schema) as an item; None if it does not validate as a
        whole record. A view row that does not was quarantined by the first pass; a channel row
        that does not is quarantined here, and must not be replayed either (the history
        invariants would miss a record the record invariants saw)."""
        try:
            record = from_flat_row(_BLANK_ROW | row)
        except (ValueError, KeyError) as exc:  # pydantic.ValidationError is a ValueError
            if row.get("kind") == "channel":
                error = error_reason(exc)  # a whole record: the field path is in the error
                text = json.dumps({n: row.get(n) for n in CHANNEL_COLUMNS[:9] + HISTORY_COLUMNS[1:3]}, default=str)
                self.partial.malformed.append((row.get("source") or 0, row.get("line"), error, text))
            return None
        found = history_record(record.__dict__)  # the fields as they are: the value stays validated
        if found is None:
            return None
        key, entry = found
        return key, entry.offset, row.get("source") or 0, row.get("line") or 0, entry

    def offer(self, items: Iterable[HistoryItem]) -> None:
        """Items in :data:`HistoryItem` order (a key's records together)."""
        for key, _, _, _, record in items:
            if key != self.key:
                self._finish_key()
                self.key = key
                folds = [(fold, self._found) for fold in self.folds]
                self.stream = HistoryStream(key, folds, self.settings.storage, self.settings.model)
            assert self.stream is not None
            self.stream.offer(record)

    def _found(self, v: Any) -> None:
        self.partial.violation(v.invariant, v.key, v.offset, v.detail)

    def _finish_key(self) -> None:
        if self.stream is not None:
            self.stream.finish()
        self.key, self.stream = None, None

    def finish(self) -> Partial:
        self._finish_key()
        return self.partial


HISTORY_RUN = 200_000
"""Items the local engine sorts in memory before it writes them to a temporary run file."""


class ExternalSort:
    """Items put in any order, given back in :data:`HistoryItem` order, holding at most ``run``
    of them in memory: each ``run`` items are sorted and written to a temporary file, and the
    files are merged an item from each at a time (the local engine's counterpart of Spark's
    sort, which spills likewise)."""

    def __init__(self, run: int | None = None):
        self.run = run or HISTORY_RUN
        self.buffer: list[HistoryItem] = []
        self.folder = tempfile.TemporaryDirectory(prefix="statechan-history-")
        self.runs: list[Path] = []

    def add(self, item: HistoryItem) -> None:
        self.buffer.append(item)
        if len(self.buffer) >= self.run:
            self.buffer.sort(key=_item_order)
            self.runs.append(Path(self.folder.name) / f"run-{len(self.runs)}.pickle")
            with open(self.runs[-1], "wb") as out:
                pickler = pickle.Pickler(out, pickle.HIGHEST_PROTOCOL)
                for each in self.buffer:
                    pickler.dump(each)
            self.buffer.clear()

    def sorted(self) -> Iterator[HistoryItem]:
        """Every item added, in order (once), the temporary files removed at the end."""
        self.buffer.sort(key=_item_order)
        with self.folder:
            yield from heapq.merge(*(_read_run(path) for path in self.runs), self.buffer, key=_item_order)


def _item_order(item: HistoryItem) -> tuple[str, int, int, int]:
    return item[:4]


def _read_run(path: Path) -> Iterator[HistoryItem]:
    with open(path, "rb") as handle:
        unpickler = pickle.Unpickler(handle)  # our own run file, written just now in a private folder
        while True:
            try:
                yield unpickler.load()
            except EOFError:
                return


def _whole_row_error(row: tuple[Any, ...]) -> str:
    """Why a channel row (:data:`CHANNEL_COLUMNS`) the replay's quick checks refused is not a
    record, as every other reader says it (the whole record validated)."""
    try:
        from_flat_row(_BLANK_ROW | dict(zip(CHANNEL_COLUMNS[:9], row[:9], strict=True)) | {"kind": "channel"})
    except (ValueError, KeyError) as exc:
        return error_reason(exc)
    return "channel: not a record"


def _row_text(row: tuple[Any, ...]) -> str:
    return json.dumps(dict(zip(CHANNEL_COLUMNS[:9], row[:9], strict=True)), default=str)


# -- reading --------------------------------------------------------------------------------------------
@dataclass
class Other:
    """The records that are not channel records: registry, leader, view, and malformed lines."""

    registry: list[tuple[int, int, str, bool]] = field(default_factory=list)
    leader: int = 0
    view: int = 0
    max_time: int | None = None
    min_time: int | None = None
    malformed: list[tuple[int, int | None, str, str]] = field(default_factory=list)
    refused: dict[tuple[int, int], tuple[str, str]] = field(default_factory=dict)
    """Channel rows of Parquet inputs malformed for their split map (see :class:`Fold`)."""

    def saw_time(self, t: int | None) -> None:
        if t is None:
            return
        self.max_time = t if self.max_time is None else max(self.max_time, t)
        self.min_time = t if self.min_time is None else min(self.min_time, t)


def parse_line(source: int, number: int, text: str) -> dict[str, Any] | None:
    """One JSON Lines line as a flat row (the Parquet schema plus source, line, error, text);
    a blank line gives None, a bad one a row of kind ``malformed``."""
    stripped = text.strip()
    return _as_row(source, number, decoded_line("", number, stripped)) if stripped else None


def _as_row(source: int, number: int, item: AnyRecord | BadLine) -> dict[str, Any]:
    """What the reader gave for a line as a flat row with its ``source`` and ``line``."""
    if isinstance(item, BadLine):
        row: dict[str, Any] = dict.fromkeys(name for name, _ in PARQUET_COLUMNS)
        row.update(kind="malformed", source=source, line=number, error=item.reason, text=item.text)
        return row
    row = flat_row(item)
    row.update(source=source, line=number, error=None, text=None)
    return row


def _channel_tuple(row: dict[str, Any]) -> tuple[Any, ...]:
    return (*(row.get(name) for name in CHANNEL_COLUMNS[:-1]), _row_id(row.get("source") or 0, row.get("line")))


def _note_other(other: Other, row: dict[str, Any], source: int, line: int | None) -> None:
    """Count a row that is not a channel record: validated whole, as every reader validates it
    (:func:`statechan.traces.from_flat_row`), or kept as malformed with the reason."""
    kind = row.get("kind")
    if kind == "malformed":
        other.malformed.append((row["source"], row["line"], row["error"], row["text"]))
        return
    try:
        record = from_flat_row(_BLANK_ROW | row)
    except (ValueError, KeyError) as exc:  # pydantic.ValidationError is a ValueError
        other.malformed.append((source, line, error_reason(exc), row_text(row)))
        return
    other.saw_time(row["time"])
    if isinstance(record, RegistryRecord):
        other.registry.append((record.offset, record.time, record.broker, record.event == "registered"))
    elif isinstance(record, LeaderRecord):
        other.leader += 1
    else:
        other.view += 1


# -- the local engine -----------------------------------------------------------------------------------
def _file_rows(path: str, source: int) -> Iterator[dict[str, Any]]:
    """A trace file's records as rows of the flat schema, with their ``source`` and ``line``: a
    JSON Lines file through the one reader; a Parquet file's rows as they are (the engine
    validates them as Spark's workers do, for the same quarantine)."""
    if is_parquet(path):
        for number, row in parquet_rows(path):
            row.update(source=source, line=number, error=None, text=None)
            yield row
    else:
        for number, item in read_lines(path):
            yield _as_row(source, number, item)


@dataclass
class _Scan:
    """What the local engine's first pass learns besides the other records."""

    records: int = 0
    last: int = -(2**63)
    in_order: bool = True

    def saw_offset(self, offset: int) -> None:
        self.in_order = self.in_order and offset >= self.last
        self.last = offset


def _is_channel(batch: Any) -> Any:
    """Which rows of an Arrow batch are channel records (a null kind is not)."""
    import pyarrow.compute as pc

    return pc.fill_null(pc.equal(batch.column("kind"), "channel"), False)


def _line_numbers(rows: Any, base: int) -> list[int]:
    """The file's 1-based row numbers of the rows a batch's mask picks (``base``: rows before it)."""
    import pyarrow.compute as pc

    return [base + i + 1 for i in pc.indices_nonzero(rows).to_pylist()]


def _only_channel(group: Any, leaves: Mapping[str, int]) -> bool:
    """Whether a Parquet row group's statistics say it holds channel records alone (no null kind,
    every kind ``channel``)."""
    if "kind" not in leaves:
        return False
    kind = group.column(leaves["kind"]).statistics
    return bool(kind is not None and kind.has_min_max and kind.null_count == 0 and kind.min == kind.max == "channel")


def _channel_span(group: Any, leaves: Mapping[str, int]) -> tuple[int, int] | None:
    """The time span of a Parquet row group whose statistics say it holds channel records alone
    (:func:`_only_channel`) and no negative time; None when they do not say so."""
    if not _only_channel(group, leaves) or "time" not in leaves:
        return None
    times = group.column(leaves["time"]).statistics
    if times is None or not times.has_min_max or times.min < 0:
        return None
    return int(times.min), int(times.max)


def _saw_offsets(scan: _Scan, offsets: Any) -> None:
    """A batch's channel offsets, in file order: whether they still ascend (nulls aside)."""
    import pyarrow.compute as pc

    offsets = offsets.drop_null()
    if len(offsets):
        scan.saw_offset(offsets[0].as_py())
        if len(offsets) > 1 and not pc.all(pc.greater_equal(offsets[1:], offsets[:-1])).as_py():
            scan.in_order = False
        scan.last = offsets[-1].as_py()


def _scan_parquet(path: str, source: int, other: Other, scan: _Scan) -> None:
    """The first pass over a Parquet file: the kind, time and offset columns of every row group,
    a batch at a time (the time span and whether the channel offsets ascend are worked out by
    Arrow), only the offsets of a row group whose statistics say it holds channel records alone
    (:func:`_channel_span`); every column only of the row groups that hold records other than
    channel records, whose rows alone become Python objects."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    others = []  # the row groups with other records
    parquet = pq.ParquetFile(str(path), read_dictionary=["kind"])  # opened once: its footer read once
    meta = parquet.metadata
    sizes = [meta.row_group(g).num_rows for g in range(meta.num_row_groups)]
    leaves = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    for group in range(len(sizes)):
        span = _channel_span(meta.row_group(group), leaves)
        if span is not None:  # channel records alone: their offsets are all there is to read
            other.saw_time(span[0])
            other.saw_time(span[1])
            for batch in parquet.iter_batches(DICTIONARY_BATCH_ROWS, row_groups=[group], columns=["offset"]):
                _saw_offsets(scan, batch.column("offset"))
            scan.records += sizes[group]
            continue
        mixed = False
        for batch in parquet.iter_batches(PARQUET_BATCH_ROWS, row_groups=[group], columns=["kind", "time", "offset"]):
            channel = _is_channel(batch)
            channel_batch = batch.filter(channel)
            mixed = mixed or channel_batch.num_rows < batch.num_rows
            if channel_batch.num_rows:
                times = channel_batch.column("time")
                found = pc.min_max(times).as_py()
                if found["min"] is not None and found["min"] < 0:  # a malformed time is not the trace's
                    found = pc.min_max(pc.filter(times, pc.greater_equal(times, 0))).as_py()
                other.saw_time(found["min"])
                other.saw_time(found["max"])
                _saw_offsets(scan, channel_batch.column("offset"))
            scan.records += batch.num_rows
        if mixed:
            others.append(group)
    other.refused.update(((source, line), found) for line, found in split_map_errors(path).items())
    whole = pq.ParquetFile(str(path)) if others else None
    for group in others:
        assert whole is not None
        base = sum(sizes[:group])
        for batch in whole.iter_batches(PARQUET_BATCH_ROWS, row_groups=[group]):
            rest = pc.invert(_is_channel(batch))
            lines = _line_numbers(rest, base)
            for line, row in zip(lines, batch.filter(rest).to_pylist(), strict=True):
                row.update(source=source, line=line, error=None, text=None)
                _note_other(other, row, source, line)
            base += batch.num_rows


DICTIONARY_COLUMNS = ("kind", "key", "state", "dst_broker", "source_broker")
"""The string columns read from Parquet as dictionaries (:func:`_parquet_channel_batches`)."""
DICTIONARY_BATCH_ROWS = 1 << 18
"""Rows of a batch read as dictionaries: a row group's batches share its dictionaries, whose
strings the replay turns into Python once a batch (:func:`arrow_columns`), so a batch is a whole
row group up to this size."""


def _parquet_channel_batches(path: str, source: int) -> Iterator[Any]:
    """A Parquet file's channel records as Arrow batches of :data:`CHANNEL_COLUMNS`, as the Spark
    workers get theirs (:meth:`Fold.batch`). The string columns of :data:`DICTIONARY_COLUMNS` are
    read as Arrow dictionaries: Parquet stores them dictionary-encoded, so no string is copied per
    row, and the replay's own encodings (:func:`arrow_columns`, :meth:`Fold.batch`) find them done.
    A row group whose statistics say it holds channel records alone (:func:`_only_channel`) is read
    without its kind column and taken whole."""
    import numpy as np
    import pyarrow as pa
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    columns = list(CHANNEL_COLUMNS[:-1])
    parquet = pq.ParquetFile(str(path), read_dictionary=[c for c in ["kind", *columns] if c in DICTIONARY_COLUMNS])
    meta = parquet.metadata
    leaves = {meta.schema.column(i).path: i for i in range(meta.num_columns)}
    base = 0
    for group in range(meta.num_row_groups):
        alone = _only_channel(meta.row_group(group), leaves)
        read = columns if alone else ["kind", *columns]
        for batch in parquet.iter_batches(DICTIONARY_BATCH_ROWS, row_groups=[group], columns=read):
            first = _row_id(source, base + 1)
            base += batch.num_rows
            if alone:
                yield batch.append_column("row", pa.array(np.arange(first, first + batch.num_rows, dtype=np.int64)))
                continue
            channel = _is_channel(batch)
            rows = pc.add(pc.indices_nonzero(channel).cast(pa.int64()), first)
            yield batch.filter(channel).select(columns).append_column("row", rows)


_OFFSET = CHANNEL_COLUMNS.index("offset")


def _offset_order(row: tuple[Any, ...]) -> tuple[bool, int]:
    """Channel rows by offset, a row without one first (where Spark's ascending sort puts nulls)."""
    offset = row[_OFFSET]
    return (offset is not None, offset or 0)


def first_pass(paths: Sequence[str]) -> tuple[Other, _Scan]:
    """The pass before the replay, in this process: the records that are not channel records
    (validated whole), the time span, the record count, and whether the channel offsets ascend
    over the inputs in the order given. A Parquet file's kind, time and offset columns are read
    by Arrow (:func:`_scan_parquet`)."""
    other = Other()
    scan = _Scan()
    for source, path in enumerate(paths):
        if is_parquet(path):
            _scan_parquet(path, source, other, scan)
            continue
        for row in _file_rows(path, source):
            scan.records += 1
            if row.get("kind") == "channel":
                other.saw_time(row.get("time"))
                offset = row.get("offset")
                if offset is not None:
                    scan.saw_offset(offset)
            else:
                _note_other(other, row, row.get("source") or 0, row.get("line"))
    return other, scan


def audit_local(
    paths: Sequence[str], settings: AuditSettings, progress: Callable[[str], None] | None = None
) -> tuple[Partial, Other]:
    """Audit in this process: a pass for the registry and the time span, then the replay."""
    note = progress or (lambda _: None)
    other, scan = first_pass(paths)
    records, in_order = scan.records, scan.in_order
    history = settings.keeps_history(other.view)
    fold = Fold(settings, other.registry, other.max_time or 0, other.refused)
    histories = Histories(settings)
    items = ExternalSort()

    def channel_parts() -> Iterator[Any]:
        """Each input's channel records: Arrow batches of a Parquet file (without the history
        invariants: with them, whole records are read), else rows as tuples."""
        words: dict[str, str] = {}
        for source, path in enumerate(paths):
            if is_parquet(path) and not history:
                if in_order:
                    yield from _parquet_channel_batches(path, source)
                else:
                    for batch in _parquet_channel_batches(path, source):
                        yield list(zip(*arrow_columns(batch, CHANNEL_COLUMNS, words), strict=True))
                continue
            yield channel_rows(path, source)

    def channel_rows(path: str, source: int) -> Iterator[tuple[Any, ...]]:
        for row in _file_rows(path, source):
            kind = row.get("kind")
            if history and kind in ("channel", "view"):
                item = histories.item(row)
                if item is None:
                    continue  # quarantined: a channel row here, a view row by the first pass
                items.add(item)
            if kind == "channel":
                yield _channel_tuple(row)

    with collector_paused():  # with the history invariants, their items are gathered on the way
        if in_order:
            note(f"read {records:,} records; replaying")
            for part in channel_parts():
                if isinstance(part, Iterator):
                    fold.rows(part)
                else:
                    fold.batch(part)
        else:  # replay in offset order, as Spark's sort does: the trace's order is its meaning
            note(f"read {records:,} records, not in offset order: sorting the channel records in memory; replaying")
            rows = [row for part in channel_parts() for row in part]
            fold.rows(sorted(rows, key=_offset_order))
        histories.offer(items.sorted())
    partial = fold.finish()
    if history:
        partial.merge(histories.finish())
    partial.malformed[:0] = other.malformed
    return partial, other


# -- the Spark engine -----------------------------------------------------------------------------------
def spark_session(
    master: str | None = None,
    app: str = "statechan-audit",
    driver_memory: str = "4g",
    conf: Mapping[str, str] | None = None,
    remote: str | None = None,
) -> Any:
    """A SparkSession whose Python workers run this interpreter (so they import these packages).

    ``master`` None: the one ``spark-submit`` chose, else ``local[*]``. ``remote``: a Spark
    Connect server (``sc://HOST:PORT``) instead of a driver in this process; its master, memory and
    Python are the server's, so only the SQL settings (``spark.sql.*``) of the auditor's own and of
    ``conf`` are sent. ``conf``: Spark settings applied last, over the auditor's own
    (``spark.driver.memory`` included, when this process starts the JVM).
    """
    check_spark_settings(master, conf, remote)
    from pyspark.sql import SparkSession

    if remote is not None:
        builder = SparkSession.builder.remote(remote).appName(app)
        for key, value in (SQL_SETTINGS | dict(conf or {})).items():
            builder = builder.config(key, value)
        return builder.getOrCreate()
    os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
    os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)
    builder = SparkSession.builder
    if master is not None or "PYSPARK_GATEWAY_PORT" not in os.environ:  # not under spark-submit
        builder = builder.master(master or "local[*]")
    if "PYSPARK_GATEWAY_PORT" not in os.environ and "spark.driver.extraJavaOptions" not in os.environ.get(
        "PYSPARK_SUBMIT_ARGS", ""
    ):  # this process starts the JVM: it logs through SPARK_LOGGING from its first line
        builder = builder.config("spark.driver.extraJavaOptions", f"-Dlog4j.configurationFile={SPARK_LOGGING.as_uri()}")
    builder = (
        builder.appName(app)
        .config("spark.driver.memory", driver_memory)
        .config("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2)))
        .config("spark.ui.showConsoleProgress", "true" if sys.stderr.isatty() else "false")
        .config("spark.ui.enabled", "false")
        .config("spark.python.worker.reuse", "true")
    )
    for key, value in (SQL_SETTINGS | dict(conf or {})).items():
        builder = builder.config(key, value)
    spark = builder.getOrCreate()
    spark.sparkContext.setLogLevel("FATAL")  # failures reach the caller as exceptions
    return spark


SQL_SETTINGS = {
    "spark.sql.execution.arrow.maxRecordsPerBatch": "100000",
    "spark.sql.parquet.aggregatePushdown": "true",
}
"""The auditor's own session settings that a Spark Connect client may set too (runtime SQL
settings): Arrow batches of 100,000 rows for the workers, Parquet counts from the footers."""


def is_connect(spark: Any) -> bool:
    """Whether ``spark`` is a Spark Connect session (a client of a server elsewhere): it has no
    ``sparkContext`` and no RDDs, so the auditor reaches it through the DataFrame API only."""
    return type(spark).__module__.startswith("pyspark.sql.connect")


def session_master(spark: Any) -> str:
    """The master the session's work runs on (a Connect server's own, for a Connect session)."""
    return str(spark.conf.get("spark.master", "local[*]"))


def task_slots(spark: Any) -> int:
    """How many tasks the session runs at once (its default parallelism), asked through the
    DataFrame API: a range is split into that many partitions by default."""
    from pyspark.sql import functions as F

    ids = spark.range(1 << 16).select(F.spark_partition_id().alias("p"))
    return int(ids.agg(F.max("p").alias("p")).first()["p"]) + 1


def code_zip(folder: Path | None = None) -> Path:
    """``statechan`` (with the built-in models inside, as a wheel has them; the invariant catalogue
    is part of it) as one zip for Spark's executors: given to ``addPyFile``, the Python workers
    import the driver's own code, so a cluster's nodes need only the dependencies. Named by its
    content (Spark refuses a second file of the same name with other content; the same content is
    one file), kept in :func:`private_cache` (or ``folder``), and reused only when its bytes hash to
    this code's."""
    import hashlib
    import io
    import zipfile

    import statechan
    from statechan.model import builtin_model_files

    members: dict[str, bytes] = {}
    root = Path(statechan.__file__ or "").parent
    for path in sorted(root.rglob("*.py")):
        members[f"{root.name}/{path.relative_to(root).as_posix()}"] = path.read_bytes()
    for name, file in builtin_model_files().items():
        members[f"statechan/models/{name}.toml"] = file.read_bytes()
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for name in sorted(members):
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))  # the same bytes for the same code
            archive.writestr(info, members[name], zipfile.ZIP_DEFLATED)
    data = buffer.getvalue()
    digest = hashlib.sha256(data).hexdigest()
    target = (folder or private_cache()) / f"statechan-code-{digest[:16]}.zip"
    if not _holds(target, digest):  # absent, or not this code: (re)written, never trusted by its name
        with atomic_output(target) as partial:
            partial.write_bytes(data)
    return target


def _holds(path: Path, digest: str) -> bool:
    """Whether ``path`` is a regular file whose content has this SHA-256."""
    import hashlib

    if not path.is_file():  # absent, or a FIFO that would block
        return False
    try:
        with open(path, "rb") as handle:
            return hashlib.file_digest(handle, "sha256").hexdigest() == digest
    except OSError:
        return False


def private_cache() -> Path:
    """A folder only this user can write: ``$XDG_CACHE_HOME/statechan`` (``~/.cache/statechan``),
    mode 0700 and owned by this user, else a fresh private temporary one. What the executors run
    is read from here, so another local user must not be able to plant it (a predictable name in
    the shared temporary folder let them)."""
    try:
        base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
        cache = base / "statechan"
        cache.mkdir(mode=0o700, parents=True, exist_ok=True)
        if _private(cache) and all(_safe_parent(folder) for folder in cache.resolve().parents):
            return cache
    except (OSError, RuntimeError):  # no home, or one that cannot be written
        pass
    return _fallback_cache()


_FALLBACK: list[Path] = []
"""The process's fallback cache folder, once made (see :func:`_fallback_cache`)."""


def _fallback_cache() -> Path:
    """One fresh private temporary folder per process (0700, a name no one can guess), removed
    when the process ends: not one more folder and zip each time code is shipped."""
    import atexit
    import shutil

    if not _FALLBACK or not _FALLBACK[-1].is_dir():
        folder = Path(tempfile.mkdtemp(prefix="statechan-code-"))
        atexit.register(shutil.rmtree, folder, ignore_errors=True)
        _FALLBACK.append(folder)
    return _FALLBACK[-1]


def _private(folder: Path) -> bool:
    """A real folder (not a link) owned by this user and writable by no one else."""
    import stat

    info = folder.lstat()
    return stat.S_ISDIR(info.st_mode) and info.st_uid == os.getuid() and not info.st_mode & 0o022


def _safe_parent(folder: Path) -> bool:
    """A folder above the cache that no other user can rename it out of: owned by this user or
    root, and writable by others only with the sticky bit (as /tmp is)."""
    import stat

    info = folder.stat()
    if info.st_uid not in (0, os.getuid()):
        return False
    return not info.st_mode & 0o022 or bool(info.st_mode & stat.S_ISVTX)


def default_partitions(spark: Any, records: int) -> int:
    """About 250,000 records a partition, and four per task slot at least: small partitions keep
    every core busy to the end (the fold of one partition is serial) and let one partition's sort
    overlap another's replay."""
    return partitions_for(task_slots(spark), records)


def partitions_for(slots: int, records: int) -> int:
    """:func:`default_partitions` for a session that runs ``slots`` tasks at once."""
    return int(max(4 * slots, -(-records // 250_000)))


ROW_SPAN = 1 << 40
"""A row's place in the inputs as one number, ``source * ROW_SPAN + line`` (a line or row below
2^40 in up to 2^23 inputs): one column handed to the workers instead of two."""


def _row_id(source: int, line: int | None) -> int:
    return source * ROW_SPAN + (line or 0)


def _row_place(row: int) -> tuple[int, int]:
    return divmod(row, ROW_SPAN)


def _extra_fields() -> list[tuple[str, Any]]:
    import pyarrow as pa

    return [("source", pa.int64()), ("line", pa.int64()), ("error", pa.string()), ("text", pa.string())]


def _spark_frame(spark: Any, paths: Sequence[str]) -> Any:
    """Every input as one DataFrame of the flat schema plus source, line, error, text, through the
    DataFrame API alone (a Spark Connect session has no RDDs): a Parquet file's line is its row
    position (``_metadata.row_index``); a JSON Lines file is read by Spark's text reader, and its
    lines are parsed and numbered in the Python workers (:func:`_jsonl_frame`)."""
    from pyspark.sql import functions as F

    frames = []
    for index, path in enumerate(paths):
        if is_parquet(path):
            frame = spark.read.parquet(str(Path(path).resolve()))  # its columns were checked by audit()
            frames.append(
                frame.select(
                    *[F.col(n) for n, _ in PARQUET_COLUMNS],
                    F.lit(index).cast("long").alias("source"),
                    (F.col("_metadata.row_index") + 1).alias("line"),
                    F.lit(None).cast("string").alias("error"),
                    F.lit(None).cast("string").alias("text"),
                )
            )
        else:
            frames.append(_jsonl_frame(spark, path, index))
    frame = frames[0]
    for more in frames[1:]:
        frame = frame.unionByName(more)
    return frame


def _jsonl_frame(spark: Any, path: str, source: int) -> Any:
    """A JSON Lines file (plain or gzipped) as rows of the flat schema, each line numbered as the
    file numbers it. Spark's text reader splits a plain file into blocks read by different tasks,
    each in order; a row carries its block's start (``_metadata.file_block_start``), one small
    aggregate counts each block's lines, and a worker numbers a block's lines from the count of
    the blocks before it (a gzipped file is one block). Each line goes through the one per-line
    rule (:func:`parse_line`), as the local engine's reader does."""
    import pyarrow as pa
    from pyspark.sql import functions as F
    from pyspark.sql.pandas.types import from_arrow_schema

    text = spark.read.text(str(Path(path).resolve())).select(
        F.col("value").cast("binary").alias("value"), F.col("_metadata.file_block_start").alias("block")
    )  # as bytes: the text reader does not check UTF-8, and the worker decodes as the local reader does
    before: dict[int, int] = {0: 0}
    if not path.endswith(".gz"):  # a gzipped file is not split
        counts = sorted((row["block"], row["count"]) for row in text.groupBy("block").count().collect())
        total = 0
        for block, count in counts:
            before[block] = total
            total += count
    schema = pa.schema([*arrow_schema(), *(pa.field(n, t) for n, t in _extra_fields())])
    return text.mapInArrow(_line_parser(source, before, schema), from_arrow_schema(schema))


def _line_parser(source: int, before: Mapping[int, int], schema: Any) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The ``mapInArrow`` function that parses one input's lines (runs in the Python workers)."""
    names = schema.names

    def parse(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        seen: dict[int, int] = {}  # per block, its lines given so far (a block is read by one task, in order)
        for batch in batches:
            rows = []
            for data, block in zip(batch.column("value").to_pylist(), batch.column("block").to_pylist(), strict=True):
                seen[block] = number = seen.get(block, 0) + 1
                row = parse_line(source, before[block] + number, data.decode("utf-8", "replace"))
                if row is not None:
                    rows.append({n: row.get(n) for n in names})
            if rows:
                yield pa.RecordBatch.from_pylist(rows, schema=schema)

    return parse


READ_CHOICES = ("auto", "workers", "spark")
"""How the Spark engine gets each namespace's channel records to its Python workers in offset
order (:func:`audit_spark`)."""
WORKERS_READ_SLOTS = 8
"""``read="auto"`` lets the workers read the trace themselves when the session runs at most this
many tasks at once: each task reads the whole trace (about 0.2-0.4 µs of CPU a record, Arrow's
reader), where Spark's shuffle and sort and the hand-over to Python cost some 6 µs a record in
all (docs/benchmarks.md, *Audit*), so the workers' reads cost less up to a few dozen tasks; the
bound leaves room for a shared file system's bandwidth."""


def audit_spark(
    paths: Sequence[str],
    settings: AuditSettings,
    master: str | None = None,
    partitions: int | None = None,
    progress: Callable[[str], None] | None = None,
    spark: Any = None,
    ship_code: bool | None = None,
    start_spark: Callable[[], Any] | None = None,
    read: str = "auto",
) -> tuple[Partial, Other, int]:
    """Audit on Spark, classic or Connect, through the DataFrame API alone; returns the merged
    partial, the other records, and all records read. ``ship_code``: send this code to the
    executors (:func:`code_zip`); by default only when the master is not local (local workers
    import what the driver imports). ``start_spark``: how to start a session when ``spark`` is not
    given (default :func:`spark_session` on ``master``).

    ``read`` says how each namespace's records reach a Python worker in offset order. ``spark``:
    Spark reads the inputs, shuffles the channel records by namespace and sorts each partition by
    offset. ``workers``: for Parquet inputs whose offsets already ascend (as the format asks),
    one task per task slot reads every input itself, through Arrow, and replays its share of the
    namespaces in file order: no shuffle, no sort, no hand-over from the JVM (every task reads
    the whole trace; the history invariants, which need each key's records together, always go
    through Spark). ``auto``: ``workers`` where it applies and the session runs at most
    :data:`WORKERS_READ_SLOTS` tasks at once, else ``spark``."""
    from pyspark import StorageLevel
    from pyspark.sql import functions as F

    if read not in READ_CHOICES:
        raise ValueError(f"read={read!r}: one of {', '.join(READ_CHOICES)}")
    parquet = all(is_parquet(p) for p in paths)
    if read == "workers" and not parquet:
        raise ValueError("--read workers: the workers read Parquet traces only (convert: statechan traces convert)")
    if read == "workers" and settings.history:
        raise ValueError("--read workers: the history invariants need each key's records together (Spark's sort)")
    note = progress or (lambda _: None)
    spark = spark or (start_spark or (lambda: spark_session(master)))()
    if ship_code is None:
        ship_code = not session_master(spark).startswith("local")
    if ship_code:
        bundle = code_zip()
        note(f"sending the auditor's code to the executors ({bundle.name})")
        spark.addArtifacts(str(bundle), pyfile=True)
    slots = task_slots(spark)
    scanned: tuple[Other, _Scan] | None = None
    wanted = read == "workers" or (read == "auto" and slots <= WORKERS_READ_SLOTS)
    if parquet and wanted and settings.history is not True:
        note("reading: registry, leader and malformed records, the time span and the offsets' order")
        scanned = first_pass(paths)
        other, scan = scanned
        workers = scan.in_order and not settings.keeps_history(other.view)
        if read == "workers" and not workers:
            why = "not in offset order" if not scan.in_order else "has view records (the history invariants)"
            raise ValueError(f"--read workers: the trace {why}; --read spark (or auto) replays it")
        if workers:
            end_time = other.max_time or 0
            channel_rows = scan.records - len(other.registry) - other.leader - other.view - len(other.malformed)
            note(
                f"replaying {channel_rows:,} channel records: {slots} tasks each read the trace and replay "
                f"a share of its namespaces in file order ({len(other.registry)} registry events)"
            )
            tasks = spark.range(slots, numPartitions=slots)
            inputs = [(source, str(Path(path).resolve())) for source, path in enumerate(paths)]  # workers run elsewhere
            fold = _shared_read_fold(inputs, slots, settings, other.registry, end_time, other.refused)
            with StageProgress(spark, slots, lambda done, s: note(f"replayed {done}/{slots} shares ({s:.0f} s)")):
                partials = tasks.mapInArrow(fold, "partial string").collect()
            merged = Partial(settings.examples)
            for row in partials:
                merged.merge(Partial.from_json(row["partial"]))
            merged.malformed[:0] = other.malformed
            return merged, other, scan.records
    frame = _spark_frame(spark, paths)
    if not parquet:
        frame = frame.persist(StorageLevel.MEMORY_AND_DISK)  # parsed once, read twice
    if scanned is not None:  # what the pass in this process found is what Spark's would
        other, scan = scanned
        records = scan.records
        channel_rows = records - len(other.registry) - other.leader - other.view - len(other.malformed)
    else:
        other, records, channel_rows = _spark_first_pass(spark, frame, paths, note)
    end_time = other.max_time or 0
    history = settings.keeps_history(other.view)
    count = partitions or partitions_for(slots, channel_rows + (other.view if history else 0))
    views = f" with {other.view:,} view records for the history invariants" if history else ""
    note(
        f"replaying {channel_rows:,} channel records{views} in {count} partitions by namespace "
        f"({len(other.registry)} registry events)"
    )
    merged = Partial(settings.examples)
    if history:  # first: the channel rows that do not validate whole are not replayed
        rows = (
            frame.where(F.col("kind").isin("channel", "view"))
            .select(*CHANNEL_COLUMNS[:-1], "source", "line", *HISTORY_COLUMNS)
            .repartition(count, "key")
            .sortWithinPartitions("key", "offset", "source", "line")  # HistoryItem order
        )
        checked = lambda done, s: note(f"checked the histories of {done}/{count} partitions ({s:.0f} s)")  # noqa: E731
        with StageProgress(spark, count, checked):
            found = rows.mapInArrow(_arrow_histories(settings), "partial string").collect()
        for row in found:
            histories = Partial.from_json(row["partial"])
            for source, line, error, text in histories.malformed:  # every row has its line (_spark_frame)
                other.refused[source, line or 0] = (error, text)
            histories.malformed.clear()  # the replay quarantines them, as refused
            merged.merge(histories)
    channel = (
        frame.where(F.col("kind") == "channel")
        .select(*CHANNEL_COLUMNS[:-1], (F.col("source") * ROW_SPAN + F.col("line")).alias("row"))
        .repartition(count, F.substring_index("key", "/", 2))  # by namespace
        .sortWithinPartitions("offset")
    )
    fold = _arrow_fold(settings, other.registry, end_time, other.refused)
    with StageProgress(spark, count, lambda done, s: note(f"replayed {done}/{count} partitions ({s:.0f} s)")):
        partials = channel.mapInArrow(fold, "partial string").collect()
    for row in partials:
        merged.merge(Partial.from_json(row["partial"]))
    merged.malformed[:0] = other.malformed
    if frame.is_cached:
        frame.unpersist()
    return merged, other, records


def _spark_first_pass(
    spark: Any, frame: Any, paths: Sequence[str], note: Callable[[str], None]
) -> tuple[Other, int, int]:
    """The pass before the replay, through Spark: the other records (collected to the driver and
    validated whole), the split maps, the record count and the time span; returns the other
    records, all records and the channel records."""
    from pyspark.sql import functions as F

    note("reading: registry, leader and malformed records, and the time span")
    # two passes on purpose: the filter on kind and the count and span each get Parquet's pushdowns;
    # one aggregate over every row was several times slower (docs/benchmarks.md)
    other = Other()
    for row in frame.where((F.col("kind") != "channel") | F.col("kind").isNull()).collect():
        data = row.asDict(recursive=True)
        _note_other(other, data, data.get("source") or 0, data.get("line"))
    others = len(other.registry) + other.leader + other.view + len(other.malformed)
    for index, path in enumerate(paths):
        if is_parquet(path):  # on the driver, from the one column: the workers' replay reads no split map
            other.refused.update(((index, line), found) for line, found in split_map_errors(path).items())
    if all(is_parquet(p) for p in paths):  # count and span from the files' footers
        raw = spark.read.parquet(*[str(Path(p).resolve()) for p in paths])
        span = raw.agg(F.count(F.lit(1)).alias("n"), F.max("time").alias("hi"), F.min("time").alias("lo")).first()
        records, channel_rows = span["n"], span["n"] - others
    else:
        channel = frame.where(F.col("kind") == "channel")
        span = channel.agg(F.count(F.lit(1)).alias("n"), F.max("time").alias("hi"), F.min("time").alias("lo")).first()
        records, channel_rows = span["n"] + others, span["n"]
    if span["lo"] is not None and span["lo"] < 0:  # a malformed time is not the trace's: the span without it
        span = frame.where(F.col("time") >= 0).agg(F.max("time").alias("hi"), F.min("time").alias("lo")).first()
    other.saw_time(span["hi"])
    other.saw_time(span["lo"])
    return other, records, channel_rows


class StageProgress:
    """Calls ``report(done, seconds)`` every ``every`` seconds while a Spark job runs: the tasks
    done of its running stage of ``tasks`` tasks (Spark's own progress bar shows only on a
    terminal; this reaches logs too). The auditor's partitions and the balance sweep's runs. A
    Spark Connect session tells its progress through a handler it calls; a classic one is asked
    through its status tracker (the one use of ``sparkContext`` left, for this line alone)."""

    def __init__(self, spark: Any, tasks: int, report: Callable[[int, float], None], every: float = 10.0) -> None:
        import threading

        self.spark = spark
        self.connect = is_connect(spark)
        self.tracker = None if self.connect else spark.sparkContext.statusTracker()
        self.tasks, self.report, self.every = tasks, report, every
        self.completed = 0
        """Tasks done of the running stage of ``tasks`` tasks, as a Connect session last told."""
        self.done = threading.Event()
        self.thread = threading.Thread(target=self._run, name="statechan-spark-progress", daemon=True)
        self.started = time.perf_counter()

    def _told(self, stages: Iterable[Any] | None = None, **_: Any) -> None:
        """A Connect session's progress handler: each stage's tasks and those done."""
        for stage in stages or ():
            if stage.num_tasks == self.tasks:
                self.completed = max(self.completed, stage.num_completed_tasks)

    def _asked(self) -> int:
        done = 0
        assert self.tracker is not None
        for stage_id in self.tracker.getActiveStageIds():
            info = self.tracker.getStageInfo(stage_id)
            if info is not None and info.numTasks == self.tasks:
                done = max(done, info.numCompletedTasks)
        return done

    def _run(self) -> None:
        while not self.done.wait(self.every):
            self.report(self.completed if self.connect else self._asked(), time.perf_counter() - self.started)

    def __enter__(self) -> StageProgress:
        if self.connect:
            self.spark.registerProgressHandler(self._told)
        self.thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self.done.set()
        self.thread.join()
        if self.connect:
            self.spark.removeProgressHandler(self._told)


def _arrow_fold(
    settings: AuditSettings,
    registry: list[tuple[int, int, str, bool]],
    end_time: int,
    refused: Mapping[tuple[int, int], tuple[str, str]] | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The per-partition replay, as a ``mapInArrow`` function (runs in the Python workers)."""

    def fold(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        work = Fold(settings, registry, end_time, refused)
        with collector_paused():
            for batch in batches:
                work.batch(batch)
        yield pa.RecordBatch.from_pydict({"partial": [work.finish().to_json()]})

    return fold


def namespace_share(key: str | None, shares: int) -> int:
    """Which of ``shares`` tasks replays the key's namespace when the workers read the trace
    themselves: the same answer in every process (a CRC of the namespace, the key up to its second
    ``/``, as Spark's ``substring_index`` takes it), 0 for a row without a key."""
    if key is None:
        return 0
    return _share_of("/".join(key.split("/", 2)[:2]), shares)


def _share_of(namespace: str, shares: int) -> int:
    return zlib.crc32(namespace.encode("utf-8", "surrogatepass")) % shares


def _share_mask(batch: Any, share: int, shares: int, known: dict[str, int]) -> Any:
    """Which rows of an Arrow batch of channel rows belong to ``share`` (:func:`namespace_share`):
    the namespaces of the batch's distinct keys cut by Arrow, each distinct namespace's share
    worked out once (``known``, kept across batches)."""
    import numpy as np
    import pyarrow.compute as pc

    keys = batch.column("key").dictionary_encode()  # a dictionary column as it is
    namespaces = pc.binary_join(pc.list_slice(pc.split_pattern(keys.dictionary, "/", max_splits=2), 0, 2), "/")
    encoded = namespaces.dictionary_encode()
    names = encoded.dictionary.to_pylist()
    per_name = np.array([known[n] if n in known else known.setdefault(n, _share_of(n, shares)) for n in names] + [0])
    per_key = np.append(per_name[encoded.indices.fill_null(len(names)).to_numpy(zero_copy_only=False)], 0)
    return per_key[keys.indices.fill_null(len(per_key) - 1).to_numpy(zero_copy_only=False)] == share


def _shared_read_fold(
    inputs: Sequence[tuple[int, str]],
    shares: int,
    settings: AuditSettings,
    registry: list[tuple[int, int, str, bool]],
    end_time: int,
    refused: Mapping[tuple[int, int], tuple[str, str]] | None = None,
) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The replay of one share of the namespaces, as a ``mapInArrow`` function over a range of
    share numbers (runs in the Python workers): every Parquet input read here, through Arrow, a
    batch at a time in file order (offset order: the first pass checked it), and the rows of the
    share's namespaces replayed as the local engine replays them (:class:`Fold` with ``share``:
    each distinct key's share worked out once, the others' rows left in the batch unread)."""

    def fold(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        for batch in batches:
            for share in batch.column("id").to_pylist():
                work = Fold(settings, registry, end_time, refused, share=(share, shares))
                with collector_paused():
                    for source, path in inputs:
                        for part in _parquet_channel_batches(path, source):
                            work.batch(part)  # the other shares' rows are passed over, not copied out
                yield pa.RecordBatch.from_pydict({"partial": [work.finish().to_json()]})

    return fold


def _arrow_histories(settings: AuditSettings) -> Callable[[Iterator[Any]], Iterator[Any]]:
    """The per-partition history invariants, as a ``mapInArrow`` function over channel and view
    rows in :data:`HistoryItem` order (Spark sorted them, spilling as it must): the partial's
    malformed rows are the channel rows that do not validate whole."""

    def check(batches: Iterator[Any]) -> Iterator[Any]:
        import pyarrow as pa

        work = Histories(settings)
        with collector_paused():
            for batch in batches:
                work.offer(item for row in batch.to_pylist() if (item := work.item(row)) is not None)
        yield pa.RecordBatch.from_pydict({"partial": [work.finish().to_json()]})

    return check


def arrow_columns(batch: Any, names: Sequence[str], words: dict[str, str]) -> list[list[Any]]:
    """A record batch's columns as Python lists, each distinct string one object across batches
    (``words`` keeps them): equal keys and broker names then compare by identity and hash once,
    and a batch allocates a few thousand strings instead of one per cell."""
    import pyarrow as pa

    columns = []
    for name in names:
        column = batch.column(name)
        if (
            pa.types.is_dictionary(column.type)
            or pa.types.is_string(column.type)
            or pa.types.is_large_string(column.type)
        ):
            encoded = column.dictionary_encode()  # a dictionary column as it is
            table: list[str | None] = [words.setdefault(w, w) for w in encoded.dictionary.to_pylist()]
            table.append(None)  # where a null index points
            indices = encoded.indices.fill_null(len(table) - 1).to_pylist()
            columns.append([table[i] for i in indices])
        else:
            columns.append(column.to_pylist())
    return columns


# -- the report -------------------------------------------------------------------------------------------
def build_report(
    paths: Sequence[str],
    engine: str,
    settings: AuditSettings,
    partial: Partial,
    other: Other,
    records: int,
    quarantine: Path | None,
    elapsed: float,
) -> AuditReport:
    ids = settings.ids()
    skipped: list[Skipped] = []
    if settings.keeps_history(other.view):
        ids += [i for i in settings.history_ids() if i not in ids]
    else:
        why = "--no-history" if settings.history is False else "the trace has no view records (--history checks them)"
        skipped.extend(Skipped(check=check, reason=why) for check in settings.history_ids())
    violations = {}
    for invariant in ids:
        kept = sorted(partial.examples.get(invariant, []), key=lambda e: (-e[0], e[1]))
        violations[invariant] = ViolationSummary(
            count=partial.violations.get(invariant, 0),
            examples=[Example(key=k or None, offset=_offset_of(order), detail=d) for order, k, d in kept],
        )
    registry_checks = [i for i in ("owner-registered", "orphan-cleaned") if i in ids]
    if not other.registry and registry_checks:
        for check in registry_checks:
            skipped.append(Skipped(check=check, reason="the trace has no registry records"))
    accepted_reasons = {r.value for r in Reason if r.accepted}
    return AuditReport(
        inputs=list(paths),
        engine=engine,
        records=records,
        channel_records=partial.channel,
        registry_records=len(other.registry),
        leader_records=other.leader,
        view_records=other.view,
        bundles=partial.bundles,
        namespaces=partial.namespaces,
        malformed=len(partial.malformed),
        quarantine=None if quarantine is None else str(quarantine),
        accepted=sum(n for r, n in partial.reasons.items() if r in accepted_reasons),
        rejected={r: n for r, n in sorted(partial.reasons.items()) if r not in accepted_reasons},
        accepted_by_reason={r: n for r, n in sorted(partial.reasons.items()) if r in accepted_reasons},
        violations=violations,
        counted={
            "accepted-version-gap": partial.reasons.get(Reason.ACCEPTED_VERSION_GAP.value, 0),
            "forced-overrides": partial.reasons.get(Reason.ACCEPTED_FORCED.value, 0),
        },
        skipped=skipped,
        settings=settings.model_dump(mode="json") | {"invariants": ids},
        start_time=other.min_time,
        end_time=other.max_time,
        elapsed_s=round(elapsed, 3),
    )


def spark_error(exc: BaseException, master: str | None = None, conf: Mapping[str, str] | None = None) -> str:
    """The line of a Spark failure a person needs: its error class and message, not the stack.
    A JVM that did not start says only that; the line then names the master and settings given,
    which are what it started with (its own words, if any, are just above)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
    found = next((m.group(0) for line in lines if (m := re.search(r"\[[A-Z][A-Z0-9_.]+\].*", line))), None)
    found = found or (lines[0] if lines else type(exc).__name__)
    if "JAVA_GATEWAY_EXITED" in found:
        given = [f"--master {master}"] if master else []
        given += [f"--conf {k}={v}" for k, v in (conf or {}).items()]
        found = "Spark's JVM did not start" + (f" with {', '.join(given)}" if given else "") + f" ({found})"
    return found


SPARK_MASTER = re.compile(
    r"local(\[(\*|[1-9]\d*)(,\s*[1-9]\d*)?\])?|local-cluster\[\d+,\s*\d+,\s*\d+\]|spark://\S+|yarn|k8s://\S+"
)
"""The masters Spark 4 takes (``SparkSubmit``: yarn, or spark, k8s or local)."""
SPARK_SIZE = re.compile(r"\d+([kmgtp]b?|b)?", re.IGNORECASE)
"""A Spark size (``JavaUtils.byteStringAs``): ``4g``, ``512m``, ``1024``."""


SPARK_REMOTE = re.compile(r"sc://[^/:;\s]+(:\d{1,5})?/?(;[^;=\s]+=[^;\s]*)*")
"""A Spark Connect URL: ``sc://HOST[:PORT]`` with optional ``/;name=value`` parameters."""


def check_spark_settings(master: str | None, conf: Mapping[str, str] | None = None, remote: str | None = None) -> None:
    """Refuse, in one line naming it, a master Spark does not know or a size setting that is not a
    size, before the JVM starts: there it is a stack trace and a gateway error naming neither. With
    ``remote`` (a Spark Connect server), a master and settings only the server can take."""
    if remote is not None:
        if master is not None:
            raise ValueError("--master and --remote: the Connect server has its own master; give one of them")
        if not SPARK_REMOTE.fullmatch(remote):
            raise ValueError(f"--remote {remote!r}: not a Spark Connect URL (sc://HOST:PORT)")
        for key in conf or {}:
            if not key.startswith("spark.sql."):
                raise ValueError(
                    f"--conf {key}: a Spark Connect client sets SQL settings only (spark.sql.*); "
                    "set the others on the server"
                )
    if master is not None and not SPARK_MASTER.fullmatch(master):
        raise ValueError(
            f"--master {master!r}: not a Spark master (local, local[N], local[*], spark://HOST:PORT, yarn, k8s://URL)"
        )
    for key, value in (conf or {}).items():
        if key.endswith((".memory", "memoryOverhead", ".maxResultSize", ".offHeap.size")) and not SPARK_SIZE.fullmatch(
            value
        ):
            raise ValueError(f"--conf {key}={value}: {key} is a size, like 512m or 4g")


def write_quarantine(path: Path, inputs: Sequence[str], malformed: Iterable[tuple[int, int | None, str, str]]) -> int:
    """One JSON line per malformed input line or row: its file, line (1-based), error and text."""
    count = 0
    with atomic_output(path) as partial, open(partial, "w", encoding="utf-8") as out:
        for source, line, error, text in sorted(malformed, key=lambda m: (m[0], m[1] or 0)):
            out.write(json.dumps({"file": inputs[source], "line": line, "error": error, "text": text}) + "\n")
            count += 1
    return count


def quarantine_path(report: Path) -> Path:
    """``report.json`` → ``report.quarantine.jsonl``, next to it."""
    return report.with_name(report.stem + ".quarantine.jsonl")


def audit(
    paths: Sequence[str | Path],
    report_path: str | Path | None = None,
    settings: AuditSettings | None = None,
    engine: str = "spark",
    master: str | None = None,
    partitions: int | None = None,
    progress: Callable[[str], None] | None = None,
    spark: Any = None,
    ship_code: bool | None = None,
    start_spark: Callable[[], Any] | None = None,
    read: str = "auto",
) -> AuditReport:
    """Audit trace files (JSON Lines, ``.gz``, or Parquet); write the report (and the quarantine
    file, if anything was malformed) when ``report_path`` is given. ``start_spark`` starts the
    session (when ``spark`` is not given) once the inputs and outputs are checked; ``read``: how
    the Spark engine reads the trace (:func:`audit_spark`)."""
    settings = settings or AuditSettings()
    settings.ids()  # an unknown invariant fails before any work
    if not paths:
        raise ValueError("no trace files given")
    names = [str(p) for p in trace_files(paths)]
    for name in names:
        check_readable(name)
    if report_path is not None:  # before any work: a report must not land on a trace
        check_report(report_path, names)
    if ship_code and engine != "spark":
        raise ValueError(f"shipping the code is for the spark engine, not {engine!r}")
    if read != "auto" and engine != "spark":
        raise ValueError(f"how Spark reads the trace is for the spark engine, not {engine!r}")
    started = time.perf_counter()
    if engine == "spark":
        partial, other, records = audit_spark(
            names, settings, master, partitions, progress, spark, ship_code, start_spark, read
        )
    elif engine == "local":
        partial, other = audit_local(names, settings, progress)
        records = partial.channel + len(other.registry) + other.leader + other.view + len(partial.malformed)
    else:
        raise ValueError(f"unknown engine {engine!r} (spark or local)")
    quarantine = None
    if report_path is not None and partial.malformed:
        quarantine = quarantine_path(Path(report_path))
        write_quarantine(quarantine, names, partial.malformed)
    report = build_report(names, engine, settings, partial, other, records, quarantine, time.perf_counter() - started)
    if report_path is not None:
        write_text_atomically(report_path, report.model_dump_json(indent=2) + "\n")
    return report


def check_report(report: str | Path, inputs: Sequence[str | Path]) -> None:
    """The report and its quarantine file can be written and overwrite no input (``ValueError``
    naming which, before any work)."""
    check_output(report, inputs, "--report")
    check_output(quarantine_path(Path(report)), inputs, "--report's quarantine file")
