"""Swarm verification: many seeded random walks through the bounded space, each diversified (its
own depth limit and its own weights over the action kinds), every cluster and step invariant
checked on every step (SPIN's swarm, Holzmann et al.). For bounds no search can finish: it finds
bugs, and it proves nothing — it covers some of the space, says how much, and cannot check that
every state can settle."""

from __future__ import annotations

import multiprocessing
import random
import time
from array import array
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from statechan.bounds import Bounds
from statechan.checker.table import FingerprintTable, key64
from statechan.cluster.actions import Action
from statechan.cluster.config import StoreKind, Variant
from statechan.observation import Observation

if TYPE_CHECKING:
    from statechan.checker import _Expander

NOT_PROVEN = (
    "not a proof: random walks cover part of the bounded space, so an invariant may still break in a "
    "state no walk reached, and a walk cannot show that every state can settle (liveness is not checked)"
)
"""What a swarm cannot show, said with every verdict it gives."""


@dataclass
class Walk:
    """One walk's outcome."""

    index: int
    steps: int
    keys: array[int]
    """The 64-bit keys of the states it passed (for the states covered)."""
    violation: str | None = None
    path: list[Action] = field(default_factory=list)
    picks: list[int] = field(default_factory=list)


@dataclass
class SwarmResult:
    """What a swarm covered and the shortest counterexample it found."""

    bounds: Bounds
    store: StoreKind
    variant: str | Variant
    walks: int = 0
    steps: int = 0
    states: int = 0
    """Distinct states the walks passed (after symmetry reduction)."""
    seconds: float = 0.0
    violation: str | None = None
    path: list[Action] = field(default_factory=list)
    picks: list[int] = field(default_factory=list)
    found_by: int = -1
    """The walk that found the counterexample reported (the shortest; the first of equals)."""
    violating_walks: int = 0

    @property
    def ok(self) -> bool:
        return self.violation is None

    @property
    def verdict(self) -> str:
        if self.violation is not None:
            return f"broken: {self.violation} (walk {self.found_by}, {len(self.path)} steps)"
        return f"no invariant broken in {self.walks:,} walks ({self.states:,} distinct states); {NOT_PROVEN}"


_SWARM: list[tuple[_Expander, list[str], int, int]] = []
"""A worker's expander, invariants, seed and longest walk (set when the pool starts it)."""


def _walk(expander: _Expander, ids: list[str], seed: int, longest: int, index: int) -> Walk:
    """Walk ``index``: from the initial state, an action drawn by the walk's weights over the action
    kinds, then one of its placement outcomes, until the walk's depth limit or nothing is enabled."""
    from statechan.checker import _outcomes
    from statechan.invariants.catalogue import check, check_step, step_ids

    rng = random.Random(seed * 1_000_003 + index)
    limit = rng.randint(max(1, longest // 4), longest)
    weights: dict[str, float] = {}
    setup = expander.setup
    state, spent = expander.root, Counter[str]()
    before = Observation(state, setup)
    keys = array("Q", [key64(expander.key_of(state, spent))])
    walk = Walk(index, 0, keys)
    broken = check(before, ids)
    steps = step_ids(ids)
    while not broken and walk.steps < limit:
        taken, _, _ = expander._order(state, spent, expander.left(spent), False, count=False)
        while taken:
            for action, _ in taken:
                if action.kind not in weights:
                    weights[action.kind] = rng.expovariate(1.0) + 0.05
            chosen = rng.choices(range(len(taken)), [weights[a.kind] for a, _ in taken])[0]
            action, kind = taken[chosen]
            outcomes = [o for o in _outcomes(state, action, setup) if o is not None]
            if outcomes:
                break
            del taken[chosen]  # refused: another action
        else:
            break
        outcome = rng.choice(outcomes)
        child = outcome.state
        after = Observation(child, setup, outcome.answers)
        broken = check_step(before, after, steps) + check(after, ids)
        if kind is not None:
            spent = spent.copy()
            spent[kind] += 1
        walk.path.append(action)
        walk.picks.extend(outcome.picks)
        walk.steps += 1
        keys.append(key64(expander.key_of(child, spent)))
        state = child
        before = Observation(child, setup) if outcome.answers else after
    if broken:
        walk.violation = "; ".join(str(v) for v in broken[:3])
    else:
        walk.path, walk.picks = [], []
    return walk


def _start(*args: Any) -> None:
    from statechan.checker import _expander

    *expander_args, ids, seed, longest = args
    _SWARM[:] = [(_expander(*expander_args), ids, seed, longest)]


_TASK_EXPANDERS: dict[str, _Expander] = {}
"""A Spark Python worker's expanders, by the arguments that made them (workers are reused)."""


def _walks_in_task(args: tuple[Any, ...], ids: list[str], seed: int, longest: int, indices: Any) -> Any:
    """A Spark task's walks (its share of the indices, in order), on the executor's expander."""
    from statechan.checker import _expander
    from statechan.checker.sparksearch import stable_fingerprints

    name = repr(args)
    expander = _TASK_EXPANDERS.get(name)
    if expander is None:
        # the states' keys, counted together here, must be alike in every executor
        expander = _TASK_EXPANDERS[name] = stable_fingerprints(_expander(*args))
    for index in indices:
        yield _walk(expander, ids, seed, longest, index)


def _walk_in_worker(index: int) -> Walk:
    expander, ids, seed, longest = _SWARM[0]
    return _walk(expander, ids, seed, longest, index)


def swarm(
    bounds: Bounds,
    store: StoreKind = StoreKind.system_topic,
    variant: str | Variant = "current",
    walks: int = 100,
    seed: int = 0,
    longest: int = 120,
    workers: int = 1,
    invariants: list[str] | None = None,
    symmetry: bool = True,
    progress: Callable[[int, int, float], None] | None = None,
    spark: Any = None,
) -> SwarmResult:
    """Run ``walks`` seeded walks within ``bounds`` (each of at most ``longest`` steps, its limit
    drawn between a quarter of that and all of it), on ``workers`` processes, or on ``spark``'s
    executors (a session: the walks are split into tasks, their outcomes come back in order); the
    same walks and result for a seed wherever they run."""
    from statechan.checker import _expander
    from statechan.invariants.catalogue import simulation_ids

    ids = list(invariants) if invariants is not None else simulation_ids()
    result = SwarmResult(bounds, store, variant)
    started = time.perf_counter()
    seen = FingerprintTable()
    args = (bounds, store, variant, symmetry, ids, False, False, False)
    outcomes: list[Walk] = []
    if spark is not None:
        from functools import partial

        from statechan.checker.sparksearch import ship_code

        ship_code(spark)
        sc = spark.sparkContext
        tasks = max(1, min(walks, 4 * sc.defaultParallelism))
        made = sc.parallelize(range(walks), tasks).mapPartitions(partial(_walks_in_task, args, ids, seed, longest))
        for walk in made.toLocalIterator():
            outcomes.append(_tally(result, seen, walk, progress, started))
    elif workers > 1:
        context = multiprocessing.get_context("fork")
        with context.Pool(workers, initializer=_start, initargs=(*args, ids, seed, longest)) as pool:
            for walk in pool.imap(_walk_in_worker, range(walks), chunksize=4):
                outcomes.append(_tally(result, seen, walk, progress, started))
    else:
        expander = _expander(*args)
        for index in range(walks):
            walk = _walk(expander, ids, seed, longest, index)
            outcomes.append(_tally(result, seen, walk, progress, started))
    found = [w for w in outcomes if w.violation is not None]
    result.violating_walks = len(found)
    if found:
        first = min(found, key=lambda w: (len(w.path), w.index))
        result.violation, result.path, result.picks, result.found_by = (
            first.violation,
            first.path,
            first.picks,
            first.index,
        )
    result.states = len(seen)
    result.seconds = time.perf_counter() - started
    return result


def _tally(
    result: SwarmResult,
    seen: FingerprintTable,
    walk: Walk,
    progress: Callable[[int, int, float], None] | None,
    started: float,
) -> Walk:
    result.walks += 1
    result.steps += walk.steps
    for key in walk.keys:
        seen.add(key, 0)
    walk.keys = array("Q")
    if progress is not None and result.walks % 100 == 0:
        progress(result.walks, len(seen), time.perf_counter() - started)
    return walk
