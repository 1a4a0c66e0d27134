"""The generator at scale: the same trace whatever the number of worker processes, the same
records as the one-process iterator, every lifecycle the README promises, about the records asked."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statechan.tracegen import PLANT_KINDS, generate, timed_generation, write_generated
from statechan.traces import read_records

pa = pytest.importorskip("pyarrow")
pq = pytest.importorskip("pyarrow.parquet")

PLANTS = dict.fromkeys(PLANT_KINDS, 1)


def _filled(row: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in row.items() if v is not None}


@pytest.fixture(scope="module")
def one_process(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Any]:
    path = tmp_path_factory.mktemp("gen") / "one.parquet"
    stats = write_generated(path, 12_000, seed=3, plant=PLANTS)
    return path, stats


def test_the_trace_does_not_depend_on_the_number_of_workers(one_process: tuple[Path, Any], tmp_path: Path) -> None:
    path, stats = one_process
    again = write_generated(tmp_path / "three.parquet", 12_000, seed=3, plant=PLANTS, workers=3)
    assert again == stats
    assert pq.read_table(tmp_path / "three.parquet").equals(pq.read_table(path))


def test_the_parquet_writer_writes_the_iterators_records(one_process: tuple[Path, Any]) -> None:
    path, stats = one_process
    trace, streamed = generate(12_000, seed=3, plant=PLANTS)
    records = list(trace)
    assert streamed == stats
    rows = pq.read_table(path).to_pylist()
    assert [_filled(r.flat_row()) for r in records] == [_filled(row) for row in rows]
    assert [r.offset for r in records] == list(range(len(records)))
    assert len(list(read_records(path))) == len(records) == stats.records


def test_another_seed_gives_another_trace(one_process: tuple[Path, Any], tmp_path: Path) -> None:
    write_generated(tmp_path / "other.parquet", 12_000, seed=4, plant=PLANTS)
    assert not pq.read_table(tmp_path / "other.parquet").equals(pq.read_table(one_process[0]))


def test_every_lifecycle_is_there_and_about_the_records_asked() -> None:
    trace, stats = generate(60_000, seed=2)
    records = list(trace)
    assert 60_000 <= stats.records <= 60_000 * 1.05  # past its quota each namespace finishes what it began
    steps: Counter[str] = Counter()
    last: dict[str, Any] = {}
    times: dict[str, int] = {}
    for record in records:
        if record.kind == "registry":
            steps[f"registry {record.event}"] += 1
            continue
        if record.kind != "channel":
            continue
        assert record.key is not None
        assert record.time >= times.get(record.key, 0), record  # each key's records in time order
        times[record.key] = record.time
        before, value = last.get(record.key), record.value
        if value is None:
            steps["tombstone"] += 1
        elif before is not None and value == before:
            steps["stale duplicate"] += 1
        elif value.force:
            steps["forced override"] += 1
        else:
            prev = None if before is None else before.state.value
            steps[f"{prev} -> {value.state.value}{' (transfer)' if value.dst_broker and prev == 'Owned' else ''}"] += 1
        last[record.key] = value
    expected = [
        "None -> Assigning",
        "Assigning -> Owned",
        "Owned -> Releasing (transfer)",  # PIP-307: Releasing names the destination
        "Releasing -> Assigning",
        "Owned -> Releasing",  # an unload
        "Releasing -> Free",
        "Owned -> Splitting",
        "None -> Owned",  # a split's children
        "Splitting -> Deleted",
        "Free -> Assigning",  # reassigned
        "tombstone",
        "stale duplicate",
        "forced override",
        "registry unregistered",
        "registry registered",
    ]
    assert [step for step in expected if not steps[step]] == []
    assert stats.stale == steps["stale duplicate"]
    assert stats.forced == steps["forced override"]
    assert stats.crashes == steps["registry unregistered"]


def test_workers_must_be_at_least_one(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="workers"):
        write_generated(tmp_path / "t.parquet", 100, workers=0)


def test_a_timed_generation_reports_what_it_wrote(tmp_path: Path) -> None:
    run = timed_generation(tmp_path / "t.parquet", 5_000, seed=1, workers=1)
    assert run.records == pq.read_metadata(tmp_path / "t.parquet").num_rows
    assert run.seconds > 0
    assert run.writer_peak_mb > 0
