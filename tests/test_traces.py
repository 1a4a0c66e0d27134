"""The trace format: records, the JSON Schema, bad lines, the Pulsar-message conversion, the sample."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pydantic
import pytest
from typer.testing import CliRunner

from statechan import ServiceUnitState, ServiceUnitStateData
from statechan.cli import app
from statechan.cluster import SimConfig
from statechan.cluster.runner import Simulation
from statechan.invariants.catalogue import check_trace
from statechan.traces import (
    ReadStats,
    json_schema,
    parse_record,
    read_parquet,
    read_trace,
    record_from_message,
    to_json_line,
    write_records,
)

ROOT = Path(__file__).resolve().parent.parent
KEY = "public/default/0x00000000_0xffffffff"
OWNED = b'{"state":"Owned","dstBroker":"b1:8080","versionId":2,"force":false,"timestamp":5}'


def test_the_committed_report_schema_is_generated_from_the_report_model() -> None:
    from statechan.audit import report_schema

    committed = json.loads((ROOT / "traces" / "report.schema.json").read_text(encoding="utf-8"))
    assert committed == report_schema(), "regenerate: statechan traces report-schema > traces/report.schema.json"


def test_the_committed_schema_is_generated_from_the_models() -> None:
    committed = json.loads((ROOT / "traces" / "trace.schema.json").read_text(encoding="utf-8"))
    assert committed == json_schema(), "regenerate: statechan traces schema > traces/trace.schema.json"


def test_a_pulsar_message_becomes_a_channel_record() -> None:
    record = record_from_message(KEY, OWNED, "12:7", 1_700_000_000_123, offset=4, producer="b1:8080")
    assert record.value == ServiceUnitStateData(
        state=ServiceUnitState.Owned, dst_broker="b1:8080", version_id=2, timestamp=5
    )
    assert (record.offset, record.message_id, record.publish_time, record.producer) == (
        4,
        "12:7",
        1_700_000_000_123,
        "b1:8080",
    )
    assert record_from_message(KEY, None, "12:8", 1, offset=5).value is None
    assert record_from_message(KEY, b"", "12:9", 1, offset=6).value is None  # an empty payload is a tombstone


@pytest.mark.parametrize(
    ("key", "payload", "field"),
    [
        (KEY, b'{"state":"Bogus","versionId":1}', "state"),
        (KEY, b"not json", "json"),
        ("no-range", OWNED, "key"),
    ],
)
def test_a_bad_pulsar_message_names_what_is_wrong(key: str, payload: bytes, field: str) -> None:
    with pytest.raises(pydantic.ValidationError, match=field):
        record_from_message(key, payload, "1:1", 1, offset=0)


def test_bad_lines_are_counted_kept_and_skipped(tmp_path: Path) -> None:
    good = record_from_message(KEY, OWNED, "1:1", 10, offset=0)
    path = tmp_path / "t.jsonl.gz"
    lines = [
        good.model_dump_json(by_alias=True),
        "{not json",
        json.dumps({"kind": "registry", "offset": 1, "time": 2, "broker": "b1", "event": "exploded"}),
        json.dumps({"kind": "leader", "offset": 2, "time": 3, "broker": "b1"}),
        json.dumps({"kind": "mystery", "offset": 3}),
    ]
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    stats = ReadStats()
    records = list(read_trace(path, stats))
    assert [r.kind for r in records] == ["channel", "leader"]
    assert stats.records == 2
    assert [(b.line, b.text) for b in stats.bad] == [(2, lines[1]), (3, lines[2]), (5, lines[4])]
    assert "not JSON" in stats.bad[0].reason
    assert "registry.event" in stats.bad[1].reason
    assert str(path) in str(stats.bad[2])
    result = CliRunner().invoke(app, ["traces", "validate", str(path)])
    assert result.exit_code == 1
    assert "2 records" in result.output
    assert "3 bad line(s)" in result.output


def test_a_simulated_trace_reads_back_record_for_record(tmp_path: Path) -> None:
    simulation = Simulation(SimConfig(brokers=3, bundles_per_namespace=3, seed=3))
    simulation.run(1_800_000)
    path = tmp_path / "run.jsonl"
    count = write_records(simulation.cluster.trace, path)
    stats = ReadStats()
    records = list(read_trace(path, stats))
    assert (len(records), stats.bad) == (count, [])
    again = tmp_path / "again.jsonl"
    write_records(records, again)
    assert [json.loads(line) for line in again.read_text().splitlines()] == [
        json.loads(line) for line in path.read_text().splitlines()
    ]


def test_the_sample_trace_is_valid_and_breaks_no_history_invariant() -> None:
    path = ROOT / "traces" / "sample.jsonl"
    stats = ReadStats()
    records = [r.model_dump(mode="json", by_alias=True) for r in read_trace(path, stats)]
    assert stats.bad == []
    assert len(records) > 500
    assert {r["kind"] for r in records} == {"channel", "registry", "leader", "view"}
    assert check_trace(records) == []


@pytest.mark.parametrize("middle", ["t.parquet", "t.jsonl.gz"])
def test_convert_round_trips_the_sample(tmp_path: Path, middle: str) -> None:
    sample = ROOT / "traces" / "sample.jsonl"
    runner = CliRunner()
    first = runner.invoke(app, ["traces", "convert", str(sample), str(tmp_path / middle)])
    assert first.exit_code == 0, first.output
    back = runner.invoke(app, ["traces", "convert", str(tmp_path / middle), str(tmp_path / "back.jsonl")])
    assert back.exit_code == 0, back.output
    original = [json.loads(line) for line in sample.read_text(encoding="utf-8").splitlines()]
    again = [json.loads(line) for line in (tmp_path / "back.jsonl").read_text(encoding="utf-8").splitlines()]
    assert again == [read_back(r) for r in original]


def read_back(raw: dict[str, object]) -> dict[str, object]:
    """A record as the library writes it (every optional field present)."""
    again: dict[str, object] = json.loads(to_json_line(parse_record(raw)))
    return again


def test_convert_leaves_out_bad_lines_and_says_so(tmp_path: Path) -> None:
    source = tmp_path / "t.jsonl"
    source.write_text('{"kind":"leader","offset":0,"time":1,"broker":"b1"}\nnot json\n', encoding="utf-8")
    result = CliRunner().invoke(app, ["traces", "convert", str(source), str(tmp_path / "t.parquet")])
    assert result.exit_code == 1
    assert "1 records written" in result.output
    assert "t.jsonl:2: not JSON" in result.output
    assert [r.kind for r in read_parquet(tmp_path / "t.parquet")] == ["leader"]
    bad_name = CliRunner().invoke(app, ["traces", "convert", str(source), str(tmp_path / "t.csv")])
    assert bad_name.exit_code == 2


def test_bad_parquet_rows_are_counted_kept_and_left_out(tmp_path: Path) -> None:
    from statechan.traces import write_flat_rows

    key = "t/n/0x00000000_0xffffffff"
    rows: list[dict[str, object]] = [
        {"kind": "leader", "offset": 1, "time": 5, "broker": "b1"},
        {"kind": "channel", "offset": 2, "time": 6, "key": key, "has_value": True, "state": "Bogus", "version_id": 1},
        {"kind": None, "offset": 3, "time": 7},
        {"kind": "view", "offset": 4, "time": 8, "observer": "b1", "incarnation": 0, "key": key, "has_value": True}
        | {"state": "Owned", "dst_broker": "b1", "force": False, "version_id": 1, "accepted": True}
        | {"split_children": [None]},
        {"kind": "channel", "offset": 5, "time": 9, "key": key, "has_value": True, "state": "Free"}
        | {"force": False, "version_id": 2},  # no timestamp: the JSON's absent field, 0
    ]
    folder = tmp_path / "parts"
    folder.mkdir()
    write_flat_rows(rows, folder / "part-0.parquet")
    stats = ReadStats()
    records = list(read_parquet(folder / "part-0.parquet", stats))
    assert [(r.kind, r.offset) for r in records] == [("leader", 1), ("channel", 5)]
    assert stats.records == 2
    assert [b.line for b in stats.bad] == [2, 3, 4]
    assert "value.state" in stats.bad[0].reason
    assert json.loads(stats.bad[1].text) == {"offset": 3, "time": 7}  # the row's non-null columns, nothing else
    assert "split_children" in stats.bad[2].reason
    result = CliRunner().invoke(app, ["traces", "validate", str(folder)])
    assert result.exit_code == 1
    assert "2 records (channel 1, leader 1); 3 bad line(s)" in result.output
    assert "part-0.parquet:2: channel.value.state" in result.output
    part = str(folder / "part-0.parquet")
    converted = CliRunner().invoke(app, ["traces", "convert", part, str(tmp_path / "t.jsonl")])
    assert converted.exit_code == 1
    assert "2 records written" in converted.output
    assert [r.offset for r in read_trace(tmp_path / "t.jsonl")] == [1, 5]
    from statechan.audit import audit

    report = audit([folder / "part-0.parquet"], tmp_path / "r.json", engine="local")  # the auditor agrees
    assert (report.records, report.malformed, report.channel_records) == (5, 3, 1)


def test_the_parquet_columns_are_documented() -> None:
    from statechan.traces import PARQUET_COLUMNS

    readme = (ROOT / "traces" / "README.md").read_text(encoding="utf-8")
    assert all(f"| `{name}` |" in readme for name, _ in PARQUET_COLUMNS)
