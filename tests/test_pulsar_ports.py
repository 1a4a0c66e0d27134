"""Pulsar's ``ServiceUnitStateChannelTest`` ported to the simulator, one test per Pulsar test (or
per part of one), each run on both table views as Pulsar's ``@Factory`` runs the class.

Pulsar's tests mock what they do not test; the ports do the same with the simulator's own means:

- ``selectAsync`` mocked to return one broker: :class:`Pinned` placement;
- ``overrideTableViews`` written while the channels are disabled (their handlers do not act):
  :func:`hold`, which lets every view read the record and drops the follow-up work it queued;
- a table view whose ``put`` fails: :func:`fail_next`, which drops the broker's next queued write
  (nothing in Pulsar retries a failed put either);
- ``getOwnerAsync``: :func:`ask`, a lookup through the broker, seen as Pulsar's future would be seen
  (answered, deferred, or gone on to assign because the channel had no owner).

Each test names the Pulsar test it ports and asserts what that test asserts. The page
``docs/pulsar-channel-tests.md`` lists every Pulsar test and the port that covers it.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import pytest

from statechan import ServiceUnitState, ServiceUnitStateData
from statechan.cluster import (
    ChannelConfig,
    Cluster,
    Compact,
    Crash,
    Deliver,
    Lookup,
    LoseSession,
    Notify,
    Reconnect,
    Resign,
    Restart,
    RunTask,
    Shutdown,
    SimConfig,
    Split,
    StoreKind,
    Tick,
    Transfer,
    Unload,
)
from statechan.cluster.protocol import Tx
from statechan.cluster.state import ChannelState, TaskKind, TimerKind, broker_id, broker_name
from statechan.keys import parse_key
from statechan.stores import PATH_PREFIX, MetadataStoreTableView, Store, path_of
from statechan.stores.metadata import SessionEvent
from tests.channel_values import KEY, KEY2, v
from tests.test_channel_scenarios import B1, B2, B3, STORES, no_violations, publish

S = ServiceUnitState
V = ServiceUnitStateData
B4 = "broker-4:8080"


# -- what Pulsar's tests mock ----------------------------------------------------------------------------
@dataclass
class Pinned:
    """``loadManager.selectAsync`` mocked to answer one broker (None: no broker can be selected)."""

    broker: str | None

    def select(self, candidates: Sequence[str], loads: Any, rng: Any) -> str | None:
        return self.broker


def cluster(store: StoreKind, brokers: int = 2, select: str | None = B1, **settings: Any) -> Cluster:
    """Pulsar's two channels (``pulsar1``, ``pulsar2``) on one store, placement pinned as the test
    mocks it; more brokers where the test names a third."""
    namespaces = settings.pop("namespaces", 1)
    cfg = SimConfig(brokers=brokers, store=store, namespaces=namespaces, channel=ChannelConfig.model_validate(settings))
    c = Cluster(cfg)
    c.placement = Pinned(select)
    return c


def settle_views(c: Cluster) -> None:
    """Every view reads what was written (deliveries and notifications only: no handler's follow-up runs)."""
    while True:
        waiting = [a for a in c.work_actions() if isinstance(a, Deliver | Notify)]
        if not waiting:
            return
        c.step(waiting[0])


def hold(c: Cluster, key: str, value: ServiceUnitStateData | None, via: str = B1) -> None:
    """Pulsar's ``overrideTableViews`` (channels disabled, so no handler acts): ``key`` is deleted,
    then ``value`` written; every view holds it and the work the handlers queued is dropped."""
    c.run(lambda tx: publish(tx, via, key, None))
    settle_views(c)
    if value is not None:
        c.run(lambda tx: publish(tx, via, key, value))
        settle_views(c)

    def disabled(tx: Tx) -> None:
        for i, broker in enumerate(tx.brokers):
            if broker.alive and broker.tasks:
                tx.b(i).tasks = ()

    c.run(disabled)
    for broker in c.brokers.values():
        if broker.alive:
            assert broker.value(key) == value


def fail_next(c: Cluster, broker: str, kind: TaskKind) -> None:
    """The broker's table view fails its next write (Pulsar's tests make ``put`` return a failed
    future): its next queued task, which must be of ``kind``, is dropped unwritten."""
    tasks = c.brokers[broker].tasks
    assert tasks, f"{broker} has nothing queued"
    assert tasks[0].kind is kind, f"{broker}'s next task is {tasks[0].kind.value}, not {kind.value}"

    def drop(tx: Tx) -> None:
        b = tx.b(broker_id(broker))
        b.tasks = b.tasks[1:]

    c.run(drop)


def drain_failing(c: Cluster, broker: str, kind: TaskKind) -> None:
    """Take all waiting work as ``Cluster.drain`` does, but the first ``kind`` write of ``broker``
    fails (its table view's ``put`` is broken)."""
    failed = False
    while True:
        tasks = c.brokers[broker].tasks
        if not failed and tasks and tasks[0].kind is kind:
            fail_next(c, broker, kind)
            failed = True
            continue
        work = c.work_actions()
        if not work:
            break
        views = [a for a in work if isinstance(a, Deliver | Notify)]
        c.step(views[0] if views else work[0])
    assert failed, f"{broker} never wrote a {kind.value}"


@dataclass(frozen=True)
class Asked:
    """What ``getOwnerAsync`` gave, seen through a lookup: an owner or an error at once, a deferral
    (the future is not done), or nothing (the channel had no owner, so the load manager assigns)."""

    owner: str | None = None
    error: str | None = None
    deferred: bool = False
    assigns: bool = False


def ask(c: Cluster, broker: str, key: str, keep: bool = False) -> Asked:
    """``broker``'s ``getOwnerAsync(key)``, asked through a lookup. A deferred or assigning lookup is
    forgotten again unless ``keep`` (so the next question starts afresh, as a new future would)."""
    i = broker_id(broker)
    before = len(c.answers)
    pending = key in c.brokers[broker].pending_lookups
    tasks_before = len(c.brokers[broker].tasks)
    c.run(lambda tx: tx.lookup(i, key))
    if len(c.answers) > before:
        a = c.answers[-1]
        return Asked(owner=a.owner, error=a.error)
    queued = c.brokers[broker].tasks[tasks_before:]
    assigns = any(t.kind is TaskKind.assign for t in queued)
    assert assigns or key in c.brokers[broker].pending_lookups or pending
    if not keep:

        def forget(tx: Tx) -> None:
            b = tx.b(i)
            b.lookups = {k: at for k, at in b.lookups.items() if k != key}
            b.tasks = b.tasks[:tasks_before]

        c.run(forget)
    return Asked(assigns=assigns, deferred=not assigns)


def assign_to(c: Cluster, key: str, owner: str, via: str = B1) -> None:
    """``publishAssignEventAsync(key, owner)`` through ``via`` (a lookup with placement answering
    ``owner``), then every channel catches up; both channels then answer ``owner``."""
    pinned = c.placement
    c.placement = Pinned(owner)
    c.step(Lookup(via, key))
    c.drain()
    c.placement = pinned
    for name, broker in c.brokers.items():
        if broker.alive:
            held = broker.value(key)
            assert held is not None
            assert (held.state, held.dst_broker) == (S.Owned, owner), name


def pending(c: Cluster) -> dict[str, list[str]]:
    """``getOwnerRequests`` of every running channel."""
    return {name: sorted(b.pending_lookups) for name, b in c.brokers.items() if b.alive}


def now(c: Cluster) -> int:
    return c.clock.now_ms()


# -- a table view whose put fails ----------------------------------------------------------------------
@pytest.mark.parametrize("store", STORES)
def test_transferTestWhenDestBrokerFails(store: StoreKind) -> None:
    """``transferTestWhenDestBrokerFails``: a transfer to broker 2 whose ``put`` fails. Broker 1
    answers broker 2 at once, broker 2's own lookup waits and fails after the in-flight wait; once
    recovered, the leader's monitor overrides the stuck ``Assigning`` to the selected broker (broker 1),
    counted as one orphan clean-up."""
    c = cluster(store, select=B1)
    key = sorted(c.live_bundle_keys())[0]
    assign_to(c, key, B1)
    assert pending(c) == {B1: [], B2: []}
    c.step(Transfer(B1, key, B2))
    drain_failing(c, B2, TaskKind.own)  # channel 2 is broken: the ownership transfer won't complete
    for broker in (B1, B2):
        held = c.brokers[broker].value(key)
        assert held is not None
        assert held.state is not S.Owned
    assert ask(c, B1, key) == Asked(owner=B2)
    assert ask(c, B2, key, keep=True) == Asked(deferred=True)
    assert pending(c) == {B1: [], B2: [key]}
    start = now(c)
    while key in c.brokers[B2].pending_lookups:
        c.step(Tick())
    assert now(c) - start <= c.config.channel.in_flight_wait_ms
    failed = [a for a in c.answers if a.broker == B2 and a.bundle == key][-1]
    assert failed.owner is None
    assert failed.error is not None  # completed exceptionally
    assert pending(c) == {B1: [], B2: []}
    before = c.counters["monitor-overrides"]
    c.advance(60_000)  # recovered: the monitor finds the Assigning past the in-flight wait
    for broker in (B1, B2):
        held = c.brokers[broker].value(key)
        assert held is not None
        assert (held.state, held.dst_broker) == (S.Owned, B1)
        assert ask(c, broker, key) == Asked(owner=B1)
    assert c.counters["monitor-overrides"] - before == 1  # totalOrphanServiceUnitCleanupCnt
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_assignTestWhenDestBrokerProducerFails(store: StoreKind) -> None:
    """``assignTestWhenDestBrokerProducerFails``: a freed bundle assigned to broker 2 whose ``put``
    fails. The assigning broker answers broker 2 at once, broker 2's own lookup fails after the
    in-flight wait; once recovered, the monitor overrides the ``Assigning`` to ``Owned`` by the
    selected broker 2, one orphan clean-up."""
    c = cluster(store, select=B2)
    key = sorted(c.live_bundle_keys())[0]
    assign_to(c, key, B1)
    c.step(Unload(B1, key))
    c.drain()
    for broker in (B1, B2):
        held = c.brokers[broker].value(key)
        assert held is not None
        assert held.state is S.Free
    c.step(Lookup(B1, key))  # publishAssignEventAsync(bundle, brokerId2): selectAsync answers broker 2
    drain_failing(c, B2, TaskKind.own)  # channel 2 is broken: the assignment won't complete
    assert ask(c, B1, key) == Asked(owner=B2)
    assert ask(c, B2, key, keep=True) == Asked(deferred=True)
    start = now(c)
    while key in c.brokers[B2].pending_lookups:
        c.step(Tick())
    assert now(c) - start <= c.config.channel.in_flight_wait_ms
    failed = [a for a in c.answers if a.broker == B2 and a.bundle == key][-1]
    assert (failed.owner, failed.error is not None) == (None, True)
    before = c.counters["monitor-overrides"]
    c.advance(60_000)
    for broker in (B1, B2):
        held = c.brokers[broker].value(key)
        assert held is not None
        assert (held.state, held.dst_broker) == (S.Owned, B2)
        assert ask(c, broker, key) == Asked(owner=B2)
    assert c.counters["monitor-overrides"] - before == 1
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_splitTestWhenTableViewPutFails(store: StoreKind) -> None:
    """``splitTestWhenTableViewPutFails``: the owner's ``put`` fails, so a split published through
    the other broker writes no child; once recovered, the monitor overrides the stuck ``Splitting``
    to the selected broker (the owner), which completes it: the parent ends ``Init`` on both and a
    lookup of it finds no owner."""
    c = cluster(store, select=B1)
    key = sorted(c.live_bundle_keys())[0]
    assign_to(c, key, B1)
    held = c.brokers[B2].value(key)
    assert held is not None
    splitting = V(
        state=S.Splitting,
        source_broker=B1,
        version_id=held.version_id + 1,
        timestamp=now(c),
        split_service_unit_to_dest_broker=split_of(key),
    )
    c.run(lambda tx: publish(tx, B2, key, splitting))  # channel2.publishSplitEventAsync(split of broker 1)
    drain_failing(c, B1, TaskKind.split)  # channel 1 is broken: the split won't complete
    for broker in (B1, B2):
        stuck = c.brokers[broker].value(key)
        assert stuck is not None
        assert stuck.state is S.Splitting
    c.advance(30_000 + 60_000)  # recovered: the monitor overrides the Splitting past the in-flight wait
    for broker in (B1, B2):
        assert c.brokers[broker].value(key) is None  # Init
    assert key not in c.live_bundle_keys()
    answer = ask(c, B1, key)
    assert answer.owner is None
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_assignmentTestWhenOneAssignmentFails(store: StoreKind) -> None:
    """``assignmentTestWhenOneAssignmentFails``: channel 1's table view fails its ``put``, so its
    assignment future fails at once; channel 2's assignment wins and completes with broker 2; channel 1
    then answers broker 2; no lookup is left waiting on either channel.

    Channel 1's put fails here because its metadata session is lost before it writes (the model's
    only failing write on the metadata store); the system topic has no failing publish, so its
    variant drops the assignment unwritten and checks what follows."""
    c = cluster(store, select=B1)
    key = sorted(c.live_bundle_keys())[0]
    assert pending(c) == {B1: [], B2: []}
    c.step(Lookup(B1, key))  # channel1.publishAssignEventAsync(bundle, brokerId1)
    c.placement = Pinned(B2)
    c.step(Lookup(B2, key))  # channel2.publishAssignEventAsync(bundle, brokerId2)
    if store is StoreKind.metadata_store:
        c.step(LoseSession(B1))
        c.step(RunTask(B1))
        failed = [a for a in c.answers if a.broker == B1 and a.bundle == key]
        assert len(failed) == 1
        assert failed[0].error is not None  # owner3.isCompletedExceptionally()
        assert failed[0].owner is None
        c.step(RunTask(B2))
        c.drain()
        c.step(Reconnect(B1))
    else:
        fail_next(c, B1, TaskKind.assign)
    c.drain()
    won = [a for a in c.answers if a.broker == B2 and a.bundle == key]
    assert [(a.owner, a.error) for a in won] == [(B2, None)]  # owner4 completes with broker 2
    assert ask(c, B1, key) == Asked(owner=B2)  # waitUntilNewOwner(channel1, bundle, brokerId2)
    assert pending(c) == {B1: [], B2: []}
    no_violations(c)


# -- the leader's overrides ----------------------------------------------------------------------------
def split_of(key: str) -> dict[str, str | None]:
    """A split's children by range, none with a destination yet (``Map.of(range, Optional.empty())``)."""
    return {child.range_name: None for child in parse_key(key).split()}


def children_of(key: str) -> list[str]:
    return [child.key for child in parse_key(key).split()]


def hold_records(c: Cluster, records: dict[str, ServiceUnitStateData]) -> dict[str, str]:
    """Each record held (:func:`hold`) on a bundle of its own, the cluster's bundles in order, stamped
    now; a ``Splitting`` names its bundle's two halves. Returns the bundle of each record."""
    bundle = dict(zip(records, c.sorted_bundle_keys(), strict=False))
    assert len(bundle) == len(records)
    for name, value in records.items():
        fields = {**value.model_dump(), "timestamp": now(c)}
        if value.state is S.Splitting:
            fields["split_service_unit_to_dest_broker"] = split_of(bundle[name])
        hold(c, bundle[name], V(**fields))
    return bundle


@pytest.mark.parametrize("store", STORES)
def test_testOverrideOrphanStateData(store: StoreKind) -> None:
    """``testOverrideOrphanStateData``: with every in-flight record timed out, the leader's monitor
    gives each ``Releasing``, ``Assigning`` and ``Splitting`` to the selected broker (broker 2); it
    leaves ``Free``, ``Deleted`` and the ``Owned`` records of live brokers alone (an ``Owned`` whose
    source is inactive too); an ``Owned`` whose destination is inactive makes it clean that broker
    up, which moves it. Counters: one broker clean-up scheduled and run, six orphans overridden.

    Broker 4 stands for Pulsar's ``broker-inactive-1``: it crashed and its session expired before
    the records were written; broker 3 is Pulsar's ``broker-3``, registered."""
    c = cluster(store, brokers=4, select=B2, namespaces=6)
    c.step(Crash(B4))
    c.advance(30_000 + 1_000)  # its session expires; it owned nothing, so nothing to clean up
    records = {
        "releasing1": V(state=S.Releasing, dst_broker=B1, source_broker=B2, version_id=1),
        "releasing2": V(state=S.Releasing, dst_broker=B2, source_broker=B3, version_id=1),
        "splitting": V(state=S.Splitting, source_broker=B1, version_id=1),
        "assigning1": V(state=S.Assigning, dst_broker=B1, version_id=1),
        "assigning2": V(state=S.Assigning, dst_broker=B1, source_broker=B2, version_id=1),
        "free": V(state=S.Free, source_broker=B1, version_id=1),
        "deleted": V(state=S.Deleted, source_broker=B1, version_id=1),
        "owned1": V(state=S.Owned, dst_broker=B1, version_id=1),
        "owned2": V(state=S.Owned, dst_broker=B1, source_broker=B4, version_id=1),
        "owned3": V(state=S.Owned, dst_broker=B4, source_broker=B1, version_id=1),
    }
    bundle = hold_records(c, records)
    before = dict(c.counters)
    c.advance(30_000 + 60_000)  # past the in-flight wait, through one monitor run
    leader = c.brokers[B1]
    assert leader.is_leader
    assert leader.cleanup_jobs == {}  # getCleanupJobs(leader).isEmpty()

    def owner(name: str) -> str | None:
        held = c.brokers[B2].value(bundle[name])
        assert held is not None
        assert held.state is S.Owned
        return held.dst_broker

    assert owner("releasing1") == B2
    assert owner("releasing2") == B2
    assert c.brokers[B2].value(bundle["splitting"]) is None  # channel2.getOwnerAsync(splitting) is empty
    for child in children_of(bundle["splitting"]):
        held = c.brokers[B2].value(child)
        assert held is not None
        assert (held.state, held.dst_broker) == (S.Owned, B2)
    assert owner("assigning1") == B2
    assert owner("assigning2") == B2
    free = c.brokers[B2].value(bundle["free"])
    assert free is not None
    assert (free.state, free.source_broker) == (S.Free, B1)  # channel2.getOwnerAsync(freeBundle) is empty
    assert ask(c, B2, bundle["deleted"]).error is not None  # completes exceptionally
    assert owner("owned1") == B1
    assert owner("owned2") == B1
    assert owner("owned3") == B2
    grew = {name: c.counters[name] - before.get(name, 0) for name in ("monitor-overrides", "cleanup-overrides")}
    assert grew["monitor-overrides"] + grew["cleanup-overrides"] == 6  # totalOrphanServiceUnitCleanupCnt
    assert grew["cleanup-overrides"] == 1  # one inactive broker cleaned up (owned3)


@pytest.mark.parametrize("store", STORES)
def test_testOverrideInactiveBrokerStateData(store: StoreKind) -> None:
    """``testOverrideInactiveBrokerStateData``: the leader (Stable) cleans up a broker whose
    registration is gone and whose health check fails: its ``Releasing``, ``Assigning`` and
    ``Owned`` go to the selected broker (broker 2), its ``Splitting`` is handed over and completed
    there (children ``Owned`` by broker 2, the parent gone); its ``Free`` and ``Deleted`` are left.

    Broker 3 is the broker cleaned up (Pulsar's test deletes its own ``brokerId1`` from the registry
    and mocks its health check to fail; here broker 3 crashes and its session expires)."""
    c = cluster(store, brokers=3, select=B2, namespaces=3)
    bundle = hold_records(
        c,
        {
            "releasing": V(state=S.Releasing, source_broker=B3, version_id=1),
            "splitting": V(state=S.Splitting, source_broker=B3, version_id=1),
            "assigning": V(state=S.Assigning, dst_broker=B3, version_id=1),
            "free": V(state=S.Free, source_broker=B3, version_id=1),
            "deleted": V(state=S.Deleted, source_broker=B3, version_id=1),
            "owned": V(state=S.Owned, dst_broker=B3, version_id=1),
        },
    )
    c.step(Crash(B3))
    c.advance(30_000 + 1_000)  # its session expires; the leader, Stable, cleans up at once
    for name in ("releasing", "assigning", "owned"):
        held = c.brokers[B2].value(bundle[name])
        assert held is not None
        assert (held.state, held.dst_broker) == (S.Owned, B2), name
        assert ask(c, B2, bundle[name]) == Asked(owner=B2)
    for child in children_of(bundle["splitting"]):
        assert ask(c, B2, child) == Asked(owner=B2)
    assert c.brokers[B2].value(bundle["splitting"]) is None
    free = c.brokers[B2].value(bundle["free"])
    assert free is not None
    assert (free.state, free.source_broker) == (S.Free, B3)  # getOwnerAsync(freeBundle) is empty
    assert ask(c, B2, bundle["deleted"]).error is not None  # completes exceptionally


# -- the leader's clean-up jobs ----------------------------------------------------------------------------
def cleanup_timers(c: Cluster, target: str) -> list[Any]:
    """The clean-up timers (jobs) still to fire for ``target``."""
    return [t for t in c.live_timers() if t.kind is TimerKind.cleanup and t.target == broker_id(target)]


def session_event(c: Cluster, broker: str, event: SessionEvent) -> None:
    """``channel.handleMetadataSessionEvent(event)`` called directly, as Pulsar's tests do."""
    i = broker_id(broker)
    c.run(lambda tx: tx.on_session_event(i, event))


@pytest.mark.parametrize("store", STORES)
def test_handleBrokerCreationEventTest(store: StoreKind) -> None:
    """``handleBrokerCreationEventTest``: a pending clean-up job for a broker is cancelled, and
    removed, when that broker's registry node is created again (its health check passes). Here the
    job is the Jittery leader's delayed one; the broker comes back before it is due, and when it
    would have been due nothing is overridden."""
    c = cluster(store, brokers=3, select=B2)
    key = sorted(c.live_bundle_keys())[0]
    assign_to(c, key, B3)
    session_event(c, B1, SessionEvent.SessionReestablished)  # the leader's session just came back: Jittery
    c.step(Crash(B3))
    c.advance(30_000)  # the session expires; the leader schedules the clean-up for 180 s later
    leader = c.brokers[B1]
    assert leader.metadata_state().value == "Jittery"
    assert list(leader.cleanup_jobs) == [B3]
    assert len(cleanup_timers(c, B3)) == 1
    c.step(Restart(B3))
    c.step(RunTask(B3))  # its channel starts (ready for requests), so its health check passes
    c.drain()  # the leader hears of broker 3's node being created
    assert leader.cleanup_jobs == {}  # cleanupJobs.size() == 0
    assert cleanup_timers(c, B3) == []  # future.isCancelled()
    before = c.counters["cleanup-overrides"]
    c.advance(180_000)
    assert c.counters["cleanup-overrides"] == before
    held = c.brokers[B1].value(key)
    assert held is not None
    assert (held.state, held.dst_broker) == (S.Owned, B3)
    no_violations(c)


@pytest.mark.parametrize("store", STORES)
def test_handleBrokerDeletionEventTest(store: StoreKind) -> None:
    """``handleBrokerDeletionEventTest``: only the leader schedules clean-ups. Stable: a deleted
    broker's bundles are moved at once to the selected broker. Jittery: the job is scheduled and not
    run; the broker's node created again cancels it; deleted again, the job runs after the delay and
    moves the bundles. Unstable: the deletion is ignored (counted) and the bundles stay."""
    c = cluster(store, brokers=3, select=B2, namespaces=1)
    bundle1, bundle2 = c.sorted_bundle_keys()[:2]
    leader, follower = c.brokers[B1], c.brokers[B2]
    assert leader.is_leader
    assert not follower.is_leader

    def owners() -> set[str | None]:
        out = set()
        for key in (bundle1, bundle2):
            for broker in (leader, follower):
                held = broker.value(key)
                assert held is not None
                assert held.state is S.Owned
                out.add(held.dst_broker)
        return out

    def back_to_broker_3() -> None:
        """Broker 3 starts again and both bundles are transferred back to it."""
        c.step(Restart(B3))
        c.drain()
        for key in (bundle1, bundle2):
            c.step(Transfer(B1, key, B3))
            c.drain()
        assert owners() == {B3}

    # stable metadata state
    assign_to(c, bundle1, B3)
    assign_to(c, bundle2, B3)
    assert leader.metadata_state().value == "Stable"
    c.step(Crash(B3))
    c.advance(30_000)  # broker 3's node is deleted when its session expires
    assert owners() == {B2}
    assert leader.cleanup_jobs == {}
    assert follower.cleanup_jobs == {}
    c.advance(10_000)  # the clean-up's re-checks are over

    # jittery metadata state
    back_to_broker_3()
    session_event(c, B1, SessionEvent.SessionReestablished)
    session_event(c, B2, SessionEvent.SessionReestablished)
    c.step(Crash(B3))
    c.advance(30_000)
    assert list(leader.cleanup_jobs) == [B3]  # scheduled, not run
    assert follower.cleanup_jobs == {}
    assert owners() == {B3}
    c.step(Restart(B3))  # the broker is back online: the job is cancelled
    c.step(RunTask(B3))  # (its channel started before the leader's health check)
    c.drain()
    assert leader.cleanup_jobs == {}
    assert cleanup_timers(c, B3) == []
    c.step(Crash(B3))  # offline again
    c.advance(30_000)
    assert list(leader.cleanup_jobs) == [B3]
    assert follower.cleanup_jobs == {}
    job = leader.cleanup_jobs[B3]
    c.advance(job.due - now(c))  # finally cleaned up
    assert owners() == {B2}
    assert leader.cleanup_jobs == {}

    # unstable metadata state
    back_to_broker_3()
    ignored = c.counters["cleanup-ignored"]
    session_event(c, B1, SessionEvent.SessionLost)
    assert leader.metadata_state().value == "Unstable"
    c.run(lambda tx: tx.handle_broker_deletion(0, broker_id(B3)))  # handleBrokerRegistrationEvent(Deleted)
    assert c.counters["cleanup-ignored"] - ignored == 1  # totalInactiveBrokerCleanupIgnoredCnt
    assert leader.cleanup_jobs == {}
    assert follower.cleanup_jobs == {}
    assert owners() == {B3}


# -- lookups ------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("store", STORES)
def test_testGetOwnerAsync(store: StoreKind) -> None:
    """``testGetOwnerAsync``: ``getOwnerAsync`` per record held in channel 1's view (broker 1's)."""
    c = cluster(store)
    key, other = c.sorted_bundle_keys()[:2]
    cases: list[tuple[ServiceUnitStateData | None, Asked]] = [
        (V(state=S.Owned, dst_broker=B1, version_id=1), Asked(owner=B1)),
        (V(state=S.Owned, dst_broker=B2, version_id=1), Asked(owner=B2)),
        (V(state=S.Assigning, dst_broker=B1, version_id=1), Asked(deferred=True)),  # not done
        (V(state=S.Assigning, dst_broker=B2, version_id=1), Asked(owner=B2)),
        (V(state=S.Releasing, dst_broker=B1, version_id=1), Asked(deferred=True)),
        (V(state=S.Releasing, dst_broker=B2, version_id=1), Asked(owner=B2)),
        (V(state=S.Releasing, source_broker=B1, version_id=1), Asked()),  # Optional.empty()
        (V(state=S.Splitting, source_broker=B1, version_id=1), Asked(owner=B1)),
        (V(state=S.Splitting, source_broker=B2, version_id=1), Asked(owner=B2)),
        (V(state=S.Free, source_broker=B1, version_id=1), Asked(assigns=True)),  # empty: the load manager assigns
        (None, Asked(assigns=True)),
    ]
    for value, expected in cases:
        hold(c, key, value)
        assert ask(c, B1, key) == expected, value
    hold(c, other, V(state=S.Deleted, source_broker=B1, version_id=1))
    deleted = ask(c, B1, other)
    assert deleted.owner is None
    assert deleted.error is not None  # isCompletedExceptionally()


def channel_owner(c: Cluster, broker: str) -> str | None:
    """``getChannelOwnerAsync`` on ``broker``: the leader its election reads."""
    elected = c.state.brokers[broker_id(broker)].leader_view
    return None if elected is None else broker_name(elected[0])


@pytest.mark.parametrize("store", STORES)
def test_testActiveGetOwner(store: StoreKind) -> None:
    """``testActiveGetOwner``, but for the broker that is not registered (the next test): no record
    → nothing; ``Releasing`` to another broker → that broker; ``Assigning`` to this broker → deferred;
    ``Owned`` → the owner; an inactive owner → fails once the in-flight wait is over; after the
    leader's clean-up of that owner with nobody to select → nothing, at once; after a clean-up that
    selects broker 1 → broker 1, at once.

    Broker 3 is the owner Pulsar's test mocks as inactive: it crashed and its session expired. The
    monitor runs once an hour, so only the clean-ups the test asks for move anything."""
    c = cluster(store, brokers=3, monitor_interval_s=3_600)
    key = c.sorted_bundle_keys()[0]
    hold(c, key, None)
    assert ask(c, B1, key) == Asked(assigns=True)  # case 1: the owner is empty
    hold(c, key, V(state=S.Releasing, dst_broker=B2, source_broker=B1, version_id=1))
    assert ask(c, B1, key) == Asked(owner=B2)  # case 2
    hold(c, key, V(state=S.Assigning, dst_broker=B1, source_broker=B2, version_id=1))
    assert ask(c, B1, key) == Asked(deferred=True)  # case 3
    hold(c, key, V(state=S.Owned, dst_broker=B2, version_id=1))
    assert ask(c, B1, key) == Asked(owner=B2)  # case 4

    c.step(Crash(B3))  # case 6: the owner is inactive
    c.advance(30_000 + 1_000)
    assert not c.registered(B3)
    hold(c, key, V(state=S.Owned, dst_broker=B3, version_id=1, timestamp=now(c)))
    assert ask(c, B1, key, keep=True) == Asked(deferred=True)
    start = now(c)
    while key in c.brokers[B1].pending_lookups:
        c.step(Tick())
    failed = c.answers[-1]
    assert (failed.broker, failed.owner) == (B1, None)
    assert failed.error is not None
    assert "IllegalStateException" in failed.error
    assert now(c) - start >= c.config.channel.in_flight_wait_ms

    def clean_up(select: str | None) -> None:
        """The leader handles broker 3's deletion (Stable) with ``selectAsync`` answering ``select``."""
        c.placement = Pinned(select)
        c.run(lambda tx: tx.handle_broker_deletion(0, broker_id(B3)))
        c.advance(0)
        c.placement = Pinned(B1)

    clean_up(None)  # case 7: the clean-up finds no new owner
    freed = c.brokers[B1].value(key)
    assert freed is not None
    assert (freed.state, freed.force) == (S.Free, True)
    assert ask(c, B1, key) == Asked(assigns=True)  # empty, without waiting
    hold(c, key, V(state=S.Owned, dst_broker=B3, version_id=1, timestamp=now(c)))
    clean_up(B1)  # case 8: the clean-up gives the bundle to broker 1
    assert ask(c, B1, key) == Asked(owner=B1)


@pytest.mark.parametrize("store", STORES)
def test_testActiveGetOwner_when_this_broker_is_not_registered(store: StoreKind) -> None:
    """``testActiveGetOwner``, the case "getOwnerAsync returns immediately when not registered":
    with this broker out of the registry (``registry.unregister()``; here its session is lost), it
    answers the stored owner at once, inactive though that owner is."""
    c = cluster(store, brokers=3, monitor_interval_s=3_600)
    key = c.sorted_bundle_keys()[0]
    c.step(Crash(B3))
    c.advance(30_000 + 1_000)
    hold(c, key, V(state=S.Owned, dst_broker=B3, version_id=1, timestamp=now(c)))
    c.step(LoseSession(B1))
    assert not c.registered(B1)
    assert ask(c, B1, key) == Asked(owner=B3)


@pytest.mark.parametrize("store", STORES)
def test_conflictAndCompactionTest(store: StoreKind) -> None:
    """``conflictAndCompactionTest``: broker 2 publishes an assignment of a bundle broker 1 owns;
    the publish does not fail and both channels still answer broker 1 (``Owned → Assigning`` is
    refused). On the system topic the channel topic is then compacted, and a channel started
    afterwards reads broker 1 from the compacted topic (the metadata store has no compaction)."""
    c = cluster(store, select=B1)
    key = c.sorted_bundle_keys()[0]
    assign_to(c, key, B1)
    held = c.brokers[B2].value(key)
    assert held is not None
    conflicting = V(state=S.Assigning, dst_broker=B2, version_id=held.version_id + 1, timestamp=now(c))
    c.run(lambda tx: publish(tx, B2, key, conflicting))  # channel2.publishAssignEventAsync(bundle, brokerId2)
    c.drain()
    assert ask(c, B2, key) == Asked(owner=B1)
    assert ask(c, B1, key) == Asked(owner=B1)
    if store is StoreKind.metadata_store:
        return  # no compaction
    c.step(Compact())
    assert c.topic.horizon == c.topic.end
    c.step(Crash(B2))
    c.step(Restart(B2))
    c.step(RunTask(B2))  # a channel started after the compaction
    assert ask(c, B2, key) == Asked(owner=B1)
    no_violations(c)


# -- leadership and the channel's life ---------------------------------------------------------------------
@pytest.mark.parametrize("store", STORES)
def test_channelOwnerTest(store: StoreKind) -> None:
    """``channelOwnerTest``: both channels name the same leader; when the leader's election is closed
    the other broker becomes leader, and the first, taking part again, does not take it back; both
    agree on the new leader and ``isChannelOwnerAsync`` is true on exactly that one."""
    c = cluster(store)
    first = channel_owner(c, B1)
    assert first == channel_owner(c, B2) == B1
    c.step(Resign(B1))  # leaderElectionService1.close()
    c.step(Notify(B2))  # waitUntilNewChannelOwner(channel2, channelOwner1)
    c.drain()  # leaderElectionService1.start(): broker 1 reads the election again
    new = channel_owner(c, B1)
    assert new == channel_owner(c, B2)
    assert new != first
    assert [name for name, b in c.brokers.items() if b.is_leader] == [new]


@pytest.mark.parametrize("store", STORES)
def test_handleMetadataSessionEventTest(store: StoreKind) -> None:
    """``handleMetadataSessionEventTest``, the two events that count: ``SessionLost`` and
    ``SessionReestablished`` set the channel's last session event and its time."""
    c = cluster(store)

    def last() -> tuple[SessionEvent, int]:
        return c.state.brokers[0].last_session_event

    c.advance(1_000)
    c.step(LoseSession(B1))
    c.drain()
    assert last() == (SessionEvent.SessionLost, now(c))
    c.advance(1_000)
    c.step(Reconnect(B1))
    c.drain()
    assert last() == (SessionEvent.SessionReestablished, now(c))


@pytest.mark.parametrize("store", STORES)
def test_channelValidationTest_after_close(store: StoreKind) -> None:
    """``channelValidationTest``, the parts with a counterpart: after ``close`` the channel's calls
    fail (a lookup, an unload, a transfer, a split through it); ``close`` then ``start`` works, and
    the started channel answers who leads; ``start`` twice fails."""
    c = cluster(store)
    key = c.sorted_bundle_keys()[0]
    assign_to(c, key, B2)
    c.step(Shutdown(B2))
    c.advance(10_000)
    assert c.brokers[B2].channel is ChannelState.Closed
    for call in (Lookup(B2, key), Unload(B2, key), Transfer(B2, key, B1), Split(B2, key)):
        assert call not in c.enabled_actions()
        with pytest.raises(ValueError, match="not running"):
            c.step(call)
    c.step(Restart(B2))
    assert c.brokers[B2].channel is ChannelState.Constructed  # registered; started once ready for requests
    c.step(RunTask(B2))
    assert c.brokers[B2].channel is ChannelState.Started
    assert channel_owner(c, B2) == B1
    with pytest.raises(ValueError, match="is running"):
        c.step(Restart(B2))


@pytest.mark.parametrize("store", STORES)
def test_unloadTest(store: StoreKind) -> None:
    """``unloadTest``: assigned to broker 1 and unloaded, the bundle is ``Free`` on both and neither
    channel has an owner; assigned again, through channel 2 to broker 2, and unloaded again; the
    monitor, once the tombstone delay is over, tombstones the ``Free`` (``Init`` on both), one
    tombstone clean-up. (Pulsar's test shortens the delay to 1 ms; here to 30 s, the shortest the
    in-flight wait allows.)"""
    c = cluster(store, tombstone_delay_s=30)
    key = c.sorted_bundle_keys()[0]
    for owner in (B1, B2):
        assign_to(c, key, owner, via=owner)
        c.step(Unload(owner, key))
        c.drain()
        for broker in (B1, B2):
            freed = c.brokers[broker].value(key)
            assert freed is not None
            assert (freed.state, freed.source_broker) == (S.Free, owner)
            assert ask(c, broker, key) == Asked(assigns=True)  # Optional.empty()
    before = c.counters["monitor-tombstones"]
    c.advance(c.config.channel.tombstone_delay_s * 1000 + 2 * 60_000)
    for broker in (B1, B2):
        assert c.brokers[broker].value(key) is None  # Init
    assert c.counters["monitor-tombstones"] - before == 1  # totalServiceUnitTombstoneCleanupCnt
    no_violations(c)


# -- MetadataStoreTableViewTest (pulsar-metadata), the store view under the channel --------------------------
def test_MetadataStoreTableViewTest_testClosedMetadataStore(new_store: Callable[[], Store]) -> None:
    """``MetadataStoreTableViewTest.testClosedMetadataStore``: on a closed store, a put and a delete
    through the table view fail (``AlreadyClosedException``), and change nothing."""
    store = new_store()
    client = store.connect("b1")
    view = MetadataStoreTableView(client, "b1")
    view.start()
    assert view.put(KEY, v(S.Owned, "b1")).applied
    client.close()
    for result in (view.put(KEY2, v(S.Owned, "b1")), view.delete(KEY)):
        assert not result.applied
        assert result.error is not None
        assert "closed" in result.error
    other = MetadataStoreTableView(store.connect("b2"), "b2")
    other.start()
    assert (other.get(KEY), other.get(KEY2)) == (v(S.Owned, "b1"), None)


def test_MetadataStoreTableViewTest_testInitialFill(new_store: Callable[[], Store]) -> None:
    """``MetadataStoreTableViewTest.testInitialFill``: nodes written straight to the store reach a
    started view's tail listener; a view started afterwards loads them as existing items, only
    those under a valid service-unit path."""
    store = new_store()
    events: list[tuple[str, str]] = []
    early = MetadataStoreTableView(store.connect("b1"), "b1")
    early.start(tail=lambda key, _: events.append(("tail", key)))
    writer = store.connect("writer")
    for key, owner in ((KEY, "b1"), (KEY2, "b2")):
        writer.put(path_of(key), v(S.Owned, owner).to_json().encode(), None)
    writer.put(f"{PATH_PREFIX}/not-a-bundle", v(S.Owned, "b1").to_json().encode(), None)
    early.client.deliver_all()
    assert sorted(events) == sorted([("tail", KEY), ("tail", KEY2)])
    loaded: list[tuple[str, str]] = []
    late = MetadataStoreTableView(store.connect("b3"), "b3")
    late.start(
        tail=lambda key, _: loaded.append(("tail", key)), existing=lambda key, _: loaded.append(("existing", key))
    )
    assert sorted(loaded) == sorted([("existing", KEY), ("existing", KEY2)])
    assert (late.get(KEY), late.get(KEY2)) == (v(S.Owned, "b1"), v(S.Owned, "b2"))
