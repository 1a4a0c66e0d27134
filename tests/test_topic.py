"""The in-process topic: publishing, readers, message ids, strategic compaction."""

from __future__ import annotations

import pytest

from statechan.clock import ManualClock
from statechan.stores import COMPACTION_THRESHOLD, MalformedValueError, Topic
from tests.channel_values import KEY, KEY2, S, v


def test_publish_assigns_offsets_ids_times_and_producers() -> None:
    clock = ManualClock(1_000)
    topic = Topic(clock=clock)
    first = topic.publish(KEY, v(S.Assigning, "b1"), producer="b1")
    clock.advance(5)
    second = topic.publish(KEY, None, producer="b2")
    assert (first.offset, second.offset) == (0, 1)
    assert str(first.message_id) == "1:0"
    assert (first.publish_time, second.publish_time) == (1_000, 1_005)
    assert second.is_tombstone
    assert second.value() is None
    assert first.value() == v(S.Assigning, "b1")
    assert first.payload is not None
    assert b'"dstBroker":"b1"' in first.payload


def test_publishing_never_checks() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Owned, "b1", version=7))
    topic.publish(KEY, v(S.Deleted, None, "b1", version=3))  # stale and invalid: still appended
    assert len(topic) == 2


def test_readers_have_their_own_positions() -> None:
    topic = Topic()
    for i in range(3):
        topic.publish(KEY, v(S.Owned, f"b{i}", version=i + 1))
    a, b = topic.reader("a"), topic.reader("b")
    assert a.read_next() is not None
    assert (a.position, b.position, a.lag, b.lag) == (1, 0, 2, 3)
    assert [m.offset for m in b.read_all()] == [0, 1, 2]
    assert b.read_next() is None


def test_malformed_payload_is_kept_in_the_log_and_reported_with_its_message_id() -> None:
    topic = Topic()
    message = topic.publish_raw(KEY, b'{"state":"Owned"}')
    with pytest.raises(MalformedValueError, match=r"message 1:0 .*Empty broker"):
        message.value()
    assert topic.message(0).payload == b'{"state":"Owned"}'


def test_compaction_keeps_the_first_valid_value_not_the_last() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Assigning, "b1"))
    topic.publish(KEY, v(S.Assigning, "b2"))  # loses the race: same version
    report = topic.compact()
    assert (report.horizon, report.kept, report.dropped_messages) == (2, 1, 1)
    assert [m.value() for m in topic.compacted] == [v(S.Assigning, "b1")]


def test_compaction_drops_keys_that_end_in_a_tombstone() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Owned, "b1"))
    topic.publish(KEY2, v(S.Owned, "b1"))
    topic.publish(KEY, None)
    report = topic.compact()
    assert report.deleted_keys == 1
    assert [m.key for m in topic.compacted] == [KEY2]


def test_compaction_is_incremental() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Assigning, "b1"))
    topic.compact()
    topic.publish(KEY, v(S.Owned, "b1", version=2))
    topic.publish(KEY, v(S.Owned, "b9", version=2))  # stale
    topic.compact()
    assert [m.offset for m in topic.compacted] == [1]


def test_a_lagging_compacted_reader_is_fast_forwarded() -> None:
    topic = Topic()
    for version, state in enumerate([S.Assigning, S.Owned], start=1):
        topic.publish(KEY, v(state, "b1", version=version))
    topic.publish(KEY, v(S.Releasing, "b2", "b1", 3))
    topic.publish(KEY, v(S.Assigning, "b2", "b1", 4))
    reader = topic.reader("lagging")
    assert reader.read_next() is not None  # read Assigning v1, then stall
    topic.compact()
    assert [m.offset for m in reader.read_all()] == [3]  # only the compacted survivor
    raw = topic.reader("raw", read_compacted=False)
    assert len(list(raw.read_all())) == 4


def test_compaction_threshold() -> None:
    topic = Topic()
    assert topic.compaction_threshold == COMPACTION_THRESHOLD == 5 * 1024 * 1024
    topic.compaction_threshold = 100
    assert not topic.needs_compaction()
    for i in range(3):
        topic.publish(KEY, v(S.Owned, "b1", version=i + 1))
    assert topic.needs_compaction()
    topic.compact()
    assert not topic.needs_compaction()
    topic.compaction_threshold = 0
    assert not topic.compaction_enabled


def test_compaction_horizon_must_move_forward() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Owned, "b1"))
    topic.compact()
    with pytest.raises(ValueError, match="within"):
        topic.compact(until=0)


def test_a_reader_behind_the_horizon_has_nothing_next_when_compaction_left_it_nothing() -> None:
    topic = Topic()
    topic.publish(KEY, v(S.Assigning, "b1"))
    topic.publish(KEY, None)
    reader = topic.reader("lagging")
    topic.compact()  # the key ends in a tombstone: the snapshot is empty, the horizon is the end
    assert reader.lag == 2  # offsets not passed ...
    assert not reader.has_next()  # ... but nothing to read
    assert reader.read_next() is None
    topic.publish(KEY2, v(S.Owned, "b2"))
    fresh = topic.reader("fresh")
    assert fresh.has_next()
    assert fresh.read_next() is not None
    assert reader.has_next()
    assert reader.read_next() is not None
    assert not reader.has_next()
