"""Findings about the current protocol (docs/findings.md), pinned so that a change to the model
that makes them disappear or change is noticed."""

from __future__ import annotations

from pathlib import Path

import pytest

from properties.bench import timeline_check, violations_of
from statechan import ServiceUnitState
from statechan.cluster import (
    Cluster,
    Crash,
    Lookup,
    Restart,
    Shutdown,
    SimConfig,
    Split,
    StoreKind,
    Tick,
    Transfer,
)
from statechan.cluster.actions import Deliver, Notify, RunTask
from statechan.cluster.config import VARIANTS
from statechan.cluster.runfile import load_run, load_saved_run
from statechan.cluster.state import TaskKind

DOCS = Path(__file__).resolve().parent.parent / "docs"


def _replay_until_broken(name: str) -> tuple[Cluster, list[str], int]:
    """Replay a saved run on the current protocol, stopping at the first step that breaks an
    invariant; the cluster, the invariants broken there, and the run's length."""
    config, actions, _ = load_run(DOCS / "counterexamples" / name)
    assert config.variant == VARIANTS["current"]
    cluster = Cluster(config)
    broken: list[str] = []
    for action in actions:
        cluster.step(action)
        broken = [v.invariant for v in violations_of(cluster)]
        if broken:
            break
    return cluster, broken, len(actions)


def _assigned(config: SimConfig, via: str) -> tuple[Cluster, str, str]:
    """A cluster whose first bundle a lookup through ``via`` has assigned, everything delivered:
    the cluster, the bundle's key and the owner ``via`` reads."""
    c = Cluster(config)
    key = sorted(c.live_bundle_keys())[0]
    c.step(Lookup(via, key))
    c.drain()
    held = c.brokers[via].value(key)
    assert held is not None
    assert held.dst_broker is not None
    return c, key, held.dst_broker


def test_a_split_handed_over_after_a_session_blip_leaves_two_owners_for_a_moment() -> None:
    cluster, broken, steps = _replay_until_broken("finding-split-handover.json")
    assert set(broken) == {"single-owner"}
    assert len(cluster.history) == steps  # it is the last step that shows it
    cluster.drain()  # once the handed-over split is read, the overlap is gone
    assert violations_of(cluster) == []


def test_a_restarted_owner_registering_again_after_the_leaders_clean_up_leaves_two_owners_for_a_moment() -> None:
    """Finding 4's window on a plain Owned bundle, as the model checker found it (14 steps)."""
    saved = load_saved_run(DOCS / "counterexamples" / "checker-finding-4.json")
    assert saved.config.variant == VARIANTS["current"]
    cluster, actions = Cluster(saved.config, picks=list(saved.picks or [])), saved.actions
    for action in actions[:-1]:
        cluster.step(action)
        assert violations_of(cluster) == []
    cluster.step(actions[-1])  # the restarted broker registers again, its view still its own Owned
    assert {v.invariant for v in violations_of(cluster)} == {"single-owner"}
    cluster.drain()  # it reads the forced override, whose source it is, and lets go
    assert violations_of(cluster) == []


def test_a_forced_frees_delayed_tombstone_deletes_the_next_owners_record() -> None:
    """Finding 9: the source of a forced Free tombstones it after a new assignment owned the bundle.
    On the metadata store, B1 shuts down with nobody else registered (its clean-up's forced Free a
    compare-and-set still to come); B2 registers and starts before B1's clean-up wait ends, so B1's
    channel stays open (``disableBroker`` finds a broker available) and its tombstone lands on B2's
    ``Owned``."""
    config, actions, _ = load_run(DOCS / "counterexamples" / "finding-forced-free-tombstone.json")
    assert config.variant == VARIANTS["current"]
    cluster = Cluster(config)
    stepwise = timeline_check()  # the cluster invariants and the step invariants, as replay runs them
    stepwise.start(cluster)
    for action in actions[:-1]:
        cluster.step(action)
        assert stepwise(cluster) == []
    cluster.step(actions[-1])  # B1's tombstone of its forced Free, over B2's newer Owned
    assert actions[-1] == RunTask("broker-1:8080")
    assert [found.split(" ")[0] for found in stepwise(cluster)] == ["no-spurious-takeover"]
    assert cluster.channel() == {}  # every reader's value is gone
    assert cluster.registered("broker-2:8080")
    assert cluster.brokers["broker-1:8080"].shutting_down


def test_a_departing_brokers_clean_up_overrides_a_transfer_in_flight_from_a_live_source() -> None:
    """Finding 5: B1 transfers its bundle to B2; B2 reads the Releasing and shuts down gracefully.
    Its clean-up overrides what is active with it as destination, the transfer in flight
    included (Pulsar's ``doCleanup``/``overrideOwnership``): ``Owned dst=B3 src=B1 force``. B3
    reads it and serves while B1, the source, has read neither record: two owners until it does."""
    b1, b2, b3 = "broker-1:8080", "broker-2:8080", "broker-3:8080"
    c, key, owner = _assigned(SimConfig(brokers=3, store=StoreKind.system_topic, seed=4), b1)
    assert owner == b1
    c.step(Transfer(b1, key, b2))
    c.step(Deliver(b2))
    mark = len(c.trace)
    c.step(Shutdown(b2))
    (override,) = [r["value"] for r in c.trace[mark:] if r["kind"] == "channel"]
    assert override["state"] == "Owned"  # type: ignore[index]
    assert (override["dstBroker"], override["sourceBroker"], override["force"]) == (b3, b1, True)  # type: ignore[index]
    c.step(Deliver(b3))  # the Releasing
    assert violations_of(c) == []
    c.step(Deliver(b3))  # the override: b3 serves, b1 has not read a thing
    assert [v.invariant for v in violations_of(c)] == ["single-owner"]
    assert c.brokers[b1].serving() == {key}
    c.drain()  # b1 reads the override and closes
    assert violations_of(c) == []
    assert c.brokers[b1].serving() == set()


def test_an_admin_transfer_to_a_broker_out_of_the_registry_is_refused() -> None:
    """Pulsar's admin refuses a transfer whose destination is not among the available brokers
    (``setNamespaceBundleAffinityAsync``): the model neither offers nor runs one."""
    b1, b2 = "broker-1:8080", "broker-2:8080"
    c, key, _ = _assigned(SimConfig(brokers=3, store=StoreKind.system_topic, seed=4), b1)
    assert Transfer(b1, key, b2) in c.enabled_actions()
    c.step(Shutdown(b2))
    c.drain()
    assert Transfer(b1, key, b2) not in c.enabled_actions()
    with pytest.raises(ValueError, match="not registered"):
        c.step(Transfer(b1, key, b2))


def _split_with_children_pending() -> tuple[Cluster, str, str]:
    """On the metadata store: a bundle assigned, then split by its owner up to the point where its
    split task has prepared the children's writes. The cluster, the parent and the owner."""
    c, parent, owner = _assigned(SimConfig(brokers=2, store=StoreKind.metadata_store, seed=0), "broker-1:8080")
    c.step(Split(owner, parent))
    tasks = c.brokers[owner].tasks
    while not any(t.kind is TaskKind.split_bundles for t in tasks):
        c.step(RunTask(owner) if tasks else Notify(owner))
        tasks = c.brokers[owner].tasks
    assert [t.kind for t in tasks] == [TaskKind.commit, TaskKind.commit, TaskKind.split_bundles]
    return c, parent, owner


def test_a_split_child_cannot_be_looked_up_before_its_owned_record_is_written() -> None:
    """Finding 6 was the model's, not Pulsar's: a split updates the namespace's bundles only once
    its children's Owned writes are done (``ownChildBundles`` before the bundle update). On the
    metadata store those writes are compare-and-sets still to come when the split task has run;
    until they commit, a child is no bundle of the namespace and a lookup of it assigns nothing."""
    c, parent, owner = _split_with_children_pending()
    other = next(b for b in c.brokers if b != owner)
    children = sorted(t.key for t in c.brokers[owner].tasks if t.kind is TaskKind.commit)
    assert parent in c.live_bundle_keys()
    assert not set(children) & c.live_bundle_keys()
    c.step(Lookup(other, children[0]))
    assert c.answers[-1].error == "bundle not in the namespace's bundles"
    c.drain()
    assert violations_of(c) == []
    assert parent not in c.live_bundle_keys()
    assert set(children) <= c.live_bundle_keys()
    assert {c.brokers[other].value(k).dst_broker for k in children} == {owner}  # type: ignore[union-attr]


def test_a_split_whose_child_write_loses_its_compare_and_set_goes_on() -> None:
    """``MetadataStoreTableViewImpl.put`` turns a lost compare-and-set into a ``ConflictException``,
    which ``ServiceUnitStateMetadataStoreTableViewImpl.put`` completes as success: the split goes
    on, the bundles change and the parent is deleted, the child left to whoever won its key."""
    c, parent, owner = _split_with_children_pending()
    first_child = next(t.key for t in c.brokers[owner].tasks if t.kind is TaskKind.commit)
    c.put_node_from_outside(first_child, b"{}")  # a node appears before the create
    c.drain()
    assert c.counters["split-failed"] == 0
    assert parent not in c.failed_splits
    assert parent not in c.live_bundle_keys()
    assert c.brokers[owner].value(parent) is None
    assert c.brokers[owner].value(first_child) is None  # the other writer's node, not a record


def test_the_monitor_hands_a_stuck_split_to_another_broker_while_its_restarted_source_holds_it() -> None:
    """Finding 7: a Splitting whose source crashed and came back is never acted on (finding 2);
    the leader's monitor, 60 s on, hands it to the broker placement picks, and until the old
    source reads that, both hold the parent as their own."""
    b1, b2, b3 = "broker-1:8080", "broker-2:8080", "broker-3:8080"
    c, key, owner = _assigned(SimConfig(brokers=3, store=StoreKind.system_topic, seed=5), b2)
    assert owner == b3
    for action in (Split(b3, key), Crash(b3), Restart(b3)):
        c.step(action)
    c.drain()
    assert c.brokers[b3].serving() == {key}  # its Splitting, which the new incarnation leaves alone
    written: list[dict[str, object]] = []
    for _ in range(10):  # timers, each followed by everything it sets off, until the leader writes
        mark = len(c.trace)
        c.step(Tick())
        written = [r for r in c.trace[mark:] if r["kind"] == "channel"]
        if written:
            break
        c.drain()
    assert c.clock.now_ms() - c.config.start_ms == 60_000  # the monitor: 30 s in flight, at its 60 s run
    assert c.leader() == b1
    (override,) = written
    assert override["value"]["state"] == "Splitting"  # type: ignore[index]
    assert (override["value"]["sourceBroker"], override["value"]["force"]) == (b2, True)  # type: ignore[index]
    assert violations_of(c) == []
    c.step(Deliver(b2))  # the new source reads it first
    assert [v.invariant for v in violations_of(c)] == ["single-owner"]
    c.drain()  # b2 completes the split; b3 reads the override and lets go
    assert violations_of(c) == []
    assert c.brokers[b3].serving() == set()
    assert len(c.brokers[b2].serving()) == 2  # the children


def test_a_create_prepared_before_a_split_lands_after_the_parent_is_deleted() -> None:
    """Finding 8 (metadata store): a lookup's Assigning is read and resolved while the key has no
    node; its compare-and-set create runs only after the bundle was assigned, split, Deleted and
    deleted, and succeeds, since the node is absent again: the parent is assigned afresh while its
    children are owned."""
    from properties.bench import history_violations_of
    from statechan.cluster.runfile import load_saved_run, replay

    saved = load_saved_run(DOCS / "counterexamples" / "finding-cas-create-after-delete.json")
    assert saved.config.variant == VARIANTS["current"]
    cluster = replay(saved.config, saved.actions, saved.picks)
    assert violations_of(cluster) == []  # no step's cluster invariants: the history shows it
    found = history_violations_of(cluster)
    parent = "tenant/ns-0/0x00000000_0xffffffff"
    assert [(v.invariant, v.key, v.offset) for v in found] == [("single-owner", parent, 30)]
    written = [r["value"] for r in cluster.trace if r["kind"] == "channel" and r["key"] == parent]
    states = [None if value is None else value["state"] for value in written]  # type: ignore[index]
    assert states == ["Assigning", "Owned", "Splitting", "Deleted", None, "Assigning", "Owned"]


def test_a_lookups_late_assignment_names_a_broker_that_closed_at_once() -> None:
    """Finding 12 (a candidate): B1 selects B2 for a lookup, then loses its session (its registry
    node goes); B2 shuts down owning nothing, finds nobody available and closes at once
    (``disableBroker``); B1, reading the registry through its cache, still publishes
    ``Assigning dst=B2``, which nobody acts on until a leader cleans up. Not B2's departure left
    incomplete (``departure-complete`` holds) but another broker's write after it, reported on
    request by ``departed-not-assigned``."""
    from statechan.invariants.catalogue import check

    saved = load_saved_run(DOCS / "counterexamples" / "hazards" / "checker-finding-12.json")
    assert saved.config.variant == VARIANTS["current"]
    cluster = Cluster(saved.config, picks=saved.picks)
    for action in saved.actions:
        cluster.step(action)
    assert violations_of(cluster) == []
    found = check(cluster.observe(), ("departure-complete", "departed-not-assigned"))
    assert [(v.invariant, v.key) for v in found] == [("departed-not-assigned", "tenant/ns-0/0x00000000_0xffffffff")]
    assert cluster.counters["closed-at-once"] == 1
    held = cluster.brokers["broker-1:8080"].value("tenant/ns-0/0x00000000_0xffffffff")
    assert held is not None
    assert (held.state, held.dst_broker) == (ServiceUnitState.Assigning, "broker-2:8080")
    assert cluster.state.named_late == {("tenant/ns-0/0x00000000_0xffffffff", 1, 1)}


def test_a_departing_broker_that_registers_again_is_assigned_a_bundle_it_never_takes() -> None:
    """Finding 13 (a candidate, master as it is: ``master-24371``): B2 shuts down owning nothing and
    unregisters; it reads its own node's deletion after ``BrokerRegistryImpl.unregister`` set its state
    back to ``Started`` and registers again. B1's lookup, which chose B2 before, checks B2 is
    registered (#26520's check) and publishes ``Assigning dst=B2``, which B2's disabled channel never
    takes; B2's process then ends and the record names a departed broker. Without the
    re-registration (the model's default order) the same run re-selects B1 and breaks nothing."""
    saved = load_saved_run(DOCS / "counterexamples" / "checker-finding-13.json")
    assert saved.config.variant == VARIANTS["master-24371"]
    key = "tenant/ns-0/0x00000000_0xffffffff"
    cluster = Cluster(saved.config, picks=saved.picks)
    registered: list[bool] = []
    for action in saved.actions:
        cluster.step(action)
        registered.append(cluster.registered("broker-2:8080"))
    assert registered.index(False) < registered.index(True, registered.index(False))  # out, then in again
    assert [(v.invariant, v.key) for v in violations_of(cluster)] == [("departure-complete", key)]
    held = cluster.brokers["broker-1:8080"].value(key)
    assert held is not None
    assert (held.state, held.dst_broker) == (ServiceUnitState.Assigning, "broker-2:8080")
    assert not cluster.brokers["broker-2:8080"].alive
    current = Cluster(saved.config.model_copy(update={"variant": VARIANTS["current"]}), picks=saved.picks)
    for action in saved.actions:
        if action in current.enabled_actions():
            current.step(action)
    assert violations_of(current) == []
    assert not current.registered("broker-2:8080")


@pytest.mark.parametrize("machine", ["SystemTopicBench", "SyncerBench"])
def test_a_restarted_last_broker_leaves_its_previous_incarnations_forced_free_to_the_monitor(machine: str) -> None:
    """Finding 2's second form through a shutdown: the last broker's clean-up writes a forced Free
    (no broker to select) and its channel closes at once, before it reads it; restarted, the broker
    reads it as existing and does not tombstone it. ``release-acted-on`` (named) reports it;
    ``semi-terminal-tombstoned`` keeps to the records of the incarnation that runs."""
    from statechan.cluster.runfile import replay
    from statechan.invariants.catalogue import check

    saved = load_saved_run(DOCS / "counterexamples" / "hazards" / f"bench-current-{machine}.json")
    cluster = replay(saved.config, saved.actions, saved.picks)
    assert violations_of(cluster) == []
    key = "tenant/ns-0/0x00000000_0xffffffff"
    found = check(cluster.observe(), ("release-acted-on", "semi-terminal-tombstoned"))
    assert [(v.invariant, v.key) for v in found] == [("release-acted-on", key)]
    held = cluster.brokers["broker-3:8080"].value(key)
    assert held is not None
    assert (held.state, held.force) == (ServiceUnitState.Free, True)
    assert cluster.counters["closed-at-once"] >= 1


def test_a_shutdown_that_closes_at_once_leaves_no_timer_to_its_next_incarnation() -> None:
    """The bench's metadata-store run of the current protocol was the model's error: the clean-up
    wait's timer of a shutdown that closed at once (a broker with no timer of its own, no other
    broker registered) survived, and shut the restarted broker down (the run's first four steps)."""
    saved = load_saved_run(Path(__file__).parent / "data" / "model-error-stale-shutdown-timer.json")
    c = Cluster(saved.config)
    for action in saved.actions[:4]:  # B1 loses its session, B3 shuts down, B1 crashes, B2 shuts down
        c.step(action)
    assert [a.describe() for a in saved.actions[:4]][-1] == "shutdown(broker-2:8080)"
    assert c.counters["closed-at-once"] == 1
    b2 = c.brokers["broker-2:8080"].index
    assert not c.state.brokers[b2].alive
    assert [t.kind.value for t in c.state.timers if t.broker == b2 and t.kind.value != "session-expiry"] == []
