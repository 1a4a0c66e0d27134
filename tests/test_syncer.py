"""The PIP-378 syncer: initial copy per mode, compaction off while it runs, two-way mirroring,
deletions, reconciliation, and the #25946 defects when switched back on."""

from __future__ import annotations

from collections.abc import Callable

from statechan.clock import ManualClock
from statechan.stores import (
    MetadataStoreTableView,
    Store,
    SyncerMode,
    SystemTopicTableView,
    TableViewSyncer,
    Topic,
)
from tests.channel_values import KEY, KEY2, S, v

NewStore = Callable[[], Store]
"""The ``new_store`` fixture (conftest): every test runs on the in-process store and on a real ZooKeeper."""


def setup(
    new_store: NewStore, mode: SyncerMode, tombstones_as_put_null: bool = False, drop_refused: bool = False
) -> tuple[ManualClock, Topic, Store, TableViewSyncer]:
    clock = ManualClock(1_000)
    topic, store = Topic(clock=clock), new_store()
    syncer = TableViewSyncer(
        topic,
        store,
        mode,
        clock,
        forward_tombstones_as_put_null=tombstones_as_put_null,
        drop_refused_forwards=drop_refused,
    )
    return clock, topic, store, syncer


def fresh_views(topic: Topic, store: Store) -> tuple[dict[str, object], dict[str, object]]:
    t = SystemTopicTableView(topic, "check-t")
    s = MetadataStoreTableView(store.connect("check-s"), "check-s")
    t.start()
    s.start()
    return dict(t.snapshot()), dict(s.snapshot())


def test_topic_to_store_initial_copy_bypasses_the_store_resolver(new_store: NewStore) -> None:
    _, topic, store, syncer = setup(new_store, SyncerMode.SystemTopicToMetadataStore)
    topic.publish(KEY, v(S.Assigning, "b1"))
    topic.publish(KEY, v(S.Owned, "b1", version=2))  # version 2: the store resolver would refuse it first
    store.connect("old").put(
        "/service_unit_state/pulsar/test/0x00000000_0x7fffffff", v(S.Owned, "b9").to_json().encode(), None
    )
    syncer.start()
    on_topic, on_store = fresh_views(topic, store)
    assert on_topic == on_store == {KEY: v(S.Owned, "b1", version=2)}


def test_store_to_topic_initial_copy_replaces_the_topic(new_store: NewStore) -> None:
    _, topic, store, syncer = setup(new_store, SyncerMode.MetadataStoreToSystemTopic)
    topic.publish(KEY2, v(S.Owned, "b9"))
    writer = MetadataStoreTableView(store.connect("w"), "w")
    writer.start()
    writer.put(KEY, v(S.Assigning, "b1"))
    syncer.start()
    on_topic, on_store = fresh_views(topic, store)
    assert on_topic == on_store == {KEY: v(S.Assigning, "b1")}


def test_compaction_is_disabled_while_syncing_and_restored(new_store: NewStore) -> None:
    _, topic, _, syncer = setup(new_store, SyncerMode.SystemTopicToMetadataStore)
    before = topic.compaction_threshold
    syncer.start()
    assert topic.compaction_threshold == 0
    syncer.close()
    assert topic.compaction_threshold == before


def test_tail_updates_are_mirrored_both_ways(new_store: NewStore) -> None:
    _, topic, store, syncer = setup(new_store, SyncerMode.SystemTopicToMetadataStore)
    syncer.start()
    broker_t = SystemTopicTableView(topic, "bt")
    broker_s = MetadataStoreTableView(store.connect("bs"), "bs")
    broker_t.start()
    broker_s.start()
    broker_t.put(KEY, v(S.Assigning, "b1"))
    broker_s.put(KEY2, v(S.Assigning, "b2"))
    syncer.drain()
    assert syncer.in_sync()
    on_topic, on_store = fresh_views(topic, store)
    assert on_topic == on_store == {KEY: v(S.Assigning, "b1"), KEY2: v(S.Assigning, "b2")}


def test_a_tombstone_is_forwarded_as_a_delete(new_store: NewStore) -> None:
    _, topic, store, syncer = setup(new_store, SyncerMode.SystemTopicToMetadataStore)
    topic.publish(KEY, v(S.Owned, "b1"))
    syncer.start()
    topic.publish(KEY, None)
    syncer.drain()
    assert fresh_views(topic, store) == ({}, {})


def test_bug_25946_tombstone_as_put_null_loses_the_deletion(new_store: NewStore) -> None:
    _, topic, store, syncer = setup(
        new_store, SyncerMode.SystemTopicToMetadataStore, tombstones_as_put_null=True, drop_refused=True
    )
    topic.publish(KEY, v(S.Owned, "b1"))
    syncer.start()
    topic.publish(KEY, None)
    syncer.drain()
    on_topic, on_store = fresh_views(topic, store)
    assert on_topic == {}
    assert on_store == {KEY: v(S.Owned, "b1")}
    assert syncer.stats.dropped == 1


def test_a_refused_forward_is_remembered_and_reconciled(new_store: NewStore) -> None:
    _clock, topic, store, syncer = setup(new_store, SyncerMode.SystemTopicToMetadataStore)
    topic.publish(KEY, v(S.Owned, "b1"))
    syncer.start()
    topic.publish(KEY, v(S.Owned, "b2", "b1", version=4))  # a version jump: the store refuses it
    syncer.drain()
    assert syncer.unsynced == {KEY}
    assert not syncer.in_sync()
    report = syncer.reconcile()
    assert report.copied == [KEY]
    assert syncer.in_sync()
    on_topic, on_store = fresh_views(topic, store)
    assert on_topic == on_store == {KEY: v(S.Owned, "b2", "b1", version=4)}


def test_reconcile_copies_back_new_destination_only_keys_and_deletes_old_ones(new_store: NewStore) -> None:
    clock, topic, store, syncer = setup(new_store, SyncerMode.MetadataStoreToSystemTopic)
    syncer.start()
    clock.advance(100)
    # written to the topic behind the syncer's back (its view has not read them yet)
    topic.publish(KEY, v(S.Assigning, "b1", ts=clock.now_ms()))
    topic.publish(KEY2, v(S.Assigning, "b2", ts=0))
    syncer.topic_view._tail.clear()  # the forwards are lost, as if the syncer had crashed meanwhile
    syncer.topic_view.advance(2)
    report = syncer.reconcile()
    assert report.copied_back == [KEY]
    assert report.deleted == [KEY2]
    on_topic, on_store = fresh_views(topic, store)
    assert on_topic == on_store == {KEY: v(S.Assigning, "b1", ts=1_100)}
