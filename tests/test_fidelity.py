"""The channel model does what Pulsar's master does where it once diverged (docs/fidelity.md): each
test names the Pulsar class and method (or test) it follows and runs on both table views."""

from __future__ import annotations

import pytest

from statechan import ServiceUnitState, ServiceUnitStateData
from statechan.cluster import (
    Cluster,
    Crash,
    Lookup,
    LoseSession,
    Restart,
    RunTask,
    Shutdown,
    SimConfig,
    Split,
    StoreKind,
    Tick,
    Unload,
)
from statechan.cluster.config import OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS, Variant
from statechan.cluster.protocol import Tx
from statechan.cluster.state import ChannelState, Rec, TaskKind, broker_id
from statechan.invariants.catalogue import check
from tests.test_channel_scenarios import B1, B2, B3, STORES, assign, key0

S = ServiceUnitState


def cluster(store: StoreKind, variant: Variant | None = None, brokers: int = 3) -> Cluster:
    return Cluster(SimConfig(brokers=brokers, store=store, variant=variant or Variant()))


def lose_session(c: Cluster, broker: str) -> None:
    """``broker``'s metadata session is lost; it reads ``SessionLost`` (nothing else runs)."""
    c.step(LoseSession(broker))

    def notify(tx: Tx) -> None:
        tx.notify(broker_id(broker))

    while c.brokers[broker].pending_notifications:
        c.run(notify)


def unregister(c: Cluster, broker: str) -> None:
    """``broker``'s registry node is deleted, its session intact (``BrokerRegistry.unregister``, as
    testActiveGetOwner does); it registers again only when it reads the notification."""
    i = broker_id(broker)
    c.run(lambda tx: tx.zk_delete(tx._owner(i), i))
    assert not c.registered(broker)


def write(c: Cluster, broker: str, key: str, value: ServiceUnitStateData) -> None:
    """``broker`` publishes ``value`` (on the metadata store, its compare-and-set runs at once)."""

    def publish(tx: Tx) -> None:
        i = broker_id(broker)
        tx.publish(i, key, Rec.of(value))
        while tx.brokers[i].tasks and tx.brokers[i].tasks[0].kind is TaskKind.commit:
            tx.run_task(i)

    c.run(publish)


# -- 1. BrokerRegistryImpl reads through the metadata cache: stale, never empty, without a session --
@pytest.mark.parametrize("store", STORES)
def test_a_lost_session_reads_the_registry_list_its_cache_last_loaded(store: StoreKind) -> None:
    """AbstractMetadataStore's children cache (``asyncReload`` keeps the old value while disconnected)
    behind ``BrokerRegistryImpl.getAvailableBrokersAsync`` and ``lookupAsync``."""
    c = cluster(store)
    lose_session(c, B2)
    assert not c.registered(B2)  # its node went with the session
    seen: list[list[int] | None] = []
    c.run(lambda tx: seen.append(tx.registered_brokers(broker_id(B2))))
    assert seen == [[0, 1, 2]]  # itself included: its own node's deletion never reached its cache
    assert c.brokers[B2].is_registered(B3) is True
    assert c.brokers[B2].is_registered(B2) is True


@pytest.mark.parametrize("store", STORES)
def test_an_override_without_a_session_selects_from_the_stale_list_not_a_forced_free(store: StoreKind) -> None:
    """``ServiceUnitStateChannelImpl.overrideOwnership`` on a broker whose session is lost: placement
    reads the cached list, so no forced ``Free`` (an empty registry would have made one)."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    target = broker_id(owner)
    orphan = c.brokers[B1].value(key)
    assert orphan is not None
    lose_session(c, B1)  # (a metadata-store view is emptied on SessionLost)
    c.run(lambda tx: tx.override_ownership(0, key, Rec.of(orphan), target, False))
    if store is StoreKind.metadata_store:
        assert not c.brokers[B1].tasks  # the put's read fails without a session: nothing to write
        return
    c.drain()
    held = c.brokers[B2].value(key)
    assert held is not None
    assert (held.state, held.force) == (S.Owned, True)
    assert held.dst_broker not in (None, owner)


@pytest.mark.parametrize("store", STORES)
def test_with_nothing_cached_the_registry_read_fails_and_the_override_writes_nothing(store: StoreKind) -> None:
    """``overrideOwnership``: a failed ``getAvailableBrokersAsync`` is logged and nothing is written."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    orphan = c.brokers[B1].value(key)
    assert orphan is not None
    lose_session(c, B1)

    def forget(tx: Tx) -> None:
        tx.b(0).registry_stale = None

    c.run(forget)
    end = c.log_end
    c.run(lambda tx: tx.override_ownership(0, key, Rec.of(orphan), broker_id(owner), False))
    assert c.log_end == end
    assert not c.brokers[B1].tasks


# -- 2. disableBroker: clean up, unregister, close the election, close at once when nobody is left ---
def _trace_index(c: Cluster, kind: str, broker: str, since: int) -> int:
    """The position of ``broker``'s first ``kind`` record (a registry change, an election) from ``since``."""
    for n, record in enumerate(c.trace[since:], since):
        if record["kind"] == kind and record.get("broker") == broker:
            return n
    raise AssertionError(f"no {kind} record of {broker}")


@pytest.mark.parametrize("store", STORES)
def test_a_graceful_shutdown_cleans_up_then_unregisters_then_gives_up_the_leadership(store: StoreKind) -> None:
    """``ExtensibleLoadManagerImpl.disableBroker``: ``cleanOwnerships`` (the overrides written while the
    broker is still registered), then ``BrokerRegistry.unregister``, then ``LeaderElectionService.close``
    (a new leader elected at once, not when the process stops), the channel left open while other
    brokers are available."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    mark = len(c.trace)
    start = c.observe().time
    c.step(Shutdown(owner))
    assert c.registered(owner)  # still registered while its clean-up waits
    assert c.brokers[owner].channel is ChannelState.Disabled
    while c.registered(owner):
        c.drain()
        c.step(Tick())
    unregistered = _trace_index(c, "registry", owner, mark)
    overrides = [n for n, r in enumerate(c.trace[mark:], mark) if r["kind"] == "channel" and r["key"] == key]
    assert overrides
    assert overrides[0] < unregistered  # the hand-over is written before it leaves
    c.advance(OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS)
    assert not c.brokers[owner].alive
    assert c.observe().time - start >= OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS  # the process stops after the wait
    assert check(c.observe()) == []
    # a leader owning nothing has nothing to wait for: it leaves at once and gives the election up
    # there, its channel open (disabled) until its process stops
    c = cluster(store)
    leader = c.leader()
    assert leader is not None
    mark = len(c.trace)
    c.step(Shutdown(leader))
    c.drain()  # the others read the election's node go, and one takes it
    assert not c.registered(leader)
    assert c.brokers[leader].alive
    assert c.brokers[leader].channel is ChannelState.Disabled
    elected = next(n for n, r in enumerate(c.trace[mark:], mark) if r["kind"] == "leader")
    assert _trace_index(c, "registry", leader, mark) < elected
    assert c.leader() not in (None, leader)


@pytest.mark.parametrize("store", STORES)
def test_the_last_broker_closes_its_channel_at_once(store: StoreKind) -> None:
    """``disableBroker``: ``getAvailableBrokersAsync`` empty after ``unregister`` → ``close()`` at once;
    the channel's table view is closed, so nothing more is handled or written (the forced ``Free``
    of a clean-up with nobody to select is not tombstoned by a channel closed before it ran)."""
    c = cluster(store, brokers=2)
    key = key0(c)
    owner = assign(c, key)
    other = B1 if owner == B2 else B2
    c.step(Crash(other))
    c.advance(c.config.channel.session_timeout_ms)  # its session expires: nobody else is registered
    assert not c.registered(other)
    start = c.observe().time
    c.step(Shutdown(owner))
    c.drain()
    while c.brokers[owner].alive:
        c.step(Tick())
        c.drain()
    assert c.counters["closed-at-once"] == 1
    assert c.observe().time - start < OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS  # before its shutdown ends
    assert not c.registered(owner)
    freed = c.channel().get(key)
    if store is StoreKind.system_topic:
        # the override, read back by the flush, is handled and its tombstone queued, but the
        # channel closes in the same breath: the forced Free is never tombstoned
        assert freed is not None
        assert (freed.state, freed.force, freed.source_broker) == (S.Free, True, owner)
    else:  # the override's compare-and-set, its notification and its tombstone all ran in the wait
        assert freed is None


# -- 3. ExtensibleLoadManagerImpl.start: registered first, the channel started once ready --------------
@pytest.mark.parametrize("store", STORES)
def test_a_restarted_broker_is_registered_before_its_channel_starts(store: StoreKind) -> None:
    """``ExtensibleLoadManagerImpl.start``: ``BrokerRegistryImpl.start`` registers and the leader election
    starts; ``ServiceUnitStateChannelImpl.start`` (table view filled, ``handleExisting``) runs only in
    ``runWhenReadyForIncomingRequests``. Meanwhile lookups through it fail with the invalid channel
    state (#25715), and an ``Assigning`` addressed to it waits: placement already selects it."""
    c = cluster(store)
    key = key0(c)
    assign(c, key)
    c.step(Crash(B3))
    c.advance(c.config.channel.session_timeout_ms)
    assert not c.registered(B3)
    c.step(Restart(B3))
    assert c.registered(B3)
    assert c.brokers[B3].channel is ChannelState.Constructed
    assert c.brokers[B3].view() == {}
    assert [t.kind for t in c.brokers[B3].tasks] == [TaskKind.start]
    before = len(c.answers)
    c.step(Lookup(B3, key))
    answer = c.answers[before]
    assert (answer.owner, answer.error) == (None, "IllegalStateException: Invalid channel state:Constructed")
    other = next(k for k in c.sorted_bundle_keys() if k != key)
    write(c, B1, other, ServiceUnitStateData(state=S.Assigning, dst_broker=B3, version_id=1))
    _others_settle(c, B3)
    assert c.brokers[B3].view() == {}  # it reads nothing yet
    assert c.brokers[B1].value(other).state is S.Assigning  # type: ignore[union-attr]
    c.step(RunTask(B3))  # ready for requests: the channel starts and takes the Assigning over (#25379)
    assert c.brokers[B3].channel is ChannelState.Started
    assert c.brokers[B3].view().keys() >= {key, other}
    c.drain()
    owned = c.brokers[B1].value(other)
    assert owned is not None
    assert (owned.state, owned.dst_broker) == (S.Owned, B3)
    assert check(c.observe()) == []


@pytest.mark.parametrize("store", STORES)
def test_the_one_step_restart_stays_a_variant(store: StoreKind) -> None:
    c = cluster(store, Variant(restart_in_one_step=True))
    c.step(Crash(B3))
    c.step(Restart(B3))
    assert c.brokers[B3].channel is ChannelState.Started
    assert not c.brokers[B3].tasks


# -- 4. getActiveOwnerAsync: a broker out of the registry answers the stored owner at once -----------
@pytest.mark.parametrize("store", STORES)
def test_an_unregistered_broker_answers_the_stored_owner_at_once(store: StoreKind) -> None:
    """``ServiceUnitStateChannelImpl.getActiveOwnerAsync``'s ``!brokerRegistry.isRegistered()`` branch,
    as ``ServiceUnitStateChannelTest.testActiveGetOwner`` asserts ("returns immediately when not
    registered"), on both table views."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    unregister(c, B1)
    before = len(c.answers)
    c.step(Lookup(B1, key))
    answer = c.answers[before]
    assert (answer.owner, answer.error, answer.deferred, answer.unchecked) == (owner, None, False, True)
    assert not c.brokers[B1].pending_lookups


def test_a_broker_whose_session_is_lost_answers_from_its_system_topic_view() -> None:
    """The same branch with the session lost: the system-topic view is untouched by the metadata
    session, so the stored owner is answered (a metadata-store view is emptied on ``SessionLost``)."""
    c = cluster(StoreKind.system_topic)
    key = key0(c)
    owner = assign(c, key)
    lose_session(c, B1)
    before = len(c.answers)
    c.step(Lookup(B1, key))
    assert (c.answers[before].owner, c.answers[before].unchecked) == (owner, True)


@pytest.mark.parametrize("store", STORES)
def test_the_model_s_former_checked_lookup_stays_a_variant(store: StoreKind) -> None:
    c = cluster(store, Variant(unregistered_lookup_checks_owner=True))
    key = key0(c)
    assign(c, key)
    unregister(c, B1)
    before = len(c.answers)
    c.step(Lookup(B1, key))
    assert not c.answers[before].unchecked


# -- 5. handleSplitEvent does not re-read the parent ------------------------------------------------
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("rereads", [False, True])
def test_the_queued_split_runs_on_the_event_s_record(store: StoreKind, rereads: bool) -> None:
    """``ServiceUnitStateChannelImpl.handleSplitEvent`` → ``splitServiceUnit`` → ``ownChildBundles``:
    the children are written from the event's record, with no second read of the parent; the
    model's re-read stays as the variant switch ``split_rereads_parent``."""
    c = cluster(store, Variant(split_rereads_parent=rereads))
    key = key0(c)
    owner = assign(c, key)
    other = next(b for b in (B1, B2, B3) if b != owner)
    c.step(Split(owner, key))
    splitting = None
    while splitting is None:  # deliver until the source has queued its split
        tasks = c.brokers[owner].tasks
        head_commits = bool(tasks) and tasks[0].kind is TaskKind.commit
        c.step(next(a for a in c.work_actions() if not isinstance(a, RunTask) or a.broker != owner or head_commits))
        if any(t.kind is TaskKind.split for t in c.brokers[owner].tasks):
            splitting = c.brokers[owner].value(key)
    assert splitting is not None
    assert splitting.state is S.Splitting
    handed = splitting.model_copy(
        update={"source_broker": other, "version_id": splitting.version_id + 1, "force": True}
    )
    write(c, B1, key, handed)
    if store is StoreKind.metadata_store:
        c.run(lambda tx: tx.store_refresh(broker_id(owner), key))  # its notification, read
    else:
        c.run(lambda tx: tx.catch_up(broker_id(owner)))
    held = c.brokers[owner].value(key)
    assert held is not None
    assert held.source_broker == other
    while c.brokers[owner].tasks and c.brokers[owner].tasks[0].kind is not TaskKind.split:
        c.step(RunTask(owner))
    c.step(RunTask(owner))
    wrote_children = any(t.kind in (TaskKind.commit, TaskKind.split_bundles) for t in c.brokers[owner].tasks) or (
        key not in c.live_bundle_keys()
    )
    assert wrote_children is not rereads


# -- 6. a child's lost compare-and-set completes as success --------------------------------------
def test_a_child_write_that_loses_its_compare_and_set_does_not_fail_the_split() -> None:
    """``MetadataStoreTableViewImpl.put`` raises ``ConflictException`` on a ``BadVersionException``,
    and ``ServiceUnitStateMetadataStoreTableViewImpl.put`` completes it as success, so
    ``splitServiceUnitOnceAndRetry`` goes on: the bundles change and the parent is ``Deleted``."""
    c = cluster(StoreKind.metadata_store)
    key = key0(c)
    owner = assign(c, key)
    c.step(Split(owner, key))
    # run until the source has queued its children's compare-and-sets
    while not any(t.kind is TaskKind.split_bundles for t in c.brokers[owner].tasks):
        c.step(c.work_actions()[0])
    child = next(t.key for t in c.brokers[owner].tasks if t.kind is TaskKind.commit)
    other = next(b for b in (B1, B2, B3) if b != owner)
    # another writer takes the child's key first
    write(c, other, child, ServiceUnitStateData(state=S.Assigning, dst_broker=other, version_id=1))
    c.drain()
    assert key not in c.live_bundle_keys()
    assert key not in c.failed_splits
    assert c.brokers[B1].value(key) is None  # the parent Deleted, then tombstoned by its source


# -- 10. doCleanup reads the channel owner first, for a graceful clean-up too ------------------------
@pytest.mark.parametrize("store", STORES)
def test_a_graceful_clean_up_with_no_channel_owner_is_skipped(store: StoreKind) -> None:
    """``ServiceUnitStateChannelImpl.doCleanup``: ``getChannelOwnerAsync`` empty → the clean-up
    (``cleanOwnerships`` → ``doCleanup(brokerId, true)``) is skipped."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)

    def no_leader(tx: Tx) -> None:
        tx.b(broker_id(owner)).leader_view = None

    c.run(no_leader)
    end = c.log_end

    def clean_up(tx: Tx, i: int) -> None:
        tx.do_cleanup(i, i, gracefully=True)

    c.run(lambda tx: clean_up(tx, broker_id(owner)))
    assert c.log_end == end
    assert not c.brokers[owner].tasks
    c2 = cluster(store, Variant(graceful_cleanup_without_leader=True))
    owner2 = assign(c2, key0(c2))
    c2.run(lambda tx: setattr(tx.b(broker_id(owner2)), "leader_view", None))
    end2 = c2.log_end
    c2.run(lambda tx: clean_up(tx, broker_id(owner2)))
    assert c2.log_end > end2 or c2.brokers[owner2].tasks


@pytest.mark.parametrize("store", STORES)
def test_a_shutdown_with_no_channel_owner_leaves_its_bundles_to_the_leader(store: StoreKind) -> None:
    """``disableBroker`` with ``doCleanup`` skipped (no channel owner known): the broker unregisters with
    its bundle still ``Owned``; it is not a complete departure (``departure-complete`` leaves it out),
    and the leader's clean-up of the unregistered broker (``handleBrokerDeletionEvent`` →
    ``doCleanup(broker, false)``) hands the bundle over, as ``orphan-cleaned`` bounds."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    if owner == c.leader():
        pytest.skip("the leader owns the bundle at this seed")
    c.run(lambda tx: setattr(tx.b(broker_id(owner)), "leader_view", None))  # it knows no leader
    end = c.log_end
    c.step(Shutdown(owner))
    assert c.counters["cleanup-skipped-no-leader"] == 1
    assert c.log_end == end  # nothing written
    assert not c.registered(owner)
    c.advance(OWNERSHIP_CLEAN_UP_MAX_WAIT_TIME_IN_MILLIS)
    assert not c.brokers[owner].alive
    assert c.observe().departed == frozenset()
    assert "departure-complete" not in {v.invariant for v in check(c.observe())}
    held = c.brokers[B1].value(key)
    assert held is not None
    assert held.dst_broker != owner  # the leader's clean-up moved it
    assert check(c.observe()) == []


# -- 7. a broker whose session expired keeps serving (what single-owner, registered only, leaves out) --
def _others_settle(c: Cluster, but: str) -> None:
    """Every waiting step of every broker but ``but`` (and the syncer's), until none is left."""
    while True:
        work = [a for a in c.work_actions() if getattr(a, "broker", None) != but]
        if not work:
            return
        c.step(work[0])


@pytest.mark.parametrize("store", STORES)
def test_a_broker_whose_session_expired_keeps_serving_while_the_leader_hands_its_bundle_over(
    store: StoreKind,
) -> None:
    """Under ``zookeeperSessionExpiredPolicy=reconnect`` (the default) a broker whose session expired
    keeps serving until it reads the leader's override (system topic) or its ``SessionLost``
    (metadata store, ``handleInvalidate``); the leader's clean-up (``handleBrokerDeletionEvent`` →
    ``doCleanup``) gives its bundle to another broker meanwhile. The model reaches that overlap;
    ``single-owner`` counts registered brokers only, so it does not report it; ``single-server``, on
    request, counts every running broker and does (docs/fidelity.md, 7)."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key, via=B2)
    if owner == B1:
        pytest.skip("the leader owns the bundle at this seed")
    c.step(LoseSession(owner))
    _others_settle(c, owner)
    for _ in range(10):  # timers until the leader's clean-up of the departed broker has run
        held = c.brokers[B1].value(key)
        if held is not None and held.dst_broker != owner:
            break
        c.step(Tick())
        _others_settle(c, owner)
    new = c.brokers[B1].value(key)
    assert new is not None
    assert new.dst_broker not in (None, owner)
    serving = c.serving()
    assert key in serving[owner]
    assert key in serving[new.dst_broker]
    assert not c.registered(owner)
    assert check(c.observe(), ["single-owner"]) == []  # registered brokers only: not reported
    # single-server counts every running broker, as Pulsar's reconnect policy leaves it serving
    found = check(c.observe(), ["single-server"])
    assert [(v.invariant, v.key) for v in found] == [("single-server", key)]
    c.drain()  # the old owner reads the override (or its SessionLost) and lets go
    assert key not in c.serving()[owner]


# -- 8. handleReleaseEvent: a forced Releasing is followed by a Free that is not forced ------------------
@pytest.mark.parametrize("store", STORES)
def test_a_forced_unload_ends_in_a_free_that_waits_for_the_monitor(store: StoreKind) -> None:
    """A namespace's deletion unloads its bundles forced (``ExtensibleLoadManagerImpl.unloadNamespaceBundleAsync``
    with ``force=true`` → ``Releasing(force)``); ``ServiceUnitStateChannelImpl.handleReleaseEvent`` writes
    ``Free`` with the constructor that leaves ``force`` false, so the source does not tombstone it at
    once (``handleFreeEvent`` does that for a forced ``Free`` only): the leader's monitor does, after the
    tombstone delay. The unload is done on that ``Free`` (``UnloadManager``)."""
    c = cluster(store)
    key = key0(c)
    owner = assign(c, key)
    c.step(Unload(B1, key, force=True))
    c.drain()
    written = [r["value"] for r in c.trace if r["kind"] == "channel" and r["key"] == key]
    releasing, free = written[-2], written[-1]
    assert (releasing["state"], releasing["force"]) == ("Releasing", True)  # type: ignore[index]
    assert (free["state"], free["force"], free["sourceBroker"]) == ("Free", False, owner)  # type: ignore[index]
    held = c.brokers[B2].value(key)
    assert held is not None
    assert (held.state, held.force) == (S.Free, False)  # no tombstone from its source
    assert c.brokers[B1].unloads == {}
    assert key not in c.serving()[owner]
    c.advance(c.config.channel.tombstone_delay_s * 1000 + 2 * c.config.channel.monitor_interval_s * 1000)
    assert all(key not in view for view in c.views().values())
    assert c.counters["monitor-tombstones"] == 1
    assert check(c.observe()) == []


# -- 8. ServiceUnitStateTableViewBase.init: the heartbeat and SLA-monitor bundles, without the channel --
@pytest.mark.parametrize("store", STORES)
@pytest.mark.parametrize("two", [False, True], ids=["master", "before-25304"])
def test_the_owned_set_starts_with_the_broker_s_own_system_bundles(store: StoreKind, two: bool) -> None:
    """``ServiceUnitStateTableViewBase.init`` puts the broker's heartbeat namespace's full bundle (one
    since #25304: ``pulsar/<broker>``; before it also ``pulsar/<cluster>/<broker>``) and its SLA-monitor
    namespace's in its owned set; ``updateOwnedServiceUnits`` adds its ``Owned`` channel bundles beside
    them. No record of a system bundle reaches the channel, and they stay out of every view."""
    c = cluster(store, Variant(two_heartbeat_namespaces=two))
    key = key0(c)
    owner = assign(c, key)
    for name, broker in c.brokers.items():
        system = {k for k in broker.owned_service_units() if k not in broker.serving()}
        heartbeats = {k for k in system if k.startswith("pulsar/")}
        assert len(heartbeats) == (2 if two else 1)
        assert f"pulsar/{name}/0x00000000_0xffffffff" in heartbeats
        assert {k for k in system if k.startswith("sla-monitor/")} == {
            f"sla-monitor/standalone/{name}/0x00000000_0xffffffff"
        }
        assert all(name in k for k in system)  # each broker its own: no overlap between brokers
    assert key in c.brokers[owner].owned_service_units()
    assert all(k in c.live_bundle_keys() for view in c.views().values() for k in view)
    assert not any(str(r.get("key", "")).startswith(("pulsar/", "sla-monitor/")) for r in c.trace)
    c.step(Crash(B3))
    assert c.brokers[B3].owned_service_units() == set()  # a broker that does not run owns nothing
    c.advance(c.config.channel.session_timeout_ms)
    c.step(Restart(B3))
    assert c.brokers[B3].owned_service_units() == set()  # getOwnedServiceUnits: the channel has not started
    c.step(RunTask(B3))
    assert f"pulsar/{B3}/0x00000000_0xffffffff" in c.brokers[B3].owned_service_units()


@pytest.mark.parametrize("store", STORES)
def test_a_heartbeat_lookup_names_its_broker_without_the_channel(store: StoreKind) -> None:
    """``ExtensibleLoadManagerImpl.assign`` answers a heartbeat bundle with the broker its namespace
    names (``getHeartbeatOrSLAMonitorBrokerId``), whether that broker runs or not and before the
    channel has started; an SLA-monitor bundle only while the registry has its broker. Nothing is
    written to the channel."""
    c = cluster(store)
    heartbeat = f"pulsar/{B2}/0x00000000_0xffffffff"
    sla = f"sla-monitor/standalone/{B2}/0x00000000_0xffffffff"
    log = c.log_end
    before = len(c.answers)
    c.step(Lookup(B1, heartbeat))
    c.step(Lookup(B1, sla))
    assert [(a.owner, a.error, a.deferred) for a in c.answers[before:]] == [(B2, None, False), (B2, None, False)]
    c.step(Crash(B2))
    c.advance(c.config.channel.session_timeout_ms)
    assert not c.registered(B2)
    before = len(c.answers)
    c.step(Lookup(B1, heartbeat))  # no liveness check: the client's connection to it fails instead
    c.step(Lookup(B1, sla))  # not found in the registry: the lookup goes to the channel (which has no such bundle)
    heartbeat_answer, sla_answer = c.answers[before:]
    assert (heartbeat_answer.owner, heartbeat_answer.error) == (B2, None)
    assert sla_answer.owner is None
    assert sla_answer.error is not None
    c.step(Restart(B2))
    assert c.brokers[B2].channel is ChannelState.Constructed
    before = len(c.answers)
    c.step(Lookup(B2, heartbeat))
    assert (c.answers[before].owner, c.answers[before].error) == (B2, None)
    assert c.log_end == log
    assert not any(str(r.get("key", "")).startswith(("pulsar/", "sla-monitor/")) for r in c.trace)
    with pytest.raises(ValueError, match="no broker 'broker-9:8080'"):
        c.step(Lookup(B1, "pulsar/broker-9:8080/0x00000000_0xffffffff"))
