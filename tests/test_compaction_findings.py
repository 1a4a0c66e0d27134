"""What strategic compaction does to a reader that lags behind the compaction horizon.

Pulsar serves a read-compacted reader that is behind the horizon from the compacted ledger, which
holds one value per live key: superseded records *and tombstones* are gone. The gap rule (#20110)
makes the first case safe; these tests pin down both cases on the model, as Pulsar behaves.
"""

from __future__ import annotations

from statechan import Reason
from statechan.stores import SystemTopicTableView, Topic
from tests.channel_values import KEY, S, v


def lagging_setup() -> tuple[Topic, SystemTopicTableView, SystemTopicTableView]:
    topic = Topic()
    fast, slow = SystemTopicTableView(topic, "fast"), SystemTopicTableView(topic, "slow")
    fast.start()
    slow.start()
    return topic, fast, slow


def test_a_version_jump_after_compaction_is_taken() -> None:
    topic, fast, slow = lagging_setup()
    for version, value in enumerate(
        [
            v(S.Assigning, "b1"),
            v(S.Owned, "b1", version=2),
            v(S.Releasing, "b2", "b1", 3),
            v(S.Assigning, "b2", "b1", 4),
            v(S.Owned, "b2", "b1", 5),
        ],
        start=1,
    ):
        assert value.version_id == version
        topic.publish(KEY, value)
    slow.advance(2)  # holds Owned(b1) v2, then stalls
    topic.compact()
    fast.catch_up()
    slow.catch_up()
    assert slow.get(KEY) == fast.get(KEY) == v(S.Owned, "b2", "b1", 5)
    assert slow.stats.accepted[Reason.ACCEPTED_VERSION_GAP] == 1


def test_a_lagging_reader_misses_a_deletion_it_was_not_shown() -> None:
    topic, fast, slow = lagging_setup()
    topic.publish(KEY, v(S.Assigning, "b1"))
    topic.publish(KEY, v(S.Owned, "b1", version=2))
    slow.advance(2)
    topic.publish(KEY, v(S.Releasing, None, "b1", 3))
    topic.publish(KEY, v(S.Free, None, "b1", 4))
    topic.publish(KEY, None)  # the leader tombstones Free
    topic.compact()  # the key is gone from the compacted ledger
    fast.catch_up()
    slow.catch_up()
    assert KEY not in fast
    assert slow.get(KEY) == v(S.Owned, "b1", version=2)  # the slow view still names b1 the owner


def test_a_recreated_key_is_refused_by_a_reader_that_missed_the_tombstone() -> None:
    topic, fast, slow = lagging_setup()
    topic.publish(KEY, v(S.Assigning, "b1"))
    topic.publish(KEY, v(S.Owned, "b1", version=2))
    topic.publish(KEY, v(S.Releasing, None, "b1", 3))
    slow.advance(3)
    topic.publish(KEY, v(S.Free, None, "b1", 4))
    topic.publish(KEY, None)
    topic.publish(KEY, v(S.Assigning, "b2"))  # versions start again at 1
    topic.publish(KEY, v(S.Owned, "b2", version=2))
    topic.compact()
    fast.catch_up()
    slow.catch_up()
    assert fast.get(KEY) == v(S.Owned, "b2", version=2)
    assert slow.get(KEY) == v(S.Releasing, None, "b1", 3)
    assert slow.stats.rejected[Reason.STALE_VERSION] == 1
