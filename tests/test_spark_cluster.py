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
from statechan.tracegen import PLANT_KINDS, generate, write_generated
from tests.sparkcluster import (
    SparkCluster,
    SparkClusterUnavailable,
    alive_workers,
    python_without_statechan,
    spark_cluster,
)

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


_CONNECT_ENV = ("SPARK_CONNECT_MODE_ENABLED", "SPARK_REMOTE", "SPARK_LOCAL_REMOTE")
"""What a Connect session sets in ``os.environ``: left set, every later classic session in this
process would turn into a Connect one."""


@pytest.fixture(scope="module")
def connect_spark() -> Iterator[Any]:
    """A Spark Connect session on a Connect server started from the package (``local[2]``); a
    classic session still running (the cluster's) is stopped first, as Connect refuses to start
    beside one."""
    import os

    pytest.importorskip("grpc", reason="the Spark Connect client's packages (pyspark[connect]) are not installed")
    from pyspark.sql import SparkSession

    from tests.sparkcluster import connect_server

    active = SparkSession.getActiveSession()
    if active is not None:
        active.stop()
    before = {name: os.environ.get(name) for name in _CONNECT_ENV}
    try:
        with connect_server() as url:
            session = SparkSession.builder.remote(url).getOrCreate()
            try:
                yield session
            finally:
                session.stop()
    except SparkClusterUnavailable as exc:
        pytest.skip(f"no Spark Connect server: {exc}")
    finally:
        for name, value in before.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value


def _connect_lacks() -> type[BaseException]:
    try:
        from pyspark.errors import PySparkAttributeError
    except ImportError:  # pragma: no cover - PySpark 4 has it
        return AttributeError
    return PySparkAttributeError


@pytest.mark.xfail(
    strict=True,
    raises=_connect_lacks(),
    reason="statechan.audit reaches spark.sparkContext (master, addPyFile, defaultParallelism, "
    "statusTracker, textFile for JSON Lines), which Spark Connect has not: JVM_ATTRIBUTE_NOT_SUPPORTED",
)
def test_the_audit_through_spark_connect_equals_the_local_engine(connect_spark: Any, traces: Path) -> None:
    trace = traces / "planted.parquet"
    assert _comparable(audit([trace], spark=connect_spark)) == _comparable(audit([trace], engine="local"))
