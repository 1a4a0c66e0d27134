"""statechan explore: the walk against the simulator and the model checker, the app's answers to
bad input, and the real thing — ``statechan explore`` started as a user starts it, driven in
headless Chromium (one server and one browser for every browser test; skipped with the reason
when no browser can be started)."""

from __future__ import annotations

import base64
import json
import os
import select
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import parse_qs, urlsplit

import pytest
from typer.testing import CliRunner

from statechan.bounds import Bounds
from statechan.checker import CheckResult, check
from statechan.cli import app as cli
from statechan.cluster import Wait
from statechan.cluster.config import StoreKind
from statechan.cluster.runfile import load_saved_run, replay
from statechan.cluster.runner import ObservationCheck
from statechan.cluster.timeline import build_timeline
from statechan.invariants.catalogue import check as check_state
from statechan.invariants.catalogue import check_step, simulation_ids
from statechan.pages.explore import Explorer, open_explorer
from statechan.pages.explore.app import create_app
from statechan.pages.explore.graph import steps_to
from statechan.pages.explore.walk import (
    Move,
    Start,
    Walk,
    WalkError,
    begin,
    choices,
    decode,
    encode,
    extend,
    follow,
)
from tests.browser import BrowserUnavailable, browser

if TYPE_CHECKING:
    from flask.testing import FlaskClient
    from selenium.webdriver.remote.webdriver import WebDriver
    from selenium.webdriver.remote.webelement import WebElement

RUNS = sorted(Path("docs/counterexamples").glob("*.json"))
IDS = tuple(simulation_ids())
BUG = Bounds(crashes=1, restarts=1)
"""#25379 put back (a restarted broker ignores an Assigning addressed to it): the checker finds it
within this bound."""
BUG_OPTIONS = ["--variant", "25379", "--crashes", "1", "--restarts", "1"]


def _start(path: Path) -> tuple[Start, Any]:
    saved = load_saved_run(path)
    config = saved.config.model_copy(update={"trace_views": True})
    return Start("run-0", path.name, config, None, IDS), saved


# -- the walk, against the simulator and the checker -----------------------------------------------------
@pytest.mark.parametrize("run", RUNS, ids=[r.stem for r in RUNS])
def test_a_saved_run_walked_is_the_run_the_simulator_replays(run: Path) -> None:
    """The walk of a saved run writes the trace and gives the answers the simulator's own replay
    gives, and breaks the invariant at the step ``statechan replay``'s checks break it."""
    start, saved = _start(run)
    tokens, problem = follow(start, saved.actions, saved.picks)
    assert problem is None
    walk = extend(Walk(start, [begin(start)]), tokens)
    assert [s.move.action for s in walk.stops[1:] if s.move] == saved.actions
    cluster = replay(start.config, saved.actions, saved.picks)
    assert walk.trace() == cluster.trace
    assert [a for s in walk.stops for a in s.answers] == cluster.answers
    checks = ObservationCheck(lambda obs: check_state(obs, IDS), lambda a, b: check_step(a, b, IDS))
    steps = build_timeline(saved.config, saved.actions, checks, picks=saved.picks)
    theirs = next(((s.number, s.violations) for s in steps if s.violations), None)
    mine = next(((s.number, [str(v) for v in s.broken]) for s in walk.stops if s.broken), None)
    assert mine == theirs


@pytest.fixture(scope="module")
def bug_graph() -> CheckResult:
    """The checker's search of the bug's bound with its graph kept, as the explorer's page runs it."""
    return check(BUG, StoreKind.system_topic, "25379", keep_graph=True, invariants=IDS, vacuity=False)


def test_the_moves_inside_the_bound_are_the_checkers_successors() -> None:
    """At a sample of the states the checker explores (the current protocol, no reduction), the
    moves the explorer lists inside the bound are the successors the checker took: the same
    actions with the same placement picks; the others say which budget they overstep."""
    result = check(Bounds(), StoreKind.system_topic, "current", keep_graph=True, por=False, vacuity=False)
    explorer = open_explorer(Bounds(), StoreKind.system_topic, "current", "current", IDS)
    compared = 0
    for node_id in range(0, len(result.nodes), 11):
        node = result.nodes[node_id]
        if not node.expanded:
            continue
        steps = steps_to(result.nodes, node_id)
        tokens, problem = follow(explorer.start, [a for a, _ in steps], [p for _, ps in steps for p in ps])
        assert problem is None
        stop = explorer.walk(explorer.start, tokens).stops[-1]
        listed = choices(explorer.start, stop)
        inside = sorted((c.move.action.describe(), c.move.picks) for c in listed if c.outside is None)
        assert inside == sorted((a.describe(), p) for _, a, p in node.successors), node_id
        assert all("bound" in (c.outside or "bound") for c in listed)
        compared += 1
    assert compared > 50


def test_a_choice_says_which_invariant_its_step_breaks(bug_graph: CheckResult) -> None:
    explorer = open_explorer(BUG, StoreKind.system_topic, "25379", "25379", IDS)
    tokens, problem = follow(explorer.start, bug_graph.path[:-1], bug_graph.picks)
    assert problem is None
    last = bug_graph.path[-1]
    listed = choices(explorer.start, explorer.walk(explorer.start, tokens).stops[-1])
    breaking = [c for c in listed if c.breaks]
    assert last in [c.move.action for c in breaking]
    assert all("in-flight-acted-on" in c.breaks for c in breaking if c.move.action == last)
    assert any(not c.breaks for c in listed)


def _token_of(action: dict[str, object], picks: str = "") -> str:
    return "x" + base64.urlsafe_b64encode(json.dumps(action).encode()).decode() + picks


@pytest.mark.parametrize(
    ("token", "said"),
    [
        ("99", "has 10 enabled action(s), no number 99"),
        ("seven", "'seven' is not a move"),
        ("1p", "'1p' is not a move"),
        ("x!!", "'x!!' is not a move"),
        ("xAAAA", "not an action"),
        (_token_of({"kind": "nope"}), "unknown action kind 'nope'"),
        (_token_of({"kind": "crash"}), "bad crash action"),
        (_token_of({"kind": "restart", "broker": "broker-1:8080"}), "restart(broker-1:8080)) cannot be taken"),
        (_token_of({"kind": "crash", "broker": "broker-9:8080"}), "no broker 'broker-9:8080'"),
    ],
)
def test_a_path_that_cannot_be_walked_says_which_move_and_why(token: str, said: str) -> None:
    explorer = open_explorer(BUG, StoreKind.system_topic, "25379", "25379", IDS)
    with pytest.raises(WalkError, match="move 1 of the path") as raised:
        explorer.walk(explorer.start, [token])
    assert said in str(raised.value)


def test_a_move_the_state_does_not_list_travels_whole() -> None:
    """A saved run's ``wait`` is no enabled action: its token carries the action itself."""
    explorer = open_explorer(BUG, StoreKind.system_topic, "25379", "25379", IDS)
    state = explorer.walk(explorer.start, []).stops[0].state
    token = encode(state, explorer.start, Move(Wait(5_000)))
    assert token.startswith("x")
    assert decode(token, state, explorer.start, 1) == Move(Wait(5_000))
    walked = explorer.walk(explorer.start, [token]).stops[-1]
    assert walked.state.now == state.now + 5_000


# -- the app, on bad input -------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def bad_runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of runs: a good one, one saved by another version, a corrupt file, one whose third
    step names a broker the cluster does not have; and a file beside it that nothing may serve."""
    root = tmp_path_factory.mktemp("explore")
    folder = root / "runs"
    folder.mkdir()
    good = json.loads(Path("docs/counterexamples/25379.json").read_text())
    (folder / "a-good.json").write_text(json.dumps(good))
    (folder / "b-newer.json").write_text(json.dumps({**good, "format": "statechan-run/2"}))
    (folder / "c-corrupt.json").write_text('{"format": "statechan-run/1", "actions": [')
    impossible = json.loads(json.dumps(good))
    impossible["actions"].insert(2, {"kind": "crash", "broker": "broker-9:8080"})
    (folder / "d-impossible.json").write_text(json.dumps(impossible))
    (root / "secret.txt").write_text("not for the explorer's pages")
    return folder


@pytest.fixture(scope="module")
def explorer(bad_runs: Path) -> Explorer:
    return open_explorer(BUG, StoreKind.system_topic, "25379", "25379", IDS, [bad_runs], graph_limit=100)


@pytest.fixture
def client(explorer: Explorer) -> FlaskClient:
    return create_app(explorer, ["localhost"]).test_client()


def _said(html: bytes) -> str:
    text = html.decode()
    start = text.index('id="message">') + len('id="message">')
    return " ".join(text[start : text.index("</p>", start)].split()).replace("&#39;", "'")


def test_runs_that_cannot_be_opened_say_why(explorer: Explorer, client: FlaskClient) -> None:
    errors = {saved.name: saved.error for saved in explorer.runs}
    assert errors["a-good.json"] is None
    assert "a run saved in format 'statechan-run/2'" in (errors["b-newer.json"] or "")
    assert "not JSON" in (errors["c-corrupt.json"] or "")
    assert errors["d-impossible.json"] is None
    menu = client.get("/walk").data.decode()
    assert 'class="run unopenable" data-run="1"' in menu
    assert 'class="run unopenable" data-run="2"' in menu
    for number, said in ((1, "statechan-run/2"), (2, "not JSON")):
        answer = client.get(f"/jump/run/{number}")
        assert answer.status_code == 400
        assert said in _said(answer.data)
        assert str(explorer.runs[number].path) in _said(answer.data)


def test_a_run_that_stops_early_says_where_and_why(client: FlaskClient) -> None:
    jumped = client.get("/jump/run/3")
    assert jumped.status_code == 302
    page = client.get(jumped.headers["Location"])
    assert page.status_code == 200
    text = page.data.decode()
    assert 'data-at="2"' in text
    assert "The run goes no further here: step 3 (crash(broker-9:8080)) cannot be taken" in text


def test_a_good_run_opens_where_it_breaks(explorer: Explorer, client: FlaskClient) -> None:
    jumped = client.get("/jump/run/0")
    target = urlsplit(jumped.headers["Location"])
    config, actions, _, picks = load_saved_run(explorer.runs[0].path)
    checks = ObservationCheck(lambda obs: check_state(obs, IDS), lambda a, b: check_step(a, b, IDS))
    broken = next(s for s in build_timeline(config, actions, checks, picks=picks) if s.violations)
    tokens = parse_qs(target.query)["path"][0].split(".")
    assert parse_qs(target.query).get("at", [str(len(tokens))]) == [str(broken.number)]
    text = client.get(jumped.headers["Location"]).data.decode()
    assert f'data-at="{broken.number}"' in text
    assert f'class="breach" data-invariant="{broken.violations[0].split(" ")[0]}"' in text


def test_every_saved_run_opens_where_an_invariant_breaks() -> None:
    """Every run in docs/counterexamples opens (the system topic, the metadata store, both with the
    syncer) at a state whose page flags a broken invariant, and every state of it can be shown."""
    explorer = open_explorer(BUG, StoreKind.system_topic, "25379", "25379", IDS, [Path("docs/counterexamples")])
    client = create_app(explorer, ["localhost"]).test_client()
    assert [saved.path for saved in explorer.runs] == RUNS
    for saved in explorer.runs:
        jumped = client.get(f"/jump/run/{saved.number}")
        assert jumped.status_code == 302, saved.name
        page = client.get(jumped.headers["Location"])
        assert page.status_code == 200, saved.name
        assert b'data-broken="true"' in page.data, saved.name
        assert saved.start is not None
        if saved.start.run:
            first = client.get(f"/walk?start={saved.start.key}&path={'.'.join(saved.start.run)}&at=1")
            assert first.status_code == 200, saved.name


@pytest.mark.parametrize(
    ("url", "status", "said"),
    [
        ("/walk?path=99", 400, "move 1 of the path: the state after move 0 has 10 enabled action(s), no number 99"),
        ("/walk?path=0&at=5", 400, "at=5: the path has states 0 to 1"),
        ("/walk?at=-1", 400, "expected the number of a state"),
        ("/walk?start=run-9", 404, "There is no start 'run-9' here"),
        ("/walk?start=run-1", 404, "There is no start 'run-1' here"),
        ("/walk?start=../secret.txt", 404, "There is no start"),
        ("/jump/run/7", 404, "There is no saved run 7 here"),
        ("/graph", 413, "more than 100 states"),
    ],
)
def test_bad_requests_get_a_page_that_says_what_is_wrong(client: FlaskClient, url: str, status: int, said: str) -> None:
    answer = client.get(url)
    assert answer.status_code == status
    assert said in _said(answer.data)


def test_a_huge_state_graph_is_refused_with_the_option_to_raise_it(client: FlaskClient) -> None:
    said = _said(client.get("/graph").data)
    assert "--graph-limit N" in said
    assert "(at most 50,000" in said


@pytest.mark.parametrize(
    "url",
    [
        "/static/../secret.txt",
        "/static/%2e%2e/%2e%2e/%2e%2e/secret.txt",
        "/static/..%2f..%2f..%2fsecret.txt",
        "/static/../app.py",
        "/static//etc/passwd",
        "/static/%2fetc%2fpasswd",
        "/runs/c-corrupt.json",
        "/secret.txt",
        "/jump/run/..%2f..%2fsecret.txt",
        "/graph/state/..%2fsecret.txt",
    ],
)
def test_nothing_outside_what_it_was_given_is_served(client: FlaskClient, url: str) -> None:
    answer = client.get(url, follow_redirects=True)
    assert answer.status_code == 404
    assert b"not for the explorer" not in answer.data
    assert b"import" not in answer.data


def test_its_own_script_and_style_are_served_with_a_policy(client: FlaskClient) -> None:
    for name, kind in (("explore.js", "javascript"), ("explore.css", "text/css")):
        answer = client.get(f"/static/{name}")
        assert answer.status_code == 200
        assert kind in answer.headers["Content-Type"]
    policy = client.get("/walk").headers["Content-Security-Policy"]
    assert "default-src 'none'" in policy
    assert "script-src 'self'" in policy


def test_requests_to_another_host_name_or_not_reading_are_refused(client: FlaskClient) -> None:
    answer = client.get("/walk", headers={"Host": "attacker.example:8080"})
    assert answer.status_code == 400
    assert b"answers requests to localhost only" in answer.data
    assert client.post("/walk").status_code == 405


# -- the command line ---------------------------------------------------------------------------------------
def test_a_port_in_use_gets_a_clear_message() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        result = CliRunner().invoke(cli, ["explore", "--port", str(port), "--runs", os.devnull])
    assert result.exit_code == 2
    said = " ".join(result.output.split())
    assert f"port {port} on 127.0.0.1 is in use by another program" in said
    assert "leave --port out for a free one" in said


def test_without_flask_it_names_the_extra_to_install() -> None:
    """``statechan explore`` where Flask is not installed (hidden here) exits 2 naming the extra."""
    script = (
        "import sys; sys.modules['flask'] = None; sys.argv = ['statechan', 'explore'];"
        "from statechan.__main__ import main; main()"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 2, done.stderr
    assert done.stderr.strip() == (
        "statechan explore: needs the 'explore' extra (flask is not installed); "
        "install it with: pip install 'statechan[explore]'"
    )


@pytest.mark.parametrize(
    ("options", "said"),
    [
        (["--runs", "no/such/folder"], "--runs: no such file or folder: no/such/folder"),
        (["--restarts", "2"], "--restarts 2: only a crashed or shut-down broker restarts"),
        (["--variant", "99999"], "--variant: unknown '99999'"),
        (["--host", "no.such.host.invalid"], "--host no.such.host.invalid: not an address of this machine"),
        (["--graph-limit", "60000"], "less than or equal to │ │ 50000"),
    ],
)
def test_bad_options_get_a_clear_message(options: list[str], said: str) -> None:
    result = CliRunner().invoke(cli, ["explore", *options])
    assert result.exit_code == 2
    assert said in " ".join(result.output.split())


# -- in the browser ----------------------------------------------------------------------------------------
def _serving(*options: str) -> Iterator[tuple[str, list[str]]]:
    """``statechan explore OPTIONS`` started as a user starts it: its URL and what it printed
    before it, until the caller is done with it."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "-m", "statechan", "explore", *options]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    assert process.stdout is not None
    said: list[str] = []
    url = None
    deadline = time.monotonic() + 120
    while url is None and time.monotonic() < deadline and process.poll() is None:
        ready, _, _ = select.select([process.stdout], [], [], 1.0)
        if ready:
            line = process.stdout.readline()
            said.append(line)
            if "statechan explore: open " in line:
                url = line.split("open ", 1)[1].split()[0]
    try:
        assert url is not None, "".join(said)
        assert url.startswith("http://127.0.0.1:")
        yield url, said
    finally:
        process.terminate()
        process.wait(timeout=30)


@pytest.fixture(scope="module")
def server(bad_runs: Path) -> Iterator[str]:
    """``statechan explore`` on #25379's bound: its URL."""
    for url, said in _serving(*BUG_OPTIONS, "--runs", "docs/counterexamples", "--runs", str(bad_runs)):
        assert any("cannot open:" in line and "b-newer.json" in line for line in said)
        yield url


@pytest.fixture(scope="module")
def driver() -> Iterator[WebDriver]:
    """One headless Chromium for every explorer test."""
    if shutil.which("chromium") is None and not Path("/usr/bin/chromium").exists():
        pytest.skip("no browser: chromium is not installed (make test installs it)")
    try:
        with browser() as started:
            yield started
    except BrowserUnavailable as exc:
        pytest.skip(f"no browser: {exc}")


def _at(driver: WebDriver) -> int:
    return int(driver.find_element("css selector", "body").get_attribute("data-at") or -1)


def _click(driver: WebDriver, element: WebElement) -> None:
    """Click a link and wait for the page it opens."""
    from selenium.common.exceptions import StaleElementReferenceException

    before = driver.find_element("css selector", "body")
    element.click()
    for _ in range(600):
        try:
            before.get_attribute("data-page")
        except StaleElementReferenceException:  # the old page is gone
            break
        time.sleep(0.05)
    assert driver.execute_script("return document.readyState") == "complete"


def _choice(driver: WebDriver, action: str, picks: list[int]) -> WebElement:
    """The move of ``action`` whose placement takes the next of ``picks`` (consumed)."""
    found = driver.find_elements("css selector", f'a.choice[data-action="{action}"]')
    assert found, f"{action} is not offered"
    if len(found) > 1:
        wanted = str(picks[0]) if picks else "0"
        found = [c for c in found if (c.get_attribute("data-picks") or "0").split(",")[0] == wanted]
    made = [p for p in (found[0].get_attribute("data-picks") or "").split(",") if p]
    del picks[: len(made)]
    return found[0]


def test_a_walk_to_the_bug_back_forward_and_jumps(driver: WebDriver, server: str, bug_graph: CheckResult) -> None:
    """Walk #25379's counterexample (found by the checker, independently of the explorer) by
    clicking its moves; the last state is flagged with the invariant it breaks; back, forward
    (buttons, the browser's own, the keyboard) and jump-to land where they should."""
    path, picks = bug_graph.path, list(bug_graph.picks)
    assert bug_graph.violation is not None
    assert bug_graph.violation.startswith("in-flight-acted-on")
    driver.get(server)
    assert _at(driver) == 0
    assert driver.find_element("id", "verdict").get_attribute("class") == "banner clean"
    heads = [h.text for h in driver.find_elements("css selector", "#ownership th")]
    assert heads[2:] == ["broker-1's view", "broker-2's view"]
    for number, action in enumerate(path, start=1):
        choice = _choice(driver, action.describe(), picks)
        if number == len(path):
            assert "leads to a broken invariant: in-flight-acted-on" in choice.text
        _click(driver, choice)
        assert _at(driver) == number
        here = driver.find_element("css selector", "ol.crumbs li.here")
        assert here.get_attribute("data-step") == str(number)
    body = driver.find_element("css selector", "body")
    assert body.get_attribute("data-broken") == "true"
    banner = driver.find_element("id", "verdict")
    assert "broken" in (banner.get_attribute("class") or "")
    assert banner.find_element("css selector", ".breach").get_attribute("data-invariant") == "in-flight-acted-on"
    row = driver.find_element("css selector", 'tr[data-invariant="in-flight-acted-on"]')
    assert row.get_attribute("data-verdict") == "broken"
    held = driver.find_elements("css selector", 'table.verdicts tr[data-verdict="held"]')
    assert len(held) == len(IDS) - 1
    steps = driver.execute_script(
        "return Array.from(document.querySelectorAll('svg.sequence .step[data-step]')).map(function(g){"
        " return [+g.dataset.step, g.classList.contains('broken')]; })"
    )
    assert steps == [[n, n == len(path)] for n in range(1, len(path) + 1)]
    # back and forward: the page's buttons, the browser's, the keyboard
    _click(driver, driver.find_element("id", "back"))
    assert _at(driver) == len(path) - 1
    assert driver.find_element("css selector", "body").get_attribute("data-broken") == "false"
    assert driver.find_element("css selector", "ol.crumbs li.ahead").get_attribute("data-step") == str(len(path))
    _click(driver, driver.find_element("id", "forward"))
    assert _at(driver) == len(path)
    driver.back()
    assert _at(driver) == len(path) - 1
    driver.forward()
    assert _at(driver) == len(path)
    driver.find_element("css selector", "body").send_keys("\ue012")  # the left arrow key
    for _ in range(100):
        if _at(driver) == len(path) - 1:
            break
        time.sleep(0.05)
    assert _at(driver) == len(path) - 1
    # a different move from the middle of the path: the path is cut there
    _click(driver, driver.find_element("css selector", 'a.choice[data-action="tick()"]'))
    assert _at(driver) == len(path)
    assert driver.find_element("css selector", "body").get_attribute("data-last") == str(len(path))
    assert driver.find_element("css selector", "ol.crumbs li.here").text.endswith("tick()")
    # jump to the checker's counterexample
    driver.find_element("css selector", "#jump summary").click()
    _click(driver, driver.find_element("id", "jump-counterexample"))
    assert driver.find_element("css selector", "body").get_attribute("data-start") == "counterexample"
    assert _at(driver) == len(path)
    assert driver.find_element("css selector", "#verdict .breach").get_attribute("data-invariant") == (
        "in-flight-acted-on"
    )
    # jump to a saved run: it opens where statechan replay says it breaks
    run = Path("docs/counterexamples/25379.json")
    config, actions, _, run_picks = load_saved_run(run)
    checks = ObservationCheck(lambda obs: check_state(obs, IDS), lambda a, b: check_step(a, b, IDS))
    broken = next(s for s in build_timeline(config, actions, checks, picks=run_picks) if s.violations)
    driver.find_element("css selector", "#jump summary").click()
    unopenable = driver.find_element("css selector", "span.run.unopenable")
    assert "b-newer.json" in unopenable.text
    assert "statechan-run/2" in (unopenable.get_attribute("title") or "")
    link = next(a for a in driver.find_elements("css selector", "a.run") if a.text == run.name)
    _click(driver, link)
    assert _at(driver) == broken.number
    invariant = broken.violations[0].split(" ")[0].rstrip(":")
    assert driver.find_element("css selector", "#verdict .breach").get_attribute("data-invariant") == invariant
    if broken.number < len(actions):
        _click(driver, driver.find_element("id", "forward"))
        assert _at(driver) == broken.number + 1


def test_the_state_graph_highlights_the_counterexample(driver: WebDriver, server: str, bug_graph: CheckResult) -> None:
    driver.get(server + "graph")
    states = driver.find_elements("css selector", "svg.state-graph a.state")
    assert len(states) == bug_graph.states
    red = driver.find_elements("css selector", "svg.state-graph .edges.path line")
    assert len(red) == len(bug_graph.path)
    on_path = driver.find_elements("css selector", "svg.state-graph a.state.on-path")
    assert len(on_path) == len(bug_graph.path) + 1
    assert "in-flight-acted-on" in driver.find_element("id", "search").text
    broken = driver.find_element("css selector", "svg.state-graph a.state.broken")
    _click(driver, broken)
    assert _at(driver) == len(bug_graph.path)
    assert driver.find_element("css selector", "#verdict .breach").get_attribute("data-invariant") == (
        "in-flight-acted-on"
    )
    assert [c.text for c in driver.find_elements("css selector", "ol.crumbs li")][1:] == [
        a.describe().replace(":8080", "") for a in bug_graph.path
    ]


DEFAULT_BOUND_BUG = "22743"
"""#22743 put back (a Deleted split parent lingers until the monitor's tombstone delay): the checker
finds it at the default bound, so ``statechan explore --variant 22743`` reaches it with no bound
option."""


def test_at_the_default_bound_a_walk_reaches_a_historical_bug(driver: WebDriver) -> None:
    """``statechan explore --variant 22743`` with no bound option: clicking the checker's
    counterexample move by move reaches a state flagged with the invariant it breaks; back clears
    the flag, forward brings it back, and jump-to the counterexample lands on that state."""
    result = check(Bounds(), StoreKind.system_topic, DEFAULT_BOUND_BUG, invariants=IDS, vacuity=False)
    assert result.violation is not None
    invariant = result.violation.split(":")[0].split(" ")[0]
    path, picks = result.path, list(result.picks)
    for url, _ in _serving("--variant", DEFAULT_BOUND_BUG):
        driver.get(url)
        assert _at(driver) == 0
        bound = driver.find_element("css selector", ".top .bound")
        assert bound.get_attribute("title") == f"statechan check --variant {DEFAULT_BOUND_BUG}"  # no bound option
        assert bound.text == f"bound: {DEFAULT_BOUND_BUG} on system-topic: {Bounds().describe()}"
        for number, action in enumerate(path, start=1):
            assert driver.find_element("css selector", "body").get_attribute("data-broken") == "false"
            _click(driver, _choice(driver, action.describe(), picks))
            assert _at(driver) == number
        assert driver.find_element("css selector", "body").get_attribute("data-broken") == "true"
        assert driver.find_element("css selector", "#verdict .breach").get_attribute("data-invariant") == invariant
        row = driver.find_element("css selector", f'tr[data-invariant="{invariant}"]')
        assert row.get_attribute("data-verdict") == "broken"
        _click(driver, driver.find_element("id", "back"))
        assert (_at(driver), driver.find_element("css selector", "body").get_attribute("data-broken")) == (
            len(path) - 1,
            "false",
        )
        _click(driver, driver.find_element("id", "forward"))
        assert (_at(driver), driver.find_element("css selector", "body").get_attribute("data-broken")) == (
            len(path),
            "true",
        )
        driver.find_element("css selector", "#jump summary").click()
        _click(driver, driver.find_element("id", "jump-counterexample"))
        assert driver.find_element("css selector", "body").get_attribute("data-start") == "counterexample"
        assert _at(driver) == len(path)
        assert driver.find_element("css selector", "#verdict .breach").get_attribute("data-invariant") == invariant
