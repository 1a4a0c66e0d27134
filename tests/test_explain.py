"""`statechan traces show`: a key's story, its verdicts the auditor's own."""

from __future__ import annotations

import json
import random
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statechan.audit import AuditSettings, audit
from statechan.cli import app
from statechan.explain import Selection, story
from statechan.states import ServiceUnitState, StorageType
from statechan.tracegen import PLANT_KINDS, write_generated
from statechan.traces import (
    AnyRecord,
    ChannelRecord,
    RegistryRecord,
    convert,
    read_records,
    read_trace,
    write_records,
)

runner = CliRunner()


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("explain") / "t.jsonl"
    write_generated(path, 4_000, seed=5, plant=dict.fromkeys(PLANT_KINDS, 1))
    return path


@pytest.fixture(scope="module")
def scrambled(planted: Path) -> list[Path]:
    """The planted trace with one channel record in five given a random state, destination and
    version (every kind of verdict occurs), split over a Parquet and a JSON Lines file, backwards."""
    rng = random.Random(3)
    records = []
    for record in read_trace(planted):
        if isinstance(record, ChannelRecord) and record.value is not None and rng.random() < 0.2:
            value = record.value.model_copy(
                update={
                    "state": rng.choice(list(ServiceUnitState)),
                    "dst_broker": rng.choice(["broker-0:8080", "broker-1:8080", None]),
                    "version_id": record.value.version_id + rng.choice([-1, 0, 1, 1, 1, 2]),
                }
            )
            record = record.model_copy(update={"value": value})
        records.append(record)
    records.reverse()
    half = len(records) // 2
    first, second = planted.parent / "scrambled-1.parquet", planted.parent / "scrambled-2.jsonl"
    write_records(records[:half], second)
    convert(second, first)
    write_records(records[half:], second)
    return [first, second]


@pytest.mark.parametrize("storage", list(StorageType))
def test_the_verdicts_are_the_auditors(scrambled: list[Path], storage: StorageType) -> None:
    """Every key of the trace followed at once: the verdicts add up to the audit's counts by reason."""
    keys = frozenset(r.key for path in scrambled for r in _records(path) if isinstance(r, ChannelRecord))
    told = story(scrambled, Selection(keys), storage)
    reasons = Counter(e.verdict.reason.value for e in told.entries if e.verdict is not None)
    report = audit(scrambled, settings=AuditSettings(storage=storage), engine="local")
    assert reasons == Counter(report.accepted_by_reason) + Counter(report.rejected)
    assert len(reasons) >= 6  # the scrambling reached most of the resolver's branches
    assert sorted(told.keys) == sorted(keys)
    assert told.records == report.records


def _records(path: Path) -> Iterator[AnyRecord]:
    return read_records(path)


def test_an_audit_example_is_told_at_its_offset(planted: Path) -> None:
    report = audit([planted], engine="local")
    example = report.violations["no-resurrection"].examples[0]
    assert example.key is not None
    assert example.offset is not None
    told = story([planted], Selection(frozenset({example.key})))
    at = next(e for e in told.entries if e.offset == example.offset)
    assert at.verdict is not None
    assert at.verdict.accepted
    assert at.held is not None
    assert at.held.state is ServiceUnitState.Owned
    earlier = [e.held for e in told.entries if e.verdict is not None and e.offset < example.offset]
    assert any(h is not None and h.state is ServiceUnitState.Deleted for h in earlier)
    window = told.around(example.offset, 1)
    assert [e.offset for e in window][1] == example.offset
    assert len(window) <= 3


def test_parquet_and_json_lines_tell_the_same_story(planted: Path, tmp_path: Path) -> None:
    parquet = tmp_path / "t.parquet"
    convert(planted, parquet)
    selection = Selection(namespace="plant/single-owner-0")
    from_json, from_parquet = story([planted], selection), story([parquet], selection)
    assert from_json.entries == from_parquet.entries
    assert (from_json.records, from_json.malformed) == (from_parquet.records, from_parquet.malformed)
    assert len(from_json.keys) == 2  # the planted overlap: a parent range and a child range


def _channel(offset: int, key: str, state: str, dst: str | None, version: int) -> dict[str, object]:
    value = {"state": state, "dstBroker": dst, "sourceBroker": None, "versionId": version, "force": False}
    return {"kind": "channel", "offset": offset, "publish_time": offset, "key": key, "value": value}


def _registry(offset: int, broker: str, event: str) -> dict[str, object]:
    return {"kind": "registry", "offset": offset, "time": offset, "broker": broker, "event": event}


KEY = "t/ns/0x00000000_0xffffffff"


def test_context_is_the_named_brokers_registry_and_the_leader(tmp_path: Path) -> None:
    trace = tmp_path / "t.jsonl"
    records = [
        _registry(0, "b1", "registered"),
        _registry(1, "b2", "registered"),
        _registry(2, "b1", "unregistered"),
        _registry(3, "b1", "registered"),  # b1's last before the key's first record
        {"kind": "leader", "offset": 4, "time": 4, "broker": "b2"},
        _channel(5, KEY, "Assigning", "b1", 1),
        _registry(6, "b2", "unregistered"),  # b2 is not named by the key's records
        _channel(7, KEY, "Owned", "b1", 2),
        _channel(8, KEY, "Owned", "b1", 2),  # a duplicate: stale
        {"kind": "leader", "offset": 9, "time": 9, "broker": "b1"},  # after the key's last record
        _registry(10, "b1", "unregistered"),  # after it too, but orphan-cleaned reads it
        _channel(11, "t/ns2/0x00000000_0xffffffff", "Assigning", "b2", 1),
    ]
    write_records(records, trace)
    trace.write_text(trace.read_text() + "not json " + KEY + "\n")
    told = story([trace], Selection(frozenset({KEY})))
    assert [e.offset for e in told.entries] == [3, 4, 5, 7, 8, 10]
    assert [str(e.verdict) for e in told.entries if e.verdict] == ["accepted", "accepted", "rejected: stale-version"]
    assert isinstance(told.entries[-1].record, RegistryRecord)
    assert (told.records, told.malformed) == (13, 1)


@pytest.mark.parametrize(
    ("args", "status", "message"),
    [
        ([], 2, "name a key (--key) or a namespace"),
        (["--key", "t/ns/nonsense"], 2, "not a service-unit key"),
        (["--namespace", "justone"], 2, "expected tenant/namespace"),
        (["--key", "t/other/0x00000000_0xffffffff"], 1, "no channel record of the selected keys"),
        (["--key", KEY, "--around", "7", "--context", "0"], 0, "1 of 6 entries shown"),
    ],
)
def test_cli(tmp_path: Path, args: list[str], status: int, message: str) -> None:
    trace = tmp_path / "t.jsonl"
    write_records(
        [
            _registry(3, "b1", "registered"),
            _channel(5, KEY, "Assigning", "b1", 1),
            _channel(7, KEY, "Owned", "b1", 2),
            _channel(8, KEY, "Owned", "b1", 2),
            _registry(10, "b1", "unregistered"),
            {"kind": "leader", "offset": 6, "time": 6, "broker": "b1"},
        ],
        trace,
    )
    result = runner.invoke(app, ["traces", "show", str(trace), *args])
    assert result.exit_code == status, result.output
    assert message in " ".join(result.output.split())


def test_the_audit_points_at_the_story(planted: Path, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = runner.invoke(app, ["audit", str(planted), "--engine", "local", "--report", str(report)])
    assert result.exit_code == 1, result.output
    hint = " ".join(result.output.split()).split("look closer: statechan ", 1)[1].split(" ")
    shown = runner.invoke(app, hint)
    assert shown.exit_code == 0, shown.output
    first = next(e for v in json.loads(report.read_text())["violations"].values() for e in v["examples"])
    assert f"{first['offset']:,}" in shown.output


def test_json_output_is_the_story_line_by_line(planted: Path) -> None:
    key = next(r.key for r in read_trace(planted) if isinstance(r, ChannelRecord) and r.key.startswith("plant/single"))
    result = runner.invoke(app, ["traces", "show", str(planted), "--key", key, "--json"])
    assert result.exit_code == 0, result.output
    lines = [json.loads(line) for line in result.output.splitlines()]
    told = story([planted], Selection(frozenset({key})))
    assert [line["offset"] for line in lines] == [e.offset for e in told.entries]
    verdicts = [(line["verdict"]["reason"], line["held"]["versionId"]) for line in lines if "verdict" in line]
    expected = [(e.verdict.reason.value, e.held.version_id) for e in told.entries if e.verdict and e.held]
    assert verdicts == expected
    assert {line["kind"] for line in lines} >= {"channel", "registry"}


def test_a_folder_of_traces_is_read_whole(planted: Path, tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    (folder / "part-0.jsonl").write_bytes(planted.read_bytes())
    (folder / "notes.txt").write_text("not a trace\n")
    argv = ["traces", "show", "--namespace", "plant/single-owner-0"]
    whole, parts = (
        runner.invoke(app, [*argv[:2], str(planted), *argv[2:]]),
        runner.invoke(app, [*argv[:2], str(folder), *argv[2:]]),
    )
    assert parts.exit_code == 0, parts.output
    assert parts.output == whole.output
    assert "2 keys" in parts.output
