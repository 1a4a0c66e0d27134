"""Long seeded simulations (small size here; the full size is a documented command) and saved runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statechan import ServiceUnitState
from statechan.cli import app
from statechan.cluster import Cluster, Lookup, SimConfig, StoreKind
from statechan.cluster.runfile import RunFileError, load_run, replay, save_run
from statechan.cluster.runner import Simulation, Workload
from statechan.invariants.catalogue import check

STABLE = {ServiceUnitState.Owned, ServiceUnitState.Free}
FAULTY = Workload(
    crashes_per_hour=2,
    session_losses_per_hour=2,
    shutdowns_per_hour=1,
    leader_changes_per_hour=1,
    transfers_per_hour=120,
    unloads_per_hour=30,
    splits_per_hour=4,
    lookups_per_hour=1200,
)


@pytest.mark.parametrize("store", list(StoreKind))
@pytest.mark.parametrize("seed", [1, 2])
def test_a_faulty_day_ends_settled_with_no_invariant_broken(store: StoreKind, seed: int) -> None:
    config = SimConfig(brokers=4, namespaces=2, bundles_per_namespace=10, seed=seed, store=store)
    simulation = Simulation(config, FAULTY)
    summary = simulation.run(6 * 3_600_000, check=lambda c: [str(v) for v in check(c.observe())])
    assert summary.violations == []
    assert summary.counters["crash"] + summary.counters["lose-session"] + summary.counters["shutdown"] > 0
    cluster = simulation.cluster
    assert cluster.quiescent()
    views = cluster.views()
    first = next(iter(views.values()))
    assert all(view == first for view in views.values())
    assert all(value.state in STABLE for value in first.values())
    for key, value in first.items():
        if value.state is ServiceUnitState.Owned:
            assert cluster.registered(value.dst_broker or ""), key


def test_saved_runs_replay_to_the_same_trace(tmp_path: Path) -> None:
    config = SimConfig(brokers=3, bundles_per_namespace=4, seed=5)
    simulation = Simulation(config, FAULTY)
    simulation.run(3_600_000)
    path = tmp_path / "run.json"
    save_run(path, config, simulation.cluster.history, note="test")
    loaded_config, actions, note = load_run(path)
    assert (loaded_config, note) == (config, "test")
    assert replay(loaded_config, actions).trace == simulation.cluster.trace


@pytest.mark.parametrize(
    ("content", "problem"),
    [
        ("not json", "not JSON"),
        ('{"format": "other"}', "not a statechan run"),
        ('{"format": "statechan-run/1", "config": {"brokers": 0}}', "config: ('brokers',)"),
        ('{"format": "statechan-run/1", "config": {}, "actions": [{"kind": "explode"}]}', "unknown action kind"),
        (
            '{"format": "statechan-run/1", "config": {}, "actions": [{"kind": "lookup", "broker": "b"}]}',
            "actions[0]: bad lookup action",
        ),
    ],
)
def test_bad_run_files_say_what_and_where(tmp_path: Path, content: str, problem: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(content)
    with pytest.raises(RunFileError, match=r"bad\.json") as info:
        load_run(path)
    assert problem in str(info.value)


def test_a_step_that_cannot_run_is_reported() -> None:
    config = SimConfig(brokers=2)
    with pytest.raises(ValueError, match=r"step 1 \(lookup\(broker-9:8080"):
        replay(config, [Lookup("broker-9:8080", "tenant/ns-0/0x00000000_0x7fffffff")])


def test_simulate_and_replay_commands(tmp_path: Path) -> None:
    runner = CliRunner()
    run, trace = tmp_path / "run.json", tmp_path / "trace.jsonl"
    result = runner.invoke(
        app,
        [
            "simulate",
            "--brokers",
            "3",
            "--namespaces",
            "1",
            "--bundles",
            "4",
            "--hours",
            "1",
            "--seed",
            "3",
            "--save-run",
            str(run),
            "--trace",
            str(trace),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "no violation" in result.output
    records = [json.loads(line) for line in trace.read_text().splitlines()]
    assert {r["kind"] for r in records} >= {"channel", "registry", "leader", "view"}
    assert [r["offset"] for r in records] == list(range(len(records)))
    replayed = runner.invoke(app, ["replay", str(run), "--quiet"])
    assert replayed.exit_code == 0, replayed.output
    assert "no invariant broken" in replayed.output
    bad = runner.invoke(app, ["simulate", "--variant", "99999"])
    assert bad.exit_code == 2
    assert "unknown '99999'" in bad.output


def test_the_model_checker_interface_lists_every_enabled_action() -> None:
    cluster = Cluster(SimConfig(brokers=2, bundles_per_namespace=1))
    kinds = {a.kind for a in cluster.enabled_actions()}
    assert {"lookup", "crash", "shutdown", "lose-session", "resign", "tick"} <= kinds
    for action in cluster.enabled_actions():
        probe = Cluster(SimConfig(brokers=2, bundles_per_namespace=1))
        probe.step(action)  # every enabled action can run
