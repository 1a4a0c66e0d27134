"""The compact search (64-bit fingerprints in a flat table, parent links as positions, levels on
disk) against the in-memory search: the same states, transitions, coverage, verdicts and shortest
counterexamples, with its levels in memory and with every state spilled to disk."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

import statechan.checker as checker_module
from statechan.checker import Bounds, CheckResult, Engine, FingerprintCollision, check, frontier
from statechan.checker.compact import Level, projected_total
from statechan.checker.table import FingerprintTable, collision_probability, key64
from statechan.cli import app
from statechan.cluster import StoreKind

SMALL = Bounds(brokers=2, bundles=1, lookups=1, admin=1, ticks=2)
runner = CliRunner()


def _found(result: CheckResult) -> tuple[object, ...]:
    """What a search found, as the two engines must both report it."""
    return (
        result.states,
        result.transitions,
        result.depth,
        result.violation,
        [a.describe() for a in result.path],
        result.picks,
        result.liveness,
        result.lasso,
        result.refused,
        {pair: dict(counts) for pair, counts in result.coverage.items()},
        result.complete,
        result.stopped,
        result.reduced,
        [str(gap) for gap in result.never_reached],
    )


CASES = [
    # (bounds, store, variant, check's options, every queued state spilled to disk)
    (SMALL, StoreKind.system_topic, "current", {}, True),
    (SMALL, StoreKind.system_topic, "current", {"por": False, "symmetry": False}, False),
    (Bounds(admin=0, ticks=1), StoreKind.metadata_store, "current", {}, True),
    (Bounds(admin=0, ticks=0), StoreKind.both, "current", {}, False),
    (SMALL.model_copy(update={"crashes": 1, "restarts": 1}), StoreKind.system_topic, "25379", {}, True),
    (SMALL.model_copy(update={"session_losses": 1, "admin": 0}), StoreKind.system_topic, "24478", {}, False),
    (Bounds(lookups=2, admin=0, ticks=1), StoreKind.metadata_store, "24186", {}, True),
    (Bounds(compactions=1), StoreKind.system_topic, "20110", {}, False),
    (Bounds(admin_kinds=("unload",), ticks=4, timely_delivery_ms=None), StoreKind.system_topic, "current", {}, True),
    (Bounds(compactions=1, depth=6), StoreKind.system_topic, "current", {}, True),
    (SMALL, StoreKind.system_topic, "current", {"max_states": 300}, True),
]
IDS = [
    "topic",
    "topic-unreduced",
    "store",
    "syncer",
    "25379",
    "24478",
    "24186",
    "20110",
    "untimely",
    "depth-bound",
    "state-bound",
]


@pytest.mark.parametrize(("bounds", "store", "variant", "options", "spilled"), CASES, ids=IDS)
def test_the_compact_search_finds_what_the_in_memory_search_finds(
    bounds: Bounds,
    store: StoreKind,
    variant: str,
    options: dict[str, object],
    spilled: bool,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The same states, transitions, coverage, verdict, shortest counterexample (picks included),
    bound reached and reduction, whether the levels stay in memory or go to disk."""
    if spilled:
        monkeypatch.setattr(frontier, "KEEP", 0)
    memory = check(bounds, store, variant, engine=Engine.memory, **options)  # type: ignore[arg-type]
    compact = check(bounds, store, variant, engine=Engine.compact, **options)  # type: ignore[arg-type]
    assert compact.engine is Engine.compact
    assert _found(compact) == _found(memory)
    assert compact.states == sum(compact.levels)
    assert (compact.disk_mb > 0) == (spilled and len(compact.levels) > 1)


def test_the_compact_search_is_the_default_and_the_graph_keeps_nodes() -> None:
    assert check(Bounds(admin=0, ticks=1)).engine is Engine.compact
    assert check(Bounds(admin=0, ticks=1), keep_graph=True).engine is Engine.memory
    with pytest.raises(ValueError, match="keeps no graph"):
        check(Bounds(admin=0, ticks=1), keep_graph=True, engine=Engine.compact)


def test_a_liveness_failure_is_the_same_lasso_in_both_searches(monkeypatch: pytest.MonkeyPatch) -> None:
    """A protocol whose owned bundles never count as settled, with no bound cutting timers off:
    every state after an assignment is stuck; both searches name the same first stuck state and
    walk the same first successors from it."""
    settled = checker_module.settled
    order = checker_module._Expander._order

    def never_with_an_owner(obs: object, views_agree: bool = True) -> bool:
        views = obs.views  # type: ignore[attr-defined]
        owned = any(v.state.name == "Owned" for view in views.values() for v in view.values())
        return settled(obs, views_agree) and not owned  # type: ignore[arg-type]

    def uncut(self: object, *args: object, **kwargs: object) -> object:
        taken, ready, _ = order(self, *args, **kwargs)  # type: ignore[arg-type]
        return taken, ready, False

    monkeypatch.setattr(checker_module, "settled", never_with_an_owner)
    monkeypatch.setattr(checker_module._Expander, "_order", uncut)
    monkeypatch.setattr(frontier, "KEEP", 0)
    bounds = Bounds(admin=0, ticks=1)
    memory = check(bounds, engine=Engine.memory, vacuity=False)
    compact = check(bounds, engine=Engine.compact, vacuity=False)
    assert compact.liveness is not None
    assert "cannot reach a settled state" in compact.liveness
    assert _found(compact) == _found(memory)


def test_verified_fingerprints_and_their_64_bit_fold_are_checked(monkeypatch: pytest.MonkeyPatch) -> None:
    bounds = Bounds(admin=0, ticks=2)
    plain = check(bounds)
    assert check(bounds, verify_fingerprints=True).states == plain.states
    # every key folded to one 64-bit value: the compact search's own fold is caught too
    monkeypatch.setattr("statechan.checker.compact.key64", lambda key: 7)
    with pytest.raises(FingerprintCollision, match="fold to the 64-bit fingerprint"):
        check(bounds, verify_fingerprints=True)


def test_the_table_keeps_every_key_with_its_index_as_it_grows() -> None:
    table = FingerprintTable(capacity=16)
    keys = [key64(str(i).encode()) for i in range(5_000)]
    for i, k in enumerate(keys):
        assert table.add(k, i)
    assert not table.add(keys[17], 99)  # already there: its index stays
    assert len(table) == 5_000
    assert all(table.get(k) == i for i, k in enumerate(keys))
    assert table.get(key64(b"absent")) == -1
    assert key64(b"x") == key64(b"x") != 0
    assert sorted(i for _, i in table.items()) == list(range(5_000))
    assert table.nbytes >= 16 * 5_000 * 8 // 5


def test_the_collision_probability_is_tlcs_estimate() -> None:
    assert collision_probability(1) == 0.0
    assert collision_probability(10_000_000) == pytest.approx(10_000_000**2 / 2**65, rel=1e-6)
    assert collision_probability(2**40) == 1.0


def test_a_projection_follows_levels_that_rise_and_fall_and_declines_to_guess_steady_growth() -> None:
    bell = [round(1000 * 2.0 ** (-((d - 12) ** 2) / 18)) for d in range(30)]
    assert projected_total(bell) == sum(bell)  # the last level is empty: the search is over
    partial = bell[:14]
    projected = projected_total(partial)
    assert projected is not None
    assert sum(bell) * 0.5 < projected < sum(bell) * 2
    assert projected_total([1, 2, 4, 8, 16, 32, 64]) is None
    assert projected_total([1, 2]) is None


def test_levels_are_reported_as_they_complete(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontier, "KEEP", 0)
    levels: list[Level] = []
    result = check(SMALL, on_level=levels.append)
    assert [level.depth for level in levels] == list(range(1, len(result.levels)))
    assert [level.states for level in levels] == result.levels[1:]
    assert levels[-1].total == result.states
    assert levels[3].growth == pytest.approx(result.levels[4] / result.levels[3])
    assert all(level.disk_mb > 0 for level in levels)


def test_the_check_command_prints_memory_disk_and_the_collision_chance(tmp_path: Path) -> None:
    spill = tmp_path / "not" / "yet"  # made when missing
    out = runner.invoke(app, ["check", "--admin", "0", "--ticks", "1", "--spill-dir", str(spill)])
    assert spill.is_dir()
    assert list(spill.iterdir()) == []  # the search's own folder removed at its end
    assert out.exit_code == 0, out.output
    assert "peak memory" in out.output
    assert "MiB on disk at most" in out.output
    assert "chance of a fingerprint collision" in out.output
    memory = runner.invoke(app, ["check", "--admin", "0", "--ticks", "1", "--engine", "memory"])
    assert memory.exit_code == 0, memory.output
    assert "MiB on disk" not in memory.output
    bad = runner.invoke(app, ["check", "--engine", "compact", "--graph", "g.mmd"])
    assert bad.exit_code == 2
    assert "keeps no graph" in bad.output
