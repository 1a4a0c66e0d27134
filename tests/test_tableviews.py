"""The two table views, behaviour by behaviour (reference sections 3.2, 4 and 6)."""

from __future__ import annotations

from collections.abc import Callable

import pytest

from statechan import Reason, ServiceUnitStateData
from statechan.stores import (
    PATH_PREFIX,
    MetadataStoreTableView,
    SessionEvent,
    Store,
    SystemTopicTableView,
    Topic,
    ViewClosedError,
    key_of,
    path_of,
)
from tests.channel_values import KEY, KEY2, S, v

NewStore = Callable[[], Store]
"""The ``new_store`` fixture (conftest): each metadata-store test runs on the in-process store and on
a real ZooKeeper."""
Events = list[tuple[str, str, ServiceUnitStateData | None]]


def recorder(events: Events, kind: str):  # type: ignore[no-untyped-def]
    return lambda key, value: events.append((kind, key, value))


# -- keys and paths -----------------------------------------------------------------------------
def test_metadata_paths() -> None:
    assert path_of(KEY) == "/service_unit_state/pulsar/test/0x00000000_0xffffffff"
    assert key_of(path_of(KEY)) == KEY
    assert key_of("/service_unit_state/pulsar/test") is None
    assert key_of("/loadbalance/brokers/b1") is None


# -- system topic ----------------------------------------------------------------------------------
def test_topic_put_always_succeeds_and_readers_decide() -> None:
    topic = Topic()
    view = SystemTopicTableView(topic, "b1")
    view.start()
    view.put(KEY, v(S.Owned, "b1", version=3))
    result = view.put(KEY, v(S.Owned, "b2", version=2))  # stale: published anyway
    assert result.applied is None
    assert result.message is not None
    assert result.message.offset == 1
    view.flush()
    assert view.get(KEY) == v(S.Owned, "b1", version=3)
    assert view.stats.rejected[Reason.STALE_VERSION] == 1


def test_topic_listeners_see_only_accepted_records_and_tombstones() -> None:
    topic = Topic()
    events: Events = []
    view = SystemTopicTableView(topic, "b1")
    view.start(tail=recorder(events, "tail"))
    view.put(KEY, v(S.Assigning, "b1"))
    view.put(KEY, v(S.Assigning, "b2"))  # race loser
    view.put(KEY, v(S.Owned, "b1", version=2))
    view.delete(KEY)
    assert view.advance(10) == 4
    assert [(kind, value.state if value else None) for kind, _, value in events] == [
        ("tail", S.Assigning),
        ("tail", S.Owned),
        ("tail", None),
    ]
    assert KEY not in view


def test_topic_existing_listeners_run_at_start_for_what_was_already_there() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Owned, "b1"))
    topic.publish(KEY2, v(S.Owned, "b2"))
    events: Events = []
    view = SystemTopicTableView(topic, "b3")
    view.start(tail=recorder(events, "tail"), existing=recorder(events, "existing"))
    assert sorted((kind, key) for kind, key, _ in events) == sorted([("existing", KEY), ("existing", KEY2)])


def test_topic_first_write_of_a_key_may_have_any_version() -> None:
    topic = Topic()
    view = SystemTopicTableView(topic, "b1")
    view.start()
    view.put(KEY, v(S.Owned, "b1", version=5))
    view.flush()
    assert view.get(KEY) == v(S.Owned, "b1", version=5)


def test_topic_fast_forwards_a_version_gap() -> None:
    topic = Topic()
    view = SystemTopicTableView(topic, "b1")
    view.start()
    view.put(KEY, v(S.Owned, "b1", version=1))
    view.put(KEY, v(S.Owned, "b2", "b1", version=3))
    view.flush()
    assert view.get(KEY) == v(S.Owned, "b2", "b1", version=3)
    assert view.stats.accepted[Reason.ACCEPTED_VERSION_GAP] == 1


def test_topic_put_of_none_is_a_delete() -> None:
    topic = Topic()
    view = SystemTopicTableView(topic, "b1")
    view.start()
    view.put(KEY, v(S.Owned, "b1"))
    view.put(KEY, None)
    view.flush()
    assert KEY not in view


def test_topic_views_advance_independently() -> None:
    topic = Topic()
    a, b = SystemTopicTableView(topic, "a"), SystemTopicTableView(topic, "b")
    a.start()
    b.start()
    a.put(KEY, v(S.Assigning, "a"))
    a.advance()
    assert (a.get(KEY) is not None, b.get(KEY) is None, b.pending) == (True, True, 1)


def test_topic_malformed_record_is_counted_and_skipped_without_harm() -> None:
    topic = Topic()
    view = SystemTopicTableView(topic, "b1")
    view.start()
    view.put(KEY, v(S.Owned, "b1"))
    topic.publish_raw(KEY, b"\x00not json")
    view.put(KEY, v(S.Releasing, None, "b1", version=2))
    view.flush()
    assert view.stats.malformed == 1
    assert view.stats.errors[0].startswith("message 1:1 ")
    assert view.get(KEY) == v(S.Releasing, None, "b1", version=2)
    assert topic.message(1).payload == b"\x00not json"


def test_owned_service_units() -> None:
    topic = Topic()
    view = SystemTopicTableView(topic, "b1")
    view.start()
    view.put(KEY, v(S.Owned, "b1"))
    view.put(KEY2, v(S.Splitting, None, "b1"))
    view.put("pulsar/test/0x7fffffff_0xffffffff", v(S.Owned, "b2"))
    view.flush()
    assert view.owned_service_units() == {KEY, KEY2}
    assert view.owned_service_units("b2") == {"pulsar/test/0x7fffffff_0xffffffff"}


def test_closed_view_refuses_writes() -> None:
    view = SystemTopicTableView(Topic(), "b1")
    view.start()
    view.close()
    with pytest.raises(ViewClosedError):
        view.put(KEY, v(S.Owned, "b1"))
    assert not view.is_metadata_store_based


# -- metadata store -------------------------------------------------------------------------------
def store_views(new_store: NewStore, *names: str) -> tuple[Store, list[MetadataStoreTableView]]:
    store = new_store()
    views = [MetadataStoreTableView(store.connect(n), n) for n in names]
    for view in views:
        view.start()
    return store, views


def test_store_first_write_must_be_version_one(new_store: NewStore) -> None:
    _, (view,) = store_views(new_store, "b1")
    refused = view.put(KEY, v(S.Owned, "b1", version=2))
    assert (refused.applied, refused.verdict and refused.verdict.reason) == (False, Reason.FIRST_WRITE_NOT_V1)
    assert view.put(KEY, v(S.Owned, "b1")).applied is True


def test_store_refuses_a_version_gap(new_store: NewStore) -> None:
    _, (view,) = store_views(new_store, "b1")
    view.put(KEY, v(S.Assigning, "b1"))
    result = view.put(KEY, v(S.Owned, "b1", version=3))
    assert result.verdict is not None
    assert (result.applied, result.verdict.reason) == (False, Reason.VERSION_GAP_REJECTED)


def test_store_conflicting_put_completes_without_error_and_says_so(new_store: NewStore) -> None:
    _, (a, b) = store_views(new_store, "a", "b")
    assert a.put(KEY, v(S.Assigning, "a")).applied is True
    result = b.put(KEY, v(S.Assigning, "b"))
    assert result.applied is False
    assert result.error is None
    assert b.stats.puts_refused == 1


def test_store_put_of_none_is_refused(new_store: NewStore) -> None:
    _, (view,) = store_views(new_store, "b1")
    with pytest.raises(ValueError, match="NonNull"):
        view.put(KEY, None)  # type: ignore[arg-type]


def test_store_racing_writers_at_one_version_exactly_one_wins(new_store: NewStore) -> None:
    store, (a, b) = store_views(new_store, "a", "b")
    a.put(KEY, v(S.Assigning, "x"))
    pa = a.prepare_put(KEY, v(S.Owned, "x", version=2))
    pb = b.prepare_put(KEY, v(S.Owned, "x", version=2, ts=9))
    assert pa.verdict.accepted
    assert pb.verdict.accepted
    assert pa.commit().applied is True
    lost = pb.commit()
    assert (lost.applied, lost.error) == (False, "conflict: BadVersionError")
    data, stat = store.dump()[path_of(KEY)]
    assert stat.version == 1
    assert ServiceUnitStateData.model_validate_json(data) == v(S.Owned, "x", version=2)


def test_bug_24186_retry_without_recheck_writes_two_values_at_one_version(new_store: NewStore) -> None:
    store = new_store()
    a = MetadataStoreTableView(store.connect("a"), "a")
    b = MetadataStoreTableView(store.connect("b"), "b", retry_bad_version_without_recheck=True)
    a.start()
    b.start()
    a.put(KEY, v(S.Assigning, "x"))
    pa = a.prepare_put(KEY, v(S.Owned, "x", version=2))
    pb = b.prepare_put(KEY, v(S.Owned, "x", version=2, ts=9))
    pa.commit()
    assert pb.commit().applied is True  # the second value overwrote the first at the same versionId
    assert b.get(KEY) == v(S.Owned, "x", version=2, ts=9)
    assert a.get(KEY) == v(S.Owned, "x", version=2)


def test_store_local_update_is_immediate_and_notifications_follow(new_store: NewStore) -> None:
    _, (a, b) = store_views(new_store, "a", "b")
    events: Events = []
    a._tail.append(recorder(events, "a"))
    b._tail.append(recorder(events, "b"))
    a.put(KEY, v(S.Assigning, "a"))
    assert [(kind, key) for kind, key, _ in events] == [("a", KEY)]
    assert b.get(KEY) is None
    b.client.deliver_all()
    a.client.deliver_all()  # the writer's own notification: an equal value, suppressed
    assert [(kind, key) for kind, key, _ in events] == [("a", KEY), ("b", KEY)]
    assert a.stats.equal_updates_skipped == 1


def test_store_delete_has_no_resolver_and_ignores_a_missing_node(new_store: NewStore) -> None:
    _, (a, b) = store_views(new_store, "a", "b")
    a.put(KEY, v(S.Assigning, "a"))
    assert a.delete(KEY).applied is True
    assert a.delete(KEY).applied is True
    assert KEY not in a
    b.client.deliver_all()
    assert KEY not in b


def test_store_flush_is_a_no_op_and_views_report_their_kind(new_store: NewStore) -> None:
    _, (a,) = store_views(new_store, "a")
    a.flush()
    assert a.is_metadata_store_based


def test_store_session_loss_outdates_then_refills(new_store: NewStore) -> None:
    _, (a, b) = store_views(new_store, "a", "b")
    events: Events = []
    a._outdated.append(recorder(events, "outdated"))
    a._existing.append(recorder(events, "existing"))
    a.put(KEY, v(S.Assigning, "a"))
    a.put(KEY2, v(S.Assigning, "a"))
    a.client.expire_session()
    assert a.client.deliver_next() is SessionEvent.SessionLost
    assert sorted((kind, key) for kind, key, _ in events) == sorted([("outdated", KEY), ("outdated", KEY2)])
    assert len(a) == 0
    b.client.deliver_all()
    b.put(KEY, v(S.Owned, "a", version=2))  # a change a misses during the gap
    b.delete(KEY2)
    assert a.put(KEY, v(S.Owned, "z", version=3)).error is not None  # no session: the write fails
    a.client.reconnect()
    a.client.deliver_all()
    assert a.snapshot() == {KEY: v(S.Owned, "a", version=2)}
    assert ("existing", KEY) in [(kind, key) for kind, key, _ in events]


def test_ephemeral_nodes_vanish_with_their_session(new_store: NewStore) -> None:
    store = new_store()
    client, other = store.connect("b1"), store.connect("b2")
    client.create("/loadbalance/brokers/b1", b"{}", ephemeral=True)
    client.create("/loadbalance/leader", b"b1")
    client.expire_session()
    assert other.get("/loadbalance/brokers/b1") is None
    assert other.get("/loadbalance/leader") is not None
    events = [other.deliver_next(), other.deliver_next(), other.deliver_next()]
    assert [e.event.value for e in events if e is not None and not isinstance(e, SessionEvent)] == [
        "Created",
        "Created",
        "Deleted",
    ]


def test_store_cas_semantics(new_store: NewStore) -> None:
    from statechan.stores import BadVersionError, NodeExistsError, NoNodeError

    client = new_store().connect("c")
    stat = client.put("/a/b", b"1", expected_version=-1)
    assert stat.version == 0
    with pytest.raises(NodeExistsError):
        client.put("/a/b", b"2", expected_version=-1)
    with pytest.raises(BadVersionError):
        client.set("/a/b", b"2", expected_version=5)
    assert client.set("/a/b", b"2", expected_version=0).version == 1
    assert client.children("/a") == ["b"]
    with pytest.raises(NoNodeError):
        client.delete("/a/c")
    client.delete("/a/b")
    assert client.children("/") == []


def test_store_malformed_node_is_counted_not_fatal(new_store: NewStore) -> None:
    store = new_store()
    store.connect("writer").put(path_of(KEY), b"{oops", None)
    store.connect("writer2").put(path_of(KEY2), v(S.Owned, "b1").to_json().encode(), None)
    view = MetadataStoreTableView(store.connect("b1"), "b1")
    view.start()
    assert view.snapshot() == {KEY2: v(S.Owned, "b1")}
    assert view.stats.malformed == 1
    assert PATH_PREFIX in view.stats.errors[0]
