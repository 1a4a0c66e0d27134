"""The auditor on a real Spark standalone cluster (a master and two workers, separate JVMs):
with the code shipped to executors whose Python cannot import statechan, its report equals the
local engine's on the same traces, planted violations and malformed lines included."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statechan.audit import AuditReport, audit, spark_session
from statechan.sparkservers import (
    SparkCluster,
    SparkClusterUnavailable,
    alive_workers,
    python_without_statechan,
    spark_cluster,
)
from statechan.tracegen import PLANT_KINDS, generate, write_generated

pytestmark = pytest.mark.slow

PLANTED = {kind: i + 1 for i, kind in enumerate(PLANT_KINDS)}
MIXED_PLANTS = {"stuck-in-flight": 1, "single-owner": 2}
BAD_LINES = [
    "this is not json",
    '{"kind": "channel", "offset": 1, "publish_time": 5, "value": null}',
    '{"kind": "channel", "offset": 1, "publish_time": 5, "key": "t/n/0x00000000_0x10000000",'
    ' "value": {"state": "Lost", "dstBroker": "b", "versionId": 1}}',
    '{"kind": "registry", "offset": 2, "time": 5, "broker": "b"}',
    '{"kind": "gossip", "offset": 3}',
]


@pytest.fixture(scope="session")
def standalone() -> Iterator[SparkCluster]:
    """One cluster for the whole run, started on first use."""
    try:
        with spark_cluster(workers=2) as cluster:
            yield cluster
    except SparkClusterUnavailable as exc:
        pytest.skip(f"no Spark standalone cluster: {exc}")


@pytest.fixture(scope="module")
def cluster_spark(standalone: SparkCluster) -> Iterator[Any]:
    """A driver on the cluster; any other session (a local one some test left) is stopped first,
    so the audit's own ``spark_session(master)`` finds this one."""
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    python = python_without_statechan(standalone.folder)
    session = spark_session(standalone.master, conf=standalone.session_conf() | {"spark.pyspark.python": str(python)})
    assert session.sparkContext.master == standalone.master
    yield session
    session.stop()


@pytest.fixture(scope="module")
def traces(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A planted Parquet trace and a JSON Lines one with malformed lines among its records (audited
    apart: two generated traces share namespace names and offsets)."""
    folder = tmp_path_factory.mktemp("cluster-traces")
    write_generated(folder / "planted.parquet", 20_000, seed=5, plant=PLANTED)
    records, _ = generate(3_000, seed=3, plant=MIXED_PLANTS)
    lines = [json.dumps(record.to_json()) for record in records]
    for i, bad in enumerate(BAD_LINES):
        lines.insert(50 + 300 * i, bad)
    (folder / "mixed.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    return folder


def _comparable(report: AuditReport) -> dict[str, Any]:
    return report.model_dump(exclude={"engine", "elapsed_s", "quarantine"})


def test_both_workers_registered(standalone: SparkCluster) -> None:
    assert alive_workers(standalone.ui) == 2


@pytest.mark.parametrize(
    ("name", "planted", "malformed"),
    [("planted.parquet", PLANTED, 0), ("mixed.jsonl", MIXED_PLANTS, len(BAD_LINES))],
)
def test_the_cluster_audit_equals_the_local_engine(
    cluster_spark: Any,
    standalone: SparkCluster,
    traces: Path,
    tmp_path: Path,
    name: str,
    planted: dict[str, int],
    malformed: int,
) -> None:
    notes: list[str] = []
    trace = traces / name
    on_cluster = audit([trace], tmp_path / "cluster.json", master=standalone.master, progress=notes.append)
    local = audit([trace], tmp_path / "local.json", engine="local")
    assert any("sending the auditor's code to the executors" in note for note in notes), notes
    assert _comparable(on_cluster) == _comparable(local)
    assert {k: v.count for k, v in on_cluster.violations.items() if v.count} == planted
    assert on_cluster.malformed == malformed
    if malformed:
        cluster_quarantine = (tmp_path / "cluster.quarantine.jsonl").read_text(encoding="utf-8")
        assert cluster_quarantine == (tmp_path / "local.quarantine.jsonl").read_text(encoding="utf-8")
    executors = cluster_spark.sparkContext._jsc.sc().getExecutorMemoryStatus().size() - 1  # less the driver
    assert executors == 2


def test_the_search_and_the_swarm_on_the_cluster_equal_one_process(cluster_spark: Any, tmp_path: Path) -> None:
    """The checker's code shipped to executors that cannot import statechan: the levels past 100
    states each a job on the two workers (the successors deduplicated across partitions), the
    same states, verdict and counterexample as the compact search in this process at the crash and
    restart bound; the default and 3-broker bounds clean, with the same states, transitions and
    levels, their liveness checked from the edges the executors wrote; the swarm's walks those of
    one process."""
    from statechan.checker import Bounds, check
    from statechan.checker.sparksearch import check_on_spark
    from statechan.checker.swarm import swarm

    notes: list[str] = []
    faults = Bounds(crashes=1, restarts=1)
    folder = tmp_path / "run"
    found = check_on_spark(
        faults, variant="25379", spark=cluster_spark, checkpoint=folder, small_level=100, note=notes.append
    )
    assert any("sending the checker's code to the executors" in note for note in notes), notes
    compact = check(faults, variant="25379")
    assert found.violation is not None
    assert (found.states, found.levels, found.violation, found.path, found.picks) == (
        compact.states,
        compact.levels,
        compact.violation,
        compact.path,
        compact.picks,
    )
    # the default bound and the 3-broker bound, their widest level a job (82 and 329 states): clean and live
    for bounds, small in ((Bounds(), 80), (Bounds(brokers=3), 325)):
        clean = check_on_spark(bounds, spark=cluster_spark, small_level=small)
        expected = check(bounds)
        assert clean.ok, bounds
        assert (clean.states, clean.transitions, clean.levels) == (
            expected.states,
            expected.transitions,
            expected.levels,
        )
        assert max(clean.levels) > small  # some levels were jobs on the workers
    walks = swarm(faults, variant="25379", walks=40, seed=1, spark=cluster_spark)
    alone = swarm(faults, variant="25379", walks=40, seed=1)
    assert (walks.violation, walks.path, walks.states, walks.steps) == (
        alone.violation,
        alone.path,
        alone.states,
        alone.steps,
    )


_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
"""What a Connect session sets in ``os.environ``: left set, every later classic session in this
process would turn into a Connect one."""
CONNECT_CORPORA = ("planted.parquet", "mixed.jsonl", "hot.parquet", "hot-history.parquet")
"""Every violation kind planted; malformed lines among JSON Lines records; one hot key over two
Arrow batches; one hot key's channel and view records through the history invariants."""


@pytest.fixture(scope="module")
def connect_traces(traces: Path) -> Path:
    """The cluster's traces and the test suite's two hot-key traces, beside them."""
    from tests.test_audit import _hot_history_trace, _hot_key_trace

    _hot_key_trace(traces / "hot.parquet", 10_000)
    _hot_history_trace(traces / "hot-history.parquet", 4_000)
    return traces


def _stop_active_session() -> None:
    from pyspark.sql import SparkSession

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()


@pytest.fixture(scope="module")
def local_reports(connect_traces: Path, tmp_path_factory: pytest.TempPathFactory) -> dict[str, tuple[Any, str]]:
    """Each corpus audited by the local engine (no JVM): the report and the quarantine's text. The
    classic engine's reports are the local engine's on these corpora (the cluster's tests above, and
    tests/test_audit.py's hot keys on both engines), so Connect is held to both."""
    folder = tmp_path_factory.mktemp("local")
    found = {}
    for name in CONNECT_CORPORA:
        report = audit([connect_traces / name], folder / f"{name}.json", engine="local")
        quarantine = folder / f"{name}.quarantine.jsonl"
        found[name] = (report, quarantine.read_text(encoding="utf-8") if quarantine.exists() else "")
    return found


@pytest.fixture(scope="module")
def connect_url() -> Iterator[str]:
    """A Spark Connect server (``local[2]``) started by the installed PySpark's own script, and the
    environment a Connect session sets put back afterwards."""
    import os

    from statechan.sparkservers import connect_server

    _stop_active_session()
    before = {name: os.environ.get(name) for name in _CONNECT_ENV}
    try:
        with connect_server() as url:
            yield url
    except SparkClusterUnavailable as exc:
        pytest.fail(f"no Spark Connect server: {exc}")
    finally:
        from pyspark.sql import SparkSession

        active = SparkSession.getActiveSession()
        if active is not None:
            active.stop()
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def test_the_audit_through_spark_connect_equals_the_local_and_classic_engines(
    connect_url: str, connect_traces: Path, local_reports: dict[str, tuple[Any, str]], tmp_path: Path
) -> None:
    """Through a Connect session (no SparkContext, no RDD: its ``sparkContext`` raises), each
    corpus gives the local engine's report, which is the classic engine's: counts, examples, skipped
    checks, quarantine."""
    from pyspark.errors import PySparkAttributeError

    session = spark_session(remote=connect_url)
    with pytest.raises(PySparkAttributeError, match="JVM_ATTRIBUTE_NOT_SUPPORTED"):
        session.sparkContext  # noqa: B018 - what the audit must do without
    notes: list[str] = []
    for name in CONNECT_CORPORA:
        report = audit([connect_traces / name], tmp_path / f"{name}.json", spark=session, progress=notes.append)
        local, quarantine = local_reports[name]
        assert _comparable(report) == _comparable(local), name
        connect_quarantine = tmp_path / f"{name}.quarantine.jsonl"
        assert (connect_quarantine.read_text(encoding="utf-8") if connect_quarantine.exists() else "") == quarantine
    planted, mixed, hot, history = (local_reports[name][0] for name in CONNECT_CORPORA)
    assert {k: v.count for k, v in planted.violations.items() if v.count} == PLANTED
    assert (mixed.malformed, hot.channel_records, history.view_records) == (len(BAD_LINES), 40_003, 20_001)
    assert {k: v.count for k, v in history.violations.items() if v.count} == {
        "version-monotonic": 1,
        "one-value-per-version": 1,
    }
    assert any("replaying" in note for note in notes), notes


def test_the_cli_audits_through_a_connect_server(connect_url: str, connect_traces: Path, tmp_path: Path) -> None:
    """``statechan audit --remote sc://…`` writes the report the classic engine writes, and a
    setting only a server can take is refused before any work."""
    from typer.testing import CliRunner

    from statechan.cli import app

    runner = CliRunner()
    trace = connect_traces / "planted.parquet"
    result = runner.invoke(app, ["audit", str(trace), "--report", str(tmp_path / "r.json"), "--remote", connect_url])
    assert result.exit_code == 1, result.output  # violations found
    written = AuditReport.model_validate_json((tmp_path / "r.json").read_text(encoding="utf-8"))
    assert {k: v.count for k, v in written.violations.items() if v.count} == PLANTED
    refused = runner.invoke(app, ["audit", str(trace), "--remote", connect_url, "--conf", "spark.driver.memory=8g"])
    assert refused.exit_code == 2
    assert "SQL settings only" in refused.output
