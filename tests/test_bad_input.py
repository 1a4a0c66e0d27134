"""Bad input never stops an audit, destroys a trace or runs someone else's code (issue 24).

Each class of bad input on both engines and every command that reads it: a clear message, the
counts (records = valid + malformed), and the valid records' results equal to those of the same
trace without the bad lines."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import typer
from typer.testing import CliRunner

from statechan.audit import AuditReport, audit, code_zip, private_cache, spark_error, spark_session
from statechan.cli import app
from statechan.cluster.runfile import RunFileError, load_saved_run
from statechan.tracegen import generate, write_generated
from statechan.traces import ReadStats, atomic_output, decode_line, read_records, write_parquet
from tests.test_audit import insert_lines

pytestmark = pytest.mark.slow

RUNNER = CliRunner()
KEYS = {"engine", "elapsed_s", "inputs", "quarantine", "records", "malformed"}
"""What differs between an audit of a trace with bad lines and one of the same trace without them."""
LONG_MAX = 2**63 - 1


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]")
    yield session
    session.stop()


def _audit(paths: list[Path], report: Path, engine: str, spark: Any) -> AuditReport:
    return audit(paths, report, engine=engine, spark=spark if engine == "spark" else None)


def _quarantine(report: Path) -> list[dict[str, Any]]:
    path = report.with_name(report.stem + ".quarantine.jsonl")
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


def _channel(lines: list[dict[str, Any]], at: int) -> dict[str, Any]:
    """A copy of the first channel record with a value from ``at`` on (to spoil one field of)."""
    found = next(r for r in lines[at:] if r["kind"] == "channel" and r["value"] is not None)
    copy: dict[str, Any] = json.loads(json.dumps(found))
    return copy


def _spoiled(records: list[dict[str, Any]]) -> list[tuple[bytes, str]]:
    """Lines that once stopped a reader or were taken as records, each with what its error says."""
    bad: list[tuple[bytes, str]] = []
    deep = b'{"kind":"channel","offset":' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    bad.append((deep, "nested deeper"))
    for name, where in (("offset", "offset"), ("publish_time", "publish_time")):
        record = _channel(records, 50)
        record[name] = 2**64 + 5
        bad.append((json.dumps(record).encode(), where))
    record = _channel(records, 60)
    digits = json.dumps(record).replace(f'"offset": {record["offset"]}', '"offset": ' + "9" * 5_000)
    bad.append((digits.encode(), "4300 digits"))
    record = _channel(records, 70)
    record["value"]["versionId"] = 2**63
    bad.append((json.dumps(record).encode(), "out of range of a Java long"))
    record = _channel(records, 80)
    record["value"]["timestamp"] = -(2**63) - 1
    bad.append((json.dumps(record).encode(), "out of range of a Java long"))
    record = _channel(records, 90)
    record["value"]["dstBroker"] = "broker-\udcff"  # json.dumps escapes it: a lone surrogate
    bad.append((json.dumps(record).encode(), "lone surrogate"))
    record = _channel(records, 100)
    broker = record["value"]["dstBroker"] or record["value"]["sourceBroker"]
    raw = json.dumps(record).encode().replace(broker.encode(), broker.encode() + b"\xff", 1)
    bad.append((raw, "not UTF-8"))
    return bad


@pytest.fixture(scope="module")
def dirty(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, list[tuple[bytes, str]], list[int]]:
    """A generated trace (with planted violations), and the same trace with the spoiled lines in."""
    folder = tmp_path_factory.mktemp("dirty")
    trace, _ = generate(3_000, seed=11, plant={"stuck-in-flight": 1, "owner-registered": 1, "single-owner": 1})
    records = [r.to_json() for r in trace]
    clean = folder / "clean.jsonl"
    clean.write_bytes(b"".join(json.dumps(r).encode() + b"\n" for r in records))
    bad = _spoiled(records)
    lines = [json.dumps(r).encode() for r in records]
    positions = insert_lines(lines, [line for line, _ in bad], first=200, every=300)
    path = folder / "dirty.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")
    return clean, path, bad, positions


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_lines_that_stopped_an_audit_are_quarantined_and_the_rest_audited(
    spark: Any, dirty: tuple[Path, Path, list[tuple[bytes, str]], list[int]], tmp_path: Path, engine: str
) -> None:
    clean, path, bad, positions = dirty
    expected = _audit([clean], tmp_path / "clean.json", engine, spark)
    report = _audit([path], tmp_path / "report.json", engine, spark)
    assert report.malformed == len(bad)
    assert report.records == expected.records + len(bad)
    assert report.model_dump(exclude=KEYS) == expected.model_dump(exclude=KEYS)
    assert {k: v.count for k, v in report.violations.items() if v.count} == {
        "stuck-in-flight": 1,
        "owner-registered": 1,
        "single-owner": 1,
    }
    quarantine = {q["line"]: q for q in _quarantine(tmp_path / "report.json")}
    assert sorted(quarantine) == positions
    for at, (line, why) in zip(positions, bad, strict=True):
        assert why in quarantine[at]["error"], quarantine[at]
        assert quarantine[at]["file"] == str(path)
        assert quarantine[at]["text"] == line.decode("utf-8", "replace").strip()


def test_validate_convert_and_show_read_the_same_lines_without_a_traceback(
    dirty: tuple[Path, Path, list[tuple[bytes, str]], list[int]], tmp_path: Path
) -> None:
    clean, path, bad, positions = dirty
    checked = RUNNER.invoke(app, ["traces", "validate", str(path), "--show", "100"])
    assert checked.exit_code == 1, checked.output
    assert checked.exception is None or isinstance(checked.exception, SystemExit)
    valid = sum(1 for line in clean.read_text().splitlines() if line.strip())
    assert f"{valid:,} records" in checked.output
    assert f"{len(bad)} bad line(s)" in checked.output
    for at in positions:
        assert f"{path}:{at}:" in checked.output
    converted = tmp_path / "converted.parquet"
    result = RUNNER.invoke(app, ["traces", "convert", str(path), str(converted)])
    assert result.exit_code == 1, result.output
    assert f"{valid:,} records written" in result.output
    assert f"{len(bad)} bad line(s) left out" in result.output
    assert [r.model_dump() for r in read_records(converted)] == [r.model_dump() for r in read_records(clean)]
    key = _channel([json.loads(line) for line in clean.read_text().splitlines()], 0)["key"]
    for trace in (path, clean):
        shown = RUNNER.invoke(app, ["traces", "show", str(trace), "--key", key, "--json"])
        assert shown.exit_code == 0, shown.output
    dirty_story = RUNNER.invoke(app, ["traces", "show", str(path), "--key", key, "--json"]).stdout
    assert dirty_story == RUNNER.invoke(app, ["traces", "show", str(clean), "--key", key, "--json"]).stdout


def _parquet_with(path: Path, changes: dict[str, dict[int, Any]]) -> None:
    """Rewrite a Parquet trace with some cells changed (``changes``: column -> row -> value)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pq.read_table(path)
    for name, cells in changes.items():
        values = table.column(name).to_pylist()
        for row, value in cells.items():
            values[row] = value
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.array(values, table.schema.field(index).type))
    pq.write_table(table, path, row_group_size=1_000)


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_negative_parquet_time_or_offset_is_malformed_on_every_reader(
    spark: Any, tmp_path: Path, engine: str
) -> None:
    """Both engines, validate and --history refuse the same rows, under the same row numbers."""
    import pyarrow.parquet as pq

    path = tmp_path / "trace.parquet"
    write_generated(path, 3_000, seed=12, plant={"stuck-in-flight": 1})
    kinds = pq.read_table(path).column("kind").to_pylist()
    channel = [i for i, k in enumerate(kinds) if k == "channel"]
    leader = kinds.index("leader")
    spoiled = {channel[100]: ("time", -5), channel[900]: ("offset", -1), leader: ("time", -7)}
    clean = tmp_path / "clean.parquet"
    table = pq.read_table(path)
    pq.write_table(table.filter([i not in spoiled for i in range(table.num_rows)]), clean)
    changes: dict[str, dict[int, Any]] = {}
    for row, (column, value) in spoiled.items():
        changes.setdefault(column, {})[row] = value
    _parquet_with(path, changes)
    for history in (False, True):
        report = tmp_path / f"report-{history}.json"
        expected = audit([clean], None, engine=engine, spark=spark if engine == "spark" else None)
        got = audit([path], report, engine=engine, spark=spark if engine == "spark" else None)
        if history:
            from statechan.audit import AuditSettings

            settings = AuditSettings(history=True)
            expected = audit([clean], None, settings, engine=engine, spark=spark if engine == "spark" else None)
            got = audit([path], report, settings, engine=engine, spark=spark if engine == "spark" else None)
        assert got.malformed == len(spoiled)
        assert got.records == expected.records + len(spoiled)
        assert got.model_dump(exclude=KEYS | {"start_time"}) == expected.model_dump(exclude=KEYS | {"start_time"})
        quarantined = {q["line"]: q["error"] for q in _quarantine(report)}
        assert sorted(quarantined) == sorted(row + 1 for row in spoiled)
        for row, (column, _) in spoiled.items():
            assert column in quarantined[row + 1]
            assert "greater than or equal to 0" in quarantined[row + 1]
    stats = ReadStats()
    list(read_records(path, stats))
    assert sorted(b.line for b in stats.bad) == sorted(row + 1 for row in spoiled)
    checked = RUNNER.invoke(app, ["traces", "validate", str(path)])
    assert checked.exit_code == 1
    assert f"{len(spoiled)} bad line(s)" in checked.output


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_broken_split_map_is_malformed_on_every_reader(spark: Any, tmp_path: Path, engine: str) -> None:
    """A null child or a child without a range: validate refuses the row, and so does the audit,
    whose replay reads no split map (the rows are found from that one column)."""
    import pyarrow.parquet as pq

    path = tmp_path / "trace.parquet"
    write_generated(path, 3_000, seed=13)
    table = pq.read_table(path)
    splits = table.column("split_children").to_pylist()
    rows = [i for i, children in enumerate(splits) if children][:2]
    assert len(rows) == 2, "the generated trace has splits"
    clean = tmp_path / "clean.parquet"
    pq.write_table(table.filter([i not in rows for i in range(table.num_rows)]), clean)
    first = splits[rows[0]]
    _parquet_with(path, {"split_children": {rows[0]: [None, *first[1:]], rows[1]: [{"range": None, "broker": "b"}]}})
    expected = audit([clean], None, engine=engine, spark=spark if engine == "spark" else None)
    report = tmp_path / "report.json"
    got = audit([path], report, engine=engine, spark=spark if engine == "spark" else None)
    assert got.malformed == 2
    assert got.records == expected.records + 2
    assert got.model_dump(exclude=KEYS) == expected.model_dump(exclude=KEYS)
    stats = ReadStats()
    list(read_records(path, stats))
    assert {q["line"]: (q["error"], q["text"]) for q in _quarantine(report)} == {
        b.line: (b.reason, b.text) for b in stats.bad
    }
    assert sorted(b.line for b in stats.bad) == [r + 1 for r in rows]


@pytest.mark.parametrize(("column", "kind"), [("time", "double"), ("offset", "string"), ("version_id", "int32")])
def test_a_parquet_column_of_the_wrong_type_is_named_by_every_command(
    spark: Any, tmp_path: Path, column: str, kind: str
) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "trace.parquet"
    write_generated(path, 500, seed=1)
    table = pq.read_table(path)
    index = table.schema.get_field_index(column)
    cast = table.column(index).cast({"double": pa.float64(), "string": pa.string(), "int32": pa.int32()}[kind])
    pq.write_table(table.set_column(index, column, cast), path)
    for engine in ("local", "spark"):
        with pytest.raises(ValueError, match=f"column {column} is {kind}, expected int64") as failed:
            audit([path], tmp_path / "r.json", engine=engine, spark=spark if engine == "spark" else None)
        assert str(path) in str(failed.value)
    assert not (tmp_path / "r.json").exists()
    _refused_by_every_command(path, tmp_path, f"column {column} is {kind}")


def test_a_parquet_column_written_twice_is_named_by_every_command(tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "trace.parquet"
    write_generated(path, 300, seed=1)
    table = pq.read_table(path)
    pq.write_table(table.append_column("kind", table.column("kind")), path)
    _refused_by_every_command(path, tmp_path, "column kind more than once")


def _refused_by_every_command(trace: Path, folder: Path, message: str) -> None:
    """Every command that reads a trace exits 2 with ``message``, before writing anything."""
    key = "tenant/ns/0x00000000_0xffffffff"
    for argv in (
        ["audit", str(trace), "--engine", "local", "--report", str(folder / "r.json")],
        ["traces", "validate", str(trace)],
        ["traces", "convert", str(trace), str(folder / "out.parquet")],
        ["traces", "show", str(trace), "--key", key],
    ):
        result = RUNNER.invoke(app, argv)
        assert result.exit_code == 2, (argv, result.output)
        assert message in result.output
    assert not (folder / "out.parquet").exists()
    assert not (folder / "r.json").exists()


# -- outputs never destroy inputs ----------------------------------------------------------------------
def _small_trace(folder: Path, name: str = "trace.jsonl") -> Path:
    trace, _ = generate(300, seed=3)
    path = folder / name
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in trace) + "not json\n", encoding="utf-8")
    return path


@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_report_never_overwrites_a_trace_or_lands_on_a_folder(tmp_path: Path, engine: str) -> None:
    trace = _small_trace(tmp_path)
    named = _small_trace(tmp_path, "run.quarantine.jsonl")  # the quarantine file of --report run.json
    before = {p: p.read_bytes() for p in (trace, named)}
    cases = [
        ([str(trace)], str(trace), "is an input"),
        ([str(trace), str(named)], str(tmp_path / "run.json"), "quarantine file"),
        ([str(trace)], str(tmp_path / "." / trace.name), "is an input"),
        ([str(trace)], str(tmp_path), "is a directory"),
    ]
    for inputs, report, message in cases:
        result = RUNNER.invoke(app, ["audit", *inputs, "--report", report, "--engine", engine])
        assert result.exit_code == 2, result.output
        assert message in result.output
        assert "audit:" not in result.output  # refused before any work
        with pytest.raises(ValueError, match=message):
            audit(inputs, report, engine="local")
    assert {p: p.read_bytes() for p in (trace, named)} == before
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([trace.name, named.name])


def test_outputs_appear_whole_or_not_at_all(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    trace = _small_trace(tmp_path)
    report = tmp_path / "report.json"
    audit([trace], report, engine="local")
    first = report.read_bytes()
    assert json.loads(first)["malformed"] == 1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.quarantine.jsonl", "trace.jsonl"]

    def interrupted() -> None:
        with atomic_output(report) as partial:
            partial.write_text("half", encoding="utf-8")
            raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError):
        interrupted()
    assert report.read_bytes() == first
    assert sorted(p.name for p in tmp_path.iterdir()) == ["report.json", "report.quarantine.jsonl", "trace.jsonl"]

    def fails_halfway(records: Any, path: Path, batch_rows: int = 100_000) -> int:
        Path(path).write_bytes(b"PAR1 half a file")
        raise OSError("disk full")

    monkeypatch.setattr("statechan.traces.write_parquet", fails_halfway)
    result = RUNNER.invoke(app, ["traces", "convert", str(trace), str(tmp_path / "out.parquet")])
    assert isinstance(result.exception, OSError)
    assert not (tmp_path / "out.parquet").exists()
    assert not [p for p in tmp_path.iterdir() if ".tmp" in p.name]
    same = RUNNER.invoke(app, ["traces", "convert", str(trace), str(tmp_path / "." / "trace.jsonl")])
    assert same.exit_code == 2
    assert "is an input" in same.output
    assert "not json" in trace.read_text()


# -- numeric options: a range, checked before any work ----------------------------------------------------
@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["simulate", "--hours", "inf"], "--hours"),
        (["simulate", "--hours", "nan"], "--hours"),
        (["simulate", "--lookups", "1e300"], "--lookups"),
        (["simulate", "--crashes", "inf"], "--crashes"),
        (["simulate", "--namespaces", str(10**30)], "--namespaces"),
        (["simulate", "--bundles", "1000000000"], "--bundles"),
        (["simulate", "--namespaces", "1000", "--bundles", "1000"], "--namespaces"),
        (["simulate", "--seed", str(2**64)], "--seed"),
        (["check", "--brokers", "0"], "--brokers"),
        (["check", "--restarts", "1"], "--restarts"),
        (["check", "--crashes", "1", "--restarts", "2"], "--restarts"),
        (["check", "--lookups", str(10**20)], "--lookups"),
        (["check", "--max-seconds", "inf"], "--max-seconds"),
        (["check", "--max-memory", str(10**15)], "--max-memory"),
        (["audit", "traces/sample.jsonl", "--in-flight-timeout", "inf"], "--in-flight-timeout"),
        (["audit", "traces/sample.jsonl", "--cleanup-timeout", "1e300"], "--cleanup-timeout"),
        (["audit", "traces/sample.jsonl", "--tombstone-timeout", "nan"], "--tombstone-timeout"),
        (["audit", "traces/sample.jsonl", "--examples", str(10**12)], "--examples"),
        (["audit", "traces/sample.jsonl", "--partitions", str(10**12)], "--partitions"),
        (["traces", "generate", "x.parquet", "--records", str(10**15)], "--records"),
        (["traces", "generate", "x.parquet", "--namespaces", str(10**9)], "--namespaces"),
        (["traces", "generate", "x.parquet", "--brokers", str(10**9)], "--brokers"),
        (["traces", "generate", "x.parquet", "--plant", "stuck-in-flight=99999999"], "--plant"),
        (["traces", "generate", "x.parquet", "--plant", "stuck-in-flight=\u00b2"], "--plant"),  # not 0-9
        (["traces", "generate", "x.parquet", "--workers", "0"], "--workers"),
        (
            ["traces", "show", "traces/sample.jsonl", "--key", "a/b/0x00000000_0xffffffff", "--around", str(2**64)],
            "--around",
        ),
        (["traces", "validate", "traces/sample.jsonl", "--show", str(10**12)], "--show"),
        (["capture", "zk", "--hosts", "x:1", "--out", "x.jsonl", "--timeout", "inf"], "--timeout"),
        (["capture", "zk", "--hosts", "x:1", "--out", "x.jsonl", "--follow", "1e300"], "--follow"),
    ],
)
def test_every_numeric_option_is_bounded_before_any_work(argv: list[str], option: str, tmp_path: Path) -> None:
    cwd = Path.cwd()
    argv = [str(cwd / a) if a.startswith("traces/") else a for a in argv]
    os.chdir(tmp_path)  # nothing may be written here
    try:
        result = RUNNER.invoke(app, argv)
    finally:
        os.chdir(cwd)
    assert result.exit_code == 2, result.output
    assert option in result.output
    assert "Traceback" not in result.output
    assert not list(tmp_path.iterdir())


def test_every_numeric_option_documents_its_range() -> None:
    """Every int or float option of every command has both bounds and says them in its help."""
    import typing

    import statechan.cli as cli

    commands = [c.callback for t in (cli.app, cli.traces_app, cli.capture_app) for c in t.registered_commands]
    missing = []
    for callback in commands:
        assert callback is not None
        for name, hint in typing.get_type_hints(callback, include_extras=True).items():
            if typing.get_origin(hint) is not typing.Annotated:
                continue
            kind, *extras = typing.get_args(hint)
            numeric = {int, float} & set(typing.get_args(kind) or (kind,))
            option = next((e for e in extras if isinstance(e, typer.models.OptionInfo)), None)
            if numeric and option is not None:
                documented = option.min is not None and option.max is not None and " to " in (option.help or "")
                if not documented:
                    missing.append(f"{callback.__name__} {name}")
    assert commands
    assert not missing, f"numeric options without a documented range: {missing}"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--master", "bogus://x"], "--master 'bogus://x': not a Spark master"),
        (["--conf", "spark.driver.memory=lots"], "--conf spark.driver.memory=lots: spark.driver.memory is a size"),
        (["--conf", "spark.executor.memory=4gigs"], "spark.executor.memory is a size"),
    ],
)
def test_spark_settings_are_refused_in_one_line_before_the_jvm_starts(argv: list[str], message: str) -> None:
    result = RUNNER.invoke(app, ["audit", "traces/sample.jsonl", *argv])
    assert result.exit_code == 2
    assert message in result.output
    assert "at org.apache" not in result.output
    assert "gateway" not in result.output
    assert len(result.output.strip().splitlines()) == 1


def test_a_jvm_that_did_not_start_is_named_with_what_it_was_given() -> None:
    failure = RuntimeError("[JAVA_GATEWAY_EXITED] Java gateway process exited before sending its port number.")
    line = spark_error(failure, "spark://h:7077", {"spark.driver.extraJavaOptions": "-Xbogus"})
    assert line.startswith(
        "Spark's JVM did not start with --master spark://h:7077, --conf spark.driver.extraJavaOptions"
    )


def test_a_setting_spark_refuses_at_start_is_one_line_naming_it(tmp_path: Path) -> None:
    """A separate process: its own JVM starts and SparkContext refuses the setting, logging a Java
    stack trace (the module's session must not answer for it)."""
    import subprocess
    import sys

    trace = _small_trace(tmp_path)
    run = subprocess.run(
        [
            sys.executable,
            "-m",
            "statechan",
            "audit",
            str(trace),
            "--report",
            str(tmp_path / "r.json"),
            "--conf",
            "spark.task.cpus=many",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert run.returncode == 2
    errors = [line for line in run.stderr.splitlines() if line.startswith("error:")]
    assert len(errors) == 1, run.stderr
    assert "spark.task.cpus" in errors[0]
    assert "at org.apache" not in run.stderr
    assert "ERROR SparkContext" not in run.stderr  # its Java stack trace was held back and dropped


# -- saved runs ----------------------------------------------------------------------------------------
def _run_file(folder: Path, name: str, content: bytes | None) -> Path:
    path = folder / name
    if content is None:
        os.mkfifo(path)
    else:
        path.write_bytes(content)
    return path


def _run(config: dict[str, Any] | None = None, **more: Any) -> bytes:
    return json.dumps({"format": "statechan-run/1", "config": config or {}, "actions": [], **more}).encode()


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "not a regular file"),
        (b'{"format": "statechan-run/1", "note": "\xff\xfe"}', "byte 39 is not UTF-8"),
        (b"[" * 100_000, "nested deeper"),
        (b'{"format": "statechan-run/1", "picks": [' + b"9" * 5_000 + b"]}", "4300 digits"),
        (b'"a string"', "not a statechan run"),
        (b'{"format": "statechan-run/0"}', "older than this statechan's 'statechan-run/1': replay it with"),
        (b'{"format": "statechan-run/9"}', "'statechan-run/9'"),
        ('{"format": "statechan-run/\u00b2"}'.encode(), "other than this statechan's"),  # a digit int() refuses
        (_run({"brokers": "three"}), "config: ('brokers',): Input should be a valid integer"),
        (_run(actions={"kind": "crash"}), "actions: expected a list"),
        (_run(actions=[["crash"]]), "actions[0]"),
        (_run(actions=[{"kind": "crash", "broker": 7}]), "actions[0]: bad crash action"),
        (_run(picks=[-1]), "picks"),
        (_run(picks="0"), "picks"),
        (_run({"variant": {"model": "no-such-model"}}), "config.variant.model: no built-in model 'no-such-model'"),
        (_run({"variant": {"model": "pip-192-design"}}), "pip-192-design is graph-only"),
        (_run({"variant": {"model": "/dev/null/x.toml"}}), "config.variant.model"),
        (_run({"namespaces": 100_000, "bundles_per_namespace": 100_000}), "at most 100,000"),
    ],
)
def test_a_saved_run_that_cannot_be_replayed_is_named_without_a_traceback(
    tmp_path: Path, content: bytes | None, message: str
) -> None:
    path = _run_file(tmp_path, "run.json", content)
    with pytest.raises(RunFileError, match=r"run\.json") as failed:
        load_saved_run(path)
    assert message in str(failed.value)
    result = RUNNER.invoke(app, ["replay", str(path), "--quiet"])
    assert result.exit_code == 2
    assert isinstance(result.exception, SystemExit)
    assert message in " ".join(result.output.split())


def test_a_run_whose_model_lacks_its_store_is_refused(tmp_path: Path) -> None:
    """pulsar-3.0 has no metadata store: a metadata-store run cannot be replayed on it."""
    path = _run_file(tmp_path, "run.json", _run({"store": "metadata-store", "variant": {"model": "pulsar-3.0"}}))
    with pytest.raises(RunFileError, match=r"model pulsar-3\.0 has no MetadataStore table"):
        load_saved_run(path)
    result = RUNNER.invoke(app, ["replay", str(path)])
    assert result.exit_code == 2
    assert "has no MetadataStore table" in result.output


def test_a_step_that_cannot_run_names_the_file_and_step(tmp_path: Path) -> None:
    path = _run_file(tmp_path, "run.json", _run(actions=[{"kind": "crash", "broker": "nobody"}]))
    result = RUNNER.invoke(app, ["replay", str(path), "--quiet"])
    assert result.exit_code == 2
    assert f"{path}: step 1 cannot run: crash(nobody): no broker 'nobody'" in " ".join(result.output.split())


def test_replay_refuses_to_write_its_trace_over_the_run(tmp_path: Path) -> None:
    path = _run_file(tmp_path, "run.jsonl", _run())
    before = path.read_bytes()
    result = RUNNER.invoke(app, ["replay", str(path), "--trace", str(path)])
    assert result.exit_code == 2
    assert "is an input" in result.output
    assert path.read_bytes() == before


# -- the code shipped to the executors ------------------------------------------------------------------
def test_a_zip_planted_under_the_old_name_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    shared = tmp_path / "shared-tmp"
    shared.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(shared))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    (tmp_path / "reference").mkdir()
    honest = code_zip(tmp_path / "reference")
    planted = shared / honest.name  # where the old code_zip looked, and trusted by name
    planted.write_bytes(b"PK\x05\x06" + b"\0" * 18)  # another user's zip
    shipped = code_zip()
    assert shipped != planted
    assert shipped.parent == tmp_path / "cache" / "statechan"
    assert shipped.read_bytes() == honest.read_bytes()
    assert hashlib.sha256(shipped.read_bytes()).hexdigest().startswith(shipped.name.split("-")[-1][:-4])
    assert stat.S_IMODE(shipped.parent.stat().st_mode) == 0o700
    shipped.write_bytes(b"tampered")  # even in the private folder the content is checked
    assert code_zip().read_bytes() == honest.read_bytes()


def test_a_cache_folder_others_can_write_is_not_used(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    cache = tmp_path / "cache" / "statechan"
    cache.mkdir(parents=True)
    cache.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    shipped = code_zip()
    try:
        assert shipped.parent != cache
        assert stat.S_IMODE(shipped.parent.stat().st_mode) == 0o700
        assert shipped.parent.stat().st_uid == os.getuid()
    finally:
        shipped.unlink()
        shipped.parent.rmdir()


def test_a_cache_under_a_folder_others_can_rename_is_not_used_and_the_fallback_is_reused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another user who can write a folder above the cache (no sticky bit) could move the checked
    cache away and put theirs in its place: such a cache is not used. The private folder used
    instead is one per process, not one per shipping."""
    shared = tmp_path / "shared"
    (shared / "statechan").mkdir(parents=True)
    shared.chmod(0o777)
    monkeypatch.setenv("XDG_CACHE_HOME", str(shared))
    first = private_cache()
    assert first != shared / "statechan"
    assert stat.S_IMODE(first.stat().st_mode) == 0o700
    assert private_cache() == first
    shared.chmod(0o1777)  # sticky, as /tmp: others cannot rename what is not theirs
    assert private_cache() == shared / "statechan"


def test_a_parquet_trace_written_from_records_is_what_every_reader_takes(tmp_path: Path) -> None:
    """The rule for Parquet's int64 columns holds at the edges: LONG_MAX is a valid offset."""
    from statechan.traces import LeaderRecord

    path = tmp_path / "edge.parquet"
    write_parquet([LeaderRecord(offset=LONG_MAX, time=LONG_MAX, broker="b:1")], path)
    stats = ReadStats()
    assert [r.offset for r in read_records(path, stats)] == [LONG_MAX]
    assert not stats.bad


def test_a_fifo_given_as_a_trace_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe.jsonl"
    os.mkfifo(fifo)
    _refused_by_every_command(fifo, tmp_path, f"{fifo}: not a regular file")
    with pytest.raises(ValueError, match="not a regular file"):
        audit([fifo], None, engine="local")


@pytest.mark.parametrize("spelling", ["9223372036854775808", '"9223372036854775808"', "1e30", '"-9223372036854775809"'])
def test_a_version_beyond_a_java_long_is_refused_by_resolve_too(spelling: str) -> None:
    """However the number is written (pydantic would take a string of digits or a whole float and
    wrap it), a version outside a Java long is refused; a trace line is decoded by the same rule."""
    big = '{"state": "Owned", "dstBroker": "b1", "versionId": ' + spelling + "}"
    result = RUNNER.invoke(app, ["resolve", "--prev", "null", "--new", big])
    assert result.exit_code == 2
    assert "out of range of a Java long" in " ".join(result.output.split())
    key = "t/n/0x00000000_0xffffffff"
    line = '{"kind": "channel", "offset": 1, "publish_time": 1, "key": "' + key + '", "value": ' + big + "}"
    assert "out of range of a Java long" in str(decode_line(line))


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (
            ["simulate", "--hours", "0.01", "--trace", "{out}", "--save-run", "{out}"],
            "--save-run {out}: is the --trace file",
        ),
        (["check", "--save-run", "{out}", "--graph", "{out}"], "--graph {out}: is the --save-run file"),
    ],
)
def test_two_outputs_of_one_command_may_not_be_one_file(tmp_path: Path, argv: list[str], message: str) -> None:
    out = tmp_path / "same.dot"
    result = RUNNER.invoke(app, [a.replace("{out}", str(out)) for a in argv])
    assert result.exit_code == 2, result.output
    assert message.replace("{out}", str(out)) in " ".join(result.output.split())
    assert not out.exists()


def test_a_killed_writers_temporary_file_in_a_folder_is_not_read_as_a_part(tmp_path: Path) -> None:
    """A run killed mid-write leaves its hidden temporary file beside the parts; folders are read
    as Spark and Hadoop read them, without names starting with ``.`` or ``_``."""
    folder = tmp_path / "trace"
    folder.mkdir()
    write_generated(folder / "part-0.jsonl", 200, seed=2)
    (folder / ".part-1.parquet.k3x9.tmp.parquet").write_bytes(b"PAR1 cut short")
    (folder / "_SUCCESS.jsonl").write_text("not a trace\n")
    result = RUNNER.invoke(app, ["traces", "validate", str(folder)])
    assert result.exit_code == 0, result.output
    with atomic_output(folder / "part-2.parquet") as partial:
        assert partial.name.startswith(".part-2.parquet.")
        assert partial.exists()
        assert (partial.stat().st_mode & 0o777) == 0o666 & ~_umask()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


@pytest.mark.parametrize("over", ["model", "equivalent"])
def test_mutate_refuses_to_write_its_page_over_what_it_reads(tmp_path: Path, over: str) -> None:
    from statechan.mutate import read_model_data, to_toml

    model = tmp_path / "m.toml"
    model.write_text(to_toml(read_model_data("pulsar-4")[0]), encoding="utf-8")
    arguments = tmp_path / "eq.toml"
    arguments.write_text("", encoding="utf-8")
    target = model if over == "model" else arguments
    before = target.read_bytes()
    options = ["mutate", str(model), "--equivalent", str(arguments), "--markdown", str(target)]
    result = RUNNER.invoke(app, options)
    assert result.exit_code == 2
    assert "--markdown" in result.output
    assert "is an input" in result.output
    assert target.read_bytes() == before
