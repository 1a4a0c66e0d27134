"""``python -m tests.screenshots FOLDER`` (``make screenshots``): a picture of each kind of page,
taken in headless Chromium — a saved run's sequence diagram, an audit report, one of its
examples' stories opened from the report, and ``statechan explore`` (a state where #25379's
bug breaks an invariant, and the bound's state graph) — for the documentation."""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from typer.testing import CliRunner

from statechan.cli import app
from tests.browser import BrowserUnavailable, browser, screenshot

if TYPE_CHECKING:
    from selenium.webdriver.remote.webdriver import WebDriver

RUN = Path("docs/counterexamples/finding-split-handover.json")
"""Finding 4: a split handed over by the leader's clean-up while its owner lives."""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("folder", type=Path)
    folder = parser.parse_args().folder
    runner = CliRunner()
    with tempfile.TemporaryDirectory() as scratch:
        work = Path(scratch)
        run_page, audit_page = work / "run.html", work / "audit.html"
        runner.invoke(app, ["replay", str(RUN), "--quiet", "--html", str(run_page)])
        from statechan.tracegen import PLANT_KINDS, write_generated

        story_page = work / "story.html"
        run = RUN.resolve()
        with contextlib.chdir(work):  # the pages name their traces as given: short, relative names
            write_generated("planted.jsonl", 3_000, seed=1, brokers=4, plant=dict.fromkeys(PLANT_KINDS, 1))
            runner.invoke(app, ["audit", "planted.jsonl", "--engine", "local", "-r", "r.json", "--html", "audit.html"])
            # a simulated run's trace (producers and view records): its audit's stories draw every arrow
            runner.invoke(app, ["replay", str(run), "--quiet", "--trace", "split-handover.jsonl"])
            story = ["audit", "split-handover.jsonl", "--engine", "local", "-r", "s.json", "--html", "story.html"]
            runner.invoke(app, story)
        for page in (run_page, audit_page, story_page):
            if not page.exists():
                print(f"screenshots: {page.name} was not written", file=sys.stderr)
                return 1
        try:
            with browser() as driver:
                driver.get(run_page.as_uri())
                screenshot(driver, folder / "run.png")
                driver.get(audit_page.as_uri())
                screenshot(driver, folder / "audit.png", most=1000)
                driver.get(story_page.as_uri())
                driver.find_element("css selector", "a.example").click()
                opened = driver.find_element("css selector", "section.story.shown")
                driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", opened)
                screenshot(driver, folder / "story.png", most=1400)
                _explorer(driver, folder)
        except BrowserUnavailable as exc:
            print(f"screenshots: no browser: {exc}", file=sys.stderr)
            return 1
    for name in ("run.png", "audit.png", "story.png", "explore.png", "explore-graph.png"):
        print(f"screenshots: {folder / name}")
    return 0


def _explorer(driver: WebDriver, folder: Path) -> None:
    """``statechan explore --variant 25379 --crashes 1 --restarts 1``, served from this process:
    the checker's counterexample opened where it breaks, and the bound's state graph."""
    import threading

    from statechan.bounds import Bounds
    from statechan.cluster.config import StoreKind
    from statechan.invariants.catalogue import simulation_ids
    from statechan.pages.explore import open_explorer, serve

    explorer = open_explorer(
        Bounds(crashes=1, restarts=1), StoreKind.system_topic, "25379", "25379", simulation_ids(), [RUN.parent]
    )
    server = serve(explorer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        driver.get(server.url + "jump/counterexample")
        screenshot(driver, folder / "explore.png", most=2400)
        driver.get(server.url + "graph")
        driver.execute_script("window.scrollTo(0, 0)")
        screenshot(driver, folder / "explore-graph.png", most=1100)
    finally:
        server.shutdown()


if __name__ == "__main__":
    sys.exit(main())
