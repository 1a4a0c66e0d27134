"""Scenarios of Pulsar's ServiceUnitStateChannelTest on the simulator, for both table views.

Each test drives the cluster with explicit actions, so every interleaving is the one named.
"""

from __future__ import annotations

from collections import Counter

import pydantic
import pytest

from statechan import ServiceUnitState, ServiceUnitStateData, StorageType
from statechan.cluster import (
    ChannelConfig,
    Cluster,
    Crash,
    Lookup,
    LoseSession,
    Reconnect,
    RunTask,
    SimConfig,
    Split,
    StoreKind,
    Tick,
    Transfer,
    Unload,
)
from statechan.cluster.protocol import Tx
from statechan.cluster.state import Rec, TaskKind, broker_id, broker_name
from statechan.invariants.catalogue import check, check_trace

S = ServiceUnitState
B1, B2, B3 = "broker-1:8080", "broker-2:8080", "broker-3:8080"
STORES = [StoreKind.system_topic, StoreKind.metadata_store]


def cluster(store: StoreKind, brokers: int = 3, **channel: int) -> Cluster:
    cfg = SimConfig(brokers=brokers, store=store, channel=ChannelConfig.model_validate(channel))
    return Cluster(cfg)


def key0(c: Cluster) -> str:
    return sorted(c.live_bundle_keys())[0]


def assign(c: Cluster, key: str, via: str = B1) -> str:
    c.step(Lookup(via, key))
    c.drain()
    owner = c.brokers[via].value(key)
    assert owner is not None
    assert owner.state is S.Owned
    assert owner.dst_broker is not None
    return owner.dst_broker


def no_violations(c: Cluster) -> None:
    assert [str(v) for v in check(c.observe())] == []


@pytest.mark.parametrize("store", STORES)
def test_assignment_race_first_in_the_log_wins(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    c.step(Lookup(B1, key))
    c.step(Lookup(B2, key))
    assert [t.kind for t in c.brokers[B1].tasks] == [TaskKind.assign]
    assert [t.kind for t in c.brokers[B2].tasks] == [TaskKind.assign]
    target = c.brokers[B1].tasks[0].target
    assert target is not None
    first_target = broker_name(target)
    c.step(RunTask(B1))  # broker-1 publishes Assigning v1 first
    c.step(RunTask(B2))  # broker-2's Assigning v1 loses: same version
    c.drain()
    views = c.views()
    assert {v[key].dst_broker for v in views.values()} == {first_target}
    answers = {a.broker: a.owner for a in c.answers if a.bundle == key}
    assert answers == {B1: first_target, B2: first_target}
    for broker in c.brokers.values():  # validateHandlerCounters(channel, 1, 0, 1, 0, ...): the loser is not handled
        assert +broker.handled == Counter({"Assigning": 1, "Owned": 1})
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_transfer_handler_counts(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    target = next(b for b in (B1, B2, B3) if b != owner)
    c.step(Transfer(B1, key, target))
    c.drain()
    for broker in c.brokers.values():
        assert (broker.handled["Assigning"], broker.handled["Owned"], broker.handled["Releasing"]) == (2, 2, 1)
    final = c.brokers[B3].value(key)
    assert final == c.brokers[B1].value(key)
    assert final is not None
    assert (final.state, final.dst_broker, final.source_broker) == (S.Owned, target, owner)
    assert c.brokers[owner].closed_units[key] == 2  # topics closed at Releasing, clients at Owned (PIP-307)
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_unload_frees_and_the_leader_tombstones_later(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    c.step(Unload(B2, key))
    c.drain()
    freed = c.brokers[B1].value(key)
    assert freed is not None
    assert (freed.state, freed.dst_broker, freed.source_broker) == (S.Free, None, owner)
    c.advance(3_600_000 + 120_000)
    assert all(key not in view for view in c.views().values())
    assert c.counters["monitor-tombstones"] == 1  # totalServiceUnitTombstoneCleanupCnt
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_split_owns_children_deletes_and_tombstones_the_parent(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    c.inject_split_failures(3)  # retried: fewer than the limit
    c.step(Split(owner, key))
    c.drain()
    children = sorted(k for k in c.live_bundle_keys() if k.startswith(key.rsplit("/", 1)[0]) and k != key)
    assert key not in c.live_bundle_keys()
    for view in c.views().values():
        assert key not in view
        for child in ("tenant/ns-0/0x00000000_0x3fffffff", "tenant/ns-0/0x3fffffff_0x7fffffff"):
            assert view[child] == ServiceUnitStateData(
                state=S.Owned, dst_broker=owner, version_id=1, timestamp=view[child].timestamp
            )
    assert c.split_failures == 0
    assert len(children) == 3
    for broker in c.brokers.values():  # splitAndRetryTest's handler counts, on every channel
        assert +broker.handled == Counter({"Assigning": 1, "Owned": 3, "Splitting": 1, "Deleted": 1, "Init": 1})
    overrides = c.counters["monitor-overrides"] + c.counters["monitor-tombstones"]
    c.advance(2 * 60_000)  # the monitor then finds nothing to do
    assert c.counters["monitor-overrides"] + c.counters["monitor-tombstones"] == overrides
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_split_that_keeps_failing_is_completed_by_the_leader(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    c.inject_split_failures(10)
    c.step(Split(owner, key))
    c.drain()
    assert c.split_failures == 3  # seven attempts used, as splitAndRetryFailureTest asserts
    stuck = c.brokers[B1].value(key)
    assert stuck is not None
    assert stuck.state is S.Splitting
    c.advance(30_000 + 2 * 60_000)  # past the in-flight wait, through the monitor
    assert key not in c.live_bundle_keys()
    assert all(key not in view for view in c.views().values())
    assert c.counters["monitor-overrides"] == 1  # totalOrphanServiceUnitCleanupCnt
    for broker in c.brokers.values():  # splitAndRetryFailureTest: the Splitting handled twice (failed, overridden)
        assert +broker.handled == Counter({"Assigning": 1, "Owned": 3, "Splitting": 2, "Deleted": 1, "Init": 1})
    no_violations(c)


def publish(tx: Tx, broker: str, key: str, value: ServiceUnitStateData | None) -> None:
    """``broker`` publishes ``value`` and, on the metadata store, runs the compare-and-set it queued."""
    i = broker_id(broker)
    tx.publish(i, key, None if value is None else Rec.of(value))
    while tx.brokers[i].tasks and tx.brokers[i].tasks[0].kind is TaskKind.commit:
        tx.run_task(i)


def write(c: Cluster, broker: str, key: str, value: ServiceUnitStateData) -> None:
    """Publish as ``broker`` (a handler driven directly, as Pulsar's channel tests do)."""
    c.run(lambda tx: publish(tx, broker, key, value))


def orphan_case(store: StoreKind, state: S) -> tuple[Cluster, str, str]:
    """A bundle left in ``state`` by broker-3, which then crashes and whose session expires."""
    c = cluster(store)
    key = key0(c)
    leader = B1
    assert c.leader() == B1
    values = {
        S.Owned: ServiceUnitStateData(state=S.Owned, dst_broker=B3, version_id=1),
        S.Assigning: ServiceUnitStateData(state=S.Assigning, dst_broker=B3, source_broker=B2, version_id=1),
        S.Releasing: ServiceUnitStateData(state=S.Releasing, dst_broker=B2, source_broker=B3, version_id=1),
        S.Splitting: ServiceUnitStateData(
            state=S.Splitting, source_broker=B3, version_id=1, split_service_unit_to_dest_broker={}
        ),
    }
    if state is S.Assigning:
        # an Assigning is first written as Assigning v1 on both stores
        write(c, leader, key, values[state])
    elif store is StoreKind.metadata_store:
        write(c, leader, key, ServiceUnitStateData(state=S.Assigning, dst_broker=B3, version_id=1))
        base = values[state]
        if state is S.Owned:
            write(c, leader, key, base.model_copy(update={"version_id": 2}))
        else:
            write(c, leader, key, ServiceUnitStateData(state=S.Owned, dst_broker=B3, version_id=2))
            write(c, leader, key, base.model_copy(update={"version_id": 3, "dst_broker": base.dst_broker}))
    else:
        write(c, leader, key, values[state])
    c.step(Crash(B3))
    c.drain()
    return c, key, leader


@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("state", [S.Owned, S.Assigning, S.Releasing, S.Splitting])
def test_orphan_override_outcome_per_state(store: StoreKind, state: S) -> None:
    c, key, _ = orphan_case(store, state)
    c.advance(30_000 + 1_000)  # the session expires, the leader cleans up at once (Stable)
    c.advance(2 * 60_000)
    final = c.brokers[B1].value(key)
    if state is S.Splitting:
        assert key not in c.live_bundle_keys()  # completed by the selected broker
        assert final is None
    else:
        assert final is not None
        assert final.state is S.Owned
        assert final.dst_broker in (B1, B2)
        if state is S.Owned:
            assert final.source_broker == B3
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_orphans_become_free_when_no_broker_can_take_them(store: StoreKind) -> None:
    c = cluster(store, brokers=1)
    key = key0(c)
    assign(c, key)
    c.run(lambda tx: tx.override_ownership(0, key, tx.brokers[0].view.get(key), 0, False))  # type: ignore[arg-type]
    c.drain()
    written = [r["value"] for r in c.trace if r["kind"] == "channel" and r["key"] == key]
    assert written[-2] is not None
    assert (written[-2]["state"], written[-2]["force"], written[-2]["sourceBroker"]) == (  # type: ignore[index]
        "Free",
        True,
        B1,
    )
    assert written[-1] is None  # a forced Free is tombstoned by its source at once (#22743)
    assert c.brokers[B1].value(key) is None


@pytest.mark.parametrize("store", STORES)
def test_cleanup_scheduling_follows_the_metadata_state(store: StoreKind) -> None:
    # Stable: immediately; Jittery: after 180 s; Unstable: ignored
    c = cluster(store)
    leader = c.brokers[B1]
    c.step(Crash(B3))
    c.advance(30_000)  # session expiry; the leader sees broker-3 go
    assert c.counters["cleanup-overrides"] == 0  # broker-3 owned nothing
    assert B3 not in leader.cleanup_jobs  # ran at once (Stable)
    assert leader.metadata_state().value == "Stable"

    c2 = cluster(store)
    leader2 = c2.brokers[B1]
    c2.step(LoseSession(B1))
    assert leader2.pending_notifications
    c2.drain()
    assert leader2.metadata_state().value == "Unstable"
    c2.step(Reconnect(B1))
    c2.drain()
    assert leader2.metadata_state().value == "Jittery"


def test_a_store_view_traces_what_it_reloads_when_its_session_comes_back() -> None:
    c = cluster(StoreKind.metadata_store)
    key = key0(c)
    assign(c, key)
    held = c.brokers[B2].value(key)
    assert held is not None
    c.step(LoseSession(B2))
    c.drain()
    c.step(Reconnect(B2))
    c.drain()
    seen = [r["value"] for r in c.trace if r["kind"] == "view" and r["observer"] == B2 and r["key"] == key]
    assert seen[-2:] == [None, held.model_dump(mode="json", by_alias=True)]  # dropped, then reloaded
    assert c.brokers[B2].value(key) == held
    assert check_trace(c.trace, StorageType.MetadataStore) == []


@pytest.mark.parametrize("store", STORES)
def test_jittery_leader_delays_cleanup_by_180_seconds(store: StoreKind) -> None:
    from statechan.cluster import Notify, Resign

    c = cluster(store)
    c.step(LoseSession(B1))  # the leader's session goes, and leadership with it
    c.drain()
    c.step(Reconnect(B1))
    c.drain()
    assert c.leader() not in (None, B1)
    c.step(Resign(str(c.leader())))
    c.step(Notify(B1))  # broker-1 hears first and takes the lead back, 0 s after its session came back
    assert c.leader() == B1
    leader = c.brokers[B1]
    assert leader.metadata_state().value == "Jittery"
    c.drain()
    c.step(Crash(B3))
    c.advance(30_000)
    job = leader.cleanup_jobs.get(B3)
    assert job is not None
    assert job.due - c.clock.now_ms() == 180_000  # scheduleCleanup(broker, 180 s) when the deletion is seen


@pytest.mark.parametrize("store", STORES)
def test_lookups_per_state(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    b2 = c.brokers[B2]

    def answer_of(value: ServiceUnitStateData) -> tuple[str | None, str | None, bool]:
        """broker-2's answer once its view holds ``value`` (nobody else acts meanwhile)."""

        def hold(tx: Tx) -> None:
            publish(tx, B1, key, None)
            publish(tx, B1, key, value)
            tx.catch_up(1)
            while tx.notify(1):
                pass

        c.run(hold)
        assert b2.value(key) == value
        before = len(c.answers)
        c.run(lambda tx: tx.lookup(1, key))
        if len(c.answers) == before:

            def forget(tx: Tx) -> None:
                broker = tx.b(1)
                broker.lookups = {k: at for k, at in broker.lookups.items() if k != key}
                broker.tasks = ()

            c.run(forget)
            return (None, None, True)
        a = c.answers[-1]
        return (a.owner, a.error, False)

    v = ServiceUnitStateData
    assert answer_of(v(state=S.Assigning, dst_broker=B3, version_id=1)) == (B3, None, False)
    assert answer_of(v(state=S.Assigning, dst_broker=B2, version_id=1)) == (None, None, True)  # deferred
    # the metadata store takes any first write of a node (version 1), as its view's put does
    assert answer_of(v(state=S.Owned, dst_broker=B3, version_id=1)) == (B3, None, False)
    assert answer_of(v(state=S.Splitting, source_broker=B3, version_id=1)) == (B3, None, False)
    assert answer_of(v(state=S.Releasing, dst_broker=B3, source_broker=B1, version_id=1)) == (B3, None, False)
    assert answer_of(v(state=S.Releasing, source_broker=B1, version_id=1)) == (None, None, False)
    deleted = answer_of(v(state=S.Deleted, source_broker=B1, version_id=1))
    assert deleted[1] is not None
    assert "is deleted" in deleted[1]


@pytest.mark.parametrize("store", STORES)
def test_a_lookup_waiting_on_an_in_flight_bundle_times_out(store: StoreKind) -> None:
    c = cluster(store)
    key = key0(c)
    b1 = c.brokers[B1]
    write(c, B1, key, ServiceUnitStateData(state=S.Assigning, dst_broker=B1, version_id=1, timestamp=c.clock.now_ms()))
    c.run(lambda tx: tx.catch_up(0))
    assert [t.kind for t in b1.tasks] == [TaskKind.own]  # queued, never run in this test
    c.run(lambda tx: tx.lookup(0, key))
    c.run(lambda tx: tx.lookup(0, key))
    assert list(b1.pending_lookups) == [key]  # one deferred request per bundle
    start = c.clock.now_ms()
    while key in b1.pending_lookups:
        c.step(Tick())
    assert c.clock.now_ms() - start == 30_000
    answers = [a for a in c.answers if a.broker == B1 and a.bundle == key]
    assert len(answers) == 1
    assert answers[0].error is not None
    assert "timed out in Assigning" in answers[0].error


def test_invalid_configuration_names_the_setting() -> None:
    with pytest.raises(pydantic.ValidationError, match="loadBalancerServiceUnitStateTombstoneDelayTimeInSeconds"):
        ChannelConfig(tombstone_delay_s=10)
    with pytest.raises(pydantic.ValidationError, match="in_flight_wait_ms"):
        ChannelConfig(in_flight_wait_ms=0)
    assert (
        ChannelConfig.model_validate({"loadBalancerServiceUnitStateMonitorIntervalInSeconds": 5}).monitor_interval_s
        == 5
    )


def test_pulsar_defaults() -> None:
    cfg = ChannelConfig()
    assert (
        cfg.in_flight_wait_ms,
        cfg.monitor_interval_s,
        cfg.tombstone_delay_s,
        cfg.multi_phase_unload,
        cfg.max_concurrent_overrides,
    ) == (30_000, 60, 3_600, True, 64)


@pytest.mark.parametrize("store", [*STORES, StoreKind.both])
def test_runs_replay_exactly(store: StoreKind) -> None:
    from statechan.cluster.runner import Simulation, Workload

    cfg = SimConfig(brokers=3, bundles_per_namespace=4, store=store, seed=7)
    first = Simulation(cfg, Workload(crashes_per_hour=3, session_losses_per_hour=3))
    first.run(3_600_000)
    second = Simulation(cfg, Workload(crashes_per_hour=3, session_losses_per_hour=3))
    second.run(3_600_000)
    assert first.cluster.history == second.cluster.history
    assert first.cluster.trace == second.cluster.trace
    replayed = Cluster(cfg)
    for action in first.cluster.history:
        replayed.step(action)
    assert replayed.trace == first.cluster.trace


def test_registry_and_leader_nodes() -> None:
    c = cluster(StoreKind.system_topic)
    assert sorted(broker_name(b) for b in c.state.store.registry) == [B1, B2, B3]
    assert c.leader() == B1
