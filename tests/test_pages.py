"""The sequence diagrams and their pages: what they draw, checked against an independent replay,
and the pages loaded in a real browser (headless Chromium, one session for every page test;
skipped with the reason when it cannot be installed or started)."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest
from typer.testing import CliRunner

from statechan.cli import app
from statechan.cluster.runfile import load_saved_run, replay
from statechan.cluster.timeline import build_timeline
from statechan.invariants.catalogue import CATALOGUE
from statechan.render import history_checker, invariant_checker
from statechan.sequence import Kind, Mark, run_diagram
from tests.browser import BrowserUnavailable, browser

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

RUNNER = CliRunner()
RUNS = sorted(Path("docs/counterexamples").glob("*.json"))
BROKEN_BAND = "rgb(255, 227, 227)"
"""The broken step's background (``.band.broken`` in statechan.diagram)."""


def _expected(run: Path) -> dict[str, Any]:
    """What a page of ``run`` must show, worked out without the diagram: the brokers, the step
    ``statechan replay`` reports broken (its own timeline and checks), and the records and answers
    an independent replay up to that step writes."""
    config, actions, _, picks = load_saved_run(run)
    steps = build_timeline(config, actions, invariant_checker(1)[0], True, history_checker, picks)
    broken = next(s for s in steps if s.violations)
    cluster = replay(config.model_copy(update={"trace_views": True}), actions[: broken.number], picks)
    requests = sum(1 for a in actions[: broken.number] if a.kind in ("lookup", "unload", "transfer", "split"))
    return {
        "brokers": config.broker_ids(),
        "step": broken.number,
        "invariant": broken.violations[0].split(" ", 1)[0].rstrip(":"),
        "channel": [r["offset"] for r in cluster.trace if r["kind"] == "channel"],
        "views": sum(1 for r in cluster.trace if r["kind"] == "view"),
        "answers": len(cluster.answers),
        "requests": requests,
    }


# -- the diagram, without a browser ----------------------------------------------------------------------
@pytest.mark.parametrize("run", RUNS, ids=[r.stem for r in RUNS])
def test_each_saved_run_draws_its_records_and_its_break(run: Path) -> None:
    expected = _expected(run)
    config, actions, _, picks = load_saved_run(run)
    diagram = run_diagram(
        config, actions, str(run), check=invariant_checker(1)[0], final_check=history_checker, picks=picks
    )
    assert [line.id for line in diagram.brokers] == expected["brokers"]
    events = [e for g in diagram.groups for e in g.events]
    channel = [e.offset for e in events if e.kind is Kind.WRITE or e.mark is Mark.UNATTRIBUTED]
    assert channel == expected["channel"]
    assert sum(1 for e in events if e.kind is Kind.DELIVER) == expected["views"]
    assert sum(1 for e in events if e.kind is Kind.ANSWER) == expected["answers"]
    assert sum(1 for e in events if e.kind is Kind.REQUEST) == expected["requests"]
    (group, found), *_ = diagram.breaches
    assert (group.number or 0) == expected["step"]
    assert found.invariant == expected["invariant"]
    assert found.statement == CATALOGUE[found.invariant].statement
    assert diagram.groups[-1] is group  # replay stops at the break, and so does the picture


def test_a_checker_liveness_counterexample_marks_its_loop() -> None:
    config, actions, _, picks = load_saved_run(Path("docs/counterexamples/checker-finding-4.json"))
    problem = "3 state(s) cannot reach a settled state; the shortest leads to a loop of 2 step(s)"
    diagram = run_diagram(config, actions, "t", picks=picks, problem=problem, liveness=True, lasso=len(actions) - 2)
    assert [g.number for g in diagram.groups if g.loop] == [len(actions) - 1, len(actions)]
    (group, found), *_ = diagram.breaches
    assert group.number == len(actions)
    assert found.invariant == "liveness"
    assert found.detail == problem


def test_a_story_highlights_the_entry_asked_about(tmp_path: Path) -> None:
    trace = tmp_path / "24186.jsonl"
    replayed = RUNNER.invoke(app, ["replay", "docs/counterexamples/24186.json", "--quiet", "--trace", str(trace)])
    assert replayed.exit_code == 1, replayed.output
    key = "tenant/ns-0/0x00000000_0xffffffff"
    page = tmp_path / "story.html"
    offsets = [json.loads(line)["offset"] for line in trace.read_text().splitlines() if '"channel"' in line]
    shown = RUNNER.invoke(
        app,
        [
            "traces",
            "show",
            str(trace),
            "--key",
            key,
            "--around",
            str(offsets[-1]),
            "--context",
            "1",
            "--storage",
            "metadata-store",
            "--views",
            "--html",
            str(page),
        ],
    )
    assert shown.exit_code == 0, shown.output
    html = page.read_text()
    focus = re.search(r'<g class="step focus"[^>]*data-heading="@(\d+)" id="broken"', html)
    assert focus is not None
    assert int(focus[1]) == offsets[-1]
    assert "more entries of the story are not drawn" in html


def test_a_run_that_breaks_nothing_says_so(tmp_path: Path) -> None:
    from statechan.cluster import Deliver, Lookup, RunTask, SimConfig
    from statechan.cluster.runfile import save_run

    config = SimConfig(brokers=2, bundles_per_namespace=1)
    bundle, broker = "tenant/ns-0/0x00000000_0xffffffff", "broker-1:8080"
    run, page = tmp_path / "run.json", tmp_path / "page.html"
    save_run(run, config, [Lookup(broker, bundle), RunTask(broker), Deliver(broker), Deliver("broker-2:8080")])
    result = RUNNER.invoke(app, ["replay", str(run), "--quiet", "--html", str(page)])
    assert result.exit_code == 0, result.output
    html = page.read_text()
    assert "no invariant broken" in html
    assert 'class="band broken"' not in html
    assert html.count('class="event write') == 1  # the Assigning the lookup started
    assert html.count('class="event deliver') == 2


# -- bad input ---------------------------------------------------------------------------------------------
def _write(path: Path, data: object) -> Path:
    path.write_text(data if isinstance(data, str) else json.dumps(data))
    return path


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ({"format": "statechan-run/2", "config": {}, "actions": []}, "a run saved in format 'statechan-run/2'"),
        ({"format": "statechan-run/0"}, "older than this statechan's 'statechan-run/1'"),
        ('{"format": "statechan-run/1", "config": {}, "act', "not JSON"),
        ({"format": "statechan-run/1", "config": {"brokers": 2, "colour": "red"}}, "config: ('colour',)"),
        ({"format": "statechan-run/1", "actions": [{"kind": "lookup"}]}, "actions[0]: bad lookup action"),
    ],
)
def test_a_bad_run_gets_a_message_naming_it_and_no_page(tmp_path: Path, content: object, message: str) -> None:
    run = _write(tmp_path / "run.json", content)
    page = tmp_path / "page.html"
    result = RUNNER.invoke(app, ["replay", str(run), "--html", str(page)])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert f"{run}:" in said
    assert message in said
    assert not page.exists()


def test_a_page_is_never_written_over_the_run(tmp_path: Path) -> None:
    run = tmp_path / "run.json"
    run.write_bytes(Path("docs/counterexamples/checker-finding-4.json").read_bytes())
    result = RUNNER.invoke(app, ["replay", str(run), "--html", str(run)])
    assert result.exit_code == 2
    assert "--html" in result.output
    assert run.read_bytes() == Path("docs/counterexamples/checker-finding-4.json").read_bytes()


def test_a_step_that_cannot_run_is_drawn_and_named(tmp_path: Path) -> None:
    data = json.loads(Path("docs/counterexamples/checker-finding-4.json").read_text())
    data["actions"].insert(2, {"kind": "crash", "broker": "nobody"})
    run = _write(tmp_path / "run.json", data)
    page = tmp_path / "page.html"
    result = RUNNER.invoke(app, ["replay", str(run), "--quiet", "--html", str(page)])
    assert result.exit_code == 2
    assert f"{run}: step 3 cannot run" in " ".join(result.output.split())
    assert "cannot run: no broker" in page.read_text()


# -- in the browser --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """One headless Chromium for every page test of the module."""
    try:
        with browser() as started:
            yield started
    except BrowserUnavailable as exc:
        pytest.skip(f"no browser: {exc}")


def _load(driver: WebDriver, page: Path) -> None:
    driver.get(page.resolve().as_uri())
    assert driver.execute_script("return document.readyState") == "complete"


def _no_fetches(driver: WebDriver, html: str) -> None:
    """The page asked for nothing (its policy forbids it, and it names nothing to fetch)."""
    assert driver.execute_script("return performance.getEntriesByType('resource').length") == 0
    assert re.findall(r'\b(?:src|href)="(?!#)', html) == []
    assert "Content-Security-Policy" in html


ROWS_JS = """
return Array.from(document.querySelectorAll('svg.sequence .event')).map(function(e){
  var r = e.getBoundingClientRect();
  return {seq: +e.dataset.seq, kind: e.classList[1], offset: e.dataset.offset ? +e.dataset.offset : null,
          step: e.dataset.step ? +e.dataset.step : 0, target: e.dataset.target || null, top: r.top + window.scrollY};
});
"""


def test_every_saved_run_writes_a_page_that_shows_it(driver: WebDriver, tmp_path: Path) -> None:
    for run in RUNS:
        expected = _expected(run)
        page = tmp_path / f"{run.stem}.html"
        result = RUNNER.invoke(app, ["replay", str(run), "--quiet", "--html", str(page)])
        assert result.exit_code == 1, result.output  # every saved run breaks an invariant
        html = page.read_text()
        _load(driver, page)
        _no_fetches(driver, html)
        heads = driver.execute_script(
            "return Array.from(document.querySelectorAll('svg.heads .head[data-lane=broker]'))"
            ".map(function(h){ return h.dataset.lifeline; })"
        )
        assert heads == expected["brokers"], run
        lines = driver.execute_script("return document.querySelectorAll('svg.sequence .lifeline').length")
        assert lines == len(expected["brokers"]) + 2  # and the clients and the channel
        rows = driver.execute_script(ROWS_JS)
        assert [r["seq"] for r in rows] == list(range(len(rows)))
        tops = [r["top"] for r in rows]
        assert tops == sorted(tops), f"{run}: rows out of order"
        assert len(set(tops)) == len(tops), f"{run}: two rows on one line"
        steps = [r["step"] for r in rows]
        assert steps == sorted(steps)
        written = [r["offset"] for r in rows if r["kind"] == "write"]
        unattributed = driver.execute_script(
            "return Array.from(document.querySelectorAll('.event[data-mark=unattributed]'))"
            ".map(function(e){ return +e.dataset.offset; })"
        )
        assert sorted(written + unattributed) == expected["channel"], run
        assert sum(1 for r in rows if r["kind"] == "deliver") == expected["views"]
        assert sum(1 for r in rows if r["kind"] == "answer") == expected["answers"]
        broken = driver.find_element("id", "broken")
        assert int(broken.get_attribute("data-step") or 0) == expected["step"], run
        band = driver.execute_script("return getComputedStyle(document.querySelector('.band.broken')).fill")
        assert band == BROKEN_BAND
        said = broken.find_element("css selector", ".breach").text
        invariant = expected["invariant"]
        assert invariant in said
        assert CATALOGUE[invariant].statement.split(",")[0] in " ".join(said.split())
        driver.find_element("css selector", "a.to-broken").click()
        top, bottom = driver.execute_script(
            "var r = document.getElementById('broken').getBoundingClientRect(); return [r.top, r.bottom];"
        )
        height = driver.execute_script("return window.innerHeight")
        assert 0 <= top < height, f"{run}: the broken step is not in view after its link"
        assert bottom > 0


@pytest.fixture(scope="module")
def audited(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, Any]]:
    """A generated trace with one violation of each kind planted, audited with --html."""
    from statechan.tracegen import PLANT_KINDS, write_generated

    folder = tmp_path_factory.mktemp("audit")
    trace = folder / "planted.jsonl"
    write_generated(trace, 3_000, seed=1, brokers=4, plant=dict.fromkeys(PLANT_KINDS, 1))
    page, report = folder / "audit.html", folder / "report.json"
    result = RUNNER.invoke(
        app, ["audit", str(trace), "--engine", "local", "--report", str(report), "--html", str(page)]
    )
    assert result.exit_code == 1, result.output
    return page, json.loads(report.read_text())


def test_the_audit_page_counts_each_invariant_and_links_each_example_to_its_story(
    driver: WebDriver, audited: tuple[Path, dict[str, Any]]
) -> None:
    page, report = audited
    _load(driver, page)
    _no_fetches(driver, page.read_text())
    counts = driver.execute_script(
        "return Array.from(document.querySelectorAll('table.counts tr[data-invariant]')).map(function(r){"
        " return [r.dataset.invariant, r.querySelector('td.n').textContent]; })"
    )
    assert {i: int(n.replace(",", "")) for i, n in counts} == {i: v["count"] for i, v in report["violations"].items()}
    links = driver.find_elements("css selector", "a.example")
    examples = [(e["key"], e["offset"]) for v in report["violations"].values() for e in v["examples"]]
    assert len(links) == len(examples) > 0
    for link in links:
        key, offset = link.get_attribute("data-key"), int(link.get_attribute("data-offset") or -1)
        invariant = link.find_element("xpath", "ancestor::tr").get_attribute("data-invariant") or ""
        story = driver.find_element("id", (link.get_attribute("href") or "").rsplit("#", 1)[1])
        driver.execute_script("location.hash = ''")
        assert not story.is_displayed()
        link.click()
        assert story.is_displayed()
        assert story.get_attribute("data-key") == key
        focus = story.find_element("css selector", ".step.broken")
        assert int((focus.get_attribute("data-heading") or "@-1")[1:]) >= offset
        assert invariant in story.find_element("css selector", ".breach").text
        heads = story.find_elements("css selector", "svg.heads .head[data-lane=broker]")
        assert heads, "a story has broker lifelines"
        top = driver.execute_script("return arguments[0].getBoundingClientRect().top", focus)
        assert 0 <= top < driver.execute_script("return window.innerHeight")


def test_the_page_of_a_checker_counterexample(driver: WebDriver, tmp_path: Path) -> None:
    page = tmp_path / "check.html"
    result = RUNNER.invoke(
        app, ["check", "--variant", "25379", "--crashes", "1", "--restarts", "1", "--html", str(page)]
    )
    assert result.exit_code == 1, result.output
    _load(driver, page)
    broken = driver.find_element("id", "broken")
    assert "in-flight-acted-on" in broken.find_element("css selector", ".breach").text
    length = re.search(r"counterexample \((\d+) steps\)", result.output)
    assert length is not None
    steps = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg.sequence .step[data-step]')).map(function(g){"
        " return +g.dataset.step; })"
    )
    assert steps == list(range(1, int(length[1]) + 1))
    assert int(broken.get_attribute("data-step") or 0) == steps[-1]
