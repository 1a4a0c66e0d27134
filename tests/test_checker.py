"""The model checker: it explores the bounded space completely on the current protocol, finds the
historical bugs with shortest replayable counterexamples, reduces by broker symmetry, and reports
runs that can never settle."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from statechan.checker import (
    Bounds,
    CheckResult,
    Fingerprinter,
    Node,
    _liveness,
    check,
    counted,
    graph_text,
)
from statechan.cli import app
from statechan.cluster import Cluster, Lookup, RunTask, SimConfig, StoreKind, protocol
from statechan.cluster.actions import Deliver
from statechan.cluster.state import ClusterState
from statechan.invariants.catalogue import simulation_ids, step_ids
from statechan.known_bugs import KNOWN_BUGS
from statechan.observation import Observation

runner = CliRunner()
SMALL = Bounds(brokers=2, bundles=1, lookups=1, admin=1, ticks=2)


def test_the_current_protocol_is_safe_and_live_at_the_small_bound_on_the_system_topic() -> None:
    result = check(SMALL)
    assert result.complete
    assert result.ok, (result.violation, result.liveness)
    assert result.states > 500  # 1,181 without partial-order reduction
    assert result.transitions > result.states
    taken = {pair for pair, counts in result.coverage.items() if sum(counts.values())}
    assert {
        ("Init", "Assigning"),
        ("Assigning", "Owned"),
        ("Owned", "Releasing"),
        ("Releasing", "Assigning"),
        ("Owned", "Splitting"),
        ("Splitting", "Deleted"),
    } <= taken
    assert result.coverage[("Owned", "Releasing")]["transfer"] > 0


def test_the_current_protocol_is_safe_and_live_on_the_metadata_store_at_a_smaller_bound() -> None:
    result = check(Bounds(brokers=2, bundles=1, lookups=1, admin=0, ticks=1), StoreKind.metadata_store)
    assert result.complete
    assert result.ok, (result.violation, result.liveness)
    assert ("Init", "Assigning") in result.coverage
    assert ("Assigning", "Owned") in result.coverage


def test_bug_25379_gives_a_counterexample_that_replays(tmp_path: Path) -> None:
    result = check(SMALL.model_copy(update={"crashes": 1, "restarts": 1}), variant="25379")
    assert result.violation is not None
    assert result.violation.startswith("in-flight-acted-on")
    assert [a.kind for a in result.path].count("crash") == 1
    saved = tmp_path / "25379.json"
    out = runner.invoke(
        app,
        ["check", "--variant", "25379", "--crashes", "1", "--restarts", "1", "--save-run", str(saved)],
    )
    assert out.exit_code == 1, out.output
    assert "in-flight-acted-on" in out.output
    assert json.loads(saved.read_text())["picks"] == result.picks
    replayed = runner.invoke(app, ["replay", str(saved), "--quiet"])
    assert replayed.exit_code == 1
    assert "in-flight-acted-on" in replayed.output


def test_the_checkers_counterexample_for_25946_breaks_the_variant_and_not_the_current_protocol() -> None:
    """Found by ``statechan check --store both --variant 25946 --admin-kinds unload --ticks 3
    --tombstone-delay 30`` (about 90,000 states: too long for this suite, so its saved run is
    replayed): the syncer drops the leader's tombstone of a Free key."""
    from properties.bench import violations_of
    from statechan.cluster.config import VARIANTS
    from statechan.cluster.runfile import load_saved_run

    path = Path(__file__).resolve().parent.parent / "docs" / "counterexamples" / "checker-25946.json"
    replayed = runner.invoke(app, ["replay", str(path), "--quiet"])
    assert replayed.exit_code == 1, replayed.output
    assert "syncer-equivalence" in replayed.output
    saved = load_saved_run(path)
    current = Cluster(saved.config.model_copy(update={"variant": VARIANTS["current"]}), picks=list(saved.picks or []))
    for action in saved.actions:
        current.step(action)
        assert violations_of(current) == [], action
    assert [a.kind for a in saved.actions].count("tick") <= 3


def test_bug_24478_gives_a_counterexample_with_a_session_loss() -> None:
    result = check(SMALL.model_copy(update={"session_losses": 1, "admin": 0}), variant="24478")
    assert result.violation is not None
    assert result.violation.split(" ")[0] in next(b for b in KNOWN_BUGS if b.variant == "24478").breaks
    assert "lose-session" in [a.kind for a in result.path]


def test_bug_24186_on_the_metadata_store_writes_two_values_for_a_version_then_gives_two_owners() -> None:
    """The step invariants see the lost compare-and-set's retry write a second value for version 1
    at once (6 steps); without them the same race goes on to two owners (10 steps)."""
    bounds = Bounds(lookups=2, admin=0, ticks=1)
    result = check(bounds, StoreKind.metadata_store, "24186")
    assert result.violation is not None
    assert result.violation.startswith("one-value-per-version")
    assert len(result.path) <= 6
    state_only = [i for i in simulation_ids() if i not in step_ids()]
    result = check(bounds, StoreKind.metadata_store, "24186", invariants=state_only)
    assert result.violation is not None
    assert result.violation.startswith("single-owner")
    assert [a.kind for a in result.path].count("lookup") == 2


def test_bug_20110_breaks_convergence_sooner_than_anything_in_the_current_protocol() -> None:
    bounds = Bounds(compactions=1)
    bug = check(bounds, variant="20110")
    assert bug.violation is not None
    assert bug.violation.startswith("views-converge")
    assert "compact" in [a.kind for a in bug.path]
    # the current protocol has no counterexample that short (finding 1 needs 16 steps)
    current = check(bounds.model_copy(update={"depth": len(bug.path)}))
    assert current.violation is None
    assert current.stopped == f"depth bound {len(bug.path)}"
    assert bug.refused == current.refused == 0  # every listed delivery could be taken, compaction or not


def test_without_timely_delivery_the_monitor_overrides_an_unload_its_source_has_not_read() -> None:
    unload = Bounds(admin_kinds=("unload",), ticks=4)
    assert check(unload).ok
    untimely = check(unload.model_copy(update={"timely_delivery_ms": None}))
    assert untimely.violation is not None
    assert untimely.violation.startswith("single-owner")
    assert [a.kind for a in untimely.path][-3:] == ["tick", "tick", "tick"]


def _assigned(config: SimConfig, looker: str, owner: str) -> Cluster:
    """A cluster where ``looker`` looked the bundle up and the leader placed it on ``owner``."""
    for pick in range(config.brokers):
        cluster = Cluster(config, picks=[pick])
        key = cluster.sorted_bundle_keys()[0]
        for action in (Lookup(looker, key), RunTask(looker), Deliver(looker)):
            cluster.step(action)
        value = cluster.brokers[looker].value(key)
        if value is not None and value.dst_broker == owner:
            return cluster
    raise AssertionError(f"no placement puts the bundle on {owner}")


def test_symmetric_states_share_a_fingerprint_only_with_symmetry_on() -> None:
    config = SimConfig(brokers=3, bundles_per_namespace=1, trace_views=False)
    with_symmetry = Fingerprinter(3, 10**7, True)
    without = Fingerprinter(3, 10**7, False)
    # broker-1 leads in both; broker-2 and broker-3 swap roles: the same state renamed
    one = _assigned(config, "broker-2:8080", "broker-2:8080").state
    other = _assigned(config, "broker-3:8080", "broker-3:8080").state
    assert with_symmetry(one) == with_symmetry(other)
    assert without(one) != without(other)
    # only renamings in signature order are tried: at the start broker-2 and broker-3 are alike
    # (two orders), broker-1 leads; once broker-2 owns the bundle every broker differs (one)
    assert len(with_symmetry.candidates(Cluster(config).state)) == 2
    assert len(with_symmetry.candidates(one)) == 1
    # the leader's role breaks the symmetry: placing on the leader is a different state
    on_leader = _assigned(config, "broker-2:8080", "broker-1:8080").state
    assert with_symmetry(on_leader) != with_symmetry(one)


def test_a_renaming_swaps_broker_ids_everywhere_in_the_canonical_form() -> None:
    config = SimConfig(brokers=3, bundles_per_namespace=1, trace_views=False)
    one = _assigned(config, "broker-2:8080", "broker-2:8080").state
    other = _assigned(config, "broker-3:8080", "broker-3:8080").state
    plain = Fingerprinter(3, 10**7, False)
    swap = (0, 2, 1)  # broker-2 and broker-3 trade ids
    assert one.now == other.now
    assert plain.form(one) != plain.form(other)
    assert one.canon(plain.context(one.now, swap)) == plain.form(other)
    assert one.ch(plain.context(one.now, swap)) == other.ch(plain.context(other.now, None))


def test_a_loop_that_never_settles_is_reported_as_a_lasso() -> None:
    a, b, c = Lookup("b", "k"), RunTask("b"), Deliver("b")
    nodes = [
        Node(-1, None, (), 0, expanded=True),
        Node(0, a, (), 1, expanded=True),  # 1: can only go round 2 -> 3 -> 2
        Node(1, b, (), 2, expanded=True),
        Node(2, c, (), 3, expanded=True),
        Node(0, c, (), 1, settled=True, expanded=True),
    ]
    nodes[0].successors = [(1, a, ()), (4, c, ())]
    nodes[1].successors = [(2, b, ())]
    nodes[2].successors = [(3, c, ())]
    nodes[3].successors = [(2, b, ())]
    result = CheckResult(SMALL, StoreKind.system_topic, "current")
    _liveness(result, nodes)
    assert result.liveness is not None
    assert result.liveness.startswith("3 state(s) cannot reach a settled state")
    assert result.path == [a, b, c, b]
    assert result.lasso == 2  # the loop is path[2:] = deliver, run-task, back to the state after run-task


def test_check_command_reports_counts_coverage_and_the_verdict() -> None:
    out = runner.invoke(app, ["check", "--brokers", "2", "--admin", "0", "--ticks", "1"])
    assert out.exit_code == 0, out.output
    assert "distinct states (broker symmetry)" in out.output
    assert "Transitions taken (SystemTopic table)" in out.output
    assert "no invariant broken; every state can settle" in out.output
    bad = runner.invoke(app, ["check", "--admin-kinds", "merge"])
    assert bad.exit_code == 2
    assert "--admin-kinds: unknown merge" in bad.output
    with pytest.raises(ValueError, match="unknown merge; choose from transfer, split, unload"):
        Bounds(admin_kinds=("transfer", "merge"))  # the library refuses it too, not only the command


def test_the_syncer_between_both_views_is_safe_and_live_at_a_small_bound() -> None:
    result = check(Bounds(admin=0, ticks=1), StoreKind.both)
    assert result.complete
    assert result.ok, (result.violation, result.liveness)
    assert ("Init", "Assigning") in result.coverage


def test_the_graph_export_draws_every_state_and_marks_the_counterexample(tmp_path: Path) -> None:
    result = check(Bounds(crashes=1, restarts=1), variant="25379", keep_graph=True)
    dot = graph_text(result, "dot")
    assert dot.count(" [label=") - dot.count(" -> ") == result.states  # one line per state
    assert dot.count("#f4cccc") == len(result.path) + 1  # the root and every state on the path
    mermaid = graph_text(result, "mermaid")
    assert mermaid.startswith("flowchart TD")
    assert mermaid.count("-->|") == sum(len(n.successors) for n in result.nodes)
    out = runner.invoke(app, ["check", "--admin", "0", "--ticks", "0", "--graph", str(tmp_path / "g.mmd")])
    assert out.exit_code == 0, out.output
    drawn = (tmp_path / "g.mmd").read_text().count('["')
    assert f"explored graph ({drawn:,} states)" in out.output
    assert runner.invoke(app, ["check", "--graph", str(tmp_path / "g.png")]).exit_code == 2


def test_a_memory_bound_stops_the_search_and_says_so() -> None:
    result = check(Bounds(), max_memory_mb=1)
    assert not result.complete
    assert result.stopped == "memory bound 1 MiB"
    assert result.violation is None
    assert result.liveness is None  # no liveness verdict on a partial graph


def test_a_state_where_nothing_can_happen_is_reported_unless_the_tick_budget_cut_it_off() -> None:
    a, b = Lookup("b", "k"), RunTask("b")

    def graph(cut: bool) -> list[Node]:
        nodes = [
            Node(-1, None, (), 0, expanded=True),
            Node(0, a, (), 1, expanded=True),
            Node(1, b, (), 2, expanded=True, timers_cut=cut),  # nothing enabled, not settled
            Node(0, b, (), 1, settled=True, expanded=True),
        ]
        nodes[0].successors = [(1, a, ()), (3, b, ())]
        nodes[1].successors = [(2, b, ())]
        return nodes

    result = CheckResult(SMALL, StoreKind.system_topic, "current")
    _liveness(result, graph(cut=False))
    assert result.liveness is not None
    assert "leads in 1 step(s) to a state where nothing can happen" in result.liveness
    assert result.path == [a, b]
    assert result.lasso == -1
    cut_off = CheckResult(SMALL, StoreKind.system_topic, "current")
    _liveness(cut_off, graph(cut=True))
    assert cut_off.liveness is None


def test_unload_tombstone_and_compaction_cut_edges_are_covered_past_finding_1() -> None:
    bounds = Bounds(admin_kinds=("unload",), compactions=1, ticks=3, tombstone_delay_s=30)
    # a reader behind the compaction horizon misses the Free key's tombstone (finding 1) ...
    found = check(bounds)
    assert found.violation is not None
    assert found.violation.startswith("views-converge")
    # ... and past it, the rest of the space is safe and live and takes the unload edges
    ids = [i for i in simulation_ids() if i != "views-converge"]
    result = check(bounds, invariants=ids)
    assert result.complete
    assert result.ok, (result.violation, result.liveness)
    taken = {pair for pair, counts in result.coverage.items() if sum(counts.values())}
    assert {("Releasing", "Free"), ("Free", "Init"), ("Init", "Free"), ("Init", "Releasing")} <= taken
    assert result.coverage[("Free", "Init")]["tick"] > 0  # the monitor's tombstone
    assert result.coverage[("Init", "Free")]["deliver"] > 0  # a reader starting from the snapshot


def test_coverage_counts_a_deleted_key_as_back_to_init() -> None:
    from statechan.checker import _channel_transitions
    from statechan.cluster.state import Rec
    from statechan.states import ServiceUnitState as S

    def value(state: S, version: int = 1) -> Rec:
        return Rec(state, 0, None, version, False, 1)

    same = value(S.Assigning)
    forced = Rec(S.Free, None, 0, 2, True, 1)
    before = {"a": value(S.Owned), "b": value(S.Deleted), "c": same, "e": value(S.Owned, 2), "f": value(S.Owned)}
    after = {"a": value(S.Releasing), "c": same, "d": value(S.Owned), "e": value(S.Owned, 3), "f": forced}
    assert _channel_transitions(before, after) == [
        ("Owned", "Releasing", False),
        ("Deleted", "Init", False),
        ("Init", "Owned", False),
        ("Owned", "Owned", False),
        ("Owned", "Free", True),  # an override: the coverage counts it apart from the table's edge
    ]
    assert _channel_transitions(before, before) == []


@pytest.mark.parametrize(
    ("bounds", "words"),
    [
        (Bounds(), "2 brokers, 1 bundle, 1 lookup, 1 admin (transfer/split), 2 ticks"),
        (Bounds(crashes=1, restarts=1, ticks=1), "1 crash, 1 restart, 1 tick"),
        (Bounds(crashes=2, session_losses=2, bundles=2), "2 bundles, 1 lookup, 1 admin (transfer/split), 2 crashes, "),
        (Bounds(session_losses=1, leader_changes=2), "1 session loss, 2 leader changes"),
    ],
)
def test_bounds_are_described_in_words(bounds: Bounds, words: str) -> None:
    assert words in bounds.describe()


@pytest.mark.parametrize(
    ("n", "noun", "words"),
    [
        (1, "crash", "1 crash"),
        (2, "crash", "2 crashes"),
        (0, "bundle", "0 bundles"),
        (1200, "namespace", "1,200 namespaces"),
    ],
)
def test_counts_are_written_with_their_plural_and_thousands(n: int, noun: str, words: str) -> None:
    assert counted(n, noun) == words


def test_the_checkers_counterexample_for_finding_7_replays_on_the_current_protocol() -> None:
    """Found by ``statechan check --crashes 1 --restarts 1 --admin-kinds split --ticks 3`` (about
    29,000 states: its saved run is replayed here): a split's source crashes and comes back
    without acting on it, and the leader's monitor hands the split to itself (docs/findings.md #7)."""
    from statechan.cluster.config import VARIANTS
    from statechan.cluster.runfile import load_saved_run

    path = Path(__file__).resolve().parent.parent / "docs" / "counterexamples" / "checker-finding-7.json"
    replayed = runner.invoke(app, ["replay", str(path), "--quiet"])
    assert replayed.exit_code == 1, replayed.output
    assert "single-owner" in replayed.output
    saved = load_saved_run(path)
    assert saved.config.variant == VARIANTS["current"]
    assert [a.kind for a in saved.actions].count("split") == 1
    assert len(saved.actions) == 15  # the restarted broker's channel start is a step of its own


# -- soundness: the checker against a search that merges only byte-identical states ---------------
def _reference_search(
    bounds: Bounds, store: StoreKind, fingerprints: list[Fingerprinter], variant: str = "current"
) -> tuple[list[set[bytes]], bool]:
    """Every state within ``bounds``, merging only states whose pickles and remaining budgets are
    byte for byte the same (no abstraction at all), named by each of ``fingerprints`` with the
    budgets left: what the checker must reach, abstraction for abstraction. Also whether any
    state broke an invariant."""
    import pickle

    from statechan.checker import budget_kind, checker_config
    from statechan.invariants.catalogue import check as check_invariants

    setup = protocol.setup(checker_config(bounds, store, variant))
    root = protocol.init(setup, trace=False).state
    budget = bounds.budget()
    ids = simulation_ids()

    def names(state: ClusterState, left: dict[str, int]) -> list[bytes]:
        suffix = repr(sorted(left.items())).encode()
        return [fingerprint(state) + suffix for fingerprint in fingerprints]

    reached = [{name} for name in names(root, dict(budget))]
    broken = False
    seen: set[bytes] = set()
    queue = [(pickle.dumps(root), dict(budget))]
    while queue:
        frozen, left = queue.pop()
        state = pickle.loads(frozen)
        for action in protocol.enabled(state, setup):
            kind = budget_kind(action, bounds)
            if kind == "off" or (kind is not None and left[kind] == 0):
                continue
            plans: list[list[int]] = [[]]  # every sequence of placement picks, depth first
            while plans:
                plan = plans.pop()
                tape = iter(plan)

                def choose(width: int, tape: Iterator[int] = tape) -> int:
                    return next(tape, 0)

                try:
                    outcome = protocol.step(state, action, setup, choose, trace=False)
                except ValueError:
                    break
                made = outcome.picks
                for position in range(len(plan), len(made)):
                    plans += [[*made[:position], other] for other in range(1, outcome.widths[position])]
                child = outcome.state
                # a step's lookup answers are checked on every step, then dropped: not the state's
                answered = Observation(child, setup, outcome.answers)
                violated = bool(check_invariants(answered, ids)) if outcome.answers else False
                child_left = dict(left)
                if kind is not None:
                    child_left[kind] -= 1
                exact = pickle.dumps(child)
                key = exact + repr(sorted(child_left.items())).encode()
                broken = broken or violated
                if key not in seen:
                    seen.add(key)
                    broken = broken or bool(check_invariants(Observation(child, setup), ids))
                    for found, name in zip(reached, names(child, child_left), strict=True):
                        found.add(name)
                    queue.append((exact, child_left))
    return reached, broken


@pytest.mark.parametrize(
    ("bounds", "store"),
    [
        # a crash, a restart and one timer: a state comes back with the restart unspent (the merge
        # that lost it was issue 22's first finding) and dead timers differ from live ones
        (Bounds(lookups=0, admin=0, crashes=1, restarts=1, ticks=1), StoreKind.system_topic),
        (Bounds(lookups=1, admin=0, crashes=1, ticks=1), StoreKind.system_topic),
        (Bounds(lookups=1, admin=1, admin_kinds=("transfer",), ticks=2), StoreKind.system_topic),
        (Bounds(lookups=1, admin=1, admin_kinds=("split",), ticks=1), StoreKind.system_topic),
        (Bounds(lookups=1, admin=0, crashes=1, ticks=1), StoreKind.metadata_store),
    ],
    ids=["crash-restart", "lookup-crash", "transfer", "split", "store-crash"],
)
def test_the_search_reaches_every_state_a_search_without_abstraction_reaches(bounds: Bounds, store: StoreKind) -> None:
    """Equal fingerprints must mean equal futures: had the checker merged two states that differ
    in what can happen next (a budget left, a timer's order, a dead timer), the byte-exact search
    would reach fingerprints the checker never does. Both with and without broker symmetry, and
    in both searches (the compact one keeps only 64-bit folds of the keys and each state's parent
    and step position). With partial-order reduction the two searches reach the same states, all
    of them states the byte-exact search reaches."""
    from statechan.checker import Engine, checker_config, fingerprint_cap

    cap = fingerprint_cap(checker_config(bounds, store, "current").channel)
    plain, symmetric = Fingerprinter(bounds.brokers, cap, False), Fingerprinter(bounds.brokers, cap, True)
    (exact_plain, exact_symmetric), broken = _reference_search(bounds, store, [plain, symmetric])
    for fingerprint, symmetry, expected in ((plain, False, exact_plain), (symmetric, True, exact_symmetric)):
        reduced: dict[Engine, tuple[set[bytes], int]] = {}
        for engine in Engine:
            for por in (False, True):
                found: set[bytes] = set()

                def visit(
                    state: ClusterState,
                    left: dict[str, int],
                    fingerprint: Fingerprinter = fingerprint,
                    found: set[bytes] = found,
                ) -> None:
                    found.add(fingerprint(state) + repr(sorted(left.items())).encode())

                result = check(bounds, store, symmetry=symmetry, visitor=visit, por=por, engine=engine)
                assert result.complete
                assert result.ok is not broken
                if por:
                    assert found <= expected, (symmetry, engine, len(found - expected))
                    reduced[engine] = (found, result.states)
                    continue
                assert found == expected, (symmetry, engine, len(expected - found), len(found - expected))
                assert result.states == len(expected)
        assert reduced[Engine.compact] == reduced[Engine.memory]


def test_verified_fingerprints_agree_with_the_search_and_a_weak_digest_is_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``verify_fingerprints`` every fingerprint met again is compared by its canonical value:
    a small bound has no collision (the same states as without it), and an empty digest, which
    must collide among more states than there are budgets left, is reported instead of merging."""
    from statechan.checker import FingerprintCollision

    bounds = Bounds(admin=0, ticks=2)
    plain = check(bounds)
    verified = check(bounds, verify_fingerprints=True)
    assert plain.states == verified.states > len(Bounds().budget()) * 3
    monkeypatch.setattr(Fingerprinter, "digest", staticmethod(lambda hashed: b""))
    with pytest.raises(FingerprintCollision, match="two different states share the fingerprint"):
        check(bounds, verify_fingerprints=True)


@pytest.mark.parametrize(
    ("bounds", "store", "variant"),
    [
        (Bounds(lookups=1, admin=0, crashes=1, restarts=1, ticks=1), StoreKind.metadata_store, "current"),
        (SMALL.model_copy(update={"session_losses": 1, "admin": 0}), StoreKind.system_topic, "24478"),
    ],
    ids=["store-faults", "24478"],
)
def test_two_workers_make_the_search_one_worker_makes(
    bounds: Bounds, store: StoreKind, variant: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Expanded in two processes from the root's successors on and merged in queue order: the same
    states, edges, coverage, verdict and shortest counterexample (picks included) as in one."""
    import statechan.checker.parallel as parallel
    from tests.test_search_compact import _found

    monkeypatch.setattr(parallel, "HANDOVER", 0)
    one = check(bounds, store, variant, por=False)
    two = check(bounds, store, variant, workers=2, por=False)
    assert _found(two) == _found(one)
    assert one.states > 100


def test_the_explored_graph_is_not_shared_out() -> None:
    """The in-memory search (what keeps the graph) runs in one process: asking it for workers is an error."""
    with pytest.raises(ValueError, match="one process"):
        check(SMALL, keep_graph=True, workers=2)
    out = runner.invoke(app, ["check", "--graph", "g.dot", "--workers", "2"])
    assert out.exit_code == 2
    assert "--workers shares out the compact search only" in out.output


def test_a_state_bound_cuts_two_workers_where_it_cuts_one(monkeypatch: pytest.MonkeyPatch) -> None:
    import statechan.checker.parallel as parallel

    monkeypatch.setattr(parallel, "HANDOVER", 0)  # workers from the root's successors on
    one = check(SMALL, max_states=700, por=False)
    two = check(SMALL, max_states=700, workers=2, por=False)
    assert not one.complete
    assert one.stopped == two.stopped == "state bound 700"
    assert (one.states, one.transitions) == (two.states, two.transitions)


def test_partial_order_reduction_is_on_by_default_on_the_system_topic_and_can_be_turned_off() -> None:
    """On by default in ``statechan check`` where it is argued (the system topic), never on the
    metadata store; the CLI prints how many states it expanded through one delivery, and with
    --measure-por the factor; ``check()`` too."""
    on = check(SMALL)
    off = check(SMALL, por=False)
    assert on.por
    assert not off.por
    assert on.reduced > 0
    assert on.states < off.states
    assert not check(Bounds(admin=0, ticks=1), StoreKind.metadata_store, por=True).por
    out = runner.invoke(app, ["check", "--measure-por"])
    assert out.exit_code == 0, out.output
    assert f"{on.states:,} distinct states" in out.output
    assert f"without it {off.states:,}" in out.output
    plain = runner.invoke(app, ["check", "--no-por"])
    assert plain.exit_code == 0, plain.output
    assert f"{off.states:,} distinct states" in plain.output
    assert "partial-order" not in plain.output


def test_a_search_puts_the_cycle_collectors_setting_back() -> None:
    """The search runs the collector's youngest generation less often while it runs (a speed
    setting of the process); the caller's setting is back afterwards, also after a stopped search."""
    import gc

    before = gc.get_threshold()
    check(SMALL)
    assert gc.get_threshold() == before
    check(SMALL, max_states=10)
    assert gc.get_threshold() == before
