"""The compact search on several worker processes: the same states, transitions, coverage,
verdict, reduction and shortest counterexample as in one process, with the states kept where
they were made or moved to even the load, in memory or on disk."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest

import statechan.checker as checker_module
from statechan.checker import Bounds, check, frontier
from statechan.checker.parallel import WorkerFailed
from statechan.cluster import StoreKind
from tests.test_search_compact import SMALL, _found


@pytest.fixture(autouse=True)
def _workers_from_the_first_level(monkeypatch: pytest.MonkeyPatch) -> None:
    """The workers take over at the root's successors, so these small bounds run on them throughout
    (by default the levels below ``HANDOVER`` states are expanded in the search's own process)."""
    import statechan.checker.parallel as parallel

    monkeypatch.setattr(parallel, "HANDOVER", 0)


CASES = [
    (SMALL.model_copy(update={"crashes": 1, "restarts": 1}), StoreKind.system_topic, "25379", {}, True),
    (Bounds(lookups=2, admin=0, ticks=1), StoreKind.metadata_store, "24186", {}, False),
    (Bounds(admin_kinds=("unload",), ticks=4, timely_delivery_ms=None), StoreKind.system_topic, "current", {}, True),
    (Bounds(compactions=1, depth=6), StoreKind.system_topic, "current", {}, False),
    (SMALL, StoreKind.system_topic, "current", {"max_states": 300, "por": False}, True),
]


@pytest.mark.parametrize("case", CASES, ids=["25379", "24186", "untimely", "depth-bound", "state-bound"])
def test_two_workers_find_what_one_process_finds(
    case: tuple[Bounds, StoreKind, str, dict[str, object], bool], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Partial-order reduction included: the workers flag the ample deliveries, and the merge
    applies the cycle proviso in the order one process does."""
    bounds, store, variant, options, spilled = case
    if spilled:
        monkeypatch.setattr(frontier, "KEEP", 0)
    one = check(bounds, store, variant, **options)  # type: ignore[arg-type]
    two = check(bounds, store, variant, workers=2, **options)  # type: ignore[arg-type]
    assert _found(two) == _found(one)
    assert one.states > 200


def test_the_merge_decides_the_reduction_where_a_worker_cannot(monkeypatch: pytest.MonkeyPatch) -> None:
    """A worker applies the reduction's cycle proviso itself where the states it knows (every
    level before) decide it; where a delivery's successor was first met earlier in the same
    expansion, only the merge knows whether another worker met it this level first (one level
    deeper: the proviso holds), so the worker expands fully and the merge decides."""
    import statechan.checker.parallel as parallel

    undecided = []
    stream = parallel.Workers._stream

    def counting(self: parallel.Workers, w: int) -> Iterator[tuple[int, Any]]:
        for index, expansion in stream(self, w):
            undecided.append(expansion.undecided)
            yield index, expansion

    monkeypatch.setattr(parallel.Workers, "_stream", counting)
    bounds = Bounds(brokers=3, ticks=1)
    one = check(bounds)
    two = check(bounds, workers=2)
    assert _found(two) == _found(one)
    assert one.reduced > 1_000
    assert 0 < sum(undecided) < 100


def test_three_workers_on_levels_on_disk_find_what_one_process_finds(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(frontier, "KEEP", 0)
    bounds = Bounds(admin=0, ticks=2, crashes=1)
    one = check(bounds)
    three = check(bounds, workers=3)
    assert _found(three) == _found(one)
    assert three.disk_mb > 0


def test_a_worker_that_fails_stops_the_search_with_its_traceback(monkeypatch: pytest.MonkeyPatch) -> None:
    search = os.getpid()
    expand = checker_module._Expander.expand

    def broken(*args: Any, **kwargs: Any) -> Any:
        if os.getpid() != search:  # in a forked worker only: the search's own share goes on
            raise RuntimeError("the expander broke")
        return expand(*args, **kwargs)

    monkeypatch.setattr(checker_module._Expander, "expand", broken)
    with pytest.raises(WorkerFailed, match="the expander broke"):
        check(SMALL, workers=2)


@pytest.mark.parametrize("store", [StoreKind.system_topic, StoreKind.metadata_store])
def test_workers_that_take_over_mid_search_find_what_one_process_finds(
    store: StoreKind, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The levels below ``HANDOVER`` states are expanded in the search's process; the workers fork at
    the first level of at least that many and go on from there (each with every other state of it
    and the keys of every state found so far), to the same result."""
    import statechan.checker.parallel as parallel

    monkeypatch.setattr(parallel, "HANDOVER", 20)
    taken: list[int] = []
    start = parallel.Workers.__init__

    def recording(self: parallel.Workers, *args: Any) -> None:
        start(self, *args)
        taken.append(self.queued)

    monkeypatch.setattr(parallel.Workers, "__init__", recording)
    bounds = Bounds(brokers=3, admin=0)
    one = check(bounds, store)
    two = check(bounds, store, workers=2)
    assert _found(two) == _found(one)
    first = next(size for size in one.levels if size >= 20)
    assert taken == [first]
    assert one.levels[0] < 20  # the first levels were this process's


def test_a_search_whose_levels_stay_small_starts_no_worker(monkeypatch: pytest.MonkeyPatch) -> None:
    import statechan.checker.parallel as parallel

    monkeypatch.setattr(parallel, "HANDOVER", 10**9)
    monkeypatch.setattr(parallel.Workers, "__init__", lambda *args: pytest.fail("a worker was started"))
    assert _found(check(SMALL, workers=2)) == _found(check(SMALL))


def test_the_shares_follow_each_process_s_speed_and_the_merge() -> None:
    """Each level is shared out so that the processes finish together: by how many states a second
    each expanded the level before, this process less by the merge's time; the fixed weights
    before any process has expanded a state."""
    from statechan.checker.parallel import MERGE_WEIGHT, share_out

    assert share_out(1000, [(100, 1.0), (100, 1.0)], 0.0) == [500, 500]
    own, worker = share_out(1000, [(100, 1.0), (100, 1.0)], 0.002)  # the merge: 2 s of 10 s in all
    assert (own, worker) == (400, 600)
    slow, fast = share_out(900, [(100, 2.0), (100, 1.0)], 0.0)  # this process at half the speed
    assert (slow, fast) == (300, 600)
    assert share_out(10, [(100, 1.0), (100, 1.0)], 1.0) == [0, 10]  # a merge slower than expanding it all
    assert share_out(90, [(0, 0.0), (100, 1.0)], 0.0) == [
        -(-90 * MERGE_WEIGHT // (MERGE_WEIGHT + 1)),
        -(-90 // (MERGE_WEIGHT + 1)),
    ]
    assert sum(share_out(1001, [(7, 0.3), (5, 0.2), (9, 0.4)], 0.001)) >= 1001
