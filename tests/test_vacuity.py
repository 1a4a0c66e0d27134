"""The vacuity guards and the mutation test of a protocol model (issue 25): a protocol that never
does what a bound asks fails the check, naming the flow; the mutants of a model are what they say."""

from __future__ import annotations

import tomllib
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from statechan.checker import Bounds, check
from statechan.cluster.config import StoreKind, Variant
from statechan.model import ModelError, builtin_data_file, load_model, parse_model
from statechan.mutate import (
    BATTERY,
    Mutant,
    MutantKind,
    Outcome,
    Probe,
    Report,
    Verdict,
    load_equivalents,
    mutants,
    read_model_data,
    run_battery,
    to_toml,
)
from statechan.resolver import Reason
from statechan.states import StorageType
from statechan.vacuity import (
    FORCED,
    demanded_by_events,
    demanded_flows,
    required_edges,
    trace_coverage,
    undeclared_edges,
    unreached_flows,
    untaken_edges,
)


def _mutant(tmp_path: Path, mutant_id: str) -> str:
    data, _ = read_model_data("pulsar-4")
    chosen = [m for m in mutants(data) if m.id == mutant_id]
    assert len(chosen) == 1, f"no mutant {mutant_id!r}"
    path = tmp_path / "mutant.toml"
    path.write_text(to_toml(chosen[0].data), encoding="utf-8")
    return str(path)


# -- the flows a bound demands ----------------------------------------------------------------------
def test_the_default_bound_demands_assign_transfer_split_and_the_tombstone() -> None:
    demanded = demanded_flows(Bounds(), StorageType.SystemTopic)
    assert set(demanded) == {"assign", "transfer", "split", "tombstone"}
    assert set(demanded_flows(Bounds(admin_kinds=("unload",)), StorageType.SystemTopic)) == {"assign", "unload"}
    assert demanded_flows(Bounds(lookups=0), StorageType.SystemTopic) == {}
    assert demanded_flows(Bounds(depth=5), StorageType.SystemTopic) == {}, "a depth bound may cut any flow short"
    compaction = Bounds(compactions=1)
    assert "compaction-cut" in demanded_flows(compaction, StorageType.SystemTopic)
    assert "compaction-cut" not in demanded_flows(compaction, StorageType.MetadataStore)


def test_a_path_ending_in_a_tombstone_does_not_need_the_tombstone() -> None:
    assert required_edges(("Owned", "Releasing", "Free", "Init"), "Init") == [
        ("Owned", "Releasing"),
        ("Releasing", "Free"),
    ]
    assert required_edges(("Free", "Init"), "Init") == [("Free", "Init")], "the tombstone flow is the tombstone"


@pytest.mark.parametrize(
    ("bounds", "store"),
    [
        (Bounds(), StoreKind.system_topic),
        (Bounds(admin_kinds=("transfer", "split", "unload")), StoreKind.system_topic),
        (Bounds(admin=0, crashes=1, ticks=3), StoreKind.system_topic),
        (Bounds(admin=0, compactions=1), StoreKind.system_topic),
        (Bounds(admin=0, crashes=1, ticks=3), StoreKind.metadata_store),
    ],
    ids=lambda v: v.describe() if isinstance(v, Bounds) else v.value,
)
def test_the_current_protocol_walks_every_flow_its_bound_demands(bounds: Bounds, store: StoreKind) -> None:
    result = check(bounds, store)
    assert result.complete
    assert result.ok, result.violation or result.liveness or result.never_reached
    assert demanded_flows(bounds, result.config().storage), "a bound that demands nothing proves nothing here"


# -- a protocol that cannot do something fails -------------------------------------------------------
@pytest.mark.parametrize(
    ("mutant_id", "bounds", "flow"),
    [
        ("remove-edge Owned->Releasing", Bounds(), "transfer"),
        ("remove-edge Owned->Splitting", Bounds(), "split"),
        ("remove-edge Releasing->Free", Bounds(admin_kinds=("unload",)), "unload"),
    ],
)
def test_a_protocol_that_cannot_do_a_flow_fails_naming_it(
    tmp_path: Path, mutant_id: str, bounds: Bounds, flow: str
) -> None:
    result = check(bounds, StoreKind.system_topic, Variant(model=_mutant(tmp_path, mutant_id)))
    assert not result.ok
    named = [gap.flow for gap in result.never_reached]
    broken = result.violation or result.liveness
    structural = any(f"flow {flow} " in problem for problem in result.model_problems)
    assert flow in named or broken or structural, f"{mutant_id} passed: {result.states} states"
    if not broken and not structural:
        gap = next(g for g in result.never_reached if g.flow == flow)
        assert str(gap).startswith(f"never reached: flow {flow} (demanded by ")


@pytest.mark.parametrize(
    ("mutant_id", "flow"),
    [
        ("remove-edge Init->Assigning", "assign"),
        ("remove-edge Releasing->Assigning", "transfer"),
        ("remove-edge Releasing->Free", "unload"),  # the default bound issues no unload: named before searching
        ("remove-edge Owned->Splitting", "split"),
    ],
)
def test_a_protocol_that_cannot_assign_transfer_unload_or_split_fails_the_default_bound_naming_the_flow(
    tmp_path: Path, mutant_id: str, flow: str
) -> None:
    result = check(Bounds(), StoreKind.system_topic, Variant(model=_mutant(tmp_path, mutant_id)))
    assert not result.ok
    said = [str(gap) for gap in result.never_reached] + result.model_problems
    assert any(f"flow {flow} " in line for line in said), said


def test_a_model_that_fails_its_own_checks_is_not_searched(tmp_path: Path) -> None:
    result = check(Bounds(), StoreKind.system_topic, Variant(model=_mutant(tmp_path, "remove-edge Releasing->Free")))
    assert not result.searched
    assert (result.states, result.transitions) == (0, 0)
    assert [g.flow for g in result.never_reached] == ["unload"]
    # --no-vacuity searches it anyway: an unload-less protocol is safe and live where nothing unloads
    anyway = check(
        Bounds(), StoreKind.system_topic, Variant(model=_mutant(tmp_path, "remove-edge Releasing->Free")), vacuity=False
    )
    assert anyway.searched
    assert anyway.complete
    assert anyway.ok


def test_the_guard_can_be_turned_off() -> None:
    coverage: dict[tuple[str, str], Counter[str]] = {("Init", "Assigning"): Counter(lookup=1)}
    model = load_model("pulsar-4")
    gaps = unreached_flows(model, coverage, demanded_flows(Bounds(), StorageType.SystemTopic))
    assert {g.flow for g in gaps} == {"assign", "transfer", "split", "tombstone"}
    assert unreached_flows(model, coverage, {}) == []


# -- the coverage guard ----------------------------------------------------------------------------------
def test_an_edge_never_taken_is_reported_unless_the_model_says_why() -> None:
    model = load_model("pulsar-4")
    taken = {(a.name, b.name): Counter(step=1) for a, b in model.edges(StorageType.SystemTopic)}
    for o in model.spec.overrides:
        taken.setdefault((o.src, o.dst), Counter())[FORCED + "tick"] += 1
    assert untaken_edges(model, StorageType.SystemTopic, [taken]) == []
    del taken[("Owned", "Splitting")], taken[("Init", "Splitting")], taken[("Owned", "Free")]
    # Init -> Splitting is an edge the model explains; Owned -> Splitting and the override Owned -> Free are not
    assert untaken_edges(model, StorageType.SystemTopic, [taken]) == [("Owned", "Free"), ("Owned", "Splitting")]
    assert ("Init", "Splitting") in model.unreached(StorageType.SystemTopic)


def test_a_forced_record_takes_an_override_not_the_table_s_edge() -> None:
    # the leader's forced Free over a Releasing is an override; it cannot show that the table needs
    # Releasing -> Free (a mutant adding Owned -> Free to the table survived while the two counted alike)
    model = load_model("pulsar-4")
    table = {(a.name, b.name): Counter(step=1) for a, b in model.edges(StorageType.SystemTopic)}
    overrides = {(o.src, o.dst): Counter({FORCED + "tick": 1}) for o in model.spec.overrides}
    only_forced = {**table, ("Releasing", "Free"): Counter({FORCED + "tick": 1})}
    assert ("Releasing", "Free") in untaken_edges(model, StorageType.SystemTopic, [only_forced, overrides])
    # and the other way round: an unforced record over an override's pair that the table lacks is undeclared
    unforced = {("Owned", "Owned"): Counter(step=1)}
    assert undeclared_edges(model, StorageType.SystemTopic, [table, overrides, unforced]) == [("Owned", "Owned")]
    assert undeclared_edges(model, StorageType.SystemTopic, [table, overrides]) == []


# -- the mutants ------------------------------------------------------------------------------------------
def test_a_model_written_back_as_toml_reads_the_same() -> None:
    data, _ = read_model_data("pulsar-4")
    assert parse_model(to_toml(data)).spec == load_model("pulsar-4").spec
    assert tomllib.loads(to_toml(data)) == data


def test_the_mutants_of_pulsar_4_are_every_single_change() -> None:
    data, _ = read_model_data("pulsar-4")
    found = list(mutants(data))
    ids = [m.id for m in found]
    assert len(ids) == len(set(ids)), "mutant ids name one mutant each"
    kinds = Counter(m.kind for m in found)
    edges = data["transitions"]
    assert kinds[MutantKind.REMOVE_EDGE] == len(edges)
    assert kinds[MutantKind.REMOVE_CHECK] == sum(len(e.get("checks", [])) for e in edges)
    states = data["states"]
    declared = {(e["from"], e["to"]) for e in edges}
    assert kinds[MutantKind.ADD_EDGE] == len(states) * (len(states) - 1) - len(declared)
    assert kinds[MutantKind.REMOVE_OVERRIDE] == len(data["overrides"])
    assert kinds[MutantKind.RESOLVER] == 5, "versioned, force, two gap policies, the first-write rule"
    for mutant in found:
        assert mutant.data != data, f"{mutant.id} changes nothing"


def test_a_mutant_changes_what_its_id_says() -> None:
    data, _ = read_model_data("pulsar-4")
    by_id: dict[str, Mutant] = {m.id: m for m in mutants(data)}
    removed = by_id["remove-check Owned->Releasing src-is-prev-dst"].data
    edge = next(e for e in removed["transitions"] if (e["from"], e["to"]) == ("Owned", "Releasing"))
    assert "src-is-prev-dst" not in edge["checks"]
    assert edge["checks"]
    moved = by_id["move-state Assigning out of in_flight"].data
    assert "Assigning" not in moved["in_flight"]
    assert "Releasing" in moved["in_flight"]
    assert by_id["resolver force=false"].data["resolver"]["force"] is False


def test_a_variant_file_is_refused_as_a_mutation_target() -> None:
    with pytest.raises(ModelError, match="mutate a whole model"):
        read_model_data("pulsar-4-bug-20110")


# -- the battery on a mutant ------------------------------------------------------------------------------
SMALL = (Probe("check default", "check"),)


def test_the_battery_passes_the_original_and_kills_a_mutant(tmp_path: Path) -> None:
    data, _ = read_model_data("pulsar-4")
    original = tmp_path / "original.toml"
    original.write_text(to_toml(data), encoding="utf-8")
    assert run_battery(str(original), SMALL, ["system-topic"], coverage=False) == ("", "")
    by, said = run_battery(_mutant(tmp_path, "remove-edge Owned->Splitting"), SMALL, ["system-topic"], coverage=False)
    assert by == "check default (system-topic)"
    # refused before searching: the report says what the model's own checks found, not just "incomplete"
    assert "unreachable from Init: Deleted, Splitting" in said
    assert "incomplete" not in said


def test_a_mutation_report_page_says_what_ran_and_how_long() -> None:
    report = Report(
        "models/pulsar-4.toml",
        [
            Outcome("remove-edge A->B", MutantKind.REMOVE_EDGE, Verdict.KILLED, "check default", "single-owner | x"),
            Outcome("add-edge B->A", MutantKind.ADD_EDGE, Verdict.EQUIVALENT, "no run takes it"),
        ],
        1234.4,
        jobs=2,
        equivalents="models/equivalent/pulsar-4.toml",
    )
    page = report.markdown().splitlines()
    assert page[0] == "# Mutants of pulsar-4"
    assert "2 mutants in 1,234 s, 2 at a time" in page[2]
    assert "`models/equivalent/pulsar-4.toml`" in page[2]
    assert "| remove-edge A->B | killed | check default | single-owner \\| x |" in page
    assert "| add-edge B->A | equivalent |  | no run takes it |" in page
    summary = "2 mutants: 1 killed, 0 refused, 0 survived, 1 equivalent; killed 100.0% of those not argued equivalent."
    assert summary in page


def test_the_coverage_guard_kills_an_added_edge_nothing_takes(tmp_path: Path) -> None:
    data, _ = read_model_data("pulsar-4")
    original = tmp_path / "original.toml"
    original.write_text(to_toml(data), encoding="utf-8")
    _, before = run_battery(str(original), SMALL, ["system-topic"])
    assert "Free -> Owned" not in before
    by, said = run_battery(_mutant(tmp_path, "add-edge Free->Owned"), SMALL, ["system-topic"])
    assert by == "coverage (system-topic)"
    assert "Free -> Owned" in said


def test_a_saved_scenario_kills_the_mutant_it_was_found_on_and_passes_the_original(tmp_path: Path) -> None:
    # the store's version gate: its race needs a 252,574-state search, so the battery replays its run
    replay = next(p for p in BATTERY if p.kind == "replay")
    data, _ = read_model_data("pulsar-4")
    original = tmp_path / "original.toml"
    original.write_text(to_toml(data), encoding="utf-8")
    assert run_battery(str(original), (replay,), ["metadata-store"], coverage=False) == ("", "")
    mutant = _mutant(tmp_path, "resolver version_gap MetadataStore=accept")
    by, said = run_battery(mutant, (replay,), ["metadata-store"], coverage=False)
    assert by == "replay store-version-gap (metadata-store)"
    assert said.startswith("single-owner")
    # a mutant the scenario cannot tell (another store's rule) goes through it
    other = _mutant(tmp_path, "resolver version_gap SystemTopic=reject")
    assert run_battery(other, (replay,), ["metadata-store"], coverage=False) == ("", "")


def test_the_default_battery_reads_as_documented() -> None:
    stores = Counter(p.store for p in BATTERY)
    assert stores["system-topic"]
    assert stores["metadata-store"]
    assert all(p.kind in ("graph", "check", "simulate", "replay") for p in BATTERY)
    for probe in BATTERY:
        if probe.kind == "replay":  # every saved scenario the battery names ships with the models
            assert builtin_data_file("scenarios", str(probe.options["run"])).is_file()
    assert BATTERY[0].kind == "graph", "the cheapest probe first"
    assert {v.value for v in Verdict} == {"killed", "refused", "survived", "equivalent"}


def test_equivalence_arguments_are_checked_for_shape(tmp_path: Path) -> None:
    good = tmp_path / "eq.toml"
    good.write_text('[equivalent]\n"remove-override Owned->Free" = "never taken"\n', encoding="utf-8")
    assert load_equivalents(good) == {"remove-override Owned->Free": "never taken"}
    bad = tmp_path / "bad.toml"
    bad.write_text("[equivalent]\nx = 1\n", encoding="utf-8")
    with pytest.raises(ValueError, match="mutant id"):
        load_equivalents(bad)


def test_a_transition_taken_but_not_declared_is_reported() -> None:
    model = load_model("pulsar-4")
    taken = {("Owned", "Releasing"): Counter(transfer=1), ("Owned", "Assigning"): Counter(step=2)}
    assert undeclared_edges(model, StorageType.SystemTopic, [taken]) == [("Owned", "Assigning")]
    first = {("Init", "Owned"): Counter(step=1)}
    assert undeclared_edges(model, StorageType.MetadataStore, [first]) == [], "the store's first write skips the table"
    assert undeclared_edges(model, StorageType.SystemTopic, [first]) == []
    tombstone = {("Free", "Init"): Counter(tick=1)}
    assert undeclared_edges(model, StorageType.MetadataStore, [tombstone]) == [], "the store deletes the node"


# -- the simulator's guard ---------------------------------------------------------------------------------
def test_a_run_is_asked_only_for_the_flows_its_events_started() -> None:
    demanded = demanded_by_events({"lookup": 3, "transfer": 4, "unload": 5, "split": 3}, 3, StorageType.SystemTopic)
    assert set(demanded) == {"assign", "unload", "split", "tombstone"}, "four transfers may all be refused"
    assert "transfer" not in demanded_by_events({"lookup": 1, "transfer": 9}, 1, StorageType.SystemTopic)
    assert demanded_by_events({}, 3, StorageType.SystemTopic) == {}


@pytest.mark.parametrize("store", [StoreKind.system_topic, StoreKind.metadata_store])
def test_a_simulated_run_of_a_protocol_that_cannot_transfer_says_so(tmp_path: Path, store: StoreKind) -> None:
    from statechan.cluster.config import SimConfig
    from statechan.cluster.runner import Simulation

    def run(model: str) -> list[str]:
        config = SimConfig(brokers=3, bundles_per_namespace=8, seed=7, store=store, variant=Variant(model=model))
        return Simulation(config).run(3_600_000).never_reached

    assert run("pulsar-4") == []
    gaps = run(_mutant(tmp_path, "remove-edge Owned->Releasing"))
    assert [gap.split(" (")[0] for gap in gaps] == ["never reached: flow transfer", "never reached: flow unload"]


def test_the_trace_coverage_folds_as_a_reader_does() -> None:
    model = load_model("pulsar-4")
    owned = {"state": "Owned", "dstBroker": "b1", "versionId": 2}
    trace: list[dict[str, object]] = [
        {"kind": "channel", "key": "k", "value": {"state": "Assigning", "dstBroker": "b1", "versionId": 1}},
        {"kind": "channel", "key": "k", "value": owned},
        {"kind": "channel", "key": "k", "value": owned},  # the same version again: refused
        {"kind": "view", "key": "k", "value": owned},
        {"kind": "channel", "key": "k", "value": {"state": "Nope"}},  # unreadable: left out
        {"kind": "channel", "key": "k", "value": None},  # the tombstone
    ]
    coverage = trace_coverage(trace, model, StorageType.SystemTopic)
    assert {edge: sum(c.values()) for edge, c in coverage.items()} == {
        ("Init", "Assigning"): 1,
        ("Assigning", "Owned"): 1,
        ("Owned", "Init"): 1,
    }


def test_a_forced_record_counts_for_the_forced_flows_alone() -> None:
    model = load_model("pulsar-4")
    forced = {"state": "Owned", "dstBroker": "b2", "sourceBroker": "b1", "versionId": 3, "force": True}
    trace: list[dict[str, object]] = [
        {"kind": "channel", "key": "k", "value": {"state": "Assigning", "dstBroker": "b1", "versionId": 1}},
        {"kind": "channel", "key": "k", "value": forced},  # the clean-up's override of the orphan
    ]
    coverage = trace_coverage(trace, model, StorageType.SystemTopic)
    assert coverage[("Assigning", "Owned")] == Counter({FORCED + "record": 1})
    demanded = {"assign": "a lookup", "cleanup": "a crash"}
    # the override walks the clean-up's path, not the assignment's Assigning -> Owned
    assert [g.flow for g in unreached_flows(model, coverage, demanded)] == ["assign"]


def test_a_flow_the_model_cannot_do_at_all_is_named() -> None:
    model = load_model("pulsar-4-bug-19546")
    assert "compaction-cut" not in [f.name for f in model.spec.flows]
    gaps = unreached_flows(model, {}, {"compaction-cut": "a compaction"})
    assert [str(g) for g in gaps] == [
        "never reached: flow compaction-cut (demanded by a compaction); the model declares no such flow"
    ]


# -- why the broker checks' mutants survive: the version gate decides first -------------------------------
@pytest.mark.parametrize(
    ("bounds", "store"),
    [
        (Bounds(lookups=2, admin=0), StoreKind.system_topic),
        (Bounds(lookups=2, admin=0, crashes=1, ticks=3), StoreKind.system_topic),
        (Bounds(lookups=2, admin=0), StoreKind.metadata_store),
    ],
    ids=["2 lookups", "2 lookups, crash", "2 lookups, metadata store"],
)
def test_no_broker_check_or_table_edge_refuses_a_record_the_version_gate_lets_through(
    monkeypatch: pytest.MonkeyPatch, bounds: Bounds, store: StoreKind
) -> None:
    """Pins the equivalence argument of the remove-check mutants (models/pulsar-4.equivalent.toml):
    a writer's record carries the version it holds plus one, so a reader holding that version holds
    the writer's own value, from which the protocol's writers derive only valid transitions."""
    import statechan.cluster.protocol as protocol
    import statechan.resolver as resolver
    import statechan.stores.tableview as tableview

    refused: Counter[Reason] = Counter()
    decide = resolver.decide

    def counting(rules: Any, prev: Any, new: Any, check_brokers: bool = True) -> resolver.Verdict:
        verdict = decide(rules, prev, new, check_brokers)
        if not verdict.accepted:
            refused[verdict.reason] += 1
        return verdict

    monkeypatch.setattr(resolver, "decide", counting)
    monkeypatch.setattr(tableview, "decide", counting)
    monkeypatch.setattr(protocol, "decide", counting)
    result = check(bounds, store)
    assert result.ok
    assert refused, "the bound makes stale writes (otherwise it shows nothing)"
    assert set(refused) <= {Reason.STALE_VERSION, Reason.VERSION_GAP_REJECTED, Reason.FIRST_WRITE_NOT_V1}, refused
