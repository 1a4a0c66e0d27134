"""The history invariants on hand-written bundle histories (channel and view records): what each
reports, and the flows the protocol allows that they leave alone. The auditor runs these same
functions on traces with view records (tests/test_audit.py)."""

from __future__ import annotations

from typing import Any

import pytest

from statechan.invariants.catalogue import check_history, histories_from_trace
from statechan.states import StorageType

KEY = "t/ns/0x00000000_0xffffffff"
B0, B1 = "b0:8080", "b1:8080"


def v(state: str, version: int, dst: str | None = B0, **more: Any) -> dict[str, Any]:
    return {"state": state, "dstBroker": dst, "versionId": version, "timestamp": 1, **more}


def channel(offset: int, value: dict[str, Any] | None) -> dict[str, Any]:
    return {"kind": "channel", "offset": offset, "publish_time": offset, "key": KEY, "value": value}


def view(offset: int, observer: str, value: dict[str, Any] | None, accepted: bool = True) -> dict[str, Any]:
    return {
        "kind": "view",
        "offset": offset,
        "time": offset,
        "observer": observer,
        "key": KEY,
        "value": value,
        "accepted": accepted,
    }


def found(records: list[dict[str, Any]], storage: StorageType = StorageType.SystemTopic) -> list[str]:
    (history,) = histories_from_trace(records, storage)
    ids = ["version-monotonic", "one-value-per-version"]
    return [f"{v.invariant} @ {v.offset}: {v.detail}" for v in check_history(history, ids)]


ASSIGN, OWN = v("Assigning", 1), v("Owned", 2)


CASES: list[tuple[str, list[dict[str, Any]], StorageType, list[str]]] = [
    (
        "a view that takes what the channel settled, in order",
        [channel(0, ASSIGN), view(1, B1, ASSIGN), channel(2, OWN), view(3, B1, OWN)],
        StorageType.SystemTopic,
        [],
    ),
    (
        "a view that goes back a version",
        [channel(0, ASSIGN), channel(1, OWN), view(2, B1, OWN), view(3, B1, ASSIGN)],
        StorageType.SystemTopic,
        ["version-monotonic @ 3: b1:8080 went from Owned dst=b0:8080 v2 to Assigning dst=b0:8080 v1"],
    ),
    (
        "a view that refuses a record keeps what it held",
        [channel(0, ASSIGN), channel(1, OWN), view(2, B1, OWN), view(3, B1, ASSIGN, accepted=False)],
        StorageType.SystemTopic,
        [],
    ),
    (
        "a deletion starts the versions again",
        [
            channel(0, ASSIGN),
            channel(1, OWN),
            channel(2, v("Deleted", 3)),
            channel(3, None),
            channel(4, ASSIGN),
            view(5, B1, OWN),
            view(6, B1, None),
            view(7, B1, ASSIGN),
        ],
        StorageType.SystemTopic,
        [],
    ),
    (
        "a view that takes a value the channel never settled on",
        [channel(0, ASSIGN), view(1, B1, v("Assigning", 1, dst=B1))],
        StorageType.SystemTopic,
        ["one-value-per-version @ 1: b1:8080 took Assigning dst=b1:8080 v1, which the channel never settled on"],
    ),
    (
        "two committed writes at one version that differ only where the brief form does not show",
        [channel(0, ASSIGN), channel(1, OWN), channel(2, v("Owned", 2, timestamp=7))],
        StorageType.MetadataStore,
        [
            "one-value-per-version @ 2: version 2 holds Owned dst=b0:8080 v2 and then Owned dst=b0:8080 v2, "
            "which differs in timestamp"
        ],
    ),
    (
        "on a topic the resolver refuses the second write, so nothing settled twice",
        [channel(0, ASSIGN), channel(1, OWN), channel(2, v("Owned", 2, timestamp=7))],
        StorageType.SystemTopic,
        [],
    ),
]


@pytest.mark.parametrize(("records", "storage", "expected"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_history_invariants(records: list[dict[str, Any]], storage: StorageType, expected: list[str]) -> None:
    assert found(records, storage) == expected


def test_a_compaction_divergence_is_reported_at_the_newest_record_the_compaction_covers() -> None:
    """A reader of the key's first lifetime falls behind; the log compacted after the second
    lifetime's Assigning (offset 3) serves it a value it refuses, so it never follows the tail."""
    records = [
        channel(0, ASSIGN),
        channel(1, OWN),
        channel(2, None),
        channel(3, v("Assigning", 1, dst=B1)),
        channel(4, v("Owned", 2, dst=B1)),
    ]
    (history,) = histories_from_trace(records, StorageType.SystemTopic)
    (violation,) = check_history(history, ["compaction-keeps-deletions"])
    assert (violation.key, violation.offset) == (KEY, 3)
    assert "compacted at 4" in violation.detail
    assert check_history(history, ["compaction-equivalence"]) == []
