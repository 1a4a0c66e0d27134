"""The fixes proposed upstream (docs/upstream/) remove their findings' counterexamples: at each
finding's bound the current protocol (or master as it is) breaks an invariant and the fixed variant's
search is complete and clean (``statechan.known_bugs.UPSTREAM_FIXES``; the bigger bounds are run by
hand and their figures are in the reports), and each saved run or pinned scenario of a finding,
replayed with the fix on, breaks nothing and ends as the report says it should."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import pytest
from typer.testing import CliRunner

from properties.bench import history_violations_of, timeline_check
from statechan.checker import Bounds, check
from statechan.cli import app
from statechan.cluster import Cluster, Lookup, LoseSession, Reconnect, Restart, SimConfig, Split, Tick
from statechan.cluster.actions import Action, Crash, Deliver, Notify, RunTask, Shutdown, Transfer
from statechan.cluster.config import VARIANTS, Variant
from statechan.cluster.runfile import load_saved_run
from statechan.invariants.catalogue import CATALOGUE, simulation_ids
from statechan.known_bugs import UPSTREAM_FIXES, UpstreamFix
from statechan.states import ServiceUnitState as S
from statechan.stores import SystemTopicTableView, Topic
from tests.channel_values import KEY, v

DOCS = Path(__file__).resolve().parent.parent / "docs"
B1, B2, B3 = "broker-1:8080", "broker-2:8080", "broker-3:8080"
BY_COMMAND_LINE = "fix-04"
"""The small bound run through ``statechan check`` (exit codes) instead of the library."""
SMALL = [fix for fix in UPSTREAM_FIXES if fix.small and fix.variant != BY_COMMAND_LINE]
runner = CliRunner()


def _id(fix: UpstreamFix) -> str:
    return f"{fix.variant}-{fix.breaks[0]}"


@pytest.mark.parametrize("fix", SMALL, ids=[_id(f) for f in SMALL])
def test_the_fix_removes_its_findings_counterexample_at_the_bound(fix: UpstreamFix) -> None:
    broken = fix.check(fix.broken)
    assert broken.violation is not None, f"{fix.broken} does not break at {fix.command(fix.broken)}"
    assert broken.violation.split(" ")[0] in fix.breaks, broken.violation
    fixed = fix.check()
    assert fixed.within_bound, f"{fix.command()} stopped: {fixed.stopped}"
    assert fix.holds(fixed), (fixed.violation, fixed.liveness, getattr(fixed, "never_reached", None))


def test_the_command_line_runs_a_fix_by_name() -> None:
    """``statechan check --variant fix-04`` at finding 4's bound exits 0 where ``current`` exits 1."""
    (fix,) = [f for f in UPSTREAM_FIXES if f.variant == BY_COMMAND_LINE and f.small]
    current = runner.invoke(app, ["check", "--variant", fix.broken, *fix.options()])
    assert current.exit_code == 1, current.output
    assert f"broken: {fix.breaks[0]}" in current.output
    fixed = runner.invoke(app, ["check", "--variant", fix.variant, *fix.options()])
    assert fixed.exit_code == 0, fixed.output
    assert "no invariant broken" in fixed.output


BY_SAVED_RUN = {"09": "finding-forced-free-tombstone.json"}
"""Reports whose fix is checked on their saved run, not at a checker bound: report 09's checker run
needed a broker without a session to read an empty registry (docs/fidelity.md, 1) and was
withdrawn; its metadata-store run is a hunt's."""


def test_every_report_has_a_fix_row_naming_known_variants_and_invariants() -> None:
    reports = {path.name[:2] for path in (DOCS / "upstream").glob("[0-9][0-9]-*.md")}
    assert reports == {fix.report for fix in UPSTREAM_FIXES} | set(BY_SAVED_RUN)
    for fix in UPSTREAM_FIXES:
        assert fix.variant in VARIANTS
        assert fix.broken in VARIANTS
        assert VARIANTS[fix.variant] != VARIANTS[fix.broken]
        assert set(fix.breaks) | set(fix.skip) | set(fix.hazards) <= set(CATALOGUE)
        assert fix.command().startswith(f"statechan check --variant {fix.variant}")


FIX_VARIANTS = sorted(name for name in VARIANTS if name.startswith("fix-"))


@pytest.mark.parametrize("name", FIX_VARIANTS)
def test_each_fix_is_clean_at_the_default_bound(name: str) -> None:
    """No fix breaks an invariant at ``statechan check``'s default bound (the current protocol is clean
    there); a fix that keeps a split parent's Deleted gives up ``semi-terminal-tombstoned`` and the
    parent's tombstone within the bound by design."""
    kept = VARIANTS[name].keep_split_parent_deleted
    invariants = [i for i in simulation_ids() if not (kept and i == "semi-terminal-tombstoned")]
    result = check(Bounds(), variant=name, invariants=invariants)
    assert result.complete, name
    assert (result.violation, result.liveness) == (None, None), name
    unwalked = {gap.flow for gap in getattr(result, "never_reached", ())}  # the vacuity guard, where present
    assert unwalked <= ({"tombstone"} if kept else set()), (name, unwalked)


# -- the saved runs and scenarios, replayed with the fix on -------------------------------------------
class _Run:
    """A cluster stepped with the cluster and step invariants checked at every step."""

    def __init__(self, cluster: Cluster) -> None:
        self.cluster = cluster
        self.check = timeline_check()
        self.check.start(cluster)
        self.broken: list[str] = []
        self.skipped: list[Action] = []

    def step(self, action: Action) -> None:
        self.cluster.step(action)
        self.broken.extend(found.split(" ")[0] for found in self.check(self.cluster))

    def follow(self, actions: Iterable[Action]) -> None:
        """Take each action the fixed protocol still enables; skip the rest (the fix changed the run)."""
        for action in actions:
            if action in self.cluster.enabled_actions():
                self.step(action)
            else:
                self.skipped.append(action)

    def settle(self, ticks: int = 6, last_first: bool = False) -> None:
        """Take the waiting work (the last broker's first with ``last_first``) and up to ``ticks`` timers."""
        for _ in range(10_000):
            work = self.cluster.work_actions()
            if work:
                self.step(work[-1] if last_first else work[0])
            elif ticks and self.cluster.next_timer() is not None:
                self.step(Tick())
                ticks -= 1
            else:
                return
        raise AssertionError("the run did not settle")


def _saved(name: str, variant: Variant) -> tuple[_Run, list[Action]]:
    saved = load_saved_run(DOCS / "counterexamples" / name)
    config = saved.config.model_copy(update={"variant": variant})
    picks = list(saved.picks) if saved.picks is not None else None
    return _Run(Cluster(config, picks=picks)), saved.actions


def test_fix_01_a_reader_behind_the_horizon_applies_the_kept_tombstone() -> None:
    """Finding 1's store-level scenario (report 01's counterexample): the slow reader missed the
    tombstone and the new lifetime's records, all before the horizon. The compacted ledger must keep
    the key's last tombstone beside its new value (not only while the key stays deleted), so the
    slow reader applies the deletion first and then takes the new lifetime's v2."""
    for keep in (False, True):
        topic = Topic()
        fast, slow = SystemTopicTableView(topic, "fast"), SystemTopicTableView(topic, "slow")
        fast.start()
        slow.start()
        for value in (v(S.Assigning, "b1"), v(S.Owned, "b1", version=2), v(S.Releasing, None, "b1", 3)):
            topic.publish(KEY, value)
        slow.advance(3)
        topic.publish(KEY, v(S.Free, None, "b1", 4))
        topic.publish(KEY, None)
        topic.publish(KEY, v(S.Assigning, "b2"))  # a new lifetime: versions start again at 1
        topic.publish(KEY, v(S.Owned, "b2", version=2))
        report = topic.compact(keep_tombstones=keep)
        assert (report.kept, report.deleted_keys) == (1, 0)  # the key lives again
        assert [m.is_tombstone for m in topic.compacted] == ([True, False] if keep else [False])
        fast.catch_up()
        slow.catch_up()
        assert fast.get(KEY) == v(S.Owned, "b2", version=2)
        # without the tombstone the slow reader refuses the new lifetime's v2 (it holds v3)
        assert slow.get(KEY) == (fast.get(KEY) if keep else v(S.Releasing, None, "b1", 3))


def test_fix_01_compaction_keeps_a_deleted_keys_tombstone() -> None:
    """A key whose last record before the horizon is a tombstone: Pulsar's compaction drops it, and a
    reader that held the key keeps it; with the fix the snapshot holds the tombstone, which it applies."""
    for keep in (False, True):
        topic = Topic()
        slow = SystemTopicTableView(topic, "slow")
        slow.start()
        topic.publish(KEY, v(S.Assigning, "b1"))
        topic.publish(KEY, v(S.Owned, "b1", version=2))
        slow.advance(2)
        topic.publish(KEY, v(S.Releasing, None, "b1", 3))
        topic.publish(KEY, v(S.Free, None, "b1", 4))
        topic.publish(KEY, None)
        report = topic.compact(keep_tombstones=keep)
        assert [m.is_tombstone for m in topic.compacted] == ([True] if keep else [])
        assert (report.kept, report.deleted_keys) == (0, 1)
        slow.catch_up()
        assert (KEY in slow) is not keep


def _handover_after_session_loss(variant: str) -> _Run:
    """Finding 4's split form as an explicit scenario: B2 owns the bundle and reads its own Splitting;
    its session is lost before its split task runs; the leader's clean-up hands the split to B3; the
    task runs; B2's session comes back; then every delivery, the old source's last."""
    config = SimConfig(brokers=3, bundles_per_namespace=1, timely_delivery_ms=1000, variant=VARIANTS[variant])
    run = _Run(Cluster(config))
    key = sorted(run.cluster.live_bundle_keys())[0]
    run.step(Lookup(B1, key))
    run.cluster.drain()
    assert run.cluster.brokers[B1].value(key).dst_broker == B2  # type: ignore[union-attr]
    for action in (Split(B2, key), Deliver(B2), LoseSession(B2), Notify(B1), Tick(), Tick(), RunTask(B2)):
        run.step(action)  # the ticks: the leader's monitor, then its clean-up of B2 (B3 selected)
    run.step(Reconnect(B2))
    run.settle(ticks=0)
    return run


def test_fix_04_a_split_out_of_the_registry_is_set_aside_and_dropped_once_handed_over() -> None:
    current = _handover_after_session_loss("current")
    assert "single-owner" in current.broken  # B2 owns the children while B3 holds the parent
    fixed = _handover_after_session_loss("fix-04")
    assert fixed.broken == []
    assert fixed.cluster.counters["split-set-aside"] == 1
    assert fixed.cluster.serving() == {B1: set(), B2: set(), B3: set(fixed.cluster.live_bundle_keys())}


def test_fix_04_the_saved_runs_of_finding_4_break_nothing() -> None:
    plain, actions = _saved("checker-finding-4.json", VARIANTS["fix-04"])
    plain.follow(actions)
    assert plain.skipped == []  # the same run: B2 now reads the override before it registers again
    plain.settle()
    assert plain.broken == []
    split, actions = _saved("finding-split-handover.json", VARIANTS["fix-04"])
    split.follow(actions)
    assert split.cluster.counters["split-refused"] == 1  # the admin split on B2, out of the registry
    split.settle()
    assert split.broken == []


def test_fix_05_the_departing_destinations_clean_up_redirects_the_transfer() -> None:
    """Finding 5's scenario (seed 4) with the fix: B2's clean-up writes ``Releasing dst=B3 src=B1``;
    B3 reads everything first and still serves nothing until B1 has released and B3 owns."""
    for variant, overridden in (("current", S.Owned), ("fix-05", S.Releasing)):
        run = _Run(Cluster(SimConfig(brokers=3, seed=4, variant=VARIANTS[variant])))
        key = sorted(run.cluster.live_bundle_keys())[0]
        run.step(Lookup(B1, key))
        run.cluster.drain()
        for action in (Transfer(B1, key, B2), Deliver(B2), Shutdown(B2)):
            run.step(action)
        override = run.cluster.brokers[B2].value(key)
        if run.cluster.brokers[B2].reader_pending:  # (doCleanup's flush has read it back already)
            run.step(Deliver(B2))
        assert run.cluster.brokers[B2].value(key).state is overridden  # type: ignore[union-attr]
        while run.cluster.brokers[B3].reader_pending:
            run.step(Deliver(B3))
        run.settle(last_first=True)
        assert ("single-owner" in run.broken) is (variant == "current"), (variant, override, run.broken)
        assert run.cluster.serving()[B3] == {key}
        assert run.cluster.brokers[B3].value(key).source_broker == B1  # type: ignore[union-attr]


def test_fix_07_the_monitor_redrives_the_split_on_its_restarted_source() -> None:
    """Finding 7's saved run with the re-drive alone: at 60 s the monitor writes the Splitting again,
    forced, with the restarted B2 as its source, which splits; with fix 02 as well B2 splits at start."""
    redrive = Variant(monitor_redrives_split_on_source=True)
    run, actions = _saved("checker-finding-7.json", redrive)
    run.follow(actions)
    assert run.skipped == []
    last = run.cluster.brokers[B1].value("tenant/ns-0/0x00000000_0xffffffff")
    assert last is not None
    assert (last.state, last.source_broker, last.force) == (S.Splitting, B2, True)
    run.settle()
    assert run.broken == []
    assert len(run.cluster.serving()[B2]) == 2  # the children, split by their parent's own source
    both, actions = _saved("checker-finding-7.json", VARIANTS["fix-07"])
    both.follow(actions)
    assert [a.kind for a in both.skipped] == ["tick"]  # B2 split at start: nothing waits for the monitor
    both.settle()
    assert both.broken == []
    assert len(both.cluster.serving()[B2]) == 2


def test_fix_07_the_scenario_of_finding_7_ends_with_the_source_completing_its_split() -> None:
    for variant in ("fix-07", "fix-02"):
        run = _Run(Cluster(SimConfig(brokers=3, seed=5, variant=VARIANTS[variant])))
        key = sorted(run.cluster.live_bundle_keys())[0]
        run.step(Lookup(B2, key))
        run.cluster.drain()
        for action in (Split(B3, key), Crash(B3), Restart(B3)):
            run.step(action)
        run.settle(ticks=4)
        assert run.broken == []
        assert len(run.cluster.serving()[B3]) == 2, variant


def test_fix_03_the_late_assignment_meets_the_kept_deleted_and_is_refused() -> None:
    """Finding 3 on master (``master-03``, the checker's run): B1's lookup publishes ``Assigning v1`` for
    the split parent after B2 tombstoned it, and B1 owns the parent beside B2's children. With the fix
    the parent's ``Deleted v4`` is still there: every reader refuses the late ``v1``."""
    master, actions = _saved("checker-finding-3.json", VARIANTS["master-03"])
    master.follow(actions)
    assert master.skipped == []
    assert master.broken[-1:] == ["single-owner"]
    fixed, actions = _saved("checker-finding-3.json", VARIANTS["fix-03"])
    fixed.follow(actions)
    assert fixed.skipped[0] == RunTask(B2)  # B2's tombstone of its parent: never queued
    fixed.settle(ticks=0)
    parent = "tenant/ns-0/0x00000000_0xffffffff"
    written = [r["value"] for r in fixed.cluster.trace if r["kind"] == "channel" and r["key"] == parent]
    assert [(w["state"], w["versionId"]) for w in written][-2:] == [("Deleted", 4), ("Assigning", 1)]  # type: ignore[index]
    assert {view.get(parent).state for view in fixed.cluster.views().values()} == {S.Deleted}  # type: ignore[union-attr]
    assert set(fixed.broken) <= {"semi-terminal-tombstoned"}  # the Deleted kept, by design


def test_fix_08_the_prepared_create_finds_the_parents_node_and_fails() -> None:
    run, actions = _saved("finding-cas-create-after-delete.json", VARIANTS["fix-08"])
    run.follow(actions)
    run.settle(ticks=0)
    parent = "tenant/ns-0/0x00000000_0xffffffff"
    written = [r["value"] for r in run.cluster.trace if r["kind"] == "channel" and r["key"] == parent]
    assert [None if w is None else w["state"] for w in written] == ["Assigning", "Owned", "Splitting", "Deleted"]  # type: ignore[index]
    assert history_violations_of(run.cluster) == []
    assert set(run.broken) <= {"semi-terminal-tombstoned"}  # the Deleted kept, by design


@pytest.mark.parametrize("name", [BY_SAVED_RUN["09"]])
def test_fix_09_the_forced_frees_tombstone_is_dropped_over_a_newer_owner(name: str) -> None:
    run, actions = _saved(name, VARIANTS["fix-09"])
    run.follow(actions)
    assert run.skipped == []
    assert run.cluster.counters["tombstone-dropped"] == 1
    owned = run.cluster.channel()
    assert [value.state for value in owned.values()] == [S.Owned]  # the next owner keeps its record
    run.settle()
    assert run.broken == []


def test_fix_10_a_splitting_event_answers_the_lookup_the_store_s_skipped_owned_stranded() -> None:
    run, actions = _saved("checker-finding-10.json", VARIANTS["fix-10"])
    before = len(run.cluster.answers)
    run.follow(actions)
    assert run.skipped == []
    answered = [a for a in run.cluster.answers[before:] if a.deferred]
    assert [(a.broker, a.owner, a.error) for a in answered] == [("broker-1:8080", "broker-2:8080", None)]
    assert run.broken == []
    # and without the fix the same run strands it (the finding)
    stranded, actions = _saved("checker-finding-10.json", VARIANTS["current"])
    stranded.follow(actions)
    assert stranded.broken == ["lookup-not-stranded"]
