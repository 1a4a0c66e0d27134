"""The command line, through typer's test runner."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statechan.cli import app

runner = CliRunner()


def test_models_lists_the_builtins() -> None:
    result = runner.invoke(app, ["models"])
    assert result.exit_code == 0
    for name in ("pulsar-4 (default)", "pulsar-3.0", "pip-192-design"):
        assert name in result.output


def test_graph_check_passes_for_every_builtin() -> None:
    for name in ("pulsar-4", "pulsar-3.0", "pip-192-design", "pulsar-pip192-initial"):
        result = runner.invoke(app, ["graph", "--check", "--model", name])
        assert result.exit_code == 0, result.output
        assert "graph checks hold" in result.output


def test_graph_check_fails_on_a_broken_model(tmp_path: object) -> None:
    from pathlib import Path

    from tests.test_graph import BROKEN

    path = Path(str(tmp_path)) / "broken.toml"
    path.write_text(BROKEN)
    result = runner.invoke(app, ["graph", "--check", "--model", str(path)])
    assert result.exit_code == 1
    assert "FAIL reachable-from-initial" in result.output


def test_graph_formats() -> None:
    mermaid = runner.invoke(app, ["graph", "-f", "mermaid", "-s", "metadata-store"])
    assert mermaid.exit_code == 0
    assert mermaid.output.startswith("flowchart LR")
    assert "Init -->|assign| Assigning" in mermaid.output
    assert "Init -->|compaction-cut| Free" not in mermaid.output
    dot = runner.invoke(app, ["graph", "-f", "dot"])
    assert dot.output.startswith('digraph "pulsar-4 SystemTopic"')


def test_graph_of_a_storage_the_model_lacks() -> None:
    result = runner.invoke(app, ["graph", "-m", "pulsar-3.0", "-s", "metadata-store"])
    assert result.exit_code == 2
    assert "has no MetadataStore table" in result.output


def test_resolve_prints_a_machine_readable_verdict() -> None:
    result = runner.invoke(
        app,
        [
            "resolve",
            "--prev",
            '{"state":"Owned","dstBroker":"b1","versionId":1}',
            "--new",
            '{"state":"Owned","dstBroker":"b2","versionId":4}',
            "--storage",
            "metadata-store",
        ],
    )
    assert result.exit_code == 0
    assert json.loads(result.output) == {"accepted": False, "reason": "version-gap-rejected", "check": None}


def test_resolve_reports_a_broker_check() -> None:
    result = runner.invoke(
        app,
        [
            "resolve",
            "--prev",
            '{"state":"Owned","dstBroker":"b1","versionId":1}',
            "--new",
            '{"state":"Releasing","dstBroker":"b1","sourceBroker":"b1","versionId":2}',
        ],
    )
    assert json.loads(result.output) == {"accepted": False, "reason": "broker-mismatch", "check": "dst-not-prev-dst"}


def test_resolve_bad_json_names_the_field() -> None:
    result = runner.invoke(app, ["resolve", "--prev", "null", "--new", '{"state":"Assigned","dstBroker":"b1"}'])
    assert result.exit_code == 2
    assert "--new is not a valid Pulsar value: state:" in result.output


def test_unknown_model_and_bad_option() -> None:
    assert runner.invoke(app, ["graph", "-m", "pulsar-9"]).exit_code == 2
    result = runner.invoke(app, ["graph", "--format", "png"])
    assert result.exit_code == 2
    assert "png" in result.output


def test_demo_prints_graph_and_resolver_answers(tmp_path: Path) -> None:
    result = runner.invoke(app, ["demo", "--pages", str(tmp_path / "pages")])
    assert result.exit_code == 0, result.output
    written = sorted(p.name for p in (tmp_path / "pages").glob("*.html"))
    assert written == ["audit-planted.html", "counterexample-25379.html", "finding-split-handover.html"]
    for name in written:  # each is a page with a diagram, and the demo says where
        assert '<svg xmlns="http://www.w3.org/2000/svg" class="sequence"' in (tmp_path / "pages" / name).read_text()
        assert name in result.output
    assert "pulsar-4: SystemTopic transitions" in result.output
    assert "stale-version" in result.output
    assert "accepted-version-gap" in result.output
    assert "FAIL" not in result.output
    assert "no invariant broken; every state can settle" in result.output  # the checker's proof
    assert "broken: in-flight-acted-on" in result.output  # and the bug it finds
    audited = result.output.split("statechan audit 24186.jsonl")[1]
    # the auditor on #24186's view records: two values at one version
    assert re.search(r"one-value-per-version +│ +1 │ .*version \d+ holds \w+ dst=broker-\d:8080 v\d+ and then", audited)
    assert "accepted-forced" in result.output.split("traces show planted.parquet")[1]  # the resurrection's story
    assert "look closer" not in result.output  # no hint at the demo's temporary files
    assert "$ statechan explore --variant 25379" in result.output  # how to walk it (no server started)


def test_check_docs_detects_stale_files(tmp_path: object) -> None:
    from pathlib import Path

    root = Path(str(tmp_path))
    assert runner.invoke(app, ["graph", "--check-docs", str(root)]).exit_code == 1
    assert runner.invoke(app, ["graph", "--write-docs", str(root)]).exit_code == 0
    assert runner.invoke(app, ["graph", "--check-docs", str(root)]).exit_code == 0
    (root / "state-graph.md").write_text("edited by hand")
    assert runner.invoke(app, ["graph", "--check-docs", str(root)]).exit_code == 1


def test_every_command_prints_its_help() -> None:
    """Rich reads option help as markup: a stray ``[/x]`` breaks ``--help`` at run time."""
    import typer.main

    group = typer.main.get_command(app)
    names = list(getattr(group, "commands", {}))
    assert {"check", "simulate", "audit", "replay"} <= set(names)
    for name in names:
        result = runner.invoke(app, [name, "--help"])
        assert result.exit_code == 0, (name, result.output, result.exception)
        assert "Usage" in result.output
        sub = getattr(getattr(group, "commands", {})[name], "commands", {})
        for child in sub:
            nested = runner.invoke(app, [name, child, "--help"])
            assert nested.exit_code == 0, (name, child, nested.exception)


SAMPLE = "traces/sample.jsonl"


@pytest.mark.parametrize(
    ("argv", "option"),
    [
        (["simulate", "--hours", "1", "--trace", "{missing}/t.jsonl"], "--trace"),
        (["simulate", "--hours", "1", "--save-run", "{missing}/run.json"], "--save-run"),
        (["check", "--save-run", "{missing}/run.json"], "--save-run"),
        (["check", "--graph", "{missing}/g.mmd"], "--graph"),
        (["traces", "generate", "{missing}/t.parquet", "--records", "100"], "destination"),
        (["traces", "convert", SAMPLE, "{missing}/t.parquet"], "destination"),
        (["capture", "zk", "--hosts", "127.0.0.1:9", "--out", "{missing}/t.jsonl"], "--out"),
    ],
)
def test_an_output_in_a_missing_folder_stops_before_any_work(argv: list[str], option: str, tmp_path: Path) -> None:
    missing = tmp_path / "not-made"
    result = runner.invoke(app, [a.format(missing=missing) for a in argv])
    assert result.exit_code == 2, result.output
    assert f"{option} {missing}" in result.output
    assert "no such directory" in result.output
    assert not missing.exists()


def test_check_also_names_a_hazard_the_current_protocol_does_not_hold() -> None:
    """``--also single-server``: a hazard off by default, checked when named (a broker whose session
    expired still serves what the leader's clean-up gave away); an unknown name is a usage error."""
    # #24478's bound, where the current protocol is clean by default (tests/test_known_bugs.py)
    bound = ["check", "--admin", "0", "--session-losses", "1", "--ticks", "2"]
    named = runner.invoke(app, [*bound, "--also", "single-server"])
    assert named.exit_code == 1, named.output
    assert "broken: single-server" in named.output
    wrong = runner.invoke(app, ["check", "--also", "single-owner"])
    assert wrong.exit_code == 2
    assert "--also: unknown single-owner" in wrong.output


def test_replay_also_shows_a_hazard_runs_break() -> None:
    """A saved run of a hazard entry breaks nothing by default and breaks the entry when named."""
    run = "docs/counterexamples/hazards/checker-finding-12.json"
    plain = runner.invoke(app, ["replay", run, "--quiet"])
    assert plain.exit_code == 0, plain.output
    named = runner.invoke(app, ["replay", run, "--quiet", "--also", "departed-not-assigned"])
    assert named.exit_code == 1, named.output
    assert "broken: departed-not-assigned" in named.output
