"""How the Spark engine gets a Parquet trace to its Python workers changes no report: the workers
reading the file themselves (each task a share of the namespaces, in file order) give exactly what
Spark's shuffle and sort by offset give, and what the single-process engine gives, on the planted
corpus, the hot-key corpus, generated traces of several seeds and a trace with malformed rows."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from statechan.audit import (
    AuditReport,
    AuditSettings,
    Fold,
    Partial,
    _parquet_channel_batches,
    _share_mask,
    audit,
    first_pass,
    namespace_share,
    spark_session,
)
from statechan.tracegen import PLANT_KINDS, write_generated

pytestmark = pytest.mark.slow

PLANTED = {kind: i + 1 for i, kind in enumerate(PLANT_KINDS)}
IGNORED = {"engine", "elapsed_s"}


@pytest.fixture(scope="module")
def spark() -> Iterator[Any]:
    session = spark_session("local[2]")
    yield session
    session.stop()


def _reports(path: Path, spark: Any) -> dict[str, dict[str, Any]]:
    found: dict[str, AuditReport] = {
        "workers": audit([path], spark=spark, read="workers"),
        "spark": audit([path], spark=spark, read="spark"),
        "local": audit([path], engine="local"),
    }
    return {how: report.model_dump(exclude=IGNORED) for how, report in found.items()}


def _assert_same(reports: dict[str, dict[str, Any]]) -> None:
    assert reports["workers"] == reports["spark"]
    assert reports["local"] == reports["spark"]


def test_the_workers_read_gives_the_planted_counts_and_spark_s_report(spark: Any, tmp_path: Path) -> None:
    path = tmp_path / "planted.parquet"
    write_generated(path, 30_000, seed=5, plant=PLANTED)
    reports = _reports(path, spark)
    _assert_same(reports)
    assert {k: v["count"] for k, v in reports["workers"]["violations"].items() if v["count"]} == PLANTED


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_traces_give_one_report_whatever_the_read(spark: Any, tmp_path: Path, seed: int) -> None:
    path = tmp_path / f"random-{seed}.parquet"
    plants = {kind: (seed + i) % 3 for i, kind in enumerate(PLANT_KINDS)}
    write_generated(path, 12_000, seed=seed, plant=plants)
    _assert_same(_reports(path, spark))


def test_a_hot_key_gives_one_report_whatever_the_read(spark: Any, tmp_path: Path) -> None:
    from tests.test_audit import _hot_key_trace

    path = tmp_path / "hot.parquet"
    _hot_key_trace(path, 20_000)
    reports = _reports(path, spark)
    _assert_same(reports)
    assert {k: v["count"] for k, v in reports["workers"]["violations"].items() if v["count"]} == {"stuck-in-flight": 1}


def test_malformed_rows_are_quarantined_alike(spark: Any, tmp_path: Path) -> None:
    """Rows the replay cannot take (a null key or offset, a negative time, an unknown state) are counted
    and quarantined the same way by each read, their lines named."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    clean = tmp_path / "clean.parquet"
    write_generated(clean, 6_000, seed=7, plant={"single-owner": 1})
    table = pq.read_table(clean)
    kinds = table.column("kind").to_pylist()
    channel = [i for i, kind in enumerate(kinds) if kind == "channel"]
    keys, offsets, times, states = (table.column(c).to_pylist() for c in ("key", "offset", "time", "state"))
    keys[channel[100]] = None
    offsets[channel[1_000]] = None
    times[channel[2_000]] = -5
    states[channel[3_000]] = "Lost"
    for name, values in (("key", keys), ("offset", offsets), ("time", times), ("state", states)):
        index = table.schema.get_field_index(name)
        table = table.set_column(index, name, pa.array(values, table.schema.field(index).type))
    broken = tmp_path / "broken.parquet"
    pq.write_table(table, broken)
    reports = _reports(broken, spark)
    _assert_same(reports)
    assert reports["workers"]["malformed"] == 4


def test_a_trace_out_of_offset_order_is_not_read_by_the_workers(spark: Any, tmp_path: Path) -> None:
    import pyarrow.parquet as pq

    path = tmp_path / "t.parquet"
    write_generated(path, 3_000, seed=4)
    table = pq.read_table(path)
    shuffled = tmp_path / "shuffled.parquet"
    pq.write_table(table.take(list(reversed(range(table.num_rows)))), shuffled)
    with pytest.raises(ValueError, match="not in offset order"):
        audit([shuffled], spark=spark, read="workers")
    auto = audit([shuffled], spark=spark)  # auto: Spark sorts it
    ordered = audit([path], spark=spark, read="spark")
    assert auto.model_dump(exclude={*IGNORED, "inputs"}) == ordered.model_dump(exclude={*IGNORED, "inputs"})


def test_the_share_of_a_row_is_its_namespace_s_in_every_batch() -> None:
    import pyarrow as pa

    keys = ["a/b/0x0_0x1", "a/c/0x1_0x2", None, "x", "x/y", "a/b/0x2_0x3", "ü/é/0x0_0x1", ""]
    for column in (pa.array(keys), pa.array(keys).dictionary_encode()):
        batch = pa.RecordBatch.from_arrays([column], ["key"])
        for shares in (1, 2, 3, 7):
            picked = [_share_mask(batch, share, shares, {}).tolist() for share in range(shares)]
            assert [[namespace_share(k, shares) == share for k in keys] for share in range(shares)] == picked
            assert all(sum(row[i] for row in picked) == 1 for i in range(len(keys)))  # one share each
    assert namespace_share("a/b/0x0_0x1", 5) == namespace_share("a/b/0x2_0x3", 5)


@pytest.mark.parametrize("broken", [False, True])
def test_the_shares_folds_merged_are_the_whole_fold(tmp_path: Path, broken: bool) -> None:
    """Each task's fold passes over the other shares' rows in the batches it reads: the shares'
    partials merged are the one fold's, violations, examples and quarantine alike, also when a
    batch holds a row to quarantine (in whichever share)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    path = tmp_path / "planted.parquet"
    write_generated(path, 20_000, seed=6, plant=PLANTED)
    bad = 0
    if broken:
        table = pq.read_table(path)
        channel = [i for i, kind in enumerate(table.column("kind").to_pylist()) if kind == "channel"]
        states = table.column("state").to_pylist()
        for i in channel[500::4_000]:
            states[i] = "Lost"
            bad += 1
        table = table.set_column(table.schema.get_field_index("state"), "state", pa.array(states, pa.string()))
        pq.write_table(table, path)
    other, _ = first_pass([str(path)])
    settings = AuditSettings(examples=50)

    def fold(share: tuple[int, int] | None) -> Partial:
        work = Fold(settings, other.registry, other.max_time or 0, other.refused, share=share)
        for batch in _parquet_channel_batches(str(path), 0):
            work.batch(batch)
        return work.finish()

    whole = fold(None)
    assert sum(whole.violations.values()) >= len(PLANTED)
    assert len(whole.malformed) == bad
    for shares in (2, 3):
        merged = Partial(settings.examples)
        for share in range(shares):
            merged.merge(fold((share, shares)))
        assert merged.violations == whole.violations
        assert merged.reasons == whole.reasons
        assert (merged.channel, merged.bundles, merged.namespaces) == (whole.channel, whole.bundles, whole.namespaces)
        assert {k: sorted(v) for k, v in merged.examples.items()} == {k: sorted(v) for k, v in whole.examples.items()}
        assert sorted(merged.malformed) == sorted(whole.malformed)
