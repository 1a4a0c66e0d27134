"""The store mirror (statechan.cluster.mirror) against the in-process store: it follows the
model's operations, holds deletions a real store delivers in another order (ZooKeeper does not
define the order in which a closed session's ephemeral nodes go), and stops at any other
difference."""

from __future__ import annotations

import pytest

from statechan.clock import ManualClock
from statechan.cluster.config import SimConfig
from statechan.cluster.mirror import MirrorMismatch, StoreMirror
from statechan.cluster.state import LEADER_PATH, Path
from statechan.stores.metadata import MetadataStore

LEAVING, WATCHING = (0, 1), (1, 1)


def _closed() -> StoreMirror:
    """Broker 1 held its registry node and the leader node and closes; broker 2, which watched,
    has both deletions queued, in the in-process store's order."""
    mirror = StoreMirror(MetadataStore(ManualClock()), SimConfig())
    mirror.follow(
        [
            ("connect", LEAVING, None, None, None, None),
            ("connect", WATCHING, None, None, None, None),
            ("create-ephemeral", LEAVING, 0, (0, True), None, None),
            ("create-ephemeral", LEAVING, LEADER_PATH, (0, True), None, None),
            ("drop", WATCHING, None, None, None, None),
            ("close", LEAVING, None, None, None, None),
        ],
        "start, then broker 1 closes",
    )
    return mirror


def test_a_closed_session_s_deletions_may_come_in_either_order() -> None:
    orders: list[list[Path]] = [[0, LEADER_PATH], [LEADER_PATH, 0]]
    for model_order in orders:  # one of them is not the store's
        mirror = _closed()
        mirror.follow([("deliver", WATCHING, path, None, None, "Deleted") for path in model_order], "deliveries")
        assert not mirror.ahead[WATCHING]


def test_any_other_difference_stops_the_run() -> None:
    mirror = StoreMirror(MetadataStore(ManualClock()), SimConfig())
    mirror.follow(
        [
            ("connect", LEAVING, None, None, None, None),
            ("connect", WATCHING, None, None, None, None),
            ("create-ephemeral", LEAVING, 0, (0, True), None, None),
        ],
        "start",
    )
    with pytest.raises(MirrorMismatch, match=r"was delivered \('Created', '/loadbalance/brokers/broker-1:8080'\)"):
        mirror.follow([("deliver", WATCHING, 0, None, None, "Deleted")], "a deletion that did not happen")
