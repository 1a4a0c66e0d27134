"""The benchmark page and its results file: a run becomes an engine's current table and the run it
replaces its history; the committed page is exactly what the committed results file renders to;
every benchmark is an engine the page knows; the two benchmark modules do not import each other."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from statechan.bench import BENCHMARKS
from statechan.benchharness import ENGINES, Figure, load_results, record, render, run_info, save_results

ROOT = Path(__file__).resolve().parent.parent


def _run(date: str) -> dict[str, object]:
    return run_info("python -m statechan.bench --only resolver", "10 pairs") | {"date": date, "load": [1.0, 2.0, 3.0]}


def test_a_run_becomes_current_and_the_one_it_replaces_history(tmp_path: Path) -> None:
    results: dict[str, object] = {"engines": {}}
    first = [Figure("should_reject", 10, 2.0, "loop floor", 1.0, {"mix": {"accepted": 9}}), Figure("other", 5, 1.0)]
    record(results, "resolver", _run("2026-01-01T00:00:00Z"), first)
    record(results, "resolver", _run("2026-02-01T00:00:00Z"), [Figure("should_reject", 10, 1.0, "loop floor", 1.0)])
    path = tmp_path / "results.json"
    save_results(path, results)
    stored = load_results(path)
    entry = stored["engines"]["resolver"]
    assert entry["current"]["date"] == "2026-02-01T00:00:00Z"
    assert [f["name"] for f in entry["current"]["figures"]] == ["should_reject"]
    (old,) = entry["history"]
    assert old["date"] == "2026-01-01"
    assert old["rate"] == pytest.approx(5.0)
    assert old["against baseline"] == "2.00x loop floor"
    assert old["load"] == "1.00, 2.00, 3.00"
    page = render(stored)
    assert "## Resolver" in page
    assert "| should_reject | 10 | 1.000 s | 10.00 decisions/s | loop floor | 1.000 s | 1.00x |" in page
    assert "| 2026-01-01 |" in page
    assert "## Model checker" not in page  # only engines with results


def test_an_engine_without_a_run_shows_its_history_and_its_tables() -> None:
    results = {
        "engines": {
            "fuzz": {
                "history": [{"date": "2026-01-01", "figure": "all four", "rate": 252, "size": "60,800 inputs"}],
                "tables": [{"title": "By target", "columns": ["target", "inputs"], "rows": [["bytes", "16,500"]]}],
            }
        }
    }
    page = render(results)
    assert "Not measured by `python -m statechan.bench`" in page
    assert "| 2026-01-01 |  | all four | 60,800 inputs | 252 inputs/s |" in page
    assert "### By target" in page
    assert "| bytes | 16,500 |" in page


def test_the_committed_page_is_what_the_results_file_renders() -> None:
    results = load_results(ROOT / "docs" / "benchmarks.json")
    page = (ROOT / "docs" / "benchmarks.md").read_text(encoding="utf-8")
    assert page == render(results), "docs/benchmarks.md is stale: python -m statechan.bench --markdown --render"


def test_the_results_file_names_only_known_engines() -> None:
    data = json.loads((ROOT / "docs" / "benchmarks.json").read_text(encoding="utf-8"))
    assert set(data["engines"]) <= set(ENGINES)
    for name in ("resolver", "replay", "simulate", "hypothesis", "check", "audit", "generate", "balance"):
        assert name in data["engines"], f"no results for {name}"


def test_every_benchmark_is_an_engine_of_the_page() -> None:
    assert set(BENCHMARKS) <= set(ENGINES)


def test_render_only_does_not_measure(tmp_path: Path) -> None:
    results = tmp_path / "results.json"
    save_results(results, {"engines": {"fuzz": {"history": [{"date": "2026-01-01", "figure": "x", "rate": 1}]}}})
    page = tmp_path / "page.md"
    done = subprocess.run(
        [sys.executable, "-m", "statechan.bench", "--render", "--markdown", str(page), "--results", str(results)],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    assert not [line for line in done.stdout.splitlines() if line.startswith("[")]  # no engine ran
    assert page.read_text(encoding="utf-8") == render(load_results(results))


@pytest.mark.parametrize(
    ("module", "other"), [("statechan.bench", "statechan.balance"), ("statechan.balance.bench", "statechan.bench")]
)
def test_the_benchmark_modules_do_not_import_each_other(module: str, other: str) -> None:
    found = f"sorted(m for m in sys.modules if m == {other!r} or m.startswith({other!r} + '.'))"
    script = f"import sys, {module}; print({found})"
    loaded = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout.strip()
    assert loaded == "[]", f"importing {module} loads {loaded}"


def test_a_baseline_git_cannot_check_out_is_named() -> None:
    from statechan.bench import bench_check_against

    with pytest.raises(SystemExit, match="--baseline no-such-revision: git could not check it out"):
        bench_check_against("no-such-revision")
