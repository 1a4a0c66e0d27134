"""The trace format: what the simulator writes and what the auditor reads (``traces/README.md``).

JSON Lines, optionally gzip-compressed, one record per line, ordered by ``offset``. Four kinds:
``channel`` (a message on the channel topic, or a metadata-store write, as a reader sees it;
``value`` null is a tombstone), ``registry``, ``leader`` and ``view`` (what one broker's table
view took; written by the simulator). Reading never stops at a bad line: it is counted, kept with
its line number and the reason, and reading goes on.
"""

from __future__ import annotations

import contextlib
import gc
import gzip
import io
import json
import os
import re
import tempfile
import zlib
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any, Literal, Protocol

import pydantic
from pydantic import BaseModel, ConfigDict, Field

from statechan.keys import BadKeyError, parse_key
from statechan.states import ServiceUnitState
from statechan.values import LONG_MAX, LONG_MIN, ServiceUnitStateData

TRACE_FORMAT_VERSION = 1

_Frozen = ConfigDict(frozen=True, extra="forbid")


def _check_key(key: str) -> str:
    try:
        parse_key(key)
    except BadKeyError as exc:
        raise ValueError(str(exc)) from None
    return key


BundleKey = Annotated[
    str, pydantic.AfterValidator(_check_key), Field(description="<tenant>/<ns>/0xXXXXXXXX_0xXXXXXXXX")
]
Position = Annotated[int, Field(ge=0, le=LONG_MAX)]
"""An offset or a time (ms): a Java ``long`` that is not negative, as Pulsar's are."""

_LONG_FIELDS = ("versionId", "version_id", "timestamp")


def _java_longs(data: Any) -> Any:
    """A value's ``long`` fields must fit a Java ``long``: Pulsar's JSON reader (Jackson) refuses a
    bigger number, where the value model would wrap it (and change the resolver's verdicts)."""
    if isinstance(data, Mapping):
        for name in _LONG_FIELDS:
            number = _as_integer(data.get(name))
            if number is not None and not LONG_MIN <= number <= LONG_MAX:
                raise ValueError(f"{name}: {number} is out of range of a Java long (Jackson refuses it)")
    return data


def _as_integer(raw: object) -> int | None:
    """The integer the value model would make of ``raw`` in any spelling it takes (a number, a
    whole float, a string of digits), so the range rule holds however the number was written."""
    if type(raw) is int:
        return raw
    if type(raw) is float and raw.is_integer():
        return int(raw)
    if type(raw) is str and re.fullmatch(r"\s*[+-]?[0-9]{1,4000}\s*", raw):
        return int(raw)
    return None


PulsarValue = Annotated[ServiceUnitStateData, pydantic.BeforeValidator(_java_longs)]
"""A value as Pulsar's reader takes it: validated, with its longs in range (not wrapped)."""
_VALUE = pydantic.TypeAdapter(PulsarValue)


class ChannelRecord(BaseModel):
    """A message on the channel topic (or a committed metadata-store write) as a reader sees it."""

    model_config = _Frozen
    kind: Literal["channel"] = "channel"
    offset: Position = Field(description="global position in the trace")
    publish_time: Position = Field(description="ms since the epoch")
    key: BundleKey
    value: PulsarValue | None = Field(description="Pulsar ServiceUnitStateData JSON; null is a tombstone")
    message_id: str | None = Field(None, description='"ledger:entry" (or "zxid:N" for a metadata store)')
    producer: str | None = Field(None, description="the broker that published it")


class RegistryRecord(BaseModel):
    model_config = _Frozen
    kind: Literal["registry"] = "registry"
    offset: Position
    time: Position
    broker: str = Field(min_length=1)
    event: Literal["registered", "unregistered"]


class LeaderRecord(BaseModel):
    model_config = _Frozen
    kind: Literal["leader"] = "leader"
    offset: Position
    time: Position
    broker: str = Field(min_length=1)


class ViewRecord(BaseModel):
    """What one broker's table view did with a record (the simulator writes these)."""

    model_config = _Frozen
    kind: Literal["view"] = "view"
    offset: Position
    time: Position
    observer: str = Field(min_length=1)
    incarnation: int | None = Field(
        None, ge=1, le=LONG_MAX, description="the observer's incarnation (a restart starts afresh)"
    )
    key: BundleKey
    value: PulsarValue | None
    accepted: bool


TraceRecord = Annotated[ChannelRecord | RegistryRecord | LeaderRecord | ViewRecord, Field(discriminator="kind")]
_RECORD = pydantic.TypeAdapter(TraceRecord)
AnyRecord = ChannelRecord | RegistryRecord | LeaderRecord | ViewRecord


def json_schema() -> dict[str, Any]:
    """The JSON Schema of one trace line (``traces/trace.schema.json`` is generated from it)."""
    schema = _RECORD.json_schema(by_alias=True)
    schema["$schema"] = "https://json-schema.org/draft/2020-12/schema"
    schema["title"] = f"statechan trace record (format {TRACE_FORMAT_VERSION})"
    return schema


@dataclass(frozen=True)
class BadLine:
    """A line that is not a trace record: where, why, and the line itself (kept, not lost)."""

    source: str
    line: int
    reason: str
    text: str

    def __str__(self) -> str:
        return f"{self.source}:{self.line}: {self.reason}"


@dataclass
class ReadStats:
    records: int = 0
    bad: list[BadLine] = field(default_factory=list)


def parse_record(data: object) -> ChannelRecord | RegistryRecord | LeaderRecord | ViewRecord:
    """One record from its decoded JSON (raises ``pydantic.ValidationError`` naming the field)."""
    return _RECORD.validate_python(data)


def validation_reason(exc: pydantic.ValidationError) -> str:
    """A validation error in one line: where (``value.state``), what, and how many more."""
    first = exc.errors()[0]
    where = ".".join(str(p) for p in first["loc"]) or "record"
    more = f" (+{exc.error_count() - 1} more)" if exc.error_count() > 1 else ""
    return f"{where}: {first['msg']}{more}"


def error_reason(exc: Exception, within: str = "") -> str:
    """Why something was refused, in one line: a validation error names its field (after
    ``within``, the part validated); any other error's message already says what is wrong."""
    if isinstance(exc, pydantic.ValidationError):
        return f"{within}{validation_reason(exc)}"
    return str(exc)


def open_text(path: str | Path) -> io.TextIOBase:
    """A trace file for reading, gunzipped when it ends in ``.gz``. Read as Spark's text reader
    reads it, so both engines see the same lines: a byte-order mark at the start is skipped, and
    bytes that are not UTF-8 become U+FFFD (the line is then malformed, not the whole file)."""
    p = Path(path)
    # the caller closes the wrapper, and with it the file
    raw: io.BufferedReader | gzip.GzipFile = gzip.open(p, "rb") if p.suffix == ".gz" else open(p, "rb")  # noqa: SIM115
    if raw.peek(3)[:3] == BOM:  # not the utf-8-sig codec: it drops a lone first byte of a mark at the end
        raw.read(3)
    return io.TextIOWrapper(raw, encoding="utf-8", errors="replace")


BOM = b"\xef\xbb\xbf"


def check_readable(path: str | Path) -> None:
    """Fail early, in one line naming the file, on a trace that cannot be read through: missing,
    a ``.parquet`` that is not a statechan Parquet trace, a ``.gz`` that is not whole gzip."""
    if not Path(path).is_file():
        if Path(path).exists():  # a FIFO or a device: reading it would block or never end
            raise ValueError(f"{path}: not a regular file")
        raise FileNotFoundError(f"no such trace file: {path}")
    if is_parquet(path):
        check_parquet(path)
    elif str(path).endswith(".gz"):
        check_gzip(path)


def check_parquet(path: str | Path) -> None:
    """A file that is not Parquet, or lacks a column of the flat schema, fails with its name."""
    import pyarrow.parquet as pq

    try:
        schema = pq.ParquetFile(str(path)).schema_arrow
    except Exception as exc:  # pyarrow raises several kinds for a file that is not Parquet
        raise ValueError(f"{path}: not a readable Parquet file ({exc})") from None
    missing = [n for n, _ in PARQUET_COLUMNS if n not in schema.names]
    if missing:
        raise ValueError(f"{path}: not a statechan Parquet trace (no column {', '.join(missing)})")
    twice = sorted({n for n in schema.names if schema.names.count(n) > 1})
    if twice:  # which of the two a reader takes is up to the reader
        raise ValueError(f"{path}: not a statechan Parquet trace (column {', '.join(twice)} more than once)")
    expected = arrow_schema()
    odd = [
        f"{name} is {schema.field(name).type}, expected {expected.field(name).type}"
        for name, _ in PARQUET_COLUMNS
        if not schema.field(name).type.equals(expected.field(name).type)
    ]
    if odd:  # Arrow and Spark would fail halfway, on a cast no row can pass
        raise ValueError(f"{path}: not a statechan Parquet trace (column {'; '.join(odd)}; see traces/README.md)")


def check_gzip(path: str | Path) -> None:
    """Read a ``.gz`` trace through to its end: a file that is not gzip, or whose stream is cut
    short, fails here with its name (readers would fail halfway, Spark's without the name)."""
    lines = 0
    try:
        with gzip.open(path, "rb") as handle:
            while chunk := handle.read1(1 << 16):
                lines += chunk.count(b"\n")
    except gzip.BadGzipFile:
        raise ValueError(f"{path}: not a gzip file (a plain JSON Lines trace ends in .jsonl)") from None
    except EOFError:
        raise ValueError(
            f"{path}: the gzip stream is cut short after {lines:,} whole lines; `zcat {path} > part.jsonl` "
            "keeps what is there, which can be audited"
        ) from None
    except zlib.error as exc:
        raise ValueError(f"{path}: corrupt gzip data after {lines:,} whole lines ({exc})") from None


NOT_UTF8 = "the line has bytes that are not UTF-8, shown as U+FFFD"
"""Why a line holding U+FFFD is malformed: both engines read bytes that are not UTF-8 as it, so a
broker name or key with it would be a name that no broker has."""


def decode_line(text: str) -> AnyRecord | str:
    """One stripped, non-blank JSON Lines line: its record, or why it is not one. The one rule
    every reader applies (validate, convert, show, both audit engines): any text gives one or
    the other, never an exception."""
    try:
        data = json.loads(text)
        if "\\u" in text:  # an escape may spell a lone surrogate, which no UTF-8 reader or writer takes
            json.dumps(data, ensure_ascii=False).encode("utf-8")
        record = parse_record(data)
    except json.JSONDecodeError as exc:
        reason = f"not JSON: {exc.msg} at column {exc.colno}"
    except pydantic.ValidationError as exc:
        reason = validation_reason(exc)
    except RecursionError:
        reason = "not a record: JSON nested deeper than the parser's recursion limit"
    except UnicodeError:  # a lone surrogate escape (\ud800): not text, in any encoding
        reason = "not a record: a string holds a lone surrogate (\\udXXX), which is not Unicode text"
    except ValueError as exc:  # Python's limit on the digits of an integer
        reason = f"not JSON: {str(exc).split(':', 1)[0]}"
    else:
        if "\ufffd" not in text:
            return record
        return NOT_UTF8
    if "\ufffd" in text:
        reason += f" ({NOT_UTF8})"
    return reason


class Wanted(Protocol):
    """A reader's selection, applied before a line or row becomes a record: a cheap look at a JSON
    line's text, and an Arrow mask over a Parquet batch (each may keep more than is wanted; the
    caller looks again at the records)."""

    def might_want(self, text: str) -> bool: ...

    def arrow_mask(self, batch: Any) -> Any: ...


def read_lines(
    path: str | Path, wanted: Wanted | None = None, skipped: Callable[[int], None] | None = None
) -> Iterator[tuple[int, AnyRecord | BadLine]]:
    """The one reader of a trace file, JSON Lines (plain or ``.gz``) or Parquet (by its name): each
    line or row, numbered from 1 (blank lines are not records), as its record or as a
    :class:`BadLine` saying why it is not one (:func:`decode_line`'s rule for a line,
    :func:`from_flat_row`'s for a row). With ``wanted``, the lines or rows it leaves out are only
    counted, through ``skipped``."""
    source = str(path)
    if is_parquet(path):
        for number, row in parquet_rows(path, None if wanted is None else wanted.arrow_mask, skipped):
            try:
                yield number, from_flat_row(row)
            except (ValueError, KeyError, TypeError) as exc:  # pydantic's ValidationError is a ValueError
                yield number, BadLine(source, number, error_reason(exc), row_text(row))
        return
    with open_text(path) as handle:
        for number, line in enumerate(handle, start=1):
            text = line.strip()
            if not text:
                continue
            if wanted is not None and not wanted.might_want(text):
                if skipped is not None:
                    skipped(1)
                continue
            yield number, decoded_line(source, number, text)


def decoded_line(source: str, number: int, text: str) -> AnyRecord | BadLine:
    """Line ``number`` of ``source``, stripped and not blank: its record, or a :class:`BadLine`
    (:func:`decode_line`'s rule; Spark's text reader hands the auditor's workers lines through this)."""
    record = decode_line(text)
    return BadLine(source, number, record, text) if isinstance(record, str) else record


def read_records(path: str | Path, stats: ReadStats | None = None) -> Iterator[AnyRecord]:
    """Every good record of a trace in either format (by its name), or of a folder of part files,
    in file order; bad lines or rows go to ``stats.bad``."""
    stats = stats if stats is not None else ReadStats()
    for file in trace_files([path]):
        for _, record in read_lines(file):
            if isinstance(record, BadLine):
                stats.bad.append(record)
                continue
            stats.records += 1
            yield record


read_trace = read_records
"""The JSON Lines reader's old name: :func:`read_records` reads every format."""
read_parquet = read_records
"""The Parquet reader's old name: :func:`read_records` reads every format."""

TRACE_SUFFIXES = (".parquet", ".jsonl", ".jsonl.gz")


def trace_files(paths: Iterable[str | Path]) -> list[Path]:
    """The trace files named: files as given, folders as their trace files in name order (part
    files, as Spark and the generator's users keep them; names starting with ``.`` or ``_`` left
    out, as Spark and Hadoop do: a killed writer's temporary file, ``_SUCCESS``). ``ValueError``
    naming a path that is neither, or a folder without trace files."""
    inputs: list[Path] = []
    for path in map(Path, paths):
        if path.is_dir():
            found = sorted(
                p for p in path.iterdir() if p.name.endswith(TRACE_SUFFIXES) and not p.name.startswith((".", "_"))
            )
            if not found:
                raise ValueError(f"{path}: no .parquet, .jsonl or .jsonl.gz files in this folder")
            inputs.extend(found)
        elif path.is_file():
            inputs.append(path)
        else:
            raise ValueError(f"{path}: not a regular file" if path.exists() else f"{path}: no such file")
    return inputs


def to_json_line(record: BaseModel | Mapping[str, object]) -> str:
    """One line of a trace: a record model, or a record as a plain mapping (the simulator's)."""
    data = record.model_dump(mode="json", by_alias=True) if isinstance(record, BaseModel) else record
    return json.dumps(data, separators=(",", ":"))


def write_records(records: Iterable[BaseModel | Mapping[str, object]], path: str | Path) -> int:
    """Write records as JSON Lines (gzip when the name ends in ``.gz``); returns how many."""
    p = Path(path)
    count = 0
    with gzip.open(p, "wt", encoding="utf-8") if p.suffix == ".gz" else open(p, "w", encoding="utf-8") as out:
        for record in records:
            out.write(to_json_line(record) + "\n")
            count += 1
    return count


def record_from_message(
    key: str,
    payload: bytes | None,
    message_id: str,
    publish_time: int,
    offset: int,
    producer: str | None = None,
) -> ChannelRecord:
    """A channel record from what a Pulsar reader gives for one message of the channel topic:
    its key, its payload bytes (``None`` or empty for a tombstone), its message id
    (``"ledger:entry"``), its publish time (ms) and the producer's name.

    A payload that is not a valid ``ServiceUnitStateData`` raises ``pydantic.ValidationError``
    (the caller counts it as malformed and keeps going).
    """
    value = None if not payload else value_from_json(payload)
    return ChannelRecord(
        offset=offset,
        publish_time=publish_time,
        key=key,
        value=value,
        message_id=message_id,
        producer=producer or None,
    )


def value_from_json(data: str | bytes) -> ServiceUnitStateData:
    """A value from Pulsar's JSON as Pulsar's reader takes it: its longs in range, not wrapped
    (raises ``pydantic.ValidationError`` naming the field)."""
    return _VALUE.validate_json(data)


# -- Parquet ---------------------------------------------------------------------------------------
PARQUET_COLUMNS: tuple[tuple[str, str], ...] = (
    ("kind", "string: channel | registry | leader | view"),
    ("offset", "int64"),
    ("time", "int64: publish_time for channel records, time for the others"),
    ("key", "string, null for registry and leader records"),
    ("has_value", "bool: false for a tombstone (channel, view), null for registry and leader"),
    ("state", "string, the value's state"),
    ("dst_broker", "string"),
    ("source_broker", "string"),
    ("force", "bool"),
    ("timestamp", "int64, the value's timestamp"),
    ("version_id", "int64"),
    ("split_children", "list<struct<range: string, broker: string>>, the split map"),
    ("message_id", "string (channel)"),
    ("producer", "string (channel)"),
    ("broker", "string (registry, leader)"),
    ("event", "string (registry)"),
    ("observer", "string (view)"),
    ("incarnation", "int64 (view)"),
    ("accepted", "bool (view)"),
)
"""The flat Parquet schema: one row per record, the value's fields as nullable columns."""


def value_columns(
    state: ServiceUnitState,
    dst_broker: str | None,
    source_broker: str | None,
    force: bool,
    timestamp: int,
    version_id: int,
    split: Iterable[tuple[str, str | None]] | None,
) -> dict[str, Any]:
    """A value's columns in the flat schema (``split``: the split map's (range, broker) pairs)."""
    return {
        "state": state.value,
        "dst_broker": dst_broker,
        "source_broker": source_broker,
        "force": force,
        "timestamp": timestamp,
        "version_id": version_id,
        "split_children": None if split is None else [{"range": r, "broker": b} for r, b in split],
    }


def flat_row(record: AnyRecord) -> dict[str, Any]:
    """A record as a row of the flat schema (:data:`PARQUET_COLUMNS`)."""
    row: dict[str, Any] = dict.fromkeys(name for name, _ in PARQUET_COLUMNS)
    row["kind"], row["offset"] = record.kind, record.offset
    if isinstance(record, ChannelRecord | ViewRecord):
        row["key"] = record.key
        value = record.value
        row["has_value"] = value is not None
        if value is not None:
            row.update(
                value_columns(
                    value.state,
                    value.dst_broker,
                    value.source_broker,
                    value.force,
                    value.timestamp,
                    value.version_id,
                    value.split_service_unit_to_dest_broker,
                )
            )
    if isinstance(record, ChannelRecord):
        row.update(time=record.publish_time, message_id=record.message_id, producer=record.producer)
    elif isinstance(record, ViewRecord):
        row.update(time=record.time, observer=record.observer, incarnation=record.incarnation, accepted=record.accepted)
    elif isinstance(record, RegistryRecord):
        row.update(time=record.time, broker=record.broker, event=record.event)
    else:
        row.update(time=record.time, broker=record.broker)
    return row


_KINDS = ("channel", "registry", "leader", "view")


def _split_map(children: list[Any]) -> dict[Any, Any]:
    if any(not isinstance(child, dict) for child in children):
        raise ValueError("split_children: a child is null")
    return {child.get("range"): child.get("broker") for child in children}


def from_flat_row(row: dict[str, Any]) -> AnyRecord:
    """A record back from a row of the flat schema (validated)."""
    value = None
    if row.get("has_value"):
        split = row.get("split_children")
        value = {
            "state": row["state"],
            "dstBroker": row["dst_broker"],
            "sourceBroker": row["source_broker"],
            "force": row["force"],
            "versionId": row["version_id"],
            "splitServiceUnitToDestBroker": None if split is None else _split_map(split),
        }
        if row.get("timestamp") is not None:  # a null one is the JSON's absent field (0); the audit ignores it
            value["timestamp"] = row["timestamp"]
    kind = row["kind"]
    if kind not in _KINDS:
        raise ValueError(f"kind: unknown record kind {kind!r}")
    data: dict[str, Any] = {"kind": kind, "offset": row["offset"]}
    if kind == "channel":
        data.update(publish_time=row["time"], key=row["key"], value=value)
        data.update(message_id=row["message_id"], producer=row["producer"])
    elif kind == "view":
        data.update(
            time=row["time"],
            observer=row["observer"],
            incarnation=row["incarnation"],
            key=row["key"],
            value=value,
            accepted=row["accepted"],
        )
    elif kind == "registry":
        data.update(time=row["time"], broker=row["broker"], event=row["event"])
    else:
        data.update(time=row["time"], broker=row["broker"])
    return parse_record(data)


def arrow_schema() -> Any:
    """The flat schema as a ``pyarrow.Schema``."""
    import pyarrow as pa

    types = {
        "offset": pa.int64(),
        "time": pa.int64(),
        "timestamp": pa.int64(),
        "version_id": pa.int64(),
        "incarnation": pa.int64(),
        "has_value": pa.bool_(),
        "force": pa.bool_(),
        "accepted": pa.bool_(),
        "split_children": pa.list_(pa.struct([("range", pa.string()), ("broker", pa.string())])),
    }
    return pa.schema([(name, types.get(name, pa.string())) for name, _ in PARQUET_COLUMNS])


def write_flat_rows(
    rows: Iterable[Mapping[str, Any]], path: str | Path, batch_rows: int = 100_000, compression: str = "snappy"
) -> int:
    """Write rows of the flat schema (a missing column is null) to a Parquet file; returns how
    many. Needs the ``spark`` extra's pyarrow."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = arrow_schema()
    count = 0
    with pq.ParquetWriter(str(path), schema, compression=compression) as writer:
        batch: list[Mapping[str, Any]] = []
        for row in rows:
            batch.append(row)
            if len(batch) >= batch_rows:
                writer.write_table(pa.Table.from_pylist(batch, schema=schema))
                count += len(batch)
                batch = []
        if batch or count == 0:
            writer.write_table(pa.Table.from_pylist(batch, schema=schema))
            count += len(batch)
    return count


def write_parquet(records: Iterable[AnyRecord], path: str | Path, batch_rows: int = 100_000) -> int:
    """Write records to a Parquet file with the flat schema (needs the ``spark`` extra's pyarrow)."""
    return write_flat_rows((flat_row(record) for record in records), path, batch_rows)


def row_text(row: Mapping[str, Any]) -> str:
    """A row of the flat schema as one JSON object of its non-null columns, in schema order: how
    a bad Parquet row is shown and quarantined (the file has no text of its own)."""
    return json.dumps({n: row[n] for n, _ in PARQUET_COLUMNS if row.get(n) is not None}, default=str)


PARQUET_BATCH_ROWS = 65_536
"""Rows per Arrow batch when a Parquet trace is read in this process."""


def parquet_batches(
    path: str | Path, columns: Sequence[str] | None = None, row_group: int | None = None
) -> Iterator[tuple[int, Any]]:
    """A Parquet trace's Arrow batches (of :data:`PARQUET_BATCH_ROWS` rows at most) in file order,
    or those of one row group, each with the number of the file's rows before it (a row's line is
    that plus its index plus one: the auditor's quarantine numbers rows so)."""
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(str(path))
    groups = None if row_group is None else [row_group]
    base = sum(parquet.metadata.row_group(g).num_rows for g in range(row_group or 0))
    for batch in parquet.iter_batches(PARQUET_BATCH_ROWS, row_groups=groups, columns=columns):
        yield base, batch
        base += batch.num_rows


def parquet_rows(
    path: str | Path, mask: Callable[[Any], Any] | None = None, skipped: Callable[[int], None] | None = None
) -> Iterator[tuple[int, dict[str, Any]]]:
    """A Parquet trace's rows as dicts of the flat schema, not validated, each with its 1-based
    line; with ``mask`` (an Arrow batch to a boolean array, null for no) only the rows it picks,
    the others counted through ``skipped``."""
    import pyarrow.compute as pc

    for base, batch in parquet_batches(path):
        if mask is None:
            yield from enumerate(batch.to_pylist(), start=base + 1)
            continue
        picked = pc.indices_nonzero(pc.fill_null(mask(batch), False))
        if skipped is not None:
            skipped(batch.num_rows - len(picked))
        yield from zip([base + i + 1 for i in picked.to_pylist()], batch.take(picked).to_pylist(), strict=True)


def split_map_errors(path: str | Path) -> dict[int, tuple[str, str]]:
    """The channel rows of a Parquet trace whose split map makes them malformed (a null child, a
    child without a range), by 1-based row number, with the error and text :func:`read_parquet`
    gives them. The audit's replay reads no split map (no record invariant does); this finds such
    rows from the one nested column, so every reader refuses the same rows."""
    import pyarrow.compute as pc
    import pyarrow.parquet as pq

    parquet = pq.ParquetFile(str(path))
    suspects: list[int] = []
    for base, batch in parquet_batches(path, ["split_children"]):
        column = batch.column("split_children")
        odd = pc.is_null(pc.struct_field(pc.list_flatten(column), "range"))  # a null child has no range either
        if pc.any(odd).as_py():
            suspects.extend(sorted({base + i for i in pc.filter(pc.list_parent_indices(column), odd).to_pylist()}))
    found: dict[int, tuple[str, str]] = {}
    first = 0
    for group in range(parquet.metadata.num_row_groups):  # rare: the groups holding suspects, read whole
        size = parquet.metadata.row_group(group).num_rows
        inside = [i for i in suspects if first <= i < first + size]
        if inside:
            table = parquet.read_row_group(group)
            for index in inside:
                row = table.slice(index - first, 1).to_pylist()[0]
                try:
                    if row.get("kind") == "channel":
                        from_flat_row(row)
                except ValueError as exc:
                    found[index + 1] = (error_reason(exc), row_text(row))
        first += size
    return found


def is_parquet(path: str | Path) -> bool:
    return Path(path).suffix == ".parquet"


def convert(source: str | Path, destination: str | Path, stats: ReadStats | None = None) -> int:
    """Convert between JSON Lines (``.jsonl``, ``.jsonl.gz``) and Parquet (``.parquet``), by the
    names' suffixes; bad lines or rows are counted in ``stats`` and left out. Returns records
    written. The destination appears whole or not at all, and is never the source."""
    check_output(destination, [source], "destination")
    records = read_records(source, stats)
    with atomic_output(destination) as partial:
        if is_parquet(destination):
            return write_parquet(records, partial)
        return write_records(records, partial)


# -- outputs --------------------------------------------------------------------------------------------
def check_output(
    path: str | Path, inputs: Iterable[str | Path] = (), what: str = "output", role: str = "an input"
) -> None:
    """Fail before any work, in one line naming ``what``, on an output that cannot be written
    where asked: its folder missing, a folder in its place, or one of ``inputs`` (resolved paths:
    an output must never overwrite what is being read, nor another output; ``role`` says which)."""
    p = Path(path)
    if not p.parent.is_dir():
        raise ValueError(f"{what} {p}: no such directory {p.parent}")
    if p.is_dir():
        raise ValueError(f"{what} {p}: is a directory; name a file")
    target = p.resolve()
    for source in inputs:
        if Path(source).resolve() == target:
            raise ValueError(f"{what} {p}: is {role} ({source}); writing it would destroy it")


_SUFFIXES = (".jsonl.gz", ".quarantine.jsonl", ".jsonl", ".parquet", ".json")


@contextlib.contextmanager
def atomic_output(path: str | Path) -> Iterator[Path]:
    """A temporary file beside ``path`` (same folder, same format suffix) renamed onto it when
    the block ends well and removed when it does not: a reader never sees half an output, and a
    failed or interrupted run leaves the previous file as it was."""
    p = Path(path)
    suffix = next((s for s in _SUFFIXES if p.name.endswith(s)), p.suffix)
    # created here, exclusively, under a name nobody can guess (a planted link is never followed)
    handle, name = tempfile.mkstemp(dir=p.parent, prefix=f".{p.name}.", suffix=f".tmp{suffix}")
    os.close(handle)
    mask = os.umask(0o022)
    os.umask(mask)
    os.chmod(name, 0o666 & ~mask)  # the permissions a plain open() would have given the output
    temporary = Path(name)
    try:
        yield temporary
        os.replace(temporary, p)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: str | Path, text: str) -> None:
    """``text`` as the whole of ``path``, through :func:`atomic_output`."""
    with atomic_output(path) as partial:
        partial.write_text(text, encoding="utf-8")


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No cyclic garbage collection inside: for code that makes millions of short-lived tuples and
    no cycles (the audit's fold, the generator), where the collector would walk everything alive
    every few thousand new ones (a quarter of the fold's time, half the generator's)."""
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()
