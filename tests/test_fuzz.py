"""Fuzz targets for the readers of untrusted files: the trace reader (and the local audit engine
over the same file) and the saved-run loader. Any bytes and any JSON give records or counted bad
lines, a run or a :class:`RunFileError` — never another exception — and records = valid + malformed.

``make test`` runs them under the ``ci`` Hypothesis profile; ``make fuzz`` (``python -m
tests.fuzz``) runs each for a stated time with fresh random seeds and prints how many inputs it tried.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from statechan.audit import audit
from statechan.cluster.runfile import RunFileError, load_saved_run
from statechan.traces import PARQUET_COLUMNS, ReadStats, read_trace

TRIED: Counter[str] = Counter()
"""Inputs each target has tried in this process (``make fuzz`` reports them)."""
LINE_BREAK = re.compile(r"\r\n|\r|\n")

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
"""Any JSON value (big integers, NaN and infinities included: Python's json writes them)."""

FIELDS = sorted({name for name, _ in PARQUET_COLUMNS} | {"publish_time", "time", "value", "dstBroker", "versionId"})
numbers = st.sampled_from([-1, 0, 1, 2**63 - 1, 2**63, -(2**63) - 1, 2**64 + 1]) | st.integers()
record_like = st.fixed_dictionaries(
    {"kind": st.sampled_from(["channel", "registry", "leader", "view", "other"])},
    optional={
        "offset": numbers,
        "publish_time": numbers,
        "time": numbers,
        "key": st.sampled_from(["t/n/0x00000000_0xffffffff", "t/n/0x0_0x1", "\udcff/n/0x00000000_0xffffffff"])
        | st.text(max_size=12),
        "value": st.none()
        | st.fixed_dictionaries(
            {"state": st.sampled_from(["Owned", "Free", "Assigning", "Bogus"])},
            optional={
                "dstBroker": st.text(max_size=6),
                "versionId": numbers,
                "timestamp": numbers,
                "force": json_values,
            },
        ),
        "broker": st.text(max_size=6),
        "event": st.sampled_from(["registered", "unregistered", "x"]),
        "observer": st.text(max_size=6),
        "accepted": json_values,
        "extra": json_values,
    },
)
"""Records with every field present or not and values at and past the edges of their types."""


def _lines(data: bytes) -> int:
    """Non-blank lines as Spark's text reader splits them (a byte-order mark skipped)."""
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    return sum(1 for line in LINE_BREAK.split(text) if line.strip())


def check_trace_bytes(data: bytes, folder: Path) -> None:
    """Any bytes as a JSON Lines trace: every reader counts each line as a record or a bad line."""
    TRIED["trace"] += 1
    path = folder / "fuzz.jsonl"
    path.write_bytes(data)
    stats = ReadStats()
    records = list(read_trace(path, stats))
    assert len(records) == stats.records
    assert stats.records + len(stats.bad) == _lines(data)
    report = audit([path], None, engine="local")
    assert report.malformed == len(stats.bad)
    assert report.records == stats.records + len(stats.bad)
    valid = report.channel_records + report.registry_records + report.leader_records + report.view_records
    assert valid == stats.records


def check_run_bytes(data: bytes, folder: Path) -> None:
    """Any bytes as a saved run: a run, or a RunFileError that names the file."""
    TRIED["run"] += 1
    path = folder / "fuzz-run.json"
    path.write_bytes(data)
    error = None
    try:
        load_saved_run(path)
    except RunFileError as exc:
        error = str(exc)
    assert error is None or str(path) in error


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz")


@given(st.binary(max_size=400))
def test_any_bytes_are_a_trace_of_records_and_bad_lines(folder: Path, data: bytes) -> None:
    check_trace_bytes(data, folder)


@given(st.lists(json_values | record_like, max_size=6), st.sampled_from(["\n", "\r\n", "\r"]))
def test_any_json_lines_are_a_trace_of_records_and_bad_lines(folder: Path, values: list[Any], end: str) -> None:
    check_trace_bytes(end.join(json.dumps(v) for v in values).encode("utf-8", "surrogatepass"), folder)


@given(st.binary(max_size=400))
def test_any_bytes_are_a_run_or_a_named_error(folder: Path, data: bytes) -> None:
    check_run_bytes(data, folder)


@given(json_values, json_values, json_values, json_values)
def test_any_json_run_is_a_run_or_a_named_error(folder: Path, config: Any, actions: Any, picks: Any, note: Any) -> None:
    run = {"format": "statechan-run/1", "config": config, "actions": actions, "picks": picks, "note": note}
    check_run_bytes(json.dumps(run).encode("utf-8", "surrogatepass"), folder)


TARGETS = (
    test_any_bytes_are_a_trace_of_records_and_bad_lines,
    test_any_json_lines_are_a_trace_of_records_and_bad_lines,
    test_any_bytes_are_a_run_or_a_named_error,
    test_any_json_run_is_a_run_or_a_named_error,
)
"""What ``make fuzz`` runs."""
