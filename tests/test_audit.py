"""The trace auditor end to end, on a real local SparkSession: generated traces with planted
violations of every kind give exactly the planted counts; clean traces give zero; malformed
lines are counted, quarantined with file, line and error, and the rest is audited."""

from __future__ import annotations

import gzip
import json
import os
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from statechan.audit import AuditReport, AuditSettings, audit, spark_session
from statechan.cli import app
from statechan.cluster import Cluster
from statechan.cluster.runfile import load_run
from statechan.invariants.catalogue import check_trace, history_ids
from statechan.tracegen import PLANT_KINDS, GenStats, generate, write_generated
from statechan.traces import convert, write_records

HISTORY = history_ids()
"""The history invariants an audit checks by default when it keeps histories."""
DOCS = Path(__file__).resolve().parent.parent / "docs"

pytestmark = pytest.mark.slow

PLANTED = {kind: i + 1 for i, kind in enumerate(PLANT_KINDS)}
"""1 to 7 of each kind: a count that is off by one kind's plants shows which."""


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]")
    yield session
    session.stop()


@pytest.fixture(scope="module")
def planted(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, GenStats]:
    folder = tmp_path_factory.mktemp("planted")
    stats = write_generated(folder / "trace.parquet", 12_000, seed=5, plant=PLANTED)
    again = write_generated(folder / "trace.jsonl.gz", 12_000, seed=5, plant=PLANTED)
    assert again.records == stats.records
    return folder / "trace.parquet", folder / "trace.jsonl.gz", stats


def _write_with_column(table: Any, name: str, values: list[Any], path: Path, row_group_size: int | None = None) -> None:
    """Write ``table`` to ``path`` as Parquet with column ``name`` replaced by ``values`` (same type)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    index = table.schema.get_field_index(name)
    column = pa.array(values, table.schema.field(index).type)
    pq.write_table(table.set_column(index, name, column), path, row_group_size=row_group_size)


def _counts(report: AuditReport) -> dict[str, int]:
    return {k: v.count for k, v in report.violations.items() if v.count}


def _assert_matches(report: AuditReport, stats: GenStats) -> None:
    assert report.records == stats.records
    assert report.channel_records == stats.channel_records
    assert report.bundles == stats.bundles
    assert report.malformed == 0
    assert report.rejected == ({"stale-version": stats.stale} if stats.stale else {})
    assert report.counted == {"accepted-version-gap": stats.version_gaps, "forced-overrides": stats.forced}
    assert report.accepted == stats.channel_records - stats.stale


@pytest.mark.parametrize("which", ["parquet", "jsonl.gz"])
def test_spark_counts_exactly_what_was_planted(
    spark: Any, planted: tuple[Path, Path, GenStats], tmp_path: Path, which: str
) -> None:
    parquet, jsonl, stats = planted
    path = parquet if which == "parquet" else jsonl
    report = audit([path], tmp_path / "report.json", spark=spark)
    assert _counts(report) == PLANTED
    _assert_matches(report, stats)
    assert stats.version_gaps == PLANTED["no-resurrection"]
    for summary in report.violations.values():
        assert len(summary.examples) == min(summary.count, 5)
        offsets = [e.offset or 0 for e in summary.examples]
        assert offsets == sorted(offsets)
    assert AuditReport.model_validate_json((tmp_path / "report.json").read_text()) == report


def test_examples_name_the_planted_namespaces(spark: Any, planted: tuple[Path, Path, GenStats]) -> None:
    report = audit([planted[0]], settings=AuditSettings(examples=10), spark=spark)
    for kind, summary in report.violations.items():
        assert summary.examples, kind
        assert all(e.key is not None and e.key.startswith(f"plant/{kind}-") for e in summary.examples), kind


def test_local_engine_gives_the_same_report(spark: Any, planted: tuple[Path, Path, GenStats]) -> None:
    on_spark = audit([planted[0]], spark=spark)
    local = audit([planted[0]], engine="local")
    ignore = {"engine", "elapsed_s"}
    assert local.model_dump(exclude=ignore) == on_spark.model_dump(exclude=ignore)


def test_a_trace_out_of_offset_order_is_replayed_in_offset_order(spark: Any, tmp_path: Path) -> None:
    """The same records shuffled: both engines replay them by offset (the local one sorts when it
    finds the file out of order), so the report is the ordered file's."""
    trace, _ = generate(4_000, seed=9, plant={"single-owner": 1, "no-resurrection": 2, "stuck-in-flight": 1})
    lines = [json.dumps(record.to_json()) for record in trace]
    (tmp_path / "ordered.jsonl").write_text("\n".join(lines) + "\n")
    lines.sort(key=lambda line: zlib.crc32(line.encode()) % 7)  # seven runs, each in order
    (tmp_path / "shuffled.jsonl").write_text("\n".join(lines) + "\n")
    keep = {"records", "channel_records", "bundles", "accepted", "rejected", "counted", "violations"}
    ordered = audit([tmp_path / "ordered.jsonl"], engine="local").model_dump(include=keep)
    assert ordered["violations"]["no-resurrection"]["count"] == 2
    assert audit([tmp_path / "shuffled.jsonl"], engine="local").model_dump(include=keep) == ordered
    assert audit([tmp_path / "shuffled.jsonl"], spark=spark).model_dump(include=keep) == ordered


def test_a_clean_trace_has_no_violations(spark: Any, tmp_path: Path) -> None:
    stats = write_generated(tmp_path / "clean.parquet", 40_000, seed=11, namespaces=20)
    assert stats.crashes > 0
    assert stats.forced > 0
    report = audit([tmp_path / "clean.parquet"], tmp_path / "report.json", spark=spark)
    assert report.violation_count == 0
    assert set(report.violations) == set(PLANT_KINDS)
    _assert_matches(report, stats)
    assert {s.check: s.reason for s in report.skipped} == dict.fromkeys(
        HISTORY, "the trace has no view records (--history checks them)"
    )
    assert report.quarantine is None
    assert not (tmp_path / "report.quarantine.jsonl").exists()


BAD_LINES = [
    ("this is not json", "not JSON"),
    ('{"kind": "channel", "offset": 1, "publish_time": 5, "value": null}', "key"),
    ('{"kind": "channel", "offset": 1, "publish_time": 5, "key": "t/n/0x0_0x1", "value": null}', "key"),
    (
        '{"kind": "channel", "offset": 1, "publish_time": 5, "key": "t/n/0x00000000_0x10000000",'
        ' "value": {"state": "Lost", "dstBroker": "b", "versionId": 1}}',
        "state",
    ),
    (
        '{"kind": "channel", "offset": 1, "publish_time": 5, "key": "t/n/0x00000000_0x10000000",'
        ' "value": {"state": "Owned", "versionId": 1}}',
        "Empty broker",
    ),
    ('{"kind": "registry", "offset": 2, "time": 5, "broker": "b"}', "event"),
    ('{"kind": "gossip", "offset": 3}', "kind"),
]


def insert_lines(lines: list[Any], extra: list[Any], first: int, every: int) -> list[int]:
    """Insert ``extra`` into ``lines``, the first at index ``first`` and then every ``every``;
    returns their 1-based line numbers."""
    positions = []
    for i, line in enumerate(extra):
        at = first + every * i
        lines.insert(at, line)
        positions.append(at + 1)
    return positions


def test_malformed_lines_are_counted_quarantined_and_the_rest_audited(spark: Any, tmp_path: Path) -> None:
    trace, stats = generate(5_000, seed=3, plant={"stuck-in-flight": 2})
    good = [json.dumps(r.to_json()) for r in trace]
    lines = list(good)
    positions = insert_lines(lines, [bad for bad, _ in BAD_LINES], first=100, every=400)
    path = tmp_path / "mixed.jsonl.gz"
    with gzip.open(path, "wt", encoding="utf-8") as out:
        out.write("\n".join(lines) + "\n")
    report = audit([path], tmp_path / "report.json", spark=spark)
    assert report.malformed == len(BAD_LINES)
    assert report.records == stats.records + len(BAD_LINES)
    assert _counts(report) == {"stuck-in-flight": 2}
    assert report.channel_records == stats.channel_records
    quarantine = [json.loads(line) for line in (tmp_path / "report.quarantine.jsonl").read_text().splitlines()]
    assert report.quarantine == str(tmp_path / "report.quarantine.jsonl")
    assert sorted(q["line"] for q in quarantine) == positions
    by_line = {q["line"]: q for q in quarantine}
    for at, (bad, why) in zip(positions, BAD_LINES, strict=True):
        entry = by_line[at]
        assert entry["file"] == str(path)
        assert entry["text"] == bad
        assert why in entry["error"], entry


def test_both_engines_read_the_same_lines_whatever_the_bytes(spark: Any, tmp_path: Path) -> None:
    """A byte-order mark, CRLF endings and a line of bytes that are not UTF-8: the local engine
    reads them as Spark's text reader does (the mark skipped, the bad bytes one malformed line)."""
    trace, stats = generate(1_000, seed=6, plant={"owner-registered": 1})
    lines = [json.dumps(r.to_json()).encode() for r in trace]
    lines.insert(40, b'{"kind": "leader", "offset": 7, "broker": "\xff\xfe"}')
    path = tmp_path / "odd.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + b"\r\n".join(lines) + b"\r\n")
    ignore = {"engine", "elapsed_s"}
    local = audit([path], tmp_path / "local.json", engine="local")
    on_spark = audit([path], tmp_path / "spark.json", spark=spark)
    assert local.model_dump(exclude=ignore | {"quarantine"}) == on_spark.model_dump(exclude=ignore | {"quarantine"})
    assert (local.records, local.malformed) == (stats.records + 1, 1)
    assert _counts(local) == {"owner-registered": 1}  # the first line (a registration) was read
    entry = json.loads((tmp_path / "local.quarantine.jsonl").read_text())
    assert entry["line"] == 41
    assert "not UTF-8" in entry["error"]


@pytest.mark.parametrize(("cut", "message"), [(True, "cut short after"), (False, "not a gzip file")])
@pytest.mark.parametrize("engine", ["local", "spark"])
def test_a_broken_gzip_trace_is_named(spark: Any, tmp_path: Path, cut: bool, engine: str, message: str) -> None:
    trace, _ = generate(2_000, seed=2)
    text = "".join(json.dumps(r.to_json()) + "\n" for r in trace).encode()
    path = tmp_path / "t.jsonl.gz"
    path.write_bytes(gzip.compress(text)[: len(gzip.compress(text)) // 2] if cut else text)
    with pytest.raises(ValueError, match=message) as failed:
        audit([path], engine=engine, spark=spark if engine == "spark" else None)
    assert str(path) in str(failed.value)


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_malformed_parquet_rows_are_quarantined(spark: Any, tmp_path: Path, engine: str) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "trace.parquet"
    stats = write_generated(path, 3_000, seed=4)
    table = pq.read_table(path)
    states = table.column("state").to_pylist()
    broken = [i for i, s in enumerate(states) if s == "Owned"][:3]
    for i in broken:
        states[i] = "Orphaned"
    _write_with_column(table, "state", states, path)
    kinds = pq.read_table(path).column("kind").to_pylist()
    mystery = kinds.index("registry")
    kinds[mystery] = "mystery"
    _write_with_column(pq.read_table(path), "kind", kinds, path)
    report = audit([path], tmp_path / "report.json", spark=spark if engine == "spark" else None, engine=engine)
    assert report.malformed == 4
    assert report.records == stats.records
    quarantine = [json.loads(line) for line in (tmp_path / "report.quarantine.jsonl").read_text().splitlines()]
    assert sorted(q["line"] for q in quarantine) == sorted([i + 1 for i in broken] + [mystery + 1])
    odd = next(q for q in quarantine if q["line"] == mystery + 1)
    assert odd["error"] == "kind: unknown record kind 'mystery'"
    shown = json.loads(odd["text"])  # the row's own columns, none of the reader's bookkeeping
    assert shown["kind"] == "mystery"
    assert not {"source", "line", "error", "text"} & set(shown)
    assert all("state" in q["error"] and "Orphaned" in q["text"] for q in quarantine if q is not odd)


def test_the_local_engine_reads_parquet_a_batch_at_a_time_as_spark_reads_it(
    spark: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Out of offset order, malformed channel and registry rows, and batches much smaller than the
    file: the local engine's columnar reading gives Spark's report and quarantine, line for line."""
    import pyarrow.parquet as pq

    import statechan.traces

    path = tmp_path / "trace.parquet"
    plant = {"single-owner": 1, "owner-registered": 2, "stuck-in-flight": 1}
    stats = write_generated(path, 4_000, seed=6, plant=plant)
    table = pq.read_table(path)
    table = table.take(sorted(range(table.num_rows), key=lambda i: i % 7))  # seven runs, each in order
    states = table.column("state").to_pylist()
    for i in [i for i, s in enumerate(states) if s == "Owned"][:3]:
        states[i] = "Orphaned"
    events = table.column("event").to_pylist()
    events[max(i for i, e in enumerate(events) if e is not None)] = "vanished"  # the last registry row
    _write_with_column(table, "state", states, path)
    _write_with_column(pq.read_table(path), "event", events, path, row_group_size=301)
    kinds = [
        set(pq.ParquetFile(path).read_row_group(g, columns=["kind"]).column("kind").to_pylist()) for g in range(14)
    ]
    assert {"channel"} in kinds
    assert any(len(k) > 1 for k in kinds)
    monkeypatch.setattr(statechan.traces, "PARQUET_BATCH_ROWS", 97)
    local = audit([path], tmp_path / "local.json", engine="local")
    on_spark = audit([path], tmp_path / "spark.json", spark=spark)
    assert local.malformed == 4
    assert local.records == stats.records
    assert _counts(local)["single-owner"] == 1
    assert _counts(local)["stuck-in-flight"] == 1
    assert _counts(local)["owner-registered"] >= 2
    ignore = {"engine", "elapsed_s", "quarantine"}
    assert local.model_dump(exclude=ignore) == on_spark.model_dump(exclude=ignore)
    quarantined = [(tmp_path / f"{name}.quarantine.jsonl").read_text() for name in ("local", "spark")]
    assert quarantined[0] == quarantined[1]
    assert "vanished" in quarantined[0]


def test_a_trace_without_registry_records_skips_the_registry_checks(spark: Any, tmp_path: Path) -> None:
    trace, _ = generate(2_000, seed=2)
    path = tmp_path / "no-registry.jsonl"
    path.write_text("".join(json.dumps(r.to_json()) + "\n" for r in trace if r.kind == "channel"))
    report = audit([path], spark=spark)
    assert {s.check for s in report.skipped} == {"owner-registered", "orphan-cleaned", *HISTORY}
    assert report.registry_records == 0


def _simulated_trace(run: str, folder: Path) -> tuple[Path, Cluster]:
    """A saved counterexample replayed on its variant: the trace it leaves, views included."""
    config, actions, _ = load_run(DOCS / "counterexamples" / f"{run}.json")
    cluster = Cluster(config)
    for action in actions:
        cluster.step(action)
    path = folder / f"{run}.jsonl"
    write_records(cluster.trace, path)
    return path, cluster


def _simulated_parquet(run: str, folder: Path) -> tuple[Path, Any, Cluster]:
    """The same trace as Parquet, and its rows as an Arrow table (to break some)."""
    import pyarrow.parquet as pq

    path, cluster = _simulated_trace(run, folder)
    parquet = path.with_suffix(".parquet")
    convert(path, parquet)
    return parquet, pq.read_table(parquet), cluster


@pytest.mark.parametrize(("run", "broken"), [("20110", "compaction-equivalence"), ("24186", "one-value-per-version")])
def test_view_records_are_audited_by_the_history_invariants(spark: Any, tmp_path: Path, run: str, broken: str) -> None:
    path, cluster = _simulated_trace(run, tmp_path)
    settings = AuditSettings(storage=cluster.storage, model=cluster.model.name)
    expected = Counter(v.invariant for v in check_trace(cluster.trace, cluster.storage, cluster.model.name))
    assert expected[broken] > 0  # the bug this run puts back shows in its views
    parquet = tmp_path / f"{run}.parquet"
    convert(path, parquet)
    reports = [audit([f], settings=settings, spark=spark) for f in (path, parquet)]
    reports.append(audit([path], settings=settings, engine="local"))
    for report in reports:
        assert report.view_records == sum(1 for r in cluster.trace if r["kind"] == "view")
        assert _counts(report) == dict(expected)
        assert set(HISTORY) <= set(report.violations)
        assert report.skipped == []
    assert all(r.violations == reports[0].violations for r in reports)
    off = audit([path], settings=settings.model_copy(update={"history": False}), engine="local")
    assert broken not in _counts(off)
    assert {s.check: s.reason for s in off.skipped} == dict.fromkeys(HISTORY, "--no-history")


def test_history_can_be_asked_for_on_a_trace_without_views(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "clean.parquet"
    write_generated(path, 5_000, seed=12)
    report = audit([path], settings=AuditSettings(history=True), spark=spark)
    assert report.skipped == []
    assert set(HISTORY) <= set(report.violations)
    assert report.violation_count == 0
    only = audit([path], settings=AuditSettings(invariants=("compaction-equivalence",), history=True), engine="local")
    assert list(only.violations) == ["compaction-equivalence"]


def test_malformed_view_rows_are_quarantined(spark: Any, tmp_path: Path) -> None:
    parquet, table, cluster = _simulated_parquet("24186", tmp_path)
    kinds, observers = table.column("kind").to_pylist(), table.column("observer").to_pylist()
    bad = [i for i, k in enumerate(kinds) if k == "view"][:2]
    for i in bad:
        observers[i] = ""
    _write_with_column(table, "observer", observers, parquet)
    report = audit([parquet], tmp_path / "report.json", AuditSettings(storage=cluster.storage), spark=spark)
    assert report.malformed == 2
    assert report.records == len(kinds)
    assert report.view_records == len([k for k in kinds if k == "view"]) - 2
    quarantine = [json.loads(line) for line in (tmp_path / "report.quarantine.jsonl").read_text().splitlines()]
    assert sorted(q["line"] for q in quarantine) == [i + 1 for i in bad]
    assert all(q["error"].startswith("view.observer: ") for q in quarantine)  # as validate says it


def test_with_histories_a_channel_row_must_validate_whole(spark: Any, tmp_path: Path) -> None:
    parquet, table, cluster = _simulated_parquet("24186", tmp_path)
    kinds, offsets = table.column("kind").to_pylist(), table.column("offset").to_pylist()
    bad = kinds.index("channel")
    offsets[bad] = -5  # the replay alone takes it; a whole channel record may not have it
    _write_with_column(table, "offset", offsets, parquet)
    settings = AuditSettings(storage=cluster.storage, model=cluster.model.name)
    for engine in ("spark", "local"):
        report = audit([parquet], tmp_path / f"{engine}.json", settings, engine=engine, spark=spark)
        assert report.malformed == 1
        assert report.channel_records == kinds.count("channel") - 1
        assert report.records == len(kinds)
        (entry,) = [json.loads(line) for line in (tmp_path / f"{engine}.quarantine.jsonl").read_text().splitlines()]
        assert entry["line"] == bad + 1
        assert "offset" in entry["error"]


runner = CliRunner()


@pytest.mark.parametrize(("run", "broken"), [("20110", "compaction-equivalence"), ("24186", "one-value-per-version")])
def test_replay_writes_a_trace_and_the_command_that_audits_it(tmp_path: Path, run: str, broken: str) -> None:
    trace = tmp_path / "run.jsonl"
    replayed = runner.invoke(
        app, ["replay", str(DOCS / "counterexamples" / f"{run}.json"), "--quiet", "--trace", str(trace)]
    )
    assert replayed.exit_code == 1, replayed.output
    hint = replayed.output.split("(audit it: statechan ", 1)[1].split(")", 1)[0]
    argv = " ".join(hint.split()).split(" ")  # rich may wrap the line
    report = tmp_path / "report.json"
    audited = runner.invoke(app, [*argv, "--engine", "local", "--report", str(report)])
    assert audited.exit_code == 1, audited.output
    assert json.loads(report.read_text())["violations"][broken]["count"] == 1


def test_cli_exit_status_and_summary(spark: Any, planted: tuple[Path, Path, GenStats], tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    spark_conf = ["--conf", f"spark.sql.shuffle.partitions={max(2, os.cpu_count() or 2)}"]  # the path --conf takes
    result = runner.invoke(
        app, ["audit", str(planted[0]), "--report", str(report), "--master", "local[2]", *spark_conf]
    )
    assert result.exit_code == 1, result.output
    assert "stuck-in-flight" in result.output
    assert "accepted-version-gap" in result.output
    assert json.loads(report.read_text())["violations"]["single-owner"]["count"] == PLANTED["single-owner"]
    clean = tmp_path / "clean.jsonl"
    write_generated(clean, 2_000, seed=9)
    result = runner.invoke(app, ["audit", str(clean), "--report", str(tmp_path / "c.json"), "--engine", "local"])
    assert result.exit_code == 0, result.output


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["audit", "missing.jsonl"], "no such file"),
        (["audit", "{trace}", "--invariant", "no-such-thing"], "not a record or history invariant"),
        (["audit", "{trace}", "--report", "/no/such/dir/r.json"], "no such directory"),
        (["traces", "generate", "{tmp}/x.jsonl", "--plant", "nonsense=2"], "expected KIND=COUNT"),
        (["traces", "generate", "{tmp}/x.csv"], "expected a .jsonl"),
        (["audit", "{tmp}/corrupt.parquet"], "not a readable Parquet file"),
        (["audit", "{tmp}/empty-folder"], "no .parquet, .jsonl or .jsonl.gz files"),
        (["audit", "{trace}", "--engine", "local", "--ship-code"], "for the spark engine"),
        (["audit", "{trace}", "--conf", "executor.memory=8g"], "expected KEY=VALUE with a spark.* key"),
        (["audit", "{trace}", "--conf", "spark.executor.memory"], "expected KEY=VALUE with a spark.* key"),
        (["audit", "{trace}", "--engine", "local", "--conf", "spark.executor.memory=8g"], "for the spark engine"),
    ],
)
def test_cli_usage_errors_exit_2(tmp_path: Path, args: list[str], message: str) -> None:
    trace = tmp_path / "t.jsonl"
    write_generated(trace, 100, seed=1)
    (tmp_path / "corrupt.parquet").write_text("not parquet\n")
    (tmp_path / "empty-folder").mkdir()
    argv = [a.format(trace=trace, tmp=tmp_path) for a in args]
    result = runner.invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert message in result.output


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        ([], "the trace is empty"),
        (["not json", '{"kind": "channel"}'], "all 2 records are malformed"),
        (['{"kind": "leader", "offset": 0, "time": 5, "broker": "b1"}'], "none of its 1 record is a valid channel"),
    ],
)
def test_a_trace_without_channel_records_is_not_a_clean_audit(tmp_path: Path, lines: list[str], message: str) -> None:
    trace = tmp_path / "t.jsonl"
    trace.write_text("".join(line + "\n" for line in lines))
    report = tmp_path / "r.json"
    result = runner.invoke(app, ["audit", str(trace), "--report", str(report), "--engine", "local"])
    assert result.exit_code == 2, result.output
    assert f"nothing audited: {message}" in " ".join(result.output.split())
    written = json.loads(report.read_text())
    assert (written["records"], written["malformed"]) == (len(lines), len(lines) if "malformed" in message else 0)


def test_generated_traces_replay_from_the_seed() -> None:
    first, _ = generate(3_000, seed=8, plant={"single-owner": 1})
    second, _ = generate(3_000, seed=8, plant={"single-owner": 1})
    other, _ = generate(3_000, seed=9, plant={"single-owner": 1})
    a, b, c = list(first), list(second), list(other)
    assert a == b
    assert a != c
    assert [r.offset for r in a] == list(range(len(a)))


def test_settings_reach_the_spark_workers(spark: Any, planted: tuple[Path, Path, GenStats]) -> None:
    """A metadata-store dump refuses version gaps, so the planted resurrection (a gap after a
    forced Deleted) is refused there; a shorter in-flight timeout finds more stuck keys."""
    topic = audit([planted[0]], spark=spark)
    store = audit([planted[0]], settings=AuditSettings(storage="MetadataStore"), spark=spark)
    assert _counts(store).get("no-resurrection", 0) == 0
    assert store.rejected.get("version-gap-rejected") == PLANTED["no-resurrection"]
    assert store.counted["accepted-version-gap"] == 0
    strict = audit([planted[0]], settings=AuditSettings(in_flight_timeout_s=0.5), spark=spark)
    assert strict.violations["stuck-in-flight"].count > topic.violations["stuck-in-flight"].count


def test_several_inputs_of_both_formats_are_one_trace(spark: Any, tmp_path: Path) -> None:
    """Two files are audited as one trace: their namespaces do not overlap, so the counts add up."""
    first = write_generated(tmp_path / "a.parquet", 3_000, seed=21, plant={"single-owner": 1})
    trace, second = generate(3_000, seed=22, plant={"stuck-in-flight": 2})
    lines = []
    for record in trace:
        data = record.to_json()
        if "key" in data:
            data["key"] = "other-" + data["key"]  # a namespace of its own
        data["offset"] += 10_000_000
        lines.append(json.dumps(data))
    (tmp_path / "b.jsonl").write_text("\n".join(lines) + "\n")
    report = audit([tmp_path / "a.parquet", tmp_path / "b.jsonl"], spark=spark)
    assert report.records == first.records + second.records
    assert report.bundles == first.bundles + second.bundles
    assert _counts(report) == {"single-owner": 1, "stuck-in-flight": 2}
    ignore = {"engine", "elapsed_s"}
    local = audit([tmp_path / "a.parquet", tmp_path / "b.jsonl"], engine="local")
    assert local.model_dump(exclude=ignore) == report.model_dump(exclude=ignore)
    backwards = audit([tmp_path / "b.jsonl", tmp_path / "a.parquet"], engine="local")  # out of offset order
    assert backwards.model_dump(exclude=ignore | {"inputs"}) == report.model_dump(exclude=ignore | {"inputs"})


def test_a_folder_of_traces_is_read_whole(tmp_path: Path) -> None:
    folder = tmp_path / "parts"
    folder.mkdir()
    stats = write_generated(folder / "part-0.jsonl", 1_000, seed=4, plant={"owner-registered": 1})
    (folder / "notes.txt").write_text("not a trace\n")
    result = runner.invoke(app, ["audit", str(folder), "--report", str(tmp_path / "r.json"), "--engine", "local"])
    assert result.exit_code == 1, result.output
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["records"] == stats.records
    assert report["violations"]["owner-registered"]["count"] == 1


def test_spark_errors_are_shown_by_their_error_class() -> None:
    from statechan.audit import spark_error

    failure = Exception(
        "An error occurred while calling o38.parquet.\n: org.apache.spark.SparkException: "
        "[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] Could not read footer.\n\tat org.apache.Foo(Foo.java:1)"
    )
    assert spark_error(failure) == "[FAILED_READ_FILE.CANNOT_READ_FILE_FOOTER] Could not read footer."
    assert spark_error(Exception("a worker died\nstack")) == "a worker died"


def test_arrow_columns_share_one_object_per_distinct_string() -> None:
    """The workers read string columns through a dictionary: the same values and nulls as
    ``to_pylist``, and equal strings are one object across batches."""
    import pyarrow as pa

    from statechan.audit import arrow_columns

    first = pa.record_batch({"key": ["a/b/k1", None, "a/b/k2", "a/b/k1"], "offset": [1, 2, None, 4]})
    second = pa.record_batch({"key": [None, "a/b/k2", "a/b/k3", "a/b/k1"], "offset": [5, 6, 7, 8]})
    words: dict[str, str] = {}
    one = arrow_columns(first, ["key", "offset"], words)
    two = arrow_columns(second, ["key", "offset"], words)
    assert one == [first.column("key").to_pylist(), first.column("offset").to_pylist()]
    assert two == [second.column("key").to_pylist(), second.column("offset").to_pylist()]
    assert one[0][0] is one[0][3] is two[0][3]
    assert one[0][2] is two[0][1]


def test_spark_settings_given_reach_the_session(spark: Any) -> None:
    session = spark_session(conf={"spark.sql.shuffle.partitions": "3", "spark.statechan.probe": "yes"})
    assert session.conf.get("spark.sql.shuffle.partitions") == "3"
    assert session.conf.get("spark.statechan.probe") == "yes"
    session.conf.set("spark.sql.shuffle.partitions", str(max(2, os.cpu_count() or 2)))  # as the others expect


def test_the_session_the_auditor_starts_logs_through_its_own_profile(spark: Any) -> None:
    """Spark's default profile warns about the host name and the native Hadoop library before a
    session can lower the level; the JVM the auditor starts reads statechan's profile instead."""
    from statechan.audit import SPARK_LOGGING

    options = spark.sparkContext.getConf().get("spark.driver.extraJavaOptions")
    assert f"-Dlog4j.configurationFile={SPARK_LOGGING.as_uri()}" in options
    assert "rootLogger.level" in SPARK_LOGGING.read_text(encoding="utf-8")


def test_the_code_zip_audits_on_its_own(tmp_path: Path) -> None:
    """What Spark's executors get: the zip alone (no checkout, no installed statechan), with the
    dependencies, audits a trace as this process does — the built-in models come from inside it."""
    import subprocess
    import sys
    import sysconfig

    from statechan.audit import code_zip

    bundle = code_zip(tmp_path)
    assert code_zip(tmp_path) == bundle  # named by content: the same code is one file
    write_generated(tmp_path / "t.jsonl", 2_000, seed=3, plant={"single-owner": 1, "stuck-in-flight": 2})
    here = audit([tmp_path / "t.jsonl"], engine="local")
    script = (
        "import json, statechan, statechan.audit as a; "
        "assert statechan.__file__.startswith(sys.argv[1]), statechan.__file__; "
        "r = a.audit([sys.argv[2]], engine='local'); "
        "print(json.dumps({k: v.count for k, v in r.violations.items()}))"
    )
    site = sysconfig.get_paths()["purelib"]
    result = subprocess.run(  # -S: no site, so no .pth puts the checkout on the path
        [sys.executable, "-S", "-c", "import sys; " + script, str(bundle), str(tmp_path / "t.jsonl")],
        cwd=tmp_path,
        env={"PYTHONPATH": f"{bundle}{os.pathsep}{site}", "PATH": os.environ.get("PATH", "")},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    assert json.loads(result.stdout) == {k: v.count for k, v in here.violations.items()}
    assert here.violations["stuck-in-flight"].count == 2


def test_shipping_the_code_to_the_executors_changes_no_result(spark: Any, planted: tuple[Path, Path, GenStats]) -> None:
    shipped = audit([planted[0]], spark=spark, ship_code=True)
    assert _counts(shipped) == PLANTED
    assert shipped.model_dump(exclude={"elapsed_s"}) == audit([planted[0]], spark=spark).model_dump(
        exclude={"elapsed_s"}
    )


_SHIP_SCRIPT = """
import json, sys
from statechan.audit import audit, spark_session
session = spark_session("local[1]")
for mode in ("no-ship", "ship"):  # one driver for both: the code, once shipped, stays with the session
    try:
        report = audit([sys.argv[1]], spark=session, ship_code=mode == "ship")
        print(mode, json.dumps({k: v.count for k, v in report.violations.items() if v.count}))
    except Exception as exc:
        print(mode, "FAILED", type(exc).__name__, str(exc)[:2000].replace(chr(10), " | "))
"""


def test_workers_without_statechan_audit_with_the_shipped_code(tmp_path: Path) -> None:
    """Python workers that cannot import statechan (run with ``-S`` from an empty folder, as on a
    cluster's node without it): the audit fails unless the code is shipped, and gives the
    planted counts when it is."""
    import subprocess
    import sys

    from statechan.sparkservers import python_without_statechan

    write_generated(tmp_path / "t.jsonl", 2_000, seed=3, plant={"single-owner": 1, "owner-registered": 1})
    worker_python = python_without_statechan(tmp_path)
    env = {**os.environ, "PYSPARK_PYTHON": str(worker_python)}
    done = subprocess.run(
        [sys.executable, "-c", _SHIP_SCRIPT, str(tmp_path / "t.jsonl")],
        env=env,
        capture_output=True,
        text=True,
        check=False,
        timeout=600,
    )
    outputs = dict(line.split(" ", 1) for line in done.stdout.splitlines() if line.startswith(("ship ", "no-ship ")))
    assert set(outputs) == {"ship", "no-ship"}, done.stdout[-2000:] + done.stderr[-2000:]
    assert json.loads(outputs["ship"]) == {"single-owner": 1, "owner-registered": 1}
    assert outputs["no-ship"].startswith("FAILED"), outputs["no-ship"]
    assert "statechan" in outputs["no-ship"]


HOT_KEY = "hot/ns/0x00000000_0xffffffff"


def _hot_key_trace(path: Path, transfers: int) -> tuple[int, int]:
    """A trace whose channel records are all on one key: assigned to b1, then ``transfers``
    transfers between b1 and b2, each Owned sent twice (the second a stale duplicate the resolver
    refuses), then a last transfer left in flight until a registry record 100 s later (one
    stuck-in-flight). Returns the stale duplicate's count and the stuck record's offset."""
    from statechan.states import ServiceUnitState as S
    from statechan.traces import ChannelRecord, RegistryRecord, write_parquet
    from statechan.values import ServiceUnitStateData as D

    values = [D(state=S.Assigning, dst_broker="b1", version_id=1), D(state=S.Owned, dst_broker="b1", version_id=2)]
    version, owner, other = 2, "b1", "b2"
    for _ in range(transfers):
        owned = D(state=S.Owned, dst_broker=other, source_broker=owner, version_id=version + 3)
        values += [
            D(state=S.Releasing, dst_broker=other, source_broker=owner, version_id=version + 1),
            D(state=S.Assigning, dst_broker=other, source_broker=owner, version_id=version + 2),
            owned,
            owned,
        ]
        version, owner, other = version + 3, other, owner
    values.append(D(state=S.Releasing, dst_broker=other, source_broker=owner, version_id=version + 1))
    start = 1_700_000_000_000
    records: list[Any] = [
        RegistryRecord(offset=i, time=start, broker=b, event="registered") for i, b in enumerate(("b1", "b2"))
    ]
    records += [
        ChannelRecord(offset=2 + i, publish_time=start + 10 * i, key=HOT_KEY, value=value)
        for i, value in enumerate(values)
    ]
    last = records[-1]
    records.append(
        RegistryRecord(offset=last.offset + 1, time=last.publish_time + 100_000, broker="b3", event="registered")
    )
    write_parquet(records, path)
    return transfers, last.offset


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_a_hot_key_is_replayed_as_a_stream(spark: Any, tmp_path: Path, engine: str) -> None:
    """Every channel record on one key (one namespace, one partition, several Arrow batches): the
    replay holds one value for the key whatever its length, and the report is exact."""
    path = tmp_path / "hot.parquet"
    stale, stuck = _hot_key_trace(path, 40_000)
    report = audit([path], engine=engine, spark=spark if engine == "spark" else None)
    channel = 2 + 4 * 40_000 + 1
    assert (report.records, report.channel_records, report.bundles, report.namespaces) == (channel + 3, channel, 1, 1)
    assert report.rejected == {"stale-version": stale}
    assert report.accepted == channel - stale
    assert _counts(report) == {"stuck-in-flight": 1}
    example = report.violations["stuck-in-flight"].examples[0]
    assert (example.key, example.offset) == (HOT_KEY, stuck)


def _hot_history_trace(path: Path, cycles: int) -> int:
    """A trace with view records whose channel and view records are all on one key: ``cycles``
    lifetimes (Assigning, Owned, Releasing, Free, tombstone), each record taken by b1's view,
    with two plants: in one lifetime b1's view goes back from Owned v2 to Assigning v1, in a
    later one it takes an Owned v2 to b2 the channel never settled on. Returns the records."""
    from statechan.states import ServiceUnitState as S
    from statechan.traces import ChannelRecord, RegistryRecord, ViewRecord, write_parquet
    from statechan.values import ServiceUnitStateData as D

    lifetime = [
        D(state=S.Assigning, dst_broker="b1", version_id=1),
        D(state=S.Owned, dst_broker="b1", version_id=2),
        D(state=S.Releasing, source_broker="b1", version_id=3),
        D(state=S.Free, source_broker="b1", version_id=4),
        None,
    ]
    start = 1_700_000_000_000
    records: list[Any] = [RegistryRecord(offset=0, time=start, broker="b1", event="registered")]

    def view(value: D | None) -> None:
        offset = len(records)
        records.append(
            ViewRecord(offset=offset, time=start + offset, observer="b1", key=HOT_KEY, value=value, accepted=True)
        )

    for cycle in range(cycles):
        for value in lifetime:
            records.append(
                ChannelRecord(offset=len(records), publish_time=start + len(records), key=HOT_KEY, value=value)
            )
            owned = value is not None and value.state is S.Owned
            view(D(state=S.Owned, dst_broker="b2", version_id=2) if owned and cycle == cycles // 2 else value)
            if owned and cycle == cycles // 3:
                view(lifetime[0])
    write_parquet(records, path)
    return len(records)


@pytest.mark.parametrize("engine", ["spark", "local"])
def test_a_hot_key_s_history_is_checked_as_a_stream(
    spark: Any, tmp_path: Path, engine: str, monkeypatch: pytest.MonkeyPatch, request: pytest.FixtureRequest
) -> None:
    """Every channel and view record on one key (130,002 records; on Spark 30,002, in Arrow batches
    of 4,000 instead of 100,000, so that the key still spans several): the history invariants see
    the key's records one at a time, the report is exact on both engines, and (local engine,
    instrumented) what the folds hold stays at the key's distinct values, never its records, and
    the local engine's sort holds one run of records at a time."""
    import statechan.audit as audit_module
    from statechan.invariants.catalogue import HistoryStream

    cycles = 13_000 if engine == "local" else 3_000
    if engine == "spark":
        batch = "spark.sql.execution.arrow.maxRecordsPerBatch"
        before = spark.conf.get(batch)
        spark.conf.set(batch, "4000")
        request.addfinalizer(lambda: spark.conf.set(batch, before))
    path = tmp_path / "hot-history.parquet"
    records = _hot_history_trace(path, cycles)
    most = {"held": 0, "buffer": 0}
    if engine == "local":
        offer = HistoryStream.offer

        def counted(stream: HistoryStream, record: Any) -> None:
            offer(stream, record)
            most["held"] = max(most["held"], stream.held())

        add = audit_module.ExternalSort.add

        def added(sort: Any, item: Any) -> None:
            add(sort, item)
            most["buffer"] = max(most["buffer"], len(sort.buffer))

        monkeypatch.setattr(HistoryStream, "offer", counted)
        monkeypatch.setattr(audit_module.ExternalSort, "add", added)
        monkeypatch.setattr(audit_module, "HISTORY_RUN", 10_000)
    report = audit([path], engine=engine, spark=spark if engine == "spark" else None)
    channel = 5 * cycles
    assert (report.records, report.channel_records, report.view_records, report.bundles) == (
        records,
        channel,
        records - 1 - channel,
        1,
    )
    assert (report.accepted, report.rejected, report.malformed) == (channel, {}, 0)
    assert _counts(report) == {"version-monotonic": 1, "one-value-per-version": 1}
    (back,) = report.violations["version-monotonic"].examples
    assert (back.key, back.offset) == (HOT_KEY, 1 + 10 * (cycles // 3) + 4)
    assert back.detail == "b1 went from Owned dst=b1 v2 to Assigning dst=b1 v1"
    (unsettled,) = report.violations["one-value-per-version"].examples
    assert (unsettled.key, unsettled.offset) == (HOT_KEY, 1 + 10 * (cycles // 2) + 1 + 3)
    assert unsettled.detail == "b1 took Owned dst=b2 v2, which the channel never settled on"
    if engine == "local":
        # per fold: the observers' held values (2), the lifetime's versions (4) and the distinct
        # values settled (4) or taken unsettled (1), the compaction tail (400 records) and the
        # values (5 each) of the lifetimes it spans and the one before: whatever the record count
        assert 0 < most["held"] <= 2 + 4 + 4 + 1 + 400 + 5 * (400 // 5 + 2)
        assert most["buffer"] == 10_000 - 1  # the external sort held less than a run (the rest went to files)
