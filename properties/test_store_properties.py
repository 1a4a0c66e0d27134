"""Properties of the stores (issue: table views, compaction, syncer), under Hypothesis.

Profiles: ``ci`` by default, ``HYPOTHESIS_PROFILE=deep`` for long runs (see README).
"""

from __future__ import annotations

from collections import defaultdict

from hypothesis import given
from hypothesis import strategies as st

from properties.strategies import KEYS, channel_values, logs, records, tombstone_free_logs
from statechan import ServiceUnitStateData, StorageType, fold
from statechan.clock import ManualClock
from statechan.stores import (
    MetadataStore,
    MetadataStoreTableView,
    NodeEvent,
    Notification,
    SyncerMode,
    SystemTopicTableView,
    TableViewSyncer,
    Topic,
)

Log = list[tuple[str, ServiceUnitStateData | None]]


def full_replay(log: Log) -> dict[str, ServiceUnitStateData]:
    """The view of a reader that read every record: the resolver's fold, key by key."""
    by_key: dict[str, list[ServiceUnitStateData | None]] = defaultdict(list)
    for key, value in log:
        by_key[key].append(value)
    view = {key: fold(values, StorageType.SystemTopic) for key, values in by_key.items()}
    return {key: value for key, value in view.items() if value is not None}


def publish(topic: Topic, log: Log) -> None:
    for key, value in log:
        topic.publish(key, value)


@given(logs, st.integers(min_value=2, max_value=4), st.data())
def test_views_converge_whatever_order_readers_advance_in(log: Log, readers: int, data: st.DataObject) -> None:
    topic = Topic()
    half = data.draw(st.integers(min_value=0, max_value=len(log)))
    publish(topic, log[:half])
    views = [SystemTopicTableView(topic, f"b{i}") for i in range(readers)]
    late = [view for view in views if data.draw(st.booleans())]
    for view in views:
        if view not in late:
            view.start()
    publish(topic, log[half:])
    for view in late:
        view.start()
    order = data.draw(st.lists(st.integers(min_value=0, max_value=readers - 1), max_size=3 * len(log)))
    for i in order:
        views[i].advance()
    for view in views:
        view.catch_up()
    expected = full_replay(log)
    assert all(view.snapshot() == expected for view in views)


@given(logs, st.lists(st.integers(min_value=0, max_value=30), max_size=3))
def test_compacted_snapshot_plus_tail_equals_full_replay(log: Log, cuts: list[int]) -> None:
    topic = Topic()
    published = 0
    for cut in sorted(min(c, len(log)) for c in cuts):
        publish(topic, log[published:cut])
        published = cut
        topic.compact()
    publish(topic, log[published:])
    fresh = SystemTopicTableView(topic, "fresh")
    fresh.start()
    assert fresh.snapshot() == full_replay(log)


@given(tombstone_free_logs, st.integers(min_value=0, max_value=30), st.integers(min_value=0, max_value=30))
def test_a_lagging_reader_fast_forwarded_by_compaction_converges(
    log: list[tuple[str, ServiceUnitStateData]], read_before: int, cut: int
) -> None:
    """The #20110 property: with the gap accepted, a reader that stalled converges. (No
    tombstones here: a skipped tombstone is a divergence of its own, see test_compaction.py.)"""
    records: Log = list(log)
    topic = Topic()
    lagging = SystemTopicTableView(topic, "lagging")
    lagging.start()
    cut = min(cut, len(records))
    publish(topic, records[:cut])
    lagging.advance(read_before)  # then it stalls
    topic.compact()
    publish(topic, records[cut:])
    lagging.catch_up()
    assert lagging.snapshot() == full_replay(records)


@given(
    st.lists(
        st.tuples(
            st.integers(min_value=0, max_value=2),
            st.sampled_from(KEYS),
            st.one_of(st.none(), channel_values(max_version=4)),
        ),
        max_size=25,
    ),
    st.data(),
)
def test_metadata_store_holds_one_value_per_key_and_version(
    ops: list[tuple[int, str, ServiceUnitStateData | None]], data: st.DataObject
) -> None:
    """#24186: racing compare-and-set writers; every (key, version) the store ever held has one value."""
    store = MetadataStore()
    views = [MetadataStoreTableView(store.connect(f"b{i}"), f"b{i}") for i in range(3)]
    for view in views:
        view.start()
    seen: dict[tuple[str, int, int], ServiceUnitStateData] = {}
    epoch: dict[str, int] = defaultdict(int)
    pending = []
    for writer, key, value in ops:
        if value is None:
            views[writer].delete(key)
            epoch[key] += 1
            continue
        pending.append(views[writer].prepare_put(key, value))
        if data.draw(st.booleans()):  # commit the batch of racing puts in a drawn order
            for p in data.draw(st.permutations(pending)):
                if p.commit().applied:
                    slot = (p.key, epoch[p.key], p.value.version_id)
                    assert seen.setdefault(slot, p.value) == p.value
            pending = []
    winners_per_version: dict[tuple[str, int, int], int] = defaultdict(int)
    for slot in seen:
        winners_per_version[slot] += 1
    assert all(count == 1 for count in winners_per_version.values())


@given(
    st.lists(st.tuples(st.sampled_from(["topic", "store"]), records), max_size=20),
    st.lists(st.sampled_from(["topic", "store", "broker"]), max_size=60),
    st.sampled_from(list(SyncerMode)),
)
def test_syncer_leaves_both_views_equal_deletions_included(
    writes: list[tuple[str, tuple[str, ServiceUnitStateData | None]]], steps: list[str], mode: SyncerMode
) -> None:
    clock = ManualClock(1_000)
    topic, store = Topic(clock=clock), MetadataStore(clock)
    syncer = TableViewSyncer(topic, store, mode, clock)
    syncer.start()
    on_topic = SystemTopicTableView(topic, "writer-t")
    on_store = MetadataStoreTableView(store.connect("writer-s"), "writer-s")
    on_topic.start()
    on_store.start()
    step_iter = iter(steps)
    for side, (key, value) in writes:
        clock.advance(10)
        view = on_topic if side == "topic" else on_store
        if value is None:
            view.delete(key)
        else:
            view.put(key, value)
        for step in (next(step_iter, ""), next(step_iter, "")):
            if step == "topic":
                syncer.step_topic()
            elif step == "store":
                syncer.step_store()
            elif step == "broker":
                on_store.client.deliver_all()
    syncer.reconcile()
    assert syncer.in_sync()
    fresh_topic = SystemTopicTableView(topic, "check-t")
    fresh_store = MetadataStoreTableView(store.connect("check-s"), "check-s")
    fresh_topic.start()
    fresh_store.start()
    assert fresh_topic.snapshot() == fresh_store.snapshot()


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["put", "delete", "lose", "reconnect", "deliver-a", "deliver-b"]),
            st.sampled_from(KEYS),
            channel_values(max_version=3),
        ),
        max_size=30,
    )
)
def test_session_loss_never_leaves_stale_entries_once_reestablished(
    ops: list[tuple[str, str, ServiceUnitStateData]],
) -> None:
    store = MetadataStore()
    a = MetadataStoreTableView(store.connect("a"), "a")
    b = MetadataStoreTableView(store.connect("b"), "b")
    a.start()
    b.start()
    for op, key, value in ops:
        if op == "put":
            b.put(key, value)
        elif op == "delete":
            b.delete(key)
        elif op == "lose":
            a.client.expire_session()
        elif op == "reconnect":
            a.client.reconnect()
        elif op == "deliver-a":
            a.client.deliver_next()
        else:
            b.client.deliver_next()
    a.client.reconnect()
    a.client.deliver_all()
    truth = MetadataStoreTableView(store.connect("truth"), "truth")
    truth.start()
    assert a.snapshot() == truth.snapshot()


def test_notifications_carry_paths_not_values() -> None:
    store = MetadataStore()
    client = store.connect("c")
    seen: list[Notification] = []
    client.add_listener(seen.append)
    client.put("/service_unit_state/x/y/0x00000000_0xffffffff", b"{}", None)
    client.deliver_all()
    assert [n.event for n in seen] == [NodeEvent.Created]
